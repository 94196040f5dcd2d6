"""The hand-written C half of an exported workflow library: safetensors reading, model buffers, errors.

``export.py`` generates the model-specific tables (buffer kinds, symbolic sizes, weight names and
shapes) and the workflow's entry points; everything here is fixed text with ``@P@`` standing for the
API prefix (``gpt2``). The reader trusts nothing in the file: the header length, the JSON, every
name, dtype, shape and byte range is checked before a byte of tensor data is read, so a corrupt,
truncated or mismatched file becomes an error code and a message, never a crash.
"""

from __future__ import annotations

from importlib import resources


def _c_text(name: str) -> str:
    """Fixed C of the export kept in caten_lab/workflow/c/ (``@P@`` / ``@U@``: the API prefix)."""
    return (resources.files("caten_lab.workflow") / "c" / name).read_text(encoding="utf-8")


COMMON_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#define API __attribute__((visibility("default")))

static _Thread_local char ct_init_error[1024];

static void ct_fail(char *dst, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt); vsnprintf(dst, 1024, fmt, ap); va_end(ap);
}

static void *ct_alloc(int64_t bytes) {
  void *p = NULL;
  if (bytes < 64) bytes = 64;
  if (posix_memalign(&p, 64, (size_t)((bytes + 63) / 64 * 64)) != 0) return NULL;
  memset(p, 0, (size_t)bytes);
  return p;
}

/* ------------------------------------------------------------------ a tiny bounded JSON reader */
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

/* a string into out (NUL-terminated, at most cap-1 bytes; longer strings are an error) */
static int cj_string(ct_json *p, char *out, size_t cap) {
  size_t k = 0;
  if (!cj_eat(p, '"')) return 0;
  while (p->i < p->n) {
    unsigned char c = (unsigned char)p->s[p->i++];
    if (c == '"') { if (out) out[k] = 0; return 1; }
    if (c == '\\') {
      if (p->i >= p->n) return 0;
      c = (unsigned char)p->s[p->i++];
      if (c == 'u') {
        if (p->i + 4 > p->n) return 0;
        int v = 0;
        for (int j = 0; j < 4; j++) { int h = cj_hex(p->s[p->i++]); if (h < 0) return 0; v = v * 16 + h; }
        unsigned char enc[3]; int m;
        if (v < 0x80) { enc[0] = (unsigned char)v; m = 1; }
        else if (v < 0x800) { enc[0] = (unsigned char)(0xC0 | (v >> 6)); enc[1] = (unsigned char)(0x80 | (v & 63)); m = 2; }
        else { enc[0] = (unsigned char)(0xE0 | (v >> 12)); enc[1] = (unsigned char)(0x80 | ((v >> 6) & 63));
               enc[2] = (unsigned char)(0x80 | (v & 63)); m = 3; }
        for (int j = 0; j < m; j++) { if (out) { if (k + 1 >= cap) return 0; out[k++] = (char)enc[j]; } }
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
    if (out) { if (k + 1 >= cap) return 0; out[k++] = (char)c; }
  }
  return 0;
}

static int cj_int(ct_json *p, int64_t *v) {
  cj_ws(p);
  int neg = 0; int64_t x = 0; size_t start;
  if (p->i < p->n && p->s[p->i] == '-') { neg = 1; p->i++; }
  start = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    if (x > (INT64_MAX - 9) / 10) return 0;
    x = x * 10 + (p->s[p->i++] - '0');
  }
  if (p->i == start) return 0;
  if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E')) return 0;
  *v = neg ? -x : x;
  return 1;
}

static int cj_skip(ct_json *p) {
  cj_ws(p);
  if (p->i >= p->n || p->depth > 64) return 0;
  char c = p->s[p->i];
  if (c == '"') return cj_string(p, NULL, 0);
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    p->i++; p->depth++;
    if (cj_eat(p, close)) { p->depth--; return 1; }
    for (;;) {
      if (c == '{') { if (!cj_string(p, NULL, 0) || !cj_eat(p, ':')) return 0; }
      if (!cj_skip(p)) return 0;
      if (cj_eat(p, ',')) continue;
      if (cj_eat(p, close)) { p->depth--; return 1; }
      return 0;
    }
  }
  size_t start = p->i;
  while (p->i < p->n && strchr("-+.eE0123456789truefalsn", p->s[p->i]) && p->s[p->i]) p->i++;
  return p->i > start;
}

/* ------------------------------------------------------------------ safetensors */
typedef struct {
  char name[256];
  char dtype[16];
  int ndim;
  int64_t shape[8];
  int64_t begin, end;
  int used;
} ct_tensor;

typedef struct {
  FILE *f;
  int64_t file_size, data_start;
  ct_tensor *t;
  int n, cap;
} ct_st;

static void ct_st_close(ct_st *st) {
  if (st->f) fclose(st->f);
  free(st->t);
  memset(st, 0, sizeof *st);
}

