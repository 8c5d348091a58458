"""The public entry point: `jit_ps`, a per-signature cache of compiled executables.

A call is classified by its monomorphic signature: the container structure of the
arguments, each array leaf's shape and dtype (Python scalars are weakly typed, numpy
scalars are not), and the values of static arguments (signatures.py). The first call with
a signature traces the function (tracing.py), lowers the graph (lowering.py), compiles it
(backend.py) and caches the executable; later calls only flatten the arguments, look up
the cache and execute, in C++ where the signature qualifies (dispatch.py). With
tiered=True XLA compiles on a background thread (tiering.py) and the signature's calls run
as plain autograd until it is done. Introspection stops earlier (`graph()` and
`eval_shape` trace, `lower()` lowers: aot.py) and leaves the entry for a later call to
finish. Calls that carry autograd boxes go through one autograd primitive (autodiff.py), so
`grad(jit_ps(f))` differentiates the compiled function.

This module is long because JittedFunction is the one place where a call's stages meet
(signature, trace, loop rolling, lowering, compile, tiering, fallback, precision); its
introspection (aot.py), C++ dispatch (dispatch.py) and fast paths (fastpaths.py) are
mixins of their own modules.
"""
import contextlib
import functools
import gc
import inspect
import os
import sys
import threading
import time
import warnings
import weakref

import numpy as np
from autograd.tracer import box_types, getval

from . import aot, background, calls, clients, fastpaths, tiering, tree
from .aot import COMPILED, LOWERED, TRACED, CacheStats, Entry
from .core import SUPPORTED_DTYPES as _SUPPORTED
from .core import trace_state as _trace_state
from .errors import (ArgumentError, CompileError, ConcretizationError, FallbackWarning, ImpureFunctionError, JitError,
                     PlatformUnavailableError, PrecisionWarning, TooManyProgramsError, UnsupportedDtypeError, annotate,
                     library_file)
from .registry import LazyModule
from .signatures import (Learned, PlainArgument, Static, aval_of, captured_locations, captured_values, content_sample,
                         content_same, describe_change, distance, donated_arguments, function_shape, hashable, leaf_signature,
                         positional_names, retrace_advice, same_capture, short, sig_str, signature_of,
                         static_arguments, suspicious_arguments, traced_reads)

#: The interpreters, the runtime, jaxlib's C++ call path, random draws' replay and derivatives
#: of compiled calls, imported at a function's first trace or compile (or boxed call): a job
#: whose calls all run plainly (tiered execution's first calls) never imports them.
autodiff = LazyModule("autograd_xla.autodiff")
backend_mod = LazyModule("autograd_xla.backend")
numpy_tier = LazyModule("autograd_xla.numpy_tier")
dispatch = LazyModule("autograd_xla.dispatch")
impurity = LazyModule("autograd_xla.impurity")
lowering = LazyModule("autograd_xla.lowering")
tracing = LazyModule("autograd_xla.tracing")
_FLAT_SPECS = {}
_TUPLE, _BOX, _OBJECT = object(), object(), object()  # _simple_signature's marks
_NUMBERS = frozenset({float, int, bool, complex})


def _simple_signature(args):
    """The key of _call_python's hot paths for these positional arguments, or None: per
    argument (shape, dtype) of a numpy array of a supported dtype; for None, None; for a
    tuple, its own marked; for an autograd box of one such array (grad(jit_ps(f))), that
    marked; for a Python number, its type (not its value: a counter's would each be a key of
    their own); for another object (not a box), its identity. Where it holds arrays only,
    their cache key (`_key`) follows from it, and _simple's compiled signatures are found by
    it. The rest find only the plain tier's calls (_plain_tier_hit), which run the function
    as plain autograd whatever their key: the objects' identity, not their contents, which
    `_key` digests (lifelines' DataframeSlicer: 31 µs a call), says whose budget a call
    counts towards until its signature's next decision (tiering.NewSignatures.plain) asks
    the slow path for the key."""
    sig = []
    for a in args:
        t = type(a)
        if t is np.ndarray and a.dtype in _SUPPORTED:
            sig.append((a.shape, a.dtype))
        elif a is None:
            sig.append(None)
        elif t is tuple:
            inner = _simple_signature(a)
            if inner is None:
                return None
            sig.append((_TUPLE, inner))
        elif t in box_types:
            if type(a._value) is not np.ndarray or a._value.dtype not in _SUPPORTED:
                return None
            sig.append((_BOX, a._value.shape, a._value.dtype))
        elif t in _NUMBERS:
            sig.append(t)
        else:
            sig.append((_OBJECT, t, id(a)))
    return tuple(sig)


if calls.Calls is not calls._Calls:  # the Front in C takes _call_python's first hot path itself (_callpath.c)
    calls.native.set_plain_tier(_SUPPORTED, box_types, _NUMBERS, tiering, (_TUPLE, _BOX, _OBJECT))


# Arguments that a thread's differentiated call (autograd running jit_call's forward pass)
# must keep: its backward pass reads them again, so donated device arrays are not consumed.
_keeping = threading.local()

#: Default bound on the number of compiled signatures one jitted function keeps.
DEFAULT_CACHE_SIZE = 64
#: A function traced for this many signatures (and every multiple) warns, saying what
#: changed between the last two: each new signature costs a trace and usually a compile.
RETRACE_WARN_AFTER = 8
#: Changes of what a function reads besides its arguments (signatures.captured_locations)
#: after which it runs as plain autograd for good: each traced it again.
CAPTURED_CHANGES = 16
#: A traced program with more primitive calls than this (after loop rolling: rolling.py)
#: warns before it compiles: XLA's compile time grows much faster than the program (measured
#: on an LSTM's unrolled gradient, 2 loaded cores: 1,000 calls 1.8 s, 2,943 calls 17-28 s; an
#: RNN's, 10,000 calls, 130 s; autograd's hmm_em example, ~50,000, ran out of 22 GiB), and
#: the usual cause is a Python loop unrolled at trace time that could not be rolled back.
LARGE_PROGRAM_WARN_AFTER = 2000
#: ... or more bytes of StableHLO than this (10,000 typical calls make about 2 MiB; a rule that
#: inlines loops, like the special functions', emits 10-50 kB per call, so few calls reach it).
LARGE_PROGRAM_WARN_BYTES = 4 << 20
#: A float argument whose value a trace needs (`x[x > 0]`, `if t > 0.5`) is traced as a static
#: value, unless it has had more than this many values: then it is a parameter, not data.
STATIC_FLOAT_VALUES = 4
#: A signature whose program's guards (a Python branch decided for the traced call's values)
#: refuse a call gets another program, traced for that call, up to this many in all; a call
#: none of them takes runs as plain autograd.
GUARDED_PROGRAMS = 4
#: `_waiting` (calls.Calls) while a signature runs in the plain tier: its calls go to
#: Python without asking C++ (a miss and _fastpath's lookup, ~15-25 µs a call, for no fast
#: path), until a compiled call of the function sets it back.
PLAIN_TIER = 2
#: Programs above either bound run as plain autograd instead (jit_ps's `max_program`):
#: primitive calls, and bytes of StableHLO text (a rule that inlines loops emits much per call).
MAX_PROGRAM = (40000, 32 << 20)


def _fallback_entry(cause, impure=False):
    """A signature that runs as plain autograd; `cause` (the exception that stopped compiling
    it) is reported once the plain run has succeeded, and then cleared (its traceback holds
    the call's arguments); its first line stays, for introspection (aot.no_program)."""
    entry = Entry(None, None, impure=impure)
    entry.fallback_cause = cause
    entry.reason = f"{type(cause).__name__}: {str(cause).strip().partition(chr(10))[0]}"
    return entry


