"""The second exported workflow: perplexity of GPT-2 on a text file, streamed in token windows.

Data loader (``chunk_end`` cuts the file into independently tokenizable chunks, the BPE action
tokenizes them, ``next_window`` takes fixed windows), the compiled model (all positions' logits) and
the cross-entropy reduction (``window_nll``) are the same kinds of pieces as the generation
workflow, exported by the same machinery into ``lib<name>.so`` + ``<name>.h`` + a CLI:

    <name> --weights DIR --text FILE [--window N] [--chunk BYTES]
    -> perplexity <p> / tokens <scored> / nll <sum> / windows <k>

Windows do not overlap (stride = window), and each is scored on its own: token t+1 is predicted
from tokens 0..t of its window, as in the usual fixed-length perplexity recipe.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.export import (
    Exported,
    ExportError,
    _subst,
    action_wrapper,
    build,
    check_weight_format,
    header_text,
    model_units,
)


@dataclass
class PerplexityWorkflow:
    """Stream a text file -> token windows -> GPT-2 (all logits) -> summed cross-entropy."""

    model_dir: Path
    runner: Any
    tokenizer: Any
    window: int
    name: str = "gpt2ppl"
    kind: str = "perplexity"


def perplexity_workflow(
    model_dir: str | os.PathLike,
    *,
    window: int | None = None,
    name: str = "gpt2ppl",
    weight_format: str = "fp32",
) -> PerplexityWorkflow:
    """The perplexity workflow of a local GPT-2 directory; ``window`` defaults to n_positions.

    ``weight_format`` (fp32 / fp16 / int8): how the model stores its matmul weights, as in
    ``generation_workflow``."""
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    check_weight_format(weight_format)
    d = Path(model_dir)
    for f in ("config.json", "model.safetensors", "vocab.json", "merges.txt"):
        if not (d / f).is_file():
            raise ExportError(f"{d / f}: not found")
    runner = GPT2Runner.from_pretrained(
        d, n_ctx=window, all_logits=True, backend="c", weight_format=weight_format
    )
    tok = GPT2Tokenizer.from_files(d / "vocab.json", d / "merges.txt")
    return PerplexityWorkflow(d, runner, tok, runner.n_ctx, name)


@dataclass
class PerplexityResult:
    perplexity: float
    nll_sum: float
    tokens: int  # tokens scored (each window scores its length - 1)
    windows: int


def windows_of(ids: list[int], window: int) -> list[list[int]]:
    """Non-overlapping windows; a final window shorter than 2 tokens scores nothing and is dropped."""
    return [ids[i : i + window] for i in range(0, len(ids), window) if len(ids[i : i + window]) >= 2]


def perplexity_python(wf: PerplexityWorkflow, text: str) -> PerplexityResult:
    """The same computation through the Python API (compiled model + NumPy log-softmax)."""
    ids = wf.tokenizer.encode(text)
    nll, count, nwin = 0.0, 0, 0
    for win in windows_of(ids, wf.window):
        wf.runner.reset()
        logits = wf.runner.forward(win, 0)[0].astype(np.float64)
        m = logits.max(axis=-1, keepdims=True)
        lse = np.log(np.exp(logits - m).sum(axis=-1)) + m[:, 0]
        nll += float((lse[:-1] - logits[np.arange(len(win) - 1), win[1:]]).sum())
        count += len(win) - 1
        nwin += 1
    return PerplexityResult(math.exp(nll / count) if count else float("nan"), nll, count, nwin)


PPL_HEADER = r"""
typedef struct {
  double perplexity;     /* exp(nll_sum / tokens) */
  double nll_sum;        /* summed next-token negative log-likelihood (nats) */
  int64_t tokens;        /* tokens scored */
  int64_t windows;       /* windows evaluated */
} @P@_result;

/* Perplexity of the text file at text_path: windows of `window` tokens (0 = the model's context),
   the file read in chunks of `chunk_bytes` (0 = 1 MiB). */
int @P@_evaluate(@P@_ctx *ctx, const char *text_path, int64_t window, int64_t chunk_bytes, @P@_result *result);