static int ct_st_entry(ct_json *p, ct_tensor *t, char *msg, const char *path) {
  int have_dtype = 0, have_shape = 0, have_off = 0;
  if (!cj_eat(p, '{')) { ct_fail(msg, "%s: tensor '%s' is not a JSON object in the safetensors header", path, t->name); return 0; }
  if (cj_eat(p, '}')) goto check;
  for (;;) {
    char key[64];
    if (!cj_string(p, key, sizeof key) || !cj_eat(p, ':')) goto bad;
    if (!strcmp(key, "dtype")) {
      if (!cj_string(p, t->dtype, sizeof t->dtype)) goto bad;
      have_dtype = 1;
    } else if (!strcmp(key, "shape")) {
      if (!cj_eat(p, '[')) goto bad;
      t->ndim = 0;
      if (!cj_eat(p, ']')) {
        for (;;) {
          int64_t d;
          if (t->ndim >= 8 || !cj_int(p, &d) || d < 0 || d > ((int64_t)1 << 40)) goto bad;
          t->shape[t->ndim++] = d;
          if (cj_eat(p, ',')) continue;
          if (cj_eat(p, ']')) break;
          goto bad;
        }
      }
      have_shape = 1;
    } else if (!strcmp(key, "data_offsets")) {
      if (!cj_eat(p, '[') || !cj_int(p, &t->begin) || !cj_eat(p, ',') || !cj_int(p, &t->end) || !cj_eat(p, ']')) goto bad;
      have_off = 1;
    } else if (!cj_skip(p)) {
      goto bad;
    }
    if (cj_eat(p, ',')) continue;
    if (cj_eat(p, '}')) break;
    goto bad;
  }
check:
  if (!have_dtype || !have_shape || !have_off) {
    ct_fail(msg, "%s: tensor '%s' lacks dtype, shape or data_offsets in the safetensors header", path, t->name);
    return 0;
  }
  return 1;
bad:
  ct_fail(msg, "%s: malformed safetensors header entry for tensor '%s' (byte %zu of the header)", path, t->name, p->i);
  return 0;
}

/* Open and validate the header; tensor data is read later, range-checked. */
static int ct_st_open(ct_st *st, const char *path, char *msg) {
  memset(st, 0, sizeof *st);
  struct stat sb;
  if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    ct_fail(msg, "%s: not a regular file (a directory must hold model.safetensors)", path);
    return @U@_ERR_IO;
  }
  st->f = fopen(path, "rb");
  if (!st->f) { ct_fail(msg, "%s: cannot open the weights file (%s)", path, strerror(errno)); return @U@_ERR_IO; }
  if (fseek(st->f, 0, SEEK_END) != 0) { ct_fail(msg, "%s: cannot seek", path); return @U@_ERR_IO; }
  long size = ftell(st->f);
  if (size < 0) { ct_fail(msg, "%s: cannot tell the file size", path); return @U@_ERR_IO; }
  st->file_size = size;
  rewind(st->f);
  unsigned char head[8];
  if (st->file_size < 8 || fread(head, 1, 8, st->f) != 8) {
    ct_fail(msg, "%s: file is %lld bytes, too short for a safetensors header", path, (long long)st->file_size);
    return @U@_ERR_FORMAT;
  }
  uint64_t hlen = 0;
  for (int k = 7; k >= 0; k--) hlen = (hlen << 8) | head[k];
  if (hlen == 0 || hlen > (uint64_t)(st->file_size - 8) || hlen > ((uint64_t)100 << 20)) {
    ct_fail(msg, "%s: header length %llu does not fit the file (%lld bytes): truncated or not safetensors",
            path, (unsigned long long)hlen, (long long)st->file_size);
    return @U@_ERR_FORMAT;
  }
  char *h = malloc((size_t)hlen + 1);
  if (!h) { ct_fail(msg, "%s: out of memory reading the header", path); return @U@_ERR_MEMORY; }
  if (fread(h, 1, (size_t)hlen, st->f) != (size_t)hlen) { free(h); ct_fail(msg, "%s: cannot read the header", path); return @U@_ERR_FORMAT; }
  h[hlen] = 0;
  st->data_start = 8 + (int64_t)hlen;
  ct_json p = {h, (size_t)hlen, 0, 0};
  int rc = @U@_ERR_FORMAT;
  if (!cj_eat(&p, '{')) { ct_fail(msg, "%s: the safetensors header is not a JSON object", path); goto out; }
  if (!cj_eat(&p, '}')) {
    for (;;) {
      ct_tensor t; memset(&t, 0, sizeof t);
      if (!cj_string(&p, t.name, sizeof t.name) || !cj_eat(&p, ':')) {
        ct_fail(msg, "%s: malformed safetensors header (byte %zu): expected a tensor name", path, p.i); goto out;
      }
      if (!strcmp(t.name, "__metadata__")) {
        if (!cj_skip(&p)) { ct_fail(msg, "%s: malformed __metadata__ in the safetensors header", path); goto out; }
      } else {
        if (!ct_st_entry(&p, &t, msg, path)) goto out;
        for (int k = 0; k < st->n; k++)
          if (!strcmp(st->t[k].name, t.name)) { ct_fail(msg, "%s: tensor '%s' appears twice in the header", path, t.name); goto out; }
        if (st->n == st->cap) {
          int cap = st->cap ? st->cap * 2 : 64;
          ct_tensor *nt = realloc(st->t, sizeof(ct_tensor) * (size_t)cap);
          if (!nt) { ct_fail(msg, "%s: out of memory", path); rc = @U@_ERR_MEMORY; goto out; }
          st->t = nt; st->cap = cap;
        }
        st->t[st->n++] = t;
      }
      if (cj_eat(&p, ',')) continue;
      if (cj_eat(&p, '}')) break;
      ct_fail(msg, "%s: malformed safetensors header (byte %zu): expected ',' or '}'", path, p.i); goto out;
    }
  }
  for (int k = 0; k < st->n; k++) {
    ct_tensor *t = &st->t[k];
    if (t->begin < 0 || t->end < t->begin || st->data_start + t->end > st->file_size) {
      ct_fail(msg, "%s: tensor '%s' has data_offsets [%lld, %lld] outside the file (%lld data bytes): the file is truncated or corrupt",
              path, t->name, (long long)t->begin, (long long)t->end, (long long)(st->file_size - st->data_start));
      goto out;
    }
  }
  rc = @U@_OK;
