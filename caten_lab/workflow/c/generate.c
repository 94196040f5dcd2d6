
/* ------------------------------------------------------------------ the generation API
   The host actions the generation-loop action calls (see workflow/generation.py), and
   @P@_generate around it. Part of lib@P@ (caten_lab/workflow/c/generate.c, @P@ = the API prefix). */
static _Thread_local struct { @P@_ctx *ctx; @P@_token_callback cb; void *user; int rc; int stopped; int64_t emitted; } ct_gen;

int32_t host_model_forward(int32_t *tokens, int64_t tokens_len, int64_t n, int64_t pos, float *logits, int64_t vocab, int64_t *err) {
  (void)err;
  if (n > tokens_len || vocab != CT_VOCAB) { ct_fail(ct_gen.ctx->msg, "model_forward: bad arguments"); return @U@_ERR_ARGUMENT; }
  int rc = ct_forward(ct_gen.ctx, tokens, n, pos);
  if (rc) return rc;
  const float *out = (const float *)ct_gen.ctx->m.bufs[CT_OUT_BUF];
  if (logits != out) memcpy(logits, out, sizeof(float) * CT_VOCAB);
  return @U@_OK;
}

int32_t host_emit_token(int32_t token, int64_t step, int64_t *err) {
  (void)step; (void)err;
  int64_t len = ct_decode1(ct_gen.ctx, token);
  ct_gen.emitted++;
  if (ct_gen.cb && ct_gen.cb(token, (const char *)ct_gen.ctx->dec_out, (size_t)len, ct_gen.user)) { ct_gen.stopped = 1; return 1; }
  return 0;
}

API void @P@_default_options(@P@_options *o) {
  o->max_new_tokens = 50;
  o->temperature = 0.0;
  o->top_k = 0;
  o->top_p = 1.0;
  o->repetition_penalty = 1.0;
  o->seed = 0;
  o->stop_at_eos = 1;
}

API const char *@P@_stop_reason_name(int reason) {
  switch (reason) {
    case @U@_STOP_NONE: return "none";
    case @U@_STOP_EOS: return "eos";
    case @U@_STOP_MAX_TOKENS: return "max_tokens";
    case @U@_STOP_CONTEXT_LIMIT: return "context_limit";
    case @U@_STOP_CALLBACK: return "callback";
    case @U@_STOP_ERROR: return "error";
  }
  return "unknown";
}

API @P@_stop_reason @P@_last_stop(const @P@_ctx *ctx, int64_t *n_generated) {
  if (n_generated) *n_generated = ctx ? ctx->n_generated : 0;
  return ctx ? (@P@_stop_reason)ctx->stop_reason : @U@_STOP_NONE;
}

/* Why generate_loop returned after `got` tokens: its break conditions, in its order. */
static int ct_stop_reason(const @P@_options *o, const int32_t *history, int64_t n_prompt, int64_t got) {
  if (ct_gen.stopped) return @U@_STOP_CALLBACK;
  if (got > 0 && o->stop_at_eos)
    for (int64_t s = 0; s < CT_NSTOPS; s++)
      if (history[n_prompt + got - 1] == ct_m_stops[s]) return @U@_STOP_EOS;
  if (got == o->max_new_tokens) return @U@_STOP_MAX_TOKENS;
  return @U@_STOP_CONTEXT_LIMIT;
}

/* the options checked: @U@_OK, or @U@_ERR_ARGUMENT with the reason */
static int ct_check_options(@P@_ctx *ctx, const @P@_options *opts, @P@_options *o) {
  if (opts) *o = *opts; else @P@_default_options(o);
  if (!(o->temperature >= 0)) { ct_fail(ctx->msg, "temperature must be >= 0, got %g", o->temperature); return @U@_ERR_ARGUMENT; }
  if (o->top_k < 0) { ct_fail(ctx->msg, "top_k must be >= 0 (0 disables it), got %d", o->top_k); return @U@_ERR_ARGUMENT; }
  if (!(o->top_p > 0 && o->top_p <= 1)) { ct_fail(ctx->msg, "top_p must be in (0, 1], got %g", o->top_p); return @U@_ERR_ARGUMENT; }
  if (!(o->repetition_penalty > 0)) { ct_fail(ctx->msg, "repetition_penalty must be > 0, got %g", o->repetition_penalty); return @U@_ERR_ARGUMENT; }
  if (o->max_new_tokens < 0) { ct_fail(ctx->msg, "max_new_tokens must be >= 0, got %d", o->max_new_tokens); return @U@_ERR_ARGUMENT; }
  return @U@_OK;
}

