"""The public entry point: `jit_ps`, a per-signature cache of compiled executables.

A call is classified by its monomorphic signature: the container structure of the
arguments, each array leaf's shape and dtype (Python scalars are weakly typed, numpy
scalars are not), and the values of static arguments. The first call with a signature
traces the function (tracing.py), lowers the graph (lowering.py), compiles it
(backend.py) and caches the executable; later calls only flatten the arguments, look up
the cache and execute. Calls that carry autograd boxes go through one autograd primitive
(autodiff.py), so `grad(jit_ps(f))` differentiates the compiled function.
"""
import collections
import contextlib
import functools
import hashlib
import inspect
import re
import sys
import threading
import time
import warnings

import numpy as np
from autograd.extend import VSpace
from autograd.tracer import box_types, getval

from . import autodiff
from . import backend as backend_mod
from . import compositions, impurity, lowering, rules, tracing, tree  # noqa: F401 (importing registers rules)
from .backend import DeviceArray
from .core import Aval, Graph, prim_name
from .errors import (ArgumentError, CompileError, ConcretizationError, FallbackWarning, ImpureFunctionError, JitError,
                     PlatformUnavailableError, ProgramTooLargeError, UnsupportedPrimitiveError, library_file, annotate)
from .hlo import SUPPORTED_DTYPES as _SUPPORTED

_trace_state = tracing.state
_FLAT_SPECS = {}

# Python numbers traced as weakly typed scalars; a bool is static (it is a flag: keepdims=True)
_PY_SCALARS = {int: np.dtype(np.int64), float: np.dtype(np.float64), complex: np.dtype(np.complex128)}

#: Default bound on the number of compiled signatures one jitted function keeps.
DEFAULT_CACHE_SIZE = 64
#: A function traced for this many signatures (and every multiple) warns, saying what
#: changed between the last two: each new signature costs a trace and usually a compile.
RETRACE_WARN_AFTER = 8
#: A traced program with more primitive calls than this warns before it compiles: XLA's
#: compile time and memory grow with program size (measured here: an unrolled RNN's
#: gradient, 10,000 calls, compiles in 130 s; autograd's hmm_em example, ~50,000, ran out of
#: 22 GiB), and the usual cause is a Python loop unrolled at trace time.
LARGE_PROGRAM_WARN_AFTER = 10000
#: A float argument whose value a trace needs (`x[x > 0]`, `if t > 0.5`) is traced as a static
#: value, unless it has had more than this many values: then it is a parameter, not data.
STATIC_FLOAT_VALUES = 4
#: Programs above either bound run as plain autograd instead (jit_ps's `max_program`):
#: primitive calls, and bytes of StableHLO text (a rule that inlines loops emits much per call).
MAX_PROGRAM = (40000, 32 << 20)


class CacheStats:
    """Per-function counters. `traces` counts signatures traced; `compiles` counts XLA
    compilations (a trace whose program text matches one already compiled reuses it);
    `host_to_device` / `device_to_host` count arrays moved by calls."""

    __slots__ = ("hits", "traces", "compiles", "trace_seconds", "lower_seconds", "compile_seconds", "fallbacks",
                 "evictions", "host_to_device", "device_to_host")

    def __init__(self):
        self.hits = self.traces = self.compiles = self.fallbacks = self.evictions = 0
        self.host_to_device = self.device_to_host = 0
        self.trace_seconds = self.lower_seconds = self.compile_seconds = 0.0

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}

    def __repr__(self):
        return "CacheStats(" + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in self.as_dict().items()) + ")"


class _Entry:
    __slots__ = ("executable", "out_tree", "graph", "lowered", "fallback_cause", "guards", "draws", "static_leaves",
                 "impure")

    def __init__(self, executable, out_tree, graph, lowered, draws=(), static_leaves=(), impure=False):
        self.executable, self.out_tree, self.graph, self.lowered = executable, out_tree, graph, lowered
        self.fallback_cause = None                  # see _fallback_entry
        self.guards = graph.guards if graph is not None else []
        self.draws = list(draws)                    # numpy.random calls replayed on every call (impurity.py)
        self.static_leaves = frozenset(static_leaves)  # leaf indices traced as static values
        self.impure = impure or bool(self.draws)    # differentiated calls run as plain autograd

    @property
    def python_fallback(self):
        return self.executable is None


def _fallback_entry(cause, impure=False):
    """A signature that runs as plain autograd; `cause` (the exception that stopped compiling
    it) is reported once the plain run has succeeded, and then cleared."""
    entry = _Entry(None, None, None, None, impure=impure)
    entry.fallback_cause = cause
    return entry


# ndarray subclasses whose semantics a compiled program would silently drop
_REJECTED_SUBCLASSES = (np.matrix, np.ma.MaskedArray)


class _Plain(Exception):
    """An argument that compiled code cannot take, although plain autograd can (a masked array,
    an int beyond int64, an autograd vector space of a type jit_ps cannot flatten)."""


