"""Calling a jitted function whose compile is deferred: compiled on the other core, linked at the end.

A chunked loop's kernel (:mod:`pmfast.loops.chunked`) is model-specific: on a used machine it
is compiled, with the scalar functions its body calls, next to the entry that calls it (stoch_vol's
two kernels: ~1 CPU s of a 3.1 s numba stage), on the one core that also compiles the entry. numba
would compile it when it *types* the call, before lowering the caller. Here the caller's call goes
through a :class:`Deferred` instead of the kernel's dispatcher:

* **Typing.** The return type is predicted (:func:`pmfast.loops.chunked.kernel_returns`: the
  kernel returns its totals as a tuple of known dtypes, or ``np.int64(0)``), the argument types are
  the call site's (unliteral'd). Nothing is compiled here, but the first typed call forks a worker
  (:class:`pmfast.loops.worker.Worker`, :func:`pmfast.compiler.parallel.fork`, same conditions:
  ``PMFAST_PARALLEL_COMPILE``, no other threads; and a core idle right now,
  :func:`pmfast.loops.worker.spare_core`)
  that compiles the kernel for those argument types
  into numba's on-disk cache; later typed calls (the other kernels of the entry) are sent to the
  same worker through a pipe, so the scalar functions they share are compiled once. While a
  handover worker shares the compile (:func:`pmfast.compiler.handover.share`: an entry's parts, the
  expand entry), requests go to that one instead (:func:`serve`) and none is forked here: on two
  cores a third process only took the others' CPU; each compile is then claimed by the process that
  starts it, and one the worker has not started when it is needed here is compiled here.
* **Lowering** (:func:`_lower_call`). Without a worker (no fork possible, or argument types no
  worker was asked for), the kernel is compiled here and now (a load when the cache holds it). The
  call is emitted with numba's calling convention and error propagation (as numba's own
  ``call_internal``) to a *placeholder* symbol named from the kernel's cache key and argument
  types (:meth:`Deferred.placeholder`), and the caller's code library records it as pending, with
  a stand-in where numba would have put the kernel's library among its linking libraries.
* **Resolution** (:func:`resolve`, before that library is finalised: linked and optimised). Close
  the pipe and wait for the worker, compile the kernel here (now a load from the cache; the error
  of a compile that fails surfaces here), check its return type against the prediction, and define
  the placeholder, process-wide, as the address of the kernel's own machine code (:class:`External`,
  which the library's ``reload_init`` also runs when numba loads it from its cache). The kernel is
  not linked into the caller and optimised there again, in every entry and part that calls it; every
  process calls the same cached code whichever process compiled it. ``PMFAST_DEFERRED_LINK=1``
  links it instead (its library in place of the stand-in, the placeholder renamed to its symbol).

**Called by symbol, typed as a direct call** (``restype`` None: a big graph's node functions,
:func:`pmfast.compiler.entry.prepare_entry`). Nothing predicts a node function's return type, so the
call is typed as numba types a call of the dispatcher (which compiles it, or loads it from the
cache, then and there); only the lowering and resolution above apply: the entry's module holds a
declaration per callee, not a copy to link and optimise again. Such a :class:`Deferred` pickles as
its key alone (:func:`_registered`): the process loading a cached caller has made the same node
functions (and their keys) before, and a callee whose own cache entry is gone is compiled there.

:func:`install` patches numba's ``CPUCodeLibrary.finalize`` to call :func:`resolve` first, only
for libraries with pending placeholders (one ``__dict__`` lookup otherwise).
"""

from __future__ import annotations

import functools
import inspect
import os
import pickle
from hashlib import sha256

from numba.core import cgutils, types
from numba.core.imputils import lower_builtin
from numba.core.typing import signature
from numba.extending import register_model, typeof_impl
from numba.core.datamodel.models import OpaqueModel

from pmfast.loops import worker

#: Attribute of a numba code library holding its pending placeholders: ``{name: _Pending}``.
PENDING = "_pmfast_deferred"


#: The compile-sharing protocol of :mod:`pmfast.compiler.handover` (its ``sharing``, ``request`` and
#: ``obtain``), registered by :func:`pmfast.compiler.handover.share` before it forks a worker: this
#: module stands below the compiler and does not import it. None: no worker has shared a compile.
share_hooks = None


def _sharing() -> bool:
    return share_hooks is not None and share_hooks.sharing()


