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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caten_lab.workflow.c_library import Exported, WorkflowC, check_weight_format, export_library
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.generation import emit_token, generate_loop, model_forward
from caten_lab.workflow.host import link_host_calls
from caten_lab.workflow.model_tables import ExportError, check_c_call
from caten_lab.workflow.perplexity import export_perplexity
from caten_lab.workflow.prompt_actions import assemble_prompt
from caten_lab.workflow.weight_source import GGUFSource

__all__ = ["ExportError", "Exported", "GenerationWorkflow", "export", "generation_workflow"]

GENERATE_C = WorkflowC("workflow_generate.c", ("generate.c", "chat_prompt.c"), "generate.h", "cli_main.c")


@dataclass
class GenerationWorkflow:
    """Tokenize -> GPT-2 -> sample -> repeat, for one model directory (HF layout)."""

    model_dir: Path
    runner: Any  # models.gpt2.GPT2Runner
    tokenizer: Any  # workflow.tokenizers.GPT2Tokenizer
    name: str = "gpt2"
    kind: str = "generate"
    source: Any = None  # where the library reads the weights: None = model_dir's safetensors, or a GGUFSource
    chat: Any = None  # the chat template's layout (workflow/chat_layout.ChatLayout): <name>_chat and --chat
    tokenizer_keys: tuple[str, ...] = ()  # GGUF keys whose values the library checks are the exported file's


def generation_workflow(
    model_dir: str | os.PathLike,
    *,
    name: str = "gpt2",
    n_ctx: int | None = None,
    weight_format: str = "fp32",
    weights: str | os.PathLike | None = None,
) -> GenerationWorkflow:
    """The GPT-2 text generation workflow of a local Hugging Face directory.

    ``weight_format`` (fp32 / fp16 / int8) is how the matmul weights are stored, exactly as
    ``GPT2Runner(weight_format=...)`` stores them: the exported library still reads the HF fp32 (or
    F16/BF16) safetensors and converts at load time, so it computes what that runner computes.
    ``weights``: a GPT-2 ``.gguf`` file to read instead of the directory's safetensors (the
    directory then only gives vocab.json and merges.txt); the library reads that file (F32, F16,
    BF16 or Q8_0 tensors), as ``GPT2Runner.from_pretrained(weights)`` does.
    """
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.models.gpt2_weights import gguf_tensor_name
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    check_weight_format(weight_format)
    d = Path(model_dir)
    gguf_file = Path(weights) if weights is not None else None
    if gguf_file is not None and (gguf_file.suffix != ".gguf" or not gguf_file.is_file()):
        raise ExportError(f"{gguf_file}: not a .gguf file", hint="weights= takes a GPT-2 GGUF file")
    need = ("vocab.json", "merges.txt") if gguf_file else ("config.json", "model.safetensors", "vocab.json", "merges.txt")
    for f in need:
        if not (d / f).is_file():
            raise ExportError(
                f"{d / f}: not found",
                hint="export needs a GPT-2 directory with config.json, "
                "model.safetensors, vocab.json and merges.txt (with weights=FILE.gguf: vocab.json and merges.txt)",
            )
    if not name.isidentifier():
        raise ExportError(f"workflow name {name!r} must be a C identifier")
    runner = GPT2Runner.from_pretrained(  # export needs the C program
        gguf_file or d, n_ctx=n_ctx, backend="c", weight_format=weight_format
    )
    tok = GPT2Tokenizer.from_files(d / "vocab.json", d / "merges.txt")
    source = GGUFSource(gguf_file, gguf_tensor_name, "gpt2") if gguf_file else None
    return GenerationWorkflow(d, runner, tok, name, source=source)


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
    source = getattr(workflow, "source", None)
    runner = GPT2Runner.from_pretrained(
        source.path if source is not None else workflow.model_dir,
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
        return export_perplexity(workflow, directory)
    loop = render_c(generate_loop)
    chat = render_c(assemble_prompt)
    check_c_call(assemble_prompt, chat.entry)
    units = {"generate_loop": loop_unit(loop), "prompt_assembly": chat.source}
    return export_library(workflow, directory, GENERATE_C, units, [loop.cdef, chat.cdef])


def loop_unit(loop: Any = None) -> str:
    """The generation-loop action's C (with the sampler it calls; ``loop``: its rendering, if made),
    its host calls linked to the runtime's ``host_*`` functions (c/generate.c)."""
    loop = loop or render_c(generate_loop)
    check_c_call(generate_loop, loop.entry)
    return link_host_calls(loop.source, loop.functions, [model_forward, emit_token])