out:
  free(h);
  return rc;
}

static ct_tensor *ct_st_find(ct_st *st, const char *name) {
  for (int k = 0; k < st->n; k++) if (!strcmp(st->t[k].name, name)) return &st->t[k];
  if (!strncmp(name, "transformer.", 12))
    for (int k = 0; k < st->n; k++) if (!strcmp(st->t[k].name, name + 12)) return &st->t[k];
  return NULL;
}

static float ct_half(uint16_t h) {
  uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, bits;
  if (e == 0) {
    if (m == 0) bits = s;
    else { e = 113; while (!(m & 1024)) { m <<= 1; e--; } m &= 1023; bits = s | (e << 23) | (m << 13); }
  } else if (e == 31) bits = s | 0x7F800000u | (m << 13);
  else bits = s | ((e + 112) << 23) | (m << 13);
  float f; memcpy(&f, &bits, 4); return f;
}

/* ------------------------------------------------------------------ weight formats
   The compiled program reads its matmul weights as fp32, fp16 (IEEE half) or int8 with one float32
   scale per row (models/quantize.py). The file holds floats: each tensor is converted here, at load
   time, with the arithmetic of the Python runner, so both compute bitwise the same logits. */
#define CT_FMT_FP32 0
#define CT_FMT_FP16 1
#define CT_FMT_INT8 2

/* float -> half bits, round to nearest even; overflow -> inf, NaN stays NaN: numpy's astype(float16)
   (npy_floatbits_to_halfbits), bit for bit. */
static uint16_t ct_float_to_half(float x) {
  uint32_t f; memcpy(&f, &x, 4);
  uint16_t sgn = (uint16_t)((f & 0x80000000u) >> 16);
  uint32_t e = f & 0x7F800000u, sig;
  if (e >= 0x47800000u) {  /* inf, NaN, or too large */
    if (e == 0x7F800000u && (f & 0x007FFFFFu)) {
      uint16_t r = (uint16_t)(0x7C00u + ((f & 0x007FFFFFu) >> 13));
      if (r == 0x7C00u) r++;  /* keep a NaN a NaN */
      return (uint16_t)(sgn + r);
    }
    return (uint16_t)(sgn + 0x7C00u);
  }
  if (e <= 0x38000000u) {  /* a half subnormal, or zero */
    if (e < 0x33000000u) return sgn;
    e >>= 23;
    sig = 0x00800000u + (f & 0x007FFFFFu);
    sig >>= (113 - e);
    if (((sig & 0x00003FFFu) != 0x00001000u) || (f & 0x000007FFu)) sig += 0x00001000u;
    return (uint16_t)(sgn + (sig >> 13));
  }
  uint16_t h_exp = (uint16_t)((e - 0x38000000u) >> 13);
  sig = f & 0x007FFFFFu;
  if ((sig & 0x00003FFFu) != 0x00001000u) sig += 0x00001000u;  /* ties go to the even half */
  return (uint16_t)(sgn + (uint16_t)((sig >> 13) + h_exp));      /* a carry rounds up the exponent */
}

/* int8 with per-row scales, as quantize.py convert_into: amax = max(max(row), -min(row)) (NaN if the
   row holds one), scale = amax > 0 ? amax / 127 : 1, q = clip(rint(w / scale), -127, 127), all in
   float32 (division, not a reciprocal; rint: the default round-half-to-even mode). numpy casts a
   NaN to int8 as 0: so does this (a C cast of NaN would be undefined). */
