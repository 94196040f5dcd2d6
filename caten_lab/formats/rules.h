/* The rules of caten_lab's strict weight and vocabulary validator: the single source of their ids and
   descriptions. caten_lab/formats/rules.py reads this file (Python's loaders raise FormatError with
   ``rule``); the exported C loader includes it (ct_rule holds the id of the rule a file broke). Both
   loaders check the rules in the order given by the loaders' docs, so a file breaking several gets
   the same verdict from both. One rule per line: CT_RULE(id, NAME, "what a valid file satisfies").
   CT_DTYPE(name, itemsize): the safetensors dtypes the validator knows. */
CT_RULE(1, HEADER, "the header parses: safetensors: its 8-byte length fits the file and 100 MB; GGUF: a little-endian v3 header whose counts, strings (UTF-8), value types and tensor infos fit the file (formats/gguf_header.py)")
CT_RULE(2, JSON, "the header or vocabulary is one JSON object: strict UTF-8, no NaN/Infinity, nesting <= 64")
CT_RULE(3, DUPLICATE_KEY, "no JSON object has the same key twice (tensor names, entry fields, metadata, tokens); no SentencePiece piece twice")
CT_RULE(4, ENTRY, "a tensor entry is an object of exactly dtype, shape (<= 8 dims) and data_offsets (2 values); __metadata__ maps strings to strings")
CT_RULE(5, DTYPE, "the dtype is a known safetensors dtype; a model tensor is F32, F16 or BF16 (GGUF: F32, F16, BF16, Q8_0 or a type llama.cpp quantizes to)")
CT_RULE(6, INTEGER, "shape dims and data offsets are non-negative JSON integers below 2^62 (no floats, no booleans)")
CT_RULE(7, NBYTES, "a tensor spans prod(shape) * itemsize bytes (GGUF: tensors back to back, each padded to the alignment)")
CT_RULE(8, BOUNDS, "data_offsets are ordered (begin <= end) and end inside the data section")
CT_RULE(9, OVERLAP, "no two tensors share a byte")
CT_RULE(10, ALIGNMENT, "GGUF: every tensor offset is a multiple of general.alignment")
CT_RULE(11, NAMES, "tensor names are exactly the architecture's, each once (HF GPT-2 names, with or without the transformer. prefix; lm_head.weight and the attn.bias masks optional)")
CT_RULE(12, SHAPE, "every tensor has the shape the config implies")
CT_RULE(13, TIED, "lm_head.weight, when present, is a byte-for-byte copy of transformer.wte.weight")
CT_RULE(14, CONFIG, "config.json holds GPT-2 keys with values caten_lab implements")
CT_RULE(15, VOCAB_ID, "vocabulary ids are integers 0..n-1, each used once (n: the model's vocabulary size)")
CT_RULE(16, VOCAB_TOKEN, "tokens are in GPT-2's byte-level alphabet and every byte value has a one-byte token; no SentencePiece piece is empty")
CT_RULE(17, MERGES, "every merges line is 'left right' with left, right and left+right tokens of the vocabulary")
CT_DTYPE(F64, 8)
CT_DTYPE(F32, 4)
CT_DTYPE(F16, 2)
CT_DTYPE(BF16, 2)
CT_DTYPE(I64, 8)
CT_DTYPE(I32, 4)
CT_DTYPE(I16, 2)
CT_DTYPE(I8, 1)
CT_DTYPE(U8, 1)
CT_DTYPE(BOOL, 1)
