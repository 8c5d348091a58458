"""jaxlib's C++ call path, the PjitFunction jax.jit dispatches through, driving our executables
without jax.

A jitted function's calls of a signature whose executable qualifies (`fastpath`) go from C++
straight to XLA: C++ flattens the arguments, looks their signature up, puts numpy arrays on
the device and runs the executable; Python only turns the results into numpy arrays (the
unflattening of `_Results`). Measured on a 3-element float64 array, numpy in and out:
`x + 1.0` 5.1-5.3 µs a call against 9.9 µs through backend.Executable and jax.jit's 5.4 µs.

What it takes, probed with jaxlib 0.10.2:
* Three C++ configuration states, which jax's config.py creates when jax is imported: x64 (on,
  so that numpy's float64 stays float64), disable_jit and post_hook. Without jax they are ours
  (`_setup`). With jax imported its own are in effect: C++ would then narrow float64 arguments
  while x64 is off, so a signature gets the fast path only while x64 is on (`_x64_on`); the x64
  state is part of C++'s signature, so turning it off later sends calls back to Python.
* The fast-path data: a tuple type whose fields C++ reads by name (`FastpathData`).
* Executables taking one buffer per argument, none packed, arguments below
  backend.IN_PLACE_MIN_BYTES, and no views or recycled results (those need Python at each
  call). Constants lifted into parameters are device arrays C++ passes before the arguments
  (the fast path's const_args, probed: the module takes them first, lowering._assemble):
  the Table 1 quadratic's value, its 1000x1000 matrix closed over, 101 µs instead of 119.
  C++ puts numpy arrays zero-copy; PJRT's CPU client copies one it cannot alias inline
  below 100 KiB (its kSmallDataTransferByteSize) but on a worker thread above, and the
  synchronous client then returns before the results exist (probed: 6 of 30 read wrong at 8
  MiB). Below the bound the results are complete when C++ returns, so they are not waited for.
"""
import collections
import operator
import sys
import weakref

import numpy as np
from jaxlib import _jax
from jaxlib import xla_client as xc

from . import backend as backend_mod
from . import tree

#: What C++ reads of a signature's fast path (jax's pxla.MeshExecutableFastpathData's fields).
FastpathData = collections.namedtuple("FastpathData", [
    "xla_executable", "out_pytree_def", "in_shardings", "out_shardings", "out_avals", "out_committed",
    "kept_var_bitvec", "in_device_local_layouts", "const_args"])

_state = {}  # "ok": whether the C++ path can be used; "configs": our three states, kept alive


def available():
    """Whether jitted functions may dispatch through C++ in this process."""
    if "ok" not in _state:
        _state["ok"] = _setup()
    return _state["ok"]


def _setup():
    """Our C++ configuration states, unless jax (imported) has its own; False when this
    jaxlib lacks what the path needs (then everything runs through backend.Executable)."""
    try:
        if "jax" not in sys.modules:
            config, jit = _jax.config.Config, _jax.jax_jit
            x64 = config("jax_enable_x64", True, include_in_jit_key=True, include_in_trace_context=True)
            disable = config("jax_disable_jit", False, include_in_trace_context=True)
            hook = config("post_hook", None)
            jit.set_enable_x64_state(x64)
            jit.set_disable_jit_state(disable)
            jit.set_post_hook_state(hook)
            _state["configs"] = (x64, disable, hook)
        _state["registry"] = registry = _jax.pytree.PyTreeRegistry()
        registry.register_node(_Results, _Results.flatten, operator.call)
        return True
    except (AttributeError, TypeError, ValueError):  # the private surface moved
        return False


def function(name, python, miss, owner):
    """A PjitFunction for `owner` (a jitted function), whose fast paths leave C++'s cache when
    `owner` is collected (they would hold its executables alive). `python(*args, **kwargs)` is
    the Python call path (C++ takes it when jit is disabled); `miss(*args, **kwargs)` runs a
    call C++ has no fast path for and returns (result, FastpathData or None)."""
    def cache_miss(*args, **kwargs):
        result, fast = miss(*args, **kwargs)
        return result, fast, False
    fast = _jax.pjit(name, python, cache_miss, [], [], (name, id(cache_miss)), _state["registry"], _shard_arg, None)
    weakref.finalize(owner, fast._clear_cache)
    return fast


