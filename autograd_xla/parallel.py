"""pmap: one program per device, compiled once by XLA, with collectives between the devices;
and the paper's `iterated_map_reduce` built on it.

`pmap(f, axis_name="i")(x)` traces f for one device's shard (as vmap traces one example),
lowers that graph once as a replica-mode program (`lowering.lower_replicated`: every
device runs it, `psum(x, "i")` is an all-reduce among them), and runs it with one shard per
device (`replicated.ReplicatedExecutable`). So XLA's own collectives do the communication and
its runtime runs the devices; nothing here schedules anything. The mapped axis's size is
the number of devices used. With several processes (distributed.initialize) it is the number
of this process's devices used; the same number of every process's take part, and the
collectives reach across processes.

autograd differentiates a pmap call like a vmap one (batched.MappedSpec): its VJP is a pmap
of the shard's VJP, gradients of broadcast arguments summed over the devices.
"""
import functools
import threading

import numpy as np
from autograd.tracer import getval, isbox

from . import backend as backend_mod
from . import tracing, tree
from .backend import DeviceArray
from .batched import MappedSpec, batch_size, leaf_axes, mapped_call, out_leaf_axes
from .collectives import pmax, pmean, pmin, psum
from .control_flow import fori_loop
from .control_flow.common import aval_of, closure_convert, unpack
from .core import Aval
from .errors import ArgumentError, JitError
from .lowering import lower_replicated, shard_shape
from .replicated import ReplicatedExecutable, ShardedArray, replica_options


class _PrivateAxis:
    """The axis name of a pmap given none."""

    __slots__ = ("owner",)

    def __init__(self, owner):
        self.owner = owner

    def __repr__(self):
        return f"<the devices of {self.owner!r}>"


def _leaf_type(x):
    """Shape and dtype of an argument leaf, read without moving a ShardedArray to the host."""
    v = getval(x)
    return np.shape(v), (v.dtype if isinstance(v, (np.ndarray, ShardedArray, DeviceArray)) else np.result_type(v))


