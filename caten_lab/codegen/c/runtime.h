/* The runtime header of every C file caten_lab generates (caten_lab/codegen/c/runtime.h): tensor
   kernels, actions and the exported library. The renderer (caten_lab/codegen/render.py) pastes it
   at the top of each generated file, followed by int_div.h and index_check.h; generated code only
   calls the helpers defined here. Everything is static inline: unused helpers cost nothing. */
#include <stdint.h>
#include <math.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* glibc's vector math library (libmvec; the toolchain probe found it and links -lmvec): declared SIMD, a
   loop calling these vectorizes with their vector variants (within 1-2 ulp of the scalar ones, the same
   infinities, NaNs and zeros). math.h declares them only under -ffast-math, which caten_lab never uses.
   A float exp2 is cl_exp2_f32 below: exp2f's vector variant is slow on underflowing arguments. */
#ifdef CL_MVEC
#pragma omp declare simd notinbranch
float log2f(float);
#pragma omp declare simd notinbranch
double exp2(double);
#pragma omp declare simd notinbranch
double log2(double);
#endif

/* 2^x in float, inline and branch-free so that a loop calling it vectorizes whole: libmvec's exp2f
   leaves the fast path for every vector holding a result below 2^-126 (a masked attention score, the
   tail of a softmax: 7 ns per value instead of 0.23). x = n + f with n = round(x) (the 1.5 * 2^23 trick,
   which keeps n's bits in the low mantissa) and |f| <= 1/2; 2^f is the degree-7 Taylor polynomial of
   e^(f ln 2) (truncation below 0.05 ulp; within 1 ulp of the correctly rounded result in all, checked
   by tests/codegen/test_exp2.py), scaled by 2^n as two powers of two so that results down to 0 and up
   to inf come out of the multiplication (x is clamped to [-160, 160] first); NaN passes through p. */
static inline float cl_exp2_f32(float x) {
  float c = x < -160.0f ? -160.0f : (x > 160.0f ? 160.0f : x);
  float r = c + 12582912.0f;
  uint32_t rb; __builtin_memcpy(&rb, &r, 4);
  float f = c - (r - 12582912.0f);
  float p = 1.0f + f * (0.6931471805599453f + f * (0.2402265069591007f + f * (0.05550410866482158f
            + f * (0.009618129107628477f + f * (0.0013333558146428443f + f * (1.5403530393381608e-4f
            + f * 1.525273380405984e-5f))))));
  uint32_t n = rb - 0x4b400000u, h = (uint32_t)((int32_t)n >> 1);
  uint32_t b1 = (h + 127u) << 23, b2 = (n - h + 127u) << 23;
  float s1, s2; __builtin_memcpy(&s1, &b1, 4); __builtin_memcpy(&s2, &b2, 4);
  return p * s1 * s2;
}
static inline double cl_exp2_f64(double x) { return exp2(x); }

/* Kernel functions are static here; a parallel build (runtime/parallel_build.py) compiles them in
   several translation units and defines this as hidden visibility: same code, same exports. */
#ifndef CL_KERNEL_LINKAGE
#define CL_KERNEL_LINKAGE static
#endif

/* Bounds checks (safety 2): an index outside [0, n) records the first error of the run, err[0] = 1,
   err[1] = tag (which AIR node: Function.checks[tag]), err[2] = the index, err[3] = n; reads 0. */
#define CK(i, n, tag) cl_check((int64_t)(i), (int64_t)(n), (tag), err)
static inline int64_t cl_check(int64_t i, int64_t n, int64_t tag, int64_t *err) {
  if (__builtin_expect(i < 0 || i >= n, 0)) {
    if (!err[0]) { err[0] = 1; err[1] = tag; err[2] = i; err[3] = n; }
    return 0;
  }
  return i;
}

/* Index arithmetic: min/max and floor division of int64 (symbolic sizes and loop bounds). */
static inline int64_t cl_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t cl_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cl_floordiv(int64_t a, int64_t b) {
  int64_t q = a / b; return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }
static inline int64_t cl_floormod(int64_t a, int64_t b) {
  int64_t r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }

/* max propagates NaN (AIR's max); the reductions' identities. */
static inline float cl_max_f32(float a, float b) { return (a != a || a > b) ? a : b; }
static inline double cl_max_f64(double a, double b) { return (a != a || a > b) ? a : b; }
static inline float cl_min_f32(float a, float b) { return (a != a || a < b) ? a : b; }
static inline double cl_min_f64(double a, double b) { return (a != a || a < b) ? a : b; }
static inline _Bool cl_max__Bool(_Bool a, _Bool b) { return a || b; }
static inline _Bool cl_min__Bool(_Bool a, _Bool b) { return a && b; }
#define CL_INT_MINMAX(T, S)                                                                        \
  static inline T cl_max_##S(T a, T b) { return a > b ? a : b; }                                   \
  static inline T cl_min_##S(T a, T b) { return a < b ? a : b; }
