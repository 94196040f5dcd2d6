"""Bad inputs: GGUF-quantized weights read in place (caten_lab.models.quant_graph, gguf_quant).
See tests/bad_inputs/__init__.py for the case format."""

from __future__ import annotations

import numpy as np

from bad_inputs import Case
from caten_lab.formats.gguf_quant import dequantize, quantize
from caten_lab.formats.rules import FormatError
from caten_lab.frontend import Tensor, build_graph, placeholder
from caten_lab.models.quant_graph import quantize_graph, raw_input_specs, raw_inputs


def _linear(k: int):  # noqa: ANN202 - a Graph
    x = placeholder((1, k), "float32", name="x")
    return build_graph([x @ Tensor.from_numpy(np.zeros((5, k), np.float32), name="blk.0.w").T])[0]


def raw_short() -> None:
    raw_inputs("blk.0.w", "Q8_0", np.zeros(5 * 34 - 1, np.uint8), shape=(5, 32))


def raw_not_bytes() -> None:
    raw_inputs("blk.0.w", "Q4_1", np.zeros(5 * 20, np.int16), shape=(5, 32))


def raw_row_not_blocks() -> None:
    raw_inputs("blk.0.w", "Q6_K", np.zeros((5, 211), np.uint8))


def specs_row_not_blocks() -> None:
    raw_input_specs("blk.0.w", "Q4_K", (5, 576))


def graph_row_not_blocks() -> None:
    quantize_graph(_linear(48), {"blk.0.w": "Q8_0"})


def graph_unknown_type() -> None:
    quantize_graph(_linear(64), {"blk.0.w": "Q3_K"})


def graph_not_an_input() -> None:
    quantize_graph(_linear(64), {"blk.9.w": "Q8_0"})


def dequantize_wrong_size() -> None:
    dequantize(np.zeros(100, np.uint8), "Q4_0", (2, 32))


def quantize_nan() -> None:
    quantize(np.full((2, 32), np.nan, np.float32), "Q8_0")


CASES: list[Case] = [
    ("quant: raw bytes one short", raw_short, FormatError, ("blk.0.w", "Q8_0", "170 bytes", "169")),
    ("quant: raw data not uint8", raw_not_bytes, FormatError, ("blk.0.w", "uint8", "int16")),
    ("quant: raw row not whole blocks", raw_row_not_blocks, FormatError, ("211 bytes", "Q6_K", "210")),
    ("quant: K not a multiple of 256", specs_row_not_blocks, FormatError, ("blk.0.w", "256", "576")),
    ("quant: graph weight K not whole blocks", graph_row_not_blocks, FormatError, ("'blk.0.w'", "32", "48")),
    ("quant: unsupported ggml type", graph_unknown_type, FormatError, ("Q3_K", "not supported", "Q4_K")),
    ("quant: weight not in the graph", graph_not_an_input, FormatError, ("'blk.9.w'", "not an input")),
    ("quant: dequantize wrong byte count", dequantize_wrong_size, FormatError, ("Q4_0", "36 bytes", "100")),
    ("quant: quantize non-finite", quantize_nan, FormatError, ("NaN or inf",)),
]