def _native(dtype):
    """A non-native byte order is numpy's business, not XLA's: compile for the native dtype
    (the argument is converted on the way in)."""
    if dtype.byteorder not in "=|" and dtype.newbyteorder("=") in _SUPPORTED:
        return dtype.newbyteorder("=")
    return None


def _leaf_signature(x):
    """What the cache key holds of one argument leaf: (shape, dtype) for an array, the type for
    a Python number (traced weakly typed), else the leaf itself as a `Static` value."""
    t = type(x)
    if t is np.ndarray:
        if x.dtype not in _SUPPORTED:
            native = _native(x.dtype)
            return (x.shape, native) if native is not None else Static(x)
        return (x.shape, x.dtype)
    if t in _PY_SCALARS:
        if t is int and not -2**63 <= x < 2**63:
            raise _Plain(f"the Python int {x} does not fit in int64")
        return t
    if t is DeviceArray:
        return (x.shape, x.dtype)
    if isinstance(x, (np.generic, np.ndarray)):
        if isinstance(x, _REJECTED_SUBCLASSES):
            raise _Plain(_describe_rejected(x))
        dtype = x.dtype if x.dtype in _SUPPORTED else _native(x.dtype)
        return (x.shape, dtype) if dtype is not None else Static(x)
    if t in VSpace.mappings and t is not bool:
        raise _Plain(f"it is a {t.__name__}, a type autograd differentiates through its own vector space, which "
                     "jit_ps cannot flatten into arrays; pass its arrays (in tuples, lists or dicts) instead")
    return Static(x)


