/* The run-time helpers of compiled @actions (caten_lab/codegen/c/action.h, after the runtime header
   in every file that holds actions; their calls come from caten_lab/workflow/to_kir.py).

   An error is recorded in err[0..3] = (kind, Python line, value, bound); loops and callers stop once
   err[0] is set. Kinds: 1 index out of bounds, 2 division by zero, 3 out of memory for a Local array,
   4 a range() bound that does not fit the loop's i32 counter. Integer // and % follow Python (floor)
   semantics; b == -1 never traps (INT_MIN // -1 wraps). min/max/abs follow Python's builtins (min(a, b)
   is b only when b < a, so a NaN in a is kept). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define CL_ACT_ERR_INDEX 1
#define CL_ACT_ERR_DIV0 2
#define CL_ACT_ERR_MEMORY 3
#define CL_ACT_ERR_COUNTER 4

static inline int64_t cl_act_ck(int64_t i, int64_t n, int64_t line, int64_t *err) {
  /* one unsigned compare: a negative i is a huge unsigned one (n, a dimension, is >= 0) */
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) {
    if (!err[0]) { err[0] = CL_ACT_ERR_INDEX; err[1] = line; err[2] = i; err[3] = n; }
    return 0;
  }
  return i;
}
static inline int cl_act_zero(int iszero, int64_t line, int64_t *err) {
  if (__builtin_expect(iszero, 0)) { if (!err[0]) { err[0] = CL_ACT_ERR_DIV0; err[1] = line; } return 1; }
  return 0;
}
/* calloc for a Local array too large for the C stack; NULL (error recorded) when it fails */
static inline void *cl_act_alloc_local(int64_t count, int64_t itemsize, int64_t line, int64_t *err) {
  void *p = calloc((size_t)count, (size_t)itemsize);
  if (__builtin_expect(!p, 0) && !err[0]) {
    err[0] = CL_ACT_ERR_MEMORY; err[1] = line; err[2] = count * itemsize; err[3] = 0;
  }
  return p;
}
static inline void cl_act_free(void *p) { free(p); }
/* a range(len(a)) loop proven in bounds counts in i32: its stop must fit, or the counter would wrap */
static inline int cl_act_fits_i32(int64_t stop, int64_t line, int64_t *err) {
  if (__builtin_expect(stop > INT32_MAX, 0)) {
    if (!err[0]) { err[0] = CL_ACT_ERR_COUNTER; err[1] = line; err[2] = stop; err[3] = INT32_MAX; }
    return 1;
  }
  return 0;
}

#define CL_ACT_MINMAX(T, S)                                                                        \
  static inline T cl_act_min_##S(T a, T b) { return b < a ? b : a; }                               \
  static inline T cl_act_max_##S(T a, T b) { return b > a ? b : a; }

#define CL_ACT_SIGNED(T, S)                                                                        \
  static inline T cl_act_fdiv_##S(T a, T b, int64_t line, int64_t *err) {                          \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    if (b == -1) return (T)(0 - (uint64_t)a);                                                      \
    T q = (T)(a / b);                                                                              \
    return (q * b != a && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;                                  \
  }                                                                                                \
  static inline T cl_act_mod_##S(T a, T b, int64_t line, int64_t *err) {                           \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    if (b == -1) return 0;                                                                         \
    T r = (T)(a % b);                                                                              \
    return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;                                      \
  }                                                                                                \
  static inline double cl_act_div_##S(T a, T b, int64_t line, int64_t *err) {                      \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return (double)a / (double)b;                                                                  \
  }                                                                                                \
  static inline T cl_act_abs_##S(T a) { return a < 0 ? (T)(0 - a) : a; }                           \
  CL_ACT_MINMAX(T, S)

#define CL_ACT_UNSIGNED(T, S)                                                                      \
  static inline T cl_act_fdiv_##S(T a, T b, int64_t line, int64_t *err) {                          \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return (T)(a / b);                                                                             \
  }                                                                                                \
  static inline T cl_act_mod_##S(T a, T b, int64_t line, int64_t *err) {                           \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return (T)(a % b);                                                                             \
  }                                                                                                \
  static inline double cl_act_div_##S(T a, T b, int64_t line, int64_t *err) {                      \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return (double)a / (double)b;                                                                  \
  }                                                                                                \
  static inline T cl_act_abs_##S(T a) { return a; }                                                \
  CL_ACT_MINMAX(T, S)

#define CL_ACT_FLOAT(T, S, SUF)                                                                    \
  static inline T cl_act_div_##S(T a, T b, int64_t line, int64_t *err) {                           \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return a / b;                                                                                  \
  }                                                                                                \
  static inline T cl_act_fdiv_##S(T a, T b, int64_t line, int64_t *err) {                          \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    return floor##SUF(a / b);                                                                      \
  }                                                                                                \
  static inline T cl_act_mod_##S(T a, T b, int64_t line, int64_t *err) {                           \
    if (cl_act_zero(b == 0, line, err)) return 0;                                                  \
    T r = fmod##SUF(a, b);                                                                         \
    if (r != 0 && ((r < 0) != (b < 0))) r += b;                                                    \
    return r;                                                                                      \
  }                                                                                                \
  static inline T cl_act_abs_##S(T a) { return fabs##SUF(a); }                                     \
  CL_ACT_MINMAX(T, S)

CL_ACT_SIGNED(int32_t, int32)
CL_ACT_SIGNED(int64_t, int64)
CL_ACT_UNSIGNED(uint8_t, uint8)
CL_ACT_FLOAT(float, float32, f)
CL_ACT_FLOAT(double, float64, )
static inline int cl_act_is_null(const void *p) { return p == 0; }
