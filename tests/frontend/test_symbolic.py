"""Symbolic dims: shapes and slice bounds with Sym, bound and checked at run time."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.frontend import Sym, SymbolError, Tensor, arange, build_graph, execute, placeholder

from .helpers import arr, close


def test_symbolic_input_and_reduction() -> None:
    seq = Sym("seq")
    x = placeholder((2, seq), "float32", name="x")
    y = (x * 2).sum(1) + x.mean(1)
    g, arrays = build_graph([y])
    assert arrays == {}
    for n in (1, 3, 8):
        a = arr(2, n)
        close(execute(g, {"x": a}, {"seq": n})[0], (a * 2).sum(1) + a.mean(1), atol=1e-5)
        close(execute(g, {"x": a})[0], (a * 2).sum(1) + a.mean(1), atol=1e-5)  # seq inferred from the shape


def test_kv_cache_pattern_one_graph_for_every_position() -> None:
    seq, pos = Sym("seq"), Sym("pos")
    cache_np = np.zeros((1, 2, 10, 3), np.float32)
    cache = Tensor.from_numpy(cache_np, name="cache")
    k = placeholder((1, 2, seq, 3), "float32", name="k")
    cache[:, :, pos : pos + seq] = k
    window = cache[:, :, : pos + seq]
    out = window.sum(2)
    g, arrays = build_graph([out])
    assert arrays["cache"] is cache_np
    ref = np.zeros_like(cache_np)
    start = 0
    for n in (4, 1, 1, 2):
        kk = arr(1, 2, n, 3)
        res = execute(g, {**arrays, "k": kk}, {"pos": start})
        ref[:, :, start : start + n] = kk
        close(res[0], ref[:, :, : start + n].sum(2), atol=1e-5)
        close(cache_np, ref)  # the state output was written into the bound array in place
        start += n


def test_symbolic_arange_and_full() -> None:
    pos, seq = Sym("pos"), Sym("seq")
    r = arange(pos, pos + seq)
    f = Tensor.full((seq,), pos + 1)
    g, _ = build_graph([r, f])
    got = execute(g, {}, {"pos": 3, "seq": 4})
    close(got[0], np.arange(3, 7))
    close(got[1], np.full(4, 4, np.int64))


def test_symbolic_numpy_call() -> None:
    n = Sym("n")
    x = Tensor.full((n, 2), 1.5)
    close(x.sum(0).numpy(n=4), np.full(2, 6.0, np.float32))


def test_symbol_errors_name_the_symbol() -> None:
    seq = Sym("seq")
    x = placeholder((seq,), "float32", name="x")
    g, _ = build_graph([x * 2])
    with pytest.raises(SymbolError, match="'seq'"):
        execute(g, {"x": np.zeros(3, np.float32)}, {"seq": -1})
    with pytest.raises(SymbolError, match="'seq'.*bound to 4.*size 3"):
        execute(g, {"x": np.zeros(3, np.float32)}, {"seq": 4})
    h, _ = build_graph([Tensor.full((seq,), 1.0)])
    with pytest.raises(SymbolError, match="'seq'.*not bound"):
        execute(h, {}, {})


def test_out_of_range_window_is_a_symbol_error() -> None:
    pos = Sym("pos")
    x = Tensor.from_numpy(np.zeros(8, np.float32), name="x")
    g, arrays = build_graph([x[pos : pos + 4]])
    close(execute(g, arrays, {"pos": 4})[0], np.zeros(4, np.float32))
    with pytest.raises(SymbolError, match="pos"):
        execute(g, arrays, {"pos": 5})
    seq = Sym("seq")
    y = placeholder((seq,), "float32", name="y")
    h, _ = build_graph([y[:3] * 2])  # a concrete window over a symbolic axis
    close(execute(h, {"y": np.ones(4, np.float32)})[0], np.full(3, 2.0, np.float32))
    with pytest.raises(SymbolError, match="seq"):
        execute(h, {"y": np.ones(2, np.float32)})


def test_symbolic_shapes_simplify_without_graph_nodes() -> None:
    seq, pos = Sym("seq"), Sym("pos")
    x = placeholder((1, seq, 4), "float32", name="x")
    y = x.reshape(seq, 2, 2).reshape(1, seq, 4)
    assert y.shape == (1, seq, 4)
    assert (pos + seq - pos) == seq
    cat_shape = Tensor.cat([x, x], 1).shape
    assert cat_shape == (1, seq * 2, 4)
