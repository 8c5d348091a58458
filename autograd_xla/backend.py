"""The XLA backend: jaxlib clients, devices, compilation, transfers and execution.

This is the only module that touches jaxlib's runtime. It uses the fast path measured
in shared/notes/jaxlib-runtime.md: `batched_device_put` in, `execute_sharded` +
`consume_with_handlers`, and numpy arrays out that are views of the result buffers
(no copy, writable, kept alive by the array). It never imports jax; the private jaxlib
surfaces it relies on are checked once, at client creation, with a clear error.

Clients are created on demand per platform, so an accelerator client can sit beside
the CPU one without the tracer or lowering knowing.
"""
import hashlib
import os
import threading
import warnings
import weakref

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # jaxlib's INFO lines; must precede its import

from jaxlib import xla_client as xc  # noqa: E402

from . import hlo  # noqa: E402
from .core import Aval  # noqa: E402
from .errors import CompileError  # noqa: E402

JAXLIB_API_VERSION = 467  # xla_client._version of the jaxlib we are pinned to

_HOST_SEMANTICS = xc.HostBufferSemantics.IMMUTABLE_ONLY_DURING_CALL
_IN_PLACE = xc.HostBufferSemantics.ZERO_COPY
#: Large, 64-byte aligned, C-contiguous arguments of a synchronous CPU execution are read in
#: place instead of copied (4 MB: ~15 µs instead of ~450 µs): the executable runs to
#: completion before the call returns and never returns a parameter's buffer (XLA copies
#: returned parameters), so nothing can observe the sharing. Misaligned data must not be
#: passed this way: PJRT then copies it on a worker thread, and the synchronous client was
#: seen to start executing before that copy finished (wrong results).
IN_PLACE_MIN_BYTES = 1 << 16


class _Sharding(xc.SingleDeviceSharding):
    """The duck-typed sharding jaxlib's put and result handlers expect (normally jax's)."""

    memory_kind = None

    def _to_xla_hlo_sharding(self, ndim):
        return xc.HloSharding.replicate()


class _ArrayInterface:
    """Exposes a device buffer in host memory to numpy without copying; the numpy array
    keeps this object, hence the buffer, alive."""

    __slots__ = ("__array_interface__", "buffer")


class Backend:
    """One platform's client and devices, plus its compiled-program cache."""

    def __init__(self, platform, client):
        self.platform = platform
        self.client = client
        self.devices = client.devices()
        self.default_device = self.devices[0]
        self._shardings = {}
        self._programs = weakref.WeakValueDictionary()
        self._programs_lock = threading.Lock()

    def sharding(self, device=None):
        device = device or self.default_device
        s = self._shardings.get(device.id)
        if s is None:
            s = self._shardings[device.id] = _Sharding(device)
        return s

    # ----- transfers ------------------------------------------------------------------------
    def put(self, array, device=None, aval=None):
        """Copy a numpy array to the device (the copy is ours: later writes to `array` do not leak in)."""
        array = np.asarray(array)
        device = device or self.default_device
        aval = aval or Aval(array.shape, array.dtype)
        return xc.batched_device_put(aval, self.sharding(device), [array], [device], enable_x64=True,
                                     host_buffer_semantics=_HOST_SEMANTICS)

    # ----- compilation ----------------------------------------------------------------------
    def compile(self, text, options=None, devices=None):
        """Compile StableHLO text. Identical programs share one executable while anything
        uses it: the cache holds weak references, so an executable is freed together with
        the last jitted function (cache entry) using it. Returns (Program, compiled_now)."""
        key = hashlib.sha256(text.encode()).hexdigest()
        opts_key = options.SerializeAsString() if options is not None else b""
        cache_key = (key, opts_key, tuple(d.id for d in devices) if devices else None)
        with self._programs_lock:
            program = self._programs.get(cache_key)
            if program is not None:
                return program, False
        devs = xc.DeviceList(tuple(devices or [self.default_device]))
        try:
            exe = self.client.compile_and_load(text, devs, options or xc.CompileOptions())
        except xc.XlaRuntimeError as e:
            raise CompileError(f"XLA could not compile the program: {e}") from None
        program = Program(exe)
        with self._programs_lock:
            self._programs[cache_key] = program
        return program, True


class Program:
    """A loaded executable; weakly cached by program text (see Backend.compile)."""

    __slots__ = ("exe", "__weakref__")

    def __init__(self, exe):
        self.exe = exe