class Static:
    """An argument leaf passed into the trace by value: part of the cache key, not of the
    compiled program's parameters. Strings, None-like markers, slices, dtypes, callables and
    other objects compare by value where they are hashable and by identity where they are not
    (like a closed-over array, a later mutation is not seen); arrays (boolean masks, index
    arrays that decide a shape) by a digest of their bytes, computed on every call."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        self.key = _static_key(value)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        if type(other) is not Static:
            return False
        try:
            return bool(self.key == other.key)
        except Exception:  # an object whose == is not a truth value
            return False

    def __repr__(self):
        return f"Static({_short(self.value)})"


def _static_key(x):
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind != "O":
        data = np.ascontiguousarray(x).reshape(-1).view(np.uint8)  # any dtype's bytes (datetimes too)
        digest = hashlib.sha1(data, usedforsecurity=False).digest()
        return ("array", type(x), x.shape, x.dtype.str, digest)
    if type(x) in (float, complex):
        return (type(x), repr(x))  # -0.0 and nan are values of their own
    try:
        hash(x)
    except TypeError:
        return ("identity", id(x))
    return (type(x), x)


def _aval_of(x):
    t = type(x)
    if t in _PY_SCALARS:
        return Aval((), _PY_SCALARS[t], weak_type=True)
    shape, dtype = _leaf_signature(x)
    return Aval(shape, dtype)


class JittedFunction:
    """A function compiled per signature. Call it like the original."""

    def __init__(self, fun, static_argnums=(), static_argnames=(), fallback="python", backend=None,
                 cache_size=DEFAULT_CACHE_SIZE, keep_on_device=False, x64=None, max_program=MAX_PROGRAM):
        if fallback not in ("python", "error"):
            raise ValueError("fallback must be 'python' or 'error'")
        if backend is not None:
            backend_mod.canonical_platform(backend)  # an unknown name fails now, an absent one on first call
        functools.update_wrapper(self, fun)
        self._fun = fun
        self._static_argnums = tuple(sorted({int(i) for i in ((static_argnums,) if isinstance(static_argnums, int)
                                                               else static_argnums)}))
        self._static_argnames = tuple((static_argnames,) if isinstance(static_argnames, str) else static_argnames)
        try:
            self._signature = inspect.signature(fun)
        except (TypeError, ValueError):
            self._signature = None
        self._resolve_static_names()
        self.fallback = fallback
        self.backend = backend
        self.keep_on_device = keep_on_device
        self.x64 = x64
        self.max_program = tuple(max_program)
        self._platform = None  # resolved on first compile: later default changes do not move us
        self.cache_size = cache_size
        self._cache = collections.OrderedDict()
        self._simple = {}  # (shape, dtype) per positional array -> entry needing no per-call work
        self._lock = threading.RLock()
        self._auto_static = {}  # spec -> frozenset of leaf indices made static
        self._static_seen = {}  # (spec, leaf index) -> keys of the values a float leaf was static with
        self._parameters = set()  # (spec, leaf index) of float leaves with too many values to be static
        self._derivatives = {}
        self._warned = set()
        self._last_key = None
        self.stats = CacheStats()

    def _resolve_static_names(self):
        """static_argnames may name positional parameters and vice versa, as in jax."""
        if self._signature is None:
            return
        params = list(self._signature.parameters.values())
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        nums, names = set(self._static_argnums), set(self._static_argnames)
        for n in list(names):
            if n in positional:
                nums.add(positional.index(n))
        for i in list(nums):
            if i < len(positional):
                names.add(positional[i])
        self._static_argnums, self._static_argnames = tuple(sorted(nums)), tuple(sorted(names))

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __repr__(self):
        name = getattr(self._fun, "__name__", None)
        qualname = getattr(self._fun, "__qualname__", name)
        if name and qualname and qualname.rpartition(".")[2] != name:
            qualname = name  # a wrapper that renamed itself: autograd's grad_of_loss_wrt_argnum_0
        return f"<jit_ps {qualname or self._fun}>"

    # ----- the call path --------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if _trace_state.traces:  # inside another trace: inline, the outer function compiles us
            return self._fun(*args, **kwargs)
        if not kwargs and self._simple:  # the hot path: positional arrays of a known signature
            hit = self._simple.get(tuple([(a.shape, a.dtype) if type(a) is np.ndarray else None for a in args]))
            if hit is not None:
                entry, key = hit
                self.stats.hits += 1
                try:
                    self._cache.move_to_end(key)  # least recently used signatures are evicted first
                except (KeyError, RuntimeError):  # evicted meanwhile by another thread
                    pass
                outs = entry.executable(args, self.keep_on_device)
                return outs[0] if entry.out_tree is tree.LEAF else tree.unflatten(entry.out_tree, outs)
        if not kwargs and not self._static_argnums and all(type(a) is np.ndarray for a in args):
            spec = _FLAT_SPECS.get(len(args))  # the common case: positional arrays only
            if spec is None:
                spec = _FLAT_SPECS[len(args)] = (tree.flatten(args)[1], False, (), ())
            return self._call_flat(spec, args)
        spec, leaves = self._split(args, kwargs)
        for x in leaves:
            if type(x) in box_types:
                entry = self._lookup(spec, [getval(x) for x in leaves], count=False)
                if entry.python_fallback:
                    return self._run_plain(entry, spec, leaves)
                if entry.impure:
                    return self._differentiate_plainly(spec, leaves)
                return autodiff.jit_call(self, spec, *leaves)
        return self._call_flat(spec, leaves)

    def _run_plain(self, entry, spec, leaves):
        """A signature that does not compile runs as plain autograd. The first time, its cause
        is reported if the plain run succeeds; if plain autograd fails too, that error is the
        user's own, raised with what tracing found out about it (the primitive, the line)."""
        cause = entry.fallback_cause
        if cause is None:
            return self._apply(spec, leaves, autodiff.BOXING)
        try:
            out = self._apply(spec, leaves, autodiff.BOXING)
        except Exception as plain_error:
            for note in getattr(cause, "__notes__", ()):
                annotate(plain_error, note)
            raise
        entry.fallback_cause = None
        self._warn_fallback(cause)
        return out

    def _differentiate_plainly(self, spec, leaves):
        """A function whose compiled form replays random draws (or draws in a way that cannot
        be compiled) is differentiated as plain autograd: the backward pass must see the very
        numbers the forward pass drew, and a separately compiled VJP would draw new ones."""
        if "impure_grad" not in self._warned:
            self._warned.add("impure_grad")
            _warn(f"{self!r} draws random numbers, so differentiating it from outside (grad(jit_ps(f))) runs it as "
                  "plain autograd, keeping the forward and backward passes on the same draws. Compile the gradient "
                  "instead: jit_ps(grad(f)).", FallbackWarning)
        return self._apply(spec, leaves)

    def _split(self, args, kwargs):
        """(spec, dynamic leaves): spec holds everything static and is hashable."""
        static_pos = static_kw = ()
        if self._static_argnums:
            static_pos = tuple((i, args[i]) for i in self._static_argnums if i < len(args))
            args = tuple(a for i, a in enumerate(args) if i not in self._static_argnums)
        if kwargs and self._static_argnames:
            static_kw = tuple(sorted((k, v) for k, v in kwargs.items() if k in self._static_argnames))
            kwargs = {k: v for k, v in kwargs.items() if k not in self._static_argnames}
        leaves, treedef = tree.flatten((args, kwargs) if kwargs else args)
        spec = (treedef, bool(kwargs), static_pos, static_kw)
        if static_pos or static_kw:
            try:
                hash(spec)
            except TypeError:
                bad = next(name for name, v in self._static_items(static_pos, static_kw) if not _hashable(v))
                raise ArgumentError(f"static argument {bad} must be hashable (it is part of the compile cache "
                                    "key); pass a tuple instead of a list, or make it a traced argument") from None
        return spec, leaves

    def _static_items(self, static_pos, static_kw):
        names = self._positional_names()
        for i, v in static_pos:
            yield (f"'{names[i]}'" if i < len(names) else f"#{i}"), v
        for k, v in static_kw:
            yield f"'{k}'", v

    def _positional_names(self):
        if self._signature is None:
            return []
        return [p.name for p in self._signature.parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]

    def _lookup(self, spec, leaves, count=True):
        """The cache entry of these arguments' signature, compiled if new."""
        auto = self._auto_static.get(spec)
        try:
            sig = tuple(map(_leaf_signature, leaves))
        except _Plain:
            return self._plain_argument(spec, leaves)
        key = (spec, sig, tuple([Static(leaves[i]) for i in sorted(auto)])) if auto else (spec, sig)
        cache = self._cache
        entry = cache.get(key)
        if entry is None:
            return self._compile(key, spec, leaves)
        if count:
            self.stats.hits += 1
        try:
            cache.move_to_end(key)  # least recently used signatures are evicted first
        except (KeyError, RuntimeError):  # evicted meanwhile by another thread
            pass
        return entry

    def _call_flat(self, spec, leaves):
        entry = self._lookup(spec, leaves)
        if entry.python_fallback:
            return self._run_plain(entry, spec, leaves)
        if (not (entry.static_leaves or entry.draws or entry.guards) and spec is _FLAT_SPECS.get(len(leaves))
                and all(type(x) is np.ndarray and x.dtype in _SUPPORTED for x in leaves)):
            sig = tuple([(x.shape, x.dtype) for x in leaves])
            self._simple[sig] = (entry, (spec, sig))
        args = leaves
        if entry.static_leaves:
            args = [x for i, x in enumerate(leaves) if i not in entry.static_leaves]
        state = None
        if entry.draws:
            if entry.guards:
                state = impurity.global_state()
            args = list(args) + impurity.replay(entry.draws)
        outs = entry.executable(args, self.keep_on_device)
        if entry.guards:
            ok = outs[-len(entry.guards):]
            if not all(ok):
                return self._guard_failed(entry, spec, leaves, ok, state)
            outs = outs[:-len(entry.guards)]
        return outs[0] if entry.out_tree is tree.LEAF else tree.unflatten(entry.out_tree, outs)

    def _guard_failed(self, entry, spec, leaves, ok, rng_state):
        """A condition the compiled program assumes (tracing.add_guard) is false for these
        data: this call runs as plain autograd (with numpy's random state as it was before)."""
        source, why = next(guard for guard, good in zip(entry.guards, ok) if not good)
        key = ("guard", str(source), why)
        if key not in self._warned:
            self._warned.add(key)
            _warn(f"{self!r}: {why} at\n{source}\nso this call ran as plain autograd.", FallbackWarning)
        self.stats.fallbacks += 1
        if rng_state is not None:
            impurity.set_global_state(rng_state)
        return self._apply(spec, leaves)

    def _apply(self, spec, leaves, boxing=None):
        """Call the user's function with the original arguments rebuilt from `leaves`
        (containers holding autograd boxes rebuilt as boxes themselves, given `boxing`: see
        `tree.unflatten`)."""
        treedef, has_kwargs, static_pos, static_kw = spec
        rebuilt = tree.unflatten(treedef, leaves, boxing, plain_levels=2 if has_kwargs else 1)
        args, kwargs = rebuilt if has_kwargs else (rebuilt, {})
        if static_pos:
            args = list(args)
            for i, v in static_pos:
                args.insert(i, v)
        if static_kw:
            kwargs = dict(kwargs, **dict(static_kw))
        return self._fun(*args, **kwargs)

    # ----- compiling a signature ------------------------------------------------------------
    def _compile(self, key, spec, leaves):
        with self._lock:
            entry = self._cache.get(key)
            if entry is not None:
                return entry
            key, entry = self._build(key, spec, leaves)
            self._cache[key] = entry
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
                self._simple.clear()  # refilled by the next calls; never holds an evicted entry
                self.stats.evictions += 1
            self._note_recompile(key)
            return entry

    def _build(self, key, spec, leaves):
        """Trace and compile. An argument whose value the trace needs (an int used as an axis,
        a boolean mask that decides a shape) becomes static and the trace is retried, the key
        then holding its value; what cannot compile becomes a plain-autograd entry (or raises,
        under fallback="error"). Returns (key, entry)."""
        while True:
            auto = self._auto_static.get(spec, frozenset())
            statics = dict(zip(sorted(auto), key[2])) if auto else {}
            varying = {i for i, value in statics.items() if self._is_parameter(spec, i, value)}
            if varying:  # a parameter, not data: trace it (and, if the trace needs it, run plainly)
                auto = self._auto_static[spec] = auto - varying
                key = (spec, key[1], tuple([Static(leaves[i]) for i in sorted(auto)])) if auto else key[:2]
            try:
                return key, self._trace_and_compile(spec, key[1], leaves, auto)
            except ConcretizationError as e:
                dynamic = [i for i, sig in enumerate(key[1]) if i not in auto and type(sig) is not Static]
                wanted = {dynamic[i] for i in e.static_candidates}
                extra = wanted - auto
                if not extra or any((spec, i) in self._parameters for i in wanted):
                    return key, self._fallback(e)
                auto = self._auto_static[spec] = auto | extra
                key = (spec, key[1], tuple([Static(leaves[i]) for i in sorted(auto)]))
                hit = self._cache.get(key)
                if hit is not None:
                    return key, hit
            except PlatformUnavailableError:  # configuration, not the program: plain autograd would not help
                raise
            except Exception as e:
                return key, self._fallback(e)

    def _is_parameter(self, spec, i, value):
        """Whether float leaf i, about to be traced as the static `value`, has now had more
        than STATIC_FLOAT_VALUES values: then it is a parameter that changes every call
        (static, it would be traced every call), never to be made static again."""
        if (spec, i) in self._parameters:
            return True
        if np.asarray(value.value).dtype.kind not in "fc":
            return False
        seen = self._static_seen.setdefault((spec, i), set())
        seen.add(value.key)
        if len(seen) > STATIC_FLOAT_VALUES:
            self._parameters.add((spec, i))
            del self._static_seen[spec, i]
            return True
        return False

    def _fallback(self, cause):
        """What happens to a signature that cannot be compiled: fallback="error" raises the
        cause (inside the handler that caught it, so its traceback is kept); else plain autograd."""
        if self.fallback == "error":
            raise
        self.stats.fallbacks += 1
        return _fallback_entry(cause, impure=isinstance(cause, ImpureFunctionError))

    def _plain_argument(self, spec, leaves):
        """An argument that compiled code cannot take (_leaf_signature raised _Plain)."""
        for name, x in zip(self._leaf_names(spec), leaves):
            try:
                _leaf_signature(x)
            except _Plain as e:
                cause = ArgumentError(f"argument {name}: {e}")
                break
        if self.fallback == "error":
            raise cause
        self.stats.fallbacks += 1
        return _fallback_entry(cause)

    def _trace_and_compile(self, spec, sig, leaves, auto):
        names = self._leaf_names(spec)
        static = set(auto) | {i for i, s in enumerate(sig) if type(s) is Static}
        dynamic = [i for i in range(len(leaves)) if i not in static]
        in_avals = [_aval_of(leaves[i]) for i in dynamic]

        def flat_fun(*tracers):
            full = list(leaves)
            for i, t in zip(dynamic, tracers):
                full[i] = t
            return self._apply(spec, full)

        t0 = time.perf_counter()
        graph, out_tree, draws = self._trace(flat_fun, in_avals, [names[i] for i in dynamic], spec, leaves)
        t1 = time.perf_counter()
        backend = self._backend()
        x64 = self._x64(backend)
        lowered = lowering.lower(graph, getattr(self._fun, "__name__", "jit_fn"), backend.platform, x64,
                                 pack=not self.keep_on_device)
        self._check_size(graph, lowered)
        t2 = time.perf_counter()
        try:
            exe, compiled = backend.compile(lowered.text)
        except CompileError as e:
            raise _explain_compile_error(self, e, graph, lowered, backend.platform, x64) from None
        executable = backend_mod.Executable(backend, exe, lowered.in_avals, lowered.out_avals, lowered.consts,
                                            lowered.text, self.stats, lowered.sources)
        t3 = time.perf_counter()
        s = self.stats
        s.traces += 1
        s.compiles += compiled
        s.trace_seconds += t1 - t0
        s.lower_seconds += t2 - t1
        s.compile_seconds += t3 - t2
        return _Entry(executable, out_tree, graph, lowered, draws=draws, static_leaves=static)

    def _trace(self, flat_fun, in_avals, names, spec, leaves):
        """Trace with numpy.random's global-state calls recorded as host draws, and with the
        random generators the function can reach watched: one that moved means draws that
        would be frozen (impurity.py). Returns (graph, out_tree, draws)."""
        treedef, _, static_pos, static_kw = spec
        watch = impurity.Watch(self._fun, [(v, f"static argument {n}") for n, v in
                                           self._static_items(static_pos, static_kw)])
        stand_ins = impurity.standing_in(watch)

        def trace(swapping):
            with impurity.recording() as draws, swapping:
                return (*tracing.trace_function(flat_fun, in_avals, names), draws)
        try:
            try:
                graph, out_tree, draws = trace(stand_ins)
            except Exception as e:
                if isinstance(e, JitError) or not stand_ins.swaps:
                    raise
                # a generator stand-in upset the code (`isinstance(rs, RandomState)`, scipy's
                # random_state=rs): trace with the real generators; draws then mean plain autograd
                watch.restore()
                graph, out_tree, draws = trace(contextlib.nullcontext())
        except ConcretizationError as e:
            watch.restore()
            if e.random_draws:
                raise impurity.concretized_draw_error(self._fun, e) from e
            raise
        except (TypeError, ValueError) as e:
            watch.restore()
            if not isinstance(e, JitError):
                self._note_suspicious_arguments(e, spec, leaves)
            raise
        except BaseException:
            watch.restore()
            raise
        moved = watch.restore()
        if moved:
            raise impurity.moved_error(self._fun, moved)
        self._warn_if_large(graph)
        return graph, out_tree, draws

    def _warn_if_large(self, graph):
        """Say so before XLA spends minutes on a huge program, and which lines made it huge."""
        n = len(graph.eqns)
        if n <= LARGE_PROGRAM_WARN_AFTER or n > self.max_program[0] or "large_program" in self._warned:
            return
        self._warned.add("large_program")
        _warn(f"{self!r} traced to a program of {n:,} primitive calls ({_busiest_lines(graph)}). XLA's compile "
              "time and memory grow with program size: minutes and gigabytes at this scale. A Python loop over "
              "traced values is unrolled at trace time; written with autograd_xla.scan or fori_loop its body is "
              "compiled once.")

    def _check_size(self, graph, lowered):
        """Programs beyond `max_program` are not given to XLA (its compile could take the machine)."""
        max_eqns, max_bytes = self.max_program
        n, size = len(graph.eqns), len(lowered.text)
        if n > max_eqns or size > max_bytes:
            raise ProgramTooLargeError(
                f"the traced program is too large to compile: {n:,} primitive calls (bound {max_eqns:,}) and "
                f"{size / 2**20:.1f} MiB of StableHLO (bound {max_bytes / 2**20:.0f} MiB), mostly from "
                f"{_busiest_lines(graph)}. A Python loop over traced values is unrolled at trace time: written "
                "with autograd_xla.scan or fori_loop its body is compiled once. jit_ps(f, max_program=(calls, "
                "bytes)) moves the bound.")

    def _backend(self):
        if self._platform is None:
            self._platform = backend_mod.get_backend(self.backend).platform
        return backend_mod.get_backend(self._platform)

    def _x64(self, backend):
        """64-bit types stay 64-bit (numpy semantics) unless x64=False asks for 32-bit speed;
        TPUs have no float64, so there 32 bits are used with a warning."""
        if backend.platform == "tpu":
            if self.x64 and "x64_tpu" not in self._warned:
                self._warned.add("x64_tpu")
                _warn("TPUs have no 64-bit floating point: computing in 32 bits")
            return False
        return self.x64 is not False

    def _leaf_names(self, spec):
        """Python-syntax name of every dynamic leaf: params[2]['W'], x, args[1]."""
        out = []
        for name, sub in self._top_level(spec):
            out.extend(name + tree.format_path(keys) for keys in tree.leaf_paths(sub))
        return out

    def _top_level(self, spec):
        """(name, treedef) of each dynamic top-level argument, positional then keyword."""
        treedef, has_kwargs, static_pos, _ = spec
        names = self._positional_names()
        static_idx = {i for i, _ in static_pos}
        dyn_names = [n for i, n in enumerate(names) if i not in static_idx]
        args_def, kw_def = treedef[1] if has_kwargs else (treedef, None)
        out = [(dyn_names[i] if i < len(dyn_names) else f"args[{i}]", c) for i, c in enumerate(args_def[1])]
        if kw_def is not None:
            out.extend(zip(kw_def[1], kw_def[2]))
        return out

    def _note_suspicious_arguments(self, error, spec, leaves):
        """A numpy error while tracing: name arguments that are None or ragged nested lists
        (the usual cause, and invisible in the error numpy gives)."""
        i = 0
        for name, sub in self._top_level(spec):
            n = tree.num_leaves(sub)
            for note in _suspicious(name, sub, list(leaves[i:i + n])):
                annotate(error, note)
            i += n

    # ----- warnings -------------------------------------------------------------------------
    def _note_recompile(self, key):
        """Warn when one function keeps meeting new signatures, saying what changed."""
        previous, self._last_key = self._last_key, key
        n = self.stats.traces
        if previous is None or n < RETRACE_WARN_AFTER or n % RETRACE_WARN_AFTER:
            return
        change = _describe_change(previous, key, self._leaf_names(key[0]) if previous[0] == key[0] else None)
        if key[0] in self._auto_static:
            names = self._leaf_names(key[0])
            which = ", ".join(f"'{names[i]}'" for i in sorted(self._auto_static[key[0]]))
            advice = (f"The value of {which} is used where a concrete value is needed (a size, an axis, a slice "
                      "bound, a mask), so the function is traced once per value (XLA compilation is reused when "
                      "only the data differs); static_argnums would do the same. To trace once: compute with it "
                      "as data (np.where instead of a mask, slices of fixed length with a traced start compile to "
                      "dynamic slices) or pass the arrays it slices as arguments.")
        else:
            advice = ("Each distinct signature is traced and compiled anew: keep shapes and dtypes fixed, pass "
                      "changing values as arrays rather than static arguments, or pad inputs to a few sizes.")
        _warn(f"{self!r} has been traced for {n} signatures; the latest differed from the previous one in "
              f"{change}. {advice}")

    def _warn_fallback(self, error):
        """One FallbackWarning per cause: what stopped compiling, the user's line, the remedy."""
        text = str(error).strip()
        key = ("fallback", type(error), text.split("\n", 1)[0])
        if key in self._warned:
            return
        self._warned.add(key)
        if not isinstance(error, JitError):  # numpy or a rule raised while tracing
            text = (f"tracing it raised {type(error).__name__}: {text}\n" + "\n".join(getattr(error, "__notes__", ()))
                    + "\nPlain autograd runs it, so this is a gap in autograd_xla; please report it.")
        _warn(f"{self!r} runs as plain autograd for this signature: {text}\n"
              "jit_ps(f, fallback='error') makes this an error.", FallbackWarning)

    # ----- introspection --------------------------------------------------------------------
    def _entry_for(self, args, kwargs):
        spec, leaves = self._split(args, kwargs)
        if any(type(x) in box_types for x in leaves):
            raise TypeError("introspection takes concrete arguments, not autograd boxes")
        entry = self._lookup(spec, leaves, count=False)
        if entry.python_fallback:
            raise UnsupportedPrimitiveError(f"{self!r} runs as plain autograd for these arguments, so there is no "
                                            "compiled program to show; jit_ps(f, fallback='error') raises the cause")
        return entry

    def graph(self, *args, **kwargs):
        """The traced primitive graph for these arguments (print it for a listing)."""
        return self._entry_for(args, kwargs).graph

    def stablehlo(self, *args, **kwargs):
        """The StableHLO module text given to XLA for these arguments."""
        return self._entry_for(args, kwargs).lowered.text

    def optimized_hlo(self, *args, **kwargs):
        """XLA's optimised HLO for these arguments: shows what was fused."""
        return self._entry_for(args, kwargs).executable.optimized_hlo()

    def cost_analysis(self, *args, **kwargs):
        return self._entry_for(args, kwargs).executable.cost_analysis()

    def cache_info(self):
        info = self.stats.as_dict()
        info["size"] = len(self._cache)
        info["max_size"] = self.cache_size
        return info

    def clear_cache(self):
        with self._lock:
            self._cache.clear()
            self._simple.clear()
            self._derivatives.clear()


