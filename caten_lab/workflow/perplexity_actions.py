"""Actions of the perplexity workflow: a streaming data loader and the cross-entropy reduction.

``chunk_end`` decides where a chunk of a text file may be cut so that tokenizing chunk by chunk
gives exactly the tokens of the whole text (a GPT-2 pre-token never spans a newline followed by a
printable ASCII character). ``window_nll`` is the summed next-token negative log-likelihood of one
window of logits, in float64 with a max-shifted log-sum-exp.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.action import action
from caten_lab.workflow.samplers import exp_f64
from caten_lab.workflow.types import Array, f32, f64, i32, i64, u8


@action
def log_f64(x: f64) -> f64:
    """Natural log for x > 0: x = m * 2**e with m in [sqrt(1/2), sqrt(2)), log m = 2 atanh(s)."""
    if x <= 0.0:
        return -1e309
    e = 0
    m = x
    while m >= 2.0:
        m = m * 0.5
        e = e + 1
    while m < 1.0:
        m = m * 2.0
        e = e - 1
    if m > 1.4142135623730951:
        m = m * 0.5
        e = e + 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    term = s
    total = 0.0
    for k in range(30):
        total = total + term / f64(2 * k + 1)
        term = term * s2
    return 2.0 * total + f64(e) * 0.6931471805599453


@action
def chunk_end(buf: Array[u8, ("n",)], n: i64, last: i32) -> i64:
    """Bytes of ``buf[:n]`` that can be tokenized now: all of it at the end of the file, else up to
    the last newline followed by a printable ASCII character (0 = need more data)."""
    if last != 0:
        return n
    for i in range(n - 2, -1, -1):
        if buf[i] == 10 and buf[i + 1] > 32 and buf[i + 1] < 127:
            return i + 1
    return 0


@action
def next_window(
    tokens: Array[i32, ("t",)], n_tokens: i64, start: i64, window: i64, out: Array[i32, ("w",)]
) -> i64:
    """Copy the window ``tokens[start:start+window]`` (shorter at the end) into ``out``; its length."""
    n = min(window, n_tokens - start)
    if n < 0:
        n = 0
    for i in range(n):
        out[i] = tokens[start + i]
    return n


@action
def window_nll(logits: Array[f32, ("s", "v")], tokens: Array[i32, ("w",)], n: i64) -> f64:
    """Sum over t < n-1 of -log softmax(logits[t])[tokens[t+1]]: the cross-entropy of a window."""
    v = logits.shape[1]
    total = 0.0
    for t in range(n - 1):
        best = f64(logits[t, 0])
        for j in range(1, v):
            if f64(logits[t, j]) > best:
                best = f64(logits[t, j])
        z = 0.0
        for j in range(v):
            z = z + exp_f64(f64(logits[t, j]) - best)
        total = total + (log_f64(z) + best - f64(logits[t, tokens[t + 1]]))
    return total