CL_INT_MINMAX(int8_t, int8)
CL_INT_MINMAX(uint8_t, uint8)
CL_INT_MINMAX(int32_t, int32)
CL_INT_MINMAX(uint32_t, uint32)
CL_INT_MINMAX(int64_t, int64)
static inline int32_t cl_abs_int32(int32_t a) { return a < 0 ? (int32_t)(0u - (uint32_t)a) : a; }
static inline int64_t cl_abs_int64(int64_t a) { return a < 0 ? (int64_t)(0ull - (uint64_t)a) : a; }
#define cl_min_int8_t INT8_MIN
#define cl_min_uint8_t 0
#define cl_min_int32_t INT32_MIN
#define cl_min_uint32_t 0
#define cl_min_int64_t INT64_MIN

/* float16 -> float from the bits: exact for every half value and vectorizable (a (float) cast of
   _Float16 is a scalar conversion per element in gcc 12). Subnormal halves assume no DAZ mode. */
typedef uint16_t __attribute__((may_alias)) cl_u16a;
static inline float cl_h2f(uint16_t h) {
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13, b; float m;
  __builtin_memcpy(&m, &em, 4); m = m * 0x1p112f; __builtin_memcpy(&b, &m, 4);
  b = (em >= 0x0f800000u ? (em | 0x7f800000u) : b) | ((uint32_t)(h & 0x8000u) << 16);
  float r; __builtin_memcpy(&r, &b, 4); return r;
}
/* n contiguous float16 patterns -> float: the hardware conversion (vcvtph2ps: exact, equal to cl_h2f
   except that a signalling NaN comes out quiet) where the target has it, cl_h2f otherwise. Builtins,
   not <immintrin.h>, which would add ~130 ms to every compile. The source is any pointer to the half
   values (a _Float16 buffer: the kernel IR passes &w[offset]). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Waggressive-loop-optimizations"
static inline void cl_h2f_n(const void *restrict src, float *restrict d, int64_t n) {
  const cl_u16a *restrict s = (const cl_u16a *)src;
  int64_t i = 0;
#if defined(__AVX512F__)
  typedef short cl_v16hi __attribute__((vector_size(32), aligned(2)));
  typedef float cl_v16sf __attribute__((vector_size(64), aligned(4)));
  for (; i + 16 <= n; i += 16)
    *(cl_v16sf *)(d + i) = __builtin_ia32_vcvtph2ps512_mask(*(const cl_v16hi *)(s + i), (cl_v16sf){0},
                                                            (unsigned short)0xffff, 4);
#elif defined(__F16C__)
  typedef short cl_v8hi __attribute__((vector_size(16), aligned(2)));
  typedef float cl_v8sf __attribute__((vector_size(32), aligned(4)));
  for (; i + 8 <= n; i += 8) *(cl_v8sf *)(d + i) = __builtin_ia32_vcvtph2ps256(*(const cl_v8hi *)(s + i));
#endif
  for (; i < n; i++) d[i] = cl_h2f(s[i]);
}
#pragma GCC diagnostic pop

/* The entry of a tensor program is a table of kernel calls walked by one loop (one row per call):
   the C compiler's time then grows with the unique kernels, not with the layers. Row c calls
   calls[c] on argc[c] entry buffers listed in args; prof (or NULL) accumulates seconds per call;
   the first error stops the run with err[4] = the call. */
typedef void (*cl_kernel)(void **, const int64_t *, int64_t *);
static double cl_now(void) {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
/* One call of a program: its table and the caller's buffers (caten_run builds it). */
typedef struct {
  const cl_kernel *calls;
  const int32_t *args, *argc;
  int32_t n, maxp;
  void **b;
  const int64_t *sym;
  int64_t *err;
  double *prof;
} cl_call_args;
static inline void cl_run_table(const cl_call_args *a) {
  void *p[a->maxp];
  int32_t k = 0;
  for (int32_t c = 0; c < a->n; c++) {
    for (int32_t i = 0; i < a->argc[c]; i++) p[i] = a->b[a->args[k + i]];
    k += a->argc[c];
    double t0 = a->prof ? cl_now() : 0.0;
    a->calls[c](p, a->sym, a->err);
    if (a->prof) a->prof[c] += cl_now() - t0;
    if (a->err[0]) { a->err[4] = c; return; }
  }
}
static inline void cl_set_threads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}
