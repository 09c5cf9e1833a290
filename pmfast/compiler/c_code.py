"""pytensor's C code files read once per process instead of once per op instance.

Every ``ExternalCOp`` (``DimShuffle`` above all: pymc's logp, the gradient and
the rewrites build hundreds of them per model) reads its C source files in
``__init__``: ``Path.resolve`` of each file next to the class's module (a
``stat`` per path component), the file read, and the split into sections with
regular expressions. ~0.17 ms per ``DimShuffle``, ~40 ms of a warm compile of
negbin; the numba backend never uses the code.

:func:`install` wraps ``ExternalCOp.load_c_code`` so the files of one class
are read and split once; later instances get the same source strings and a
copy of the same sections, exactly what reading them again would give (the
files are pytensor's own, installed with it). Only a fresh instance (no code
loaded yet, the ``__init__`` case) uses the memo; anything else goes to
pytensor's method. Compile-scoped: outside a pmfast compile
(:func:`pmfast.compiler.patching.compiling`) and in other threads every load
is pytensor's. Idempotent.
"""

from __future__ import annotations

from pmfast.compiler.patching import scoped

_memo: dict = {}


def install() -> None:
    """Memoize ``ExternalCOp.load_c_code`` per class and file list (see the module docstring)."""
    from pytensor.link.c.op import ExternalCOp

    original = ExternalCOp.load_c_code
    if getattr(original, "_pmfast", False):
        return

    def load_c_code(self, func_files) -> None:
        files = tuple(func_files)
        if self.func_codes or self.code_sections:
            return original(self, files)
        key = (type(self), files)  # relative paths resolve next to the class's module
        hit = _memo.get(key)
        if hit is None:
            original(self, files)
            _memo[key] = (tuple(self.func_codes), dict(self.code_sections))
            return
        codes, sections = hit
        self.func_codes.extend(codes)
        self.code_sections.update(sections)

    ExternalCOp.load_c_code = scoped(original, load_c_code)
