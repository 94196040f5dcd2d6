/* caten_lab exported loader: the safetensors header, checked by the rules of caten_lab/formats/rules.h
   in the order of caten_lab/formats/safetensors_header.py (ct_st_open) and model_check.py
   (ct_st_check_model), so a corrupt file gets the same verdict from Python and from C; the file's
   data is read only afterwards (ct_st_load). Duplicate names and name lookups go through hash sets:
   linear in the header size. Needs json_reader.c and rules_table.c. */

#define CT_MAX_HEADER ((uint64_t)100 << 20)
#define CT_MAX_DIMS 8

typedef struct {
  const char *name;  /* decoded, in st->names; may hold NUL bytes: compare with name_len */
  int64_t name_len;
  char dtype[16];
  int isz;           /* the dtype's itemsize */
  int ndim;
  int64_t shape[CT_MAX_DIMS];
  int64_t begin, end;
  int used;
} ct_tensor;

typedef struct {
  FILE *f;
  int64_t file_size, data_start;
  ct_tensor *t;
  int64_t n, cap;
  char *names;       /* the decoded names (at most the header's length) */
  cj_set index;      /* name -> tensor number */
} ct_st;

static void ct_st_close(ct_st *st) {
  if (st->f) fclose(st->f);
  free(st->t);
  free(st->names);
  cj_set_free(&st->index);
  memset(st, 0, sizeof *st);
}

static ct_tensor *ct_st_find_bytes(ct_st *st, const char *name, int64_t len) {
  int64_t k = cj_set_find(&st->index, name, len, 0);
  return k < 0 ? NULL : &st->t[k];
}

/* tensor ``name`` (a GPT2LMHeadModel name) under that name or, for a GPT2Model file, without the
   ``transformer.`` prefix (ct_st_check_model refuses a file that has both) */
static ct_tensor *ct_st_find(ct_st *st, const char *name) {
  ct_tensor *t = ct_st_find_bytes(st, name, (int64_t)strlen(name));
  if (!t && !strncmp(name, "transformer.", 12)) t = ct_st_find_bytes(st, name + 12, (int64_t)strlen(name) - 12);
  return t;
}

