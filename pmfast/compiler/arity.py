"""The widest call numba compiles in linear time: one constant for every module that splits or chunks calls.

CPython 3.11 compiles a call or tuple display with more than 30 items (its
``STACK_USE_GUIDELINE``) as ``BUILD_LIST`` + ``LIST_APPEND``… +
``CALL_FUNCTION_EX``, which numba types and lowers in O(n²) (DESIGN.md). The
linker chunks such calls in generated source, ``wide_split`` and
``wide_loop`` build nodes that stay within it, indexed fusion caps its nodes
at it, and pmfast's Elemwise lowering calls (instead of inlining) scalar
functions that take more. It lives under :mod:`pmfast.compiler`, so changing it
changes :func:`pmfast.linker.compile_salt` and no cached code built under
another limit is loaded.
"""

#: Most positional arguments (or tuple items) of a call compiled as a plain call.
MAX_ARITY = 30
