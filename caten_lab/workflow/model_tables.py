"""The data an exported library's fixed C reads: the compiled model's tables, and the contracts with it.

The exported runtime (caten_lab/workflow/c/) is fixed C; what depends on the model is data, packed
into one blob (``workflow/tokenizers/static_data.pack_static``) that the library links with
``.incbin`` as ``ct_m_<name>`` (c/model_tables.c reads it):

- per buffer: its kind (``KIND_CODES``), memory-plan slot, item size, and its element count as a
  polynomial in the program's symbols (``size_code``: terms of coefficient, degree, symbol indices),
  derived from the symbolic shape itself, never from rendered C text;
- per symbol: its role (0 = seq, the call's token count; 1 = pos, its start position);
- the weights, by their source (``ct_m_source``): for a safetensors file one ``ct_weight`` record
  (``WEIGHT_FIELDS``) per file tensor and its NUL-terminated name; for a GGUF file one ``ct_bind``
  record per program input (workflow/weight_source.py: raw bytes, float values or a constant table);
- the chat template's layout (``chat_tables``: c/chat_prompt.c) and, for a GGUF tokenizer, the hash
  of its metadata the library checks (``tokenizer_check_tables``);
- scalars: counts, context, vocabulary size, end-of-text id, the token and logits buffers, and the
  FNV-1a hash of the exported vocabulary file.

The fixed C also calls compiled actions by name (``C_CALLS``: the parameters each call passes, in
order) and declares the tokenizer tables struct (``VOCAB_TABLES``); ``check_c_call`` and
``check_tokenizer_tables`` refuse an export whose actions or tables no longer match that C.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from caten_lab.air.shapes import numel
from caten_lab.air.symbolic import Expr, render
from caten_lab.errors import CatenError
from caten_lab.models.gpt2_weights import TRANSPOSED_WEIGHTS, expected_shapes
from caten_lab.workflow.tokenizers.static_data import StaticBlob, pack_static
from caten_lab.workflow.types import ArrayType

KIND_CODES = {"input": 0, "tokens": 1, "state": 2, "intermediate": 3, "output": 4}
MODEL_SYMBOLS = ("seq", "pos")  # symbol roles 0 and 1 of ct_m_sym_role
FORMAT_CODES = {"fp32": 0, "fp16": 1, "int8": 2}  # CT_FMT_* of c/weight_read.c
# a ct_weight record of c/model_tables.c: ten int64 fields
WEIGHT_FIELDS = ("buf", "name", "ndim", "shape0", "shape1", "shape2", "shape3", "transpose", "fmt", "scale")
MAX_WEIGHT_DIMS = 4

# how the compiled program stores a weight (models/quantize.py format_graph): suffix -> (format, dtype)
STORED_SUFFIXES = {".fp16": ("fp16", np.float16), ".int8": ("int8", np.int8), ".scale": ("scale", np.float32)}


class ExportError(CatenError):
    """A workflow that cannot be exported (unsupported model layout, C compiler failure, ...)."""


# ------------------------------------------------------------------------------------ contracts

# The tables of the ct_tables struct of c/tok_tables.c (name -> dtype), filled from a vocabulary.
VOCAB_TABLES = {
    "byte_ids": "int32",
    "vslots": "int32",
    "voffsets": "int32",
    "vdata": "uint8",
    "pleft": "int32",
    "pright": "int32",
    "prank": "int32",
    "presult": "int32",
    "offsets": "int32",
    "data": "uint8",
    "vmask": "scalar",
    "whole_lookup": "scalar",
    "pmask": "scalar",
    "n_vocab": "scalar",
}
UNICODE_TABLES = {"stage1": "int32", "stage2": "uint8"}  # character classes, always from the blob

# The compiled actions the fixed C calls (c/tok_gpt2.c, tok_gguf.c, generate.c, perplexity.c, train.c) and the parameters
# those calls pass, in order: "name:type", an array as "dtype[ndim]" (then one int64 per dimension).
C_CALLS = {
    "gpt2_encode": (
        "text:u8[1] n:i32 stage1:i32[1] stage2:u8[1] byte_ids:i32[1] vslots:i32[1] vmask:i64 "
        "voffsets:i32[1] vdata:u8[1] whole_lookup:i32 pleft:i32[1] pright:i32[1] prank:i32[1] "
        "presult:i32[1] pmask:i64 char_start:i32[1] char_cls:u8[1] sym:i32[1] rank:i32[1] res:i32[1] "
        "heap:i64[1] out:i32[1] -> i32"
    ),
    "tokens_to_bytes": "ids:i32[1] count:i32 offsets:i32[1] data:u8[1] n_vocab:i32 out:u8[1] -> i32",
    "gguf_bpe_encode": (
        "text:u8[1] n:i32 parse_special:i32 stage1:i32[1] stage2:u8[1] byte_ids:i32[1] vslots:i32[1] vmask:i64 "
        "voffsets:i32[1] vdata:u8[1] whole_lookup:i32 pleft:i32[1] pright:i32[1] prank:i32[1] presult:i32[1] "
        "pmask:i64 pre_kind:i32 split_digits:i32 max_digits:i32 sids:i32[1] salways:u8[1] nspecial:i32 mark:i32[1] "
        "char_start:i32[1] char_cls:u8[1] sym:i32[1] rank:i32[1] res:i32[1] heap:i64[1] out:i32[1] -> i32"
    ),
    "gguf_spm_encode": (
        "text:u8[1] n:i32 parse_special:i32 add_space_prefix:i32 vslots:i32[1] vmask:i64 voffsets:i32[1] "
        "vdata:u8[1] score_rank:i32[1] unk_id:i32 byte_ids:i32[1] ws_split:i32 uleft:i32[1] uright:i32[1] "
        "uchild:i32[1] umask:i64 unode_piece:i32[1] sids:i32[1] salways:u8[1] nspecial:i32 mark:i32[1] norm:u8[1] "
        "sym_start:i32[1] sym_len:i32[1] nxt:i32[1] prv:i32[1] heap:i64[1] ids:i32[1] frozen:u8[1] "
        "piece_out:i32[1] out:i32[1] -> i32"
    ),
    "gguf_decode": (
        "ids:i32[1] count:i32 offsets:i32[1] data:u8[1] hidden:u8[1] n_vocab:i32 special:i32 lstrip_first:i32 "
        "out:u8[1] -> i32"
    ),
    "generate_loop": (
        "prompt:i32[1] n_prompt:i64 max_new:i64 n_ctx:i64 stops:i32[1] n_stops:i64 stop_at_eos:i32 logits:f32[1] "
        "history:i32[1] one:i32[1] temperature:f64 top_k:i64 top_p:f64 repetition_penalty:f64 "
        "seed_hi:i64 seed_lo:i64 x:f64[1] p:f64[1] order:i32[1] seen:u8[1] st:i64[1] -> i64"
    ),
    "assemble_prompt": (
        "kinds:i32[1] values:i32[1] n_parts:i64 seg_ids:i32[1] seg_start:i32[1] n_vocab:i64 out:i32[1] cap:i64 -> i64"
    ),
    "chunk_end": "buf:u8[1] n:i64 last:i32 -> i64",
    "next_window": "tokens:i32[1] n_tokens:i64 start:i64 window:i64 out:i32[1] -> i64",
    "window_nll": "logits:f32[2] tokens:i32[1] n:i64 -> f64",
    "fill_batch": "data:u8[1] n_tokens:i64 token_bytes:i64 seed_hi:i64 seed_lo:i64 step:i64 out:i64[2] st:i64[1] -> i64",
}
ENTRY_PREFIX = "caten_action_"  # the exported name of a compiled action (workflow/cgen.py)


def action_signature(act: Any) -> str:
    """An action's parameters and result in the notation of ``C_CALLS``."""
    parts = []
    for name, t in act.ir.params:
        parts.append(f"{name}:{t.dtype}[{len(t.dims)}]" if isinstance(t, ArrayType) else f"{name}:{t}")
    return " ".join(parts) + f" -> {act.return_type}"


