"""Runs llama.cpp in-process (the ``xllamacpp`` wheel) for tests/refs/llamacpp.py: one request in, one reply out.

    python llamacpp_runner.py REQUEST.json REPLY.json

The request names the GGUF file, the thread count, the context size and a list of jobs; the reply holds
one result per job, in order. llama.cpp logs to stderr (the caller captures it). The process ends with
``os._exit`` because the server's threads would otherwise delay the exit. Jobs:

- ``{"op": "teacher_forced", "ids": [...], "k": K}``: for every position i, llama.cpp's greedy (top-1)
  next token after ``ids[:i+1]`` and its top-K ``[id, logprob]`` pairs. One completion call per position
  with ``n_predict: 1`` and ``cache_prompt: true``, so each call only evaluates the one new token
  (llama-server has no option that returns the log-probs of every prompt position at once).
- ``{"op": "generate", "ids": [...], "n": N}``: greedy generation of N tokens (EOS ignored) with the
  server's timings (prompt and predicted tokens per second); the prompt is evaluated in full. Also the
  time the server took to start (model load) and this process's peak RSS so far.
- ``{"op": "tokenize", "texts": [...], "add_special": bool, "parse_special": bool}``: token ids from
  llama-server's HTTP ``/tokenize`` endpoint, which the in-process server also serves on
  ``Server.listening_address``.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
import urllib.request


def _server(req: dict):
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = req["model"]
    p.n_ctx = int(req["n_ctx"])
    p.n_parallel = 1
    p.cpuparams.n_threads = int(req["threads"])
    p.cpuparams_batch.n_threads = int(req["threads"])
    return xllamacpp.Server(p)


def _complete(server, body: dict) -> dict:
    reply = server.handle_completions(body)
    if isinstance(reply, str):
        reply = json.loads(reply)
    if "error" in reply or "choices" not in reply:
        raise RuntimeError(f"llama.cpp completion failed: {json.dumps(reply)[:500]}")
    return reply


def teacher_forced(server, ids: list[int], k: int) -> dict:
    top1: list[int] = []
    top: list[list[list[float]]] = []
    evaluated = 0  # prompt tokens llama.cpp evaluated over all calls (cache_prompt works: ~len(ids))
    for i in range(len(ids)):
        body = {
            "prompt": ids[: i + 1],
            "n_predict": 1,
            "n_probs": k,
            "temperature": 0.0,
            "cache_prompt": True,
            "ignore_eos": True,
        }
        reply = _complete(server, body)
        entry = reply["choices"][0]["logprobs"]["content"][0]
        top1.append(int(entry["id"]))
        top.append([[int(t["id"]), float(t["logprob"])] for t in entry["top_logprobs"]])
        evaluated += int(reply["timings"]["prompt_n"])
    return {"top1": top1, "top": top, "evaluated": evaluated}


def generate(server, ids: list[int], n: int, load_s: float) -> dict:
    body = {
        "prompt": ids,
        "n_predict": n,
        "n_probs": 1,
        "temperature": 0.0,
        "cache_prompt": False,
        "ignore_eos": True,
    }
    reply = _complete(server, body)
    content = reply["choices"][0]["logprobs"]["content"]
    t = reply["timings"]
    return {
        "tokens": [int(c["id"]) for c in content],
        "prompt_n": int(t["prompt_n"]),
        "predicted_n": int(t["predicted_n"]),
        "prompt_per_second": float(t["prompt_per_second"]),
        "predicted_per_second": float(t["predicted_per_second"]),
        "prompt_ms": float(t["prompt_ms"]),
        "predicted_ms": float(t["predicted_ms"]),
        "load_s": load_s,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def tokenize(server, texts: list[str], add_special: bool, parse_special: bool) -> dict:
    out = []
    for text in texts:
        body = json.dumps(
            {"content": text, "add_special": add_special, "parse_special": parse_special}
        ).encode()
        request = urllib.request.Request(
            server.listening_address + "/tokenize", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as f:
            out.append([int(t) for t in json.loads(f.read())["tokens"]])
    return {"ids": out}


def run(req: dict) -> list[dict]:
    t0 = time.perf_counter()
    server = _server(req)
    load_s = time.perf_counter() - t0
    results = []
    for job in req["jobs"]:
        op = job["op"]
        if op == "teacher_forced":
            results.append(teacher_forced(server, job["ids"], int(job["k"])))
        elif op == "generate":
            results.append(generate(server, job["ids"], int(job["n"]), load_s))
        elif op == "tokenize":
            results.append(
                tokenize(server, job["texts"], bool(job["add_special"]), bool(job["parse_special"]))
            )
        else:
            raise ValueError(f"unknown job op {op!r} (teacher_forced, generate, tokenize)")
    return results


def main() -> None:
    request_path, reply_path = sys.argv[1], sys.argv[2]
    code = 0
    try:
        with open(request_path) as f:
            req = json.load(f)
        reply = {"results": run(req)}
    except Exception as e:  # reported to the caller through the reply file, then a non-zero exit
        reply = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        code = 1
    with open(reply_path + ".tmp", "w") as f:
        json.dump(reply, f)
    os.replace(reply_path + ".tmp", reply_path)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
