"""Llama compiled end to end (models/runner.py): local weights (GGUF or HF safetensors), ONE program.

The KV cache holds ``n_ctx`` positions: 2048 unless given (at most ``max_position_embeddings``;
SmolLM2's 8192 would cost 4x the cache memory for prompts that rarely need it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from caten_lab.models.llama_weights import LlamaWeights, load_llama, load_llama_gguf
from caten_lab.models.runner import DecoderRunner
from caten_lab.nn.llama import Llama, LlamaConfig

__all__ = ["LlamaRunner"]


class LlamaRunner(DecoderRunner):
    """A compiled Llama: ``LlamaRunner.from_pretrained("model.gguf").generate(ids, 20)``."""

    model_name = "Llama"
    config_type = LlamaConfig
    model_type = Llama
    default_n_ctx = 2048

    @staticmethod
    def max_positions(config: LlamaConfig) -> int:
        return config.max_position_embeddings

    @staticmethod
    def state_views(weights: LlamaWeights) -> dict[str, Any]:
        return weights.state_dict  # already under the model's names and layout

    @staticmethod
    def load_source(path: str | os.PathLike, *, mapped: bool = False) -> LlamaWeights:
        return load_llama(path, mapped=mapped)

    @staticmethod
    def load_gguf_blocks(path: Path) -> LlamaWeights:
        return load_llama_gguf(path, dequantize=False)
