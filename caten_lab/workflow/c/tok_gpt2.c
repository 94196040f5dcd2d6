/* caten_lab exported library: the tokenizer of a GPT-2 vocabulary (vocab.json + merges.txt), as the
   context calls every tokenizer (c/context.c): ct_tok_open, ct_tok_max_piece, ct_tok_encode and
   ct_tok_decode1 over the ct_tables of tok_tables.c (the exported vocabulary linked in, or built
   from another vocab.json at init by vocab_tables.c), running the gpt2_encode and tokens_to_bytes
   actions by the arguments of their signatures (C_CALLS of caten_lab/workflow/model_tables.py). The
   GGUF tokenizer (tok_gguf.c) has the same four functions. */

/* The exported vocabulary's tables, or those of vocab_path when it is another vocabulary; merges_path
   is checked against them. */
static int ct_tok_open(ct_tables *T, const char *vocab_path, const char *merges_path, char *msg) {
  ct_tables_linked(T);
  if (vocab_path) {
    int ok = 0;
    uint64_t h = ct_fnv64_file(vocab_path, &ok);
    if (!ok) { ct_fail(msg, "%s: cannot read the vocabulary file (%s)", vocab_path, strerror(errno)); return @U@_ERR_IO; }
    if (h != CT_VOCAB_HASH) {  /* not the exported vocabulary: build the tables from the file */
      ct_tables_free(T);
      int rc = ct_tables_from_vocab(T, vocab_path, msg);
      if (rc) return rc;
    }
  }
  if (merges_path) return ct_check_merges(merges_path, T, msg);
  return @U@_OK;
}

/* The longest token's byte count. */
static int64_t ct_tok_max_piece(const ct_tables *T) {
  int64_t cap = 1;
  for (int64_t i = 0; i < T->n_vocab; i++) {
    int64_t l = T->offsets[i + 1] - T->offsets[i];
    if (l > cap) cap = l;
  }
  return cap;
}

/* Byte-level BPE of n bytes (the gpt2_encode action); *ids is malloc'd. GPT-2 adds no special tokens. */
static int ct_tok_encode(const ct_tables *T, const uint8_t *text, int64_t n, int add_special, int32_t **ids,
                         int64_t *count, char *msg) {
  (void)add_special;
  *ids = NULL; *count = 0;
  if (n > INT32_MAX / 4) { ct_fail(msg, "text of %lld bytes is too long", (long long)n); return @U@_ERR_ARGUMENT; }
  int64_t n1 = n + 1;
  int32_t *char_start = malloc(sizeof(int32_t) * n1), *sym = malloc(sizeof(int32_t) * n1);
  int32_t *rank = malloc(sizeof(int32_t) * n1), *res = malloc(sizeof(int32_t) * n1);
  int32_t *out = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
  uint8_t *char_cls = malloc(n1);
  int64_t *heap = malloc(sizeof(int64_t) * (3 * n + 3));
  int rc = @U@_OK;
  if (!char_start || !sym || !rank || !res || !out || !char_cls || !heap) { ct_fail(msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  if (n > 0) {
    int64_t aerr[4] = {0};
    int32_t got = caten_action_gpt2_encode(
        (uint8_t *)text, n, (int32_t)n,
        (int32_t *)ct_tok_stage1, ct_tok_stage1_len, (uint8_t *)ct_tok_stage2, ct_tok_stage2_len,
        (int32_t *)T->byte_ids, T->byte_ids_len, (int32_t *)T->vslots, T->vslots_len, T->vmask,
        (int32_t *)T->voffsets, T->voffsets_len, (uint8_t *)T->vdata, T->vdata_len, (int32_t)T->whole_lookup,
        (int32_t *)T->pleft, T->pleft_len, (int32_t *)T->pright, T->pright_len,
        (int32_t *)T->prank, T->prank_len, (int32_t *)T->presult, T->presult_len, T->pmask,
        char_start, n1, char_cls, n1, sym, n1, rank, n1, res, n1, heap, 3 * n + 3, out, n, aerr);
    if (aerr[0]) { ct_fail(msg, "tokenizer run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]); rc = @U@_ERR_RUNTIME; goto done; }
    *count = got;
  }
  *ids = out; out = NULL;
done:
  free(char_start); free(sym); free(rank); free(res); free(out); free(char_cls); free(heap);
  return rc;
}

/* The bytes of one token into out[0:cap] (the tokens_to_bytes action; ids1: room for one id). */
static int64_t ct_tok_decode1(const ct_tables *T, int32_t tok, int32_t *ids1, uint8_t *out, int64_t cap) {
  int64_t aerr[4] = {0};
  ids1[0] = tok;
  int32_t n = caten_action_tokens_to_bytes(ids1, 1, 1, (int32_t *)T->offsets, T->offsets_len,
                                           (uint8_t *)T->data, T->data_len, (int32_t)T->n_vocab, out, cap, aerr);
  return aerr[0] || n < 0 ? 0 : n;
}
