/* caten_lab exported library: the perplexity workflow (caten_lab/workflow/perplexity.py). The data
   loader and cross-entropy actions (perplexity_actions.py) are called by their exported names with the
   arguments of their signatures (checked by the export against C_CALLS of workflow/model_tables.py). */
static int ct_score_window(@P@_ctx *ctx, int32_t *win, int64_t n, @P@_result *res) {
  if (n < 2) return @U@_OK;
  ct_reset_states(ctx);
  int rc = ct_forward(ctx, win, n, 0);
  if (rc) return rc;
  int64_t aerr[4] = {0};
  double nll = caten_action_window_nll((float *)ctx->m.bufs[CT_OUT_BUF], n, CT_VOCAB, win, n, n, aerr);
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
    int64_t cut = caten_action_chunk_end(buf, len, len, last, aerr);
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
      int64_t w = caten_action_next_window(pend, npend, npend, start, window, win, window, aerr);
      rc = ct_score_window(ctx, win, w, res);
      if (rc) goto done;
      start += w;
    }
    memmove(pend, pend + start, sizeof(int32_t) * (size_t)(npend - start));
    npend -= start;
  }
  if (npend >= 2) {
    int64_t aerr[4] = {0};
    int64_t w = caten_action_next_window(pend, npend, npend, 0, window, win, window, aerr);
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
