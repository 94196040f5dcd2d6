/* caten_lab exported loader: strict JSON (rules JSON and DUPLICATE_KEY of caten_lab/formats/rules.h).

   The same language as caten_lab/formats/strict_json.py: strict UTF-8, RFC 8259 grammar (no NaN,
   no leading zeros, no trailing commas), objects and arrays nested at most CJ_MAX_DEPTH deep, one
   top-level object with only whitespace around it. cj_validate checks all of it in one linear pass
   and finds a key repeated in any object with one hash set (keys compared after decoding escapes,
   surrogate pairs combined as Python does); a syntax error wins over a duplicate, as in Python.
   After cj_validate succeeded, the walkers below (cj_eat, cj_key, cj_skip, ...) read the text
   without re-checking it. Needs: <stdint.h> <stdlib.h> <string.h>, and the rule ids (CT_RULE_*). */

#define CJ_MAX_DEPTH 64

typedef struct { const char *s; size_t n, i; int depth; } ct_json;

static void cj_ws(ct_json *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r')) p->i++;
}
static int cj_peek(ct_json *p, char c) { cj_ws(p); return p->i < p->n && p->s[p->i] == c; }
static int cj_eat(ct_json *p, char c) { if (cj_peek(p, c)) { p->i++; return 1; } return 0; }

static int cj_hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* 1 if s[0:n] is UTF-8 as Python's strict decoder accepts it (no overlongs, surrogates, > U+10FFFF) */
static int cj_utf8_valid(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    if (c < 0x80) { i++; continue; }
    size_t k; unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) k = 1;
    else if (c >= 0xE0 && c <= 0xEF) { k = 2; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 3; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (i + k >= n) return 0;
    if (s[i + 1] < lo || s[i + 1] > hi) return 0;
    for (size_t j = 2; j <= k; j++) if (s[i + j] < 0x80 || s[i + j] > 0xBF) return 0;
    i += k + 1;
  }
  return 1;
}

static void cj_put(char *out, size_t cap, size_t *k, uint32_t v) {
  unsigned char enc[4]; int m;
  if (v < 0x80) { enc[0] = (unsigned char)v; m = 1; }
  else if (v < 0x800) { enc[0] = (unsigned char)(0xC0 | (v >> 6)); enc[1] = (unsigned char)(0x80 | (v & 63)); m = 2; }
  else if (v < 0x10000) { enc[0] = (unsigned char)(0xE0 | (v >> 12)); enc[1] = (unsigned char)(0x80 | ((v >> 6) & 63));
                          enc[2] = (unsigned char)(0x80 | (v & 63)); m = 3; }
  else { enc[0] = (unsigned char)(0xF0 | (v >> 18)); enc[1] = (unsigned char)(0x80 | ((v >> 12) & 63));
         enc[2] = (unsigned char)(0x80 | ((v >> 6) & 63)); enc[3] = (unsigned char)(0x80 | (v & 63)); m = 4; }
  for (int j = 0; j < m; j++) { if (out && *k < cap) out[*k] = (char)enc[j]; (*k)++; }
}

static int cj_u4(ct_json *p, uint32_t *v) {
  if (p->i + 4 > p->n) return 0;
  uint32_t x = 0;
  for (int j = 0; j < 4; j++) { int h = cj_hex(p->s[p->i + j]); if (h < 0) return 0; x = x * 16 + (uint32_t)h; }
  p->i += 4; *v = x;
  return 1;
}

/* A string at p->i: decoded into out[0:cap] (out may be NULL); *len receives the decoded length
   (also when it exceeds cap: then out holds its first cap bytes). 0 on a syntax error. */
static int cj_str(ct_json *p, char *out, size_t cap, size_t *len) {
  size_t k = 0;
  if (!cj_eat(p, '"')) return 0;
  while (p->i < p->n) {
    unsigned char c = (unsigned char)p->s[p->i++];
    if (c == '"') { if (len) *len = k; return 1; }
    if (c == '\\') {
      if (p->i >= p->n) return 0;
      c = (unsigned char)p->s[p->i++];
      if (c == 'u') {
        uint32_t v, v2;
        if (!cj_u4(p, &v)) return 0;
        if (v >= 0xD800 && v <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
          ct_json q = *p; q.i += 2;
          if (cj_u4(&q, &v2) && v2 >= 0xDC00 && v2 <= 0xDFFF) { v = 0x10000 + ((v - 0xD800) << 10) + (v2 - 0xDC00); p->i = q.i; }
        }
        cj_put(out, cap, &k, v);
        continue;
      }
      switch (c) {
        case 'n': c = '\n'; break; case 't': c = '\t'; break; case 'r': c = '\r'; break;
        case 'b': c = '\b'; break; case 'f': c = '\f'; break;
        case '"': case '\\': case '/': break;
        default: return 0;
      }
    } else if (c < 0x20) {
      return 0;
    }
    if (out && k < cap) out[k] = (char)c;
    k++;
  }
  return 0;
}