static float ct_int8_scale(float mx, float mn, int nan) {
  float amax = mx > -mn ? mx : -mn;
  return (!nan && amax > 0) ? amax / 127.0f : 1.0f;
}

static int8_t ct_int8_value(float w, float s) {
  float x = rintf(w / s);
  if (x != x) x = 0.0f;
  else if (x > 127.0f) x = 127.0f;
  else if (x < -127.0f) x = -127.0f;
  return (int8_t)x;
}

static void ct_quantize_row(const float *w, int64_t cols, int8_t *q, float *scale) {
  if (cols <= 0) { *scale = 1.0f; return; }
  float mx = w[0], mn = w[0];
  int nan = 0;
  for (int64_t c = 0; c < cols; c++) {
    float v = w[c];
    if (v != v) nan = 1;
    if (v > mx) mx = v;
    if (v < mn) mn = v;
  }
  float s = ct_int8_scale(mx, mn, nan);
  for (int64_t c = 0; c < cols; c++) q[c] = ct_int8_value(w[c], s);
  *scale = s;
}

/* Store a rows x cols float32 weight (the program's layout) as ``fmt`` into ``dst`` (+ ``scale``). */
static void ct_store_weight(const float *w, int64_t rows, int64_t cols, int fmt, void *dst, float *scale) {
  if (fmt == CT_FMT_FP32) {
    if (rows * cols > 0) memcpy(dst, w, (size_t)(rows * cols) * sizeof(float));
  } else if (fmt == CT_FMT_FP16) {
    uint16_t *h = (uint16_t *)dst;
    for (int64_t i = 0; i < rows * cols; i++) h[i] = ct_float_to_half(w[i]);
  } else {
    for (int64_t r = 0; r < rows; r++) ct_quantize_row(w + r * cols, cols, (int8_t *)dst + r * cols, scale + r);
  }
}

/* Tensor data is read and converted in blocks of about this many bytes of float32 (at least one
   file row when the tensor is transposed or quantized): loading holds no float32 copy of a whole
   tensor, so the peak RSS is the stored model + a few MB. A test build may define it smaller. */
#ifndef CT_LOAD_BLOCK_BYTES
#define CT_LOAD_BLOCK_BYTES (1 << 18)
#endif

/* n file values (F32: isz 4, F16, or BF16: bf) -> float32; ``out`` may be ``raw`` for F32. */
static void ct_to_float(const void *raw, int isz, int bf, int64_t n, float *out) {
  if (isz == 4) { if ((const void *)out != raw && n > 0) memcpy(out, raw, (size_t)n * 4); return; }
  const unsigned char *b = (const unsigned char *)raw;
  for (int64_t i = 0; i < n; i++) {
    uint16_t h; memcpy(&h, b + 2 * i, 2);
    if (bf) { uint32_t u = (uint32_t)h << 16; memcpy(out + i, &u, 4); } else out[i] = ct_half(h);
  }
}

/* Read tensor ``name`` (file shape ``shape``) into ``dst`` stored as ``fmt`` (+ int8 ``scale``),
   transposing a 2-D tensor if asked, in blocks straight from the file: each value is converted
   to float32 (F32 / F16 / BF16) and then to the format exactly as ct_store_weight would convert a
   float32 copy of the whole tensor. A transposed int8 tensor (an output row is a file column) is
   read twice: its per-row max |w| first, then the quantized values. */
