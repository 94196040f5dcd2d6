"""The ``lanes`` codegen pass: dot-product reductions in explicit lanes, a vectorizable reduction for
short rows and low-bit loads.

A float reduction ``FOR r [simd reduction(+:acc)]`` is vectorized by gcc with an "omp simd array":
one private accumulator per lane of the widest vectorization factor, which gcc picks from the
*narrowest* type in the loop (64 lanes for int8 loads with AVX-512, 32 for float16). After the loop
the array is summed **in order with scalar adds** (64 ``vaddss`` per output for int8). With a long
row that tail is amortized; with a 64-element row (the lm_head of a small model) it costs more than
the dot product itself: an int8 matvec ran 3-5x slower than fp32.

Here such a loop becomes

    float acc_l[L] = 0                                     # L partial sums (4 zmm with AVX-512)
    FOR acc_b in [0, K - (L-1)) step L                     # full lane blocks
      (float16 rows: cl_h2f_n(&w[off + acc_b], x_h, L))    # one hardware conversion per block
      FOR acc_i in [0, L) [simd]: r = acc_b + acc_i; acc_l[acc_i] += f(r)   # lane-wise: no carried sum
    FOR r in [K - K % L, K): acc += f(r)                   # tail, in order
    acc += pairwise sum of acc_l (L/2, L/4, ... 1: vector adds, then a few scalar ones)

which gcc vectorizes without a reduction epilogue. ``L`` is ``vector_bytes`` of the narrowest loaded
type (int8: 64, 16-bit: 32, 32-bit: 16), halved while it exceeds a constant ``K``. Like the simd
reduction it replaces, this reassociates the sum (partial sums per lane), nothing else.

Blocked rows (a GGUF-quantized weight: ``r / B`` picks the block's scale, ``r - (r / B) * B`` the value
in it) get an ``L`` that divides every such block size ``B`` (halved down to ``min_lanes``), and in the
lane loop ``r / B`` becomes ``acc_b / B``: a lane block never straddles two weight blocks, so the scale
is loop-invariant there and the quants are read with unit stride. When a weight block spans several lane
blocks (Q4_1: 32 values, 16 lanes), one step of ``acc_b`` covers the span with one lane loop per
sub-block (:mod:`caten_lab.codegen.lane_tables`): the block's scales are converted once per span, and
the index tables that pick a Q4 nibble (mask and 1/16 scale) become constants, so gcc folds the
``* 1.0`` away. Same order of the sums, so the same bits; SmolLM2 Q4_1 decode 37.8 -> 22.3 ms per token
at one thread, prefill of 128 tokens 1.75 -> 1.3-1.5 s.

Applied to single-accumulator reductions whose loop reads a type narrower than 32 bits, and to
float32 ones with a constant ``K <= short_k`` (a long float32 row vectorizes well as it is). A
register-tiled prefill loop (several accumulators, :mod:`caten_lab.codegen.rowblock`) is split only
over a blocked row, with ``min_lanes`` lanes per accumulator (one vector each): without it gcc
gathers the block scales and the quants lane by lane (a Q4_1 tile ran at 1.6 GFLOP/s). With the
single-accumulator form's lane count it sums every output in the same order as the untiled loop.
A float16 load ``w[off + r]`` (unit stride in ``r``; recognized on the typed Load, see
:func:`caten_lab.codegen.kir_names.f16_run`) is converted per lane block by ``cl_h2f_n``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from itertools import chain
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.codegen.kir import Alu, Assign, Const, Decl, Expr, For, Function, Load, Stmt, Store, Var
from caten_lab.codegen.kir_names import (
    expr_names,
    f16_run,
    h2f_call,
    load_widths,
    names_in,
    rename,
    used_names,
)
from caten_lab.codegen.kir_rewrite import RuleContext, apply_rules
from caten_lab.codegen.kir_walk import exprs_of, int_value, loads_of, map_stmt_exprs, straight_line, walk
from caten_lab.codegen.lane_tables import IndexTable, index_tables, sub_block, table_constants, unroll_span
from caten_lab.codegen.max_lanes import rule_max_lanes
from caten_lab.codegen.pass_options import check_options, options_from
from caten_lab.errors import CompileError

I64, F32 = DType.int64, DType.float32


@dataclass(frozen=True)
class LaneOptions:
    """Lane widths of the ``lanes`` pass."""

    enabled: bool = True
    vector_bytes: int = 64  # one AVX-512 register (narrower targets split it; the form stays correct)
    min_lanes: int = 16
    short_k: int = 256  # float32 rows up to this constant length use lanes too

    def __post_init__(self) -> None:
        check_options(self)


DEFAULTS = LaneOptions()


def lane_count(k: int | None, narrow: int, o: LaneOptions) -> int:
    """Lanes for a reduction of length ``k`` (None: symbolic) whose narrowest load is ``narrow`` bytes."""
    lanes = max(o.min_lanes, o.vector_bytes // max(1, narrow))
    if k is not None:
        while lanes > o.min_lanes and lanes > k:
            lanes //= 2
    return lanes


def block_sizes(loop: For) -> set[int]:
    """The constants ``B`` of every ``r / B`` in the body of loop ``r`` (truncating division: ``r >= 0``)."""
    out: set[int] = set()
    for s in loop.body:
        for e in exprs_of(s):
            if isinstance(e, Alu) and e.op == "div" and isinstance(e.args[0], Var) and e.args[0].name == loop.var:
                c = int_value(e.args[1])
                if c is not None and c > 0:
                    out.add(c)
    return out


def block_lanes(lanes: int, blocks: set[int], o: LaneOptions) -> int:
    """``lanes`` halved until it divides every block size, if that stays >= ``min_lanes``; else unchanged."""
    fit = lanes
    while fit > o.min_lanes and any(b % fit for b in blocks):
        fit //= 2
    return lanes if any(b % fit for b in blocks) else fit


def _per_block(s: Stmt, v: str, blk: str, lanes: int) -> Stmt:
    """``s`` with each ``v / B`` (``B`` a multiple of ``lanes``) read as ``blk / B``: inside one lane block
    ``v = blk + i`` with ``blk`` a multiple of ``lanes`` and ``0 <= i < lanes``, so both are equal."""
    def fn(e: Expr) -> Expr | None:
        if isinstance(e, Alu) and e.op == "div" and isinstance(e.args[0], Var) and e.args[0].name == v:
            c = int_value(e.args[1])
            if c is not None and c > 0 and c % lanes == 0:
                return replace(e, args=(Var(blk, I64), e.args[1]))
        return None

    return map_stmt_exprs(s, fn)


def _acc_type(fn: Function, acc: str, body: tuple[Stmt, ...], i: int) -> DType | None:
    """The declared type of scalar ``acc``: usually declared just before its loop, else anywhere."""
    for s in chain(reversed(body[:i]), walk(fn.body)):  # lazily: the walk rarely runs
        if isinstance(s, Decl) and s.var == acc and s.size is None:
            return s.dtype
    return None


def _update(loop: For, acc: str) -> Assign | None:
    """The one statement ``acc = acc + e`` of ``loop`` (``e`` and every other statement free of ``acc``)."""
    updates = [s for s in loop.body if isinstance(s, Decl | Assign) and s.var == acc]
    if len(updates) != 1 or not isinstance(updates[0], Assign):
        return None
    up = updates[0]
    v = up.value
    if not (isinstance(v, Alu) and v.op == "add" and isinstance(v.args[0], Var) and v.args[0].name == acc):
        return None
    if acc in expr_names(v.args[1]) or any(acc in used_names(s) for s in loop.body if s is not up):
        return None
    return up


def match(loop: Stmt, fn: Function, o: LaneOptions, body: tuple[Stmt, ...] = (), i: int = 0
          ) -> tuple[list[Assign], DType, int] | None:
    """(the accumulator updates, their type, the lane count) when ``loop`` is a float ``+`` reduction worth
    splitting: one accumulator, or the several of a register tile over a blocked (quantized) row."""
    if not isinstance(loop, For) or loop.role != "stage" or not loop.simd or not loop.reduction:
        return None
    if loop.parallel is not None or int_value(loop.start) != 0 or int_value(loop.step) != 1 or not loop.body:
        return None
    if not straight_line(loop.body):
        return None
    blocks = block_sizes(loop)
    if len(loop.reduction) > 1 and not blocks:
        return None  # a float register tile vectorizes well as it is
    ups = [_update(loop, acc) for acc in loop.reduction]
    if any(up is None for up in ups):
        return None
    types = {_acc_type(fn, acc, body, i) for acc in loop.reduction}
    if len(types) != 1 or (ct := types.pop()) not in (F32, DType.float64):
        return None
    narrow = min([8, *(w for s in loop.body for w in load_widths(fn, s)), ct.itemsize])
    k = int_value(loop.stop)
    if narrow >= 4 and not (k is not None and k <= o.short_k):
        return None
    # a register tile keeps one vector of partial sums per accumulator (its accumulators fill the registers)
    lanes = lane_count(k, narrow, o) if len(ups) == 1 else o.min_lanes
    if blocks:
        lanes = block_lanes(lanes, blocks, o)
    if k is not None and k < lanes:
        return None
    return ups, ct, lanes  # type: ignore[return-value]


def split_lanes(loop: For, ups: list[Assign], ct: DType, lanes: int, fn: Function,
                tables: dict[str, IndexTable] | None = None) -> list[Stmt] | None:
    """The lane form of reduction ``loop`` (accumulator updates ``ups``); None when a name it would invent
    is already used in the function."""
    v, k, org = loop.var, loop.stop, loop.origin
    first = ups[0].var
    arrs = {up.var: f"{up.var}_l" for up in ups}
    lane, blk = f"{first}_i", f"{first}_b"  # unique per accumulator (copies of a loop in
    # row blocks have renamed accumulators), so the check below only declines a real clash
    taken = names_in(fn)
    if {*arrs.values(), lane, blk} & taken or any(f"{s.var}_h" in taken for s in loop.body if isinstance(s, Decl)):
        return None
    L = Const(lanes, I64)
    at = Var(lane, I64)

    def cell(arr: str, i: Expr = at) -> Load:
        return Load(arr, i, ct, origin=org)

    def lane_loop(n: int, body: tuple[Stmt, ...], simd: bool = True, unroll: int = 0) -> For:
        return For(lane, Const(0, I64), Const(n, I64), Const(1, I64), body, "vector", simd=simd, unroll=unroll,
                   origin=org)

    widened: list[Stmt] = []  # float16 rows: converted per lane block by cl_h2f_n (vcvtph2ps)
    loads: dict[int, str] = {}
    for s in loop.body:
        hit = f16_run(s.init, v, fn) if isinstance(s, Decl) and s.dtype == F32 else None
        if hit is not None:
            buf = f"{s.var}_h"
            loads[id(s)] = buf
            off = Var(blk, I64) if int_value(hit[1]) == 0 else Alu("add", (hit[1], Var(blk, I64)), I64)
            widened.append(Decl(buf, F32, size=L, origin=s.origin))
            widened.append(replace(h2f_call(hit[0], off, buf, L), origin=s.origin))

    upd = {id(up): up for up in ups}
    body: list[Stmt] = [Decl(v, I64, Alu("add", (Var(blk, I64), at), I64), True, origin=org)]
    for s in loop.body:
        if id(s) in loads:
            assert isinstance(s, Decl)
            body.append(replace(s, init=Load(loads[id(s)], at, F32, origin=s.origin)))
        elif id(s) in upd:
            arr = arrs[s.var]  # type: ignore[union-attr]
            new = Store(arr, at, Alu("add", (cell(arr), s.value.args[1]), ct), origin=s.origin)  # type: ignore[union-attr]
            body.append(_per_block(new, v, blk, lanes))
        else:
            body.append(_per_block(s, v, blk, lanes))
    kc = int_value(k)
    out: list[Stmt] = []
    for arr in arrs.values():
        out += [Decl(arr, ct, size=L, origin=org), lane_loop(lanes, (Store(arr, at, Const(0.0, ct), origin=org),))]
    blocks = block_sizes(loop)
    span = unroll_span(blocks, lanes) * lanes if not widened else lanes
    consts: dict[str, tuple[Const, ...]] = {}
    if span > lanes:  # index tables that are constants per sub-block of a weight block (lane_tables.py)
        for ld in (ld for st in body for ld in loads_of(st)):
            t = (tables or {}).get(ld.buf)
            if t is not None and ld.index == Var(v, I64) and ld.buf not in consts:
                c = table_constants(t, span, lanes)
                if c is not None:
                    consts[ld.buf] = c
    S = Const(span, I64)
    stop = Const(kc - (span - 1), I64) if kc is not None else Alu("sub", (k, Const(span - 1, I64)), I64)
    once, lane_loops = _sub_blocks(body, lane, blk, v, lanes, span, consts, fresh=lambda n: n in taken)
    out.append(For(blk, Const(0, I64), stop, S, (*widened, *once, *(lane_loop(lanes, tuple(b)) for b in lane_loops)),
                   "stage", origin=org))
    if kc is None or kc % span:
        tail = Const(kc - kc % span, I64) if kc is not None else Alu("sub", (k, Alu("mod", (k, S), I64)), I64)
        out.append(For(v, tail, k, Const(1, I64), loop.body, "stage", origin=org))
    for up in ups:
        arr = arrs[up.var]
        h = lanes // 2
        while h >= 1:
            add = Store(arr, at, Alu("add", (cell(arr), cell(arr, Alu("add", (at, Const(h, I64)), I64))), ct), origin=org)
            out.append(lane_loop(h, (add,), simd=h >= 8, unroll=0 if h >= 8 else 4))
            h //= 2
        out.append(Assign(up.var, Alu("add", (Var(up.var, ct), cell(arr, Const(0, I64))), ct), origin=up.origin))
    return out


def _sub_blocks(body: list[Stmt], lane: str, blk: str, v: str, lanes: int, span: int, consts: dict[str, tuple[Const, ...]],
                fresh) -> tuple[list[Stmt], list[list[Stmt]]]:  # noqa: ANN001 - fresh: name -> bool (taken)
    """(declarations run once per span, the lane loop bodies of its ``span / lanes`` sub-blocks). A
    declaration the sub-blocks share unchanged (a block's scale) is declared once; the others of sub-block
    ``j > 0`` get the suffix ``_u<j>``."""
    once: list[Stmt] = []
    shared: dict[tuple[DType, Expr | None], str] = {}
    loops: list[list[Stmt]] = []
    for j in range(span // lanes):
        mine, rest = _block_invariant([sub_block(st, blk, j, lanes, span, v, consts) for st in body], lane)
        names: dict[str, str] = {}
        for d in mine:
            d = rename(d, names)
            assert isinstance(d, Decl)
            key = (d.dtype, d.init)
            if key in shared:
                names[d.var] = shared[key]
                continue
            if j:
                new = f"{d.var}_u{j}"
                while fresh(new):
                    new += "_"
                names[d.var] = new
                d = replace(d, var=new)
            shared[key] = d.var
            once.append(d)
        loops.append([rename(st, names) for st in rest])
    return once, loops


def _block_invariant(body: list[Stmt], lane: str) -> tuple[list[Stmt], list[Stmt]]:
    """(the declarations of a lane loop's ``body`` that read nothing that changes across its lanes, the
    rest): the first run once per lane block. A weight block's scale ``cl_h2f(d[blk / B])`` is such a
    value; left in the lane loop, gcc vectorized it lane by lane or not at all (a two-reduction Q4_1
    tile stayed scalar)."""
    varies = {lane}
    for s in body:
        if isinstance(s, Store):
            varies.add(s.buf)
    once: list[Stmt] = []
    rest: list[Stmt] = []
    for s in body:
        if isinstance(s, Decl) and s.size is None and not used_names(s) & varies:
            once.append(s)
        else:
            rest.append(s)
            if isinstance(s, Decl | Assign):
                varies.add(s.var)
    return once, rest


# --------------------------------------------------------------------------------------- the pass


def rule_lanes(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    o: LaneOptions = ctx.options.get("lanes", DEFAULTS)
    loop = body[i]
    m = match(loop, ctx.function, o, body, i)
    if m is None:
        return None
    assert isinstance(loop, For)
    new = split_lanes(loop, *m, ctx.function, ctx.options.get("lane_tables", {}).get(ctx.function.name))
    return None if new is None else (1, new)


RULES = (("lanes", rule_lanes), ("max_lanes", rule_max_lanes))


class Lanes:
    """Codegen pass: short and low-bit dot products of ``ctx.artifacts['kernel_ir']`` in lane partial sums."""

    name = "lanes"
    description = ("short / low-bit dot products: partial sums per vector lane, float16 rows converted per block; "
                   "max / min reductions in lanes")

    def __init__(self, config: LaneOptions | None = None, **kw: Any) -> None:
        self.config = options_from(LaneOptions, config, kw, self.name)
        self.options: dict[str, Any] = asdict(self.config)  # what the compile cache keys on

    def run(self, graph: Graph, ctx: Any) -> Graph:
        prog = ctx.artifacts.get("kernel_ir")
        if prog is None:
            raise CompileError("no kernel program in ctx.artifacts['kernel_ir']",
                               hint="run the 'lower' pass before 'lanes'")
        if not self.config.enabled:
            return graph
        tables = {fn.name: index_tables(fn) for fn in prog.functions}  # one walk per function
        ctx.artifacts["kernel_ir"] = apply_rules(prog, RULES, {"lanes": self.config, "lane_tables": tables},
                                                 ctx.rewrites, descend_into_new=False)
        return graph

    def __repr__(self) -> str:
        return f"<pass {self.name}: {self.config}>"