class Executable:
    """One compiled signature, with everything the call path needs prepared up front."""

    __slots__ = ("backend", "program", "exe", "in_avals", "consts", "handlers", "out_avals", "_put_args",
                 "_converters", "text", "transfers")

    def __init__(self, backend, program, in_avals, out_avals, consts, text):
        self.backend, self.program, self.exe, self.text = backend, program, program.exe, text
        self.in_avals = [Aval(a.shape, a.dtype) for a in in_avals]
        self.out_avals = [Aval(s, d) for s, d in out_avals]
        self.consts = [backend.put(c) for c in consts]
        sharding = backend.sharding()
        self.handlers = [xc.array_result_handler(a, sharding, True, _skip_checks=True) for a in self.out_avals]
        device = backend.default_device
        self._put_args = (sharding, [device], backend.platform == "cpu")
        self._converters = [_converter(a) for a in self.out_avals]
        self.transfers = 0

    def __call__(self, leaves):
        sharding, devices, in_place_ok = self._put_args
        put = xc.batched_device_put
        buffers = []
        for aval, x in zip(self.in_avals, leaves):
            semantics = _HOST_SEMANTICS
            if type(x) is not np.ndarray:
                x = np.asarray(x, dtype=aval.dtype)
            elif in_place_ok and x.nbytes >= IN_PLACE_MIN_BYTES and x.flags.c_contiguous and not x.ctypes.data % 64:
                semantics = _IN_PLACE
            buffers.append(put(aval, sharding, [x], devices, enable_x64=True, host_buffer_semantics=semantics))
        if self.consts:
            buffers.extend(self.consts)
        try:
            outs = self.exe.execute_sharded(buffers).consume_with_handlers(self.handlers)
        except xc.XlaRuntimeError as e:
            raise _runtime_error(e) from None
        return [convert(o) for convert, o in zip(self._converters, outs)]

    def optimized_hlo(self):
        return self.exe.hlo_modules()[0].to_string()

    def cost_analysis(self):
        return self.exe.cost_analysis()


def _runtime_error(e):
    text = str(e)
    if "RESOURCE_EXHAUSTED" in text or "Out of memory" in text or "out of memory" in text:
        return MemoryError(f"XLA ran out of memory executing a jitted function: {text}")
    return RuntimeError(f"XLA failed executing a jitted function: {text}")


def _converter(aval):
    """Device buffer -> numpy array viewing it (0-d results become numpy scalars)."""
    shape, dtype = aval.shape, aval.dtype
    if aval.size == 0:
        return lambda buf: np.zeros(shape, dtype)
    if dtype.kind == "V" or dtype.name == "bfloat16":
        return lambda buf: np.array(buf._single_device_array_to_np_array_did_copy()[0], copy=True)
    descr = dtype.str
    scalar = shape == ()

    def convert(buf):
        view = _ArrayInterface()
        view.buffer = buf
        view.__array_interface__ = {"shape": shape, "typestr": descr, "data": (buf.unsafe_buffer_pointer(), False),
                                    "version": 3}
        out = np.asarray(view)
        return out[()] if scalar else out
    return convert


# ----- platforms -----------------------------------------------------------------------------
_backends = {}
_backends_lock = threading.Lock()


def _check_jaxlib():
    version = getattr(xc, "_version", None)
    if version != JAXLIB_API_VERSION:
        warnings.warn(f"autograd_xla was built against jaxlib's runtime API version {JAXLIB_API_VERSION}, "
                      f"the installed jaxlib reports {version}; install the pinned jaxlib version")


def _register_lapack():
    """jaxlib's LAPACK kernels (lapack_*_ffi custom calls) for CPU linear algebra.
    `_lapack.initialize()` binds scipy's LAPACK symbols; calling a kernel without it crashes."""
    from jaxlib import lapack

    lapack._lapack.initialize()
    for platform, targets in lapack.registrations().items():
        for name, capsule, api_version in targets:
            xc.register_custom_call_target(name, capsule, platform=platform, api_version=api_version)


def _make_cpu():
    """The CPU client is synchronous: execution runs on the calling thread, which measured
    faster per call than the asynchronous client for the small programs autograd code makes
    (shared/notes/jaxlib-runtime.md section 10)."""
    _check_jaxlib()
    client = xc.make_cpu_client(asynchronous=False)
    _register_lapack()
    return Backend("cpu", client)


_FACTORIES = {"cpu": _make_cpu}


def get_backend(platform=None):
    platform = platform or "cpu"
    backend = _backends.get(platform)
    if backend is None:
        with _backends_lock:
            backend = _backends.get(platform)
            if backend is None:
                factory = _FACTORIES.get(platform)
                if factory is None:
                    raise ValueError(f"unknown platform {platform!r}; known: {sorted(_FACTORIES)}")
                backend = _backends[platform] = factory()
    return backend


def supported_dtype(dtype):
    return np.dtype(dtype) in hlo.SUPPORTED_DTYPES
