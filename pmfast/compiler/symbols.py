"""A Python error, not an LLVM abort, for machine code that would call a symbol nobody defines.

When numba's JIT links a module whose code calls a function that is neither
in the JIT nor in the process, LLVM's runtime linker stops the process
(``LLVM ERROR: Symbol not found``): a notebook kernel dies and nothing is
saved. numba checks its own mangled names before adding a module
(``CPUCodeLibrary._verify_declare_only_symbols``); the others are found only
by the linker. The case users met: with fast math (``afn``), LLVM turns
``pow(x, (double)k)`` for an integer ``k`` into ``llvm.powi``, which machine
code calls as ``__powidf2``, a compiler-runtime helper numba's JIT does not
resolve (numba issue 9554).

:func:`unresolved` lists what a finalised module would call but cannot:
declared functions that the JIT and the process don't define, and
intrinsics that lower to such calls (:data:`LIBCALLS`). :func:`install`
makes numba's check before adding a module also raise
:class:`UnresolvedSymbolError` for them inside every pmfast compile (a
``compile``-scoped patch: whatever enters
:func:`pmfast.compiler.patching.compiling` is checked, nothing else is), so
the module is never added and the compile fails with a Python exception that
pmfast can fall back from.

:func:`define_helpers` first makes the common case work instead: the
helpers of :data:`LIBCALLS` live in the compiler runtime (``libgcc_s``),
which the process has loaded but privately (``RTLD_LOCAL``), so the JIT's
symbol search misses them; their addresses are added to the JIT's table.
That is process-wide by nature (LLVM keeps one symbol table) and changes
nothing that linked before: it only defines names that were undefined, so
code that would have aborted links and runs.
"""

from __future__ import annotations

#: LLVM intrinsics (name prefixes) that x86-64 code generation lowers to calls of compiler-runtime
#: helpers, and those helpers' names.
LIBCALLS = {
    "llvm.powi.f64": "__powidf2",
    "llvm.powi.f32": "__powisf2",
}


_defined = False


def define_helpers() -> list[str]:
    """Add the compiler-runtime helpers of :data:`LIBCALLS` that the JIT can't find to its symbol table.

    Returns the names added (once per process; later calls return ``[]``). A platform without
    ``libgcc_s`` adds nothing, and :func:`install`'s check still turns a call of them into an error.
    """
    global _defined
    if _defined:
        return []
    import ctypes
    import ctypes.util

    import llvmlite.binding as ll

    _defined = True
    added = []
    path = ctypes.util.find_library("gcc_s")
    try:
        runtime = ctypes.CDLL(path) if path else None
    except OSError:
        runtime = None
    for helper in LIBCALLS.values():
        if ll.address_of_symbol(helper) or runtime is None:
            continue
        fn = getattr(runtime, helper, None)
        if fn is not None:
            ll.add_symbol(helper, ctypes.cast(fn, ctypes.c_void_p).value)
            added.append(helper)
    return added


class UnresolvedSymbolError(RuntimeError):
    """Machine code would call functions that neither numba's JIT nor the process defines."""


def _resolvable(name: str, engine) -> bool:
    import llvmlite.binding as ll

    if engine.is_symbol_defined(name) or ll.address_of_symbol(name):
        return True
    # symbols of object code loaded from numba's cache (not in the engine's bookkeeping)
    return bool(engine._ee.get_function_address(name))


def unresolved(module, engine) -> list[str]:
    """The symbols ``module``'s machine code would call that ``engine`` (numba's JIT) can't resolve."""
    missing = []
    for fn in module.functions:
        if not fn.is_declaration:
            continue
        name = fn.name
        if name.startswith("llvm."):
            helper = next((h for prefix, h in LIBCALLS.items() if name.startswith(prefix)), None)
            if helper is not None and not _resolvable(helper, engine):
                missing.append(f"{helper} (for {name})")
        elif not _resolvable(name, engine):
            missing.append(name)
    return missing


def check(library) -> None:
    """Raise :class:`UnresolvedSymbolError` if ``library``'s final module calls what the JIT can't resolve."""
    missing = unresolved(library._final_module, library._codegen._engine)
    if missing:
        raise UnresolvedSymbolError(
            f"numba function {library.name!r} would call undefined symbols: {', '.join(missing)}; "
            "LLVM would abort the process linking it"
        )


_installed = False


def install() -> None:
    """Define the helpers (:func:`define_helpers`) and make numba's check before adding a module
    also raise :class:`UnresolvedSymbolError`, inside pmfast's compiles
    (:func:`pmfast.compiler.patching.compiling`; installed once per process, numba's own check
    everywhere else)."""
    global _installed
    if _installed:
        return
    from numba.core.codegen import CPUCodeLibrary

    from pmfast.compiler.patching import scoped

    define_helpers()
    numba_verify = CPUCodeLibrary._verify_declare_only_symbols

    def verify(self):
        numba_verify(self)
        check(self)

    CPUCodeLibrary._verify_declare_only_symbols = scoped(numba_verify, verify)
    _installed = True
