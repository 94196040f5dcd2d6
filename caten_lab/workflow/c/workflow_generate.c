/* caten_lab exported library: lib@P@'s runtime translation unit for the generation workflow, written
   by caten_lab.workflow.export as src/@P@_workflow.c next to the files it includes. Each piece is a
   file of caten_lab/workflow/c/; model_data.h, tokenizer_data.h and actions.h are generated (tables
   linked with .incbin, and the compiled actions' prototypes); tokenizer.c is the fixed C of the
   model's tokenizer (c/tok_gpt2.c with its tables, or c/tok_gguf.c: workflow/c_library.py). The model, the tokenizer actions and
   the generation loop are translation units of their own. */
#include "export_head.c"
#include "model_data.h"
#include "model_tables.c"
#include "rules_table.c"
#include "json_reader.c"
#include "st_loader.c"
#include "weight_read.c"
#include "vocab_check.c"
#include "gguf_reader.h"
#include "gguf_reader.c"
#include "gguf_meta.c"
#include "model_buffers.c"
#include "gguf_weights.c"
#include "tokenizer_data.h"
#include "actions.h"
#include "tokenizer.c"
#include "context.c"
#include "generate.c"
#include "chat_prompt.c"
