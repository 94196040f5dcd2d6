/* caten_lab exported library: the training workflow (caten_lab/workflow/training.py). One step is
   the data loader action (caten_action_fill_batch: the step's windows read from the memory-mapped token
   file), this step's optimizer scalars (@P@_lr_at and the AdamW rows, the formulas of nn/optim.py in
   the same float64 operations, so the same float32 values), the compiled step program (caten_run:
   forward, backward, clipping and AdamW) and the copy of its updated parameters and moments back into
   their buffers. What depends on the model is data (train_data.h: ct_t_<name> tables linked with
   .incbin): per buffer its role (TB_*), size, memory-plan slot and the buffer a state output updates;
   per weight its Hugging Face name, file shape and layout; per optimizer group its weight decay and
   betas; the config.json text a checkpoint gets. Needs export_head.c and the loader files. */

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

_Static_assert(CT_OK == @U@_OK && CT_ERR_IO == @U@_ERR_IO && CT_ERR_FORMAT == @U@_ERR_FORMAT &&
               CT_ERR_MISMATCH == @U@_ERR_MISMATCH && CT_ERR_MEMORY == @U@_ERR_MEMORY,
               "the loader's error codes are the library's");

/* the role of program buffer b (ROLE_CODES of workflow/training.py) */
enum { TB_WEIGHT = 0, TB_ZERO = 1, TB_TOKENS = 2, TB_HYPER = 3, TB_SLOT = 4, TB_LOSS = 5, TB_UPDATE = 6 };
#define TT_NBUF ((int)ct_t_nbuf)
#define TT_NSLOT ((int)ct_t_nslot)
#define TT_NWEIGHTS ((int)ct_t_nweights)
#define TT_NGROUPS ((int)ct_t_ngroups)
/* a weight: its buffer, name (ct_t_names offset), file shape (ndim 1 or 2) and whether the buffer holds
   it transposed (a Conv1D weight: the file is [in, out]); a record of ct_t_weights (WEIGHT_FIELDS) */
typedef struct { int64_t buf, name, ndim, shape[2], transpose; } tt_weight;
_Static_assert(sizeof(tt_weight) == 6 * sizeof(int64_t), "tt_weight is a record of six int64 fields");
#define tt_weights ((const tt_weight *)ct_t_weights)
#define tt_weight_name(w) ((const char *)ct_t_names + tt_weights[w].name)

void caten_run(void **b, const int64_t *sym, int64_t *err);
void caten_set_threads(int n);

struct @P@_trainer {
  void *bufs[TT_NBUF];
  void *slots[TT_NSLOT + 1];
  const unsigned char *data;  /* the token file, mapped (@P@_set_data) */
  int64_t data_bytes, n_tokens, token_bytes;
  int64_t steps_done;
  char msg[1024];
};

API const char *@P@_last_error(const @P@_trainer *t) { return t ? t->msg : ct_init_error; }

API const char *@P@_error_name(int code) { return ct_error_name(code); }
_Static_assert(@U@_ERR_ARGUMENT == 5 && @U@_ERR_RUNTIME == 8 && @U@_ERR_DATA == 9, "the codes ct_error_name names");

API int64_t @P@_batch_size(void) { return ct_t_batch; }
API int64_t @P@_block_size(void) { return ct_t_block; }
API int64_t @P@_vocab_size(void) { return ct_t_vocab; }
API int64_t @P@_steps_done(const @P@_trainer *t) { return t->steps_done; }

API void @P@_default_options(@P@_options *o) {
  o->steps = ct_t_steps;
  o->lr = ct_t_lr;
  o->warmup = ct_t_warmup;
  o->min_lr_ratio = ct_t_min_lr_ratio;
  o->schedule = (int)ct_t_schedule;
  o->seed = ct_t_seed;
  o->threads = 0;
}

/* a * b rounded to double before anything adds to it: Python rounds every operation, and a compiler
   allowed to contract (gcc's default -ffp-contract=fast) would fuse a * b + c into one fma */
static double tt_mul(double a, double b) { volatile double p = a * b; return p; }

/* TrainingArguments.lr_at: constant, linear (transformers' warmup + linear decay) or cosine (warmup, then
   down to min_lr_ratio * lr), each in the operation order of nn/optim.py */
