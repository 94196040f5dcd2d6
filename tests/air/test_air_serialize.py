"""Versioned JSON round trip and its format/version errors."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes, dumps, from_json, interpret, loads, to_json
from caten_lab.air.serialize import FORMAT, VERSION
from caten_lab.errors import AirError


def rich_graph() -> Graph:
    """Symbolic dims, inf/nan literals, a masked view, a store window, every attribute kind."""
    g = Graph()
    s = Sym("seq")
    x = g.insert("allocate", [], shape=(s, 4), dtype=dtypes.float32, name="x", source="model.py:3")
    pad = g.insert("view", [x], shape=(s + 2, 4), strides=(4, 1), offset=-4, mask=((1, s + 1), (0, 4)))
    m = g.insert("max", [pad, float("-inf")])
    n = g.insert("where", [g.insert("ne", [m, m]), float("nan"), m])  # nan literal
    r = g.insert("reduce", [n], op="max", axes=(1,))
    c = g.insert("const", [], value=s * 2 + 1, shape=(), dtype=dtypes.int64)
    cf = g.insert("const", [], value=float("inf"), shape=(s + 2, 1), dtype=dtypes.float32)
    i = g.insert("index", [], shape=(s + 2, 1), axis=0, dtype=dtypes.int32)
    ic = g.insert("cast", [i], dtype=dtypes.float32)
    y = g.insert("add", [g.insert("mul", [r, ic]), g.insert("recip", [cf])])
    buf = g.insert("allocate", [], shape=(s + 2, 2), dtype=dtypes.float32)
    st = g.insert("store", [buf, y], shape=(s + 2, 1), strides=(2, 1), offset=1)
    flag = g.insert("lt", [g.insert("idiv", [c, 3]), 7])
    g.mark_output(st)
    g.mark_output(c)
    g.mark_output(flag)
    return g


def test_json_round_trip_is_exact():
    g = rich_graph()
    text = dumps(g)
    h = loads(text)
    assert h.structural_key() == g.structural_key()
    assert h.dump() == g.dump()
    assert [n.id for n in h.nodes] == [n.id for n in g.nodes]
    assert [n.source for n in h.nodes] == [n.source for n in g.nodes]
    assert dumps(h) == text  # stable
    assert from_json(to_json(g)).structural_hash() == g.structural_hash()
    assert from_json(text).outputs == g.outputs


def test_json_is_plain_json_with_literals_encoded():
    g = rich_graph()
    obj = json.loads(dumps(g))
    assert obj["format"] == FORMAT and obj["version"] == VERSION
    text = dumps(g)
    assert "NaN" not in text and "Infinity" not in text  # strict JSON
    where = next(n for n in obj["nodes"] if n["op"] == "where")
    assert where["reads"][1] == {"lit": {"float": "nan"}}
    node = next(n for n in loads(text).nodes if n.op == "where")
    assert math.isnan(node.reads[1])
    view = next(n for n in loads(text).nodes if n.op == "view")
    s = Sym("seq")
    assert view.attrs.mask == ((1, s + 1), (0, 4)) and view.shape == (s + 2, 4) and view.attrs.offset == -4


def test_round_tripped_graph_computes_the_same():
    g = rich_graph()
    h = loads(dumps(g))
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    x[1, 2] = np.nan
    for a, b in zip(interpret(g, {"x": x}, {"seq": 5}), interpret(h, {"x": x}, {"seq": 5})):
        np.testing.assert_array_equal(a, b)


def test_loaded_ids_are_not_reused_by_new_nodes():
    g = rich_graph()
    h = loads(dumps(g))
    top = max(n.id for n in h.nodes)
    obj = to_json(h)
    for d in obj["nodes"]:  # shift ids far beyond anything the process has allocated
        d["id"] += 10**9
    k = from_json(obj)
    new = k.insert("neg", [k.outputs[0]])
    assert k.producer_of(new).id > top + 10**9
    k.verify()


@pytest.mark.parametrize(
    ("mutate", "text"),
    [
        (lambda o: o.update(format="onnx"), "not a caten_lab AIR graph"),
        (lambda o: o.pop("format"), "not a caten_lab AIR graph"),
        (lambda o: o.update(version=VERSION + 1), f"version {VERSION + 1} is not supported"),
        (lambda o: o.update(version="1"), "is not supported"),
        (lambda o: o["nodes"][1].update(op="sub"), "unknown AIR op 'sub'"),
        (lambda o: o["nodes"][1]["attrs"].update(bogus=1), "has no attribute 'bogus'"),
        (lambda o: o["nodes"][1].update(dtype="complex64"), "malformed"),
        (lambda o: o["nodes"][1].pop("writes"), "malformed"),
        (lambda o: o["nodes"][1].update(reads=[]), "operand"),
        (lambda o: o["nodes"][1].update(reads=["v-1"]), "which no node writes"),
        (lambda o: o.update(outputs=["v-1"]), "output v-1"),
        (lambda o: o.update(outputs="v1"), "outputs must be a list"),
    ],
)
def test_json_errors(mutate, text):
    obj = to_json(rich_graph())
    mutate(obj)
    with pytest.raises(AirError, match=text):
        from_json(obj)


def test_json_text_errors():
    with pytest.raises(AirError, match="not valid JSON"):
        from_json("{nope")
    with pytest.raises(AirError, match="must be an object"):
        from_json("[1, 2]")
