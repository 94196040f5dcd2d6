/* caten_lab exported library: the GPT-2 BPE tables of one vocabulary, as the tokenizer actions take
   them. The exported vocabulary's tables are linked in (tokenizer_data.h: ct_tok_<name> of the blob
   that workflow/tokenizers/static_data.py packs); another vocab.json builds them at init
   (vocab_tables.c). The fields are VOCAB_TABLES of caten_lab/workflow/model_tables.py, which checks
   the packed tables against them; the Unicode character classes (ct_tok_stage1/2) are the same for
   every vocabulary and always come from the blob. */
typedef struct {
  const int32_t *byte_ids; int64_t byte_ids_len;
  const int32_t *vslots; int64_t vslots_len;
  const int32_t *voffsets; int64_t voffsets_len;
  const uint8_t *vdata; int64_t vdata_len;
  const int32_t *pleft; int64_t pleft_len;
  const int32_t *pright; int64_t pright_len;
  const int32_t *prank; int64_t prank_len;
  const int32_t *presult; int64_t presult_len;
  const int32_t *offsets; int64_t offsets_len;
  const uint8_t *data; int64_t data_len;
  int64_t vmask;
  int64_t whole_lookup;
  int64_t pmask;
  int64_t n_vocab;
  void *owned[8];
} ct_tables;

#define CT_LINK(T, name) ((T)->name = ct_tok_##name, (T)->name##_len = ct_tok_##name##_len)

static void ct_tables_linked(ct_tables *T) {
  memset(T, 0, sizeof *T);
  CT_LINK(T, byte_ids); CT_LINK(T, vslots); CT_LINK(T, voffsets); CT_LINK(T, vdata);
  CT_LINK(T, pleft); CT_LINK(T, pright); CT_LINK(T, prank); CT_LINK(T, presult);
  CT_LINK(T, offsets); CT_LINK(T, data);
  T->vmask = ct_tok_vmask; T->whole_lookup = ct_tok_whole_lookup; T->pmask = ct_tok_pmask; T->n_vocab = ct_tok_n_vocab;
}
