"""The primitive registry: one entry per primitive, holding every face it has.

A primitive is the raw function autograd wraps (`numpy.tanh`, `numpy.sum`,
`scipy.special.gammaln`, autograd's own helpers such as `dot_adjoint_0`), a numpy ufunc
method (`numpy.add.at`), or one of our own structural primitives (`core.setitem`, the
control-flow primitives). Entries are keyed by the raw function; passing autograd's
wrapper (`autograd.numpy.tanh`) works too. Each interpreter reads one face:

* `lowering(ctx, *args, **kwargs) -> Value(s)`, the *translation rule*: it receives the
  primitive's own call arguments with traced arrays replaced by `hlo.Value`s and builds
  its result with `ctx` (a `context.LoweringContext`). It is also the shape rule: the
  tracer runs it on a scratch context to learn the result's shapes and dtypes. The
  primitive stays one equation of the graph (lowering.py emits it).
* `trace(*args, **kwargs)`, the *trace rule*: a Python function of traced arrays made of
  calls that have rules themselves; the primitive dissolves into them while tracing. It
  suits functions whose numpy/scipy code cannot run on abstract values (they call
  `np.asarray`) but that are short compositions of other primitives.
* `metadata(*args, **kwargs)`: a numpy query answered from shapes and dtypes alone
  (`np.shape`, `np.result_type`), with no equation recorded.
* `replay(args, kwargs)`: the primitive applied differentiably when autograd boxes meet an
  equation of a graph being replayed (control_flow's derivatives of loops); without one,
  autograd's own wrapper of the raw function is used.
* `numpy(eqn, prepare) -> fn or None`: how the numpy tier (numpy_tier.py) runs an equation of
  a primitive that is no raw function numpy runs (scan_p: its body, step by step), as
  `fn(*eqn.args, **eqn.kwargs)`; `prepare(graph)` gives a sub-graph's run by numpy,
  `run(inputs) -> outputs` (its invars, then its captured values), or None where it has none.
* `interceptor`: what runs in place of the raw function inside autograd's wrapper while a
  trace is active (numpy.random's global-state functions become host-drawn inputs).
* `shape(*args, **kwargs) -> [Aval]`: the result types, for a primitive whose translation
  rule costs much to run (vmap's batch, whose rule lowers the example's whole graph): the
  tracer asks this instead of running the rule (lowering checks that the two agree).
* `type_key(args, keys) -> keys`: the keys of a call's operands under which the tracer
  remembers its result types, made coarser where the types do not depend on a value
  (`x[i]`: one key for every integer i in range of x's first axis), so that the rule does
  not run again for each value (a legacy loop's `xs[t]` reads each t once).
* `merge`: True for an elementwise primitive whose rule emits loops (scipy.special's
  incomplete gamma and beta functions, Bessel functions): lowering emits its calls that do
  not need each other's results as one call on their operands concatenated
  (`lowering.schedule`), so that XLA compiles its loops once.
* `batching(ctx, *args, **kwargs)`: the vmap rule, optional. Under vmap a primitive's
  translation rule runs on a `batching.BatchingContext`, which batches every builder op it
  emits, so most primitives need none; a batching rule replaces that for one primitive
  (one whose rule emits an op the context can only run per example).

A translation rule and a trace rule are two ways of recording one call: registering one
replaces the other. Besides entries the registry holds the ufunc-method factories (one
rule for `add.at`, `multiply.at`, ...) and the module patches: globals of autograd and
numpy that look at concrete data, swapped for traced equivalents while a trace is active.

Registrations may wait for a module (`when_imported`): the rules of scipy.special,
scipy.linalg, scipy.stats, scipy.integrate and autograd.scipy.signal are keyed by those
modules' functions, and importing the modules for them made up most of the time of
`import autograd_xla`. They are registered once the module has been imported by someone
else (a program can call its functions only then): the first look-up that finds nothing,
and any registration, first runs the registrations whose module has appeared since.

The package's own translation rules and compositions (rules/, compositions/, control_flow/,
...) are imported at the first trace, or the first registration or look-up made outside the
package (`builtin_rules`, `load_builtin`, `_builtin_first`), not with the package: a tiered job that only runs plainly never needs
them. They come in before anything else is registered, so that a user's rule registered
before the first trace still replaces the package's.

This module imports only `core`, so that every layer above can register and look up.
"""
import importlib
import sys
import threading

from .core import UfuncMethod


