"""``export(workflow, dir)``: one shared library + a C header + a command-line program, no Python.

A workflow joins compiled pieces: the GPT-2 program (caten_lab.compiler: one C function per kernel
and the ``caten_run`` entry), the tokenizer actions and the generation-loop action with the
sampler it calls (rendered to C by the action compiler; the loop's calls to the model and to the
per-token callback are host actions, workflow/host.py) and a small hand-written C runtime
(export_c.py) that reads the safetensors weights and owns the model buffers. Each piece is its own
translation unit compiled with the very flags the Python runtime uses, so the library computes the
same logits and draws the same tokens as the Python API. Tokenizer tables are packed into one binary blob and linked with the
assembler's ``.incbin`` (no C array literals). Only the API functions are exported from the .so.

    wf = generation_workflow("assets/tiny_gpt2")
    out = export(wf, "build/gpt2")        # build/gpt2/{libgpt2.so, gpt2.h, gpt2, main.c, ...}
    subprocess.run([out.cli, "--weights", "assets/tiny_gpt2", "--prompt", "Hello"])
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.air.symbolic import render
from caten_lab.config import config
from caten_lab.errors import CatenError, CompileError
from caten_lab.workflow import export_c
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.types import ArrayType

KIND_CODES = {"input": 0, "tokens": 1, "state": 2, "intermediate": 3, "output": 4}
MODEL_SYMBOLS = ("seq", "pos")


class ExportError(CatenError):
    """A workflow that cannot be exported (unsupported model layout, C compiler failure, ...)."""


@dataclass
class GenerationWorkflow:
    """Tokenize -> GPT-2 -> sample -> repeat, for one model directory (HF layout)."""

    model_dir: Path
    runner: Any  # models.gpt2.GPT2Runner
    tokenizer: Any  # workflow.tokenizers.GPT2Tokenizer
    name: str = "gpt2"
    kind: str = "generate"


@dataclass
class Exported:
    """Paths of an exported workflow and how long each step took."""

    directory: Path
    library: Path
    header: Path
    cli: Path
    sources: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def fnv64(data: bytes) -> int:
    """FNV-1a 64 of a file's bytes (the C library checks vocab/merges files with the same hash)."""
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def check_weight_format(weight_format: str) -> str:
    """``weight_format`` if the exported library can store weights that way, else a clear error."""
    from caten_lab.models.quantize import FORMATS

    if weight_format not in FORMATS:
        raise ExportError(
            f"weight_format {weight_format!r} is not one of {', '.join(FORMATS)}",
            hint="fp32 keeps the file's values; fp16 halves and int8 (per-row scales) quarters the weight memory",
        )
    return weight_format


def generation_workflow(
    model_dir: str | os.PathLike,
    *,
    name: str = "gpt2",
    n_ctx: int | None = None,
    weight_format: str = "fp32",
) -> GenerationWorkflow:
    """The GPT-2 text generation workflow of a local Hugging Face directory.

    ``weight_format`` (fp32 / fp16 / int8) is how the matmul weights are stored, exactly as
    ``GPT2Runner(weight_format=...)`` stores them: the exported library still reads the HF fp32 (or
    F16/BF16) safetensors and converts at load time, so it computes what that runner computes.
    """
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    check_weight_format(weight_format)
    d = Path(model_dir)
    for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        if not (d / f).is_file():
            raise ExportError(
                f"{d / f}: not found",
                hint="export needs a GPT-2 directory with config.json, "
                "model.safetensors, vocab.json and merges.txt",
            )
    if not name.isidentifier():
        raise ExportError(f"workflow name {name!r} must be a C identifier")
    runner = GPT2Runner.from_pretrained(  # export needs the C program
        d, n_ctx=n_ctx, backend="c", weight_format=weight_format
    )
    tok = GPT2Tokenizer.from_files(d / "vocab.json", d / "merges.txt")
    return GenerationWorkflow(d, runner, tok, name)


# ------------------------------------------------------------------------------------ model tables


# how the compiled program stores a weight (models/quantize.py format_graph): suffix -> C format code
_STORED = {".fp16": ("fp16", np.float16), ".int8": ("int8", np.int8), ".scale": ("scale", np.float32)}
FORMAT_CODES = {"fp32": 0, "fp16": 1, "int8": 2}  # CT_FMT_* in export_c.COMMON_C


