"""llama.cpp as a reference and a peer: teacher-forced top-k, greedy generation with timings, tokenization.

llama.cpp runs in-process in a child Python (``llamacpp_runner.py``, through the ``xllamacpp`` wheel's
``Server``), never in the test process: its threads and logging would otherwise hang or flood pytest.
The child's stderr (llama.cpp's log) is captured and shown only when it fails. Results are cached as
JSON under ``<CATEN_CACHE_DIR>/refs/llamacpp`` (or ``CATEN_REF_CACHE``), keyed by the file's identity
(resolved path, size, mtime), the xllamacpp version, the job and its parameters, so the test suite does
not rerun llama.cpp every time. Benchmarks pass ``cache=False`` to measure afresh.

    tf = teacher_forced(gguf, ids, k=5)        # tf.top1[i]: llama.cpp's next token after ids[:i+1]
    g = generate(gguf, ids, 32, threads=1)     # g.tokens, g.prompt_per_second, g.predicted_per_second
    runs = generate_runs(gguf, ids, 32, 3)     # uncached, three runs in one process (benchmarks)
    tokenize(gguf, ["Hello world"])            # [[19556, 905]] from llama-server's /tokenize
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from caten_lab.config import config

RUNNER = Path(__file__).with_name("llamacpp_runner.py")
RESULT_FORMAT = 2  # part of every cache key: bump it when the runner's results change shape
DEFAULT_THREADS = 2


class LlamaCppError(RuntimeError):
    """llama.cpp (the runner subprocess) failed; the message holds the tail of its log."""


@dataclass(frozen=True)
class TeacherForced:
    """llama.cpp's predictions at every position of a teacher-forced sequence."""

    top1: list[int]  # top1[i]: the greedy next token after ids[:i+1]
    top: list[list[tuple[int, float]]]  # top[i]: the k most likely (token id, natural-log probability)
    evaluated: int  # prompt tokens llama.cpp evaluated in all (≈ len(ids) when the prompt cache works)


@dataclass(frozen=True)
class Generation:
    """Greedy generation by llama.cpp with the server's own timings."""

    tokens: list[int]
    prompt_n: int
    predicted_n: int
    prompt_per_second: float
    predicted_per_second: float
    prompt_ms: float
    predicted_ms: float
    load_s: float  # the server's start (model load) in the process that ran this generation
    peak_rss_mb: float  # that process's peak RSS when the generation ended


def available() -> bool:
    """Whether llama.cpp can run: ``CATEN_REF_PYTHON`` names another interpreter, or the ``xllamacpp``
    wheel (the ``[dev]`` extra) is installed here (found without importing it into this process)."""
    return bool(os.environ.get("CATEN_REF_PYTHON")) or importlib.util.find_spec("xllamacpp") is not None


def cache_dir() -> Path:
    env = os.environ.get("CATEN_REF_CACHE")
    return Path(env).expanduser() if env else config().cache_dir / "refs" / "llamacpp"


def file_identity(path: Path) -> list:
    st = path.stat()
    return [str(path.resolve()), st.st_size, st.st_mtime_ns]


def _check_file(gguf: Path | str) -> Path:
    path = Path(gguf)
    if not path.is_file():
        raise FileNotFoundError(f"llama.cpp reference: no GGUF file at {path}")
    return path


def python() -> str:
    """The interpreter that runs llama.cpp: the dev venv's (this one), or ``CATEN_REF_PYTHON``."""
    return os.environ.get("CATEN_REF_PYTHON") or sys.executable


