"""Dot-product reductions in explicit lanes: a vectorizable reduction for short rows and low-bit loads.

A float reduction lowered as ``#pragma omp simd reduction(+:acc)`` is vectorized by gcc with an
"omp simd array": one private accumulator per lane of the widest vectorization factor, which gcc
picks from the *narrowest* type in the loop (64 lanes for int8 loads with AVX-512, 32 for 16-bit
float patterns). After the loop the array is summed **in order with scalar adds** (64 ``vaddss`` per
output for int8). With a long row that tail is amortized; with a 64-element row (the lm_head of a
small model) it costs more than the dot product itself: an int8 matvec ran 3-5x slower than fp32.

Here such a loop becomes

    float acc_l[L] = 0                                   # L partial sums (4 zmm with AVX-512)
    for rb < K - (L-1) step L:                            # full lane blocks
        #pragma omp simd
        for l < L: r = rb + l; acc_l[l] += f(r)           # lane-wise: no cross-iteration reduction
    for r in [K - K % L, K): acc += f(r)                  # tail, in order
    acc += pairwise sum of acc_l (L/2, L/4, ... 1: vector adds, then a few scalar ones)

which gcc vectorizes without a reduction epilogue. ``L`` is 64 bytes of the narrowest loaded type
(int8: 64, 16-bit: 32, 32-bit: 16), halved while it exceeds a constant ``K``. Like the ``omp simd``
reduction it replaces, this reassociates the sum (partial sums per lane), nothing else.

Applied to single-accumulator reductions whose loop reads a type narrower than 32 bits, and to
float32 ones with a constant ``K <= SHORT_K`` (a long float32 row vectorizes well as it is).
The register-tiled prefill loops (several accumulators, :mod:`caten_lab.codegen.rowblock`) are left alone.
"""

from __future__ import annotations

import re

from caten_lab.codegen.loopir import Assign, For, FunCall, Function, If, Param, Stmt, walk

ENABLED = True  # switch off to measure what the lane form buys
VECTOR_BYTES = 64  # one AVX-512 register (narrower targets split it; the form stays correct)
MIN_LANES = 16
SHORT_K = 256  # float32 rows up to this constant length use lanes too
CTYPE_BYTES = {"float": 4, "double": 8, "uint16_t": 2, "_Float16": 2, "int8_t": 1, "uint8_t": 1, "int16_t": 2,
          "int32_t": 4, "uint32_t": 4, "int64_t": 8, "_Bool": 1}
_PREFIX = "omp simd reduction(+:"


_H2F = re.compile(r"cl_h2f\(\(\(const cl_u16a \*\)(p\d+)\)\[(.+)\]\)")


def _balanced(t: str) -> bool:
    depth = 0
    for ch in t:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def contiguous_h2f(expr: str, var: str) -> tuple[str, str] | None:
    """``(buffer, offset)`` when ``expr`` is exactly a float16 load ``cl_h2f(buffer[offset + var])``
    (unit stride in ``var``, ``offset`` free of it): a run of such loads can go through ``cl_h2f_n``."""
    m = _H2F.fullmatch(expr)
    if m is None:
        return None
    buf, idx = m.group(1), m.group(2)
    w = re.escape(var)
    if idx == var:
        return buf, "0"
    for pat in (r"\((.+) \+ " + w + r"\)", r"\(" + w + r" \+ (.+)\)"):
        mm = re.fullmatch(pat, idx)
        if mm and _balanced(mm.group(1)) and not re.search(r"\b" + w + r"\b", mm.group(1)):
            return buf, mm.group(1)
    return None


def _narrowest(loop: For, ptypes: dict[str, str]) -> int:
    """Bytes of the narrowest buffer element read in ``loop`` (16-bit float patterns count as 2)."""
    out = 8
    for s in walk(loop.body):
        if not isinstance(s, Assign):
            continue
        if "cl_u16a" in s.expr:
            out = min(out, 2)
        for name in re.findall(r"\b(p\d+)\[", s.expr):
            out = min(out, CTYPE_BYTES.get(ptypes.get(name, "float"), 4))
    return out


def _acc_type(fn: Function, acc: str) -> str | None:
    for s in walk(fn.body):
        if isinstance(s, Assign) and s.target == acc and s.ctype and not s.array:
            return s.ctype
    return None


