"""The package's import graph has no cycle and keeps the layer order below (lazy imports inside functions count too)."""
from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "lightmem"
# The layer order, top down. The top packages import the library; the library never imports them:
#   cli  ->  server, config          (the command line serves, and maps Hydra configs)
#   evaluation, training  ->  config  (neither imports the other, the server or the command line)
#   server  ->  config;  config  ->  the library only
#   the library: roles -> retrieval -> stores; the stores' backends do not know each other
TOP = ("lightmem.evaluation", "lightmem.training", "lightmem.server", "lightmem.cli", "lightmem.config")
# Which top packages each top package may import (none may import one that is not listed).
TOP_MAY_IMPORT = {
    "lightmem.cli": {"lightmem.server", "lightmem.config"},
    "lightmem.server": {"lightmem.config"},
    "lightmem.evaluation": {"lightmem.config"},
    "lightmem.training": {"lightmem.config"},
    "lightmem.config": set(),
}
# The stores sit below retrieval, the roles and the Memory that search them.
ABOVE_STORES = ("lightmem.retrieval", "lightmem.roles", "lightmem.memory", "lightmem.build", "lightmem.write",
                "lightmem.indexer", "lightmem.queue_indexer", "lightmem.worker", "lightmem.async_memory")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The lightmem modules ``name`` imports anywhere in its file (a package's own ``__init__`` aside)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, base] if base else package)
            targets = [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("lightmem") and target != name:
                found.add(target)
    return found


@lru_cache(maxsize=1)  # parsed once per test process; each test reads it, none changes it
def graph() -> dict[str, frozenset[str]]:
    known = modules()
    return {name: frozenset(imports(name, path, known)) for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_module_of_the_package_imports_itself_back():
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_library_never_imports_the_layers_above_it():
    upward = sorted((name, dep) for name, deps in graph().items() for dep in deps
                    if not name.startswith(TOP) and dep.startswith(TOP))
    assert upward == []


def package(name: str, packages: tuple[str, ...]) -> str | None:
    """The one of ``packages`` that ``name`` belongs to (None: none)."""
    return next((p for p in packages if name == p or name.startswith(p + ".")), None)


def test_the_top_packages_import_each_other_only_downward():
    edges = graph()
    crossing = sorted({(package(name, TOP), package(dep, TOP)) for name, deps in edges.items() for dep in deps
                       if package(name, TOP) and package(dep, TOP) and package(name, TOP) != package(dep, TOP)})
    assert [(a, b) for a, b in crossing if b not in TOP_MAY_IMPORT[a]] == []


def test_retrieval_imports_nothing_of_the_roles_above_it():
    upward = sorted((name, dep) for name, deps in graph().items() for dep in deps
                    if package(name, ("lightmem.retrieval",)) and package(dep, ("lightmem.roles",)))
    assert upward == []


def test_the_embedded_store_knows_nothing_of_postgresql():
    named = sorted((name, dep) for name, deps in graph().items() for dep in deps
                   if package(name, ("lightmem.stores.embedded",)) and "postgres" in dep)
    assert named == []


def test_the_stores_import_nothing_that_searches_them():
    upward = sorted((name, dep) for name, deps in graph().items() for dep in deps
                    if name.startswith("lightmem.stores") and dep.startswith(ABOVE_STORES))
    assert upward == []