/* the header text of one tensor entry as in safetensors_header.py's _entry; 0 or the rule broken */
static int ct_st_entry(ct_json *p, ct_tensor *t, const char *path, char *msg) {
  size_t v_dtype = 0, v_shape = 0, v_off = 0;
  int have = 0, extra = 0;
  cj_ws(p);
  const char *nm = t->name; int nl = t->name_len > 200 ? 200 : (int)t->name_len;
  if (!cj_peek(p, '{')) {
    cj_skip(p);
    ct_reject(msg, CT_RULE_ENTRY, "%s: tensor '%.*s': the entry must hold exactly dtype, shape and data_offsets", path, nl, nm);
    return CT_RULE_ENTRY;
  }
  p->i++;
  if (!cj_eat(p, '}')) {
    for (;;) {
      char key[16]; size_t len = 0;
      cj_str(p, key, sizeof key, &len);
      cj_eat(p, ':');
      cj_ws(p);
      size_t at = p->i;
      if (len == 5 && !memcmp(key, "dtype", 5)) { v_dtype = at; have |= 1; }
      else if (len == 5 && !memcmp(key, "shape", 5)) { v_shape = at; have |= 2; }
      else if (len == 12 && !memcmp(key, "data_offsets", 12)) { v_off = at; have |= 4; }
      else extra = 1;
      cj_skip(p);
      if (cj_eat(p, ',')) continue;
      cj_eat(p, '}');
      break;
    }
  }
  if (have != 7 || extra) {
    ct_reject(msg, CT_RULE_ENTRY, "%s: tensor '%.*s': the entry must hold exactly dtype, shape and data_offsets", path, nl, nm);
    return CT_RULE_ENTRY;
  }
  ct_json q = *p;
  size_t dlen = 0;
  q.i = v_dtype;
  if (!cj_peek(&q, '"')) { ct_reject(msg, CT_RULE_ENTRY, "%s: tensor '%.*s': dtype is not a string", path, nl, nm); return CT_RULE_ENTRY; }
  cj_str(&q, t->dtype, sizeof t->dtype - 1, &dlen);
  t->dtype[dlen < sizeof t->dtype - 1 ? dlen : sizeof t->dtype - 1] = 0;
  size_t dims[CT_MAX_DIMS + 1], offs[3];
  int nd = 0, no = 0;
  struct { size_t at; size_t *pos; int *count; int cap; } lists[2] = {{v_shape, dims, &nd, CT_MAX_DIMS + 1}, {v_off, offs, &no, 3}};
  for (int l = 0; l < 2; l++) {
    q.i = lists[l].at;
    int ok = cj_peek(&q, '[');
    if (ok) {
      q.i++;
      if (!cj_eat(&q, ']')) {
        for (;;) {
          cj_ws(&q);
          if (*lists[l].count < lists[l].cap) lists[l].pos[*lists[l].count] = q.i;
          (*lists[l].count)++;
          cj_skip(&q);
          if (cj_eat(&q, ',')) continue;
          cj_eat(&q, ']');
          break;
        }
      }
    }
    if (!ok || (l == 0 && nd > CT_MAX_DIMS) || (l == 1 && no != 2)) {
      ct_reject(msg, CT_RULE_ENTRY, l == 0 ? "%s: tensor '%.*s': shape is not a list of at most 8 dims"
                                           : "%s: tensor '%.*s': data_offsets is not a list [begin, end]", path, nl, nm);
      return CT_RULE_ENTRY;
    }
  }
  t->isz = dlen < sizeof t->dtype - 1 ? ct_dtype_size(t->dtype, dlen) : 0;
  if (!t->isz || memchr(t->dtype, 0, dlen)) {
    ct_reject(msg, CT_RULE_DTYPE, "%s: tensor '%.*s': unknown dtype '%s'", path, nl, nm, t->dtype);
    return CT_RULE_DTYPE;
  }
  t->ndim = nd;
  int64_t vals[CT_MAX_DIMS + 2];
  for (int k = 0; k < nd + 2; k++) {
    q.i = k < nd ? dims[k] : offs[k - nd];
    if (!cj_uint62(&q, &vals[k])) {
      ct_reject(msg, CT_RULE_INTEGER, "%s: tensor '%.*s': %s holds a value that is not a non-negative integer below 2^62",
                path, nl, nm, k < nd ? "shape" : "data_offsets");
      return CT_RULE_INTEGER;
    }
  }
  for (int k = 0; k < nd; k++) t->shape[k] = vals[k];
  t->begin = vals[nd]; t->end = vals[nd + 1];
  if (t->begin > t->end) {
    ct_reject(msg, CT_RULE_BOUNDS, "%s: tensor '%.*s': data_offsets [%lld, %lld] end before they begin", path, nl, nm,
              (long long)t->begin, (long long)t->end);
    return CT_RULE_BOUNDS;
  }
  /* prod(shape) * itemsize, exact: a zero dim makes it 0, an overflow makes it larger than any span */
  int zero = 0, big = 0;
  uint64_t need = (uint64_t)t->isz;
  for (int k = 0; k < nd; k++) if (!t->shape[k]) zero = 1;
  for (int k = 0; !zero && k < nd; k++) {
    if (__builtin_mul_overflow(need, (uint64_t)t->shape[k], &need) || need > ((uint64_t)1 << 62)) { big = 1; break; }
  }
  if (zero) need = 0;
  if (big || (uint64_t)(t->end - t->begin) != need) {
    ct_reject(msg, CT_RULE_NBYTES, "%s: tensor '%.*s': spans %lld bytes, but its shape of %s needs %s%llu", path, nl, nm,
              (long long)(t->end - t->begin), t->dtype, big ? "more than " : "", big ? (unsigned long long)1 << 62 : (unsigned long long)need);
    return CT_RULE_NBYTES;
  }
  return 0;
}