/* A number token per RFC 8259 at p->i; *integer: no fraction or exponent. */
static int cj_number(ct_json *p, int *integer) {
  size_t i = p->i, n = p->n;
  const char *s = p->s;
  *integer = 1;
  if (i < n && s[i] == '-') i++;
  if (i >= n) return 0;
  if (s[i] == '0') i++;
  else if (s[i] >= '1' && s[i] <= '9') { while (i < n && s[i] >= '0' && s[i] <= '9') i++; }
  else return 0;
  if (i < n && s[i] == '.') {
    i++; *integer = 0;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  }
  if (i < n && (s[i] == 'e' || s[i] == 'E')) {
    i++; *integer = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) i++;
    if (i >= n || s[i] < '0' || s[i] > '9') return 0;
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
  }
  p->i = i;
  return 1;
}

/* ---- a hash set of byte strings (keys of one object: tag = the object's serial number) */
typedef struct { uint64_t *hash; int64_t *off, *len, *tag, *val; int64_t cap, n; const char *arena; } cj_set;

static uint64_t cj_hash(const char *s, int64_t n, int64_t tag) {
  uint64_t h = 1469598103934665603ULL ^ (uint64_t)tag * 0x9E3779B97F4A7C15ULL;
  for (int64_t i = 0; i < n; i++) { h ^= (unsigned char)s[i]; h *= 1099511628211ULL; }
  return h ? h : 1;
}

static void cj_set_free(cj_set *t) { free(t->hash); free(t->off); free(t->len); free(t->tag); free(t->val); memset(t, 0, sizeof *t); }

static int cj_set_grow(cj_set *t) {
  int64_t cap = t->cap ? t->cap * 2 : 64;
  cj_set o = *t;
  t->hash = calloc((size_t)cap, sizeof(uint64_t)); t->off = malloc((size_t)cap * sizeof(int64_t));
  t->len = malloc((size_t)cap * sizeof(int64_t)); t->tag = malloc((size_t)cap * sizeof(int64_t));
  t->val = malloc((size_t)cap * sizeof(int64_t));
  t->cap = cap; t->n = 0;
  if (!t->hash || !t->off || !t->len || !t->tag || !t->val) { cj_set_free(t); cj_set_free(&o); return 0; }
  for (int64_t s = 0; s < o.cap; s++) {
    if (!o.hash[s]) continue;
    int64_t j = (int64_t)(o.hash[s] & (uint64_t)(cap - 1));
    while (t->hash[j]) j = (j + 1) & (cap - 1);
    t->hash[j] = o.hash[s]; t->off[j] = o.off[s]; t->len[j] = o.len[s]; t->tag[j] = o.tag[s]; t->val[j] = o.val[s]; t->n++;
  }
  cj_set_free(&o);
  return 1;
}

/* Insert arena[off:off+len] under tag with a value: 1 new, 0 already there, -1 out of memory. */
static int cj_set_add(cj_set *t, int64_t off, int64_t len, int64_t tag, int64_t val) {
  if (2 * (t->n + 1) > t->cap && !cj_set_grow(t)) return -1;
  uint64_t h = cj_hash(t->arena + off, len, tag);
  int64_t j = (int64_t)(h & (uint64_t)(t->cap - 1));
  while (t->hash[j]) {
    if (t->hash[j] == h && t->tag[j] == tag && t->len[j] == len && !memcmp(t->arena + t->off[j], t->arena + off, (size_t)len)) return 0;
    j = (j + 1) & (t->cap - 1);
  }
  t->hash[j] = h; t->off[j] = off; t->len[j] = len; t->tag[j] = tag; t->val[j] = val; t->n++;
  return 1;
}

/* The value stored for the bytes s[0:len] under tag, or -1. */
static int64_t cj_set_find(const cj_set *t, const char *s, int64_t len, int64_t tag) {
  if (!t->cap) return -1;
  uint64_t h = cj_hash(s, len, tag);
  int64_t j = (int64_t)(h & (uint64_t)(t->cap - 1));
  while (t->hash[j]) {
    if (t->hash[j] == h && t->tag[j] == tag && t->len[j] == len && !memcmp(t->arena + t->off[j], s, (size_t)len)) return t->val[j];
    j = (j + 1) & (t->cap - 1);
  }
  return -1;
}

typedef struct { cj_set keys; char *arena; int64_t used, serial; int dup, oom; size_t dup_at; } cj_check;

