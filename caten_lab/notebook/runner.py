"""``GeneratorWidget``, the text-generation widget (e.g. over the compiled GPT-2 model runner):
prompt box, sampling options, Generate/Stop, tokens streamed as produced.

It is written against a small protocol so it works with any generator (the compiled GPT-2 workflow,
a PyTorch reference, a fake in tests)::

    generate(prompt: str, *, max_new_tokens: int, temperature: float, top_k: int, top_p: float,
             seed: int) -> Iterator[tuple[int, str, list[tuple[str, float]] | None]]

Each item is (token id, token text, optional top-k (text, probability) pairs). Generation runs in a
background thread so the kernel stays free to receive the Stop click; each token is pushed to the
browser as a custom message (no full-state resync), and the counters are traitlets.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import anywidget
import traitlets

STATIC = Path(__file__).parent / "static"

Token = tuple[int, str, "list[tuple[str, float]] | None"]
Generator = Callable[..., Iterator[Token]]


class GeneratorWidget(anywidget.AnyWidget):
    """``GeneratorWidget(generate, prompt="Hello")``: a text-generation UI over any token generator."""

    _esm = STATIC / "runner.js"
    _css = STATIC / "runner.css"

    prompt = traitlets.Unicode("").tag(sync=True)
    max_new_tokens = traitlets.Int(32).tag(sync=True)
    temperature = traitlets.Float(0.8).tag(sync=True)
    top_k = traitlets.Int(40).tag(sync=True)
    top_p = traitlets.Float(1.0).tag(sync=True)
    seed = traitlets.Int(0).tag(sync=True)
    show_probs = traitlets.Bool(False).tag(sync=True)
    running = traitlets.Bool(False).tag(sync=True)
    generated = traitlets.Unicode("").tag(sync=True)
    n_tokens = traitlets.Int(0).tag(sync=True)
    tokens_per_s = traitlets.Float(0.0).tag(sync=True)  # decode speed: tokens after the first / time since it
    first_token_s = traitlets.Float(0.0).tag(sync=True)  # time to the first token (prefill, lazy compile)
    error = traitlets.Unicode("").tag(sync=True)

    def __init__(self, generate: Generator, **kwargs: Any) -> None:
        if not callable(generate):
            raise TypeError(
                "GeneratorWidget needs a callable generate(prompt, **options) -> iterator of "
                "(token_id, text, probs)"
            )
        super().__init__(**kwargs)
        self._generate = generate
        self._accepts = _accepted_options(generate)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.tokens: list[Token] = []
        self.on_msg(self._on_msg)

    # ---- browser -> kernel ---------------------------------------------------------------
    def _on_msg(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "generate":
            self.start()
        elif kind == "stop":
            self.stop()

    # ---- control -------------------------------------------------------------------------
    def start(self) -> None:
        """Generate in a background thread (ignored while a generation is running)."""
        if self.running:
            return
        self._stop.clear()
        self.running = True
        self._thread = threading.Thread(target=self._loop, name="caten-gpt2-runner", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the generation to stop after the current token."""
        self._stop.set()

    def wait(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def run(self) -> str:
        """Generate synchronously (scripts, tests); returns the generated text."""
        self._stop.clear()
        self.running = True
        self._loop()
        return self.generated

    def _options(self) -> dict[str, Any]:
        opts = {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "seed": self.seed,
        }
        return opts if self._accepts is None else {k: v for k, v in opts.items() if k in self._accepts}

    def _loop(self) -> None:
        self.tokens = []
        self.generated = ""
        self.n_tokens = 0
        self.tokens_per_s = 0.0
        self.first_token_s = 0.0
        self.error = ""
        self.send({"type": "reset"})
        text: list[str] = []
        t0 = t_first = time.perf_counter()
        last_push = 0.0
        try:
            for item in self._generate(self.prompt, **self._options()):
                tok_id, tok_text, probs = _unpack(item)
                self.tokens.append((tok_id, tok_text, probs))
                text.append(tok_text)
                self.send(
                    {
                        "type": "token",
                        "id": tok_id,
                        "text": tok_text,
                        "probs": [[str(t), float(p)] for t, p in probs] if probs else None,
                    }
                )
                now = time.perf_counter()
                self.n_tokens = len(self.tokens)
                if self.n_tokens == 1:
                    t_first = now
                    self.first_token_s = now - t0
                elif now - last_push > 0.1:  # throttle the counters, not the tokens
                    self.tokens_per_s = (self.n_tokens - 1) / max(now - t_first, 1e-9)
                    last_push = now
                if self._stop.is_set() or self.n_tokens >= self.max_new_tokens:
                    break
        except Exception as exc:  # shown in the widget; the kernel keeps running
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            end = time.perf_counter()
            self.generated = "".join(text)
            self.n_tokens = len(self.tokens)
            if self.n_tokens > 1:
                self.tokens_per_s = (self.n_tokens - 1) / max(end - t_first, 1e-9)
            self.running = False


def _unpack(item: Any) -> Token:
    if isinstance(item, tuple) and len(item) == 3:
        return int(item[0]), str(item[1]), item[2]
    if isinstance(item, tuple) and len(item) == 2:
        return int(item[0]), str(item[1]), None
    raise TypeError(f"a generator must yield (token_id, text, probs) tuples, got {item!r}")


def _accepted_options(fn: Callable[..., Any]) -> set[str] | None:
    """Keyword options the generator takes (None: it takes **kwargs, so pass everything)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {p.name for p in params}


def logits_generator(
    step: Callable[[list[int], int], Any],
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    *,
    top_probs: int = 5,
    reset: Callable[[], None] | None = None,
    stop_tokens: Iterable[int] = (),
    max_context: int | None = None,
) -> Generator:
    """Turn a model's step function into the runner's generator protocol.

    ``step(token_ids, pos) -> logits`` of shape (..., seq, vocab) (e.g. ``GPT2.step`` or
    ``caten_lab.models.gpt2.GPT2Runner.forward``); ``encode``/``decode`` are the tokenizer. Sampling
    uses caten_lab.models.sampling (temperature 0 is greedy), so a run is reproducible from its seed.
    ``reset`` clears the KV cache; generation stops at a stop token or when ``max_context`` tokens
    (default: the step's owner's ``n_ctx``, when it has one) fill the context.
    """
    import numpy as np

    from caten_lab.models.sampling import SamplingOptions, sample

    stops = {int(t) for t in stop_tokens}
    limit = (
        max_context if max_context is not None else getattr(getattr(step, "__self__", None), "n_ctx", None)
    )

    def generate(
        prompt: str,
        *,
        max_new_tokens: int = 32,
        temperature: float = 0.8,
        top_k: int = 40,
        top_p: float = 1.0,
        seed: int = 0,
    ) -> Iterator[Token]:
        if reset is not None:
            reset()
        opts = SamplingOptions(
            temperature=max(0.0, temperature),
            top_k=max(0, top_k),
            top_p=min(1.0, top_p) if top_p > 0 else 1.0,
            seed=seed,
        )
        ids = list(encode(prompt))
        if not ids:
            raise ValueError("the prompt encodes to no tokens")
        if limit is not None and len(ids) > limit:
            raise ValueError(f"the prompt has {len(ids)} tokens; the context holds {limit}")
        logits = np.asarray(step(ids, 0))
        pending: list[int] = []  # byte-level BPE: a character may span tokens; emit text once it is whole
        for i in range(max_new_tokens):
            row = logits.reshape(-1, logits.shape[-1])[-1].astype(np.float64)
            nxt = sample(row, ids, opts, i)
            probs = None
            if top_probs:
                p = np.exp(row - row.max())
                p /= p.sum()
                top = np.argsort(-p)[:top_probs]
                probs = [(decode([int(t)]), float(p[t])) for t in top]
            ids.append(nxt)
            pending.append(nxt)
            text = decode(pending)
            if text.endswith("\ufffd") and len(pending) < 4:
                text = ""
            else:
                pending = []
            yield nxt, text, probs
            if nxt in stops or (limit is not None and len(ids) >= limit):
                return
            logits = np.asarray(step([nxt], len(ids) - 1))

    return generate
