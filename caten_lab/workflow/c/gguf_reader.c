/* caten_lab exported loader: the strict GGUF v3 reader of gguf_reader.h. The walk, its checks and
   their order are those of caten_lab/formats/gguf_header.py (steps 1-4) and gguf_layout.py (step 5);
   read that module's doc for the rules. One pass over the header, hash sets for duplicates:
   linear in the header size. */
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define CT_GGUF_MAX_ELEMENTS ((uint64_t)1 << 62)

typedef struct { const ct_gguf *g; const char *path; char *msg; uint64_t pos; } ct_gw;

static int ct_ggml_block(uint32_t type, int64_t *block, int64_t *bytes) {
  switch (type) {
#define CT_GGML_CASE(id, name, b, n) case id: *block = b; *bytes = n; return 1;
    CT_GGML_TYPES(CT_GGML_CASE)
#undef CT_GGML_CASE
  }
  *block = *bytes = 0;
  return 0;
}

static const char *ct_ggml_name(uint32_t type) {
  switch (type) {
#define CT_GGML_CASE(id, name, b, n) case id: return #name;
    CT_GGML_TYPES(CT_GGML_CASE)
#undef CT_GGML_CASE
  }
  return "?";
}

static const char *const ct_gv_names[CT_GV_COUNT] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                                     "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
static const int ct_gv_size[CT_GV_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 0, 8, 8, 8};  /* STRING: its length */

static uint64_t ct_gw_left(const ct_gw *w) { return w->g->size - w->pos; }

static int ct_gw_fail(ct_gw *w, int rule, const char *fmt, ...) {
  char what[700];
  va_list ap; va_start(ap, fmt); vsnprintf(what, sizeof what, fmt, ap); va_end(ap);
  ct_reject(w->msg, rule, "%s: %s (at byte %llu)", w->path, what, (unsigned long long)w->pos);
  return CT_ERR_FORMAT;
}

