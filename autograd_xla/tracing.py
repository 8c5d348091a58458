"""Tracing: run a function on abstract arrays and record the primitives it calls.

A `Tracer` stands for an array whose shape and dtype are known and whose data is not.
The function under `jit_ps` runs once per signature with Tracers for its array arguments.
Calls reach us in three ways, and all end in `bind(primitive, args, kwargs)`:

1. autograd primitives (`autograd.numpy.tanh`, scipy wrappers, autograd's VJP helpers):
   while a trace is active, the `f_raw` closure cell of every autograd primitive is
   swapped for an interceptor, so the call is seen with its own arguments before numpy
   runs. autograd's boxes and VJP tables are untouched, so `grad` traced over Tracers
   records its backward pass too.
2. bare numpy ufuncs and functions on a Tracer (`onp.sum(t)` in autograd's own VJPs):
   numpy's `__array_ufunc__` / `__array_function__` protocols.
3. Tracer methods and operators (`t + 1`, `t.T`, `t[idx]`, `t += g`).

`bind` looks up the primitive's translation rule and runs it on a scratch lowering
context to learn the result's shape and dtype: the rule is the single source of truth
for both, so the traced graph cannot disagree with the code it lowers to.

This module is long because its parts share one state (the active traces) and one entry
point (`bind`) both ways: the Tracer's numpy surface (methods, operators, in-place
updates, affine integer bounds) binds, the interceptors of autograd's primitives bind,
and `bind`'s errors read the traces; split into modules, they would import each other.
"""
import ast
import contextlib
import dis
import gc
import itertools
import linecache
import operator
import os
import sys
import threading
import types
import warnings

import autograd
import autograd.numpy as anp
import numpy as np
from autograd.builtins import (container_take, container_untake, make_sequence, sequence_extend_left,
                               sequence_extend_right)
from autograd.core import VJPNode
from autograd.extend import VSpace
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import Box, box_types, getval, trace_primitives_map

from . import hlo, registry, tree
from .context import LoweringContext, ModuleState
from .core import (Aval, DynamicSlice, Eqn, Graph, UfuncMethod, Var, dynamic_getitem, dynamic_update, index_axes,
                   map_structure, map_vars, prim_name, setitem, trace_state)
from .errors import (ConcreteValueRequired, ConcretizationError, ForwardVJP, SubclassError, TracerLeakError,
                     UnsupportedDtypeError, UnsupportedPrimitiveError,
                     annotate, library_file, primitive_stack, shown_as_text, user_frame)


state = trace_state  # the traces active in this thread, innermost last


def current_trace():
    traces = state.traces
    return traces[-1] if traces else None


def is_tracing():
    return bool(state.traces)


class Trace:
    """The graph under construction for one function (or one control-flow body)."""

    def __init__(self, parent=None):
        self.parent = parent
        self.eqns = []
        self.invars = []
        self.arg_names = []
        self.captured = {}  # outer Var -> (inner Var, outer Tracer)
        self.affine = {}    # Var of a traced integer scalar -> (constant, ((Var, coefficient), ...))
        self.guards = []    # (bool Tracer, SourceInfo, why, decided): conditions the compiled code assumes
        self.boxed = set()  # Vars autograd has boxed: values being differentiated
        self.origins = {}   # input Var -> the enclosing trace's Tracer it stands for (captured values, and
        #                     arguments of a sub-trace equal to an enclosing value: vmap's unmapped ones)
        self.example = None  # Var -> its value in the call being traced (outermost trace only): value_of
        self.speculated = 0  # branches decided from `example` (speculated_bool)
        self.decided = {}  # computation_of a branch's value -> the way speculated_bool decided it
        self.containers = {}  # id -> a tuple, list or dict an autograd primitive returned (made_by_autograd)
        self._computations = {}  # Var -> the number of how it is computed (computation_of), and
        self._interned = {}      # ... (primitive, its operands' numbers and constants) -> that number
        self.parameters = frozenset()  # input Vars never to be made static (api's parameters)
        self.kinds = False  # whether a Tracer of this trace has a Kind (stands for an ndarray subclass...)
        self.views = set()  # Vars two Tracers of different Kinds share (Tracer.view): not updated in place
        self.zeros = set()  # Vars of the zeros autograd's gradient sums start from (accumulator_zeros)
        self.operators = set()  # Vars of Python's operators on unboxed values (core.Graph.operators)
        self._counter = parent._counter if parent is not None else itertools.count()

    def new_var(self, aval):
        return Var(aval, next(self._counter))

    def new_arg(self, aval, name=None):
        var = self.new_var(aval)
        self.invars.append(var)
        self.arg_names.append(name)
        return Tracer(var, self)

    def lift(self, tracer):
        """This trace's view of `tracer`: itself, or a captured input if it belongs to an
        enclosing trace (a loop body closing over a value of the function around it)."""
        if tracer._trace is self:
            return tracer
        if self.parent is None or not tracer._trace.is_active():
            raise TracerLeakError(
                f"a traced array ({tracer.aval}) from a finished or unrelated trace was used here:\n"
                f"{user_frame(2)}\nTraced values must not be stored outside the function being compiled "
                "(in globals, closures or caches) and reused in a later call.")
        outer = self.parent.lift(tracer)
        hit = self.captured.get(outer._var)
        if hit is None:
            hit = self.captured[outer._var] = (self.new_var(outer.aval), outer)  # a Python scalar stays weak
            self.origins[hit[0]] = outer
        if tracer._kind is not None:
            self.kinds = True
        return Tracer(hit[0], self, tracer._kind)

    def is_active(self):
        return self in state.traces

    def source_of(self, var):
        """The user's line of the equation that computed `var` (None for an input)."""
        for eqn in reversed(self.eqns):
            if var in eqn.outvars:
                return eqn.source
        return None

    def depends_on(self, *vars):
        """The inputs (arguments and captured values) that `vars` were computed from."""
        needed = set(vars)
        for eqn in reversed(self.eqns):
            if any(v in needed for v in eqn.outvars if v is not None):
                needed.update(eqn.invars())
        return needed & (set(self.invars) | {inner for inner, _ in self.captured.values()})

    def made_by_autograd(self, obj):
        """Whether `obj` is a container an autograd primitive returned in this trace
        (autograd.builtins' tuple, list and dict, np.gradient's list, eigh's namedtuple): a
        function returning one returns autograd's container box where it is differentiated,
        plainly and jitted (autodiff.call)."""
        return self.containers.get(id(obj)) is obj

    def computation_of(self, var):
        """A number for how `var` is computed from this trace's inputs: the same for two Vars
        that the same primitives compute from the same inputs and constants, so that a branch
        on either is decided once (speculated_bool); None where an operand is a constant
        with no key of value (_constant_key)."""
        numbers, interned = self._computations, self._interned
        if not numbers:
            numbers.update((v, ("input", i)) for i, v in enumerate(self.invars))
        if var in numbers:
            return numbers[var]
        needed, chain = {var}, []
        for eqn in reversed(self.eqns):
            if any(v in needed for v in eqn.outvars if v is not None):
                chain.append(eqn)
                needed.update(v for v in eqn.invars() if v not in numbers)
        for eqn in reversed(chain):
            key = _constant_key((eqn.prim, eqn.args, eqn.kwargs), numbers)
            for i, v in enumerate(eqn.outvars):
                if v is not None:
                    numbers[v] = None if key is None else interned.setdefault((key, i), len(interned))
        return numbers.get(var)

    def value_of(self, var):
        """`var`'s value in the call being traced, computed by numpy from `example` along the
        equations that lead to it (each prim called on values: autograd's raw functions are
        numpy's); None where it cannot be: no example, a control-flow equation, a host draw,
        a result of another shape than traced, an error."""
        values = self.example
        if values is None or var in values:
            return None if values is None else values[var]
        needed, chain = {var}, []
        for eqn in reversed(self.eqns):
            if any(v in needed for v in eqn.outvars if v is not None):
                if not callable(eqn.prim):
                    return None
                chain.append(eqn)
                needed.update(v for v in eqn.invars() if v not in values)
        try:
            for eqn in reversed(chain):
                args, kwargs = map_vars((eqn.args, eqn.kwargs), values.__getitem__)
                for v, out in zip(eqn.outvars, tree.flatten(eqn.prim(*args, **kwargs))[0]):
                    if v is not None:
                        if np.shape(out) != v.aval.shape:
                            return None
                        values[v] = out
            return values[var]
        except Exception:  # KeyError: an input not in the example (a host draw); or the prim refused
            return None

    def to_graph(self, outs, out_tree=None):
        outvars = [self.output(x) for x in outs]
        captured = [(inner, outer) for inner, outer in self.captured.values()]
        return Graph(list(self.invars), list(self.eqns), outvars, out_tree=out_tree, captured=captured,
                     arg_names=list(self.arg_names), operators=frozenset(self.operators))

    def output(self, x):
        if isinstance(x, Tracer):
            return self.lift(x)._var
        if type(x) in box_types:
            raise TracerLeakError(
                "the function returned an autograd Box: a value being differentiated by a grad() around "
                "jit_ps reached the output untraced, from where jit_ps does not trace (an array inside an "
                "object argument, a closure, a global). Pass the arrays being differentiated as arguments "
                "(alone, or in tuples, lists or dicts), call grad inside jit_ps (jit_ps(grad(f))), or return "
                "plain arrays.")
        if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
            if not hlo.supported(np.asarray(x).dtype):
                raise TypeError(f"output of dtype {np.asarray(x).dtype} cannot be returned from a jitted function")
            return x
        raise TypeError(f"jitted functions return arrays, scalars and containers of them; got {type(x).__name__}")


@contextlib.contextmanager
def binding_axis(name, size):
    """While tracing the body of a pmap or vmap with `axis_name=name`: collectives over it
    are known (their shape rules run on a context that has the axis)."""
    if name is None:
        yield
        return
    previous = state.axes.get(name)
    state.axes[name] = size
    try:
        yield
    finally:
        if previous is None:
            del state.axes[name]
        else:
            state.axes[name] = previous


@contextlib.contextmanager
def new_trace(parent=None):
    trace = Trace(parent)
    with intercepting():
        state.traces.append(trace)
        try:
            yield trace
        finally:
            state.traces.pop()


