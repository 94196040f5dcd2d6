"""What every cached decoder (GPT-2, Llama) shares: the one traced graph for prefill and decode.

``CachedDecoder.decoder_graph()`` traces ``forward(tokens, pos, last_only)`` ONCE with two symbols:
``seq`` (new tokens, the token input is (1, seq)) and ``pos`` (where they start in the KV cache).
Prefill is ``seq = len(prompt), pos = 0``; each decode step is ``seq = 1, pos = tokens so far``.
Cache state outputs are written in place. ``step`` / ``generate`` run that graph on the interpreter
(the compiled runners are in caten_lab.models).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.symbolic import Sym
from caten_lab.air.value import Value
from caten_lab.frontend.build import trace
from caten_lab.frontend.errors import ShapeError, fmt_shape
from caten_lab.frontend.realize import execute
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.nn.module import Module, buffer_of
from caten_lab.token_ids import check_token_ids


@dataclass
class DecoderGraph:
    """The one graph that serves prefill and decode, with the names a compiler/runner needs."""

    graph: Graph
    arrays: dict[str, np.ndarray]  # parameters, cache states and fixed tables, by input name
    tokens: str  # name of the token input, shape (1, seq), int64
    logits: Value  # value id of the logits output (graph.outputs[0]), shape (1, seq, vocab)
    states: list[str] = field(default_factory=list)  # cache buffer names (also graph outputs, in place)
    symbols: tuple[str, str] = ("seq", "pos")


def check_tokens(tokens: Tensor, model: str) -> None:
    """``tokens`` must be an int tensor of shape (1, seq)."""
    if tokens.ndim != 2 or not tokens.dtype.is_int:
        raise ShapeError(
            f"{model}: tokens must be an int tensor of shape (1, seq), got {tokens.dtype.value}"
            f"{fmt_shape(tokens.shape)}",
            where=user_source(),
        )


class CachedDecoder(Module):
    """A language model with in-place KV caches; subclasses define ``forward(tokens, pos, last_only)``
    and a ``config`` with ``vocab_size`` and ``cache_len``."""

    _decoder: DecoderGraph | None = None
    config: Any

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def cache_len(self) -> int:
        return int(self.config.cache_len)

    def decoder_graph(self, *, bind: bool = True, last_only: bool = False) -> DecoderGraph:
        """Trace ``forward`` once with symbols seq and pos; the caches are left untouched."""
        self.assign_names()
        seq, pos = Sym("seq"), Sym("pos")
        tokens = Tensor.placeholder((1, seq), DType.int64, name="tokens")
        caches = [t for _, t in self.named_states()]
        saved = [t.node for t in caches]
        logits = self.forward(tokens, pos, last_only)
        traced = trace([logits], bind=bind)
        for t, node in zip(caches, saved):  # tracing must not leave pending writes behind
            buf = buffer_of(t)
            if buf is not None:
                buf.pending = None
                buf.owner = t
            t.node = node
        return DecoderGraph(
            traced.graph, traced.arrays, "tokens", traced.graph.outputs[0], list(traced.states)
        )

    def step(self, token_ids: Any, pos: int) -> np.ndarray:
        """Run new tokens (shape (seq,) or (1, seq)) at position ``pos``; returns logits (1, seq, vocab)."""
        if self._decoder is None:
            self._decoder = self.decoder_graph()
        d = self._decoder
        ids = np.asarray(check_token_ids(token_ids, self.vocab_size, "step"), dtype=np.int64).reshape(1, -1)
        return execute(d.graph, {**d.arrays, d.tokens: ids}, {"pos": int(pos)})[0]

    def reset_cache(self) -> None:
        for _, t in self.named_states():
            buf = buffer_of(t)
            if buf is not None and buf.array is not None:
                buf.array[...] = 0

    def generate(self, prompt: list[int], max_new_tokens: int) -> list[int]:
        """Greedy decoding through the KV cache (one prefill step, then one token per step)."""
        self.reset_cache()
        out = check_token_ids(prompt, self.vocab_size, "prompt")
        logits = self.step(out, 0)
        for _ in range(max_new_tokens):
            nxt = int(np.argmax(logits[0, -1]))
            out.append(nxt)
            if len(out) >= self.cache_len:
                break
            logits = self.step([nxt], len(out) - 1)
        return out

