"""The ``rowblock`` codegen pass: register and cache tiles for prefill matmuls, a tile of rows x output
features per weight read.

A matmul lowered in dot-product form (see :mod:`caten_lab.codegen.hoist`) is

    FOR i in [0, seq)                pre(i)  (norm statistics, hoisted operands)
      FOR j in [0, n_out)            acc = 0; FOR r [simd reduction(+:acc)]: acc += a(i, r) * W[j, r]; epilogue(i, j, acc)

and reads all of ``W`` once per row ``i``. When ``seq >= rows`` at run time it becomes

    FOR jt in [0, n_out) step JT [tile] parallel(collapse=2)   # a tile of W (JT x K) that stays in L2 ...
      FOR ib in [0, seq) step ROWS                             # ... while every row block uses it
        i_q = min(ib + q, seq - 1); pre(i_q)                  for q < ROWS
        FOR jb in [jt, min(jt + JT, n_out)) step COLS
          j_c = min(jb + c, tile end - 1)                     for c < COLS
          FOR r [simd reduction(+: acc_qc...)]: acc_qc += a_q(r) * W_c(r)   # ROWS x COLS accumulators
          epilogue(i_q, j_c, acc_qc)

Each inner step loads ROWS operand vectors and COLS weight vectors for ROWS * COLS multiply-adds, so
the loop is bound by arithmetic rather than loads, and W streams from L3 once per kernel instead of
once per ROWS rows. Statements are copied per row, per column, or per both, by the names they read
and write (a dependence closure over the typed statements); those that depend on neither are emitted
once. The statements of ``pre`` that read no row (a dequantization's mask tables) run once, before the
tiles; the rest is recomputed per column tile. The output-feature loop may hold several reductions (a
fused SwiGLU's gate and up projections, joined by their epilogue): each gets its own ROWS x COLS
accumulators over the same tile. Rows (columns) past the end are clamped to the last one:
recomputed and stored with identical values by the same iteration. Decode (``seq < ROWS``) runs the
original nest. Each output's arithmetic is unchanged, so results equal the untiled code.

Low-bit weights (int8, float16 through the hardware conversion) are widened once per register tile
into a float buffer per column (``*_w``), so the tile runs on float32 loads: gcc vectorizes a loop by
its narrowest type, and a tile over int8 loads spilled its accumulators.

Options (:class:`~caten_lab.codegen.rowblock_tiles.RowBlockOptions`) are arguments of the pass;
leave the pass out of the pipeline (or ``enabled=False``) to measure what tiling buys.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.codegen.kir import (
    Alu,
    Cast,
    Const,
    Decl,
    Expr,
    For,
    Function,
    If,
    Load,
    Parallel,
    Stmt,
    Store,
    Var,
)
from caten_lab.codegen.kir_names import (
    declared_names,
    f16_run,
    h2f_call,
    load_widths,
    names_in,
    rename,
    rename_expr,
    target,
    used_names,
)
from caten_lab.codegen.kir_rewrite import RuleContext, apply_rules
from caten_lab.codegen.kir_walk import int_value
from caten_lab.codegen.pass_options import options_from
from caten_lab.codegen.rowblock_match import Nest, dependence_closure, match, row_statements
from caten_lab.codegen.rowblock_tiles import (
    DEFAULTS,
    RowBlockOptions,
    register_tile_for,
    tile_width,
    widens,
)
from caten_lab.errors import CompileError

I64, F32 = DType.int64, DType.float32


# -------------------------------------------------------------------------------------- rewrite


@dataclass
class _Plan:
    nest: Nest
    fn: Function
    o: RowBlockOptions
    row_dep: set[str] = field(default_factory=set)
    col_dep: set[str] = field(default_factory=set)
    uses: dict[int, set[str]] = field(default_factory=dict)
    names: dict[tuple[int | None, int | None], dict[str, str]] = field(default_factory=dict)

    def ren(self, q: int | None, c: int | None) -> dict[str, str]:
        return self.names[(q, c)]

    def build_names(self, nr: int, nc: int) -> None:
        for q in (None, *range(nr)):
            for c in (None, *range(nc)):
                out: dict[str, str] = {}
                for name in self.row_dep | self.col_dep:
                    rq, cc = name in self.row_dep, name in self.col_dep
                    if (rq and q is None) or (cc and c is None):
                        continue
                    out[name] = name + (f"_{q}" if rq else "") + (f"c{c}" if cc and rq else f"_c{c}" if cc else "")
                self.names[(q, c)] = out

    def dup(self, s: Stmt, nr: int, nc: int) -> list[Stmt]:
        """``s`` once, per row, per column or per (row, column), by the names it touches."""
        touched = self.uses[id(s)] | declared_names(s)
        rq, cc = bool(touched & self.row_dep), bool(touched & self.col_dep)
        if not rq and not cc:
            return [s]
        return [rename(s, self.ren(q, c)) for q in (range(nr) if rq else [None]) for c in (range(nc) if cc else [None])]


def _v(name: str, dt: DType = I64) -> Var:
    return Var(name, dt)


def _c(v: int) -> Const:
    return Const(v, I64)


def _add(a: Expr, b: Expr) -> Expr:
    return Alu("add", (a, b), I64)


def _min(a: Expr, b: Expr) -> Expr:
    return Alu("min", (a, b), I64)


def _minus1(e: Expr) -> Expr:
    k = int_value(e)
    return _c(k - 1) if k is not None else Alu("sub", (e, _c(1)), I64)


def _parallel(rows: For) -> Parallel | None:
    """The rows loop's parallelism for the tiled (tile, row block) pair: collapsed over both, with its
    work condition minus the ``rows >= threads`` term (the tiled pair has enough iterations)."""
    if rows.parallel is None:
        return None
    cond = rows.parallel.cond
    terms = _land_terms(cond) if cond is not None else []
    keep = [t for t in terms if not (isinstance(t, Alu) and t.op == "ge" and t.args[0] == rows.stop
                                     and int_value(t.args[1]) is not None)]
    out: Expr | None = None
    for t in keep:
        out = t if out is None else Alu("land", (out, t), DType.bool)
    return Parallel(2, out)


def _land_terms(e: Expr) -> list[Expr]:
    if isinstance(e, Alu) and e.op == "land" and len(e.args) == 2:
        return _land_terms(e.args[0]) + _land_terms(e.args[1])
    return [e]


def _weight_bytes(p: _Plan) -> int:
    """Bytes per element of the widest parameter read per output feature (the weight) in the reductions."""
    out = 1
    for red in p.nest.reds:
        for s in red.body:
            if target(s) in p.col_dep:
                out = max([out, *load_widths(p.fn, s)])
    return out


def _h2f_chain(col_only: list[Decl], needed: list[str], var: str, fn: Function) -> bool:
    """``x0 = w[off + var]`` (float16) then ``x1 = float32(x0); ...``, only the last read by the reduction."""
    if f16_run(col_only[0].init, var, fn) is None or needed != [col_only[-1].var] or col_only[0].dtype != F32:
        return False
    return all(x.init == Cast(Var(prev.var, prev.dtype), F32) for prev, x in zip(col_only, col_only[1:]))


@dataclass
class _Widen:
    """How one reduction reads its weight in the tile: the column-only declarations (the weight load, its
    widening and dequantization), the ones the rest of the body reads, and whether they are widened into a
    float buffer per column first (``f16``: by the hardware conversion)."""

    red: For
    col_only: list[Decl]
    needed: list[str]
    scratch: bool
    f16: bool


def _widen_plan(red: For, p: _Plan, wbytes: int) -> _Widen:
    k = int_value(red.stop)
    col_only = [x for x in red.body if isinstance(x, Decl) and x.var in p.col_dep and x.var not in p.row_dep]
    col_ids = {id(x) for x in col_only}
    rest_uses: set[str] = set()
    for x in red.body:
        if id(x) not in col_ids:
            rest_uses |= p.uses[id(x)]
    needed = [x.var for x in col_only if x.var in rest_uses]
    scratch = widens(wbytes, k, p.o) and bool(col_only) and all(x.dtype == F32 or x.var not in needed for x in col_only)
    f16 = scratch and wbytes == 2  # float16: only a plain contiguous load, widened by cl_h2f_n
    if f16 and not _h2f_chain(col_only, needed, red.var, p.fn):
        scratch = f16 = False
    return _Widen(red, col_only, needed, scratch, f16)


def _tile_reduction(w: _Widen, p: _Plan, nr: int, nc: int) -> list[Stmt]:
    """One reduction of the register tile: the widening of its weight columns (when it has one), then the
    reduction over ROWS x COLS accumulators."""
    red, fn = w.red, p.fn
    k = int_value(red.stop)
    col_ids = {id(x) for x in w.col_only}
    widen: list[Stmt] = []
    red_body: list[Stmt] = []
    if w.scratch:
        assert k is not None
        for c in range(nc):
            rc = p.ren(None, c)
            if w.f16:
                hit = f16_run(w.col_only[0].init, red.var, fn)
                assert hit is not None
                buf = rc.get(w.col_only[-1].var, w.col_only[-1].var) + "_w"
                widen.append(Decl(buf, F32, size=_c(k), origin=red.origin))
                widen.append(replace(h2f_call(hit[0], rename_expr(hit[1], rc), buf, _c(k)), origin=red.origin))
                continue
            # the column-only statements, plus those that depend on neither rows nor columns (a per-r
            # factor such as a vector the weight is multiplied by): they may read those
            conv = [rename(x, rc) for x in red.body if id(x) in col_ids or _free(x, p)]
            for t in w.needed:
                widen.append(Decl(rc[t] + "_w", F32, size=_c(k), origin=red.origin))
                conv.append(Store(rc[t] + "_w", _v(red.var), _v(rc[t], F32), origin=red.origin))
            widen.append(For(red.var, red.start, red.stop, red.step, tuple(conv), "vector", simd=True,
                             origin=red.origin))
        for s in red.body:
            if id(s) not in col_ids:
                red_body += p.dup(s, nr, nc)
            elif isinstance(s, Decl) and s.var in w.needed:
                red_body += [Decl(p.ren(None, c)[s.var], s.dtype, Load(p.ren(None, c)[s.var] + "_w", _v(red.var), F32),
                                  s.const, origin=s.origin) for c in range(nc)]
    else:
        for s in red.body:
            red_body += p.dup(s, nr, nc)
    accs = tuple(p.ren(q, c).get(a, a) for a in red.reduction
                 for q in (range(nr) if a in p.row_dep else [None])
                 for c in (range(nc) if a in p.col_dep else [None]))
    return [*widen, replace(red, body=tuple(red_body), reduction=accs)]


def block_rows(nest: Nest, fn: Function, o: RowBlockOptions) -> If | None:
    """The tiled nest (with the original as the ``seq < rows`` branch); None when a name it would
    invent (a copy's suffixed name, a tile variable) is already used in the function."""
    rows, cols = nest.rows, nest.cols
    lv, cv = rows.var, cols.var
    pre = rows.body[:-1]
    p = _Plan(nest, fn, o)
    flat: list[Stmt] = []  # program order
    for s in cols.body:
        flat += list(s.body) if any(s is red for red in nest.reds) else [s]
    p.uses = {id(s): used_names(s) for s in [*flat, *cols.body]}
    row_pre, pre_names = row_statements(pre, lv)
    p.row_dep = dependence_closure(flat, p.uses, {lv} | pre_names)
    p.col_dep = dependence_closure(flat, p.uses, {cv})
    ks = {int_value(red.stop) for red in nest.reds}
    k = ks.pop() if len(ks) == 1 else None
    wbytes = _weight_bytes(p)
    plans = [_widen_plan(red, p, wbytes) for red in nest.reds]
    scratch = all(w.scratch for w in plans)
    if not scratch:
        plans = [replace(w, scratch=False, f16=False) for w in plans]
    nr, nc = register_tile_for(4 if scratch else wbytes, o)
    p.build_names(nr, nc)

    n_out = int_value(cols.stop)
    assert n_out is not None
    jt_w = tile_width(n_out, k, wbytes * len(nest.reds), nc, o)
    exact = n_out % jt_w == 0
    ib, jt, jb = f"{lv}b", f"{cv}t", f"{cv}b"
    invented = {ib, jt, jb, f"{cv}e", *(f"{cv}_c{c}" for c in range(nc))}
    for m in p.names.values():
        invented.update(m.values())
    invented.update(f"{n}_w" for m in p.names.values() for n in m.values())
    if invented & names_in(fn):
        return None
    tile_end: Expr = _add(_v(jt), _c(jt_w)) if exact else _v(f"{cv}e")
    body: list[Stmt] = [] if exact else [Decl(f"{cv}e", I64, _min(_add(_v(jt), _c(jt_w)), _c(n_out)), True,
                                               origin=cols.origin)]
    last_row = _minus1(rows.stop)
    body += [Decl(f"{lv}_{q}", I64, _min(_add(_v(ib), _c(q)), last_row), True, origin=rows.origin) for q in range(nr)]
    row_only = [s for s in pre if id(s) in row_pre]
    for q in range(nr):
        body += [rename(s, p.ren(q, None)) for s in row_only]
    col_exact = exact and jt_w % nc == 0
    last_col = _minus1(tile_end)
    cbody: list[Stmt] = [Decl(f"{cv}_c{c}", I64, _add(_v(jb), _c(c)) if col_exact else _min(_add(_v(jb), _c(c)), last_col),
                              True, origin=cols.origin) for c in range(nc)]
    by_red = {id(w.red): w for w in plans}
    for s in cols.body:
        cbody += _tile_reduction(by_red[id(s)], p, nr, nc) if id(s) in by_red else p.dup(s, nr, nc)
    body.append(For(jb, _v(jt), tile_end, _c(nc), tuple(cbody), cols.role, origin=cols.origin))
    row_loop = For(ib, _c(0), rows.stop, _c(nr), tuple(body), "loop", origin=rows.origin)
    tiles = For(jt, _c(0), _c(n_out), _c(jt_w), (row_loop,), "tile", parallel=_parallel(rows), origin=cols.origin)
    once = tuple(s for s in pre if id(s) not in row_pre)  # read no row: computed once, before the tiles
    return If(Alu("ge", (rows.stop, _c(nr)), DType.bool), (*once, tiles), (rows,), origin=rows.origin)


def _free(s: Stmt, p: _Plan) -> bool:
    """A declaration in the reduction that depends on neither the rows nor the output features."""
    return isinstance(s, Decl) and s.var not in p.row_dep and s.var not in p.col_dep


# --------------------------------------------------------------------------------------- the pass


def rule_rowblock(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    o: RowBlockOptions = ctx.options.get("rowblock", DEFAULTS)
    nest = match(ctx.function, body, i)
    if nest is None:
        return None
    new = block_rows(nest, ctx.function, o)
    return None if new is None else (1, [new])


RULES = (("rowblock", rule_rowblock),)


class RowBlock:
    """Codegen pass: register + cache tiles for the prefill matmuls of ``ctx.artifacts['kernel_ir']``."""

    name = "rowblock"
    description = "prefill matmuls: rows x output-feature register tiles in L2-sized column tiles (seq >= rows)"

    def __init__(self, config: RowBlockOptions | None = None, **kw: Any) -> None:
        self.config = options_from(RowBlockOptions, config, kw, self.name)
        self.options: dict[str, Any] = asdict(self.config)  # what the compile cache keys on

    def run(self, graph: Graph, ctx: Any) -> Graph:
        prog = ctx.artifacts.get("kernel_ir")
        if prog is None:
            raise CompileError("no kernel program in ctx.artifacts['kernel_ir']",
                               hint="run the 'lower' pass before 'rowblock'")
        if not self.config.enabled:
            return graph
        ctx.artifacts["kernel_ir"] = apply_rules(prog, RULES, {"rowblock": self.config}, ctx.rewrites,
                                                 descend_into_new=False)
        return graph

    def __repr__(self) -> str:
        return f"<pass {self.name}: {self.config}>"
