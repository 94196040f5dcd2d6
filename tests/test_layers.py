"""The package's layers, checked from the source: the import graph of caten_lab, built from the AST.

Every import counts, top-level or inside a function: an import moved into a function to dodge a
cycle is still a cycle. Only imports under ``if TYPE_CHECKING:`` never run; they are left out of
the cycle check (a mixin's annotations name the class it is mixed into) but must still respect the
layers and the private-name rule. Asserted: no import cycle anywhere in the package, no module
imports a higher layer (the order of DESIGN.md), no ``from x import _private`` or ``module._private``
across modules, and only the listed modules use regular expressions (never over generated C) or import through
``importlib`` (which this graph cannot see).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import caten_lab

PACKAGE = Path(caten_lab.__file__).parent
ROOT = "caten_lab"

# Layers, lowest first (DESIGN.md: air < passes < codegen < runtime < compiler < frontend/nn/models <
# workflow < notebook). A module may import its own layer and the layers below; the root package
# (caten_lab/__init__.py, the public facade) is above every layer and no module imports it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "config", "token_ids", "formats", "version", "type_words"),
    ("air",),
    ("passes",),
    ("codegen",),
    ("runtime",),
    ("compiler",),
    ("frontend",),
    ("nn",),
    ("models",),
    ("workflow",),
    ("notebook", "cli"),
)
RANK = {part: i for i, parts in enumerate(LAYERS) for part in parts}

# What each module that uses regular expressions reads with them. None of them may read generated C.
REGEX_USERS = {
    "caten_lab.formats.rules": "the fixed rule table formats/rules.h shipped in the package",
    "caten_lab.runtime.toolchain": "/proc/cpuinfo and the C compiler's diagnostics",
    "caten_lab.notebook.magic": "the C compiler's diagnostics",
}

# Imports through importlib are invisible to the graph below: only these modules may make them.
DYNAMIC_IMPORTERS = {
    "caten_lab.notebook": "its lazy public names (_LAZY), all of caten_lab.notebook",
}

# Failures in files other helpers of issue 14 own; the lead fixes them at merge and empties these.
# An entry that no longer fails makes the test fail too, so the lists only shrink.
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_LAYER_VIOLATIONS: set[tuple[str, str]] = set()
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()
KNOWN_GENERATED_C_REGEX: set[str] = set()


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a module of the package)
    name: str | None  # the imported name, for ``from target import name`` of a non-module
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module


def modules() -> dict[str, Module]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        name = ".".join(parts)
        out[name] = Module(name, path, is_package, ast.parse(path.read_text(), str(path)))
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_only: bool = False):  # noqa: ANN202 - yields (node, type_only)
    """Every node under ``node`` with whether it sits in the body of an ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        yield child, type_only
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_only
                yield from _walk(stmt, type_only)
        else:
            yield from _walk(child, type_only)