@dataclass
class _Weight:
    """One weight input of the program: which file tensor fills it, and how it is stored."""

    buf: int
    name: str  # the tensor's name in the safetensors file (HF GPT2LMHeadModel naming)
    fmt: str  # fp32 / fp16 / int8, or scale (the per-row scales of the int8 weight ``name``)
    file_shape: tuple[int, ...]
    transpose: bool


def _weight_entry(
    b: int, name: str, info: Any, hf: dict[str, tuple[int, ...]], weight_format: str
) -> _Weight:
    """Check a program input against the HF file layout and the workflow's weight format.

    The C library converts at load time into exactly these buffers, so any disagreement between
    the traced program and the file layout is refused here rather than computed wrong there.
    """
    from caten_lab.models.gpt2_weights import _TRANSPOSED

    base, (fmt, dtype) = name, ("fp32", np.float32)
    for suffix, stored in _STORED.items():
        if name.endswith(suffix):
            base, (fmt, dtype) = name[: -len(suffix)], stored
    if base not in hf:
        raise ExportError(
            f"model input {name!r} is not a GPT-2 weight",
            hint="export reads HF GPT-2 tensors (stored as fp32, fp16 or int8 with per-row scales)",
        )
    if fmt in ("fp16", "int8") and fmt != weight_format:
        raise ExportError(
            f"weight {name!r} is stored as {fmt}, but the workflow's weight_format is {weight_format}"
        )
    file_shape = hf[base]
    transpose = base.endswith(_TRANSPOSED)
    want = tuple(reversed(file_shape)) if transpose else file_shape
    if fmt == "scale":
        want = (want[0], 1)
    shape = tuple(info.shape)
    if shape != want or np.dtype(info.dtype.np) != np.dtype(dtype):
        raise ExportError(
            f"weight {name!r}: program buffer {shape} {info.dtype} does not match "
            f"the file layout {file_shape} stored as {fmt}"
        )
    return _Weight(b, base, fmt, file_shape, transpose)


def _weight_rows(weights: list[_Weight], names: list[str]) -> list[str]:
    """The ``ct_weights`` C rows: one per file tensor, an int8 one pointing at its scale buffer."""
    scales = {w.name: w.buf for w in weights if w.fmt == "scale"}
    rows = []
    for w in weights:
        if w.fmt == "scale":
            continue
        scale = scales.pop(w.name, -1) if w.fmt == "int8" else -1
        if w.fmt == "int8" and scale < 0:
            raise ExportError(f"int8 weight {names[w.buf]!r} has no scale buffer in the program")
        dims = ", ".join(str(x) for x in w.file_shape)
        rows.append(
            f'  {{{w.buf}, "{w.name}", {len(w.file_shape)}, {{{dims}}}, {int(w.transpose)}, '
            f"{FORMAT_CODES[w.fmt]}, {scale}}},"
        )
    if scales:
        raise ExportError(f"scale buffers without an int8 weight: {sorted(scales)}")
    return rows


