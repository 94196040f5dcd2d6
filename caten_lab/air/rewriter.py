"""Pattern rewriting to a fixed point, with optional rewrite-by-rewrite recording.

A :class:`Rule` pairs a :class:`Pat` (over op, attributes and nested operands) with a builder that
returns the replacement value (or None to decline). :func:`rewrite` runs a worklist: each node is
tried against the rules indexed by its op; a successful rewrite redirects every use of the matched
root to the replacement, drops what became dead (the matched nodes no longer read, and scratch
nodes the builder inserted but did not use), and re-queues the new nodes and the users of the
replacement (up to the deepest pattern's depth, so nested patterns see changes below them).
Cost is O(nodes + rewrites x pattern size).

A builder may return a literal (e.g. ``x*0 -> 0``). Where a literal cannot stand in for the value
(it is a graph output, or a user would be left with no value operand or is not elementwise), the
rewriter materializes it as a ``const`` of the root's shape and dtype. Builders must only *insert*
nodes (never mutate existing ones), so that recorded rewrites replay exactly.

With ``record`` set to a list, every applied rewrite is appended as a :class:`Rewrite` holding the
rule, the matched node ids, copies of the produced nodes, the replaced value and the removed ids,
which is exactly what :func:`replay` needs to rebuild the graph after any prefix of rewrites.
With ``record=None`` nothing is recorded and no extra work is done.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node, Read
from caten_lab.air.ops import OPS
from caten_lab.air.value import Value, as_value
from caten_lab.errors import AirError
from caten_lab.errors import where as user_where


class Pat:
    """A pattern over one node.

    - ``op``: an op name, a tuple of names, or None for any op.
    - ``reads``: None (any operands) or a sequence, one entry per operand: a nested ``Pat``,
      a ``str`` naming a capture (any value or literal; the same name must bind the same thing),
      or a literal number (the operand must be that literal, or a ``const`` node of that value).
    - ``name``: capture the matched node's value under this name.
    - ``attrs``: required attribute values; ``where``: a predicate on the node.
    - ``commutative``: for two operands, also try them swapped.
    """

    __slots__ = ("op", "reads", "name", "attrs", "where", "commutative")

    def __init__(
        self,
        op: str | tuple[str, ...] | None = None,
        reads: Sequence[Pat | str | int | float | bool] | None = None,
        *,
        name: str | None = None,
        attrs: dict[str, Any] | None = None,
        where: Callable[[Node], bool] | None = None,
        commutative: bool = False,
    ) -> None:
        self.op = (op,) if isinstance(op, str) else op
        self.reads = list(reads) if reads is not None else None
        self.name = name
        self.attrs = attrs
        self.where = where
        self.commutative = commutative

    def __repr__(self) -> str:
        ops = "|".join(self.op) if self.op else "*"
        reads = "" if self.reads is None else "(" + ", ".join(repr(r) for r in self.reads) + ")"
        return f"{ops}{reads}" + (f" as {self.name}" if self.name else "")


@dataclass
class Match:
    """A successful match: the root node and the captured values/literals/nodes by name."""

    graph: Graph
    root: Node
    captures: dict[str, Read]
    nodes: list[Node]

    def __getitem__(self, name: str) -> Read:
        return self.captures[name]

    def node(self, name: str) -> Node | None:
        v = self.captures[name]
        return self.graph.producer_of(v) if v.__class__ is Value else None


@dataclass
class Rule:
    """A named rewrite: ``build(match)`` returns the replacement value, or None to decline."""

    name: str
    pattern: Pat
    build: Callable[[Match], Read | None]
    location: str = ""

    def __post_init__(self) -> None:
        if not self.location:
            try:
                src = inspect.getsourcefile(self.build) or "?"
                line = inspect.getsourcelines(self.build)[1]
                self.location = user_where(src, line, basename=True)
            except (OSError, TypeError):
                self.location = "?"


@dataclass
class Rewrite:
    """One applied rewrite, enough to replay it on a copy of the graph before it."""

    rule: str
    location: str
    matched: list[int]
    produced: list[Node]
    replaced: tuple[Value, Read] | None  # (old value, what its readers read now); None: nodes only removed
    removed: list[int]
    version: int
    extra: dict[str, Any] = field(default_factory=dict)


PatRead = Pat | str | int | float | bool


def _match_read(g: Graph, p: PatRead, r: Read, caps: dict[str, Read], nodes: list[Node]) -> bool:
    if isinstance(p, Pat):
        if r.__class__ is not Value:
            return False
        n = g.producer_of(r)
        return n is not None and _match_node(g, p, n, caps, nodes)
    if isinstance(p, str):
        if p in caps:
            return caps[p] == r and type(caps[p]) is type(r)
        caps[p] = r
        return True
    # literal pattern: a literal read or a const node of that value
    if r.__class__ is not Value:
        return r == p and not isinstance(r, bool) ^ isinstance(p, bool)
    n = g.producer_of(r)
    return (
        n is not None
        and n.op == "const"
        and n.attrs.value == p
        and not isinstance(n.attrs.value, bool) ^ isinstance(p, bool)
    )


def _match_node(g: Graph, p: Pat, n: Node, caps: dict[str, Read], nodes: list[Node]) -> bool:
    if p.op is not None and n.op not in p.op:
        return False
    if p.attrs:
        for k, v in p.attrs.items():
            if getattr(n.attrs, k, _MISSING) != v:
                return False
    if p.where is not None and not p.where(n):
        return False
    if p.reads is not None:
        if len(p.reads) != len(n.reads):
            return False
        orders = [n.reads]
        if p.commutative and len(n.reads) == 2:
            orders.append([n.reads[1], n.reads[0]])
        for reads in orders:
            trial_caps = dict(caps)
            trial_nodes: list[Node] = []
            if all(_match_read(g, sp, r, trial_caps, trial_nodes) for sp, r in zip(p.reads, reads)):
                caps.clear()
                caps.update(trial_caps)
                nodes.extend(trial_nodes)
                break
        else:
            return False
    if p.name is not None:
        if p.name in caps and not (caps[p.name].__class__ is Value and caps[p.name] == n.out):
            return False
        caps[p.name] = n.out
    nodes.append(n)
    return True


_MISSING = object()


def pattern_depth(p: Pat) -> int:
    """How many node levels a match of ``p`` inspects (a literal operand looks one level down)."""
    d = 1
    for r in p.reads or ():
        if isinstance(r, Pat):
            d = max(d, 1 + pattern_depth(r))
        elif not isinstance(r, str):
            d = max(d, 2)
    return d


_ELEMENTWISE_CATEGORIES = frozenset({"unary", "binary", "ternary"})


def _literal_fits(g: Graph, old: Value) -> bool:
    """Can every use of ``old`` read a scalar literal instead (elementwise users keeping a value operand)?"""
    if old in g.outputs:
        return False
    for u in g.users_of(old):
        if OPS[u.op].category not in _ELEMENTWISE_CATEGORIES:
            return False
        if not any(r.__class__ is Value and r != old for r in u.reads):
            return False
    return True


def match(g: Graph, pattern: Pat, node: Node) -> Match | None:
    caps: dict[str, Read] = {}
    nodes: list[Node] = []
    if _match_node(g, pattern, node, caps, nodes):
        return Match(g, node, caps, nodes)
    return None


def _remove_dead(g: Graph, node: Node, removed: list[int] | None) -> None:
    """Remove ``node`` if nothing uses it, then its operands that became dead (O(removed))."""
    stack = [node]
    while stack:
        n = stack.pop()
        if not g.has_node(n.id) or g.n_users(n.out):
            continue
        g.remove(n.id)
        if removed is not None:
            removed.append(n.id)
        for r in n.reads:
            if r.__class__ is Value:
                p = g.producer_of(r)
                if p is not None:
                    stack.append(p)


class Rewriter:
    """A set of rules, indexed by root op, applied by :meth:`run` to a fixed point."""

    def __init__(self, rules: Iterable[Rule], name: str = "rewriter") -> None:
        self.name = name
        self.rules = list(rules)
        self._by_op: dict[str, list[Rule]] = {}
        self._any: list[Rule] = []
        for r in self.rules:
            if r.pattern.op is None:
                self._any.append(r)
            else:
                for op in r.pattern.op:
                    self._by_op.setdefault(op, []).append(r)
        if self._any:  # rules for any op are tried after the op's own rules
            for op in OPS:
                self._by_op[op] = self._by_op.get(op, []) + self._any
        self.depth = max((pattern_depth(r.pattern) for r in self.rules), default=1)

    def run(
        self,
        g: Graph,
        *,
        record: list[Rewrite] | None = None,
        max_rewrites: int = 10_000_000,
        stop_after: int | None = None,
    ) -> int:
        """Rewrite ``g`` in place until no rule applies; returns the number of rewrites.

        ``max_rewrites`` guards against rules that undo each other (AirError when exceeded);
        ``stop_after`` stops quietly after that many rewrites (to look at an intermediate state).
        """
        by_op = self._by_op
        work = deque(n.id for n in g.toposort())
        queued = set(work)
        applied = 0
        if stop_after is not None and stop_after <= 0:
            return 0
        nodes = g._nodes
        journal_before = g.journal
        journal: list[int] = []
        g.journal = journal
        try:
            while work:
                nid = work.popleft()
                queued.discard(nid)
                node = nodes.get(nid)
                if node is None:
                    continue
                rules = by_op.get(node.op)
                if rules is None:
                    continue
                for rule in rules:
                    m = match(g, rule.pattern, node)
                    if m is None:
                        continue
                    journal.clear()
                    new = rule.build(m)
                    if new.__class__ is str:  # a value id typed as text ("v12")
                        new = as_value(new)
                    old = node.out
                    if new is None or (new.__class__ is Value and new == old):
                        self._drop_unused(g, journal)
                        continue
                    if new.__class__ is not Value and not _literal_fits(g, old):
                        new = g.insert("const", [], value=new, shape=node.shape, dtype=node.dtype)
                    g.replace_uses(old, new)
                    removed: list[int] | None = [] if record is not None else None
                    _remove_dead(g, node, removed)
                    for i in reversed(journal):  # scratch nodes the builder made but did not use
                        p = nodes.get(i)
                        if p is not None and p.out != new and not g.n_users(p.out):
                            _remove_dead(g, p, removed)
                    produced = [nodes[i] for i in journal if i in nodes]
                    for p in produced:
                        if p.id in nodes and p.id not in queued:
                            work.append(p.id)
                            queued.add(p.id)
                    if new.__class__ is Value:
                        self._requeue_users(g, new, work, queued)
                    applied += 1
                    if record is not None:
                        record.append(
                            Rewrite(
                                rule=rule.name,
                                location=rule.location,
                                matched=[n.id for n in m.nodes],
                                produced=[p.copy() for p in produced],
                                replaced=(old, new),
                                removed=removed or [],
                                version=g.version,
                            )
                        )
                    if stop_after is not None and applied >= stop_after:
                        return applied
                    if applied >= max_rewrites:
                        raise AirError(
                            f"{self.name}: more than {max_rewrites} rewrites; the rules probably loop",
                            hint=f"last rule applied: {rule.name} ({rule.location}); make the rules "
                            "reduce something (node count, depth) so they cannot undo each other",
                        )
                    break
        finally:
            g.journal = journal_before
        return applied

    def _requeue_users(self, g: Graph, value: Value, work: deque[int], queued: set[int]) -> None:
        """Queue the nodes whose patterns may now match: users of ``value``, up to pattern-depth levels up."""
        frontier = [value]
        for level in range(self.depth):
            nxt: list[Value] = []
            for v in frontier:
                for u in g.users_of(v):
                    if u.id not in queued:
                        work.append(u.id)
                        queued.add(u.id)
                    if level + 1 < self.depth:
                        nxt.append(u.out)
            if not nxt:
                break
            frontier = nxt

    @staticmethod
    def _drop_unused(g: Graph, created: list[int]) -> None:
        """A builder that declined may have inserted helper nodes: remove them again."""
        for nid in reversed(created):
            if g.has_node(nid):
                _remove_dead(g, g.node(nid), None)


def rewrite(
    g: Graph,
    rules: Iterable[Rule],
    *,
    record: list[Rewrite] | None = None,
    max_rewrites: int = 10_000_000,
) -> int:
    """Apply ``rules`` to ``g`` to a fixed point (convenience wrapper around :class:`Rewriter`)."""
    return Rewriter(rules).run(g, record=record, max_rewrites=max_rewrites)


def replay(g: Graph, rewrites: Iterable[Rewrite]) -> Graph:
    """Re-apply recorded rewrites to ``g`` (a copy of the graph the rewriter started from), in place."""
    for rw in rewrites:
        for p in rw.produced:
            g.add(p.copy())
        if rw.replaced is not None:
            g.replace_uses(rw.replaced[0], rw.replaced[1])
        for nid in rw.removed:
            if g.has_node(nid):
                g.remove(nid, force=True)
    return g


def rule(name: str, pattern: Pat) -> Callable[[Callable[[Match], Read | None]], Rule]:
    """Decorator form: ``@rule("x*1 -> x", Pat("mul", ["x", 1]))`` over a builder function."""

    def deco(fn: Callable[[Match], Read | None]) -> Rule:
        return Rule(name, pattern, fn)

    return deco
