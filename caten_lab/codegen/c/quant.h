/* Quantized matmul helpers (caten_lab/codegen/c/quant.h): 8-bit activation blocks and the dot products of
   GGUF weight rows with them. The kernel IR calls these (codegen/lower_quant.py, codegen/qgemm_tiles.py);
   the NumPy reference they follow is caten_lab/formats/act_quant.py (layouts, rounding, NaN rules) and
   caten_lab/formats/gguf_quant.py (the weight blocks). The renderer pastes this file after runtime.h
   into a generated C file that calls one of them.

   Activation blocks: cl_qa32 (32 values: weights Q8_0, Q4_0, Q4_1) and cl_qa256 (256 values: Q4_K,
   Q5_K, Q6_K). Integer dot products are exact; they are combined with the float scales in float32.

   API: cl_quant_rows_a32/_a256 (one row of floats -> activation blocks, bytes equal to the reference),
   cl_qdot_<t> (one weight row . one activation row) and cl_qgemm_<t> (n weight rows x m activation rows:
   out[i * out_stride + j] = cl_qdot_<t>(k, w + j * w_stride, xq + i * x_stride), strides of w and xq in
   bytes). cl_qgemm works in tiles of 4 activation rows x 2 weight rows (each unpacked weight block serves
   4 rows, each activation block 2 weight rows; K-quants without AVX-512's 32 registers: 4 x 1), leftover
   rows one at a time against 4 (K-quants: 2) weight rows: with m = 1 it is also the faster
   matrix-vector product.

   Each helper has a portable C version (cl_qp_*) and, compiled by gcc for an x86 target with AVX2 and
   F16C (the library is built with -march=native), a SIMD one on 256-bit vectors: vpdpbusd/vpdpwssd
   where the target has AVX512-VNNI+VL or AVX-VNNI, vpmaddubsw + vpmaddwd otherwise. Builtins and GCC
   vector extensions, not <immintrin.h> (~130 ms more per compile). -DCL_QUANT_PORTABLE forces the
   portable code (benchmarks, tests). */
#include <string.h>

typedef struct { float d; float sd; int8_t q[32]; } cl_qa32;              /* 40 bytes; sd = d * sum(q) */
typedef struct { float d; int16_t bsum[16]; int8_t q[256]; } cl_qa256;   /* 292 bytes; bsum: sums of 16 */
_Static_assert(sizeof(cl_qa32) == 40, "cl_qa32 is 40 bytes");
_Static_assert(sizeof(cl_qa256) == 292, "cl_qa256 is 292 bytes");
#define CL_QUANT_QGEMM 1 /* this header defines cl_qgemm_<t> (a stand-in elsewhere can test for it) */

static inline float cl_qf16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return cl_h2f(h); }

/* ==== portable C ================================================================================= */

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

static inline void cl_qp_quant_rows_a32(const float *restrict x, void *restrict out, int64_t k) {
  cl_qa32 *b = (cl_qa32 *)out;
  for (int64_t i = 0; i < k / 32; i++) {
    float d = cl_quant_block(x + 32 * i, b[i].q, 32);
    int32_t s = 0;
    for (int j = 0; j < 32; j++) s += b[i].q[j];
    b[i].d = d;
    b[i].sd = d * (float)s;
  }
}

