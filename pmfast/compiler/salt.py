"""The suffix of every cache key pmfast writes: its version and the code that generates what is cached.

Below :mod:`pmfast.compiler.ops` and :mod:`pmfast.linker`, which both key code with it.
"""

from __future__ import annotations

import functools
import os

#: Switches that change the code pmfast generates (not its values) with the same sources: a value
#: other than the default ("1") is part of every key. ``PMFAST_LIVENESS_BITS``: the live sets are the
#: same, but numba emits some decrefs in another order from them.
SWITCHES = ("PMFAST_LIVENESS_BITS",)


def compile_salt() -> str:
    """:func:`code_salt`, with the :data:`SWITCHES` not at their default."""
    off = [f"{name}-{os.environ[name]}" for name in SWITCHES if os.environ.get(name, "1") != "1"]
    return code_salt() + ("_" + "_".join(off) if off else "")


@functools.lru_cache(maxsize=None)
def code_salt() -> str:
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
