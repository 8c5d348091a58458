"""Ahead of time: one signature of a jitted function as objects, and reports of compiling.

    lowered = jit_ps(f).lower(x, n)    # traced and lowered, not compiled
    lowered.graph, lowered.as_text()   # the primitive graph, the StableHLO given to XLA
    compiled = lowered.compile()       # XLA's executable for exactly that signature
    compiled.as_text()                 # XLA's optimised HLO (what was fused)
    compiled.cost_analysis(), compiled.memory_analysis()
    compiled(x, n)                     # runs that executable, as jit_ps(f)(x, n) would

A cache entry of api.JittedFunction goes through three stages, each done only when asked
for: traced (a core.Graph: what `graph()` and `eval_shape` need), lowered (StableHLO text:
`stablehlo()`), compiled (an executable: calls, `optimized_hlo()`). This module holds the
objects that show those stages; api owns the cache and hands them the functions that
advance or run an entry, so nothing here imports api (same floor, below it in use).

When XLA rejects a program, `explain_compile_error` names the primitive and the user's line
that emitted the operation it rejected.

The compile log: `jit_ps(f, explain=True)`, or $AUTOGRAD_XLA_LOG_COMPILES=1 for every jitted
function, reports each trace and compile with its reason and its seconds on the logger
"autograd_xla", at WARNING level so that Python's default logging configuration shows it
(as jax's jax_log_compiles does).
"""
import collections
import functools
import os
import re

import numpy as np
from autograd.tracer import box_types

from . import calls, tree
from .core import Aval, Graph, Var, prim_name
from .errors import ArgumentError, CompileError, JitError, ProgramTooLargeError, UnsupportedPrimitiveError
from .registry import LazyModule
from .signatures import PlainArgument

#: Imported at their first use here (a program's output shapes, its text, a compile error's
#: explanation): a job whose calls all run plainly imports neither.
hlo = LazyModule("autograd_xla.hlo")
lowering = LazyModule("autograd_xla.lowering")

#: The logger compile reports go to (logging, 2.7 ms to import with traceback and string, is
#: imported at the first report).
LOGGER = "autograd_xla"
#: Environment variable that turns the compile log on for functions that do not set `explain`.
LOG_ENV = "AUTOGRAD_XLA_LOG_COMPILES"
_OFF = ("", "0", "false", "no", "off")


def explaining(explain):
    """Whether a function with jit_ps's `explain` argument logs its traces and compiles;
    None follows $AUTOGRAD_XLA_LOG_COMPILES, read at each trace (so it can change at run time)."""
    if explain is None:
        return os.environ.get(LOG_ENV, "").strip().lower() not in _OFF
    return bool(explain)


def report(message):
    import logging
    logging.getLogger(LOGGER).warning(message)


def output_shapes(graph, out_tree, x64=True):
    """The traced outputs of `graph` (guards, appended last by tracing, left out) as core.Avals
    (shape and dtype; never weakly typed) in the function's output structure. A constant output is returned as lowering emits it, in
    its canonical dtype; x64=False narrows 64-bit dtypes as lowering then does (hlo.NARROW_64)."""
    narrow = {} if x64 else hlo.NARROW_64
    outs = graph.outvars[:len(graph.outvars) - len(graph.guards)]
    leaves = []
    for v in outs:
        shape, dtype = (v.aval.shape, v.aval.dtype) if isinstance(v, Var) else (np.shape(v), np.asarray(v).dtype)
        leaves.append(Aval(shape, narrow.get(dtype, dtype)))
    return leaves[0] if out_tree is tree.LEAF else tree.unflatten(out_tree, leaves)


class Lowered:
    """One signature of a jitted function, traced and lowered to StableHLO, not compiled.

    `graph`: the traced core.Graph (print it for a listing); `as_text()`: the StableHLO module
    text given to XLA; `compile()`: the Compiled executable (XLA compiles it now unless an
    identical program is already compiled)."""

    def __init__(self, name, graph, lowered, compile):
        self._name, self.graph, self._lowered, self._compile = name, graph, lowered, compile

    def as_text(self):
        return self._lowered.text

    def compile(self):
        return self._compile()

    def __repr__(self):
        return f"<Lowered {self._name}: {len(self.graph.eqns)} primitive calls>"


