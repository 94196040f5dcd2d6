"""``export(workflow, dir)``: one shared library + a C header + a command-line program, no Python.

A workflow joins compiled pieces: the GPT-2 program (caten_lab.compiler: one C function per kernel
and the ``caten_run`` entry), the tokenizer actions and the generation-loop action with the
sampler it calls (rendered to C by the action compiler; the loop's calls to the model and to the
per-token callback are host actions, workflow/host.py) and the library's runtime: fixed C files of
caten_lab/workflow/c/ (read with importlib.resources; ``@P@`` stands for the API prefix) that read
the safetensors weights, own the model buffers and call the actions. What depends on the model is
data, not C text: its buffer, symbol and weight tables (model_tables.py) and the tokenizer tables are
packed into binary blobs linked with the assembler's ``.incbin``. Each piece is its own translation
unit compiled by runtime/objects.py with the very flags the Python runtime uses, so the library
computes the same logits and draws the same tokens as the Python API. Only the API functions are
exported from the .so.

    wf = generation_workflow("assets/tiny_gpt2")
    out = export(wf, "build/gpt2")        # build/gpt2/{libgpt2.so, gpt2.h, gpt2, main.c, ...}
    subprocess.run([out.cli, "--weights", "assets/tiny_gpt2", "--prompt", "Hello"])
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from caten_lab.runtime.objects import compile_objects, current_toolchain, link
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.model_tables import ExportError, check_c_call, check_tokenizer_tables, model_tables
from caten_lab.workflow.tokenizers.static_data import incbin_c, pack_static

__all__ = ["ExportError", "Exported", "GenerationWorkflow", "export", "generation_workflow"]

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


# ------------------------------------------------------------------------------------ the C files

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
    "model_buffers.c",
    "tok_tables.c",
    "vocab_tables.c",
    "context.c",
)
_FORMAT_DOC = {
    "fp32": "as float32, the file's values (F16/BF16 tensors widened exactly)",
    "fp16": "as IEEE fp16 (round to nearest even, as numpy's astype(float16)): half the memory",
    "int8": "as int8 with one float32 scale per output row (max |w| / 127): a quarter of the memory",
}


@dataclass(frozen=True)
class WorkflowC:
    """The fixed C of one kind of workflow: its runtime unit (which includes RUNTIME_FILES and
    ``files``), its part of the public header, and its command-line program."""

    unit: str
    files: tuple[str, ...]
    header: str
    main: str


GENERATE_C = WorkflowC("workflow_generate.c", ("generate.c",), "generate.h", "cli_main.c")


def c_file(name: str) -> str:
    """The text of a fixed C file of the export (caten_lab/workflow/c/)."""
    return (resources.files("caten_lab.workflow") / "c" / name).read_text(encoding="utf-8")


def fill(text: str, values: dict[str, str]) -> str:
    """A fixed C file with its ``@KEY@`` parameters (the API prefix, the weight format) filled in."""
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def template_values(name: str, weight_format: str) -> dict[str, str]:
    return {"P": name, "U": name.upper(), "WEIGHT_FORMAT": weight_format, "WEIGHT_FORMAT_DOC": _FORMAT_DOC[weight_format]}


def header_text(name: str, spec: WorkflowC, weight_format: str) -> str:
    """The public header: the common API, the weight format the library stores, the workflow's part."""
    values = template_values(name, weight_format)
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
    from caten_lab.workflow.generation import generate_loop

    loop = render_c(generate_loop)
    return export_library(workflow, directory, GENERATE_C, {"generate_loop": loop_unit(loop)}, [loop.cdef])


def loop_unit(loop: Any = None) -> str:
    """The generation-loop action's C (with the sampler it calls; ``loop``: its rendering, if made),
    its host calls linked to the runtime's ``host_*`` functions (c/generate.c)."""
    from caten_lab.workflow.generation import emit_token, generate_loop, model_forward
    from caten_lab.workflow.host import link_host_calls

    loop = loop or render_c(generate_loop)
    check_c_call(generate_loop, loop.entry)
    return link_host_calls(loop.source, loop.functions, [model_forward, emit_token])


def export_library(
    workflow: Any, directory: str | os.PathLike, spec: WorkflowC, units: dict[str, str], cdefs: list[str]
) -> Exported:
    """Export a GPT-2 workflow: the model, the tokenizer actions, the workflow's own action ``units``
    (whose entry prototypes are ``cdefs``) and the fixed C of ``spec``, built into ``directory``."""
    from caten_lab.workflow.tokenizers._action import ACTIONS

    t0 = time.perf_counter()
    out = Path(directory).resolve()
    (out / "src").mkdir(parents=True, exist_ok=True)
    name, runner, tok = workflow.name, workflow.runner, workflow.tokenizer
    if tok.n_vocab != runner.config.vocab_size:
        raise ExportError(f"the tokenizer has {tok.n_vocab} tokens but the model {runner.config.vocab_size}")
    runner.compile()
    values = template_values(name, runner.weight_format)
    includes: dict[str, str | bytes] = {f: fill(c_file(f), values) for f in (*RUNTIME_FILES, *spec.files)}
    includes["rules.h"] = (resources.files("caten_lab.formats") / "rules.h").read_text(encoding="utf-8")
    vocab_hash = fnv64((Path(workflow.model_dir) / "vocab.json").read_bytes())
    model_blob = model_tables(runner, runner.n_ctx, vocab_hash)
    tok_blob = pack_static(tok.static_args())
    check_tokenizer_tables(tok_blob)
    for stem, symbol, blob in (("model", "ct_m", model_blob), ("tokenizer", "ct_tok", tok_blob)):
        includes[f"{stem}_tables.bin"] = blob.data
        includes[f"{stem}_data.h"] = incbin_c(blob, out / "src" / f"{stem}_tables.bin", symbol)
    all_units = {"model": runner.program.c_source}
    protos = []
    for unit, act in (("tok_encode", ACTIONS["gpt2_encode"]), ("tok_decode", ACTIONS["tokens_to_bytes"])):
        rendered = render_c(act)
        check_c_call(act, rendered.entry)
        all_units[unit] = rendered.source
        protos.append(rendered.cdef)
    includes["actions.h"] = "\n".join([*protos, *cdefs]) + "\n"
    all_units.update(units)
    all_units[f"{name}_workflow"] = fill(c_file(spec.unit), values)
    header = header_text(name, spec, runner.weight_format)
    gen_s = time.perf_counter() - t0
    res = build(out, name, all_units, fill(c_file(spec.main), values), header, includes)
    res.timings["generate_c"] = gen_s
    return res
