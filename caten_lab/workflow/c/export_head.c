/* caten_lab exported library: the start of lib@P@'s runtime translation unit (<name>_workflow.c).
   The pieces of the unit are real files of caten_lab/workflow/c/ (@P@ = the API prefix, @U@ = it in
   upper case), included in order by workflow_generate.c / workflow_perplexity.c; the only generated
   files are data: model_data.h and tokenizer_data.h (tables linked with .incbin) and actions.h (the
   prototypes of the compiled actions). */
#define _GNU_SOURCE
#include "@P@.h"

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

/* The name of an error code of the library's API (api.h, train.h: one numbering for every workflow). */
static const char *ct_error_name(int code) {
  static const char *names[] = {"ok", "io", "format", "mismatch", "tokenizer", "argument", "context", "memory",
                                "runtime", "data"};
  return code >= 0 && code < (int)(sizeof names / sizeof *names) ? names[code] : "unknown";
}
