/* caten_lab exported loader: reading one validated tensor (ct_st_open / ct_st_check_model first) into
   a program buffer, converted to the weight format, in blocks straight from the file. Needs
   st_loader.c. */

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
  if (!t) { ct_fail(msg, "%s: tensor '%s' is missing: the file does not match the exported model", path, name); return CT_ERR_MISMATCH; }
  t->used = 1;
  int isz = !strcmp(t->dtype, "F32") ? 4 : (!strcmp(t->dtype, "F16") || !strcmp(t->dtype, "BF16")) ? 2 : 0;
  if (!isz) { ct_fail(msg, "%s: tensor '%s' has dtype %s; supported: F32, F16, BF16", path, name, t->dtype); return CT_ERR_MISMATCH; }
  int same = t->ndim == ndim;
  int64_t numel = 1;
  for (int k = 0; same && k < ndim; k++) same = t->shape[k] == shape[k];
  for (int k = 0; k < ndim; k++) numel *= shape[k];
  if (!same) {
    char got[128] = "", want[128] = "";
    for (int k = 0; k < t->ndim && k < 8; k++) snprintf(got + strlen(got), sizeof got - strlen(got), k ? ", %lld" : "%lld", (long long)t->shape[k]);
    for (int k = 0; k < ndim; k++) snprintf(want + strlen(want), sizeof want - strlen(want), k ? ", %lld" : "%lld", (long long)shape[k]);
    ct_fail(msg, "%s: tensor '%s' has shape [%s], the exported model expects [%s]", path, name, got, want);
    return CT_ERR_MISMATCH;
  }
  if (t->end - t->begin != numel * isz) {
    ct_fail(msg, "%s: tensor '%s' spans %lld bytes, but %lld %s values need %lld", path, name,
            (long long)(t->end - t->begin), (long long)numel, t->dtype, (long long)(numel * isz));
    return CT_ERR_FORMAT;
  }
  int bf = t->dtype[0] == 'B';
  int64_t rows = ndim == 2 ? shape[0] : 1, cols = ndim == 2 ? shape[1] : numel;  /* the file's layout */
  if (ndim != 2) transpose = 0;
  if (fmt == CT_FMT_INT8 && numel == 0) {  /* ct_quantize_row's scale of an empty row */
    for (int64_t r = 0, n = transpose ? cols : rows; r < n; r++) scale[r] = 1.0f;
    return CT_OK;
  }
  long at = (long)(st->data_start + t->begin);
  if (fseek(st->f, at, SEEK_SET) != 0) goto truncated;
  if (numel == 0) return CT_OK;
  if (fmt == CT_FMT_FP32 && isz == 4 && !transpose) {  /* the file's bytes are the buffer's */
    if (fread(dst, 1, (size_t)(numel * 4), st->f) != (size_t)(numel * 4)) goto truncated;
    return CT_OK;
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
  int rc = CT_OK;
  size_t esz = fmt == CT_FMT_FP32 ? 4 : fmt == CT_FMT_FP16 ? 2 : 1;
  if (!fb || !raw || (transpose && fmt == CT_FMT_INT8 && (!mx || !nan))) {
    ct_fail(msg, "out of memory reading '%s'", name); rc = CT_ERR_MEMORY; goto out;
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
  rc = CT_ERR_FORMAT;
  ct_fail(msg, "%s: cannot read the data of tensor '%s' (truncated file?)", path, name);
out:
  if (raw != (void *)fb) free(raw);
  free(fb);
  free(mx);
  free(nan);
  return rc;
truncated:
  ct_fail(msg, "%s: cannot read the data of tensor '%s' (truncated file?)", path, name);
  return CT_ERR_FORMAT;
}