class Entry:
    """Every face of one primitive (see the module docstring); absent faces are None."""

    __slots__ = ("prim", "lowering", "trace", "metadata", "replay", "numpy", "interceptor", "batching", "shape",
                 "type_key", "merge")

    def __init__(self, prim):
        self.prim = prim
        self.lowering = self.trace = self.metadata = self.replay = self.numpy = self.interceptor = None
        self.batching = self.shape = None
        self.type_key = None
        self.merge = False

    def __repr__(self):
        faces = [f for f in self.__slots__[1:] if getattr(self, f) not in (None, False)]
        return f"<Entry {self.prim!r}: {', '.join(faces) or 'no faces'}>"


_ENTRIES = {}
_UFUNC_METHODS = {}  # method name -> factory(ufunc) -> translation rule, for any ufunc with a rule
MODULE_PATCHES = []  # (module or class, attribute, replacement), installed by tracing.intercepting


def key_of(prim):
    if getattr(prim, "_is_autograd_primitive", False):
        return prim.fun
    return prim


#: Counts the calls of `entry`, through which every registration changes an entry: lowering
#: keeps modules only for the rules of the same generation (lowering.lower)
generation = 0


def entry(prim):
    """The entry of `prim`, created if it has none (for a change: `generation` counts it)."""
    global generation
    run_waiting()  # this package's own registrations first: a later one replaces them
    generation += 1
    key = key_of(prim)
    found = _ENTRIES.get(key)
    if found is None:
        found = _ENTRIES[key] = Entry(key)
    return found


def lookup(prim):
    """The entry of `prim`, or None. A ufunc method gets one on first use from its
    method's factory, when the ufunc itself has a translation rule."""
    if _builtin_state != _LOADED:  # inline: a trace looks up every call it records
        _builtin_first(sys._getframe(1))
    found = _lookup(prim)
    if found is None and run_waiting():  # prim's module may have been imported since
        found = _lookup(prim)
    return found


def _lookup(prim):
    try:
        found = _ENTRIES.get(prim)
        if found is None:
            found = _ENTRIES.get(key_of(prim))
    except TypeError:  # unhashable
        return None
    if found is None and type(prim) is UfuncMethod:
        factory = _UFUNC_METHODS.get(prim.method)
        base = _ENTRIES.get(prim.ufunc)
        if factory is not None and base is not None and base.lowering is not None:
            fn = factory(prim.ufunc)
            if fn is not None:
                found = entry(prim)
                found.lowering = fn
    return found


def has_rule(prim):
    """Whether calls of `prim` can be recorded (a translation rule or a trace rule)."""
    found = lookup(prim)
    return found is not None and (found.lowering is not None or found.trace is not None)


def entries():
    """key -> Entry of every primitive registered so far."""
    _builtin_first(sys._getframe(1))
    run_waiting()
    return dict(_ENTRIES)


# ----- the package's own rules, imported at their first need ----------------------------------
_BUILTIN = []  # names of the package's modules whose import registers its own faces (rules, compositions)
_UNLOADED, _LOADING, _LOADED = 0, 1, 2
_PACKAGE = __name__.rpartition(".")[0] + "."
_builtin_state = _UNLOADED


def builtin_rules(*names):
    """Name the modules whose import registers the package's own faces: imported at the first
    trace, registration or look-up (see the module docstring), not with the package (a job that only runs plainly never
    needs them), and before anything a user registers, which then replaces them."""
    global _builtin_state
    with _waiting_lock:
        _BUILTIN.extend(names)
        if _builtin_state == _LOADED:
            _builtin_state = _UNLOADED


def load_builtin():
    """Import the modules named by builtin_rules, once; True if this call imported them. The
    registrations their import makes come back here (through entry) while _LOADING: they go on.
    Another thread waits on the lock until they are all in."""
    global _builtin_state
    if _builtin_state == _LOADED:
        return False
    with _waiting_lock:
        if _builtin_state != _UNLOADED:
            return False  # loaded, or being loaded by this thread (a module's own registration)
        _builtin_state = _LOADING
        try:
            while _BUILTIN:
                importlib.import_module(_BUILTIN.pop(0))
        finally:
            _builtin_state = _LOADED
    return True


def _builtin_first(caller):
    """Before a registration or look-up made by `caller` (a frame) outside this package:
    load_builtin, so that a registration replaces the package's own and a look-up finds them.
    The package's own, made while a module of it is imported, do not load them (they would
    import that very module, not yet complete); its traces load them (tracing.intercepting)."""
    if _builtin_state != _LOADED and not caller.f_globals.get("__name__", "").startswith(_PACKAGE):
        load_builtin()


# ----- registrations waiting for their module ------------------------------------------------
_WAITING = {}  # module name -> [register(module)], until the module is imported
_waiting_lock = threading.RLock()
_running = 0   # registrations of a module running now (in some thread)


class LazyModule:
    """The module `name`, imported when one of its attributes is first read: for code that
    calls a slow-to-import module's functions only once a program uses that module (the
    rules registered with when_imported), so that importing the code does not import it."""

    __slots__ = ("_name", "_module")

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self):
        return f"<module {self._name!r}, imported on first use>"


