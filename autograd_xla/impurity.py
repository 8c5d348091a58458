"""Effects inside jitted functions, never frozen: random numbers drawn afresh on every call,
and printed values.

Plain autograd runs the function on every call, so `np.random.randn(3)` inside it draws
new numbers each time. A compiled function runs only the XLA program; a draw made while
tracing would become a constant, the same "noise" forever. Two mechanisms prevent that:

* **Host-drawn inputs.** Calls of numpy.random's module functions (through
  `autograd.numpy.random` or `numpy.random` itself) that run on numpy's global
  RandomState are intercepted while tracing: the call is recorded and a new graph input
  stands for its result. Every call of the compiled function replays the recorded calls
  on the host, in the same order, against the same global state, and passes the results
  in. So the numbers, and the state sequence, are exactly what plain autograd produces.
  The trace itself does not touch the global state: result shapes come from running the
  call on a scratch copy of it.

* **Stand-ins.** Methods of a numpy `RandomState` or `Generator` are C code and cannot be
  patched, but the generator object itself can be swapped where the function holds it (a
  closure cell, its globals, a module or instance attribute) for a `GeneratorStandIn`
  whose draws are recorded and replayed the same way, on the real generator.

* **Detection.** Draws that cannot be intercepted (a `random.Random`, a numpy generator
  held where it cannot be swapped, or a numpy.random function imported by name before
  jit_ps could see it) are detected: the states of the generators
  the function can reach (its globals, closure, defaults, bound object and static
  arguments, transitively through the functions they reference; plus numpy's and Python's
  global generators) are saved before tracing and compared after. If one moved, its state
  is restored and the signature is not compiled: it raises `ImpureFunctionError`, which
  `jit_ps` turns into running plain autograd (one warning) or, with fallback="error",
  raises. Plain autograd then draws exactly the numbers it always would.

Printing is the other such effect: compiled, a print would run once, while tracing, and show
a placeholder. builtins.print, while a trace runs, is `traced_print`, which raises
ImpureFunctionError where it would show a traced value (so do a log record that would,
`traced_log`, and formatting one, f"{x:.3f}": tracing.Tracer.__format__): the function then
runs plainly, printing what plain autograd prints at every call. A print of other values
prints once, while tracing.
"""
import builtins
import copy
import functools
import logging
import random as _pyrandom
import re
import sys
import threading
import types

import numpy as np
from autograd.tracer import box_types, getval

from . import registry, tracing
from .core import Aval
from .errors import ImpureFunctionError, library_file, shown_as_text, user_frame
from .hlo import supported

_GLOBAL = np.random.mtrand._rand

#: numpy.random functions that only change the global state (replayed, no result).
_EFFECTS = {"seed"}
#: numpy.random functions (and generator methods) that cannot be replayed from a recording.
_UNREPLAYABLE = {"get_state", "set_state", "shuffle", "bytes", "set_bit_generator", "get_bit_generator", "spawn",
                 "__getstate__", "__setstate__", "__reduce__"}
#: module aliases of RandomState methods.
_ALIASES = {"ranf": "random_sample", "sample": "random_sample"}


def _global_functions():
    """name -> callable of every numpy.random module function acting on the global state."""
    out = {}
    for name, obj in vars(np.random).items():
        if name.startswith("_") or not callable(obj) or isinstance(obj, type):
            continue
        if getattr(obj, "__self__", None) is _GLOBAL or name in _EFFECTS or name in _ALIASES \
                or name in ("set_bit_generator", "get_bit_generator"):
            out[name] = obj
    return out


GLOBAL_FUNCTIONS = _global_functions()


class DrawName(str):
    """The graph-input name of a host-drawn value; tracing recognises it by `random_draw`."""

    random_draw = True


class Draw:
    """One recorded call of a numpy.random function, replayed on every call."""

    __slots__ = ("fn", "name", "args", "kwargs", "returns", "source")

    def __init__(self, fn, name, args, kwargs, returns, source):
        self.fn, self.name, self.args, self.kwargs = fn, name, args, kwargs
        self.returns, self.source = returns, source

    def __repr__(self):
        return f"Draw(numpy.random.{self.name}{_call_text(self.args, self.kwargs)})"


def _call_text(args, kwargs):
    parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
    return "(" + ", ".join(parts) + ")"


def _short(v):
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