class PmappedFunction:
    """A function mapped over devices; made by `pmap`, whose docstring describes it."""

    def __init__(self, fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, keep_on_device,
                 backend):
        functools.update_wrapper(self, fun)
        self._fun, self.axis_name, self.in_axes, self.out_axes = fun, axis_name, in_axes, out_axes
        # the devices' axis in the program: the user's name, or one of our own that no user code
        # can name (a derivative sums the gradients of broadcast arguments over it)
        self._axis = axis_name if axis_name is not None else _PrivateAxis(self)
        nums = static_broadcasted_argnums
        self._static = tuple(sorted({int(i) for i in ((nums,) if isinstance(nums, int) else nums)}))
        self._devices, self.keep_on_device, self.backend = devices, keep_on_device, backend
        self._cache = {}
        self._out_trees = {}
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<pmap {getattr(self._fun, '__qualname__', self._fun)}>"

    def __call__(self, *args, **kwargs):
        if tracing.is_tracing():
            raise JitError("pmap runs at top level, not inside a traced function (jit_ps, vmap, a loop body): "
                           "call the pmapped function directly, or use vmap (with axis_name=...) inside")
        static = tuple((i, args[i]) for i in self._static if i < len(args))
        dynamic = tuple(a for i, a in enumerate(args) if i not in self._static)
        in_axes = self.in_axes
        if type(in_axes) is tuple and self._static:
            in_axes = tuple(a for i, a in enumerate(in_axes) if i not in self._static)
        leaves, in_tree = tree.flatten((dynamic, dict(kwargs)))
        axes, labels = leaf_axes(in_axes, dynamic, dict(kwargs), [])
        n = batch_size(leaves, axes, labels, "pmap")
        devices = self.devices_for(n)
        out_tree = []
        # flat closes over fun, not over self: closure conversion walks all that flat reaches, and
        # walking self's cache of executables took ~75 µs of a 160 µs call (measured, 4 devices)
        fun = self._fun

        def flat(shard):
            a, k = tree.unflatten(in_tree, list(shard))
            for i, v in static:
                a = a[:i] + (v,) + a[i:]
            out_leaves, t = tree.flatten(fun(*a, **k))
            out_tree.append(t)
            return out_leaves

        # the results' structure, as the trace found it (a compiled signature is not traced again)
        signature = (in_tree, static, tuple(map(_leaf_type, leaves)), tuple(axes))

        def results_tree():
            if out_tree:
                self._out_trees[signature] = out_tree[-1]
            return self._out_trees[signature]

        def resolve(ranks):
            return out_leaf_axes(self.out_axes, results_tree(), ranks)

        run = functools.partial(self._run, devices, (in_tree, static, repr(in_axes)))
        converted, ext = closure_convert(flat)
        if ext or any(isbox(x) for x in leaves):
            # keyless: the spec's run serves its derivatives too, whose functions differ from call to call
            spec = MappedSpec(converted[0], len(leaves), axes, resolve, n, labels,
                              run=functools.partial(self._run, devices, None), what="pmap",
                              reduce=functools.partial(psum, axis_name=self._axis))
            outs = unpack(mapped_call(spec, *leaves, *ext))
        else:
            outs = run(flat, leaves, axes, resolve, n, labels)
        return tree.unflatten(results_tree(), outs)

    def devices_for(self, n):
        """The devices of a call whose mapped axis has size `n`: the first n of each process's
        (one process: the first n; several: the axis is this process's part, as in jax)."""
        backend = backend_mod.get_backend(self.backend)
        available = list(self._devices) if self._devices is not None else list(backend.devices)
        chosen, local = _first_of_each_process(available, n, backend.process_index)
        if n > local:
            raise ValueError(f"pmap's mapped axis has size {n}, but only {local} device(s) are available "
                             f"({backend.platform}, in this process); on the CPU, set AUTOGRAD_XLA_CPU_DEVICES or "
                             "call autograd_xla.set_cpu_device_count before the first call")
        return chosen

    def _run(self, devices, key, f, leaves, axes, out_axes, size, labels=None):
        """f (shard leaves -> result leaves) run once per device; the stacked results. `key`:
        what identifies f's program besides the leaves' types (None: compiled for this call
        alone, as the derivatives of a pmap call are)."""
        if any(isbox(x) for x in leaves):  # a derivative's pmap, differentiated again
            converted, ext = closure_convert(f)
            spec = MappedSpec(converted[0], len(leaves), axes, out_axes, size, labels,
                              run=functools.partial(self._run, devices, None), what="pmap",
                              reduce=functools.partial(psum, axis_name=self._axis))
            return unpack(mapped_call(spec, *leaves, *ext))
        values = [getval(x) for x in leaves]
        avals = []
        for x, a in zip(values, axes):
            aval = Aval(x.shape, x.dtype) if type(x) is ShardedArray else aval_of(x)
            avals.append(type(aval)(aval.shape[:a] + aval.shape[a + 1:], aval.dtype) if a is not None else aval)
        full_key = None if key is None else (key, tuple(avals), tuple(axes), tuple(d.id for d in devices))
        with self._lock:
            entry = self._cache.get(full_key) if full_key is not None else None
        if entry is None:
            entry = self._compile(f, avals, axes, out_axes, devices, labels)
            if full_key is not None:
                with self._lock:
                    self._cache[full_key] = entry
        executable, ranks = entry
        result_axes = out_axes(ranks)  # each call: a differentiated call's spec learns them here
        args = [x if a == 0 and type(x) is ShardedArray else np.moveaxis(np.asarray(x), a, 0) if a is not None else x
                for x, a in zip(values, axes)]
        outs = executable(args, self.keep_on_device, {k for k, a in enumerate(result_axes) if a is None})
        results = []
        for o, a in zip(outs, result_axes):
            if a is None:
                results.append(np.asarray(o)[0])
            elif a == 0:
                results.append(o)
            else:
                results.append(np.moveaxis(np.asarray(o), 0, a))
        return results

    def _compile(self, f, avals, axes, out_axes, devices, labels):
        """Trace and lower f; the executable of its program (a derivative's, traced again on each
        call, finds its program among those the backend keeps: backend.RECENT_PROGRAMS)."""
        backend = backend_mod.get_backend(self.backend)
        n = len(devices)
        with tracing.binding_axis(self._axis, n):
            graph, _ = tracing.trace_function(lambda *shard: f(list(shard)), avals, labels)
        if len(graph.invars) != len(avals) or graph.guards:
            raise JitError(f"{self!r}: a pmapped function cannot draw numpy random numbers or depend on a condition "
                           "checked at run time (a clamped index); draw outside and pass the numbers in")
        ranks = [a.ndim for a in graph.out_avals]
        out_axes(ranks)  # checks them against the results
        mapped = [a is not None for a in axes]
        named = {self._axis: n}
        x64 = backend.platform in backend_mod.FLOAT64_PLATFORMS  # (else 32 bits, as jit_ps's: api._x64)
        lowered = lower_replicated(graph, mapped, named, n, name=f"pmap_{getattr(self._fun, '__name__', 'fn')}",
                                   platform=backend.platform, x64=x64)
        if devices == [backend.default_device] and not self.keep_on_device:
            program, _ = backend.compile(lowered.text)
            executable = _OneDevice(backend_mod.Executable.from_lowered(backend, program, lowered, widen=not x64), mapped,
                                    [a.shape for a in graph.out_avals])
        else:
            program, _ = backend.compile(lowered.text, replica_options(devices), devices)
            # one device's values, as the graph has them (the program's shards are at least 1-d)
            ins = [(v.aval.shape, dtype) for v, (_, dtype) in zip(graph.invars, lowered.in_avals)]
            outs = [(a.shape, dtype) for a, (_, dtype) in zip(graph.out_avals, lowered.out_avals)]
            executable = ReplicatedExecutable(backend, program, devices, ins, mapped, outs,
                                                         lowered.consts)
        return executable, ranks


