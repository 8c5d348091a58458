"""Replaying a traced graph on new operands, differentiably, and the functional in-place
primitives that replay needs.

The derivatives of scan (scans.py, residuals.py) run pieces of a traced graph as loop
bodies. A piece is replayed equation by equation on the current operands. Without autograd
boxes among an equation's operands that is `tracing.bind`, which records the same primitive
call again. With boxes it is the primitive's replay face in the registry, or else its
autograd wrapper, so the replay is differentiable once more (grad of grad, forward over
reverse): autograd's own wrapper of the raw function, or for the few primitives the tracer
records without one, a wrapper registered below (indexing, functional forms of in-place
updates) or by the module defining the primitive (the control-flow primitives, which become
calls of scan / while_loop / cond again with replayed bodies). This module looks those up
in the registry and imports none of them.
"""
import operator

import autograd.numpy as anp
import numpy as np
from autograd.extend import defjvp, defvjp, primitive
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import box_types, getval, trace_primitives_map

from .. import registry, tracing, tree
from ..core import UfuncMethod, Var, dynamic_getitem, dynamic_update, map_vars, setitem, trace_state
from ..tracing import Tracer
from .common import astype, dtype_of


def eval_graph(graph, args, captured):
    """`graph`'s outputs on `args` (its invars) and `captured` (values for graph.captured)."""
    return eval_eqns(graph.eqns, [*graph.invars, *(inner for inner, _ in graph.captured)], [*args, *captured],
                     graph.outvars)


def eval_eqns(eqns, inputs, args, outputs):
    """`outputs` (Vars or constants) of equations `eqns` run on `args`, the values of the Vars
    `inputs` (a slice of a graph: partial_eval.PartialEval.slice)."""
    env = dict(zip(inputs, args))
    replay_eqns(eqns, env)
    return [read(env, v) for v in outputs]


def read(env, v):
    return env[v] if isinstance(v, Var) else v


def replay_eqns(eqns, env):
    """Run `eqns` on the values in `env` (Var -> Tracer, box or constant), adding their results."""
    for eqn in eqns:
        args, kwargs = map_vars((eqn.args, eqn.kwargs), env.__getitem__)
        if any(type(env[v]) in box_types for v in eqn.invars()):
            handler = _box_handler(eqn.prim)
            if handler is None:  # replayable() rules this out for the graphs we replay
                raise NotImplementedError(f"cannot differentiate a replayed '{eqn.prim!r}'")
            line, trace_state.source = trace_state.source, eqn.source  # (its equations and its
            try:                                                         # backward pass's are on it)
                out = handler(args, kwargs)
            finally:
                trace_state.source = line
        else:
            out = tracing.bind(eqn.prim, args, kwargs, source=eqn.source)  # the replayed line, not ours
        leaves = tree.flatten(out)[0]
        if len(leaves) != len(eqn.outvars):
            raise RuntimeError(f"replaying {eqn.prim!r} gave {len(leaves)} results for {len(eqn.outvars)}")
        for v, x in zip(eqn.outvars, leaves):
            if v is not None:
                if v.aval.weak_type:
                    _mark_weak(x, args, kwargs)
                env[v] = x


def _mark_weak(x, args, kwargs):
    """The tracer's operator methods mark results of weak operands weak (NEP 50: `i * 0.5` of
    a Python-int loop index stays a Python float), which `bind` alone does not: redo it."""
    v = unbox(x)
    if type(v) is not Tracer or v.aval.weak_type:
        return
    inputs = set()
    _operand_vars((args, kwargs), inputs)
    if v.graph_var not in inputs:  # a fresh result, not an operand passed through
        v.mark_weak()


def unbox(x):
    while type(x) in box_types:
        x = x._value
    return x


def _operand_vars(obj, found):
    obj = unbox(obj)
    t = type(obj)
    if t is Tracer:
        found.add(obj.graph_var)
    elif t is tuple or t is list:
        for x in obj:
            _operand_vars(x, found)
    elif t is dict:
        for x in obj.values():
            _operand_vars(x, found)


def _box_handler(prim):
    """fn(args, kwargs) applying `prim` differentiably, or None if there is none."""
    entry = registry.lookup(prim)
    if entry is not None and entry.replay is not None:
        return entry.replay
    wrapped = trace_primitives_map.get(prim)
    if wrapped is None:
        return None
    return lambda args, kwargs: wrapped(*args, **kwargs)