# ----- recording while tracing ---------------------------------------------------------------
class _Local(threading.local):
    def __init__(self):
        self.recording = None  # list of Draw for the jitted function being traced on this thread
        self.scratch = {}      # id(generator) -> a copy of it, drawn from to learn result shapes
        self.given = None      # [values, how many taken]: what the draws of this thread's traces return (`given`)


_local = _Local()


class recording:
    """Collects the host draws of one trace (api wraps each trace of a jitted function)."""

    def __enter__(self):
        self._saved = (_local.recording, _local.scratch)
        _local.recording, _local.scratch = [], {}
        return _local.recording

    def __exit__(self, *exc):
        _local.recording, _local.scratch = self._saved
        return False


def _has_traced(obj):
    t = type(obj)
    if t is tracing.Tracer or t in box_types:
        return True
    if t in (list, tuple):
        return any(_has_traced(x) for x in obj)
    if t is dict:
        return any(_has_traced(x) for x in obj.values())
    return False


def _first_tracer(obj):
    t = type(obj)
    if t is tracing.Tracer:
        return obj
    items = obj if t in (list, tuple) else obj.values() if t is dict else ()
    for x in items:
        found = _first_tracer(x)
        if found is not None:
            return found
    return None


def _refuse(call, why, source):
    where = f" at\n{source}" if source else ""
    return ImpureFunctionError(
        f"{call} is called{where}\n{why}, so it cannot be replayed on each call of the compiled "
        "function. Draw the noise outside the function and pass it in as an argument (e.g. "
        "`noise = np.random.randn(n, d); f(params, noise)`).", primitive=call, source=source)


def record_draw(fn, name, args, kwargs, generator=None, label=None):
    """Stand-in for a numpy.random call while tracing: a new graph input, drawn per call.
    `generator` is the RandomState or Generator drawn from (None: numpy's global one) and
    `label` how the function reaches it; `fn` is what replays the call on it."""
    trace = tracing.current_trace()
    source = user_frame(3)
    label = label or "numpy.random"
    if name in _UNREPLAYABLE:
        raise _refuse(f"{label}.{name}", "inside a jitted function (it reads, sets or mutates state that a "
                      "recording cannot reproduce)", source)
    if _has_traced((args, kwargs)):
        tracer = _first_tracer((args, kwargs))
        if tracer is not None:  # a Python scalar argument (a size, a bound) can become static
            err = tracing.concretization_error(tracer, f"{label}.{name}'s argument")
            if err.static_candidates:
                raise err
        raise _refuse(f"{label}.{name}", "with traced (or differentiated) arguments", source)
    if trace.parent is not None:
        raise _refuse(f"{label}.{name}", "inside a structured control-flow body (it would draw once, not once per "
                      "iteration)", source)
    if _local.recording is None:
        raise _refuse(f"{label}.{name}", "while tracing outside jit_ps (nothing would replay it)", source)
    # result shapes come from the same call on a scratch copy: the real state is not touched
    generator = _GLOBAL if generator is None else generator
    scratch = _local.scratch.get(id(generator))
    if scratch is None:
        scratch = _local.scratch[id(generator)] = copy.deepcopy(generator)
    method = getattr(scratch, _ALIASES.get(name, name))
    if name in _EFFECTS:
        method(*args, **kwargs)
        if _local.given is None:  # (given: made on the host, with the draws)
            _local.recording.append(Draw(fn, name, args, kwargs, False, source))
        return None
    sample = method(*args, **kwargs)
    aval = _aval_of_sample(sample)
    if aval is None:
        raise _refuse(f"{label}.{name}", f"returning {type(sample).__name__} (dtype {getattr(sample, 'dtype', '?')}), "
                      "which XLA cannot hold,", source)
    if _local.given is not None:
        return _take_given(aval, f"{label}.{name}{_call_text(args, kwargs)}", source)
    _local.recording.append(Draw(fn, name, args, kwargs, True, source))
    line = f" at line {source.lineno}" if source else ""
    return trace.new_arg(aval, DrawName(f"{label}.{name}{_call_text(args, kwargs)}{line}"))


