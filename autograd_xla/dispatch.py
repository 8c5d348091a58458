"""jaxlib's C++ call path, the PjitFunction jax.jit dispatches through, driving our executables
without jax.

A jitted function's calls of a signature whose executable qualifies (`fastpath`) go from C++
straight to XLA: C++ flattens the arguments, looks their signature up, puts numpy arrays on
the device, passes DeviceArrays' buffers as they are (`_setup`'s dataclass node) and runs the
executable; what is left is turning the results into numpy arrays, or DeviceArrays (a kept
function's, keep_on_device). On every platform: off the CPU the Python path cost 30-65 µs a
call more than jax.jit's C++ (a TPU v5e, benchmarks/tpu.py's launch row); there C++ is given
numpy arguments only where the call waits for its results (`takes_arguments`).
Where _callpath.c is built, a jitted function is a _callpath.Front (its base, calls.Calls): the
call enters C, which copies numpy arguments of a staged signature (`_stage`) into device
buffers kept for it and passes those, so C++ makes no buffer a call, and finishes the
results in C (`_finisher`). Measured on a 3-element float64 array, numpy in and out, `x +
1.0`: 5.0-5.3 µs a call, jax.jit on an array already on the device 5.2 µs (with np.asarray
of its result), the PjitFunction called with the numpy array and its results finished in
Python 8.4 µs, backend.Executable 12.5 µs.

What it takes, probed with jaxlib 0.10.2:
* Three C++ configuration states, which jax's config.py creates when jax is imported: x64 (on,
  so that numpy's float64 stays float64), disable_jit and post_hook. Without jax they are ours
  (`_setup`). With jax imported its own are in effect, x64 off by default, under which C++
  keys and puts 64-bit numpy arrays and Python numbers in 32 bits: a float64 call would find
  a float32 signature's fast path. So each call into C++ sets jax's x64 state on in its
  thread for the call (`calls._jax_x64`; its value is part of C++'s signature): `x + 1.0` on 3
  float64, numpy in and out, 5.9-6.0 µs a call with jax imported (5.2-5.3 without; 16.7 on
  the Python path, where such calls went before).
  jax gets imported also where the user never does: a result's host copy (backend.host_copy,
  jaxlib's single-device array to numpy: off the CPU each result, on the CPU a bfloat16 one)
  imports jax.core where jax is installed.
* The fast-path data: a tuple type whose fields C++ reads by name (`FastpathData`).
* Executables taking one buffer per argument leaf they read (C++ skips the others: the fast
  path's kept_var_bitvec), none packed, arguments below
  lowering.LARGE_ARRAY_BYTES where the Front stages them (else below
  backend.IN_PLACE_MIN_BYTES), and no views or recycled results (those need Python at each
  call). A signature with larger arguments or results (up to DIRECT_BYTES) gets a program
  without them, its small arguments unpacked, for C++ (api.JittedFunction._direct; a
  gradient w.r.t. two 100-vectors of a 5000x100 matrix summed over rows: 79 µs a call
  instead of 113), which is given its large arguments only where they are aligned; the
  program with views runs the others in Python.
  Constants lifted into parameters are device arrays C++ passes before the arguments
  (the fast path's const_args, probed: the module takes them first, lowering._assemble):
  the Table 1 quadratic's value, its 1000x1000 matrix closed over, 101 µs instead of 119.
  C++ puts numpy arrays zero-copy; PJRT's CPU client copies one it cannot alias inline
  below 100 KiB (its kSmallDataTransferByteSize) but on a worker thread above, and the
  synchronous client then returns before the results exist (probed: 6 of 30 read wrong at 8
  MiB). So the Front hands C++ no such argument: from 100 KiB on, one that is misaligned or
  not C-contiguous is copied into its signature's staging buffer or the call runs in Python
  (a signature is staged at its first Python-path hit, api.JittedFunction._call_python, as
  its first C++ miss would). The results are then complete when C++ returns, so they are not
  waited for, and a staging buffer has been read: the next call may write it. Staging beats
  the Python path up to 1 MiB: `x + 1.0` on 20,000 misaligned float64, 13-17 µs a call
  against 28 (numpy 7); on 120,000, 66-70 against 93. An aligned argument from 100 KiB is
  passed as it is (_callpath's scan).
"""
import collections
import functools
import operator
import sys
import weakref