static inline void cl_qp_quant_rows_a256(const float *restrict x, void *restrict out, int64_t k) {
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

static inline float cl_qp_dot_q8_0(int64_t k, const void *restrict w, const void *restrict xq) {
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

/* the 32 4-bit values of a Q4_0/Q4_1 block (low nibbles first, then high) dotted with 32 activations */
static inline int32_t cl_qp_nibbles(const uint8_t *q, const int8_t *x) {
  int32_t s = 0;
  for (int i = 0; i < 16; i++) s += (int32_t)(q[i] & 15) * x[i] + (int32_t)(q[i] >> 4) * x[i + 16];
  return s;
}

static inline float cl_qp_dot_q4_0(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++, wb += 18) {
    int32_t sx = 0;
    for (int i = 0; i < 32; i++) sx += x[b].q[i];
    acc += cl_qf16(wb) * x[b].d * (float)(cl_qp_nibbles(wb + 2, x[b].q) - 8 * sx);
  }
  return acc;
}

static inline float cl_qp_dot_q4_1(int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wb = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  float acc = 0.0f;
  for (int64_t b = 0; b < k / 32; b++, wb += 20) {
    acc += cl_qf16(wb) * x[b].d * (float)cl_qp_nibbles(wb + 4, x[b].q) + cl_qf16(wb + 2) * x[b].sd;
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

static inline float cl_qp_dot_qk(int64_t k, const void *restrict w, const void *restrict xq, int five) {
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

static inline float cl_qp_dot_q4_k(int64_t k, const void *restrict w, const void *restrict xq) {
  return cl_qp_dot_qk(k, w, xq, 0);
}

static inline float cl_qp_dot_q5_k(int64_t k, const void *restrict w, const void *restrict xq) {
  return cl_qp_dot_qk(k, w, xq, 1);
}

static inline float cl_qp_dot_q6_k(int64_t k, const void *restrict w, const void *restrict xq) {
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

/* ==== SIMD: 256-bit vectors, gcc builtins ========================================================= */
#if defined(__GNUC__) && !defined(__clang__) && !defined(CL_QUANT_PORTABLE) && defined(__AVX2__) && \
    defined(__F16C__)
#define CL_QSIMD 1
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define CL_QVNNI 1 /* vpdpbusd / vpdpwssd on 256-bit vectors */
#endif
#ifdef __AVX512VL__
#define CL_QKC 2 /* weight rows per K-quant qgemm tile of 4 rows: 32 vector registers hold 2, 16 hold 1 */
#else
#define CL_QKC 1
#endif

typedef int32_t cl_qv8i __attribute__((vector_size(32)));
typedef uint32_t cl_qv8u __attribute__((vector_size(32)));
typedef unsigned long long cl_qv4q __attribute__((vector_size(32)));
typedef float cl_qv8f __attribute__((vector_size(32)));
typedef char cl_qv32c __attribute__((vector_size(32)));
typedef short cl_qv16s __attribute__((vector_size(32)));
typedef int8_t cl_qv16b __attribute__((vector_size(16)));
typedef int32_t cl_qv4i __attribute__((vector_size(16)));
typedef float cl_qv4f __attribute__((vector_size(16)));
typedef short cl_qv8s __attribute__((vector_size(16)));
typedef long long cl_qv2q __attribute__((vector_size(16)));
/* unaligned, any-type views of memory */
typedef int32_t cl_qv8i_u __attribute__((vector_size(32), aligned(1), may_alias));
typedef long long cl_qv2q_u __attribute__((vector_size(16), aligned(1), may_alias));
typedef int8_t cl_qv16b_u __attribute__((vector_size(16), aligned(1), may_alias));
typedef float cl_qv8f_u __attribute__((vector_size(32), aligned(1), may_alias));
typedef uint16_t cl_qu16 __attribute__((aligned(1), may_alias));
typedef uint32_t cl_qu32 __attribute__((aligned(1), may_alias));
typedef long long cl_qu64 __attribute__((aligned(1), may_alias));

static inline cl_qv8i cl_qld(const void *p) { return *(const cl_qv8i_u *)p; }
/* v stays in a register: gcc would fold its load into every use (one load per weight row) */
#define CL_QREG(v) __asm__("" : "+v"(v))
/* 16 bytes in both 128-bit halves (vbroadcasti128: a load, no shuffle) */
static inline cl_qv8i cl_qld16x2(const void *p) {
  return (cl_qv8i)__builtin_ia32_vbroadcastsi256(*(const cl_qv2q_u *)p);
}
static inline uint16_t cl_qw16(const uint8_t *p) { return *(const cl_qu16 *)p; }
static inline int32_t cl_qw32(const uint8_t *p) { return (int32_t)*(const cl_qu32 *)p; }
static inline float cl_qh2f1(const uint8_t *p) { return __builtin_ia32_vcvtph2ps((cl_qv8s){(short)cl_qw16(p)})[0]; }
static inline cl_qv8f cl_qcvt(cl_qv8i v) { return __builtin_convertvector(v, cl_qv8f); }
static inline cl_qv8f cl_qwide(cl_qv4f v) { return __builtin_ia32_ps256_ps(v); } /* upper half unused */
/* lane l of v in all 8 lanes (vpermps: a shuffle, not a load) */
static inline cl_qv8f cl_qlane(cl_qv8f v, int l) { return __builtin_ia32_permvarsf256(v, (cl_qv8i){} + l); }
static inline float cl_qhsum(cl_qv8f v) {
  cl_qv4f a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  a += __builtin_shufflevector(a, a, 2, 3, 0, 1);
  return a[0] + a[1];
}
static inline int32_t cl_qhsumi(cl_qv8i v) {
  cl_qv4i a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  a += __builtin_shufflevector(a, a, 2, 3, 0, 1);
  return a[0] + a[1];
}
static inline cl_qv8i cl_qshuf(cl_qv8i v, cl_qv8i idx) {
  return (cl_qv8i)__builtin_ia32_pshufb256((cl_qv32c)v, (cl_qv32c)idx);
}
static inline cl_qv8i cl_qneg8(cl_qv8i v) { return (cl_qv8i)(-(cl_qv32c)v); } /* bytes -> -bytes */
static inline cl_qv16s cl_qmaddubs(cl_qv8i u, cl_qv8i s) {
  return __builtin_ia32_pmaddubsw256((cl_qv32c)u, (cl_qv32c)s);
}

/* acc + the dot products of unsigned bytes u and signed bytes s, 4 per int32 lane, exact. Without
   VNNI, vpmaddubsw adds pairs in int16 with saturation: exact only while u <= 128 (2 * 128 * 127 fits;
   the activations are in [-127, 127]), which every caller keeps. */
static inline cl_qv8i cl_qdp(cl_qv8i acc, cl_qv8i u, cl_qv8i s) {
#ifdef CL_QVNNI
  return __builtin_ia32_vpdpbusd_v8si(acc, u, s);
#else
  return acc + __builtin_ia32_pmaddwd256(cl_qmaddubs(u, s), (cl_qv16s){} + 1);
#endif
}
/* acc + u1.s1 + u2.s2 (without VNNI the int16 pair sums are added first: callers keep them < 2^15) */
static inline cl_qv8i cl_qdp2(cl_qv8i acc, cl_qv8i u1, cl_qv8i s1, cl_qv8i u2, cl_qv8i s2) {
#ifdef CL_QVNNI
  return __builtin_ia32_vpdpbusd_v8si(__builtin_ia32_vpdpbusd_v8si(acc, u1, s1), u2, s2);
#else
  return acc + __builtin_ia32_pmaddwd256(cl_qmaddubs(u1, s1) + cl_qmaddubs(u2, s2), (cl_qv16s){} + 1);
#endif
}
/* acc + sum of (u . s pairs, int16) * w16: a sub-block's dot product times its scale, exact for u <= 63
   (2 * 63 * 127 fits int16; vpdpwssd and vpmaddwd do not saturate here) */
static inline cl_qv8i cl_qdpw(cl_qv8i acc, cl_qv8i u, cl_qv8i s, cl_qv8i w16) {
#ifdef CL_QVNNI
  return __builtin_ia32_vpdpwssd_v8si(acc, (cl_qv8i)cl_qmaddubs(u, s), w16);
#else
  return acc + __builtin_ia32_pmaddwd256(cl_qmaddubs(u, s), (cl_qv16s)w16);
#endif
}

/* The u8 operand of a Q4_0/Q4_1 block: its 16 nibble bytes, low nibbles (values 0..15) in the low half,
   high nibbles in the high half. With vpdpbusd the high ones stay in place (16 x the value, no shift):
   cl_qnibfix scales those lanes' float sums by 1/16 (exact) at the end. vpmaddubsw would overflow int16
   on 16 x 15 x 127 pairs, so without VNNI they are shifted down. cl_qc8 is the u8 operand that, dotted
   with -x, subtracts Q4_0's offset 8 in the same units. */
#ifdef CL_QVNNI
#define CL_QHI 0.0625f
static inline cl_qv8i cl_qnib(const uint8_t *qs) {
  return cl_qld16x2(qs) & (cl_qv8i){0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f,
                                    (int32_t)0xf0f0f0f0, (int32_t)0xf0f0f0f0, (int32_t)0xf0f0f0f0, (int32_t)0xf0f0f0f0};
}
#define CL_QC8 ((cl_qv8i){0x08080808, 0x08080808, 0x08080808, 0x08080808, \
                          (int32_t)0x80808080, (int32_t)0x80808080, (int32_t)0x80808080, (int32_t)0x80808080})
#else
#define CL_QHI 1.0f
static inline cl_qv8i cl_qnib(const uint8_t *qs) {
  return (cl_qv8i)((cl_qv4q)cl_qld16x2(qs) >> (cl_qv4q){0, 0, 4, 4}) & 0x0f0f0f0f;
}
#define CL_QC8 ((cl_qv8i){} + 0x08080808)
#endif
#define CL_QNIBFIX ((cl_qv8f){1.0f, 1.0f, 1.0f, 1.0f, CL_QHI, CL_QHI, CL_QHI, CL_QHI})

/* ---- activation quantization ---- */

/* One block of 8n floats: d (as the reference), q, and the int32 lane sums of q (8 lanes). */
static inline float cl_qquant8(const float *restrict x, int8_t *restrict q, int n, cl_qv8i *restrict qsum) {
  cl_qv8i m = {};
  for (int i = 0; i < n; i++) /* |x| as int: ordered like the floats, inf and NaN above FLT_MAX */
    m = __builtin_ia32_pmaxsd256(m, cl_qld(x + 8 * i) & 0x7fffffff);
  cl_qv4i m4 = __builtin_ia32_pmaxsd128(__builtin_shufflevector(m, m, 0, 1, 2, 3), __builtin_shufflevector(m, m, 4, 5, 6, 7));
  m4 = __builtin_ia32_pmaxsd128(m4, __builtin_shufflevector(m4, m4, 2, 3, 0, 1));
  int32_t bits = m4[0] > m4[1] ? m4[0] : m4[1];
  float amax;
  memcpy(&amax, &bits, 4);
  float inv = 127.0f / amax;
  if (bits > 0x7f7fffff || amax == 0.0f || !(inv <= 3.4028234663852886e38f)) {
    memset(q, 0, (size_t)(8 * n));
    *qsum = (cl_qv8i){};
    return bits > 0x7f7fffff ? __builtin_nanf("") : 0.0f;
  }
  cl_qv8i s = {};
  for (int i = 0; i < n; i += 4) { /* vcvtps2dq rounds half to even (default MXCSR), as rint */
    cl_qv8i v0 = __builtin_ia32_cvtps2dq256(*(const cl_qv8f_u *)(x + 8 * i) * inv);
    cl_qv8i v1 = __builtin_ia32_cvtps2dq256(*(const cl_qv8f_u *)(x + 8 * i + 8) * inv);
    cl_qv8i v2 = __builtin_ia32_cvtps2dq256(*(const cl_qv8f_u *)(x + 8 * i + 16) * inv);
    cl_qv8i v3 = __builtin_ia32_cvtps2dq256(*(const cl_qv8f_u *)(x + 8 * i + 24) * inv);
    s += (v0 + v1) + (v2 + v3);
    /* |v| <= 127: the saturating packs are exact; they interleave 128-bit halves, vpermd restores */
    cl_qv8i p = (cl_qv8i)__builtin_ia32_packsswb256(__builtin_ia32_packssdw256(v0, v1), __builtin_ia32_packssdw256(v2, v3));
    *(cl_qv8i_u *)(q + 8 * i) = __builtin_ia32_permvarsi256(p, (cl_qv8i){0, 4, 1, 5, 2, 6, 3, 7});
  }
  *qsum = s;
  return amax / 127.0f;
}

static inline void cl_qs_quant_rows_a32(const float *restrict x, void *restrict out, int64_t k) {
  cl_qa32 *b = (cl_qa32 *)out;
  for (int64_t i = 0; i < k / 32; i++) {
    cl_qv8i s;
    float d = cl_qquant8(x + 32 * i, b[i].q, 4, &s);
    b[i].d = d;
    b[i].sd = d * (float)cl_qhsumi(s);
  }
}

static inline void cl_qs_quant_rows_a256(const float *restrict x, void *restrict out, int64_t k) {
  cl_qa256 *b = (cl_qa256 *)out;
  for (int64_t i = 0; i < k / 256; i++) {
    cl_qv8i s;
    b[i].d = cl_qquant8(x + 256 * i, b[i].q, 32, &s);
    /* sums of 16: of 2 bytes (vpmaddubsw with 1), then 3 rounds of vphaddw (pairs of neighbours) */
    for (int h = 0; h < 2; h++) {
      cl_qv16s p0 = cl_qmaddubs((cl_qv8i){} + 0x01010101, cl_qld(b[i].q + 128 * h));
      cl_qv16s p1 = cl_qmaddubs((cl_qv8i){} + 0x01010101, cl_qld(b[i].q + 128 * h + 32));
      cl_qv16s p2 = cl_qmaddubs((cl_qv8i){} + 0x01010101, cl_qld(b[i].q + 128 * h + 64));
      cl_qv16s p3 = cl_qmaddubs((cl_qv8i){} + 0x01010101, cl_qld(b[i].q + 128 * h + 96));
      cl_qv16s a = __builtin_ia32_phaddw256(p0, p1), c = __builtin_ia32_phaddw256(p2, p3);
      a = __builtin_ia32_phaddw256(a, c);
      a = __builtin_ia32_phaddw256(a, a);
      /* words 0..3: the 16 bytes of p0..p3's low 128-bit halves (groups 0, 2, 4, 6 of this half of the
         block), words 8..11: their high halves (groups 1, 3, 5, 7) */
      int16_t t[16];
      memcpy(t, &a, 32);
      for (int g = 0; g < 4; g++) {
        b[i].bsum[8 * h + 2 * g] = t[g];
        b[i].bsum[8 * h + 2 * g + 1] = t[8 + g];
      }
    }
  }
}

/* ---- dot products of one row (blocks of 32) ---- */

/* Q8_0: |w| . sign(x, w) (vpsignb; exact also for pmaddubsw: 2 * 128 * 127 fits int16) */
static inline cl_qv8i cl_qdot80(const uint8_t *qs, const int8_t *xq) {
  cl_qv32c wv = (cl_qv32c)cl_qld(qs);
  return cl_qdp((cl_qv8i){}, (cl_qv8i)__builtin_ia32_pabsb256(wv),
                (cl_qv8i)__builtin_ia32_psignb256((cl_qv32c)cl_qld(xq), wv));
}
/* Q4_0: nibble . x + c8 . (-x) = (nibble - 8) . x */
static inline cl_qv8i cl_qdot40(const uint8_t *qs, const int8_t *xq) {
  cl_qv8i xv = cl_qld(xq);
  return cl_qdp2((cl_qv8i){}, cl_qnib(qs), xv, CL_QC8, cl_qneg8(xv));
}

/* The integer dot product of one block (T: 0 = Q8_0, 1 = Q4_0, 2 = Q4_1) at p with activations q */
static inline __attribute__((always_inline)) cl_qv8i cl_q32_blk(const int T, const uint8_t *p, const int8_t *q) {
  return T == 0 ? cl_qdot80(p + 2, q) : T == 1 ? cl_qdot40(p + 2, q) : cl_qdp((cl_qv8i){}, cl_qnib(p + 4), cl_qld(q));
}

/* One row, 4 blocks at a time: their scale products in one vector (Q4_1: [d0 dx0, m0 sd0, d1 dx1, m1 sd1,
   ...], the minimum terms in the odd lanes), each block's in all lanes by vpermps; 4 accumulators. */
static inline __attribute__((always_inline)) float cl_q32_dot(const int T, int64_t k, const void *restrict w,
                                                              const void *restrict xq) {
  const int64_t bs = T == 0 ? 34 : T == 1 ? 18 : 20, nb = k / 32;
  const uint8_t *p = (const uint8_t *)w;
  const cl_qa32 *x = (const cl_qa32 *)xq;
  cl_qv8f a[4] = {}, am = {};
  float m1 = 0.0f;
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4, p += 4 * bs) {
    cl_qv8f s;
    if (T == 2) {
      cl_qv4i h = {cl_qw32(p), cl_qw32(p + bs), cl_qw32(p + 2 * bs), cl_qw32(p + 3 * bs)};
      cl_qv2q x01 = {*(const cl_qu64 *)&x[b], *(const cl_qu64 *)&x[b + 1]};
      cl_qv2q x23 = {*(const cl_qu64 *)&x[b + 2], *(const cl_qu64 *)&x[b + 3]};
      s = __builtin_ia32_vcvtph2ps256((cl_qv8s)h) * (cl_qv8f)__builtin_shufflevector(x01, x23, 0, 1, 2, 3);
      am += s;
    } else {
      cl_qv8s h = {(short)cl_qw16(p), (short)cl_qw16(p + bs), (short)cl_qw16(p + 2 * bs), (short)cl_qw16(p + 3 * bs)};
      s = cl_qwide(__builtin_ia32_vcvtph2ps(h) * (cl_qv4f){x[b].d, x[b + 1].d, x[b + 2].d, x[b + 3].d});
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) a[i] += cl_qcvt(cl_q32_blk(T, p + i * bs, x[b + i].q)) * cl_qlane(s, T == 2 ? 2 * i : i);
  }
  for (; b < nb; b++, p += bs) {
    a[0] += cl_qcvt(cl_q32_blk(T, p, x[b].q)) * (cl_qh2f1(p) * x[b].d);
    if (T == 2) m1 += cl_qh2f1(p + 2) * x[b].sd;
  }
  cl_qv8f t = (a[0] + a[1]) + (a[2] + a[3]);
  return cl_qhsum(T == 0 ? t : t * CL_QNIBFIX) + (T == 2 ? (am[1] + am[3]) + (am[5] + am[7]) + m1 : 0.0f);
}

/* ---- K-quant super-blocks: R activation rows x C weight rows, accumulated per row in float ---- */

/* Q4_K/Q5_K scales sc[8] and mins mn[8] as bytes 0..7 and 8..15, in both 128-bit halves */
static inline cl_qv8i cl_qk_scales8(const uint8_t *s) {
  uint32_t u0 = (uint32_t)cl_qw32(s), u1 = (uint32_t)cl_qw32(s + 4), u2 = (uint32_t)cl_qw32(s + 8);
  uint64_t sc = (u0 & 0x3f3f3f3fu) | (uint64_t)((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32;
  uint64_t mn = (u1 & 0x3f3f3f3fu) | (uint64_t)(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)) << 32;
  cl_qv2q v = {(long long)sc, (long long)mn};
  return (cl_qv8i)__builtin_shufflevector(v, v, 0, 1, 0, 1);
}
/* bit j of each byte of qh moved to bit 4 (Q5_K's fifth bit, 16) */
static inline cl_qv8i cl_qk_hbit(cl_qv8u qh, int j) {
  return (cl_qv8i)(j <= 4 ? qh << ((4 - j) & 7) : qh >> ((j - 4) & 7)) & 0x10101010;
}

/* T: 0 = Q4_K, 1 = Q5_K, 2 = Q6_K. Adds to acc[r * C + c] the dot products of nsb super-blocks of
   weight rows wr[c] with activation rows xr[r] (scaled by float d's; one float vector per pair). */
static inline __attribute__((always_inline)) void cl_qk_tile(const int T, const int R, const int C, int64_t nsb,
                                                             const uint8_t *const *wr, const cl_qa256 *const *xr,
                                                             int64_t pf, cl_qv8f *acc) {
  const int64_t bs = T == 0 ? 144 : T == 1 ? 176 : 210;
  for (int64_t sb = 0; sb < nsb; sb++) {
    if (pf) /* a later tile's rows, to L2 */
#pragma GCC unroll 4
      for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int64_t o = 0; o < bs; o += 64) __builtin_prefetch(wr[c] + pf + sb * bs + o, 0, 2);
    /* integer sums per pair, weighted by the sub-block scales: NA per pair (independent chains of
       vpdpwssd when the tile has few pairs) */
    const int NA = R * C > 2 ? 1 : 4;
    cl_qv8i ia[8]; /* R * C * NA <= 8 */
    cl_qv8i scb[4], hb[4], mw[4];
    float d[4], dm[4];
#pragma GCC unroll 8
    for (int i = 0; i < R * C * NA; i++) ia[i] = (cl_qv8i){};
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
      const uint8_t *p = wr[c] + sb * bs;
      if (T < 2) {
        cl_qv4f f = __builtin_ia32_vcvtph2ps((cl_qv8s)(cl_qv4i){cl_qw32(p)});
        d[c] = f[0];
        dm[c] = f[1];
        scb[c] = cl_qk_scales8(p + 4);
        /* minima per pair of bsum words: [mn0 mn0 mn1 mn1 mn2 mn2 mn3 mn3 | mn4 mn4 ... mn7 mn7] */
        mw[c] = cl_qshuf(scb[c], (cl_qv8i){(int32_t)0x80088008, (int32_t)0x80098009, (int32_t)0x800a800a,
                                           (int32_t)0x800b800b, (int32_t)0x800c800c, (int32_t)0x800d800d,
                                           (int32_t)0x800e800e, (int32_t)0x800f800f});
        if (T == 1) hb[c] = cl_qld(p + 16);
      } else {
        d[c] = cl_qh2f1(p + 208);
        /* the 16 int8 scales as int16 */
        scb[c] = (cl_qv8i)__builtin_convertvector(*(const cl_qv16b_u *)(p + 192), cl_qv16s);
      }
    }
    if (T < 2) {
      cl_qv8i idx = (cl_qv8i){} + (int32_t)0x80008000; /* vpshufb: word = byte j, zero-extended */
#pragma GCC unroll 4
      for (int cc = 0; cc < 4; cc++) { /* sub-blocks 2cc (low nibbles) and 2cc + 1 (high) */
        cl_qv8i lo[4], hi[4], slo[4], shi[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
          cl_qv8i q = cl_qld(wr[c] + sb * bs + (T == 0 ? 16 : 48) + 32 * cc);
          lo[c] = q & 0x0f0f0f0f;
          hi[c] = (cl_qv8i)((cl_qv8u)q >> 4) & 0x0f0f0f0f;
          if (T == 1) {
            lo[c] |= cl_qk_hbit((cl_qv8u)hb[c], 2 * cc);
            hi[c] |= cl_qk_hbit((cl_qv8u)hb[c], 2 * cc + 1);
          }
          slo[c] = cl_qshuf(scb[c], idx);
          shi[c] = cl_qshuf(scb[c], idx + 0x00010001);
        }
        idx += 0x00020002;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
          cl_qv8i x0 = cl_qld(xr[r][sb].q + 64 * cc), x1 = cl_qld(xr[r][sb].q + 64 * cc + 32);
#pragma GCC unroll 4
          for (int c = 0; c < C; c++)
            if (NA == 1) {
              ia[r * C + c] = cl_qdpw(cl_qdpw(ia[r * C + c], lo[c], x0, slo[c]), hi[c], x1, shi[c]);
            } else {
              const int a = (r * C + c) * NA + (2 * cc) % NA;
              ia[a] = cl_qdpw(ia[a], lo[c], x0, slo[c]);
              ia[a + 1] = cl_qdpw(ia[a + 1], hi[c], x1, shi[c]);
            }
        }
      }
    } else {
#pragma GCC unroll 2
      for (int n = 0; n < 2; n++) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; t++) { /* values 128n + 32t + l: scale groups 8n + 2t (l < 16) and + 1 */
          cl_qv8i q[4], sw[4];
#pragma GCC unroll 4
          for (int c = 0; c < C; c++) {
            const uint8_t *p = wr[c] + sb * bs;
            cl_qv8u l = (cl_qv8u)cl_qld(p + 64 * n + 32 * (t & 1)), h = (cl_qv8u)cl_qld(p + 128 + 32 * n);
            cl_qv8u nib = (t < 2 ? l : l >> 4) & 0x0f0f0f0f;
            cl_qv8u hi2 = (t == 0 ? h << 4 : t == 1 ? h << 2 : t == 2 ? h : h >> 2) & 0x30303030;
            q[c] = (cl_qv8i)(nib | hi2);
            /* [s_{8n+2t} x8 | s_{8n+2t+1} x8]: the scales' half n in both 128-bit halves, then words */
            cl_qv4q sq = (cl_qv4q)scb[c];
            cl_qv8i half = (cl_qv8i)(n ? __builtin_shufflevector(sq, sq, 2, 3, 2, 3) : __builtin_shufflevector(sq, sq, 0, 1, 0, 1));
            int32_t lo_b = 4 * t, hi_b = 4 * t + 2;
            int32_t wl = lo_b | (lo_b + 1) << 8 | lo_b << 16 | (lo_b + 1) << 24;
            int32_t wh = hi_b | (hi_b + 1) << 8 | hi_b << 16 | (hi_b + 1) << 24;
            sw[c] = cl_qshuf(half, (cl_qv8i){wl, wl, wl, wl, wh, wh, wh, wh});
          }
#pragma GCC unroll 4
          for (int r = 0; r < R; r++) {
            cl_qv8i xv = cl_qld(xr[r][sb].q + 128 * n + 32 * t);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
              const int a = (r * C + c) * NA + (4 * n + t) % NA;
              ia[a] = cl_qdpw(ia[a], q[c], xv, sw[c]);
            }
          }
        }
      }
    }
    if (NA > 1)
