"""Random tensor programs built directly in AIR, for differential testing of the C backend.

A program draws its choices from hypothesis (so failures shrink). Several independent programs are
packed into one graph (:func:`program_batch`), so one C compile checks many programs: fusion sees
each of them exactly as it would alone, because nothing is shared between them.

Covered: elementwise chains (float32/float64/float16/int32/int64/bool), broadcasting views,
permutes, flips (negative strides), slices with offsets, pads (masked views), contiguous reshapes
of computed values, reductions over any axes, matmul-shaped broadcast-mul + reduce, stores into
zero buffers, stores whose source reads the destination (x[1:] = x[:-1], x[:] = x[::-1]),
index/const leaves, casts, and a symbolic dimension bound at run time. With ``hostile`` the inputs
hold NaN/+-inf/-0.0 and the integer extremes; with ``empty`` shapes may have size-0 axes; with
``derived_stores`` a program stores into a value computed from an input (``store(x * 1, ...)``).
"""

from __future__ import annotations

import numpy as np
from frontend_progs import hostile as hostile_array
from hypothesis import strategies as st

from caten_lab.air import Graph, Sym, dtypes, is_value
from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import evaluate

FLOATS = (dtypes.float32, dtypes.float64, dtypes.float16)
INTS = (dtypes.int32, dtypes.int64)


