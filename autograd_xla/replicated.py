"""Programs run once per device of several devices (XLA's replica mode), and the arrays
they keep on those devices: what pmap executes (parallel.py), over this process's devices or,
with several processes (distributed.py), over all of theirs. Transfers and results follow the
single-device path's rules (backend.py), with the guards of shared/notes/parallel-and-cache.md.
"""
import contextlib
import sys

import numpy as np

from .backend import IN_PLACE_MIN_BYTES, OnDevice, aligned, converter, host_semantics, is_aligned, runtime_error
from .clients import result_handler, xc
from .core import Aval
from .lowering import shard_shape


def replica_options(devices):
    """Compile options of a program run once per device of `devices` (replica mode)."""
    options = xc.CompileOptions()
    options.num_replicas, options.num_partitions = len(devices), 1
    ids = np.array([d.id for d in devices], dtype=np.int32).reshape(len(devices), 1)
    options.device_assignment = xc.DeviceAssignment.create(ids)
    return options


#: Multi-device executions a caller may leave running before one is waited for: PJRT's CPU
#: client deadlocks beyond ~32 outstanding executions with collectives (it aborts the process
#: after 40 s; shared/notes/parallel-and-cache.md, pitfall 1).
MAX_IN_FLIGHT = 16


class ReplicatedExecutable:
    """A program run once per device of `devices`, each with its own entry of the mapped
    arguments (which callers pass and get back stacked: a leading axis of one entry per
    device) and a whole copy of the broadcast ones. `in_avals` / `out_avals` are one device's
    values; in the program each keeps its shape (lowering.shard_shape) and the devices'
    shards lie end to end along axis 0 of the array over all of them (`end_to_end`).

    With several processes (distributed.initialize) `devices` are global and a process holds
    only its own: it passes the shards of its local devices (the leading axis is their count)
    and gets back theirs. XLA assembles a global array from a process's local shards alone
    (shared/notes/parallel-and-cache.md (c)), so both cases are the same code over
    `local_devices`, which in one process are all of `devices`."""

    def __init__(self, backend, program, devices, in_avals, mapped, out_avals, consts):
        self.backend, self.program, self.exe = backend, program, program.exe
        self.devices = list(devices)
        n = len(self.devices)
        self.device_list = xc.DeviceList(tuple(self.devices))
        self.in_avals = [Aval(s, d) for s, d in in_avals]  # of one device's value
        self.mapped = list(mapped)
        self.out_avals = [Aval((n,) + tuple(s), d) for s, d in out_avals]  # stacked over all devices
        local = [d for d in self.devices if d.process_index == backend.process_index]
        # (this process, how many) when the program reaches other processes' devices, else None
        self.processes = None
        self.local_devices, self.local_avals = self.devices, self.out_avals
        if len(local) < n:
            self.processes = (backend.process_index, len({d.process_index for d in self.devices}))
            self.local_devices = local
            self.local_avals = [Aval((len(local),) + a.shape[1:], a.dtype) for a in self.out_avals]
        self._shardings = {}
        self.handlers = [result_handler(self.end_to_end(a), self.tiled(max(a.ndim - 1, 1))) for a in self.out_avals]
        self.consts = [self.put_replicated(c) for c in consts]
        self._converters = [converter(Aval(shard_shape(a.shape[1:]), a.dtype)) for a in self.local_avals]
        self._in_flight = 0

    def tiled(self, ndim):
        key = ("tiled", ndim)
        s = self._shardings.get(key)
        if s is None:
            tile = xc.HloSharding.iota_tile((len(self.devices),) + (1,) * (ndim - 1))
            s = self._shardings[key] = xc.GSPMDSharding(self.device_list, tile)
        return s

    def replicated(self):
        s = self._shardings.get("replicated")
        if s is None:
            s = self._shardings["replicated"] = xc.GSPMDSharding(self.device_list, xc.HloSharding.replicate())
        return s

    def put_replicated(self, array, in_place=False):
        array = np.asarray(array)
        if in_place and len(self.local_devices) > 1 and array.nbytes >= IN_PLACE_MIN_BYTES:
            # every device reads one aligned host copy in place, instead of each getting a copy
            array = aligned(array)
        # one distinct object per device: the same one twice makes the put raise (pitfall 4)
        copies = [array.view() for _ in self.local_devices]
        return xc.batched_device_put(Aval(array.shape, array.dtype), self.replicated(), copies, self.local_devices,
                                     enable_x64=True, host_buffer_semantics=_semantics(copies, in_place))

    def end_to_end(self, stacked):
        """The aval of the array over all devices holding, end to end along axis 0, the shards
        of `stacked` (one entry per device along its leading axis)."""
        shard = shard_shape(stacked.shape[1:])
        return Aval((len(self.devices) * shard[0],) + shard[1:], stacked.dtype)

    def put_sharded(self, stacked, aval, in_place=False):
        """`stacked` (leading axis: one entry per local device; `aval`: one entry's) as one array
        over the devices."""
        stacked = np.ascontiguousarray(stacked, dtype=aval.dtype)
        shard = shard_shape(aval.shape)
        shards = [stacked[i].reshape(shard) for i in range(len(self.local_devices))]
        whole = self.end_to_end(Aval((len(self.devices),) + aval.shape, aval.dtype))
        return xc.batched_device_put(whole, self.tiled(len(shard)), shards, self.local_devices, enable_x64=True,
                                     host_buffer_semantics=_semantics(shards, in_place))

    def __call__(self, leaves, keep_on_device=False, first_only=()):
        """`leaves`: per parameter, the stacked shards (mapped) or the whole value (broadcast),
        as numpy arrays or ShardedArrays of this executable's devices. `first_only`: indices
        of results equal on every device, of which the first device's is enough (it comes
        back as a view of that device's buffer, leading axis 1, no copy)."""
        buffers = list(self.consts)  # lifted constants first (lowering.Lowered)
        # results are waited for before returning to numpy, so large aligned inputs may be read
        # in place meanwhile (their pages are not copied and faulted in anew on every call)
        in_place = not keep_on_device
        for x, aval, mapped in zip(leaves, self.in_avals, self.mapped):
            if type(x) is ShardedArray:
                x = x.buffer_for(self, aval, mapped)
            elif mapped:
                x = self.put_sharded(x, aval, in_place)
            else:
                x = self.put_replicated(np.asarray(x, dtype=aval.dtype), in_place)
            buffers.append(x)
        try:
            outs = self.exe.execute_sharded(buffers).consume_with_handlers(self.handlers)
            if keep_on_device:
                self._in_flight += 1
                if self._in_flight >= MAX_IN_FLIGHT and outs:
                    outs[0].block_until_ready()
                    self._in_flight = 0
                return [ShardedArray(o, a, self) for o, a in zip(outs, self.local_avals)]
            # a collective's failure (a peer process gone) surfaces here, while waiting for the results
            for o in outs:
                o.block_until_ready()
            return [gather(o, a, convert, k in first_only)
                    for k, (o, a, convert) in enumerate(zip(outs, self.local_avals, self._converters))]
        except xc.XlaRuntimeError as e:
            raise runtime_error(e, self.processes) from None


