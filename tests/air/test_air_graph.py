"""Graph: mutations keep the indices exact; toposort, prune, verify, copy, structural keys, dump, DOT."""

from __future__ import annotations

import pytest

from caten_lab.air import Graph, Node, Value, dtypes, make_node, to_dot
from caten_lab.air.graph import graph_from_nodes
from caten_lab.errors import AirError


def _users(g: Graph, v: str) -> list[int]:
    return sorted(n.id for n in g.users_of(v))


def _diamond(g: Graph):
    x = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="x")
    a = g.insert("exp2", [x])
    b = g.insert("sin", [x])
    c = g.insert("add", [a, b])
    g.mark_output(c)
    return x, a, b, c


def test_insert_indexes_everything(g):
    x, a, b, c = _diamond(g)
    nx, na, nb, nc = (g.producer_of(v) for v in (x, a, b, c))
    assert [n.id for n in g.nodes] == [nx.id, na.id, nb.id, nc.id]
    assert list(g) == g.nodes and len(g) == 4
    assert g.node(na.id) is na and g.has_node(na.id) and not g.has_node(-1)
    assert _users(g, x) == sorted([na.id, nb.id]) and _users(g, c) == []
    assert g.n_users(x) == 2 and g.n_users(c) == 1  # the output counts as a use
    assert g.type_of(c) == ((4,), dtypes.float32) and g.type_of(1.0) is None
    assert [n.out for n in g.inputs()] == [x]
    assert c == Value(nc.id) and str(c) == repr(c) == f"{c}" == f"v{nc.id}"
    assert c != nc.id and nc.id != c and Value.parse(str(c)) == c  # never equal to a plain int literal
    with pytest.raises(AirError, match="no node with id"):
        g.node(-5)
    with pytest.raises(AirError, match="not defined"):
        g.type_of("v-2")
    with pytest.raises(AirError, match="'nope' is not a value id"):
        g.type_of("nope")
    assert g.producer_of(str(c)) is nc and g.users_of(str(x)) == g.users_of(x)  # printed ids work too


def test_a_node_reading_the_same_value_twice_counts_twice(g, fx):
    sq = g.insert("mul", [fx, fx])
    g.mark_output(sq)
    assert g.use_counts(fx) == {g.producer_of(sq).id: 2}
    g.set_read(g.producer_of(sq), 0, 3.0)
    assert g.use_counts(fx) == {g.producer_of(sq).id: 1}
    g.verify()


def test_add_rejects_duplicates(g, fx):
    n = g.producer_of(fx)
    with pytest.raises(AirError, match="already in the graph"):
        g.add(n)
    dup = Node("neg", (fx,), [fx], n.attrs, n.dtype, n.shape)
    with pytest.raises(AirError, match="already written"):
        g.add(dup)


def test_remove_refused_while_used_or_output(g):
    x, a, b, c = _diamond(g)
    with pytest.raises(AirError) as e:
        g.remove(g.producer_of(x).id)
    assert "still used" in str(e.value) and "replace_uses" in str(e.value)
    with pytest.raises(AirError, match="graph outputs"):
        g.remove(g.producer_of(c).id)
    g.verify()
    d = g.insert("neg", [a])
    g.remove(g.producer_of(d).id)  # unused: fine
    assert g.producer_of(d) is None and _users(g, a) == [g.producer_of(c).id]
    g.verify()


def test_forced_removal_then_prune_leaves_no_stale_index(g):
    x = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="x")
    a = g.insert("neg", [x])
    b = g.insert("neg", [a])
    out = g.insert("sin", [x])
    g.mark_output(out)
    g.remove(g.producer_of(a).id, force=True)  # b now reads an undefined value
    with pytest.raises(AirError, match="which no node writes"):
        g.verify()
    g.remove(g.producer_of(b).id)
    g.verify()
    assert a not in g._users and b not in g._users


