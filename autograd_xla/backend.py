"""The XLA backend: jaxlib clients, devices, compilation, transfers and execution.

With replicated.py (programs over several devices) the only module that touches jaxlib's
runtime. It uses the fast path measured
in shared/notes/jaxlib-runtime.md: `batched_device_put` in, `execute_sharded` +
`consume_with_handlers`, and numpy arrays out that are views of the result buffers
(no copy, writable, kept alive by the array). It never imports jax; the private jaxlib
surfaces it relies on are checked once, at client creation, with a clear error.

Clients are created on demand per platform, so an accelerator client can sit beside
the CPU one without the tracer or lowering knowing.

This module is long because it is the one place where jaxlib's runtime is driven (with
replicated.py): clients, compiling, and the transfers and calls of every platform, whose
rules (what is read in place, viewed, copied or widened) are kept side by side.
"""
import collections
import functools
import hashlib
import importlib.util
import logging
import math
import os
import re
import sys
import threading
import time
import weakref

import numpy as np
from autograd.extend import VSpace, vspace
from autograd.numpy.numpy_boxes import ArrayBox

from . import blas, clients, hlo, persistent_cache
from .clients import canonical_platform, xc
from .core import Aval
from .errors import CompileError, PlatformUnavailableError, ProcessLostError, TooManyProgramsError

try:
    from ._callpath import address  # where a device array's memory is, without importing jax (_callpath.c)
except ImportError:  # not built: the array's own method, which imports jax where it is installed
    def address(buf):
        return buf.unsafe_buffer_pointer()

#: Large, 64-byte aligned, C-contiguous arguments of a synchronous CPU execution are read in
#: place instead of copied (4 MB: ~15 µs instead of ~450 µs): the executable runs to
#: completion before the call returns and never returns a parameter's buffer (XLA copies
#: returned parameters), so nothing can observe the sharing. Misaligned data must not be
#: passed this way: PJRT then copies it on a worker thread, and the synchronous client was
#: seen to start executing before that copy finished (wrong results).
IN_PLACE_MIN_BYTES = 1 << 16
#: Compiled programs a backend keeps alive after the last jitted function using them is gone.
RECENT_PROGRAMS = 64
#: Bytes of dead results and of staging copies a backend keeps for reuse (lowering.RECYCLE_MIN_BYTES):
#: a loop `y = f(x)` needs one buffer per large result (the previous y dies as the new one is
#: bound), so two per type are kept, within this bound over all types.
RECYCLE_MAX_BYTES = 1 << 30
RECYCLE_PER_TYPE = 2
#: StableHLO text from this size on is expected to take XLA long to compile (10,000 primitive
#: calls, where jit_ps warns, make about 2 MiB; their compile was measured at minutes).
LONG_COMPILE_BYTES = 8 << 20
#: XLA:CPU maps about 12 memory regions for each program it loads (value_and_grad of a small
#: closure, float64: 12.1 a program over 2,000 kept alive), and a process whose maps reach
#: vm.max_map_count (65,530 by default) crashed in the next compile (a segfault in
#: compile_and_load: geomstats' FisherRaoMetric makes a closure per quadrature point, and a
#: memo kept ~5,000 of them jitted). A compile or load is refused (TooManyProgramsError: its
#: call runs plainly, with its warning) once the maps pass MAPS_FRACTION of the bound; they are
#: counted (/proc/self/maps) after as many programs as could, at MAPS_PER_PROGRAM each, take
#: them halfway there.
MAPS_FRACTION = 0.9
MAPS_PER_PROGRAM = 64
_maps = {"bound": None, "unchecked": 0}  # vm.max_map_count * MAPS_FRACTION (0: none known), loads until a count


def check_maps():
    """Raise TooManyProgramsError where this process's memory maps are near vm.max_map_count."""
    if _maps["unchecked"] > 0:
        _maps["unchecked"] -= 1
        return
    if _maps["bound"] is None:
        try:
            with open("/proc/sys/vm/max_map_count") as f:
                _maps["bound"] = MAPS_FRACTION * int(f.read())
        except (OSError, ValueError):  # not Linux: no bound known
            _maps["bound"] = 0
    bound = _maps["bound"]
    try:
        with open("/proc/self/maps", "rb") as f:
            count = f.read().count(b"\n") if bound else 0
    except OSError:
        count = 0
    if not bound or not count:
        _maps["unchecked"] = math.inf
        return
    if count >= bound:
        raise TooManyProgramsError(
            f"this process has {count:,} memory maps, near the system's bound (vm.max_map_count "
            f"{bound / MAPS_FRACTION:,.0f}), past which XLA's next compile crashes it: XLA:CPU maps about 12 for "
            "each program it holds. Let jitted functions go (or clear_cache() them), or raise vm.max_map_count")
    _maps["unchecked"] = int((bound - count) / 2 / MAPS_PER_PROGRAM)


#: Device buffers of views' offsets an executable keeps (Executable._offsets_buffer).
OFFSET_BUFFERS = 64
#: Device buffers a backend keeps that read arguments' memory where it is (Backend.alias).
ALIASES_KEPT = 64
#: XLA:CPU's older code generator for fused loops (its "legacy IR emitters"), in place of the
#: fusion emitters it uses by default. Measured on the benchmarks' programs
#: (benchmarks/emitters.py), it compiles in 0.62-0.89 of the time (MLP step 330 -> 240 ms, the
#: HMM's scan gradient 584 -> 375 ms) and computes the same bits (also compared on 40
#: elementwise functions, reductions, sorts and products, float32 and float64, 7 to 300,000
#: elements), except for a few ulps in tan, arctan, cbrt, scipy's beta and 2 of the 440
#: elements of the HMM's Hessian-vector product (9e-16 relative). Its loops take 0.80
#: (logistic regression's gradient) to 1.5 (exp and tanh on 30,000 elements, the HMM's scan)
#: times as long: a signature's first program uses it, and the default's is tried once the
#: signature's calls have cost a few compiles (tiering.Ladder). Its LLVM module is compiled in
#: CODEGEN_SPLIT parts side by side (XLA's default: 32): with the legacy emitters on 2 cores, 4
#: parts compiled the MLP step in 116-124 ms against 137-139, the convnet step in 191-205
#: against 222-234, the HMM's Hessian-vector product 315-342 against 349-371 (8 and 16 in
#: between, 1 slower), code as fast (within 1 %); the default emitters' compiles did not move.
#: Twice the CPUs: on other machines that rule is untested.
CODEGEN_SPLIT = min(32, 2 * len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 32)
FAST_COMPILE_OVERRIDES = [("xla_cpu_use_fusion_emitters", False),
                          ("xla_cpu_parallel_codegen_split_count", CODEGEN_SPLIT)]
