/* caten_lab exported library: the tokenizer a GGUF file's metadata describes (tokenizer.ggml.*;
   workflow/tokenizers/gguf_vocab.py), as the context calls every tokenizer (c/context.c, like
   c/tok_gpt2.c): its tables are the exported file's, linked in (tokenizer_data.h: ct_tok_<name>, the
   entry actions' table parameters by name, plus the special-token facts add_bos, bos_id, add_eos,
   eos_id). At init, c/context.c checks that the file the library reads has those tokenizer keys
   (tokenizer_check_tables); a vocabulary or merges file does not apply. Byte-level BPE runs the
   gguf_bpe_encode action, SentencePiece-style the gguf_spm_encode action (its tables hold
   score_rank); decoding runs gguf_decode, by the arguments of their signatures (C_CALLS of
   caten_lab/workflow/model_tables.py). Special-token text in the input becomes the special tokens
   (llama.cpp's parse_special), as in the Python tokenizer. */
typedef struct {
  int64_t n_vocab;
} ct_tables;

static void ct_tables_free(ct_tables *T) { (void)T; }

static int ct_tok_open(ct_tables *T, const char *vocab_path, const char *merges_path, char *msg) {
  T->n_vocab = ct_tok_n_vocab;
  if (vocab_path || merges_path) {
    ct_fail(msg, "this library's tokenizer is its GGUF file's (tokenizer.ggml.*): a %s file does not apply",
            vocab_path ? "vocabulary" : "merges");
    return @U@_ERR_ARGUMENT;
  }
  return @U@_OK;
}

static int64_t ct_tok_max_piece(const ct_tables *T) {
  int64_t cap = 1;
  for (int64_t i = 0; i < T->n_vocab; i++) {
    int64_t l = ct_tok_offsets[i + 1] - ct_tok_offsets[i];
    if (l > cap) cap = l;
  }
  return cap;
}

/* The ids of text[0:n] into out (room for n ids BPE, ct_spm_width(n) SentencePiece); their count or < 0. */
#ifdef ct_tok_score_rank
static int64_t ct_spm_width(int64_t n) { return 6 * n + 8; }  /* >= gguf_vocab's n + 2 spaces + 3 (specials + 1) + 4 */

static int64_t ct_gguf_encode(const uint8_t *text, int64_t n, int32_t *out, int64_t *aerr, char *msg) {
  int64_t w = ct_spm_width(n), seg = w;
  if (ct_tok_ws_split) {  /* pieces never cross a space: the heap holds one space-free run */
    int64_t last = -1, gap = 0;
    for (int64_t i = 0; i <= n; i++)
      if (i == n || text[i] == ' ') { if (i - last > gap) gap = i - last; last = i; }
    seg = gap + 8;
  }
  int32_t *mark = malloc(sizeof(int32_t) * (n + 1));
  uint8_t *norm = malloc(w), *frozen = malloc(w);
  int32_t *work = malloc(sizeof(int32_t) * 6 * w);
  int64_t *heap = malloc(sizeof(int64_t) * 6 * seg);
  int64_t got = -1;
  if (!mark || !norm || !frozen || !work || !heap) ct_fail(msg, "out of memory");
  else
    got = caten_action_gguf_spm_encode(
        (uint8_t *)text, n, (int32_t)n, 1, (int32_t)ct_tok_add_space_prefix,
        (int32_t *)ct_tok_vslots, ct_tok_vslots_len, ct_tok_vmask, (int32_t *)ct_tok_voffsets, ct_tok_voffsets_len,
        (uint8_t *)ct_tok_vdata, ct_tok_vdata_len, (int32_t *)ct_tok_score_rank, ct_tok_score_rank_len,
        (int32_t)ct_tok_unk_id, (int32_t *)ct_tok_byte_ids, ct_tok_byte_ids_len, (int32_t)ct_tok_ws_split,
        (int32_t *)ct_tok_uleft, ct_tok_uleft_len, (int32_t *)ct_tok_uright, ct_tok_uright_len,
        (int32_t *)ct_tok_uchild, ct_tok_uchild_len, ct_tok_umask, (int32_t *)ct_tok_unode_piece, ct_tok_unode_piece_len,
        (int32_t *)ct_tok_sids, ct_tok_sids_len, (uint8_t *)ct_tok_salways, ct_tok_salways_len, (int32_t)ct_tok_nspecial,
        mark, n + 1, norm, w, work, w, work + w, w, work + 2 * w, w, work + 3 * w, w, heap, 6 * seg,
        work + 4 * w, w, frozen, w, work + 5 * w, w, out, w, aerr);
  free(mark); free(norm); free(frozen); free(work); free(heap);
  return got;
}
#else
static int64_t ct_spm_width(int64_t n) { return n; }

