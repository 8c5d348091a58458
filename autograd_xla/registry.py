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
* `interceptor`: what runs in place of the raw function inside autograd's wrapper while a
  trace is active (numpy.random's global-state functions become host-drawn inputs).
* `batching`: the vmap rule (none yet).

A translation rule and a trace rule are two ways of recording one call: registering one
replaces the other. Besides entries the registry holds the ufunc-method factories (one
rule for `add.at`, `multiply.at`, ...) and the module patches: globals of autograd and
numpy that look at concrete data, swapped for traced equivalents while a trace is active.

This module imports only `core`, so that every layer above can register and look up.
"""
from .core import UfuncMethod


class Entry:
    """Every face of one primitive (see the module docstring); absent faces are None."""

    __slots__ = ("prim", "lowering", "trace", "metadata", "replay", "interceptor", "batching")

    def __init__(self, prim):
        self.prim = prim
        self.lowering = self.trace = self.metadata = self.replay = self.interceptor = self.batching = None

    def __repr__(self):
        faces = [f for f in self.__slots__[1:] if getattr(self, f) is not None]
        return f"<Entry {self.prim!r}: {', '.join(faces) or 'no faces'}>"


_ENTRIES = {}
_UFUNC_METHODS = {}  # method name -> factory(ufunc) -> translation rule, for any ufunc with a rule
MODULE_PATCHES = []  # (module or class, attribute, replacement), installed by tracing.intercepting


def key_of(prim):
    if getattr(prim, "_is_autograd_primitive", False):
        return prim.fun
    return prim


def entry(prim):
    """The entry of `prim`, created if it has none."""
    key = key_of(prim)
    found = _ENTRIES.get(key)
    if found is None:
        found = _ENTRIES[key] = Entry(key)
    return found


def lookup(prim):
    """The entry of `prim`, or None. A ufunc method gets one on first use from its
    method's factory, when the ufunc itself has a translation rule."""
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
    return dict(_ENTRIES)


# ----- registering faces ---------------------------------------------------------------------
def register_translation_rule(primitive, rule):
    """Compile calls of `primitive` with `rule(ctx, *args, **kwargs) -> Value(s)`.

    `primitive` is a numpy/scipy function, an autograd primitive (its raw function is
    used), or any function you wrapped with `autograd.extend.primitive`. See
    `context.LoweringContext` for what `ctx` offers (StableHLO ops, numpy promotion,
    broadcasting and constants).
    """
    e = entry(primitive)
    e.lowering, e.trace = rule, None
    return rule


def register_trace_rule(primitive, impl):
    """Trace calls of `primitive` through `impl(*args, **kwargs)`, a function of traced
    arrays built from primitives that have rules."""
    e = entry(primitive)
    e.trace, e.lowering = impl, None
    return impl


def register_metadata_rule(primitive, fn):
    entry(primitive).metadata = fn
    return fn


def register_replay(primitive, fn):
    entry(primitive).replay = fn
    return fn


def register_interceptor(primitive, fn):
    entry(primitive).interceptor = fn
    return fn


def register_module_patch(owner, name, replacement):
    """Swap `owner.name` for `replacement` while a trace is active (one `owner` lacks is added
    for that time)."""
    MODULE_PATCHES.append((owner, name, replacement))
    return replacement


def lowers(*prims):
    """Decorator: the function is the translation rule of every primitive given."""
    def deco(fn):
        for p in prims:
            register_translation_rule(p, fn)
        return fn
    return deco


def traces(*prims):
    """Decorator: the function is the trace rule of every primitive given."""
    def deco(fn):
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