class Compiled:
    """One signature of a jitted function, compiled by XLA.

    Calling it runs this executable with jit_ps's argument conventions and results (the same
    values, containers and dtypes as the jitted function's call); arguments of another
    signature raise ArgumentError rather than compiling anew. `as_text()` is XLA's optimised
    HLO (after fusion: what autograd_xla.hlo_picture draws), `cost_analysis()` XLA's estimate
    of flops and bytes accessed, `memory_analysis()` the bytes of its buffer assignment."""

    def __init__(self, name, executable, call):
        self._name, self._executable, self._call = name, executable, call

    def __call__(self, *args, **kwargs):
        return self._call(args, kwargs)

    def as_text(self):
        return self._executable.optimized_hlo()

    def cost_analysis(self):
        return self._executable.cost_analysis()

    def memory_analysis(self):
        """Bytes of arguments, outputs, temporaries, aliased (donated) inputs and generated code,
        as XLA's buffer assignment gave them; NotImplementedError where the platform's client
        does not report them."""
        return self._executable.memory_analysis()

    def __repr__(self):
        return f"<Compiled {self._name}>"


def explain_compile_error(fn, error, graph, lowered, backend, x64):
    """XLA rejected a program: a translation rule emitted something invalid (the traced
    shapes were valid, or tracing would have raised numpy's error). Say which primitive and
    which line of the user's code, not the module text; keep XLA's words as attributes."""
    text = str(error)
    module_line = r'(?:^|[\s(])"?-"?:(\d+):\d+:? ?(?:error:)? ?([^\n]*)'
    platform = backend.platform
    found = re.search(module_line, text) or re.search(module_line, _unlocated_rejection(backend, graph, x64))
    first = found.group(2).strip() if found else text.split("\n", 1)[0][:300]
    eqn = equation_at_line(graph, int(found.group(1)), platform, x64) if found else None
    where = (f"\nThe operation was emitted for primitive '{prim_name(eqn.prim)}', traced from\n{eqn.source}"
             if eqn is not None else "")
    return CompileError(f"XLA rejected the program compiled for {fn!r}: {first}{where}\nThe traced shapes and "
                       "dtypes were valid, so this is a bug in a translation rule; please report it. XLA's full "
                       "message and the module text are in this error's .xla_message and .module_text.",
                       xla_message=text, module_text=lowered.text, primitive=eqn.prim if eqn is not None else None,
                       source=eqn.source if eqn is not None else None)


def _unlocated_rejection(backend, graph, x64):
    """XLA's message for `graph` lowered without source locations. With them XLA names the op it
    rejects by its user's line (kept in .xla_message), which equations share; without, by its
    line in the module text, which equation_at_line maps to one equation."""
    try:
        backend.compile(lowering.lower(graph, "probe", backend.platform, x64, locations=False).text)
    except CompileError as e:
        return str(e)
    return ""


def equation_at_line(graph, lineno, platform, x64):
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


# ----- a jitted function's stages, on request --------------------------------------------------
#: How far a cache entry has got (api.JittedFunction's entries).
TRACED, LOWERED, COMPILED = 1, 2, 3


