"""The prepared-weights disk cache: a warm ``from_pretrained`` maps the transposed/converted weights
instead of reading the source, gives bitwise the logits of a cold start, and rebuilds entries that
are damaged or belong to a changed source."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from caten_lab.config import settings
from caten_lab.models import gpt2 as gpt2_mod
from caten_lab.models import prepared_weights
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.gpt2_weights import load_hf_dir, save_gguf
from caten_lab.models.quantize import apply_weight_format
from caten_lab.nn.gpt2 import GPT2

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

PROMPT = [5, 17, 33, 2, 100, 7]
DECODE = [9, 250, 3]
FORMATS = ["fp32", "fp16", "int8"]


@pytest.fixture(scope="module", autouse=True)
def _cache_dir(tmp_path_factory):
    """One cache dir for this module: compiled programs are shared, prepared entries are per source."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CATEN_CACHE_DIR", str(tmp_path_factory.mktemp("caten_cache")))
        mp.delenv("CATEN_WEIGHT_CACHE", raising=False)
        yield


def _save_model(d, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=4,
        vocab_size=320,
        n_positions=64,
        bos_token_id=0,
        eos_token_id=0,
        initializer_range=0.1,
    )
    model = transformers.GPT2LMHeadModel(cfg).eval()
    model.save_pretrained(d)
    return model


@pytest.fixture(scope="module")
def model_src(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    return d, _save_model(d)


@pytest.fixture
def model_dir(model_src, tmp_path):
    """A private copy (its own path and inode: its own cache entries)."""
    out = tmp_path / "gpt2"
    shutil.copytree(model_src[0], out)
    return out


def _logits(runner):
    rows = [runner.forward(PROMPT, 0).copy()]
    for i, tok in enumerate(DECODE):
        rows.append(runner.forward([tok], len(PROMPT) + i).copy())
    return rows


def _assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def _entries():
    return sorted(Path(os.environ["CATEN_CACHE_DIR"]).glob("prepared_*.bin"))


def _entry(model_path, fmt):
    ident = prepared_weights.source_identity(model_path)
    return prepared_weights.entry_path(Path(os.environ["CATEN_CACHE_DIR"]), ident, fmt)


def _stats():
    s = prepared_weights.STATS
    return s.hits, s.misses, s.invalid, s.stores


def _reference_arrays(model_dir, fmt):
    """The weights as the model layer loads them (copied, Conv1D transposed), then formatted."""
    w = load_hf_dir(model_dir)
    model = GPT2(w.config).load_hf_state_dict(w.state_dict)
    dec = model.decoder_graph(last_only=False)
    names = [k for k, v in dec.arrays.items() if v.ndim == 2 and k.endswith(".weight") and "wpe" not in k]
    _, arrays = apply_weight_format(dec.graph, dict(dec.arrays), names, fmt)
    return {k: v for k, v in arrays.items() if k not in dec.states}


def _no_source_reads(monkeypatch):
    def fail(path, **kw):
        raise AssertionError(f"the source {path} was read on a warm start")

    monkeypatch.setattr(gpt2_mod, "load_weights", fail)


@pytest.mark.parametrize("fmt", FORMATS)
def test_warm_start_maps_the_cache_and_gives_bitwise_identical_logits(model_dir, model_src, fmt, monkeypatch):
    h0, m0, i0, s0 = _stats()
    cold = GPT2Runner.from_pretrained(model_dir, weight_format=fmt, all_logits=True)
    assert cold.weights_cache == "miss"
    assert _stats() == (h0, m0 + 1, i0, s0 + 1)
    ref = _logits(cold)

    with monkeypatch.context() as mp:
        _no_source_reads(mp)
        warm = GPT2Runner.from_pretrained(model_dir, weight_format=fmt, all_logits=True)
    assert warm.weights_cache == "hit"
    assert _stats() == (h0 + 1, m0 + 1, i0, s0 + 1)
    _assert_bitwise(_logits(warm), ref)

    reference = _reference_arrays(model_dir, fmt)  # what nn's loader + apply_weight_format make
    assert set(warm.weight_arrays()) == set(reference)
    for name, arr in warm.weight_arrays().items():  # the same bytes, served from the file's mapping
        assert arr.dtype == reference[name].dtype and arr.shape == reference[name].shape, name
        assert arr.tobytes() == reference[name].tobytes() == cold.arrays[name].tobytes(), name
        assert not arr.flags.owndata and arr.flags.writeable, name
    entry = _entry(model_dir, fmt)
    weight_bytes = sum(a.nbytes for a in cold.weight_arrays().values())
    assert weight_bytes <= entry.stat().st_size <= weight_bytes + 64 * 1024  # the weights, no more

    if fmt == "fp32":  # and the result is the real model's
        with torch.no_grad():
            want = model_src[1](torch.tensor([PROMPT])).logits.numpy()
        assert np.abs(ref[0] - want).max() < 1e-4


def test_writing_a_mapped_weight_never_changes_the_cache(model_dir):
    cold = GPT2Runner.from_pretrained(model_dir)
    ref = _logits(cold)
    warm = GPT2Runner.from_pretrained(model_dir)
    assert warm.weights_cache == "hit"
    warm.arrays["transformer.wte.weight"][...] = 0  # copy-on-write: private to this runner
    again = GPT2Runner.from_pretrained(model_dir)
    assert again.weights_cache == "hit"
    _assert_bitwise(_logits(again), ref)


def _truncate(p):
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 1000])


