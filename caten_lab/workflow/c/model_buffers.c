/* caten_lab exported library: the model's buffers: load the weights (checked first by st_loader.c, or
   read from a GGUF file by gguf_weights.c),
   grow the intermediates a call needs, run the compiled program (caten_run) and turn its run-time
   check failures into error codes. Needs model_tables.c and the loader files. */

_Static_assert(CT_OK == @U@_OK && CT_ERR_IO == @U@_ERR_IO && CT_ERR_FORMAT == @U@_ERR_FORMAT &&
               CT_ERR_MISMATCH == @U@_ERR_MISMATCH && CT_ERR_TOKENIZER == @U@_ERR_TOKENIZER &&
               CT_ERR_MEMORY == @U@_ERR_MEMORY, "the loader's error codes are the library's");

static uint64_t ct_fnv64_file(const char *path, int *ok) {
  FILE *f = fopen(path, "rb");
  uint64_t h = 1469598103934665603ULL;
  *ok = 0;
  if (!f) return 0;
  unsigned char buf[65536]; size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0)
    for (size_t i = 0; i < got; i++) { h ^= buf[i]; h *= 1099511628211ULL; }
  *ok = !ferror(f);
  fclose(f);
  return h;
}

typedef struct {
  void *bufs[CT_NBUF];
  unsigned char view[CT_NBUF];  /* bufs[b] points into the mapped weights file (not owned) */
  void *slots[CT_NSLOT + 1];
  int64_t slot_cap[CT_NSLOT + 1];
  ct_gguf gguf;                 /* a GGUF weights file, mapped while the model lives (CT_SOURCE 1) */
} ct_model;

static void ct_model_free(ct_model *m) {
  for (int b = 0; b < CT_NBUF; b++) if (ct_slot[b] < 0 && m->bufs[b] && !m->view[b]) free(m->bufs[b]);
  for (int s = 0; s < CT_NSLOT; s++) free(m->slots[s]);
  ct_gguf_close(&m->gguf);
  memset(m, 0, sizeof *m);
}

/* the fixed buffers (weights, state, tokens, outputs) not bound to the file: allocated once */
static int ct_model_alloc_fixed(ct_model *m, char *msg) {
  int64_t sym[CT_SYM_SIZE];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++) {
    if (ct_slot[b] >= 0 || m->view[b]) continue;
    m->bufs[b] = ct_alloc(ct_elems(b, sym) * ct_itemsize[b]);
    if (!m->bufs[b]) { ct_fail(msg, "out of memory allocating the model buffers"); return @U@_ERR_MEMORY; }
  }
  return @U@_OK;
}

static int ct_gguf_model_load(ct_model *m, const char *path, char *msg);  /* gguf_weights.c */

/* Validate the safetensors file (its header, then its tensors against the exported model: st_loader.c),
   and only then allocate the fixed buffers and read every weight. */
static int ct_model_load(ct_model *m, const char *path, char *msg) {
  memset(m, 0, sizeof *m);
  if (CT_SOURCE == 1) return ct_gguf_model_load(m, path, msg);
  ct_st st;
  int rc = ct_st_open(&st, path, msg);
  if (!rc) {
    ct_expect ex[CT_NWEIGHTS];
    for (int w = 0; w < CT_NWEIGHTS; w++) {
      ex[w].name = ct_weight_name(w); ex[w].ndim = (int)ct_weights[w].ndim; ex[w].shape = ct_weights[w].shape;
    }
    rc = ct_st_check_model(&st, ex, CT_NWEIGHTS, path, msg);
  }
  if (!rc) rc = ct_model_alloc_fixed(m, msg);
  if (rc) { ct_st_close(&st); return rc; }
  for (int w = 0; w < CT_NWEIGHTS; w++) {
    const ct_weight *cw = &ct_weights[w];
    rc = ct_st_load(&st, path, ct_weight_name(w), (int)cw->ndim, cw->shape, (int)cw->transpose, (int)cw->fmt,
                    m->bufs[cw->buf], cw->scale >= 0 ? (float *)m->bufs[cw->scale] : NULL, msg);
    if (rc) { ct_st_close(&st); return rc; }
  }
  ct_st_close(&st);
  return @U@_OK;
}

/* One model call: intermediates grow to the sizes these symbol values need (one pass over the buffers
   finds each slot's largest member). */
static int ct_model_run(ct_model *m, const int64_t *sym, char *msg) {
  int64_t need[CT_NSLOT + 1];
  for (int s = 0; s < CT_NSLOT; s++) need[s] = 0;
  for (int b = 0; b < CT_NBUF; b++) {
    int64_t s = ct_slot[b];
    if (s < 0) continue;
    int64_t v = ct_elems(b, sym) * ct_itemsize[b];
    if (v > need[s]) need[s] = v;
  }
  for (int s = 0; s < CT_NSLOT; s++) {
    if (need[s] > m->slot_cap[s]) {
      int64_t grow = need[s] + need[s] / 4;
      void *p = ct_alloc(grow);
      if (!p) { ct_fail(msg, "out of memory (%lld bytes of intermediates)", (long long)grow); return @U@_ERR_MEMORY; }
      free(m->slots[s]);
      m->slots[s] = p;
      m->slot_cap[s] = grow;
      for (int b = 0; b < CT_NBUF; b++) if (ct_slot[b] == s) m->bufs[b] = p;
    }
  }
  int64_t err[8] = {0};
  caten_run(m->bufs, sym, err);
  if (err[0]) {
    if (err[0] == 3)  /* CL_ERR_RANGE (codegen/c/index_check.h): a token id outside the vocabulary */
      ct_fail(msg, "run-time check failed in model kernel call %lld: index %lld out of range for an axis of %lld",
              (long long)err[4], (long long)err[2], (long long)err[3]);
    else if (err[0] == 2)  /* CL_ERR_DIV0 (codegen/c/int_div.h) */
      ct_fail(msg, "run-time check failed in model kernel call %lld: integer division by zero", (long long)err[4]);
    else
      ct_fail(msg, "run-time check failed in model kernel call %lld: index %lld outside a buffer of %lld elements",
              (long long)err[4], (long long)err[2], (long long)err[3]);
    return @U@_ERR_RUNTIME;
  }
  return @U@_OK;
}