# ----- binding a primitive -------------------------------------------------------------------
def bind(prim, args, kwargs, entry=None, source=None):
    """Record one call of `prim` on traced arguments; returns traced results. `entry`:
    prim's registry entry, when the caller has looked it up already; `source`: the user's
    line to attribute the equation to, when not the one calling (user_frame)."""
    traces = state.traces
    if not traces:
        raise TracerLeakError(f"'{prim_name(prim)}' was called on a traced array outside of any trace:\n"
                              f"{user_frame(2)}")
    trace = traces[-1]
    entry = entry or registry.lookup(prim)
    if entry is None or entry.lowering is None:
        if entry is not None and entry.trace is not None:
            state.opaque += 1
            return entry.trace(*args, **kwargs)
        raise unsupported(prim)
    given = args, kwargs
    flat = _flat_operands(args, trace, entry) if type(args) is tuple and type(kwargs) is dict and not kwargs else None
    if flat is None:
        args, kwargs = _replace_tracers((args, kwargs), trace)
    else:
        args = flat[0]
    try:
        if entry.shape is None:
            leaves, out_tree, passthrough = (abstract_eval(entry.lowering, args, kwargs) if flat is None else
                                             _abstract_eval_keyed(entry.lowering, args, kwargs, flat[1], flat[2]))
        else:  # declared, where running the rule would cost much (registry.Entry.shape)
            leaves, out_tree = tree.flatten(tuple(entry.shape(*args, **kwargs)))
            passthrough = [None] * len(leaves)
    except Exception as e:
        # the rule made an array of a list holding traced values (np.dot([a, b], x)): numpy's
        # asarray of it, traced, is what it meant
        converted = _lists_as_arrays(given[0]) if type(e) is UnsupportedDtypeError and e.dtype == object else None
        if converted is not None:
            try:
                return bind(prim, converted, kwargs and _replace_vars(kwargs, trace), entry)
            except Exception:
                pass
        src = user_frame(2)
        raise annotate(e, f"in primitive '{prim_name(prim)}'" + (f", traced from\n{src}" if src else ""))
    outs, outvars, made = [], [], False
    counter = trace._counter
    for aval, same_as in zip(leaves, passthrough):
        if same_as is not None and not same_as.aval.weak_type:
            outs.append(Tracer(same_as, trace))
            outvars.append(None)
        else:  # (a weak input passed through is a new, strong value: numpy's np.max(0.5) is np.float64)
            var = Var(aval, next(counter))
            outs.append(Tracer(var, trace))
            outvars.append(var)
            made = True
    if made:
        trace.eqns.append(Eqn(prim, args, kwargs, outvars, out_tree, source or state.source or user_frame(2)))
    if trace.kinds and _has_kind(given):
        for out, kind in zip(outs, kinds_of(prim, given, len(outs))):
            _SET_KIND(out, kind)
    return outs[0] if out_tree is tree.LEAF else tree.unflatten(out_tree, outs)


#: abstract_eval's results by (rule, operands' signature), ABSTRACT_KEPT at most. Rules emit
#: their whole expansion to learn its type: an erfc or a logaddexp is tens of ops of text.
#: Measured on lifelines' LogNormalFitter, whose Hessian traces three times (two arguments
#: found static): 1354 abstract evaluations, 60-75% of the trace's 120-190 ms.
_abstract = {}
ABSTRACT_KEPT = 8192
#: Constants small enough to be part of the key by value (a rule may read them: an index, a mask).
ABSTRACT_CONSTANT_BYTES = 256
_KEYED_BY_VALUE = frozenset({int, float, complex, bool, str, type(None), type(Ellipsis), type})


def abstract_eval(rule, args, kwargs):
    """Run the translation rule `rule` on placeholder Values: the avals of its results, their structure, and for
    each result the input Var it simply passes through (or None). Remembered per operands'
    signature (_operands_key): a rule's types depend only on its operands' types and static
    values, and on the named axes in scope."""
    inputs = []
    try:
        operands = _operands_key((args, kwargs), inputs)
    except TypeError:  # an operand of no signature (a large constant array, a function): not remembered
        operands = None
    return _abstract_eval_keyed(rule, args, kwargs, operands, inputs)


def _flat_operands(args, trace, entry):
    """bind's common call in one pass: a tuple of this trace's Tracers, Python numbers and
    static values without Tracers, no keywords. (The tuple with each Tracer's Var,
    _operands_key((that, {}), inputs), inputs), or None for any other operands (map_structure
    and _operands_key then walk them). The two walks were a third of bind's time (Euler 500's
    gradient: 12,509 calls). The keys are the primitive's coarser ones where its entry has
    them (registry's `type_key`)."""
    out, keys, inputs = [], [], []
    changed = False
    for x in args:
        t = type(x)
        if t is Tracer:
            if x._trace is not trace:
                return None
            v = x._var
            for k, w in enumerate(inputs):
                if w is v:
                    keys.append(k)
                    break
            else:
                inputs.append(v)
                keys.append(v.aval)
            out.append(v)
            changed = True
        elif t is float or t is int or t is bool:
            out.append(x)
            keys.append((t, x))
        else:  # a static operand (autograd's VJPs pass shapes, dtypes and flags): keyed by value
            try:
                keys.append(_operands_key(x, inputs))  # (a TypeError for a Tracer inside it)
            except TypeError:
                return None
            out.append(x)
    if entry.type_key is not None and inputs:
        keys = entry.type_key(args, keys)
    return (tuple(out) if changed else args), (tuple, ((tuple, tuple(keys)), (dict, ()))), inputs


def _abstract_eval_keyed(rule, args, kwargs, operands, inputs):
    """abstract_eval with the operands' key (None: not remembered) and their `inputs` found."""
    key = None if operands is None else (rule, operands, tuple(state.axes.items()) if state.axes else ())
    known = _abstract.get(key) if key is not None else None
    if known is not None:
        avals, out_tree, through = known
        if type(through) is tuple:  # (no result passed through: the Nones themselves, shared)
            return avals, out_tree, through
        return avals, out_tree, [None if k is None else inputs[k] for k in through]
    avals, out_tree, passthrough = _run_rule(rule, args, kwargs)
    if key is not None:
        if len(_abstract) >= ABSTRACT_KEPT:
            _abstract.clear()
        position = {id(v): k for k, v in enumerate(inputs)}
        through = [None if v is None else position[id(v)] for v in passthrough]
        _abstract[key] = avals, out_tree, through if any(k is not None for k in through) else (None,) * len(through)
    return avals, out_tree, passthrough


def _operands_key(obj, inputs):
    """A hashable signature of a rule's operands: each Var by its aval and by which distinct
    input it is (appended to `inputs` in order of appearance), static values by type and
    value; TypeError for anything else."""
    t = type(obj)
    if t is Var:
        for k, v in enumerate(inputs):
            if v is obj:
                return k
        inputs.append(obj)
        return obj.aval
    if t in _KEYED_BY_VALUE:
        return t, obj
    if t is tuple or t is list:
        return t, tuple([_operands_key(x, inputs) for x in obj])
    if t is dict:
        return t, tuple([(k, _operands_key(x, inputs)) for k, x in obj.items()])
    if t is slice:
        return t, _operands_key((obj.start, obj.stop, obj.step), inputs)
    if t is DynamicSlice:
        return t, _operands_key(obj.start, inputs), obj.size
    if t is np.ndarray and obj.nbytes <= ABSTRACT_CONSTANT_BYTES and obj.dtype.kind in "biufc":
        return t, obj.shape, obj.dtype, obj.tobytes()
    if isinstance(obj, (np.generic, np.dtype)):
        return t, obj
    raise TypeError(t)


def _run_rule(rule, args, kwargs):
    ctx = LoweringContext(ModuleState(axes=state.axes, shapes_only=True))
    env = {}

    def placeholder(var):
        value = env.get(var)
        if value is None:
            a = var.aval
            value = env[var] = hlo.Value(f"%in{len(env)}", a.shape, a.dtype, a.weak_type)
        return value

    a, k = map_vars((args, kwargs), placeholder)
    try:
        out = rule(ctx, *a, **k)
    except ConcreteValueRequired as e:
        raise _needed_concretely(e, {id(v): var for var, v in env.items()}) from None
    leaves, out_tree = tree.flatten(out)
    inputs = {id(v): var for var, v in env.items()}
    avals, passthrough = [], []
    for v in leaves:
        if not isinstance(v, hlo.Value):
            raise TypeError(f"translation rule returned {type(v).__name__}, expected Values")
        avals.append(Aval(v.shape, v.dtype))
        passthrough.append(inputs.get(id(v)))
    return avals, out_tree, passthrough


def _needed_concretely(e, inputs):
    """A rule needed an operand's value: the ConcretizationError of the input it is (or, for
    a value the rule computed itself, of all the primitive's traced inputs together)."""
    trace = current_trace()
    var = inputs.get(id(e.value))
    if var is not None:
        return concretization_error(Tracer(var, trace), e.what, decides_shape=True)
    return concretization_error(None, e.what, trace.depends_on(*inputs.values()), decides_shape=True)


def _lists_as_arrays(args):
    """`args` with each list/tuple holding traced values made an array (what numpy's
    asarray does to an operand), or None when there is none or one cannot be converted."""
    out, changed = [], False
    for a in args:
        if type(a) in (list, tuple) and holds_tracer(a):
            try:
                a = anp.array(a)
            except Exception:
                return None
            changed = True
        out.append(a)
    return tuple(out) if changed else None


def holds_tracer(obj):
    """Whether obj is a Tracer or a list/tuple (nested) holding one."""
    t = type(obj)
    return t is Tracer or (t in (list, tuple) and any(holds_tracer(x) for x in obj))


def _replace_vars(obj, trace):
    return map_structure(obj, Var, lambda v: Tracer(v, trace))


def _replace_tracers(obj, trace):
    return map_structure(obj, Tracer, lambda x: trace.lift(x)._var)


def unsupported(prim, raised=None):
    """The error of a primitive with no translation rule; `raised`: what its own code raised
    on traced values."""
    inner = [prim_name(p) for p in primitive_stack.names]
    via = f" (reached inside autograd primitive '{inner[-1]}')" if inner and inner[-1] != prim_name(prim) else ""
    ran = f" (its own code, run on traced values, raised {type(raised).__name__}: {raised})" if raised else ""
    return UnsupportedPrimitiveError(
        f"no translation rule for '{prim_name(prim)}'{via}{ran}, called from\n{user_frame(2)}\n"
        "Register one with autograd_xla.register_translation_rule, or call this function outside jit_ps.",
        prim, user_frame(2))


def trace_through(prim, shown_as, impl, args, kwargs):
    """Run a primitive's own Python implementation on traced values, so that the numpy calls
    it makes are recorded one by one. If it needs data (np.asarray, float(x)), the primitive
    has no traceable form: say so, naming it. Unless the value comes from arguments that can
    be made static (the retry with them static makes it traceable), or the primitive is one
    of autograd's own thin wrappers (`ArrayBox.__getitem__`), where the data dependence is
    the user's code's (`x[x > 0]`), not a missing rule."""
    if state.roll and not getattr(prim, "__module__", "").startswith("autograd."):
        state.opaque += 1  # (compositions/rolled_vjps.py)
    primitive_stack.names.append(shown_as)
    try:
        return impl(*args, **kwargs)
    except (ConcretizationError, ValueError, TypeError, AttributeError) as e:
        if getattr(prim, "__module__", "").startswith("autograd."):
            raise
        if isinstance(e, (TypeError, AttributeError)) and not isinstance(e, ConcretizationError):
            raise unsupported(prim, e) from e  # a library's check of its array (scipy's eigsh: "type not understood")
        cause = concretization_cause(e)
        if cause is None or cause.static_candidates:
            raise
        raise unsupported(prim) from e
    finally:
        primitive_stack.names.pop()