def _garble_header(p):
    data = bytearray(p.read_bytes())
    data[20:40] = b"#" * 20
    p.write_bytes(bytes(data))


def _flip_tensor_bytes(p):
    """Damage the first bytes of the data (the first tensor), leaving size and header intact."""
    data = bytearray(p.read_bytes())
    hlen = int.from_bytes(data[8:16], "little")
    start = -(-(16 + hlen) // 64) * 64
    data[start : start + 16] = bytes(16)
    p.write_bytes(bytes(data))


def _empty(p):
    p.write_bytes(b"")


@pytest.mark.parametrize(
    "damage",
    [_truncate, _garble_header, _flip_tensor_bytes, _empty],
    ids=["truncated", "header", "data", "empty"],
)
@pytest.mark.parametrize("fmt", ["fp16", "int8"])
def test_damaged_entry_is_rebuilt_and_logits_stay_correct(model_dir, fmt, damage):
    cold = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)
    ref = _logits(cold)
    from caten_lab.runtime.cache_files import CacheWarning

    entry = _entry(model_dir, fmt)
    damage(entry)
    h0, m0, i0, s0 = _stats()
    with pytest.warns(CacheWarning, match=entry.name):
        rebuilt = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)
    assert rebuilt.weights_cache == "invalid"
    assert _stats() == (h0, m0, i0 + 1, s0 + 1)
    _assert_bitwise(_logits(rebuilt), ref)
    again = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)  # the rewritten entry is good
    assert again.weights_cache == "hit"
    _assert_bitwise(_logits(again), ref)


def _rewrite_other_weights(d):
    _save_model(d, seed=1)


