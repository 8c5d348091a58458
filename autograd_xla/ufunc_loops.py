"""A numpy ufunc's own inner loops as XLA:CPU custom calls: scipy.special's functions
computed by the very code plain numpy (and so plain autograd) runs, bit for bit.

rules/special.py lowers the scipy.special functions it lists in SCIPY_LOOPS this way on the
CPU. Their algorithms written in StableHLO (rules/special_kernels.py, XLA's CHLO expansions)
agree with scipy's to 1e-12 or so, but not to the last bit, and a derivative that a library
takes by finite differences of such a function divides that difference by its step once per
order: autograd_gamma's gammainc, differentiated in `a` by central differences (step ~6e-6 a),
gave lifelines' GeneralizedGamma fitters variances 2e-6 and 3e-3 away from plain autograd's.
Here the handler (_blas.c's `loop`) calls the loop numpy would pick for the operands' dtypes
(ufunc.functions[i] and ufunc.data[i], read from the ufunc object, whose layout is numpy's
PyUFuncObject of numpy/ufuncobject.h), on all of a call's elements at once, without the GIL.
XLA cannot fuse across the call. Measured (a loaded 2-core machine; the portable loops in
parentheses): autograd_gamma's pattern, jit_ps(value_and_grad) of -sum(log(gammainc(exp(p0),
exp(p1) x))) over 200 points, 90 µs a call (345), first call 0.07 s (1.0); its Hessian
0.38 ms (1.6), 0.7 s (2.2); benchmarks/special_compile_time.py's k = 1 compiles in 0.05 s
(0.50).

A target is registered per (ufunc, loop) when a program naming it is first lowered in the
process, which is before XLA compiles it or the persistent cache loads it (its key is made
from the program's text). Other platforms, and the CPU without the C module, keep the
portable algorithms.
"""
import ctypes
import threading

import numpy as np

from .clients import xc

try:
    from . import _blas as native  # the handlers in C (_blas.c); absent where setup.py had no compiler
except ImportError:
    native = None

#: The prefix of every target this module registers: PREFIX + ufunc name + "_" + its loop's
#: type characters, e.g. "autograd_xla_ufunc_gammainc_dd_d".
PREFIX = "autograd_xla_ufunc_"
#: The operand dtypes the handler reads (XLA FFI types S32, S64, F32, F64).
DTYPES = frozenset(np.dtype(t) for t in (np.int32, np.int64, np.float32, np.float64))

_P = ctypes.c_void_p


class _UFunc(ctypes.Structure):  # numpy's PyUFuncObject, its head (CPython's PyObject_HEAD, not free-threaded:
    # elsewhere the fields `target` checks do not match and the portable algorithms stay)
    _fields_ = [("ob_refcnt", ctypes.c_ssize_t), ("ob_type", _P), ("nin", ctypes.c_int), ("nout", ctypes.c_int),
                ("nargs", ctypes.c_int), ("identity", ctypes.c_int), ("functions", ctypes.POINTER(_P)),
                ("data", ctypes.POINTER(_P)), ("ntypes", ctypes.c_int)]


_registered = {}  # target -> its capsule, kept alive as long as XLA may call it
_lock = threading.Lock()


def target(ufunc, dtypes, register=True):
    """The target calling `ufunc`'s loop for operands and results of `dtypes` (numpy's loop
    dtypes: the loop whose type string they spell), registered with XLA unless `register` is
    false; None where there is no such loop or it cannot be called (the C module not built, a
    type the handler does not read, a ufunc object not laid out as numpy's PyUFuncObject)."""
    if native is None or not all(np.dtype(d) in DTYPES for d in dtypes):
        return None
    chars = "".join(np.dtype(d).char for d in dtypes)
    index = next((i for i, types in enumerate(ufunc.types) if types.replace("->", "") == chars), None)
    if index is None:
        return None
    name = PREFIX + ufunc.__name__ + "_" + ufunc.types[index].replace("->", "_")
    with _lock:
        if name not in _registered:
            head = _UFunc.from_address(id(ufunc))
            if (head.ntypes, head.nin, head.nout) != (ufunc.ntypes, ufunc.nin, ufunc.nout) or not head.functions:
                return None
            if not register:
                return name
            capsule = native.loop(name, head.functions[index], head.data[index] or 0, ufunc.nin, ufunc.nout)
            xc.register_custom_call_target(name, capsule, platform="cpu", api_version=1)
            _registered[name] = capsule
    return name
