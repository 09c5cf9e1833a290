"""pmfast's modules stand in layers: no import cycle, module-level or inside functions; the patch registry at the bottom.

A function-level import (``from pmfast.linker import compile_salt`` inside a function) only delays a
cycle to the first call; a module imports only what stands below it, wherever the import statement is.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pmfast"


def _modules() -> dict[str, Path]:
    """``dotted name -> path`` of pmfast's own modules (the cli and models symlinks aside)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if len(parts) > 1 and parts[1] in ("cli", "models"):
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules) -> str | None:
    """The pmfast module ``name`` (or the longest module prefix of it) names."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _top_level_statements(body):
    """Statements run on import: the module body, with ``if``/``try`` blocks entered, functions and classes not."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try):
            yield from _top_level_statements(node.body + node.orelse + getattr(node, "finalbody", []))
            for handler in getattr(node, "handlers", []):
                yield from _top_level_statements(handler.body)


def _imports(module: str, path: Path, modules, everywhere: bool = False) -> set[str]:
    """pmfast modules ``module`` imports when it is imported (``everywhere``: or in any function;
    ``from pkg import sub`` names ``pkg.sub``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if everywhere else _top_level_statements(tree.body):
        if isinstance(node, ast.Import):
            out.update(_resolve(a.name, modules) for a in node.names if a.name.split(".")[0] == "pmfast")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            if base.split(".")[0] != "pmfast":
                continue
            for a in node.names:
                full = f"{base}.{a.name}"
                out.add(full if full in modules else _resolve(base, modules))
    out.discard(module)
    out.discard(None)
    return out


def import_graph(everywhere: bool = False) -> dict[str, set[str]]:
    """pmfast's import graph, built from the sources (nothing is imported): module-level imports, or
    (``everywhere``) every import statement, function-level ones included."""
    modules = _modules()
    return {m: _imports(m, p, modules, everywhere) for m, p in modules.items()}


def cycles(graph) -> list[list[str]]:
    """The strongly connected components of ``graph`` with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
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


def test_the_detector_sees_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_holds_known_edges():
    graph = import_graph()
    assert "pmfast.loops.op" in graph["pmfast.loops.dispatch"]
    assert "pmfast.compiler.raisers" in graph["pmfast.compiler.shape_ops"]
    assert len(graph) > 50


def test_no_module_level_import_cycle():
    found = cycles(import_graph())
    assert not found, f"module-level import cycles among pmfast's modules: {found}"


def test_no_import_cycle_through_function_level_imports():
    found = cycles(import_graph(everywhere=True))
    assert not found, f"import cycles among pmfast's modules (function-level imports included): {found}"


def test_the_function_level_graph_holds_lazy_edges():
    """The scan sees imports inside functions (the edges a module-level scan misses)."""
    graph, lazy = import_graph(), import_graph(everywhere=True)
    assert "pmfast.compiler.ops" in lazy["pmfast.linker"] and "pmfast.compiler.ops" not in graph["pmfast.linker"]
    assert "pmfast.frontend" in lazy["pmfast.plugin"]
    assert all(graph[m] <= lazy[m] for m in graph)


def test_the_patch_registry_imports_nothing_of_pmfast():
    source = (PACKAGE / "compiler" / "patching.py").read_text()
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add("." * node.level + (node.module or ""))
    assert names, "the scan finds patching's imports"
    assert not {n for n in names if n.startswith((".", "pmfast"))}, names