static uint64_t ct_gw_le(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* a little-endian unsigned of n bytes at the cursor; what: for the message */
static int ct_gw_uint(ct_gw *w, int n, uint64_t *v, const char *what, const ct_gguf_str *of) {
  if (ct_gw_left(w) < (uint64_t)n)
    return of ? ct_gw_fail(w, CT_RULE_HEADER, "%s of '%.*s' is cut off by the end of the file", what, (int)(of->len > 200 ? 200 : of->len), of->ptr)
              : ct_gw_fail(w, CT_RULE_HEADER, "%s is cut off by the end of the file", what);
  *v = ct_gw_le(w->g->map + w->pos, n);
  w->pos += (uint64_t)n;
  return CT_OK;
}

static int ct_gw_str(ct_gw *w, ct_gguf_str *s, const char *what, const ct_gguf_str *of) {
  uint64_t n;
  int rc = ct_gw_uint(w, 8, &n, what, of);
  if (rc) return rc;
  int ol = of ? (int)(of->len > 200 ? 200 : of->len) : 0;
  if (n > ct_gw_left(w))
    return ct_gw_fail(w, CT_RULE_HEADER, "%s%s%.*s%s has a length of %llu bytes, past the end of the file", what,
                      of ? " of '" : "", ol, of ? of->ptr : "", of ? "'" : "", (unsigned long long)n);
  s->ptr = (const char *)w->g->map + w->pos;
  s->len = n;
  if (!cj_utf8_valid((const unsigned char *)s->ptr, (size_t)n))
    return ct_gw_fail(w, CT_RULE_HEADER, "%s%s%.*s%s is not UTF-8", what, of ? " of '" : "", ol, of ? of->ptr : "", of ? "'" : "");
  w->pos += n;
  return CT_OK;
}

/* one value of a scalar type (or a string) */
static int ct_gw_value(ct_gw *w, uint32_t type, const ct_gguf_str *key, uint64_t item, int in_array) {
  if (type == CT_GV_STRING) {
    ct_gguf_str s;
    char what[48];
    if (in_array) snprintf(what, sizeof what, "item %llu", (unsigned long long)item);
    return ct_gw_str(w, &s, in_array ? what : "the value", key);
  }
  uint64_t v;
  char what[48] = "the value";
  if (in_array) snprintf(what, sizeof what, "item %llu", (unsigned long long)item);
  int rc = ct_gw_uint(w, ct_gv_size[type], &v, what, key);
  if (!rc && type == CT_GV_BOOL && v > 1)
    return ct_gw_fail(w, CT_RULE_HEADER, "%s of '%.*s' is a BOOL of value %llu (not 0 or 1)", what,
                      (int)(key->len > 200 ? 200 : key->len), key->ptr, (unsigned long long)v);
  return rc;
}

static int ct_gw_kv(ct_gw *w, ct_gguf *g, ct_gguf_kv *kv, int64_t *n_strs_seen) {
  uint64_t t;
  const ct_gguf_str *key = &kv->key;
  int kl = (int)(key->len > 200 ? 200 : key->len), rc;
  if ((rc = ct_gw_uint(w, 4, &t, "the value type", key))) return rc;
  if (t >= CT_GV_COUNT) return ct_gw_fail(w, CT_RULE_HEADER, "metadata '%.*s' has the unknown value type %llu", kl, key->ptr, (unsigned long long)t);
  kv->type = kv->item_type = (uint32_t)t;
  kv->count = 1;
  kv->first_str = -1;
  if (t != CT_GV_ARRAY) {
    kv->data = g->map + w->pos;
    return ct_gw_value(w, (uint32_t)t, key, 0, 0);
  }
  uint64_t it, count;
  if ((rc = ct_gw_uint(w, 4, &it, "the item type", key))) return rc;
  if (it >= CT_GV_COUNT || it == CT_GV_ARRAY)
    return ct_gw_fail(w, CT_RULE_HEADER, "metadata '%.*s' is an array of the unknown or nested item type %llu", kl, key->ptr, (unsigned long long)it);
  if ((rc = ct_gw_uint(w, 8, &count, "the item count", key))) return rc;
  if (count > ct_gw_left(w) / (uint64_t)ct_gv_size[it])
    return ct_gw_fail(w, CT_RULE_HEADER, "metadata '%.*s' claims %llu items, more than the %llu bytes left hold", kl, key->ptr,
                      (unsigned long long)count, (unsigned long long)ct_gw_left(w));
  kv->item_type = (uint32_t)it;
  kv->count = count;
  kv->data = g->map + w->pos;
  if (it == CT_GV_STRING) {
    kv->first_str = *n_strs_seen;
    for (uint64_t i = 0; i < count; i++) {
      if (g->strs) g->strs[*n_strs_seen] = g->map + w->pos;
      (*n_strs_seen)++;
      if ((rc = ct_gw_value(w, (uint32_t)it, key, i, 1))) return rc;
    }
    return CT_OK;
  }
  if (it == CT_GV_BOOL) {
    for (uint64_t i = 0; i < count; i++)
      if ((rc = ct_gw_value(w, (uint32_t)it, key, i, 1))) return rc;
    return CT_OK;
  }
  w->pos += count * (uint64_t)ct_gv_size[it];
  return CT_OK;
}

static int ct_gw_tensor(ct_gw *w, ct_gguf_tensor *t) {
  uint64_t v;
  int rc;
  if ((rc = ct_gw_str(w, &t->name, "the name of a tensor", NULL))) return rc;
  const ct_gguf_str *nm = &t->name;
  int nl = (int)(nm->len > 200 ? 200 : nm->len);
  if ((rc = ct_gw_uint(w, 4, &v, "the dim count", nm))) return rc;
  if (v < 1 || v > CT_GGUF_MAX_DIMS)
    return ct_gw_fail(w, CT_RULE_HEADER, "tensor '%.*s' has %llu dims (1 to %d allowed)", nl, nm->ptr, (unsigned long long)v, CT_GGUF_MAX_DIMS);
  t->n_dims = (uint32_t)v;
  uint64_t dims[CT_GGUF_MAX_DIMS];
  for (uint32_t d = 0; d < t->n_dims; d++)
    if ((rc = ct_gw_uint(w, 8, &dims[d], "a dim", nm))) return rc;
  if ((rc = ct_gw_uint(w, 4, &v, "the type", nm))) return rc;
  int64_t block, bytes;
  if (!ct_ggml_block((uint32_t)v, &block, &bytes))
    return ct_gw_fail(w, CT_RULE_DTYPE, "tensor '%.*s' has the unknown ggml type %llu", nl, nm->ptr, (unsigned long long)v);
  t->type = (uint32_t)v;
  if ((rc = ct_gw_uint(w, 8, &t->offset, "the offset", nm))) return rc;
  uint64_t n = 1;
  int zero = 0, big = 0;
  for (uint32_t d = 0; d < t->n_dims; d++) { t->dims[d] = (int64_t)dims[d]; zero |= !dims[d]; }
  for (uint32_t d = 0; d < t->n_dims && !zero && !big; d++) {
    if (n > (CT_GGUF_MAX_ELEMENTS - 1) / dims[d]) big = 1;  /* n * dims[d] >= 2^62 */
    else n *= dims[d];
  }
  if (big) return ct_gw_fail(w, CT_RULE_HEADER, "tensor '%.*s' has 2^62 elements or more", nl, nm->ptr);
  t->n_elements = zero ? 0 : (int64_t)n;
  unsigned __int128 nb = (unsigned __int128)(uint64_t)t->n_elements * (uint64_t)bytes / (uint64_t)block;
  t->n_bytes = nb > UINT64_MAX ? UINT64_MAX : (uint64_t)nb;  /* past any file: BOUNDS */
  return CT_OK;
}

static int ct_gguf_span_cmp(const void *a, const void *b) {
  const ct_gguf_tensor *x = *(const ct_gguf_tensor *const *)a, *y = *(const ct_gguf_tensor *const *)b;
  if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
  if (x->n_bytes != y->n_bytes) return x->n_bytes < y->n_bytes ? -1 : 1;
  return x < y ? -1 : x > y;  /* stable, as Python's sort */
}

#define CT_NM(t) (int)((t)->name.len > 200 ? 200 : (t)->name.len), (t)->name.ptr

/* step 5: the layout checks of formats/gguf_layout.py, in its order */
static int ct_gguf_layout(ct_gguf *g, const char *path, char *msg) {
  if (!g->n_tensors) return CT_OK;
  uint64_t a = g->alignment, start = g->data_start, size = g->size;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    const ct_gguf_tensor *t = &g->tensors[i];
    if (t->offset % a) {
      ct_reject(msg, CT_RULE_ALIGNMENT, "%s: tensor '%.*s' starts at data offset %llu, not a multiple of the alignment %llu", path,
                CT_NM(t), (unsigned long long)t->offset, (unsigned long long)a);
      return CT_ERR_FORMAT;
    }
  }
  for (int64_t i = 0; i < g->n_tensors; i++) {
    const ct_gguf_tensor *t = &g->tensors[i];
    int64_t block, bytes;
    ct_ggml_block(t->type, &block, &bytes);
    if ((uint64_t)t->dims[0] % (uint64_t)block) {
      ct_reject(msg, CT_RULE_DTYPE, "%s: tensor '%.*s' of type %s has rows of %lld values, not a multiple of its block of %lld", path,
                CT_NM(t), ct_ggml_name(t->type), (long long)t->dims[0], (long long)block);
      return CT_ERR_FORMAT;
    }
  }
  for (int64_t i = 0; i < g->n_tensors; i++) {
    const ct_gguf_tensor *t = &g->tensors[i];
    if (start > size || t->offset > size - start || t->n_bytes > size - start - t->offset) {
      ct_reject(msg, CT_RULE_BOUNDS, "%s: tensor '%.*s' ends past the end of the file (%llu bytes)", path, CT_NM(t), (unsigned long long)size);
      return CT_ERR_FORMAT;
    }
  }
  const ct_gguf_tensor **order = malloc(sizeof *order * (size_t)g->n_tensors);
  if (!order) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  for (int64_t i = 0; i < g->n_tensors; i++) order[i] = &g->tensors[i];
  qsort(order, (size_t)g->n_tensors, sizeof *order, ct_gguf_span_cmp);
  uint64_t reach = 0, at = 0;
  const ct_gguf_tensor *owner = order[0];
  int rc = CT_OK;
  for (int64_t i = 0; i < g->n_tensors && !rc; i++) {
    const ct_gguf_tensor *t = order[i];
    if (t->n_bytes && t->offset < reach) {
      ct_reject(msg, CT_RULE_OVERLAP, "%s: tensors '%.*s' and '%.*s' share bytes", path, CT_NM(owner), CT_NM(t));
      rc = CT_ERR_FORMAT;
    }
    if (t->offset + t->n_bytes > reach) { reach = t->offset + t->n_bytes; owner = t; }
  }
  for (int64_t i = 0; i < g->n_tensors && !rc; i++) {
    const ct_gguf_tensor *t = order[i];
    if (t->offset != at) {
      ct_reject(msg, CT_RULE_NBYTES, "%s: tensor '%.*s' starts at data offset %llu, but the tensors before it end at %llu: a type or "
                "shape does not match the bytes the file holds", path, CT_NM(t), (unsigned long long)t->offset, (unsigned long long)at);
      rc = CT_ERR_FORMAT;
    }
    at = (t->offset + t->n_bytes + a - 1) / a * a;
  }
  free(order);
  if (!rc && size - start - reach >= a) {
    ct_reject(msg, CT_RULE_NBYTES, "%s: %llu bytes follow the last tensor: a type or shape does not match the bytes the file holds",
              path, (unsigned long long)(size - start - reach));
    rc = CT_ERR_FORMAT;
  }
  return rc;
}

