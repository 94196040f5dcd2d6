/* caten_lab exported library: lib@P@'s runtime translation unit for the training workflow, written by
   caten_lab.workflow.training as src/@P@_workflow.c next to the files it includes (each a file of
   caten_lab/workflow/c/); train_data.h and actions.h are generated (the tables linked with .incbin, and
   the compiled data loader's prototype). The step program and the loader action are translation units
   of their own. */
#include "export_head.c"
#include "train_data.h"
#include "rules_table.c"
#include "json_reader.c"
#include "st_loader.c"
#include "weight_read.c"
#include "actions.h"
#include "train.c"