import numpy as np

from . import backend as backend_mod
from . import memory
from . import lowering, tree
from .clients import jaxlib_ext as _jax
from .clients import xc
from .calls import Calls, Front, native
from .core import PY_SCALARS

if Calls is Front:
    native.set_device_array(backend_mod.DeviceArray)  # kept results made in C (_callpath's `kept`)

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


def _jax_states():
    """Whether jax has set jaxlib's C++ configuration states: its config module does so on
    import. A None under "jax" in sys.modules (the idiom that makes jax unimportable) or a
    stand-in module of that name has set none: with them taken for jax every call raised
    "ValueError: disable_jit_state is not set"."""
    return sys.modules.get("jax._src.config") is not None


def _setup():
    """Our C++ configuration states, unless jax (imported) has its own; False when this
    jaxlib lacks what the path needs (then everything runs through backend.Executable)."""
    try:
        if not _jax_states():
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
        # a DeviceArray argument as C++ flattens it: its buffer, a jaxlib array C++ passes to the executable
        # as it is, under a node whose data is the dtype it stands for (host_dtype), so that C++'s signatures
        # of DeviceArrays holding float32 for float64 and of float32 ones differ; read in C++, with no Python
        # call (`x * 2.0` kept on the device: 4.9 µs a call against 5.35 with a flattening function; jax.jit
        # 4.5; a positional one the Front passes as its buffer itself, 4.55: _callpath's `bare`). A deleted
        # (donated) buffer is passed too: its execution raises a ValueError, and calls.Calls runs that call
        # in Python (api.JittedFunction._python_takes), whose error it is.
        registry.register_dataclass_node(backend_mod.DeviceArray, ["buffer"], ["host_dtype"])
        return True
    except (AttributeError, TypeError, ValueError):  # the private surface moved
        return False


def function(name, python, miss, owner):
    """A PjitFunction for `owner` (a jitted function), whose fast paths leave C++'s cache when
    `owner` is collected (they would hold its executables alive). `python(*args, **kwargs)` is
    the Python call path (C++ takes it when jit is disabled); `miss(*args, **kwargs)` runs a
    call C++ has no fast path for and returns (result, FastpathData, or False: none for the
    call's signature, or None: none yet). C++ keeps a signature's answer: a None is asked
    again at its next call (C++ drops the entry, the miss's third value), a False never."""
    def cache_miss(*args, **kwargs):
        result, fast = miss(*args, **kwargs)
        return result, fast or None, fast is None
    fast = _jax.pjit(name, python, cache_miss, [], [], (name, id(cache_miss)), _state["registry"], _shard_arg, None)
    weakref.finalize(owner, fast._clear_cache)
    return fast


def function_for(jf):
    """A jitted function's PjitFunction: its calls go to `jf._call_python` on a miss, and a
    miss asks `jf._fastpath` for the call's fast path. It holds `jf` weakly: C++ objects are
    not traversed by the garbage collector, so a cycle through one would never be freed."""
    ref = weakref.ref(jf)

    def python(*args, **kwargs):
        self = ref()
        return self._call_python(*_kept_again(_unstaged(self, args)[0]), **kwargs)

    def miss(*args, **kwargs):
        self = ref()
        args, staged = _unstaged(self, args)
        args = _kept_again(args)
        result = self._call_python(*args, **kwargs)
        fast = self._fastpath(args, kwargs)
        return result, fast._replace(out_pytree_def=_flat(len(fast.out_avals))) if fast and staged else fast
    return function(getattr(jf._fun, "__name__", "jit_fn"), python, miss, jf)