API double @P@_lr_at(const @P@_options *o, int64_t step) {
  int64_t warmup = o->warmup >= 0 ? o->warmup : (o->steps / 20 > 1 ? o->steps / 20 : 1);
  int64_t rest = o->steps - warmup > 1 ? o->steps - warmup : 1;
  if (o->schedule == @U@_CONSTANT) return o->lr;
  if (o->schedule == @U@_LINEAR) {
    if (step < warmup) return o->lr * (double)step / (double)(warmup > 1 ? warmup : 1);
    double left = (double)(o->steps - step) / (double)rest;
    return o->lr * (left > 0.0 ? left : 0.0);
  }
  if (step < warmup) return o->lr * (double)(step + 1) / (double)warmup;
  double progress = (double)(step - warmup) / (double)rest;
  if (progress > 1.0) progress = 1.0;
  double min_lr = tt_mul(o->lr, o->min_lr_ratio);
  return min_lr + tt_mul(0.5 * (o->lr - min_lr), 1 + cos(M_PI * progress));
}

/* AdamW.hyper_rows for optimizer step t (1 = the first): per group 1 - lr * wd, lr / (1 - b1^t),
   sqrt(1 - b2^t), rounded to float32 as the Python optimizer's input array */
static void tt_hyper(float *rows, double lr, int64_t t) {
  for (int g = 0; g < TT_NGROUPS; g++) {
    double wd = ct_t_groups[3 * g], b1 = ct_t_groups[3 * g + 1], b2 = ct_t_groups[3 * g + 2];
    rows[3 * g] = (float)(1 - tt_mul(lr, wd));
    rows[3 * g + 1] = (float)(lr / (1 - pow(b1, (double)t)));
    rows[3 * g + 2] = (float)sqrt(1 - pow(b2, (double)t));
  }
}

API void @P@_free(@P@_trainer *t) {
  if (!t) return;
  for (int b = 0; b < TT_NBUF; b++) if (ct_t_slot[b] < 0) free(t->bufs[b]);
  for (int s = 0; s < TT_NSLOT; s++) free(t->slots[s]);
  if (t->data) munmap((void *)t->data, (size_t)t->data_bytes);
  free(t);
}

static int tt_load_weights(@P@_trainer *t, const char *path, char *msg) {
  char file[4096];
  struct stat sb;
  snprintf(file, sizeof file, "%s", path);
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(file, sizeof file, "%s/model.safetensors", path);
  ct_st st;
  int rc = ct_st_open(&st, file, msg);
  for (int w = 0; !rc && w < TT_NWEIGHTS; w++) {
    const tt_weight *r = &tt_weights[w];
    rc = ct_st_load(&st, file, tt_weight_name(w), (int)r->ndim, r->shape, (int)r->transpose, CT_FMT_FP32,
                    t->bufs[r->buf], NULL, msg);
  }
  ct_st_close(&st);
  return rc;
}

API @P@_trainer *@P@_open(const char *weights_path, int *err) {
  int rc = @U@_ERR_MEMORY;
  @P@_trainer *t = calloc(1, sizeof *t);
  if (!t) { ct_fail(ct_init_error, "out of memory"); goto fail; }
  for (int s = 0; s < TT_NSLOT; s++)
    if (!(t->slots[s] = ct_alloc(ct_t_slot_bytes[s]))) { ct_fail(ct_init_error, "out of memory (intermediates)"); goto fail; }
  for (int b = 0; b < TT_NBUF; b++) {
    t->bufs[b] = ct_t_slot[b] >= 0 ? t->slots[ct_t_slot[b]] : ct_alloc(ct_t_bytes[b]);  /* zeroed */
    if (!t->bufs[b]) { ct_fail(ct_init_error, "out of memory (%lld bytes of buffers)", (long long)ct_t_bytes[b]); goto fail; }
  }
  if (!weights_path) { rc = @U@_ERR_ARGUMENT; ct_fail(ct_init_error, "no weights path (a Hugging Face directory or .safetensors file)"); goto fail; }
  if ((rc = tt_load_weights(t, weights_path, ct_init_error))) goto fail;
  if (err) *err = @U@_OK;
  return t;
fail:
  if (err) *err = rc;
  @P@_free(t);
  return NULL;
}

