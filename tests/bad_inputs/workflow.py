"""Bad inputs: workflow. See tests/bad_inputs/__init__.py for the case format.

Compiled actions (indices at the default safety level, Local sizes), token-id lists at every Python
entry point (runner, generation loop, sampler) and the ``%%caten`` magic's options. The exported
CLI's exit codes and the C API's stop reasons run as subprocesses in tests/workflow/test_export_stop.py.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from bad_inputs import Case
from caten_lab.errors import CatenError, RuntimeCheckError
from caten_lab.workflow import Array, Local, action, f32, f64, i32, i64, u8
from caten_lab.workflow.host import host_action

MODEL = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


# ---- compiled actions -------------------------------------------------------------------------


@action
def _pick(a: Array[i32, ("n",)], i: i64) -> i32:
    return a[i]


@action
def _put(a: Array[f32, ("m", "n")], i: i32, j: i32) -> None:
    a[i, j] = 1.0


@action
def _local_index(k: i32) -> i32:
    buf = Local(i32, 8)
    return buf[k]


@action
def _loop_past_end(a: Array[f32, ("n",)]) -> f32:
    s = f32(0)
    for i in range(len(a) + 1):
        s += a[i]
    return s


def action_read_out_of_bounds() -> None:
    _pick.compile()(np.arange(4, dtype=np.int32), 10**9)  # was a segfault at the default level


def action_read_negative_index() -> None:
    _pick.compile()(np.arange(4, dtype=np.int32), -1)


def action_store_out_of_bounds() -> None:
    _put.compile()(np.zeros((2, 3), np.float32), 0, 3)


def action_local_out_of_bounds() -> None:
    _local_index.compile()(8)


def action_loop_past_the_end() -> None:
    _loop_past_end.compile()(np.ones(3, np.float32))


def action_absurd_local() -> None:
    @action
    def huge(n: i32) -> i32:
        buf = Local(i32, 1 << 40)  # was an abort in dlopen: "cannot allocate memory for thread-local data"
        return buf[n]


def action_absurd_local_2d() -> None:
    @action
    def wide(n: i32) -> i32:
        buf = Local(f32, (1 << 15, 1 << 14))
        return i32(buf[n, n])


@action
def _floor_div(a: i64, b: i64) -> i64:
    return a // b


@action
def _float_mod(a: f64, b: f64) -> f64:
    return a % b


@action
def _true_div(a: Array[i32, ("n",)], k: i32) -> f64:
    return a[k] / a[0]


@host_action
def _host_cb(x: i32) -> i32:
    return x  # a placeholder: the export glue defines host__host_cb


@action
def _calls_host(x: i32) -> i32:
    return _host_cb(x) + 1


def action_floor_div_by_zero() -> None:
    _floor_div.compile()(7, 0)


def action_float_mod_by_zero() -> None:
    _float_mod.compile()(7.5, 0.0)


def action_int_true_div_by_zero() -> None:
    _true_div.compile()(np.array([0, 3], np.int32), 1)


def action_compiled_host_call() -> None:
    _calls_host.compile()  # was: compiled with the placeholder body, a silently wrong answer


# ---- token ids --------------------------------------------------------------------------------


@functools.cache
def _runner():  # noqa: ANN202 - a GPT2Runner; the checks run before any compile
    from caten_lab.models.gpt2 import GPT2Runner

    return GPT2Runner.from_pretrained(MODEL, n_ctx=32, backend="numpy")


def generate_float_ids() -> None:
    _runner().generate([1.9, 2.2], 3)  # was: the prompt [1, 2]


@functools.cache
def _tokenizer():  # noqa: ANN202 - the bundled model's GPT2Tokenizer
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")


def decode_float_ids() -> None:
    _tokenizer().decode([1.9, 2.2])  # was: the text of tokens [1, 2]


def decode_id_past_vocab() -> None:
    _tokenizer().decode([3, 4096])


def nn_generate_float_ids() -> None:
    from caten_lab.nn.gpt2 import GPT2, GPT2Config

    GPT2(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2)).generate([1.5, 2.0], 1)


def generate_integral_float_id() -> None:
    _runner().generate([5, 6.0], 3)


def generate_bool_id() -> None:
    _runner().generate([5, True], 3)


def generate_negative_id() -> None:
    _runner().generate([5, -1], 3)


def generate_id_past_vocab() -> None:
    _runner().generate([5, _runner().config.vocab_size], 3)


def generate_float_array() -> None:
    _runner().generate(np.array([1.0, 2.0]), 3)


def generate_string_prompt() -> None:
    _runner().generate("The king said", 3)  # type: ignore[arg-type]


def generate_float_stop_token() -> None:
    _runner().generate([5, 6], 3, stop_tokens=[0.5])


def generate_float_max_tokens() -> None:
    _runner().generate([5, 6], 2.5)  # type: ignore[arg-type]


def forward_float_id() -> None:
    _runner().forward([3.5], 0)


def interpreted_loop_float_id() -> None:
    from caten_lab.models.sampling import SamplingOptions
    from caten_lab.workflow.generation import generate_interpreted

    generate_interpreted(_runner(), [1, 2.2], 3, SamplingOptions())


def sampler_negative_previous() -> None:
    from caten_lab.models.sampling import SamplingOptions, sample

    sample(np.zeros(10), [3, -1], SamplingOptions(repetition_penalty=1.2), 0)  # was: penalized id 9


def sampler_float_previous() -> None:
    from caten_lab.models.sampling import SamplingOptions, sample

    sample(np.zeros(10), [2.7], SamplingOptions(repetition_penalty=1.2), 0)


# ---- %%caten options --------------------------------------------------------------------------

_CELL = """
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.from_numpy(np.ones((2, 3), np.float32), name="x")
x * 2
"""


@functools.cache
def _shell():  # noqa: ANN202 - an IPython InteractiveShell with the extension loaded
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "caten_lab")
    return shell


def _magic(line: str) -> None:
    """Run ``%%caten line``; its UsageError (exactly that type: IPython prints it as one line, without
    a traceback) is re-raised as a CatenError carrying the message, as the catalogue expects."""
    from IPython.core.error import UsageError

    try:
        _shell().run_cell_magic("caten", line, _CELL)
    except UsageError as exc:
        if type(exc) is not UsageError or "\n" in str(exc):
            raise
        raise CatenError(f"UsageError: {exc}") from exc


def magic_unknown_symbol() -> None:
    _magic("--symbols zz=3 --static")


def magic_negative_symbol() -> None:
    _magic("--symbols n=-1")


def magic_duplicate_symbol() -> None:
    _magic("--symbols n=1,n=2")


def magic_unbalanced_double_quote() -> None:
    _magic('--out "y')


def magic_unbalanced_single_quote() -> None:
    _magic("--panes 'graph")


# ---- export ---------------------------------------------------------------------------------


def export_not_a_workflow() -> None:
    from caten_lab.workflow.export import export

    export(42, "/nonexistent/export")  # refused before anything is written


def export_name_not_an_identifier() -> None:
    from caten_lab.workflow.export import generation_workflow

    generation_workflow(MODEL, name="my-gpt")


def export_unknown_weight_format() -> None:
    from caten_lab.workflow.export import generation_workflow

    generation_workflow(MODEL, weight_format="int4")


def export_size_with_floor_division() -> None:
    from caten_lab.air.symbolic import Sym, floordiv
    from caten_lab.workflow.model_tables import size_code

    size_code(floordiv(Sym("seq"), 2) * 8, {"seq": 0}, "buffer 'half'")


def export_action_signature_changed() -> None:
    from caten_lab.workflow.model_tables import check_c_call

    @action
    def chunk_end(n: i64, buf: Array[u8, ("n",)], last: i32) -> i64:  # the fixed C passes (buf, n, last)
        return n

    check_c_call(chunk_end, "caten_action_chunk_end")


def export_tokenizer_tables_differ() -> None:
    from caten_lab.workflow.model_tables import check_tokenizer_tables
    from caten_lab.workflow.tokenizers.static_data import pack_static

    check_tokenizer_tables(pack_static({"byte_ids": np.zeros(256, np.int64), "n_vocab": 4}))


CASES: list[Case] = [
    ("action: read out of bounds (default safety)", action_read_out_of_bounds, RuntimeCheckError,
     ("index 1000000000 out of bounds", "size 4", "return a[i]")),
    ("action: negative index (default safety)", action_read_negative_index, RuntimeCheckError,
     ("index -1 out of bounds", "size 4")),
    ("action: store out of bounds", action_store_out_of_bounds, RuntimeCheckError,
     ("index 3 out of bounds", "size 3", "a[i, j] = 1.0")),
    ("action: Local index out of bounds", action_local_out_of_bounds, RuntimeCheckError,
     ("index 8 out of bounds", "size 8")),
    ("action: range(len(a) + 1) loop", action_loop_past_the_end, RuntimeCheckError,
     ("index 3 out of bounds", "s += a[i]")),
    ("action: absurd Local size", action_absurd_local, CatenError,
     ("Local(i32, 1099511627776)", "more than the limit", "buf = Local(i32, 1 << 40)")),
    ("action: absurd 2-d Local size", action_absurd_local_2d, CatenError,
     ("2147483648 bytes", "more than the limit", "Array parameter")),
    ("action: // by zero (compiled)", action_floor_div_by_zero, RuntimeCheckError,
     ("division by zero", "return a // b")),
    ("action: float % by zero (compiled)", action_float_mod_by_zero, RuntimeCheckError,
     ("division by zero", "return a % b")),
    ("action: int / by zero (compiled)", action_int_true_div_by_zero, RuntimeCheckError,
     ("division by zero", "return a[k] / a[0]")),
    ("action: compiled call of a host action", action_compiled_host_call, CatenError,
     ("calls host action(s) _host_cb", "only an exported library links", "export the workflow")),
    ("tokens: float ids", generate_float_ids, CatenError, ("prompt: item 0 is 1.9 (float)", "not an integer")),
    ("tokens: decode float ids", decode_float_ids, CatenError, ("decode: item 0 is 1.9 (float)",)),
    ("tokens: decode id past the vocabulary", decode_id_past_vocab, CatenError,
     ("decode: item 1 = 4096", "outside the vocabulary 0..4095")),
    ("tokens: nn GPT2.generate float ids", nn_generate_float_ids, CatenError, ("prompt: item 0 is 1.5 (float)",)),
    ("tokens: integral float id", generate_integral_float_id, CatenError, ("item 1 is 6.0 (float)",)),
    ("tokens: bool id", generate_bool_id, CatenError, ("item 1 is True (bool)",)),
    ("tokens: negative id", generate_negative_id, CatenError, ("item 1 = -1", "outside the vocabulary 0..")),
    ("tokens: id past the vocabulary", generate_id_past_vocab, CatenError, ("item 1 = 4096", "0..4095")),
    ("tokens: float array", generate_float_array, CatenError, ("array of float64", "must be integers")),
    ("tokens: a string prompt", generate_string_prompt, CatenError, ("sequence of integer token ids", "str")),
    ("tokens: float stop token", generate_float_stop_token, CatenError, ("stop_tokens: item 0 is 0.5",)),
    ("tokens: float max_new_tokens", generate_float_max_tokens, CatenError, ("max_new_tokens", "2.5")),
    ("tokens: forward with a float id", forward_float_id, CatenError, ("forward: item 0 is 3.5",)),
    ("tokens: interpreted loop float id", interpreted_loop_float_id, CatenError, ("prompt: item 1 is 2.2",)),
    ("tokens: sampler negative history", sampler_negative_previous, CatenError,
     ("previous tokens: item 1 = -1", "0..9")),
    ("tokens: sampler float history", sampler_float_previous, CatenError, ("previous tokens: item 0 is 2.7",)),
    ("magic: unknown --symbols name", magic_unknown_symbol, CatenError,
     ("UsageError: --symbols: unknown symbol(s) zz", "the program's symbols")),
    ("magic: negative --symbols value", magic_negative_symbol, CatenError, ("n = -1", "non-negative")),
    ("magic: duplicate --symbols name", magic_duplicate_symbol, CatenError, ("n is given twice",)),
    ("magic: unbalanced double quote", magic_unbalanced_double_quote, CatenError,
     ("UsageError: %%caten: cannot split the options", "No closing quotation")),
    ("magic: unbalanced single quote", magic_unbalanced_single_quote, CatenError, ("No closing quotation",)),
    ("export: not a workflow", export_not_a_workflow, CatenError, ("export() takes a workflow, got an int",)),
    ("export: name not a C identifier", export_name_not_an_identifier, CatenError,
     ("workflow name 'my-gpt' must be a C identifier",)),
    ("export: unknown weight format", export_unknown_weight_format, CatenError,
     ("weight_format 'int4' is not one of fp32, fp16, int8",)),
    ("export: buffer size with floor division", export_size_with_floor_division, CatenError,
     ("buffer 'half': size", "uses '//' of symbols", "polynomials")),
    ("export: action signature changed", export_action_signature_changed, CatenError,
     ("action 'chunk_end' is now caten_action_chunk_end(n:i64 buf:u8[1] last:i32 -> i64)",
      "calls caten_action_chunk_end(buf:u8[1] n:i64 last:i32 -> i64)")),
    ("export: tokenizer tables differ", export_tokenizer_tables_differ, CatenError,
     ("tokenizer tables [('byte_ids', 'int64'), ('n_vocab', 'scalar')] differ",)),
]
