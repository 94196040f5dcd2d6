/* caten_lab exported loader: the rule ids, names and dtype sizes of caten_lab/formats/rules.h (the
   single source, also read by Python: the two cannot drift), and the loader's error codes (the
   values of the library's enum, which the glue static-asserts). Needs <string.h> <stdint.h>. */
#define CT_OK 0
#define CT_ERR_IO 1
#define CT_ERR_FORMAT 2
#define CT_ERR_MISMATCH 3
#define CT_ERR_TOKENIZER 4
#define CT_ERR_MEMORY 7

#define CT_RULE(id, name, text) CT_RULE_##name = id,
#define CT_DTYPE(name, size)
enum {
  CT_RULE_NONE = 0,
#include "rules.h"
};
#undef CT_RULE
#undef CT_DTYPE

/* the rule the last rejected file broke (CT_RULE_NONE: it was not rejected, or for another reason) */
static _Thread_local int ct_rule;

static const char *ct_rule_name(int id) {
  switch (id) {
#define CT_RULE(id, name, text) case id: return #name;
#define CT_DTYPE(name, size)
#include "rules.h"
#undef CT_RULE
#undef CT_DTYPE
  }
  return "NONE";
}

/* the itemsize of a safetensors dtype, 0 if the validator does not know it */
static int ct_dtype_size(const char *dtype, size_t len) {
#define CT_RULE(id, name, text)
#define CT_DTYPE(name, size) if (len == sizeof #name - 1 && !memcmp(dtype, #name, len)) return size;
#include "rules.h"
#undef CT_RULE
#undef CT_DTYPE
  return 0;
}

static void ct_fail(char *dst, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt); vsnprintf(dst, 1024, fmt, ap); va_end(ap);
}

/* Reject a file: the message (with " [rule NAME]" appended, as Python's FormatError) and ct_rule. */
static void ct_reject(char *dst, int rule, const char *fmt, ...) {
  va_list ap; va_start(ap, fmt); vsnprintf(dst, 1024, fmt, ap); va_end(ap);
  size_t n = strlen(dst);
  if (n < 1000) snprintf(dst + n, 1024 - n, " [rule %s]", ct_rule_name(rule));
  ct_rule = rule;
}
