"""What the compiled decoders (GPT-2, Llama) share: load, compile ONE program, generate tokens.

One compile with symbols ``seq`` (new tokens) and ``pos`` (start position) serves the prompt
(prefill) and every decode step. Weights and the KV cache are allocated once, and the cache is
updated in place by the compiled program; each step is a single call into the shared library.

Context limit: the KV cache holds ``n_ctx`` positions (the subclass's default, at most the model's
positions). A prompt longer than that is a CatenError; generation stops cleanly when the cache is
full, with ``stop_reason == "context_limit"`` (memory stays flat: nothing grows per token).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.air.graph import Graph
from caten_lab.config import config
from caten_lab.errors import CatenError
from caten_lab.models import prepared_weights, warm_start
from caten_lab.models.quant_graph import quantize_graph, raw_inputs
from caten_lab.models.quantize import FORMATS, convert_all_into, format_graph
from caten_lab.models.sampling import SamplingOptions, check_token_ids, sample
from caten_lab.nn.decoder import CachedDecoder
from caten_lab.nn.module import buffer_of


@dataclass
class GenerationStats:
    """Timings of the last generation (seconds, tokens per second)."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0
    stop_reason: str = ""
    step_times: list[float] = field(default_factory=list)

    @property
    def decode_tok_s(self) -> float:
        n = max(self.new_tokens - 1, 0)
        return n / self.decode_s if self.decode_s > 0 else 0.0


class PreparedMismatch(CatenError):
    """Weight arrays that do not fit the traced graph (names, shapes or dtypes)."""


def _config_from(config_type: type, d: dict[str, Any]) -> Any:
    try:
        return config_type(**d)
    except (TypeError, CatenError):
        raise PreparedMismatch(f"the cached config does not fit {config_type.__name__}") from None


Specs = dict[str, tuple[tuple[int, ...], np.dtype]]  # stored weight inputs: name -> (shape, dtype)


def _convert(
    views: dict[str, Any],
    conf: dict[str, Any],
    specs: Specs,
    cache_dir: Path,
    path: str | os.PathLike,
    ident: tuple | None,
    fmt: str,
) -> dict[str, np.ndarray]:
    """The stored weight arrays from a state dict; with ``ident``, converted straight into a new
    prepared-weights entry (no second copy in memory, no separate write pass) that is kept only if
    the source files did not change while they were read."""
    writer = (
        None if ident is None else prepared_weights.EntryWriter.create(cache_dir, ident, fmt, conf, specs)
    )
    if writer is None:  # no cache, or no entry can be mapped here: convert in memory
        out = {k: np.empty(shape, dt) for k, (shape, dt) in specs.items()}
        convert_all_into(views, out)
        if ident is not None and prepared_weights.source_identity(path) == ident:
            prepared_weights.store(cache_dir, ident, fmt, conf, out)
        return out
    try:
        convert_all_into(views, writer.arrays)
    except BaseException:
        writer.abort()
        raise
    out = writer.arrays  # shared with the file: the runner gets its copy-on-write mapping instead
    if prepared_weights.source_identity(path) != ident:
        writer.abort()
        return out  # the file is deleted: nobody else sees these pages
    mapped = writer.commit()
    return mapped if mapped is not None else {k: v.copy() for k, v in out.items()}