def imports_of(mod: Module, known: dict[str, Module]) -> tuple[list[Import], list[tuple[str, str, int]]]:
    """The package imports of ``mod``, and its ``alias._private`` reads of imported package modules."""
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    found: list[Import] = []
    aliases: dict[str, str] = {}  # local name -> package module it is bound to
    for node, type_only in _walk(mod.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == ROOT or a.name.startswith(ROOT + "."):
                    found.append(Import(mod.name, a.name, None, node.lineno, type_only))
                    if a.asname:
                        aliases[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not (target == ROOT or target.startswith(ROOT + ".")):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in known:
                    found.append(Import(mod.name, sub, None, node.lineno, type_only))
                    aliases[a.asname or a.name] = sub
                else:
                    found.append(Import(mod.name, target, a.name, node.lineno, type_only))
    reads = []
    for node in ast.walk(mod.tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and _private(node.attr) and aliases[node.value.id] != mod.name):
            reads.append((mod.name, f"{aliases[node.value.id]}.{node.attr}", node.lineno))
    return found, reads


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@pytest.fixture(scope="module")
def graph() -> tuple[dict[str, Module], list[Import], list[tuple[str, str, int]]]:
    known = modules()
    edges: list[Import] = []
    reads: list[tuple[str, str, int]] = []
    for mod in known.values():
        e, r = imports_of(mod, known)
        edges += e
        reads += r
    unknown = sorted({(e.source, e.target) for e in edges if e.target not in known})
    assert not unknown, f"imports of modules that do not exist: {unknown}"
    return known, edges, reads


def cycles(nodes: list[str], succ: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative: O(N + E))."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(succ.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(succ.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(frozenset(comp))
    return out


def _check_known(found: set, known: set, what: str) -> None:
    new = sorted(map(str, found - known))
    stale = sorted(map(str, known - found))
    assert not new, f"{what}:\n  " + "\n  ".join(new)
    assert not stale, f"fixed, remove from the known list in tests/test_layers.py: {what}:\n  " + "\n  ".join(stale)


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    succ = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert sorted(map(sorted, cycles(sorted(succ), succ))) == [["a", "b", "c"], ["d", "e"]]
    assert cycles(["x", "y"], {"x": {"y"}}) == []


def test_no_import_cycles(graph) -> None:  # noqa: ANN001
    known, edges, _ = graph
    succ: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only and e.target != e.source:
            succ.setdefault(e.source, set()).add(e.target)
    found = set(cycles(sorted(known), succ))
    detail = {c: sorted(f"{e.source} -> {e.target} (line {e.line})" for e in edges
                        if e.source in c and e.target in c and not e.type_only) for c in found - KNOWN_CYCLES}
    assert not detail, "import cycles:\n" + "\n".join("  " + "\n  ".join(d) for d in detail.values())
    _check_known(found, KNOWN_CYCLES, "import cycles")


def test_type_only_imports_close_no_cycle_but_the_tensor_mixins(graph) -> None:  # noqa: ANN001
    """Type-only imports are left out above only for the Tensor mixins; nowhere else do they close a cycle."""
    known, edges, _ = graph
    succ: dict[str, set[str]] = {}
    for e in edges:
        if e.target != e.source:
            succ.setdefault(e.source, set()).add(e.target)
    mixins = {f"caten_lab.frontend.{m}" for m in ("tensor", "elementwise", "movement", "reduce", "division")}
    found = {c for c in cycles(sorted(known), succ) if not c <= mixins} - KNOWN_CYCLES
    assert not found, f"cycles through type-only imports: {[sorted(c) for c in found]}"


def test_no_module_imports_a_higher_layer(graph) -> None:  # noqa: ANN001
    known, edges, _ = graph
    unranked = sorted({_layer(m) for m in known if _layer(m) is not None and _layer(m) not in RANK})
    assert not unranked, f"modules of no layer (add them to LAYERS): {unranked}"
    found = set()
    for e in edges:
        src, dst = _layer(e.source), _layer(e.target)
        if src is None:  # the root facade may import anything
            continue
        if dst is None or RANK[dst] > RANK[src]:
            found.add((e.source, e.target))
    _check_known(found, KNOWN_LAYER_VIOLATIONS, "imports of a higher layer")


def test_no_private_names_across_modules(graph) -> None:  # noqa: ANN001
    _, edges, reads = graph
    found = {(e.source, f"{e.target}.{e.name}") for e in edges
             if e.name is not None and _private(e.name) and e.target != e.source}
    found |= {(src, name) for src, name, _ in reads}
    _check_known(found, KNOWN_PRIVATE_IMPORTS, "private names imported across modules")


def test_regular_expressions_never_read_generated_c(graph) -> None:  # noqa: ANN001
    known, _, _ = graph
    users = set()
    for mod in known.values():
        for node in ast.walk(mod.tree):
            if (isinstance(node, ast.Import) and any(a.name == "re" for a in node.names)) or (
                isinstance(node, ast.ImportFrom) and node.module == "re"
            ):
                users.add(mod.name)
    listed = set(REGEX_USERS) | KNOWN_GENERATED_C_REGEX
    assert users <= listed, f"modules using regular expressions, not listed in REGEX_USERS: {sorted(users - listed)}"
    _check_known(users & KNOWN_GENERATED_C_REGEX, KNOWN_GENERATED_C_REGEX, "regular expressions over generated C")


def test_only_the_listed_modules_import_through_importlib(graph) -> None:  # noqa: ANN001
    known, _, _ = graph
    users = {mod.name for mod in known.values() for node in ast.walk(mod.tree)
             if (isinstance(node, ast.Attribute) and node.attr == "import_module")
             or (isinstance(node, ast.Name) and node.id in ("__import__", "import_module"))}
    assert users == set(DYNAMIC_IMPORTERS), f"dynamic imports: {sorted(users)}; listed: {sorted(DYNAMIC_IMPORTERS)}"
