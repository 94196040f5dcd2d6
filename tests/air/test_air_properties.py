"""Property-based tests (hypothesis): indices stay exact under random edits; JSON round-trips.

The default example counts keep the suite fast; the @slow variants run more examples and longer
edit sequences, sized by CATEN_SLOW_SCALE (default 1 = the reduced CI size).
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from caten_lab.air import Graph, Sym, dtypes, dumps, interpret, loads, make_node, to_json
from caten_lab.air.graph import graph_from_nodes


def slow_scale() -> int:
    """Multiplier for the @slow variants: CATEN_SLOW_SCALE (default 1 = the reduced CI size)."""
    try:
        return max(1, int(os.environ.get("CATEN_SLOW_SCALE", "1")))
    except ValueError:
        return 1


FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=40 * slow_scale(), deadline=None, suppress_health_check=[HealthCheck.too_slow])

SHAPE = (3,)
UNARY = ["neg", "sin", "exp2"]
BINARY = ["add", "mul", "max"]


def assert_indices_exact(g: Graph) -> None:
    """verify(), then compare every index with one rebuilt from scratch from the node list."""
    g.verify()
    fresh = Graph()
    for n in g.nodes:
        fresh.add(n)  # add() derives the indices from the node alone
    assert fresh._nodes == g._nodes
    assert fresh._producer.keys() == g._producer.keys()
    assert all(fresh._producer[v] is g._producer[v] for v in g._producer)
    assert fresh._users.keys() == g._users.keys()  # no stale or missing entries
    for v in set(g._producer) | set(g._users):
        assert fresh.use_counts(v) == g.use_counts(v), v
        assert sorted(n.id for n in g.users_of(v)) == sorted(fresh.use_counts(v)), v
        assert g.n_users(v) == len(fresh.use_counts(v)) + (v in g.outputs)
    for n in g.nodes:
        assert g.node(n.id) is n and g.producer_of(n.out) is n


def _earlier_values(g: Graph, before_id: int) -> list[str]:
    """Values whose producer id is smaller: reading only those keeps the graph acyclic."""
    return [n.out for n in g.nodes if n.id < before_id]


def random_edits(data, g: Graph, steps: int) -> None:
    """Apply ``steps`` random mutations to ``g``, checking the indices after each one."""
    for _ in range(steps):
        nodes = g.nodes
        values = [n.out for n in nodes]
        kind = data.draw(
            st.sampled_from(
                [
                    "insert",
                    "insert",
                    "insert",
                    "replace_uses",
                    "remove",
                    "set_read",
                    "replace_node",
                    "prune",
                    "sort",
                    "mark_output",
                    "copy",
                ]
            )  # fmt: skip
        )
        if kind == "insert" or not values:
            if not values or data.draw(st.integers(0, 9)) == 0:
                g.insert("allocate", [], shape=SHAPE, dtype=dtypes.float32, name=f"in{len(g)}")
            elif data.draw(st.booleans()):
                g.insert(data.draw(st.sampled_from(UNARY)), [data.draw(st.sampled_from(values))])
            else:
                a = data.draw(st.sampled_from(values))
                b = data.draw(st.one_of(st.sampled_from(values), st.floats(-2, 2, allow_nan=False)))
                g.insert(data.draw(st.sampled_from(BINARY)), data.draw(st.permutations([a, b])))
        elif kind == "replace_uses":
            old = g.producer_of(data.draw(st.sampled_from(values)))
            earlier = _earlier_values(g, old.id)
            if earlier:
                g.replace_uses(old.out, data.draw(st.sampled_from(earlier)), outputs=data.draw(st.booleans()))
        elif kind == "remove":
            unused = [n for n in nodes if g.n_users(n.out) == 0]
            if unused:
                g.remove(data.draw(st.sampled_from(unused)).id)
        elif kind == "set_read":
            readers = [n for n in nodes if n.reads]
            if readers:
                n = data.draw(st.sampled_from(readers))
                i = data.draw(st.integers(0, len(n.reads) - 1))
                earlier = _earlier_values(g, n.id)
                other_is_value = any(isinstance(r, str) for j, r in enumerate(n.reads) if j != i)
                if other_is_value and data.draw(st.booleans()):
                    g.set_read(n, i, data.draw(st.floats(-1, 1, allow_nan=False)))
                elif earlier:
                    g.set_read(n, i, data.draw(st.sampled_from(earlier)))
        elif kind == "replace_node":
            target = data.draw(st.sampled_from(nodes))
            earlier = _earlier_values(g, target.id)
            if earlier:
                reads = [data.draw(st.sampled_from(earlier))]
                op = data.draw(st.sampled_from(UNARY + BINARY))
                if op in BINARY:
                    reads.append(data.draw(st.one_of(st.sampled_from(earlier), st.just(0.5))))
                new = make_node(op, reads, {}, writes=(), read_types=[g.type_of(r) for r in reads])
                g.replace_node(target.id, new)
        elif kind == "prune":
            live = g._live_nodes_dfs()  # the reference: a search from the outputs
            removed: list[int] = []
            g.prune(removed)
            assert {n.id for n in g.nodes} == live and not live & set(removed)
        elif kind == "sort":
            g.sort()
            order = {n.out: i for i, n in enumerate(g.nodes)}
            assert all(order[r] < order[n.out] for n in g.nodes for r in n.value_reads())
        elif kind == "mark_output":
            g.mark_output(data.draw(st.sampled_from(values)))
        elif kind == "copy":
            h = g.copy()
            assert_indices_exact(h)
            assert h.structural_key() == g.structural_key()
        assert_indices_exact(g)


@FAST
@given(st.data())
def test_random_edits_keep_indices_exact(data):
    g = Graph()
    random_edits(data, g, data.draw(st.integers(1, 30)))
    reversed_copy = graph_from_nodes(reversed(g.nodes), g.outputs)
    assert_indices_exact(reversed_copy)
    assert reversed_copy.structural_key() == g.structural_key()


@pytest.mark.slow
@SLOW
@given(st.data())
def test_random_edits_keep_indices_exact_long(data):
    g = Graph()
    random_edits(data, g, data.draw(st.integers(20, 60 * slow_scale())))


# ---- JSON round trip of random graphs ----------------------------------------------------------

N = Sym("n")
S = (N, 3)  # every pooled value has this symbolic shape
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from([0.0, -0.0, 1.0, float("nan"), float("inf"), float("-inf")]),
)


def random_graph(data, size: int) -> Graph:
    g = Graph()
    pool = [g.insert("allocate", [], shape=S, dtype=dtypes.float32, name="x", source="prop.py:1")]
    for _ in range(size):
        kind = data.draw(
            st.sampled_from(["unary", "binary", "literal", "where", "cast", "reduce", "pad", "flip", "store",
                             "const", "index", "input"])
        )  # fmt: skip
        a = data.draw(st.sampled_from(pool))
        if kind == "unary":
            v = g.insert(data.draw(st.sampled_from(["neg", "sin", "sqrt", "exp2", "log2", "recip"])), [a])
        elif kind == "binary":
            v = g.insert(data.draw(st.sampled_from(BINARY)), [a, data.draw(st.sampled_from(pool))])
        elif kind == "literal":
            v = g.insert(
                data.draw(st.sampled_from(BINARY)), data.draw(st.permutations([a, data.draw(FLOATS)]))
            )
        elif kind == "where":
            cond = g.insert("lt", [a, data.draw(FLOATS)])
            v = g.insert("where", [cond, data.draw(st.sampled_from(pool)), data.draw(FLOATS)])
        elif kind == "cast":
            dt = data.draw(st.sampled_from([dtypes.int32, dtypes.float16, dtypes.float64, dtypes.int8]))
            v = g.insert("cast", [g.insert("cast", [a], dtype=dt)], dtype=dtypes.float32)
        elif kind == "reduce":
            r = g.insert("reduce", [a], op=data.draw(st.sampled_from(["add", "max"])), axes=(1,))
            v = g.insert("view", [r], shape=S, strides=(1, 0))
        elif kind == "pad":
            p = g.insert("view", [a], shape=(N + 2, 3), strides=(3, 1), offset=-3, mask=((1, N + 1), (0, 3)))
            v = g.insert("view", [p], shape=S, strides=(3, 1), offset=data.draw(st.sampled_from([0, 3, 6])))
        elif kind == "flip":
            v = g.insert("view", [a], shape=S, strides=(-3, 1), offset=3 * N - 3)
        elif kind == "store":
            col = g.insert("reduce", [data.draw(st.sampled_from(pool))], op="max", axes=(1,))  # (n, 1)
            v = g.insert("store", [a, col], shape=(N, 1), strides=(3, 1), offset=1)
        elif kind == "const":
            value = data.draw(st.one_of(FLOATS, st.integers(-5, 5), st.just(N * 2 - 1)))
            v = g.insert("const", [], value=value, shape=S, dtype=dtypes.float32)
        elif kind == "index":
            v = g.insert("index", [], shape=S, axis=data.draw(st.integers(0, 1)), dtype=dtypes.float32)
        else:
            v = g.insert("allocate", [], shape=S, dtype=dtypes.float32, name=f"in{len(pool)}")
        pool.append(v)
    for v in data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique=True)):
        g.mark_output(v)
    return g


def _same_arrays(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal shape, dtype and values; NaNs equal (JSON keeps NaN, not its sign/payload bits), 0.0 != -0.0."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    nan = np.isnan(a)
    return bool(
        np.array_equal(nan, np.isnan(b))
        and np.array_equal(np.signbit(a[~nan]), np.signbit(b[~nan]))
        and np.array_equal(a[~nan], b[~nan])
    )


def check_round_trip(g: Graph) -> None:
    text = dumps(g)
    h = loads(text)
    assert h.structural_key() == g.structural_key()
    assert h.structural_hash() == g.structural_hash()
    assert h.dump().replace("nan", "NAN") == g.dump().replace("nan", "NAN")
    assert dumps(h) == text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert_indices_exact(h)
    inputs = {n.attrs.name: np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3) for n in g.inputs()}
    with np.errstate(all="ignore"):
        for a, b in zip(interpret(g, inputs, {"n": 2}), interpret(h, inputs, {"n": 2})):
            assert _same_arrays(a, b)


@FAST
@given(st.data())
def test_random_graphs_round_trip_through_json(data):
    check_round_trip(random_graph(data, data.draw(st.integers(1, 25))))


@pytest.mark.slow
@SLOW
@given(st.data())
def test_random_graphs_round_trip_through_json_large(data):
    check_round_trip(random_graph(data, data.draw(st.integers(20, 80 * slow_scale()))))


def test_edited_graphs_round_trip_too():
    g = Graph()
    x = g.insert("allocate", [], shape=SHAPE, dtype=dtypes.float32, name="x")
    a = g.insert("add", [x, math.inf])
    b = g.insert("mul", [a, -0.0])
    g.replace_uses(a, x)
    g.mark_output(b)
    g.remove(g.producer_of(a).id)
    check = loads(dumps(g))
    assert check.structural_key() == g.structural_key() and to_json(check) == to_json(g)