static int64_t ct_gguf_encode(const uint8_t *text, int64_t n, int32_t *out, int64_t *aerr, char *msg) {
  int64_t n1 = n + 1;
  int32_t *work = malloc(sizeof(int32_t) * 5 * n1);  /* mark, char_start, sym, rank, res */
  uint8_t *char_cls = malloc(n1);
  int64_t *heap = malloc(sizeof(int64_t) * (3 * n + 3));
  int64_t got = -1;
  if (!work || !char_cls || !heap) ct_fail(msg, "out of memory");
  else
    got = caten_action_gguf_bpe_encode(
        (uint8_t *)text, n, (int32_t)n, 1,
        (int32_t *)ct_tok_stage1, ct_tok_stage1_len, (uint8_t *)ct_tok_stage2, ct_tok_stage2_len,
        (int32_t *)ct_tok_byte_ids, ct_tok_byte_ids_len, (int32_t *)ct_tok_vslots, ct_tok_vslots_len, ct_tok_vmask,
        (int32_t *)ct_tok_voffsets, ct_tok_voffsets_len, (uint8_t *)ct_tok_vdata, ct_tok_vdata_len,
        (int32_t)ct_tok_whole_lookup, (int32_t *)ct_tok_pleft, ct_tok_pleft_len, (int32_t *)ct_tok_pright,
        ct_tok_pright_len, (int32_t *)ct_tok_prank, ct_tok_prank_len, (int32_t *)ct_tok_presult, ct_tok_presult_len,
        ct_tok_pmask, (int32_t)ct_tok_pre_kind, (int32_t)ct_tok_split_digits, (int32_t)ct_tok_max_digits,
        (int32_t *)ct_tok_sids, ct_tok_sids_len, (uint8_t *)ct_tok_salways, ct_tok_salways_len, (int32_t)ct_tok_nspecial,
        work, n1, work + n1, n1, char_cls, n1, work + 2 * n1, n1, work + 3 * n1, n1, work + 4 * n1, n1,
        heap, 3 * n + 3, out, n, aerr);
  free(work); free(char_cls); free(heap);
  return got;
}
#endif

/* The ids of text[0:n] (with add_special: BOS / EOS where the file's add_bos_token / add_eos_token
   say, as GGUFTokenizer.encode); *ids is malloc'd. */
static int ct_tok_encode(const ct_tables *T, const uint8_t *text, int64_t n, int add_special, int32_t **ids,
                         int64_t *count, char *msg) {
  (void)T;
  *ids = NULL; *count = 0;
  if (n > INT32_MAX / 8) { ct_fail(msg, "text of %lld bytes is too long", (long long)n); return @U@_ERR_ARGUMENT; }
  int bos = add_special && ct_tok_add_bos && ct_tok_bos_id >= 0, eos = add_special && ct_tok_add_eos && ct_tok_eos_id >= 0;
  int32_t *out = malloc(sizeof(int32_t) * (size_t)(ct_spm_width(n) + 2));
  if (!out) { ct_fail(msg, "out of memory"); return @U@_ERR_MEMORY; }
  int64_t got = 0;
  if (n > 0) {
    int64_t aerr[4] = {0};
    got = ct_gguf_encode(text, n, out + bos, aerr, msg);
    if (got < 0) { free(out); return @U@_ERR_MEMORY; }
    if (aerr[0]) {
      ct_fail(msg, "tokenizer run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]);
      free(out);
      return @U@_ERR_RUNTIME;
    }
  }
  if (bos) out[0] = (int32_t)ct_tok_bos_id;
  if (eos) out[bos + got] = (int32_t)ct_tok_eos_id;
  *count = bos + got + eos;
  *ids = out;
  return @U@_OK;
}

/* The bytes of one token's piece into out[0:cap] (control tokens give none, as llama.cpp's
   token_to_piece when streaming: no leading space stripped). */
static int64_t ct_tok_decode1(const ct_tables *T, int32_t tok, int32_t *ids1, uint8_t *out, int64_t cap) {
  int64_t aerr[4] = {0};
  ids1[0] = tok;
  int32_t n = caten_action_gguf_decode(ids1, 1, 1, (int32_t *)ct_tok_offsets, ct_tok_offsets_len, (uint8_t *)ct_tok_data,
                                       ct_tok_data_len, (uint8_t *)ct_tok_hidden, ct_tok_hidden_len, (int32_t)T->n_vocab,
                                       0, 0, out, cap, aerr);
  return aerr[0] || n < 0 ? 0 : n;
}
