"""GPT-2 compiled end to end (models/runner.py): local weights, ONE program, generated tokens.

The KV cache holds ``n_ctx`` positions (``n_positions`` unless given).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.models.gpt2_weights import GPT2Weights, load_gguf, load_hf_dir
from caten_lab.models.runner import DecoderRunner, GenerationStats
from caten_lab.nn.gpt2 import GPT2, GPT2Config, hf_state_views

__all__ = ["GPT2Runner", "GenerationStats", "load_weights"]


def load_weights(path: str | os.PathLike, *, mapped: bool = False) -> GPT2Weights:
    """A Hugging Face directory or a ``.gguf`` file (``mapped``: safetensors as views of the file)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return load_gguf(p)
    return load_hf_dir(p, mapped=mapped)


class GPT2Runner(DecoderRunner):
    """A compiled GPT-2: ``runner.generate(prompt_ids, 20)`` or ``for tok in runner.stream(...)``."""

    model_name = "GPT-2"
    config_type = GPT2Config
    model_type = GPT2

    @staticmethod
    def max_positions(config: GPT2Config) -> int:
        return config.n_positions

    @staticmethod
    def state_views(weights: GPT2Weights) -> dict[str, Any]:
        return hf_state_views(weights.state_dict, weights.config)

    @staticmethod
    def load_source(path: str | os.PathLike, *, mapped: bool = False) -> GPT2Weights:
        return load_weights(path, mapped=mapped)  # looked up at call time (tests replace it)

    @staticmethod
    def load_gguf_blocks(path: Path) -> GPT2Weights:
        return load_gguf(path, dequantize=False)

    @staticmethod
    def quantizable(graph: Graph) -> list[str]:
        """The 2-D matmul weights (the token embedding included: it is also the tied lm_head)."""
        return [n for n in DecoderRunner.quantizable(graph) if "wpe" not in n]