def concretization_cause(e):
    """`e` if it is a ConcretizationError, or the one a ValueError of numpy's item assignment
    carries: numpy reports a failed conversion of a sequence-like value (a Tracer has __len__
    and __getitem__) as "setting an array element with a sequence", the conversion's error as
    its __cause__. None otherwise."""
    if isinstance(e, ConcretizationError):
        return e
    if type(e) is ValueError and isinstance(e.__cause__, ConcretizationError):
        return e.__cause__
    return None


def _has_tracer(args, kwargs):
    for a in args:
        t = type(a)
        if t is Tracer:
            return True
        if (t is list or t is tuple) and any(type(x) is Tracer for x in a):
            return True
    if kwargs:
        return _has_tracer(tuple(kwargs.values()), None)
    return False


def _has_box(args):
    for a in args:  # (a loop, not any() of a generator: once per primitive call)
        if type(a) in box_types:
            return True
    return False


# ----- the Tracer ----------------------------------------------------------------------------
def _is_weak(x):
    t = type(x)
    return t in (bool, int, float, complex) or (t is Tracer and x._var.aval.weak_type)


def _operator(ufunc, swap=False):
    def method(self, other):
        if type(other) in box_types:
            return NotImplemented
        if ufunc is np.power and not swap and _sqrt_power(self, other):
            return bind(np.sqrt, (self,), {})
        if isinstance(other, np.generic) and other.dtype.kind in "iufc" and self.dtype.kind in "fc" \
                and derivative_code(sys._getframe(1)):
            other = other.item()  # a number autograd's derivative code made (np.mean's count) is weak
        a, b = (other, self) if swap else (self, other)
        out = _bind_operator(ufunc, a, b)
        if _is_weak(a) and _is_weak(b):
            out.mark_weak()
        if ufunc in _AFFINE_OPS and not out.shape and out.dtype.kind in "iu":
            _record_affine(ufunc, a, b, out)
        return out
    method.__name__ = ufunc.__name__
    return method


def _sqrt_power(x, exponent):
    """Whether Python's `x ** exponent` is numpy's sqrt: ndarray's power of a float or complex
    array to the Python float 0.5 (numpy's fast_scalar_power; sqrt(-0.0) is -0.0 and sqrt(-inf)
    NaN, where the power is 0.0 and inf). A 0-d value may stand for a numpy scalar, whose
    power is the power."""
    return type(exponent) is float and exponent == 0.5 and x.dtype.kind in "fc" and x._var.aval.shape != ()


def _bind_operator(ufunc, a, b):
    """Python's binary operator on a value autograd did not box, bound; a 0-d result, and any
    of `**`, noted (core.Graph.operators: plainly it is Python's operator, numpy's scalar math
    on numpy scalars and ndarray's square and sqrt for `** 2` and `** 0.5`, not the ufunc's
    loop, which an operator on arrays otherwise is). Not a 0-d one in a trace of ndarray
    subclasses: their 0-d values may be 0-d arrays plainly (PennyLane's tensors), whose
    operators are the ufunc's loop (PennyLane's VQE's gradient then differed by 6e-17)."""
    out = bind(ufunc, (a, b), {})
    if type(out) is Tracer and (ufunc is np.power or not (out._var.aval.shape or out._trace.kinds)):
        out._trace.operators.add(out._var)
    return out


def _unary(ufunc, x):
    """Python's -x, +x, abs(x), ~x: of a value standing for a Python number, a Python number
    (weak, NEP 50: `a32 + -s` is float32), where numpy's np.negative(s) is a numpy scalar."""
    out = ufunc(x)
    if type(out) is Tracer and x._var.aval.weak_type:
        out.mark_weak()
    return out


# ----- integer arithmetic on traced scalars, for slices of traced length ---------------------
# `x[b*n:(b+1)*n]` has a traced start but a fixed length n. Integer scalars are tracked as
# affine forms c + sum(k_i * v_i) over traced integer "base" values, so the length of a
# slice is known when its bounds differ by a constant.
_AFFINE_OPS = (np.add, np.subtract, np.multiply)


def _affine(x):
    if isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_)):
        return int(x), ()
    if type(x) is Tracer and not x.shape and x.dtype.kind in "iu":
        return x._trace.affine.get(x._var) or (0, ((x._var, 1),))
    return None


def _combine(op, a, b):
    (ca, ta), (cb, tb) = a, b
    if op is np.multiply:
        if ta and tb:
            return None
        (c, t), k = (b, ca) if not ta else (a, cb)
        return c * k, tuple((v, n * k) for v, n in t if n * k)
    sign = 1 if op is np.add else -1
    terms = dict(ta)
    for v, n in tb:
        terms[v] = terms.get(v, 0) + sign * n
    return ca + sign * cb, tuple(sorted(((v, n) for v, n in terms.items() if n), key=lambda p: p[0].count))


def _record_affine(op, a, b, out):
    operands = [x for x in (a, b) if type(x) is Tracer]
    if any(x._trace is not out._trace for x in operands):
        return
    fa, fb = _affine(a), _affine(b)
    if fa is not None and fb is not None:
        form = _combine(op, fa, fb)
        if form is not None:
            out._trace.affine[out._var] = form


def _traced_slice(c):
    return type(c) is slice and (type(c.start) is Tracer or type(c.stop) is Tracer or type(c.step) is Tracer)


def _dynamic_index(idx):
    """Slices with traced bounds become DynamicSlice(start, length) when the length is
    fixed; anything else that needs a concrete bound raises ConcretizationError."""
    comps = idx if type(idx) is tuple else (idx,)
    if not any(_traced_slice(c) for c in comps):
        return None
    out = []
    for c in comps:
        if not _traced_slice(c):
            out.append(c)
            continue
        traced = next(p for p in (c.start, c.stop, c.step) if type(p) is Tracer)
        if c.step is not None and (type(c.step) is Tracer or c.step != 1):
            raise concretization_error(traced, "a slice with a traced bound and a step other than 1")
        start = 0 if c.start is None else c.start
        if c.stop is None:
            raise concretization_error(traced, "x[i:] with a traced start (its length depends on i)")
        fa, fb = _affine(start), _affine(c.stop)
        if fa is None or fb is None:
            raise TypeError("slice indices must be integers or None")
        length, terms = _combine(np.subtract, fb, fa)
        if terms:
            raise concretization_error(traced, "a slice x[a:b] whose length b - a depends on traced values")
        out.append(DynamicSlice(start, max(length, 0)))
    return tuple(out) if type(idx) is tuple else out[0]


def _guard_in_bounds(x, idx):
    """Record that each traced slice lies inside x (numpy would shorten it otherwise)."""
    trace = current_trace()
    if trace.parent is not None:  # inside a loop body: jax's clamping semantics (README)
        return
    comps = idx if type(idx) is tuple else (idx,)
    for c, axis in zip(comps, index_axes(comps, x.ndim)):
        if type(c) is DynamicSlice and type(c.start) is Tracer:
            ok = np.logical_and(c.start >= 0, c.start <= x.shape[axis] - c.size)
            add_guard(ok, "a slice with traced bounds reaches outside its array (numpy would return a shorter "
                      "array)", user_frame(3))


def add_guard(ok, why, source=None):
    """Make the compiled program also return the traced boolean `ok`, a condition its result
    assumes; a call where it is false runs as plain autograd instead, with a FallbackWarning
    saying `why`. Only the outermost trace has guards (a loop body's results are the loop's).
    Such a guard is not `decided` (core.Graph.guards): a trace of the call it refuses would
    assume the same, unlike speculated_bool's."""
    trace = current_trace()
    if trace.parent is None:
        trace.guards.append((ok, source or user_frame(2), why, False))


def _inplace(ufunc):
    def method(self, other):
        if type(other) in box_types:
            return NotImplemented
        if self._var.aval.weak_type:  # Python numbers are immutable: x += 1 rebinds, never mutates
            return _operator(ufunc)(self, other)
        if ufunc is np.power and _sqrt_power(self, other):
            result = bind(np.sqrt, (self,), {})
        else:
            result = _bind_operator(ufunc, self, other)
        _assign(self, result, ufunc.__name__)
        return self
    return method


def _assign(target, result, what):
    """In-place update of `target` with numpy's rules: same shape, same_kind casting."""
    if target._var in target._trace.views:
        raise SubclassError(f"an in-place update of an array viewed as another class (x.view(cls)), which the "
                            f"other view would not see here, at\n{user_frame(3)}")
    if result.shape != target.shape:
        raise ValueError(f"non-broadcastable output operand with shape {target.shape} doesn't match the "
                         f"broadcast shape {result.shape}")
    if result.dtype != target.dtype:
        if not np.can_cast(result.dtype, target.dtype, "same_kind"):
            raise TypeError(f"Cannot cast ufunc '{what}' output from {result.dtype!r} to {target.dtype!r} "
                            "with casting rule 'same_kind'")
        result = np.astype(result, target.dtype)
    target._var = result._var


#: Python branches on traced floats (`if lambda_ > 0:`) decided per trace at most this many
#: times (a `while` on one is unrolled that far); each is a guard the program checks per call.
SPECULATED_BRANCHES = 16


def _constant_key(obj, numbers):
    """A hashable key of an equation's operands, Vars replaced by their `numbers`
    (Trace.computation_of): equal only for operands of equal value, floats by their repr
    (0.0 is not -0.0), arrays by their bytes; None where an operand has no such key (an
    object array, an unhashable object, a Var of unknown computation)."""
    t = type(obj)
    if t is Var:
        return numbers.get(obj)
    if t is tuple or t is list or t is dict or t is slice or t is DynamicSlice:
        parts = (obj.items() if t is dict else (obj.start, obj.stop, obj.step) if t is slice
                 else (obj.start, obj.size) if t is DynamicSlice else obj)
        keys = [_constant_key(x, numbers) for x in parts]
        return None if any(k is None for k in keys) else (t, tuple(keys))
    if t is float or t is complex:
        return t, repr(obj)
    if t is np.ndarray or isinstance(obj, np.generic):
        return None if obj.dtype.hasobject else (t, obj.dtype.str, np.shape(obj), obj.tobytes())
    try:
        return t, obj, hash(obj)  # ints, bools, None, strings, dtypes, the primitive itself
    except TypeError:
        return None


