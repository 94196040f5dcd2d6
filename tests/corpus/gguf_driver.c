/* The exported library's GGUF reader (caten_lab/workflow/c/gguf_reader.c), built on its own for
   tests/workflow/test_gguf_reader.py (through ctypes), with rules.h from caten_lab/formats on the
   include path. One file open at a time. Verdicts: 0 valid, > 0 the id of the rule broken, < 0 minus
   an error code without a rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>

#include "rules_table.c"
#include "json_reader.c"
#include "gguf_reader.h"
#include "gguf_reader.c"
#include "gguf_meta.c"

static char MSG[1024];
static ct_gguf G;

const char *drv_msg(void) { return MSG; }

int drv_gguf_open(const char *path) {
  ct_gguf_close(&G);
  MSG[0] = 0;
  int rc = ct_gguf_open(&G, path, MSG);
  if (rc) ct_gguf_close(&G);
  return rc == CT_OK ? 0 : ct_rule != CT_RULE_NONE ? ct_rule : -rc;
}

void drv_gguf_close(void) { ct_gguf_close(&G); }

int64_t drv_n_tensors(void) { return G.n_tensors; }
int64_t drv_n_kv(void) { return G.n_kv; }
uint64_t drv_data_start(void) { return G.data_start; }
uint64_t drv_alignment(void) { return G.alignment; }

/* tensor i: its name (NUL-terminated into name[cap]), type, dims (4), offset, bytes and the byte of
   the file its data starts at; returns its dim count */
int drv_tensor(int64_t i, char *name, int cap, uint32_t *type, int64_t *dims, uint64_t *offset, uint64_t *n_bytes,
               uint64_t *file_at) {
  const ct_gguf_tensor *t = &G.tensors[i];
  snprintf(name, (size_t)cap, "%.*s", (int)t->name.len, t->name.ptr);
  *type = t->type;
  for (int d = 0; d < CT_GGUF_MAX_DIMS; d++) dims[d] = d < (int)t->n_dims ? t->dims[d] : 0;
  *offset = t->offset;
  *n_bytes = t->n_bytes;
  *file_at = (uint64_t)(t->data - G.map);
  return (int)t->n_dims;
}

/* the look-ups by name: the tensor index, or -1 */
int64_t drv_tensor_index(const char *name) {
  const ct_gguf_tensor *t = ct_gguf_tensor_named(&G, name);
  return t ? t - G.tensors : -1;
}

int drv_u32(const char *key, uint32_t *out) { return ct_gguf_u32(&G, key, out, MSG); }
int drv_i64(const char *key, int64_t *out) { return ct_gguf_i64(&G, key, out, MSG); }
int drv_f32(const char *key, float *out) { return ct_gguf_f32(&G, key, out, MSG); }
int drv_f64(const char *key, double *out) { return ct_gguf_f64(&G, key, out, MSG); }
int drv_bool(const char *key, int *out) { return ct_gguf_bool(&G, key, out, MSG); }

/* a string value into out[cap]; its length in *len */
int drv_str(const char *key, char *out, int64_t cap, uint64_t *len) {
  ct_gguf_str s;
  int rc = ct_gguf_string(&G, key, &s, MSG);
  if (rc) return rc;
  *len = s.len;
  memcpy(out, s.ptr, s.len < (uint64_t)cap ? s.len : (size_t)cap);
  return CT_OK;
}

/* an array: its item type and count */
int drv_array(const char *key, int item_type, uint32_t *type, uint64_t *count) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_array(&G, key, item_type, &kv, MSG);
  if (rc) return rc;
  *type = kv->item_type;
  *count = kv->count;
  return CT_OK;
}

/* all items of a string array, each followed by a NUL, into out[cap]: the bytes needed */
int64_t drv_array_strs(const char *key, char *out, int64_t cap) {
  const ct_gguf_kv *kv;
  if (ct_gguf_array(&G, key, CT_GV_STRING, &kv, MSG)) return -1;
  int64_t at = 0;
  for (uint64_t i = 0; i < kv->count; i++) {
    ct_gguf_str s = ct_gguf_arr_str(&G, kv, (int64_t)i);
    if (at + (int64_t)s.len + 1 <= cap) { memcpy(out + at, s.ptr, s.len); out[at + (int64_t)s.len] = 0; }
    at += (int64_t)s.len + 1;
  }
  return at;
}

/* all items of a numeric array as int64 (ints) or double (floats) */
int drv_array_nums(const char *key, int64_t *ints, double *floats) {
  const ct_gguf_kv *kv;
  int rc = ct_gguf_array(&G, key, -1, &kv, MSG);
  if (rc) return rc;
  for (uint64_t i = 0; i < kv->count; i++) {
    if (ints) ints[i] = ct_gguf_arr_int(kv, (int64_t)i);
    if (floats) floats[i] = ct_gguf_arr_float(kv, (int64_t)i);
  }
  return CT_OK;
}

/* the ggml type table: id -> block, bytes; name */
int drv_ggml_block(uint32_t type, int64_t *block, int64_t *bytes) { return ct_ggml_block(type, block, bytes); }
const char *drv_ggml_name(uint32_t type) { return ct_ggml_name(type); }

/* the metadata hash of n keys */
uint64_t drv_metadata_hash(const char *const *keys, int n) { return ct_gguf_metadata_hash(&G, keys, n); }
