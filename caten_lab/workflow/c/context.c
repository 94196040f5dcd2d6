/* caten_lab exported library: the context (model buffers + tokenizer tables), init / free / errors,
   and the tokenizer entry points. The tokenizer is c/tok_gpt2.c (a GPT-2 vocabulary) or c/tok_gguf.c
   (a GGUF file's), included before this file as tokenizer.c: both give ct_tok_open, ct_tok_max_piece,
   ct_tok_encode and ct_tok_decode1 over their ct_tables. */

struct @P@_ctx {
  ct_model m;
  ct_tables tok;
  char msg[1024];
  int32_t *dec_ids;
  uint8_t *dec_out;
  int64_t dec_cap;
  int stop_reason;        /* @P@_stop_reason of the last @P@_generate (c/generate.c) */
  int64_t n_generated;
};

API const char *@P@_last_error(const @P@_ctx *ctx) { return ctx ? ctx->msg : ct_init_error; }

API const char *@P@_error_name(int code) { return ct_error_name(code); }
_Static_assert(@U@_ERR_TOKENIZER == 4 && @U@_ERR_ARGUMENT == 5 && @U@_ERR_CONTEXT == 6 && @U@_ERR_RUNTIME == 8,
               "the codes ct_error_name (export_head.c) names");

API int64_t @P@_context_length(const @P@_ctx *ctx) { (void)ctx; return CT_N_CTX; }
API const char *@P@_weight_format(void) { return @U@_WEIGHT_FORMAT; }
API int64_t @P@_vocab_size(const @P@_ctx *ctx) { (void)ctx; return CT_VOCAB; }

API void @P@_free(@P@_ctx *ctx) {
  if (!ctx) return;
  ct_model_free(&ctx->m);
  ct_tables_free(&ctx->tok);
  free(ctx->dec_ids);
  free(ctx->dec_out);
  free(ctx);
}

API @P@_ctx *@P@_init(const char *weights_path, const char *vocab_path, const char *merges_path, int *err) {
  int rc;
  char path[4096];
  @P@_ctx *ctx = NULL;
  if (err) *err = @U@_OK;
  ct_init_error[0] = 0;
  if (!weights_path) { ct_fail(ct_init_error, "weights_path is NULL"); rc = @U@_ERR_ARGUMENT; goto fail; }
  snprintf(path, sizeof path, "%s", weights_path);
  if (CT_SOURCE == 0) {
    size_t n = strlen(path);
    if (n > 0 && path[n - 1] == '/') path[--n] = 0;
    char cand[4096];  /* a directory: use its model.safetensors */
    snprintf(cand, sizeof cand, "%s/model.safetensors", path);
    FILE *probe = fopen(cand, "rb");
    if (probe) { fclose(probe); snprintf(path, sizeof path, "%s", cand); }
  }
  ctx = calloc(1, sizeof *ctx);
  if (!ctx) { ct_fail(ct_init_error, "out of memory"); rc = @U@_ERR_MEMORY; goto fail; }
  rc = ct_tok_open(&ctx->tok, vocab_path, merges_path, ct_init_error);  /* c/tok_gpt2.c or c/tok_gguf.c */
  if (rc) goto fail;
  rc = ct_model_load(&ctx->m, path, ct_init_error);
  if (rc) goto fail;
  if (CT_SOURCE == 1 && ct_m_tok_nkeys > 0) {  /* the tokenizer linked in is the file's (tokenizer_check_tables) */
    const char *keys[64];
    int nk = 0;
    for (const char *k = (const char *)ct_m_tok_keys; nk < ct_m_tok_nkeys && nk < 64; k += strlen(k) + 1) keys[nk++] = k;
    if (ct_gguf_metadata_hash(&ctx->m.gguf, keys, nk) != (uint64_t)ct_m_tok_hash[0]) {
      ct_fail(ct_init_error, "%s: the file's tokenizer (%s ...) differs from the one the library was exported with", path, keys[0]);
      rc = @U@_ERR_TOKENIZER;
      goto fail;
    }
  }
  ctx->dec_cap = ct_tok_max_piece(&ctx->tok);
  ctx->dec_ids = malloc(sizeof(int32_t) * 4);
  ctx->dec_out = malloc((size_t)ctx->dec_cap + 1);
  if (!ctx->dec_ids || !ctx->dec_out) { ct_fail(ct_init_error, "out of memory"); rc = @U@_ERR_MEMORY; goto fail; }
  return ctx;
fail:
  @P@_free(ctx);
  if (err) *err = rc;
  return NULL;
}

/* The token ids of n bytes of text (no special tokens added); *ids is malloc'd. */
static int ct_encode(@P@_ctx *ctx, const uint8_t *text, int64_t n, int32_t **ids, int64_t *count) {
  return ct_tok_encode(&ctx->tok, text, n, 0, ids, count, ctx->msg);
}

/* The bytes of one token into ctx->dec_out (NUL-terminated); their count. */
static int64_t ct_decode1(@P@_ctx *ctx, int32_t tok) {
  int64_t n = ct_tok_decode1(&ctx->tok, tok, ctx->dec_ids, ctx->dec_out, ctx->dec_cap + 1);
  ctx->dec_out[n] = 0;
  return n;
}

API int @P@_tokenize(@P@_ctx *ctx, const char *text, int32_t *ids, int64_t cap, int64_t *count) {
  if (!ctx || !text) return @U@_ERR_ARGUMENT;
  if (!ids && cap > 0) { ct_fail(ctx->msg, "ids is NULL but cap is %lld", (long long)cap); return @U@_ERR_ARGUMENT; }
  int32_t *all; int64_t n;
  int rc = ct_tok_encode(&ctx->tok, (const uint8_t *)text, (int64_t)strlen(text), 1, &all, &n, ctx->msg);
  if (rc) return rc;
  if (count) *count = n;
  for (int64_t i = 0; i < n && i < cap; i++) ids[i] = all[i];
  free(all);
  return @U@_OK;
}

/* Run tokens ids[0:n] at positions pos.. through the model. */
static int ct_forward(@P@_ctx *ctx, const int32_t *ids, int64_t n, int64_t pos) {
  if (pos + n > CT_N_CTX) {
    ct_fail(ctx->msg, "context limit: positions %lld..%lld do not fit the context of %d tokens", (long long)pos, (long long)(pos + n - 1), CT_N_CTX);
    return @U@_ERR_CONTEXT;
  }
  int64_t *tokens = (int64_t *)ctx->m.bufs[CT_TOKENS_BUF];
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= CT_VOCAB) { ct_fail(ctx->msg, "token id %d outside the vocabulary", ids[i]); return @U@_ERR_ARGUMENT; }
    tokens[i] = ids[i];
  }
  int64_t sym[CT_SYM_SIZE];
  ct_set_symbols(sym, n, pos);
  return ct_model_run(&ctx->m, sym, ctx->msg);
}

static void ct_reset_states(@P@_ctx *ctx) {
  int64_t sym[CT_SYM_SIZE];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++)
    if (ct_kind[b] == 2) memset(ctx->m.bufs[b], 0, (size_t)(ct_elems(b, sym) * ct_itemsize[b]));
}
