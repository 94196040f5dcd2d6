"""Register and cache tiling of prefill matmuls: a tile of rows x output features per weight read.

A matmul lowered in dot-product form (see :mod:`caten_lab.codegen.hoist`) is

    for i < seq:               pre(i)  (norm statistics, hoisted operands)
        for j < n_out:         acc = 0; for r: acc += a(i, r) * W[j, r];  epilogue(i, j, acc)

and reads all of ``W`` once per row ``i``. When ``seq >= ROWS`` at run time it becomes

    for jt < n_out step JT:                     # a tile of W (JT x K) that stays in L2 ...
        for ib < seq step ROWS:                 # ... while every row block uses it
            i_q = min(ib + q, seq - 1), pre(i_q)           for q < ROWS
            for jb in [jt, min(jt + JT, n_out)) step COLS:
                j_c = min(jb + c, tile end - 1)            for c < COLS
                for r: acc_qc += a_q(r) * W_c(r)           # ROWS x COLS accumulators
                epilogue(i_q, j_c, acc_qc)

Each inner step loads ROWS operand vectors and COLS weight vectors for ROWS * COLS multiply-adds
(the 1-D row blocking did 5 loads per 4), so the loop is bound by arithmetic rather than loads, and
W streams from L3 once per kernel instead of once per ROWS rows. Statements are copied per row,
per column, or per both, by what they depend on; those that depend on neither (a constant) are
emitted once. ``pre`` is recomputed per column tile (cheap next to the tile's dot products). Rows
(columns) past the end are clamped to the last one: recomputed and stored with identical values by
the same iteration. The parallel loop is the (tile, row block) pair (``collapse(2)``), so a kernel
with few tiles still feeds every thread. Decode (``seq < ROWS``) runs the original nest. Each
output's arithmetic is unchanged, so results equal the untiled code.
"""

from __future__ import annotations

import copy
import re

from caten_lab.codegen.lanes import CTYPE_BYTES, contiguous_h2f
from caten_lab.codegen.loopir import Assign, For, FunCall, Function, If, Param, Stmt, walk
from caten_lab.codegen.parallel import if_clause

ROWS = 8  # rows per register tile (float32 weights)
COLS = 2  # output features per register tile (ROWS * COLS accumulators)
ACC_REGS = 16  # vector registers for accumulators: half of AVX-512's 32, the rest hold operands
TILE_BYTES = 384 * 1024  # weight bytes per column tile: fits a 1 MB L2 next to the operand rows
TILE_MAX = 256
ENABLED = True  # switch off to measure what tiling buys
LOWBIT_SCRATCH = True  # low-bit weights: widen each column's row to float once per register tile
SCRATCH_BELOW = 3  # weight bytes below which the buffer is used: int8 and float16 (float16 only through
# cl_h2f_n, the hardware conversion: its bit widening in C cost as much as the 8 rows' multiply-adds)
SCRATCH_MAX = 4096  # longest reduction (K) widened into a stack buffer (16 KB per column)


def _names_in(s: Stmt) -> set[str]:
    """Names declared by ``s`` or anywhere inside it."""
    out: set[str] = set()
    for x in walk([s]):
        if isinstance(x, Assign) and (x.ctype or x.array):
            out.add(x.target)
    return out


def _texts(s: Stmt) -> list[str]:
    out: list[str] = []
    for x in walk([s]):
        if isinstance(x, Assign):
            out += [x.expr, x.index or "", x.target if not x.ctype and not x.array else ""]
        elif isinstance(x, For):
            out += [x.start, x.stop, x.pragma or ""]
        elif isinstance(x, If):
            out.append(x.cond)
    return out


def _renamer(suffix: dict[str, str]):  # noqa: ANN202 - returns a str -> str function
    """Append ``suffix[name]`` to every whole-word occurrence of each name."""
    if not suffix:
        return lambda t: t
    pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, suffix), key=len, reverse=True)) + r")\b")
    return lambda t: pat.sub(lambda m: m.group(1) + suffix[m.group(1)], t) if t else t


