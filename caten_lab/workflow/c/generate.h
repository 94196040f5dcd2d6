
typedef struct {
  int32_t max_new_tokens;      /* default 50 */
  double temperature;          /* 0 = greedy (argmax); default 0 */
  int32_t top_k;               /* 0 = off */
  double top_p;                /* 1 = off; in (0, 1] */
  double repetition_penalty;   /* 1 = off; > 0 */
  uint64_t seed;               /* the random number of step t is a pure function of (seed, t) */
  int32_t stop_at_eos;         /* stop after emitting an end token (end-of-text; a GGUF model's end-of-generation
                                  and end-of-turn tokens); default 1 */
} @P@_options;

/* Why the last @P@_generate on a context stopped (@P@_last_stop). */
typedef enum {
  @U@_STOP_NONE = 0,           /* no generation yet, or it failed before sampling (see its error code) */
  @U@_STOP_EOS = 1,            /* it emitted an end token (options.stop_at_eos) */
  @U@_STOP_MAX_TOKENS = 2,     /* it generated options.max_new_tokens tokens, as asked */
  @U@_STOP_CONTEXT_LIMIT = 3,  /* the model's context (@P@_context_length) is full: fewer tokens than asked */
  @U@_STOP_CALLBACK = 4,       /* the token callback returned nonzero */
  @U@_STOP_ERROR = 5           /* a run-time error after some tokens (the error code of @P@_generate) */
} @P@_stop_reason;

/* Called once per generated token with its bytes (a token may end inside a UTF-8 character);
   return nonzero to stop generating. */
typedef int (*@P@_token_callback)(int32_t token_id, const char *text, size_t text_len, void *user);

void @P@_default_options(@P@_options *options);
/* Tokenize the prompt, run it, then sample up to max_new_tokens tokens, calling cb for each.
   Returns an error code; why it stopped and how many tokens it generated: @P@_last_stop. */
int @P@_generate(@P@_ctx *ctx, const char *prompt_utf8, const @P@_options *options,
                 @P@_token_callback cb, void *user);
/* The same after a prompt of token ids ids[0:n] (each in 0..vocab size - 1). */
int @P@_generate_ids(@P@_ctx *ctx, const int32_t *ids, int64_t n, const @P@_options *options,
                     @P@_token_callback cb, void *user);
/* Chat: the prompt of the model's chat template (kept as data at export: special tokens as ids) for
   one user message (system: NULL for the template's default) into ids[0:cap]; *count receives the
   number of ids even if > cap. @U@_ERR_ARGUMENT if the library has no chat template. */
int @P@_chat_tokenize(@P@_ctx *ctx, const char *system_utf8, const char *user_utf8, int32_t *ids, int64_t cap,
                      int64_t *count);
/* @P@_generate after the chat prompt of one user message. */
int @P@_chat(@P@_ctx *ctx, const char *system_utf8, const char *user_utf8, const @P@_options *options,
             @P@_token_callback cb, void *user);
/* The stop reason of the last @P@_generate on ctx; *n_generated (if not NULL) receives the number
   of tokens it generated. */
@P@_stop_reason @P@_last_stop(const @P@_ctx *ctx, int64_t *n_generated);
/* "eos", "max_tokens", "context_limit", "callback", "error" or "none". */
const char *@P@_stop_reason_name(int reason);

#ifdef __cplusplus
}
#endif
#endif