class JittedFunction(calls.Calls, aot.Introspection, fastpaths.FastPaths):
    """A function compiled per signature. Call it like the original; made by `jit_ps`, whose
    docstring describes the arguments.

    Looking at one signature (each takes the arguments of a call; none runs the function):
    `graph(*args)` the traced primitive graph and `autograd_xla.eval_shape(jf, *args)` the
    outputs' shapes (trace only, no compile), `stablehlo(*args)` the module text given to XLA, `lower(*args)` an
    aot.Lowered (`.graph`, `.as_text()`, `.compile()` -> aot.Compiled: `.as_text()` XLA's
    optimised HLO, `.cost_analysis()`, `.memory_analysis()`, and a call running exactly that
    executable), `optimized_hlo(*args)` / `cost_analysis(*args)` (shortcuts of Compiled's).
    A trace made for introspection is kept: a later call with that signature compiles it
    without tracing again. `stats` / `cache_info()` count hits, traces, compiles and seconds.
    """

    derivative = False  # a VJP or JVP autodiff made: its containers come back as autograd's (Entry.autograd_out)

    def __init__(self, fun, static_argnums=(), static_argnames=(), fallback="python", backend=None,
                 cache_size=DEFAULT_CACHE_SIZE, keep_on_device=False, x64=None, max_program=MAX_PROGRAM,
                 donate_argnums=(), explain=None, tiered=None, roll_loops=None, deterministic=False):
        options = {k: v for k, v in locals().items() if k not in ("self", "fun")}  # what a pickle makes it with again
        if fallback not in ("python", "error"):
            raise ValueError("fallback must be 'python' or 'error'")
        if backend is not None:
            clients.canonical_platform(backend)  # an unknown name fails now, an absent one on first call
        functools.update_wrapper(self, fun)
        self.__dict__.pop("_signature", None)  # (update_wrapper copies fun's __dict__: a jitted fun's own)
        self._fun = fun
        self._options = options  # (__reduce__)
        self.deterministic = bool(deterministic)
        named = static_argnums != () or static_argnames != () or donate_argnums != ()
        signature = self._signature if named else None  # (else made at its first use: _signature)
        self._static_argnums, self._static_argnames = static_arguments(signature, static_argnums, static_argnames)
        self._donate_argnums = donated_arguments(signature, donate_argnums, self._static_argnums)
        self.explain = explain
        self.tiered = tiered
        self.roll_loops = roll_loops
        self.fallback = fallback
        self.backend = backend
        self.keep_on_device = keep_on_device
        self.x64 = x64
        self.max_program = tuple(max_program)
        self._platform = None  # resolved on first compile: later default changes do not move us
        self.cache_size = cache_size
        self.stats = CacheStats()
        self._cache = calls.Signatures(self.stats.counts)
        self._simple = {}  # (shape, dtype) per positional array -> entry needing no per-call work
        self._plain_for_good = False  # whether _simple holds a signature run plainly for good (_callpath's plain tier)
        self._simple_untraced = {}  # _simple_signature -> (tiering.Untraced, flat): the plain tier's (_plain_tier_hit)
        self._lock = threading.RLock()
        shape = function_shape(fun)  # what traces learn is shared with same-shaped functions (fresh closures)
        self._untraced = tiering.NewSignatures(cache_size, shape)  # a tiered function's, run plainly first
        self._auto_static = Learned(shape, "static")  # spec -> frozenset of leaf indices made static
        self._static_seen = {}  # (spec, leaf index) -> keys of the values a float leaf was static with
        self._parameters = Learned(shape, "parameters")  # spec -> float leaves with too many values to be static
        self._derivatives = {}
        self._warned = set()
        self._last_key = None
        self._fast = None  # jaxlib's C++ dispatch (dispatch.py): _arm_cpp
        self._captured_all = None  # where fun reads besides its arguments (signatures.captured_locations), once traced
        self._captured = []  # ... those its traces read (signatures.traced_reads), watched
        self._captured_then = None  # what those held at its traces (None: nothing traced since a change)
        self._captured_samples = []  # ... and the bytes of the arrays among them (signatures.content_sample)
        self._captured_changes = 0  # how many times one changed (CAPTURED_CHANGES)
        self._reads_plainly = False  # past CAPTURED_CHANGES: calls run fun
        self._cpp_armed = False
        self._fast_calls = [0, 0]  # calls C++ handed back for good, and fast paths given it
        if not self._tiers():
            self._arm_cpp()  # compiled at the first call: C++ takes that call's fast path at its miss

    @functools.cached_property
    def _signature(self):
        """signature_of the function, naming its arguments in messages and graphs: made at its
        first use where no static or donated arguments ask for it at once (inspect.signature,
        followed through autograd's operators, is 0.1 ms a jitted function; lifelines makes
        three a fit)."""
        return signature_of(self._fun)

    @property
    def __signature__(self):
        """The wrapped function's signature, as inspect.signature(fun) gives it: inspect reads this
        first, also where it does not follow __wrapped__ (inspect.getfullargspec, which pymanopt
        reads a cost function's parameters with), and a jitted function's own __call__ is C's."""
        try:
            return inspect.signature(self._fun)
        except (TypeError, ValueError):
            return None

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return functools.partial(self, obj)

    def __copy__(self):
        """The function itself, as copy.copy and copy.deepcopy give a Python function: a library
        deep-copying objects that hold the user's functions (mici's transitions, paragami's
        patterns) shares its compiled programs with them."""
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        """Pickled as the function it wraps is: by reference where the jitted function is its
        module's global of its name (`@jit_ps` on a module's function), else as jit_ps of the
        pickled function with the same options, whose programs the process that loads it
        compiles again (its caches are this process's)."""
        qualname = getattr(self, "__qualname__", None)
        found = sys.modules.get(getattr(self, "__module__", None))
        for part in (qualname or "<>").split("."):
            found = getattr(found, part, None)
        if found is self:
            return qualname
        return functools.partial(JittedFunction, **self._options), (self._fun,)

    def __repr__(self):
        name = getattr(self._fun, "__name__", None)
        qualname = getattr(self._fun, "__qualname__", name)
        if name and qualname and qualname.rpartition(".")[2] != name:
            qualname = name  # a wrapper that renamed itself: autograd's grad_of_loss_wrt_argnum_0
        return f"<jit_ps {qualname or self._fun}>"

    # ----- the call path: calls.Calls, then (outside C++'s fast paths) this -----------------
    def _python_takes(self, *args, **kwargs):
        """Whether a call C++ raised a ValueError for is this path's (calls.Calls and the Front
        run it again here): a DeviceArray among the arguments that has lost its buffer (donated;
        the error is this path's), or a dict whose keys C++'s pytrees, which sort a dict's keys,
        cannot order (`{1: x, "a": y}`, momi's keys of functions); ours keep a dict's order, as
        autograd does."""
        leaves, treedef = tree.flatten((args, kwargs))
        return (any(type(x) is backend_mod.DeviceArray and x.buffer.is_deleted() for x in leaves)
                or not tree.keys_sort(treedef))

    def _call_python(self, *args, **kwargs):
        if _trace_state.traces:  # inside another trace: inline, the outer function compiles us
            return self._fun(*args, **kwargs)
        captured = self._captured_c  # (set with _captured_then; compared in C where it is built)
        if self._reads_plainly or captured is not None and not calls.captured_hold(captured) and self._captured_changed():
            return self._fun(*args, **kwargs)
        if not calls.errstate_allows():
            return self._plain_for_errstate(args, kwargs)
        if not kwargs and (self._simple or self._simple_untraced):  # the hot paths: positional arrays
            sig = _simple_signature(args)
            plain = self._simple_untraced.get(sig) if self._simple_untraced else None
            if plain is not None:  # a signature of the plain tier, untraced
                untraced, flat = plain
                if untraced.spent < untraced.due and tiering.PLAIN_SECONDS is None:
                    if flat or untraced.replay is None:  # (else its held calls by numpy: below)
                        self.stats.plain_tier_calls += 1
                        return untraced.run(functools.partial(self._fun, *args), args if flat else None)
                else:
                    self._simple_untraced.pop(sig, None)  # decided below
            hit = self._simple.get(sig)
            if hit is not None:  # a known signature
                entry, key = hit
                if entry is None:  # plain autograd's for good (_run_plain_tier)
                    self.stats.plain_tier_calls += 1
                    return self._fun(*args)
                self.stats.hits += 1
                try:
                    self._cache.move_to_end(key)  # least recently used signatures are evicted first
                except (KeyError, RuntimeError):  # evicted meanwhile by another thread
                    pass
                ladder = entry.ladder
                if ((ladder is None or ladder.renting()) and self._fast is not None
                        and (self._waiting or entry.fastpath is None)):
                    self._waiting = 0  # settled or renting: C++ may take its calls
                    self._fastpath(args, kwargs)  # staged now: C++ is not given arguments it would copy apart
                outs = (entry.executable(args, self.keep_on_device) if ladder is None else
                        ladder.run(entry, args, self.keep_on_device))
                return outs[0] if entry.out_tree is tree.LEAF else tree.unflatten(entry.out_tree, outs)
        if not kwargs and not self._static_argnums and all(type(a) is np.ndarray for a in args):
            spec = _FLAT_SPECS.get(len(args))  # the common case: positional arrays only
            if spec is None:
                spec = _FLAT_SPECS[len(args)] = (tree.flatten(args)[1], False, (), ())
            return self._call_flat(spec, args, (args, kwargs))
        spec, leaves = self._split(args, kwargs)
        for x in leaves:
            if type(x) in box_types:
                entry = self._lookup(spec, [getval(x) for x in leaves], count=False, stage=None)
                if entry.python_fallback:
                    return self._run_plain(entry, spec, leaves)
                if entry.impure:  # its draws replayed (compiled or compiling): made once, handed to its derivatives
                    return autodiff.drawing_call(self, spec, leaves, entry)
                if entry.stage < COMPILED and (type(entry) is tiering.Untraced or entry.background is not None):
                    if type(entry) is tiering.Untraced and entry.traces == 1:
                        entry.traces = tiering.boxed_traces()  # its own and its VJP's (once)
                    held = self._held_vjp(entry, spec, leaves)
                    if held is not None:  # held: its value and VJP by numpy
                        if type(entry) is not tiering.Untraced:  # compiling: its VJP next
                            held.vjp_compiled(leaves, autodiff.reverse_mode(entry, leaves))
                        call = functools.partial(autodiff.held_call, held, *leaves)
                        return entry.run(call) if type(entry) is tiering.Untraced else call()
                    return self._run_plain_tier(spec, leaves, entry, (args, kwargs), by_numpy=False)
                if entry.vjps:  # compiled after it was held: held still until its VJP is compiled too
                    held = self._held_vjp(entry, spec, leaves)
                    if held is not None:
                        if not held.vjp_compiled(leaves, autodiff.reverse_mode(entry, leaves)):
                            return autodiff.held_call(held, *leaves)
                        entry.vjps.pop(held.nums, None)  # jit_call's from now on
                if not entry.donated:
                    return autodiff.call(self, spec, leaves, entry)
                # autograd runs the forward pass (our _execute) in this thread, within this call
                keeping, _keeping.on = getattr(_keeping, "on", False), True
                try:
                    return autodiff.call(self, spec, leaves, entry)
                finally:
                    _keeping.on = keeping
        return self._call_flat(spec, leaves, (args, kwargs))

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

    def _run_plain_tier(self, spec, leaves, entry, original=None, by_numpy=True):
        """A call of a signature not compiled yet (tiered execution: `entry` Untraced, or
        compiling in the background) runs as plain autograd, whose numbers (and draws from
        numpy.random: the compiled program replays the same calls on the same state) the
        compiled program gives: not a fallback, nothing to report. Results are what plain
        autograd returns, as for a fallback: the function is given the call's own arguments
        (`original`: args, kwargs), else (a call from autodiff.jit_call) ones rebuilt from `leaves`.
        Its trace runs by numpy (numpy_tier) only where `by_numpy`: not under autograd's boxes
        (grad(jit_ps(f))), which would go through its functions' Python parts (numpy's
        tensordot: transposes, reshapes and a dot; quimb's MPS energy took 3x plain's time)."""
        self.stats.plain_tier_calls += 1
        if not self._waiting:
            self._waiting = PLAIN_TIER  # no fast path to be had: calls skip C++'s miss and _fastpath meanwhile
        call = (functools.partial(self._apply, spec, leaves, autodiff.BOXING) if original is None
                else functools.partial(self._fun, *original[0], **original[1]))
        by_numpy = by_numpy and original is not None
        if type(entry) is not tiering.Untraced:  # compiling in the background: traced
            replay = self._replay_of(entry) if by_numpy else None
            return call() if replay is None else replay(leaves, call)
        if original is not None and not original[1] and not self._static_argnums and not self._auto_static[spec]:
            sig = _simple_signature(original[0])
            if sig is not None:
                flat = all(type(a) is np.ndarray and a.dtype in _SUPPORTED for a in original[0])
                self._plain_tier_hit(sig, entry, flat)
        return entry.run(call, leaves if by_numpy else None)

    def _held_vjp(self, entry, spec, leaves):
        """The autodiff.HeldVJP of a call on autograd's boxes of held signature `entry` (a
        tiering.Untraced with a run by numpy, of one array's output), or None: one per set of
        boxed leaves, all boxes of one trace around arrays (boxes of several levels, a higher
        derivative's, run plainly). Of a signature compiled (or compiling) since, the one it
        was held with, once checked (numpy_tier.CHECKED_CALLS): gradient calls by its compiled
        program and its VJP's plain tier (each running the function's Python again) took 1.5x
        plain autograd's time (pymanopt's Gaussian mixture)."""
        held_only = type(entry) is not tiering.Untraced
        if not held_only:
            replay = entry.replay
            if not replay or replay.steps is None or replay.out_tree is not tree.LEAF:
                return None
        nums, traces = [], set()
        for i, x in enumerate(leaves):
            if type(x) in box_types:
                if type(x._value) in box_types:
                    return None
                nums.append(i)
                traces.add(x._trace)
        if len(traces) != 1:  # (autograd runs a primitive once per level of boxes)
            return None
        nums = tuple(nums)
        if held_only:
            held = entry.vjps.get(nums) if entry.vjps else None
            if held is not None and (not held.split or held.unchecked):  # never checked now: jit_call's
                entry.vjps.pop(nums, None)
                return None
            return held
        if entry.vjps is None:
            entry.vjps = {}
        held = entry.vjps.get(nums)
        if held is None:
            held = entry.vjps[nums] = autodiff.HeldVJP(self, spec, nums)
        elif held.traced is not None:  # its VJP traced at the call before: what both traces cost
            tiering.note_boxed(entry, held.traced)
            held.traced = None
        return held if held.split is not False else None

    def _replay_of(self, entry):
        """The numpy tier's run of a traced entry (numpy_tier.replay), made at its first ask;
        None where it has none (random draws, a primitive numpy does not run)."""
        if entry.replay is None:
            entry.replay = (not entry.impure and numpy_tier.replay(entry.graph, entry.dynamic, entry.out_tree,
                                                                   self.stats)) or False
        return entry.replay or None

    def _plain_tier_hit(self, sig, untraced, flat):
        """Let _call_python's plain-tier path take the later calls of simple signature `sig`
        (_simple_signature; `flat`: positional numpy arrays only, whose held calls by numpy it
        runs too): straight to the function, timed, until `untraced.due` (then this path decides
        again: tiering.NewSignatures.plain); for good where it runs plainly for good. `x + 1.0`
        on 3 elements, numpy's 0.6-0.7 µs a call: 3.6-5.7 µs a call through _call_flat, 2.0-2.1
        from there; over plain autograd, arrays beside a tuple holding None (lifelines'
        arguments) 6.9 µs through _call_flat, 2.5 in Python's hot path, 1.3 in the C Front's
        (_callpath.c, which takes these calls where it is built); grad(jit_ps(f))'s boxes 12,
        4.1-4.4 and 1.3-2.0."""
        if untraced.for_good():
            self._simple[sig] = (None, tiering.PLAIN)
            self._plain_for_good = True
            self._simple_untraced.pop(sig, None)
            return
        if sig not in self._simple_untraced and len(self._simple_untraced) >= self.cache_size:
            self._simple_untraced.clear()
        self._simple_untraced[sig] = (untraced, flat)

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
                bad = next(name for name, v in self._static_items(static_pos, static_kw) if not hashable(v))
                raise ArgumentError(f"static argument {bad} must be hashable (it is part of the compile cache "
                                    "key); pass a tuple instead of a list, or make it a traced argument") from None
        return spec, leaves

    def _static_items(self, static_pos, static_kw):
        names = positional_names(self._signature)
        for i, v in static_pos:
            yield (f"'{names[i]}'" if i < len(names) else f"#{i}"), v
        for k, v in static_kw:
            yield f"'{k}'", v

    def _key(self, spec, leaves):
        """The cache key of these arguments (raises PlainArgument for an argument compiled code cannot take)."""
        auto = self._auto_static[spec]
        sig = tuple(map(leaf_signature, leaves))
        return (spec, sig, tuple([Static(leaves[i]) for i in sorted(auto)])) if auto else (spec, sig)

    def _lookup(self, spec, leaves, count=True, stage=COMPILED):
        """The cache entry of these arguments' signature, taken to `stage` (traced if new).
        `stage` None (a call on autograd's boxes): COMPILED where new signatures are tiered,
        else LOWERED: a real scalar's calls run its value and VJP's program (jit_call_ahead),
        not its own, which the first call that runs it compiles."""
        try:
            key = self._key(spec, leaves)
        except PlainArgument:
            return self._plain_argument(spec, leaves)
        cache = self._cache
        entry = cache.get(key)
        if stage is None:  # (a compiled entry's calls skip _tiers, 2 µs)
            stage = COMPILED if entry is not None and entry.stage == COMPILED or self._tiers() else LOWERED
        if entry is None or entry.stage < stage:
            if stage == COMPILED and entry is not None and entry.compiling():
                return entry  # tiered: its calls run plainly meanwhile, without waiting for the lock
            if stage == COMPILED and (key in self._untraced or (entry is None and self._tiers())):
                untraced = self._untraced.plain(key)
                if untraced is not None:
                    return untraced  # tiered: plain calls until they have cost a compile
            found = self._compile(key, spec, leaves, stage)
            if found is entry and count and entry.stage >= stage:
                self.stats.hits += 1  # found traced (by graph() or lower()): the trace reused, compiled here
            return found  # (else its call runs plainly meanwhile and counts there: another thread compiles it)
        if count:
            self.stats.hits += 1
        try:
            cache.move_to_end(key)  # least recently used signatures are evicted first
        except (KeyError, RuntimeError):  # evicted meanwhile by another thread
            pass
        return entry

    def _call_flat(self, spec, leaves, original=None):
        entry = self._lookup(spec, leaves)
        if entry.python_fallback:
            return self._run_plain(entry, spec, leaves)
        if entry.stage < COMPILED:  # tiered: not compiled yet (nor in _simple)
            return self._run_plain_tier(spec, leaves, entry, original)
        if self._waiting == PLAIN_TIER:  # compiled now: C++ may take its calls
            self._waiting = 0
        if (not (entry.static_leaves or entry.draws or entry.guards) and spec is _FLAT_SPECS.get(len(leaves))
                and all(type(x) is np.ndarray and x.dtype in _SUPPORTED for x in leaves)):
            sig = tuple([(x.shape, x.dtype) for x in leaves])
            self._simple[sig] = (entry, (spec, sig))
        return self._execute(entry, spec, leaves)

    def _execute(self, entry, spec, leaves):
        """Run a compiled entry on these leaves (of its signature), or its signature's others
        (_refused); in a ring, first the program `_took` expects."""
        state = impurity.global_state() if entry.draws and entry.guards else None
        first = entry if entry.variant is None else entry.following.get(entry.previous, entry)
        outs, refused = self._run(first, leaves)
        if refused is not None:
            return self._refused(entry, first, spec, leaves, refused, state)
        if entry.variant is not None:
            self._took(entry, first, spec, leaves)
        return outs

    def _run(self, entry, leaves):
        """(results, None), or (None, the guard that refused these leaves: entry.guards[k])."""
        args = leaves
        if entry.donated and getattr(_keeping, "on", False):  # a host copy is donated instead
            args = [np.asarray(x) if i in entry.donated and type(x) is backend_mod.DeviceArray else x
                    for i, x in enumerate(args)]
        if entry.static_leaves:
            args = [x for i, x in enumerate(args) if i not in entry.static_leaves]
        if entry.draws:
            args = list(args) + impurity.replay(entry.draws)
        ladder = entry.ladder
        outs = entry.executable(args, self.keep_on_device) if ladder is None else ladder.run(entry, args, self.keep_on_device)
        if entry.guards:
            ok = outs[-len(entry.guards):]
            if not all(ok):
                return None, entry.guards[[bool(g) for g in ok].index(False)]
            outs = outs[:-len(entry.guards)]
        return (outs[0] if entry.out_tree is tree.LEAF else tree.unflatten(entry.out_tree, outs)), None

    def _refused(self, last, first, spec, leaves, guard, rng_state):
        """A condition the compiled program `first` assumes (tracing.add_guard) is false for
        these data: the signature's other programs, a ring through `Entry.variant`, run them in
        turn, and the one whose guards hold takes the call (`_took`; `last`, the cached entry,
        took the one before). When none does and the refusing guard is a decided branch
        (core.Graph.guards), a program traced for these data joins the ring, up to
        GUARDED_PROGRAMS; else the call runs as plain autograd. Each run starts from numpy's
        random state as it was before the call."""
        entry, programs = first, 1
        while guard is not None:
            source, why, decided = guard
            if rng_state is not None:
                impurity.set_global_state(rng_state)
            following = entry.variant
            if following is None or following is first:  # each program of the ring refused them
                following = self._variant(spec, leaves) if decided and programs < GUARDED_PROGRAMS else None
                if following is None:
                    break
                with self._lock:
                    following.variant, entry.variant = first, following
            entry, programs = following, programs + 1
            outs, guard = self._run(entry, leaves)
        if guard is None:
            self._took(last, entry, spec, leaves)
            return outs
        if self.fallback == "error":
            message = _refusal(self, source, why, decided, programs, "so this call cannot run compiled")
            raise ConcretizationError(message, source=source)
        key = ("guard", str(source), why)
        if key not in self._warned:
            self._warned.add(key)
            _warn(_refusal(self, source, why, decided, programs, "so this call ran as plain autograd"), FallbackWarning)
        self.stats.fallbacks += 1
        return self._apply(spec, leaves)

    def _took(self, last, taker, spec, leaves):
        """A ring's program `taker` ran the call after one `last` ran: it becomes the cached
        entry, and what the ring tries first next time is the program that followed the same
        two programs' calls before (a two-level predictor: calls alternating between two
        branches, or repeating any short pattern, soon run one program each)."""
        last.following[last.previous] = taker
        taker.previous = last
        if taker is not last:
            key = self._key(spec, leaves)
            with self._lock:
                if self._cache.get(key) is last:
                    self._cache[key] = taker

    def _variant(self, spec, leaves):
        """Another compiled program of a guarded signature, traced for these leaves (its own
        guards hold for them), or None where none can be made. It keeps its first program (no
        ladder: a ring's entries take turns in the cache)."""
        key = self._key(spec, leaves)
        if ("no other program", key) in self._warned:  # tried, and failed, before
            return None
        try:
            variant = self._trace_entry(key, spec, leaves, self._auto_static[spec])
            self._lower(variant)
            self._compile_lowered(variant, quick=False)
        except PlatformUnavailableError:
            raise
        except Exception as e:
            self._warned.add(("no other program", key))
            if aot.explaining(self.explain):
                aot.report(f"{self!r}: no other program for {self._signature_text(key)}: {type(e).__name__}: {e}")
            return None
        variant.ladder = None
        return variant

    def _apply(self, spec, leaves, boxing=None):
        """Call the user's function with the original arguments rebuilt from `leaves`
        (containers holding autograd boxes rebuilt as boxes themselves, given `boxing`: see
        `tree.unflatten`)."""
        if spec is _FLAT_SPECS.get(len(leaves)):  # positional arrays only (__call__'s common case)
            return self._fun(*leaves)
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
    def _compile(self, key, spec, leaves, stage=COMPILED):
        with self._lock:
            entry = self._cache.get(key)
            built, asked, tracing = entry is None, key, None
            if built:
                t0 = time.perf_counter()
                key, entry = self._build(key, spec, leaves)
                tracing = time.perf_counter() - t0  # its traces, retried ones included: tiering.note_trace
                self._cache[key] = entry
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
                    self._forget_fast_paths()  # refilled by the next calls; never holding an evicted entry
                    self.stats.evictions += 1
            if stage == COMPILED and entry.stage == TRACED and entry.graph is not None:
                vjps = [h.eqns for h in entry.vjps.values() if h.split] if entry.vjps else ()
                held = self._untraced.hold(asked, key, entry.graph.size(),  # tiered: the trace kept, for later
                                           tracing, vjps)
                if held is not None:
                    held.replay = self._replay_of(entry)  # its calls meanwhile: the trace run by numpy
                    if entry.vjps is None:
                        entry.vjps = {}
                    held.vjps = entry.vjps  # (its calls on boxes stay held until its VJP is compiled too)
                    if built:
                        self._note_recompile(key)
                    return held
            if entry.stage < stage:
                entry = self._advance(key, entry, stage, background=self._tiers() and self._in_background())
            if built:
                self._note_recompile(key)
            if entry.graph is not None and entry.stage >= LOWERED:  # (a warning turned error is the user's, not a fallback)
                self._warn_32_bit(entry.graph, self._backend())
            return entry

    def _build(self, key, spec, leaves):
        """Trace. An argument whose value the trace needs (an int used as an axis, a boolean
        mask that decides a shape) becomes static and the trace is retried, the key then
        holding its value; what cannot be traced becomes a plain-autograd entry (or raises,
        under fallback="error"). Returns (key, entry)."""
        while True:
            auto = self._auto_static[spec]
            statics = dict(zip(sorted(auto), key[2])) if auto else {}
            varying = {i for i, value in statics.items() if self._is_parameter(spec, i, value)}
            if varying:  # a parameter, not data: trace it (and, if the trace needs it, run plainly)
                auto = self._auto_static[spec] = auto - varying
                key = (spec, key[1], tuple([Static(leaves[i]) for i in sorted(auto)])) if auto else key[:2]
            try:
                return key, self._trace_entry(key, spec, leaves, auto)
            except ConcretizationError as e:
                dynamic = [i for i, sig in enumerate(key[1]) if i not in auto and type(sig) is not Static]
                wanted = {dynamic[i] for i in e.static_candidates}
                extra = wanted - auto
                if not extra or wanted & self._parameters[spec]:
                    return key, self._fallback(e)
                if aot.explaining(self.explain):
                    names = self._leaf_names(spec)
                    aot.report(f"{self!r}: the trace needs the value of {', '.join(names[i] for i in sorted(extra))} "
                               "(used where a concrete value is needed): tracing again with that value static")
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
        if i in self._parameters[spec]:
            return True
        if np.asarray(value.value).dtype.kind not in "fc":
            return False
        seen = self._static_seen.setdefault((spec, i), set())
        seen.add(value.key)
        if len(seen) > STATIC_FLOAT_VALUES:
            self._parameters[spec] = self._parameters[spec] | {i}
            del self._static_seen[spec, i]
            return True
        return False

    def _fallback(self, cause):
        """What happens to a signature that cannot be compiled: fallback="error" raises the
        cause (inside the handler that caught it, so its traceback is kept); else plain autograd."""
        if self.fallback == "error":
            raise
        self.stats.fallbacks += 1
        entry = _fallback_entry(cause, impure=isinstance(cause, ImpureFunctionError))
        if aot.explaining(self.explain):
            aot.report(f"{self!r} runs as plain autograd for this signature: {entry.reason}")
        return entry

    def _plain_argument(self, spec, leaves):
        """An argument that compiled code cannot take (leaf_signature raised PlainArgument)."""
        for name, x in zip(self._leaf_names(spec), leaves):
            try:
                leaf_signature(x)
            except PlainArgument as e:
                cause = ArgumentError(f"argument {name}: {e}")
                break
        if self.fallback == "error":
            raise cause
        self.stats.fallbacks += 1
        return _fallback_entry(cause)

    def _trace_entry(self, key, spec, leaves, auto):
        sig = key[1]
        names = self._leaf_names(spec)
        static = set(auto) | {i for i, s in enumerate(sig) if type(s) is Static}
        dynamic = [i for i in range(len(leaves)) if i not in static]
        in_avals = [aval_of(leaves[i]) for i in dynamic]

        subclassed = any(len(s) > 2 for s in sig if type(s) is tuple)

        made = [False]  # the last trace's output: a container an autograd primitive returned (Entry.autograd_out)
        # ... as are those of a function that is one (check_grads(vs.add)) and of a derivative autodiff made
        own = self.derivative or getattr(self._fun, "_is_autograd_primitive", False)

        def flat_fun(*tracers):
            full = list(leaves)
            for i, t in zip(dynamic, tracers):
                full[i] = t
            if subclassed:  # every array argument answers its class as it (tracing.Kind)
                tracing.stand_in_as(tracers, [leaves[i] for i in dynamic])
            out = self._apply(spec, full)
            made[0] = own or tracing.current_trace().made_by_autograd(out)
            return out

        t0 = time.perf_counter()
        parameters = [k for k, i in enumerate(dynamic) if i in self._parameters[spec]]  # branches on them speculate
        with _collector_paused():
            graph, out_tree, draws = self._trace(flat_fun, in_avals, [names[i] for i in dynamic], spec, leaves,
                                                 [leaves[i] for i in dynamic], parameters)
        seconds = time.perf_counter() - t0
        self._watch_captured(graph)
        self.stats.traces += 1
        self.stats.trace_seconds += seconds
        if aot.explaining(self.explain):
            aot.report(f"{self!r} traced in {seconds:.3g} s ({len(graph.eqns):,} primitive calls) for "
                       f"{self._signature_text(key)}: {self._why_traced(key)}")
        entry = Entry(out_tree, graph, draws=draws, static_leaves=static, dynamic=dynamic)
        entry.autograd_out = made[0]
        entry.seconds = seconds
        entry.flat = (not static and not any(spec[1:]) and tree.sequences_only(spec[0])
                      and all(map(fastpaths.takes_leaf, leaves)))
        if not graph.guards:  # a failed guard reruns the call plainly, on arguments that must still exist
            entry.donated = self._donated_leaves(spec) - entry.static_leaves
        return entry

    def _advance(self, key, entry, stage, background=False):
        """Lower a traced entry, and compile it if `stage` asks for it (`background`: hand the
        compile to the compile thread and return the entry still lowered, to run plainly); a
        program XLA rejects (or one too large to give it) makes the signature a plain-autograd
        entry instead, also when the background compile found that out (at the next call)."""
        try:
            lower_seconds = self._lower(entry) if entry.stage < LOWERED else None
            if entry.background is not None and stage == COMPILED:
                if entry.background.running():
                    return entry
                error, entry.background.error = entry.background.error, None
                if error is not None:  # reported once, as a compile in the call would be
                    raise error
                # else it ended uncompiled (evicted before its turn, or its error reported): compile here
            elif stage < COMPILED or background:
                if lower_seconds is not None and aot.explaining(self.explain):
                    later = ", compiling in the background" if stage == COMPILED else ""
                    aot.report(f"{self!r} lowered in {lower_seconds:.3g} s for {self._signature_text(key)}{later}")
                if stage == COMPILED:
                    self._compile_later(key, entry)
                return entry
            compile_seconds, compiled = self._compile_lowered(entry, key)
        except PlatformUnavailableError:  # configuration, not the program: plain autograd would not help
            raise
        except Exception as e:
            entry = self._fallback(e)
            if key in self._cache:
                self._cache[key] = entry
            return entry
        if aot.explaining(self.explain):
            lowered = f" (lowering took {lower_seconds:.3g} s)" if lower_seconds is not None else ""
            what = (f"compiled in {compile_seconds:.3g} s{lowered}" if compiled else
                    f"not compiled: its program is identical to one compiled before{lowered}")
            aot.report(f"{self!r} {what} for {self._signature_text(key)}")
        return entry

    def _lower(self, entry):
        t0 = time.perf_counter()
        graph = entry.graph
        donate = [k for k, i in enumerate(entry.dynamic) if i in entry.donated]
        lowered = self._lowering(entry, donate)
        aot.check_size(graph, lowered, self.max_program)
        self._warn_if_large(graph, len(lowered.text))
        # what was donated: packed arguments are not (their buffer is one made for the call anyway)
        entry.donated = frozenset(entry.dynamic[k] for k in lowered.sources if type(k) is int and k in donate)
        entry.lowered, entry.stage = lowered, LOWERED
        seconds = time.perf_counter() - t0
        self.stats.lower_seconds += seconds
        entry.seconds += seconds
        return seconds

    def _arm_cpp(self):
        """Let jaxlib's C++ dispatch (dispatch.py) take the calls of signatures that qualify. A
        tiered function's at its first program, as it imports jaxlib (clients.xc), which one
        whose calls all run as plain autograd (tiering.py) never needs."""
        if not self._cpp_armed:
            self._cpp_armed = True
            self._fast = dispatch.function_for(self) if dispatch.available() else None

    def _lowering(self, entry, donate, direct=False, **variant):
        """`direct`: the program for C++ of a signature with large arguments or results (_direct)."""
        self._arm_cpp()
        backend, graph = self._backend(), entry.graph
        # small arguments travel packed, unless the call could be C++'s, which puts each alone faster
        cpp = entry.flat and all(v.aval.size * v.aval.dtype.itemsize < dispatch.ARGUMENT_BYTES for v in graph.invars)
        pack = not self.keep_on_device and not direct and not (self._fast is not None and cpp)
        return lowering.lower(graph, getattr(self._fun, "__name__", "jit_fn"), backend.platform, self._x64(backend),
                              pack=pack, donate=donate, recycle=not (self.keep_on_device or direct), **variant)

    def _faster_program(self, entry, variant):
        """A tiering.Ladder step, on the compile thread: the entry's program with XLA's default
        options (`variant` None; the first had backend.fast_compile_options), or with LLVM's
        optimisations (backend.QUICK_STEP, after a quick first program), or with XLA's own
        scheduler (backend.XLA_SCHEDULER), or another lowering (`variant`: lowering.lower's
        keywords changed from the program in use's, lowering.VIEWS, XLA_DOTS, APART; nothing
        donated: that turns views off).
        None for an entry that has left the cache."""
        if all(e is not entry for e in list(self._cache.values())):
            return None
        if variant is None:
            lowered, options = entry.lowered, None
        elif variant is backend_mod.QUICK_STEP:
            lowered, options = entry.lowered, self._backend().optimized(entry.options)
        elif variant is backend_mod.XLA_SCHEDULER:
            lowered, options = entry.lowered, self._backend().with_xla_scheduler(entry.options)
        else:
            lowered, options = self._lowering(entry, (), **dict(entry.lowered.variant, **variant)), entry.options
        executable, seconds, compiled = self._compile_program(entry, lowered, options, entry.executable)
        self.stats.upgrades += compiled
        self.stats.upgrade_seconds += seconds
        return executable, lowered, options

    def _compile_later(self, key, entry):
        """Hand XLA's compile of a lowered entry to the compile thread (tiered execution); an
        error is kept for the next call of the signature to report (or raise)."""
        entry.background = background.Job.start(functools.partial(self._compile_in_background, key, entry))

    def _compile_in_background(self, key, entry, job):
        """On the compile thread: compile `entry` unless it left the cache before its turn."""
        if self._cache.get(key) is not entry:
            return
        seconds, compiled = self._compile_lowered(entry, key, quick=False)  # no call waits for it
        with self._lock:  # clear_cache marks its pending jobs under the lock
            forget = job.forgotten
        if forget:
            self._backend().forget(entry.executable.programs())
        if aot.explaining(self.explain):
            what = f"compiled in {seconds:.3g} s" if compiled else "not compiled: identical to one compiled before"
            aot.report(f"{self!r} {what} in the background for {self._signature_text(key)}")

    def _tiers(self):
        """Whether a new signature runs plainly first: tiered=None follows the process default
        (tiering.default_tiered: None is on), except under fallback="error", which asks to
        hear at the first call that a signature cannot compile, and a deterministic function,
        whose results must not depend on when its calls' time says to compile."""
        if self.deterministic:
            return False
        if self.tiered is not None:
            return bool(self.tiered)
        default = tiering.default_tiered()
        if default is False or self.fallback == "error":
            return False
        return default or self._plain_is_alike()

    def _plain_is_alike(self):
        """Whether a plain call returns what this function's compiled calls do, so that tiering
        by default changes nothing a caller sees but time: not where results stay on a device
        (keep_on_device: DeviceArrays), come back 32-bit (x64=False), arguments are donated,
        or the platform is not the CPU (an accelerator's user expects the device's memory
        and speed, and plain autograd runs on the host), nor under fallback="error" (compiled
        calls or an error, asked for)."""
        platform = self._platform or (clients.canonical_platform(self.backend) if self.backend
                                      else _default_platform())  # without starting a client (~7 ms)
        return (not self.keep_on_device and self.x64 is not False and not self._donate_argnums and platform == "cpu"
                and self.fallback != "error")

    def _in_background(self):
        """Whether a tiered signature's compile goes to the compile thread: asked for (tiered
        or the process default True), else where a core is free (tiering.spare_core)."""
        asked = self.tiered if self.tiered is not None else tiering.default_tiered()
        return tiering.spare_core() if asked is None else bool(asked)

    def _compile_lowered(self, entry, key=None, quick=True):
        """XLA compiles a lowered entry's first program, with the options it compiles fastest
        with (with `quick`, LLVM's optimisations off too where lowering estimates little work
        a call: backend.QUICK_WORK); the programs that may run faster are its tiering.Ladder
        (which notes the saving over signature `key`'s plain calls, tiered). Returns (seconds,
        whether it compiled rather than reused)."""
        backend = self._backend()
        entry.options = None if self.deterministic else backend.fast_compile_options(
            quick=quick and entry.lowered.work <= backend_mod.QUICK_WORK)
        executable, seconds, compiled = self._compile_program(entry, entry.lowered, entry.options, fresh_first=True)
        quickly = backend.optimized(entry.options) is not None
        # Where the products run (lowering's variants) before how XLA emits the loops (its
        # default options): a trial keeps the faster program by a few calls' times, and a
        # product's time drowns the loops' difference. The float32 SeLU layer's first program
        # multiplied by OpenBLAS in 52-64 ms a call (2 busy cores), its default options' the
        # same, so they were kept or not by chance (2 of 4 fresh functions kept them), then
        # XLA's product took 5-10 ms; with those options its loops take 4.4 ms against 5.4.
        steps = [variant for variant, wanted in ((backend_mod.QUICK_STEP, quickly),
                                                 (lowering.VIEWS, entry.lowered.dot_views),
                                                 (lowering.XLA_DOTS, entry.lowered.blas),
                                                 (lowering.APART, entry.lowered.merged),
                                                 (None, entry.options is not None),
                                                 (backend_mod.XLA_SCHEDULER, backend.with_xla_scheduler(None) is not None))
                 if wanted]
        entry.seconds += seconds
        learn = self._untraced.learner(key, entry.seconds, entry.graph.size())  # a tiered signature's: its cost and saving
        plain = self._plain_step(key, entry) if learn is not None else None
        if (steps or plain is not None) and tiering.UPGRADE_RENT is not None and not self.deterministic:
            entry.ladder = tiering.Ladder(steps, seconds, weakref.WeakMethod(self._faster_program),
                                          weakref.WeakMethod(self._forget_fast_paths), learn, quick=quickly,
                                          plain=plain)
        entry.executable = executable
        self.stats.compiles += compiled
        self.stats.compile_seconds += seconds
        entry.stage = COMPILED  # last: a call on another thread (tiered) uses the entry once it reads this
        return seconds, compiled

    def _plain_step(self, key, entry):
        """The tiering.PlainStep of a tiered signature's ladder (plain autograd tried against
        its compiled program), or None: only where a plain call returns what a compiled one
        does (_plain_is_alike), and the signature's calls pass its leaves to the program as
        they are (no static leaves, no random draws replayed, no guards)."""
        if entry.static_leaves or entry.draws or entry.guards or not self._plain_is_alike():
            return None
        # its plain calls multiply matrices (OpenBLAS's threads) where its program has products,
        # loop bodies included: a plain trial beside XLA's products then waits for those threads
        products = "stablehlo.dot_general" in entry.lowered.text
        return tiering.PlainStep(weakref.WeakMethod(self._plain_outs), weakref.WeakMethod(self._plain_decided),
                                 key, products)

    def _plain_outs(self, key, leaves):
        """A call of signature `key` as plain autograd (tiering.PlainStep): its results flat,
        as the signature's executables give them."""
        return tree.flatten(self._apply(key[0], list(leaves)))[0]

    def _plain_decided(self, key, entry, plain_kept, times):
        """A plain trial's outcome (tiering.Ladder): noted for the functions of this shape
        (tiering.NewSignatures.decided); where plain autograd was faster, the signature leaves
        the cache (its programs let go) and runs plainly from now on, its calls plain
        autograd's own (`stats.plain_kept` counts such signatures), logged at INFO."""
        compiled, plain = (sorted(t)[len(t) // 2] for t in times)
        tiering.log.info("%r: %s for %s: its calls took %.3g s as plain autograd against %.3g s compiled (medians of "
                         "%d paired calls)", self, "plain autograd kept" if plain_kept else "the compiled program kept",
                         self._signature_text(key), plain, compiled, len(times[0]))
        with self._lock:
            self._untraced.decided(key, plain, compiled, plain_kept)
            if not plain_kept or self._cache.get(key) is not entry:
                return
            del self._cache[key]
            self._forget_fast_paths()
            self.stats.plain_kept += 1
        self._backend().forget([p for x in (entry.executable, entry.direct)
                                if isinstance(x, backend_mod.Executable) for p in x.programs()])

    def _compile_program(self, entry, lowered, options, share=None, fresh_first=False):
        """XLA compiles `lowered` (a lowering of the entry's graph) with `options`; returns
        (backend.Executable sharing `share`'s constants, seconds, whether it compiled or reused).
        `fresh_first`, for a lowering with a fresh_text (lowering.FRESH_RESULT_BYTES) none of
        whose recycled results has a dead one to reuse yet: that is compiled now, and
        `lowered.text` on the compile thread after the first call (the Executable's `fresh`,
        `start_compile`)."""
        t0, backend = time.perf_counter(), self._backend()
        fresh_first = fresh_first and lowered.fresh_text is not None and not all(
            backend.has_spare(*lowered.out_avals[k]) for k in lowered.recycled)
        try:
            exe, compiled = backend.compile(lowered.fresh_text if fresh_first else lowered.text, options,
                                            expect_long=len(entry.graph.eqns) > LARGE_PROGRAM_WARN_AFTER, stats=self.stats)
        except TooManyProgramsError:  # the process's, not the program's
            raise
        except CompileError as e:
            raise aot.explain_compile_error(self, e, entry.graph, lowered, backend, self._x64(backend)) from None
        if fresh_first:
            executable = backend_mod.Executable.from_lowered(backend, None, lowered, self.stats, share, fresh=exe,
                                                             widen=self._widens(backend))
            executable.start_compile = functools.partial(background.Job.start, functools.partial(
                self._compile_recycling, executable, lowered.text, options))
        else:
            executable = backend_mod.Executable.from_lowered(backend, exe, lowered, self.stats, share,
                                                             widen=self._widens(backend))
        return executable, time.perf_counter() - t0, compiled

    def _compile_recycling(self, executable, text, options, job):
        """On the compile thread: a fresh_first Executable's own program (_compile_program)."""
        program, compiled = self._backend().compile(text, options, stats=self.stats)
        self.stats.compiles += compiled
        executable.adopt(program)

    def _trace(self, flat_fun, in_avals, names, spec, leaves, example, parameters):
        """Trace with numpy.random's global-state calls recorded as host draws, and with the
        random generators the function can reach watched: one that moved means draws that
        would be frozen (impurity.py). A function whose draws moved one is traced once more
        from the state they left, as plain autograd's call leaves it: draws made once and kept
        (a random search cached by its arguments: cotengra's contraction paths, which quimb's
        first contraction of a network runs) are not made again, and it compiles. Returns
        (graph, out_tree, draws)."""
        _, _, static_pos, static_kw = spec
        roots = [(v, f"static argument {n}") for n, v in self._static_items(static_pos, static_kw)]
        first = None
        from . import rolling  # at the first trace: a job that only runs plainly never rolls a loop
        roll = rolling.ROLL_LOOPS if self.roll_loops is None else self.roll_loops
        while True:
            watch = impurity.Watch(self._fun, roots)
            rolls, _trace_state.roll = _trace_state.roll, roll and not self._tiers()  # (compositions/rolled_vjps.py)
            made = _trace_state.rolled_vjps
            try:
                graph, out_tree, draws = self._trace_watched(watch, flat_fun, in_avals, names, spec, leaves,
                                                             example, parameters)
            except BaseException:
                if first is not None:
                    first.restore()
                raise
            finally:
                _trace_state.roll = rolls
            moved = watch.moved()
            if not moved:
                break
            if first is not None:  # it draws at every trace: frozen draws, not compiled
                first.restore()
                raise impurity.moved_error(self._fun, moved)
            first = watch
        if roll:  # (less a forward pass whose VJP came from its rolled graph: compositions/rolled_vjps.py)
            graph = rolling.roll(lowering.prune(graph) if _trace_state.rolled_vjps != made else graph)
        self._warn_if_large(graph)
        return graph, out_tree, draws

    def _trace_watched(self, watch, flat_fun, in_avals, names, spec, leaves, example, parameters):
        """_trace's one trace, with `watch`'s generators stood in for where they can be; the
        generators' states are put back where it raises."""
        stand_ins = impurity.standing_in(watch)

        def trace(swapping):
            with impurity.recording() as draws, swapping:
                return (*tracing.trace_function(flat_fun, in_avals, names, example=example, parameters=parameters),
                        draws)
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
                for note in suspicious_arguments(self._top_level(spec), leaves):  # None, ragged lists
                    annotate(e, note)
            raise
        except BaseException:
            watch.restore()
            raise
        return graph, out_tree, draws

    def _warn_if_large(self, graph, size=0):
        """Say so before XLA spends minutes on a huge program (aot.large_program), once."""
        n = len(graph.eqns)
        if ((n <= LARGE_PROGRAM_WARN_AFTER and size <= LARGE_PROGRAM_WARN_BYTES) or n > self.max_program[0]
                or "large_program" in self._warned):
            return
        self._warned.add("large_program")
        _warn(f"{self!r} traced to {aot.large_program(graph, size if size > LARGE_PROGRAM_WARN_BYTES else 0)}")

    def _backend(self):
        if self._platform is None:
            self._platform = backend_mod.get_backend(self.backend).platform
            if isinstance(self, calls.Front) and self._platform != "cpu":
                self._ordered = 1  # an accelerator's executions wait for C++'s puts (_callpath's scan)
        return backend_mod.get_backend(self._platform)

    def _x64(self, backend):
        """Whether 64-bit types are computed in 64 bits: numpy's semantics, unless x64=False asks
        for 32-bit speed (results then come back 32-bit). On a platform whose floating point is
        32-bit (backend.FLOAT64_PLATFORMS: a TPU, whose float64 XLA emulates slowly) only
        x64=True does; by default they are computed in 32 bits there and come back in numpy's
        dtypes (_widens), with one warning per function (_warn_32_bit)."""
        return self.x64 is True or (self.x64 is None and backend.platform in backend_mod.FLOAT64_PLATFORMS)

    def _widens(self, backend):
        """Whether results computed in 32 bits go back to numpy's 64-bit dtypes on the host."""
        return self.x64 is None and backend.platform not in backend_mod.FLOAT64_PLATFORMS

    def _warn_32_bit(self, graph, backend):
        """Once per function (its derivatives share `_warned`): a program with 64-bit floating
        point values that the platform computes in 32 bits."""
        if "x64_narrowed" in self._warned or not self._widens(backend) or not _has_float64(graph):
            return
        self._warned.add("x64_narrowed")
        _warn(f"{self!r} computes float64 in float32 on the {backend.platform.upper()}, whose 64-bit floating point "
              "is emulated (many times slower): its results come back as float64 (numpy's dtypes, as plain "
              "autograd's) with float32's precision (about 7 digits). Pass x64=False to get float32 results (no "
              "conversion, no warning), x64=True to compute in float64 there, or backend='cpu'.", PrecisionWarning)

    def _leaf_names(self, spec):
        """Python-syntax name of every dynamic leaf: params[2]['W'], x, args[1]."""
        out = []
        for name, sub in self._top_level(spec):
            out.extend(name + tree.format_path(keys) for keys in tree.leaf_paths(sub))
        return out

    def _arguments(self, spec):
        """A spec's arguments as signatures.describe_change names them: (name, treedef) of each
        traced top-level argument, {name: value} of the static ones, every leaf's name."""
        return self._top_level(spec), dict(self._static_items(spec[2], spec[3])), self._leaf_names(spec)

    def _top_level(self, spec):
        """(name, treedef) of each dynamic top-level argument, positional then keyword."""
        treedef, has_kwargs, static_pos, _ = spec
        names = positional_names(self._signature)
        static_idx = {i for i, _ in static_pos}
        dyn_names = [n for i, n in enumerate(names) if i not in static_idx]
        args_def, kw_def = treedef[1] if has_kwargs else (treedef, None)
        out = [(dyn_names[i] if i < len(dyn_names) else f"args[{i}]", c) for i, c in enumerate(args_def[1])]
        if kw_def is not None:
            out.extend(zip(kw_def[1], kw_def[2]))
        return out

    def _donated_leaves(self, spec):
        """Leaf indices of the positional arguments named by donate_argnums."""
        if not self._donate_argnums:
            return frozenset()
        treedef, has_kwargs, static_pos, _ = spec
        args_def = treedef[1][0] if has_kwargs else treedef
        present = {i for i, _ in static_pos}  # static arguments are not among the leaves
        positions = [i for i in range(len(args_def[1]) + len(present)) if i not in present]
        out, start = set(), 0
        for position, child in zip(positions, args_def[1]):
            n = tree.num_leaves(child)
            if position in self._donate_argnums:
                out.update(range(start, start + n))
            start += n
        return frozenset(out)

    def _signature_text(self, key, most=6):
        """A signature for the compile log: `P: float64[3], n: static 2`."""
        names = self._leaf_names(key[0])
        parts = [f"{n}: {sig_str(s)}" for n, s in zip(names, key[1])]
        for i, value in zip(sorted(self._auto_static[key[0]]), key[2] if len(key) > 2 else ()):
            parts[i] = f"{names[i]}: static {short(value.value)}"
        parts += [f"{name}: static {short(v)}" for name, v in self._static_items(key[0][2], key[0][3])]
        more = f", ... ({len(parts) - most} more)" if len(parts) > most else ""
        return "(" + ", ".join(parts[:most]) + more + ")"

    def _why_traced(self, key):
        """Why `key` needed a trace: how it differs from the closest signature in the cache."""
        try:
            others = [k for k in list(self._cache) if k != key]
        except RuntimeError:  # another thread reordered the cache meanwhile
            others = []
        if not others:
            return "no other signature is cached" if self.stats.traces > 1 else "the first signature"
        closest = min(others, key=lambda k: distance(k, key))
        of = f" (of {len(others)})" if len(others) > 1 else ""
        return f"the closest cached signature{of} differs in {self._change(closest, key)}"

    def _change(self, previous, key):
        names = self._leaf_names(key[0])
        return describe_change(previous, key, self._arguments, [names[i] for i in sorted(self._auto_static[key[0]])])

    # ----- warnings -------------------------------------------------------------------------
    def _note_recompile(self, key):
        """Warn when one function keeps meeting new signatures, saying what changed."""
        previous, self._last_key = self._last_key, key
        n = self.stats.traces
        if previous is None or n < RETRACE_WARN_AFTER or n % RETRACE_WARN_AFTER:
            return
        change = self._change(previous, key)
        names = self._leaf_names(key[0])
        advice = retrace_advice([names[i] for i in sorted(self._auto_static[key[0]])], n, self.stats.compiles)
        _warn(f"{self!r} has been traced for {n} signatures; the latest differed from the previous one in "
              f"{change}. {advice}")

    def _plain_for_errstate(self, args, kwargs):
        """A call under a numpy error state that raises on a floating-point error (or calls or
        logs): plain autograd's numpy raises FloatingPointError where a compiled program would
        return inf or NaN, so the call runs plainly (fallback='error': raises)."""
        error = JitError("numpy's floating-point error state (np.seterr or np.errstate) raises, calls or logs on "
                         f"an error ({np.geterr()}), which a compiled program cannot: calls under it run as plain "
                         "autograd. Leave it at 'warn' or 'ignore' around the calls to compile them")
        if self.fallback == "error":
            raise error
        self.stats.fallbacks += 1
        self._warn_fallback(error)
        return self._fun(*args, **kwargs)

    def _warn_fallback(self, error):
        """One FallbackWarning per cause: what stopped compiling, the user's line, the remedy."""
        text = str(error).strip()
        key = ("fallback", type(error), text.split("\n", 1)[0])
        if key in self._warned:
            return
        self._warned.add(key)
        if not isinstance(error, JitError):  # numpy or a rule raised while tracing
            text = (f"tracing it raised {type(error).__name__}: {text}\n" + "\n".join(getattr(error, "__notes__", ()))
                    + ("" if isinstance(error, UnsupportedDtypeError) else  # (a type XLA lacks: the message says so)
                       "\nPlain autograd runs it, so this is a gap in autograd_xla; please report it."))
        _warn(f"{self!r} runs as plain autograd for this signature: {text}\n"
              "jit_ps(f, fallback='error') makes this an error.", FallbackWarning)

    def cache_info(self):
        info = self.stats.as_dict()
        info["size"], info["max_size"] = len(self._cache), self.cache_size
        info["climbing"] = sum(entry.ladder is not None or type(entry.direct) is background.Job  # tiering.Ladder,
                               for entry in list(self._cache.values())  # or C++'s program compiling (_direct),
                               ) + self._untraced.pending()  # or tiered and not compiled yet
        return info

    def clear_cache(self):
        """Forget every signature's trace and executable (and those of the derivatives), and set
        the counters of `stats` / `cache_info()` back to zero, as functools.lru_cache's
        cache_clear does; the executables are freed unless another function uses them."""
        self._forget_traces()
        self.stats.reset()

    def _forget_traces(self):
        with self._lock:
            programs = self._programs()
            self._forget_pending()
            self._cache.clear()
            self._untraced.clear()
            self._simple_untraced.clear()
            self._forget_fast_paths()
            self._derivatives.clear()
            self._last_key = None
            self._captured, self._captured_then, self._captured_samples, self._captured_c = [], None, [], None
        if programs:
            self._backend().forget(programs)

    # ----- what the function reads besides its arguments (signatures.captured_locations) ------
    def _watch_captured(self, graph):
        """After a trace that made `graph`: watch the places the function reads besides its
        arguments that the trace read (signatures.traced_reads), with what they hold now."""
        with self._lock:
            if self._captured_all is None:
                self._captured_all = captured_locations(self._fun)
            if not self._captured_all:
                return
            places = self._captured_all
            read = traced_reads(places, captured_values(places), graph)
            watched = self._captured if self._captured_then is not None else []
            self._captured = watched + [p for p in read if all(p is not q for q in watched)]
            if self._captured:
                self._captured_then = captured_values(self._captured)
                self._captured_samples = [content_sample(v) for v in self._captured_then]
                self._captured_for_c()

    def _captured_for_c(self):
        """The watched places and their values as _callpath's Front compares them, with the
        bytes of an array's sample: (container, key, value[, bytes, step, itemsize])."""
        self._captured_c = tuple((c, k, v) + (sample or ()) for (c, k, _), v, sample
                                 in zip(self._captured, self._captured_then, self._captured_samples))

    def _captured_changed(self):
        """Whether one of the places the function read when traced holds another value now:
        then its traces are forgotten (and traced again at this call), and past
        CAPTURED_CHANGES such changes it runs as plain autograd for good, with a
        FallbackWarning naming the place. True for a call to run plainly."""
        then, samples, changed, refreshed = self._captured_then, self._captured_samples, None, False
        for i, now in enumerate(captured_values(self._captured)):
            if now is not then[i]:
                if not same_capture(now, then[i]):
                    changed = self._captured[i][2]
                    break
                then[i], samples[i], refreshed = now, content_sample(now), True  # an equal value assigned again: C follows
            elif samples[i] is not None and not content_same(now, samples[i]):
                changed = self._captured[i][2] + " (an array changed in place)"
                break
        if refreshed:
            self._captured_for_c()
        if changed is None:
            return False
        self._captured_changes += 1
        self._forget_traces()
        if self._captured_changes > CAPTURED_CHANGES and self.fallback != "error":
            self._reads_plainly = True
            self._waiting = 1  # (C's calls go to this path, which runs fun)
            self._warn_fallback(JitError(
                f"{changed} has changed between calls {self._captured_changes} times, and each change traced "
                "the function again: it now runs as plain autograd, which reads it at every call. Pass what "
                "changes as an argument"))
            return True
        if aot.explaining(self.explain):
            aot.report(f"{self!r}: {changed} has changed since it was traced: tracing again")
        return False

    def _forget_pending(self):
        """Mark the compiles in flight of this function and its derivatives: their programs are
        not kept once made (the caller holds the lock)."""
        for e in self._cache.values():
            for job in (e.background, e.direct):  # (a compiling _direct program's too: fastpaths)
                if type(job) is background.Job:
                    job.forgotten = True
        for d in self._derivatives.values():
            d._forget_pending()

    def _programs(self):
        found = [p for e in self._cache.values()
                 for x in (getattr(e, "executable", None), getattr(e, "direct", None))
                 if isinstance(x, backend_mod.Executable) for p in x.programs()]  # (direct: maybe a Job)
        for d in self._derivatives.values():
            found += d._programs()
        return found


#: The dtypes a platform without 64-bit floating point computes in 32 bits with a warning.
_FLOAT64 = frozenset(np.dtype(d) for d in ("float64", "complex128"))


def _default_platform():
    """backend.default_platform(), without importing backend where it can only be the CPU: not
    imported yet (so not chosen by set_default_platform), none named in the environment, and
    no accelerator's plugin installed (looked for once)."""
    if "autograd_xla.backend" not in sys.modules and not os.environ.get(clients.PLATFORM_ENV):
        if _ACCELERATOR_PLUGINS[0] is None:
            _ACCELERATOR_PLUGINS[0] = any(clients.plugin_present(p) for p in ("gpu", "tpu"))
        if not _ACCELERATOR_PLUGINS[0]:
            return "cpu"
    return backend_mod.default_platform()


_ACCELERATOR_PLUGINS = [None]  # _default_platform's look: whether an accelerator's plugin is installed


def _has_float64(graph):
    """Whether a traced graph has a 64-bit floating-point argument or result (not only a value
    on the way: the benchmarks' float32 MLP step has one, whose program is float32's)."""
    values = list(graph.invars) + list(graph.outvars)
    return any(np.result_type(v.aval.dtype if hasattr(v, "aval") else v) in _FLOAT64 for v in values)


def _refusal(jitted, source, why, decided, programs, outcome):
    """What a call that every guarded program of its signature refused is told (api._refused):
    the condition and the user's line; for a Python branch decided at trace time, how many
    programs the signature has and the loop or branch that compiles once for all data."""
    if not decided:
        return f"{jitted!r}: {why} at\n{source}\n{outcome}."
    return (f"{jitted!r}: {why} at\n{source}\nin each of the {programs} compiled program(s) of this signature, "
            f"{outcome}. A signature keeps at most {GUARDED_PROGRAMS} programs (api.GUARDED_PROGRAMS), one per way its "
            "Python branches went when traced; a `while` on a traced value is unrolled, so each number of steps is "
            "another program. One program for all data: autograd_xla.while_loop(cond_fun, body_fun, init) for the "
            "loop (forward-mode differentiable; for grad, a scan over a fixed maximum number of steps, the extra "
            "ones masked), autograd_xla.cond(pred, true_fun, false_fun, *operands) for a branch.")


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector off while a function is traced: the trace keeps every
    object it makes alive (autograd's nodes, the equations), and each full collection walks
    them all, so a long trace spent half its time collecting (an LSTM's gradient over 300 steps,
    27,299 calls: 7.4 s traced, 3.6 s with the collector off), and so did rolling its loops.
    One pause covers both: between them, the first collection would walk the whole unrolled
    graph (Euler 500's gradient: 59,000 objects), which rolling frees."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _warn(message, category=UserWarning):
    """warnings.warn attributed to the first frame outside this package, autograd and numpy."""
    level, f = 2, sys._getframe(1)
    while f is not None and library_file(f.f_code.co_filename):
        f, level = f.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def jit_ps(fun=None, *, static_argnums=(), static_argnames=(), fallback="python", backend=None,
           cache_size=DEFAULT_CACHE_SIZE, keep_on_device=False, x64=None, max_program=MAX_PROGRAM, donate_argnums=(),
           explain=None, tiered=None, roll_loops=None, deterministic=False):
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
    32 bits (faster on accelerators; results come back as float32/int32). On a TPU, whose XLA
    emulates 64-bit floating point, x64=None (the default) computes it in 32 bits too but hands
    results back in numpy's dtypes (float64; DeviceArrays hold float32 and say float64), with
    one PrecisionWarning per function; x64=True computes in float64 there.
    donate_argnums: positional arguments whose array buffers XLA may reuse for outputs of the
    same shape and dtype (input-output aliasing; the CPU client supports it too;
    `lower(...).compile().memory_analysis()` shows the aliased bytes). A numpy argument is
    never changed: the call donates the device copy it makes of it, which on the CPU measured
    no gain (a large input otherwise read in place must then be copied). A DeviceArray
    argument (keep_on_device=True) is consumed: its buffer becomes the output's, and using the
    donated DeviceArray again raises. That is the gain: an update `p - 0.1 * g` of device-
    resident float64 parameters measured 56 ms -> 6 ms at 64 MiB and 1.1-2.6 ms -> 0.2-0.5 ms
    at 8 MiB on the CPU (no fresh output buffer to allocate and fault in), none below 64 KiB.
    Not donated: small arguments sent packed together (lowering.PACK_MAX_BYTES), calls being
    differentiated (autograd's backward pass reads the inputs again), signatures with
    runtime guards (a failed guard reruns the call on its arguments).
    explain: log every trace and compile of this function, with its reason (which argument's
    shape, dtype, structure or static value differs from the closest cached signature) and its
    seconds, on the logger "autograd_xla"; None follows $AUTOGRAD_XLA_LOG_COMPILES=1.
    tiered: a new signature runs as plain autograd, untraced, until its calls have taken
    what a compile is expected to save (tiering.plain_budget; traced sooner, tiering.trace_budget,
    its calls then running the trace by numpy where it qualifies: numpy_tier); then, where
    its program's size says the compile pays back (tiering.worth_compiling; else it runs
    plainly on and is judged again later), lowered in the call, and XLA compiles it on a
    background thread (tiering.py), its calls running as
    plain autograd until that is done, then the executable. Both tiers give plain autograd's
    numbers, and draws from numpy.random stay exactly plain autograd's sequence (the compiled
    program replays the same calls on the same state). A compile error surfaces at the next
    call as it would have at the first (FallbackWarning, or raised under fallback="error").
    While plain: results are numpy arrays even with keep_on_device=True and nothing is
    donated, as for a signature that falls back. `stats.plain_tier_calls` counts those
    calls. None follows set_default_tiered, else $AUTOGRAD_XLA_TIERED (1 on, 0 off), else
    tiers, compiling on the background thread only where a core is free (tiering.spare_core;
    else in the call that has spent the plain budget), but never under fallback="error" (a
    signature that cannot compile is then an error at its first call).
    roll_loops: a Python loop unrolled by tracing is rolled back into one compiled loop where
    its steps repeat the same operations (rolling.py; each step computes as the unrolled
    program would), so its compile time does not grow with the number of steps; None follows
    rolling.ROLL_LOOPS ($AUTOGRAD_XLA_ROLL_LOOPS=0 turns it off), on by default.
    deterministic: a signature's results are a function of its arguments alone, the same bits
    at every call and in every run (same machine, same versions): it compiles at the first
    call (no tiers) with XLA's default optimisations and keeps that program. By default the
    plain tier's results are plain autograd's and a compiled program's may differ from them
    in the last bits, as may the faster programs a signature moves to (tiering.Ladder: LLVM's
    optimisations form fused multiply-adds), each when its calls' measured time says, so a
    seeded run (an MCMC chain, an optimiser's path) may differ from run to run after tens of
    steps; its derivatives (grad(jit_ps(f))) are deterministic too.
    """
    options = dict(static_argnums=static_argnums, static_argnames=static_argnames, fallback=fallback,
                   backend=backend, cache_size=cache_size, keep_on_device=keep_on_device, x64=x64,
                   max_program=max_program, donate_argnums=donate_argnums, explain=explain, tiered=tiered,
                   roll_loops=roll_loops, deterministic=deterministic)
    if fun is None:
        return functools.partial(jit_ps, **options)
    if isinstance(fun, JittedFunction) and not (static_argnums or static_argnames or keep_on_device or donate_argnums
                                                  or x64 is not None or backend is not None or explain is not None
                                                  or tiered is not None or roll_loops is not None
                                                  or deterministic and not fun.deterministic
                                                  or fallback != fun.fallback
                                                  or cache_size != fun.cache_size
                                                  or tuple(max_program) != fun.max_program):
        return fun  # already jitted with these options (vmap's result, jit_ps of a jit_ps)
    return JittedFunction(fun, **options)


def eval_shape(fun, *args, **kwargs):
    """The shapes and dtypes of `fun(*args, **kwargs)`'s results, in their structure, as
    core.Aval objects (`.shape`, `.dtype`), found by tracing alone: nothing is compiled
    or computed. `fun` is any function jit_ps takes (`grad(loss)` too) or a jitted function
    (whose cache and options are used). What cannot be traced raises its cause."""
    jitted = fun if isinstance(fun, JittedFunction) else JittedFunction(fun, fallback="error")
    return jitted._eval_shape(args, kwargs)
