"""Loading GPT-2 weights from HF safetensors and GGUF, checked against the PyTorch model's state dict."""

import json
import shutil

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.models.gpt2_weights import WeightsError, load_gguf, load_hf_dir, save_gguf


def test_hf_dir_matches_torch_state_dict(tiny_hf_dir):
    d, model = tiny_hf_dir
    w = load_hf_dir(d)
    assert (w.config.n_layer, w.config.n_embd, w.config.n_head, w.config.vocab_size) == (2, 64, 4, 320)
    sd = model.state_dict()
    assert len(w.state_dict) == 4 + 12 * 2
    for name, arr in w.state_dict.items():
        np.testing.assert_array_equal(arr, sd[name].numpy(), err_msg=name)


@pytest.mark.parametrize("dtype,tol", [("f32", 0.0), ("f16", 1e-3), ("q8_0", 2e-3)])
def test_gguf_round_trip(tiny_hf_dir, tmp_path, dtype, tol):
    d, _ = tiny_hf_dir
    w = load_hf_dir(d)
    path = tmp_path / f"tiny-{dtype}.gguf"
    save_gguf(w, path, dtype)
    w2 = load_gguf(path)
    for k in ("n_layer", "n_embd", "n_head", "vocab_size", "n_positions"):
        assert getattr(w2.config, k) == getattr(w.config, k)
    for name, arr in w.state_dict.items():
        got = w2.state_dict[name].astype(np.float32)
        assert got.shape == arr.shape, name
        assert np.abs(got - arr).max() <= tol, name


def _copy(d, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(d, out)
    return out


def test_truncated_safetensors_names_file_and_tensor(tiny_hf_dir, tmp_path):
    d = _copy(tiny_hf_dir[0], tmp_path)
    f = d / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightsError) as e:
        load_hf_dir(d)
    assert "model.safetensors" in str(e.value) and "truncated" in str(e.value)
    assert "tensor" in str(e.value)


def test_wrong_config_is_a_clear_error(tiny_hf_dir, tmp_path):
    d = _copy(tiny_hf_dir[0], tmp_path)
    cfg = json.loads((d / "config.json").read_text())
    cfg["n_embd"] = 128
    cfg["n_head"] = 4
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CatenError) as e:
        load_hf_dir(d)
    assert "shape" in str(e.value) and "config" in str(e.value)


def test_missing_tensor_named(tiny_hf_dir, tmp_path):
    from safetensors.numpy import load_file, save_file

    d = _copy(tiny_hf_dir[0], tmp_path)
    sd = load_file(str(d / "model.safetensors"))
    del sd["transformer.h.1.mlp.c_fc.bias"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(WeightsError, match=r"missing tensors \['transformer.h.1.mlp.c_fc.bias'\]"):
        load_hf_dir(d)


def test_missing_files_and_bad_json(tmp_path):
    with pytest.raises(WeightsError, match="not a directory"):
        load_hf_dir(tmp_path / "nope")
    (tmp_path / "config.json").write_text("{not json")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(WeightsError, match="not valid JSON"):
        load_hf_dir(tmp_path)


def test_truncated_gguf(tiny_hf_dir, tmp_path):
    w = load_hf_dir(tiny_hf_dir[0])
    p = tmp_path / "t.gguf"
    save_gguf(w, p, "f32")
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    with pytest.raises(WeightsError, match="t.gguf"):
        load_gguf(p)


def test_safetensors_arrays_are_private_views_and_bf16_widens(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from caten_lab.models.gpt2_weights import read_safetensors

    t = {"a": torch.randn(3, 5), "b": torch.randn(7).to(torch.bfloat16), "c": torch.zeros(0, 4)}
    f = tmp_path / "t.safetensors"
    save_file(t, str(f))
    before = f.read_bytes()
    assert read_safetensors(f)["a"].flags.owndata  # copies by default
    got = read_safetensors(f, mapped=True)
    np.testing.assert_array_equal(got["a"], t["a"].numpy())
    assert got["b"].dtype == np.float32
    np.testing.assert_array_equal(got["b"], t["b"].float().numpy())
    assert got["c"].shape == (0, 4)
    got["a"][...] = 7  # copy-on-write: the file never changes
    assert f.read_bytes() == before
    np.testing.assert_array_equal(read_safetensors(f)["a"], t["a"].numpy())


def test_safetensors_bad_tensor_entry_is_a_clear_error(tmp_path):
    hdr = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 32]}}).encode()
    f = tmp_path / "bad.safetensors"
    f.write_bytes(len(hdr).to_bytes(8, "little") + hdr + bytes(64))
    from caten_lab.models.gpt2_weights import read_safetensors

    with pytest.raises(WeightsError, match="'w'.*needs 64"):
        read_safetensors(f)


@pytest.mark.parametrize("key", ["gpt2.attention.scale_attn_by_inverse_layer_idx", "gpt2.rope.freq_base"])
def test_gguf_unknown_gpt2_key_is_refused_naming_it(tiny_hf_dir, tmp_path, monkeypatch, key):
    """A gpt2.* key the loader does not read might change the math: refused, never dropped."""
    import gguf

    real = gguf.GGUFWriter

    class WithKey(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.add_float32(key, 1.0)

    d, _ = tiny_hf_dir
    with monkeypatch.context() as mp:
        mp.setattr(gguf, "GGUFWriter", WithKey)
        save_gguf(load_hf_dir(d), tmp_path / "m.gguf")
    with pytest.raises(WeightsError, match=f"GGUF key '{key}' is not implemented"):
        load_gguf(tmp_path / "m.gguf")
    save_gguf(load_hf_dir(d), tmp_path / "ok.gguf")
    assert load_gguf(tmp_path / "ok.gguf").config.n_layer == 2
