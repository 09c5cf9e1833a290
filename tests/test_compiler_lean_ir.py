"""pmfast.compiler.lean_ir: copies propagated and plain dels dropped give the same values, no leaks."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.core.runtime import _nrt_python as nrt_stats
from numba.core.runtime import rtsys

from pmfast.compiler import lean_ir


def _counting(monkeypatch):
    """Record what each pass removed (per call)."""
    seen = {"copies": [], "dels": []}
    propagate, drop = lean_ir.propagate_copies, lean_ir.drop_plain_dels

    def p(func_ir, typemap):
        n = propagate(func_ir, typemap)
        seen["copies"].append(n)
        return n

    def d(func_ir, typemap, targetctx):
        n = drop(func_ir, typemap, targetctx)
        seen["dels"].append(n)
        return n

    monkeypatch.setattr(lean_ir, "propagate_copies", p)
    monkeypatch.setattr(lean_ir, "drop_plain_dels", d)
    return seen


def _loops(x, idx):
    n = x.shape[0]
    acc = 0.0
    y = x  # a copy of an array
    z = np.empty(n)
    for i in range(n):
        v = y[idx[i % idx.shape[0]] % n]
        w = v  # a copy of a float
        if w > 0:
            acc += w
        else:
            acc -= 0.5 * w
        z[i] = acc
    t = acc
    return t, z


def _redefined(a, b):
    c = a  # a copy of an argument that is assigned again below (a new SSA version)
    a = a + b
    d = c
    return c * 10.0 + a + d


def _arrays(n):
    a = np.arange(n) * 1.0
    b = a
    c = b[1:]
    d = c
    out = 0.0
    for i in range(d.shape[0]):
        e = d
        out += e[i]
    return out, b


CASES = [
    (_loops, (np.linspace(-1, 1, 50), np.arange(7, dtype=np.int64))),
    (_redefined, (1.5, 2.0)),
    (_arrays, (40,)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_same_values_as_numba_and_no_leaks(monkeypatch, fn, args):
    seen = _counting(monkeypatch)
    plain = numba.njit(fn)
    lean = numba.njit(pipeline_class=lean_ir.pipeline())(fn)
    expect = plain(*args)
    was = nrt_stats.memsys_stats_enabled()
    nrt_stats.memsys_enable_stats()
    before = rtsys.get_allocation_stats()
    got = lean(*args)
    for _ in range(3):
        lean(*args)
    after = rtsys.get_allocation_stats()
    assert seen["dels"] and seen["dels"][0] > 0  # the passes ran and had work
    flat = lambda v: np.concatenate([np.ravel(np.asarray(p, dtype=float)) for p in (v if isinstance(v, tuple) else (v,))])  # noqa: E731
    np.testing.assert_array_equal(flat(got), flat(expect))
    del got
    final = rtsys.get_allocation_stats()
    if not was:
        nrt_stats.memsys_disable_stats()
    assert final.alloc - before.alloc == final.free - before.free, (before, after, final)


def test_copies_are_propagated(monkeypatch):
    seen = _counting(monkeypatch)
    numba.njit(pipeline_class=lean_ir.pipeline())(_loops)(*CASES[0][1])
    assert seen["copies"][0] > 0


def test_layered_on_another_pipeline():
    """An entry's compiler class carries its library options: the passes go on top of it."""
    from pmfast.compiler import library

    base = library.compiler(own_copies=True, release=True, inline_threshold=0)
    cls = lean_ir.pipeline(base)
    assert issubclass(cls, base) and cls.library_options == base.library_options
    assert numba.njit(pipeline_class=cls)(_redefined)(1.5, 2.0) == _redefined(1.5, 2.0)
