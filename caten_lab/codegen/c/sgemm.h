/* The register tile of a float32 matmul (caten_lab/codegen/c/sgemm.h), called by the kernels the
   sgemm_tiles pass rewrote (caten_lab/codegen/sgemm_tiles.py): 12 output rows of 32 columns,

       c_q[w] += a_q[r * ak] * b[r * bk + w]    for r in [0, k), q < 12, w < 32,

   accumulated into the 12 local arrays c0..c11 (the tile the kernel's epilogue then reads). Per output it
   is the same sequence of multiply-adds as the loops it replaces, in the same order: bitwise the same sums.
   With AVX-512 the 24 accumulators stay in vector registers and each row's value is broadcast just
   before its two multiply-adds; gcc, given the loops, broadcast all twelve first and spilled five
   accumulators to the stack (a 512x3072 @ 3072x768 on one Zen 4 core: 88 -> 96 GFLOP/s). Elsewhere the
   portable loops below are the loops that were replaced. */
#define CL_SG_PARAMS                                                                                    \
    float *restrict c0, float *restrict c1, float *restrict c2, float *restrict c3, float *restrict c4,  \
    float *restrict c5, float *restrict c6, float *restrict c7, float *restrict c8, float *restrict c9,  \
    float *restrict c10, float *restrict c11,                                                           \
    const float *a0, const float *a1, const float *a2, const float *a3, const float *a4, const float *a5, \
    const float *a6, const float *a7, const float *a8, const float *a9, const float *a10, const float *a11, \
    int64_t ak, const float *b, int64_t bk, int64_t k
#if defined(__AVX512F__) && !defined(CL_SGEMM_PORTABLE)
typedef float cl_sg_v16 __attribute__((vector_size(64), aligned(4)));
#define CL_SG_LOAD(q) cl_sg_v16 v##q##_0 = *(const cl_sg_v16 *)c##q, v##q##_1 = *(const cl_sg_v16 *)(c##q + 16);
#define CL_SG_ROW(q) { const float s = a##q[o]; v##q##_0 += b0 * s; v##q##_1 += b1 * s; }
#define CL_SG_STORE(q) *(cl_sg_v16 *)c##q = v##q##_0; *(cl_sg_v16 *)(c##q + 16) = v##q##_1;
static inline void cl_sgemm_12x32(CL_SG_PARAMS) {
  CL_SG_LOAD(0) CL_SG_LOAD(1) CL_SG_LOAD(2) CL_SG_LOAD(3) CL_SG_LOAD(4) CL_SG_LOAD(5)
  CL_SG_LOAD(6) CL_SG_LOAD(7) CL_SG_LOAD(8) CL_SG_LOAD(9) CL_SG_LOAD(10) CL_SG_LOAD(11)
  for (int64_t r = 0; r < k; r++) {
    const float *br = b + r * bk;
    const int64_t o = r * ak;
    cl_sg_v16 b0 = *(const cl_sg_v16 *)br, b1 = *(const cl_sg_v16 *)(br + 16);
    CL_SG_ROW(0) CL_SG_ROW(1) CL_SG_ROW(2) CL_SG_ROW(3) CL_SG_ROW(4) CL_SG_ROW(5)
    CL_SG_ROW(6) CL_SG_ROW(7) CL_SG_ROW(8) CL_SG_ROW(9) CL_SG_ROW(10) CL_SG_ROW(11)
  }
  CL_SG_STORE(0) CL_SG_STORE(1) CL_SG_STORE(2) CL_SG_STORE(3) CL_SG_STORE(4) CL_SG_STORE(5)
  CL_SG_STORE(6) CL_SG_STORE(7) CL_SG_STORE(8) CL_SG_STORE(9) CL_SG_STORE(10) CL_SG_STORE(11)
}
#undef CL_SG_LOAD
#undef CL_SG_ROW
#undef CL_SG_STORE
#else
static inline void cl_sgemm_12x32(CL_SG_PARAMS) {
  float *restrict c[12] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11};
  const float *a[12] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  for (int64_t r = 0; r < k; r++) {
    float x[12];
    for (int q = 0; q < 12; q++) x[q] = a[q][r * ak];
    const float *br = b + r * bk;
    for (int q = 0; q < 12; q++) {
      float *restrict cq = c[q];
      #pragma omp simd
      for (int w = 0; w < 32; w++) cq[w] = cq[w] + x[q] * br[w];
    }
  }
}
#endif
#undef CL_SG_PARAMS
