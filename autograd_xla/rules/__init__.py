"""The translation-rule table: primitive -> short function, grouped by family in the
modules of this package.

A primitive is the raw function autograd wraps (`numpy.tanh`, `numpy.sum`,
`scipy.special.gammaln`, autograd's own helpers such as `dot_adjoint_0`), a numpy ufunc
method (`numpy.add.at`), or one of our own structural primitives. Rules are keyed by the
raw function; passing autograd's wrapper (`autograd.numpy.tanh`) works too.

Two kinds of rule exist:

* a *translation rule* `rule(ctx, *args, **kwargs)` receives the primitive's own call
  arguments, with traced arrays replaced by `hlo.Value`s, and returns Values built with
  `ctx` (a `lowering.LoweringContext`). The primitive stays one node of the graph.
* a *trace rule* is a Python function on traced arrays, written with numpy calls that
  have rules themselves; the primitive dissolves into those calls while tracing. It suits
  functions whose numpy/scipy implementation cannot run on abstract values (they call
  `np.asarray`) but are short compositions of other primitives.
"""
from ..core import UfuncMethod


class Rule:
    __slots__ = ("fn", "kind", "prim")

    def __init__(self, fn, kind, prim):
        self.fn, self.kind, self.prim = fn, kind, prim


_RULES = {}
_UFUNC_METHODS = {}  # method name -> factory(ufunc) -> rule function, for any ufunc


def key_of(prim):
    if getattr(prim, "_is_autograd_primitive", False):
        return prim.fun
    return prim


def register_translation_rule(primitive, rule):
    """Compile calls of `primitive` with `rule(ctx, *args, **kwargs) -> Value(s)`.

    `primitive` is a numpy/scipy function, an autograd primitive (its raw function is
    used), or any function you wrapped with `autograd.extend.primitive`. See
    `lowering.LoweringContext` for what `ctx` offers (one method per StableHLO op, plus
    numpy promotion, broadcasting and constants).
    """
    _RULES[key_of(primitive)] = Rule(rule, "lower", key_of(primitive))
    return rule


def register_trace_rule(primitive, impl):
    """Trace calls of `primitive` through `impl(*args, **kwargs)`, a function of traced
    arrays built from primitives that have rules."""
    _RULES[key_of(primitive)] = Rule(impl, "trace", key_of(primitive))
    return impl


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


def lookup(prim):
    rule = _RULES.get(prim)
    if rule is None:
        try:
            rule = _RULES.get(key_of(prim))
        except TypeError:  # unhashable
            return None
        if rule is None and type(prim) is UfuncMethod:
            factory = _UFUNC_METHODS.get(prim.method)
            if factory is not None and prim.ufunc in _RULES:
                fn = factory(prim.ufunc)
                if fn is not None:
                    rule = _RULES[prim] = Rule(fn, "lower", prim)
    return rule


def has_rule(prim):
    return lookup(prim) is not None


def all_rules():
    return dict(_RULES)


def flatten_values(out):
    """Leaves of a rule's result (a Value, or tuples/lists/namedtuples of them)."""
    if isinstance(out, (tuple, list)):
        return [v for x in out for v in flatten_values(x)]
    return [out]


def load_all():
    """Import every rule family (each registers its table on import)."""
    from . import (autograd_helpers, contractions, creation, dynamic, elementwise, fft,  # noqa: F401
                   fixed_points, indexing, integrate, linalg, reductions, shape, signal, special, stats)

