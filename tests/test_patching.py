"""pmfast.compiler.patches(): every replacement of a foreign internal is listed, scoped, and documented."""

import ast
from pathlib import Path

import pytest

from pmfast.compiler import patching

ROOT = Path(__file__).resolve().parents[1]
FOREIGN = ("numba", "llvmlite", "pytensor", "nutpie", "pymc")


def _foreign_names(tree) -> dict[str, str]:
    """Names bound anywhere in ``tree`` by ``import``/``from … import`` of a foreign package."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FOREIGN:
                    names[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in FOREIGN:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _root(expr):
    while isinstance(expr, ast.Attribute | ast.Subscript):
        expr = expr.value
    return expr.id if isinstance(expr, ast.Name) else None


def foreign_assignments():
    """``(module, line, text)`` of every assignment into an attribute of a foreign module or class."""
    found = []
    for path in sorted((ROOT / "pmfast").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = _foreign_names(tree)
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
            for target in targets:
                for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(t, ast.Attribute) and _root(t) in names:
                        found.append((module, node.lineno, ast.unparse(t)))
    return found


def test_every_foreign_assignment_is_a_listed_patch():
    """A module that assigns into numba's/pytensor's objects must be the ``by`` of a listed patch."""
    listed = {p.by for p in patching.patches()}
    unlisted = [f for f in foreign_assignments() if f[0] not in listed]
    assert foreign_assignments(), "the scan finds pmfast's known patches"
    assert not unlisted, f"assignments into foreign internals not in pmfast.compiler.patching: {unlisted}"


def test_registry_entries_are_well_formed():
    import importlib

    for p in patching.patches():
        assert p.scope in patching.SCOPES, p
        assert ":" in p.target and p.why, p
        module = importlib.import_module(p.by)
        assert module.__doc__, f"{p.by} must argue its replacement in its docstring"


@pytest.mark.parametrize("patch", [p for p in patching.PATCHES if p.target.startswith(("numba.core.ssa", "numba.core.base", "numba.core.caching", "pytensor.link.c.op", "pytensor.tensor.variable"))], ids=lambda p: p.target)
def test_process_patches_are_installed_by_setup(patch):
    """After ``setup()``, a process-wide patch's target is pmfast's function, not the owner's."""
    from pmfast import compiler

    compiler.setup()
    current = patch.current()
    assert getattr(current, "__module__", "").startswith("pmfast") or getattr(current, "_pmfast", False), patch


def test_the_symbol_check_is_compile_scoped():
    """After ``setup()``, numba's check before adding a module raises for an unresolvable symbol
    inside a pmfast compile only: outside it, and in another thread during one, numba's own check
    runs alone. Installing again changes nothing."""
    import threading
    from types import SimpleNamespace

    from numba.core.codegen import CPUCodeLibrary

    from pmfast import compiler
    from pmfast.compiler import symbols

    compiler.setup()
    installed = CPUCodeLibrary._verify_declare_only_symbols
    symbols.install()
    assert CPUCodeLibrary._verify_declare_only_symbols is installed
    assert not getattr(installed.__wrapped__, "_pmfast", False)

    undefined = SimpleNamespace(name="pmfast_test_nobody_defines_this", is_declaration=True)
    engine = SimpleNamespace(is_symbol_defined=lambda name: False, _ee=SimpleNamespace(get_function_address=lambda name: 0))
    library = SimpleNamespace(name="fake", _final_module=SimpleNamespace(functions=[undefined]), _codegen=SimpleNamespace(_engine=engine))

    installed(library)  # outside a compile: numba's check, which looks at numba's own names only
    other_thread = []
    with patching.compiling():
        with pytest.raises(symbols.UnresolvedSymbolError, match="pmfast_test_nobody_defines_this"):
            installed(library)
        worker = threading.Thread(target=lambda: other_thread.append(installed(library)))
        worker.start()
        worker.join()
    assert other_thread == [None]
    installed(library)


def test_docs_show_the_registry():
    text = (ROOT / "docs" / "compile.md").read_text()
    assert patching.markdown_table() in text, "docs/compile.md's patch table differs from patching.markdown_table()"
