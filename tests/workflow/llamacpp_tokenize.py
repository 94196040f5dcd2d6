"""llama.cpp's tokenizer as a reference, through the ``xllamacpp`` wheel, run in a subprocess.

``xllamacpp.Server`` starts llama-server's HTTP server on a local port (``listening_address``); its
``/tokenize`` endpoint runs ``common_tokenize`` (llama.cpp's ``llama_tokenize``) with the request's
``add_special`` and ``parse_special``. The Python API has no tokenize handler, so this script loads
the model, posts each text there, writes the ids as JSON and ends with ``os._exit`` (the server's
threads would otherwise hold the process).

    python llamacpp_tokenize.py REQUEST.json RESULT.json
    REQUEST: {"model": PATH, "texts": [...], "add_special": false, "parse_special": true}
    RESULT:  {"tokens": [[ids of text 0], ...]}

``llamacpp_tokens(model, texts, ...)`` runs it and caches the result in a directory keyed by the
model file's and the texts' hashes, so the test suite calls llama.cpp once per corpus;
``llamacpp_special_ids(model)`` gives the BOS/EOS/EOT/EOG ids the loader reports (its log lines).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def _serve(request: dict) -> list[list[int]]:
    import urllib.request

    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = request["model"]
    params.n_ctx = 64
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.warmup = False
    params.verbosity = 4  # the loader's INFO lines name the BOS/EOS/EOT/EOG tokens
    server = xllamacpp.Server(params)
    address = server.listening_address
    out = []
    for text in request["texts"]:
        body = json.dumps({"content": text, "add_special": request["add_special"],
                           "parse_special": request["parse_special"]}).encode()
        req = urllib.request.Request(address + "/tokenize", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as reply:
            out.append(json.loads(reply.read())["tokens"])
    return out


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def llamacpp_special_ids(model: str | Path, cache_dir: str | Path | None = None) -> dict[str, list[int]]:
    """``{"BOS": [id], "EOS": [id], "EOT": [id], "EOG": [ids...]}`` as llama.cpp's loader prints them."""
    return _run(Path(model), [], False, True, cache_dir)["special"]


def llamacpp_tokens(model: str | Path, texts: list[str], *, add_special: bool = False, parse_special: bool = True,
                    cache_dir: str | Path | None = None) -> list[list[int]]:
    """llama.cpp's token ids of each text (cached by model and corpus hash)."""
    return _run(Path(model), texts, add_special, parse_special, cache_dir)["tokens"]


def _special_lines(log: str) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for name, tid in re.findall(r"print_info: (BOS|EOS|EOT|EOG) token +=\s*(\d+)", log):
        found.setdefault(name, []).append(int(tid))
    return found


def _run(model: Path, texts: list[str], add_special: bool, parse_special: bool,
         cache_dir: str | Path | None) -> dict:
    request = {"model": str(model), "texts": texts, "add_special": add_special, "parse_special": parse_special}
    key = hashlib.sha256(json.dumps({**request, "model": _file_digest(model)}).encode()).hexdigest()[:32]
    cache = Path(cache_dir or os.environ.get("CATEN_LLAMACPP_CACHE", Path(tempfile.gettempdir()) / "caten_llamacpp"))
    cached = cache / f"tokens-{key}.json"
    if cached.exists():
        return json.loads(cached.read_text())
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        req, res = Path(tmp) / "request.json", Path(tmp) / "result.json"
        req.write_text(json.dumps(request))
        for attempt in range(2):  # a rare start-up stall of the server: try once more
            try:
                proc = subprocess.run([sys.executable, __file__, str(req), str(res)], capture_output=True,
                                      text=True, timeout=300)
                break
            except subprocess.TimeoutExpired:
                if attempt == 1:
                    raise
        if proc.returncode != 0 or not res.exists():
            raise RuntimeError(f"llama.cpp tokenize failed ({proc.returncode}): {proc.stderr[-2000:]}")
        result = {"tokens": json.loads(res.read_text())["tokens"], "special": _special_lines(proc.stderr)}
    cached.write_text(json.dumps(result))
    return result


if __name__ == "__main__":
    code = 1
    try:
        request = json.loads(Path(sys.argv[1]).read_text())
        Path(sys.argv[2]).write_text(json.dumps({"tokens": _serve(request)}))
        code = 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
