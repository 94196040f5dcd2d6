"""View folding: random view chains keep their values, and the canonical cases collapse as claimed."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from passes_graphgen import assert_same_results, run

from caten_lab.air import Graph, Sym, dtypes, interpret
from caten_lab.air.shapes import contiguous_strides
from caten_lab.passes import PassContext, PassManager, fold_views_pass, graph_passes
from caten_lab.passes.fold_views import compose


def _fold(g: Graph) -> Graph:
    out = fold_views_pass().run(g, PassContext())
    out.verify()
    return out


def _views(g: Graph) -> int:
    return sum(n.op == "view" for n in g.nodes)


@st.composite
def view_chains(draw):  # noqa: ANN001, ANN201
    """A chain of random views (permute, reshape, slice, flip, pad, expand) over one input."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.int32]))
    g = Graph()
    v = g.insert("allocate", [], shape=shape, dtype=dtype, name="x")
    data = np.arange(1, int(np.prod(shape)) + 1).reshape(shape).astype(dtype.np)
    cur = shape
    for _ in range(draw(st.integers(1, 6))):
        c = contiguous_strides(cur)
        kind = draw(st.sampled_from(["permute", "reshape", "slice", "flip", "pad", "expand", "op"]))
        if kind == "permute":
            perm = draw(st.permutations(range(len(cur))))
            new, strides, offset, mask = tuple(cur[p] for p in perm), tuple(c[p] for p in perm), 0, None
        elif kind == "reshape":
            n = int(np.prod(cur))
            choices = [(n,), (1, n)] + [(d, n // d) for d in range(2, n) if n % d == 0]
            new = draw(st.sampled_from(choices))
            strides, offset, mask = contiguous_strides(new), 0, None
        elif kind == "slice":
            ax = draw(st.integers(0, len(cur) - 1))
            lo = draw(st.integers(0, cur[ax] - 1))
            step = draw(st.integers(1, 2))
            size = -(-(cur[ax] - lo) // step)
            new = tuple(size if i == ax else d for i, d in enumerate(cur))
            strides = tuple(s * step if i == ax else s for i, s in enumerate(c))
            offset, mask = lo * c[ax], None
        elif kind == "flip":
            ax = draw(st.integers(0, len(cur) - 1))
            new = cur
            strides = tuple(-s if i == ax else s for i, s in enumerate(c))
            offset, mask = (cur[ax] - 1) * c[ax], None
        elif kind == "pad":
            ax = draw(st.integers(0, len(cur) - 1))
            left, right = draw(st.integers(0, 2)), draw(st.integers(0, 2))
            new = tuple(d + left + right if i == ax else d for i, d in enumerate(cur))
            strides, offset = c, -left * c[ax]
            mask = tuple((left, left + d) if i == ax else (0, n) for i, (d, n) in enumerate(zip(cur, new)))
        elif kind == "expand":
            ax = draw(st.integers(0, len(cur)))
            k = draw(st.integers(1, 3))
            new = cur[:ax] + (k,) + cur[ax:]
            strides, offset, mask = c[:ax] + (0,) + c[ax:], 0, None
        else:
            v = g.insert("neg", [v])
            continue
        v = g.insert("view", [v], shape=new, strides=strides, offset=offset, mask=mask)
        cur = new
    g.mark_output(v)
    return g, {"x": data}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chain=view_chains())
def test_random_view_chains_fold_exactly(chain):
    g, inputs = chain
    expected = run(g, inputs)
    n_views = _views(g)
    out = _fold(g)
    assert _views(out) <= n_views
    assert_same_results(expected, run(out, inputs))


def _x(shape, dtype=dtypes.float32):  # noqa: ANN001, ANN202
    g = Graph()
    return g, g.insert("allocate", [], shape=shape, dtype=dtype, name="x")


def test_transpose_twice_disappears():
    g, x = _x((2, 3))
    t = g.insert("view", [x], shape=(3, 2), strides=(1, 3))
    g.mark_output(g.insert("view", [t], shape=(2, 3), strides=(1, 2)))
    out = _fold(g)
    assert [n.op for n in out.nodes] == ["allocate"] and out.outputs == [x]


def test_reshape_then_transpose_becomes_one_view():
    g, x = _x((6,))
    r = g.insert("view", [x], shape=(2, 3), strides=(3, 1))
    t = g.insert("view", [r], shape=(3, 2), strides=(1, 3))
    g.mark_output(g.insert("sin", [t]))
    data = {"x": np.arange(6, dtype=np.float32)}
    expected = interpret(g, data)
    out = _fold(g)
    assert _views(out) == 1
    view = next(n for n in out.nodes if n.op == "view")
    assert view.reads == [x] and view.attrs.strides == (1, 3)
    assert_same_results(expected, interpret(out, data))


def test_slice_then_pad_composes_into_a_masked_view():
    g, x = _x((4, 4))
    w = g.insert("view", [x], shape=(3, 3), strides=(4, 1), offset=5)
    p = g.insert("view", [w], shape=(4, 4), strides=(3, 1), offset=-4, mask=((1, 4), (1, 4)))
    g.mark_output(p)
    data = {"x": np.arange(16, dtype=np.float32).reshape(4, 4)}
    expected = interpret(g, data)
    out = _fold(g)
    assert _views(out) == 1
    (view,) = [n for n in out.nodes if n.op == "view"]
    assert view.attrs.mask == ((1, 4), (1, 4)) and view.attrs.strides == (4, 1) and view.attrs.offset == 0
    assert_same_results(expected, interpret(out, data))


def test_flatten_of_a_transpose_is_not_expressible_and_stays():
    g, x = _x((2, 3))
    t = g.insert("view", [x], shape=(3, 2), strides=(1, 3))
    f = g.insert("view", [t], shape=(6,), strides=(1,))
    g.mark_output(f)
    assert _views(_fold(g)) == 2
    assert compose(g.producer_of(t).attrs, g.producer_of(f).attrs, (2, 3)) is None


def test_broadcast_const_becomes_a_const():
    g, x = _x((3, 4))
    c = g.insert("const", [], value=2.5, shape=(), dtype=dtypes.float32)
    b = g.insert("view", [g.insert("view", [c], shape=(1, 1), strides=(0, 0))], shape=(3, 4), strides=(0, 0))
    g.mark_output(g.insert("mul", [x, b]))
    out = _fold(g)
    assert _views(out) == 0
    const = next(n for n in out.nodes if n.op == "const")
    assert const.shape == (3, 4) and const.attrs.value == 2.5


def test_padded_view_of_nonzero_const_is_kept():
    g = Graph()
    c = g.insert("const", [], value=1.0, shape=(2,), dtype=dtypes.float32)
    g.mark_output(g.insert("view", [c], shape=(4,), strides=(1,), offset=-1, mask=((1, 3),)))
    out = _fold(g)
    assert _views(out) == 1
    np.testing.assert_array_equal(interpret(out)[0], [0, 1, 1, 0])


def test_symbolic_reshape_composes():
    n = Sym("n")
    g, x = _x((n, 4))
    r = g.insert("view", [x], shape=(n * 4,), strides=(1,))
    b = g.insert("view", [r], shape=(2, n * 4), strides=(0, 1))
    g.mark_output(b)
    out = _fold(g)
    assert _views(out) == 1 and next(n for n in out.nodes if n.op == "view").reads == [x]
    data = {"x": np.arange(12, dtype=np.float32).reshape(3, 4)}
    np.testing.assert_array_equal(interpret(out, data, {"n": 3})[0], interpret(g, data, {"n": 3})[0])


def test_identity_view_with_full_mask_is_removed():
    g, x = _x((2, 3))
    g.mark_output(
        g.insert("exp2", [g.insert("view", [x], shape=(2, 3), strides=(3, 1), mask=((0, 2), (0, 3)))])
    )
    out = PassManager(graph_passes()).run(g).graph
    assert _views(out) == 0