#: What each argument of a fast path's executable stays below: the Front stages one that
#: PJRT would copy apart (see above); without it C++ is given numpy arrays as they are.
ARGUMENT_BYTES = lowering.LARGE_ARRAY_BYTES if Calls is Front else backend_mod.IN_PLACE_MIN_BYTES
#: With the Front, what a fast path's arguments, each, and its results, together, stay below
#: (`direct`): an argument from ARGUMENT_BYTES is given to C++ only where C++ reads it in
#: place, aligned (a misaligned one's call goes to Python, whose program reads it through a
#: view, lowering.LARGE_ARRAY_BYTES), and the results are XLA's fresh memory, which malloc
#: serves from its heap without page faults below its raised thresholds
#: (memory.MALLOC_RAISING_BYTES). `x + 1.0` on aligned float64, a call through C++ against
#: the Python path (numpy), medians of 2-4 processes: 300,000 elements 47-55 µs against
#: 109-113 (52), 400,000 63-98 against 123-126 (70), 600,000 83-131 against 131-147 (110); at
#: 700,000-850,000 either way 96-290 (XLA's thread pool wakes or not); 10^6 fed back, 178-330
#: against 170-186 (190-220). Those samples followed other contenders' (the pool woke or not);
#: each after 150 ms of its own calls (benchmarks' timing.interleaved `lead`), medians of 21,
#: µs: 10^6 elements 140-162 against 180-202 (jax.jit on the device 157-174, numpy 200-214),
#: 1.5 x 10^6 297 against 326 (324, 431), 2 x 10^6 805-839 against 553-647 (529-639, 715-796).
DIRECT_BYTES = 12 << 20 if Calls is Front and memory.glibc() else ARGUMENT_BYTES
#: The second program saves the Python path's work a call (~60 µs for `x + 1.0` on 300,000
#: elements; the benchmarks' MLP step, its parameters a list of pairs, 0.09-0.1 ms of 2.85: fastpaths).
#: It is compiled in the call that first finds the large arguments aligned where its
#: StableHLO text is at most this (`x + 1.0` 29 ms, `sin(x) * s + y - t` 24 ms, 1-2 kB of
#: text), else on the compile thread, its calls staying on the Python path meanwhile: the MLP
#: step's (26 kB) takes 0.13-0.35 s, which would stall a job.
DIRECT_TEXT_BYTES = 16 << 10


def forget(jf):
    """Drop the fast paths C++ keeps for `jf` (a jitted function), and its staging buffers."""
    if isinstance(jf, Front):
        jf.unstage()
    jf._fast._clear_cache()


def _stage(jf, executable, finish, args_tree, leaves):
    """Have `jf` (a jitted function, a Front) pass the numpy arrays of a call like one of
    `leaves` (its arguments', positional or in lists and tuples: `args_tree`, their
    tree.flatten treedef) to C++ in device buffers kept for the signature, in lists and tuples
    made alike, and its Python numbers as they are: C++ then makes no buffer a call
    (_callpath.c). C++ returns a staged call's outputs flat (`_flat`) and the Front finishes
    them with `finish`. Not for empty arrays, a dtype the buffer protocol cannot describe,
    other containers, nor arrays from ARGUMENT_BYTES (C++ is given those as they are,
    aligned, DIRECT_BYTES). Measured, value_and_grad of a two-layer network's loss, its
    parameters a list of (W, b) pairs (3x4, 4x2) and a 5x3 batch: 19.4 µs a call staged
    against 27.5 given to C++ as they are (the same function of five positional arrays: 18.4)."""
    tokens = _tokens(args_tree, leaves)
    arrays_in = [x for x in leaves if type(x) is np.ndarray]
    if tokens is None or not arrays_in or any(x.size == 0 or x.nbytes >= ARGUMENT_BYTES for x in arrays_in):
        return
    sharding, devices = executable._put_args
    slots, arrays = [], []
    for x in leaves:
        if type(x) is not np.ndarray:  # a number, passed as it is
            slots.append(None)
            arrays.append(None)
            continue
        try:
            format = memoryview(np.empty((), x.dtype)).format
        except (ValueError, TypeError):
            return
        array = xc.batched_device_put(backend_mod.Aval(x.shape, x.dtype), sharding, [np.zeros(x.shape, x.dtype)],
                                      devices, enable_x64=True, host_buffer_semantics=backend_mod.host_semantics())
        slots.append((format, x.shape, x.nbytes, backend_mod.address(array)))
        arrays.append(array)
    jf.stage(tuple(slots), tuple(arrays), finish, tokens)


