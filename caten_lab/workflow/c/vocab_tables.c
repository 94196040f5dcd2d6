/* caten_lab exported loader: the GPT-2 BPE tables of the exported library built from a vocabulary file
   (after ct_vocab_check), and the merges check. The same construction as
   workflow/tokenizers/bpe.py (build_bpe_tables, "ranks" semantics): the vocabulary decides which
   pairs merge, ids are ranks. Needs vocab_check.c and the generated ct_tables struct / CT_VOCAB. */
static uint32_t ct_bytes_hash(const uint8_t *p, int64_t n) {
  uint64_t h = 2166136261u;
  for (int64_t i = 0; i < n; i++) h = ((h ^ p[i]) * 16777619u) & 0xFFFFFFFFu;
  return (uint32_t)(h ^ (h >> 15));
}

static int64_t ct_table_size(int64_t n) { int64_t s = 16; while (s < 2 * n) s *= 2; return s; }

static int32_t ct_find(const ct_tables *T, const uint8_t *p, int64_t n) {
  int64_t slot = ct_bytes_hash(p, n) & T->vmask;
  while (T->vslots[slot] >= 0) {
    int32_t id = T->vslots[slot];
    int64_t a = T->voffsets[id], len = T->voffsets[id + 1] - a;
    if (len == n && memcmp(T->vdata + a, p, (size_t)n) == 0) return id;
    slot = (slot + 1) & T->vmask;
  }
  return -1;
}

static char *ct_read_all(const char *path, int64_t *size, char *msg, const char *what) {
  FILE *f = fopen(path, "rb");
  if (!f) { ct_fail(msg, "%s: cannot open the %s file (%s)", path, what, strerror(errno)); return NULL; }
  char *buf = NULL; int64_t n = 0, cap = 0; size_t got;
  char chunk[65536];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (n + (int64_t)got + 1 > cap) {
      cap = (n + (int64_t)got + 1) * 2;
      char *nb = realloc(buf, (size_t)cap);
      if (!nb) { free(buf); fclose(f); ct_fail(msg, "out of memory reading %s", path); return NULL; }
      buf = nb;
    }
    memcpy(buf + n, chunk, got); n += (int64_t)got;
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) { free(buf); ct_fail(msg, "%s: read error", path); return NULL; }
  if (!buf) { buf = malloc(1); if (!buf) return NULL; }
  buf[n] = 0;
  *size = n;
  return buf;
}

/* merges.txt / vocab.bpe (rule MERGES, as caten_lab/formats/vocab_check.py check_merges): strict UTF-8;
   every line but an optional '#version' first line and empty lines is "left right" (one space), and
   left, right and left+right are ordinary tokens of the tables T. */
static int ct_check_merges(const char *path, const ct_tables *T, char *msg) {
  int64_t n;
  ct_rule = CT_RULE_NONE;
  char *t = ct_read_all(path, &n, msg, "merges");
  if (!t) return CT_ERR_IO;
  uint8_t *buf = malloc((size_t)n + 1);
  int rc = CT_ERR_TOKENIZER;
  if (!buf) { ct_fail(msg, "out of memory"); rc = CT_ERR_MEMORY; goto out; }
  if (!cj_utf8_valid((const unsigned char *)t, (size_t)n)) { ct_reject(msg, CT_RULE_MERGES, "%s: the merges file is not UTF-8", path); goto out; }
  int64_t line = 1, start = 0;
  for (int64_t i = 0; i <= n; i++) {
    if (i < n && t[i] != '\n') continue;
    int64_t len = i - start;
    if (len > 0 && !(line == 1 && len >= 8 && !strncmp(t + start, "#version", 8))) {
      int spaces = 0;
      int64_t mid = -1;
      for (int64_t k = start; k < i; k++) if (t[k] == ' ') { spaces++; mid = k; }
      if (spaces != 1) {
        ct_reject(msg, CT_RULE_MERGES, "%s:%lld: malformed merge rule (each line is 'left right')", path, (long long)line);
        goto out;
      }
      int64_t a = ct_alphabet_bytes(t + start, mid - start, buf);
      int64_t b = a < 0 ? -1 : ct_alphabet_bytes(t + mid + 1, i - mid - 1, buf + a);
      if (a < 0 || b < 0 || ct_find(T, buf, a) < 0 || ct_find(T, buf + a, b) < 0 || ct_find(T, buf, a + b) < 0) {
        ct_reject(msg, CT_RULE_MERGES, "%s:%lld: the merge rule names a token the vocabulary lacks", path, (long long)line);
        goto out;
      }
    }
    line++;
    start = i + 1;
  }
  rc = CT_OK;
out:
  free(buf);
  free(t);
  return rc;
}

static void ct_tables_free(ct_tables *T) {
  for (int k = 0; k < 8; k++) free(T->owned[k]);
  memset(T, 0, sizeof *T);
}

/* Build the tables of a vocab.json / encoder.json: {"token": id, ...} in GPT-2's byte alphabet, checked by
   ct_vocab_check first (every id 0..CT_VOCAB-1 once, every token in the alphabet). */