def check_c_call(act: Any, entry: str) -> None:
    """Refuse ``act`` unless the fixed C's call of it (``C_CALLS``) still matches its signature."""
    name = act.ir.name
    want = C_CALLS.get(name)
    if want is None:
        raise ExportError(f"the exported C does not call action {name!r}", hint="add it to model_tables.C_CALLS")
    got = action_signature(act)
    if entry != ENTRY_PREFIX + name or got != want:
        raise ExportError(
            f"action {name!r} is now {entry}({got}), but the exported library's C calls "
            f"{ENTRY_PREFIX + name}({want})",
            hint="update the call in caten_lab/workflow/c/ and model_tables.C_CALLS together",
        )


def check_tokenizer_tables(blob: StaticBlob) -> None:
    """Refuse tokenizer tables other than those of the ``ct_tables`` struct (c/tok_tables.c)."""
    got = {name: dtype for name, (_, dtype, _) in blob.arrays.items()}
    got.update({name: "scalar" for name in blob.scalars})
    want = {**VOCAB_TABLES, **UNICODE_TABLES}
    if got != want:
        raise ExportError(
            f"tokenizer tables {sorted(got.items())} differ from those the C runtime declares "
            f"{sorted(want.items())}",
            hint="update VOCAB_TABLES and caten_lab/workflow/c/tok_tables.c together",
        )


# ------------------------------------------------------------------------------------ model tables