def _hashable(v):
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _describe_rejected(x):
    if isinstance(x, np.ma.MaskedArray):
        return ("it is a masked array, whose mask compiled code would ignore. Pass the data with the masked entries "
                "filled (x.filled(value)) and, if needed, the mask as a separate boolean array")
    return ("it is a numpy.matrix, whose operators (* is a matrix product) compiled code would not follow; pass "
            "np.asarray(x) and use @ for matrix products")


def _busiest_lines(graph):
    lines = collections.Counter((e.source.filename, e.source.lineno) for e in graph.eqns if e.source)
    return "; ".join(f"{c:,} from {f}:{ln}" for (f, ln), c in lines.most_common(3))


def _suspicious(name, treedef, leaves, path=()):
    """Notes for the parts of one argument that numpy would refuse as an array: None, and
    nested lists of numbers whose rows differ in length. `leaves`: this subtree's leaves."""
    if treedef is tree.LEAF:
        return []
    kind = treedef[0]
    where = name + tree.format_path(path)
    if kind is None:
        return [f"argument {where} is None (an empty container to jit_ps); if an array was meant, pass one"]
    if kind in (list, tuple) and leaves and all(type(x) in (bool, int, float, complex) for x in leaves) \
            and _ragged(treedef):
        return [f"argument {where} is a ragged nested list (its rows differ in length), which numpy cannot make "
                "an array of; pass a numpy array of the intended shape"]
    children = treedef[2] if kind is dict else treedef[1]
    keys = treedef[1] if kind is dict else range(len(children))
    notes, i = [], 0
    for k, c in zip(keys, children):
        n = tree.num_leaves(c)
        notes.extend(_suspicious(name, c, leaves[i:i + n], path + (k,)))
        i += n
    return notes