def test_replace_uses_moves_users_and_outputs(g):
    x, a, b, c = _diamond(g)
    na, nb, nc = g.producer_of(a), g.producer_of(b), g.producer_of(c)
    g.mark_output(a)
    assert g.replace_uses(a, b) == 1
    assert nc.reads == [b, b] and _users(g, a) == [] and _users(g, b) == [nc.id]
    assert g.use_counts(b) == {nc.id: 2}
    assert g.outputs == [c, b]
    g.verify()
    g.remove(na.id)
    g.verify()
    # literals replace reads, not outputs; outputs=False keeps outputs untouched
    assert g.replace_uses(b, 0.5, outputs=False) == 2 and nc.reads == [0.5, 0.5]
    assert g.outputs == [c, b] and g.n_users(b) == 1
    g.verify()
    assert g.replace_uses(b, b) == 0
    with pytest.raises(AirError, match="cannot become the literal"):
        g.replace_uses(b, 1.0)
    with pytest.raises(AirError, match="not defined"):
        g.replace_uses(b, "v-1")
    g.verify()  # a refused replace_uses changes nothing
    assert nb.out == b


def test_set_read(g):
    x, a, b, c = _diamond(g)
    nc = g.producer_of(c)
    g.set_read(nc, 1, a)
    assert nc.reads == [a, a] and _users(g, b) == [] and g.use_counts(a) == {nc.id: 2}
    g.verify()
    with pytest.raises(AirError, match="not defined"):
        g.set_read(nc, 0, "v-7")
    assert nc.reads == [a, a]  # unchanged after a refused edit
    g.verify()
    stranger = make_node("neg", [a], {}, writes=(Value(-2),), read_types=[((4,), dtypes.float32)])
    with pytest.raises(AirError, match="not in this graph"):
        g.set_read(stranger, 0, x)


def test_replace_node_keeps_id_writes_and_position(g):
    x, a, b, c = _diamond(g)
    old = g.producer_of(a)
    pos = g.nodes.index(old)
    new = make_node("sqrt", [b], {}, writes=(), read_types=[g.type_of(b)])
    got = g.replace_node(old.id, new)
    assert got is new and new.id == old.id and new.out == a and g.nodes.index(new) == pos
    assert g.producer_of(a) is new and _users(g, b) == sorted([new.id, g.producer_of(c).id])
    assert _users(g, x) == [g.producer_of(b).id]
    g.verify()  # b is defined after a: the graph is no longer in order, but still acyclic
    assert [n.op for n in g.toposort()] == ["allocate", "sin", "sqrt", "add"]
    bad = make_node("sqrt", [Value(-4)], {}, writes=(), read_types=[((4,), dtypes.float32)])
    with pytest.raises(AirError, match="not defined"):
        g.replace_node(new.id, bad)
    assert g.producer_of(a) is new
    g.verify()


def test_mark_output(g, fx):
    y = g.insert("neg", [fx])
    g.mark_output(y)
    g.mark_output(y)
    assert g.outputs == [y]
    with pytest.raises(AirError, match="not defined"):
        g.mark_output("v0")


def test_version_bumps_on_every_mutation(g, fx):
    v0 = g.version
    y = g.insert("neg", [fx])
    v1 = g.version
    g.mark_output(y)
    v2 = g.version
    g.replace_uses(y, fx)
    v3 = g.version
    assert v0 < v1 < v2 < v3


# ---- toposort / sort / prune -----------------------------------------------------------------


