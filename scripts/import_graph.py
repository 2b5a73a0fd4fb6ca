"""The import graph of the asrdecode package, function-level imports included: prints every circle
among its modules and every import that runs from a lower layer up to a higher one (LAYERS below),
and exits 1 if there is any (tests/test_import_graph.py runs it).

An edge A -> B is any `import` or `from ... import` in A's source naming B, at module level or inside
a function or class (those run later, but still tie A to B); imports under `if TYPE_CHECKING:` are
left out (they never run). `from pkg import name` names the module pkg.name when there is one, else
pkg itself (its __init__). Circles are the strongly connected components of the graph (Tarjan).

    python scripts/import_graph.py [--package DIR] [--edges]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Layers from the bottom up: a module may import modules of its own layer and of the layers below,
# never one above. A name ending in ".*" stands for a package and everything in it, any other name
# for that module alone; the longest name that matches a module decides its layer.
LAYERS: list[tuple[str, list[str]]] = [
    (
        "base",
        [  # no asrdecode imports but each other
            "asrdecode.version",
            "asrdecode.errors",
            "asrdecode.atomic_files",
            "asrdecode.huge_pages",
            "asrdecode.machine",
            "asrdecode.gc_pause",
            "asrdecode.quiet_stderr",
            "asrdecode.numba_status",
            "asrdecode.io.lines",
            "asrdecode.io.schema",
            "asrdecode.typed_config",
        ],
    ),
    (
        "inputs",
        [  # manifests, audio reading and batching, front ends
            "asrdecode.io.manifests",
            "asrdecode.io.subtitles",
            "asrdecode.audio.*",
            "asrdecode.features.*",
        ],
    ),
    ("models", ["asrdecode.models.*"]),
    ("lm", ["asrdecode.lm.*"]),
    ("graph", ["asrdecode.graph.*"]),
    ("decoders", ["asrdecode.decoders.*"]),  # decoders/__init__.py: the registry of every decoder
    ("config", ["asrdecode.config"]),  # the run configuration, its decoder section through the registry
    (
        "outputs",
        [  # results joined, written, scored
            "asrdecode.audio.segmenting",
            "asrdecode.io",
            "asrdecode.io.writers",
            "asrdecode.io.provenance",
            "asrdecode.io.segment_log",
            "asrdecode.scoring",
        ],
    ),
    ("engines", ["asrdecode.engines.*"]),  # the pipeline's loop on other workers, handed its Transcriber
    ("pipeline", ["asrdecode.pipeline"]),
    ("api", ["asrdecode", "asrdecode.api", "asrdecode.info"]),
    ("bench", ["asrdecode.bench.*"]),
    ("cli", ["asrdecode.cli", "asrdecode.__main__"]),
]


def module_names(package: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package folder (a package is its __init__)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import / ImportFrom node of the tree, skipping `if TYPE_CHECKING:` bodies."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def edges_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that module ``name`` (file ``path``) imports."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                if not is_package:
                    anchor = anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names
            ]
        for target in targets:
            while target and target not in modules:  # `import a.b.c` of a name inside a.b
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = module_names(package)
    return {name: edges_of(name, path, modules) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
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
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest name that matches the module."""
    best, best_len = -1, -1
    for rank, (_, names) in enumerate(LAYERS):
        for name in names:
            package = name.removesuffix(".*")
            hit = module == package or (name.endswith(".*") and module.startswith(package + "."))
            if hit and len(package) > best_len:
                best, best_len = rank, len(package)
    if best < 0:
        raise SystemExit(f"import_graph: {module} is in no layer of scripts/import_graph.py's LAYERS")
    return best


def upward(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The imports (a, b) whose target b sits in a higher layer than a."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", default=str(ROOT / "asrdecode"), help="the package folder")
    parser.add_argument("--edges", action="store_true", help="also print every edge")
    args = parser.parse_args(argv)
    graph = import_graph(Path(args.package))
    if args.edges:
        for name in sorted(graph):
            for target in sorted(graph[name]):
                print(f"edge {name} -> {target}")
    found = circles(graph)
    for component in found:
        print(f"circle of {len(component)} modules: {' '.join(component)}")
    ups = upward(graph)
    for a, b in ups:
        print(f"upward: {a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})")
    edges = sum(len(t) for t in graph.values())
    print(
        f"{len(graph)} modules, {edges} imports, {len(found)} circles "
        f"({sum(len(c) for c in found)} modules), {len(ups)} upward imports"
    )
    return 1 if found or ups else 0


if __name__ == "__main__":
    sys.exit(main())