def speculated_bool(x):
    """bool(x) of a traced value computed from float arguments: decided from the call being
    traced (Trace.value_of), the branch taken compiled, and a guard added that x still
    decides the same way (a call where it does not runs as plain autograd). lifelines'
    generalized gamma model branches so on a parameter's sign. In a loop's or vmap's body,
    x must depend only on values of the function around it (a vmap's unmapped arguments,
    the values a body closes over): its computation is replayed there for the guard.
    Integer, boolean and Python-number values raise instead, to be made static (one
    program per value); so do values from random draws, and branches past
    SPECULATED_BRANCHES. A value computed as one decided before (Trace.computation_of)
    takes that decision, with no guard or count of its own."""
    outer = x._trace
    while outer.parent is not None:
        outer = outer.parent
    error = concretization_error(x, "bool(x), `if x:` or `while x:`", hint=(
        f"(This trace has decided {SPECULATED_BRANCHES} branches on traced values already, the most it does: "
        "tracing.SPECULATED_BRANCHES.)" if outer.speculated >= SPECULATED_BRANCHES else None))
    here = None
    if not (error.static_candidates or error.random_draws):
        with _tracing_in(outer):
            try:
                here = _replayed_outside(x, outer, {})
            except Exception:  # an equation that cannot be bound again outside its body
                pass
    computation = None if here is None else outer.computation_of(here._var)
    if computation in outer.decided:  # the same value as a branch decided (and guarded) before: a
        return outer.decided[computation]  # library validating its argument at each use, hessian's levels
    value = None
    if here is not None and outer.speculated < SPECULATED_BRANCHES:
        with _tracing_in(outer):
            value = outer.value_of(here._var)
            if value is not None:
                taken = bool(value)  # numpy's own error for an array of several elements
                truth = here if here.aval.dtype.kind == "b" else here != 0
                ok = np.reshape(truth if taken else np.logical_not(truth), ())
    if value is None:
        raise error
    outer.guards.append((ok, error.source, "a Python `if`, `while` or `assert` on a traced value went the other "
                                           "way than when it was traced", True))
    outer.speculated += 1
    if computation is not None:
        outer.decided[computation] = taken
    return taken


@contextlib.contextmanager
def _tracing_in(trace):
    """Bind into `trace` (an enclosing one) for a while."""
    state.traces.append(trace)
    try:
        yield
    finally:
        state.traces.pop()


def _replayed_outside(x, outer, memo):
    """A Tracer of the outermost trace `outer` equal to `x`: x itself, the enclosing value a
    body's input stands for (Trace.origins), or x's equations bound again in `outer` (the
    caller makes it current); None where x depends on a body's own inputs (a mapped or
    looped value) or on a control-flow equation."""
    trace, var = x._trace, x._var
    if trace is outer:
        return x
    found = memo.get((id(trace), var))
    if found is not None:
        return found
    origin = trace.origins.get(var)
    if origin is not None:
        found = _replayed_outside(origin, outer, memo)
    else:
        eqn = next((e for e in reversed(trace.eqns) if var in e.outvars), None)
        if eqn is None or not callable(eqn.prim):
            return None
        lifted = {}
        for v in eqn.invars():
            lifted[v] = _replayed_outside(Tracer(v, trace), outer, memo)
            if lifted[v] is None:
                return None
        args, kwargs = map_vars((eqn.args, eqn.kwargs), lifted.__getitem__)
        outs = tree.flatten(bind(eqn.prim, args, kwargs))[0]
        found = outs[eqn.outvars.index(var)]
    memo[id(trace), var] = found
    return found


def _concrete(kind, decides_shape=False, conversion=False):
    """A Tracer method that needs the data. `conversion`: one numpy's item assignment calls to
    store the value into a numpy array (float(), int(), complex(), bool())."""
    def method(self, *args, **kwargs):
        caller = sys._getframe(1)
        if conversion and storing_into_array(caller):
            raise store_error(self, caller)
        raise concretization_error(self, kind, decides_shape=decides_shape)
    return method


# ----- a traced value stored into a numpy array ----------------------------------------------
# `y[i] = value` with y a numpy array: numpy's item assignment is C code, without a frame of its
# own, that converts the value with float() / int() / complex() / bool(), or np.asarray for a
# slice, so the frame that called the conversion is the one executing the store.
_STORE_OPCODES = frozenset(dis.opmap[name] for name in ("STORE_SUBSCR", "STORE_SLICE") if name in dis.opmap)


def storing_into_array(frame):
    """Whether `frame`, the caller of a conversion of a traced value, is the user's code
    executing `y[...] = value` (y a numpy array: a traced y has its own __setitem__)."""
    code = frame.f_code
    return code.co_code[frame.f_lasti] in _STORE_OPCODES and not library_file(code.co_filename)