def _rename(s: Stmt, ren) -> Stmt:  # noqa: ANN001
    s = copy.deepcopy(s)
    for x in walk([s]):
        if isinstance(x, Assign):
            x.expr, x.target = ren(x.expr), ren(x.target)
            x.index = ren(x.index) if x.index is not None else None
        elif isinstance(x, For):
            x.start, x.stop = ren(x.start), ren(x.stop)
            x.pragma = ren(x.pragma) if x.pragma else x.pragma
        elif isinstance(x, If):
            x.cond = ren(x.cond)
    return s


def _mentions(texts: list[str], names: set[str]) -> bool:
    if not names:
        return False
    pat = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return any(pat.search(t) for t in texts if t)


def _match(fn: Function) -> tuple[For, For, For] | None:
    mains = [s for s in fn.body if isinstance(s, For) and s.role in ("loop", "tile", "collapsed")]
    if len(mains) != 1:
        return None
    rows = mains[0]
    if rows.role != "loop" or rows.stop.isdigit() or rows.step != "1" or not rows.body:
        return None
    cols = rows.body[-1]
    if not isinstance(cols, For) or cols.role != "loop" or not cols.stop.isdigit() or cols.step != "1":
        return None
    if any(isinstance(s, For) and s.role in ("loop", "tile", "collapsed") for s in rows.body[:-1]):
        return None
    reds = [s for s in cols.body if isinstance(s, For)]
    if len(reds) != 1 or any(isinstance(s, If) for s in cols.body):
        return None
    red = reds[0]
    if red.role != "stage" or not (red.pragma or "").startswith("omp simd reduction(+:"):
        return None
    if not all(isinstance(s, Assign) for s in red.body):
        return None
    return rows, cols, red


def _closure(flat: list[Stmt], seed: set[str]) -> set[str]:
    """``seed`` plus every scalar assigned from an expression that mentions a name already in the set."""
    dep = set(seed)
    changed = True
    while changed:
        changed = False
        for s in flat:
            assert isinstance(s, Assign)
            if s.index is None and s.target not in dep and _mentions([s.expr], dep):
                dep.add(s.target)
                changed = True
    return dep


def _weight_bytes(red: For, col_dep: set[str], params: list[Param]) -> int:
    """Bytes per element of the widest buffer read per output feature (the weight) in the reduction."""
    ptypes = {p.name: p.ctype for p in params}
    out = 1
    for s in red.body:
        if isinstance(s, Assign) and s.target in col_dep:
            for name in re.findall(r"\b(p\d+)\b", s.expr):
                out = max(out, 2 if "cl_u16a" in s.expr else CTYPE_BYTES.get(ptypes.get(name, "float"), 4))
    return out