_LEAF_TOKENS = {np.ndarray: b"a", int: b"i", float: b"f", complex: b"c"}


def _tokens(args_tree, leaves):
    """The structure of arguments as _callpath's `walk` writes it (b'a' a numpy array, b'i',
    b'f' or b'c' a Python int, float or complex, b'l' or b't' and a length byte a list or
    tuple, depth first), or None for one it does not stage."""
    out, it = bytearray(), iter(leaves)

    def visit(t):
        if t is tree.LEAF:
            kind = _LEAF_TOKENS.get(type(next(it)))
            out.extend(kind or b"")
            return kind is not None
        if (t[0] is list or t[0] is tuple) and len(t[1]) < 256:
            out.extend((b"l" if t[0] is list else b"t") + bytes([len(t[1])]))
            return all(map(visit, t[1]))
        return False
    return bytes(out) if all(map(visit, args_tree[1])) else None


def _flat(n):
    """The tree of n outputs as C++ returns them to the Front: one array, or a tuple of them."""
    return _state["registry"].flatten(0 if n == 1 else (0,) * n)[1]


def _unstaged(jf, args):
    """(`args` with `jf`'s staging arrays, which C++ passes on a miss, positional or in lists
    and tuples, as numpy copies (the next staged call overwrites them), whether there were
    any). A staged call that missed is marked so: its results are finished already."""
    stages = jf.staged() if isinstance(jf, Front) else None
    if not stages:
        return args, False
    leaves, treedef = tree.flatten(args)
    if not any(type(a) is _jax.ArrayImpl for a in leaves):
        return args, False
    ours = {id(a) for arrays in stages for a in arrays if a is not None}
    if not any(id(a) in ours for a in leaves):
        return args, False
    jf.missed = True
    return tree.unflatten(treedef, [np.array(memoryview(a)) if id(a) in ours else a  # (its own methods to numpy
                                    for a in leaves]), True  # import jax where jax is installed: backend.address)


def _kept_again(args):
    """`args` with the buffers the Front passed C++ in place of DeviceArrays (_callpath's
    `bare`: positional DeviceArrays that stand for what they hold) as DeviceArrays again:
    jaxlib arrays whose aval is ours (jax's have its own; a staged call's are numpy copies
    already: _unstaged)."""
    def ours(a):
        return type(a) is _jax.ArrayImpl and type(a.aval) is backend_mod.Aval
    if not any(ours(a) for a in args):
        return args
    return tuple(backend_mod.DeviceArray(a, a.aval, backend_mod.get_backend(a._sharding._device.platform))
                 if ours(a) else a for a in args)


def _shard_arg(x, sharding, layout):
    """An argument C++ does not put itself (one with a layout: ours have none) on the device."""
    x = np.asarray(x)
    return xc.batched_device_put(backend_mod.Aval(x.shape, x.dtype), sharding, [x], [sharding._device],
                                 enable_x64=True, host_buffer_semantics=backend_mod.host_semantics())