class given:
    """Within it, the draws of this thread's traces return `values` in order (the values a call
    drew on the host) instead of becoming inputs of their own: a function's derivatives traced
    so compute at the very numbers its forward pass drew (autodiff.drawing_call). A trace
    whose draws differ from them in number, shape or dtype raises ImpureFunctionError."""

    def __init__(self, values):
        self.values = list(values)

    def __enter__(self):
        self._saved, _local.given = _local.given, [self.values, 0]
        return self

    def __exit__(self, exc_type, *exc):
        taken, _local.given = _local.given[1], self._saved
        if exc_type is None and taken != len(self.values):
            raise ImpureFunctionError(f"the function drew {taken} random values where its call drew "
                                      f"{len(self.values)}: its draws cannot be handed to its derivative")
        return False


def _take_given(aval, call, source):
    """The next of the values `given` holds, where it is of the draw's shape and dtype."""
    values, taken = _local.given
    value = values[taken] if taken < len(values) else None
    dtype = value.dtype if hasattr(value, "dtype") else np.result_type(value)  # (a Python float's: float64)
    if value is None or np.shape(value) != aval.shape or dtype != aval.dtype:
        raise ImpureFunctionError(f"{call} drew other values than its call drew"
                                  + (f", at\n{source}" if source else "") + ": its draws cannot be handed to its "
                                  "derivative", primitive=call, source=source)
    _local.given[1] += 1
    return value


def generators(draws):
    """The generators `draws` (Draws) replay on: numpy's global one, the RandomStates and
    Generators stood in for."""
    out = []
    for d in draws:
        gen = getattr(d.fn, "__self__", None)
        gen = gen if isinstance(gen, _NUMPY_GENERATORS) else _GLOBAL
        if not any(g is gen for g in out):
            out.append(gen)
    return out


def states(gens):
    """[(generator, its state)] of `gens`, for set_states."""
    return [(g, _state_of(g)) for g in gens]


def set_states(saved):
    for gen, state in saved:
        _set_state(gen, state)


def _aval_of_sample(sample):
    t = type(sample)
    if t is float:
        return Aval((), np.dtype(np.float64), weak_type=True)
    if t is int:
        return Aval((), np.dtype(np.int64), weak_type=True)
    if t is bool:
        return Aval((), np.dtype(np.bool_), weak_type=True)
    if isinstance(sample, (np.ndarray, np.generic)) and supported(sample.dtype):
        return Aval(np.shape(sample), sample.dtype)
    return None


def importing(frame):
    """Whether `frame` (a draw's caller) runs in a module's import begun inside the trace: a
    library imported for the first time while a trace runs draws once, as it would plainly,
    not at every call of the program. Where jax is installed, jaxlib imports it at its first
    copy of a device array to the host (a trace that reads a DeviceArray argument's value),
    and that import drew `numpy.random.rand(5)`: recorded, the program drew it at every call,
    and its signature lost C++'s call path (a TPU's MLP step 0.93 ms a call, 0.78 with it). An
    import around the trace (a module whose top level calls the jitted function) is not one:
    the walk stops at the trace's own frame."""
    while frame is not None:
        code = frame.f_code
        if code is _TRACE_CODE:
            return False
        if code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


_TRACE_CODE = tracing._trace_function.__code__  # the frame a jitted function's trace calls it from


def interceptor(fn, name):
    """What numpy.random.<name> (and autograd.numpy.random.<name>) is while a trace is active."""
    def intercepted(*args, **kwargs):
        if tracing.current_trace() is None or importing(sys._getframe(1)):  # not tracing, or a module's import
            return fn(*args, **kwargs)
        return record_draw(fn, name, args, kwargs)

    intercepted.__name__ = name
    intercepted.__wrapped_raw__ = fn
    return intercepted


def replay(draws):
    """Run the recorded calls on the host, in order; the values of those that return one."""
    out = []
    for d in draws:
        value = d.fn(*d.args, **d.kwargs)
        if d.returns:
            out.append(value)
    return out


def _fresh_generator_guard(fn):
    """numpy.random.default_rng() without a seed, while tracing: a generator seeded from OS
    entropy, new on every call of plain autograd; compiled, its draws would be frozen."""
    def default_rng(seed=None):
        if seed is None and tracing.current_trace() is not None and not importing(sys._getframe(1)):
            source = user_frame(2)
            raise ImpureFunctionError(
                "numpy.random.default_rng() without a seed is called inside the function" +
                (f" at\n{source}\n" if source else "; ") + "it draws from fresh OS entropy on every call, so its "
                "numbers cannot be compiled. Create the generator outside and pass its draws in as arguments.",
                primitive="numpy.random.default_rng()", source=source)
        return fn(seed)

    default_rng.__wrapped_raw__ = fn
    return default_rng


