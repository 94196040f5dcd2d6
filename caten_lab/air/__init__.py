"""AIR: caten_lab's graph IR.

Typed primitive ops, an indexed graph, a recorded rewriter and a NumPy interpreter.
"""

from caten_lab.air.dtypes import DType, dtypes, to_dtype
from caten_lab.air.graph import Graph
from caten_lab.air.interpreter import interpret
from caten_lab.air.node import Node, is_value, make_node
from caten_lab.air.ops import OPS, OpSpec, make_attrs, op_names, spec_of
from caten_lab.air.rewriter import Match, Pat, Rewrite, Rewriter, Rule, match, replay, rewrite, rule
from caten_lab.air.serialize import dumps, from_json, loads, to_dot, to_json
from caten_lab.air.symbolic import Dim, Expr, Sym
from caten_lab.air.value import Value, as_value

__all__ = [
    "DType",
    "dtypes",
    "to_dtype",
    "Graph",
    "interpret",
    "Node",
    "is_value",
    "make_node",
    "OPS",
    "OpSpec",
    "make_attrs",
    "op_names",
    "spec_of",
    "Match",
    "Pat",
    "Rewrite",
    "Rewriter",
    "Rule",
    "match",
    "replay",
    "rewrite",
    "rule",
    "dumps",
    "from_json",
    "loads",
    "to_dot",
    "to_json",
    "Dim",
    "Expr",
    "Sym",
    "Value",
    "as_value",
]