class CacheStats:
    """Per-function counters. `traces` counts signatures traced; `compiles` counts XLA
    compilations of signatures' first programs (a trace whose program text matches one already
    compiled reuses it); `upgrades` counts the programs compiled later for signatures in use
    (tiering.Ladder), in `upgrade_seconds`;
    `persistent_hits` counts executables loaded from the on-disk cache instead (persistent_cache.py),
    in `persistent_load_seconds`; `host_to_device` / `device_to_host` count arrays moved by calls;
    `plain_tier_calls` counts calls run as plain autograd while their signature compiled in the
    background (tiered=True), or before, or for good, which `hits` does not count, and
    `numpy_tier_calls` those of them that ran the trace by numpy (numpy_tier.py); `plain_kept`
    counts the compiled signatures that run as plain autograd from then on, their plain calls
    measured faster (tiering.PlainStep); `fallbacks` counts signatures that run as plain
    autograd because they cannot compile, and calls that ran plainly instead of their
    compiled program (a guard refused them; a function that draws, differentiated from
    outside; numpy's error state raising on floating-point errors)."""

    FIELDS = ("hits", "traces", "compiles", "trace_seconds", "lower_seconds", "compile_seconds", "fallbacks",
              "evictions", "host_to_device", "device_to_host", "persistent_hits", "persistent_load_seconds",
              "plain_tier_calls", "numpy_tier_calls", "upgrades", "upgrade_seconds", "plain_kept")
    COUNTED = ("hits", "host_to_device", "device_to_host")  # kept by `counts`, in C for C++'s hits
    __slots__ = tuple(set(FIELDS) - set(COUNTED)) + ("counts",)

    def __init__(self):
        self.counts = calls.Counts()
        self.reset()

    def reset(self):
        """Every counter back to zero (the `counts` object stays: C++'s calls count into it)."""
        for k in self.FIELDS:
            setattr(self, k, 0.0 if k.endswith("seconds") else 0)

    hits, host_to_device, device_to_host = (
        property(lambda self, k=k: getattr(self.counts, k), lambda self, value, k=k: setattr(self.counts, k, value))
        for k in COUNTED)

    def as_dict(self):
        return {k: getattr(self, k) for k in self.FIELDS}

    def __repr__(self):
        return "CacheStats(" + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                         for k, v in self.as_dict().items()) + ")"


class Entry:
    """One signature of api.JittedFunction: traced (graph), then lowered, then compiled
    (`stage`), each when asked for."""

    __slots__ = ("executable", "out_tree", "graph", "lowered", "fallback_cause", "reason", "guards", "draws",
                 "static_leaves", "impure", "stage", "donated", "dynamic", "background", "fastpath", "ladder", "options",
                 "variant", "previous", "following", "flat", "direct", "seconds", "on_device", "replay", "vjps",
                 "reached", "autograd_out", "reverse")

    def __init__(self, out_tree, graph, draws=(), static_leaves=(), impure=False, dynamic=()):
        self.out_tree, self.graph = out_tree, graph
        self.executable = self.lowered = None
        self.stage = TRACED if graph is not None else COMPILED  # a plain-autograd entry has nothing to do
        self.fallback_cause = None                  # see api._fallback_entry
        self.reason = None                          # a plain-autograd entry's: why, in one line (kept)
        self.guards = graph.guards if graph is not None else []
        self.draws = list(draws)                    # numpy.random calls replayed on every call (impurity.py)
        self.static_leaves = frozenset(static_leaves)  # leaf indices traced as static values
        self.dynamic = list(dynamic)                # leaf index of each graph input
        self.donated = frozenset()                  # leaf indices whose buffers the executable may reuse
        self.impure = impure or bool(self.draws)    # calls on boxes: autodiff.drawing_call
        self.background = None                      # a background.Job compiling it (tiered=True)
        self.fastpath = None                        # C++'s (dispatch.fastpath) once asked for; False: none
        self.on_device = (None, {})                 # (fastpath, its like for calls of DeviceArrays: fastpaths._moving)
        self.ladder = None                          # the faster programs it may move to (tiering.Ladder)
        self.options = None                         # the CompileOptions its executable was compiled with
        self.variant = None                         # the next program in its guarded signature's ring (api._refused)
        self.previous = None                        # in a ring: the program that ran the call before its last one
        self.following = {}                         # in a ring: previous -> the program that ran the call after (api._took)
        self.flat = False                           # its leaves are numpy arrays and Python numbers, in tuples and lists: C++ may take its calls
        self.direct = None                          # the program C++ runs, where not `executable` (api._direct)
        self.seconds = 0.0                          # what making it has cost so far: trace, lowering, compile
        self.replay = None                          # its graph run by numpy (numpy_tier.Replay) once asked for; False: none
        self.vjps = None                            # its calls on boxes by numpy, made while held (autodiff.HeldVJP per boxed leaves)
        self.reached = {}                           # boxed leaf indices -> output leaves computed from them (autodiff._reached)
        self.autograd_out = False                   # its output is a container an autograd primitive returned (autodiff.call)
        self.reverse = {}                           # boxed leaf indices -> autodiff.Reverse (its calls on reverse-mode boxes)

    @property
    def python_fallback(self):
        return self.graph is None

    def compiling(self):
        """Whether XLA is compiling it in the background (its calls meanwhile run plainly)."""
        return self.background is not None and self.background.running()

    def ready(self):
        """Whether its calls run its program: compiled (a plain-autograd entry is not)."""
        return self.stage >= COMPILED and self.graph is not None


