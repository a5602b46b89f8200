"""The package's import graph from its own source: circles and upward imports.

Reads every ``import`` and ``from ... import`` in ``cfgzip_lab/`` with :mod:`ast` (nothing is
imported), resolves each to the package's modules, and prints

- the strongly connected components of more than one file (import circles), largest first;
- the upward imports: an edge from a module to one on a higher layer of :data:`LAYERS`.

How edges are counted:

- ``from .a import b`` is an edge to ``a``, and to ``a.b`` too when ``b`` is a submodule;
- importing ``p.q.m`` also runs ``p/__init__.py`` and ``p/q/__init__.py``: an edge to each
  package ``__init__`` on the way, except the package root ``cfgzip_lab`` (the facade, which
  Python runs before any submodule whatever the graph says) and the importer's own packages;
  an explicit ``from cfgzip_lab import x`` is an edge to the root;
- imports inside functions (lazy) and under ``if TYPE_CHECKING:`` count unless
  ``--eager-only`` leaves them out.

Run it from the repository root::

    python scripts/import_graph.py              # every import
    python scripts/import_graph.py --eager-only # what runs at import time
    python scripts/import_graph.py --json       # the same, for a test or a script
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT_PACKAGE = "cfgzip_lab"

# Lowest first. A module's layer is the one of its longest matching prefix; the root package (the
# facade that re-exports the public API, "" below) sits above the library and below its two
# front ends, the command line and the workbench.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("errors", "deadline", "_version", "_gc", "bundled", "xgrammar_version", "extras")),
    ("binding", ("_binding", "_native")),
    ("grammar", ("grammar",)),
    ("vocab", ("vocab_sources", "vocab", "vocab_trie")),
    ("classes", ("classes",)),
    ("pipeline", ("pipeline",)),
    (
        "engines",
        ("native", "engine", "expand", "kernels", "batch_rows", "overlap", "xgrammar_runs", "xgrammar_compat"),
    ),
    # The cached grammar stores the σ_in index (native/index.py, the engine's) and its LRU hands
    # out ready native engines, so it sits on the engines; none of them imports it.
    ("cache", ("cache",)),
    ("integrations", ("hf", "serving", "decode", "verify", "bench", "spec_bench", "startup", "live_classes")),
    ("facade", ("",)),
    ("cli", ("cli",)),
    ("widgets", ("widgets",)),
)


@dataclass(frozen=True, slots=True)
class ImportEdge:
    """One import of a package module by another, with where it is written."""

    source: str
    target: str
    line: int
    lazy: bool
    type_checking: bool
    implied: bool = False


@dataclass(slots=True)
class ImportGraph:
    """The modules of the package and the imports between them."""

    modules: dict[str, Path]
    edges: list[ImportEdge] = field(default_factory=list)

    def adjacency(self) -> dict[str, set[str]]:
        """Each module and the modules it imports (self-imports left out)."""
        graph: dict[str, set[str]] = {name: set() for name in self.modules}
        for edge in self.edges:
            if edge.source != edge.target:
                graph[edge.source].add(edge.target)
        return graph


def discover_modules(package_dir: Path) -> dict[str, Path]:
    """Dotted name → file for every ``.py`` file and compiled extension of the package.

    An extension counts where its stub (``_native.pyi``) sits beside it: a stale build left in a
    developer's tree (``native/_kernel*.so``, the old layout's) is no module of the package.
    """
    modules = {}
    for pattern in ("*.py", "*.so", "*.pyd"):
        for path in sorted(package_dir.rglob(pattern)):
            parts = list(path.relative_to(package_dir.parent).parts)
            parts[-1] = parts[-1].split(".")[0]  # _native.cpython-311-x86_64-linux-gnu.so
            if path.suffix != ".py" and not path.with_name(parts[-1] + ".pyi").exists():
                continue
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_type_checking_test(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_imports(
    node: ast.AST, lazy: bool = False, type_checking: bool = False
) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool, bool]]:
    """Every import statement under ``node``, with whether it is lazy or type-checking only."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, lazy, type_checking
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk_imports(child, True, type_checking)
        elif isinstance(child, ast.If) and _is_type_checking_test(child.test):
            for statement in child.body:
                yield from _walk_imports(ast.Module([statement], []), lazy, True)
            for statement in child.orelse:
                yield from _walk_imports(ast.Module([statement], []), lazy, type_checking)
        else:
            yield from _walk_imports(child, lazy, type_checking)


def _absolute_base(module: str, is_package: bool, statement: ast.ImportFrom) -> str:
    if statement.level == 0:
        return statement.module or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (statement.level - 1)]
    return ".".join(parts + ([statement.module] if statement.module else []))