def stored_array(frame):
    """The user's text for the array `frame`'s store writes into (`out` of `out[i] = v`,
    `self.buf` of `self.buf[:, 0] = v`), read from the source span Python keeps for the store
    instruction (code.co_positions); "y" where the source cannot be read."""
    code = frame.f_code
    try:
        line, end_line, col, end_col = next(itertools.islice(code.co_positions(), frame.f_lasti // 2, None))
        lines = [linecache.getline(code.co_filename, n).encode() for n in range(line, end_line + 1)]
        lines[-1] = lines[-1][:end_col]  # (byte offsets, as Python counts them)
        lines[0] = lines[0][col:]
        target = ast.parse("(" + b"".join(lines).decode() + ")", mode="eval").body
        return ast.unparse(target.value) if type(target) is ast.Subscript else "y"
    except (StopIteration, TypeError, ValueError, SyntaxError, UnicodeDecodeError):
        return "y"


def store_error(tracer, frame, boxed=False, hint=None):
    """The ConcretizationError of `y[...] = value` with y a numpy array, `tracer` the value
    and `frame` the user's frame executing the store (y is named as written there); `boxed`:
    autograd is differentiating it, which plain autograd cannot do either, so the remedy is a
    note, kept by the plain run's own error (api's fallback copies notes)."""
    y = stored_array(frame)
    what = f"Storing a {'value being differentiated' if boxed else 'value'} into a numpy array (`{y}[...] = value`, " \
           f"{y} a numpy array)"
    if not boxed:
        return concretization_error(tracer, what, hint=hint, remedy=(
            f"A numpy array holds data, and inside jit_ps only shapes and dtypes are known. Make {y} a traced "
            f"array: create it from a traced value with autograd.numpy ({y} = np.zeros_like(x)), so that "
            f"`{y}[...] = value` is recorded; or build the array from the values (np.stack, np.concatenate, "
            "np.array([...]), np.where), which grad can also differentiate."))
    return annotate(concretization_error(tracer, what, hint=hint, remedy=""), ASSIGNMENT_NOT_DIFFERENTIABLE)


#: The note of an item assignment of a value autograd is differentiating: what to write instead.
#: A note, so that the plain run's own error (fallback="python") carries it too.
ASSIGNMENT_NOT_DIFFERENTIABLE = (
    "autograd cannot differentiate through item assignment (plain autograd fails here too: the array keeps a "
    "number, not autograd's box around it). Build the array from the values instead: np.stack([...]) or "
    "np.array([...]) of a list of them, np.concatenate, or np.where(mask, values, y).")


# ----- ndarray subclasses ------------------------------------------------------------------
# A call with an argument of an ndarray subclass (PennyLane's tensor, with its `requires_grad`)
# is traced with Tracers that stand for each argument as its class: a Tracer's Kind, the class
# and the instance attributes (`__dict__`) of the value it stands for, answers `isinstance`
# (through `Tracer.__class__`, which isinstance and numpy's ordering of __array_ufunc__
# overrides both read) and attribute reads and writes. The Kind of a result is numpy's own
# answer: `bind` runs the primitive on small concrete stand-ins of the operands, each of its
# operand's Kind, twice with different data (`kinds_of`); where the two runs disagree, or the
# subclass changes the numbers the plain ndarray computation gives, or the primitive cannot
# run so, the result is of an UNKNOWN Kind, and asking its class or an attribute of it raises
# SubclassError: the call runs plainly. A Tracer without a Kind (`_kind` None: every Tracer of
# a call without subclass arguments) answers as it always has: a Tracer, not an ndarray.

class Kind:
    """The class of the value a Tracer stands for (an ndarray subclass, np.ndarray itself, a
    numpy scalar type, a Python number type; None: unknown) and its instance attributes."""

    __slots__ = ("cls", "attrs")

    def __init__(self, cls, attrs=None):
        self.cls, self.attrs = cls, attrs or {}

    def __repr__(self):
        return f"Kind({getattr(self.cls, '__qualname__', None)}, {sorted(self.attrs)})"


UNKNOWN = Kind(None)
_PY_NUMBERS = (bool, int, float, complex)
#: Elements of the probes kinds_of runs a primitive on (probe data), at most; larger operands are
#: not probed (their results are of an UNKNOWN Kind).
PROBE_MAX_SIZE = 1 << 16


def kind_of_value(x):
    """The Kind of a concrete value (an argument), or None for one no Tracer can stand for."""
    t = type(x)
    if t is np.ndarray or t in _PY_NUMBERS or isinstance(x, np.generic):
        return Kind(t)
    if isinstance(x, np.ndarray):
        return Kind(t, dict(getattr(x, "__dict__", {})))
    return None


def stand_in_as(tracers, values):
    """Make each of `tracers` (arguments of the trace being made) stand for its `values`' class."""
    for t, v in zip(tracers, values):
        _SET_KIND(t, kind_of_value(v))
        t._trace.kinds = True


def _has_kind(obj):
    t = type(obj)
    if t is Tracer:
        return obj._kind is not None
    if t is tuple or t is list:
        return any(_has_kind(x) for x in obj)
    if t is dict:
        return any(_has_kind(x) for x in obj.values())
    if t is slice:
        return _has_kind((obj.start, obj.stop, obj.step))
    return False


def _probe_data(aval, rng):
    """Data of `aval` for a probe: positive floats (in the domain of log and sqrt), small
    non-negative integers (valid indices), random booleans."""
    kind = aval.dtype.kind
    if kind == "b":
        return np.asarray(rng.random(aval.shape) < 0.5)
    if kind in "iu":
        return np.asarray(rng.integers(0, 2, aval.shape), aval.dtype)
    data = rng.uniform(0.5, 1.5, aval.shape)
    if kind == "c":
        data = data + 1j * rng.uniform(0.5, 1.5, aval.shape)
    return np.asarray(data, aval.dtype)


def _probe(tracer, rng, plain):
    """A concrete value of the Kind `tracer` stands for (`plain`: as a plain ndarray)."""
    data = _probe_data(tracer.aval, rng)
    kind = tracer._kind
    cls = kind.cls if kind is not None else (None if tracer.aval.weak_type else np.ndarray)
    if cls is None:
        if not tracer.aval.weak_type:
            raise SubclassError("an operand of unknown class")
        cls = {"b": bool, "i": int, "u": int, "f": float, "c": complex}[tracer.dtype.kind]
    if cls is np.ndarray or plain and issubclass(cls, np.ndarray):
        return data
    if issubclass(cls, np.ndarray):
        value = data.view(cls)
        if kind.attrs:
            value.__dict__.update(kind.attrs)
        return value
    return cls(data[()])


def _same_attrs(a, b):
    if a.keys() != b.keys():
        return False
    for k, x in a.items():
        y = b[k]
        if x is y:
            continue
        if type(x) is not type(y):
            return False
        try:
            same = np.array_equal(x, y) if isinstance(x, np.ndarray) else bool(x == y)
        except Exception:
            return False
        if not same:
            return False
    return True


def kinds_of(prim, given, n):
    """The Kinds of the `n` results of `prim` bound on `given` ((args, kwargs) holding Tracers,
    some of a Kind): what numpy returns when it runs `prim` on probes of the operands' Kinds.
    Raises SubclassError where a subclass changes the numbers (its __array_ufunc__ scaling
    them): compiled code, which computes as on plain ndarrays, would then differ."""
    if not callable(prim) or getattr(prim, "__module__", "") == "numpy.random" or any(
            x.size > PROBE_MAX_SIZE for x in tree.flatten(given)[0] if type(x) is Tracer):
        return [UNKNOWN] * n
    try:
        key = prim, n, _kinds_key(given)
        known = _kinds_known.get(key)
    except TypeError:  # an operand of no signature (a large constant, an attribute of its own): probed each time
        key = known = None
    if known is None:
        known = _probed_kinds(prim, given, n)
        if key is not None:
            if len(_kinds_known) >= ABSTRACT_KEPT:
                _kinds_known.clear()
            _kinds_known[key] = known
    return list(known)


#: kinds_of's results by (primitive, results, operands' signature with each Tracer's Kind): its
#: probes are seeded, so equal signatures get equal Kinds. PennyLane's variational classifier's
#: gradient (6,313 primitive calls on `pennylane.numpy.tensor`s) probed 5,724 times: 0.85 s a
#: trace, 0.27 s remembered.
_kinds_known = {}


def _kinds_key(obj):
    """_operands_key's signature of kinds_of's operands, each Tracer by its aval and Kind."""
    t = type(obj)
    if t is Tracer:
        kind = obj._kind
        return obj._var.aval, None if kind is None else (
            kind.cls, tuple([(k, _operands_key(v, [])) for k, v in sorted(kind.attrs.items())]))
    if t is tuple or t is list:
        return t, tuple([_kinds_key(x) for x in obj])
    if t is dict:
        return t, tuple([(k, _kinds_key(x)) for k, x in obj.items()])
    return _operands_key(obj, [])


def _probed_kinds(prim, given, n):
    """kinds_of, by running `prim` on probes."""
    runs, subclassed = [], False
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for seed, plain in ((0, False), (1, False), (0, True)):
                if plain and not subclassed:
                    break
                rng = np.random.default_rng(seed)
                args, kwargs = map_structure(given, Tracer, lambda t: _probe(t, rng, plain))
                if not plain:
                    subclassed |= any(type(x) is not np.ndarray and isinstance(x, np.ndarray)
                                      for x in tree.flatten((args, kwargs))[0])
                leaves = tree.flatten(prim(*args, **kwargs))[0]
                if len(leaves) != n:
                    return [UNKNOWN] * n
                runs.append(leaves)
    except Exception:  # the primitive refused the probes (an operand of UNKNOWN Kind too)
        return [UNKNOWN] * n
    if len(runs) == 3:
        for x, y in zip(runs[0], runs[2]):
            try:
                same = np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
            except Exception:
                same = False
            if not same:
                raise SubclassError(
                    f"'{prim_name(prim)}' on {', '.join(sorted({k.cls.__qualname__ for k in _kinds(given)}))} "
                    "computes other numbers than on plain ndarrays (the subclass changes numpy's arithmetic), "
                    f"which compiled code would not follow, at\n{user_frame(3)}")
    out = []
    for x, y in zip(runs[0], runs[1]):
        t = type(x)
        attrs = getattr(x, "__dict__", {})
        if t is not type(y) or not (isinstance(x, (np.ndarray, np.generic)) or t in _PY_NUMBERS) \
                or not _same_attrs(attrs, getattr(y, "__dict__", {})):
            out.append(UNKNOWN)
        else:
            out.append(Kind(t, dict(attrs)))
    return out


def _kinds(given):
    return [x._kind for x in tree.flatten(given)[0] if type(x) is Tracer and x._kind is not None
            and x._kind.cls is not None]


def unknown_kind(tracer, what):
    return SubclassError(
        f"{what} of a traced value computed from an argument of an ndarray subclass: numpy's result "
        f"class for the operation that made it could not be found, at\n{user_frame(3)}")


def _class_attribute(cls, name):
    """`name` as the subclass `cls` itself defines it (below np.ndarray and np.generic in its MRO)."""
    for klass in cls.__mro__:
        if klass is np.ndarray or klass is np.generic or klass is object:
            return _ABSENT
        if name in vars(klass):
            return vars(klass)[name]
    return _ABSENT


class Tracer:
    """An abstract array inside a trace. Behaves like an ndarray for everything that does not
    need the data; asking for data raises a ConcretizationError that says what to do. A
    Tracer with a Kind answers its class and attributes as the value it stands for does
    (section "ndarray subclasses" above)."""

    __slots__ = ("_var", "_trace", "_kind")
    __array_priority__ = 50.0

    def __init__(self, var, trace, kind=None):
        _SET_VAR(self, var)
        _SET_TRACE(self, trace)
        _SET_KIND(self, kind)

    @property
    def __class__(self):
        kind = self._kind
        if kind is None:
            return Tracer
        if kind.cls is None:
            raise unknown_kind(self, "the class")
        return kind.cls

    def __getattr__(self, name):  # only what the class and the slots lack
        kind = _GET_KIND(self)
        if kind is None or name[:2] == "__" == name[-2:]:
            raise AttributeError(f"'Tracer' object has no attribute {name!r}")
        if kind.cls is None:
            raise unknown_kind(self, f"the attribute {name!r}")
        if name in kind.attrs:
            return kind.attrs[name]
        found = _class_attribute(kind.cls, name)
        if found is not _ABSENT:
            return found.__get__(self, kind.cls) if hasattr(found, "__get__") else found
        if hasattr(kind.cls, name):  # an ndarray attribute a Tracer lacks: .flags, .strides, .base
            raise concretization_error(self, f"x.{name}")
        raise AttributeError(f"{kind.cls.__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name, value):
        if name in Tracer.__slots__:
            object.__setattr__(self, name, value)
            return
        kind = self._kind
        if kind is not None and kind.cls is None:
            raise unknown_kind(self, f"setting the attribute {name!r}")
        if kind is None or not getattr(kind.cls, "__dictoffset__", 0) or hasattr(
                _class_attribute(kind.cls, name), "__set__"):  # a property: its setter would run on data
            what = "Tracer" if kind is None else kind.cls.__name__
            raise AttributeError(f"'{what}' object has no attribute {name!r} that can be set")
        self._kind = Kind(kind.cls, dict(kind.attrs, **{name: value}))

    def __delattr__(self, name):
        kind = self._kind
        if kind is None or kind.cls is None or name not in kind.attrs:
            raise AttributeError(name)
        self._kind = Kind(kind.cls, {k: v for k, v in kind.attrs.items() if k != name})

    aval = property(lambda self: self._var.aval)
    graph_var = property(lambda self: self._var)  # the Var it stands for (not `var`: that is np.var)
    owner = property(lambda self: self._trace)    # the Trace recording it
    shape = property(lambda self: self._var.aval.shape)
    dtype = property(lambda self: self._var.aval.dtype)
    ndim = property(lambda self: len(self._var.aval.shape))
    size = property(lambda self: self._var.aval.size)
    itemsize = property(lambda self: self._var.aval.dtype.itemsize)
    nbytes = property(lambda self: self._var.aval.size * self._var.aval.dtype.itemsize)
    T = property(lambda self: np.transpose(self))
    mT = property(lambda self: np.swapaxes(self, -1, -2))
    real = property(lambda self: np.real(self))
    imag = property(lambda self: np.imag(self))

    def mark_weak(self):
        """Type this value weakly from now on, as a result of Python scalars is (NEP 50)."""
        self._var.aval = Aval(self.shape, self.dtype, weak_type=True)

    def __repr__(self):
        return f"Traced<{self.aval}>"

    __str__ = __repr__

    def __format__(self, spec):
        """f"{x:.3f}", "{}".format(x): text of the value, which a trace does not have (the call
        runs plainly: errors.shown_as_text). repr(x) and str(x) stay the placeholder's."""
        raise shown_as_text(f"a format ({spec!r}) makes text of", user_frame())

    def __hash__(self):
        return id(self)

    # ----- numpy protocols ------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.pop("out", None)
        if any(type(x) in box_types for x in inputs) or (out and any(type(x) in box_types for x in out)):
            return NotImplemented
        prim = ufunc if method == "__call__" else UfuncMethod(ufunc, method)
        if method == "at":
            target = inputs[0]
            if type(target) is not Tracer:
                raise concretization_error(inputs[2], f"np.{ufunc.__name__}.at into a concrete array")
            dynamic = _dynamic_index(inputs[1])
            if dynamic is not None and ufunc is np.add:
                result = bind(dynamic_update, (target, dynamic, inputs[2], True), {})
            else:
                result = bind(prim, inputs, kwargs)
            _assign(target, result, f"{ufunc.__name__}.at")
            return None
        result = bind(prim, inputs, kwargs)
        if out is None:
            return result
        outs = out if isinstance(out, tuple) else (out,)
        results = result if isinstance(result, tuple) else (result,)
        for o, r in zip(outs, results):
            if type(o) is not Tracer:
                raise concretization_error(r, f"np.{ufunc.__name__}(..., out=<numpy array>)")
            _assign(o, r, ufunc.__name__)
        return out if isinstance(out, tuple) and len(out) > 1 else outs[0]

    def __array_function__(self, func, types_, args, kwargs):
        for t in types_:  # (a loop, not any() of a generator: autograd's VJPs ask np.shape and such per node)
            if t in box_types:
                return NotImplemented
        entry = registry.lookup(func)
        if entry is not None:
            if entry.metadata is not None:
                return entry.metadata(*args, **kwargs)
            if entry.lowering is not None or entry.trace is not None:
                return bind(func, args, kwargs, entry)
        impl = getattr(func, "_implementation", None)
        if impl is None:
            raise unsupported(func)
        return trace_through(func, func, impl, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        hint = None
        if self.aval.dtype.kind in "biu":  # most often numpy's own indexing: table[idx]
            hint = ("If a plain numpy array is indexed with it (`table[idx]`, `table` a constant, not an argument), "
                    "numpy itself asks for concrete indices: pass `table` to the jitted function as an argument, "
                    "or look it up with np.take(table, idx, axis=...).")
        caller = sys._getframe(1)
        if storing_into_array(caller):  # y[a:b] = x (or the index of a store, when an integer)
            raise store_error(self, caller, hint=hint)
        # an argument's own data, which a library asks for (scipy's, PennyLane's conversions):
        # a float argument not being differentiated is made static, as for x.tolist(); not a
        # value computed from one (numpy's own indexing, `table[np.argmax(x)]`), nor inside a
        # primitive traced through (one without a rule: trace_through says which)
        argument = type(self) is Tracer and not primitive_stack.names and self._var in self._trace.invars
        raise concretization_error(self, "np.asarray(x) / np.array(x)", decides_shape=argument, hint=hint)

    def __bool__(self):
        caller = sys._getframe(1)
        if storing_into_array(caller):
            raise store_error(self, caller)
        return speculated_bool(self)

    __float__ = _concrete("float(x)", conversion=True)
    __int__ = _concrete("int(x)", conversion=True)
    __complex__ = _concrete("complex(x)", conversion=True)
    __index__ = _concrete("using x as an index, size or range bound")
    item = _concrete("x.item()")
    nonzero = _concrete("np.nonzero(x) (the number of results depends on the data)", decides_shape=True)
    # their values are data, like a mask's: a float argument not being differentiated is made static
    tolist = _concrete("x.tolist()", decides_shape=True)

    def numpy(self):
        """PennyLane's tensor.numpy() (its class's own method, for a Tracer standing for one);
        torch-like x.numpy() otherwise, which needs the data."""
        kind = self._kind
        method = _ABSENT if kind is None or kind.cls is None else _class_attribute(kind.cls, "numpy")
        if method is not _ABSENT:
            return method.__get__(self, kind.cls)()
        if kind is not None and kind.cls is not None and not hasattr(kind.cls, "numpy"):
            raise AttributeError(f"{kind.cls.__name__!r} object has no attribute 'numpy'")
        raise concretization_error(self, "x.numpy()", decides_shape=True)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, idx):
        dynamic = _dynamic_index(idx)
        if dynamic is not None:
            _guard_in_bounds(self, dynamic)
            return bind(dynamic_getitem, (self, dynamic), {})
        return bind(operator.getitem, (self, idx), {})

    def __setitem__(self, idx, value):
        if type(value) in box_types:
            raise annotate(TypeError("assigning a differentiated value into a traced array is not differentiable; "
                                     "build the array with np.concatenate/np.stack/np.where instead"),
                           ASSIGNMENT_NOT_DIFFERENTIABLE)
        dynamic = _dynamic_index(idx)
        if dynamic is not None:
            _guard_in_bounds(self, dynamic)
            _assign(self, bind(dynamic_update, (self, dynamic, value, False), {}), "setitem")
            return
        _assign(self, bind(setitem, (self, idx, value), {}), "setitem")

    # ----- methods that are numpy functions -------------------------------------------------
    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        return np.astype(self, dtype)

    def reshape(self, *shape, order="C"):
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        return np.reshape(self, shape, order=order)

    def transpose(self, *axes):
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], (int, np.integer))):
            axes = axes[0]
        return np.transpose(self, axes or None)

    def view(self, dtype=None, type=None):
        if isinstance(dtype, builtins_type) and issubclass(dtype, np.ndarray):
            dtype, type = None, dtype
        if dtype is not None:
            raise UnsupportedPrimitiveError("reinterpreting a traced array's bytes (view with a dtype) is not supported")
        if type is None and self._kind is None:
            return self
        # another object sharing the data: numpy's view runs the subclass's __array_finalize__ (kinds_of)
        kind = kinds_of(lambda x: x.view() if type is None else x.view(type), ((self,), {}), 1)[0]
        self._trace.kinds = True
        self._trace.views.add(self._var)
        return Tracer(self._var, self._trace, kind)

    def copy(self, order="C"):
        if self._kind is None:
            return Tracer(self._var, self._trace)
        return bind(np.copy, (self,), {"subok": True})

    def flatten(self, order="C"):
        return np.ravel(self, order=order)

    def fill(self, value):
        _assign(self, np.full(self.shape, value, dtype=self.dtype), "fill")

    def sort(self, axis=-1, kind=None, order=None):
        _assign(self, np.sort(self, axis=axis), "sort")

    def __neg__(self):
        return _unary(np.negative, self)

    def __pos__(self):
        return _unary(np.positive, self)

    def __abs__(self):
        return _unary(np.absolute, self)

    def __invert__(self):
        return _unary(np.invert, self)


