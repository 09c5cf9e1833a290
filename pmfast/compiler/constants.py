"""A tensor constant's merge signature built once per constant instead of once per comparison.

pytensor compares tensor constants by ``TensorConstant.signature()``, a fresh
``TensorConstantSignature`` at every call. Its ``__eq__`` and ``__hash__`` need
the sum of the non-NaN values, which it computes through a numpy masked array
and caches on the signature object, so the cache never outlives one comparison.
The shape feature compares constant shapes with ``TensorConstant.equals`` and
the merge feature hashes constants on every import: ~2,000 masked arrays built
and summed per warm compile of irt_2pl (~25 ms).

:func:`install` makes ``signature()`` return the same signature object while
the constant's ``type`` and ``data`` are the same objects, so its cached sum
and NaN mask are computed once per constant. A constant's data is never
changed in place (pytensor caches its ``unique_value`` the same way); a new
``data`` or ``type`` object gets a new signature. Compile-scoped: outside a
pmfast compile (:func:`pmfast.compiler.patching.compiling`) and in other threads
every call is pytensor's (a fresh signature). Idempotent.
"""

from __future__ import annotations

from pmfast.compiler.patching import scoped


def install() -> None:
    """Cache ``TensorConstant.signature()`` per constant (see the module docstring)."""
    from pytensor.tensor.variable import TensorConstant

    original = TensorConstant.signature
    if getattr(original, "_pmfast", False):
        return

    def signature(self):
        cached = self.__dict__.get("_pmfast_signature")
        if cached is not None and cached[0] is self.type and cached[1] is self.data:
            return cached[2]
        sig = original(self)
        self.__dict__["_pmfast_signature"] = (self.type, self.data, sig)
        return sig

    TensorConstant.signature = scoped(original, signature)