#: LLVM's optimisations off (-O0) too for a first program where lowering estimates at most
#: QUICK_WORK elements computed a call (context.op_work): compiles in 0.3-0.6 of the time,
#: loops 1.1-5x as long, no fused multiply-adds (results a few ulps apart) until the ladder's
#: QUICK_STEP. Compile ms, call ms, optimised -> -O0: tiny_grad 28 -> 16, 0.007 both; x + 1.0
#: on 1e6 float64 31 -> 16, 0.52 -> 1.2; logistic regression's value and gradient 53 -> 27,
#: 0.35 -> 0.47; MLP step 193 -> 99, 4.6 -> 6.6; HMM gradient 322 -> 98, 0.33 -> 1.72. Cold
#: jobs of n calls, quick first / optimised first: tiny_grad 0.58-0.66 (n = 1-300); x + 1.0 on
#: 1e6 0.53 at 1, 1.46-1.57 at 30-100; logistic regression 0.73 at 1, 1.32-1.35 at 100-300;
#: MLP gradient 0.47 at 1, 1.11-1.16 at 30-300: slower calls, and on 2 cores the optimised
#: compile beside them, cost more than the compile saved unless a call computes next to nothing.
QUICK_COMPILE_OVERRIDES = [("xla_backend_optimization_level", 0)]
QUICK_WORK = 1 << 14
#: The ladder step (tiering.Ladder) compiling a quick program with LLVM's optimisations.
QUICK_STEP = "LLVM's optimisations"
#: XLA:CPU's memory-optimised scheduler (the order its operations run in, chosen to keep
#: fewer buffers live) in place of its default, for every program a CPU backend compiles
#: (unless XLA_FLAGS chose a scheduler; pmap's programs keep XLA's). Measured (a program
#: alone, aligned arguments, fastest of 9 samples; first program / default emitters): the
#: HMM's gradient 421 -> 283 µs / 300 -> 302, its Hessian-vector product 621 -> 411 / 471
#: -> 430, the convnet step 156 -> 130 ms / 159 -> 137, logistic regression's value and
#: gradient 183 -> 160 µs / 166 -> 166; the MLP step, the SeLU layer, the tiny functions and
#: Table 1's other programs within 1-4 % either way. Compile times alike (MLP step, convnet,
#: HMM).
SCHEDULER_OVERRIDES = [("xla_cpu_scheduler_type", "CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED")]
#: Off the CPU, what jax.jit compiles with where XLA's defaults differ (jax 0.10.2's
#: compiler.get_compile_options): memory fitting at effort O2 (EffortLevel 29), the SPMD
#: partitioner (Shardy), no profile retrieved. XLA compile seconds on the TPU v5e, both sides'
#: StableHLO compiled once with each in one process, XLA's defaults / jax's:
#: SeLU layer's gradient on 4096² 17.0 / 16.6, the convnet's SGD step 23.1 / 19.2 (jax's text
#: 16.7 / 16.6 and 25.3 / 18.7): the same compile as jax.jit's for the same program. With them,
#: that gradient's first call in a fresh process: jit_ps 16.3-17.0 s, jax.jit 16.5-17.2.
ACCELERATOR_BUILD_OPTIONS = {"memory_fitting_level": 29, "use_spmd_partitioning": True,
                             "use_shardy_partitioner": True}
ACCELERATOR_PROFILE_VERSION = -1
#: ... but not for every program: the MLP step with its weight gradients in YNNPACK
#: (context._left_canonical) ran 2688 µs with XLA's own scheduler against 2821 with that one
#: (its settled program alone, alternating blocks of calls; 2758 against 2788 with them in
#: Eigen). So a CPU signature's ladder tries its program with XLA's own scheduler last (this
#: step of tiering.Ladder; Backend.with_xla_scheduler) and keeps the faster.
XLA_SCHEDULER = "XLA's own scheduler"

log = logging.getLogger(__name__)


def host_semantics(in_place=False):
    """How jaxlib's put reads a host array: in place (ZERO_COPY, IN_PLACE_MIN_BYTES says when),
    else copied during the put."""
    return xc.HostBufferSemantics.ZERO_COPY if in_place else xc.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL


@functools.cache
def _sharding_type():
    """The sharding jaxlib's put and result handlers expect: jaxlib's SingleDeviceSharding with
    the two methods they call, which jax's import attaches to that class itself (jax's
    use_cpp_class) and which are attached here where jax is not imported; at the first put
    (clients.xc: not at import). Not a subclass: with jax imported, a kept call of ten results
    took 1.3 µs longer on the CPU with one (19.6-19.8 µs against 18.3-18.5, jax.jit 16.5-16.8)."""
    cls = xc.SingleDeviceSharding
    if not hasattr(cls, "_to_xla_hlo_sharding"):
        replicated = xc.HloSharding.replicate()
        cls.memory_kind = property(lambda self: self._memory_kind)
        cls._to_xla_hlo_sharding = lambda self, ndim: replicated
    return cls


class _ArrayInterface:
    """Exposes a device buffer in host memory to numpy without copying; the numpy array
    keeps this object, hence the buffer, alive."""

    __slots__ = ("__array_interface__", "buffer")


class _Recycling(_ArrayInterface):
    """The holder of a large result: once numpy lets go of the result (and of every view of
    it, which all keep this object), its buffer goes back to the backend for a later result
    of the same type (Backend.take). Only results an Executable made get one: a buffer seen
    through a DeviceArray as well must never be written again."""

    __slots__ = ("backend", "aval")

    def __del__(self):
        try:
            self.backend.give(self.buffer, self.aval)
        except Exception:  # interpreter shutdown: the backend may be gone already
            pass


