/* caten_lab exported loader: the look-ups of a GGUF file read by gguf_reader.c (gguf_reader.h
   documents them): metadata by key (typed getters refusing another type with the key's name),
   tensors by name (hash sets: O(1)), array items, and the metadata hash. Include after
   gguf_reader.c. */

static const ct_gguf_kv *ct_gguf_find(const ct_gguf *g, const char *key) {
  int64_t k = cj_set_find(&g->keys, key, (int64_t)strlen(key), 0);
  return k < 0 ? NULL : &g->kv[k];
}

static const ct_gguf_tensor *ct_gguf_tensor_named(const ct_gguf *g, const char *name) {
  int64_t k = cj_set_find(&g->names, name, (int64_t)strlen(name), 0);
  return k < 0 ? NULL : &g->tensors[k];
}

static int64_t ct_gguf_arr_int(const ct_gguf_kv *kv, int64_t i) {
  int n = ct_gv_size[kv->item_type];
  uint64_t v = ct_gw_le(kv->data + (uint64_t)i * (uint64_t)n, n);
  switch (kv->item_type) {
    case CT_GV_INT8: return (int8_t)v;
    case CT_GV_INT16: return (int16_t)v;
    case CT_GV_INT32: return (int32_t)v;
    default: return (int64_t)v;
  }
}

static double ct_gguf_arr_float(const ct_gguf_kv *kv, int64_t i) {
  if (kv->item_type == CT_GV_FLOAT32) { float f; memcpy(&f, kv->data + 4 * i, 4); return f; }
  if (kv->item_type == CT_GV_FLOAT64) { double d; memcpy(&d, kv->data + 8 * i, 8); return d; }
  return (double)ct_gguf_arr_int(kv, i);
}

static ct_gguf_str ct_gguf_arr_str(const ct_gguf *g, const ct_gguf_kv *kv, int64_t i) {
  const uint8_t *p = kv->type == CT_GV_ARRAY ? g->strs[kv->first_str + i] : kv->data;
  ct_gguf_str s = {(const char *)p + 8, ct_gw_le(p, 8)};
  return s;
}

static int ct_gguf_lookup(const ct_gguf *g, const char *key, int array, const ct_gguf_kv **kv, char *msg) {
  *kv = ct_gguf_find(g, key);
  if (!*kv) { ct_fail(msg, "GGUF metadata '%s' is missing", key); return CT_ERR_MISMATCH; }
  if (((*kv)->type == CT_GV_ARRAY) != array) {
    ct_fail(msg, "GGUF metadata '%s' is %s%s, not %s", key, array ? "a " : "an array of ", ct_gv_names[(*kv)->item_type],
            array ? "an array" : "a single value");
    return CT_ERR_MISMATCH;
  }
  return CT_OK;
}

static int ct_gguf_is_int(uint32_t t) { return t <= CT_GV_INT32 || t == CT_GV_UINT64 || t == CT_GV_INT64; }

static int ct_gguf_i64(const ct_gguf *g, const char *key, int64_t *out, char *msg) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_lookup(g, key, 0, &kv, msg);
  if (rc) return rc;
  if (!ct_gguf_is_int(kv->type) || (kv->type == CT_GV_UINT64 && ct_gw_le(kv->data, 8) > INT64_MAX)) {
    ct_fail(msg, "GGUF metadata '%s' is a %s, not an integer below 2^63", key, ct_gv_names[kv->type]);
    return CT_ERR_MISMATCH;
  }
  *out = ct_gguf_arr_int(kv, 0);
  return CT_OK;
}

static int ct_gguf_u32(const ct_gguf *g, const char *key, uint32_t *out, char *msg) {
  int64_t v;
  int rc = ct_gguf_i64(g, key, &v, msg);
  if (rc) return rc;
  if (v < 0 || v > UINT32_MAX) { ct_fail(msg, "GGUF metadata '%s' = %lld is not in 0..2^32-1", key, (long long)v); return CT_ERR_MISMATCH; }
  *out = (uint32_t)v;
  return CT_OK;
}

static int ct_gguf_f64(const ct_gguf *g, const char *key, double *out, char *msg) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_lookup(g, key, 0, &kv, msg);
  if (rc) return rc;
  if (kv->type != CT_GV_FLOAT32 && kv->type != CT_GV_FLOAT64) {
    ct_fail(msg, "GGUF metadata '%s' is a %s, not a float", key, ct_gv_names[kv->type]);
    return CT_ERR_MISMATCH;
  }
  *out = ct_gguf_arr_float(kv, 0);
  return CT_OK;
}

static int ct_gguf_f32(const ct_gguf *g, const char *key, float *out, char *msg) {
  double d;
  int rc = ct_gguf_f64(g, key, &d, msg);
  if (!rc) *out = (float)d;
  return rc;
}

static int ct_gguf_bool(const ct_gguf *g, const char *key, int *out, char *msg) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_lookup(g, key, 0, &kv, msg);
  if (rc) return rc;
  if (kv->type != CT_GV_BOOL) { ct_fail(msg, "GGUF metadata '%s' is a %s, not a BOOL", key, ct_gv_names[kv->type]); return CT_ERR_MISMATCH; }
  *out = kv->data[0] != 0;
  return CT_OK;
}

static int ct_gguf_string(const ct_gguf *g, const char *key, ct_gguf_str *out, char *msg) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_lookup(g, key, 0, &kv, msg);
  if (rc) return rc;
  if (kv->type != CT_GV_STRING) { ct_fail(msg, "GGUF metadata '%s' is a %s, not a STRING", key, ct_gv_names[kv->type]); return CT_ERR_MISMATCH; }
  *out = ct_gguf_arr_str(g, kv, 0);
  return CT_OK;
}

static int ct_gguf_array(const ct_gguf *g, const char *key, int item_type, const ct_gguf_kv **out, char *msg) {
  int rc = ct_gguf_lookup(g, key, 1, out, msg);
  if (rc) return rc;
  if (item_type >= 0 && (*out)->item_type != (uint32_t)item_type) {
    ct_fail(msg, "GGUF metadata '%s' is an array of %s, not of %s", key, ct_gv_names[(*out)->item_type], ct_gv_names[item_type]);
    return CT_ERR_MISMATCH;
  }
  return CT_OK;
}

static uint64_t ct_gguf_metadata_hash(const ct_gguf *g, const char *const *keys, int n) {
  uint64_t h = 1469598103934665603ULL;
  for (int k = 0; k < n; k++) {
    const ct_gguf_kv *kv = ct_gguf_find(g, keys[k]);
    if (!kv) { h ^= 0xFF; h *= 1099511628211ULL; continue; }
    for (uint64_t i = 0; i < kv->raw_len; i++) { h ^= kv->raw[i]; h *= 1099511628211ULL; }
  }
  return h;
}