#pragma GCC unroll 2
      for (int i = 0; i < R * C; i++) ia[i] = (ia[NA * i] + ia[NA * i + 1]) + (ia[NA * i + 2] + ia[NA * i + 3]);
    /* float: d * dx * sums (- dmin * dx * minima . bsum; Q6_K: - 32 * scales . bsum in the integers) */
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      cl_qv8i bsum = cl_qld(xr[r][sb].bsum);
      float dx = xr[r][sb].d;
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) {
        if (T < 2) {
          cl_qv8i im = __builtin_ia32_pmaddwd256((cl_qv16s)bsum, (cl_qv16s)mw[c]);
          acc[r * C + c] += cl_qcvt(ia[r * C + c]) * (d[c] * dx) - cl_qcvt(im) * (dm[c] * dx);
        } else {
          cl_qv8i corr = __builtin_ia32_pmaddwd256((cl_qv16s)bsum, (cl_qv16s)scb[c]);
          acc[r * C + c] += cl_qcvt(ia[r * C + c] - (corr << 5)) * (d[c] * dx);
        }
      }
    }
  }
}

static inline float cl_qk_dot(const int T, int64_t k, const void *restrict w, const void *restrict xq) {
  const uint8_t *wr[1] = {(const uint8_t *)w};
  const cl_qa256 *xr[1] = {(const cl_qa256 *)xq};
  cl_qv8f acc[1] = {{}};
  cl_qk_tile(T, 1, 1, k / 256, wr, xr, 0, acc);
  return cl_qhsum(acc[0]);
}

