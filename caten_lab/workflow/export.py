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

A Llama GGUF file (``generation_workflow("SmolLM2-135M-Instruct.Q4_1.gguf")``) exports the same way:
the library reads that file, its quantized blocks kept as in ``LlamaRunner.from_pretrained``, its
tokenizer and chat template are the file's (``--chat``), and generation stops at the tokens the
Python chat stops at (``chat.stop_ids``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.gpt2_weights import gguf_tensor_name
from caten_lab.models.llama import LlamaRunner
from caten_lab.models.llama_weights import hf_to_gguf_name
from caten_lab.models.loader import architecture
from caten_lab.type_words import a_type
from caten_lab.workflow.c_library import Exported, WorkflowC, check_weight_format, export_library
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.chat import stop_ids
from caten_lab.workflow.chat_layout import TEMPLATE_KEY, gguf_chat_layout
from caten_lab.workflow.chat_template import ChatTemplate
from caten_lab.workflow.generation import emit_token, generate_loop, model_forward
from caten_lab.workflow.host import link_host_calls
from caten_lab.workflow.model_tables import ExportError, check_c_call
from caten_lab.workflow.perplexity import export_perplexity
from caten_lab.workflow.prompt_actions import assemble_prompt
from caten_lab.workflow.tokenizers import GPT2Tokenizer
from caten_lab.workflow.tokenizers.gguf_vocab import tokenizer_from_gguf
from caten_lab.workflow.weight_source import GGUFSource

__all__ = ["ExportError", "Exported", "GenerationWorkflow", "export", "generation_workflow", "llama_workflow"]

GENERATE_C = WorkflowC("workflow_generate.c", ("generate.c", "chat_prompt.c"), "generate.h", "cli_main.c")


@dataclass
class GenerationWorkflow:
    """Tokenize -> model -> sample -> repeat, for one model directory (HF layout) or GGUF file."""

    model_dir: Path
    runner: Any  # models.gpt2.GPT2Runner
    tokenizer: Any  # workflow.tokenizers.GPT2Tokenizer
    name: str = "gpt2"
    kind: str = "generate"
    source: Any = None  # where the library reads the weights: None = model_dir's safetensors, or a GGUFSource
    chat: Any = None  # the chat template's layout (workflow/chat_layout.ChatLayout): <name>_chat and --chat
    tokenizer_keys: tuple[str, ...] = ()  # GGUF keys whose values the library checks are the exported file's
    stops: list[int] | None = None  # the ids that end a generation (None: the model's end-of-text)


def generation_workflow(
    model_dir: str | os.PathLike,
    *,
    name: str | None = None,
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
    BF16 or Q8_0 tensors) and converts them to ``weight_format``, as
    ``GPT2Runner.from_pretrained(weights, dequantize=True)`` does (not yet the file's own blocks, as the
    Python runner's default and a Llama export do).

    ``model_dir`` may also be a Llama GGUF file (:func:`llama_workflow`); ``name`` defaults to ``gpt2``
    (``llama`` for a Llama file).
    """

    check_weight_format(weight_format)
    d = Path(model_dir)
    if d.is_file() and d.suffix == ".gguf" and architecture(d) == "llama":
        if weights is not None or weight_format != "fp32":
            raise ExportError(f"{d}: a Llama GGUF file is exported as it stores its weights",
                              hint="drop weights= and weight_format= (the library reads the file's blocks)")
        return llama_workflow(d, name=name or "llama", n_ctx=n_ctx)
    name = name or "gpt2"
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
    runner = GPT2Runner.from_pretrained(  # export needs the C program; a GGUF file's weights as floats
        gguf_file or d, n_ctx=n_ctx, backend="c", weight_format=weight_format, dequantize=True
    )
    tok = GPT2Tokenizer.from_files(d / "vocab.json", d / "merges.txt")
    source = GGUFSource(gguf_file, gguf_tensor_name, "gpt2") if gguf_file else None
    return GenerationWorkflow(d, runner, tok, name, source=source)


def llama_workflow(path: str | os.PathLike, *, name: str = "llama", n_ctx: int | None = None) -> GenerationWorkflow:
    """The generation workflow of a Llama GGUF file: ``LlamaRunner.from_pretrained(path)`` (quantized
    blocks kept, bound as views of the file the library maps), the file's tokenizer (every
    ``tokenizer.*`` key is checked at init to be the exported file's), its chat template as a layout,
    and the stop tokens of the Python chat (``chat.stop_ids``: end-of-generation and end-of-turn)."""

    if not name.isidentifier():
        raise ExportError(f"workflow name {name!r} must be a C identifier")
    p = Path(path)
    runner = LlamaRunner.from_pretrained(p, n_ctx=n_ctx, backend="c")
    tok = tokenizer_from_gguf(p)
    source = GGUFSource(p, hf_to_gguf_name, "llama", constants={k: runner.arrays[k] for k in runner.fixed})
    meta = source.header.metadata
    chat, stops = None, sorted(tok.eog_ids)
    if TEMPLATE_KEY in meta:
        chat = gguf_chat_layout(meta)
        stops = stop_ids(tok, ChatTemplate.from_gguf(p))
    keys = tuple(k for k in meta if k.startswith("tokenizer."))
    return GenerationWorkflow(p, runner, tok, name, source=source, chat=chat, tokenizer_keys=keys, stops=stops)


def with_weight_format(workflow: Any, weight_format: str | None) -> Any:
    """``workflow`` with its model storing weights as ``weight_format`` (None: as it is).

    The format is part of the compiled program (a dequantizing matvec reads int8 + scales), so a
    different one means a new runner for the same directory, context and tracing options.
    """

    if weight_format is None or weight_format == workflow.runner.weight_format:
        return workflow
    check_weight_format(weight_format)
    if getattr(workflow.runner, "model_name", "GPT-2") != "GPT-2":
        raise ExportError(f"weight_format={weight_format!r}: a {workflow.runner.model_name} GGUF workflow is "
                          "exported as its file stores the weights", hint="leave weight_format unset")
    old = workflow.runner
    source = getattr(workflow, "source", None)
    runner = GPT2Runner.from_pretrained(
        source.path if source is not None else workflow.model_dir,
        n_ctx=old.n_ctx,
        backend="c",
        all_logits=old.all_logits,
        weight_format=weight_format,
        dequantize=True,
    )
    return dataclasses.replace(workflow, runner=runner)


def export(workflow: Any, directory: str | os.PathLike, *, weight_format: str | None = None) -> Exported:
    """Write ``lib<name>.so``, ``<name>.h`` and the ``<name>`` command-line program into ``directory``.

    ``weight_format`` (fp32 / fp16 / int8) overrides the workflow's (``generation_workflow(...,
    weight_format=)``); the library converts the HF weights to it when it loads them.
    """
    if not isinstance(workflow, GenerationWorkflow) and getattr(workflow, "kind", None) != "perplexity":
        raise ExportError(
            f"export() takes a workflow, got {a_type(workflow)}",
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
