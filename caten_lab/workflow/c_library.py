"""Building an exported workflow's C library: the package's fixed C files, the model's data, the units.

An exported workflow (workflow/export.py: generation; workflow/perplexity.py) is the compiled model,
the tokenizer actions, the workflow's own actions and a runtime of fixed C files (caten_lab/workflow/c/,
read with importlib.resources, ``@P@`` / ``@U@`` standing for the API prefix). ``export_library``
writes them into ``<dir>/src`` with the data the runtime reads (model_tables.py, the tokenizer blob)
and the actions' prototypes, checks every action the runtime calls against the call it was written
for, and builds lib<name>.so and the command-line program with runtime/objects.py.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from caten_lab.formats.gguf_header import mapped, metadata_hash
from caten_lab.models.quantize import FORMATS
from caten_lab.runtime.objects import compile_objects, current_toolchain, link
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.model_tables import ExportError, check_c_call, model_tables, tokenizer_check_tables
from caten_lab.workflow.tokenizer_c import tokenizer_c
from caten_lab.workflow.tokenizers.static_data import incbin_c, pack_static


@dataclass
class Exported:
    """Paths of an exported workflow and how long each step took."""

    directory: Path
    library: Path
    header: Path
    cli: Path
    sources: list[Path] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def check_weight_format(weight_format: str) -> str:
    """``weight_format`` if the exported library can store weights that way, else a clear error."""
    if weight_format not in FORMATS:
        raise ExportError(
            f"weight_format {weight_format!r} is not one of {', '.join(FORMATS)}",
            hint="fp32 keeps the file's values; fp16 halves and int8 (per-row scales) quarters the weight memory",
        )
    return weight_format


# the fixed C every exported library's runtime unit includes (caten_lab/workflow/c/), and the
# package's other fixed file it needs (the loader's rules)
RUNTIME_FILES = (
    "export_head.c",
    "model_tables.c",
    "rules_table.c",
    "json_reader.c",
    "st_loader.c",
    "weight_read.c",
    "vocab_check.c",
    "gguf_reader.h",
    "gguf_reader.c",
    "gguf_meta.c",
    "model_buffers.c",
    "gguf_weights.c",
    "context.c",
)
_FORMAT_DOC = {
    "fp32": "as float32, the file's values (F16/BF16 tensors widened exactly)",
    "fp16": "as IEEE fp16 (round to nearest even, as numpy's astype(float16)): half the memory",
    "int8": "as int8 with one float32 scale per output row (max |w| / 127): a quarter of the memory",
    "gguf": "as the GGUF file stores them: quantized blocks read by the kernels from the mapped file",
}


@dataclass(frozen=True)
class WorkflowC:
    """The fixed C of one kind of workflow: its runtime unit (which includes RUNTIME_FILES and
    ``files``), its part of the public header, and its command-line program."""

    unit: str
    files: tuple[str, ...]
    header: str
    main: str


def c_file(name: str) -> str:
    """The text of a fixed C file of the export (caten_lab/workflow/c/)."""
    return (resources.files("caten_lab.workflow") / "c" / name).read_text(encoding="utf-8")


def rules_header() -> str:
    """caten_lab/formats/rules.h: the loader's rules, shared by the Python validator and every export's C."""
    return (resources.files("caten_lab.formats") / "rules.h").read_text(encoding="utf-8")


def fill(text: str, values: dict[str, str]) -> str:
    """A fixed C file with its ``@KEY@`` parameters (the API prefix, the weight format) filled in."""
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def template_values(name: str, weight_format: str, model: str = "GPT-2") -> dict[str, str]:
    return {"P": name, "U": name.upper(), "WEIGHT_FORMAT": weight_format, "WEIGHT_FORMAT_DOC": _FORMAT_DOC[weight_format],
            "MODEL": model}


def stored_format(runner: Any) -> str:
    """How the library stores the model's weights: ``gguf`` when the program reads a GGUF file's blocks
    (``raw_types``: models/quant_graph.py), else the runner's weight format."""
    return "gguf" if getattr(runner, "raw_types", None) else runner.weight_format


def header_text(name: str, spec: WorkflowC, weight_format: str, model: str = "GPT-2") -> str:
    """The public header: the common API, the weight format the library stores, the workflow's part."""
    values = template_values(name, weight_format, model)
    return fill(c_file("api.h"), values) + "\n" + fill(c_file(spec.header), values)


# ------------------------------------------------------------------------------------ building


