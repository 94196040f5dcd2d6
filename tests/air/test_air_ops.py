"""Op declarations: attribute validation, operand counts and type inference errors."""

from __future__ import annotations

import re

import numpy as np
import pytest

from caten_lab.air import OPS, Graph, Sym, Value, dtypes, make_attrs, make_node, op_names, spec_of, to_dtype
from caten_lab.air.ops import attrs_as_dict, attrs_items
from caten_lab.errors import AirError, CatenError

ALL_OPS = sorted(OPS)


def _inputs(g: Graph) -> dict[str, str]:
    return {
        "f": g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="f"),
        "i": g.insert("allocate", [], shape=(2, 3), dtype=dtypes.int32, name="i"),
        "b": g.insert("allocate", [], shape=(2, 3), dtype=dtypes.bool, name="b"),
        "x32": g.insert("allocate", [], shape=(2, 32), dtype=dtypes.float32, name="x32"),  # quantized matmul
        "xq": g.insert("allocate", [], shape=(2, 40), dtype=dtypes.uint8, name="xq"),  # (operands)
        "wq": g.insert("allocate", [], shape=(3 * 18,), dtype=dtypes.uint8, name="wq"),  # Q4_0 (3, 32)
    }


def valid_call(op: str, v: dict[str, str]) -> tuple[list, dict]:
    """Operands and attributes that make a well-typed ``op`` node over the inputs of :func:`_inputs`."""
    if op in ("neg", "recip", "exp2", "log2", "sin", "sqrt"):
        return [v["f"]], {}
    if op == "not":
        return [v["b"]], {}
    if op in ("add", "mul", "max", "lt", "ne"):
        return [v["f"], v["f"]], {}
    if op in ("idiv", "mod", "and", "or", "xor"):
        return [v["i"], v["i"]], {}
    if op == "where":
        return [v["b"], v["f"], v["f"]], {}
    if op == "cast":
        return [v["f"]], {"dtype": dtypes.int32}
    if op == "check_index":
        return [v["i"]], {"size": Sym("n")}
    if op == "reduce":
        return [v["f"]], {"op": "add", "axes": (1,)}
    if op == "allocate":
        return [], {"shape": (2, 3), "dtype": dtypes.float32, "name": "w"}
    if op == "const":
        return [], {"value": 1.5, "shape": (2, 3), "dtype": dtypes.float32}
    if op == "view":
        return [v["f"]], {"shape": (3, 2), "strides": (1, 3), "offset": 0, "mask": ((0, 3), (0, 2))}
    if op == "store":
        return [v["f"], v["f"]], {"shape": (2, 3), "strides": (3, 1), "offset": 0}
    if op == "index":
        return [], {"shape": (2, 3), "axis": 1, "dtype": dtypes.int32}
    if op == "quant_rows":
        return [v["x32"]], {"block": 32}
    if op == "quant_matmul":
        return [v["xq"], v["wq"]], {"wtype": "Q4_0", "n": 3, "k": 32}
    raise AssertionError(f"no example for op {op}")


# a wrongly typed value for every attribute kind, by attribute name
WRONG_VALUES = {
    "dtype": ["complex-ish", 3.5, True, None],
    "op": ["sum", 1, None],
    "axes": [(-1,), (0.5,), 1, (True,)],
    "shape": [5, (2.0, 3), ("a",), None],
    "strides": [1, (1.5,)],
    "offset": [0.5, "0", None],
    "size": [0.5, "0", None],
    "mask": [((0, 1, 2),), (0, 1), "m"],
    "name": [3, b"w"],
    "value": ["1", None, [1]],
    "axis": [1.0, "1", True, None],
    "block": [32.0, "32", None],
    "wtype": [4, None],
    "n": [3.0, "3", None],
    "k": [32.0, None],
}


def test_op_table_covers_the_issue():
    expected = {
        "add", "mul", "neg", "recip", "idiv", "mod", "max", "exp2", "log2", "sin", "sqrt", "and", "or",
        "xor", "not", "lt", "ne", "where", "cast", "check_index", "allocate", "const", "store", "view", "index", "reduce",
        "quant_rows", "quant_matmul",
    }  # fmt: skip
    assert set(op_names()) == expected
    for name, spec in OPS.items():
        assert spec.name == name and spec.doc
        assert spec.attrs_cls.__doc__ and name in spec.attrs_cls.__doc__


@pytest.mark.parametrize("op", ALL_OPS)
def test_every_op_builds_and_its_attrs_are_slotted(op):
    g = Graph()
    reads, attrs = valid_call(op, _inputs(g))
    out = g.insert(op, reads, **attrs)
    node = g.producer_of(out)
    assert node.op == op and node.out == out
    assert hasattr(type(node.attrs), "__slots__") and not hasattr(node.attrs, "__dict__")
    assert set(attrs_as_dict(node.attrs)) == set(OPS[op].kinds)
    with pytest.raises((AttributeError, TypeError)):
        node.attrs.extra = 1  # slotted and frozen
    g.verify()


