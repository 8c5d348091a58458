"""The base of a jitted function (api.JittedFunction): what its call runs, in C where
_callpath.c is built (the Front) else in Python (`_Calls`), and the counts and signature
cache the Front reads. Apart from dispatch.py (jaxlib's C++ call path, which imports the
interpreters and the runtime) so that a job whose calls all run plainly (tiered execution's
first calls) makes jitted functions without importing those: they come in with its first
compile (api.JittedFunction._arm_cpp)."""
import collections
import os
import sys

import numpy as np

from .core import trace_state

try:
    from . import _callpath as native  # the per-call work in C (_callpath.c); absent where setup.py had no compiler
except ImportError:
    native = None

#: Set to "0" (before the package is imported) to run a fast call's work in Python: no
#: staging, the results finished by `_finisher`'s Python function.
NATIVE_ENV = "AUTOGRAD_XLA_NATIVE_CALLS"


class _Counts:
    """_callpath.Counts in Python, where it is not built."""

    __slots__ = ("hits", "host_to_device", "device_to_host")

    def __init__(self):
        self.hits = self.host_to_device = self.device_to_host = 0

    def reordered(self):
        pass


#: A jitted function's counts of calls and of the arrays they moved (aot.CacheStats' `hits`,
#: `host_to_device` and `device_to_host`), kept in C where fast hits count them.
Counts = native.Counts if native is not None else _Counts


class Signatures(collections.OrderedDict):
    """A jitted function's signature cache, least recently used first. A fast hit moves its
    key to the end unless it is the one that did so last (_callpath.Counts); moves and
    insertions here tell `counts` that the order changed."""

    __slots__ = ("counts",)

    def __init__(self, counts):
        super().__init__()
        self.counts = counts

    def move_to_end(self, key, last=True):
        super().move_to_end(key, last)
        self.counts.reordered()

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.counts.reordered()


def _jax_x64():
    """jax's x64 state, a jaxlib Config, once jax's config module is imported (its C++
    states are then in effect: dispatch._jax_states), else None. Each call into C++ sets it
    on in its thread for the call (swap_local), so that C++ keys and puts each dtype as its
    own, as with ours."""
    return getattr(sys.modules.get("jax._src.config"), "enable_x64", None)


class _Calls:
    """What a jitted function's call runs, in Python (JittedFunction's base where the Front
    is not in use): C++ (`_fast`, function_for's PjitFunction, unless None) or, always while
    tracing, `_call_python`; also for a numpy array whose bytes are not in the machine's order,
    which C++ would read as if they were (its signatures and puts ignore byte order), and while
    `_waiting` (no fast path to be had yet: a miss costs C++'s lookup and its call back)."""

    _waiting = 0
    _captured_c = None  # (as _callpath's `captured`)

    def __call__(self, *args, **kwargs):
        if self._fast is None or self._waiting or trace_state.traces or _foreign(args) or (
                self._captured_c is not None and not _captured_hold(self._captured_c)) or not errstate_allows():
            return self._call_python(*args, **kwargs)
        x64 = _jax_x64()
        previous = None if x64 is None else x64.swap_local(True)  # (as _callpath's x64_on)
        try:
            return self._fast(*args, **kwargs)
        except ValueError:  # (as _callpath's python_takes)
            if not self._python_takes(*args, **kwargs):
                raise
        finally:
            if x64 is not None:
                x64.swap_local(previous)
        return self._call_python(*args, **kwargs)


try:  # numpy's floating-point error state (np.seterr, np.errstate), numpy 2's ContextVar
    from numpy._core._multiarray_umath import _extobj_contextvar as ERRSTATE
except ImportError:  # (numpy 1 keeps it elsewhere: not watched)
    ERRSTATE = None
_errstate_allowed = [None]  # the last state errstate_allows allowed
#: What a compiled program cannot do on a floating-point error (numpy raises FloatingPointError,
#: or calls seterrcall's function, or logs to it): such calls run plainly (api._call_python)
_PLAIN_ERRORS = frozenset({"raise", "call", "log"})


def errstate_allows(now=None):
    """Whether compiled calls may run under numpy's floating-point error state `now` (the
    current one): not where an error raises, calls or logs, which plain autograd's numpy does
    and a compiled program cannot. Asked once while a state stays the last (_callpath's too)."""
    if ERRSTATE is None:
        return True
    now = ERRSTATE.get() if now is None else now
    if now is _errstate_allowed[0]:
        return True
    allowed = _PLAIN_ERRORS.isdisjoint(np.geterr().values())
    if allowed:
        _errstate_allowed[0] = now
    return allowed


def _captured_hold(captured):
    """Whether every place of `captured` (_callpath's Front's) holds the object it held, and
    an array among them the bytes of its sample (as _callpath's captured_hold)."""
    for place in captured:
        c, k, v = place[:3]
        if held(c, k) is not v:
            return False
        if len(place) > 3 and sampled_bytes(v, place[4], place[5]) != place[3]:
            return False
    return True


def held(container, key, missing=None):
    """What a captured place holds (signatures.captured_locations): a cell's contents (key
    None), a dict's item, a class's attribute, a list's or tuple's element; `missing` where
    there is none."""
    if key is None:
        try:
            return container.cell_contents
        except ValueError:  # an empty cell
            return missing
    if isinstance(container, dict):
        return container.get(key, missing)
    if isinstance(container, type):  # a class attribute
        return vars(container).get(key, missing)
    return container[key] if key < len(container) else missing


def sampled_bytes(array, step, itemsize):
    """Every `step`-th element's bytes of contiguous `array`'s memory, in its order."""
    raw = array.reshape(-1, order="A").view(np.uint8).reshape(-1, itemsize)
    return raw.tobytes() if step == 1 else raw[::step].tobytes()


#: How deep in tuples and lists the arrays of a call C++ takes may be (_callpath.c's MAX_DEPTH):
#: deeper ones are not looked at, and their calls go to Python.
MAX_DEPTH = 32


def _foreign(args, depth=0):
    """Whether a numpy array among `args`, or in their tuples and lists (C++ flattens those
    and puts their arrays), has its bytes in the other order, or is a subclass (traced as its
    class, tracing.Kind), or they nest deeper than MAX_DEPTH (as _callpath's walk)."""
    for a in args:
        if type(a) is tuple or type(a) is list:
            if depth == MAX_DEPTH or _foreign(a, depth + 1):
                return True
        elif isinstance(a, np.ndarray) and (not a.dtype.isnative or type(a) is not np.ndarray):
            return True
    return False


if native is not None and os.environ.get(NATIVE_ENV, "1") != "0":
    Calls = Front = native.Front  # the same, in C; and the staging
    native.set_trace_state(trace_state)
    native.set_errstate(ERRSTATE, errstate_allows)
    captured_hold = native.captured_hold  # (PennyLane's gradient watches 252 places: 2-3 µs in C, ~30 in Python)
else:
    Calls, Front = _Calls, ()
    captured_hold = _captured_hold