def test_toposort_is_stable_on_sorted_graphs(g):
    x = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="x")
    vals = [x]
    for i in range(20):
        vals.append(g.insert("add", [vals[i // 2], vals[-1]]))
    g.mark_output(vals[-1])
    assert g.toposort() == g.nodes


def test_toposort_orders_producers_first_and_sort_reorders(g):
    x, a, b, c = _diamond(g)
    shuffled = graph_from_nodes(reversed(g.nodes), g.outputs)
    shuffled.verify()
    order = shuffled.toposort()
    pos = {n.out: i for i, n in enumerate(order)}
    for n in order:
        for r in n.value_reads():
            assert pos[r] < pos[n.out]
    assert len(order) == 4
    shuffled.sort()
    assert shuffled.nodes == order
    assert shuffled.toposort() == order  # stable once sorted


def test_toposort_detects_cycles(g):
    x, a, b, c = _diamond(g)
    g.set_read(g.producer_of(a), 0, c)  # a reads c reads a
    with pytest.raises(AirError, match="cycle"):
        g.toposort()
    with pytest.raises(AirError, match="cycle"):
        g.verify()
    h = Graph()
    y = h.insert("allocate", [], shape=(2,), dtype=dtypes.float32, name="y")
    z = h.insert("neg", [y])
    h.set_read(h.producer_of(z), 0, z)  # self loop
    with pytest.raises(AirError, match="cycle"):
        h.toposort()


def test_toposort_handles_deep_chains_without_recursion(g, fx):
    v = fx
    for _ in range(50_000):
        v = g.insert("neg", [v])
    g.mark_output(v)
    rev = graph_from_nodes(reversed(g.nodes), g.outputs)
    assert [n.id for n in rev.toposort()] == [n.id for n in g.nodes]


def test_prune_removes_only_dead_nodes(g):
    x, a, b, c = _diamond(g)
    dead1 = g.insert("neg", [a])
    dead2 = g.insert("sqrt", [dead1])
    orphan = g.insert("const", [], value=1.0, shape=(4,), dtype=dtypes.float32)
    assert g.live_nodes() == {g.producer_of(v).id for v in (x, a, b, c)}
    assert g.prune() == 3
    assert all(g.producer_of(v) is None for v in (dead1, dead2, orphan))
    assert len(g) == 4 and g.prune() == 0
    g.verify()
    assert not any(v in g._users for v in (dead1, dead2, orphan))


def test_prune_follows_chains_shared_reads_and_reports_removed_ids(g):
    x, a, b, c = _diamond(g)
    d1 = g.insert("mul", [a, a])  # reads a twice: a's users entry counts 2 for this node
    d2 = g.insert("add", [d1, b])  # dead chain reading a live value (b) and a dead one (d1)
    d3 = g.insert("neg", [d2])
    side = g.insert("sin", [d1])  # a second dead reader of d1
    dead_ids = {g.producer_of(v).id for v in (d1, d2, d3, side)}
    removed: list[int] = []
    assert g.prune(removed) == 4 and set(removed) == dead_ids and len(removed) == 4
    assert g.use_counts(a) == {g.producer_of(c).id: 1} and g.use_counts(b) == {g.producer_of(c).id: 1}
    g.verify()


def test_prune_keeps_every_output_and_what_it_reads(g):
    x, a, b, c = _diamond(g)
    extra = g.insert("neg", [b])
    g.mark_output(extra)  # an output nobody reads stays
    g.insert("sqrt", [extra])  # its dead reader goes
    assert g.prune() == 1 and g.producer_of(extra) is not None
    g.verify()


def test_a_node_writes_exactly_one_value(g):
    x, a, b, c = _diamond(g)
    n = g.producer_of(b)
    assert n.writes == (b,) and n.out is b
    with pytest.raises(AirError, match="writes one"):
        n.writes = (a, b)
    with pytest.raises(AirError, match="writes one"):
        make_node("neg", [a], {}, writes=(Value(-7), Value(-8)), read_types=[((4,), dtypes.float32)])
    assert n.out is b  # a refused edit changes nothing


def test_prune_without_outputs_empties_the_graph(g):
    _diamond(g)
    g.outputs = []
    assert g.prune() == 4 and len(g) == 0 and g._users == {} and g._producer == {}


# ---- verify catches each broken invariant -------------------------------------------------


def _fresh():
    g = Graph()
    x, a, b, c = _diamond(g)
    return g, x, a, b, c


def test_verify_catches_undefined_read():
    g, x, a, b, c = _fresh()
    g.producer_of(c).reads[0] = Value(-1)
    with pytest.raises(AirError, match="reads v-1, which no node writes"):
        g.verify()


def test_verify_catches_stale_users_index():
    g, x, a, b, c = _fresh()
    g.producer_of(c).reads[0] = b  # edited behind the graph's back
    with pytest.raises(AirError, match="value -> users"):
        g.verify()
    g, x, a, b, c = _fresh()
    g._users[x] = {**g.use_counts(x), 12345: 1}
    with pytest.raises(AirError, match="value -> users"):
        g.verify()


def test_verify_catches_stale_producer_index():
    g, x, a, b, c = _fresh()
    g._producer[a] = g.producer_of(b)
    with pytest.raises(AirError, match="value -> producer"):
        g.verify()
    g, x, a, b, c = _fresh()
    g._producer[Value(-9)] = g.producer_of(b)
    with pytest.raises(AirError, match="value -> producer"):
        g.verify()


def test_verify_catches_double_write_and_bad_ids():
    g, x, a, b, c = _fresh()
    g.producer_of(b).writes = (a,)
    with pytest.raises(AirError, match="written twice"):
        g.verify()
    g, x, a, b, c = _fresh()
    n = g.producer_of(b)
    g._nodes[n.id + 1000] = g._nodes.pop(n.id)
    with pytest.raises(AirError, match="stored under id"):
        g.verify()
    g, x, a, b, c = _fresh()
    g.producer_of(b).writes = ()
    with pytest.raises(AirError, match="writes no value"):
        g.verify()


def test_verify_catches_missing_output():
    g, x, a, b, c = _fresh()
    g.outputs.append(Value(-3))
    with pytest.raises(AirError, match="output v-3"):
        g.verify()


# ---- copy / structural identity -------------------------------------------------------------


def test_copy_is_independent(g):
    x, a, b, c = _diamond(g)
    h = g.copy()
    h.verify()
    assert h.structurally_equal(g) and h.dump() == g.dump()
    assert [n.id for n in h.nodes] == [n.id for n in g.nodes]
    assert all(n1 is not n2 for n1, n2 in zip(h.nodes, g.nodes))
    h.replace_uses(a, b)
    h.set_read(h.producer_of(c), 1, 2.0)
    h.insert("neg", [c])
    h.outputs.append(a)
    assert g.producer_of(c).reads == [a, b] and g.outputs == [c] and len(g) == 4
    assert g.use_counts(a) == {g.producer_of(c).id: 1}
    g.verify()
    h.verify()


def _mlp(order: str, value: float = 0.5, dtype=dtypes.float32, shape=(4,)) -> Graph:
    """The same computation inserted in different orders (and so with different value ids)."""
    g = Graph()
    x = g.insert("allocate", [], shape=shape, dtype=dtype, name="x")
    if order == "ab":
        a = g.insert("exp2", [x])
        b = g.insert("sin", [x])
    else:
        b = g.insert("sin", [x])
        g.insert("neg", [b])  # dead: not part of the key
        a = g.insert("exp2", [x])
    c = g.insert("add", [a, b])
    d = g.insert("mul", [c, value])
    g.mark_output(d)
    return g


def test_structural_key_ignores_names_and_insertion_order():
    g1, g2 = _mlp("ab"), _mlp("ba")
    assert {n.out for n in g1.nodes}.isdisjoint({n.out for n in g2.nodes})
    assert g1.structural_key() == g2.structural_key()
    assert g1.structural_hash() == g2.structural_hash()
    assert g1.structurally_equal(g2)
    assert len(g1.structural_hash()) == 32


def test_structural_key_differs_when_anything_differs():
    base = _mlp("ab")
    variants = [
        _mlp("ab", value=0.25),  # literal
        _mlp("ab", value=1),  # literal type
        _mlp("ab", dtype=dtypes.float64),  # dtype
        _mlp("ab", shape=(5,)),  # shape
    ]
    swapped = _mlp("ab")
    c = swapped.producer_of(swapped.outputs[0]).reads[0]
    n = swapped.producer_of(c)
    swapped.set_read(n, 0, n.reads[1])  # add(b, b)
    variants.append(swapped)
    op_changed = _mlp("ab")
    c = op_changed.producer_of(op_changed.outputs[0]).reads[0]
    old = op_changed.producer_of(c)
    op_changed.replace_node(old.id, make_node("max", list(old.reads), {}, writes=(), read_types=[
        op_changed.type_of(r) for r in old.reads
    ]))  # fmt: skip
    variants.append(op_changed)
    attr_changed = _mlp("ab")
    attr_changed.outputs = [attr_changed.insert("reduce", [attr_changed.outputs[0]], op="add", axes=(0,))]
    attr_max = _mlp("ab")
    attr_max.outputs = [attr_max.insert("reduce", [attr_max.outputs[0]], op="max", axes=(0,))]
    variants += [attr_changed, attr_max]
    more_outputs = _mlp("ab")
    more_outputs.mark_output(more_outputs.nodes[1].out)
    variants.append(more_outputs)
    keys = [base.structural_key()] + [v.structural_key() for v in variants]
    hashes = {base.structural_hash()} | {v.structural_hash() for v in variants}
    assert len(set(keys)) == len(keys) and len(hashes) == len(keys)


def test_structural_key_of_nan_and_signed_zero_literals():
    def make(v: float) -> Graph:
        g = Graph()
        x = g.insert("allocate", [], shape=(2,), dtype=dtypes.float32, name="x")
        c = g.insert("const", [], value=v, shape=(2,), dtype=dtypes.float32)
        g.mark_output(g.insert("add", [g.insert("mul", [x, v]), c]))
        return g

    assert make(float("nan")).structural_key() == make(float("nan")).structural_key()
    assert make(0.0).structural_key() != make(-0.0).structural_key()
    assert make(float("inf")).structural_hash() == make(float("inf")).structural_hash()


# ---- presentation ---------------------------------------------------------------------------


def test_dump_is_readable(g):
    x = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
    v = g.insert("view", [x], shape=(3,), strides=(1,), offset=3)
    r = g.insert("mul", [v, 2.0])
    g.mark_output(r)
    text = g.dump()
    lines = text.splitlines()
    assert lines[0] == f"{x} = allocate(shape=(2, 3), dtype=float32, name='x') : float32[2, 3]"
    assert lines[1] == f"{v} = view({x}, shape=(3,), strides=(1,), offset=3, mask=None) : float32[3]"
    assert lines[2] == f"{r} = mul({v}, 2.0) : float32[3]"
    assert lines[3] == f"outputs: {r}"
    assert repr(g) == f"<Graph 3 nodes, outputs=[{r}]>"


def test_dot_export(g):
    x, a, b, c = _diamond(g)
    dot = to_dot(g, name='my "graph"', highlight={g.producer_of(a).id: "#ff0000"})
    assert dot.startswith('digraph "my \\"graph\\"" {') and dot.rstrip().endswith("}")
    ids = {v: g.producer_of(v).id for v in (x, a, b, c)}
    assert f"n{ids[x]} -> n{ids[a]};" in dot
    assert f'n{ids[a]} -> n{ids[c]} [label="0"' in dot and f'n{ids[b]} -> n{ids[c]} [label="1"' in dot
    assert 'fillcolor="#ff0000"' in dot
    assert dot.count("->") == 4
    assert "penwidth=2.5" in dot  # the output is emphasized
    lines = [ln for ln in dot.splitlines() if f"n{ids[x]} [label=" in ln]
    assert "allocate" in lines[0] and "name=x" in lines[0] and "float32[4]" in lines[0]


def test_verify_catches_wrong_read_counts_and_stale_single_users(g, fx):
    sq = g.producer_of(g.insert("mul", [fx, fx]))
    g.mark_output(sq.out)
    g.verify()
    g._users[fx] = {sq.id: 1}  # the node reads fx twice
    with pytest.raises(AirError, match="value -> users"):
        g.verify()
    g._users[fx] = {sq.id: 2}
    g.verify()
    other = g.producer_of(g.insert("neg", [fx]))
    g.mark_output(other.out)
    g._users[sq.out] = other.id  # a reader that does not read it
    with pytest.raises(AirError, match="value -> users"):
        g.verify()
    del g._users[sq.out]
    g.verify()
    g._users[Value(-5)] = sq.id  # an entry for a value nobody writes
    with pytest.raises(AirError, match="value -> users"):
        g.verify()


def test_live_nodes_sweep_agrees_with_search_in_any_node_order():
    """The reverse sweep must fall back to a search when producers come after their readers."""
    g = Graph()
    x = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="x")
    a = g.insert("sin", [x])
    b = g.insert("add", [a, x])
    g.insert("neg", [b])  # dead
    c = g.insert("mul", [b, a])
    g.mark_output(c)
    for nodes in (g.nodes, list(reversed(g.nodes)), g.nodes[2:] + g.nodes[:2]):
        h = graph_from_nodes([n.copy() for n in nodes], g.outputs)
        assert h.live_nodes() == h._live_nodes_dfs() == {n.id for n in g.nodes if n.op != "neg"}
        assert h.prune() == 1 and len(h) == 4
        h.verify()


def test_value_ids_typed_as_text_are_accepted_or_named():
    g = Graph()
    x = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="x")
    y = g.insert("sin", [str(x)])  # the printed form works as an operand
    assert g.producer_of(y).reads == [x] and g.users_of(x)[0].out == y
    g.outputs = [str(y)]  # assigned by hand: verify names the mistake
    with pytest.raises(AirError, match="is a str, not a value id"):
        g.verify()
    g.outputs = [y]
    g.verify()
