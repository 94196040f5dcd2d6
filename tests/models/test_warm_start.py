"""A runner's warm start (caten_lab/models/warm_start.py): a GGUF model opened again in a later process is
rebuilt from its record, with no trace and no program lookup, and gives bitwise the logits of a cold start;
a changed file, changed options, a program gone from the compile cache or a damaged record fall back to
the cold path (never a stale runner). References: the cold runner, and transformers on the weights the
file holds."""

from __future__ import annotations

import os

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.models import warm_start
from caten_lab.models.llama import LlamaRunner

from .test_llama_weights import IDS, Q, hf_logits, hf_model, write_gguf

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CATEN_WEIGHT_CACHE", raising=False)


def _logits(runner) -> list[np.ndarray]:
    runner.reset()
    out = [runner.forward(IDS[:5], 0).copy()]
    out += [runner.forward([IDS[i]], i).copy() for i in range(5, len(IDS))]
    return out


def _no_trace(monkeypatch):
    def fail(*a, **kw):
        raise AssertionError("the model was traced on a warm start")

    monkeypatch.setattr(LlamaRunner, "load_gguf_blocks", staticmethod(fail))


def _records(tmp_path):
    return sorted((tmp_path / "cache").glob("warm_*.json"))


@pytest.mark.parametrize("activations", ["q8", "f32"])
def test_warm_start_gives_the_cold_logits_without_tracing(tmp_path, monkeypatch, activations):
    hf = hf_model(seed=5)
    path = tmp_path / "m.gguf"
    ref = write_gguf(hf, path, Q.Q8_0)
    cold = LlamaRunner.from_pretrained(path, all_logits=True, activations=activations)
    assert cold.weights_cache == "off" and not _records(tmp_path)  # written once the program is compiled
    want = _logits(cold)
    assert len(_records(tmp_path)) == 1
    if activations == "f32":  # the runner itself is right: transformers on the weights the file holds
        np.testing.assert_allclose(np.concatenate([w.reshape(-1, 96) for w in want]), hf_logits(hf, IDS, ref),
                                   atol=1e-4, rtol=0)
    real_blocks = LlamaRunner.load_gguf_blocks
    with monkeypatch.context() as mp:
        _no_trace(mp)
        warm = LlamaRunner.from_pretrained(path, all_logits=True, activations=activations)
        assert warm.weights_cache == "warm" and warm.config == cold.config and warm.n_ctx == cold.n_ctx
        got = _logits(warm)
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
        toks = warm.generate(IDS[:4], 6)
    assert LlamaRunner.load_gguf_blocks is real_blocks
    assert toks == cold.generate(IDS[:4], 6)
    # what is not needed to run is rebuilt on demand: the traced graph and the compiled graph
    assert warm.graph.structural_hash() == cold.graph.structural_hash()
    assert warm.program.compiled_graph is not None
    assert warm.program.compiled_graph.structural_hash() == cold.program.compiled_graph.structural_hash()


def test_the_key_holds_the_file_and_the_options(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(hf_model(seed=1), path, Q.Q8_0)
    k = warm_start.key("LlamaRunner", path, {"weight_format": "fp32"})
    assert k == warm_start.key("LlamaRunner", path, {"weight_format": "fp32"})
    assert k != warm_start.key("LlamaRunner", path, {"weight_format": "fp32", "activations": "f32"})
    assert k != warm_start.key("GPT2Runner", path, {"weight_format": "fp32"})
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert k != warm_start.key("LlamaRunner", path, {"weight_format": "fp32"})
    assert warm_start.key("LlamaRunner", tmp_path / "missing.gguf", {}) is None


def test_a_changed_file_is_a_miss(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(hf_model(seed=1), path, Q.Q8_0)
    _logits(LlamaRunner.from_pretrained(path))
    hf2 = hf_model(seed=2)
    os.unlink(path)
    ref2 = write_gguf(hf2, path, Q.Q8_0)  # same path, other weights
    r = LlamaRunner.from_pretrained(path, all_logits=True, activations="f32")
    assert r.weights_cache != "warm"
    np.testing.assert_allclose(np.concatenate([x.reshape(-1, 96) for x in _logits(r)]), hf_logits(hf2, IDS, ref2),
                               atol=1e-4, rtol=0)
    again = LlamaRunner.from_pretrained(path, all_logits=True, activations="f32")
    assert again.weights_cache == "warm"


@pytest.mark.parametrize("damage", ["program_gone", "record_damaged", "record_truncated"])
def test_a_lost_program_or_a_damaged_record_falls_back(tmp_path, damage):
    path = tmp_path / "m.gguf"
    write_gguf(hf_model(seed=3), path, Q.Q8_0)
    want = _logits(LlamaRunner.from_pretrained(path))
    (rec,) = _records(tmp_path)
    if damage == "program_gone":
        for p in (tmp_path / "cache").glob("artifacts_*.json"):
            p.unlink()
    elif damage == "record_damaged":
        data = bytearray(rec.read_bytes())
        data[-10] ^= 0x55
        rec.write_bytes(bytes(data))
    else:
        rec.write_bytes(rec.read_bytes()[:100])
    r = LlamaRunner.from_pretrained(path)
    assert r.weights_cache != "warm"
    assert all(a.tobytes() == b.tobytes() for a, b in zip(_logits(r), want))
    assert LlamaRunner.from_pretrained(path).weights_cache == "warm"  # the record was written again


def test_weight_cache_off_turns_warm_starts_off(tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_WEIGHT_CACHE", "0")
    path = tmp_path / "m.gguf"
    write_gguf(hf_model(seed=1), path, Q.Q8_0)
    _logits(LlamaRunner.from_pretrained(path))
    assert not _records(tmp_path)
    assert LlamaRunner.from_pretrained(path).weights_cache != "warm"


def test_a_warm_runner_refuses_what_a_cold_one_refuses(tmp_path):
    path = tmp_path / "m.gguf"
    write_gguf(hf_model(seed=1), path, Q.Q8_0)
    cold = LlamaRunner.from_pretrained(path, n_ctx=16)
    _logits(cold)
    warm = LlamaRunner.from_pretrained(path, n_ctx=16)
    assert warm.weights_cache == "warm"
    for r in (cold, warm):
        with pytest.raises(CatenError, match="n_ctx|context|positions"):
            r.forward(list(range(20)), 0)
        with pytest.raises(CatenError):
            r.forward([500], 0)  # a token id outside the vocabulary