def _touch(d):
    st = (d / "model.safetensors").stat()
    os.utime(d / "model.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _same_size_and_mtime(d):
    """Different content, same size, mtime put back: only ctime/inode tell (as after ``cp -p``)."""
    f = d / "model.safetensors"
    st = f.stat()
    data = bytearray(f.read_bytes())
    data[-4:] = bytes(4)  # the last float of the last tensor
    f.write_bytes(bytes(data))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns


@pytest.mark.parametrize(
    "change",
    [_rewrite_other_weights, _touch, _same_size_and_mtime],
    ids=["content", "mtime", "same-size-and-mtime"],
)
def test_changed_source_invalidates(model_dir, change):
    first = GPT2Runner.from_pretrained(model_dir, weight_format="int8")
    old = _logits(first)
    old_entry = _entry(model_dir, "int8")
    assert old_entry.is_file()
    change(model_dir)
    changed = GPT2Runner.from_pretrained(model_dir, weight_format="int8")
    assert changed.weights_cache == "miss"
    assert not old_entry.exists()  # superseded: one entry per source and format
    with settings(weight_cache=False):  # what the new file gives without any cache
        truth = GPT2Runner.from_pretrained(model_dir, weight_format="int8")
    assert truth.weights_cache == "off"
    new = _logits(changed)
    _assert_bitwise(new, _logits(truth))
    if change is not _touch:
        assert any(a.tobytes() != b.tobytes() for a, b in zip(new, old))
    assert GPT2Runner.from_pretrained(model_dir, weight_format="int8").weights_cache == "hit"


def test_gguf_source_is_cached_too(model_dir, tmp_path, monkeypatch):
    path = tmp_path / "m.gguf"
    save_gguf(load_hf_dir(model_dir), path, "f16")
    cold = GPT2Runner.from_pretrained(path, weight_format="fp16", dequantize=True)  # floats: prepared, cached
    assert cold.weights_cache == "miss"
    with monkeypatch.context() as mp:
        _no_source_reads(mp)
        warm = GPT2Runner.from_pretrained(path, weight_format="fp16", dequantize=True)
    assert warm.weights_cache == "hit"
    _assert_bitwise(_logits(warm), _logits(cold))


def test_disabled_cache_writes_nothing(model_dir, monkeypatch):
    monkeypatch.setenv("CATEN_WEIGHT_CACHE", "0")
    before = _entries()
    r = GPT2Runner.from_pretrained(model_dir, weight_format="fp16")
    assert r.weights_cache == "off" and _entries() == before


def test_eviction_keeps_the_newest_within_budget(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    for i in range(4):
        p = d / f"prepared_{i:016x}_fp32_{i}.bin"
        p.write_bytes(bytes(1000))
        os.utime(p, ns=(i * 10**9, i * 10**9))
    prepared_weights.evict(d, keep=d / "prepared_0000000000000000_fp32_0.bin", budget=2500)
    left = sorted(p.name[9:25] for p in d.glob("prepared_*.bin"))
    assert left == [f"{0:016x}", f"{3:016x}"]  # oldest-but-kept and the most recently used


def test_without_a_mapped_writer_the_entry_is_written_after_converting(model_dir, monkeypatch):
    """Where a new entry cannot be mapped (no posix_fallocate): convert in memory, then write."""
    with monkeypatch.context() as mp:
        mp.setattr(prepared_weights.EntryWriter, "create", classmethod(lambda cls, *a: None))
        cold = GPT2Runner.from_pretrained(model_dir, weight_format="int8")
    assert cold.weights_cache == "miss" and _entry(model_dir, "int8").is_file()
    warm = GPT2Runner.from_pretrained(model_dir, weight_format="int8")
    assert warm.weights_cache == "hit"
    _assert_bitwise(_logits(warm), _logits(cold))


def _damage_middle_of_largest_tensor(p):
    """Change bytes in the middle of the largest tensor, in place, where no sampled check looked."""
    import json

    with open(p, "r+b") as f:
        head = f.read(16)
        hlen = int.from_bytes(head[8:], "little")
        header = json.loads(f.read(hlen))
        start = -(-(16 + hlen) // 64) * 64
        t = max(header["tensors"], key=lambda t: t["nbytes"])
        assert t["nbytes"] > 3 * 4096
        f.seek(start + t["offset"] + t["nbytes"] // 2)
        f.write(b"\x7f" * 64)


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_damage_inside_a_tensor_is_detected_by_the_full_hash(model_dir, fmt):
    """Before: only each tensor's first/last 4 KB were hashed, so this entry loaded as a hit and the
    logits were silently wrong."""
    from caten_lab.runtime.cache_files import CacheWarning

    cold = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)
    ref = _logits(cold)
    entry = _entry(model_dir, fmt)
    assert prepared_weights.stamp_path(entry).is_file()  # verified when written
    _damage_middle_of_largest_tensor(entry)
    with pytest.warns(CacheWarning, match=f"{entry.name}.*SHA-256"):
        rebuilt = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)
    assert rebuilt.weights_cache == "invalid"
    _assert_bitwise(_logits(rebuilt), ref)
    again = GPT2Runner.from_pretrained(model_dir, weight_format=fmt)
    assert again.weights_cache == "hit"
    _assert_bitwise(_logits(again), ref)


def test_a_stamped_entry_is_not_hashed_again_until_it_changes(model_dir, monkeypatch):
    GPT2Runner.from_pretrained(model_dir, weight_format="fp16")
    entry = _entry(model_dir, "fp16")
    assert entry.stat().st_mode & 0o777 == 0o666 & ~_umask()
    calls = []
    real = prepared_weights._content_digest
    monkeypatch.setattr(prepared_weights, "_content_digest", lambda *a: calls.append(1) or real(*a))
    assert GPT2Runner.from_pretrained(model_dir, weight_format="fp16").weights_cache == "hit"
    assert calls == []  # the stamp matched the entry's stat: no hash
    with open(entry, "r+b") as f:  # an in-place write of the same bytes changes the ctime
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(b)
    assert GPT2Runner.from_pretrained(model_dir, weight_format="fp16").weights_cache == "hit"
    assert calls == [1]  # hashed again (and it still matches)


def _umask():
    old = os.umask(0o022)
    os.umask(old)
    return old