def build(out: Path, name: str, units: dict[str, str], main_c: str, header: str,
          includes: dict[str, str | bytes]) -> Exported:
    """Write the sources (``includes``: the files the units include, and data), compile every unit with
    the runtime's flags (runtime/objects.py), link lib<name>.so and the CLI."""
    out.mkdir(parents=True, exist_ok=True)
    src_dir = out / "src"
    src_dir.mkdir(exist_ok=True)
    tc = current_toolchain()
    header_path = out / f"{name}.h"
    header_path.write_text(header)
    for fname, content in includes.items():
        path = src_dir / fname
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    clash = sorted(f"{unit}.c" for unit in units if f"{unit}.c" in includes)
    if clash:
        raise ExportError(f"translation units {clash} would overwrite the fixed C files of the same name")
    sources = []
    for unit, text in units.items():
        c = src_dir / f"{unit}.c"
        c.write_text(text)
        sources.append(c)
    times = compile_objects(tc, sources, ["-fvisibility=hidden", f"-I{out}", f"-I{src_dir}"])
    timings = {f"cc_{unit}": t for unit, t in times.items()}
    lib = out / f"lib{name}.so"
    timings["link"] = link(tc, [c.with_suffix(".o") for c in sources], lib, shared=True)
    main_path = out / "main.c"
    main_path.write_text(main_c)
    cli = out / name
    cli_flags = ["-O2", f"-I{out}", f"-L{out}", f"-l{name}", "-Wl,-rpath,$ORIGIN"]
    timings["cc_main"] = link(tc, [main_path], cli, shared=False, extra=cli_flags)
    return Exported(out, lib, header_path, cli, [*sources, main_path], timings)


def export_library(
    workflow: Any, directory: str | os.PathLike, spec: WorkflowC, units: dict[str, str], cdefs: list[str]
) -> Exported:
    """Export a workflow: the model, the tokenizer (workflow/tokenizer_c.py), the workflow's own action
    ``units`` (whose entry prototypes are ``cdefs``) and the fixed C of ``spec``, built into ``directory``."""
    t0 = time.perf_counter()
    out = Path(directory).resolve()
    (out / "src").mkdir(parents=True, exist_ok=True)
    name, runner, tok = workflow.name, workflow.runner, workflow.tokenizer
    if tok.n_vocab != runner.config.vocab_size:
        raise ExportError(f"the tokenizer has {tok.n_vocab} tokens but the model {runner.config.vocab_size}")
    runner.compile()
    fmt, model = stored_format(runner), getattr(runner, "model_name", "GPT-2")
    values = template_values(name, fmt, model)
    tok_c = tokenizer_c(tok, workflow.model_dir)
    includes: dict[str, str | bytes] = {f: fill(c_file(f), values) for f in (*RUNTIME_FILES, *spec.files)}
    includes["tokenizer.c"] = "".join(fill(c_file(f), values) for f in tok_c.files)
    includes["rules.h"] = rules_header()
    source, keys = getattr(workflow, "source", None), tuple(getattr(workflow, "tokenizer_keys", ()))
    check = None
    if keys:
        if source is None or source.header is None:
            raise ExportError("tokenizer_keys need a GGUF weights source (their values are checked in that file)")
        check = tokenizer_check_tables(keys, metadata_hash(source.header, mapped(source.path), list(keys)))
    model_blob = model_tables(runner, runner.n_ctx, tok_c.vocab_hash, source, getattr(workflow, "chat", None), check,
                              getattr(workflow, "stops", None))
    tok_blob = pack_static(tok_c.tables)
    tok_c.check(tok_blob)
    for stem, symbol, blob in (("model", "ct_m", model_blob), ("tokenizer", "ct_tok", tok_blob)):
        includes[f"{stem}_tables.bin"] = blob.data
        includes[f"{stem}_data.h"] = incbin_c(blob, out / "src" / f"{stem}_tables.bin", symbol)
    all_units = {"model": runner.program.c_source}
    protos = []
    for unit, act in (("tok_encode", tok_c.encode), ("tok_decode", tok_c.decode)):
        rendered = render_c(act)
        check_c_call(act, rendered.entry)
        all_units[unit] = rendered.source
        protos.append(rendered.cdef)
    includes["actions.h"] = "\n".join([*protos, *cdefs]) + "\n"
    all_units.update(units)
    all_units[f"{name}_workflow"] = fill(c_file(spec.unit), values)
    header = header_text(name, spec, fmt, model)
    gen_s = time.perf_counter() - t0
    res = build(out, name, all_units, fill(c_file(spec.main), values), header, includes)
    res.timings["generate_c"] = gen_s
    return res