#ifdef __cplusplus
}
#endif
#endif
"""

PPL_C = r"""
static int ct_score_window(@P@_ctx *ctx, int32_t *win, int64_t n, @P@_result *res) {
  if (n < 2) return @U@_OK;
  ct_reset_states(ctx);
  int rc = ct_forward(ctx, win, n, 0);
  if (rc) return rc;
  int64_t aerr[4] = {0};
  double nll = ct_nll_call((float *)ctx->m.bufs[CT_OUT_BUF], n, win, n, aerr);
  if (aerr[0]) { ct_fail(ctx->msg, "cross-entropy run-time check failed"); return @U@_ERR_RUNTIME; }
  res->nll_sum += nll;
  res->tokens += n - 1;
  res->windows += 1;
  return @U@_OK;
}

API int @P@_evaluate(@P@_ctx *ctx, const char *path, int64_t window, int64_t chunk, @P@_result *res) {
  if (!ctx || !path || !res) return @U@_ERR_ARGUMENT;
  memset(res, 0, sizeof *res);
  if (window == 0) window = CT_N_CTX;
  if (window < 2 || window > CT_N_CTX) { ct_fail(ctx->msg, "window must be in 2..%d, got %lld", CT_N_CTX, (long long)window); return @U@_ERR_ARGUMENT; }
  if (chunk <= 0) chunk = 1 << 20;
  FILE *f = fopen(path, "rb");
  if (!f) { ct_fail(ctx->msg, "%s: cannot open the text file (%s)", path, strerror(errno)); return @U@_ERR_IO; }
  int64_t cap = chunk * 2, len = 0, pend_cap = 4 * window + 16, npend = 0;
  uint8_t *buf = malloc((size_t)cap);
  int32_t *pend = malloc(sizeof(int32_t) * (size_t)pend_cap), *win = malloc(sizeof(int32_t) * (size_t)window);
  int rc = @U@_OK, last = 0;
  if (!buf || !pend || !win) { rc = @U@_ERR_MEMORY; ct_fail(ctx->msg, "out of memory"); goto done; }
  while (!last) {
    if (len + chunk > cap) {
      uint8_t *nb = realloc(buf, (size_t)(len + chunk));
      if (!nb) { rc = @U@_ERR_MEMORY; ct_fail(ctx->msg, "out of memory"); goto done; }
      buf = nb; cap = len + chunk;
    }
    size_t got = fread(buf + len, 1, (size_t)chunk, f);
    if (ferror(f)) { rc = @U@_ERR_IO; ct_fail(ctx->msg, "%s: read error", path); goto done; }
    len += (int64_t)got;
    last = feof(f) ? 1 : 0;
    int64_t aerr[4] = {0};
    int64_t cut = ct_chunk_call(buf, len, last, aerr);
    if (cut <= 0) continue;
    int32_t *ids; int64_t n;
    rc = ct_encode(ctx, buf, cut, &ids, &n);
    if (rc) goto done;
    memmove(buf, buf + cut, (size_t)(len - cut));
    len -= cut;
    if (npend + n > pend_cap) {
      int64_t nc = npend + n + window;
      int32_t *np2 = realloc(pend, sizeof(int32_t) * (size_t)nc);
      if (!np2) { free(ids); rc = @U@_ERR_MEMORY; ct_fail(ctx->msg, "out of memory"); goto done; }
      pend = np2; pend_cap = nc;
    }
    memcpy(pend + npend, ids, sizeof(int32_t) * (size_t)n);
    npend += n;
    free(ids);
    int64_t start = 0;
    while (npend - start >= window) {
      int64_t w = ct_window_call(pend, npend, start, window, win, window, aerr);
      rc = ct_score_window(ctx, win, w, res);
      if (rc) goto done;
      start += w;
    }
    memmove(pend, pend + start, sizeof(int32_t) * (size_t)(npend - start));
    npend -= start;
  }
  if (npend >= 2) {
    int64_t aerr[4] = {0};
    int64_t w = ct_window_call(pend, npend, 0, window, win, window, aerr);
    rc = ct_score_window(ctx, win, w, res);
    if (rc) goto done;
  }
  if (res->tokens == 0) { rc = @U@_ERR_ARGUMENT; ct_fail(ctx->msg, "%s: fewer than 2 tokens, nothing to score", path); goto done; }
  res->perplexity = exp(res->nll_sum / (double)res->tokens);
done:
  fclose(f);
  free(buf); free(pend); free(win);
  return rc;
}
"""

PPL_MAIN = r"""/* generated by caten_lab.workflow.perplexity: a command-line front end of lib@P@ */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "@P@.h"