class Backend:
    """One platform's client and devices, plus its compiled-program cache."""

    def __init__(self, platform, client):
        self.platform = platform
        self.client = client
        self.kernels = platform == "cpu"  # vendor linear-algebra kernels registered (LAPACK, cuSOLVER)
        self.devices = client.devices()  # with several processes: all of them, this process's and the others'
        self.process_index = client.process_index()
        local = client.local_devices()
        self.local_devices = self.devices if len(local) == len(self.devices) else local
        self.default_device = self.local_devices[0]
        self._shardings = {}
        self._programs = weakref.WeakValueDictionary()
        self._recent = collections.OrderedDict()  # the RECENT_PROGRAMS last used, held strongly
        self._programs_lock = threading.Lock()
        # dead large results and staging copies, per (shape, dtype) and kind; reentrant: a
        # result's holder gives its buffer back from __del__, which may run inside take()
        self._spare = {}
        self._spare_bytes = 0
        self._spare_lock = threading.RLock()
        self._aliases = {}  # (address, bytes, shape, dtype) -> (device buffer, offset): Backend.alias
        self._aliases_lock = threading.Lock()

    def sharding(self, device=None):
        device = device or self.default_device
        s = self._shardings.get(device.id)
        if s is None:
            s = self._shardings[device.id] = _sharding_type()(device)
        return s

    # ----- transfers ------------------------------------------------------------------------
    def put(self, array, device=None, aval=None):
        """Copy a numpy array to the device (the copy is ours: later writes to `array` do not leak in)."""
        array = np.asarray(array)
        device = device or self.default_device
        aval = aval or Aval(array.shape, array.dtype)
        return xc.batched_device_put(aval, self.sharding(device), [array], [device], enable_x64=True,
                                     host_buffer_semantics=host_semantics())

    def alias(self, x, aval, view):
        """(A device buffer of type `aval` that reads `x`'s memory where it is, x's offset in
        it), or (None, 0) when x cannot be read in place (CPU, synchronous executions only).
        `view`: the buffer starts at the 64-byte boundary at or below x (_view_start); else x
        must be aligned. Made once per place: the buffer holds an address, not x, and reads it
        only in calls given an array of that address and size, alive for the call, whatever
        array it is (the same one, mutated or not, or a new one in the same memory). A fresh
        put of a 1e6-element view cost 4 µs in a loop of puts but 11-50 µs between the
        executions of a loop of `x + 1` (~250 µs a call); a hit costs ~2 µs, mostly x.ctypes.
        Holding no reference to x, it leaves x.resize() as plain numpy allows it."""
        if not x.flags.c_contiguous:
            return None, 0
        address = x.ctypes.data
        if not view and address % 64:
            return None, 0
        key = (address, x.nbytes, aval.shape, aval.dtype)
        hit = self._aliases.get(key)
        if hit is not None and not hit[0].is_deleted():  # (deleted: donated)
            return hit
        start, offset = _view_start(address, x.nbytes, aval) if view else (address, 0)
        if start is None:
            return None, 0
        holder = _ArrayInterface()
        holder.__array_interface__ = {"shape": aval.shape, "typestr": aval.dtype.str, "data": (start, True), "version": 3}
        buffer = xc.batched_device_put(aval, self.sharding(), [np.asarray(holder)], [self.default_device],
                                       enable_x64=True, host_buffer_semantics=host_semantics(in_place=True))
        with self._aliases_lock:
            if len(self._aliases) >= ALIASES_KEPT:
                self._aliases.pop(next(iter(self._aliases)))
            self._aliases[key] = buffer, offset
        return buffer, offset

    # ----- reused memory (lowering.LARGE_ARRAY_BYTES) ---------------------------------------
    def take(self, aval):
        """A device buffer of type `aval` for a recycled result to be written into: a dead
        earlier result's, or a new one, a copy of uninitialised memory (a fill program instead
        cost each new type a compile, 20-50 ms of a first call)."""
        buffer = self._pop(("result", aval.shape, aval.dtype))
        if buffer is not None and not buffer.is_deleted():
            return buffer
        try:
            return self.put(np.empty(aval.shape, aval.dtype), aval=aval)
        except MemoryError:
            raise MemoryError(f"out of memory for a result of a jitted function: {hlo.tensor_type(aval.shape, aval.dtype)}"
                              f" needs {aval.size * aval.dtype.itemsize / 2**30:.1f} GiB") from None

    def has_spare(self, shape, dtype):
        """Whether `take` would find a dead result of this type to reuse."""
        return bool(self._spare.get(("result", tuple(shape), np.dtype(dtype))))

    def give(self, buffer, aval):
        """Keep the buffer of a result no one sees any more, for `take` (within RECYCLE_*)."""
        self._push(("result", aval.shape, aval.dtype), buffer, aval)

    def staging(self, aval):
        """A 64-byte aligned numpy array of type `aval` to copy a misaligned argument into, so
        that XLA reads it in place (`unstage` it after the call): one reused, its pages already
        faulted in, where PJRT would copy into fresh memory on every call."""
        array = self._pop(("staging", aval.shape, aval.dtype))
        return array if array is not None else aligned_empty(aval.shape, aval.dtype)

    def unstage(self, array, aval):
        self._push(("staging", aval.shape, aval.dtype), array, aval)

    def _pop(self, key):
        with self._spare_lock:
            kept = self._spare.get(key)
            if not kept:
                return None
            thing, nbytes = kept.pop()
            self._spare_bytes -= nbytes
            return thing

    def _push(self, key, thing, aval):
        nbytes = aval.size * aval.dtype.itemsize
        with self._spare_lock:
            kept = self._spare.setdefault(key, [])
            if len(kept) < RECYCLE_PER_TYPE and self._spare_bytes + nbytes <= RECYCLE_MAX_BYTES:
                kept.append((thing, nbytes))
                self._spare_bytes += nbytes

    def release_spare(self):
        """Free the kept dead results and staging copies (RECYCLE_MAX_BYTES of memory at most)."""
        with self._spare_lock:
            self._spare.clear()
            self._spare_bytes = 0

    # ----- compilation ----------------------------------------------------------------------
    def fast_compile_options(self, quick=False):
        """CompileOptions that XLA compiles faster with, for a signature's first program, or
        None where there are none (FAST_COMPILE_OVERRIDES: XLA:CPU's, unless XLA_FLAGS chose
        its emitters); `quick`: faster still, its code slower (QUICK_COMPILE_OVERRIDES); with
        the overrides of every program (`_options`)."""
        if self.platform != "cpu" or _chosen(FAST_COMPILE_OVERRIDES[0][0]):
            return None
        return self._options(FAST_COMPILE_OVERRIDES + (QUICK_COMPILE_OVERRIDES if quick else []))

    def _options(self, overrides=()):
        """CompileOptions with `overrides`, and on the CPU SCHEDULER_OVERRIDES, but none that
        XLA_FLAGS sets: what compile(text) compiles with."""
        overrides = list(overrides) + (SCHEDULER_OVERRIDES if self.platform == "cpu" else [])
        options = xc.CompileOptions()
        options.env_option_overrides = [o for o in overrides if not _chosen(o[0])]
        if self.platform != "cpu":
            for name, value in ACCELERATOR_BUILD_OPTIONS.items():
                setattr(options.executable_build_options, name, value)
            options.profile_version = ACCELERATOR_PROFILE_VERSION
        return options

    def with_xla_scheduler(self, options):
        """`options` (None: compile's own) with XLA's scheduler in place of SCHEDULER_OVERRIDES',
        or None where those are not in them (not the CPU, or XLA_FLAGS chose a scheduler)."""
        return _without(self._options() if options is None else options, SCHEDULER_OVERRIDES)

    def optimized(self, options):
        """`options` with LLVM's optimisations, or None where they have them (QUICK_STEP)."""
        return None if options is None else _without(options, QUICK_COMPILE_OVERRIDES)

    def compile(self, text, options=None, devices=None, expect_long=False, stats=None):
        """Compile StableHLO text. Identical programs (whatever lines they were traced from:
        hlo.without_source_lines) share one executable while anything uses it, and the
        RECENT_PROGRAMS last used stay alive after that (`_hold`); an executable is freed once
        the last jitted function (cache entry) using it is gone and that many others have been
        used since, or when its function's cache is cleared (`forget`). Returns (Program,
        compiled_now).
        With the persistent cache on (persistent_cache.py) a program not in memory is looked
        up on disk before XLA compiles it, and stored after; a disk hit is not compiled_now
        and counts in `stats` (an aot.CacheStats: persistent_hits, persistent_load_seconds).
        A compile expected to be long (`expect_long`, or LONG_COMPILE_BYTES of text) is
        logged (warning level) before it starts and with its duration when it ends."""
        code = hlo.without_source_lines(text)
        key = hashlib.sha256(code.encode()).hexdigest()
        opts_key = options.SerializeAsString() if options is not None else b""
        cache_key = (key, opts_key, tuple(d.id for d in devices) if devices else None)
        with self._programs_lock:
            program = self._programs.get(cache_key)
            if program is not None:
                self._hold(cache_key, program)
                return program, False
        device_tuple = tuple(devices or [self.default_device])
        devs = xc.DeviceList(device_tuple)
        options = options or self._options()
        disk = persistent_cache.active()
        exe = None
        if disk is not None:
            disk_key = persistent_cache.key(code, _options_bytes(options), self.client.platform,
                                            self.client.platform_version, _describe(device_tuple))
            exe = _load(self.client, disk, disk_key, devs, stats)
        compiled_now = exe is None
        if compiled_now:
            exe, seconds = self._compile(text, devs, options, expect_long)
            if disk is not None and seconds >= disk.min_compile_seconds:
                _store(disk, disk_key, exe)
        program = Program(exe, cache_key)
        with self._programs_lock:
            self._programs[cache_key] = program
            self._hold(cache_key, program)
        return program, compiled_now

    def _hold(self, cache_key, program):
        """Keep `program` alive as one of the RECENT_PROGRAMS last used, after the jitted
        functions using it are gone: code that builds a fresh function per fit
        (`value_and_grad(nll)` inside a library's `fit()`) traces it again, and the same
        program text then finds its executable here instead of in XLA (a refit's first call:
        316 ms -> 2.8 ms, measured). The caller holds the lock."""
        self._recent[cache_key] = program
        self._recent.move_to_end(cache_key)
        while len(self._recent) > RECENT_PROGRAMS:
            self._recent.popitem(last=False)

    def release_recent(self):
        """Stop holding every program kept only as one of the recent ones, and the spare
        buffers (to free memory; programs a jitted function's cache holds stay)."""
        with self._programs_lock:
            self._recent.clear()
        self.release_spare()

    def forget(self, programs):
        """Stop holding `programs` (a jitted function's cache was cleared: what only it used is
        freed now, not when RECENT_PROGRAMS later ones have pushed it out)."""
        with self._programs_lock:
            for program in programs:
                self._recent.pop(program.key, None)

    def _compile(self, text, devs, options, expect_long):
        """XLA compiles; returns (loaded executable, seconds)."""
        announce = expect_long or len(text) >= LONG_COMPILE_BYTES
        if announce:
            name = _module_name(text)
            log.warning("XLA is compiling %s (%.1f MiB of StableHLO): a program this large can take minutes",
                        name, len(text) / 2**20)
        check_maps()
        t0 = time.perf_counter()
        try:
            exe = self.client.compile_and_load(text, devs, options)
        except xc.XlaRuntimeError as e:
            raise CompileError(f"XLA could not compile the program: {e}") from None
        seconds = time.perf_counter() - t0
        if announce:
            log.warning("XLA compiled %s in %.1f s", name, seconds)
        return exe, seconds