static int ct_generate_ids(@P@_ctx *ctx, const int32_t *ids, int64_t n, const @P@_options *opts, @P@_token_callback cb, void *user);

API int @P@_generate(@P@_ctx *ctx, const char *prompt, const @P@_options *opts, @P@_token_callback cb, void *user) {
  if (!ctx) return @U@_ERR_ARGUMENT;
  ctx->stop_reason = @U@_STOP_NONE;
  ctx->n_generated = 0;
  @P@_options o;
  if (!prompt) { ct_fail(ctx->msg, "the prompt is NULL"); return @U@_ERR_ARGUMENT; }
  int rc = ct_check_options(ctx, opts, &o);
  if (rc) return rc;
  int32_t *ids; int64_t n;
  rc = ct_tok_encode(&ctx->tok, (const uint8_t *)prompt, (int64_t)strlen(prompt), 1, &ids, &n, ctx->msg);
  if (rc) return rc;
  rc = ct_generate_ids(ctx, ids, n, &o, cb, user);
  free(ids);
  return rc;
}

API int @P@_generate_ids(@P@_ctx *ctx, const int32_t *ids, int64_t n, const @P@_options *opts, @P@_token_callback cb, void *user) {
  if (!ctx) return @U@_ERR_ARGUMENT;
  if (!ids && n > 0) { ct_fail(ctx->msg, "ids is NULL but n is %lld", (long long)n); return @U@_ERR_ARGUMENT; }
  return ct_generate_ids(ctx, ids, n, opts, cb, user);
}

/* sample after the prompt ids[0:n] (not owned) */
static int ct_generate_ids(@P@_ctx *ctx, const int32_t *ids, int64_t n, const @P@_options *opts, @P@_token_callback cb, void *user) {
  ctx->stop_reason = @U@_STOP_NONE;
  ctx->n_generated = 0;
  @P@_options o;
  int rc = ct_check_options(ctx, opts, &o);
  if (rc) return rc;
  if (n <= 0) { ct_fail(ctx->msg, "the prompt is empty: pass at least one character"); return @U@_ERR_ARGUMENT; }
  if (n > CT_N_CTX) { ct_fail(ctx->msg, "context limit: the prompt has %lld tokens, the context holds %d", (long long)n, CT_N_CTX); return @U@_ERR_CONTEXT; }
  /* at most CT_N_CTX - n + 1 tokens fit after the prompt: the history never needs more */
  int64_t max_new = o.max_new_tokens, fit = CT_N_CTX - n + 1;
  int64_t cap = n + (max_new < fit ? max_new : fit) + 1;
  int32_t *history = malloc(sizeof(int32_t) * cap);
  double *x = malloc(sizeof(double) * CT_VOCAB), *p = malloc(sizeof(double) * CT_VOCAB);
  int32_t *order = malloc(sizeof(int32_t) * CT_VOCAB);
  uint8_t *seen = calloc(CT_VOCAB, 1);
  int64_t st[2] = {0, 0};
  if (!history || !x || !p || !order || !seen) { ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  ct_reset_states(ctx);
  ct_gen.ctx = ctx; ct_gen.cb = cb; ct_gen.user = user; ct_gen.rc = @U@_OK; ct_gen.stopped = 0; ct_gen.emitted = 0;
  {
    int64_t aerr[4] = {0};
    int32_t one[1] = {0};
    /* the generation-loop action (workflow/generation.py), by its signature (C_CALLS of model_tables.py) */
    int64_t got = caten_action_generate_loop(
        (int32_t *)ids, n, n, max_new, CT_N_CTX, (int32_t *)ct_m_stops, ct_m_stops_len, CT_NSTOPS, o.stop_at_eos ? 1 : 0,
        (float *)ctx->m.bufs[CT_OUT_BUF], CT_VOCAB,
        history, cap, one, 1, o.temperature, o.top_k, o.top_p, o.repetition_penalty,
        (int64_t)(o.seed >> 32), (int64_t)(o.seed & 0xFFFFFFFFu),
        x, CT_VOCAB, p, CT_VOCAB, order, CT_VOCAB, seen, CT_VOCAB, st, 2, aerr);
    ctx->n_generated = ct_gen.emitted;
    if (aerr[0]) { ct_fail(ctx->msg, "generation loop run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]); rc = @U@_ERR_RUNTIME; }
    else if (got < 0) rc = (int)-got;
    if (rc) ctx->stop_reason = ct_gen.emitted > 0 ? @U@_STOP_ERROR : @U@_STOP_NONE;
    else ctx->stop_reason = ct_stop_reason(&o, history, n, got);
  }
  ct_gen.ctx = NULL;
done:
  free(history); free(x); free(p); free(order); free(seen);
  return rc;
}