class Builder:
    """Grow one random program inside a shared graph."""

    def __init__(self, draw, g: Graph, prefix: str, inputs: dict, symbols: dict, rng: np.random.Generator,
                 symbolic: bool, *, hostile: bool = False, empty: bool = False,
                 derived_stores: bool = False) -> None:  # noqa: ANN001
        self.draw = draw
        self.g = g
        self.prefix = prefix
        self.inputs = inputs
        self.symbols = symbols
        self.rng = rng
        self.pool: list[str] = []
        self.symbolic = symbolic
        self.n_inputs = 0
        self.hostile = hostile
        self.empty = empty
        self.derived_stores = derived_stores

    # ---- helpers -------------------------------------------------------------------------
    def pick(self, seq):  # noqa: ANN001, ANN201
        return self.draw(st.sampled_from(list(seq)))

    def integer(self, lo: int, hi: int) -> int:
        return self.draw(st.integers(lo, hi))

    def shape_of(self, v: str) -> tuple:
        return self.g.producer_of(v).shape

    def dtype_of(self, v: str) -> DType:
        return self.g.producer_of(v).dtype

    def concrete(self, shape: tuple) -> tuple:
        return tuple(evaluate(d, self.symbols) for d in shape)

    def new_input(self, shape: tuple, dtype: DType) -> str:
        name = f"{self.prefix}in{self.n_inputs}"
        self.n_inputs += 1
        cs = self.concrete(shape)
        if self.hostile:  # float extremes stay out: a sum's overflow would depend on the order
            arr = hostile_array(self.rng, dtype.value, cs, extremes=not dtype.is_float)
        elif dtype.is_float:
            arr = self.rng.uniform(-2, 2, size=cs).astype(dtype.np)
        elif dtype == dtypes.bool:
            arr = self.rng.integers(0, 2, size=cs).astype(bool)
        else:
            arr = self.rng.integers(-6, 7, size=cs).astype(dtype.np)
        self.inputs[name] = arr
        v = self.g.insert("allocate", [], shape=shape, dtype=dtype, name=name)
        self.pool.append(v)
        return v

    def random_shape(self) -> tuple:
        rank = self.integer(1, 3)
        shape = [self.integer(0 if self.empty else 1, 5) for _ in range(rank)]
        if self.symbolic:
            shape[self.integer(0, rank - 1)] = Sym("n")
        return tuple(shape)

    def same_shape_operand(self, v: str) -> str:
        shape, dt = self.shape_of(v), self.dtype_of(v)
        cands = [u for u in self.pool if self.shape_of(u) == shape and self.dtype_of(u) == dt and u != v]
        if cands and self.integer(0, 3) > 0:
            return self.pick(cands)
        if self.integer(0, 1):
            return self.broadcast_to(shape, dt)
        return self.new_input(shape, dt)

    def broadcast_to(self, shape: tuple, dt: DType) -> str:
        """A view broadcasting a fresh (or pooled) smaller value to ``shape``."""
        small = tuple(1 if self.integer(0, 1) else d for d in shape)
        cands = [u for u in self.pool if self.shape_of(u) == small and self.dtype_of(u) == dt]
        src = self.pick(cands) if cands and self.integer(0, 1) else self.new_input(small, dt)
        cs = contiguous_strides(small)
        strides = tuple(0 if s == 1 and d != 1 else c for s, d, c in zip(small, shape, cs))
        return self.g.insert("view", [src], shape=shape, strides=strides)

    # ---- steps ---------------------------------------------------------------------------
    def step(self) -> None:
        v = self.pick(self.pool[-4:])
        dt = self.dtype_of(v)
        kinds = ["unary", "binary", "binary", "reduce", "view", "cast", "where"]
        if not self.symbolic:
            kinds += ["matmul", "store", "store_overlap", "pad", "reshape", "store_derived"]
        kind = self.pick(kinds)
        getattr(self, f"op_{kind}")(v, dt)

    def op_unary(self, v: str, dt: DType) -> None:
        if dt == dtypes.bool:
            ops = ["not"]
        elif dt.is_float:
            ops = ["neg", "recip", "sqrt", "log2"] + ([] if dt == dtypes.float16 else ["exp2"])
            if self.g.producer_of(v).op == "allocate":
                ops.append("sin")
        else:
            ops = ["neg", "not"]
        self.pool.append(self.g.insert(self.pick(ops), [v]))

    def op_binary(self, v: str, dt: DType) -> None:
        if dt == dtypes.bool:
            ops = ["and", "or", "xor", "ne", "add", "mul"]
        elif dt.is_float:
            ops = ["add", "mul", "max", "lt", "ne", "add"]
        else:
            ops = ["add", "mul", "max", "lt", "ne", "idiv", "mod", "and", "or", "xor"]
        op = self.pick(ops)
        if self.integer(0, 4) == 0:
            lit = self.pick([0.5, -1.5, 2.0]) if dt.is_float else (self.pick([True, False]) if dt == dtypes.bool
                                                                      else self.pick([0, 2, -3]))
            reads = [v, lit] if self.integer(0, 1) else [lit, v]
        else:
            reads = [v, self.same_shape_operand(v)]
        if op in ("idiv", "mod"):  # a zero divisor raises (tests/compiler/test_entry_checks.py): keep it nonzero
            d = reads[1]
            if is_value(d):
                reads[1] = self.g.insert("where", [self.g.insert("ne", [d, 0]), d, 1])
            elif d == 0:
                reads[1] = 2
        self.pool.append(self.g.insert(op, reads))

    def op_where(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        cond_src = self.new_input(shape, dtypes.float32)
        cond = self.g.insert("lt", [cond_src, 0.0])
        other = self.same_shape_operand(v)
        self.pool.append(self.g.insert("where", [cond, v, other]))

    def op_cast(self, v: str, dt: DType) -> None:
        if dt.is_float:
            targets = [d for d in FLOATS if d != dt] + [dtypes.bool]
        else:
            targets = [dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64]
            targets = [d for d in targets if d != dt]
        self.pool.append(self.g.insert("cast", [v], dtype=self.pick(targets)))

    def op_reduce(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        axes = tuple(a for a in range(len(shape)) if self.integer(0, 1)) or (len(shape) - 1,)
        op = self.pick(["add", "max"]) if dt != dtypes.bool else "max"
        if dt == dtypes.float16:
            op = "max"
        r = self.g.insert("reduce", [v], op=op, axes=axes)
        if self.integer(0, 1):  # broadcast back (softmax / layernorm shape)
            cs = contiguous_strides(self.shape_of(r))
            strides = tuple(0 if a in axes else c for a, c in enumerate(cs))
            b = self.g.insert("view", [r], shape=shape, strides=strides)
            self.pool.append(self.g.insert(self.pick(["add", "mul", "max"]) if dt != dtypes.bool else "or", [v, b]))
        else:
            self.pool.append(r)

    def op_view(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        cs = contiguous_strides(shape)
        kind = self.pick(["permute", "flip", "slice", "broadcast"])
        rank = len(shape)
        if kind == "permute" and rank > 1:
            perm = list(self.draw(st.permutations(list(range(rank)))))
            out = self.g.insert("view", [v], shape=tuple(shape[p] for p in perm), strides=tuple(cs[p] for p in perm))
        elif kind == "flip":
            ax = self.integer(0, rank - 1)
            strides = tuple(-c if a == ax else c for a, c in enumerate(cs))
            off = (shape[ax] - 1) * cs[ax]
            out = self.g.insert("view", [v], shape=shape, strides=strides, offset=off)
        elif kind == "slice" and not self.symbolic and 0 not in shape:
            ax = self.integer(0, rank - 1)
            n = shape[ax]
            lo = self.integer(0, n - 1)
            hi = self.integer(lo + 1, n)
            step = self.integer(1, 2)
            m = (hi - lo + step - 1) // step
            new = tuple(m if a == ax else d for a, d in enumerate(shape))
            strides = tuple(c * step if a == ax else c for a, c in enumerate(cs))
            out = self.g.insert("view", [v], shape=new, strides=strides, offset=lo * cs[ax])
        else:  # broadcast: insert a new leading axis of size 2..3
            k = self.integer(2, 3)
            out = self.g.insert("view", [v], shape=(k, *shape), strides=(0, *cs))
        self.pool.append(out)

    def op_pad(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        cs = contiguous_strides(shape)
        ax = self.integer(0, len(shape) - 1)
        lo, hi = self.integer(0, 2), self.integer(0, 2)
        new = tuple(d + lo + hi if a == ax else d for a, d in enumerate(shape))
        mask = tuple((lo, lo + d) if a == ax else (0, d) for a, d in enumerate(shape))
        out = self.g.insert("view", [v], shape=new, strides=cs, offset=-lo * cs[ax], mask=mask)
        self.pool.append(out)

    def op_reshape(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        n = int(np.prod(shape))
        divs = [d for d in range(1, n + 1) if n % d == 0]
        a = self.pick(divs) if divs else 0
        new = (a, n // a) if self.integer(0, 1) and a else (n,)
        self.pool.append(self.g.insert("view", [v], shape=new, strides=contiguous_strides(new)))

    def op_matmul(self, v: str, dt: DType) -> None:
        if dt == dtypes.bool or dt == dtypes.float16:
            return
        shape = self.shape_of(v)
        if len(shape) == 1:
            v = self.g.insert("view", [v], shape=(1, shape[0]), strides=(0, 1))
            shape = (1, shape[0])
        if len(shape) != 2:
            v = self.g.insert("view", [v], shape=(shape[0], int(np.prod(shape[1:]))),
                              strides=contiguous_strides((shape[0], int(np.prod(shape[1:])))))
            shape = self.shape_of(v)
        m, k = shape
        n = self.pick([3, 5, 70])
        w = self.new_input((k, n), dt)
        a3 = self.g.insert("view", [v], shape=(m, n, k), strides=(k, 0, 1))
        b3 = self.g.insert("view", [w], shape=(m, n, k), strides=(0, 1, n))
        r = self.g.insert("reduce", [self.g.insert("mul", [a3, b3])], op="add", axes=(2,))
        out = self.g.insert("view", [r], shape=(m, n), strides=(n, 1))
        if self.integer(0, 1):
            bias = self.broadcast_to((m, n), dt)
            out = self.g.insert("add", [out, bias])
            if dt.is_float:
                out = self.g.insert("max", [out, 0.0])
        self.pool.append(out)

    def op_store(self, v: str, dt: DType) -> None:
        shape = self.shape_of(v)
        big = tuple(d + self.integer(0, 2) for d in shape)
        offs = tuple(self.integer(0, b - d) for b, d in zip(big, shape))
        cs = contiguous_strides(big)
        dst = self.g.insert("allocate", [], shape=big, dtype=dt)
        off = sum(o * c for o, c in zip(offs, cs))
        st_ = self.g.insert("store", [dst, v], shape=shape, strides=cs, offset=off)
        self.pool.append(st_)

    def op_store_overlap(self, v: str, dt: DType) -> None:
        """x[w] = f(x): the source reads the destination elsewhere (reversed, or shifted by one row)."""
        shape = self.shape_of(v)
        if not shape or shape[0] < 2:
            return self.op_store(v, dt)
        cs = contiguous_strides(shape)
        if self.integer(0, 1):  # x[:] = x[::-1]
            window, off = shape, 0
            src = self.g.insert("view", [v], shape=shape, strides=(-cs[0], *cs[1:]), offset=(shape[0] - 1) * cs[0])
        else:  # x[1:] = x[:-1]
            window, off = (shape[0] - 1, *shape[1:]), cs[0]
            src = self.g.insert("view", [v], shape=window, strides=cs)
        if dt != dtypes.bool and self.integer(0, 1):  # mix in the destination window itself
            src = self.g.insert("add", [src, self.g.insert("view", [v], shape=window, strides=cs, offset=off)])
        self.pool.append(self.g.insert("store", [v, src], shape=window, strides=cs, offset=off))

    def op_store_derived(self, v: str, dt: DType) -> None:
        """y = f(x) for an input x, then y[window] = v: the store must not write into x's array.

        Without ``derived_stores`` f is never an identity the compiler simplifies away (x * 2, -x);
        with it f is one (x * 1, x + 0, x & true, max(x, x)), which exposes a store onto the input.
        """
        shape = self.shape_of(v)
        src = self.new_input(shape, dt)
        if self.derived_stores:
            lit = True if dt == dtypes.bool else (1.0 if dt.is_float else 1)
            op, reads = self.pick([("mul", [src, lit]), ("max", [src, src])] +
                                  ([("add", [src, 0 if not dt.is_float else 0.0])] if dt != dtypes.bool else []))
        else:
            op, reads = ("not", [src]) if dt == dtypes.bool else ("mul", [src, 2.0 if dt.is_float else 2])
        y = self.g.insert(op, reads)
        if not shape or shape[0] == 0:
            self.pool.append(y)
            return
        cs = contiguous_strides(shape)
        row = self.integer(0, shape[0] - 1)
        window = (1, *shape[1:])
        val = self.g.insert("view", [v], shape=window, strides=cs, offset=row * cs[0]) if self.integer(0, 1) \
            else (True if dt == dtypes.bool else (-0.0 if dt.is_float else -1))
        self.pool.append(self.g.insert("store", [y, val], shape=window, strides=cs, offset=row * cs[0]))

    def leaf(self) -> None:
        shape = self.random_shape()
        kind = self.pick(["input", "input", "input", "const", "index"])
        dt = self.pick([dtypes.float32, dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.float16,
                        dtypes.bool])
        if kind == "const" and dt != dtypes.bool:
            val = self.pick([1.5, -0.25]) if dt.is_float else self.pick([3, -2])
            self.pool.append(self.g.insert("const", [], value=val, shape=shape, dtype=dt))
        elif kind == "index":
            self.pool.append(self.g.insert("index", [], shape=shape, axis=self.integer(0, len(shape) - 1),
                                           dtype=self.pick([dtypes.int32, dtypes.float32])))
        else:
            self.new_input(shape, dt)


@st.composite
def program_batch(draw, n_programs: int = 6, max_steps: int = 6, symbolic_share: int = 3, *,  # noqa: ANN001, ANN201
                  hostile: bool = False, empty: bool = False, derived_stores: bool = False):
    """(graph, inputs, symbols): ``n_programs`` independent random programs in one graph."""
    g = Graph()
    inputs: dict[str, np.ndarray] = {}
    n_sym = draw(st.integers(1, 6))
    symbols = {"n": n_sym}
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    used_sym = False
    for p in range(n_programs):
        symbolic = draw(st.integers(0, symbolic_share)) == 0
        used_sym |= symbolic
        b = Builder(draw, g, f"p{p}_", inputs, symbols, rng, symbolic, hostile=hostile, empty=empty and not symbolic,
                    derived_stores=derived_stores)
        b.leaf()
        for _ in range(draw(st.integers(1, max_steps))):
            b.step()
        outs = {b.pool[-1], draw(st.sampled_from(b.pool))}
        for o in sorted(outs):
            if g.producer_of(o).op != "allocate" or g.producer_of(o).attrs.name is None:
                g.mark_output(o)
    if not g.outputs:
        g.mark_output(g.insert("const", [], value=1.0, shape=(1,), dtype=dtypes.float32))
    return g, inputs, symbols if used_sym else {}


def _tol(dt: np.dtype, floor: np.dtype | None) -> dict:
    a, b = tolerance(dt), tolerance(floor) if floor is not None else {"rtol": 0, "atol": 0}
    return {"rtol": max(a["rtol"], b["rtol"]), "atol": max(a["atol"], b["atol"])}


def slow_scale() -> float:
    """Multiplier for @slow tests: CATEN_SLOW_SCALE (default 1 = the reduced size CI runs)."""
    import os

    try:
        return max(0.1, float(os.environ.get("CATEN_SLOW_SCALE", "1")))
    except ValueError:
        return 1.0


def tolerance(dt: np.dtype) -> dict:
    if dt == np.float16:
        return {"rtol": 2e-2, "atol": 2e-2}
    if dt == np.float32:
        return {"rtol": 1e-3, "atol": 1e-4}
    if dt == np.float64:
        return {"rtol": 1e-9, "atol": 1e-12}
    return {"rtol": 0, "atol": 0}


def graph_float_floor(g: Graph) -> np.dtype | None:
    """The least precise float type computed anywhere in ``g`` (errors upstream flow into every output)."""
    order = [np.float16, np.float32, np.float64]
    seen = {n.dtype.np for n in g if n.dtype.is_float}
    for dt in order:
        if np.dtype(dt) in seen:
            return np.dtype(dt)
    return None


def assert_same(expected: list[np.ndarray], got: list[np.ndarray], context: str = "",
                floor: np.dtype | None = None) -> None:
    assert len(expected) == len(got)
    for i, (e, r) in enumerate(zip(expected, got)):
        e = np.asarray(e)
        r = np.asarray(r)
        assert e.shape == r.shape, f"output {i}: shape {r.shape} != {e.shape}\n{context}"
        assert e.dtype == r.dtype, f"output {i}: dtype {r.dtype} != {e.dtype}\n{context}"
        if e.dtype.kind == "f":
            np.testing.assert_allclose(r.astype(np.float64), e.astype(np.float64), equal_nan=True,
                                       err_msg=f"output {i}\n{context}", **_tol(e.dtype, floor))
        else:
            np.testing.assert_array_equal(r, e, err_msg=f"output {i}\n{context}")


def row_max_graph() -> Graph:
    """x + max(x, axis=1) over a (4, 8) float32 input ``x``: a small two-kernel program (cache tests)."""
    g = Graph()
    x = g.insert("allocate", [], shape=(4, 8), dtype="float32", name="x")
    m = g.insert("reduce", [x], op="max", axes=(1,))
    g.mark_output(g.insert("add", [x, g.insert("view", [m], shape=(4, 8), strides=(1, 0))]))
    return g