/* steps 1-4; with g->strs NULL only counts the string-array items (the first pass) */
static int ct_gguf_walk(ct_gguf *g, const char *path, char *msg) {
  ct_gw w = {g, path, msg, 0};
  uint64_t v, nt, nk;
  if (g->size < 24 || memcmp(g->map, "GGUF", 4)) return ct_gw_fail(&w, CT_RULE_HEADER, "not a GGUF file (no 'GGUF' magic in its first 24 bytes)");
  w.pos = 4;
  ct_gw_uint(&w, 4, &v, "the version", NULL);
  if (v != 3)
    return ct_gw_fail(&w, CT_RULE_HEADER, "GGUF version %llu%s: only little-endian GGUF v3 is read", (unsigned long long)v,
                      (v & 0xFFFF) == 0 ? " (a big-endian file)" : "");
  g->version = 3;
  ct_gw_uint(&w, 8, &nt, "the tensor count", NULL);
  ct_gw_uint(&w, 8, &nk, "the key count", NULL);
  if (nk > ct_gw_left(&w) / 13 || nt > ct_gw_left(&w) / 32)
    return ct_gw_fail(&w, CT_RULE_HEADER, "%llu tensors and %llu keys cannot fit in the %llu bytes left", (unsigned long long)nt,
                      (unsigned long long)nk, (unsigned long long)ct_gw_left(&w));
  g->n_kv = (int64_t)nk;
  g->n_tensors = (int64_t)nt;
  if (!g->kv) {
    g->kv = calloc((size_t)(nk ? nk : 1), sizeof *g->kv);
    g->tensors = calloc((size_t)(nt ? nt : 1), sizeof *g->tensors);
    if (!g->kv || !g->tensors) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  }
  cj_set_free(&g->keys);
  cj_set_free(&g->names);
  g->keys.arena = g->names.arena = (const char *)g->map;
  int64_t n_strs = 0;
  int rc;
  for (int64_t i = 0; i < g->n_kv; i++) {
    ct_gguf_kv *kv = &g->kv[i];
    char what[40];
    snprintf(what, sizeof what, "metadata key %lld", (long long)i);
    if ((rc = ct_gw_str(&w, &kv->key, what, NULL))) return rc;
    kv->raw = g->map + w.pos;
    if ((rc = ct_gw_kv(&w, g, kv, &n_strs))) return rc;
    kv->raw_len = (uint64_t)(g->map + w.pos - kv->raw);
    int r = cj_set_add(&g->keys, (int64_t)((const uint8_t *)kv->key.ptr - g->map), (int64_t)kv->key.len, 0, i);
    if (r < 0) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
    if (!r) return ct_gw_fail(&w, CT_RULE_DUPLICATE_KEY, "metadata key '%.*s' appears twice", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr);
  }
  g->n_strs = n_strs;
  for (int64_t i = 0; i < g->n_tensors; i++) {
    ct_gguf_tensor *t = &g->tensors[i];
    if ((rc = ct_gw_tensor(&w, t))) return rc;
    int r = cj_set_add(&g->names, (int64_t)((const uint8_t *)t->name.ptr - g->map), (int64_t)t->name.len, 0, i);
    if (r < 0) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
    if (!r) return ct_gw_fail(&w, CT_RULE_DUPLICATE_KEY, "tensor '%.*s' appears twice", CT_NM(t));
  }
  g->alignment = 32;
  const ct_gguf_kv *al = ct_gguf_find(g, "general.alignment");
  if (al) {
    uint64_t a = al->type == CT_GV_UINT32 ? ct_gw_le(al->data, 4) : 0;
    if (!a || (a & (a - 1)))
      return ct_gw_fail(&w, CT_RULE_HEADER, "general.alignment must be a UINT32 power of two (it is a %s)", ct_gv_names[al->type]);
    g->alignment = a;
  }
  g->data_start = (w.pos + g->alignment - 1) / g->alignment * g->alignment;
  for (int64_t i = 0; i < g->n_tensors; i++)
    g->tensors[i].data = g->data_start + g->tensors[i].offset <= g->size ? g->map + g->data_start + g->tensors[i].offset : NULL;
  return CT_OK;
}