class Deferred:
    """A jitted function ``dispatcher`` (``cache=True``, cached under ``key``) called through a
    placeholder resolved at link time; ``restype``: its numba return type, predicted, or None: the
    call is typed by compiling ``dispatcher`` as numba types a direct call (:func:`by_symbol`)."""

    _by_key: dict[str, Deferred] = {}

    def __new__(cls, dispatcher, key: str, restype):
        # one object (and numba type) per cached function: another loop function compiling the
        # same kernel (another pytensor function in this process) shares its requests and results
        if key in cls._by_key:
            return cls._by_key[key]
        self = super().__new__(cls)
        self.dispatcher, self.key, self.restype = dispatcher, key, restype
        self.arg_names = tuple(inspect.signature(dispatcher.py_func).parameters)
        self._requested: set[tuple] = set()  # sent to the current worker
        self._type = None
        cls._by_key[key] = self
        return self

    def __reduce__(self):  # numba pickles a generated function's globals with its cache entry
        if self.restype is None:  # a node function: found by its key (registered before the caller loads)
            return _registered, (self.key,)
        return Deferred, (self.dispatcher, self.key, self.restype)

    def __call__(self, *args):  # from Python (a loop function run uncompiled)
        return self.dispatcher(*args)

    def __repr__(self):
        return f"Deferred({self.dispatcher.py_func.__name__}, {self.key[:12]})"

    @property
    def numba_type(self):
        if self._type is None:
            self._type = DeferredCall(self)
            lower_builtin(self._type, types.VarArg(types.Any))(functools.partial(_lower_call, self))
        return self._type

    def placeholder(self, argtypes: tuple) -> str:
        """The placeholder symbol for a call with ``argtypes``: the same in every process."""
        text = repr((self.key, tuple(str(t) for t in argtypes), str(self.restype)))
        return "_pmfast_deferred_" + sha256(text.encode()).hexdigest()[:32]

    def request(self, argtypes: tuple) -> None:
        """A call with ``argtypes`` was typed: have the compile worker start on it (once per process).
        While a worker of :func:`pmfast.compiler.handover.share` compiles beside this process, it is
        sent there (in that worker itself: nothing, it compiles its own at resolution)."""
        if self.restype is None or argtypes in self._requested or argtypes in self.dispatcher.overloads or self._in_cache():
            return
        if _sharing():
            share_hooks.request(self.placeholder(argtypes), pickle.dumps((self.key, argtypes)))
            return
        if worker.Worker.send(self, argtypes):
            self._requested.add(argtypes)

    def start(self, argtypes: tuple) -> None:
        """A call with ``argtypes`` is lowered: without a worker compiling it, compile it here now
        (sharing a handover worker: at resolution, :meth:`result`)."""
        self.request(argtypes)
        if argtypes not in self._requested and argtypes not in self.dispatcher.overloads and not _sharing():
            self.dispatcher.compile(argtypes)

    def result(self, argtypes: tuple):
        """The compile result for ``argtypes`` (waits for the worker, then loads or compiles here;
        sharing a handover worker: compiled once between the two, :func:`pmfast.compiler.handover.obtain`)."""
        if argtypes in self._requested:
            worker.Worker.finish()
        if argtypes not in self.dispatcher.overloads and _sharing():
            share_hooks.obtain(self.placeholder(argtypes), lambda: self.dispatcher.compile(argtypes))
        self.dispatcher.compile(argtypes)
        cres = self.dispatcher.overloads[argtypes]
        if self.restype is not None and cres.signature.return_type != self.restype:
            raise TypeError(
                f"pmfast: {self.dispatcher.py_func.__name__} returns {cres.signature.return_type}, "
                f"predicted {self.restype} (pmfast.loops.chunked.kernel_returns is wrong for this loop)"
            )
        return cres

    def _in_cache(self) -> bool:
        """Whether numba's cache has an index for the kernel (its compile will most likely be a load)."""
        from pmfast.compiler import cache

        return cache.has_index(self.dispatcher)


class DeferredCall(types.Callable, types.Dummy):
    """numba's type of a :class:`Deferred`: its calls are typed by prediction, lowered to a placeholder."""

    def __init__(self, deferred: Deferred):
        self.deferred = deferred
        super().__init__(name=f"DeferredCall({deferred.dispatcher.py_func.__name__}, {deferred.key[:16]})")

    @property
    def key(self):
        return ("pmfast.DeferredCall", self.deferred.key)

    def get_call_type(self, context, args, kws):
        if self.deferred.restype is None:  # typed as a direct call: the callee compiles now
            return types.Dispatcher(self.deferred.dispatcher).get_call_type(context, args, kws)
        if kws:
            return None
        args = tuple(types.unliteral(a) for a in args)
        if all(isinstance(a, types.Type) and a.is_precise() for a in args):
            self.deferred.request(args)
        return signature(self.deferred.restype, *args)

    def get_call_signatures(self):
        return (), True

    def get_impl_key(self, sig):
        return self


register_model(DeferredCall)(OpaqueModel)


@typeof_impl.register(Deferred)
def _typeof_deferred(val, c):
    return val.numba_type


def _registered(key: str) -> Deferred:
    """The :class:`Deferred` registered under ``key`` in this process (a cached caller's reload)."""
    try:
        return Deferred._by_key[key]
    except KeyError:
        raise RuntimeError(f"pmfast: the callee {key} of a cached function is not known in this process") from None