static int ct_st_load(ct_st *st, const char *path, const char *name, int ndim, const int64_t *shape,
                      int transpose, int fmt, void *dst, float *scale, char *msg) {
  ct_tensor *t = ct_st_find(st, name);
  if (!t) { ct_fail(msg, "%s: tensor '%s' is missing: the file does not match the exported model", path, name); return @U@_ERR_MISMATCH; }
  t->used = 1;
  int isz = !strcmp(t->dtype, "F32") ? 4 : (!strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16")) ? 2 : 0;
  if (!isz) { ct_fail(msg, "%s: tensor '%s' has dtype %s; supported: F32, F16, BF16", path, name, t->dtype); return @U@_ERR_MISMATCH; }
  int same = t->ndim == ndim;
  int64_t numel = 1;
  for (int k = 0; same && k < ndim; k++) same = t->shape[k] == shape[k];
  for (int k = 0; k < ndim; k++) numel *= shape[k];
  if (!same) {
    char got[128] = "", want[128] = "";
    for (int k = 0; k < t->ndim && k < 8; k++) snprintf(got + strlen(got), sizeof got - strlen(got), k ? ", %lld" : "%lld", (long long)t->shape[k]);
    for (int k = 0; k < ndim; k++) snprintf(want + strlen(want), sizeof want - strlen(want), k ? ", %lld" : "%lld", (long long)shape[k]);
    ct_fail(msg, "%s: tensor '%s' has shape [%s], the exported model expects [%s]", path, name, got, want);
    return @U@_ERR_MISMATCH;
  }
  if (t->end - t->begin != numel * isz) {
    ct_fail(msg, "%s: tensor '%s' spans %lld bytes, but %lld %s values need %lld", path, name,
            (long long)(t->end - t->begin), (long long)numel, t->dtype, (long long)(numel * isz));
    return @U@_ERR_FORMAT;
  }
  int bf = t->dtype[0] == 'B';
  int64_t rows = ndim == 2 ? shape[0] : 1, cols = ndim == 2 ? shape[1] : numel;  /* the file's layout */
  if (ndim != 2) transpose = 0;
  if (fmt == CT_FMT_INT8 && numel == 0) {  /* ct_quantize_row's scale of an empty row */
    for (int64_t r = 0, n = transpose ? cols : rows; r < n; r++) scale[r] = 1.0f;
    return @U@_OK;
  }
  long at = (long)(st->data_start + t->begin);
  if (fseek(st->f, at, SEEK_SET) != 0) goto truncated;
  if (numel == 0) return @U@_OK;
  if (fmt == CT_FMT_FP32 && isz == 4 && !transpose) {  /* the file's bytes are the buffer's */
    if (fread(dst, 1, (size_t)(numel * 4), st->f) != (size_t)(numel * 4)) goto truncated;
    return @U@_OK;
  }
  /* unit: values a block holds whole (a file row, or one value for an elementwise conversion) */
  int64_t unit = (transpose || fmt == CT_FMT_INT8) ? cols : 1, units = numel / unit;
  int64_t per = CT_LOAD_BLOCK_BYTES / (4 * unit);
  if (per < 1) per = 1;
  if (per > units) per = units;
  float *fb = malloc((size_t)(per * unit) * sizeof(float));
  void *raw = isz == 4 ? (void *)fb : malloc((size_t)(per * unit * isz));
  float *mx = NULL;  /* a transposed int8 tensor: max and min of each file column, NaN flags */
  unsigned char *nan = NULL;
  if (transpose && fmt == CT_FMT_INT8) { mx = malloc((size_t)cols * 2 * sizeof(float)); nan = calloc((size_t)cols, 1); }
  int rc = @U@_OK;
  size_t esz = fmt == CT_FMT_FP32 ? 4 : fmt == CT_FMT_FP16 ? 2 : 1;
  if (!fb || !raw || (transpose && fmt == CT_FMT_INT8 && (!mx || !nan))) {
    ct_fail(msg, "out of memory reading '%s'", name); rc = @U@_ERR_MEMORY; goto out;
  }
  if (!transpose) {
    for (int64_t u0 = 0; u0 < units; u0 += per) {
      int64_t n = units - u0 < per ? units - u0 : per, nv = n * unit;
      if (fread(raw, (size_t)isz, (size_t)nv, st->f) != (size_t)nv) goto truncated_out;
      ct_to_float(raw, isz, bf, nv, fb);
      ct_store_weight(fb, n, unit, fmt, (char *)dst + (size_t)(u0 * unit) * esz, scale ? scale + u0 : NULL);
    }
    goto out;
  }
  /* transposed: dst[c * rows + r] = file[r][c]; a block of file rows scatters to a run of each
     output row */
  if (fmt == CT_FMT_INT8) {  /* pass 1: the arithmetic of ct_quantize_row, file rows in order */
    float *mn = mx + cols;
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
      int64_t n = rows - r0 < per ? rows - r0 : per;
      if (fread(raw, (size_t)isz, (size_t)(n * cols), st->f) != (size_t)(n * cols)) goto truncated_out;
      ct_to_float(raw, isz, bf, n * cols, fb);
      if (r0 == 0) for (int64_t c = 0; c < cols; c++) mx[c] = mn[c] = fb[c];
      for (int64_t r = 0; r < n; r++) {
        const float *w = fb + r * cols;
        for (int64_t c = 0; c < cols; c++) {
          float v = w[c];
          if (v != v) nan[c] = 1;
          if (v > mx[c]) mx[c] = v;
          if (v < mn[c]) mn[c] = v;
        }
      }
    }
    for (int64_t c = 0; c < cols; c++) scale[c] = ct_int8_scale(mx[c], mn[c], nan[c]);
    if (fseek(st->f, at, SEEK_SET) != 0) goto truncated_out;
  }
  for (int64_t r0 = 0; r0 < rows; r0 += per) {
    int64_t n = rows - r0 < per ? rows - r0 : per;
    if (fread(raw, (size_t)isz, (size_t)(n * cols), st->f) != (size_t)(n * cols)) goto truncated_out;
    ct_to_float(raw, isz, bf, n * cols, fb);
    for (int64_t c = 0; c < cols; c++) {
      const float *w = fb + c;
      if (fmt == CT_FMT_FP32) {
        float *o = (float *)dst + c * rows + r0;
        for (int64_t r = 0; r < n; r++) o[r] = w[r * cols];
      } else if (fmt == CT_FMT_FP16) {
        uint16_t *o = (uint16_t *)dst + c * rows + r0;
        for (int64_t r = 0; r < n; r++) o[r] = ct_float_to_half(w[r * cols]);
      } else {
        int8_t *o = (int8_t *)dst + c * rows + r0;
        float s = scale[c];
        for (int64_t r = 0; r < n; r++) o[r] = ct_int8_value(w[r * cols], s);
      }
    }
  }
  goto out;
truncated_out:
  rc = @U@_ERR_FORMAT;
  ct_fail(msg, "%s: cannot read the data of tensor '%s' (truncated file?)", path, name);
out:
  if (raw != (void *)fb) free(raw);
  free(fb);
  free(mx);
  free(nan);
  return rc;
truncated:
  ct_fail(msg, "%s: cannot read the data of tensor '%s' (truncated file?)", path, name);
  return @U@_ERR_FORMAT;
}