def _register_tile(wbytes: int) -> tuple[int, int]:
    """(rows, columns) of the register tile. gcc vectorizes a loop by its narrowest type, so with
    int8 weights every float accumulator spans 4 vector registers (2 with float16): the tile
    shrinks so the accumulators still fit ACC_REGS (measured: a spilling 8 x 2 int8 tile ran 2.5x slower)."""
    accs = ACC_REGS // (4 // min(max(wbytes, 1), 4))
    cols = COLS if accs >= ROWS * COLS else 1
    return min(ROWS, accs // cols), cols


def widens(wbytes: int, k: str) -> bool:
    """Whether a tiled reduction over ``k`` with ``wbytes``-byte weights widens them into a float buffer."""
    return LOWBIT_SCRATCH and wbytes < SCRATCH_BELOW and k.isdigit() and int(k) <= SCRATCH_MAX


def register_tile(wbytes: int, k: str) -> tuple[int, int]:
    """(rows, columns) of the register tile for ``wbytes``-byte weights and reduction length ``k``."""
    return _register_tile(4 if widens(wbytes, k) else wbytes)


def _tile_width(n_out: int, k: str, wbytes: int, cols: int) -> int:
    """Output features per cache tile: a multiple of ``cols`` whose weight rows fit TILE_BYTES."""
    kk = int(k) if k.isdigit() else 1024
    jt = max(cols, min(TILE_MAX, TILE_BYTES // max(1, kk * wbytes)) // cols * cols)
    return min(jt, -(-n_out // cols) * cols)


def _parallel_cond(rows: For) -> str | None:
    """The work condition of the rows loop's ``omp parallel for`` ('' when unconditional; None when
    serial), without its ``rows >= threads`` term (the tiled loop has enough iterations)."""
    if not (rows.pragma or "").startswith("omp parallel for"):
        return None
    cond = if_clause(rows.pragma or "")
    if cond is None:
        return ""
    terms = [t for t in cond.split(" && ") if not re.fullmatch(re.escape(rows.stop) + r" >= \d+", t)]
    return " && ".join(terms)


def block_rows(fn: Function) -> bool:
    """Rewrite ``fn`` in place when it has the shape above; returns whether it did."""
    m = _match(fn) if ENABLED else None
    if m is None:
        return False
    rows, cols, red = m
    lv, cv = rows.var, cols.var
    pre = rows.body[:-1]
    seed: set[str] = {lv}
    for s in pre:
        seed |= _names_in(s)
    flat = [s for s in cols.body if not isinstance(s, For)] + list(red.body)
    row_dep = _closure(flat, seed)
    col_dep = _closure(flat, {cv})

    def ren(q: int | None, c: int | None):  # noqa: ANN202 - returns a str -> str function
        suffix: dict[str, str] = {}
        for name in row_dep | col_dep:
            rq, cc = name in row_dep, name in col_dep
            if (rq and q is None) or (cc and c is None):
                continue
            suffix[name] = (f"_{q}" if rq else "") + (f"c{c}" if cc and rq else f"_c{c}" if cc else "")
        return _renamer(suffix)

    wbytes = _weight_bytes(red, col_dep, fn.params)
    # statements of the reduction that depend on the output feature only (the weight load, its
    # widening and dequantization): with a low-bit weight they are computed once per column into a
    # float buffer, and the register tile then runs on float32 loads (see _widen)
    col_only = [x for x in red.body if isinstance(x, Assign) and x.ctype and x.target in col_dep
                and x.target not in row_dep]
    scratch = (widens(wbytes, red.stop) and bool(col_only) and all(x.ctype == "float" or x.target not in _used_by(red, col_only)
                                          for x in col_only))
    f16 = scratch and wbytes == 2  # float16: only a plain contiguous load, widened by cl_h2f_n (vcvtph2ps)
    if f16 and not _h2f_chain(col_only, _used_by(red, col_only), red.var):
        scratch = f16 = False
    nr, nc = _register_tile(4 if scratch else wbytes)
    rens = {(q, c): ren(q, c) for q in [None, *range(nr)] for c in [None, *range(nc)]}

    def dup(s: Stmt) -> list[Stmt]:
        texts = _texts(s)
        targets = _names_in(s) | ({s.target} if isinstance(s, Assign) else set())
        rq = bool(targets & row_dep) or _mentions(texts, row_dep)
        cc = bool(targets & col_dep) or _mentions(texts, col_dep)
        if not rq and not cc:
            return [s]
        return [_rename(s, rens[(q, c)]) for q in (range(nr) if rq else [None])
                for c in (range(nc) if cc else [None])]

    n_out = int(cols.stop)
    jt_w = _tile_width(n_out, red.stop, wbytes, nc)
    exact = n_out % jt_w == 0
    ib, jt, jb = f"{lv}b", f"{cv}t", f"{cv}b"
    tile_end = f"{jt} + {jt_w}" if exact else f"{cv}e"
    body: list[Stmt] = [] if exact else [Assign(cols.nodes, tile_end, f"cl_min64({jt} + {jt_w}, {n_out})",
                                                "const int64_t")]
    body += [Assign(rows.nodes, f"{lv}_{q}", f"cl_min64({ib} + {q}, {rows.stop} - 1)", "const int64_t")
             for q in range(nr)]
    for q in range(nr):
        body += [_rename(s, rens[(q, None)]) for s in pre]
    new_red = For(red.nodes, red.var, red.start, red.stop, red.step, [], None, red.role)
    widen: list[Stmt] = []
    if scratch:
        needed = _used_by(red, col_only)
        col_ids = {id(x) for x in col_only}
        for c in range(nc):
            rc = rens[(None, c)]
            if f16:
                hit = contiguous_h2f(rc(col_only[0].expr), red.var)
                assert hit is not None
                buf = rc(col_only[-1].target) + "_w"
                widen.append(Assign(red.nodes, buf, "", "float", array=red.stop))
                widen.append(FunCall(red.nodes, "cl_h2f_n", [f"(const uint16_t *){hit[0]} + ({hit[1]})", buf, red.stop]))
                continue
            # the column-only statements, plus those that depend on neither rows nor columns (a per-r
            # factor such as a vector the weight is multiplied by): they may read those
            conv = For(red.nodes, red.var, red.start, red.stop, red.step,
                       [_rename(x, rc) for x in red.body if id(x) in col_ids or _free(x, row_dep, col_dep)],
                       "omp simd", "vector")
            for t in needed:
                widen.append(Assign(red.nodes, rc(t) + "_w", "", "float", array=red.stop))
                conv.body.append(Assign(red.nodes, rc(t) + "_w", rc(t), index=red.var))
            widen.append(conv)
        for s in red.body:
            if id(s) not in col_ids:
                new_red.body += dup(s)
            elif s.target in needed:
                new_red.body += [Assign(s.nodes, rens[(None, c)](s.target), f"{rens[(None, c)](s.target)}_w[{red.var}]",
                                        s.ctype) for c in range(nc)]
    else:
        for s in red.body:
            new_red.body += dup(s)
    new_red.pragma = "omp simd reduction(+:" + ",".join(
        rens[(q, c)](a) for a in _accs(red) for q in (range(nr) if a in row_dep else [None])
        for c in (range(nc) if a in col_dep else [None])) + ")"
    col_exact = exact and jt_w % nc == 0
    new_cols = For(cols.nodes, jb, jt, tile_end, str(nc), [], None, cols.role)
    new_cols.body = [Assign(cols.nodes, f"{cv}_c{c}", f"{jb} + {c}" if col_exact else
                            f"cl_min64({jb} + {c}, {tile_end} - 1)", "const int64_t") for c in range(nc)]
    for s in cols.body:
        new_cols.body += [*widen, new_red] if s is red else dup(s)
    body.append(new_cols)
    row_loop = For(rows.nodes, ib, "0", rows.stop, str(nr), body, None, "loop")
    cond = _parallel_cond(rows)
    pragma = None if cond is None else f"omp parallel for collapse(2){f' if({cond})' if cond else ''} schedule(static)"
    tiles = For(cols.nodes, jt, "0", str(n_out), str(jt_w), [row_loop], pragma, "tile")
    original = copy.deepcopy(rows)
    i = fn.body.index(rows)
    fn.body[i] = If(rows.nodes, f"{rows.stop} >= {nr}", [tiles], [original])
    return True


def _free(s: Stmt, row_dep: set[str], col_dep: set[str]) -> bool:
    """A declaration in the reduction that depends on neither the rows nor the output features."""
    return isinstance(s, Assign) and bool(s.ctype) and not s.array and s.target not in row_dep \
        and s.target not in col_dep


def _h2f_chain(col_only: list[Assign], needed: list[str], var: str) -> bool:
    """``x0 = cl_h2f(w[off + var]); x1 = (float)x0; ...`` with only the last value read by the reduction."""
    if contiguous_h2f(col_only[0].expr, var) is None or needed != [col_only[-1].target]:
        return False
    return all(x.expr == f"((float)({p.target}))" for p, x in zip(col_only, col_only[1:]))


def _used_by(red: For, col_only: list[Assign]) -> list[str]:
    """Targets of ``col_only`` that the other statements of the reduction read."""
    ids = {id(x) for x in col_only}
    rest = [x.expr for x in red.body if isinstance(x, Assign) and id(x) not in ids]
    rest += [x.index or "" for x in red.body if isinstance(x, Assign) and id(x) not in ids]
    return [x.target for x in col_only if _mentions(rest, {x.target})]


def _accs(red: For) -> list[str]:
    return (red.pragma or "")[len("omp simd reduction(+:"):-1].split(",")