def _lanes(k: str, narrow: int) -> int:
    lanes = max(MIN_LANES, VECTOR_BYTES // max(1, narrow))
    if k.isdigit():
        while lanes > MIN_LANES and lanes > int(k):
            lanes //= 2
    return lanes


def _rewrite(loop: For, acc: str, ct: str, lanes: int) -> list[Stmt]:
    v, k, nodes = loop.var, loop.stop, loop.nodes
    arr, lane, blk = f"{acc}_l", f"{v}_l", f"{v}_b"
    pat = re.compile(r"\b" + re.escape(acc) + r"\b")
    zero = "0.0f" if ct == "float" else "0.0"

    widened: list[Stmt] = []  # float16 rows: converted per lane block by cl_h2f_n (vcvtph2ps)
    loads: dict[int, str] = {}
    for s in loop.body:
        hit = contiguous_h2f(s.expr, v) if isinstance(s, Assign) and s.ctype == "float" else None
        if hit is not None:
            buf = f"{s.target}_h"
            loads[id(s)] = buf
            widened.append(Assign(nodes, buf, "", "float", array=str(lanes)))
            widened.append(FunCall(nodes, "cl_h2f_n", [f"(const uint16_t *){hit[0]} + ({hit[1]}) + {blk}", buf,
                                                         str(lanes)]))

    def lane_body() -> list[Stmt]:
        body: list[Stmt] = [Assign(nodes, v, f"{blk} + {lane}", "const int64_t")]
        for s in loop.body:
            assert isinstance(s, Assign)
            if id(s) in loads:
                body.append(Assign(s.nodes, s.target, f"{loads[id(s)]}[{lane}]", s.ctype))
            elif s.target == acc and s.index is None and not s.ctype:
                body.append(Assign(s.nodes, arr, pat.sub(f"{arr}[{lane}]", s.expr), index=lane))
            else:
                body.append(Assign(s.nodes, s.target, s.expr, s.ctype, s.index, s.array))
        return body

    out: list[Stmt] = [Assign(nodes, arr, "", ct, array=str(lanes))]
    out.append(For(nodes, lane, "0", str(lanes), "1", [Assign(nodes, arr, zero, index=lane)], "omp simd", "vector"))
    inner = For(nodes, lane, "0", str(lanes), "1", lane_body(), "omp simd", "vector")
    out.append(For(nodes, blk, "0", f"{k} - {lanes - 1}", str(lanes), [*widened, inner], None, "stage"))
    tail_start = str(int(k) - int(k) % lanes) if k.isdigit() else f"{k} - ({k}) % {lanes}"
    if not k.isdigit() or int(k) % lanes:
        out.append(For(nodes, v, tail_start, k, "1", [Assign(s.nodes, s.target, s.expr, s.ctype, s.index, s.array)
                                                     for s in loop.body if isinstance(s, Assign)], None, "stage"))
    h = lanes // 2
    while h >= 1:
        add = Assign(nodes, arr, f"{arr}[{lane}] + {arr}[{lane} + {h}]", index=lane)
        out.append(For(nodes, lane, "0", str(h), "1", [add], "omp simd" if h >= 8 else "GCC unroll 4", "vector"))
        h //= 2
    out.append(Assign(nodes, acc, f"{acc} + {arr}[0]"))
    return out


def _visit(body: list[Stmt], fn: Function, ptypes: dict[str, str]) -> int:
    n = 0
    i = 0
    while i < len(body):
        s = body[i]
        if isinstance(s, If):
            n += _visit(s.then, fn, ptypes) + _visit(s.orelse, fn, ptypes)
        elif isinstance(s, For):
            new = _try(s, fn, ptypes)
            if new is not None:
                body[i:i + 1] = new
                i += len(new)
                n += 1
                continue
            n += _visit(s.body, fn, ptypes)
        i += 1
    return n


def _try(loop: For, fn: Function, ptypes: dict[str, str]) -> list[Stmt] | None:
    pragma = loop.pragma or ""
    if loop.role != "stage" or not pragma.startswith(_PREFIX) or loop.start != "0" or loop.step != "1":
        return None
    accs = pragma[len(_PREFIX):-1].split(",")
    if len(accs) != 1 or not loop.body or not all(isinstance(s, Assign) and not s.array for s in loop.body):
        return None
    acc = accs[0]
    ct = _acc_type(fn, acc)
    if ct not in ("float", "double"):
        return None
    updates = [s for s in loop.body if isinstance(s, Assign) and s.target == acc]
    if len(updates) != 1 or updates[0].index is not None or updates[0].ctype:
        return None
    if not re.fullmatch(re.escape(acc) + r" \+ .+", updates[0].expr) or \
            any(re.search(r"\b" + re.escape(acc) + r"\b", s.expr) for s in loop.body if s is not updates[0]):
        return None
    narrow = min(_narrowest(loop, ptypes), CTYPE_BYTES.get(ct, 4))
    k = loop.stop
    if narrow >= 4 and not (k.isdigit() and int(k) <= SHORT_K):
        return None
    lanes = _lanes(k, narrow)
    if k.isdigit() and int(k) < lanes:
        return None
    return _rewrite(loop, acc, ct, lanes)


def split_lanes(fn: Function) -> int:
    """Rewrite every matching ``omp simd reduction`` loop of ``fn`` in place; returns how many."""
    if not ENABLED:
        return 0
    ptypes = {p.name: p.ctype for p in fn.params if isinstance(p, Param)}
    return _visit(fn.body, fn, ptypes)