static int ct_ignored_tensor(const char *name) {
  size_t n = strlen(name);
  if (!strcmp(name, "lm_head.weight")) return 1;
  if (n >= 9 && !strcmp(name + n - 9, ".attn.bias")) return 1;
  if (n >= 16 && !strcmp(name + n - 16, ".attn.masked_bias")) return 1;
  return 0;
}

static uint64_t ct_fnv64_file(const char *path, int *ok) {
  FILE *f = fopen(path, "rb");
  uint64_t h = 1469598103934665603ULL;
  *ok = 0;
  if (!f) return 0;
  unsigned char buf[65536]; size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < got; i++) { h ^= buf[i]; h *= 1099511628211ULL; }
  *ok = !ferror(f);
  fclose(f);
  return h;
}

/* ------------------------------------------------------------------ the model's buffers */
typedef struct {
  void *bufs[CT_NBUF];
  void *slots[CT_NSLOT + 1];
  int64_t slot_cap[CT_NSLOT + 1];
} ct_model;

static void ct_model_free(ct_model *m) {
  for (int b = 0; b < CT_NBUF; b++) if (ct_slot[b] < 0 && m->bufs[b]) free(m->bufs[b]);
  for (int s = 0; s < CT_NSLOT; s++) free(m->slots[s]);
  memset(m, 0, sizeof *m);
}

/* Allocate the fixed buffers and read every weight from the safetensors file. */
static int ct_model_load(ct_model *m, const char *path, char *msg) {
  memset(m, 0, sizeof *m);
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++) {
    if (ct_slot[b] >= 0) continue;
    m->bufs[b] = ct_alloc(ct_elems(b, sym) * ct_itemsize[b]);
    if (!m->bufs[b]) { ct_fail(msg, "out of memory allocating the model buffers"); return @U@_ERR_MEMORY; }
  }
  ct_st st;
  int rc = ct_st_open(&st, path, msg);
  if (rc) { ct_st_close(&st); return rc; }
  for (int w = 0; w < CT_NWEIGHTS; w++) {
    const ct_weight *cw = &ct_weights[w];
    rc = ct_st_load(&st, path, cw->name, cw->ndim, cw->shape, cw->transpose, cw->fmt, m->bufs[cw->buf],
                    cw->scale >= 0 ? (float *)m->bufs[cw->scale] : NULL, msg);
    if (rc) { ct_st_close(&st); return rc; }
  }
  for (int k = 0; k < st.n; k++) {
    if (!st.t[k].used && !ct_ignored_tensor(st.t[k].name)) {
      ct_fail(msg, "%s: unexpected tensor '%s': the file does not match the exported model", path, st.t[k].name);
      ct_st_close(&st);
      return @U@_ERR_MISMATCH;
    }
  }
  ct_st_close(&st);
  return @U@_OK;
}

/* One model call: intermediates grow to the sizes these symbol values need. */
static int ct_model_run(ct_model *m, const int64_t *sym, char *msg) {
  for (int s = 0; s < CT_NSLOT; s++) {
    int64_t need = ct_slot_bytes(s, sym);
    if (need > m->slot_cap[s]) {
      int64_t grow = need + need / 4;
      void *p = ct_alloc(grow);
      if (!p) { ct_fail(msg, "out of memory (%lld bytes of intermediates)", (long long)grow); return @U@_ERR_MEMORY; }
      free(m->slots[s]);
      m->slots[s] = p;
      m->slot_cap[s] = grow;
      for (int b = 0; b < CT_NBUF; b++) if (ct_slot[b] == s) m->bufs[b] = p;
    }
  }
  int64_t err[8] = {0};
  caten_run(m->bufs, sym, err);
  if (err[0]) {
    ct_fail(msg, "run-time check failed in model kernel call %lld: index %lld outside a buffer of %lld elements",
            (long long)err[4], (long long)err[2], (long long)err[3]);
    return @U@_ERR_RUNTIME;
  }
  return @U@_OK;
}
"""

HEADER_COMMON = r"""
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: every API call returns one; @P@_last_error(ctx) (or (NULL) after a failed init)
   says what was wrong. */