def _install():
    interceptors = {name: interceptor(fn, name) for name, fn in GLOBAL_FUNCTIONS.items()}
    interceptors["default_rng"] = _fresh_generator_guard(np.random.default_rng)
    for name, wrapped in interceptors.items():
        fn = getattr(np.random, name)
        registry.register_module_patch(np.random, name, wrapped)
        registry.register_interceptor(fn, wrapped)  # autograd.numpy.random's primitives wrap `fn`
    return interceptors


_INTERCEPTORS = _install()


# ----- detecting draws that cannot be intercepted --------------------------------------------
_RNG_TYPES = (np.random.RandomState, np.random.Generator, np.random.BitGenerator, _pyrandom.Random)
_MAX_CONTAINER = 256
_MAX_DEPTH = 8


def _state_of(obj):
    if isinstance(obj, np.random.RandomState):
        return obj.get_state(legacy=False)
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator.state
    if isinstance(obj, np.random.BitGenerator):
        return obj.state
    if isinstance(obj, _pyrandom.SystemRandom):
        return None  # no state: draws from the OS, cannot be checked
    return obj.getstate()


def _set_state(obj, state):
    if isinstance(obj, np.random.RandomState):
        obj.set_state(state)
    elif isinstance(obj, np.random.Generator):
        obj.bit_generator.state = state
    elif isinstance(obj, np.random.BitGenerator):
        obj.state = state
    else:
        obj.setstate(state)


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        try:  # in C: Python's random state is 625 ints (one by one: 0.2 ms a trace)
            if a == b:
                return True
        except ValueError:  # an array inside, of many elements
            pass
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and bool(np.array_equal(a, b))
    return a == b


def _code_names(code):
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _code_names(c)
    return names


def reachable_generators(roots):
    """[(generator, description)] of the RNG objects reachable from `roots` (pairs of
    (object, description)): closures, defaults, the globals and module attributes the code
    names, bound objects, partials, small containers and instance attributes."""
    found, seen = [], set()
    stack = [(obj, desc, 0, None) for obj, desc in roots]
    holders = {}  # id(generator) -> [(dict or closure cell, key)]: where the function holds it
    while stack:
        obj, desc, depth, names, *held = stack.pop()
        if held and isinstance(obj, _NUMPY_GENERATORS):
            holders.setdefault(id(obj), []).append(held[0])
        if id(obj) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(obj))
        try:
            _visit(obj, desc, depth, names, stack.append, found, holders)
        except Exception:  # an object that resists inspection is not looked into
            pass
    return found


def _wrapped(obj):
    """`obj.__wrapped__` of a wrapper object that sets it (functools.update_wrapper), else None."""
    if isinstance(obj, type):
        return None
    try:
        return object.__getattribute__(obj, "__dict__").get("__wrapped__")
    except AttributeError:
        return None