static int cj_value(ct_json *p, cj_check *c);

static int cj_object(ct_json *p, cj_check *c) {
  int64_t tag = ++c->serial;
  p->i++;  /* '{' */
  if (cj_eat(p, '}')) return 1;
  for (;;) {
    cj_ws(p);
    size_t at = p->i, len = 0;
    char *dst = c->arena ? c->arena + c->used : NULL;
    if (!cj_str(p, dst, (size_t)-1 / 2, &len)) return 0;
    if (!c->dup && !c->oom) {
      int r = cj_set_add(&c->keys, c->used, (int64_t)len, tag, 0);
      if (r < 0) c->oom = 1;
      else if (r == 0) { c->dup = 1; c->dup_at = at; }
      else c->used += (int64_t)len;
    }
    if (!cj_eat(p, ':') || !cj_value(p, c)) return 0;
    if (cj_eat(p, ',')) continue;
    return cj_eat(p, '}');
  }
}

static int cj_value(ct_json *p, cj_check *c) {
  cj_ws(p);
  if (p->i >= p->n) return 0;
  char ch = p->s[p->i];
  if (ch == '{' || ch == '[') {
    if (++p->depth > CJ_MAX_DEPTH) return 0;
    int ok;
    if (ch == '{') ok = cj_object(p, c);
    else {
      p->i++;
      ok = 1;
      if (!cj_eat(p, ']')) {
        for (;;) {
          if (!cj_value(p, c)) { ok = 0; break; }
          if (cj_eat(p, ',')) continue;
          ok = cj_eat(p, ']');
          break;
        }
      }
    }
    p->depth--;
    return ok;
  }
  if (ch == '"') return cj_str(p, NULL, 0, NULL);
  int integer;
  if (ch == '-' || (ch >= '0' && ch <= '9')) return cj_number(p, &integer);
  static const char *lits[3] = {"true", "false", "null"};
  for (int k = 0; k < 3; k++) {
    size_t m = strlen(lits[k]);
    if (p->n - p->i >= m && !memcmp(p->s + p->i, lits[k], m)) { p->i += m; return 1; }
  }
  return 0;
}

/* Check text[0:n] is one strict JSON object. Returns 0, or the rule broken (CT_RULE_JSON,
   CT_RULE_DUPLICATE_KEY), or -1 when out of memory; *at: the byte of the error. */
static int cj_validate(const char *text, size_t n, size_t *at) {
  *at = 0;
  if (!cj_utf8_valid((const unsigned char *)text, n)) return CT_RULE_JSON;
  cj_check c; memset(&c, 0, sizeof c);
  c.arena = malloc(n + 1);
  if (!c.arena) return -1;
  c.keys.arena = c.arena;
  ct_json p = {text, n, 0, 0};
  int ok = cj_peek(&p, '{') && cj_value(&p, &c);
  if (ok) { cj_ws(&p); ok = p.i == n; }
  *at = p.i;
  int rc = !ok ? CT_RULE_JSON : c.oom ? -1 : c.dup ? CT_RULE_DUPLICATE_KEY : 0;
  if (rc == CT_RULE_DUPLICATE_KEY) *at = c.dup_at;
  cj_set_free(&c.keys);
  free(c.arena);
  return rc;
}

/* 1 if the text's first non-blank character opens an object (to say "not an object", not "not JSON") */
static int cj_starts_object(const char *text, size_t n) {
  ct_json p = {text, n, 0, 0};
  return cj_peek(&p, '{');
}

/* ---- walkers over validated text */
static int cj_skip(ct_json *p) { cj_check c; memset(&c, 0, sizeof c); c.dup = 1; return cj_value(p, &c); }

/* a JSON integer token: 1 and *v if it is one in 0..2^62 ("-0" is 0), else 0 (the position moves past
   the value either way) */
static int cj_uint62(ct_json *p, int64_t *v) {
  cj_ws(p);
  size_t start = p->i;
  char ch = p->i < p->n ? p->s[p->i] : 0;
  int integer = 0;
  if (!(ch == '-' || (ch >= '0' && ch <= '9'))) { cj_skip(p); return 0; }
  cj_number(p, &integer);
  if (!integer) return 0;
  size_t i = start;
  int neg = p->s[i] == '-';
  if (neg) i++;
  uint64_t x = 0;
  for (; i < p->i; i++) {  /* x * 10 + d <= 2^62, checked before it can wrap around 2^64 */
    uint64_t d = (uint64_t)(p->s[i] - '0');
    if (x > (((uint64_t)1 << 62) - d) / 10) return 0;
    x = x * 10 + d;
  }
  if (neg && x) return 0;
  *v = (int64_t)x;
  return 1;
}