enum {
  @U@_OK = 0,
  @U@_ERR_IO = 1,         /* a file cannot be opened or read */
  @U@_ERR_FORMAT = 2,     /* a corrupt or truncated weights file */
  @U@_ERR_MISMATCH = 3,   /* tensor names / shapes / dtypes do not match the exported model */
  @U@_ERR_TOKENIZER = 4,  /* vocab / merges files differ from the ones the library was exported with */
  @U@_ERR_ARGUMENT = 5,   /* an invalid argument or option */
  @U@_ERR_CONTEXT = 6,    /* the text does not fit the model's context */
  @U@_ERR_MEMORY = 7,     /* out of memory */
  @U@_ERR_RUNTIME = 8     /* a run-time check in generated code failed */
};

typedef struct @P@_ctx @P@_ctx;

/* Load the weights (a .safetensors file, or a directory holding model.safetensors). The tokenizer
   tables of the exported vocabulary are linked into the library: vocab_path / merges_path may be
   NULL. A vocab.json / encoder.json other than the exported one is loaded and its tables built at
   init (it must have the model's vocabulary size); a merges file is checked for its format.
   Returns NULL on failure with *err set (if err is not NULL); see @P@_last_error(NULL). */
@P@_ctx *@P@_init(const char *weights_path, const char *vocab_path, const char *merges_path, int *err);
void @P@_free(@P@_ctx *ctx);
/* The message of the last error on ctx (ctx == NULL: the last failed init on this thread). */
const char *@P@_last_error(const @P@_ctx *ctx);
const char *@P@_error_name(int code);
/* Token ids of UTF-8 text (byte-level BPE); *count receives the number of tokens even if > cap. */
int @P@_tokenize(@P@_ctx *ctx, const char *text_utf8, int32_t *ids, int64_t cap, int64_t *count);
int64_t @P@_context_length(const @P@_ctx *ctx);
int64_t @P@_vocab_size(const @P@_ctx *ctx);
"""

_FORMAT_DOC = {
    "fp32": "as float32, the file's values (F16/BF16 tensors widened exactly)",
    "fp16": "as IEEE fp16 (round to nearest even, as numpy's astype(float16)): half the memory",
    "int8": "as int8 with one float32 scale per output row (max |w| / 127): a quarter of the memory",
}


def weight_format_header(weight_format: str) -> str:
    """The header's statement of the weight format the library was exported for."""
    return f"""
/* Weights: @P@_init reads a Hugging Face model.safetensors (F32, F16 or BF16 tensors) and, while
   loading, stores the matmul weights {_FORMAT_DOC[weight_format]}.
   Chosen at export (caten-lab export --weight-format); the same logits as the Python GPT2Runner with
   weight_format="{weight_format}". */
#define @U@_WEIGHT_FORMAT "{weight_format}"
const char *@P@_weight_format(void);  /* @U@_WEIGHT_FORMAT */
"""


GEN_HEADER = _c_text("generate.h")

CTX_C = r"""
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
API const char *@P@_weight_format(void) { return CT_WEIGHT_FORMAT; }
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
  {
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
  if (merges_path) { rc = ct_check_merges(merges_path, ct_init_error); if (rc) goto fail; }
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
  rc = ct_model_load(&ctx->m, path, ct_init_error);
  if (rc) goto fail;
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
    int64_t aerr[4] = {0};
    int32_t got = ct_encode_call(&ctx->tok, (uint8_t *)text, n, char_start, char_cls, sym, rank, res, heap, out, aerr);
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
  int64_t aerr[4] = {0};
  ctx->dec_ids[0] = tok;
  int32_t n = ct_decode_call(&ctx->tok, ctx->dec_ids, ctx->dec_out, ctx->dec_cap + 1, aerr);
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
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  ct_set_symbols(sym, n, pos);
  return ct_model_run(&ctx->m, sym, ctx->msg);
}

static void ct_reset_states(@P@_ctx *ctx) {
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++)
    if (ct_kind[b] == 2) memset(ctx->m.bufs[b], 0, (size_t)(ct_elems(b, sym) * ct_itemsize[b]));
}
"""

GEN_C = _c_text("generate.c")

GEN_MAIN = _c_text("cli_main.c")