def _named_targets(module: str, is_package: bool, statement: ast.AST) -> Iterator[str]:
    """The dotted names an import statement names (modules or module attributes)."""
    if isinstance(statement, ast.Import):
        for alias in statement.names:
            yield alias.name
    else:
        base = _absolute_base(module, is_package, statement)
        for alias in statement.names:
            yield f"{base}.{alias.name}"  # a submodule, or else a name of ``base``


def _resolve(name: str, modules: dict[str, Path], importer: str) -> list[tuple[str, bool]]:
    """The package modules that importing ``name`` runs from ``importer``, each with whether
    it is only implied (a package ``__init__`` on the way to the named module)."""
    if name != ROOT_PACKAGE and not name.startswith(ROOT_PACKAGE + "."):
        return []
    while name not in modules:  # ``from .a import function``: the module is ``a``
        name = name.rpartition(".")[0]
    targets = [(name, False)]
    parts = name.split(".")
    for depth in range(2, len(parts)):  # the packages on the way, past the root
        package = ".".join(parts[:depth])
        if not (importer == package or importer.startswith(package + ".")):
            targets.append((package, True))
    return targets


def build_graph(package_dir: Path, *, eager_only: bool = False) -> ImportGraph:
    """Read the package's imports; ``eager_only`` leaves lazy and TYPE_CHECKING imports out."""
    graph = ImportGraph(discover_modules(package_dir))
    for module, path in graph.modules.items():
        if path.suffix != ".py":
            continue  # a compiled extension: its imports are not read
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for statement, lazy, type_checking in _walk_imports(tree):
            if eager_only and (lazy or type_checking):
                continue
            seen = set()
            for name in _named_targets(module, is_package, statement):
                for target, implied in _resolve(name, graph.modules, module):
                    if target not in seen and target != module:
                        seen.add(target)
                        line = statement.lineno
                        edge = ImportEdge(module, target, line, lazy, type_checking, implied)
                        graph.edges.append(edge)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
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
                components.append(sorted(component))
    return sorted(components, key=lambda c: (-len(c), c))


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of a module's layer (longest matching prefix wins)."""
    relative = module.removeprefix(ROOT_PACKAGE).removeprefix(".")
    best, best_length = len(LAYERS) - 1, -1
    for position, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            matches = prefix == "" or relative == prefix or relative.startswith(prefix + ".")
            if matches and len(prefix) > best_length:
                best, best_length = position, len(prefix)
    return best


def upward_imports(graph: ImportGraph) -> list[ImportEdge]:
    """The imports from a module to a module it names on a higher layer, one per pair of
    modules (the first line that imports it): a package ``__init__`` passed on the way counts
    in the circles, not here."""
    first: dict[tuple[str, str], ImportEdge] = {}
    for edge in graph.edges:
        if not edge.implied and layer_of(edge.target) > layer_of(edge.source):
            first.setdefault((edge.source, edge.target), edge)
    return list(first.values())


def _edge_text(edge: ImportEdge) -> str:
    kind = "TYPE_CHECKING" if edge.type_checking else "lazy" if edge.lazy else "eager"
    source_layer, target_layer = LAYERS[layer_of(edge.source)][0], LAYERS[layer_of(edge.target)][0]
    return f"{edge.source}:{edge.line} ({source_layer}) -> {edge.target} ({target_layer}) [{kind}]"


def report(package_dir: Path, *, eager_only: bool) -> dict:
    """The circles and upward imports, as the ``--json`` output gives them."""
    graph = build_graph(package_dir, eager_only=eager_only)
    circles = [c for c in strongly_connected(graph.adjacency()) if len(c) > 1]
    return {
        "modules": len(graph.modules),
        "edges": len({(e.source, e.target) for e in graph.edges}),
        "circles": circles,
        "upward": [asdict(edge) | {"text": _edge_text(edge)} for edge in upward_imports(graph)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, default=Path(__file__).resolve().parents[1] / ROOT_PACKAGE)
    parser.add_argument("--eager-only", action="store_true", help="leave out lazy and TYPE_CHECKING imports")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    result = report(args.package, eager_only=args.eager_only)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    counted = "eager imports only" if args.eager_only else "every import (lazy, TYPE_CHECKING)"
    print(f"{result['modules']} modules, {result['edges']} import edges ({counted})")
    sizes = [len(c) for c in result["circles"]]
    print(f"circles: {len(sizes)}, sizes {sizes or '-'}")
    for circle in result["circles"]:
        print(f"  {len(circle)} files: {' '.join(circle)}")
    print(f"upward imports: {len(result['upward'])}")
    for edge in result["upward"]:
        print(f"  {edge['text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
