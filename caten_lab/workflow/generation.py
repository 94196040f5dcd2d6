"""The generation loop as an action: prompt -> compiled GPT-2 -> sampler -> callback -> repeat.

``generate_loop`` calls two host actions, ``model_forward`` (the compiled GPT-2 program: run n
tokens at a position, leave the last position's logits in ``logits``) and ``emit_token`` (decode
and hand the token to the user; nonzero stops). Interpreted, they are bound to the Python runner
(:func:`generate_interpreted`); exported, to the C runtime of the library. The stopping rules are
those of ``DecoderRunner.stream``: one of the ``stops`` tokens (GPT-2: its end-of-text; a GGUF model:
its end-of-generation tokens and the chat template's end-of-turn), ``max_new`` tokens, or a full context.
Returns the number of generated tokens, or ``-code`` when the model call failed.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from typing import Any

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.token_ids import check_token_ids
from caten_lab.workflow.action import action
from caten_lab.workflow.host import host_action
from caten_lab.workflow.samplers import sample_token
from caten_lab.workflow.types import Array, f32, f64, i32, i64, u8


@host_action
def model_forward(tokens: Array[i32, ("n",)], n: i64, pos: i64, logits: Array[f32, ("v",)]) -> i32:
    """Host: run ``tokens[:n]`` at positions ``pos..``; last-position logits into ``logits``; 0 = ok."""
    return 0


@host_action
def emit_token(token: i32, step: i64) -> i32:
    """Host: deliver one generated token; nonzero stops the generation."""
    return 0


@action
def generate_loop(
    prompt: Array[i32, ("np",)],
    n_prompt: i64,
    max_new: i64,
    n_ctx: i64,
    stops: Array[i32, ("ns",)],
    n_stops: i64,
    stop_at_eos: i32,
    logits: Array[f32, ("v",)],
    history: Array[i32, ("h",)],
    one: Array[i32, (1,)],
    temperature: f64,
    top_k: i64,
    top_p: f64,
    repetition_penalty: f64,
    seed_hi: i64,
    seed_lo: i64,
    x: Array[f64, ("v",)],
    p: Array[f64, ("v",)],
    order: Array[i32, ("v",)],
    seen: Array[u8, ("v",)],
    st: Array[i64, (2,)],
) -> i64:
    """Generate up to ``max_new`` tokens after the prompt (``history`` holds n_prompt + max_new)."""
    for i in range(n_prompt):
        history[i] = prompt[i]
    rc = model_forward(prompt, n_prompt, 0, logits)
    if rc != 0:
        return -i64(rc)
    nh = n_prompt
    pos = n_prompt
    for step in range(max_new):
        tok = sample_token(
            logits,
            history,
            nh,
            temperature,
            top_k,
            top_p,
            repetition_penalty,
            seed_hi,
            seed_lo,
            step,
            x,
            p,
            order,
            seen,
            st,
        )
        history[nh] = tok
        nh = nh + 1
        if emit_token(tok, step) != 0:
            break
        if stop_at_eos != 0:
            hit = 0
            for s in range(n_stops):
                if tok == stops[s]:
                    hit = 1
            if hit != 0:
                break
        if step + 1 == max_new:
            break
        if pos >= n_ctx:
            break
        one[0] = tok
        rc = model_forward(one, 1, pos, logits)
        if rc != 0:
            return -i64(rc)
        pos = pos + 1
    return nh - n_prompt


def generate_interpreted(
    runner: Any, prompt_ids: list[int], max_new: int, options: Any, *, stop_at_eos: bool = True,
    stop_tokens: Any = None,
) -> list[int]:
    """Run :func:`generate_loop` as Python with the compiled model bound to ``model_forward``
    (``stop_tokens``: default the model's end-of-text id)."""
    v = runner.config.vocab_size
    prompt_ids = check_token_ids(prompt_ids, v, "prompt")
    if isinstance(max_new, bool) or not isinstance(max_new, int | np.integer) or max_new < 0:
        raise CatenError(f"max_new must be a non-negative int, got {max_new!r}")
    if stop_tokens is None:
        eos = runner.config.eos_token_id
        stop_tokens = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    stops = np.asarray(check_token_ids(list(stop_tokens), v, "stop_tokens"), dtype=np.int32)
    logits = np.zeros(v, dtype=np.float32)
    out: list[int] = []

    def forward(tokens: np.ndarray, n: int, pos: int, dst: np.ndarray) -> int:
        dst[:] = runner.forward(tokens[:n].astype(np.int64), pos)[0, -1]
        return 0

    def emit(token: int, step: int) -> int:
        out.append(int(token))
        return 0

    runner.reset()
    model_forward.set_host(forward)
    emit_token.set_host(emit)
    try:
        seed = options.seed % 2**64
        prompt = np.asarray(prompt_ids, dtype=np.int32)
        generate_loop(
            prompt,
            len(prompt),
            max_new,
            runner.n_ctx,
            stops if stops.size else np.full(1, -1, dtype=np.int32),
            int(stops.size),
            int(stop_at_eos),
            logits,
            np.zeros(len(prompt) + max_new + 1, dtype=np.int32),
            np.zeros(1, dtype=np.int32),
            float(options.temperature),
            options.top_k,
            float(options.top_p),
            float(options.repetition_penalty),
            seed >> 32,
            seed & 0xFFFFFFFF,
            np.zeros(v),
            np.zeros(v),
            np.zeros(v, dtype=np.int32),
            np.zeros(v, dtype=np.uint8),
            np.zeros(2, dtype=np.int64),
        )
    finally:
        model_forward.set_host(None)
        emit_token.set_host(None)
    return out