builtins_type = type
_SET_VAR, _SET_TRACE, _SET_KIND = (vars(Tracer)[name].__set__ for name in Tracer.__slots__)
_GET_KIND = vars(Tracer)["_kind"].__get__

_NUMPY_METHODS = ["all", "any", "argmax", "argmin", "argsort", "clip", "conj", "conjugate", "cumprod", "cumsum",
                  "diagonal", "dot", "max", "mean", "min", "prod", "ptp", "ravel", "repeat", "round",
                  "squeeze", "std", "sum", "swapaxes", "take", "trace", "var", "searchsorted", "compress",
                  "argpartition", "partition"]
for _name in _NUMPY_METHODS:
    setattr(Tracer, _name, (lambda f: lambda self, *a, **k: f(self, *a, **k))(getattr(np, _name)))

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
           "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "matmul": np.matmul,
           "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor, "lshift": np.left_shift,
           "rshift": np.right_shift, "divmod": np.divmod}
for _name, _uf in _BINARY.items():
    setattr(Tracer, f"__{_name}__", _operator(_uf))
    setattr(Tracer, f"__r{_name}__", _operator(_uf, swap=True))
    if _name not in ("divmod",):
        setattr(Tracer, f"__i{_name}__", _inplace(_uf))
for _name, _uf in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
                   "ge": np.greater_equal}.items():
    setattr(Tracer, f"__{_name}__", _operator(_uf))


def result_type(*xs):
    """np.result_type with traced weak values behaving like the Python scalars they stand for."""
    if len(xs) == 1 and type(xs[0]) is Tracer:  # (autograd's metadata asks it of each operand it unbroadcasts to)
        aval = xs[0]._var.aval
        key = aval.dtype, aval.weak_type
        found = _RESULT_TYPES.get(key)
        if found is None:
            found = _RESULT_TYPES[key] = np.result_type(_WEAK_AS[aval.dtype.kind] if aval.weak_type else aval.dtype)
        return found
    args = []
    for x in xs:
        if type(x) is Tracer:
            args.append(_WEAK_AS[x.dtype.kind] if x.aval.weak_type else x.dtype)
        else:
            args.append(x)
    return np.result_type(*args)


_WEAK_AS = {"b": False, "i": 0, "u": 0, "f": 0.0, "c": 0j}  # the Python scalar a weak value of a kind stands for
_RESULT_TYPES = {}  # (dtype, weak) -> result_type of one traced value of them


# numpy queries a Tracer answers from its shape and dtype, with no equation
for _query, _answer in {
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.result_type: result_type,
    np.iscomplexobj: lambda x: x.dtype.kind == "c",
    np.isrealobj: lambda x: x.dtype.kind != "c",
    np.may_share_memory: lambda a, b, max_work=None: False,
    np.shares_memory: lambda a, b, max_work=None: False,
}.items():
    registry.register_metadata_rule(_query, _answer)


# ----- errors that need the trace ------------------------------------------------------------
def concretization_error(tracer, what, deps=None, decides_shape=False, hint=None, remedy=None):
    """Explain which argument the value comes from and what to do instead. `deps`: the inputs
    (Vars) it depends on, when it is not one traced value (default: `tracer`'s). `hint`:
    a last paragraph for the message; `remedy`: the paragraph saying what to do, when not
    the general one (static arguments, cond / while_loop, np.where).

    The inputs it depends on are candidates for being made static (ConcretizationError's
    static_candidates) when all are Python numbers or integer/boolean arrays, or, for a
    value that `decides_shape` (a mask, a count: `x[x > 0]`), float arrays not being
    differentiated. A float array that decides control flow (`if np.sum(x) > 0`) is not:
    that is cond's or np.where's work, and the signature runs plainly. Inside a loop body
    or a vmapped function the inputs are followed out to the jitted function's arguments
    (`_arguments_of`); a loop's carry is not one of them."""
    trace = tracer._trace if type(tracer) is Tracer else current_trace()
    if deps is None:
        deps = trace.depends_on(tracer._var) if trace is not None and type(tracer) is Tracer else set()
    reached = _arguments_of(trace, deps) if trace is not None else None
    if reached is None:
        named, indices = trace, [i for i, v in enumerate(trace.invars) if v in deps] if trace is not None else []
    else:
        named, indices = reached
    names, candidates, draws = [], [], []
    for i in indices:
        name = named.arg_names[i] or f"argument {i}"
        aval = named.invars[i].aval
        names.append(f"'{name}' ({aval})")
        if getattr(name, "random_draw", False):  # a host-drawn input (impurity.py), not an argument
            draws.append(str(name))
        elif named.invars[i] in named.parameters:  # too many values to be static: branches on it speculate
            pass
        elif aval.weak_type or aval.dtype.kind in "biu" or decides_shape and named.invars[i] not in named.boxed:
            candidates.append(i)
    src = user_frame(2)
    origin = f" computed from {', '.join(names)}" if names else ""
    aval = tracer.aval if type(tracer) is Tracer else "?"
    if remedy is None:
        remedy = ("Inside jit_ps only shapes and dtypes are known. Mark the argument static "
                  "(jit_ps(f, static_argnums=...) or static_argnames=..., one compile per value), "
                  "or express the data-dependent part with autograd_xla.cond / switch / while_loop / fori_loop "
                  "or np.where.")
    msg = "\n".join([f"{what} needs a concrete value, but this is a traced array {aval}{origin}.", str(src)]
                    + [p for p in (remedy, hint) if p])
    static = candidates if reached is not None and candidates and len(candidates) == len(indices) else ()
    return ConcretizationError(msg, static_candidates=static, random_draws=draws, source=src)


def _arguments_of(trace, inputs):
    """(the outermost trace, indices of its arguments) that `inputs` of `trace` come from,
    followed out through the values each enclosed trace stands for (Trace.origins); None if
    one stands for none (a loop's carry changes from step to step)."""
    while trace.parent is not None:
        outer = set()
        for v in inputs:
            origin = trace.origins.get(v)
            if origin is None:
                return None
            outer |= origin._trace.depends_on(origin._var)
        trace, inputs = trace.parent, outer
    return trace, [i for i, v in enumerate(trace.invars) if v in inputs]