class Introspection:
    """The introspection and ahead-of-time methods of api.JittedFunction, which it inherits:
    each takes a call's arguments, finds their signature's entry and takes it as far as it
    needs (through the jitted function's own `_split`, `_lookup`, `_advance` and `_execute`)."""

    def _entry_for(self, args, kwargs, stage):
        """(key, entry) of these arguments' signature, taken to `stage`, for introspection."""
        spec, leaves = self._split(args, kwargs)
        if any(type(x) in box_types for x in leaves):
            raise TypeError("introspection takes concrete arguments, not autograd boxes")
        entry = self._lookup(spec, leaves, count=False, stage=stage)
        if entry.python_fallback:
            no_program(self, entry)
        return self._key(spec, leaves), entry

    def _traced_entry(self, *args):
        """The cache entry of these positional arguments' signature, traced (never compiled):
        its graph, the leaves it takes (`dynamic`), those it made static (autodiff.HeldVJP)."""
        return self._entry_for(args, {}, TRACED)[1]

    def _compiling_entry(self, *args):
        """The cache entry of these positional arguments' signature, handed to XLA now whatever
        tiering's plain budget says (compiled in the background where tiering compiles there):
        a held function's VJP, once the function's own program is compiled (autodiff.HeldVJP)."""
        spec, leaves = self._split(args, {})
        return self._compile(self._key(spec, leaves), spec, leaves)

    def graph(self, *args, **kwargs):
        """The traced primitive graph for these arguments (print it for a listing). Traces,
        never compiles; the trace is kept for the first call with this signature."""
        return self._entry_for(args, kwargs, TRACED)[1].graph

    def stablehlo(self, *args, **kwargs):
        """The StableHLO module text given to XLA for these arguments (not compiled)."""
        return self.lower(*args, **kwargs).as_text()

    def lower(self, *args, **kwargs):
        """This signature traced and lowered, not compiled: an aot.Lowered, whose `.graph` is
        the traced graph, `.as_text()` the StableHLO text and `.compile()` an aot.Compiled."""
        key, entry = self._entry_for(args, kwargs, LOWERED)
        return Lowered(repr(self), entry.graph, entry.lowered, functools.partial(self._compiled, key, entry))

    def _compiled(self, key, entry):
        if entry.background is not None:
            entry.background.done.wait()  # a call handed its compile to the compile thread: that one, not a second
        with self._lock:
            entry = self._advance(key, entry, COMPILED) if entry.stage < COMPILED else entry
        if entry.python_fallback:
            no_program(self, entry)
        return Compiled(repr(self), entry.executable, functools.partial(self._call_compiled, key, entry))

    def _call_compiled(self, key, entry, args, kwargs):
        """A call of aot.Compiled: jf's call, on exactly the executable compiled for `key`."""
        spec, leaves = self._split(args, kwargs)
        if any(type(x) in box_types for x in leaves):
            raise TypeError("a Compiled function takes concrete arguments; differentiate the jitted function instead")
        try:
            new = self._key(spec, leaves)
        except PlainArgument as e:
            raise ArgumentError(f"{self!r} compiled ahead of time cannot take these arguments: {e}") from None
        if new != key:
            raise ArgumentError(f"{self!r} was compiled ahead of time for other arguments: these differ in "
                                f"{self._change(key, new)}. Call the jitted function, or lower these anew.")
        return self._execute(entry, spec, leaves)

    def optimized_hlo(self, *args, **kwargs):
        """XLA's optimised HLO for these arguments: shows what was fused. Its ops' source lines
        are those of the first trace of this program (hlo.without_source_lines)."""
        return self.lower(*args, **kwargs).compile().as_text()

    def cost_analysis(self, *args, **kwargs):
        """XLA's cost estimate of one call with these arguments: {"flops", "transcendentals",
        "bytes accessed"} (backend.COST_KEYS says what each counts)."""
        return self.lower(*args, **kwargs).compile().cost_analysis()

    def _eval_shape(self, args, kwargs):
        _, entry = self._entry_for(args, kwargs, TRACED)
        backend = self._backend()  # (results computed in 32 bits come back 64-bit unless kept on the device)
        return output_shapes(entry.graph, entry.out_tree,
                             self._x64(backend) or (self._widens(backend) and not self.keep_on_device))