def _ragged(treedef):
    """Whether nested lists/tuples of leaves alone have rows of different lengths or depths
    (False for anything holding another kind of container)."""
    def shape(t):
        if t is tree.LEAF:
            return ()
        if t[0] not in (list, tuple):
            raise TypeError
        shapes = {shape(c) for c in t[1]}
        if len(shapes) > 1 or _RAGGED in shapes:
            return _RAGGED
        return (len(t[1]),) + (shapes.pop() if shapes else ())
    try:
        return shape(treedef) is _RAGGED
    except TypeError:
        return False


_RAGGED = ("ragged",)


def _describe_change(old, new, names=None):
    (spec0, sig0, *st0), (spec1, sig1, *st1) = old, new
    if spec0[0] != spec1[0] or spec0[1] != spec1[1]:
        return f"argument structure ({tree.describe(spec0[0])} -> {tree.describe(spec1[0])})"
    if spec0[2:] != spec1[2:]:
        for (i, a), (j, b) in zip(spec0[2] + spec0[3], spec1[2] + spec1[3]):
            if i == j and a != b:
                return f"the value of static argument {i!r} ({_short(a)} -> {_short(b)})"
        return "the set of static arguments given"
    for k, (a, b) in enumerate(zip(sig0, sig1)):
        if a != b:
            who = f"argument {names[k]}" if names and k < len(names) else "an argument"
            if isinstance(a, tuple) and isinstance(b, tuple):
                what = "dtype" if a[0] == b[0] else "shape" if a[1] == b[1] else "shape and dtype"
                return f"the {what} of {who} ({_sig_str(a)} -> {_sig_str(b)})"
            if type(a) is Static and type(b) is Static:
                return f"the value of {who} ({_sig_str(a)} -> {_sig_str(b)})"
            return f"the type of {who} ({_sig_str(a)} -> {_sig_str(b)})"
    if st0 != st1:
        return "the value of an argument used as a static value"
    return "its signature"


