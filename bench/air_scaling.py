"""How AIR graph operations scale with graph size (the issue-2 benchmark).

Builds two kinds of graph at sizes 10^3 .. 10^6 nodes and times, per operation, the whole-graph
cost divided by the node count (microseconds per node):

- ``chain``: one long dependency chain of elementwise ops (deepest possible graph).
- ``transformer``: a transformer-shaped DAG: per layer an RMS-norm-like block (reductions, stride-0
  broadcast views), q/k/v projections fanning out from one value, a softmax-like reduce-max/exp2
  block, a residual add, and a few identity ops (x*1, x+0, neg(neg x)) and dead branches.

Operations: ``insert`` (building it), ``users_of`` (every value once), ``replace_uses`` (forward
every identity node's users to its operand), ``toposort`` (of a copy whose nodes are in reverse
order: the worst case for the DFS), ``prune`` (after replace_uses, so there is work), ``verify``
and ``rewrite`` (one rewriter sweep to a fixed point with a few algebraic rules).

Each time is this process's CPU time (``time.process_time``: on a shared machine, wall time mostly
measures the other tenants), the minimum over interleaved rounds, with the garbage collector paused
(as ``timeit`` does), so the numbers measure the algorithms, not the collector; ``--gc`` keeps the
collector running.
The growth exponent of each operation is the least-squares slope of log(time) over log(size):
1.0 is linear. Reference rows, not part of the verdict, show what the memory hierarchy alone adds
as the data outgrows the caches: ``node_walk`` visits every node once and touches its operand list
(the floor of any whole-graph pass), ``dead_walk`` (on a second graph, so it warms nothing for
``prune``) finds each node prune would remove through the value -> producer index and looks up the
users entry of each of its operands (the memory any prune that keeps the indices exact must touch:
scattered, so it grows with the cache misses that ``prune`` pays), and the ``baseline`` rows do one dict lookup per node keyed
by value ids as they are (``value_lookup``, int-like ``Value``) and as they were (``str_lookup``,
"v123" strings, whose randomized hashes scatter sequential ids over the table).

By default each operation runs as it would in a compile pipeline: right after the previous one, so
a small graph is still in the CPU caches and a big one is not, and the exponents include that step
(L2 holds a ~2,000-node graph here, L3 ~60,000). ``--cold`` evicts the caches before every timed
operation, so every size starts from memory: the exponents then isolate the algorithms (with a
slight downward bias: a short run pays its cold start over fewer nodes).

``--quick`` runs 10^3..10^5 nodes in 3 rounds plus two rounds at 10^6 nodes (every operation but
the rewriter sweep and ``dead_walk``); the full run does everything up to 10^6 nodes.

Usage: python bench/air_scaling.py [--quick] [--cold] [--json PATH] [--gc] [--sizes 1000,10000,...]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from caten_lab.air import Graph, Pat, Rewriter, Rule, Value, dtypes, is_value  # noqa: E402
from caten_lab.air.graph import graph_from_nodes  # noqa: E402

OPERATIONS = ("insert", "users_of", "replace_uses", "toposort", "prune", "verify", "rewrite")
BIG_OPERATIONS = ("insert", "toposort", "prune")  # the 10^6-node headline numbers
QUICK_BIG_ROUNDS = 2  # --quick: rounds at 10^6 nodes (best of 2, like the best of 3 at the smaller sizes)
# no rewrite sweep and no dead_walk (each needs a second 10^6-node graph) at 10^6 nodes in --quick
QUICK_BIG_OPERATIONS = ("insert", "users_of", "replace_uses", "toposort", "prune", "verify", "node_walk")
REFERENCE_OPERATIONS = ("node_walk", "dead_walk")
BASELINE_OPERATIONS = ("value_lookup", "str_lookup")
GRAPH_OPERATIONS = (
    ("chain", OPERATIONS + REFERENCE_OPERATIONS),
    ("transformer", OPERATIONS + REFERENCE_OPERATIONS),
    ("baseline", BASELINE_OPERATIONS),
)

# ---- graph builders ------------------------------------------------------------------------


def build_chain(n: int) -> Graph:
    """A chain of ~n elementwise nodes; every 8th is an identity (x*1 or x+0) for the rewriter."""
    g = Graph()
    x = g.insert("allocate", [], shape=(4, 8), dtype=dtypes.float32, name="x")
    i = 1
    while i < n:
        k = i % 8
        if k == 3:
            x = g.insert("mul", [x, 1.0])
        elif k == 7:
            x = g.insert("add", [x, 0.0])
        elif k % 2:
            x = g.insert("add", [x, 0.5])
        else:
            x = g.insert("mul", [x, 0.75])
        i += 1
    g.mark_output(x)
    return g


B, T, D = 2, 8, 16


def _bcast(g: Graph, v: str, shape: tuple, strides: tuple) -> str:
    return g.insert("view", [v], shape=shape, strides=strides)


def _layer(g: Graph, h: str, layer: int) -> str:
    """One transformer-shaped block (~60 nodes)."""
    full = (B, T, D)
    # RMS-norm-ish: mean of squares over D, broadcast back with a stride-0 view
    sq = g.insert("mul", [h, h])
    ss = g.insert("reduce", [sq], op="add", axes=(2,))
    ms = g.insert("mul", [ss, 1.0 / D])
    eps = g.insert("add", [ms, 1e-5])
    inv = g.insert("recip", [g.insert("sqrt", [eps])])
    invb = _bcast(g, inv, full, (T, 1, 0))
    xn = g.insert("mul", [h, invb])
    gain = g.insert("allocate", [], shape=(D,), dtype=dtypes.float32, name=f"ln{layer}")
    xn = g.insert("mul", [xn, _bcast(g, gain, full, (0, 0, 1))])
    xn = g.insert("mul", [xn, 1.0])  # identity (rewriter / replace_uses fodder)
    # q, k, v fan out from xn (elementwise stand-ins for projections)
    heads = []
    for name in ("q", "k", "v"):
        w = g.insert("allocate", [], shape=(D,), dtype=dtypes.float32, name=f"{name}{layer}")
        p = g.insert("mul", [xn, _bcast(g, w, full, (0, 0, 1))])
        heads.append(g.insert("add", [p, 0.0]))  # identity
    q, k, v = heads
    # scores and a softmax over D (reduce-max, exp2, reduce-add, recip)
    s = g.insert("mul", [q, k])
    mx = g.insert("reduce", [s], op="max", axes=(2,))
    e = g.insert("exp2", [g.insert("add", [s, g.insert("neg", [_bcast(g, mx, full, (T, 1, 0))])])])
    den = g.insert("reduce", [e], op="add", axes=(2,))
    p = g.insert("mul", [e, _bcast(g, g.insert("recip", [den]), full, (T, 1, 0))])
    att = g.insert("mul", [p, v])
    # a reversed (negative stride) view and a padded (masked) view, summed back
    rev = g.insert("view", [att], shape=full, strides=(T * D, D, -1), offset=D - 1)
    pad = g.insert("view", [att], shape=full, strides=(T * D, D, 1), mask=((0, B), (0, T), (0, D)))
    o = g.insert("add", [rev, pad])
    o = g.insert("neg", [g.insert("neg", [o])])  # double negation (rewriter fodder)
    # MLP-ish: max(x, 0) with a cast round trip, and a dead branch nobody reads
    m = g.insert("max", [o, 0.0])
    m = g.insert("cast", [g.insert("cast", [m], dtype=dtypes.float64)], dtype=dtypes.float32)
    g.insert("sin", [m])  # dead
    g.insert("lt", [m, 0.25])  # dead
    return g.insert("add", [h, m])  # residual


def build_transformer(n: int) -> Graph:
    g = Graph()
    h = g.insert("allocate", [], shape=(B, T, D), dtype=dtypes.float32, name="x")
    layer = 0
    while len(g) < n:
        h = _layer(g, h, layer)
        layer += 1
    g.mark_output(h)
    return g


BUILDERS: dict[str, Callable[[int], Graph]] = {"chain": build_chain, "transformer": build_transformer}

# ---- the algebraic rules of the rewriter sweep ---------------------------------------------

RULES = [
    Rule("x*1 -> x", Pat("mul", ["x", 1.0], commutative=True), lambda m: m["x"]),
    Rule("x+0 -> x", Pat("add", ["x", 0.0], commutative=True), lambda m: m["x"]),
    Rule("neg(neg(x)) -> x", Pat("neg", [Pat("neg", ["x"])]), lambda m: m["x"]),
    Rule("recip(recip(x)) -> x", Pat("recip", [Pat("recip", ["x"])]), lambda m: m["x"]),
    Rule("x*0 -> 0", Pat("mul", ["x", 0.0], commutative=True), lambda m: 0.0),
]

# ---- timing -----------------------------------------------------------------------------------


# The ">=1e5" column fits only the sizes whose graph is larger than this machine's 32 MB L3 (a
# 10^5-node graph takes ~50 MB): every point is then equally cold, so the column shows the growth
# the algorithms add once the cache step is behind them. The verdict keeps the full 10^3..10^6 fit.
TAIL_MIN_NODES = 80_000

EVICT_BYTES = 64 << 20  # twice this machine's 32 MB L3
_evict_buffer: list[np.ndarray] = []  # set by --cold


def _evict_caches() -> None:
    """Stream through a buffer larger than the last-level cache, so the timed code starts cold."""
    for buf in _evict_buffer:
        np.add(buf, 1.0, out=buf)


def _timed(fn: Callable[[], object], keep_gc: bool) -> float:
    _evict_caches()
    enabled = gc.isenabled()
    if not keep_gc:
        gc.disable()
    try:
        t0 = time.process_time()
        fn()
        return time.process_time() - t0
    finally:
        if enabled:
            gc.enable()


def _identity_nodes(g: Graph) -> list[tuple[str, str]]:
    """(value, operand) of every x*1 / x+0 node: replace_uses forwards the first to the second."""
    out = []
    for node in g.nodes:
        if node.op in ("mul", "add") and len(node.reads) == 2 and is_value(node.reads[0]):
            lit = node.reads[1]
            if lit.__class__ is float and (
                (node.op == "mul" and lit == 1.0) or (node.op == "add" and lit == 0.0)
            ):
                out.append((node.out, node.reads[0]))
    return out


def measure_once(kind: str, n: int, ops: tuple[str, ...], keep_gc: bool) -> tuple[int, dict[str, float]]:
    """One timing of each operation in ``ops`` on a fresh ``kind`` graph of ~n nodes (seconds)."""
    build = BUILDERS[kind]
    times: dict[str, float] = {}
    gc.collect()
    box: list[Graph] = []
    t = _timed(lambda: box.append(build(n)), keep_gc)
    g = box.pop()
    nodes = len(g)
    if "insert" in ops:
        times["insert"] = t
    if "node_walk" in ops:
        times["node_walk"] = _timed(lambda g=g: _walk(g), keep_gc)
    if "users_of" in ops:
        values = [node.out for node in g.nodes]

        def query(users_of: Callable[[str], list] = g.users_of) -> None:
            for v in values:  # each answer is dropped at once: measure the query, not a growing list
                users_of(v)

        times["users_of"] = _timed(query, keep_gc)
        del values
    if "replace_uses" in ops or "prune" in ops:
        pairs = _identity_nodes(g)

        def forward(replace_uses: Callable[[str, str], int] = g.replace_uses) -> None:
            for old, new in pairs:
                replace_uses(old, new)

        t = _timed(forward, keep_gc)
        if "replace_uses" in ops:
            times["replace_uses"] = t
    if "toposort" in ops:
        rev = graph_from_nodes(reversed(g.nodes), g.outputs)
        times["toposort"] = _timed(rev.toposort, keep_gc)
        del rev
    if "prune" in ops:
        times["prune"] = _timed(g.prune, keep_gc)
    if "verify" in ops:
        times["verify"] = _timed(g.verify, keep_gc)
    del g
    if "dead_walk" in ops:
        times["dead_walk"] = _time_dead_walk(build(n), keep_gc)
    if "rewrite" in ops:
        g2 = build(n)
        rw = Rewriter(RULES)
        times["rewrite"] = _timed(lambda: rw.run(g2), keep_gc)
        del g2
    return nodes, times


def _time_dead_walk(g: Graph, keep_gc: bool) -> float:
    """Time ``dead_walk`` on ``g`` set up as ``prune`` finds its graph (identities forwarded)."""
    for old, new in _identity_nodes(g):
        g.replace_uses(old, new)
    live = g.live_nodes()
    dead = [n.out for n in g.nodes if n.id not in live]
    producer, users = g._producer, g._users

    def walk() -> None:
        for v in dead:
            for r in producer[v].reads:
                if r.__class__ is Value:
                    users.get(r)

    return _timed(walk, keep_gc)


def _walk(g: Graph) -> None:
    """Visit every node once, touching its operands: what any whole-graph pass does at the least."""
    for node in g:
        for r in node.reads:
            r.__class__  # noqa: B018


def measure_baseline(n: int) -> dict[str, float]:
    """One dict lookup per node, keyed by value ids as they are (``Value``) and as "v123" strings.

    Their growth with n is the memory hierarchy (caches, TLB), not an algorithm: the str row is why
    value ids are int-like (see caten_lab/air/value.py).
    """
    gc.collect()
    out = {}
    for name, keys in (("value_lookup", [Value(i) for i in range(n)]), ("str_lookup", [f"v{i}" for i in range(n)])):
        table = {k: None for k in keys}

        def walk(keys: list = keys, get: Callable = table.get) -> None:
            for k in keys:
                get(k)

        out[name] = _timed(walk, False)
        del table, keys
    return out


def fit_exponent(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(seconds) against log(nodes)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(max(t, 1e-9)) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")


def _fmt_size(n: int) -> str:
    e = math.log10(n)
    return f"1e{round(e)}" if abs(e - round(e)) < 1e-9 else str(n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick", action="store_true", help="10^3..10^5, and 10^6 (two rounds, no rewrite); < 1 min of CPU"
    )
    ap.add_argument("--json", metavar="PATH", help="write {exponents, sizes, rows} as JSON")
    ap.add_argument("--gc", action="store_true", help="keep the garbage collector running while timing")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="evict the CPU caches before every timed operation (every size starts from DRAM)",
    )
    ap.add_argument("--sizes", help="comma-separated node counts (overrides the defaults)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds; each cell is the best of N")
    args = ap.parse_args(argv)
    if args.cold:
        _evict_buffer[:] = [np.zeros(EVICT_BYTES // 4, np.float32)]

    if args.sizes:
        sizes = [int(s) for s in args.sizes.split(",")]
    else:
        sizes = [10**3, 10**4, 10**5, 10**6]
    big = 10**6 if args.quick and not args.sizes else None

    # Rounds interleave every (graph, size) pair, so a burst of load from other processes on this
    # shared machine hits all sizes alike; each cell keeps its best (minimum) time over the rounds.
    best: dict[tuple[str, int], dict[str, float]] = {}
    node_counts: dict[tuple[str, int], int] = {}
    t_start = time.perf_counter()
    for rnd in range(args.repeats):
        for n in sizes:
            if big is None or n < big or rnd < QUICK_BIG_ROUNDS:
                cell = best.setdefault(("baseline", n), {})
                for op, t in measure_baseline(n).items():
                    cell[op] = min(cell.get(op, math.inf), t)
                node_counts["baseline", n] = n
        for kind in BUILDERS:
            for n in sizes:
                if big is not None and n >= big and rnd >= QUICK_BIG_ROUNDS:
                    continue  # --quick: fewer rounds at 10^6 nodes
                big_quick = big is not None and n >= big
                ops = QUICK_BIG_OPERATIONS if big_quick else OPERATIONS + REFERENCE_OPERATIONS
                nodes, times = measure_once(kind, n, ops, args.gc)
                node_counts[kind, n] = nodes
                cell = best.setdefault((kind, n), {})
                for op, t in times.items():
                    cell[op] = min(cell.get(op, math.inf), t)
                print(
                    f"  round {rnd + 1}/{args.repeats}: {kind:<11} n={_fmt_size(n):<5} ({nodes} nodes) "
                    f"{time.perf_counter() - t_start:6.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
    rows: list[dict] = []
    for kind, op_names in GRAPH_OPERATIONS:
        for n in sizes:
            if (kind, n) not in best:
                continue
            nodes = node_counts[kind, n]
            for op in op_names:
                if op in best[kind, n]:
                    t = best[kind, n][op]
                    rows.append(
                        {
                            "graph": kind,
                            "operation": op,
                            "size": n,
                            "nodes": nodes,
                            "seconds": t,
                            "us_per_node": t / nodes * 1e6,
                        }
                    )

    by_graph: dict[str, dict[str, float]] = {}
    tail_by_graph: dict[str, dict[str, float]] = {}
    exponents: dict[str, float] = {}
    tail_exponents: dict[str, float] = {}
    for kind, op_names in GRAPH_OPERATIONS:
        by_graph[kind] = {}
        tail_by_graph[kind] = {}
        for op in op_names:
            pts = [(r["nodes"], r["seconds"]) for r in rows if r["graph"] == kind and r["operation"] == op]
            verdict = kind != "baseline" and op not in REFERENCE_OPERATIONS
            if len(pts) >= 2:
                e = fit_exponent(pts)
                by_graph[kind][op] = e
                if verdict:
                    exponents[op] = max(exponents.get(op, -math.inf), e)
            tail = [(n, t) for n, t in pts if n >= TAIL_MIN_NODES]
            if len(tail) >= 2:
                e = fit_exponent(tail)
                tail_by_graph[kind][op] = e
                if verdict:
                    tail_exponents[op] = max(tail_exponents.get(op, -math.inf), e)

    print(
        f"\nAIR scaling: CPU microseconds per node (best of {args.repeats} rounds; "
        f"gc {'on' if args.gc else 'paused'}; caches {'evicted before each operation' if args.cold else 'warm'})"
    )
    head = (
        f"{'graph':<12}{'operation':<14}"
        + "".join(f"{_fmt_size(n):>10}" for n in sizes)
        + f"{'exponent':>10}"
        + f"{'>=1e5':>8}"
    )
    print(head)
    print("-" * len(head))
    for kind, op_names in GRAPH_OPERATIONS:
        for op in op_names:
            cells = []
            for n in sizes:
                r = next(
                    (r for r in rows if r["graph"] == kind and r["operation"] == op and r["size"] == n), None
                )
                cells.append(f"{r['us_per_node']:>10.3f}" if r else f"{'-':>10}")
            e = by_graph[kind].get(op)
            tail = tail_by_graph[kind].get(op)
            print(
                f"{kind:<12}{op:<14}"
                + "".join(cells)
                + (f"{e:>10.3f}" if e is not None else f"{'-':>10}")
                + (f"{tail:>8.3f}" if tail is not None else f"{'-':>8}")
            )
    print("\nworst exponent per operation: " + ", ".join(f"{k} {v:.3f}" for k, v in exponents.items()))
    if tail_exponents:
        print(
            "worst exponent past the caches (sizes >= 1e5 only, not the verdict): "
            + ", ".join(f"{k} {v:.3f}" for k, v in tail_exponents.items())
        )
    reference = {f"{kind}/{op}": by_graph[kind][op] for kind, ops in GRAPH_OPERATIONS for op in ops
                 if op in by_graph[kind] and (kind == "baseline" or op in REFERENCE_OPERATIONS)}
    if reference:
        print("reference rows (the memory hierarchy alone, not in the verdict): "
              + ", ".join(f"{k} {v:.3f}" for k, v in reference.items()))
    for kind in BUILDERS:
        top = max(sizes)
        secs = {r["operation"]: r["seconds"] for r in rows if r["graph"] == kind and r["size"] == top}
        if all(k in secs for k in BIG_OPERATIONS):
            print(
                f"{kind} at {_fmt_size(top)} nodes: build {secs['insert']:.2f} s, "
                f"toposort {secs['toposort']:.2f} s, prune {secs['prune']:.2f} s (CPU)"
            )
    worst = max(exponents.values(), default=float("nan"))
    print(
        f"all exponents <= 1.1: {'yes' if worst <= 1.1 else 'NO'} (worst {worst:.3f}); "
        f"total bench time {time.perf_counter() - t_start:.1f} s"
    )

    if args.json:
        out = {
            "exponents": exponents,
            "exponents_by_graph": by_graph,
            "tail_exponents": tail_exponents,
            "tail_min_nodes": TAIL_MIN_NODES,
            "reference_exponents": reference,
            "clock": "process_time",
            "sizes": sizes,
            "rows": rows,
            "gc": "on" if args.gc else "paused",
            "caches": "cold" if args.cold else "warm",
        }
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