def _chosen(flag):
    """Whether XLA_FLAGS sets the DebugOptions field `flag` (which an override would undo)."""
    return flag in os.environ.get("XLA_FLAGS", "")


def _without(options, overrides):
    """CompileOptions as `options` less `overrides`, or None where those are not all in them."""
    kept = list(options.env_option_overrides)
    if not all(o in kept for o in overrides):
        return None
    options = xc.CompileOptions.ParseFromString(options.SerializeAsString())  # its other fields kept
    options.env_option_overrides = [o for o in kept if o not in overrides]
    return options


def _options_bytes(options):
    """CompileOptions' bytes for the persistent key, with the DebugOptions fields that only
    dump or fake devices reset (XLA_FLAGS are parsed into DebugOptions, so a dump flag alone
    would change the bytes; jax's cache key resets the same fields)."""
    copy = xc.CompileOptions.ParseFromString(options.SerializeAsString())
    debug = copy.executable_build_options.debug_options
    for name in dir(debug):
        if ("--" + name).startswith(persistent_cache.NEUTRAL_FLAGS):
            setattr(debug, name, type(getattr(debug, name))())
    return copy.SerializeAsString()


def _describe(devices):
    """What the persistent key records of the devices: platform and kind of each, and the
    topology's fingerprint where the client offers one."""
    try:
        topology = xc.get_topology_for_devices(list(devices)).fingerprint()
    except Exception:  # not every PJRT client describes its topology
        topology = None
    return tuple((d.platform, d.device_kind) for d in devices) + (("topology", topology),)


def _load(client, disk, disk_key, devs, stats):
    """The executable stored under `disk_key` (only after it was authenticated), or None."""
    t0 = time.perf_counter()
    blob = disk.load(disk_key)
    if blob is None:
        return None
    check_maps()
    try:
        exe = client.deserialize_executable(blob, devs, None)
    except xc.XlaRuntimeError as e:
        disk.discard(disk_key, f"XLA would not load it ({e})")
        return None
    if stats is not None:
        stats.persistent_hits += 1
        stats.persistent_load_seconds += time.perf_counter() - t0
    return exe


def _store(disk, disk_key, exe):
    """Serialize and store; a failure (a full disk, an executable XLA cannot serialize) only
    costs the next process a compile, so it is logged, not raised."""
    try:
        disk.store(disk_key, exe.serialize())
    except (OSError, xc.XlaRuntimeError) as e:
        log.warning("autograd_xla could not store the compiled program in %s: %s", disk.directory, e)


def _module_name(text):
    found = re.match(r"\s*module @([\w.$-]+)", text)
    return found.group(1) if found else "a program"


class Program:
    """A loaded executable; cached by program text (see Backend.compile), weakly and among the
    RECENT_PROGRAMS last used."""

    __slots__ = ("exe", "key", "__weakref__")

    def __init__(self, exe, key=None):
        self.exe, self.key = exe, key