static void ct_gguf_close(ct_gguf *g) {
  if (g->map && g->size) munmap((void *)g->map, (size_t)g->size);
  free(g->kv);
  free(g->tensors);
  free((void *)g->strs);
  cj_set_free(&g->keys);
  cj_set_free(&g->names);
  memset(g, 0, sizeof *g);
}

static int ct_gguf_open(ct_gguf *g, const char *path, char *msg) {
  memset(g, 0, sizeof *g);
  ct_rule = CT_RULE_NONE;
  int fd = open(path, O_RDONLY);
  if (fd < 0) { ct_fail(msg, "%s: cannot open (%s)", path, strerror(errno)); return CT_ERR_IO; }
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) { close(fd); ct_fail(msg, "%s: not a regular file", path); return CT_ERR_IO; }
  g->size = (uint64_t)st.st_size;
  static const uint8_t empty[1];
  g->map = empty;
  if (g->size) {
    void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) { close(fd); g->map = NULL; ct_fail(msg, "%s: cannot map (%s)", path, strerror(errno)); return CT_ERR_IO; }
    g->map = m;
  }
  close(fd);
  int rc = ct_gguf_walk(g, path, msg);  /* pass 1: checks and counts the string items */
  if (rc) return rc;
  if (g->n_strs) {
    g->strs = malloc(sizeof *g->strs * (size_t)g->n_strs);
    if (!g->strs) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
    if ((rc = ct_gguf_walk(g, path, msg))) return rc;  /* pass 2: records them */
  }
  return ct_gguf_layout(g, path, msg);
}