def test_unknown_op_lists_the_accepted_ops(g):
    with pytest.raises(AirError) as e:
        g.insert("sub", [])
    msg = str(e.value)
    assert "'sub'" in msg and "accepted ops" in msg
    for op in ("add", "reduce", "view", "where"):
        assert op in msg
    assert isinstance(e.value, CatenError)
    with pytest.raises(AirError, match="unknown AIR op 'nope'"):
        make_attrs("nope", {})
    with pytest.raises(AirError, match="unknown AIR op"):
        spec_of("nope")


@pytest.mark.parametrize("op", ALL_OPS)
def test_unknown_attribute_names_op_attribute_and_accepted(op):
    g = Graph()
    reads, attrs = valid_call(op, _inputs(g))
    with pytest.raises(AirError) as e:
        g.insert(op, reads, **attrs, bogus=1)
    msg = str(e.value)
    assert f"op {op!r}" in msg and "'bogus'" in msg
    known = list(OPS[op].kinds)
    if known:
        assert all(k in msg for k in known), msg
    else:
        assert "none" in msg


@pytest.mark.parametrize(
    ("op", "attr"), [(op, a) for op in ALL_OPS for a in OPS[op].kinds if a not in OPS[op].defaults]
)
def test_missing_attribute_names_op_attribute_and_accepted(op, attr):
    g = Graph()
    reads, attrs = valid_call(op, _inputs(g))
    del attrs[attr]
    with pytest.raises(AirError) as e:
        g.insert(op, reads, **attrs)
    msg = str(e.value)
    assert f"op {op!r} is missing attribute {attr!r}" in msg
    assert OPS[op].kinds[attr].accepted in msg


@pytest.mark.parametrize(("op", "attr"), [(op, a) for op in ALL_OPS for a in OPS[op].kinds])
def test_wrong_attribute_type_names_op_attribute_and_accepted(op, attr):
    g = Graph()
    reads, attrs = valid_call(op, _inputs(g))
    for bad in WRONG_VALUES[attr]:
        if attr == "name" and bad is None:
            continue
        attrs2 = dict(attrs, **{attr: bad})
        with pytest.raises(AirError) as e:
            g.insert(op, reads, **attrs2)
        msg = str(e.value)
        assert f"op {op!r}" in msg and repr(attr) in msg, msg
        assert "wrong type" in msg and OPS[op].kinds[attr].accepted in msg, msg


def test_defaults_apply(g, fx):
    v = g.producer_of(g.insert("view", [fx], shape=(3,), strides=(1,)))
    assert v.attrs.offset == 0 and v.attrs.mask is None
    a = g.producer_of(g.insert("allocate", [], shape=(2,), dtype="float32"))
    assert a.attrs.name is None and a.dtype is dtypes.float32


def test_attribute_values_are_normalized(g, fx):
    n = g.producer_of(g.insert("view", [fx], shape=[3, 2], strides=[1, 3], mask=[[0, 3], [0, 2]]))
    assert n.attrs.shape == (3, 2) and n.attrs.strides == (1, 3) and n.attrs.mask == ((0, 3), (0, 2))
    c = g.producer_of(g.insert("cast", [fx], dtype=np.float16))
    assert c.attrs.dtype is dtypes.float16 and c.dtype is dtypes.float16
    r = g.producer_of(g.insert("reduce", [fx], op="max", axes=[0, 1]))
    assert r.attrs.axes == (0, 1)
    assert attrs_items(r.attrs) == (("op", "max"), ("axes", (0, 1)))


def test_symbolic_attributes_are_accepted(g):
    s = Sym("seq")
    a = g.insert("allocate", [], shape=(s, 4), dtype=dtypes.float32, name="a")
    v = g.producer_of(g.insert("view", [a], shape=(s, 4), strides=(4, 1), offset=s - s + 0))
    assert v.shape == (s, 4)
    c = g.producer_of(g.insert("const", [], value=s * 2, shape=(), dtype=dtypes.int64))
    assert c.attrs.value == 2 * s


@pytest.mark.parametrize("op", ALL_OPS)
def test_wrong_operand_count(op):
    g = Graph()
    reads, attrs = valid_call(op, _inputs(g))
    n = OPS[op].n_reads
    for bad in ([*reads, reads[0] if reads else 1.0], reads[:-1] if reads else None):
        if bad is None:
            continue
        with pytest.raises(AirError) as e:
            g.insert(op, bad, **attrs)
        msg = str(e.value)
        assert f"op {op!r} takes {n} operand(s), got {len(bad)}" in msg


