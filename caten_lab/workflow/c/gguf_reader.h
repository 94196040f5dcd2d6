/* caten_lab exported loader: a strict GGUF v3 reader (gguf_reader.c). The file is memory-mapped;
   strings, arrays and tensor data are pointers into the mapping (nothing of the tensor data is
   copied or allocated). ct_gguf_open checks the file with the rules of caten_lab/formats/rules.h in
   the order of caten_lab/formats/gguf_header.py, so Python and C give every file the same verdict.
   Needs rules_table.c and json_reader.c (cj_utf8_valid, cj_set) before gguf_reader.c; the look-ups
   are in gguf_meta.c. */
#ifndef CT_GGUF_READER_H
#define CT_GGUF_READER_H

#include <stdint.h>
#include <stddef.h>

/* The ggml tensor types: X(id, NAME, values per block, bytes per block). The same table as the gguf
   package's GGML_QUANT_SIZES (tests/workflow/test_gguf_reader.py compares them). */
#define CT_GGML_TYPES(X) \
  X(0, F32, 1, 4) X(1, F16, 1, 2) X(2, Q4_0, 32, 18) X(3, Q4_1, 32, 20) X(6, Q5_0, 32, 22) \
  X(7, Q5_1, 32, 24) X(8, Q8_0, 32, 34) X(9, Q8_1, 32, 40) X(10, Q2_K, 256, 84) X(11, Q3_K, 256, 110) \
  X(12, Q4_K, 256, 144) X(13, Q5_K, 256, 176) X(14, Q6_K, 256, 210) X(15, Q8_K, 256, 292) \
  X(16, IQ2_XXS, 256, 66) X(17, IQ2_XS, 256, 74) X(18, IQ3_XXS, 256, 98) X(19, IQ1_S, 256, 50) \
  X(20, IQ4_NL, 32, 18) X(21, IQ3_S, 256, 110) X(22, IQ2_S, 256, 82) X(23, IQ4_XS, 256, 136) \
  X(24, I8, 1, 1) X(25, I16, 1, 2) X(26, I32, 1, 4) X(27, I64, 1, 8) X(28, F64, 1, 8) \
  X(29, IQ1_M, 256, 56) X(30, BF16, 1, 2) X(34, TQ1_0, 256, 54) X(35, TQ2_0, 256, 66) \
  X(39, MXFP4, 32, 17) X(40, NVFP4, 64, 36) X(41, Q1_0, 128, 18)

#define CT_GGML_ENUM(id, name, block, bytes) CT_GGML_##name = id,
enum { CT_GGML_TYPES(CT_GGML_ENUM) CT_GGML_TYPE_END };
#undef CT_GGML_ENUM

/* The metadata value types of GGUF. */
enum {
  CT_GV_UINT8 = 0, CT_GV_INT8 = 1, CT_GV_UINT16 = 2, CT_GV_INT16 = 3, CT_GV_UINT32 = 4, CT_GV_INT32 = 5,
  CT_GV_FLOAT32 = 6, CT_GV_BOOL = 7, CT_GV_STRING = 8, CT_GV_ARRAY = 9, CT_GV_UINT64 = 10,
  CT_GV_INT64 = 11, CT_GV_FLOAT64 = 12, CT_GV_COUNT = 13
};

#define CT_GGUF_MAX_DIMS 4

typedef struct { const char *ptr; uint64_t len; } ct_gguf_str;  /* UTF-8, not NUL-terminated */

typedef struct {
  ct_gguf_str key;
  uint32_t type;        /* CT_GV_*; for an array CT_GV_ARRAY and: */
  uint32_t item_type;   /* the items' type (== type for a scalar) */
  uint64_t count;       /* the item count (1 for a scalar) */
  const uint8_t *data;  /* the value (an array's: its first item) in the mapping */
  int64_t first_str;    /* a string array: the index of its first item in ct_gguf.strs */
  const uint8_t *raw;   /* the value as the file holds it: from its type field to its end */
  uint64_t raw_len;
} ct_gguf_kv;

typedef struct {
  ct_gguf_str name;
  uint32_t n_dims;
  int64_t dims[CT_GGUF_MAX_DIMS];  /* GGUF order: dims[0] is the fastest-varying (the row length) */
  uint32_t type;                   /* CT_GGML_* */
  uint64_t offset;                 /* in the data section */
  uint64_t n_bytes;
  int64_t n_elements;
  const uint8_t *data;             /* in the mapping */
} ct_gguf_tensor;

typedef struct {
  const uint8_t *map;
  uint64_t size;
  uint32_t version;
  int64_t n_kv, n_tensors;
  ct_gguf_kv *kv;
  ct_gguf_tensor *tensors;
  const uint8_t **strs;  /* the items of every string array, in file order (for O(1) indexing) */
  int64_t n_strs;
  uint64_t alignment, data_start;
  cj_set keys, names;    /* key -> kv index, tensor name -> tensor index (arena: the mapping) */
} ct_gguf;

/* Map and check a file: CT_OK, CT_ERR_IO (msg says why), CT_ERR_MEMORY, or CT_ERR_FORMAT with
   ct_rule the rule broken and msg the reason (as Python's WeightsError). ct_gguf_close in every case. */
static int ct_gguf_open(ct_gguf *g, const char *path, char *msg);
static void ct_gguf_close(ct_gguf *g);

/* Look-ups by NUL-terminated key / name: NULL when absent. */
static const ct_gguf_kv *ct_gguf_find(const ct_gguf *g, const char *key);
static const ct_gguf_tensor *ct_gguf_tensor_named(const ct_gguf *g, const char *name);

/* Typed metadata: CT_OK; CT_ERR_MISMATCH (msg names the key) when absent or of another type. An
   integer getter accepts every integer type whose value fits; a float getter FLOAT32 and FLOAT64. */
static int ct_gguf_u32(const ct_gguf *g, const char *key, uint32_t *out, char *msg);
static int ct_gguf_i64(const ct_gguf *g, const char *key, int64_t *out, char *msg);
static int ct_gguf_f32(const ct_gguf *g, const char *key, float *out, char *msg);
static int ct_gguf_f64(const ct_gguf *g, const char *key, double *out, char *msg);
static int ct_gguf_bool(const ct_gguf *g, const char *key, int *out, char *msg);
static int ct_gguf_string(const ct_gguf *g, const char *key, ct_gguf_str *out, char *msg);
/* An array of the given item type (-1: any): CT_OK with *out, or CT_ERR_MISMATCH. */
static int ct_gguf_array(const ct_gguf *g, const char *key, int item_type, const ct_gguf_kv **out, char *msg);
/* Item i < kv->count of an array (or the scalar when i == 0). */
static ct_gguf_str ct_gguf_arr_str(const ct_gguf *g, const ct_gguf_kv *kv, int64_t i);
static int64_t ct_gguf_arr_int(const ct_gguf_kv *kv, int64_t i);
static double ct_gguf_arr_float(const ct_gguf_kv *kv, int64_t i);

/* FNV-1a 64 of the raw values of keys[0:n] (ct_gguf_kv.raw; an absent key hashes as one 0xFF byte):
   the identity of e.g. a file's tokenizer (caten_lab/formats/gguf_header.py metadata_hash). */
static uint64_t ct_gguf_metadata_hash(const ct_gguf *g, const char *const *keys, int n);

/* The values per block and bytes per block of a ggml type (0, 0 if unknown), and its name. */
static int ct_ggml_block(uint32_t type, int64_t *block, int64_t *bytes);
static const char *ct_ggml_name(uint32_t type);

#endif
