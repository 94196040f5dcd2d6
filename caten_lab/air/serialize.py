"""Graph <-> versioned JSON, and Graph -> Graphviz DOT text."""

from __future__ import annotations

import json
import math
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node, reserve_node_ids
from caten_lab.air.ops import OPS, attrs_items, make_attrs
from caten_lab.air.symbolic import Expr
from caten_lab.air.value import Value
from caten_lab.errors import AirError
from caten_lab.type_words import a_type

FORMAT = "caten_lab.air"
VERSION = 1


def _enc(v: Any) -> Any:
    if isinstance(v, Expr):
        return v.to_json()
    if isinstance(v, DType):
        return {"dtype": v.value}
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return {"float": repr(v)}
        return v
    if isinstance(v, (tuple, list)):
        return {"tuple": [_enc(x) for x in v]}
    raise AirError(f"cannot serialize attribute value {v!r} ({type(v).__name__})")


def _dec(v: Any) -> Any:
    if isinstance(v, dict):
        if "expr" in v:
            return Expr.from_json(v)
        if "dtype" in v:
            return DType(v["dtype"])
        if "float" in v:
            return float(v["float"])
        if "tuple" in v:
            return tuple(_dec(x) for x in v["tuple"])
        if "lit" in v:
            return _dec(v["lit"])
    return v


def encode_value(v: Any) -> Any:
    """An attribute-like value (int, float, str, bool, None, symbolic Expr, DType, tuple) as JSON data."""
    return _enc(v)


def decode_value(v: Any) -> Any:
    """The inverse of :func:`encode_value` (tuples come back as tuples)."""
    return _dec(v)


def _enc_read(r: Any) -> Any:
    return str(r) if r.__class__ is Value else {"lit": _enc(r)}


class _Values(dict):
    """"v12" -> one shared Value(12) per graph load: index lookups then hit by identity."""

    def __missing__(self, text: str) -> Value:
        v = self[text] = Value.parse(text)
        return v


def _dec_read(r: Any, values: _Values) -> Any:
    return values[r] if isinstance(r, str) else _dec(r)


def to_json(g: Graph) -> dict:
    """A JSON-ready dict; stable key order, versioned by ``format``/``version``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "nodes": [
            {
                "id": n.id,
                "op": n.op,
                "writes": [str(w) for w in n.writes],
                "reads": [_enc_read(r) for r in n.reads],
                "attrs": {k: _enc(v) for k, v in attrs_items(n.attrs)},
                "dtype": n.dtype.value,
                "shape": [_enc(d) for d in n.shape],
                "source": n.source,
            }
            for n in g.nodes
        ],
        "outputs": [str(o) for o in g.outputs],
    }


def from_json(obj: dict | str) -> Graph:
    """Rebuild a graph from :func:`to_json` output (or its JSON text); validates every node."""
    if isinstance(obj, str):
        try:
            obj = json.loads(obj)
        except json.JSONDecodeError as exc:
            raise AirError(f"AIR JSON is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise AirError(f"AIR JSON must be an object, got {a_type(obj)}")
    if obj.get("format") != FORMAT:
        raise AirError(
            f"not a caten_lab AIR graph (format={obj.get('format')!r})",
            hint=f"expected an object with format={FORMAT!r}, as written by caten_lab.air.to_json",
        )
    if obj.get("version") != VERSION:
        raise AirError(
            f"AIR JSON version {obj.get('version')!r} is not supported (this build reads {VERSION})",
            hint="re-export the graph with this version of caten_lab",
        )
    g = Graph()
    max_id = 0
    values = _Values()
    for i, d in enumerate(obj.get("nodes", ())):
        try:
            op = d["op"]
            if op not in OPS:
                make_attrs(op, {})  # raises the standard unknown-op error
            reads = [_dec_read(r, values) for r in d["reads"]]
            if len(reads) != OPS[op].n_reads:
                raise AirError(
                    f"node {d['id']} ({op}) has {len(reads)} operand(s); {op!r} takes {OPS[op].n_reads}"
                )
            attrs = make_attrs(op, {k: _dec(v) for k, v in d["attrs"].items()})
            node = Node(
                op,
                tuple(values[w] for w in d["writes"]),
                reads,
                attrs,
                DType(d["dtype"]),
                tuple(_dec(x) for x in d["shape"]),
                d.get("source"),
                int(d["id"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise AirError(f"AIR JSON node #{i} is malformed: {type(exc).__name__}: {exc}") from None
        g.add(node)
        max_id = max(max_id, node.id)
    reserve_node_ids(max_id)  # nodes inserted later must not reuse the loaded ids
    outputs = obj.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
        raise AirError(f"AIR JSON outputs must be a list of value ids, got {outputs!r}")
    try:
        g.outputs = [values[o] for o in outputs]
    except AirError as exc:
        raise AirError(f"AIR JSON outputs: {exc}") from None
    g.verify()
    return g


def dumps(g: Graph) -> str:
    return json.dumps(to_json(g), sort_keys=False)


def loads(text: str) -> Graph:
    return from_json(json.loads(text))


_COLORS = {
    "unary": "#dbeafe",
    "binary": "#e0e7ff",
    "ternary": "#ede9fe",
    "reduce": "#fde68a",
    "buffer": "#dcfce7",
}


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def node_label(n: Node, max_attr: int = 40) -> str:
    """A short human label: op, compact attributes, dtype[shape]."""
    parts = []
    for k, v in attrs_items(n.attrs):
        if v is None or k in ("dtype",) or (k == "offset" and v == 0):
            continue
        s = v.value if isinstance(v, DType) else str(v)
        if len(s) > max_attr:
            s = s[: max_attr - 1] + "…"
        parts.append(f"{k}={s}")
    lit = [repr(r) for r in n.reads if r.__class__ is not Value]
    head = n.op + (" " + ", ".join(lit) if lit else "")
    shape = ",".join(str(d) for d in n.shape)
    body = "\\n".join(_esc(p) for p in parts)
    return f"{_esc(head)}" + (f"\\n{body}" if body else "") + f"\\n{n.dtype.value}[{_esc(shape)}]"


def to_dot(g: Graph, *, name: str = "air", highlight: dict[int, str] | None = None) -> str:
    """Graphviz DOT for the graph; ``highlight`` maps node id -> fill colour."""
    lines = [
        f'digraph "{_esc(name)}" {{',
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="monospace", fontsize=10];',
    ]
    out_set = set(g.outputs)
    for n in g.nodes:
        color = (highlight or {}).get(n.id) or _COLORS.get(OPS[n.op].category, "#f3f4f6")
        peri = ", penwidth=2.5" if n.out in out_set else ""
        lines.append(f'  n{n.id} [label="{node_label(n)}", fillcolor="{color}", id="n{n.id}"{peri}];')
    for n in g.nodes:
        for i, r in enumerate(n.reads):
            if r.__class__ is Value:
                p = g.producer_of(r)
                if p is not None:
                    if len(n.reads) > 1:
                        lines.append(f'  n{p.id} -> n{n.id} [label="{i}", fontsize=8];')
                    else:
                        lines.append(f"  n{p.id} -> n{n.id};")
    lines.append("}")
    return "\n".join(lines)