@dataclass
class Weight:
    """One weight input of the program: which file tensor fills it, and how it is stored."""

    buf: int
    name: str  # the tensor's name in the safetensors file (HF GPT2LMHeadModel naming)
    fmt: str  # fp32 / fp16 / int8, or scale (the per-row scales of the int8 weight ``name``)
    file_shape: tuple[int, ...]
    transpose: bool


def weight_entry(b: int, name: str, info: Any, hf: dict[str, tuple[int, ...]], weight_format: str) -> Weight:
    """Check a program input against the HF file layout and the workflow's weight format.

    The C library converts at load time into exactly these buffers, so any disagreement between
    the traced program and the file layout is refused here rather than computed wrong there.
    """
    base, (fmt, dtype) = name, ("fp32", np.float32)
    for suffix, stored in STORED_SUFFIXES.items():
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
    transpose = base.endswith(TRANSPOSED_WEIGHTS)
    want = tuple(reversed(file_shape)) if transpose else file_shape
    if fmt == "scale":
        want = (want[0], 1)
    shape = tuple(info.shape)
    if shape != want or np.dtype(info.dtype.np) != np.dtype(dtype):
        raise ExportError(
            f"weight {name!r}: program buffer {shape} {info.dtype} does not match "
            f"the file layout {file_shape} stored as {fmt}"
        )
    if len(file_shape) > MAX_WEIGHT_DIMS:
        raise ExportError(f"weight {name!r} has {len(file_shape)} dimensions; export supports {MAX_WEIGHT_DIMS}")
    return Weight(b, base, fmt, file_shape, transpose)


