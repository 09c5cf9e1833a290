"""The suffix of every cache key pmfast writes: its version and the code that generates what is cached.

Below :mod:`pmfast.compiler.elemwise` and :mod:`pmfast.linker`, which both key code with it.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def compile_salt() -> str:
    """Suffix of every cache key pmfast writes: its version and the code that generates what is cached.

    Functions compiled under pmfast's numba overloads and op implementations
    (:mod:`pmfast.compiler`) never share cache entries with stock pytensor,
    and a pmfast version (or a change to its code generation: :mod:`pmfast.linker`
    and :mod:`pmfast.compiler`, hashed) or a pytensor upgrade never loads an
    entry an older one wrote (numba's own index already tells numba versions apart).
    """
    import hashlib
    from pathlib import Path

    import pytensor

    from pmfast import __version__

    here = Path(__file__).resolve().parent
    h = hashlib.sha256(f"{pytensor.__version__}".encode() + (here.parent / "linker.py").read_bytes())
    for path in sorted(here.glob("*.py")):
        h.update(path.read_bytes())
    return f"pmfast{__version__}_{h.hexdigest()[:16]}"