def serve(payload: bytes) -> None:
    """In a handover worker: compile the deferred function a request names (unless the other process
    claimed it: :func:`pmfast.compiler.handover.obtain`); an error is left to the process that needs it."""
    key, argtypes = pickle.loads(payload)
    deferred = Deferred._by_key.get(key)
    if deferred is None or argtypes in deferred.dispatcher.overloads:
        return
    try:
        share_hooks.obtain(deferred.placeholder(argtypes), lambda: deferred.dispatcher.compile(argtypes), needed=False)
    except Exception:
        pass


class _Pending:
    """A placeholder in a library: what it stands for, and the stand-in for the kernel's library
    in the library's linking order."""

    __slots__ = ("deferred", "argtypes", "stub")

    def __init__(self, deferred, argtypes):
        self.deferred, self.argtypes, self.stub = deferred, argtypes, _Unresolved()


class _Unresolved:
    """Where a deferred callee's library goes among the caller's linking libraries until :func:`resolve`."""

    @property
    def _reload_init(self):
        raise RuntimeError("pmfast: a deferred call was not resolved before its library was finalised (pmfast.loops.deferred.resolve)")

    def _get_module_for_linking(self):
        return self._reload_init

    def _ensure_finalized(self):
        return self._reload_init


def _lower_call(deferred: Deferred, context, builder, sig, args):
    """Lower a call of ``deferred`` (``sig`` from :meth:`DeferredCall.get_call_type`) as numba's
    ``call_internal`` lowers a call of a compiled function, to the placeholder symbol."""
    argtypes = tuple(sig.args)
    deferred.start(argtypes)
    name = deferred.placeholder(argtypes)
    fnty = context.call_conv.get_function_type(sig.return_type, argtypes)
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    context.apply_target_attributes(fn, argtypes, sig.return_type)
    context.call_conv.decorate_function(fn, deferred.arg_names, argtypes)
    if call_slots_enabled():
        status, res = call_with_shared_slots(context, builder, fn, sig.return_type, argtypes, args)
    else:
        status, res = context.call_conv.call_function(builder, fn, sig.return_type, argtypes, args)
    with cgutils.if_unlikely(builder, status.is_error):
        context.call_conv.return_status_propagate(builder, status)
    library = context.active_code_library
    pending = library.__dict__.setdefault(PENDING, {})
    if name not in pending:
        pending[name] = _Pending(deferred, argtypes)
        library._linking_libraries.append(pending[name].stub)
    return res


def call_slots_enabled() -> bool:
    """Whether deferred calls share their return and exception slots (``PMFAST_CALL_SLOTS=0``: numba's
    ``call_function``, two zero-filled slots per call). Part of the keys of the code that calls them."""
    return os.environ.get("PMFAST_CALL_SLOTS", "1") != "0"


def call_with_shared_slots(context, builder, fn, restype, argtypes, args):
    """numba's ``CPUCallConv.call_function`` with one return slot per return type and one exception
    slot per calling function, neither filled with zeros at the call.

    numba allocates both slots per call site (``cgutils.alloca_once``, zero-filled in the entry
    block) and zero-fills the return slot again before each call. A big entry makes ~1,200 calls
    (hier_var, 8 groups): ~2,400 allocas, ~3,100 zero stores, and LLVM's MemCpyOpt, merging those
    stores into memsets, took 11.5 of the entry's 17.5 CPU s of function passes (3.6 s without the
    stores). Sharing is safe: each slot is loaded right after its call (``call_function`` does the
    same loads), and the callee writes the return slot whenever it returns success; on an error the
    value loaded is not used (the caller propagates the status), as with numba's zeros.
    """
    call_conv = context.call_conv
    retty = call_conv.get_return_type(restype).pointee
    slots = _function_slots(builder.function)
    retslot = slots.get(retty)
    if retslot is None:
        retslot = slots[retty] = cgutils.alloca_once(builder, retty)
    excslot = slots.get("excinfo")
    if excslot is None:
        from numba.core.callconv import excinfo_t
        from llvmlite import ir

        excslot = slots["excinfo"] = cgutils.alloca_once(builder, ir.PointerType(excinfo_t), name="excinfo")
    packed = list(call_conv._get_arg_packer(argtypes).as_arguments(builder, args))
    code = builder.call(fn, [retslot, excslot, *packed])
    status = call_conv._get_return_status(builder, code, builder.load(excslot))
    return status, context.get_returned_value(builder, restype, builder.load(retslot))


def _function_slots(function) -> dict:
    """The shared call slots of the LLVM function being lowered (kept on the llvmlite function object)."""
    slots = getattr(function, "_pmfast_call_slots", None)
    if slots is None:
        slots = function._pmfast_call_slots = {}
    return slots