def _semantics(shards, in_place):
    """Read the shards in place when allowed and each is large, C-contiguous and 64-byte
    aligned (the rule of Executable's in-place arguments); else copy them during the put."""
    return host_semantics(in_place and all(x.nbytes >= IN_PLACE_MIN_BYTES and is_aligned(x) for x in shards))


def gather(array, aval, convert=None, first_only=False):
    """A multi-device array as the numpy array `aval` (a leading axis of one entry per local
    device; `first_only`: the first device's entry alone, a view of its buffer). Each device
    runs on a thread of its own, so execute_sharded returns before the results exist: wait
    for them (reading a buffer's pointer does not)."""
    array.block_until_ready()
    convert = convert or converter(Aval(shard_shape(aval.shape[1:]), aval.dtype))
    with _jax_unimportable():
        shards = array._arrays
    if first_only:
        return convert(shards[0]).reshape((1,) + tuple(aval.shape[1:]))
    return np.concatenate([convert(shard) for shard in shards], axis=0).reshape(aval.shape)


@contextlib.contextmanager
def _jax_unimportable():
    """jaxlib looks for jax's sharding classes when it makes per-device arrays (`_arrays`):
    it imports jax where jax is installed (0.5 s, and jax in a process that never asked for
    it), or fails to find it once per shard (25 µs each, measured). For that moment jax is
    marked absent (a None entry in sys.modules fails an import at once) and jaxlib uses its
    own classes, as it does without jax."""
    if "jax" in sys.modules:
        yield
        return
    sys.modules["jax"] = None
    try:
        yield
    finally:
        if "jax" in sys.modules and sys.modules["jax"] is None:
            del sys.modules["jax"]


class ShardedArray(OnDevice):
    """A result of a pmapped function kept on its devices (keep_on_device=True): one shard
    per device along the leading axis. Passed back into a pmapped function of the same
    devices it costs no transfer; `np.asarray` gathers it to the host."""

    __slots__ = ("array", "aval", "executable")

    def __init__(self, array, aval, executable):
        self.array, self.aval, self.executable = array, aval, executable

    def buffer_for(self, executable, aval, mapped):
        """This array as an argument of `executable`: itself when it has the layout wanted (its
        sharding is checked here: a mismatched one crashes the process, pitfall b), else a
        new transfer from the host."""
        same = (mapped and executable.devices == self.executable.devices
                and self.aval.shape[1:] == aval.shape and self.aval.dtype == aval.dtype)
        if same:
            return self.array
        host = np.asarray(self)
        return executable.put_sharded(host, aval) if mapped else executable.put_replicated(host)

    jaxlib_array = property(lambda self: self.array)

    def __array__(self, dtype=None, copy=None):
        out = gather(self.array, self.aval)
        return out if dtype is None else out.astype(dtype)

    def __repr__(self):
        return f"ShardedArray({np.asarray(self)!r}, devices={len(self.executable.devices)})"
