/* the perplexity workflow's part of <name>.h (after api.h; caten_lab/workflow/c/perplexity.h) */
typedef struct {
  double perplexity;     /* exp(nll_sum / tokens) */
  double nll_sum;        /* summed next-token negative log-likelihood (nats) */
  int64_t tokens;        /* tokens scored */
  int64_t windows;       /* windows evaluated */
} @P@_result;

/* Perplexity of the text file at text_path: windows of `window` tokens (0 = the model's context),
   the file read in chunks of `chunk_bytes` (0 = 1 MiB). */
int @P@_evaluate(@P@_ctx *ctx, const char *text_path, int64_t window, int64_t chunk_bytes, @P@_result *result);

#ifdef __cplusplus
}
#endif
#endif