/* ---- qgemm: tiles of R activation rows x C weight rows ---- */

/* The lane sums of 8 (or 4) int32 vectors d[i] as one vector: lane i = sum of d[i] (for n = 4 lanes 4..7
   repeat 0..3). Unpacks and adds within 128-bit halves, then the halves: the high one holds a Q4 block's
   high nibbles, 16 times their value with VNNI (cl_qnib), so it is shifted down by hs first (exact). */
static inline cl_qv8i cl_qred(const int n, const cl_qv8i *d, const int hs) {
  cl_qv8i e[4], f[2];
#pragma GCC unroll 4
  for (int k = 0; k < n / 2; k++) /* [a0+a2, b0+b2, a1+a3, b1+b3 | the same in the high half] */
    e[k] = __builtin_shufflevector(d[2 * k], d[2 * k + 1], 0, 8, 1, 9, 4, 12, 5, 13) +
           __builtin_shufflevector(d[2 * k], d[2 * k + 1], 2, 10, 3, 11, 6, 14, 7, 15);
#pragma GCC unroll 2
  for (int k = 0; k < n / 4; k++) /* [a b c d | a b c d]: each half summed */
    f[k] = __builtin_shufflevector(e[2 * k], e[2 * k + 1], 0, 1, 8, 9, 4, 5, 12, 13) +
           __builtin_shufflevector(e[2 * k], e[2 * k + 1], 2, 3, 10, 11, 6, 7, 14, 15);
  if (n == 8)
    return __builtin_shufflevector(f[0], f[1], 0, 1, 2, 3, 8, 9, 10, 11) +
           (__builtin_shufflevector(f[0], f[1], 4, 5, 6, 7, 12, 13, 14, 15) >> hs);
  return __builtin_shufflevector(f[0], f[0], 0, 1, 2, 3, 0, 1, 2, 3) +
         (__builtin_shufflevector(f[0], f[0], 4, 5, 6, 7, 4, 5, 6, 7) >> hs);
}

