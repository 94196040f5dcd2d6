"""Llama compiled end to end (models/runner.py): local weights (GGUF or HF safetensors), ONE program.

The KV cache holds ``n_ctx`` positions: 2048 unless given (at most ``max_position_embeddings``;
SmolLM2's 8192 would cost 4x the cache memory for prompts that rarely need it).
"""

from __future__ import annotations

import os
import time
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

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, weight_format: str = "fp32", dequantize: bool = False,
                        **kw: Any) -> LlamaRunner:
        """A GGUF file's 2-D weights stay as the file stores them (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K,
        Q5_K, Q6_K), bound as views of the mapped file and dequantized inside the kernels; ``dequantize=True``
        (the reference path) and HF directories load floats stored in ``weight_format``, cached as
        prepared weights (see :meth:`DecoderRunner.from_pretrained`)."""
        p = Path(path)
        if dequantize or not (p.is_file() and p.suffix == ".gguf"):
            return super().from_pretrained(path, weight_format=weight_format, **kw)  # type: ignore[return-value]
        t0 = time.perf_counter()
        weights = load_llama_gguf(p, dequantize=False)
        load_s = time.perf_counter() - t0
        runner = cls(weights, weight_format=weight_format, **kw)
        runner.load_s = load_s
        return runner