def model_tables_c(runner: Any, n_ctx: int) -> str:
    """C tables describing the compiled program's buffers, symbols and weights (see export_c)."""
    from caten_lab.models.gpt2_weights import expected_shapes
    from caten_lab.passes.indexing import numel

    prog = runner.program
    if getattr(prog, "schedule", None) is None or prog.c_source is None:
        raise ExportError("the model was not compiled with the C backend", hint="export needs backend='c'")
    sched = prog.schedule
    syms = list(sched.symbols)
    unknown = [s for s in syms if s not in MODEL_SYMBOLS]
    if unknown:
        raise ExportError(f"the model program has symbols {unknown}; export supports {MODEL_SYMBOLS}")
    index = {s: i for i, s in enumerate(syms)}

    def c_dim(d: Any) -> str:
        text = render(d, lambda s: f"sym[{index[s]}]")
        if not re.fullmatch(r"[0-9sym\[\]+*() -]*", text):
            raise ExportError(f"cannot express buffer size {text!r} in C")
        return f"(int64_t)({text})"

    plan = prog.memory_plan
    slot_of = dict(plan.slot_of) if plan is not None else {}
    n_slots = (max(slot_of.values()) + 1) if slot_of else 0
    names = list(sched.buffers)
    kinds, slots, items, elems = [], [], [], []
    hf = expected_shapes(runner.config)
    weights: list[_Weight] = []
    for b, name in enumerate(names):
        info = sched.buffers[name]
        kind = "tokens" if name == runner.tokens_name else info.kind
        if kind not in KIND_CODES:
            raise ExportError(f"buffer {name!r} has kind {info.kind!r}, which export does not support")
        slot = -1
        if kind == "intermediate":
            slot = slot_of.get(name, -1)
            if slot < 0:
                slot = n_slots
                slot_of[name] = slot
                n_slots += 1
        if kind == "input":
            weights.append(_weight_entry(b, name, info, hf, runner.weight_format))
        kinds.append(str(KIND_CODES[kind]))
        slots.append(str(slot))
        items.append(str(np.dtype(info.dtype.np).itemsize))
        elems.append(f"    case {b}: return {c_dim(numel(tuple(info.shape)))};")
    weight_rows = _weight_rows(weights, names)
    slot_cases = []
    for s in range(n_slots):
        members = [b for b, name in enumerate(names) if slot_of.get(name) == s]
        body = " ".join(f"v = ct_elems({b}, sym) * {items[b]}; if (v > m) m = v;" for b in members)
        slot_cases.append(f"    case {s}: {body} break;")
    out_buf = names.index(sched.outputs[0])
    set_syms = " ".join(f"sym[{i}] = {'seq' if s == 'seq' else 'pos'};" for i, s in enumerate(syms))
    fixed = " ".join(f"sym[{i}] = {n_ctx};" for i in range(len(syms)))
    return f"""
#define CT_NBUF {len(names)}
#define CT_NSYM {len(syms)}
#define CT_NSLOT {n_slots}
#define CT_N_CTX {n_ctx}
#define CT_VOCAB {runner.config.vocab_size}
#define CT_EOS {runner.config.eos_token_id}
#define CT_TOKENS_BUF {names.index(runner.tokens_name)}
#define CT_OUT_BUF {out_buf}
#define CT_NWEIGHTS {len(weight_rows)}
#define CT_WEIGHT_FORMAT "{runner.weight_format}"
void caten_run(void **b, const int64_t *sym, int64_t *err);
static const int ct_kind[CT_NBUF] = {{{", ".join(kinds)}}};
static const int ct_slot[CT_NBUF] = {{{", ".join(slots)}}};
static const int64_t ct_itemsize[CT_NBUF] = {{{", ".join(items)}}};
static int64_t ct_elems(int b, const int64_t *sym) {{
  (void)sym;
  switch (b) {{
{chr(10).join(elems)}
  }}
  return 0;
}}
static int64_t ct_slot_bytes(int s, const int64_t *sym) {{
  int64_t m = 0, v;
  switch (s) {{
{chr(10).join(slot_cases)}
  }}
  (void)v;
  return m;
}}
static void ct_set_symbols(int64_t *sym, int64_t seq, int64_t pos) {{ (void)sym; (void)seq; (void)pos; {set_syms} }}
/* upper bounds of every symbol: sizes of the buffers allocated once */
static void ct_fixed_symbols(int64_t *sym) {{ (void)sym; {fixed} }}
/* fmt: CT_FMT_FP32 / FP16 / INT8 (export_c.py); scale: the buffer of an int8 weight's per-row scales */
typedef struct {{ int buf; const char *name; int ndim; int64_t shape[4]; int transpose; int fmt; int scale; }} ct_weight;
static const ct_weight ct_weights[CT_NWEIGHTS] = {{
{chr(10).join(weight_rows)}
}};
"""


# ------------------------------------------------------------------------------------ action calls


def action_wrapper(
    act: Any, wrapper: str, params: str, bindings: dict[str, Any], ret: str = "int32_t"
) -> str:
    """A C function ``wrapper(params)`` calling the action's exported entry with arguments by name.

    ``bindings[name]`` is a C expression for a scalar parameter, or ``(pointer, [dims])`` for an array.
    """
    rendered = render_c(act)
    args: list[str] = []
    for name, t in act.ir.params:
        if name not in bindings:
            raise ExportError(f"no binding for parameter {name!r} of action {act.ir.name}")
        b = bindings[name]
        if isinstance(t, ArrayType):
            ptr, dims = b
            args.append(f"({t.dtype.c_name} *)({ptr})")
            args.extend(f"(int64_t)({d})" for d in dims)
            if len(dims) != len(t.dims):
                raise ExportError(f"{act.ir.name}: parameter {name!r} needs {len(t.dims)} dims")
        else:
            args.append(f"({t.c_name})({b})")
    args.append("err")
    return (
        f"{rendered.cdef}\nstatic {ret} {wrapper}({params}) {{\n"
        f"  return {rendered.entry}({', '.join(args)});\n}}\n"
    )