def replayable(eqns):
    """Whether every equation that may meet an autograd box (one with traced operands) can be
    replayed differentiably, looking inside control-flow bodies."""
    for eqn in eqns:
        if not eqn.invars():
            continue
        if _box_handler(eqn.prim) is None:
            return False
        for sub in getattr(eqn.prim, "subgraphs", lambda e: ())(eqn):
            if not replayable(sub.eqns):
                return False
    return True


def graph_fn(graph, consts, args):
    """`graph` as a body function: its outputs on the leaves `args`, `consts` its captured values."""
    return eval_graph(graph, list(args), consts)


# Functional forms of the tracer's in-place updates and traced-bound slices, as autograd
# primitives: `x[idx] += v` (np.add.at), `x[idx] = v`, and their DynamicSlice versions.
def _zeros_like(x, like=None):
    return np.zeros(np.shape(getval(x)), dtype_of(like if like is not None else x))


def _unbroadcast_to(g, like):
    """g summed down to like's shape (a value that was broadcast into g) and like's dtype."""
    shape = np.shape(getval(like))
    extra = np.ndim(getval(g)) - len(shape)
    if extra > 0:
        g = anp.sum(g, axis=tuple(range(extra)))
    axes = tuple(k for k, n in enumerate(shape) if n == 1 and np.shape(getval(g))[k] != 1)
    if axes:
        g = anp.sum(g, axis=axes, keepdims=True)
    if dtype_of(g).kind == "c" and dtype_of(like).kind != "c":
        g = anp.real(g)
    return astype(g, dtype_of(like))


@primitive
def scatter_add(x, idx, v):
    """np.add.at(x, idx, v) as a function: x with v added at idx."""
    return tracing.bind(_ADD_AT, (x, idx, v), {})


@primitive
def set_items(x, idx, v):
    """x with x[idx] = v, as a function."""
    return tracing.bind(setitem, (x, idx, v), {})


@primitive
def dyn_getitem(x, idx):
    return tracing.bind(dynamic_getitem, (x, idx), {})


@primitive
def dyn_update(x, idx, v, accumulate):
    return tracing.bind(dynamic_update, (x, idx, v, accumulate), {})


_ADD_AT = UfuncMethod(np.add, "at")
defvjp(scatter_add, lambda ans, x, idx, v: lambda g: g,
       lambda ans, x, idx, v: lambda g: _unbroadcast_to(g[idx], v), argnums=(0, 2))
defjvp(scatter_add, lambda g, ans, x, idx, v: g,
       lambda g, ans, x, idx, v: scatter_add(_zeros_like(ans, g), idx, g), argnums=(0, 2))
defvjp(set_items, lambda ans, x, idx, v: lambda g: set_items(g, idx, 0),
       lambda ans, x, idx, v: lambda g: _unbroadcast_to(g[idx], v), argnums=(0, 2))
defjvp(set_items, lambda g, ans, x, idx, v: set_items(g, idx, 0),
       lambda g, ans, x, idx, v: set_items(_zeros_like(ans, g), idx, g), argnums=(0, 2))
defvjp(dyn_getitem, lambda ans, x, idx: lambda g: dyn_update(_zeros_like(x, g), idx, g, True))
defjvp(dyn_getitem, lambda g, ans, x, idx: dyn_getitem(g, idx))
defvjp(dyn_update,
       lambda ans, x, idx, v, accumulate: lambda g: g if accumulate else dyn_update(g, idx, 0, False),
       lambda ans, x, idx, v, accumulate: lambda g: _unbroadcast_to(dyn_getitem(g, idx), v), argnums=(0, 2))
defjvp(dyn_update, lambda g, ans, x, idx, v, accumulate: g if accumulate else dyn_update(g, idx, 0, False),
       lambda g, ans, x, idx, v, accumulate: dyn_update(_zeros_like(ans, g), idx, g, accumulate), argnums=(0, 2))


def _wrap(fn):
    return lambda args, kwargs: fn(*args, **kwargs)


# (np.stack and np.concatenate take their arrays in a list, where autograd's primitive wrappers see
# no box: autograd.numpy's own functions, which rolling.py's stacked per-step inputs replay through)
for _prim, _fn in {operator.getitem: ArrayBox.__getitem__, _ADD_AT: scatter_add, setitem: set_items,
                   dynamic_getitem: dyn_getitem, dynamic_update: dyn_update, np.stack: anp.stack,
                   np.concatenate: anp.concatenate}.items():
    registry.register_replay(_prim, _wrap(_fn))  # and the control-flow primitives, in their own modules
