"""Partial evaluation of traced graphs: binding-time analysis and program slicing.

The inputs of a Graph need not all be available at once. In the joint forward-and-backward
step of a loop, closed-over parameters are known before the loop starts, the carry and the
current slice of xs at each iteration of the forward pass, and the cotangents only in the
backward pass, after the whole forward pass has run. An equation can run as soon as its
latest input is available, so giving each input a *time* (a small integer; constants and
values with no inputs have time 0) gives every equation and every value the maximum of
its inputs' times. Splitting a graph by time is what jax calls partial evaluation:

* `PartialEval.slice(outputs, times)` is one phase: the equations of the given times that
  `outputs` need, in graph order, and the values from outside the phase they read. A phase
  that may recompute cheap values instead of receiving them (constants, functions of the
  loop index) lists their times too.
* The *residuals* of a later phase are the inputs of its slice that an earlier phase
  computes: what the earlier phase must save for it (a loop stacks them along its axis).

`cse(graph)` merges repeated equations first: autograd's VJPs often recompute a value the
forward pass has (logsumexp's VJP recomputes exp(x - ans)), and each copy would otherwise
be saved separately.

Equations are pure functions of their arguments (in-place numpy updates are recorded as
equations producing a new value), so any subset closed under "inputs come first" can be
replayed on its own. Sub-graphs of control-flow equations are opaque here: a loop equation
takes the time of its operands, captured values included.
"""
import numpy as np

from .core import DynamicSlice, Eqn, Graph, Var, map_vars

__all__ = ["PartialEval", "cse"]


class PartialEval:
    """Binding times of every value of `graph`.

    `input_times` gives one time per `graph.invars`; values the graph captures from
    enclosing traces get `captured_time`. `time[v]` is then defined for every Var of the
    graph, and `eqn_times[k]` for `graph.eqns[k]`.
    """

    def __init__(self, graph, input_times, captured_time=0):
        if len(input_times) != len(graph.invars):
            raise ValueError(f"{len(input_times)} input times for {len(graph.invars)} graph inputs")
        self.graph = graph
        self.time = dict(zip(graph.invars, input_times))
        for inner, _ in graph.captured:
            self.time[inner] = captured_time
        self.eqn_times = []
        for eqn in graph.eqns:
            t = max((self.time[v] for v in eqn.invars()), default=0)
            self.eqn_times.append(t)
            for v in eqn.outvars:
                if v is not None:
                    self.time[v] = t

    def time_of(self, x):
        """A Var's time; constants (non-Vars) have time 0."""
        return self.time[x] if isinstance(x, Var) else 0

    def slice(self, outputs, times):
        """(equations, inputs) of the phase that computes `outputs` from equations whose time
        is in `times`: the equations in graph order, and the Vars they and `outputs` read that
        none of them produces, ordered by creation (graph inputs, captured values, and values
        of other times)."""
        times = frozenset(times)
        needed = {v for v in outputs if isinstance(v, Var)}
        taken = []
        for eqn, t in zip(reversed(self.graph.eqns), reversed(self.eqn_times)):
            if t not in times or not any(v is not None and v in needed for v in eqn.outvars):
                continue
            taken.append(eqn)
            for v in eqn.outvars:
                needed.discard(v)
            needed.update(eqn.invars())
        taken.reverse()
        return taken, sorted(needed, key=lambda v: v.count)


_ARRAY_KEY_SIZE = 4096  # constants up to this many elements are compared by value


def cse(graph):
    """`graph` with every equation that repeats an earlier one (same primitive, same
    arguments, same result types) removed and its results renamed to the earlier ones."""
    rename, seen, eqns = {}, {}, []
    for eqn in graph.eqns:
        args, kwargs = map_vars((eqn.args, eqn.kwargs), lambda v: rename.get(v, v))
        if args is not eqn.args or kwargs is not eqn.kwargs:
            eqn = Eqn(eqn.prim, args, kwargs, eqn.outvars, eqn.out_tree, eqn.source)
        try:
            key = (id(eqn.prim), _key(args), _key(kwargs))
            hash(key)
        except TypeError:
            key = None
        hit = seen.get(key) if key is not None else None
        if hit is not None and _same_results(hit, eqn):
            for old, new in zip(eqn.outvars, hit.outvars):
                if old is not None:
                    rename[old] = new
            continue
        if key is not None:
            seen[key] = eqn
        eqns.append(eqn)
    if not rename:
        return graph
    outvars = [rename.get(v, v) if isinstance(v, Var) else v for v in graph.outvars]
    return Graph(graph.invars, eqns, outvars, graph.in_tree, graph.out_tree, graph.captured, graph.arg_names,
                 graph.guards)


def _same_results(a, b):
    if len(a.outvars) != len(b.outvars) or a.out_tree != b.out_tree:
        return False
    for u, v in zip(a.outvars, b.outvars):
        if (u is None) != (v is None) or (u is not None and u.aval != v.aval):
            return False
    return True


def _key(obj):
    """A hashable key equal for arguments a primitive cannot tell apart (TypeError if none)."""
    t = type(obj)
    if t is Var:
        return ("var", id(obj))
    if t is tuple or t is list:
        return (t.__name__,) + tuple(_key(x) for x in obj)
    if t is dict:
        return ("dict",) + tuple((k, _key(obj[k])) for k in obj)
    if t is slice:
        return ("slice", _key(obj.start), _key(obj.stop), _key(obj.step))
    if t is DynamicSlice:
        return ("dslice", _key(obj.start), obj.size)
    if t is np.ndarray:
        if obj.size <= _ARRAY_KEY_SIZE and obj.dtype.kind in "biufc":
            return ("array", obj.dtype.str, obj.shape, obj.tobytes())
        return ("object", id(obj))
    if isinstance(obj, np.generic):
        return ("scalar", obj.dtype.str, obj.tobytes())
    if t in (bool, int, str) or obj is None:
        return (t.__name__, obj)
    if t in (float, complex):
        return (t.__name__, repr(obj))  # 0.0 and -0.0 differ
    if t is np.dtype:
        return ("dtype", obj.str)
    return ("object", id(obj))  # functions, types, Ellipsis, loop parameters: by identity