int main(int argc, char **argv) {
  const char *weights = NULL, *text = NULL;
  long long window = 0, chunk = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--weights")) weights = argv[i + 1];
    else if (!strcmp(argv[i], "--text")) text = argv[i + 1];
    else if (!strcmp(argv[i], "--window")) window = atoll(argv[i + 1]);
    else if (!strcmp(argv[i], "--chunk")) chunk = atoll(argv[i + 1]);
    else { fprintf(stderr, "unknown option %s\n", argv[i]); return 1; }
  }
  if (!weights || !text) {
    fprintf(stderr, "usage: %s --weights PATH --text FILE [--window N] [--chunk BYTES]\n", argv[0]);
    return 1;
  }
  int err = 0;
  @P@_ctx *ctx = @P@_init(weights, NULL, NULL, &err);
  if (!ctx) { fprintf(stderr, "error (%s): %s\n", @P@_error_name(err), @P@_last_error(NULL)); return 2; }
  @P@_result r;
  int rc = @P@_evaluate(ctx, text, window, chunk, &r);
  if (rc) { fprintf(stderr, "error (%s): %s\n", @P@_error_name(rc), @P@_last_error(ctx)); @P@_free(ctx); return 2; }
  printf("perplexity %.17g\ntokens %lld\nnll %.17g\nwindows %lld\n", r.perplexity, (long long)r.tokens, r.nll_sum, (long long)r.windows);
  @P@_free(ctx);
  return 0;
}
"""


def export_perplexity(wf: PerplexityWorkflow, directory: str | os.PathLike) -> Exported:
    """``export()`` for a :class:`PerplexityWorkflow`."""
    from caten_lab.workflow.perplexity_actions import chunk_end, next_window, window_nll

    t0 = time.perf_counter()
    out = Path(directory).resolve()
    out.mkdir(parents=True, exist_ok=True)
    name = wf.name
    wf.runner.compile()
    units, glue = model_units(wf.runner, wf.tokenizer, wf.model_dir, out, name)
    units["ppl_chunk"] = render_c(chunk_end).source
    units["ppl_window"] = render_c(next_window).source
    units["ppl_nll"] = render_c(window_nll).source
    glue += "\n#include <math.h>\n"
    glue += action_wrapper(
        chunk_end,
        "ct_chunk_call",
        "uint8_t *buf, int64_t n, int32_t last, int64_t *err",
        {"buf": ("buf", ["n"]), "n": "n", "last": "last"},
        ret="int64_t",
    )
    glue += action_wrapper(
        next_window,
        "ct_window_call",
        "int32_t *tokens, int64_t n_tokens, int64_t start, int64_t window, int32_t *out, "
        "int64_t out_len, int64_t *err",
        {
            "tokens": ("tokens", ["n_tokens"]),
            "n_tokens": "n_tokens",
            "start": "start",
            "window": "window",
            "out": ("out", ["out_len"]),
        },
        ret="int64_t",
    )
    glue += action_wrapper(
        window_nll,
        "ct_nll_call",
        "float *logits, int64_t s, int32_t *tokens, int64_t n, int64_t *err",
        {"logits": ("logits", ["s", "CT_VOCAB"]), "tokens": ("tokens", ["n"]), "n": "n"},
        ret="double",
    )
    glue += _subst(PPL_C, name)
    units[f"{name}_workflow"] = glue
    header = header_text(name, PPL_HEADER, wf.runner.weight_format)
    gen_s = time.perf_counter() - t0
    res = build(out, name, units, _subst(PPL_MAIN, name), header)
    res.timings["generate_c"] = gen_s
    return res
