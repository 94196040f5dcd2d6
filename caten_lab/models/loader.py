"""``load_model(path)``: a compiled runner for a local model, chosen by its architecture.

GGUF files name it in ``general.architecture``, Hugging Face directories in config.json's
``model_type``: ``"llama"`` -> :class:`~caten_lab.models.llama.LlamaRunner`, ``"gpt2"`` ->
:class:`~caten_lab.models.gpt2.GPT2Runner`. Anything else is refused naming the value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from caten_lab.formats.rules import WeightsError
from caten_lab.formats.strict_json import loads_strict
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.llama import LlamaRunner
from caten_lab.models.runner import DecoderRunner
from caten_lab.models.weight_files import GGUFFile

RUNNERS: dict[str, type[DecoderRunner]] = {"llama": LlamaRunner, "gpt2": GPT2Runner}


def architecture(path: str | os.PathLike) -> str:
    """``general.architecture`` of a GGUF file, or ``model_type`` of a directory's config.json
    (GPT-2 config.json files written before ``model_type`` existed count as ``"gpt2"``)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        arch = GGUFFile(p).field("general.architecture")
    elif p.is_dir() and (p / "config.json").is_file():
        cfg_file = p / "config.json"
        raw = loads_strict(cfg_file.read_bytes(), str(cfg_file), WeightsError, "config")
        arch = raw.get("model_type", "gpt2") if isinstance(raw, dict) else None
    else:
        raise WeightsError(f"{p}: not a .gguf file or a directory with config.json",
                           hint="pass a GGUF file or a Hugging Face model directory")
    if not isinstance(arch, str):
        raise WeightsError(f"{p}: the architecture is {arch!r}, not a name", rule="CONFIG")
    return arch


def load_model(path: str | os.PathLike, **runner_options: Any) -> DecoderRunner:
    """The runner for ``path`` (``runner_options``: ``weight_format``, ``backend``, ``n_ctx``, ...)."""
    arch = architecture(path)
    if arch not in RUNNERS:
        raise WeightsError(f"{path}: architecture {arch!r} is not supported", rule="CONFIG",
                           hint=f"supported: {', '.join(RUNNERS)}")
    return RUNNERS[arch].from_pretrained(path, **runner_options)
