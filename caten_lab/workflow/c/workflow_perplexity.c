/* caten_lab exported library: lib@P@'s runtime translation unit for the perplexity workflow, written
   by caten_lab.workflow.export as src/@P@_workflow.c next to the files it includes. Each piece is a
   file of caten_lab/workflow/c/; model_data.h, tokenizer_data.h and actions.h are generated (tables
   linked with .incbin, and the compiled actions' prototypes). The model, the tokenizer actions and
   the perplexity actions are translation units of their own. */
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
#include "tok_tables.c"
#include "vocab_tables.c"
#include "actions.h"
#include "context.c"
#include "perplexity.c"
