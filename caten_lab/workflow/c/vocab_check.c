/* caten_lab exported loader: a vocab.json / encoder.json checked by the rules of caten_lab/formats/rules.h
   (JSON, DUPLICATE_KEY, VOCAB_ID, VOCAB_TOKEN) in the order of caten_lab/formats/vocab_check.py, before
   any table is built. Needs json_reader.c and rules_table.c. */

static int ct_byte_of_char(uint32_t cp) {  /* inverse of GPT-2's bytes_to_unicode */
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
  if (cp < 256 || cp >= 256 + 68) return -1;
  int extra = 0;
  for (int b = 0; b < 256; b++) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) continue;
    if (256 + extra == (int)cp) return b;
    extra++;
  }
  return -1;
}

/* The bytes of a token in GPT-2's byte alphabet (s: UTF-8 or WTF-8 from escapes); -1 if a character
   is outside it. out needs n bytes. */
static int64_t ct_alphabet_bytes(const char *s, int64_t n, uint8_t *out) {
  int64_t m = 0;
  for (int64_t i = 0; i < n;) {
    unsigned char c = (unsigned char)s[i];
    uint32_t cp; int w;
    if (c < 0x80) { cp = c; w = 1; }
    else if ((c & 0xE0) == 0xC0 && i + 1 < n) { cp = ((uint32_t)(c & 0x1F) << 6) | ((unsigned char)s[i + 1] & 0x3F); w = 2; }
    else return -1;  /* 3- and 4-byte characters are all above the alphabet */
    int b = ct_byte_of_char(cp);
    if (b < 0) return -1;
    out[m++] = (uint8_t)b;
    i += w;
  }
  return m;
}

#define CT_SPECIAL_TOKEN "<|endoftext|>"

/* Check the vocabulary text[0:size] for a model of n tokens. CT_OK, or an error code with msg and
   ct_rule set. */
static int ct_vocab_check(const char *text, size_t size, int64_t n, const char *path, char *msg) {
  size_t at;
  ct_rule = CT_RULE_NONE;
  int r = cj_validate(text, size, &at);
  if (r < 0) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  if (r == CT_RULE_JSON && !cj_starts_object(text, size)) { ct_reject(msg, r, "%s: the vocabulary is not a JSON object mapping tokens to ids", path); return CT_ERR_TOKENIZER; }
  if (r == CT_RULE_JSON) { ct_reject(msg, r, "%s: the vocabulary is not valid JSON (byte %zu)", path, at); return CT_ERR_TOKENIZER; }
  if (r) { ct_reject(msg, r, "%s: a token appears twice in the vocabulary (byte %zu)", path, at); return CT_ERR_TOKENIZER; }
  uint8_t *seen = calloc((size_t)(n > 0 ? n : 1), 1);
  char *key = malloc(size + 1);
  uint8_t *bytes = malloc(size + 1);
  int have_byte[256] = {0};
  int rc = CT_ERR_TOKENIZER;
  int64_t count = 0;
  if (!seen || !key || !bytes) { ct_fail(msg, "%s: out of memory", path); rc = CT_ERR_MEMORY; goto out; }
  ct_json p = {text, size, 0, 0};
  cj_eat(&p, '{');
  if (!cj_eat(&p, '}')) {
    for (;;) {
      size_t len = 0;
      cj_ws(&p);
      cj_str(&p, key, size, &len);
      cj_eat(&p, ':');
      int64_t id = -1;
      int ok = cj_uint62(&p, &id) && id < n;
      int kl = len > 80 ? 80 : (int)len;
      if (!ok) {
        ct_reject(msg, CT_RULE_VOCAB_ID, "%s: token '%.*s' has an id that is not an integer in 0..%lld", path, kl, key, (long long)(n - 1));
        goto out;
      }
      if (seen[id]) { ct_reject(msg, CT_RULE_VOCAB_ID, "%s: id %lld is used twice (again by '%.*s')", path, (long long)id, kl, key); goto out; }
      seen[id] = 1;
      count++;
      int special = len == sizeof CT_SPECIAL_TOKEN - 1 && !memcmp(key, CT_SPECIAL_TOKEN, len);
      if (!special) {
        int64_t m = ct_alphabet_bytes(key, (int64_t)len, bytes);
        if (m < 0) {
          ct_reject(msg, CT_RULE_VOCAB_TOKEN, "%s: token '%.*s' (id %lld) is not in GPT-2's byte-level alphabet", path, kl, key, (long long)id);
          goto out;
        }
        if (m == 1) have_byte[bytes[0]] = 1;
      }
      if (cj_eat(&p, ',')) continue;
      break;
    }
  }
  if (count != n) {
    ct_reject(msg, CT_RULE_VOCAB_ID, "%s: the vocabulary has %lld tokens, the exported model %lld", path, (long long)count, (long long)n);
    goto out;
  }
  for (int b = 0; b < 256; b++) {
    if (!have_byte[b]) { ct_reject(msg, CT_RULE_VOCAB_TOKEN, "%s: the vocabulary lacks the single-byte token of byte %d", path, b); goto out; }
  }
  rc = CT_OK;
out:
  free(seen); free(key); free(bytes);
  return rc;
}