static int ct_tables_from_vocab(ct_tables *T, const char *path, char *msg) {
  int64_t size;
  char *text = ct_read_all(path, &size, msg, "vocabulary");
  if (!text) return CT_ERR_IO;
  int64_t n = CT_VOCAB;
  int rc = ct_vocab_check(text, (size_t)size, n, path, msg);  /* nothing is built from a bad file */
  if (rc) { free(text); return rc; }
  rc = CT_ERR_TOKENIZER;
  int32_t *len = calloc((size_t)n, sizeof(int32_t));
  uint8_t **item = calloc((size_t)n, sizeof(uint8_t *));
  uint8_t *hashed = calloc((size_t)n, 1);
  char *key = malloc((size_t)size + 1);
  if (!len || !item || !hashed || !key) { ct_fail(msg, "out of memory"); rc = CT_ERR_MEMORY; goto out; }
  ct_json p = {text, (size_t)size, 0, 0};  /* checked by ct_vocab_check: read without re-checking */
  cj_eat(&p, '{');
  if (!cj_eat(&p, '}')) {
    for (;;) {
      int64_t id = 0;
      size_t klen = 0;
      cj_ws(&p);
      cj_str(&p, key, (size_t)size, &klen);
      cj_eat(&p, ':');
      cj_uint62(&p, &id);
      uint8_t *bytes = malloc(klen + 1);
      if (!bytes) { ct_fail(msg, "out of memory"); rc = CT_ERR_MEMORY; goto out; }
      int special = klen == sizeof CT_SPECIAL_TOKEN - 1 && !memcmp(key, CT_SPECIAL_TOKEN, klen);
      int64_t m = (int64_t)klen;
      if (special) memcpy(bytes, key, klen);
      else m = ct_alphabet_bytes(key, (int64_t)klen, bytes);
      item[id] = bytes; len[id] = (int32_t)m; hashed[id] = (uint8_t)!special;
      if (cj_eat(&p, ',')) continue;
      break;
    }
  }
  {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += len[i];
    int64_t size_v = ct_table_size(n);
    int32_t *offsets = malloc(sizeof(int32_t) * (size_t)(n + 1));
    uint8_t *data = malloc((size_t)(total > 0 ? total : 1));
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)size_v);
    int32_t *byte_ids = malloc(sizeof(int32_t) * 256);
    T->owned[0] = offsets; T->owned[1] = data; T->owned[2] = slots; T->owned[3] = byte_ids;
    if (!offsets || !data || !slots || !byte_ids) { ct_fail(msg, "out of memory"); rc = CT_ERR_MEMORY; goto out; }
    offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
      if (len[i]) memcpy(data + offsets[i], item[i], (size_t)len[i]);
      offsets[i + 1] = offsets[i] + len[i];
    }
    for (int64_t s = 0; s < size_v; s++) slots[s] = -1;
    T->voffsets = T->offsets = offsets; T->voffsets_len = T->offsets_len = n + 1;
    T->vdata = T->data = data; T->vdata_len = T->data_len = total > 0 ? total : 1;
    T->vslots = slots; T->vslots_len = size_v; T->vmask = size_v - 1;
    T->n_vocab = n; T->whole_lookup = 1;
    for (int64_t i = 0; i < n; i++) {
      if (!hashed[i] || ct_find(T, data + offsets[i], len[i]) >= 0) continue;  /* first equal item wins */
      int64_t slot = ct_bytes_hash(data + offsets[i], len[i]) & T->vmask;
      while (slots[slot] >= 0) slot = (slot + 1) & T->vmask;
      slots[slot] = (int32_t)i;
    }
    for (int b = 0; b < 256; b++) {
      uint8_t one = (uint8_t)b;
      byte_ids[b] = ct_find(T, &one, 1);
      if (byte_ids[b] < 0) { ct_fail(msg, "%s: the vocabulary lacks the single-byte token for byte %d", path, b); goto out; }
    }
    T->byte_ids = byte_ids; T->byte_ids_len = 256;
    /* pairs: every split of a token into two tokens merges, with the token's id as rank */
    int64_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
      int64_t size_p = ct_table_size(count);
      int32_t *pl = NULL, *pr = NULL, *pk = NULL, *pv = NULL;
      if (pass == 1) {
        pl = malloc(sizeof(int32_t) * (size_t)size_p); pr = calloc((size_t)size_p, sizeof(int32_t));
        pk = calloc((size_t)size_p, sizeof(int32_t)); pv = calloc((size_t)size_p, sizeof(int32_t));
        T->owned[4] = pl; T->owned[5] = pr; T->owned[6] = pk; T->owned[7] = pv;
        if (!pl || !pr || !pk || !pv) { ct_fail(msg, "out of memory"); rc = CT_ERR_MEMORY; goto out; }
        for (int64_t s = 0; s < size_p; s++) pl[s] = -1;
        T->pleft = pl; T->pright = pr; T->prank = pk; T->presult = pv;
        T->pleft_len = T->pright_len = T->prank_len = T->presult_len = size_p;
        T->pmask = size_p - 1;
      }
      for (int64_t tid = 0; tid < n; tid++) {
        if (!hashed[tid]) continue;
        const uint8_t *tok = data + offsets[tid];
        for (int64_t k = 1; k < len[tid]; k++) {
          int32_t a = ct_find(T, tok, k);
          if (a < 0) continue;
          int32_t b = ct_find(T, tok + k, len[tid] - k);
          if (b < 0) continue;
          if (pass == 0) { count++; continue; }
          int64_t h = (int64_t)a * 1000003 + (int64_t)b * 19349663;
          int64_t slot = (h ^ (h >> 15)) & T->pmask;
          while (pl[slot] >= 0 && !(pl[slot] == a && pr[slot] == b)) slot = (slot + 1) & T->pmask;
          if (pl[slot] >= 0) continue;  /* a repeated pair keeps its first (lowest) rank */
          pl[slot] = a; pr[slot] = b; pk[slot] = (int32_t)tid; pv[slot] = (int32_t)tid;
        }
      }
    }
  }
  rc = CT_OK;
out:
  if (item) for (int64_t i = 0; i < n; i++) free(item[i]);
  free(item); free(len); free(hashed); free(key); free(text);
  return rc;
}