# the table parameters the C builder of workflow/export_c.py (TOKENIZER_FILES_C) fills from a vocabulary
VOCAB_TABLES = {
    "byte_ids",
    "vslots",
    "vmask",
    "voffsets",
    "vdata",
    "whole_lookup",
    "pleft",
    "pright",
    "prank",
    "presult",
    "pmask",
    "offsets",
    "data",
    "n_vocab",
}
UNICODE_TABLES = {"stage1", "stage2"}  # character classes: the same for every vocabulary, always linked


def tables_c(blob: Any, symbol: str) -> tuple[str, str, dict[str, Any]]:
    """The ``ct_tables`` struct (vocabulary tables, linked-in or built at init), the function filling it
    from the linked blob, and the action bindings (``T->name``; Unicode tables straight from the blob)."""
    from caten_lab.workflow.tokenizers.static_data import C_TYPES

    names = set(blob.arrays) | set(blob.scalars)
    if names != VOCAB_TABLES | UNICODE_TABLES:
        raise ExportError(
            f"tokenizer tables {sorted(names)} differ from those the C runtime builds",
            hint="update VOCAB_TABLES and export_c.TOKENIZER_FILES_C together",
        )
    fields, fill = [], []
    bindings: dict[str, Any] = {}
    for name, (_, dtype, _) in blob.arrays.items():
        if name in UNICODE_TABLES:
            bindings[name] = (f"{symbol}_{name}", [f"{symbol}_{name}_len"])
            continue
        fields.append(f"  const {C_TYPES[dtype]} *{name}; int64_t {name}_len;")
        fill.append(f"  T->{name} = {symbol}_{name}; T->{name}_len = {symbol}_{name}_len;")
        bindings[name] = (f"T->{name}", [f"T->{name}_len"])
    for name in blob.scalars:
        fields.append(f"  int64_t {name};")
        fill.append(f"  T->{name} = {symbol}_{name};")
        bindings[name] = f"T->{name}"
    struct = "typedef struct {\n" + "\n".join(fields) + "\n  void *owned[8];\n} ct_tables;\n"
    linked = (
        "static void ct_tables_linked(ct_tables *T) {\n  memset(T, 0, sizeof *T);\n"
        + "\n".join(fill)
        + "\n}\n"
    )
    return struct, linked, bindings


# ------------------------------------------------------------------------------------ building


def _toolchain_flags() -> tuple[list[str], list[str]]:
    from caten_lab.runtime.toolchain import toolchain

    cfg = config()
    tc = toolchain(cfg.cc, cfg.cache_dir)
    flags = [f for f in tc.flags if f != "-shared"]
    return list(tc.cc), flags


def _run_cc(cmd: list[str], what: str) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise CompileError(
            f"building {what} failed:\n$ {' '.join(cmd)}\n{(r.stderr or r.stdout)[:4000]}",
            hint="this is a caten_lab export bug unless the C compiler is broken",
        )


def build(out: Path, name: str, units: dict[str, str], main_c: str, header: str) -> Exported:
    """Write the sources, compile every unit with the runtime's flags, link lib<name>.so and the CLI."""
    out.mkdir(parents=True, exist_ok=True)
    src_dir = out / "src"
    src_dir.mkdir(exist_ok=True)
    cc, flags = _toolchain_flags()
    timings: dict[str, float] = {}
    header_path = out / f"{name}.h"
    header_path.write_text(header)
    objs, sources = [], []
    for unit, text in units.items():
        c = src_dir / f"{unit}.c"
        c.write_text(text)
        sources.append(c)
        o = src_dir / f"{unit}.o"
        t0 = time.perf_counter()
        _run_cc([*cc, *flags, "-fvisibility=hidden", f"-I{out}", "-c", "-o", str(o), str(c)], f"{unit}.c")
        timings[f"cc_{unit}"] = time.perf_counter() - t0
        objs.append(str(o))
    lib = out / f"lib{name}.so"
    link = ["-fopenmp"] if "-fopenmp" in flags else []
    t0 = time.perf_counter()
    tmp = out / f".lib{name}.so.tmp"
    _run_cc([*cc, "-shared", *link, "-o", str(tmp), *objs, "-lm"], f"lib{name}.so")
    os.replace(tmp, lib)
    timings["link"] = time.perf_counter() - t0
    main_path = out / "main.c"
    main_path.write_text(main_c)
    cli = out / name
    t0 = time.perf_counter()
    _run_cc(
        [
            *cc,
            "-O2",
            f"-I{out}",
            "-o",
            str(cli),
            str(main_path),
            f"-L{out}",
            f"-l{name}",
            "-Wl,-rpath,$ORIGIN",
        ],
        "the command-line program",
    )
    timings["cc_main"] = time.perf_counter() - t0
    return Exported(out, lib, header_path, cli, [*sources, main_path], timings)


