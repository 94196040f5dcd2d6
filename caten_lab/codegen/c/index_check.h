/* The index check of AIR's check_index (caten_lab/codegen/c/index_check.h, part of the prelude of every
   generated file): the row id of a gather, x[ids] or embedding lookup, checked once per looked-up row.

   cl_index_ck (safety >= 1): an index outside [0, n) records the first error of the run,
   err[0] = 3 (index out of range), err[1] = tag (which AIR node: Function.checks[tag]), err[2] = the
   index, err[3] = n, and is returned unchanged (the gather then reads 0 for it); the entry stops after
   the kernel and Program._violation raises RuntimeCheckError. At safety 0 check_index renders as its
   operand. */

#define CL_ERR_RANGE 3
static inline int64_t cl_index_ck(int64_t i, int64_t n, int64_t tag, int64_t *err) {
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) {
    if (!err[0]) { err[0] = CL_ERR_RANGE; err[1] = tag; err[2] = i; err[3] = n; }
  }
  return i;
}
