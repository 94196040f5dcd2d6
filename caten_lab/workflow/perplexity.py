"""The second exported workflow: perplexity of GPT-2 on a text file, streamed in token windows.

Data loader (``chunk_end`` cuts the file into independently tokenizable chunks, the BPE action
tokenizes them, ``next_window`` takes fixed windows), the compiled model (all positions' logits) and
the cross-entropy reduction (``window_nll``) are the same kinds of pieces as the generation
workflow, exported by the same machinery into ``lib<name>.so`` + ``<name>.h`` + a CLI:

    <name> --weights DIR --text FILE [--window N] [--chunk BYTES]
    -> perplexity <p> / tokens <scored> / nll <sum> / windows <k>

Windows do not overlap (stride = window), and each is scored on its own: token t+1 is predicted
from tokens 0..t of its window, as in the usual fixed-length perplexity recipe.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.workflow.c_library import Exported, WorkflowC, check_weight_format, export_library
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.model_tables import ExportError, check_c_call
from caten_lab.workflow.perplexity_actions import chunk_end, next_window, window_nll


@dataclass
class PerplexityWorkflow:
    """Stream a text file -> token windows -> GPT-2 (all logits) -> summed cross-entropy."""

    model_dir: Path
    runner: Any
    tokenizer: Any
    window: int
    name: str = "gpt2ppl"
    kind: str = "perplexity"


def perplexity_workflow(
    model_dir: str | os.PathLike,
    *,
    window: int | None = None,
    name: str = "gpt2ppl",
    weight_format: str = "fp32",
) -> PerplexityWorkflow:
    """The perplexity workflow of a local GPT-2 directory; ``window`` defaults to n_positions.

    ``weight_format`` (fp32 / fp16 / int8): how the model stores its matmul weights, as in
    ``generation_workflow``."""
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    check_weight_format(weight_format)
    d = Path(model_dir)
    for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        if not (d / f).is_file():
            raise ExportError(f"{d / f}: not found")
    runner = GPT2Runner.from_pretrained(
        d, n_ctx=window, all_logits=True, backend="c", weight_format=weight_format
    )
    tok = GPT2Tokenizer.from_files(d / "vocab.json", d / "merges.txt")
    return PerplexityWorkflow(d, runner, tok, runner.n_ctx, name)


@dataclass
class PerplexityResult:
    perplexity: float
    nll_sum: float
    tokens: int  # tokens scored (each window scores its length - 1)
    windows: int


def windows_of(ids: list[int], window: int) -> list[list[int]]:
    """Non-overlapping windows; a final window shorter than 2 tokens scores nothing and is dropped."""
    return [ids[i : i + window] for i in range(0, len(ids), window) if len(ids[i : i + window]) >= 2]


def perplexity_python(wf: PerplexityWorkflow, text: str) -> PerplexityResult:
    """The same computation through the Python API (compiled model + NumPy log-softmax)."""
    ids = wf.tokenizer.encode(text)
    nll, count, nwin = 0.0, 0, 0
    for win in windows_of(ids, wf.window):
        wf.runner.reset()
        logits = wf.runner.forward(win, 0)[0].astype(np.float64)
        m = logits.max(axis=-1, keepdims=True)
        lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[:, 0]
        nll += float((lse[:-1] - logits[np.arange(len(win) - 1), win[1:]]).sum())
        count += len(win) - 1
        nwin += 1
    return PerplexityResult(math.exp(nll / count) if count else float("nan"), nll, count, nwin)


PERPLEXITY_C = WorkflowC("workflow_perplexity.c", ("perplexity.c",), "perplexity.h", "ppl_main.c")


def export_perplexity(wf: PerplexityWorkflow, directory: str | os.PathLike) -> Exported:
    """``export()`` for a :class:`PerplexityWorkflow`."""
    units, cdefs = {}, []
    for unit, act in (("ppl_chunk", chunk_end), ("ppl_window", next_window), ("ppl_nll", window_nll)):
        rendered = render_c(act)
        check_c_call(act, rendered.entry)
        units[unit] = rendered.source
        cdefs.append(rendered.cdef)
    return export_library(wf, directory, PERPLEXITY_C, units, cdefs)
