"""The AIR graph: nodes in insertion order plus exact O(1) indices, kept in sync by every mutation.

Indices: value id -> producing node, value id -> users (node id -> number of reads), node id -> node.
Whole-graph algorithms (toposort, prune, verify, structural key) are O(N + E) and run on demand,
never implicitly after an edit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from itertools import filterfalse
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.node import Node, Read, make_node
from caten_lab.air.ops import attrs_items
from caten_lab.air.value import Value, as_value
from caten_lab.errors import AirError


class Graph:
    """A mutable SSA graph of AIR nodes. ``outputs`` are the values the program returns."""

    __slots__ = ("_nodes", "_producer", "_users", "outputs", "version", "journal")

    def __init__(self) -> None:
        self._nodes: dict[int, Node] = {}
        self._producer: dict[Value, Node] = {}
        # value -> its readers. Compact: absent = no reader; an int = one node reading it once (the
        # common case, no inner dict); else {node id: number of reads}. See use_counts().
        self._users: dict[Value, int | dict[int, int]] = {}
        self.outputs: list[Value] = []
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

    def producer_of(self, value: Value | str) -> Node | None:
        p = self._producer.get(value)  # type: ignore[call-overload]
        if p is None and value.__class__ is str:
            return self._producer.get(as_value(value))
        return p

    def users_of(self, value: Value | str) -> list[Node]:
        """The nodes reading ``value`` (each once, in no particular order)."""
        u = self._users.get(value)  # type: ignore[call-overload]
        if u is None:
            return self.users_of(as_value(value)) if value.__class__ is str else []
        if u.__class__ is int:
            return [self._nodes[u]]  # type: ignore[index]
        nodes = self._nodes
        return [nodes[i] for i in u]  # type: ignore[union-attr]

    def use_counts(self, value: Value | str) -> dict[int, int]:
        """{node id: how many of its operands read ``value``} (a fresh dict)."""
        u = self._users.get(value)  # type: ignore[call-overload]
        if u is None:
            return self.use_counts(as_value(value)) if value.__class__ is str else {}
        return {u: 1} if u.__class__ is int else dict(u)  # type: ignore[dict-item, arg-type]

    def n_users(self, value: Value | str) -> int:
        """Number of nodes reading ``value`` (an output counts as one more use)."""
        if value.__class__ is str:
            value = as_value(value)
        u = self._users.get(value)  # type: ignore[call-overload]
        n = 0 if u is None else 1 if u.__class__ is int else len(u)  # type: ignore[arg-type]
        return n + (value in self.outputs)

    def type_of(self, read: Read) -> tuple[tuple, DType] | None:
        """(shape, dtype) of a value read, None for a literal."""
        if read.__class__ is not Value:
            if read.__class__ is not str:
                return None
            read = as_value(read)
        n = self._producer.get(read)
        if n is None:
            raise AirError(f"value {read!r} is not defined in this graph")
        return n.shape, n.dtype

    def inputs(self) -> list[Node]:
        """Named ``allocate`` nodes: what must be bound at run time."""
        return [n for n in self._nodes.values() if n.op == "allocate" and n.attrs.name is not None]

    # ---- index maintenance (internal) ------------------------------------------------------
    def _use(self, value: Value, nid: int, count: int = 1) -> None:
        users = self._users
        u = users.get(value)
        if u is None:
            users[value] = nid if count == 1 else {nid: count}
        elif u.__class__ is int:
            users[value] = {u: 1 + count} if u == nid else {u: 1, nid: count}  # type: ignore[dict-item]
        else:
            u[nid] = u.get(nid, 0) + count  # type: ignore[union-attr]

    def _unuse(self, value: Value, nid: int, all_reads: bool = False) -> None:
        """Drop one read (or every read, with ``all_reads``) of ``value`` by node ``nid``."""
        users = self._users
        u = users.get(value)
        if u is None:
            return
        if u.__class__ is int:
            if u == nid:
                del users[value]
            return
        c = u.get(nid)  # type: ignore[union-attr]
        if c is None:
            return
        if c > 1 and not all_reads:
            u[nid] = c - 1  # type: ignore[index]
        else:
            del u[nid]  # type: ignore[union-attr]
            if not u:
                del users[value]

    # ---- mutation ----------------------------------------------------------------------
    def insert(self, op: str, reads: list[Read], /, *, source: str | None = None, **attrs: Any) -> Value:
        """Validate and append a new node; returns the value it writes.

        Operands are value ids (``Value``; their printed form ``"v12"`` is accepted too) or literals.
        """
        producer = self._producer
        read_types: list[tuple[tuple, DType] | None] = []
        for r in reads:
            if r.__class__ is Value:
                p = producer.get(r)  # type: ignore[arg-type]
                if p is None:
                    raise AirError(
                        f"op {op!r} reads value {r!r}, which is not defined in this graph",
                        where=source,
                        hint="read values returned by insert() on this same graph",
                    )
                read_types.append((p.shape, p.dtype))
            elif r.__class__ is str:  # a value id typed as text: convert, then insert (off the hot path)
                converted = [as_value(x) if x.__class__ is str else x for x in reads]
                return self.insert(op, converted, source=source, **attrs)
            else:
                read_types.append(None)  # a literal
        node = make_node(op, reads, attrs, writes=(), read_types=read_types, source=source)
        nid = node.id
        out = node.out = Value(nid)
        nodes = self._nodes
        if nid in nodes or out in producer:
            self.add(node)  # raises the duplicate-id / duplicate-value error
        # the body of add(), inlined: insert is the hottest path of graph building
        nodes[nid] = node
        producer[out] = node
        users = self._users
        for r in node.reads:
            if r.__class__ is Value:
                u = users.get(r)  # type: ignore[call-overload]
                if u is None:
                    users[r] = nid  # type: ignore[index]
                elif u.__class__ is int:
                    users[r] = {u: 2} if u == nid else {u: 1, nid: 1}  # type: ignore[index]
                else:
                    u[nid] = u.get(nid, 0) + 1
        if self.journal is not None:
            self.journal.append(nid)
        self.version += 1
        return out

    def add(self, node: Node) -> Node:
        """Append an already-built node (its reads must be defined; its writes must be new)."""
        nid = node.id
        nodes = self._nodes
        if nid in nodes:
            raise AirError(f"node id {nid} is already in the graph")
        producer = self._producer
        w = node.out
        if w.__class__ is not Value:
            raise AirError(
                f"node {nid} ({node.op}) writes {w!r} ({type(w).__name__}), which is not a value id",
                hint="value ids are Value objects (Graph.insert returns them; Value.parse('v12'))",
            )
        if w in producer:
            raise AirError(f"value {w!r} is already written by node {producer[w].id}")
        for r in node.reads:
            if r.__class__ is str:
                raise AirError(
                    f"node {nid} ({node.op}) reads the str {r!r}: operands are Value ids or scalar literals",
                    hint="use Value.parse(...) for a value id typed as text",
                )
        nodes[nid] = node
        producer[w] = node
        users = self._users
        for r in node.reads:
            if r.__class__ is Value:
                u = users.get(r)  # type: ignore[call-overload]
                if u is None:
                    users[r] = nid  # type: ignore[index]
                elif u.__class__ is int:
                    users[r] = {u: 2} if u == nid else {u: 1, nid: 1}  # type: ignore[index]
                else:
                    u[nid] = u.get(nid, 0) + 1
        if self.journal is not None:
            self.journal.append(nid)
        self.version += 1
        return node

    def remove(self, node_id: int, *, force: bool = False) -> Node:
        """Remove a node. Refused while its value has users or is an output, unless ``force``."""
        node = self.node(node_id)
        w = node.out
        if not force and (w in self._users or w in self.outputs):
            users = [n.id for n in self.users_of(w)]
            raise AirError(
                f"cannot remove node {node_id} ({node.op}): its value {w!r} is still used by "
                f"{users or 'the graph outputs'}",
                hint="replace_uses(...) first, or prune()",
            )
        for r in node.reads:
            if r.__class__ is Value:
                self._unuse(r, node_id, all_reads=True)  # type: ignore[arg-type]
        self._producer.pop(w, None)
        del self._nodes[node_id]
        self.version += 1
        return node

    def set_read(self, node: Node, index: int, value: Read) -> None:
        """Change one operand of ``node`` (no type re-check: callers keep types consistent)."""
        if self._nodes.get(node.id) is not node:
            raise AirError(f"set_read: node {node.id} ({node.op}) is not in this graph")
        if value.__class__ is str:
            value = as_value(value)
        if value.__class__ is Value and value not in self._producer:
            raise AirError(f"set_read: value {value!r} is not defined in this graph")
        old = node.reads[index]
        if old.__class__ is Value:
            self._unuse(old, node.id)
        node.reads[index] = value
        if value.__class__ is Value:
            self._use(value, node.id)
        self.version += 1

    def replace_uses(self, old: Value | str, new: Read, *, outputs: bool = True) -> int:
        """Make every reader of ``old`` read ``new``; O(users of old). Returns reads changed."""
        if old.__class__ is str:
            old = as_value(old)
        if new.__class__ is str:
            new = as_value(new)
        if old == new:
            return 0
        if new.__class__ is Value and new not in self._producer:
            raise AirError(f"replace_uses: value {new!r} is not defined in this graph")
        if outputs and new.__class__ is not Value and old in self.outputs:
            raise AirError(
                f"replace_uses: output {old!r} cannot become the literal {new!r}",
                hint="insert a const node for the literal and replace with its value",
            )
        counts = self.use_counts(old)
        changed = 0
        nodes = self._nodes
        for nid in counts:
            reads = nodes[nid].reads
            for i, r in enumerate(reads):
                if r == old and r.__class__ is Value:
                    reads[i] = new
                    changed += 1
        if counts:
            del self._users[old]
            if new.__class__ is Value:
                for nid, cnt in counts.items():
                    self._use(new, nid, cnt)
        if outputs and old in self.outputs:
            self.outputs = [new if o == old else o for o in self.outputs]  # type: ignore[misc]
        self.version += 1
        return changed

    def replace_node(self, node_id: int, new: Node) -> Node:
        """Put ``new`` in place of node ``node_id``: same id, same writes, same position; O(reads)."""
        old = self.node(node_id)
        for r in new.reads:
            if r.__class__ is Value and r not in self._producer:
                raise AirError(f"replace_node: value {r!r} is not defined in this graph")
        if new.id != node_id and new.id in self._nodes:
            raise AirError(f"replace_node: the new node is node {new.id} of this graph; pass a fresh node")
        for r in old.reads:
            if r.__class__ is Value:
                self._unuse(r, node_id)  # type: ignore[arg-type]
        new.id = node_id
        new.out = old.out
        for r in new.reads:
            if r.__class__ is Value:
                self._use(r, node_id)  # type: ignore[arg-type]
        self._nodes[node_id] = new
        self._producer[new.out] = new
        self.version += 1
        return new

    def mark_output(self, value: Value | str) -> None:
        if value.__class__ is str:
            value = as_value(value)
        if value not in self._producer:
            raise AirError(f"mark_output: value {value!r} is not defined in this graph")
        if value not in self.outputs:
            self.outputs.append(value)
        self.version += 1

    # ---- whole-graph algorithms (O(N + E)) ---------------------------------------------
    def toposort(self) -> list[Node]:
        """Nodes with every producer before its users; stable (a sorted graph keeps its order).

        The visit state is keyed by value id: an operand already placed is recognised from the
        operand itself, without touching its producer node.
        """
        order: list[Node] = []
        state: dict[Value, int] = {}  # a node's value -> 1 = on the stack, 2 = placed
        producer = self._producer
        for root in self._nodes.values():
            out = root.out
            if out in state:
                continue
            for r in root.reads:  # fast path (every node of an already sorted graph): operands placed
                if r.__class__ is Value and state.get(r) != 2 and r in producer:  # type: ignore[call-overload]
                    break
            else:
                state[out] = 2
                order.append(root)
                continue
            stack: list[tuple[Node, int]] = [(root, 0)]
            state[out] = 1
            while stack:
                node, i = stack[-1]
                reads = node.reads
                while i < len(reads):
                    r = reads[i]
                    i += 1
                    if r.__class__ is Value:
                        s = state.get(r)  # type: ignore[call-overload]
                        if s is None:
                            p = producer.get(r)  # type: ignore[call-overload]
                            if p is None:
                                continue
                            stack[-1] = (node, i)
                            state[r] = 1  # type: ignore[index]
                            stack.append((p, 0))
                            break
                        if s == 1:
                            p = producer[r]  # type: ignore[index]
                            raise AirError(f"the graph has a cycle through node {p.id} ({p.op})")
                else:
                    stack.pop()
                    state[node.out] = 2
                    order.append(node)
        return order

    def sort(self) -> Graph:
        """Reorder the nodes topologically in place."""
        self._nodes = {n.id: n for n in self.toposort()}
        self.version += 1
        return self

    def live_nodes(self) -> set[int]:
        """Ids of nodes the outputs depend on.

        One sweep over the nodes in reverse order: in a graph kept in topological order (what
        ``insert`` builds) every producer comes after its readers in that sweep, and the walk is
        sequential in memory. If some live node was reached only after the sweep passed it (the
        graph is out of order), a depth-first search from the outputs gives the exact answer.
        """
        producer = self._producer
        live = {producer[o].id for o in self.outputs if o in producer}
        visited = 0
        for n in reversed(self._nodes.values()):
            if n.id in live:
                visited += 1
                for r in n.reads:
                    if r.__class__ is Value:
                        p = producer.get(r)  # type: ignore[arg-type]
                        if p is not None:
                            live.add(p.id)
        return live if visited == len(live) else self._live_nodes_dfs()

    def _live_nodes_dfs(self) -> set[int]:
        live: set[int] = set()
        producer = self._producer
        stack = [producer[o] for o in self.outputs if o in producer]
        while stack:
            n = stack.pop()
            if n.id in live:
                continue
            live.add(n.id)
            for r in n.reads:
                if r.__class__ is Value:
                    p = producer.get(r)  # type: ignore[arg-type]
                    if p is not None and p.id not in live:
                        stack.append(p)
        return live

    def prune(self, removed: list[int] | None = None) -> int:
        """Remove every node the outputs do not depend on; returns how many were removed.

        Works from the users index instead of walking the live graph: in an acyclic graph a node
        the outputs do not depend on is either unread or read only by such nodes, so deleting
        the unread, non-output nodes, then the producers this leaves unread, and so on, removes
        exactly the dead nodes. The one pass over the index runs in C; the Python work is
        O(dead nodes + their reads), and a graph with nothing dead is barely touched. (A dead
        cycle, which ``verify`` rejects, is not found this way: ``live_nodes`` still is exact.)

        ``removed``, when given, receives the ids of the removed nodes, in the order removed.
        """
        producer = self._producer
        users = self._users
        nodes = self._nodes
        outputs = set(self.outputs)
        unread = list(filterfalse(users.__contains__, producer))
        queue = [v for v in unread if v not in outputs] if outputs else unread
        count = 0
        for v in queue:  # grows while it is walked: producers left unread are appended
            node = producer.pop(v)
            nid = node.id
            del nodes[nid]
            count += 1
            if removed is not None:
                removed.append(nid)
            for r in node.reads:
                if r.__class__ is not Value:
                    continue
                u = users.get(r)  # type: ignore[call-overload]
                if u is None:
                    continue
                if u.__class__ is int:
                    if u != nid:
                        continue
                elif u.pop(nid, None) is None or u:  # type: ignore[union-attr]
                    continue
                del users[r]  # type: ignore[arg-type]
                if r not in outputs and r in producer:  # (a read of a removed node has no producer)
                    queue.append(r)
        if count:
            self.version += 1
        return count

    def verify(self) -> None:
        """Check every read is defined, there is no cycle, outputs exist and the indices are exact.

        A fast O(N + E) pass checks the indices in place, without rebuilding them; on any mismatch
        :meth:`_diagnose` rebuilds them to say exactly what is wrong.
        """
        nodes = self._nodes
        producer = self._producer
        users = self._users
        n_pairs = 0  # distinct (value, reader) pairs
        ok = True
        for nid, n in nodes.items():
            if nid != n.id or producer.get(n.out) is not n:
                ok = False
                break
            reads = n.reads
            if len(reads) == 1 or (len(reads) == 2 and reads[0] != reads[1]):
                for r in reads:
                    if r.__class__ is Value:
                        u = users.get(r)  # type: ignore[call-overload]
                        if u is None or (u != nid if u.__class__ is int else u.get(nid) != 1):  # type: ignore[union-attr]
                            ok = False
                        n_pairs += 1
            elif reads:
                counts: dict[Value, int] = {}
                for r in reads:
                    if r.__class__ is Value:
                        counts[r] = counts.get(r, 0) + 1  # type: ignore[index]
                for r, c in counts.items():
                    u = users.get(r)
                    if u is None or (c != 1 or u != nid if u.__class__ is int else u.get(nid) != c):  # type: ignore[union-attr]
                        ok = False
                n_pairs += len(counts)
            if not ok:
                break
        if ok and len(nodes) == len(producer):
            total = 0
            for u in users.values():
                total += 1 if u.__class__ is int else len(u)  # type: ignore[arg-type]
            ok = total == n_pairs and all(r in producer for r in users)
        else:
            ok = False
        if not ok or any(o not in producer for o in self.outputs):
            self._diagnose()
            raise AirError("index out of sync")  # unreachable: _diagnose raises
        self.toposort()  # raises on a cycle

    def _diagnose(self) -> None:
        """Rebuild the indices from the nodes and raise an AirError naming the first difference."""
        producer: dict[Value, Node] = {}
        users: dict[Value, dict[int, int]] = {}
        for nid, n in self._nodes.items():
            if nid != n.id:
                raise AirError(f"index out of sync: node {n.id} ({n.op}) is stored under id {nid}")
            w = n.out
            if w is None:
                raise AirError(f"node {n.id} ({n.op}) writes no value")
            if w in producer:
                raise AirError(f"value {w!r} is written twice (nodes {producer[w].id} and {n.id})")
            producer[w] = n
        for n in self._nodes.values():
            nid = n.id
            for r in n.reads:
                if r.__class__ is str:
                    raise AirError(
                        f"node {nid} ({n.op}) reads the str {r!r}: operands are Value ids or scalar literals",
                        where=n.source,
                        hint="a pass assigned to node.reads directly: use Graph.set_read / replace_uses",
                    )
                if r.__class__ is Value:
                    if r not in producer:
                        raise AirError(
                            f"node {nid} ({n.op}) reads {r!r}, which no node writes", where=n.source
                        )
                    u = users.get(r)  # type: ignore[call-overload]
                    if u is None:
                        users[r] = {nid: 1}  # type: ignore[index]
                    else:
                        u[nid] = u.get(nid, 0) + 1
        for o in self.outputs:
            if o.__class__ is str:
                raise AirError(
                    f"output {o!r} is a str, not a value id",
                    hint="use mark_output(...), or Value.parse(...) when assigning graph.outputs by hand",
                )
            if o not in producer:
                raise AirError(f"output {o!r} is not written by any node")
        mine = self._producer
        if len(producer) != len(mine) or any(mine.get(k) is not v for k, v in producer.items()):
            raise AirError("index out of sync: value -> producer")
        if len(users) != len(self._users) or any(self.use_counts(k) != v for k, v in users.items()):
            bad = sorted(k for k in set(users) | set(self._users) if self.use_counts(k) != users.get(k, {}))[
                :5
            ]
            raise AirError(f"index out of sync: value -> users differs for {bad}")

    def copy(self) -> Graph:
        """An independent graph with the same node ids and values (nodes are copied, attrs shared)."""
        g = Graph()
        nodes = g._nodes
        producer = g._producer
        for nid, n in self._nodes.items():
            c = n.copy()
            nodes[nid] = c
            producer[c.out] = c
        g._users = {v: u if u.__class__ is int else dict(u) for v, u in self._users.items()}  # type: ignore[misc]
        g.outputs = list(self.outputs)
        return g

    # ---- structural identity (the schedule-cache key) ----------------------------------
    def structural_key(self) -> tuple:
        """A canonical form up to renaming of value ids, over the nodes the outputs depend on.

        Nodes are numbered in post-order of a DFS from the outputs, so two graphs that compute the
        same thing with different value ids or insertion orders get equal keys.
        """
        index: dict[Value, int] = {}
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
                    if r.__class__ is Value and r not in index and r not in onstack:
                        stack[-1] = (node, i)
                        onstack.add(r)
                        stack.append((producer[r], 0))
                        break
                else:
                    stack.pop()
                    rd = tuple(
                        ("v", index[r]) if r.__class__ is Value else ("l", type(r).__name__, _key_scalar(r))
                        for r in node.reads
                    )
                    keys.append((node.op, _key_attrs(node.attrs), node.dtype.value, node.shape, rd))
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
        lines.append("outputs: " + ", ".join(map(str, self.outputs)))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<Graph {len(self._nodes)} nodes, outputs={self.outputs}>"


def _key_scalar(v: Any) -> Any:
    """Floats by their exact bits, so NaN equals NaN and 0.0 differs from -0.0 in structural keys."""
    return v.hex() if v.__class__ is float else v


def _key_attrs(attrs: Any) -> tuple:
    items = attrs_items(attrs)
    if any(v.__class__ is float for _, v in items):
        return tuple((k, ("f", v.hex()) if v.__class__ is float else v) for k, v in items)
    return items


def graph_from_nodes(nodes: Iterable[Node], outputs: Iterable[Value]) -> Graph:
    g = Graph()
    for n in nodes:
        g.add(n)
    g.outputs = list(outputs)
    return g


def state_outputs(g: Graph) -> dict[int, str]:
    """Output index -> name of the input it updates in place.

    An output that is a chain of ``store`` nodes rooted at ``allocate(name=X)`` is the new value of
    the state buffer X (a KV cache, say): backends write it into the caller's array X in place.
    """
    out: dict[int, str] = {}
    for i, o in enumerate(g.outputs):
        p = g.producer_of(o)
        if p is None or p.op != "store":
            continue
        while p is not None and p.op == "store":
            p = g.producer_of(p.reads[0])
        if p is not None and p.op == "allocate" and p.attrs.name is not None:
            out[i] = p.attrs.name
    return out