/* Map the token file: little-endian ids of token_bytes (2 or 4) bytes each. Every id is checked against
   the vocabulary once, here, so a step never reads outside the embedding. */
API int @P@_set_data(@P@_trainer *t, const char *path, int token_bytes) {
  if (token_bytes != 2 && token_bytes != 4) { ct_fail(t->msg, "token_bytes is %d: 2 (uint16) or 4 (uint32)", token_bytes); return @U@_ERR_ARGUMENT; }
  int fd = open(path, O_RDONLY);
  if (fd < 0) { ct_fail(t->msg, "%s: cannot open the token file (%s)", path, strerror(errno)); return @U@_ERR_IO; }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) { close(fd); ct_fail(t->msg, "%s: not a regular file", path); return @U@_ERR_IO; }
  int64_t bytes = (int64_t)sb.st_size, n = bytes / token_bytes, w = ct_t_block + 1;
  if (bytes % token_bytes) { close(fd); ct_fail(t->msg, "%s: %lld bytes is not a whole number of %d-byte token ids (--token-bytes?)", path, (long long)bytes, token_bytes); return @U@_ERR_DATA; }
  if (n <= w) { close(fd); ct_fail(t->msg, "%s: %lld tokens cannot fill one window of %lld", path, (long long)n, (long long)w); return @U@_ERR_DATA; }
  void *p = mmap(NULL, (size_t)bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) { ct_fail(t->msg, "%s: cannot map the token file (%s)", path, strerror(errno)); return @U@_ERR_IO; }
  const unsigned char *d = p;
  for (int64_t i = 0; i < n; i++) {
    int64_t v = 0;
    for (int k = token_bytes - 1; k >= 0; k--) v = v * 256 + d[i * token_bytes + k];
    if (v >= ct_t_vocab) {
      munmap(p, (size_t)bytes);
      ct_fail(t->msg, "%s: token %lld is id %lld, outside the vocabulary [0, %lld) (--token-bytes %d?)", path,
              (long long)i, (long long)v, (long long)ct_t_vocab, token_bytes);
      return @U@_ERR_DATA;
    }
  }
  if (t->data) munmap((void *)t->data, (size_t)t->data_bytes);
  t->data = d, t->data_bytes = bytes, t->n_tokens = n, t->token_bytes = token_bytes;
  return @U@_OK;
}

/* One training step (number t->steps_done of the run): the loader, the scalars, the program, the
   write-backs. *loss gets the step's mean cross-entropy (before the update). */
API int @P@_step(@P@_trainer *t, const @P@_options *o, double *loss) {
  if (!t->data) { ct_fail(t->msg, "no token file: call @P@_set_data first"); return @U@_ERR_ARGUMENT; }
  if (o->steps <= 0 || !(o->lr >= 0) || o->min_lr_ratio < 0) {
    ct_fail(t->msg, "options: steps %lld must be > 0, lr %g and min_lr_ratio %g >= 0", (long long)o->steps, o->lr, o->min_lr_ratio);
    return @U@_ERR_ARGUMENT;
  }
  if (o->threads > 0) caten_set_threads(o->threads);
  int64_t st[2], aerr[4] = {0}, step = t->steps_done;
  uint64_t seed = (uint64_t)o->seed;
  /* the action only reads the mapped file (its parameter type has no const) */
  caten_action_fill_batch((uint8_t *)t->data, t->data_bytes, t->n_tokens, t->token_bytes, (int64_t)(seed >> 32),
                          (int64_t)(seed & 0xffffffffu), step, (int64_t *)t->bufs[ct_t_tokens_buf], ct_t_batch,
                          ct_t_block + 1, st, 2, aerr);
  if (aerr[0]) { ct_fail(t->msg, "data loader run-time check failed (code %lld)", (long long)aerr[0]); return @U@_ERR_RUNTIME; }
  tt_hyper((float *)t->bufs[ct_t_hyper_buf], @P@_lr_at(o, step), step + 1);
  int64_t err[8] = {0}, sym[1] = {0};
  caten_run(t->bufs, sym, err);
  if (err[0]) {
    ct_fail(t->msg, "run-time check failed in kernel call %lld of the training step (code %lld: index %lld, size %lld)",
            (long long)err[4], (long long)err[0], (long long)err[2], (long long)err[3]);
    return @U@_ERR_RUNTIME;
  }
  for (int b = 0; b < TT_NBUF; b++)
    if (ct_t_role[b] == TB_UPDATE) memcpy(t->bufs[ct_t_dst[b]], t->bufs[b], (size_t)ct_t_bytes[b]);
  *loss = *(const float *)t->bufs[ct_t_loss_buf];
  t->steps_done++;
  return @U@_OK;
}

