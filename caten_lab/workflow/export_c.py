"""The hand-written C half of an exported workflow library: safetensors reading, model buffers, errors.

``export.py`` generates the model-specific tables (buffer kinds, symbolic sizes, weight names and
shapes) and the workflow's entry points; everything here is fixed text with ``@P@`` standing for the
API prefix (``gpt2``). The loader (safetensors and vocabulary files) is real C in ``workflow/c/``,
checking the rules of ``caten_lab/formats/rules.h`` in the order the Python loaders check them: the
header length, the JSON, every name, dtype, shape and byte range is checked before a byte of tensor
data is read or a buffer allocated, so a corrupt, truncated or mismatched file becomes an error code
and a message (naming its rule), never a crash, and the same verdict as Python's.
"""

from __future__ import annotations

from importlib import resources

from caten_lab.formats.rules import rules_header


def _c_text(name: str) -> str:
    """Fixed C of the export kept in caten_lab/workflow/c/ (``@P@`` / ``@U@``: the API prefix)."""
    return (resources.files("caten_lab.workflow") / "c" / name).read_text(encoding="utf-8")


_COMMON_HEAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <sys/stat.h>

#define API __attribute__((visibility("default")))

static _Thread_local char ct_init_error[1024];

static void *ct_alloc(int64_t bytes) {
  void *p = NULL;
  if (bytes < 64) bytes = 64;
  if (posix_memalign(&p, 64, (size_t)((bytes + 63) / 64 * 64)) != 0) return NULL;
  memset(p, 0, (size_t)bytes);
  return p;
}
"""

_COMMON_TAIL = r"""
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

/* ------------------------------------------------------------------ the model's buffers */
typedef struct {
  void *bufs[CT_NBUF];
  void *slots[CT_NSLOT + 1];
  int64_t slot_cap[CT_NSLOT + 1];
} ct_model;

static void ct_model_free(ct_model *m) {
  for (int b = 0; b < CT_NBUF; b++) if (ct_slot[b] < 0 && m->bufs[b]) free(m->bufs[b]);
  for (int s = 0; s < CT_NSLOT; s++) free(m->slots[s]);
  memset(m, 0, sizeof *m);
}

/* Validate the safetensors file (its header, then its tensors against the exported model: st_loader.c),
   and only then allocate the fixed buffers and read every weight. */
static int ct_model_load(ct_model *m, const char *path, char *msg) {
  memset(m, 0, sizeof *m);
  ct_st st;
  int rc = ct_st_open(&st, path, msg);
  if (!rc) {
    ct_expect ex[CT_NWEIGHTS];
    for (int w = 0; w < CT_NWEIGHTS; w++) {
      ex[w].name = ct_weights[w].name; ex[w].ndim = ct_weights[w].ndim; ex[w].shape = ct_weights[w].shape;
    }
    rc = ct_st_check_model(&st, ex, CT_NWEIGHTS, path, msg);
  }
  if (rc) { ct_st_close(&st); return rc; }
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++) {
    if (ct_slot[b] >= 0) continue;
    m->bufs[b] = ct_alloc(ct_elems(b, sym) * ct_itemsize[b]);
    if (!m->bufs[b]) { ct_st_close(&st); ct_fail(msg, "out of memory allocating the model buffers"); return @U@_ERR_MEMORY; }
  }
  for (int w = 0; w < CT_NWEIGHTS; w++) {
    const ct_weight *cw = &ct_weights[w];
    rc = ct_st_load(&st, path, cw->name, cw->ndim, cw->shape, cw->transpose, cw->fmt, m->bufs[cw->buf],
                    cw->scale >= 0 ? (float *)m->bufs[cw->scale] : NULL, msg);
    if (rc) { ct_st_close(&st); return rc; }
  }
  ct_st_close(&st);
  return @U@_OK;
}