#: The keys of Executable.cost_analysis (and jit_ps(f).cost_analysis(...)), with XLA's names:
#: "flops" floating-point operations (a matrix product of (m, k) by (k, n) counts 2*m*n*k,
#: an elementwise add one per element), "transcendentals" elementwise exp, log, tanh, ...
#: evaluations, "bytes accessed" bytes read and written by the operations (their operands
#: and results, as XLA's cost model counts them). All are floats; where XLA estimates it
#: (GPU), "optimal seconds" is added.
COST_KEYS = {"flops": "flops", "transcendentals": "transcendentals", "bytes accessed": "bytes accessed"}


class Executable:
    """One compiled signature, with everything the call path needs prepared up front.

    `fresh`: a Program of the same signature that writes every result afresh (lowering's
    Lowered.fresh_text, where a recycled result is of FRESH_RESULT_BYTES or more), run by a
    call that finds no dead result to reuse for one of them, and by every call while
    `program` is None: its compile is begun (`start_compile`, set by its maker, which hands
    the program to `adopt`) once the first such call has returned, so that it does not share
    the cores with that call."""

    __slots__ = ("backend", "program", "exe", "in_avals", "consts", "const_arrays", "handlers", "out_avals",
                 "_put_args", "converters", "text", "stats", "_placements", "sources", "recycled", "views", "tails",
                 "_offsets", "fresh", "start_compile", "host_dtypes", "fetched")

    def __init__(self, backend, program, in_avals, out_avals, consts, text, stats=None, sources=None, recycled=(),
                 views=(), tails=(), share=None, fresh=None, host_dtypes=None):
        self.backend, self.program, self.text = backend, program, text
        self.exe = program.exe if program is not None else None
        self.fresh, self.start_compile = fresh, None
        self.in_avals = [Aval(s, d) for s, d in in_avals]
        # what each parameter is made of: an argument index, or a list of them packed together
        self.sources = list(range(len(in_avals))) if sources is None else sources
        self.out_avals = [Aval(s, d) for s, d in out_avals]
        # lifted constants on the device, those `share` (another program of the graph) has put reused:
        # a dataset the function closes over is not copied again for a signature's later program
        shared = dict(zip(map(id, share.const_arrays), share.consts)) if share is not None else {}
        self.const_arrays = list(consts)
        self.consts = [shared[id(c)] if id(c) in shared else backend.put(c) for c in consts]
        # parameters that are views and views' last elements, results written into buffers
        # passed in (lowering.Lowered)
        self.recycled, self.views, self.tails = list(recycled), list(views), list(tails)
        self._offsets = {}  # the views' offsets (a tuple) -> their device buffer, put once (8 µs a put)
        sharding = backend.sharding()
        self.handlers = [clients.result_handler(a, sharding) for a in self.out_avals]
        self._put_args = (sharding, [backend.default_device])
        self._placements = [PUT_VIEW if k in self.views else PUT_TAIL if k in self.tails
                            else _placement(a, backend.platform) for k, a in enumerate(self.in_avals)]
        # each result's dtype on the host where it is not the buffer's (a 64-bit one computed in 32 bits)
        self.host_dtypes = [None if h is None or np.dtype(h) == a.dtype else np.dtype(h)
                            for a, h in zip(self.out_avals, host_dtypes or [None] * len(self.out_avals))]
        self.converters = [converter(a, backend.platform, backend if k in self.recycled else None, h)
                            for k, (a, h) in enumerate(zip(self.out_avals, self.host_dtypes))]
        self.stats = stats if stats is not None else TransferStats()
        self.fetched = fetched(self.out_avals, backend.platform)

    @classmethod
    def from_lowered(cls, backend, program, lowered, stats=None, share=None, fresh=None, widen=False):
        """The executable of `program`, compiled from a lowering.Lowered (`share`, `fresh`:
        __init__'s); `widen`: its results are handed out in numpy's dtypes (the graph's), also
        where the program computed them in 32 bits."""
        return cls(backend, program, lowered.in_avals, lowered.out_avals, lowered.consts, lowered.text, stats,
                   lowered.sources, lowered.recycled, lowered.views, lowered.tails, share, fresh,
                   lowered.host_dtypes if widen else None)

    def adopt(self, program):
        """Take `program` (compiled from `text`) into use: the calls that find the dead results
        they need run it from now on."""
        self.program = program
        self.exe = program.exe

    def programs(self):
        """The compiled programs this executable holds."""
        return [p for p in (self.program, self.fresh) if p is not None]

    def __call__(self, leaves, keep_on_device=False):
        sharding, devices = self._put_args
        put, copy = xc.batched_device_put, host_semantics()
        buffers, staged, offsets = list(self.consts), [], []  # lifted constants first (lowering.Lowered)
        converted = []  # arrays made here that a buffer reads in place: alive until the call returns
        moved = 0
        for aval, source, placement in zip(self.in_avals, self.sources, self._placements):
            if type(source) is list:  # small arguments, sent as one buffer
                x = np.concatenate([np.ravel(leaves[i]) for i in source], dtype=aval.dtype)
                buffers.append(put(aval, sharding, [x], devices, enable_x64=True, host_buffer_semantics=copy))
                moved += len(source)
                continue
            x = leaves[source]
            if placement == PUT_TAIL:  # a view's last elements
                tail = np.asarray(x, dtype=aval.dtype).flat[-aval.size:]
                buffers.append(put(aval, sharding, [tail], devices, enable_x64=True, host_buffer_semantics=copy))
                continue
            t = type(x)
            if t is DeviceArray and x.backend is self.backend and x.aval.dtype == aval.dtype and placement != PUT_VIEW:
                buffers.append(x.buffer)
                continue
            if t is not np.ndarray or x.dtype != aval.dtype:
                x = np.asarray(x, dtype=aval.dtype)
                converted.append(x)  # (x64=False's float32 copy: freed, its memory would be the next one's)
            buffer, offset = self.backend.alias(x, aval, placement == PUT_VIEW) if placement else (None, 0)
            if buffer is None and placement:  # copied into reused aligned memory, read there
                buffer = self.backend.alias(self._stage(x, aval, staged), aval, False)[0]
            elif buffer is None:  # a small one: copied by PJRT, inline
                buffer = put(aval, sharding, [x], devices, enable_x64=True, host_buffer_semantics=copy)
            if placement == PUT_VIEW:
                offsets.append(offset)
            buffers.append(buffer)
            moved += 1
        stats = self.stats
        stats.host_to_device += moved
        exe = self.exe
        fresh = self.fresh is not None and (exe is None or not all(
            self.backend.has_spare(self.out_avals[k].shape, self.out_avals[k].dtype) for k in self.recycled))
        try:
            if offsets:
                buffers.append(self._offsets_buffer(tuple(offsets)))
            if fresh:
                exe = self.fresh.exe
            else:
                for k in self.recycled:
                    buffers.append(self.backend.take(self.out_avals[k]))
            outs = exe.execute_sharded(buffers).consume_with_handlers(self.handlers)
        except xc.XlaRuntimeError as e:
            raise runtime_error(e) from None
        finally:
            for copy, aval in staged:  # read by now: the CPU client is synchronous
                self.backend.unstage(copy, aval)
        if fresh and self.start_compile is not None:  # (only a fresh call writes: not on every call's path)
            start, self.start_compile = self.start_compile, None
            start()
        if keep_on_device:
            return [DeviceArray(o, a, self.backend, h) for o, a, h in zip(outs, self.out_avals, self.host_dtypes)]
        stats.device_to_host += len(outs)
        start_host_copies(outs, self.fetched)
        return [convert(o) for convert, o in zip(self.converters, outs)]

    def keepers(self):
        """Per result, what makes a DeviceArray of its output array (a kept call's through C++,
        dispatch._finisher)."""
        return [_keeper(a, self.backend, h) for a, h in zip(self.out_avals, self.host_dtypes)]

    def _offsets_buffer(self, offsets):
        """The device buffer of the views' offsets: one per combination met (at most 8 per
        view; OFFSET_BUFFERS kept), never donated nor written, so calls share it."""
        buffer = self._offsets.get(offsets)
        if buffer is None:
            if len(self._offsets) >= OFFSET_BUFFERS:
                self._offsets.clear()
            buffer = self._offsets[offsets] = self.backend.put(np.array(offsets, np.int32))
        return buffer

    def _stage(self, x, aval, staged):
        """`x` copied into reused aligned memory of type `aval` (a view's is `x` and its pad)."""
        copy = self.backend.staging(aval)
        np.copyto(copy.reshape(-1)[:x.size].reshape(np.shape(x)), x)
        staged.append((copy, aval))
        return copy

    def memory_analysis(self):
        """Bytes of XLA's buffer assignment for this executable (arguments, outputs, temporaries,
        inputs aliased by outputs, generated code); NotImplementedError where the platform's
        PJRT client does not report them."""
        try:
            stats = self._running().get_compiled_memory_stats()
        except (AttributeError, xc.XlaRuntimeError) as e:
            raise NotImplementedError(f"the {self.backend.platform} client reports no memory statistics: {e}") from None
        return {name: getattr(stats, name) for name in dir(stats) if name.endswith("_in_bytes")}

    def _running(self):
        """The loaded executable calls run now (`fresh`'s while `program` is compiling)."""
        return self.exe if self.exe is not None else self.fresh.exe

    def optimized_hlo(self):
        return self._running().hlo_modules()[0].to_string()

    def cost_analysis(self):
        """XLA's estimate of what one call costs, summed over the program's operations (see
        COST_KEYS). XLA's per-operand entries ('bytes accessed0{}', 'utilization1{}', ...) are
        left out: they sum over operations by operand position, not over the arguments."""
        raw = self._running().cost_analysis()
        out = {key: float(raw.get(xla_key, 0.0)) for key, xla_key in COST_KEYS.items()}
        if "optimal_seconds" in raw:
            out["optimal seconds"] = float(raw["optimal_seconds"])
        return out