def test_operand_must_be_value_or_scalar(g, fx):
    with pytest.raises(AirError, match="neither a value id nor a scalar literal"):
        g.insert("add", [fx, [1.0]])
    with pytest.raises(AirError, match="not defined in this graph"):
        g.insert("add", [fx, "v999999999"])


def test_make_node_directly_validates():
    a, w = Value(1), Value(2)
    n = make_node("add", [a, 2.0], {}, writes=(w,), read_types=[((3,), dtypes.float32), None])
    assert n.shape == (3,) and n.dtype is dtypes.float32 and n.writes == (w,)
    with pytest.raises(AirError, match="takes 2 operand"):
        make_node("add", [a], {}, writes=(w,), read_types=[((3,), dtypes.float32)])
    with pytest.raises(AirError, match="neither a value id nor a scalar literal"):
        make_node("add", ["v1", 2.0], {}, writes=(w,), read_types=[((3,), dtypes.float32), None])


def test_to_dtype_errors():
    assert to_dtype("int64") is dtypes.int64 and to_dtype(np.dtype("uint8")) is dtypes.uint8
    with pytest.raises(ValueError, match="accepted"):
        to_dtype("complex64")


# ---- type inference errors ----------------------------------------------------------------


def test_elementwise_shapes_must_match(g, fx):
    y = g.insert("allocate", [], shape=(3, 2), dtype=dtypes.float32, name="y")
    with pytest.raises(AirError) as e:
        g.insert("add", [fx, y])
    assert "operand shapes differ: (2, 3), (3, 2)" in str(e.value) and "view" in str(e.value)


def test_dtype_rules(g, fx):
    i = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.int32, name="i")
    b = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.bool, name="b")
    cases = [
        ("add", [fx, i], "operand dtypes differ"),
        ("idiv", [fx, fx], "integer-only"),
        ("mod", [fx, 2.0], "integer-only"),
        ("sqrt", [i], "needs a float operand"),
        ("recip", [i], "needs a float operand"),
        ("and", [fx, fx], "bool or int"),
        ("not", [fx], "bool or int"),
        ("where", [fx, fx, fx], "condition must be bool"),
        ("where", [b, fx, i], "branches have different dtypes"),
        ("add", [1.0, 2.0], "at least one value operand"),
    ]
    for op, reads, text in cases:
        with pytest.raises(AirError, match=re.escape(text)):
            g.insert(op, reads)
    assert g.producer_of(g.insert("lt", [fx, 0.0])).dtype is dtypes.bool
    assert g.producer_of(g.insert("ne", [i, i])).dtype is dtypes.bool
    assert g.producer_of(g.insert("where", [b, 1, 0])).dtype is dtypes.int64
    assert g.producer_of(g.insert("where", [b, fx, 0.0])).dtype is dtypes.float32


def test_buffer_op_rules(g, fx):
    with pytest.raises(AirError, match=r"reduce: axis 2 is out of range for shape \(2, 3\)"):
        g.insert("reduce", [fx], op="add", axes=(2,))
    with pytest.raises(AirError, match="must be a value, not a literal"):
        g.insert("reduce", [1.0], op="add", axes=(0,))
    with pytest.raises(AirError, match="must be a value, not a literal"):
        g.insert("view", [1.0], shape=(1,), strides=(0,))
    with pytest.raises(AirError, match="strides for the rank-2 shape"):
        g.insert("view", [fx], shape=(2, 3), strides=(1,))
    with pytest.raises(AirError, match="mask has 1"):
        g.insert("view", [fx], shape=(2, 3), strides=(3, 1), mask=((0, 1),))
    with pytest.raises(AirError, match="does not match the window shape"):
        g.insert("store", [fx, fx], shape=(3, 2), strides=(1, 3))
    with pytest.raises(AirError, match="strides for the rank-1 shape"):
        g.insert("store", [fx, 0.0], shape=(6,), strides=(1, 1))
    with pytest.raises(AirError, match="index: axis 2 is out of range"):
        g.insert("index", [], shape=(2, 3), axis=2, dtype=dtypes.int32)
    r = g.producer_of(g.insert("reduce", [fx], op="add", axes=(0, 1)))
    assert r.shape == (1, 1) and r.dtype is dtypes.float32
    s = g.producer_of(g.insert("store", [fx, 2.0], shape=(3,), strides=(1,), offset=3))
    assert s.shape == (2, 3)


def test_errors_carry_the_source_location(g, fx):
    with pytest.raises(AirError) as e:
        g.insert("sqrt", [g.insert("cast", [fx], dtype="int32")], source="model.py:12")
    assert e.value.where == "model.py:12" and "at model.py:12" in str(e.value)
    assert e.value.hint and "cast" in e.value.hint