static int ct_span_cmp(const void *a, const void *b) {
  const ct_tensor *x = *(ct_tensor *const *)a, *y = *(ct_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

/* The header checks of safetensors_header.py (HEADER, JSON, DUPLICATE_KEY, ENTRY, DTYPE, INTEGER,
   BOUNDS, NBYTES, OVERLAP) over the text h[0:hlen]; data_size: the bytes after the header. */
static int ct_st_parse(ct_st *st, const char *h, size_t hlen, int64_t data_size, const char *path, char *msg) {
  size_t at;
  int r = cj_validate(h, hlen, &at);
  if (r < 0) { ct_fail(msg, "%s: out of memory reading the header", path); return CT_ERR_MEMORY; }
  if (r == CT_RULE_JSON && !cj_starts_object(h, hlen)) { ct_reject(msg, r, "%s: the safetensors header is not a JSON object", path); return CT_ERR_FORMAT; }
  if (r == CT_RULE_JSON) { ct_reject(msg, r, "%s: the safetensors header is not valid JSON (byte %zu)", path, at); return CT_ERR_FORMAT; }
  if (r) { ct_reject(msg, r, "%s: a key appears twice in one object of the safetensors header (byte %zu)", path, at); return CT_ERR_FORMAT; }
  st->names = malloc(hlen + 1);
  if (!st->names) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  st->index.arena = st->names;
  int64_t used = 0;
  ct_json p = {h, hlen, 0, 0};
  cj_eat(&p, '{');
  if (!cj_eat(&p, '}')) {
    for (;;) {
      size_t len = 0;
      cj_ws(&p);
      cj_str(&p, st->names + used, hlen - (size_t)used, &len);
      cj_eat(&p, ':');
      if (len == 12 && !memcmp(st->names + used, "__metadata__", 12)) {
        int ok = cj_peek(&p, '{');
        if (ok) {
          p.i++;
          if (!cj_eat(&p, '}')) {
            for (;;) {
              cj_str(&p, NULL, 0, NULL); cj_eat(&p, ':');
              if (!cj_peek(&p, '"')) ok = 0;
              cj_skip(&p);
              if (cj_eat(&p, ',')) continue;
              cj_eat(&p, '}');
              break;
            }
          }
        } else cj_skip(&p);
        if (!ok) { ct_reject(msg, CT_RULE_ENTRY, "%s: __metadata__ must map strings to strings", path); return CT_ERR_FORMAT; }
      } else {
        if (st->n == st->cap) {
          int64_t cap = st->cap ? st->cap * 2 : 64;
          ct_tensor *nt = realloc(st->t, sizeof(ct_tensor) * (size_t)cap);
          if (!nt) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
          st->t = nt; st->cap = cap;
        }
        ct_tensor *t = &st->t[st->n];
        memset(t, 0, sizeof *t);
        t->name = st->names + used; t->name_len = (int64_t)len;
        if (cj_set_add(&st->index, used, (int64_t)len, 0, st->n) < 0) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
        used += (int64_t)len;
        st->n++;
        if (ct_st_entry(&p, t, path, msg)) return CT_ERR_FORMAT;
      }
      if (cj_eat(&p, ',')) continue;
      break;
    }
  }
  for (int64_t k = 0; k < st->n; k++) {
    ct_tensor *t = &st->t[k];
    if (t->end > data_size) {
      ct_reject(msg, CT_RULE_BOUNDS, "%s: tensor '%.*s' ends at byte %lld but the file has %lld bytes: the file is truncated",
                path, (int)(t->name_len > 200 ? 200 : t->name_len), t->name, (long long)(st->data_start + t->end),
                (long long)(st->data_start + data_size));
      return CT_ERR_FORMAT;
    }
  }
  ct_tensor **order = malloc(sizeof(ct_tensor *) * (size_t)(st->n ? st->n : 1));
  if (!order) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  int64_t m = 0;
  for (int64_t k = 0; k < st->n; k++) if (st->t[k].end > st->t[k].begin) order[m++] = &st->t[k];
  qsort(order, (size_t)m, sizeof *order, ct_span_cmp);
  int64_t reach = 0; const ct_tensor *owner = NULL;
  for (int64_t k = 0; k < m; k++) {
    if (order[k]->begin < reach) {
      ct_reject(msg, CT_RULE_OVERLAP, "%s: tensors '%.*s' and '%.*s' share bytes (at %lld)", path,
                (int)(owner->name_len > 200 ? 200 : owner->name_len), owner->name,
                (int)(order[k]->name_len > 200 ? 200 : order[k]->name_len), order[k]->name, (long long)order[k]->begin);
      free(order);
      return CT_ERR_FORMAT;
    }
    if (order[k]->end > reach) { reach = order[k]->end; owner = order[k]; }
  }
  free(order);
  return CT_OK;
}

/* Open and validate the header; tensor data is read later, range-checked. */
static int ct_st_open(ct_st *st, const char *path, char *msg) {
  memset(st, 0, sizeof *st);
  ct_rule = CT_RULE_NONE;
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    ct_fail(msg, "%s: not a regular file (a directory must hold model.safetensors)", path);
    return CT_ERR_IO;
  }
  st->f = fopen(path, "rb");
  if (!st->f) { ct_fail(msg, "%s: cannot open the weights file (%s)", path, strerror(errno)); return CT_ERR_IO; }
  if (fseek(st->f, 0, SEEK_END) != 0) { ct_fail(msg, "%s: cannot seek", path); return CT_ERR_IO; }
  long size = ftell(st->f);
  if (size < 0) { ct_fail(msg, "%s: cannot tell the file size", path); return CT_ERR_IO; }
  st->file_size = size;
  rewind(st->f);
  unsigned char head[8];
  if (st->file_size < 8 || fread(head, 1, 8, st->f) != 8) {
    ct_reject(msg, CT_RULE_HEADER, "%s: file is %lld bytes, too short for a safetensors header", path, (long long)st->file_size);
    return CT_ERR_FORMAT;
  }
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | head[k];
  if (hlen == 0 || hlen > (uint64_t)(st->file_size - 8) || hlen > CT_MAX_HEADER) {
    ct_reject(msg, CT_RULE_HEADER, "%s: header length %llu does not fit the file (%lld bytes) or the 100 MB cap: truncated or not safetensors",
              path, (unsigned long long)hlen, (long long)st->file_size);
    return CT_ERR_FORMAT;
  }
  char *h = malloc((size_t)hlen + 1);
  if (!h) { ct_fail(msg, "%s: out of memory reading the header", path); return CT_ERR_MEMORY; }
  if (fread(h, 1, (size_t)hlen, st->f) != (size_t)hlen) { free(h); ct_fail(msg, "%s: cannot read the header", path); return CT_ERR_IO; }
  h[hlen] = 0;
  st->data_start = 8 + (int64_t)hlen;
  int rc = ct_st_parse(st, h, (size_t)hlen, st->file_size - st->data_start, path, msg);
  free(h);
  return rc;
}

/* one expected tensor of the model: its name and file shape */
typedef struct { const char *name; int ndim; const int64_t *shape; } ct_expect;

static int ct_is_model_dtype(const ct_tensor *t) {
  return !strcmp(t->dtype, "F32") || !strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16");
}

static int ct_ends_with(const ct_tensor *t, const char *suffix, int64_t *stem) {
  int64_t n = (int64_t)strlen(suffix);
  if (t->name_len < n || memcmp(t->name + t->name_len - n, suffix, (size_t)n)) return 0;
  *stem = t->name_len - n;
  return 1;
}

/* Compare two tensors' bytes in the file; 1 equal, 0 different, -1 read error. */
static int ct_st_same_bytes(ct_st *st, const ct_tensor *a, const ct_tensor *b) {
  unsigned char x[65536], y[65536];
  for (int64_t at = 0, n = a->end - a->begin; at < n; at += (int64_t)sizeof x) {
    size_t k = (size_t)(n - at < (int64_t)sizeof x ? n - at : (int64_t)sizeof x);
    if (fseek(st->f, (long)(st->data_start + a->begin + at), SEEK_SET) || fread(x, 1, k, st->f) != k) return -1;
    if (fseek(st->f, (long)(st->data_start + b->begin + at), SEEK_SET) || fread(y, 1, k, st->f) != k) return -1;
    if (memcmp(x, y, k)) return 0;
  }
  return 1;
}

/* Rules NAMES, DTYPE, SHAPE, TIED in the order of model_check.py, before any tensor is read. */
static int ct_st_check_model(ct_st *st, const ct_expect *ex, int n_ex, const char *path, char *msg) {
  cj_set want, seen; memset(&want, 0, sizeof want); memset(&seen, 0, sizeof seen);
  char *canon = NULL;
  int64_t *coff = NULL;
  size_t total = 0;
  for (int w = 0; w < n_ex; w++) total += strlen(ex[w].name);
  char *arena = malloc(total + 1);
  if (!arena) { ct_fail(msg, "%s: out of memory", path); return CT_ERR_MEMORY; }
  want.arena = arena;
  int rc = CT_OK;
  size_t used = 0;
  for (int w = 0; w < n_ex; w++) {
    size_t l = strlen(ex[w].name);
    memcpy(arena + used, ex[w].name, l);
    if (cj_set_add(&want, (int64_t)used, (int64_t)l, 0, w) < 0) { ct_fail(msg, "%s: out of memory", path); rc = CT_ERR_MEMORY; goto out; }
    used += l;
  }
  /* canonical names (model_check.py canonical_name): each once */
  size_t ctotal = 1;
  for (int64_t k = 0; k < st->n; k++) ctotal += (size_t)st->t[k].name_len + 12;
  canon = malloc(ctotal);
  coff = malloc(sizeof(int64_t) * (size_t)(st->n + 1));
  if (!canon || !coff) { ct_fail(msg, "%s: out of memory", path); rc = CT_ERR_MEMORY; goto out; }
  seen.arena = canon;
  int64_t cu = 0;
  for (int64_t k = 0; k < st->n; k++) {
    const ct_tensor *t = &st->t[k];
    int keep = (t->name_len >= 12 && !memcmp(t->name, "transformer.", 12)) ||
               (t->name_len == 14 && !memcmp(t->name, "lm_head.weight", 14));
    coff[k] = cu;
    if (!keep) { memcpy(canon + cu, "transformer.", 12); cu += 12; }
    memcpy(canon + cu, t->name, (size_t)t->name_len);
    cu += t->name_len;
    int r = cj_set_add(&seen, coff[k], cu - coff[k], 0, k);
    if (r < 0) { ct_fail(msg, "%s: out of memory", path); rc = CT_ERR_MEMORY; goto out; }
    if (r == 0) {
      ct_reject(msg, CT_RULE_NAMES, "%s: tensor '%.*s' is named twice (with and without the 'transformer.' prefix)",
                path, (int)(t->name_len > 200 ? 200 : t->name_len), t->name);
      rc = CT_ERR_MISMATCH; goto out;
    }
  }
  coff[st->n] = cu;
  static const char *masks[2] = {".attn.bias", ".attn.masked_bias"};
  for (int64_t k = 0; k < st->n; k++) {
    const ct_tensor *t = &st->t[k];
    ct_tensor c = *t;  /* the canonical name */
    c.name = canon + coff[k]; c.name_len = coff[k + 1] - coff[k];
    if (cj_set_find(&want, c.name, c.name_len, 0) >= 0) continue;
    if (c.name_len == 14 && !memcmp(c.name, "lm_head.weight", 14)) continue;
    int mask = 0;
    for (int s = 0; s < 2 && !mask; s++) {
      int64_t stem;
      if (!ct_ends_with(&c, masks[s], &stem) || stem + 17 > 4096) continue;
      char owner[4096 + 32];
      memcpy(owner, c.name, (size_t)stem);
      memcpy(owner + stem, ".attn.c_attn.bias", 17);
      mask = cj_set_find(&want, owner, stem + 17, 0) >= 0;
    }
    if (mask) continue;
    ct_reject(msg, CT_RULE_NAMES, "%s: unexpected tensor '%.*s': the file does not match the exported model "
              "(HF GPT-2 names: transformer.wte.weight or wte.weight, ...)", path, (int)(t->name_len > 200 ? 200 : t->name_len), t->name);
    rc = CT_ERR_MISMATCH; goto out;
  }
  for (int w = 0; w < n_ex; w++) {
    if (!ct_st_find(st, ex[w].name)) {
      ct_reject(msg, CT_RULE_NAMES, "%s: tensor '%s' is missing: the file does not match the exported model", path, ex[w].name);
      rc = CT_ERR_MISMATCH; goto out;
    }
  }
  for (int w = 0; w < n_ex; w++) {
    const ct_tensor *t = ct_st_find(st, ex[w].name);
    if (!ct_is_model_dtype(t)) {
      ct_reject(msg, CT_RULE_DTYPE, "%s: tensor '%s' has dtype %s; supported: F32, F16, BF16", path, ex[w].name, t->dtype);
      rc = CT_ERR_MISMATCH; goto out;
    }
  }
  for (int w = 0; w < n_ex; w++) {
    const ct_tensor *t = ct_st_find(st, ex[w].name);
    int same = t->ndim == ex[w].ndim;
    for (int k = 0; same && k < t->ndim; k++) same = t->shape[k] == ex[w].shape[k];
    if (!same) {
      char got[160] = "", want_s[160] = "";
      for (int k = 0; k < t->ndim; k++) snprintf(got + strlen(got), sizeof got - strlen(got), k ? ", %lld" : "%lld", (long long)t->shape[k]);
      for (int k = 0; k < ex[w].ndim; k++) snprintf(want_s + strlen(want_s), sizeof want_s - strlen(want_s), k ? ", %lld" : "%lld", (long long)ex[w].shape[k]);
      ct_reject(msg, CT_RULE_SHAPE, "%s: tensor '%s' has shape [%s], the exported model expects [%s]", path, ex[w].name, got, want_s);
      rc = CT_ERR_MISMATCH; goto out;
    }
  }
  {
    ct_tensor *lm = ct_st_find(st, "lm_head.weight"), *wte = ct_st_find(st, "transformer.wte.weight");
    if (lm && wte) {
      int same = !strcmp(lm->dtype, wte->dtype) && lm->ndim == wte->ndim;
      for (int k = 0; same && k < lm->ndim; k++) same = lm->shape[k] == wte->shape[k];
      if (same) {
        int r = ct_st_same_bytes(st, lm, wte);
        if (r < 0) { ct_fail(msg, "%s: cannot read the data of tensor 'lm_head.weight' (truncated file?)", path); rc = CT_ERR_FORMAT; goto out; }
        same = r;
      }
      if (!same) {
        ct_reject(msg, CT_RULE_TIED, "%s: lm_head.weight differs from transformer.wte.weight (the model ties them)", path);
        rc = CT_ERR_MISMATCH; goto out;
      }
    }
  }
out:
  cj_set_free(&want);
  cj_set_free(&seen);
  free(arena);
  free(canon);
  free(coff);
  return rc;
}
