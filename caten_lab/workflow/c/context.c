/* caten_lab exported library: the context (model buffers + tokenizer tables), init / free / errors,
   and the tokenizer entry points. The tokenizer actions are called by their exported names with the
   arguments of their signatures (array: pointer then one int64 per dimension; err last): the export
   checks those signatures against C_CALLS of caten_lab/workflow/model_tables.py, and their prototypes
   (actions.h) come from the action compiler. */

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

API const char *@P@_error_name(int code) {
  switch (code) {
    case @U@_OK: return "ok";
    case @U@_ERR_IO: return "io";
    case @U@_ERR_FORMAT: return "format";
    case @U@_ERR_MISMATCH: return "mismatch";
    case @U@_ERR_TOKENIZER: return "tokenizer";
    case @U@_ERR_ARGUMENT: return "argument";
    case @U@_ERR_CONTEXT: return "context";
    case @U@_ERR_MEMORY: return "memory";
    case @U@_ERR_RUNTIME: return "runtime";
  }
  return "unknown";
}

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
  ct_tables_linked(&ctx->tok);
  if (vocab_path) {
    int ok = 0;
    uint64_t h = ct_fnv64_file(vocab_path, &ok);
    if (!ok) { ct_fail(ct_init_error, "%s: cannot read the vocabulary file (%s)", vocab_path, strerror(errno)); rc = @U@_ERR_IO; goto fail; }
    if (h != CT_VOCAB_HASH) {  /* not the exported vocabulary: build the tables from the file */
      ct_tables_free(&ctx->tok);
      rc = ct_tables_from_vocab(&ctx->tok, vocab_path, ct_init_error);
      if (rc) goto fail;
    }
  }
  if (merges_path) { rc = ct_check_merges(merges_path, &ctx->tok, ct_init_error); if (rc) goto fail; }
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
  ctx->dec_cap = 1;
  for (int64_t i = 0; i < ctx->tok.n_vocab; i++) {
    int64_t l = ctx->tok.offsets[i + 1] - ctx->tok.offsets[i];
    if (l > ctx->dec_cap) ctx->dec_cap = l;
  }
  ctx->dec_ids = malloc(sizeof(int32_t) * 4);
  ctx->dec_out = malloc((size_t)ctx->dec_cap + 1);
  if (!ctx->dec_ids || !ctx->dec_out) { ct_fail(ct_init_error, "out of memory"); rc = @U@_ERR_MEMORY; goto fail; }
  return ctx;
fail:
  @P@_free(ctx);
  if (err) *err = rc;
  return NULL;
}

/* Byte-level BPE of n bytes (the gpt2_encode action); *ids is malloc'd. */
static int ct_encode(@P@_ctx *ctx, const uint8_t *text, int64_t n, int32_t **ids, int64_t *count) {
  *ids = NULL; *count = 0;
  if (n > INT32_MAX / 4) { ct_fail(ctx->msg, "text of %lld bytes is too long", (long long)n); return @U@_ERR_ARGUMENT; }
  int64_t n1 = n + 1;
  int32_t *char_start = malloc(sizeof(int32_t) * n1), *sym = malloc(sizeof(int32_t) * n1);
  int32_t *rank = malloc(sizeof(int32_t) * n1), *res = malloc(sizeof(int32_t) * n1);
  int32_t *out = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
  uint8_t *char_cls = malloc(n1);
  int64_t *heap = malloc(sizeof(int64_t) * (3 * n + 3));
  int rc = @U@_OK;
  if (!char_start || !sym || !rank || !res || !out || !char_cls || !heap) { ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  if (n > 0) {
    const ct_tables *T = &ctx->tok;
    int64_t aerr[4] = {0};
    int32_t got = caten_action_gpt2_encode(
        (uint8_t *)text, n, (int32_t)n,
        (int32_t *)ct_tok_stage1, ct_tok_stage1_len, (uint8_t *)ct_tok_stage2, ct_tok_stage2_len,
        (int32_t *)T->byte_ids, T->byte_ids_len, (int32_t *)T->vslots, T->vslots_len, T->vmask,
        (int32_t *)T->voffsets, T->voffsets_len, (uint8_t *)T->vdata, T->vdata_len, (int32_t)T->whole_lookup,
        (int32_t *)T->pleft, T->pleft_len, (int32_t *)T->pright, T->pright_len,
        (int32_t *)T->prank, T->prank_len, (int32_t *)T->presult, T->presult_len, T->pmask,
        char_start, n1, char_cls, n1, sym, n1, rank, n1, res, n1, heap, 3 * n + 3, out, n, aerr);
    if (aerr[0]) { ct_fail(ctx->msg, "tokenizer run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]); rc = @U@_ERR_RUNTIME; goto done; }
    *count = got;
  }
  *ids = out; out = NULL;
done:
  free(char_start); free(sym); free(rank); free(res); free(out); free(char_cls); free(heap);
  return rc;
}

/* The bytes of one token (the tokens_to_bytes action). */
static int64_t ct_decode1(@P@_ctx *ctx, int32_t tok) {
  const ct_tables *T = &ctx->tok;
  int64_t aerr[4] = {0};
  ctx->dec_ids[0] = tok;
  int32_t n = caten_action_tokens_to_bytes(ctx->dec_ids, 1, 1, (int32_t *)T->offsets, T->offsets_len,
                                           (uint8_t *)T->data, T->data_len, (int32_t)T->n_vocab,
                                           ctx->dec_out, ctx->dec_cap + 1, aerr);
  if (aerr[0] || n < 0) return 0;
  ctx->dec_out[n] = 0;
  return n;
}

API int @P@_tokenize(@P@_ctx *ctx, const char *text, int32_t *ids, int64_t cap, int64_t *count) {
  if (!ctx || !text) return @U@_ERR_ARGUMENT;
  if (!ids && cap > 0) { ct_fail(ctx->msg, "ids is NULL but cap is %lld", (long long)cap); return @U@_ERR_ARGUMENT; }
  int32_t *all; int64_t n;
  int rc = ct_encode(ctx, (const uint8_t *)text, (int64_t)strlen(text), &all, &n);
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