/* One model call: intermediates grow to the sizes these symbol values need. */
static int ct_model_run(ct_model *m, const int64_t *sym, char *msg) {
  for (int s = 0; s < CT_NSLOT; s++) {
    int64_t need = ct_slot_bytes(s, sym);
    if (need > m->slot_cap[s]) {
      int64_t grow = need + need / 4;
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
"""

# the loader's fixed C (workflow/c/): the rules table, strict JSON, the safetensors reader and checks,
# tensor reading, the vocabulary check; then the vocabulary tables (which need the generated ct_tables)
LOADER_FILES = ("rules_table.c", "json_reader.c", "st_loader.c", "weight_read.c", "vocab_check.c")
VOCAB_FILES = ("vocab_tables.c",)


def loader_source(files: tuple[str, ...] = LOADER_FILES) -> str:
    """The text of the loader's .c files, with caten_lab/formats/rules.h inlined where they include it
    (the exported glue is one translation unit; a standalone build may use -I instead)."""
    rules = rules_header()
    parts = []
    for f in files:
        parts.append(_c_text(f).replace('#include "rules.h"\n', rules))
    return "\n".join(parts)


COMMON_C = _COMMON_HEAD + loader_source() + _COMMON_TAIL

HEADER_COMMON = r"""
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: every API call returns one; @P@_last_error(ctx) (or (NULL) after a failed init)
   says what was wrong. */
enum {
  @U@_OK = 0,
  @U@_ERR_IO = 1,         /* a file cannot be opened or read */
  @U@_ERR_FORMAT = 2,     /* a corrupt or truncated weights file */
  @U@_ERR_MISMATCH = 3,   /* tensor names / shapes / dtypes do not match the exported model */
  @U@_ERR_TOKENIZER = 4,  /* vocab / merges files differ from the ones the library was exported with */
  @U@_ERR_ARGUMENT = 5,   /* an invalid argument or option */
  @U@_ERR_CONTEXT = 6,    /* the text does not fit the model's context */
  @U@_ERR_MEMORY = 7,     /* out of memory */
  @U@_ERR_RUNTIME = 8     /* a run-time check in generated code failed */
};

typedef struct @P@_ctx @P@_ctx;

/* Load the weights (a .safetensors file, or a directory holding model.safetensors). The tokenizer
   tables of the exported vocabulary are linked into the library: vocab_path / merges_path may be
   NULL. A vocab.json / encoder.json other than the exported one is loaded and its tables built at
   init (it must have the model's vocabulary size); a merges file is checked for its format.
   Returns NULL on failure with *err set (if err is not NULL); see @P@_last_error(NULL). */
@P@_ctx *@P@_init(const char *weights_path, const char *vocab_path, const char *merges_path, int *err);
void @P@_free(@P@_ctx *ctx);
/* The message of the last error on ctx (ctx == NULL: the last failed init on this thread). */
const char *@P@_last_error(const @P@_ctx *ctx);
const char *@P@_error_name(int code);
/* Token ids of UTF-8 text (byte-level BPE); *count receives the number of tokens even if > cap. */
int @P@_tokenize(@P@_ctx *ctx, const char *text_utf8, int32_t *ids, int64_t cap, int64_t *count);
int64_t @P@_context_length(const @P@_ctx *ctx);
int64_t @P@_vocab_size(const @P@_ctx *ctx);
"""

_FORMAT_DOC = {
    "fp32": "as float32, the file's values (F16/BF16 tensors widened exactly)",
    "fp16": "as IEEE fp16 (round to nearest even, as numpy's astype(float16)): half the memory",
    "int8": "as int8 with one float32 scale per output row (max |w| / 127): a quarter of the memory",
}


def weight_format_header(weight_format: str) -> str:
    """The header's statement of the weight format the library was exported for."""
    return f"""
/* Weights: @P@_init reads a Hugging Face model.safetensors (F32, F16 or BF16 tensors) and, while
   loading, stores the matmul weights {_FORMAT_DOC[weight_format]}.
   Chosen at export (caten-lab export --weight-format); the same logits as the Python GPT2Runner with
   weight_format="{weight_format}". */
#define @U@_WEIGHT_FORMAT "{weight_format}"
const char *@P@_weight_format(void);  /* @U@_WEIGHT_FORMAT */
"""


GEN_HEADER = _c_text("generate.h")

CTX_C = r"""
struct @P@_ctx {
  ct_model m;
  ct_tables tok;
  char msg[1024];
  int32_t *dec_ids;
  uint8_t *dec_out;
  int64_t dec_cap;
  int stop_reason;        /* @P@_stop_reason of the last @P@_generate (c/generate.c) */
  int64_t n_generated;
};

API const char *@P@_last_error(const @P@_ctx *ctx) { return ctx ? ctx->msg : ct_init_error; }

API const char *@P@_error_name(int code) {
  switch (code) {
    case @U@_OK: return "ok";
    case @U@_ERR_IO: return "io";
    case @U@_ERR_FORMAT: return "format";
    case @U@_ERR_MISMATCH: return "mismatch";
    case @U@_ERR_TOKENIZER: return "tokenizer";
    case @U@_ERR_ARGUMENT: return "argument";
    case @U@_ERR_CONTEXT: return "context";
    case @U@_ERR_MEMORY: return "memory";
    case @U@_ERR_RUNTIME: return "runtime";
  }
  return "unknown";
}

API int64_t @P@_context_length(const @P@_ctx *ctx) { (void)ctx; return CT_N_CTX; }
API const char *@P@_weight_format(void) { return CT_WEIGHT_FORMAT; }
API int64_t @P@_vocab_size(const @P@_ctx *ctx) { (void)ctx; return CT_VOCAB; }

API void @P@_free(@P@_ctx *ctx) {
  if (!ctx) return;
  ct_model_free(&ctx->m);
  ct_tables_free(&ctx->tok);
  free(ctx->dec_ids);
  free(ctx->dec_out);
  free(ctx);
}

API @P@_ctx *@P@_init(const char *weights_path, const char *vocab_path, const char *merges_path, int *err) {
  int rc;
  char path[4096];
  @P@_ctx *ctx = NULL;
  if (err) *err = @U@_OK;
  ct_init_error[0] = 0;
  if (!weights_path) { ct_fail(ct_init_error, "weights_path is NULL"); rc = @U@_ERR_ARGUMENT; goto fail; }
  snprintf(path, sizeof path, "%s", weights_path);
  {
    size_t n = strlen(path);
    if (n > 0 && path[n - 1] == '/') path[--n] = 0;
    char cand[4096];  /* a directory: use its model.safetensors */
    snprintf(cand, sizeof cand, "%s/model.safetensors", path);
    FILE *probe = fopen(cand, "rb");
    if (probe) { fclose(probe); snprintf(path, sizeof path, "%s", cand); }
  }
  ctx = calloc(1, sizeof *ctx);
  if (!ctx) { ct_fail(ct_init_error, "out of memory"); rc = @U@_ERR_MEMORY; goto fail; }
  ct_tables_linked(&ctx->tok);
  if (vocab_path) {
    int ok = 0;
    uint64_t h = ct_fnv64_file(vocab_path, &ok);
    if (!ok) { ct_fail(ct_init_error, "%s: cannot read the vocabulary file (%s)", vocab_path, strerror(errno)); rc = @U@_ERR_IO; goto fail; }
    if (h != CT_VOCAB_HASH) {  /* not the exported vocabulary: build the tables from the file */
      ct_tables_free(&ctx->tok);
      rc = ct_tables_from_vocab(&ctx->tok, vocab_path, ct_init_error);
      if (rc) goto fail;
    }
  }
  if (merges_path) { rc = ct_check_merges(merges_path, &ctx->tok, ct_init_error); if (rc) goto fail; }
  rc = ct_model_load(&ctx->m, path, ct_init_error);
  if (rc) goto fail;
  ctx->dec_cap = 1;
  for (int64_t i = 0; i < ctx->tok.n_vocab; i++) {
    int64_t l = ctx->tok.offsets[i + 1] - ctx->tok.offsets[i];
    if (l > ctx->dec_cap) ctx->dec_cap = l;
  }
  ctx->dec_ids = malloc(sizeof(int32_t) * 4);
  ctx->dec_out = malloc((size_t)ctx->dec_cap + 1);
  if (!ctx->dec_ids || !ctx->dec_out) { ct_fail(ct_init_error, "out of memory"); rc = @U@_ERR_MEMORY; goto fail; }
  return ctx;
fail:
  @P@_free(ctx);
  if (err) *err = rc;
  return NULL;
}

/* Byte-level BPE of n bytes (the gpt2_encode action); *ids is malloc'd. */
static int ct_encode(@P@_ctx *ctx, const uint8_t *text, int64_t n, int32_t **ids, int64_t *count) {
  *ids = NULL; *count = 0;
  if (n > INT32_MAX / 4) { ct_fail(ctx->msg, "text of %lld bytes is too long", (long long)n); return @U@_ERR_ARGUMENT; }
  int64_t n1 = n + 1;
  int32_t *char_start = malloc(sizeof(int32_t) * n1), *sym = malloc(sizeof(int32_t) * n1);
  int32_t *rank = malloc(sizeof(int32_t) * n1), *res = malloc(sizeof(int32_t) * n1);
  int32_t *out = malloc(sizeof(int32_t) * (n > 0 ? n : 1));
  uint8_t *char_cls = malloc(n1);
  int64_t *heap = malloc(sizeof(int64_t) * (3 * n + 3));
  int rc = @U@_OK;
  if (!char_start || !sym || !rank || !res || !out || !char_cls || !heap) { ct_fail(ctx->msg, "out of memory"); rc = @U@_ERR_MEMORY; goto done; }
  if (n > 0) {
    int64_t aerr[4] = {0};
    int32_t got = ct_encode_call(&ctx->tok, (uint8_t *)text, n, char_start, char_cls, sym, rank, res, heap, out, aerr);
    if (aerr[0]) { ct_fail(ctx->msg, "tokenizer run-time check failed (code %lld, action line %lld)", (long long)aerr[0], (long long)aerr[1]); rc = @U@_ERR_RUNTIME; goto done; }
    *count = got;
  }
  *ids = out; out = NULL;
done:
  free(char_start); free(sym); free(rank); free(res); free(out); free(char_cls); free(heap);
  return rc;
}

/* The bytes of one token (the tokens_to_bytes action). */
static int64_t ct_decode1(@P@_ctx *ctx, int32_t tok) {
  int64_t aerr[4] = {0};
  ctx->dec_ids[0] = tok;
  int32_t n = ct_decode_call(&ctx->tok, ctx->dec_ids, ctx->dec_out, ctx->dec_cap + 1, aerr);
  if (aerr[0] || n < 0) return 0;
  ctx->dec_out[n] = 0;
  return n;
}

API int @P@_tokenize(@P@_ctx *ctx, const char *text, int32_t *ids, int64_t cap, int64_t *count) {
  if (!ctx || !text) return @U@_ERR_ARGUMENT;
  if (!ids && cap > 0) { ct_fail(ctx->msg, "ids is NULL but cap is %lld", (long long)cap); return @U@_ERR_ARGUMENT; }
  int32_t *all; int64_t n;
  int rc = ct_encode(ctx, (const uint8_t *)text, (int64_t)strlen(text), &all, &n);
  if (rc) return rc;
  if (count) *count = n;
  for (int64_t i = 0; i < n && i < cap; i++) ids[i] = all[i];
  free(all);
  return @U@_OK;
}

/* Run tokens ids[0:n] at positions pos.. through the model. */
static int ct_forward(@P@_ctx *ctx, const int32_t *ids, int64_t n, int64_t pos) {
  if (pos + n > CT_N_CTX) {
    ct_fail(ctx->msg, "context limit: positions %lld..%lld do not fit the context of %d tokens", (long long)pos, (long long)(pos + n - 1), CT_N_CTX);
    return @U@_ERR_CONTEXT;
  }
  int64_t *tokens = (int64_t *)ctx->m.bufs[CT_TOKENS_BUF];
  for (int64_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= CT_VOCAB) { ct_fail(ctx->msg, "token id %d outside the vocabulary", ids[i]); return @U@_ERR_ARGUMENT; }
    tokens[i] = ids[i];
  }
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  ct_set_symbols(sym, n, pos);
  return ct_model_run(&ctx->m, sym, ctx->msg);
}

static void ct_reset_states(@P@_ctx *ctx) {
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  for (int k = 0; k < CT_NSYM; k++) sym[k] = 0;
  ct_fixed_symbols(sym);
  for (int b = 0; b < CT_NBUF; b++)
    if (ct_kind[b] == 2) memset(ctx->m.bufs[b], 0, (size_t)(ct_elems(b, sym) * ct_itemsize[b]));
}
"""

GEN_C = _c_text("generate.c")

GEN_MAIN = _c_text("cli_main.c")

TOKENIZER_FILES_C = loader_source(VOCAB_FILES)
