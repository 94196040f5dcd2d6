/* Quantized matmul helpers (caten_lab/codegen/c/quant.h): 8-bit activation blocks and the dot products of
   GGUF weight rows with them. The kernel IR calls these (codegen/lower_quant.py); the NumPy reference
   they follow is caten_lab/formats/act_quant.py (layouts, rounding, NaN rules) and
   caten_lab/formats/gguf_quant.py (the weight blocks). The renderer pastes this file after runtime.h
   into a generated C file that calls one of them.

   Activation blocks: cl_qa32 (32 values: weights Q8_0, Q4_0, Q4_1) and cl_qa256 (256 values: Q4_K,
   Q5_K, Q6_K). Integer dot products are exact; they are combined with the float scales in float32. */
#include <string.h>

typedef struct { float d; float sd; int8_t q[32]; } cl_qa32;              /* 40 bytes; sd = d * sum(q) */
typedef struct { float d; int16_t bsum[16]; int8_t q[256]; } cl_qa256;   /* 292 bytes; bsum: sums of 16 */
_Static_assert(sizeof(cl_qa32) == 40, "cl_qa32 is 40 bytes");
_Static_assert(sizeof(cl_qa256) == 292, "cl_qa256 is 292 bytes");

static inline float cl_qf16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return cl_h2f(h); }

/* One block of n values: its scale (0 for a zero block, NaN when it holds an inf or a NaN) and q. */
static inline float cl_quant_block(const float *restrict x, int8_t *restrict q, int n) {
  float amax = 0.0f;
  int bad = 0;
  for (int i = 0; i < n; i++) {
    float a = fabsf(x[i]);
    bad |= !(a <= 3.4028234663852886e38f);
    amax = a > amax ? a : amax;
  }
  float inv = 127.0f / amax;
  if (bad || amax == 0.0f || !(inv <= 3.4028234663852886e38f)) {
    memset(q, 0, (size_t)n);
    return bad ? __builtin_nanf("") : 0.0f;
  }
  for (int i = 0; i < n; i++) {
    float v = __builtin_rintf(x[i] * inv);
    q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
  }
  return amax / 127.0f;
}

static inline void cl_quant_rows_a32(const float *restrict x, void *restrict out, int64_t k) {
  cl_qa32 *b = (cl_qa32 *)out;
  for (int64_t i = 0; i < k / 32; i++) {
    float d = cl_quant_block(x + 32 * i, b[i].q, 32);
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += b[i].q[j];
    b[i].d = d;
    b[i].sd = d * (float)s;
  }
}

static inline void cl_quant_rows_a256(const float *restrict x, void *restrict out, int64_t k) {
  cl_qa256 *b = (cl_qa256 *)out;
  for (int64_t i = 0; i < k / 256; i++) {
    b[i].d = cl_quant_block(x + 256 * i, b[i].q, 256);
    for (int g = 0; g < 16; g++) {
      int32_t s = 0;
      for (int j = 0; j < 16; j++) s += b[i].q[16 * g + j];
      b[i].bsum[g] = (int16_t)s;
    }
  }
}

/* ---- dot products: one weight row (k values) with one activation row --------------------------- */

static inline float cl_qdot_q8_0(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++, wb += 34) {
    /* through an int8_t pointer: gcc 12 turns (int8_t) casts of uint8_t loads in a dot product into
       vpdpbusd, which reads them as unsigned (a wrong result) */
    const int8_t *q = (const int8_t *)(wb + 2);
    int32_t s = 0;
    for (int i = 0; i < 32; i++) s += (int32_t)q[i] * x[b].q[i];
    acc += cl_qf16(wb) * x[b].d * (float)s;
  }
  return acc;
}

static inline float cl_qdot_q4_0(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++, wb += 18) {
    int32_t s = 0, sx = 0;
    for (int i = 0; i < 16; i++) {
      s += (int32_t)(wb[2 + i] & 15) * x[b].q[i] + (int32_t)(wb[2 + i] >> 4) * x[b].q[i + 16];
    }
    for (int i = 0; i < 32; i++) sx += x[b].q[i];
    acc += cl_qf16(wb) * x[b].d * (float)(s - 8 * sx);
  }
  return acc;
}

static inline float cl_qdot_q4_1(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++, wb += 20) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) {
      s += (int32_t)(wb[4 + i] & 15) * x[b].q[i] + (int32_t)(wb[4 + i] >> 4) * x[b].q[i + 16];
    }
    acc += cl_qf16(wb) * x[b].d * (float)s + cl_qf16(wb + 2) * x[b].sd;
  }
  return acc;
}

/* Q4_K/Q5_K: the 6-bit scale and min of sub-block j from the 12 packed bytes */
static inline void cl_qk_scale(const uint8_t *s, int j, int32_t *sc, int32_t *mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

static inline float cl_qdot_qk(int64_t k, const void *restrict w, const void *restrict xq, int five) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa256 *x = (const cl_qa256 *)xq;
  const int bytes = five ? 176 : 144;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 256; b++, wb += bytes) {
    const uint8_t *qs = wb + (five ? 48 : 16), *qh = wb + 16;
    int32_t sum = 0, msum = 0;
    for (int j = 0; j < 8; j++) {
      int32_t sc, mn, s = 0;
      cl_qk_scale(wb + 4, j, &sc, &mn);
      for (int l = 0; l < 32; l++) {
        int32_t q = (j & 1) ? qs[32 * (j >> 1) + l] >> 4 : qs[32 * (j >> 1) + l] & 15;
        if (five) q += ((qh[l] >> j) & 1) << 4;
        s += q * x[b].q[32 * j + l];
      }
      sum += sc * s;
      msum += mn * (x[b].bsum[2 * j] + x[b].bsum[2 * j + 1]);
    }
    acc += cl_qf16(wb) * x[b].d * (float)sum - cl_qf16(wb + 2) * x[b].d * (float)msum;
  }
  return acc;
}

static inline float cl_qdot_q4_k(int64_t k, const void *restrict w, const void *restrict xq) {
  return cl_qdot_qk(k, w, xq, 0);
}

static inline float cl_qdot_q5_k(int64_t k, const void *restrict w, const void *restrict xq) {
  return cl_qdot_qk(k, w, xq, 1);
}

static inline float cl_qdot_q6_k(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa256 *x = (const cl_qa256 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 256; b++, wb += 210) {
    const uint8_t *ql = wb, *qh = wb + 128;
    const int8_t *sc = (const int8_t *)(wb + 192);
    int32_t sum = 0;
    for (int v = 0; v < 256; v++) {
      int n = v >> 7, t = (v >> 5) & 3, l = v & 31;
      int32_t lo = ql[64 * n + 32 * (t & 1) + l];
      lo = (t >> 1) ? lo >> 4 : lo & 15;
      int32_t q = lo + (((qh[32 * n + l] >> (2 * t)) & 3) << 4) - 32;
      sum += sc[v >> 4] * q * x[b].q[v];
    }
    acc += cl_qf16(wb + 208) * x[b].d * (float)sum;
  }
  return acc;
}
