"""Stock in-place rewriters judged locally in every function pmfast's compile builds.

pymc compiles the initial point function in its own mode, with ``random_make_inplace``: each
RandomVariable replaced by its in-place version (same inputs, the generator destroyed), each
change validated over the whole graph (on hier_var, one validation per free variable's draw, the
graph growing with them). Inside pmfast's compile, :func:`install` makes the optdb instance of each
:data:`SCOPED` rewriter run as a :class:`pmfast.inplace_fast.FastInplace` around a copy of itself,
whose proven changes go unvalidated (the argument is :func:`pmfast.inplace_fast.judge`'s).
Compile-scoped (:func:`pmfast.compiler.patching.scoped`); ``PMFAST_INPLACE_SCOPED=0`` leaves them
as they are inside the compile too.
"""

from __future__ import annotations

import os

from pmfast.inplace_fast import FastInplace


#: stock in-place rewriters of every function pmfast's compile builds (the initial point function's
#: too, in pymc's mode): inside the compile their optdb instance runs as a :class:`FastInplace`
SCOPED = ("random_make_inplace",)


def scoped_enabled() -> bool:
    """Whether :data:`SCOPED` rewriters are judged inside pmfast's compile (``PMFAST_INPLACE_SCOPED=0``: not)."""
    return os.environ.get("PMFAST_INPLACE_SCOPED", "1") != "0"


def install() -> None:
    """Each :data:`SCOPED` optdb instance's ``apply``, inside pmfast's compile, a :class:`FastInplace`
    around a copy of the instance (idempotent)."""
    import copy

    from pytensor.compile import optdb

    from pmfast.compiler.patching import scoped

    for name in SCOPED:
        if name not in optdb.__db__:
            continue
        (inner,) = optdb.__db__[name]
        if getattr(inner.__dict__.get("apply"), "_pmfast", False):
            continue
        plain = copy.copy(inner)
        wrapper = FastInplace(plain)

        def apply(fgraph, *args, plain=plain, wrapper=wrapper, **kwargs):
            if not scoped_enabled():
                return plain.apply(fgraph, *args, **kwargs)
            return wrapper.apply(fgraph, *args, **kwargs)

        inner.apply = scoped(plain.apply, apply)