TOKENIZER_FILES_C = r"""
/* ------------------------------------------------------------------ GPT-2 BPE tables from files
   The same construction as workflow/tokenizers/bpe.py (build_bpe_tables, "ranks" semantics): the
   vocabulary decides which pairs merge (merges.txt is only checked for its format), ids are ranks. */
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

/* merges.txt / vocab.bpe: every line but an optional '#version' first line is "left right" */
static int ct_check_merges(const char *path, char *msg) {
  int64_t n;
  char *t = ct_read_all(path, &n, msg, "merges");
  if (!t) return @U@_ERR_IO;
  int64_t line = 1, start = 0;
  for (int64_t i = 0; i <= n; i++) {
    if (i < n && t[i] != '\n') continue;
    int64_t len = i - start;
    if (len > 0 && !(line == 1 && len >= 8 && !strncmp(t + start, "#version", 8))) {
      int spaces = 0;
      for (int64_t k = start; k < i; k++) spaces += t[k] == ' ';
      if (spaces != 1 || t[start] == ' ' || t[i - 1] == ' ') {
        ct_fail(msg, "%s:%lld: malformed merge rule (each line is 'left right')", path, (long long)line);
        free(t);
        return @U@_ERR_TOKENIZER;
      }
    }
    line++;
    start = i + 1;
  }
  free(t);
  return @U@_OK;
}

static void ct_tables_free(ct_tables *T) {
  for (int k = 0; k < 8; k++) free(T->owned[k]);
  memset(T, 0, sizeof *T);
}

/* Build the tables of a vocab.json / encoder.json: {"token": id, ...} in GPT-2's byte alphabet. */
static int ct_tables_from_vocab(ct_tables *T, const char *path, char *msg) {
  int64_t size;
  char *text = ct_read_all(path, &size, msg, "vocabulary");
  if (!text) return @U@_ERR_IO;
  int rc = @U@_ERR_TOKENIZER;
  int64_t n = CT_VOCAB;
  int32_t *len = calloc((size_t)n, sizeof(int32_t));
  uint8_t **item = calloc((size_t)n, sizeof(uint8_t *));
  uint8_t *hashed = calloc((size_t)n, 1);
  char *key = malloc(4096);
  if (!len || !item || !hashed || !key) { ct_fail(msg, "out of memory"); rc = @U@_ERR_MEMORY; goto out; }
  ct_json p = {text, (size_t)size, 0, 0};
  if (!cj_eat(&p, '{')) { ct_fail(msg, "%s: not a JSON object mapping tokens to ids", path); goto out; }
  int64_t max_id = -1;
  if (!cj_eat(&p, '}')) {
    for (;;) {
      int64_t id;
      if (!cj_string(&p, key, 4096) || !cj_eat(&p, ':') || !cj_int(&p, &id)) {
        ct_fail(msg, "%s: malformed vocabulary JSON near byte %zu (expected \"token\": id)", path, p.i); goto out;
      }
      if (id < 0 || id >= n) {
        ct_fail(msg, "%s: token id %lld outside 0..%lld: the vocabulary does not fit the exported model (%lld tokens)",
                path, (long long)id, (long long)(n - 1), (long long)n);
        goto out;
      }
      if (id > max_id) max_id = id;
      size_t klen = strlen(key);
      uint8_t *bytes = malloc(klen + 1);
      if (!bytes) { ct_fail(msg, "out of memory"); rc = @U@_ERR_MEMORY; goto out; }
      int64_t m = 0;
      int special = !strcmp(key, "<|endoftext|>");
      if (special) { memcpy(bytes, key, klen); m = (int64_t)klen; }
      else {
        for (size_t i = 0; i < klen;) {  /* UTF-8 code points -> bytes */
          unsigned char c = (unsigned char)key[i];
          uint32_t cp; int w;
          if (c < 0x80) { cp = c; w = 1; }
          else if ((c & 0xE0) == 0xC0 && i + 1 < klen) { cp = ((uint32_t)(c & 0x1F) << 6) | (key[i + 1] & 0x3F); w = 2; }
          else { cp = 0xFFFFFFFFu; w = 1; }
          int b = ct_byte_of_char(cp);
          if (b < 0) {
            free(bytes);
            ct_fail(msg, "%s: token '%s' (id %lld) is not in GPT-2's byte-level alphabet", path, key, (long long)id);
            goto out;
          }
          bytes[m++] = (uint8_t)b;
          i += (size_t)w;
        }
      }
      free(item[id]);
      item[id] = bytes; len[id] = (int32_t)m; hashed[id] = (uint8_t)!special;
      if (cj_eat(&p, ',')) continue;
      if (cj_eat(&p, '}')) break;
      ct_fail(msg, "%s: malformed vocabulary JSON near byte %zu", path, p.i); goto out;
    }
  }
  if (max_id + 1 != n) {
    ct_fail(msg, "%s: the vocabulary has %lld tokens, the exported model %lld", path, (long long)(max_id + 1), (long long)n);
    goto out;
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
    if (!offsets || !data || !slots || !byte_ids) { ct_fail(msg, "out of memory"); rc = @U@_ERR_MEMORY; goto out; }
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
        if (!pl || !pr || !pk || !pv) { ct_fail(msg, "out of memory"); rc = @U@_ERR_MEMORY; goto out; }
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
  rc = @U@_OK;
out:
  if (item) for (int64_t i = 0; i < n; i++) free(item[i]);
  free(item); free(len); free(hashed); free(key); free(text);
  return rc;
}
"""