def fastpath(executable, out_tree, stats, cache, key, front=None, call=None, arm=None, keep=False, moved=None):
    """The fast path of `executable` (a backend.Executable), or None if it does not qualify.
    Its calls return the results in `out_tree` and do the bookkeeping of a hit on the
    Python path: `stats` (an aot.CacheStats) counted, `key` moved to the end of `cache`.
    C++ keeps it where the garbage collector does not look: it holds `cache` (whose entries
    may lead back to the function) weakly, and `key` and `stats` must hold nothing of the user's.
    `front`: the jitted function, to stage the signature's arguments into (`_stage`) where it
    is a Front (None for an executable donating an argument: the staging buffer would go).
    `call`: (tree.flatten treedef, leaves) of a call of the signature, the leaves C++ flattens
    it into (the executable's arguments where None), of which the executable takes those at
    its `sources`: C++ skips the others, which the function never read (the fast path's
    kept_var_bitvec). `arm(finish)`, where given, may set the fast path's countdown
    (_callpath.Finish's `countdown` and `due`); False from it: no fast path. `keep`: the
    results are DeviceArrays (jit_ps's keep_on_device). `moved`: the arguments a call
    copies to the device, counted (`stats`' host_to_device), where not all (DeviceArrays among them)."""
    n_leaves = len(executable.in_avals) if call is None else len(call[1])
    if not _qualifies(executable, n_leaves):
        return None
    n_in, n_out = len(executable.consts) + len(executable.in_avals), len(executable.out_avals)
    sharding = executable.backend.sharding()
    finish = _finisher(executable, out_tree, stats, weakref.ref(cache), key, keep, moved)
    if arm is not None and not arm(finish):
        return None
    if isinstance(front, Front) and call is not None and executable.backend.platform == "cpu":
        _stage(front, executable, finish, *call)  # (the staging buffers are host memory: the CPU's)
    results = _Results(_fetching(finish, executable.fetched) if executable.fetched and not keep else finish, n_out)
    tree_def = _state["registry"].flatten(results)[1]
    taken = set(executable.sources)
    kept = [True] * len(executable.consts) + [i in taken for i in range(n_leaves)]
    return FastpathData(executable.exe, tree_def, [sharding] * n_in, [sharding] * n_out, list(executable.out_avals),
                        [True] * n_out, kept, [None] * n_in, list(executable.consts))


def _fetching(finish, indices):
    """`finish`, after the host copies of the outputs at `indices` have begun together
    (backend.start_host_copies; off the CPU, for several results)."""
    def fetch(outs):
        backend_mod.start_host_copies(outs, indices)
        return finish(outs)
    return fetch


def needs_python(executable):
    """Whether a program needs Python at each call: it reads large arguments through views,
    writes results into recycled buffers, or packs small arguments (a source that is a list
    of leaves), so that C++ runs another one (fastpaths.FastPaths._direct)."""
    return bool(executable.views or executable.recycled) or not all(type(i) is int for i in executable.sources)


def _qualifies(executable, n_leaves):
    """Whether C++ can run `executable` on a call's `n_leaves` leaves. On the CPU its arguments
    stay below DIRECT_BYTES (what C++ reads in place, above); an accelerator's are copied to
    its memory, by C++ as by the Python path."""
    sources = executable.sources  # each argument's leaf, in order
    return (not needs_python(executable) and all(i < j for i, j in zip(sources, sources[1:]))
            and all(i < n_leaves for i in sources) and (executable.backend.platform != "cpu" or all(
                _bytes(a) < DIRECT_BYTES for a in executable.in_avals)))


def takes_arguments(executable, leaves, keep):
    """Whether C++ may be given these leaves of a call of `executable` (one that qualifies):
    DeviceArrays of its backend on its device, holding what they stand for (no host_dtype:
    C++ passes the buffer as it is), and numpy arrays where C++'s put of them is over when
    the call returns. C++ puts a numpy array zero-copy (jaxlib's allow_zero_copy): the CPU's
    synchronous client has read it by then (its copies apart are staged or left to Python,
    _callpath's scan), an accelerator's client copies it to the chip after the call returns,
    before the execution, so only a call that waits for its results (numpy ones, one not
    empty: a host copy is made after the execution) has it read by then; a kept call's
    (`keep`, DeviceArray results) numpy arguments are put by the Python path, which copies
    them during the call, so that writing into them after it cannot change its results."""
    backend = executable.backend
    sharding = backend.sharding()
    host = backend.platform == "cpu" or not keep and any(a.size for a in executable.out_avals)
    for x in leaves:
        t = type(x)
        if t is np.ndarray and not host:
            return False
        if t is backend_mod.DeviceArray and (x.backend is not backend or x.host_dtype is not None
                                             or x.buffer._sharding != sharding):
            return False
    return True