#define CL_QKB 64 /* blocks of 32 per k-chunk in qgemm: bounds the per-tile tables */

/* Blocks of 32 (T: 0 = Q8_0, 1 = Q4_0, 2 = Q4_1) over nb <= CL_QKB blocks: R activation rows x C weight
   rows, R * C <= 8; lane i = r + R c of a vector belongs to the pair (row r, weight row c). tab holds per
   block b the activation scales in lane order (tab[8b + i] = d of row i % R), then for Q4_1 their sd
   likewise (at tab + 8 nb); ctab (Q4_0, and Q8_0 with VNNI) each row's offset correction (c8 . -x,
   128 . -x) in the lanes of its dot products: every lane sums true products (a correction summed in one
   lane would cancel the others only after the float scaling: inexact for large activations). A first
   pass writes the scale products of all blocks, which the products then read as broadcast operands
   (loads: the shuffle units are busy with the conversions). */
static inline __attribute__((always_inline)) void cl_q32_tile(const int T, const int R, const int C, int64_t nb,
                                                              const uint8_t *const *wr, const cl_qa32 *const *xr,
                                                              const float *tab, const cl_qv8i *ctab, int64_t pf,
                                                              float *res) {
  const int64_t bs = T == 0 ? 34 : T == 1 ? 18 : 20;
  float sb[8 * CL_QKB] __attribute__((aligned(32)));
  cl_qv8f acc[8], am = {};
  cl_qv8i ic = {};
#pragma GCC unroll 8
  for (int i = 0; i < 8; i++) { /* the weight row of lane i: where cvtph2ps puts its d (and m) */
    ic[i] = (T == 2 ? 2 : 1) * ((i / R) % C);
    acc[i] = (cl_qv8f){};
  }
  for (int64_t b = 0; b < nb; b++) {
    if (pf) /* a later tile's rows, to L2 */
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) __builtin_prefetch(wr[c] + pf + b * bs, 0, 2);
    if (T == 2) { /* (d, m) of the C weight rows: [d0 m0 d1 m1 ...] */
      cl_qv4i h = {cl_qw32(wr[0] + b * bs), C > 1 ? cl_qw32(wr[1] + b * bs) : 0, C > 2 ? cl_qw32(wr[2] + b * bs) : 0,
                   C > 3 ? cl_qw32(wr[3] + b * bs) : 0};
      cl_qv8f f = __builtin_ia32_vcvtph2ps256((cl_qv8s)h);
      *(cl_qv8f *)(sb + 8 * b) = __builtin_ia32_permvarsf256(f, ic) * *(const cl_qv8f *)(tab + 8 * b);
      am += __builtin_ia32_permvarsf256(f, ic + 1) * *(const cl_qv8f *)(tab + 8 * nb + 8 * b);
    } else {
      cl_qv8s h = {(short)cl_qw16(wr[0] + b * bs), C > 1 ? (short)cl_qw16(wr[1] + b * bs) : 0,
                   C > 2 ? (short)cl_qw16(wr[2] + b * bs) : 0, C > 3 ? (short)cl_qw16(wr[3] + b * bs) : 0};
      *(cl_qv8f *)(sb + 8 * b) =
          __builtin_ia32_permvarsf256(cl_qwide(__builtin_ia32_vcvtph2ps(h)), ic) * *(const cl_qv8f *)(tab + 8 * b);
    }
  }
  __asm__("" : "+m"(sb)); /* read back from memory, as broadcast operands */
  for (int64_t b = 0; b < nb; b++) {
    cl_qv8i wv[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
      const uint8_t *p = wr[c] + b * bs;
#ifdef CL_QVNNI
      wv[c] = T == 0 ? cl_qld(p + 2) ^ (int32_t)0x80808080 : cl_qnib(p + (T == 1 ? 2 : 4)); /* Q8_0: w + 128 */
#else
      wv[c] = T == 0 ? cl_qld(p + 2) : cl_qnib(p + (T == 1 ? 2 : 4));
#endif
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      cl_qv8i xv = cl_qld(xr[r][b].q);
      CL_QREG(xv);
      cl_qv8i init = T == 2 ? (cl_qv8i){} : ctab[4 * b + r]; /* the offset's correction starts the sums */
#pragma GCC unroll 4
      for (int c = 0; c < C; c++) {
        cl_qv8i dv;
#ifdef CL_QVNNI
        dv = cl_qdp(init, wv[c], xv);
#else
        if (T == 0)
          dv = cl_qdp((cl_qv8i){}, (cl_qv8i)__builtin_ia32_pabsb256((cl_qv32c)wv[c]),
                      (cl_qv8i)__builtin_ia32_psignb256((cl_qv32c)xv, (cl_qv32c)wv[c]));
        else
          dv = cl_qdp(init, wv[c], xv);
#endif
        acc[r + R * c] += cl_qcvt(dv) * sb[8 * b + r + R * c];
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R * C; i++) res[i] = cl_qhsum(T == 0 ? acc[i] : acc[i] * CL_QNIBFIX) + (T == 2 ? am[i] : 0.0f);
}


/* The tables of cl_q32_tile for activation rows xr[0..R) and blocks [0, nb) */
static inline __attribute__((always_inline)) void cl_q32_table(const int T, const int R, int64_t nb, const cl_qa32 *const *xr,
                                                               float *tab, cl_qv8i *ctab) {
  for (int64_t b = 0; b < nb; b++) {
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
      tab[8 * b + i] = xr[i % R][b].d;
      if (T == 2) tab[8 * nb + 8 * b + i] = xr[i % R][b].sd;
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
      cl_qv8i negx = cl_qneg8(cl_qld(xr[r][b].q));
#ifdef CL_QVNNI
      if (T == 0) ctab[4 * b + r] = cl_qdp((cl_qv8i){}, (cl_qv8i){} + (int32_t)0x80808080, negx);
#endif
      if (T == 1) ctab[4 * b + r] = cl_qdp((cl_qv8i){}, CL_QC8, negx);
    }
  }
}