def weight_records(weights: list[Weight], names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """The ``ct_weight`` records (one per file tensor, an int8 one pointing at its scale buffer) as a
    flat int64 array, and the NUL-terminated names they point into."""
    scales = {w.name: w.buf for w in weights if w.fmt == "scale"}
    rows: list[list[int]] = []
    text = bytearray()
    for w in weights:
        if w.fmt == "scale":
            continue
        scale = scales.pop(w.name, -1) if w.fmt == "int8" else -1
        if w.fmt == "int8" and scale < 0:
            raise ExportError(f"int8 weight {names[w.buf]!r} has no scale buffer in the program")
        shape = [*w.file_shape] + [0] * (MAX_WEIGHT_DIMS - len(w.file_shape))
        rows.append([w.buf, len(text), len(w.file_shape), *shape, int(w.transpose), FORMAT_CODES[w.fmt], scale])
        text += w.name.encode("utf-8") + b"\0"
    if scales:
        raise ExportError(f"scale buffers without an int8 weight: {sorted(scales)}")
    records = np.asarray(rows, dtype=np.int64).reshape(-1, len(WEIGHT_FIELDS))
    return records.reshape(-1), np.frombuffer(bytes(text) or b"\0", dtype=np.uint8)


def no_weight_tables() -> dict[str, object]:
    """The safetensors weight tables of a library whose weights come from elsewhere (none)."""
    return {"weights": np.zeros(len(WEIGHT_FIELDS), dtype=np.int64), "names": np.zeros(1, dtype=np.uint8), "nweights": 0}


def no_bind_tables() -> dict[str, object]:
    """The GGUF bind tables (workflow/weight_source.py) of a library that reads safetensors (none)."""
    return {"source": 0, "binds": np.zeros(12, dtype=np.int64), "nbinds": 0, "bind_names": np.zeros(1, dtype=np.uint8),
            "consts": np.zeros(1, dtype=np.uint8), "arch": np.zeros(1, dtype=np.uint8)}


def size_code(d: Any, index: dict[str, int], what: str) -> list[int]:
    """The terms (coefficient, degree, symbol index x degree) of the polynomial ``d`` over the symbols
    ``index`` (name -> position in ``sym``), as c/model_tables.c ``ct_elems`` evaluates them."""
    if isinstance(d, int | np.integer):
        return [int(d), 0]
    if not isinstance(d, Expr):
        raise ExportError(f"{what}: size {d!r} is not an integer expression")
    code: list[int] = []
    for monomial, coef in d.terms:
        opaque = [a for a in monomial if not isinstance(a, str)]
        if opaque:
            raise ExportError(
                f"{what}: size {render(d)} uses {opaque[0][0]!r} of symbols; the exported library "
                "sizes buffers by polynomials in the program's symbols",
                hint="give the buffer a shape that is a product of sums of seq, pos and constants",
            )
        code += [int(coef), len(monomial), *(index[a] for a in monomial)]
    return code


def chat_tables(layout: Any) -> dict[str, object]:
    """The chat layouts of c/chat_prompt.c (``layout``: a workflow/chat_layout.ChatLayout, or None:
    the library has no chat template)."""
    if layout is None:
        return {"has_chat": 0, "chat_parts": np.zeros(4, dtype=np.int32), "chat_starts": np.zeros(3, dtype=np.int32),
                "chat_text": np.zeros(1, dtype=np.uint8)}
    return {"has_chat": 1, **layout.tables()}


def tokenizer_check_tables(keys: tuple[str, ...], file_hash: int) -> dict[str, object]:
    """What c/context.c checks of a GGUF weights file's tokenizer: the hash of these metadata keys'
    values (formats/gguf_header.metadata_hash) must be the exported file's; no keys: no check."""
    text = b"".join(k.encode() + b"\0" for k in keys)
    return {"tok_nkeys": len(keys), "tok_keys": np.frombuffer(text or b"\0", dtype=np.uint8),
            "tok_hash": np.asarray([file_hash], dtype=np.uint64).view(np.int64)}


def eos_ids(config: Any) -> list[int]:
    """The end-of-text ids of a model config (``eos_token_id``: an id, a list of ids, or None)."""
    eos = config.eos_token_id
    return [] if eos is None else [int(eos)] if isinstance(eos, int | np.integer) else [int(e) for e in eos]


def model_tables(runner: Any, n_ctx: int, vocab_hash: int, source: Any = None, chat: Any = None,
                 tokenizer_check: dict[str, object] | None = None, stops: list[int] | None = None) -> StaticBlob:
    """The compiled program's buffers, symbols and weights as the data c/model_tables.c reads.

    ``source``: where the library reads the weights; None: an HF GPT-2 safetensors file (the
    ``ct_weight`` records), else an object with ``tables(inputs, weight_format)`` giving the weight
    tables (workflow/weight_source.py: a GGUF file). ``chat``: the chat template's layout, if any."""
    stops = eos_ids(runner.config) if stops is None else [int(t) for t in stops]
    prog = runner.program
    if getattr(prog, "schedule", None) is None or prog.c_source is None:
        raise ExportError("the model was not compiled with the C backend", hint="export needs backend='c'")
    sched = prog.schedule
    syms = list(sched.symbols)
    unknown = [s for s in syms if s not in MODEL_SYMBOLS]
    if unknown:
        raise ExportError(f"the model program has symbols {unknown}; export supports {MODEL_SYMBOLS}")
    index = {s: i for i, s in enumerate(syms)}
    plan = prog.memory_plan
    slot_of = dict(plan.slot_of) if plan is not None else {}
    n_slots = (max(slot_of.values()) + 1) if slot_of else 0
    names = list(sched.buffers)
    kinds, slots, items, size_at, code = [], [], [], [0], []
    inputs: list[tuple[int, str, Any]] = []
    for b, name in enumerate(names):
        info = sched.buffers[name]
        kind = "tokens" if name == runner.tokens_name else info.kind
        if kind not in KIND_CODES:
            raise ExportError(f"buffer {name!r} has kind {info.kind!r}, which export does not support")
        slot = -1
        if kind == "intermediate":
            slot = slot_of.get(name, -1)
            if slot < 0:
                slot, n_slots = n_slots, n_slots + 1
        if kind == "input":
            inputs.append((b, name, info))
        kinds.append(KIND_CODES[kind])
        slots.append(slot)
        items.append(np.dtype(info.dtype.np).itemsize)
        code += size_code(numel(tuple(info.shape)), index, f"buffer {name!r}")
        size_at.append(len(code))
    if source is None:
        hf = expected_shapes(runner.config)
        records, wnames = weight_records([weight_entry(b, n, i, hf, runner.weight_format) for b, n, i in inputs], names)
        weight_tables = {"weights": records, "names": wnames, "nweights": len(records) // len(WEIGHT_FIELDS),
                         **no_bind_tables()}
    else:
        weight_tables = source.tables(inputs, runner.weight_format)
    tables = {
        "kind": np.asarray(kinds, dtype=np.int64),
        "slot": np.asarray(slots, dtype=np.int64),
        "itemsize": np.asarray(items, dtype=np.int64),
        "size_at": np.asarray(size_at, dtype=np.int64),
        "size_code": np.asarray(code or [0], dtype=np.int64),
        "sym_role": np.asarray([MODEL_SYMBOLS.index(s) for s in syms] or [0], dtype=np.int64),
        "vocab_hash": np.asarray([vocab_hash], dtype=np.uint64).view(np.int64),
        "nbuf": len(names),
        "nsym": len(syms),
        "nslot": n_slots,
        "n_ctx": int(n_ctx),
        "vocab": int(runner.config.vocab_size),
        "eos": (eos_ids(runner.config) or [-1])[0],
        "stops": np.asarray(stops or [-1], dtype=np.int32),
        "nstops": len(stops),
        "tokens_buf": names.index(runner.tokens_name),
        "out_buf": names.index(sched.outputs[0]),
        **weight_tables,
        **chat_tables(chat),
        **(tokenizer_check or tokenizer_check_tables((), 0)),
    }
    return pack_static(tables)
