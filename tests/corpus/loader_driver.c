/* The exported library's loader C (caten_lab/workflow/c/), built on its own for the corpus agreement
   test (through ctypes) and the libFuzzer target (-DDRV_FUZZ): the same files the export compiles,
   with rules.h from caten_lab/formats on the include path.
   Verdicts: 0 valid, > 0 the id of the rule broken, < 0 minus an error code without a rule. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <stdint.h>
#include <errno.h>
#include <math.h>
#include <unistd.h>
#include <sys/stat.h>

#include "rules_table.c"
#include "json_reader.c"
#include "st_loader.c"
#include "weight_read.c"
#include "vocab_check.c"
#include "gguf_reader.h"
#include "gguf_reader.c"
#include "gguf_meta.c"

static char MSG[1024];

const char *drv_msg(void) { return MSG; }
const char *drv_rule_name(int id) { return ct_rule_name(id); }

static int verdict(int rc) { return rc == CT_OK ? 0 : ct_rule != CT_RULE_NONE ? ct_rule : -rc; }

/* the file's header, then its tensors against n expected (names, ndims, shapes: n x 8) */
int drv_st(const char *path, int n, const char **names, const int *ndims, const int64_t *shapes) {
  ct_st st;
  ct_expect *ex = malloc(sizeof(ct_expect) * (size_t)(n > 0 ? n : 1));
  if (!ex) return -CT_ERR_MEMORY;
  for (int w = 0; w < n; w++) { ex[w].name = names[w]; ex[w].ndim = ndims[w]; ex[w].shape = shapes + 8 * w; }
  MSG[0] = 0;
  int rc = ct_st_open(&st, path, MSG);
  if (!rc) rc = ct_st_check_model(&st, ex, n, path, MSG);
  ct_st_close(&st);
  free(ex);
  return verdict(rc);
}

/* one tensor of a valid file as float32 in the file's layout */
int drv_st_read(const char *path, const char *name, int ndim, const int64_t *shape, float *dst) {
  ct_st st;
  int rc = ct_st_open(&st, path, MSG);
  if (!rc) rc = ct_st_load(&st, path, name, ndim, shape, 0, CT_FMT_FP32, dst, NULL, MSG);
  ct_st_close(&st);
  return verdict(rc);
}

/* a GGUF file through the strict reader (header walk, then layout) */
int drv_gguf(const char *path) {
  ct_gguf g;
  MSG[0] = 0;
  int rc = ct_gguf_open(&g, path, MSG);
  ct_gguf_close(&g);
  return verdict(rc);
}

int drv_vocab(const char *path, int64_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return -CT_ERR_IO;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  rewind(f);
  char *text = malloc((size_t)size + 1);
  if (!text || fread(text, 1, (size_t)size, f) != (size_t)size) { fclose(f); free(text); return -CT_ERR_IO; }
  fclose(f);
  MSG[0] = 0;
  int rc = ct_vocab_check(text, (size_t)size, n, path, MSG);
  free(text);
  return verdict(rc);
}

#ifdef DRV_FUZZ
/* libFuzzer: byte 0 picks the loader (even: safetensors against a one-tensor model, odd: a
   vocabulary of 257 tokens); the rest is the file. Crashes and sanitizer reports are the findings;
   the test replays the corpus the fuzzer grew through both loaders for disagreements. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  char path[64];
  snprintf(path, sizeof path, "/tmp/ct_fuzz_%d.bin", (int)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fwrite(data + 1, 1, size - 1, f);
  fclose(f);
  if (data[0] % 2 == 0) {
    static const char *names[2] = {"transformer.wte.weight", "transformer.ln_f.bias"};
    static const int ndims[2] = {2, 1};
    static const int64_t shapes[16] = {4, 2, 0, 0, 0, 0, 0, 0, 2};
    drv_st(path, 2, names, ndims, shapes);
  } else {
    drv_vocab(path, 257);
  }
  return 0;
}
#endif
