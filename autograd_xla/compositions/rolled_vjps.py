"""Reverse mode over a rolled loop: autograd's backward pass made from the forward pass's
rolled graph instead of from the node per primitive call it recorded.

Tracing `grad(loss)` runs autograd on traced values: its forward pass records the loop's
equations once per step, and its backward pass then runs a VJP per node, recording their
equations once per step too, in reverse, which rolling.py rolls back afterwards. The backward
pass is most of that trace's time (a 500-step Euler integrator's gradient: 280-310 ms traced
so and rolled, 83-91 ms this way; docs/benchmarks.rst). While a trace runs, autograd's
differential operators (grad, value_and_grad, elementwise_grad, ...) get their VJP from
`make_vjp` here: the forward pass
runs as autograd runs it (the user's function sees its boxes), its equations are rolled
(rolling.roll), and where they roll the VJP is autograd's own over a replay of the rolled
forward graph (control_flow/replay.py), whose scans differentiate as scans, their bodies
once. Where they do not roll, nothing changes: the VJP is autograd's backward pass over the
nodes it recorded.

The forward equations stay in the trace (a value the function kept aside still reads them);
those no one reads are pruned before the program is rolled and lowered. The replay is not
used where autograd's VJP of a recorded call would differ from the VJP of its equations: a
primitive recorded through its Python (a composition's trace rule, a user's primitive with no
translation rule: `core.trace_state.opaque` counts them), a wrapper that is not the one the
replay finds for its raw function, a guard or a random draw made by the forward pass, or
values of ndarray subclasses (Kinds); nor in float32 programs (_rolled_forward).

Only signatures that are compiled, not tiered, take it (`core.trace_state.roll`:
jit_ps(tiered=False), and off the CPU). A tiered signature's trace also runs by numpy
(numpy_tier.py), which promises plain autograd's bits, and a scan's VJP does not always give
them: it sums a value's per-step gradients last step first where autograd sums the per-step
reads of a container's element (`params["W"]` in a loop's body) in the steps' order, and
random programs as loop bodies found a 0-d one a unit in the last place off at a call its
checks did not cover. Those keep autograd's backward pass, traced node by node and rolled
afterwards.
"""
import autograd.core
from autograd import differential_operators
from autograd.core import VJPNode
from autograd.tracer import trace as autograd_trace

from .. import registry, rolling, tracing, tree
from ..control_flow.replay import read, replay_eqns, replayable
from ..core import Graph, trace_state, walk_vars
from ..tracing import Tracer

_plain_make_vjp = autograd.core.make_vjp
#: Whether a rolled forward pass gives autograd's VJP (tests turn it off to compare).
ENABLED = True


def make_vjp(fun, x):
    """autograd.core.make_vjp(fun, x), with the VJP made from the rolled forward pass where
    the forward pass rolls (module docstring)."""
    traces = trace_state.traces
    if not traces or not trace_state.roll or not ENABLED:
        return _plain_make_vjp(fun, x)
    trace = traces[-1]
    leaves = tree.flatten(x)[0]
    if trace.kinds or not leaves or any(type(v) is not Tracer or v._trace is not trace for v in leaves):
        return _plain_make_vjp(fun, x)
    start, guards, invars = len(trace.eqns), len(trace.guards), len(trace.invars)
    opaque = trace_state.opaque
    end_value, end_node = autograd_trace(VJPNode.new_root(), fun, x)
    if end_node is None:  # (autograd.core.make_vjp's zeros, after its warning)
        return (lambda g: autograd.core.vspace(x).zeros()), end_value
    rolled = None
    if (trace_state.opaque == opaque and len(trace.guards) == guards and len(trace.invars) == invars
            and not trace.kinds and len(trace.eqns) - start >= rolling.MIN_EQNS):
        rolled = _rolled_forward(trace, trace.eqns[start:], [v._var for v in leaves], end_value)
    if rolled is None:
        return (lambda g: autograd.core.backward_pass(g, end_node)), end_value
    graph, out_tree = rolled
    trace_state.rolled_vjps += 1

    def forward(boxed):
        env = _Values(trace)
        env.update(zip(graph.invars, tree.flatten(boxed)[0]))
        replay_eqns(graph.eqns, env)
        return tree.unflatten(out_tree, [read(env, v) for v in graph.outvars])
    return _plain_make_vjp(forward, x)


class _Values(dict):
    """A replay's values: a Var the rolled equations read from before them is the trace's own."""

    def __init__(self, trace):
        self.trace = trace

    def __missing__(self, var):
        return Tracer(var, self.trace)


def _rolled_forward(trace, eqns, invars, end_value):
    """(the forward equations `eqns` of `invars` as a rolled graph, the output's tree), or None
    where they do not roll or cannot be replayed differentiably."""
    outs, out_tree = tree.flatten(end_value)
    outvars = []
    for o in outs:
        if type(o) is Tracer and o._trace is trace:
            outvars.append(o._var)
        elif type(o) is not Tracer and (isinstance(o, (int, float, complex)) or hasattr(o, "dtype")):
            outvars.append(o)
        else:
            return None
    for eqn in eqns:  # float64 programs only: autograd computes a float32 loop's cotangents partly in
        for v in eqn.outvars:  # float64, node by node, which a scan's VJP does not (an LSTM's gradient
            if v is not None and tracing.narrower(v.aval.dtype):  # differed in its last bits)
                return None
    graph = Graph(invars, list(eqns), outvars, operators=frozenset(trace.operators))
    rolled = rolling.roll(graph)
    if rolled is graph or not replayable(rolled.eqns) or not _boxes_seen(rolled.eqns):
        return None
    return rolled, out_tree


def _boxes_seen(eqns):
    """Whether each equation's autograd boxes reach its replay: an operand inside a list, tuple
    or dict is seen only by a replay face of the registry (np.stack's), not by autograd's
    primitive wrappers, which look at their arguments alone."""
    for eqn in eqns:
        for x in (*eqn.args, *eqn.kwargs.values()):
            if type(x) in (list, tuple, dict) and _holds_var(x):
                entry = registry.lookup(eqn.prim)
                if entry is None or entry.replay is None:
                    return False
        for sub in getattr(eqn.prim, "subgraphs", lambda e: ())(eqn):
            if not _boxes_seen(sub.eqns):
                return False
    return True


def _holds_var(obj):
    found = []
    walk_vars(obj, found.append)
    return bool(found)


registry.register_module_patch(differential_operators, "_make_vjp", make_vjp)