def _visit(obj, desc, depth, names, push, found, holders):
    """One step of reachable_generators: record `obj` (with the list of places that hold it,
    which later steps may extend) or push what it refers to, with where a dict or closure
    cell holds it."""
    t = type(obj)
    if isinstance(obj, _RNG_TYPES):
        found.append((obj, desc, holders.setdefault(id(obj), [])))
        return
    if t is np.ndarray or t in (int, float, complex, bool, str, bytes) or obj is None:
        return
    if t is types.FunctionType:
        code = obj.__code__
        qual = getattr(obj, "__qualname__", "?")
        names_used = None if library_file(code.co_filename) else _code_names(code)
        for var, cell in zip(code.co_freevars, obj.__closure__ or ()):
            try:
                push((cell.cell_contents, f"closure variable '{var}' of {qual}", depth + 1, names_used, (cell, None)))
            except ValueError:  # an empty cell
                pass
        for d in (obj.__defaults__ or ()) + tuple((obj.__kwdefaults__ or {}).values()):
            push((d, f"a default argument of {qual}", depth + 1, None))
        if names_used is not None:
            g = obj.__globals__
            for n in names_used:
                if n in g:
                    push((g[n], f"global '{n}' of module {g.get('__name__', '?')}", depth + 1, names_used, (g, n)))
    elif t is types.MethodType:
        push((obj.__func__, desc, depth + 1, None))
        push((obj.__self__, f"the object {obj.__func__.__name__} is bound to", depth + 1, None))
    elif isinstance(obj, functools.partial):
        push((obj.func, desc, depth + 1, None))
        for a in tuple(obj.args) + tuple(obj.keywords.values()):
            push((a, f"an argument bound by functools.partial ({desc})", depth + 1, None))
    elif t is types.ModuleType:
        # the user's own modules (mymodule.rng); the global generators of numpy and `random`
        # are always watched, and library modules are not walked (nor lazily imported from)
        if names and obj.__name__.partition(".")[0] not in sys.stdlib_module_names \
                and not library_file(getattr(obj, "__file__", None) or "<frozen>"):
            attrs = vars(obj)
            for n in names:
                if n in attrs:
                    push((attrs[n], f"attribute '{n}' of module {obj.__name__}", depth + 1, names, (attrs, n)))
    elif t in (list, tuple, set, frozenset):
        if len(obj) <= _MAX_CONTAINER:
            for x in obj:
                push((x, desc, depth + 1, None))
    elif t is dict:
        if len(obj) <= _MAX_CONTAINER:
            for k, x in obj.items():
                push((x, f"{desc}[{k!r}]", depth + 1, None))
    elif _wrapped(obj) is not None:  # a wrapper (a jitted function, functools.wraps): what it wraps
        push((_wrapped(obj), desc, depth + 1, None))
    elif not isinstance(obj, type) and t.__module__ not in ("builtins",):
        try:
            attrs = object.__getattribute__(obj, "__dict__")  # never the object's own __getattr__
        except AttributeError:
            attrs = {}
        if type(attrs) is dict and len(attrs) <= _MAX_CONTAINER:
            for k, x in attrs.items():
                push((x, f"attribute '{k}' of {desc}", depth + 1, None, (attrs, k)))
        call = getattr(t, "__call__", None)
        if isinstance(call, types.FunctionType):
            push((call, f"{t.__name__}.__call__", depth + 1, None))


# ----- replaying draws of the function's own generators --------------------------------------
_NUMPY_GENERATORS = (np.random.RandomState, np.random.Generator)


class GeneratorStandIn:
    """What a closure variable, global or attribute holding a numpy RandomState or Generator
    holds while its function is traced: its draws are recorded like numpy.random's module
    functions and replayed on the real generator at every call, so the compiled function
    draws the same numbers, in the same order, leaving the same state, as plain autograd
    (autograd's own examples draw from a closed-over `rs = npr.RandomState(0)`). Outside a
    trace on the calling thread, everything goes straight to the real generator."""

    __slots__ = ("_real", "_label")

    def __init__(self, real, label):
        object.__setattr__(self, "_real", real)
        object.__setattr__(self, "_label", label)

    def __getattr__(self, name):
        real = object.__getattribute__(self, "_real")
        attr = getattr(real, name)
        if tracing.current_trace() is None or not callable(attr) or (name.startswith("_") and
                                                                    name not in _UNREPLAYABLE):
            return attr
        label = object.__getattribute__(self, "_label")

        def draw(*args, **kwargs):
            if tracing.current_trace() is None:
                return attr(*args, **kwargs)
            return record_draw(attr, name, args, kwargs, real, label)
        return draw

    def __repr__(self):
        return repr(object.__getattribute__(self, "_real"))


class standing_in:
    """Puts GeneratorStandIns where `watch` found numpy generators held by a closure cell or a
    dict (globals, module or instance attributes), for the duration of one trace."""

    def __init__(self, watch):
        self.swaps = []
        for gen, desc, holders in watch.found:
            if isinstance(gen, _NUMPY_GENERATORS):
                stand_in = GeneratorStandIn(gen, f"{type(gen).__name__} ({desc})")
                self.swaps += [(holder, key, gen, stand_in) for holder, key in holders]

    def __enter__(self):
        for holder, key, gen, stand_in in self.swaps:
            _put(holder, key, gen, stand_in)
        return self

    def __exit__(self, *exc):
        for holder, key, gen, stand_in in reversed(self.swaps):
            _put(holder, key, stand_in, gen)
        return False


def _put(holder, key, old, new):
    """Replace `old` by `new` where it is held, unless something else was put there meanwhile."""
    if key is None:
        if holder.cell_contents is old:
            holder.cell_contents = new
    elif holder.get(key) is old:
        holder[key] = new