def _subst(text: str, name: str) -> str:
    return text.replace("@P@", name).replace("@U@", name.upper())


def with_weight_format(workflow: Any, weight_format: str | None) -> Any:
    """``workflow`` with its model storing weights as ``weight_format`` (None: as it is).

    The format is part of the compiled program (a dequantizing matvec reads int8 + scales), so a
    different one means a new runner for the same directory, context and tracing options.
    """
    from caten_lab.models.gpt2 import GPT2Runner

    if weight_format is None or weight_format == workflow.runner.weight_format:
        return workflow
    check_weight_format(weight_format)
    old = workflow.runner
    runner = GPT2Runner.from_pretrained(
        workflow.model_dir,
        n_ctx=old.n_ctx,
        backend="c",
        all_logits=old.all_logits,
        weight_format=weight_format,
    )
    return dataclasses.replace(workflow, runner=runner)


def export(workflow: Any, directory: str | os.PathLike, *, weight_format: str | None = None) -> Exported:
    """Write ``lib<name>.so``, ``<name>.h`` and the ``<name>`` command-line program into ``directory``.

    ``weight_format`` (fp32 / fp16 / int8) overrides the workflow's (``generation_workflow(...,
    weight_format=)``); the library converts the HF weights to it when it loads them.
    """
    if not isinstance(workflow, GenerationWorkflow) and getattr(workflow, "kind", None) != "perplexity":
        raise ExportError(
            f"export() takes a workflow, got {type(workflow).__name__}",
            hint="build one with generation_workflow(model_dir) or perplexity_workflow(...)",
        )
    workflow = with_weight_format(workflow, weight_format)
    if workflow.kind == "perplexity":
        from caten_lab.workflow.perplexity import export_perplexity

        return export_perplexity(workflow, directory)
    t0 = time.perf_counter()
    out = Path(directory).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = workflow.name
    runner = workflow.runner
    runner.compile()
    units, glue = model_units(runner, workflow.tokenizer, workflow.model_dir, out, name)
    glue += loop_glue()
    units["generate_loop"] = loop_unit()
    glue += _subst(export_c.GEN_C, name)
    units[f"{name}_workflow"] = glue
    header = header_text(name, export_c.GEN_HEADER, runner.weight_format)
    gen_s = time.perf_counter() - t0
    res = build(out, name, units, _subst(export_c.GEN_MAIN, name), header)
    res.timings["generate_c"] = gen_s
    return res


def header_text(name: str, specific: str, weight_format: str) -> str:
    """The public header; it states the weight format the library stores (chosen at export)."""
    guard = f"{name.upper()}_H"
    return _subst(
        f"/* generated by caten_lab.workflow.export: the C API of lib{name} */\n"
        f"#ifndef {guard}\n#define {guard}\n"
        + export_c.HEADER_COMMON
        + export_c.weight_format_header(weight_format)
        + specific,
        name,
    )