def when_imported(name):
    """Decorator: call `register(module)` once the module `name` is imported (at once if it
    is already). `register` registers faces of that module's own functions only: that is
    what makes a look-up of one of them that finds nothing the moment to run it."""
    def deco(register):
        with _waiting_lock:
            _WAITING.setdefault(name, []).append(register)
        _run_ready()
        return register
    return deco


_checked = -1  # len(sys.modules) when run_waiting last found no waiting module imported


def run_waiting():
    """Run the registrations whose module has been imported; True if some ran or were
    running (in another thread: this waits for them), so that a look-up is worth retrying."""
    global _checked
    if not _running:
        modules = len(sys.modules)
        if modules == _checked:
            return False  # nothing imported since: the common case (a look-up of autograd's own
            #               container primitives, which have no entry, misses once per call)
        if not any(name in sys.modules for name in tuple(_WAITING)):
            _checked = modules
            return False
    return _run_ready()


def _run_ready():
    global _running
    with _waiting_lock:
        ready = [(name, _WAITING.pop(name)) for name in tuple(_WAITING) if name in sys.modules]
        _running += 1
        try:
            for name, registers in ready:
                module = importlib.import_module(name)  # complete: waits for a thread still importing it
                for register in registers:
                    register(module)
        finally:
            _running -= 1
    return True


# ----- registering faces ---------------------------------------------------------------------
def register_translation_rule(primitive, rule):
    """Compile calls of `primitive` with `rule(ctx, *args, **kwargs) -> Value(s)`.

    `primitive` is a numpy/scipy function, an autograd primitive (its raw function is
    used), or any function you wrapped with `autograd.extend.primitive`. See
    `context.LoweringContext` for what `ctx` offers (StableHLO ops, numpy promotion,
    broadcasting and constants).
    """
    _builtin_first(sys._getframe(1))
    e = entry(primitive)
    e.lowering, e.trace = rule, None
    return rule


def register_trace_rule(primitive, impl):
    """Trace calls of `primitive` through `impl(*args, **kwargs)`, a function of traced
    arrays built from primitives that have rules."""
    _builtin_first(sys._getframe(1))
    e = entry(primitive)
    e.trace, e.lowering = impl, None
    return impl


def register_batching_rule(primitive, rule):
    """Batch calls of `primitive` under vmap with `rule(ctx, *args, **kwargs)`: a translation
    rule whose `ctx` is a `batching.BatchingContext`, where arguments that vary across the
    batch are `BatchedValue`s (`ctx.batched(v)`; `v.phys` holds the whole batch, batch axis
    first, in `ctx.parent`'s terms) and results are made with `ctx.wrap(phys)` or returned as
    plain Values. Without one the translation rule is used, batched op by op (ops that have
    no batching of their own then run once per example, with a FallbackWarning)."""
    _builtin_first(sys._getframe(1))
    entry(primitive).batching = rule
    return rule


def register_metadata_rule(primitive, fn):
    _builtin_first(sys._getframe(1))
    entry(primitive).metadata = fn
    return fn


def register_replay(primitive, fn):
    _builtin_first(sys._getframe(1))
    entry(primitive).replay = fn
    return fn


def register_numpy(primitive, fn):
    _builtin_first(sys._getframe(1))
    entry(primitive).numpy = fn
    return fn


def register_interceptor(primitive, fn):
    global interceptors_registered
    _builtin_first(sys._getframe(1))
    entry(primitive).interceptor = fn
    interceptors_registered += 1  # (tracing gives wrappers found before it their new interceptor)
    return fn


interceptors_registered = 0  # register_interceptor's calls so far


def register_module_patch(owner, name, replacement):
    """Swap `owner.name` for `replacement` while a trace is active (one `owner` lacks is added
    for that time)."""
    _builtin_first(sys._getframe(1))
    MODULE_PATCHES.append((owner, name, replacement))
    return replacement


def lowers(*prims):
    """Decorator: the function is the translation rule of every primitive given."""
    def deco(fn):
        _builtin_first(sys._getframe(1))
        for p in prims:
            register_translation_rule(p, fn)
        return fn
    return deco


def traces(*prims):
    """Decorator: the function is the trace rule of every primitive given."""
    def deco(fn):
        _builtin_first(sys._getframe(1))
        for p in prims:
            register_trace_rule(p, fn)
        return fn
    return deco


def ufunc_method_rule(method):
    """Decorator for a factory `f(ufunc) -> rule` serving `ufunc.<method>` of every ufunc."""
    def deco(factory):
        _UFUNC_METHODS[method] = factory
        return factory
    return deco