/* the Hugging Face checkpoint: config.json and model.safetensors (F32, the file shapes), each written
   to a temporary file and renamed into place */
static int tt_write(const char *dir, const char *name, const void *head, size_t hlen, @P@_trainer *t, int tensors) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (!f) { ct_fail(t->msg, "%s: cannot write (%s)", tmp, strerror(errno)); return @U@_ERR_IO; }
  int ok = fwrite(head, 1, hlen, f) == hlen;
  for (int w = 0; ok && tensors && w < TT_NWEIGHTS; w++) {
    const tt_weight *r = &tt_weights[w];
    const float *src = t->bufs[r->buf];
    size_t n = (size_t)(r->shape[0] * (r->ndim > 1 ? r->shape[1] : 1));
    if (!r->transpose) { ok = fwrite(src, 4, n, f) == n; continue; }
    int64_t rows = r->shape[0], cols = r->shape[1];  /* file [rows, cols] = buffer [cols, rows] */
    float *line = malloc((size_t)cols * 4);
    if (!line) { fclose(f); remove(tmp); ct_fail(t->msg, "out of memory"); return @U@_ERR_MEMORY; }
    for (int64_t i = 0; ok && i < rows; i++) {
      for (int64_t j = 0; j < cols; j++) line[j] = src[j * rows + i];
      ok = fwrite(line, 4, (size_t)cols, f) == (size_t)cols;
    }
    free(line);
  }
  if (fclose(f) != 0 || !ok) { remove(tmp); ct_fail(t->msg, "%s: write failed (%s)", tmp, strerror(errno)); return @U@_ERR_IO; }
  if (rename(tmp, path) != 0) { ct_fail(t->msg, "%s: cannot rename into place (%s)", path, strerror(errno)); return @U@_ERR_IO; }
  return @U@_OK;
}

API int @P@_save(@P@_trainer *t, const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST) { ct_fail(t->msg, "%s: cannot create the directory (%s)", dir, strerror(errno)); return @U@_ERR_IO; }
  int rc = tt_write(dir, "config.json", ct_t_config, (size_t)ct_t_config_len, t, 0);
  if (rc) return rc;
  /* the safetensors header: the weights in table order, each right after the previous one */
  size_t cap = 256 + (size_t)ct_t_names_len + (size_t)TT_NWEIGHTS * 160, k = 8;  /* an entry: its name + at most ~90 */
  char *h = malloc(cap);
  if (!h) { ct_fail(t->msg, "out of memory"); return @U@_ERR_MEMORY; }
  k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
  int64_t at = 0;
  for (int w = 0; w < TT_NWEIGHTS; w++) {
    const tt_weight *r = &tt_weights[w];
    int64_t n = r->shape[0] * (r->ndim > 1 ? r->shape[1] : 1);
    k += (size_t)snprintf(h + k, cap - k, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld", tt_weight_name(w), (long long)r->shape[0]);
    if (r->ndim > 1) k += (size_t)snprintf(h + k, cap - k, ",%lld", (long long)r->shape[1]);
    k += (size_t)snprintf(h + k, cap - k, "],\"data_offsets\":[%lld,%lld]}", (long long)at, (long long)(at + 4 * n));
    at += 4 * n;
  }
  h[k++] = '}';
  while ((k - 8) % 8) h[k++] = ' ';  /* the data starts 8-byte aligned */
  uint64_t hlen = (uint64_t)(k - 8);
  for (int b = 0; b < 8; b++) h[b] = (char)((hlen >> (8 * b)) & 0xff);
  rc = tt_write(dir, "model.safetensors", h, k, t, 1);
  free(h);
  return rc;
}