def _short(v):
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _sig_str(s):
    if isinstance(s, tuple):
        return f"{s[1]}{list(s[0])}"
    if type(s) is Static:
        return f"static {_short(s.value)}"
    return f"Python {s.__name__}"


def _warn(message, category=UserWarning):
    """warnings.warn attributed to the first frame outside this package, autograd and numpy."""
    level, f = 2, sys._getframe(1)
    while f is not None and library_file(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def _explain_compile_error(fn, error, graph, lowered, platform, x64):
    """XLA rejected a program: a translation rule emitted something invalid (the traced
    shapes were valid, or tracing would have raised numpy's error). Say which primitive and
    which line of the user's code, not the module text; keep XLA's words as attributes."""
    text = str(error)
    module_line = r'(?:^|[\s(])"?-"?:(\d+):\d+:? ?(?:error:)? ?([^\n]*)'
    found = re.search(module_line, text) or re.search(module_line, _unlocated_rejection(fn, graph, platform, x64))
    first = found.group(2).strip() if found else text.split("\n", 1)[0][:300]
    eqn = _equation_at_line(graph, int(found.group(1)), platform, x64) if found else None
    where = (f"\nThe operation was emitted for primitive '{prim_name(eqn.prim)}', traced from\n{eqn.source}"
             if eqn is not None else "")
    return CompileError(f"XLA rejected the program compiled for {fn!r}: {first}{where}\nThe traced shapes and "
                       "dtypes were valid, so this is a bug in a translation rule; please report it. XLA's full "
                       "message and the module text are in this error's .xla_message and .module_text.",
                       xla_message=text, module_text=lowered.text, primitive=eqn.prim if eqn is not None else None,
                       source=eqn.source if eqn is not None else None)


def _unlocated_rejection(fn, graph, platform, x64):
    """XLA's message for `graph` lowered without source locations. With them XLA names the op it
    rejects by its user's line (kept in .xla_message), which equations share; without, by its
    line in the module text, which _equation_at_line maps to one equation."""
    try:
        fn._backend().compile(lowering.lower(graph, "probe", platform, x64, locations=False).text)
    except CompileError as e:
        return str(e)
    return ""


def _equation_at_line(graph, lineno, platform, x64):
    """The equation whose lowering produced line `lineno` of the module text: lowering is
    deterministic and sequential, so lower growing prefixes of the graph and count lines."""
    eqns = lowering.prune(graph).eqns
    header = 2  # "module ..." and "func.func ..."

    def body_lines(k):
        outs = [v for e in eqns[:k] for v in e.outvars if v is not None] or list(graph.invars[:1])
        sub = Graph(list(graph.invars), list(eqns[:k]), outs, captured=graph.captured, arg_names=graph.arg_names)
        try:
            text = lowering.lower(sub, "probe", platform, x64, locations=False).text
        except Exception:
            return None
        return text.count("\n") - header - 3  # footer: return, "}", "}"

    if lineno <= header:
        return None
    lo, hi = 1, len(eqns)
    while lo < hi:  # smallest k whose prefix reaches the line
        mid = (lo + hi) // 2
        n = body_lines(mid)
        if n is None:
            return None
        if n >= lineno - header:
            hi = mid
        else:
            lo = mid + 1
    return eqns[lo - 1] if eqns and (body_lines(lo) or 0) >= lineno - header else None


def jit_ps(fun=None, *, static_argnums=(), static_argnames=(), fallback="python", backend=None,
           cache_size=DEFAULT_CACHE_SIZE, keep_on_device=False, x64=None, max_program=MAX_PROGRAM):
    """Compile `fun` with XLA, once per signature; use as `jit_ps(f)` or `@jit_ps(...)`.

    Array leaves and Python numbers are traced; every other argument leaf (a string, a bool,
    a slice, a callable, any object) is passed by value into the trace, and so is an int or an
    integer/boolean array whose value the trace turns out to need (an axis, a mask): each
    distinct value then has its own trace. static_argnums / static_argnames: arguments passed
    by value explicitly (must be hashable). fallback: 'python' runs a signature that cannot be
    compiled as plain autograd, with one FallbackWarning naming the cause; 'error' raises the
    cause instead. max_program: (primitive calls, bytes of StableHLO) beyond which a program
    is not compiled. backend: 'cpu', 'gpu' or 'tpu'; None uses the default
    platform (set_default_platform, $AUTOGRAD_XLA_PLATFORM, else the best available).
    keep_on_device: return DeviceArrays that stay on the device and can be passed back in
    without a transfer, instead of numpy arrays. x64=False computes float64/int64 work in
    32 bits (faster on accelerators; results come back as float32/int32).
    """
    if fun is None:
        return functools.partial(jit_ps, static_argnums=static_argnums, static_argnames=static_argnames,
                                 fallback=fallback, backend=backend, cache_size=cache_size,
                                 keep_on_device=keep_on_device, x64=x64, max_program=max_program)
    if isinstance(fun, JittedFunction) and not (static_argnums or static_argnames or keep_on_device
                                                  or x64 is not None or backend is not None):
        return fun
    return JittedFunction(fun, static_argnums, static_argnames, fallback, backend, cache_size, keep_on_device, x64,
                          max_program)