/* A tile prefetches the weight rows of the tile CL_QPF ahead when the weights (n rows) exceed CL_QPFMIN
   bytes: rows read interleaved from DRAM defeat the hardware prefetcher (a 70 MB matrix-vector product:
   10 GB/s without, 23 with; each matrix of a decode step comes from DRAM when the model exceeds the
   caches). In cache the prefetches cost ~5%. */
#define CL_QPF 4
#define CL_QPFMIN (1 << 16)
#define CL_QPFD(n, ws, c) ((n) * (ws) >= CL_QPFMIN ? CL_QPF * (c) * (ws) : 0)
/* Row pointers of a tile: rows past the end repeat the last one (computed, not stored). */
#define CL_QROWS(ptr, base, stride, i0, cnt, lim, type, off)                                   \
  for (int r_ = 0; r_ < (cnt); r_++)                                                            \
    (ptr)[r_] = (const type *)((const char *)(base) + ((i0) + r_ < (lim) ? (i0) + r_ : (lim) - 1) * (stride)) + (off)

static inline __attribute__((always_inline)) void cl_q32_gemm(const int T, int64_t k, const void *restrict w, int64_t ws,
                                                              int64_t n, const void *restrict xq, int64_t xs, int64_t m,
                                                              float *restrict out, int64_t os) {
  const int64_t nb = k / 32, bs = T == 0 ? 34 : T == 1 ? 18 : 20;
  if (nb == 0)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) out[i * os + j] = 0.0f;
  float tab[16 * CL_QKB] __attribute__((aligned(32)));
  cl_qv8i ctab[T == 2 ? 1 : 4 * CL_QKB];
  for (int64_t b0 = 0; b0 < nb; b0 += CL_QKB) {
    const int64_t kb = nb - b0 < CL_QKB ? nb - b0 : CL_QKB;
    for (int64_t i = 0; i < m; i += 4) {
      const cl_qa32 *xr[4];
      float res[8];
      if (m - i >= 4) { /* 4 activation rows x 2 weight rows */
        CL_QROWS(xr, xq, xs, i, 4, m, cl_qa32, b0);
        cl_q32_table(T, 4, kb, xr, tab, ctab);
        for (int64_t j = 0; j < n; j += 2) {
          const uint8_t *wr[2];
          CL_QROWS(wr, w, ws, j, 2, n, uint8_t, b0 * bs);
          cl_q32_tile(T, 4, 2, kb, wr, xr, tab, ctab, CL_QPFD(n, ws, 2), res);
          for (int r = 0; r < 4; r++)
            for (int c = 0; c < 2 && j + c < n; c++)
              out[(i + r) * os + j + c] = (b0 ? out[(i + r) * os + j + c] : 0.0f) + res[r + 4 * c];
        }
      } else { /* the last rows one by one, 4 weight rows at a time */
        for (int64_t i1 = i; i1 < m; i1++) {
          CL_QROWS(xr, xq, xs, i1, 1, m, cl_qa32, b0);
          cl_q32_table(T, 1, kb, xr, tab, ctab);
          for (int64_t j = 0; j < n; j += 4) {
            const uint8_t *wr[4];
            CL_QROWS(wr, w, ws, j, 4, n, uint8_t, b0 * bs);
            cl_q32_tile(T, 1, 4, kb, wr, xr, tab, ctab, CL_QPFD(n, ws, 4), res);
            for (int c = 0; c < 4 && j + c < n; c++)
              out[i1 * os + j + c] = (b0 ? out[i1 * os + j + c] : 0.0f) + res[c];
          }
        }
      }
    }
  }
}