def run_jobs(
    gguf: Path | str,
    jobs: list[dict],
    *,
    threads: int = DEFAULT_THREADS,
    n_ctx: int | None = None,
    timeout: float = 1800,
) -> list[dict]:
    """Run ``jobs`` (see llamacpp_runner.py) in one fresh llama.cpp process, uncached; one result per job."""
    path = _check_file(gguf)
    if n_ctx is None:
        longest = max((len(j.get("ids", ())) + int(j.get("n", 1)) for j in jobs), default=0)
        n_ctx = max(512, 256 * (longest // 256 + 1))
    req = {"model": str(path), "threads": int(threads), "n_ctx": int(n_ctx), "jobs": jobs}
    with tempfile.TemporaryDirectory(prefix="llamacpp_") as tmp:
        req_path, reply_path = Path(tmp) / "request.json", Path(tmp) / "reply.json"
        req_path.write_text(json.dumps(req))
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        p = subprocess.run(
            [python(), str(RUNNER), str(req_path), str(reply_path)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
        reply = json.loads(reply_path.read_text()) if reply_path.exists() else {}
    if p.returncode != 0 or "results" not in reply:
        log = "\n".join((p.stderr or "").strip().splitlines()[-15:])
        why = reply.get("error") or f"exit status {p.returncode}, no reply"
        trace = reply.get("traceback", "")
        raise LlamaCppError(f"llama.cpp on {path} failed: {why}\n{trace}--- its log (tail) ---\n{log}")
    results = reply["results"]
    if len(results) != len(jobs):
        raise LlamaCppError(f"llama.cpp on {path}: {len(results)} results for {len(jobs)} jobs")
    return results


def cached_jobs(
    gguf: Path | str,
    jobs: list[dict],
    *,
    threads: int = DEFAULT_THREADS,
    n_ctx: int | None = None,
    cache: bool = True,
) -> list[dict]:
    """``run_jobs`` with each job's result cached on disk; only the jobs not cached run (in one process)."""
    path = _check_file(gguf)
    if not cache:
        return run_jobs(path, jobs, threads=threads, n_ctx=n_ctx)
    ident = {
        "format": RESULT_FORMAT,
        "file": file_identity(path),
        "xllamacpp": importlib.metadata.version("xllamacpp"),
        "threads": int(threads),
        "n_ctx": n_ctx,
    }
    keys = [
        hashlib.sha256(json.dumps([ident, job], sort_keys=True).encode()).hexdigest()[:32] for job in jobs
    ]
    root = cache_dir()
    results: list[dict | None] = []
    for key in keys:
        try:
            results.append(json.loads((root / f"{key}.json").read_text())["result"])
        except (OSError, ValueError, KeyError):  # missing or unreadable entry: recompute it
            results.append(None)
    todo = [i for i, r in enumerate(results) if r is None]
    if todo:
        fresh = run_jobs(path, [jobs[i] for i in todo], threads=threads, n_ctx=n_ctx)
        root.mkdir(parents=True, exist_ok=True)
        for i, res in zip(todo, fresh):
            results[i] = res
            tmp = root / f"{keys[i]}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps({"identity": ident, "job": jobs[i], "result": res}))
            os.replace(tmp, root / f"{keys[i]}.json")
    return [r for r in results if r is not None]


def _ids(ids) -> list[int]:
    out = [int(t) for t in ids]
    if not out:
        raise ValueError("llama.cpp reference: an empty token sequence")
    return out


def teacher_forced(
    gguf: Path | str, ids, *, k: int = 5, threads: int = DEFAULT_THREADS, cache: bool = True
) -> TeacherForced:
    """llama.cpp's top-1 and top-``k`` log-probs after every prefix ``ids[:i+1]``."""
    (r,) = cached_jobs(
        gguf, [{"op": "teacher_forced", "ids": _ids(ids), "k": int(k)}], threads=threads, cache=cache
    )
    return TeacherForced(
        r["top1"], [[(int(t), float(lp)) for t, lp in row] for row in r["top"]], r["evaluated"]
    )


def generate(
    gguf: Path | str, ids, n: int, *, threads: int = DEFAULT_THREADS, cache: bool = True
) -> Generation:
    """Greedy generation of ``n`` tokens after ``ids`` (EOS ignored), with the timings of that run."""
    (r,) = cached_jobs(
        gguf, [{"op": "generate", "ids": _ids(ids), "n": int(n)}], threads=threads, cache=cache
    )
    return Generation(**r)


def generate_runs(
    gguf: Path | str, ids, n: int, runs: int, *, threads: int = DEFAULT_THREADS
) -> list[Generation]:
    """``runs`` fresh greedy generations in one llama.cpp process (uncached: for benchmarks)."""
    job = {"op": "generate", "ids": _ids(ids), "n": int(n)}
    return [Generation(**r) for r in run_jobs(gguf, [job] * int(runs), threads=threads)]


def tokenize(
    gguf: Path | str,
    texts: list[str],
    *,
    add_special: bool = False,
    parse_special: bool = True,
    cache: bool = True,
) -> list[list[int]]:
    """llama.cpp's tokenization of each text (special tokens such as ``<|im_start|>`` parsed by default)."""
    job = {"op": "tokenize", "texts": list(texts), "add_special": add_special, "parse_special": parse_special}
    (r,) = cached_jobs(gguf, [job], threads=1, cache=cache)
    return r["ids"]