def _first_of_each_process(devices, n, process):
    """(the first n of `devices` of each process, in their order; how many are `process`'s)."""
    counts = {}
    chosen = []
    for d in devices:
        k = counts.get(d.process_index, 0)
        if k < n:
            chosen.append(d)
        counts[d.process_index] = k + 1
    return chosen, counts.get(process, 0)


class _OneDevice:
    """A pmap over the default device alone, run as an ordinary single-device executable (the
    same program: its collectives span one device) on jit_ps's call path, which a
    multi-device execution is slower than: 1.31 against 1.83 ms an MLP step, measured. Takes
    and returns what ReplicatedExecutable does (a leading axis of one entry); not for results
    kept on the device, which are ShardedArrays."""

    __slots__ = ("executable", "mapped", "out_shapes")

    def __init__(self, executable, mapped, out_shapes):
        self.executable, self.mapped, self.out_shapes = executable, mapped, out_shapes

    def __call__(self, leaves, keep_on_device=False, first_only=()):
        args = [np.reshape(x, shard_shape(np.shape(x)[1:])) if m and type(x) is np.ndarray else x
                for x, m in zip(leaves, self.mapped)]
        outs = self.executable(args)
        return [np.reshape(o, (1,) + tuple(s)) for o, s in zip(outs, self.out_shapes)]