static inline __attribute__((always_inline)) void cl_qk_gemm(const int T, int64_t k, const void *restrict w, int64_t ws,
                                                             int64_t n, const void *restrict xq, int64_t xs, int64_t m,
                                                             float *restrict out, int64_t os) {
  const int64_t nsb = k / 256;
  for (int64_t i = 0; i < m; i += 4) {
    const cl_qa256 *xr[4];
    if (m - i >= 4) { /* 4 activation rows x CL_QKC weight rows */
      CL_QROWS(xr, xq, xs, i, 4, m, cl_qa256, 0);
      for (int64_t j = 0; j < n; j += CL_QKC) {
        const uint8_t *wr[CL_QKC];
        cl_qv8f acc[4 * CL_QKC] = {};
        CL_QROWS(wr, w, ws, j, CL_QKC, n, uint8_t, 0);
        cl_qk_tile(T, 4, CL_QKC, nsb, wr, xr, CL_QPFD(n, ws, CL_QKC), acc);
        for (int r = 0; r < 4; r++)
          for (int c = 0; c < CL_QKC && j + c < n; c++) out[(i + r) * os + j + c] = cl_qhsum(acc[r * CL_QKC + c]);
      }
    } else { /* the last rows one by one, 2 weight rows at a time */
      for (int64_t i1 = i; i1 < m; i1++) {
        CL_QROWS(xr, xq, xs, i1, 1, m, cl_qa256, 0);
        for (int64_t j = 0; j < n; j += 2) {
          const uint8_t *wr[2];
          cl_qv8f acc[2] = {};
          CL_QROWS(wr, w, ws, j, 2, n, uint8_t, 0);
          cl_qk_tile(T, 1, 2, nsb, wr, xr, CL_QPFD(n, ws, 2), acc);
          for (int c = 0; c < 2 && j + c < n; c++) out[i1 * os + j + c] = cl_qhsum(acc[c]);
        }
      }
    }
  }
}
#endif /* SIMD */