# ----- autograd integration ------------------------------------------------------------------
def full(shape, value, dtype, source=None):
    """A traced np.full(shape, value, dtype=dtype) in the current trace (attributed to the
    user's line `source`, when given)."""
    return bind(np.full, (shape, value), {"dtype": dtype}, source=source)


def accumulator_zeros(shape, dtype):
    """Traced zeros that autograd's gradient accumulation starts from (VSpace.zeros: a sparse
    cotangent, the gradient of one element of a tuple or list, is added into zeros for all
    of it), marked as such for `accumulate`."""
    zeros = full(shape, 0, dtype)
    zeros._trace.zeros.add(zeros._var)
    return zeros


def accumulate(x, y):
    """autograd's `x += y` into a gradient accumulator (VSpace._mut_add): where `x` is still
    the accumulator's zeros and `y` a traced value of its type, `y` itself, under a handle of
    its own (a later `+=` into the accumulator must not change `y`): no add of zeros and no
    zeros in the graph (an MLP step's gradient: 12 of them, one per parameter and tuple
    unpacked). The same values, but a zero's sign (0.0 + -0.0 is 0.0), which XLA drops from
    x + 0 too (its import folds it to x)."""
    if (type(x) is Tracer and type(y) is Tracer and x._trace is y._trace and x._var in x._trace.zeros
            and x._kind is None and y._kind is None and x._var.aval == y._var.aval):
        return Tracer(y._var, y._trace)
    x += y
    return x


class TracerVSpace(VSpace):
    """autograd's vector space of a traced array: zeros and ones are traced constants, so
    gradient accumulation (`x += y` in autograd's mut_add) stays inside the graph."""

    source = None  # the user's line its ones() are attributed to (SeedVSpace), else the caller's

    def __init__(self, value):
        aval = value._var.aval  # (autograd makes one per vspace() call: several per node)
        self.shape = aval.shape
        self.dtype = aval.dtype
        self.iscomplex = aval.dtype.kind == "c"

    @property
    def size(self):
        return int(np.prod(self.shape)) * (2 if self.iscomplex else 1)

    @property
    def ndim(self):
        return len(self.shape)

    def zeros(self):
        return accumulator_zeros(self.shape, self.dtype)

    def _mut_add(self, x, y):
        return accumulate(x, y)

    def ones(self):
        return full(self.shape, (1 + 1j) if self.iscomplex else 1, self.dtype, self.source)

    def standard_basis(self):
        for idx in np.ndindex(*self.shape):
            for v in ([1.0, 1.0j] if self.iscomplex else [1.0]):
                basis = np.zeros(self.shape, dtype=self.dtype)
                basis[idx] = v
                yield basis

    def randn(self):
        return np.random.randn(*self.shape).astype(self.dtype)

    def _inner_prod(self, x, y):
        if self.iscomplex:
            return np.real(np.dot(np.conj(np.ravel(x)), np.ravel(y)))
        return np.dot(np.ravel(x), np.ravel(y))

    def _covector(self, x):
        return np.conj(x) if self.iscomplex else x


class SeedVSpace(TracerVSpace):
    """The vector space of a traced value that autograd's grad (or value_and_grad...)
    differentiates: its ones() are the seed cotangent of the backward pass, attributed to the
    user's line that computed the value rather than to the line that called grad."""

    def __init__(self, value):
        super().__init__(value)
        self.source = value._trace.source_of(value._var)


def _box_tracer(value, trace, node):
    """autograd boxes a traced array as it would box the numpy value it stands for: a numpy
    integer or bool scalar (what a reduction of an integer array returns) or a Python int
    cannot be differentiated, and autograd says so. Not where autograd's container
    primitives box one (our control flow reads integer loop counters out of boxed tuples).

    A reverse-mode node's VJP keeps the user's line of this forward operation, the line its
    backward-pass equations are attributed to (errors.user_frame). Forward mode needs nothing:
    a JVPNode computes its tangent as it is made, on the forward line."""
    aval = value._var.aval
    if not aval.shape and aval.dtype.kind in "biu":
        caller = sys._getframe(2)  # autograd's f_wrapped, which called new_box, which called us
        if caller.f_locals.get("f_wrapped") not in _CONTAINER_PRIMITIVES:
            raise TypeError(f"Can't differentiate w.r.t. type {int if value.aval.weak_type else value.dtype.type}")
    kind = value._kind
    if kind is not None:  # the subclass's own boxing decides first (PennyLane's refuses requires_grad=False)
        if kind.cls is None:
            raise unknown_kind(value, "differentiating")
        own = Box.type_mappings.get(kind.cls)
        if own is None:  # autograd's own words (tracer.new_box)
            raise TypeError(f"Can't differentiate w.r.t. type {kind.cls}")
        if own is not ArrayBox:
            own(value, trace, node)
    value._trace.boxed.add(value._var)
    if type(node) is VJPNode:
        eqns = value._trace.eqns  # (the equation just recorded for this operation has its line:
        last = eqns[-1] if eqns else None  # a frame walk fewer per node, a twentieth of a loop's trace)
        source = (last.source if last is not None and value._var in last.outvars else None) \
            or state.source or user_frame(2)
        if source is not None:
            node.vjp = ForwardVJP(node.vjp, source)
    return ArrayBox(value, trace, node)


# ----- derivatives in their primal's precision -------------------------------------------------
# autograd's derivative code makes arrays and numbers of numpy's default dtype (the VJP of
# np.where adds np.zeros(g.shape), np.mean's divides by a numpy int64, np.trace's einsums an
# np.eye), which promote a float32 cotangent to float64: plain autograd then runs a float32
# model's backward pass in float64, its matrix products included, and returns float64
# gradients. While tracing, a derivative is computed in its primal's precision instead: what
# that code makes is weakly typed (creation and numbers, autograd_patches.py and `_operator`),
# and what a VJP or JVP returns wider than its primal and than what it was computed from (a
# contraction with such an array) is cast back (`in_dtype`, `widest`, applied by
# autograd_patches.py's VJPNode and JVPNode). Values agree
# with plain autograd's to the primal dtype's precision; a float64 primal's derivative is
# plain autograd's.
def dtype_of(x):
    """The numpy dtype of an array, box or Tracer; None for anything else and for a weakly
    typed Tracer (a Python number, which widens nothing)."""
    x = getval(x)
    if type(x) is Tracer:
        aval = x._var.aval
        return None if aval.weak_type else aval.dtype
    dtype = getattr(x, "dtype", None)
    return dtype if isinstance(dtype, np.dtype) else None  # not a class's descriptor (np.float32.dtype)


def in_dtype(g, dtype):
    """Cotangent or tangent `g` in `dtype`, its primal's, where g is a wider float (complex) of
    a narrower float (complex) primal; otherwise g itself (integers, real and complex mixed,
    autograd's sparse objects)."""
    have = dtype_of(g)
    if not narrower(dtype) or have is None or have.kind != dtype.kind or have.itemsize <= dtype.itemsize:
        return g
    return g.astype(dtype)


def narrower(dtype):
    """Whether some float (complex) dtype is wider than `dtype`: float16/32, complex64."""
    return dtype is not None and dtype.itemsize < _WIDEST_ITEMSIZE.get(dtype.kind, 0)


_WIDEST_ITEMSIZE = {"f": 8, "c": 16}


def widest(dtype, incoming):
    """The dtype a derivative of a `dtype` primal is kept in, given the `incoming` dtypes of what
    it is computed from (the cotangent or tangents, the operation's operands): the primal's, or
    its kind at an incoming one's wider precision (a float64 cotangent the user's own float64 code
    sends into a float32 operation stays float64, as in plain autograd: only what autograd's
    derivative code widens by itself is cast back)."""
    if dtype is None or dtype.kind not in "fc":
        return dtype
    bits = _precision(dtype)
    for d in incoming:
        if d is not None and d.kind in "fc" and _precision(d) > bits:
            dtype, bits = np.promote_types(dtype, np.dtype(f"f{_precision(d)}")), _precision(d)
    return dtype


def _precision(dtype):
    """Bytes of one real number of float or complex `dtype` (complex128's: 8)."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def in_primal_dtypes(vjp, primals, result, args):
    """A VJP whose cotangents are in_dtype of their `primals`' dtypes, or of the incoming
    cotangent's or of one of the operation's operands (its `result` and `args`, which the VJP
    reads) where wider (`widest`); vjp itself where no primal is narrower than float64 or
    complex128."""
    dtypes = [dtype_of(x) for x in primals]
    for dtype in dtypes:  # (a loop, once per node of autograd's graph)
        if narrower(dtype):
            break
    else:
        return vjp
    read = [dtype_of(x) for x in (result, *args)]

    def narrowed(g):
        incoming = read + [dtype_of(x) for x in (g if type(getval(g)) in (tuple, list) else (g,))]
        return tuple(in_dtype(x, widest(d, incoming)) for x, d in zip(vjp(g), dtypes))
    return narrowed


_DERIVATIVE_FILES = tuple(os.path.join(os.path.dirname(autograd.__file__), *p) for p in
                          (("numpy", "numpy_vjps.py"), ("numpy", "numpy_jvps.py"), ("numpy", "linalg.py"),
                           ("numpy", "fft.py"), ("scipy", "")))
_is_derivative = {}


def derivative_code(frame):
    """Whether `frame` runs autograd's own derivative code: its VJPs and JVPs (numpy_vjps,
    numpy_jvps, numpy.linalg's, numpy.fft's, autograd.scipy's)."""
    filename = frame.f_code.co_filename
    hit = _is_derivative.get(filename)
    if hit is None:
        hit = _is_derivative[filename] = os.path.abspath(filename).startswith(_DERIVATIVE_FILES)
    return hit


_CONTAINER_PRIMITIVES = (container_take, container_untake, make_sequence, sequence_extend_left,
                         sequence_extend_right)


ArrayBox.register(Tracer)
Box.type_mappings[Tracer] = _box_tracer  # autograd's new_box calls this mapping's value
VSpace.register(Tracer, TracerVSpace)


# ----- interception of autograd primitives ---------------------------------------------------
_PRIMITIVE_CODE = None
_patched = []           # (cell, raw, interceptor)
_scanned_size = -1
_install_depth = 0
_install_lock = threading.Lock()


def _primitive_code():
    global _PRIMITIVE_CODE
    if _PRIMITIVE_CODE is None:
        code = anp.tanh.__code__
        if "f_raw" not in code.co_freevars:
            raise RuntimeError("autograd's primitive wrapper changed: no 'f_raw' closure cell "
                               "(autograd_xla supports autograd 1.9.x)")
        _PRIMITIVE_CODE = code
    return _PRIMITIVE_CODE