class Watch:
    """Saves the state of every generator `fun` can reach; `moved()` says which changed,
    `restore()` puts those back and returns them (their descriptions)."""

    def __init__(self, fun, extra_roots=()):
        gens = [(_GLOBAL, "numpy.random's global RandomState (through a function imported by name, e.g. "
                          "`from numpy.random import randn`)"),
                (_pyrandom._inst, "the global generator of Python's `random` module")]
        self.found = reachable_generators([(fun, getattr(fun, "__qualname__", repr(fun)))] + list(extra_roots))
        gens += [(g, desc) for g, desc, _ in self.found]
        self.saved = []
        ids = set()
        for g, desc in gens:
            if id(g) in ids:
                continue
            ids.add(id(g))
            state = _state_of(g)
            if state is not None:
                self.saved.append((g, desc, state))

    def moved(self):
        """The generators whose state changed (g, description), left as they are."""
        return [(g, desc) for g, desc, state in self.saved if not _same(_state_of(g), state)]

    def restore(self):
        moved = []
        for g, desc, state in self.saved:
            if not _same(_state_of(g), state):
                _set_state(g, state)
                moved.append((g, desc))
        return moved


def moved_error(fun, moved):
    g, desc = moved[0]
    kind = type(g).__name__
    name = getattr(fun, "__name__", repr(fun))
    return ImpureFunctionError(
        f"{name} draws random numbers from a {kind} ({desc}); its state changed while tracing. Compiled, the "
        "numbers drawn at trace time would be frozen into the program, so this function is not compiled (its state "
        "was restored: plain autograd draws exactly what it always would). To compile it, draw the noise outside "
        "and pass it in as an argument (`noise = rs.randn(n, d); f(params, noise)`), or use numpy.random's module "
        "functions (np.random.randn), whose draws jit_ps replays on every call.",
        primitive=f"{kind} {desc}")


def concretized_draw_error(fun, error):
    """The ImpureFunctionError of a ConcretizationError `error` whose value came from random draws."""
    name = getattr(fun, "__name__", repr(fun))
    draws = ", ".join(error.random_draws)
    return ImpureFunctionError(
        f"{name} uses a random draw ({draws}) where a concrete value is needed (Python control flow, float(), an "
        "index or a size), which a compiled program cannot do with numbers drawn anew on each call:\n"
        f"{error.source or ''}\nTo compile it, draw the numbers outside and pass them in as arguments.",
        primitive=f"random draw used concretely: {draws}", source=error.source)


def global_state():
    return _GLOBAL.get_state(legacy=False)


def set_global_state(state):
    _GLOBAL.set_state(state)


# ----- printing and logging traced values ----------------------------------------------------
_PRINT = builtins.print
#: A traced value's text (Tracer.__repr__, which str(x) gives too), as a printed string holds it.
_TRACED_TEXT = re.compile(r"Traced<[a-z]+\d*\[[\d,]*\]~?>")  # (~: weakly typed, core.Aval.__str__)


def _shows_traced(obj):
    """Whether print shows a traced value in `obj`: a Tracer (in autograd's boxes, lists,
    tuples, dicts), or a string holding one's text ("loss " + str(x))."""
    t = type(obj)
    if t is str:
        return "Traced<" in obj and _TRACED_TEXT.search(obj) is not None
    if t in box_types:
        return _shows_traced(getval(obj))
    if t is tracing.Tracer:
        return True
    items = obj if t in (list, tuple) else obj.values() if t is dict else ()
    return any(_shows_traced(x) for x in items)


def traced_print(*args, **kwargs):
    """print while a trace runs: one that shows a traced value raises (its function runs
    plainly, printing the values at every call: errors.shown_as_text); another prints now,
    once, as the trace runs the function once."""
    if any(_shows_traced(a) for a in args):
        raise shown_as_text("print shows", user_frame(2))
    return _PRINT(*args, **kwargs)


registry.register_module_patch(builtins, "print", traced_print)

_LOG = logging.Logger._log


def traced_log(self, level, msg, args, *rest, **kwargs):
    """Logger._log while a trace runs (a record its logger's level lets through): as
    traced_print, for a message or arguments that would show a traced value."""
    if _shows_traced(msg) or _shows_traced(args):
        depth = 1
        while sys._getframe(depth).f_code.co_filename == logging.__file__:  # (logger.info, logging.info)
            depth += 1
        raise shown_as_text("a log record shows", user_frame(depth + 1))
    return _LOG(self, level, msg, args, *rest, **kwargs)


registry.register_module_patch(logging.Logger, "_log", traced_log)
