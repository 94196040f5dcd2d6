"""The strict validator on the silent wrong answers of issue 13, each against the exact error.

Before: duplicate JSON keys kept the last, an F32 tensor relabelled I32 was cast to float, float
offsets were truncated by int(), overlapping tensors loaded, a misaligned or F32 -> Q4_0 relabelled
GGUF tensor loaded garbage, config keys that change the computation were ignored.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from caten_lab.formats.rules import RULES, WeightsError, rules_header
from caten_lab.models.gpt2_weights import config_from_dict, load_gguf, load_hf_dir, read_safetensors

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def _st(path: Path, header: str, data: bytes) -> Path:
    h = header.encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)
    return path


ONE_TWO = np.array([1.0, 2.0], np.float32).tobytes()


def test_duplicate_tensor_name_is_refused_not_last_wins(tmp_path) -> None:
    p = _st(tmp_path / "t.safetensors", '{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, '
            '"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', ONE_TWO)
    with pytest.raises(WeightsError, match=r"the key 'a' appears twice .* \[rule DUPLICATE_KEY\]") as e:
        read_safetensors(p)
    assert e.value.rule == "DUPLICATE_KEY"


def test_float_offsets_are_refused_not_truncated(tmp_path) -> None:
    p = _st(tmp_path / "t.safetensors", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0.5, 8.9]}}', ONE_TWO)
    with pytest.raises(WeightsError, match=r"data_offsets holds 0.5, not a non-negative integer .*\[rule INTEGER\]"):
        read_safetensors(p)


def test_overlapping_tensors_are_refused(tmp_path) -> None:
    p = _st(tmp_path / "t.safetensors", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
            '"b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', ONE_TWO)
    with pytest.raises(WeightsError, match=r"tensors 'a' and 'b' share bytes \(at 4\) \[rule OVERLAP\]"):
        read_safetensors(p)


def test_valid_file_still_reads_exactly(tmp_path) -> None:
    p = _st(tmp_path / "t.safetensors", '{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', ONE_TWO)
    np.testing.assert_array_equal(read_safetensors(p)["a"], np.array([1.0, 2.0], np.float32))


def _model_dir(tmp_path: Path, st_name: str) -> Path:
    d = tmp_path / "m"
    d.mkdir(parents=True)
    shutil.copy(CORPUS / "config" / "valid-config.json", d / "config.json")
    shutil.copy(CORPUS / "safetensors" / st_name, d / "model.safetensors")
    return d


def test_f32_relabelled_i32_is_refused_not_cast(tmp_path) -> None:
    with pytest.raises(WeightsError, match=r"'transformer.wte.weight' has dtype I32; supported: F32, F16, BF16"):
        load_hf_dir(_model_dir(tmp_path, "DTYPE-f32-relabelled-i32.safetensors"))


def test_wrong_shaped_lm_head_is_refused(tmp_path) -> None:
    with pytest.raises(WeightsError, match=r"lm_head.weight differs from transformer.wte.weight \[rule TIED\]"):
        load_hf_dir(_model_dir(tmp_path, "TIED-lm-head-wrong-shape.safetensors"))


def test_names_without_transformer_prefix_load_as_the_prefixed_ones(tmp_path) -> None:
    """GPT2Model checkpoints (the original HF gpt2) lack the prefix: the C loader took them, Python
    refused them; now both load them (tests/workflow/test_export_load.py), and a file naming one
    tensor both ways is refused by both."""
    got = load_hf_dir(_model_dir(tmp_path, "valid-no-transformer-prefix.safetensors")).state_dict
    ref = read_safetensors(CORPUS / "safetensors" / "valid-f32.safetensors")
    assert set(got) == set(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(got[k], v)
    with pytest.raises(WeightsError, match=r"tensors 'transformer.wte.weight' and 'wte.weight' are both "
                                           r"'transformer.wte.weight' \[rule NAMES\]"):
        load_hf_dir(_model_dir(tmp_path / "twice", "NAMES-named-twice.safetensors"))


def test_valid_model_dir_loads_the_file(tmp_path) -> None:
    w = load_hf_dir(_model_dir(tmp_path, "valid-tied-lm-head.safetensors"))
    ref = read_safetensors(CORPUS / "safetensors" / "valid-f32.safetensors")
    assert set(w.state_dict) == set(ref)
    for k, v in ref.items():
        np.testing.assert_array_equal(w.state_dict[k], v)


def test_misaligned_gguf_tensor_is_refused() -> None:
    with pytest.raises(WeightsError, match=r"starts at data offset \d+, not a multiple of the alignment 32 \[rule ALIGNMENT\]"):
        load_gguf(CORPUS / "gguf" / "ALIGNMENT-misaligned-offset.gguf")


def test_gguf_f32_relabelled_q4_0_is_refused() -> None:
    with pytest.raises(WeightsError, match=r"a type or shape does not match the bytes the file holds \[rule NBYTES\]"):
        load_gguf(CORPUS / "gguf" / "NBYTES-f32-relabelled-q4_0.gguf")


@pytest.mark.parametrize(
    ("key", "value"),
    [("scale_attn_by_inverse_layer_idx", True), ("scale_attn_weights", False), ("reorder_and_upcast_attn", True),
     ("add_cross_attention", True), ("tie_word_embeddings", False)],
)
def test_unimplemented_config_keys_are_refused(key: str, value: bool) -> None:
    cfg = json.loads((CORPUS / "config" / "valid-config.json").read_text())
    config_from_dict(dict(cfg))  # the valid config loads
    with pytest.raises(WeightsError, match=rf"{key}={value} is not implemented .*\[rule CONFIG\]"):
        config_from_dict({**cfg, key: value})


def test_rules_table_parses_every_rule_line() -> None:
    lines = [x for x in rules_header().splitlines() if x.startswith("CT_RULE(")]
    assert len(lines) == len(RULES) == len({r.id for r in RULES.values()})
    assert [r.id for r in RULES.values()] == list(range(1, len(RULES) + 1))