def model_units(runner: Any, tok: Any, model_dir: Path, out: Path, name: str) -> tuple[dict[str, str], str]:
    """Translation units shared by every GPT-2 workflow (model, tokenizer actions) and the glue's
    common part (tables, safetensors reader, context, encode/decode)."""
    from caten_lab.workflow.tokenizers._action import ACTIONS
    from caten_lab.workflow.tokenizers.static_data import incbin_c, pack_static

    prog = runner.program
    units = {"model": prog.c_source}
    encode, decode = ACTIONS["gpt2_encode"], ACTIONS["tokens_to_bytes"]
    units["tok_encode"] = render_c(encode).source
    units["tok_decode"] = render_c(decode).source
    blob = pack_static(tok.static_args())
    blob_path = out / "src" / "tokenizer_tables.bin"
    blob_path.parent.mkdir(parents=True, exist_ok=True)
    blob_path.write_bytes(blob.data)
    vocab_file = Path(model_dir) / "vocab.json"
    tables_struct, linked_fn, tb = tables_c(blob, "ct_tok")
    glue = [
        f"/* generated by caten_lab.workflow.export: the {name} workflow runtime */",
        "#define _GNU_SOURCE",
        f'#include "{name}.h"',
        model_tables_c(runner, runner.n_ctx),
        f"#define CT_VOCAB_HASH {fnv64(vocab_file.read_bytes())}ULL",
        _subst(export_c.COMMON_C, name),
        incbin_c(blob, blob_path, "ct_tok"),
        tables_struct,
        linked_fn,
        _subst(export_c.TOKENIZER_FILES_C, name),
    ]
    if tok.n_vocab != runner.config.vocab_size:
        raise ExportError(f"the tokenizer has {tok.n_vocab} tokens but the model {runner.config.vocab_size}")
    enc = {
        **tb,
        "text": ("text", ["n"]),
        "n": "n",
        "char_start": ("char_start", ["n + 1"]),
        "char_cls": ("char_cls", ["n + 1"]),
        "sym": ("sym", ["n + 1"]),
        "rank": ("rank", ["n + 1"]),
        "res": ("res", ["n + 1"]),
        "heap": ("heap", ["3 * n + 3"]),
        "out": ("out", ["n"]),
    }
    glue.append(
        action_wrapper(
            encode,
            "ct_encode_call",
            "const ct_tables *T, uint8_t *text, int64_t n, int32_t *char_start, uint8_t *char_cls, int32_t *sym, "
            "int32_t *rank, int32_t *res, int64_t *heap, int32_t *out, int64_t *err",
            enc,
        )
    )
    dec = {**tb, "ids": ("ids", ["1"]), "count": "1", "out": ("out", ["out_len"])}
    glue.append(
        action_wrapper(
            decode,
            "ct_decode_call",
            "const ct_tables *T, int32_t *ids, uint8_t *out, int64_t out_len, int64_t *err",
            dec,
        )
    )
    glue.append(_subst(export_c.CTX_C, name))
    return units, "\n".join(glue)


def loop_unit() -> str:
    """The generation-loop action's C (with the sampler it calls), host calls linked to the glue."""
    from caten_lab.workflow.generation import emit_token, generate_loop, model_forward
    from caten_lab.workflow.host import link_host_calls

    r = render_c(generate_loop)
    return link_host_calls(r.source, r.functions, [model_forward, emit_token])


def loop_glue() -> str:
    """``ct_loop_call``: the glue's typed entry into the generation-loop action."""
    from caten_lab.workflow.generation import generate_loop

    b = {
        "prompt": ("prompt", ["n_prompt"]),
        "n_prompt": "n_prompt",
        "max_new": "max_new",
        "n_ctx": "n_ctx",
        "eos": "eos",
        "stop_at_eos": "stop_at_eos",
        "logits": ("logits", ["CT_VOCAB"]),
        "history": ("history", ["hcap"]),
        "one": ("one", ["1"]),
        "temperature": "temperature",
        "top_k": "top_k",
        "top_p": "top_p",
        "repetition_penalty": "repetition_penalty",
        "seed_hi": "seed_hi",
        "seed_lo": "seed_lo",
        "x": ("x", ["CT_VOCAB"]),
        "p": ("p", ["CT_VOCAB"]),
        "order": ("order", ["CT_VOCAB"]),
        "seen": ("seen", ["CT_VOCAB"]),
        "st": ("st", ["2"]),
    }
    return action_wrapper(
        generate_loop,
        "ct_loop_call",
        "int32_t *prompt, int64_t n_prompt, int64_t max_new, int64_t n_ctx, int64_t eos, int32_t stop_at_eos, "
        "float *logits, int32_t *history, int64_t hcap, int32_t *one, double temperature, int64_t top_k, "
        "double top_p, double repetition_penalty, int64_t seed_hi, int64_t seed_lo, double *x, double *p, "
        "int32_t *order, uint8_t *seen, int64_t *st, int64_t *err",
        b,
        ret="int64_t",
    )