/* ==== the API ===================================================================================== */

static inline void cl_quant_rows_a32(const float *restrict x, void *restrict out, int64_t k) {
#ifdef CL_QSIMD
  cl_qs_quant_rows_a32(x, out, k);
#else
  cl_qp_quant_rows_a32(x, out, k);
#endif
}

static inline void cl_quant_rows_a256(const float *restrict x, void *restrict out, int64_t k) {
#ifdef CL_QSIMD
  cl_qs_quant_rows_a256(x, out, k);
#else
  cl_qp_quant_rows_a256(x, out, k);
#endif
}

#ifdef CL_QSIMD
#define CL_QDOT(t, simd) static inline float cl_qdot_##t(int64_t k, const void *restrict w, const void *restrict xq) { return simd; }
#define CL_QGEMM(t, simd)                                                                                      \
  static inline void cl_qgemm_##t(int64_t k, const void *restrict w, int64_t w_stride, int64_t n,             \
                                  const void *restrict xq, int64_t x_stride, int64_t m, float *restrict out,  \
                                  int64_t out_stride) { simd; }
#else
#define CL_QDOT(t, simd) static inline float cl_qdot_##t(int64_t k, const void *restrict w, const void *restrict xq) { return cl_qp_dot_##t(k, w, xq); }
#define CL_QGEMM(t, simd)                                                                                      \
  static inline void cl_qgemm_##t(int64_t k, const void *restrict w, int64_t w_stride, int64_t n,             \
                                  const void *restrict xq, int64_t x_stride, int64_t m, float *restrict out,  \
                                  int64_t out_stride) {                                                       \
    for (int64_t i = 0; i < m; i++)                                                                           \
      for (int64_t j = 0; j < n; j++)                                                                         \
        out[i * out_stride + j] = cl_qp_dot_##t(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride); \
  }
#endif
CL_QDOT(q8_0, cl_q32_dot(0, k, w, xq))
CL_QDOT(q4_0, cl_q32_dot(1, k, w, xq))
CL_QDOT(q4_1, cl_q32_dot(2, k, w, xq))
CL_QDOT(q4_k, cl_qk_dot(0, k, w, xq))
CL_QDOT(q5_k, cl_qk_dot(1, k, w, xq))
CL_QDOT(q6_k, cl_qk_dot(2, k, w, xq))
CL_QGEMM(q8_0, cl_q32_gemm(0, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
CL_QGEMM(q4_0, cl_q32_gemm(1, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
CL_QGEMM(q4_1, cl_q32_gemm(2, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
CL_QGEMM(q4_k, cl_qk_gemm(0, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
CL_QGEMM(q5_k, cl_qk_gemm(1, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
CL_QGEMM(q6_k, cl_qk_gemm(2, k, w, w_stride, n, xq, x_stride, m, out, out_stride))
#undef CL_QDOT
#undef CL_QGEMM