class DecoderRunner:
    """A compiled cached decoder: ``runner.generate(prompt_ids, 20)`` or ``for tok in runner.stream(...)``.

    Subclasses name the model: ``model_name``, ``config_type``, ``model_type`` (a
    :class:`~caten_lab.nn.decoder.CachedDecoder`), ``default_n_ctx``, and implement
    :meth:`max_positions`, :meth:`state_views`, :meth:`load_source` and :meth:`quantizable`.
    """

    model_name = "model"
    config_type: type = object
    model_type: Callable[[Any], CachedDecoder]
    default_n_ctx: int | None = None  # None: the model's whole position range

    @staticmethod
    def max_positions(config: Any) -> int:
        raise NotImplementedError

    @staticmethod
    def state_views(weights: Any) -> dict[str, Any]:
        """The source state dict under the model's parameter names and layout (views, no copies)."""
        raise NotImplementedError

    @staticmethod
    def load_source(path: str | os.PathLike, *, mapped: bool = False) -> Any:
        """The weights object (``.config``, ``.state_dict``) of a file or directory."""
        raise NotImplementedError

    @staticmethod
    def quantizable(graph: Graph) -> list[str]:
        """The weight inputs a weight format stores compressed (the 2-D matmul weights)."""
        return [n.attrs.name for n in graph.inputs() if len(n.shape) == 2 and n.attrs.name.endswith(".weight")]

    def __init__(
        self,
        weights: Any,
        *,
        weight_format: str = "fp32",
        backend: str | None = None,
        n_ctx: int | None = None,
        all_logits: bool = False,
        progress: bool = False,
        activations: str = "q8",
    ) -> None:
        def fill(specs: Specs) -> dict[str, np.ndarray]:
            out = {k: np.empty(shape, dt) for k, (shape, dt) in specs.items()}
            convert_all_into(self.state_views(weights), out)
            return out

        self._build(weights.config, fill, weight_format, backend, n_ctx, all_logits, progress,
                    raw=getattr(weights, "raw", None), activations=activations)

    def _build(
        self,
        c: Any,
        fill: Callable[[Specs], dict[str, np.ndarray]],
        weight_format: str,
        backend: str | None = None,
        n_ctx: int | None = None,
        all_logits: bool = False,
        progress: bool = False,
        raw: Mapping[str, tuple[str, np.ndarray]] | None = None,
        activations: str = "q8",
    ) -> None:
        """Trace the graph (the model's weights are never loaded), store the matmul weights in
        ``weight_format``, and bind ``fill(specs)``: the weight arrays in exactly the stored names,
        shapes and dtypes, converted from a state dict or mapped from the prepared-weights cache.
        ``raw`` weights (GGUF blocks) multiply 8-bit activations (``activations="q8"``, as llama.cpp) or
        float ones (``"f32"``): :func:`~caten_lab.models.quant_graph.quantize_graph`."""
        if weight_format not in FORMATS:
            raise CatenError(
                f"unknown weight format {weight_format!r}", hint=f"use one of {', '.join(FORMATS)}"
            )
        limit = self.max_positions(c)
        n_ctx = n_ctx or min(self.default_n_ctx or limit, limit)
        if not 0 < n_ctx <= limit:
            raise CatenError(f"n_ctx must be in 1..{limit} (the model's positions), got {n_ctx}")
        self.config = c
        self.n_ctx = n_ctx
        self.weight_format = weight_format
        self.all_logits = all_logits
        t0 = time.perf_counter()
        model = self.model_type(dataclasses.replace(c, n_ctx=n_ctx))
        for _, t in model.named_states():  # the KV caches start as zeros
            buf = buffer_of(t)
            if buf is not None:
                buf.materialize()
        dec = model.decoder_graph(bind=False, last_only=not all_logits)
        self.tokens_name = dec.tokens
        self.states = list(dec.states)
        raw = dict(raw or {})
        formatted = [n for n in self.quantizable(dec.graph) if n not in raw]
        self.graph = format_graph(dec.graph, formatted, weight_format)
        # weights kept as the file's blocks (GGUF): dequantized inside the kernels that read them
        self.graph = quantize_graph(self.graph, {n: t for n, (t, _) in raw.items()}, activations=activations)
        self.raw_types = {n: t for n, (t, _) in raw.items()}
        self.activations = activations
        bound = {n.attrs.name for n in self.graph.inputs()}
        raw_arrays = {k: v for n, (t, data) in raw.items() for k, v in raw_inputs(n, t, data).items() if k in bound}
        # bound at trace time: the KV caches and fixed tables (RoPE), computed from the config
        self.fixed = [k for k in dec.arrays if k not in self.states]
        skip = {self.tokens_name, *dec.arrays, *raw_arrays}
        specs = {
            n.attrs.name: (tuple(n.shape), np.dtype(n.dtype.np))
            for n in self.graph.inputs()
            if n.attrs.name not in skip
        }
        weights = fill(specs)
        got = {k: (tuple(v.shape), v.dtype) for k, v in weights.items()}
        if got != specs:
            raise PreparedMismatch(
                f"weight arrays do not fit the graph: {sorted(set(got) ^ set(specs))[:5]}"
            )
        self.arrays = {**dec.arrays, **weights, **raw_arrays}
        self.trace_s = time.perf_counter() - t0  # trace + (cache miss) transpose and convert
        self.load_s = 0.0
        self.weights_cache = "off"  # from_pretrained: "hit", "miss", "invalid" (a bad entry, rebuilt) or "warm"
        self._backend = backend
        self._progress = progress
        self._program: Any = None
        self.compile_s = 0.0
        self.stats = GenerationStats()
        self._pos = 0

    @staticmethod
    def load_gguf_blocks(path: Path) -> Any:
        """The weights object of a GGUF file whose 2-D weights stay in the file's encoding (``raw``)."""
        raise NotImplementedError

    @classmethod
    def from_pretrained(
        cls, path: str | os.PathLike, *, weight_format: str = "fp32", dequantize: bool = False, **kw: Any
    ) -> DecoderRunner:
        """Load a local Hugging Face directory (config.json + model.safetensors) or a GGUF file.

        A GGUF file's 2-D weights stay as the file stores them (F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K,
        Q6_K), bound as views of the mapped file: the quantized ones multiply 8-bit activations in integer
        block dot products (``activations="q8"``, as llama.cpp; ``"f32"``: dequantized inside the kernels).
        ``dequantize=True`` (the reference path) and HF directories load floats stored in
        ``weight_format``: those prepared weights (transposed, converted) are cached in
        ``config().cache_dir`` keyed by the source files' identity; a warm start maps them instead of
        reading the source (``runner.weights_cache`` says which happened; ``CATEN_WEIGHT_CACHE=0`` turns
        it off). A GGUF file opened again with the same options is a warm start (``weights_cache ==
        "warm"``): the runner rebuilt from its record, nothing traced (models/warm_start.py).
        """
        if weight_format not in FORMATS:
            raise CatenError(
                f"unknown weight format {weight_format!r}", hint=f"use one of {', '.join(FORMATS)}"
            )
        p = Path(path)
        if not dequantize and p.is_file() and p.suffix == ".gguf":
            t0 = time.perf_counter()
            options = {k: v for k, v in {"weight_format": weight_format, **kw}.items() if k != "progress"}
            wkey = warm_start.key(cls.__name__, p, options) if config().weight_cache and \
                kw.get("backend", config().backend) == "c" else None
            warm = warm_start.load(cls, p, wkey) if wkey is not None else None
            if warm is not None:
                warm.__dict__["_retrace"] = (p, options)
                return warm
            blocks = cls.load_gguf_blocks(p)
            load_s = time.perf_counter() - t0
            runner = cls(blocks, weight_format=weight_format, **kw)
            runner.load_s = load_s
            if wkey is not None:  # written once the program is compiled (compile())
                inputs = warm_start.describe(runner, p, cls.state_views(blocks))
                runner.__dict__["_warm_pending"] = None if inputs is None else (p, wkey, inputs)
            return runner
        cfg = config()
        t0 = time.perf_counter()
        ident = prepared_weights.source_identity(path) if cfg.weight_cache else None
        status = "off"
        if ident is not None:
            hit, status = prepared_weights.load(cfg.cache_dir, ident, weight_format)
            if hit is not None:
                runner = cls.__new__(cls)
                try:
                    runner._build(_config_from(cls.config_type, hit.config), lambda specs: hit.arrays, weight_format, **kw)
                except PreparedMismatch:
                    status = "invalid"
                else:
                    prepared_weights.STATS.record("hit")
                    runner.load_s, runner.weights_cache = time.perf_counter() - t0 - runner.trace_s, "hit"
                    return runner
            prepared_weights.STATS.record(status)
        weights = cls.load_source(path, mapped=True)  # converted right below, then released
        load_s = time.perf_counter() - t0
        runner = cls.__new__(cls)
        runner._build(
            weights.config,
            lambda specs: _convert(cls.state_views(weights), dataclasses.asdict(weights.config), specs,
                                   cfg.cache_dir, path, ident, weight_format),
            weight_format,
            **kw,
        )
        runner.load_s, runner.weights_cache = load_s, status
        return runner

    def weight_arrays(self) -> dict[str, np.ndarray]:
        """The weight inputs as bound (formatted), without the token input, the KV caches and the
        fixed tables."""
        skip = {self.tokens_name, *self.states, *self.fixed}
        return {k: v for k, v in self.arrays.items() if k not in skip}

    # ---- compile and step ----------------------------------------------------------------
    @property
    def program(self) -> Any:
        if self._program is None:
            self.compile()
        return self._program

    def compile(self, *, force: bool = False) -> Any:
        """Compile the one symbolic program (cached on disk by the runtime)."""
        from caten_lab.compiler import compile as compile_graph

        t0 = time.perf_counter()
        if self._progress:
            from tqdm.auto import tqdm

            with tqdm(total=1, desc=f"compiling {self.model_name}", leave=False) as bar:
                self._program = compile_graph(self.graph, backend=self._backend, force=force)
                bar.update(1)
        else:
            self._program = compile_graph(self.graph, backend=self._backend, force=force)
        self.compile_s = time.perf_counter() - t0
        pending = self.__dict__.pop("_warm_pending", None)
        if pending is not None:
            warm_start.store(self, *pending)
        return self._program

    @classmethod
    def warm(cls, record: dict[str, Any], arrays: dict[str, np.ndarray], program: Any, path: Path,
             load_s: float) -> DecoderRunner:
        """A runner rebuilt from a warm-start record (models/warm_start.py): the arrays bound, the program
        loaded; its graph is traced again only when something asks for it."""
        r = cls.__new__(cls)
        r.config = _config_from(cls.config_type, record["config"])
        r.n_ctx, r.weight_format = int(record["n_ctx"]), str(record["weight_format"])
        r.all_logits, r.activations = bool(record["all_logits"]), str(record["activations"])
        r.tokens_name, r.states, r.fixed = record["tokens_name"], list(record["states"]), list(record["fixed"])
        r.raw_types = dict(record["raw_types"])
        r.arrays = arrays
        r._graph = None
        r.trace_s, r.load_s, r.weights_cache = 0.0, load_s, "warm"
        r._backend, r._progress = "c", False
        r._program, r.compile_s = program, program.compile_s
        r.stats = GenerationStats()
        r._pos = 0
        return r

    @property
    def graph(self) -> Graph:
        """The traced graph (after a warm start: traced again now, on first use)."""
        g = self.__dict__.get("_graph")
        if g is None:
            p, options = self.__dict__["_retrace"]
            g = type(self)(self.load_gguf_blocks(p), **options).graph
            self.__dict__["_graph"] = g
        return g

    @graph.setter
    def graph(self, g: Graph) -> None:
        self.__dict__["_graph"] = g

    def reset(self) -> None:
        """Forget the cached context (zeroes the KV cache in place)."""
        for s in self.states:
            self.arrays[s][...] = 0
        self._pos = 0

    def forward(self, token_ids: Sequence[int] | np.ndarray, pos: int) -> np.ndarray:
        """Run new tokens at ``pos``; returns logits (1, n, vocab), or (1, 1, vocab) for the last one."""
        ids = np.asarray(check_token_ids(token_ids, self.config.vocab_size, "forward"), dtype=np.int64)
        ids = ids.reshape(1, -1)
        n = ids.shape[1]
        if n == 0:
            raise CatenError("forward: no tokens given")
        if pos + n > self.n_ctx:
            raise CatenError(
                f"context limit: positions {pos}..{pos + n - 1} do not fit the KV cache of {self.n_ctx}",
                hint="shorten the prompt, reset(), or build the runner with a larger n_ctx (<= the model's positions)",
            )
        self.arrays[self.tokens_name] = ids
        out = self.program(self.arrays, {"seq": n, "pos": pos})
        return out[0]

    # ---- generation -----------------------------------------------------------------------
    def stream(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        options: SamplingOptions | None = None,
        *,
        stop_tokens: Iterable[int] = (),
        progress: bool = False,
    ) -> Iterator[int]:
        """Yield new token ids one by one; stops at a stop token, the limit, or a full context."""
        opts = options or SamplingOptions()
        prompt = check_token_ids(prompt, self.config.vocab_size, "prompt")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 0:
            raise CatenError(f"max_new_tokens must be a non-negative int, got {max_new_tokens!r}")
        if not prompt:
            raise CatenError(
                "generate: the prompt is empty", hint="pass at least one token id (e.g. the BOS token)"
            )
        if len(prompt) > self.n_ctx:
            raise CatenError(
                f"context limit: the prompt has {len(prompt)} tokens, the context holds {self.n_ctx}"
            )
        stops = set(check_token_ids(stop_tokens, self.config.vocab_size, "stop_tokens"))
        self.reset()
        st = self.stats = GenerationStats(prompt_tokens=len(prompt))
        history = list(prompt)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=max_new_tokens, desc="generating", leave=False)
        t0 = time.perf_counter()
        logits = self.forward(prompt, 0)
        pos = len(prompt)
        try:
            for step in range(max_new_tokens):
                tok = sample(logits[0, -1], history, opts, step)
                now = time.perf_counter()
                if step == 0:
                    st.ttft_s = now - t0
                    t_dec = now
                st.new_tokens += 1
                history.append(tok)
                if bar is not None:
                    bar.update(1)
                yield tok
                if tok in stops:
                    st.stop_reason = "stop_token"
                    return
                if step + 1 == max_new_tokens:
                    st.stop_reason = "max_new_tokens"
                    return
                if pos >= self.n_ctx:
                    st.stop_reason = "context_limit"
                    return
                s0 = time.perf_counter()
                logits = self.forward([tok], pos)
                st.step_times.append(time.perf_counter() - s0)
                pos += 1
                st.decode_s = time.perf_counter() - t_dec
            if max_new_tokens == 0:
                st.stop_reason = "max_new_tokens"
        finally:
            if bar is not None:
                bar.close()

    def generate(
        self,
        prompt: Sequence[int],
        max_new_tokens: int,
        options: SamplingOptions | None = None,
        *,
        stop_tokens: Iterable[int] = (),
        progress: bool = False,
    ) -> list[int]:
        """Prompt + generated token ids (see :meth:`stream`)."""
        ids = check_token_ids(prompt, self.config.vocab_size, "prompt")
        return ids + list(self.stream(ids, max_new_tokens, options, stop_tokens=stop_tokens, progress=progress))