def is_aligned(array):
    """Whether a numpy array is C-contiguous and 64-byte aligned, as XLA reads one in place
    (numpy aligns its data to 16 bytes only)."""
    return array.flags.c_contiguous and not array.ctypes.data % 64


def aligned(array):
    """`array` if it is_aligned, else such a copy of it."""
    if is_aligned(array):
        return array
    out = aligned_empty(array.shape, array.dtype)
    out[...] = array
    return out


def aligned_empty(shape, dtype):
    """An uninitialised C-contiguous numpy array whose data is 64-byte aligned."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class OnDevice:
    """What DeviceArray and ShardedArray share: an abstract value, read from the host, and the
    jaxlib array holding it (`jaxlib_array`), waited for."""

    __slots__ = ()
    __array_priority__ = 20.0

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: len(self.aval.shape))
    size = property(lambda self: self.aval.size)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __getitem__(self, idx):
        return np.asarray(self)[idx]

    def block_until_ready(self):
        """Wait until the array is computed (jaxlib_array: the jaxlib array holding it)."""
        self.jaxlib_array.block_until_ready()
        return self


class TransferStats:
    __slots__ = ("host_to_device", "device_to_host")

    def __init__(self):
        self.host_to_device = self.device_to_host = 0


#: What XLA's CPU collectives say when a peer process has gone: gloo's TCP transport saw its
#: connection close (measured: "Gloo all-reduce failed: ... Connection closed by peer"), or the
#: coordination service reported a task's loss.
_PEER_LOST = ("Gloo", "Connection closed", "Connection reset", "Broken pipe", "UNAVAILABLE", "heartbeat")


def runtime_error(e, processes=None):
    """The Python exception for XLA's runtime error `e`; `processes`: (this process's index,
    their count) when the program spans several processes."""
    text = str(e)
    if "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text:
        return MemoryError(f"XLA ran out of memory executing a jitted function: {text}")
    if processes is not None and any(marker in text for marker in _PEER_LOST):
        return ProcessLostError(
            f"a collective across processes failed in process {processes[0]} (of {processes[1]}): another process "
            "of the distributed job has stopped or lost its connection (it died or exited, before or during this "
            "call). The job is fail-stop: the coordination service terminates the surviving processes once its "
            f"heartbeat timeout passes (distributed.initialize's heartbeat_timeout); restart the whole job. XLA said: "
            f"{text}")
    return RuntimeError(f"XLA failed executing a jitted function: {text}")


PUT_COPY, PUT_STAGED, PUT_VIEW, PUT_TAIL = 0, 1, 2, 3
#: Bytes of the pages whose mapping a view's reads beyond its array's end must stay within.
PAGE_BYTES = 4096


def _view_start(address, nbytes, aval):
    """(The 64-byte boundary at or below `address`, the data's offset from there in elements) for
    reading `aval` there (a flat array: the data of `nbytes` bytes at `address` and elements
    beyond), or (None, 0) when it cannot be: the offset not a whole number of elements, or
    the elements of `aval` beyond the data's end reaching into the next page (which may not
    be mapped). The bytes around the data that XLA then reads are never used (the program
    slices the data out) and never written."""
    itemsize = aval.dtype.itemsize
    skip = address % 64
    start = address - skip
    end = start + aval.size * itemsize
    if skip % itemsize or ((end - 1) // PAGE_BYTES != (address + nbytes - 1) // PAGE_BYTES
                           and end > address + nbytes):
        return None, 0
    return start, skip // itemsize


def _placement(aval, platform):
    """How an argument of type `aval` is put: copied by PJRT (PUT_COPY), or from
    IN_PLACE_MIN_BYTES on read in place when it is aligned, else copied into a reused aligned
    array read in place (PUT_STAGED), whose device buffer `alias` makes once. PJRT's own copy
    would fault in fresh pages from lowering.LARGE_ARRAY_BYTES on and runs on a worker thread
    from 100 KiB: `x + 1.0` on 76,800 misaligned float64 took 118-166 µs a call that way,
    72-74 staged (24-26 aligned and read in place; numpy 18-27)."""
    if platform != "cpu":
        return PUT_COPY
    nbytes = aval.size * aval.dtype.itemsize
    return PUT_STAGED if nbytes >= IN_PLACE_MIN_BYTES else PUT_COPY


def viewable(aval, platform="cpu"):
    """Whether a result of type `aval` is handed out as a numpy array viewing its buffer (on the
    CPU, of a dtype numpy's array interface describes), not as a host copy."""
    return platform == "cpu" and aval.size > 0 and aval.dtype.kind != "V" and aval.dtype.name != "bfloat16"


def fetched(out_avals, platform):
    """The results of types `out_avals` whose host copies a call begins together
    (`start_host_copies`): off the CPU, where there are several not empty; else none."""
    indices = [k for k, a in enumerate(out_avals) if not viewable(a, platform) and a.size]
    return indices if len(indices) > 1 else []


def start_host_copies(buffers, indices):
    """Begin the copies to the host of `buffers` at `indices` (jaxlib's asynchronous transfer,
    whose array `host_copy` then takes): a call's results are copied together, not each
    after the one before has arrived (jax.device_get does the same)."""
    for k in indices:
        _from_jaxlib(buffers[k]._copy_single_device_array_to_host_async)


_jax_unimported = None  # whether jax is installed and not yet imported (None: not yet asked)


def _from_jaxlib(copy):
    """`copy()`, a jaxlib method that copies a device array to the host, with numpy's global
    random state as it was before: such a copy imports jax where it is installed (each, off
    the CPU or of a bfloat16 array, until the import succeeds), and jax 0.10.2's import draws
    `numpy.random.rand(5)` (jax._src.clusters.k8s_cluster), which plain autograd never does: a
    seeded program's later draws would differ from plain autograd's (found on a TPU). Until
    jax is imported, a copy pays numpy's get_state and set_state (70 µs)."""
    global _jax_unimported
    if _jax_unimported is None:
        try:
            _jax_unimported = importlib.util.find_spec("jax") is not None
        except (ImportError, ValueError):
            _jax_unimported = False
    if not _jax_unimported or "jax" in sys.modules:
        _jax_unimported = False
        return copy()
    state = np.random.get_state()
    try:
        return copy()
    finally:
        np.random.set_state(state)


def host_copy(buf):
    """The host's numpy copy of device buffer `buf`, writable and the caller's alone. Off the CPU
    it is the array jaxlib's transfer wrote (jax's `np.asarray` of its arrays reads the same),
    taken as it is: the buffer caches it, but each buffer handed here is dropped after (a
    result) or a clone made for the call (DeviceArray). On the CPU jaxlib hands out a
    read-only view of the buffer instead, copied here. jaxlib's method imports jax where it is
    installed (_from_jaxlib). On a TPU v5e, 100 MB of float32, fresh arrays, each side in a
    process of its own (benchmarks/tpu_transfers.py): this 29.6 ms, jax's np.asarray of its
    own 36.6 ms."""
    out, copied = _from_jaxlib(buf._single_device_array_to_np_array_did_copy)
    if copied and out.flags.owndata:  # the transfer's own array, which jaxlib marks read-only
        out.flags.writeable = True
        return out
    return out if copied and out.flags.writeable else np.array(out, copy=True)


def converter(aval, platform="cpu", recycle_into=None, host_dtype=None):
    """Device buffer -> numpy array (0-d results become numpy scalars). On CPU the array views
    the result buffer in place (and keeps it alive); other platforms copy to the host.
    `recycle_into`: a Backend the buffer goes back to once the array is gone (_Recycling).
    `host_dtype`: the dtype handed out where it is not the buffer's (a 64-bit result a
    platform without float64 computed in 32 bits: numpy's dtype again, api._x64)."""
    shape, dtype = aval.shape, aval.dtype
    scalar = shape == ()
    if aval.size == 0:
        return lambda buf: np.zeros(shape, dtype if host_dtype is None else host_dtype)
    if host_dtype is not None and np.dtype(host_dtype) != dtype:
        read = converter(aval, platform, recycle_into)

        def widen(buf):
            out = np.asarray(read(buf)).astype(host_dtype)
            return out[()] if scalar else out
        return widen
    if not viewable(aval, platform):
        def copy(buf):
            out = host_copy(buf)
            return out[()] if scalar else out
        return copy
    descr = dtype.str

    def view(buf):
        if recycle_into is None:
            holder = _ArrayInterface()
        else:
            holder = _Recycling()
            holder.backend, holder.aval = recycle_into, aval
        holder.buffer = buf
        holder.__array_interface__ = {"shape": shape, "typestr": descr, "data": (address(buf), False),
                                      "version": 3}
        out = np.asarray(holder)
        return out[()] if scalar else out
    return view


class DeviceArray(OnDevice):
    """An array that stays on its device: what `jit_ps(f, keep_on_device=True)` returns.

    Passing it back into a jitted function on the same platform costs no transfer (a training
    loop's parameters can live on the GPU). `np.asarray(d)` copies it to the host; numpy
    functions and operators accept it the same way (they work on that host copy). It is
    immutable, like a jax array: `d[i] = x` raises TypeError (assign into np.asarray(d)).
    """

    __slots__ = ("buffer", "aval", "backend", "host_dtype", "__weakref__")

    def __init__(self, buffer, aval, backend, host_dtype=None):
        """`aval`: what the buffer holds; `host_dtype`: the dtype it stands for where that is
        not the buffer's (a 64-bit result computed in 32 bits: Executable.host_dtypes)."""
        self.buffer, self.aval, self.backend, self.host_dtype = buffer, aval, backend, host_dtype

    dtype = property(lambda self: self.aval.dtype if self.host_dtype is None else self.host_dtype)

    @property
    def platform(self):
        return self.backend.platform

    def to_numpy(self):
        """A fresh host copy (writable, owned by the caller): on the CPU a copy of the buffer's
        view, elsewhere the transfer's own array (host_copy) of a clone of the buffer, whose
        cache is the clone's, not shared with later copies."""
        convert = converter(self.aval, self.backend.platform, None, self.host_dtype)
        if viewable(self.aval, self.backend.platform) and self.host_dtype is None:
            out = convert(self.buffer)
            return np.array(out, copy=True) if isinstance(out, np.ndarray) else out
        return convert(self.buffer.clone())

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self.to_numpy())
        return out if dtype is None else out.astype(dtype, copy=False)

    jaxlib_array = property(lambda self: self.buffer)

    def __setitem__(self, idx, value):
        raise TypeError("a DeviceArray is immutable (its buffer lives on the device; jax arrays are the same): "
                        "instead of d[idx] = value, take a writable host copy with a = np.asarray(d) (or "
                        "d.to_numpy()) and assign into that, or compute a new array (np.where, "
                        "np.concatenate, ...)")

    def __iter__(self):
        return iter(np.asarray(self))

    def __float__(self):
        return float(np.asarray(self))

    def __int__(self):
        return int(np.asarray(self))

    def __bool__(self):
        return bool(np.asarray(self))

    def __repr__(self):
        return f"DeviceArray({np.asarray(self)!r}, platform={self.platform!r})"