def _make_interceptor(f_wrapped, raw):
    traces = state
    found = []  # raw's registry entry, once it has one (an entry, once made, stays raw's)

    def f_raw(*args, **kwargs):
        if not traces.traces or _has_box(args):
            return raw(*args, **kwargs)
        if not _has_tracer(args, kwargs):
            try:
                return raw(*args, **kwargs)
            except ConcretizationError:
                # traced values hidden where the scan for them does not look (a closure passed
                # as an argument, nested containers): the primitive's rule can take them
                if not registry.has_rule(raw):
                    raise
                return bind(raw, args, kwargs)
        if found:
            entry = found[0]
        else:
            entry = registry.lookup(raw)
            if entry is not None:
                found.append(entry)
        if entry is not None and (entry.lowering is not None or entry.trace is not None):
            if traces.roll and trace_primitives_map.get(raw) is not f_wrapped:
                traces.opaque += 1  # (differentiated by another wrapper's VJP than a replay's)
            out = bind(raw, args, kwargs, entry)
        else:
            out = trace_through(raw, f_wrapped, raw, args, kwargs)
        if issubclass(type(out), (tuple, list, dict)):  # plainly a container box where it is differentiated
            # (the type: isinstance of a traced value asks its class, which a subclass's may not know)
            traces.traces[-1].containers[id(out)] = out
        return out

    f_raw.__wrapped_raw__ = raw
    return f_raw


def _raw_interceptor(raw):
    """The registry's interceptor for `raw` (numpy.random's global-state functions, from
    impurity.py: their calls become host-drawn inputs), or None."""
    entry = registry.lookup(raw)
    return entry.interceptor if entry is not None else None


def _scan_primitives(wrappers=None):
    """Find the autograd primitive wrappers alive (user-defined ones too) and make each an
    interceptor. autograd's trace_primitives_map holds each raw function's latest wrapper
    (0.07 ms for 680); an earlier wrapper of the same raw function (autograd.scipy.special's
    psi and digamma wrap one ufunc; lifelines wraps scipy's gammainc again) is only found by
    walking the heap (_scan_heap: 6-10 ms with scipy's and pandas' modules loaded), which a
    trace that failed in such a wrapper does (found_missed_wrapper). One not found still runs
    right: its raw function runs on the Tracers (a ufunc binds itself: Tracer.__array_ufunc__).
    `wrappers`: the functions to look at, else the map's."""
    global _scanned_size
    code = _primitive_code()
    known = {id(cell) for cell, _, _ in _patched}
    index = code.co_freevars.index("f_raw")
    found = 0
    for obj in list(trace_primitives_map.values()) if wrappers is None else wrappers:
        if type(obj) is types.FunctionType and obj.__code__ is code:
            cell = obj.__closure__[index]
            if id(cell) in known:
                continue
            raw = cell.cell_contents
            raw = getattr(raw, "__wrapped_raw__", raw)  # swapped already: a primitive made while installed
            interceptor = _raw_interceptor(raw) or _make_interceptor(obj, raw)
            _patched.append((cell, raw, interceptor))
            if _install_depth:  # another thread is tracing: this primitive is intercepted from now on too
                cell.cell_contents = interceptor
            known.add(id(cell))
            found += 1
    if wrappers is None:
        _scanned_size = len(trace_primitives_map)
    return found


_interceptors_seen = 0  # registry.interceptors_registered when _patched last took the registry's interceptors


def _reintercept():
    """Wrappers found before their raw function's interceptor was registered (impurity.py's,
    for numpy.random's functions, registers at its import: a trace made before it, by
    tracing.trace_function, found autograd.numpy.random's wrappers first) take it now. The
    caller holds _install_lock."""
    global _interceptors_seen
    _interceptors_seen = registry.interceptors_registered
    for k, (cell, raw, interceptor) in enumerate(_patched):
        registered = _raw_interceptor(raw)
        if registered is not None and registered is not interceptor:
            _patched[k] = (cell, raw, registered)
            if _install_depth:  # another thread is tracing: intercepted so from now on
                cell.cell_contents = registered


def _scan_heap():
    """_scan_primitives over every function alive that runs the wrappers' code; how many it
    found that the map had not given."""
    with _install_lock:
        return _scan_primitives(gc.get_referrers(_primitive_code()))


def found_missed_wrapper(tb):
    """Whether the traceback `tb` of a failed trace passes through a primitive wrapper that
    was not made an interceptor (an earlier wrapper of a raw function wrapped again: see
    _scan_primitives), and the heap's walk has now found it: the trace is then tried again."""
    code = _primitive_code()
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code is code:
            raw = frame.f_locals.get("f_raw")
            if raw is not None and not hasattr(raw, "__wrapped_raw__"):
                return _scan_heap() > 0
        tb = tb.tb_next
    return False


_saved_globals = []
_ABSENT = object()  # a patched attribute its owner lacks (ArrayBox.__float__): removed, not restored


def _stored(owner, name):
    """`owner.name` as stored (a class's staticmethod stays one), not as looked up; an owner
    without a __dict__ (a closure cell's `cell_contents`) is read plainly."""
    try:
        stored = vars(owner)
    except TypeError:
        return getattr(owner, name, _ABSENT)
    return stored.get(name, getattr(owner, name, _ABSENT))


_autoray_seen = None


def _register_with_autoray():
    """autoray (PennyLane's and quimb's dispatch) names an array's backend after the module of
    its class, and would look for `cos` in `autograd_xla`: once autoray is imported (never
    by us), a Tracer is registered as the autograd array it stands for. Its class-to-backend
    lookups are cached (functools.lru_cache), so the caches are cleared too. A Tracer of a
    Kind answers its class (numpy's, for an ndarray subclass) as the value would."""
    global _autoray_seen
    autoray = sys.modules.get("autoray")
    if autoray is None or autoray is _autoray_seen:
        return
    _autoray_seen = autoray
    register = getattr(autoray, "register_backend", None)
    if register is None:
        return
    register(Tracer, "autograd")
    inner = sys.modules.get("autoray.autoray", autoray)
    for name in ("_infer_class_backend_cached", "_infer_class_backend_multi_cached"):
        cache_clear = getattr(getattr(inner, name, None), "cache_clear", None)
        if cache_clear is not None:
            cache_clear()


@contextlib.contextmanager
def intercepting():
    global _install_depth
    registry.load_builtin()  # the package's own rules and patches, at the first trace
    registry.run_waiting()  # module patches of modules imported since (compositions/special.py's)
    _register_with_autoray()
    with _install_lock:
        if _scanned_size != len(trace_primitives_map):  # primitives made since the last scan
            _scan_primitives()
        if _interceptors_seen != registry.interceptors_registered:
            _reintercept()
        if _install_depth == 0:
            for cell, _, interceptor in _patched:
                cell.cell_contents = interceptor
            for module, name, replacement in registry.MODULE_PATCHES:  # compositions/autograd_patches.py, impurity.py
                _saved_globals.append((module, name, _stored(module, name)))
                setattr(module, name, replacement)
        _install_depth += 1
    try:
        yield
    finally:
        with _install_lock:
            _install_depth -= 1
            if _install_depth == 0:
                for cell, raw, _ in _patched:
                    cell.cell_contents = raw
                while _saved_globals:
                    module, name, original = _saved_globals.pop()
                    if original is _ABSENT:
                        delattr(module, name)
                    else:
                        setattr(module, name, original)


def primitive_wrappers():
    """(autograd wrapper, raw function) of every primitive found: for the coverage report."""
    with _install_lock:
        _scan_primitives()
    _scan_heap()
    raws = {}
    for cell, raw, _ in _patched:
        raws[id(raw)] = raw
    return list(raws.values())


# ----- tracing a whole function --------------------------------------------------------------
def trace_function(fun, in_avals, arg_names=None, parent=None, origins=None, example=None,
                   parameters=()):
    """Trace `fun(*tracers)`; returns (Graph, out_tree). `origins`: argument index -> the
    Tracer of an enclosing trace that argument equals (for errors: Trace.origins).
    `example`: the arguments' values in the call being traced (Trace.value_of);
    `parameters`: indices of arguments never to be made static (Trace.parameters). A trace
    that failed in a primitive wrapper not intercepted is tried again once it is."""
    try:
        return _trace_function(fun, in_avals, arg_names, parent, origins, example, parameters)
    except Exception as e:
        if not getattr(e, MISSED_WRAPPER, False):
            raise
        delattr(e, MISSED_WRAPPER)  # (an enclosing trace's retry is its own to decide)
    return _trace_function(fun, in_avals, arg_names, parent, origins, example, parameters)


#: The attribute marking an exception of a trace that ran through a primitive wrapper not
#: intercepted, found while the trace's interceptors were in (once they are taken out, every
#: wrapper's frame holds its raw function: a trace stopped by a concrete-value request ran
#: again, and walked the heap, in a process that had imported a module wrapping a raw
#: function twice, as autograd.scipy.special does psi's)
MISSED_WRAPPER = "_autograd_xla_missed_wrapper"


class _Example(dict):
    """Trace.example: the call's argument values by Var, each read as a numpy value at its
    first read (value_of), not before: a DeviceArray argument (keep_on_device) is copied to
    the host only where a trace needs its value, not at every trace (a TPU's MLP step copied
    its 3 MB of data and parameters back at its first call)."""

    def __getitem__(self, var):
        v = dict.__getitem__(self, var)
        if not isinstance(v, (int, float, complex, np.ndarray, np.generic)):
            v = np.asarray(v)
            dict.__setitem__(self, var, v)
        return v


def _trace_function(fun, in_avals, arg_names, parent, origins, example, parameters):
    with new_trace(parent) as trace:
        names = arg_names or [None] * len(in_avals)
        tracers = [trace.new_arg(aval, name) for aval, name in zip(in_avals, names)]
        trace.parameters = frozenset(tracers[i]._var for i in parameters)
        if example is not None and parent is None:
            trace.example = _Example(zip([t._var for t in tracers], example))
        for k, outer in (origins or {}).items():
            trace.origins[trace.invars[k]] = parent.lift(outer)
        try:
            try:
                out = fun(*tracers)
            except ValueError as e:
                cause = concretization_cause(e)
                if cause is None:
                    raise
                # numpy's "setting an array element with a sequence": the traced value's own error
                # says what happened; raised with the traceback down to the user's line
                raise cause.with_traceback(e.__traceback__) from None
        except Exception as e:
            if found_missed_wrapper(e.__traceback__):  # (while the interceptors are in: MISSED_WRAPPER)
                setattr(e, MISSED_WRAPPER, True)
            raise
        leaves, out_tree = tree.flatten(out)
        graph = trace.to_graph(leaves + [g[0] for g in trace.guards], out_tree)
        graph.guards = [guard[1:] for guard in trace.guards]
    return graph, out_tree
