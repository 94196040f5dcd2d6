/* TEMPORARY portable cl_qgemm_* (replaced by quant.h's own) */
static inline void cl_qgemm_q8_0(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q8_0(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
static inline void cl_qgemm_q4_0(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q4_0(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
static inline void cl_qgemm_q4_1(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q4_1(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
static inline void cl_qgemm_q4_k(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q4_k(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
static inline void cl_qgemm_q5_k(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q5_k(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
static inline void cl_qgemm_q6_k(int64_t k, const void *restrict w, int64_t w_stride, int64_t n, const void *restrict xq,
                                int64_t x_stride, int64_t m, float *restrict out, int64_t out_stride) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++)
      out[i * out_stride + j] = cl_qdot_q6_k(k, (const char *)w + j * w_stride, (const char *)xq + i * x_stride);
}