def _keeper(aval, backend, host_dtype):
    def keep(buffer):
        return DeviceArray(buffer, aval, backend, host_dtype)
    return keep


def _host_operator(name):
    op = getattr(np.ndarray, name)
    return lambda self, *others: op(np.asarray(self), *others)


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__", "__rtruediv__",
              "__floordiv__", "__rfloordiv__", "__pow__", "__rpow__", "__matmul__", "__rmatmul__", "__neg__",
              "__pos__", "__abs__", "__lt__", "__le__", "__gt__", "__ge__", "__eq__", "__ne__", "__mod__", "__rmod__"):
    setattr(DeviceArray, _name, _host_operator(_name))
DeviceArray.__hash__ = object.__hash__
# DeviceArrays are differentiable like the numpy arrays they hold (device_put makes them
# without any compile, so not where the derivatives of compiled calls are: autodiff.py).
ArrayBox.register(DeviceArray)
VSpace.register(DeviceArray, lambda x: vspace(np.asarray(x)))


# ----- platforms -----------------------------------------------------------------------------
_backends = {}
_unavailable = {}  # platform -> PlatformUnavailableError raised when it was first tried
_backends_lock = threading.RLock()
_default_platform = None

#: Platforms tried, in order, when nothing is requested.
PREFERENCE = ("gpu", "tpu", "cpu")
#: Platforms whose XLA computes 64-bit floating point in hardware. A TPU's is emulated (XLA:TPU
#: compiled float64 products, exp and sums, accurate to 1e-15, on a v5e): a float64 program is
#: computed in float32 there unless x64=True, its results handed back as float64
#: (api.JittedFunction._x64).
FLOAT64_PLATFORMS = frozenset({"cpu", "gpu"})


