"""The AIR graph: nodes in insertion order plus exact O(1) indices, kept in sync by every mutation.

Indices: value id -> producing node, value id -> users (node id -> number of reads), node id -> node.
Whole-graph algorithms (toposort, prune, verify, structural key) are O(N + E) and run on demand,
never implicitly after an edit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.node import Node, Read, make_node
from caten_lab.air.ops import attrs_items
from caten_lab.errors import AirError


class Graph:
    """A mutable SSA graph of AIR nodes. ``outputs`` are the values the program returns."""

    __slots__ = ("_nodes", "_producer", "_users", "outputs", "version", "journal")

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        self._producer: dict[str, Node] = {}
        self._users: dict[str, dict[int, int]] = {}
        self.outputs: list[str] = []
        self.version = 0  # bumped by every mutation
        self.journal: list[int] | None = None  # when a list, ids of nodes added are appended (rewriter)

    # ---- queries (all O(1) or O(result)) -------------------------------------------------
    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(list(self._nodes.values()))

    @property
    def nodes(self) -> list[Node]:
        return list(self._nodes.values())

    def node(self, node_id: int) -> Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise AirError(f"no node with id {node_id} in this graph") from None

    def has_node(self, node_id: int) -> bool:
        return node_id in self._nodes

    def producer_of(self, value: str) -> Node | None:
        return self._producer.get(value)

    def users_of(self, value: str) -> list[Node]:
        return [self._nodes[i] for i in self._users.get(value, ())]

    def n_users(self, value: str) -> int:
        """Number of nodes reading ``value`` (an output counts as one more use)."""
        return len(self._users.get(value, ())) + (value in self.outputs)

    def type_of(self, read: Read) -> tuple[tuple, DType] | None:
        """(shape, dtype) of a value read, None for a literal."""
        if not isinstance(read, str):
            return None
        n = self._producer.get(read)
        if n is None:
            raise AirError(f"value {read!r} is not defined in this graph")
        return n.shape, n.dtype

    def inputs(self) -> list[Node]:
        """Named ``allocate`` nodes: what must be bound at run time."""
        return [n for n in self._nodes.values() if n.op == "allocate" and n.attrs.name is not None]

    # ---- mutation ----------------------------------------------------------------------
    def insert(self, op: str, reads: list[Read], /, *, source: str | None = None, **attrs: Any) -> str:
        """Validate and append a new node; returns the value it writes."""
        read_types = [self.type_of(r) for r in reads]
        node = make_node(op, reads, attrs, writes=(), read_types=read_types, source=source)
        node.writes = (f"v{node.id}",)
        self.add(node)
        return node.out

    def add(self, node: Node) -> Node:
        """Append an already-built node (its reads must be defined; its writes must be new)."""
        if node.id in self._nodes:
            raise AirError(f"node id {node.id} is already in the graph")
        for w in node.writes:
            if w in self._producer:
                raise AirError(f"value {w!r} is already written by node {self._producer[w].id}")
        self._nodes[node.id] = node
        for w in node.writes:
            self._producer[w] = node
            self._users.setdefault(w, {})
        for r in node.reads:
            if isinstance(r, str):
                u = self._users.setdefault(r, {})
                u[node.id] = u.get(node.id, 0) + 1
        if self.journal is not None:
            self.journal.append(node.id)
        self.version += 1
        return node

    def remove(self, node_id: int, *, force: bool = False) -> Node:
        """Remove a node. Refused while its value has users or is an output, unless ``force``."""
        node = self.node(node_id)
        if not force:
            for w in node.writes:
                if self._users.get(w) or w in self.outputs:
                    users = [self._nodes[i].id for i in self._users.get(w, ())]
                    raise AirError(
                        f"cannot remove node {node_id} ({node.op}): its value {w!r} is still used by "
                        f"{users or 'the graph outputs'}",
                        hint="replace_uses(...) first, or prune()",
                    )
        for r in node.reads:
            if isinstance(r, str):
                u = self._users.get(r)
                if u is not None and node_id in u:
                    del u[node_id]
        for w in node.writes:
            del self._producer[w]
            if not self._users.get(w):
                self._users.pop(w, None)
        del self._nodes[node_id]
        self.version += 1
        return node

    def set_read(self, node: Node, index: int, value: Read) -> None:
        """Change one operand of ``node`` (no type re-check: callers keep types consistent)."""
        old = node.reads[index]
        if isinstance(old, str):
            u = self._users[old]
            u[node.id] -= 1
            if u[node.id] == 0:
                del u[node.id]
        node.reads[index] = value
        if isinstance(value, str):
            if value not in self._producer:
                raise AirError(f"value {value!r} is not defined in this graph")
            u = self._users.setdefault(value, {})
            u[node.id] = u.get(node.id, 0) + 1
        self.version += 1

    def replace_uses(self, old: str, new: Read, *, outputs: bool = True) -> int:
        """Make every reader of ``old`` read ``new``; O(users of old). Returns reads changed."""
        if old == new:
            return 0
        if isinstance(new, str) and new not in self._producer:
            raise AirError(f"replace_uses: value {new!r} is not defined in this graph")
        users = self._users.get(old, {})
        changed = 0
        for nid in list(users):
            node = self._nodes[nid]
            for i, r in enumerate(node.reads):
                if r == old and isinstance(r, str):
                    node.reads[i] = new
                    changed += 1
        if users:
            if isinstance(new, str):
                nu = self._users.setdefault(new, {})
                for nid, cnt in users.items():
                    nu[nid] = nu.get(nid, 0) + cnt
            users.clear()
        if outputs and old in self.outputs:
            if not isinstance(new, str):
                raise AirError(f"replace_uses: output {old!r} cannot become the literal {new!r}")
            self.outputs = [new if o == old else o for o in self.outputs]
        self.version += 1
        return changed

    def replace_node(self, node_id: int, new: Node) -> Node:
        """Put ``new`` in place of node ``node_id``: same id, same writes, same position; O(reads)."""
        old = self.node(node_id)
        for r in old.reads:
            if isinstance(r, str):
                u = self._users[r]
                u[node_id] -= 1
                if u[node_id] == 0:
                    del u[node_id]
        new.id = node_id
        new.writes = old.writes
        for r in new.reads:
            if isinstance(r, str):
                if r not in self._producer:
                    raise AirError(f"replace_node: value {r!r} is not defined in this graph")
                u = self._users.setdefault(r, {})
                u[node_id] = u.get(node_id, 0) + 1
        self._nodes[node_id] = new
        for w in new.writes:
            self._producer[w] = new
        self.version += 1
        return new

    def mark_output(self, value: str) -> None:
        if value not in self._producer:
            raise AirError(f"mark_output: value {value!r} is not defined in this graph")
        if value not in self.outputs:
            self.outputs.append(value)
        self.version += 1

    # ---- whole-graph algorithms (O(N + E)) ---------------------------------------------
    def toposort(self) -> list[Node]:
        """Nodes with every producer before its users; stable (a sorted graph keeps its order)."""
        order: list[Node] = []
        state: dict[int, int] = {}  # 1 = on stack, 2 = done
        producer = self._producer
        for root in self._nodes.values():
            if root.id in state:
                continue
            stack: list[tuple[Node, int]] = [(root, 0)]
            state[root.id] = 1
            while stack:
                node, i = stack[-1]
                reads = node.reads
                while i < len(reads):
                    r = reads[i]
                    i += 1
                    if isinstance(r, str):
                        p = producer.get(r)
                        if p is None:
                            continue
                        s = state.get(p.id)
                        if s is None:
                            stack[-1] = (node, i)
                            state[p.id] = 1
                            stack.append((p, 0))
                            break
                        if s == 1:
                            raise AirError(f"the graph has a cycle through node {p.id} ({p.op})")
                else:
                    stack.pop()
                    state[node.id] = 2
                    order.append(node)
        return order

    def sort(self) -> Graph:
        """Reorder the nodes topologically in place."""
        self._nodes = {n.id: n for n in self.toposort()}
        self.version += 1
        return self

    def live_nodes(self) -> set[int]:
        """Ids of nodes the outputs depend on."""
        live: set[int] = set()
        stack = [self._producer[o] for o in self.outputs if o in self._producer]
        while stack:
            n = stack.pop()
            if n.id in live:
                continue
            live.add(n.id)
            for r in n.reads:
                if isinstance(r, str):
                    p = self._producer.get(r)
                    if p is not None and p.id not in live:
                        stack.append(p)
        return live

    def prune(self) -> int:
        """Remove every node the outputs do not depend on; returns how many were removed."""
        live = self.live_nodes()
        dead = [nid for nid in self._nodes if nid not in live]
        for nid in dead:
            self.remove(nid, force=True)
        return len(dead)

    def verify(self) -> None:
        """Check every read is defined, there is no cycle, outputs exist and the indices are exact."""
        producer: dict[str, Node] = {}
        users: dict[str, dict[int, int]] = {}
        for n in self._nodes.values():
            for w in n.writes:
                if w in producer:
                    raise AirError(f"value {w!r} is written twice (nodes {producer[w].id} and {n.id})")
                producer[w] = n
                users.setdefault(w, {})
        for n in self._nodes.values():
            for r in n.reads:
                if isinstance(r, str):
                    if r not in producer:
                        raise AirError(f"node {n.id} ({n.op}) reads {r!r}, which no node writes", where=n.source)
                    u = users.setdefault(r, {})
                    u[n.id] = u.get(n.id, 0) + 1
        for o in self.outputs:
            if o not in producer:
                raise AirError(f"output {o!r} is not written by any node")
        if producer != self._producer or any(producer[k] is not self._producer[k] for k in producer):
            raise AirError("index out of sync: value -> producer")
        mine = {k: v for k, v in self._users.items() if v}
        theirs = {k: v for k, v in users.items() if v}
        if mine != theirs:
            bad = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))[:5]
            raise AirError(f"index out of sync: value -> users differs for {bad}")
        self.toposort()  # raises on a cycle

    def copy(self) -> Graph:
        g = Graph()
        for n in self._nodes.values():
            g.add(n.copy())
        g.outputs = list(self.outputs)
        g.version = 0
        return g

    # ---- structural identity (the schedule-cache key) ----------------------------------
    def structural_key(self) -> tuple:
        """A canonical form up to renaming of value ids, over the nodes the outputs depend on.

        Nodes are numbered in post-order of a DFS from the outputs, so two graphs that compute the
        same thing with different value ids or insertion orders get equal keys.
        """
        index: dict[str, int] = {}
        keys: list[tuple] = []
        producer = self._producer
        for o in self.outputs:
            if o in index:
                continue
            stack: list[tuple[Node, int]] = [(producer[o], 0)]
            onstack = {o}
            while stack:
                node, i = stack[-1]
                reads = node.reads
                while i < len(reads):
                    r = reads[i]
                    i += 1
                    if isinstance(r, str) and r not in index and r not in onstack:
                        stack[-1] = (node, i)
                        onstack.add(r)
                        stack.append((producer[r], 0))
                        break
                else:
                    stack.pop()
                    rd = tuple(("v", index[r]) if isinstance(r, str) else ("l", type(r).__name__, r) for r in node.reads)
                    keys.append((node.op, attrs_items(node.attrs), node.dtype.value, node.shape, rd))
                    index[node.out] = len(keys) - 1
        return tuple(keys), tuple(index[o] for o in self.outputs)

    def structural_hash(self) -> str:
        """A stable hex digest of :meth:`structural_key` (same across processes)."""
        return hashlib.blake2b(repr(self.structural_key()).encode(), digest_size=16).hexdigest()

    def structurally_equal(self, other: Graph) -> bool:
        return self.structural_key() == other.structural_key()

    # ---- presentation ------------------------------------------------------------------
    def dump(self) -> str:
        """One line per node in order, then the outputs."""
        lines = [repr(n) for n in self._nodes.values()]
        lines.append("outputs: " + ", ".join(self.outputs))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {len(self._nodes)} nodes, outputs={self.outputs}>"


def graph_from_nodes(nodes: Iterable[Node], outputs: Iterable[str]) -> Graph:
    g = Graph()
    for n in nodes:
        g.add(n)
    g.outputs = list(outputs)
    return g
