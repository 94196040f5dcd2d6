
/* ------------------------------------------------------------------ chat prompts
   The token ids of a one-turn chat prompt without jinja2: the layouts of the model's chat template
   (caten_lab/workflow/chat_layout.py, packed as ct_m_chat_*: parts (kind, value, text offset, text
   length); kind 0 a special token id, 1 literal text, 2 a slot: value 0 the system message, 1 the
   user's; layout 0 with a system message, 1 without) -> text segments (the runs between special
   tokens), each tokenized on its own (ct_encode) -> the assemble_prompt action (workflow/
   prompt_actions.py) lays out the special ids and the segments' ids. Part of lib@P@. */

static int ct_chat_ids(@P@_ctx *ctx, const char *system, const char *user, int32_t **ids, int64_t *count) {
  *ids = NULL; *count = 0;
  if (!ct_m_has_chat) { ct_fail(ctx->msg, "the library was exported without a chat template (tokenizer.chat_template)"); return @U@_ERR_ARGUMENT; }
  if (!user) { ct_fail(ctx->msg, "the user message is NULL"); return @U@_ERR_ARGUMENT; }
  int layout = system ? 0 : 1;
  const int32_t *parts = ct_m_chat_parts + 4 * ct_m_chat_starts[layout];
  int64_t np = ct_m_chat_starts[layout + 1] - ct_m_chat_starts[layout];
  size_t ls = system ? strlen(system) : 0, lu = strlen(user), cap_text = 1;
  for (int64_t i = 0; i < np; i++)
    cap_text += parts[4 * i] == 1 ? (size_t)parts[4 * i + 3] : parts[4 * i] == 2 ? (parts[4 * i + 1] ? lu : ls) : 0;
  size_t k = (size_t)np + 1;
  int32_t *kinds = malloc(sizeof(int32_t) * k), *values = malloc(sizeof(int32_t) * k);
  int32_t *seg_start = malloc(sizeof(int32_t) * (k + 1));
  int64_t *lo = malloc(sizeof(int64_t) * k), *hi = malloc(sizeof(int64_t) * k);
  char *text = malloc(cap_text);
  int32_t *seg_ids = NULL, *out = NULL;
  int64_t nk = 0, nseg = 0, at = 0, total = 0;
  int rc = @U@_OK, in_seg = 0;
  if (!kinds || !values || !seg_start || !lo || !hi || !text) { ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  for (int64_t i = 0; i < np; i++) {  /* the parts -> special ids and segments of text */
    const int32_t *p = parts + 4 * i;
    if (p[0] == 0) { kinds[nk] = 0; values[nk] = p[1]; nk++; in_seg = 0; continue; }
    if (!in_seg) { kinds[nk] = 1; values[nk] = (int32_t)nseg; nk++; lo[nseg] = hi[nseg] = at; nseg++; in_seg = 1; }
    const char *src = p[0] == 1 ? (const char *)ct_m_chat_text + p[2] : p[1] ? user : system;
    size_t len = p[0] == 1 ? (size_t)p[3] : p[1] ? lu : ls;
    if (len) memcpy(text + at, src, len);
    at += (int64_t)len;
    hi[nseg - 1] = at;
  }
  seg_start[0] = 0;
  for (int64_t s = 0; s < nseg; s++) {  /* each segment tokenized on its own */
    int32_t *got; int64_t n;
    rc = ct_encode(ctx, (const uint8_t *)text + lo[s], hi[s] - lo[s], &got, &n);
    if (rc) goto done;
    int32_t *grown = realloc(seg_ids, sizeof(int32_t) * (size_t)(total + n + 1));
    if (!grown) { free(got); ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
    seg_ids = grown;
    if (n) memcpy(seg_ids + total, got, sizeof(int32_t) * (size_t)n);
    free(got);
    total += n;
    if (total > INT32_MAX) { ct_fail(ctx->msg, "the chat prompt is too long"); rc = @U@_ERR_ARGUMENT; goto done; }
    seg_start[s + 1] = (int32_t)total;
  }
  if (!seg_ids) seg_ids = malloc(sizeof(int32_t));
  int64_t cap = total + nk + 1;
  out = malloc(sizeof(int32_t) * (size_t)cap);
  if (!seg_ids || !out) { ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  {
    int64_t aerr[4] = {0};
    /* the assemble_prompt action (workflow/prompt_actions.py), by its signature (C_CALLS) */
    int64_t n = caten_action_assemble_prompt(kinds, nk, values, nk, nk, seg_ids, total > 0 ? total : 1, seg_start, nseg + 1,
                                             CT_VOCAB, out, cap, cap, aerr);
    if (aerr[0]) { ct_fail(ctx->msg, "chat prompt run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]); rc = @U@_ERR_RUNTIME; goto done; }
    if (n < 0) { ct_fail(ctx->msg, "the chat template's layout is malformed (assemble_prompt returned %lld)", (long long)n); rc = @U@_ERR_RUNTIME; goto done; }
    *ids = out; out = NULL; *count = n;
  }
done:
  free(kinds); free(values); free(seg_start); free(lo); free(hi); free(text); free(seg_ids); free(out);
  return rc;
}

API int @P@_chat_tokenize(@P@_ctx *ctx, const char *system, const char *user, int32_t *ids, int64_t cap, int64_t *count) {
  if (!ctx) return @U@_ERR_ARGUMENT;
  if (!ids && cap > 0) { ct_fail(ctx->msg, "ids is NULL but cap is %lld", (long long)cap); return @U@_ERR_ARGUMENT; }
  int32_t *all; int64_t n;
  int rc = ct_chat_ids(ctx, system, user, &all, &n);
  if (rc) return rc;
  if (count) *count = n;
  for (int64_t i = 0; i < n && i < cap; i++) ids[i] = all[i];
  free(all);
  return @U@_OK;
}

API int @P@_chat(@P@_ctx *ctx, const char *system, const char *user, const @P@_options *opts, @P@_token_callback cb, void *data) {
  if (!ctx) return @U@_ERR_ARGUMENT;
  int32_t *ids; int64_t n;
  int rc = ct_chat_ids(ctx, system, user, &ids, &n);
  if (rc) return rc;
  rc = ct_generate_ids(ctx, ids, n, opts, cb, data);
  free(ids);
  return rc;
}