def _make_cpu():
    client = clients.cpu_client(cpu_device_count(), _cpu_client_options)
    blas.register()
    return Backend("cpu", client)


def _make_gpu():
    client, kernels = clients.gpu_client()
    backend = Backend("gpu", client)
    backend.kernels = kernels
    return backend


_cpu_devices = None  # set_cpu_device_count's choice
_cpu_client_options = {}  # set_cpu_client_options's: the distributed runtime of several processes


def cpu_device_count():
    """How many CPU devices the CPU client has (or will have): set_cpu_device_count's choice,
    else $AUTOGRAD_XLA_CPU_DEVICES, else 1."""
    if _cpu_devices is not None:
        return _cpu_devices
    text = os.environ.get("AUTOGRAD_XLA_CPU_DEVICES", "1")
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"AUTOGRAD_XLA_CPU_DEVICES must be a positive integer, got {text!r}")
    return n


def set_cpu_device_count(n):
    """Give the CPU client `n` devices (for pmap), before it starts: the first compile or
    transfer on the CPU starts it, and its device count is fixed from then on."""
    global _cpu_devices
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
        raise ValueError(f"set_cpu_device_count needs a positive integer, got {n!r}")
    with _backends_lock:
        running = _backends.get("cpu")
        if running is not None and len(running.devices) != n:
            raise RuntimeError(f"the CPU client has already started with {len(running.devices)} device(s); call "
                               f"set_cpu_device_count({n}) before the first jitted call, or set "
                               f"AUTOGRAD_XLA_CPU_DEVICES={n} before the program starts")
        _cpu_devices = int(n)


def set_cpu_client_options(device_count=None, **options):
    """Create the CPU client with these further options of jaxlib's make_cpu_client
    (distributed.initialize passes `distributed_client`, `node_id`, `num_nodes` and
    `collectives`), and `device_count` devices in this process; before it starts (a client's
    processes and devices are fixed when it is made)."""
    global _cpu_client_options
    with _backends_lock:
        if "cpu" in _backends:
            raise RuntimeError("the CPU client has already started (the first jitted call, transfer or devices() "
                               "starts it): call autograd_xla.distributed.initialize before anything else runs "
                               "on the CPU")
        if device_count is not None:
            set_cpu_device_count(device_count)
        _cpu_client_options = dict(options)


_FACTORIES = {"cpu": _make_cpu, "gpu": _make_gpu, "tpu": lambda: Backend("tpu", clients.tpu_client())}


def get_backend(platform=None):
    """The backend of `platform` ('cpu', 'gpu', 'tpu'; None: the default platform)."""
    platform = canonical_platform(platform) if platform else default_platform()
    backend = _backends.get(platform)
    if backend is not None:
        return backend
    with _backends_lock:
        backend = _backends.get(platform)
        if backend is None:
            if platform in _unavailable:
                raise _unavailable[platform]
            try:
                backend = _backends[platform] = _FACTORIES[platform]()
            except PlatformUnavailableError as e:
                _unavailable[platform] = e
                raise
    return backend


def is_available(platform):
    try:
        get_backend(platform)
        return True
    except PlatformUnavailableError:
        return False


def default_platform():
    """set_default_platform's choice, else $AUTOGRAD_XLA_PLATFORM, else the best available."""
    global _default_platform
    if _default_platform is not None:
        return _default_platform
    requested = os.environ.get(clients.PLATFORM_ENV)
    if requested:
        return canonical_platform(requested)
    with _backends_lock:
        if _default_platform is None:
            _default_platform = next(p for p in PREFERENCE if p == "cpu" or clients.plugin_present(p) and is_available(p))
    return _default_platform


def set_default_platform(platform):
    """Use `platform` for jitted functions that do not name one (None: choose automatically
    again). A platform that cannot start raises PlatformUnavailableError here."""
    global _default_platform
    if platform is None:
        _default_platform = None
        return
    platform = canonical_platform(platform)
    get_backend(platform)
    _default_platform = platform


def devices(platform=None):
    """Devices of `platform`, or of every platform that can start here."""
    if platform is not None:
        return list(get_backend(platform).devices)
    found = []
    for p in PREFERENCE:
        if clients.plugin_present(p) and is_available(p):
            found.extend(get_backend(p).devices)
    return found


def supported_dtype(dtype):
    return hlo.supported(np.dtype(dtype))
