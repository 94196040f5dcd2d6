/* caten_lab exported library: the model's weights from a GGUF file (CT_SOURCE 1). The file is
   mapped and checked by gguf_reader.c; then every program input is bound by its ct_bind record
   (BIND_FIELDS of caten_lab/workflow/weight_source.py):
     mode 0 (float): tensor -> float values stored as fmt (CT_FMT_*: weight_read.c); an F32 tensor
                     stored as fp32 is a view of the mapping;
     mode 1 (raw):   the buffer is the tensor's bytes (quantized blocks kept as they are): a view;
     mode 2 (const): a table of the library's data blob (ct_m_consts), copied.
   Every record is checked against the file before any buffer is allocated: nothing is half-loaded.
   Needs gguf_reader.c, weight_read.c and model_buffers.c. */

typedef struct { int64_t buf, name, mode, gtype, ndim, dims[4], fmt, scale, nbytes; } ct_bind;
_Static_assert(sizeof(ct_bind) == 12 * sizeof(int64_t), "ct_bind is a record of twelve int64 fields");
#define ct_binds ((const ct_bind *)ct_m_binds)

static const char *ct_bind_tensor(int i) { return (const char *)ct_m_bind_names + ct_binds[i].name; }

static void ct_dims_text(char *out, size_t cap, const int64_t *dims, int64_t n) {
  out[0] = 0;
  for (int64_t k = 0; k < n; k++) snprintf(out + strlen(out), cap - strlen(out), k ? ", %lld" : "%lld", (long long)dims[k]);
}

/* the checks of one record against the mapped file (CT_ERR_MISMATCH naming the tensor) */
static int ct_bind_check(const ct_gguf *g, int i, const char *path, char *msg) {
  const ct_bind *bd = &ct_binds[i];
  if (bd->mode == 2) return CT_OK;
  const char *name = ct_bind_tensor(i);
  const ct_gguf_tensor *t = ct_gguf_tensor_named(g, name);
  if (!t) { ct_fail(msg, "%s: tensor '%s' is missing: the file does not hold the exported model", path, name); return CT_ERR_MISMATCH; }
  int same = (int64_t)t->n_dims == bd->ndim;
  for (int64_t k = 0; same && k < bd->ndim; k++) same = t->dims[k] == bd->dims[k];
  if (!same) {
    char got[128], want[128];
    ct_dims_text(got, sizeof got, t->dims, t->n_dims);
    ct_dims_text(want, sizeof want, bd->dims, bd->ndim);
    ct_fail(msg, "%s: tensor '%s' has dims [%s] (GGUF order), the exported model expects [%s]", path, name, got, want);
    return CT_ERR_MISMATCH;
  }
  if (bd->mode == 1 && ((int64_t)t->type != bd->gtype || (int64_t)t->n_bytes != bd->nbytes)) {
    ct_fail(msg, "%s: tensor '%s' is %s, the library was exported for %s blocks (kept as they are in the file)", path, name,
            ct_ggml_name(t->type), ct_ggml_name((uint32_t)bd->gtype));
    return CT_ERR_MISMATCH;
  }
  if (bd->mode == 0 && t->type != CT_GGML_F32 && t->type != CT_GGML_F16 && t->type != CT_GGML_BF16 && t->type != CT_GGML_Q8_0) {
    ct_fail(msg, "%s: tensor '%s' is %s; the library reads it as float from F32, F16, BF16 or Q8_0", path, name, ct_ggml_name(t->type));
    return CT_ERR_MISMATCH;
  }
  return CT_OK;
}

/* n values of tensor t from value `at` on, as float32 (at and n: multiples of the block) */
static void ct_gguf_floats(const ct_gguf_tensor *t, int64_t at, int64_t n, float *out) {
  if (t->type == CT_GGML_Q8_0) {
    const uint8_t *blk = t->data + at / 32 * 34;
    for (int64_t i = 0; i < n; i += 32, blk += 34) {
      uint16_t h; memcpy(&h, blk, 2);
      float d = ct_half(h);
      for (int j = 0; j < 32; j++) out[i + j] = d * (float)(int8_t)blk[2 + j];
    }
    return;
  }
  int isz = t->type == CT_GGML_F32 ? 4 : 2;
  ct_to_float(t->data + at * isz, isz, t->type == CT_GGML_BF16, n, out);
}

/* a float record: the tensor's rows (dims[0] values each) stored as fmt, one row at a time */
static int ct_bind_float(ct_model *m, const ct_gguf_tensor *t, const ct_bind *bd, char *msg) {
  int64_t cols = t->dims[0], rows = cols ? t->n_elements / cols : 0;
  size_t esz = bd->fmt == CT_FMT_FP32 ? 4 : bd->fmt == CT_FMT_FP16 ? 2 : 1;
  float *row = malloc(sizeof(float) * (size_t)(cols > 0 ? cols : 1));
  if (!row) { ct_fail(msg, "out of memory reading '%.*s'", (int)t->name.len, t->name.ptr); return CT_ERR_MEMORY; }
  float *scale = bd->scale >= 0 ? (float *)m->bufs[bd->scale] : NULL;
  for (int64_t r = 0; r < rows; r++) {
    ct_gguf_floats(t, r * cols, cols, row);
    ct_store_weight(row, 1, cols, (int)bd->fmt, (char *)m->bufs[bd->buf] + (size_t)(r * cols) * esz, scale ? scale + r : NULL);
  }
  if (bd->fmt == CT_FMT_INT8 && cols == 0)
    for (int64_t r = 0; r < rows; r++) scale[r] = 1.0f;
  free(row);
  return CT_OK;
}

static int ct_gguf_model_load(ct_model *m, const char *path, char *msg) {
  int rc = ct_gguf_open(&m->gguf, path, msg);
  if (rc) return rc;
  const ct_gguf *g = &m->gguf;
  ct_gguf_str arch;
  const char *want = (const char *)ct_m_arch;
  if (ct_gguf_string(g, "general.architecture", &arch, msg) || arch.len != strlen(want) || memcmp(arch.ptr, want, arch.len)) {
    ct_fail(msg, "%s: general.architecture is not '%s': the file does not hold the exported model", path, want);
    return CT_ERR_MISMATCH;
  }
  for (int i = 0; i < CT_NBINDS; i++)
    if ((rc = ct_bind_check(g, i, path, msg))) return rc;
  for (int i = 0; i < CT_NBINDS; i++) {
    const ct_bind *bd = &ct_binds[i];
    const ct_gguf_tensor *t = bd->mode == 2 ? NULL : ct_gguf_tensor_named(g, ct_bind_tensor(i));
    if (bd->mode == 1 || (bd->mode == 0 && t->type == CT_GGML_F32 && bd->fmt == CT_FMT_FP32)) {
      m->bufs[bd->buf] = (void *)t->data;  /* read-only: the program never writes an input */
      m->view[bd->buf] = 1;
    }
  }
  if ((rc = ct_model_alloc_fixed(m, msg))) return rc;
  for (int i = 0; i < CT_NBINDS; i++) {
    const ct_bind *bd = &ct_binds[i];
    if (m->view[bd->buf]) continue;
    if (bd->mode == 2) { memcpy(m->bufs[bd->buf], ct_m_consts + bd->name, (size_t)bd->nbytes); continue; }
    if ((rc = ct_bind_float(m, ct_gguf_tensor_named(g, ct_bind_tensor(i)), bd, msg))) return rc;
  }
  return CT_OK;
}