def no_program(jitted, entry):
    """Raise what introspection of a signature that runs as plain autograd finds: the error of
    the user's function itself (a NameError, numpy's ValueError: raised while tracing, as a call
    raises it; kept while no plain run has succeeded), else an UnsupportedPrimitiveError saying
    what stopped compiling it."""
    cause = entry.fallback_cause
    if cause is not None and not isinstance(cause, JitError):
        raise cause  # (no note added: a later call's plain run copies the cause's notes onto its own error)
    why = f" ({entry.reason})" if entry.reason else ""
    raise UnsupportedPrimitiveError(f"{jitted!r} runs as plain autograd for these arguments{why}, so there is no "
                                    "compiled program to show; jit_ps(f, fallback='error') raises the cause")


def check_size(graph, lowered, max_program):
    """Programs beyond `max_program` (calls, bytes: jit_ps's bound) are not given to XLA (its
    compile could take the machine)."""
    max_eqns, max_bytes = max_program
    n, size = len(graph.eqns), len(lowered.text)
    if n > max_eqns or size > max_bytes:
        raise ProgramTooLargeError(
            f"the traced program is too large to compile: {n:,} primitive calls (bound {max_eqns:,}) and "
            f"{size / 2**20:.1f} MiB of StableHLO (bound {max_bytes / 2**20:.0f} MiB), mostly from "
            f"{busiest_lines(graph)}. A Python loop over traced values is unrolled at trace time: written "
            "with autograd_xla.scan or fori_loop its body is compiled once. jit_ps(f, max_program=(calls, "
            "bytes)) moves the bound.")


def large_program(graph, size=0):
    """What a huge program is, and which lines made it huge: its primitive calls once traced,
    its StableHLO (`size` bytes, 0: not said) once lowered; and what to do about it."""
    text = f" and {size / 2**20:.1f} MiB of StableHLO" if size else ""
    return (f"a program of {len(graph.eqns):,} primitive calls{text} ({busiest_lines(graph)}). XLA's compile time "
            "grows much faster than the program: tens of seconds from a few thousand calls, minutes and gigabytes "
            "from tens of thousands. A Python loop over traced values is unrolled at trace time, and rolled back "
            "into a loop only where its steps repeat exactly; written with autograd_xla.scan or fori_loop its body "
            "is compiled once.")


def busiest_lines(graph):
    """The three user's lines that made the most of a graph's primitive calls, with their counts."""
    lines = collections.Counter((e.source.filename, e.source.lineno) for e in graph.eqns if e.source)
    return "; ".join(f"{c:,} from {f}:{ln}" for (f, ln), c in lines.most_common(3))
