/* caten_lab exported library: the compiled model's tables (buffers, symbols, weights) read from the
   data that caten_lab/workflow/model_tables.py packs from the program (model_data.h: ct_m_<name>
   scalars and typed arrays of a blob linked with .incbin). Nothing model-specific is C text. */

#define CT_NBUF ((int)ct_m_nbuf)
#define CT_NSYM ((int)ct_m_nsym)
#define CT_NSLOT ((int)ct_m_nslot)
#define CT_N_CTX ((int)ct_m_n_ctx)
#define CT_VOCAB ((int)ct_m_vocab)
#define CT_EOS ((int)ct_m_eos)
#define CT_NSTOPS ((int64_t)ct_m_nstops)  /* the ids ct_m_stops[0:CT_NSTOPS] end a generation */
#define CT_TOKENS_BUF ((int)ct_m_tokens_buf)
#define CT_OUT_BUF ((int)ct_m_out_buf)
#define CT_NWEIGHTS ((int)ct_m_nweights)
#define CT_VOCAB_HASH ((uint64_t)ct_m_vocab_hash[0])
#define CT_SYM_SIZE (CT_NSYM > 0 ? CT_NSYM : 1)

/* kind of buffer b: 0 input (a weight), 1 tokens, 2 state, 3 intermediate, 4 output (KIND_CODES) */
#define ct_kind ct_m_kind
/* the memory-plan slot an intermediate lives in, -1 for a buffer of its own */
#define ct_slot ct_m_slot
#define ct_itemsize ct_m_itemsize

void caten_run(void **b, const int64_t *sym, int64_t *err);

/* The element count of buffer b: a polynomial in the symbols, terms
   ct_m_size_code[ct_m_size_at[b] .. ct_m_size_at[b + 1]) = (coefficient, degree, symbol index x degree). */
static int64_t ct_elems(int b, const int64_t *sym) {
  const int64_t *c = ct_m_size_code + ct_m_size_at[b], *end = ct_m_size_code + ct_m_size_at[b + 1];
  int64_t total = 0;
  while (c < end) {
    int64_t term = c[0], degree = c[1];
    for (int64_t k = 0; k < degree; k++) term *= sym[c[2 + k]];
    total += term;
    c += 2 + degree;
  }
  return total;
}

/* symbol i is the model call's token count (role 0: seq) or its start position (role 1: pos) */
static void ct_set_symbols(int64_t *sym, int64_t seq, int64_t pos) {
  for (int i = 0; i < CT_NSYM; i++) sym[i] = ct_m_sym_role[i] == 0 ? seq : pos;
}

/* upper bounds of every symbol: sizes of the buffers allocated once */
static void ct_fixed_symbols(int64_t *sym) {
  for (int i = 0; i < CT_NSYM; i++) sym[i] = CT_N_CTX;
}

/* One file tensor of the model: the buffer it fills, its name (ct_weight_name), its file shape, whether
   it is stored transposed, its format (CT_FMT_FP32 / FP16 / INT8: weight_read.c) and the buffer of an
   int8 weight's per-row scales (-1: none). A record of ct_m_weights (WEIGHT_FIELDS in model_tables.py). */
typedef struct { int64_t buf, name, ndim, shape[4], transpose, fmt, scale; } ct_weight;
_Static_assert(sizeof(ct_weight) == 10 * sizeof(int64_t), "ct_weight is a record of ten int64 fields");
#define ct_weights ((const ct_weight *)ct_m_weights)
#define ct_weight_name(w) ((const char *)ct_m_names + ct_weights[w].name)

/* Where the weights come from (ct_m_source, SOURCE_CODES of workflow/weight_source.py): 0 a
   safetensors file (the ct_weight records above), 1 a GGUF file (the ct_bind records of
   gguf_weights.c). */
#define CT_SOURCE ((int)ct_m_source)
#define CT_NBINDS ((int)ct_m_nbinds)