def puts_as_taken(executable, leaves):
    """Whether C++ puts these leaves of a call (numpy arrays, Python numbers, DeviceArrays) as
    `executable`'s parameters: those at its `sources`, in its `in_avals`' shapes and dtypes
    (a DeviceArray's buffer is passed as it is), the x64 state being on for its calls
    (`calls._jax_x64`)."""
    for i, param in zip(executable.sources, executable.in_avals):
        x = leaves[i]
        t = type(x)
        if t is backend_mod.DeviceArray:
            shape, dtype = x.aval.shape, x.aval.dtype
        elif t is np.ndarray:
            shape, dtype = x.shape, x.dtype
        else:
            shape, dtype = (), PY_SCALARS.get(t)
        if shape != param.shape or dtype != param.dtype:
            return False
    return True


def direct(in_avals, out_avals):
    """Whether a signature of arguments `in_avals` and results `out_avals`, whose program
    needs Python at each call (views: lowering.LARGE_ARRAY_BYTES; recycled results), may run
    through C++ lowered without them (DIRECT_BYTES; api.JittedFunction._direct)."""
    return all(_bytes(a) < DIRECT_BYTES for a in in_avals) and sum(map(_bytes, out_avals)) < DIRECT_BYTES


def in_place(leaves):
    """Whether the Front gives C++ each numpy array among these leaves (the others are Python
    numbers) from ARGUMENT_BYTES as it is (C-contiguous and 64-byte aligned, _callpath's scan)."""
    return all(type(a) is not np.ndarray or a.nbytes < ARGUMENT_BYTES or backend_mod.is_aligned(a) for a in leaves)


def _bytes(aval):
    return aval.size * aval.dtype.itemsize


def _finisher(executable, out_tree, stats, cache_ref, key, keep=False, moved=None):
    """What one fast call does after C++: count, keep the cache's order of use, and hand out
    numpy arrays (`keep`: DeviceArrays) in the function's output structure. In C where
    _callpath is built (its Finish, with the converters' views made there), else in one
    Python frame (each more costs ~0.1 µs of a ~6 µs call)."""
    n_in = len(executable.in_avals) if moved is None else moved  # what a call counts as moved each way
    n_out = 0 if keep else len(executable.out_avals)
    leaf = out_tree is tree.LEAF
    if Calls is Front:  # per result (_callpath's convert): kept, (aval, backend, host_dtype), made a
        backend = executable.backend  # DeviceArray; a view, (shape, dtype, nbytes, scalar); else its converter
        results = tuple((a, backend, h) if keep
                        else (a.shape, np.dtype(a.dtype), a.size * a.dtype.itemsize, a.shape == ())
                        if backend_mod.viewable(a, backend.platform) and h is None else convert
                        for a, h, convert in zip(executable.out_avals, executable.host_dtypes, executable.converters))
        return native.Finish(stats.counts, cache_ref, key, results, None if leaf else _unflattener(out_tree),
                             n_in, n_out)
    converters = executable.keepers() if keep else executable.converters
    unflatten = None if leaf else _unflattener(out_tree)

    def finish(outs):
        stats.hits += 1
        stats.host_to_device += n_in
        stats.device_to_host += n_out
        try:
            cache_ref().move_to_end(key)  # least recently used signatures are evicted first
        except (KeyError, RuntimeError, AttributeError):  # evicted meanwhile by another thread; gone
            pass
        due = finish.due  # (as _callpath.Finish's)
        if due is not None:
            finish.countdown -= 1
            if finish.countdown <= 0:
                finish.due = None
                due()
        if leaf:
            return converters[0](outs[0])
        return unflatten([convert(o) for convert, o in zip(converters, outs)])
    finish.due, finish.countdown = None, 0
    return finish


def _unflattener(out_tree):
    """The function building a fast call's results, a list of them, into `out_tree`: for tuples,
    lists and None, a treedef of jaxlib's C++ pytrees (a two-layer network's value_and_grad,
    its gradient a list of pairs: 18.3 µs a call against 21.8 with tree.unflatten); a dict's
    keys are in the function's order, where C++ would sort them, so other structures are
    tree.unflatten's."""
    if tree.sequences_only(out_tree):
        sample = tree.unflatten(out_tree, [0] * tree.num_leaves(out_tree))
        return _state["registry"].flatten(sample)[1].unflatten
    return functools.partial(tree.unflatten, out_tree)


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
