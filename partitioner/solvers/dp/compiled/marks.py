"""The mark of a dp kernel: a plain Python function that :mod:`.engine` may compile with numba.

The kernels of :mod:`.kernels` and :mod:`.stage_kernels` are written once, in
the subset of Python and numpy that numba compiles [1]_. Marked with
:func:`kernel` they stay ordinary Python functions -- the dp's Python path
calls them as they are -- and carry the options :func:`.engine.compiled_kernels`
hands to ``numba.njit`` when it builds the compiled twin of their module.

References
----------
.. [1] S. K. Lam, A. Pitrou and S. Seibert, "Numba: a LLVM-based Python
   JIT compiler", LLVM-HPC 2015.
"""
from __future__ import annotations

import types
from typing import Callable, TypeVar

__all__ = ["kernel", "KERNEL_OPTIONS", "twin"]

KERNEL_OPTIONS = "__dp_kernel__"  # the attribute a marked function carries: its numba.njit options

F = TypeVar("F", bound=Callable)


def kernel(*, inline: bool = False) -> Callable[[F], F]:
    """Mark a function as a dp kernel; ``inline``: numba inlines it into its callers when compiled.

    The function itself is returned unchanged (with the attribute ``KERNEL_OPTIONS``)."""

    def mark(func: F) -> F:
        setattr(func, KERNEL_OPTIONS, {"inline": "always"} if inline else {})
        return func

    return mark


def twin(module: types.ModuleType, jit: Callable[[dict], Callable]) -> types.ModuleType:
    """A module whose marked functions are ``jit(options)(copy)`` over the same code, calling each other
    (each copy's globals are the twin's namespace, so a kernel calls the twins of the kernels it calls)."""
    double = types.ModuleType(module.__name__, module.__doc__)
    ns = double.__dict__
    ns.update({k: v for k, v in vars(module).items() if k not in ("__name__", "__doc__")})
    for name, func in vars(module).items():
        options = getattr(func, KERNEL_OPTIONS, None)
        if options is None or not isinstance(func, types.FunctionType):
            continue
        copy = types.FunctionType(func.__code__, ns, func.__name__, func.__defaults__, func.__closure__)
        copy.__qualname__, copy.__doc__, copy.__module__ = func.__qualname__, func.__doc__, func.__module__
        ns[name] = jit(options)(copy)
    return double