def pmap(fun=None, axis_name=None, *, in_axes=0, out_axes=0, static_broadcasted_argnums=(), devices=None,
         keep_on_device=False, backend=None):
    """`fun` run on several devices at once, one shard of the mapped arguments each, as
    jax.pmap: `in_axes` / `out_axes` as vmap's (None: broadcast to every device / a result
    equal on every device); the mapped axis's size is the number of devices used, at most
    the number available (on the CPU: AUTOGRAD_XLA_CPU_DEVICES=N, or set_cpu_device_count).
    Inside, `psum`, `pmean`, `pmax`, `pmin`, `all_gather`, `ppermute` and `axis_index` over
    `axis_name` communicate between the devices. Compiled once per signature as one program
    that every device runs. Results come back as numpy arrays with the device axis, or, with
    `keep_on_device=True`, as ShardedArrays that a next pmapped call takes without a transfer.
    `static_broadcasted_argnums`: positional arguments passed as they are (Python values).
    With several processes (distributed.initialize) the devices are every process's: each
    passes the shards of its own (leading axis: its local count) and gets back theirs."""
    if fun is None:
        return functools.partial(pmap, axis_name=axis_name, in_axes=in_axes, out_axes=out_axes,
                                 static_broadcasted_argnums=static_broadcasted_argnums, devices=devices,
                                 keep_on_device=keep_on_device, backend=backend)
    if axis_name is not None and not isinstance(axis_name, str):
        raise ArgumentError(f"pmap axis_name must be a string or None, got {axis_name!r}")
    return PmappedFunction(fun, axis_name, in_axes, out_axes, static_broadcasted_argnums, devices, keep_on_device,
                           backend)


_IMR_AXIS = "iterated_map_reduce"
_REDUCERS = {"sum": psum, "mean": pmean, "max": pmax, "min": pmin}


def iterated_map_reduce(map_fn, update_fn, init, shards, num_iters, reduce="sum", devices=None, backend=None):
    """The paper's primitive for iterative data-parallel algorithms: `num_iters` times, map
    `map_fn(state, shard) -> partial` over the shards (one per device: `shards`' leading axis,
    an array or a container of arrays), reduce the partials across the devices (`reduce`:
    "sum", "mean", "max" or "min") and update the replicated state with
    `update_fn(state, reduced) -> state`. The whole loop is one compiled program: a
    stablehlo.while around the all-reduce, on the devices; returns the final state.

        # data-parallel logistic regression, 100 steps of gradient descent in one call
        def grad_shard(w, shard):
            X, y = shard
            return X.T @ (1 / (1 + np.exp(-X @ w)) - y)
        w = iterated_map_reduce(grad_shard, lambda w, g: w - 0.1 * g / n, w0, (Xs, ys), 100)
    """
    if reduce not in _REDUCERS:
        raise ArgumentError(f"iterated_map_reduce's reduce must be one of {sorted(_REDUCERS)}, got {reduce!r}")
    key = (map_fn, update_fn, int(num_iters), reduce, tuple(devices) if devices is not None else None, backend)
    with _IMR_LOCK:
        mapped = _IMR_CACHE.pop(key, None)
    if mapped is None:
        mapped = _imr_program(map_fn, update_fn, int(num_iters), _REDUCERS[reduce], devices, backend)
    with _IMR_LOCK:  # most recent last; a call with the same functions compiles nothing
        _IMR_CACHE[key] = mapped
        while len(_IMR_CACHE) > backend_mod.RECENT_PROGRAMS:
            _IMR_CACHE.pop(next(iter(_IMR_CACHE)))
    return mapped(init, shards)


_IMR_CACHE = {}  # (map_fn, update_fn, num_iters, reduce, devices, backend) -> its pmapped loop
_IMR_LOCK = threading.Lock()


def _imr_program(map_fn, update_fn, num_iters, combine, devices, backend):
    def per_device(state, shard):
        def step(i, state):
            return update_fn(state, combine(map_fn(state, shard), _IMR_AXIS))
        return fori_loop(0, num_iters, step, state)

    return pmap(per_device, _IMR_AXIS, in_axes=(None, 0), out_axes=None, devices=devices, backend=backend)