def resolve(library) -> None:
    """Resolve ``library``'s placeholders (see the module docstring); call before it is finalised.

    For each: the callee's compile result (waiting for its child), then either

    * **by symbol** (the default): the placeholder stays a declaration, defined process-wide as the
      address of the callee's own machine code (:class:`External`, also run when the library is
      loaded from numba's cache, before its object code is linked). The callee is not linked into
      ``library`` and optimised there again (bayesian_var_ireland's entry linked ~14k LLVM
      instructions of linear algebra and kernels: ~3 CPU s of its 12). Every process calls the same
      cached code, so the values don't depend on which process compiled what.
    * **linked** (``PMFAST_DEFERRED_LINK=1``): its library in place of the stand-in among
      ``library``'s linking libraries, and the placeholder declaration renamed to the callee's
      symbol (or, if the module already declares that symbol, defined as an always-inlined call of
      it).
    """
    pending = library.__dict__.pop(PENDING, None)
    if not pending:
        return
    link = os.environ.get("PMFAST_DEFERRED_LINK", "0") == "1"
    for name, p in pending.items():
        if not link:
            external = External(p.deferred, p.argtypes)
            external()
            library._linking_libraries[:] = [lib for lib in library._linking_libraries if lib is not p.stub]
            library._reload_init.add(external)
            continue
        cres = p.deferred.result(p.argtypes)
        cres.library._ensure_finalized()
        library._linking_libraries[:] = [cres.library if lib is p.stub else lib for lib in library._linking_libraries]
        target = cres.fndesc.mangled_name
        module = library._final_module
        try:
            fn = module.get_function(name)
        except NameError:
            continue  # the call was optimised away
        if not _has_function(module, target):
            fn.name = target
            if fn.name == target:
                continue
        _define_forwarder(library, cres, name, target)


class External:
    """Defines a placeholder symbol as the address of the deferred callee's compiled code.

    Called when a library calling it is finalised, and (a member of the library's ``reload_init``,
    pickled with its cache entry) whenever numba loads that library, or a library that linked it,
    from its cache, before the object code is linked: the callee is compiled or loaded from the
    cache first, so the symbol is defined before any code that calls it is. LLVM keeps one symbol
    table per process; the name (:meth:`Deferred.placeholder`: the callee's cache key, argument and
    return types) always stands for the same code, so defining it again is harmless.
    """

    __slots__ = ("deferred", "argtypes", "name")
    pmfast_reload = True  # kept by libraries numba loads from its cache: pmfast.compiler.cache.inherit_reload

    def __init__(self, deferred: Deferred, argtypes: tuple):
        self.deferred, self.argtypes = deferred, tuple(argtypes)
        self.name = deferred.placeholder(self.argtypes)

    def __reduce__(self):
        return External, (self.deferred, self.argtypes)

    def __eq__(self, other):
        return isinstance(other, External) and other.name == self.name

    def __hash__(self):
        return hash(self.name)

    def __call__(self) -> None:
        import llvmlite.binding as ll

        cres = self.deferred.result(self.argtypes)
        address = cres.library.get_pointer_to_function(cres.fndesc.llvm_func_name)
        if not address:
            raise RuntimeError(f"pmfast: no machine code for {cres.fndesc.llvm_func_name} ({self.deferred!r})")
        if ll.address_of_symbol(self.name) != address:
            ll.add_symbol(self.name, address)


def _has_function(module, name: str) -> bool:
    try:
        module.get_function(name)
    except NameError:
        return False
    return True


def _define_forwarder(library, cres, name: str, target: str) -> None:
    """Define ``name`` in ``library`` as an always-inlined call of ``target`` (the same arguments)."""
    from llvmlite import ir

    context = cres.target_context
    fnty = context.call_conv.get_function_type(cres.signature.return_type, cres.signature.args)
    module = library.create_ir_module(name)
    forward = ir.Function(module, fnty, name)
    forward.linkage = "linkonce_odr"
    forward.attributes.add("alwaysinline")
    callee = ir.Function(module, fnty, target)
    builder = ir.IRBuilder(forward.append_basic_block())
    builder.ret(builder.call(callee, forward.args))
    library.add_ir_module(module)


_installed = False


def install() -> None:
    """Make numba's ``CPUCodeLibrary.finalize`` call :func:`resolve` first when placeholders are pending."""
    global _installed
    if _installed:
        return
    from numba.core.codegen import CPUCodeLibrary

    from pmfast.compiler import cache

    cache.install()  # a caller linking a callee numba loaded from its cache inherits its External

    original = CPUCodeLibrary.finalize

    def finalize(self):
        if PENDING in self.__dict__:
            resolve(self)
        return original(self)

    finalize.__wrapped__ = original
    CPUCodeLibrary.finalize = finalize
    _installed = True