def function_for(jf):
    """A jitted function's PjitFunction: its calls go to `jf._call_python` on a miss, and a
    miss asks `jf._fastpath` for the call's fast path. It holds `jf` weakly: C++ objects are
    not traversed by the garbage collector, so a cycle through one would never be freed."""
    ref = weakref.ref(jf)

    def python(*args, **kwargs):
        return ref()._call_python(*args, **kwargs)

    def miss(*args, **kwargs):
        self = ref()
        result = self._call_python(*args, **kwargs)
        return result, self._fastpath(args, kwargs)
    return function(getattr(jf._fun, "__name__", "jit_fn"), python, miss, jf)


def _shard_arg(x, sharding, layout):
    """An argument C++ does not put itself (one with a layout: ours have none) on the device."""
    x = np.asarray(x)
    return xc.batched_device_put(backend_mod.Aval(x.shape, x.dtype), sharding, [x], [sharding._device],
                                 enable_x64=True, host_buffer_semantics=backend_mod.COPY_SEMANTICS)


def fastpath(executable, out_tree, stats, cache, key):
    """The fast path of `executable` (a backend.Executable), or None if it does not qualify.
    Its calls return the results in `out_tree` and do the bookkeeping of a hit on the
    Python path: `stats` (an aot.CacheStats) counted, `key` moved to the end of `cache`.
    C++ keeps it where the garbage collector does not look: it holds `cache` (whose entries
    may lead back to the function) weakly, and `key` and `stats` must hold nothing of the user's."""
    if not _qualifies(executable) or not _x64_on():
        return None
    n_in, n_out = len(executable.consts) + len(executable.in_avals), len(executable.out_avals)
    sharding = executable.backend.sharding()
    results = _Results(_finisher(executable, out_tree, stats, weakref.ref(cache), key), n_out)
    tree_def = _state["registry"].flatten(results)[1]
    return FastpathData(executable.exe, tree_def, [sharding] * n_in, [sharding] * n_out, list(executable.out_avals),
                        [True] * n_out, [True] * n_in, [None] * n_in, list(executable.consts))


def _qualifies(executable):
    return (executable.backend.platform == "cpu" and not executable.views
            and not executable.recycled and executable.sources == list(range(len(executable.in_avals)))
            and all(a.size * a.dtype.itemsize < backend_mod.IN_PLACE_MIN_BYTES for a in executable.in_avals))


def _x64_on():
    """Whether the x64 state in effect keeps float64 (always, with ours; jax's may be off)."""
    if "configs" in _state and "jax" not in sys.modules:
        return True
    cpu = backend_mod.get_backend("cpu")
    probe = xc.batched_device_put(backend_mod.Aval((), np.float64), cpu.sharding(), [np.zeros((), np.float64)],
                                  [cpu.default_device])
    return probe._single_device_array_to_np_array_did_copy()[0].dtype == np.float64


def _finisher(executable, out_tree, stats, cache_ref, key):
    """What one fast call does in Python, in one frame (each more costs ~0.1 µs of a ~6 µs
    call): count, keep the cache's order of use, and hand out numpy arrays in the function's
    output structure."""
    converters = executable.converters
    n_in, n_out = len(executable.in_avals), len(executable.out_avals)
    leaf = out_tree is tree.LEAF

    def finish(outs):
        stats.hits += 1
        stats.host_to_device += n_in
        stats.device_to_host += n_out
        try:
            cache_ref().move_to_end(key)  # least recently used signatures are evicted first
        except (KeyError, RuntimeError, AttributeError):  # evicted meanwhile by another thread; gone
            pass
        if leaf:
            return converters[0](outs[0])
        return tree.unflatten(out_tree, [convert(o) for convert, o in zip(converters, outs)])
    return finish


class _Results:
    """The results of a fast call as C++ sees them: one node whose unflattening (C++ calls
    its function with the output arrays; `operator.call`, so no frame of ours in between)
    turns them into the call's numpy results."""

    __slots__ = ("finish", "n")

    def __init__(self, finish, n):
        self.finish, self.n = finish, n

    @staticmethod
    def flatten(node):
        return range(node.n), node.finish
