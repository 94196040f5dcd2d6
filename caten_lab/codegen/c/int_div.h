/* Integer division and remainder of AIR's idiv and mod (caten_lab/codegen/c/int_div.h, part of the
   prelude of every generated file). C semantics: the quotient truncates toward zero, the remainder
   has the sign of the dividend, as in the NumPy interpreter (caten_lab/air/interpreter.py).

   cl_idiv_S / cl_imod_S (safety 0, and divisors known to be nonzero): a zero divisor gives 0, and
   b == -1 never traps (INT_MIN / -1 is undefined in C: the quotient wraps, the remainder is 0).
   cl_idiv_ck_S / cl_imod_ck_S (safety >= 1): a zero divisor also records the first error of the run,
   err[0] = 2 (division by zero), err[1] = tag (which AIR node: Function.checks[tag]), and gives 0;
   the entry stops after the kernel and Program._violation raises RuntimeCheckError. */

#define CL_ERR_DIV0 2
#define CL_DIV0(tag, err)                                                                          \
  do {                                                                                             \
    if (!(err)[0]) { (err)[0] = CL_ERR_DIV0; (err)[1] = (tag); (err)[2] = 0; (err)[3] = 0; }      \
  } while (0)

#define CL_SIGNED_DIV(T, S)                                                                        \
  static inline T cl_idiv_##S(T a, T b) {                                                          \
    return b == 0 ? 0 : (b == -1 ? (T)(0 - (uint64_t)a) : (T)(a / b));                             \
  }                                                                                                \
  static inline T cl_imod_##S(T a, T b) { return (b == 0 || b == -1) ? 0 : (T)(a % b); }          \
  static inline T cl_idiv_ck_##S(T a, T b, int64_t tag, int64_t *err) {                            \
    if (__builtin_expect(b == 0, 0)) { CL_DIV0(tag, err); return 0; }                              \
    return cl_idiv_##S(a, b);                                                                      \
  }                                                                                                \
  static inline T cl_imod_ck_##S(T a, T b, int64_t tag, int64_t *err) {                            \
    if (__builtin_expect(b == 0, 0)) { CL_DIV0(tag, err); return 0; }                              \
    return cl_imod_##S(a, b);                                                                      \
  }

#define CL_UNSIGNED_DIV(T, S)                                                                      \
  static inline T cl_idiv_##S(T a, T b) { return b == 0 ? 0 : (T)(a / b); }                        \
  static inline T cl_imod_##S(T a, T b) { return b == 0 ? 0 : (T)(a % b); }                        \
  static inline T cl_idiv_ck_##S(T a, T b, int64_t tag, int64_t *err) {                            \
    if (__builtin_expect(b == 0, 0)) { CL_DIV0(tag, err); return 0; }                              \
    return (T)(a / b);                                                                             \
  }                                                                                                \
  static inline T cl_imod_ck_##S(T a, T b, int64_t tag, int64_t *err) {                            \
    if (__builtin_expect(b == 0, 0)) { CL_DIV0(tag, err); return 0; }                              \
    return (T)(a % b);                                                                             \
  }

CL_SIGNED_DIV(int8_t, int8)
CL_UNSIGNED_DIV(uint8_t, uint8)
CL_SIGNED_DIV(int32_t, int32)
CL_UNSIGNED_DIV(uint32_t, uint32)
CL_SIGNED_DIV(int64_t, int64)
