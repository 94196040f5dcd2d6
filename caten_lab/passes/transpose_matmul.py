"""Compute a matmul transposed when its row operand is read across rows far apart.

A matmul reaches the scheduler as ``sum_k a[m, k] * b[k, n]`` over two broadcast views of shape
``(..., M, N, K)``. Codegen lowers it (``b`` contiguous along ``n``) as a tile of output columns per row:
every step of ``k`` reads one value of ``a`` per row and one vector of ``b``. A weight gradient
``dW = g^T @ x`` has ``a = g^T``, so each step of ``k`` jumps a whole row of ``g``: for the tied embedding of a
GPT-2 training step (``g`` the 2048 x 4096 logits gradient, 16 KB per row) every step lands on another page
and the kernel ran at 44 GFLOP/s on one core. Computed transposed, ``dW^T = x^T @ g``, the row operand is ``x^T``
(one 512-byte row of ``x`` per step) and the columns come from ``g``'s contiguous rows: 70 GFLOP/s, 49 -> 31 ms
with the copy back (the whole tiny training step 0.31 -> 0.30 s). The 2 x 768 config's logits (``g`` rows
4096, ``x`` rows 768 apart) measured the same either way, hence :data:`STRIDE_RATIO`.

The rule ``transpose_matmul`` rewrites ``reduce_k(view_a * view_b)`` of shape ``(..., M, N, 1)`` into
``view(reduce_k(view_b' * view_a'))``: the same views with the ``M`` and ``N`` axes swapped, reduced to
``(..., N, M, 1)`` and read back through a transposed view. Each output is the same sum of the same
products in the same order (a product of two floats does not depend on their order), so the values are
bitwise equal. The scheduler realizes the transposed result (a sum of products whose innermost output
axis its reader walks on an outer loop is not fused as a stage: ``passes/schedule._read_transposed``) and
its readers read it through the view.

It fires when ``a`` is contiguous along ``m`` (so it becomes the column operand), ``b`` contiguous along
``n``, ``a``'s step along ``k`` is at least :data:`MIN_K_STRIDE` elements and :data:`STRIDE_RATIO` times
``b``'s, and the sizes are constants.
"""

from __future__ import annotations

from caten_lab.air.rewriter import Match, Pat, Rule
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.value import Value
from caten_lab.passes.base import RewritePass

MIN_K_STRIDE = 1024  # elements between a's values of consecutive k: a page (4 KB) or more
STRIDE_RATIO = 8  # ... and this many times b's: the swapped row operand reads much closer values


def _axes(m: Match) -> tuple[Value, Value, int, int] | None:
    """(a, b, i, j) of the matched sum of products: ``a`` is read along output axis ``i`` and broadcast
    along ``j`` (the row operand), ``b`` the other way round; every other output axis has size 1."""
    root, mul = m.root, m.node("prod")
    if root.attrs.op != "add" or mul is None or len(m.graph.users_of(mul.out)) != 1:
        return None
    pairs = [(m["x"], m.node("x")), (m["y"], m.node("y"))]
    if any(n is None or n.attrs.mask is not None for _, n in pairs):
        return None
    red = set(root.attrs.axes)
    out = [k for k, d in enumerate(root.shape) if k not in red and not (isinstance(d, int) and d == 1)]
    if len(out) != 2:
        return None
    for (a, na), (b, nb) in (pairs, pairs[::-1]):
        sa, sb = na.attrs.strides, nb.attrs.strides  # type: ignore[union-attr]
        for i, j in (out, out[::-1]):
            if sa[j] == 0 and sb[i] == 0 and sa[i] != 0 and sb[j] != 0:
                return a, b, i, j  # type: ignore[return-value]
    return None


def _transposed(m: Match) -> Value | None:
    found = _axes(m)
    if found is None:
        return None
    a, b, i, j = found
    g, root = m.graph, m.root
    va, vb = g.producer_of(a), g.producer_of(b)
    shape = tuple(va.attrs.shape)
    sa, sb = tuple(va.attrs.strides), tuple(vb.attrs.strides)
    if not all(isinstance(d, int) for d in (*shape, *sa, *sb)) or sa[i] != 1 or sb[j] != 1:
        return None
    k = max(root.attrs.axes, key=lambda ax: -1 if shape[ax] == 1 else ax)  # the innermost reduced axis
    if sa[k] < MIN_K_STRIDE or sa[k] < STRIDE_RATIO * abs(sb[k]):
        return None

    def swapped(t: tuple) -> tuple:
        out = list(t)
        out[i], out[j] = t[j], t[i]
        return tuple(out)

    def view(v: Value, strides: tuple) -> Value:
        p = g.producer_of(v)
        return g.insert("view", [p.reads[0]], source=p.source, shape=swapped(shape), strides=swapped(strides),
                        offset=p.attrs.offset, mask=None)

    prod = g.insert("mul", [view(b, sb), view(a, sa)], source=m.node("prod").source)
    red = g.insert("reduce", [prod], source=root.source, op="add", axes=tuple(root.attrs.axes))
    back = swapped(contiguous_strides(swapped(tuple(root.shape))))
    back = tuple(0 if d == 1 else st for d, st in zip(root.shape, back))
    return g.insert("view", [red], source=root.source, shape=tuple(root.shape), strides=back, offset=0, mask=None)


TRANSPOSE_MATMUL = Rule("sum_k a[m,k] b[k,n] with a's rows far apart along k -> (sum_k b[k,n] a[m,k])^T",
                        Pat("reduce", [Pat("mul", [Pat("view", name="x"), Pat("view", name="y")], name="prod")]),
                        _transposed)


def transpose_matmul_pass() -> RewritePass:
    return RewritePass("transpose_matmul", "compute a matmul transposed when its row operand's values along "
                       "the reduction are far apart (a weight gradient g^T @ x over a wide g)", [TRANSPOSE_MATMUL])
