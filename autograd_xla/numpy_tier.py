"""The numpy tier: a traced graph run by numpy, equation by equation, for the calls of a
tiered signature that run plainly while it is held or compiling (tiering.py).

A plain autograd gradient call pays for its tape: a box, a node and a VJP closure per
primitive, and the backward pass's toposort, on top of numpy's own work; the traced graph of
the same call (jit_ps(grad(f)): forward and backward passes as one list of numpy calls) is
those numpy calls alone, in the order autograd made them. Run from a list prepared once
(`Replay`), it gives plain autograd's results bit for bit, faster (benchmarks/numpy_tier.py:
lifelines 0.30.3's seven parametric fitters' value_and_grad, 51-429 primitive calls,
2.3-4.1x; legacy loops' gradients, rolled, 2.7-5.3x; the README demo's regression network
5.2x; where matrix products take the time, the demo's classifier, 1.16x).

A graph qualifies (`replay`) where every equation is a call of a raw function autograd wraps
as a primitive (what autograd itself calls when no box is among the arguments), of
`operator.getitem`, of a ufunc method (`np.add.at` works on a copy: the tracer records it as
a pure function), of a ufunc (scipy.special's that autograd does not wrap, called by a
composition: compositions/stats.py's norm.logsf, log_ndtr of the standardised value, as scipy
computes it), or of a primitive whose registry entry has a `numpy` face (a scan: its body
run step by step, `prepared`; so a legacy Python loop, rolled into scans by rolling.py, runs
as its steps ran plainly), and it has no random draws. Its guards (a Python
branch on a traced value, core.Graph.guards) are computed as the compiled program computes
them: a call where one fails runs as plain autograd, and a signature whose guards refuse
more calls than they let through (past REFUSALS_KEPT) keeps to plain autograd. Its first
CHECKED_CALLS replayed calls run plain autograd too and compare (`Replay.__call__`): the
same structure, types, dtypes and bits, or the signature keeps to plain autograd.
Python's side effects in the function then run no more, as with a compiled call (README:
Gotchas).
"""
import operator

import numpy as np
from autograd.tracer import trace_primitives_map

from . import lowering, registry, tree
from .core import UfuncMethod, Var

#: A signature's first calls by numpy that also run plain autograd and compare, at their own
#: arguments: a difference of precision shows at some arguments only (a rolled loop's float32
#: steps computed in float64, its per-step Python numbers passed as numpy float64s, gave plain
#: autograd's bits at the first checked call of the fuzzer's program, not at the second). Each
#: costs a plain call and a run by numpy.
CHECKED_CALLS = 2
#: Calls a signature's guards may refuse before the tier gives up on it, if they refuse more
#: than they let through: each refused call runs by numpy and then plainly.
REFUSALS_KEPT = 8


def replay(graph, dynamic, out_tree, stats):
    """A Replay of `graph` (its inputs the call's leaves at `dynamic`, its results built into
    `out_tree`; its calls counted in `stats`, an aot.CacheStats), or None where it does not
    qualify."""
    if graph is None or graph.captured:
        return None
    # equations whose results nothing reads left out, as XLA leaves them out: autograd's VJPs of a
    # list argument make zeros of its other elements (`full((784, 200), 0)`; with them an MNIST-sized
    # MLP's gradient took 6.4 ms a call by numpy against plain autograd's 3.2)
    graph = lowering.prune(graph)
    faces = _faces(graph)
    return None if faces is None else Replay(graph, faces, dynamic, out_tree, stats)


def _faces(graph):
    """What runs each of `graph`'s equations (_face), or None where one has none."""
    faces = [_face(eqn, graph.operators) for eqn in graph.eqns]
    return None if None in faces else faces


#: numpy's ufuncs behind Python's operators on a Tracer (tracing._BINARY and comparisons)
_OPERATORS = {np.add: operator.add, np.subtract: operator.sub, np.multiply: operator.mul,
              np.true_divide: operator.truediv, np.floor_divide: operator.floordiv, np.remainder: operator.mod,
              np.power: operator.pow, np.matmul: operator.matmul, np.bitwise_and: operator.and_,
              np.bitwise_or: operator.or_, np.bitwise_xor: operator.xor, np.left_shift: operator.lshift,
              np.right_shift: operator.rshift, np.divmod: divmod, np.equal: operator.eq, np.not_equal: operator.ne,
              np.less: operator.lt, np.less_equal: operator.le, np.greater: operator.gt,
              np.greater_equal: operator.ge}


def _face(eqn, operators):
    """What runs `eqn`'s primitive on numpy values as plain autograd does, or None."""
    prim = eqn.prim
    if operators and eqn.outvars[0] in operators:  # an operator on values autograd did not box (core.Graph.operators)
        return _OPERATORS[prim]
    if prim is np.power and operators is None:  # (** plainly: its scalar math, its square and sqrt)
        return None
    if type(prim) is UfuncMethod:
        return _at(prim.ufunc) if prim.method == "at" else prim
    if prim is operator.getitem or type(prim) is np.ufunc:  # (a scipy.special ufunc autograd does not wrap,
        return prim                                          # from a composition: scipy.stats' norm.logcdf's log_ndtr)
    try:
        if prim in trace_primitives_map:
            return prim
        found = registry.lookup(prim)
    except TypeError:  # unhashable
        return None
    return None if found is None or found.numpy is None else found.numpy(eqn, prepared)


def prepared(graph):
    """A sub-graph's run by numpy (registry's `numpy` faces: a loop's body): `run(inputs)` ->
    its outputs, its inputs its invars and then its captured values; None where it has none."""
    graph = lowering.prune(graph)
    faces = _faces(graph)
    return None if faces is None else Replay(graph, faces).outputs


def _at(ufunc):
    def at(a, *rest):
        out = np.array(a)  # (the tracer's np.add.at is a function of its operand: numpy's writes it)
        ufunc.at(out, *rest)
        return out
    return at


class Replay:
    """A graph prepared as a list of steps (function, operands, keywords, result slots,
    whether the operands are flat, the slots read last there); operands name slots of one
    list of values (inputs first), or hold constants."""

    __slots__ = ("steps", "slots", "dynamic", "results", "out_tree", "guards", "ran", "refused", "unchecked",
                 "stats", "zero_d")  # steps None: plain's

    def __init__(self, graph, faces, dynamic=(), out_tree=None, stats=None):
        """`faces`: what runs each equation (_face)."""
        slot = {v: k for k, v in enumerate(list(graph.invars) + [inner for inner, _ in graph.captured])}
        self.steps = []
        for eqn, face in zip(graph.eqns, faces):
            args = tuple(_operand(a, slot) for a in eqn.args)
            kwargs = {k: _operand(v, slot) for k, v in eqn.kwargs.items()}
            outs = []
            for v in eqn.outvars:
                if v is not None:
                    slot[v] = len(slot)
                outs.append(None if v is None else slot[v])
            flat = all(kind != _NESTED for kind, _ in args) and not kwargs
            self.steps.append((face, args, kwargs, outs[0] if eqn.out_tree is tree.LEAF else outs, flat, ()))
        self.slots = len(slot)
        self.dynamic = list(dynamic)
        self.results = [_operand(v, slot) for v in graph.outvars]
        self.steps = _letting_go(self.steps, self.results)
        self.out_tree, self.stats = out_tree, stats
        self.guards = len(graph.guards)  # the trailing outputs that must hold
        self.ran = self.refused = 0  # calls run by numpy; calls the guards refused
        self.unchecked = CHECKED_CALLS  # checks to come (0 once one found a difference: steps None)
        self.zero_d = ()  # the results plain autograd gives as 0-d arrays (zero_d_positions)

    def __call__(self, leaves, plain):
        """The results of a call of these leaves (all of the call's: the graph takes those at
        `dynamic`); `plain()` runs the call as plain autograd, to check the first
        CHECKED_CALLS results against, and for good where they differ."""
        if not self.unchecked:
            if self.steps is None:
                return plain()
            got = self.run(leaves)
            if got is _REFUSED:
                self._refuse()
                return plain()
            self.ran += 1
            self.stats.numpy_tier_calls += 1
            return got
        want = plain()
        if self.unchecked == CHECKED_CALLS:
            self.zero_d = zero_d_positions(want)
        try:
            got = self.run(leaves)
        except Exception:
            self.steps = None
        else:
            if got is _REFUSED:  # checked at calls the guards let through
                self._refuse()
                return want
            if not same(got, want):
                self.steps = None
        self.unchecked = 0 if self.steps is None else self.unchecked - 1
        return want

    def _refuse(self):
        """Count a call the guards refused; plain autograd's for good where they refuse more
        calls than they let through."""
        self.refused += 1
        if self.refused > REFUSALS_KEPT and self.refused > self.ran:
            self.steps = None
            self.unchecked = 0

    def run(self, leaves):
        """The results of a call of these leaves, or _REFUSED where a guard is false."""
        outs = self.outputs([leaves[i] for i in self.dynamic])
        if self.guards:
            if not all(outs[-self.guards:]):
                return _REFUSED
            del outs[-self.guards:]
        for k in self.zero_d:
            outs[k] = np.asarray(outs[k])
        return outs[0] if self.out_tree is tree.LEAF else tree.unflatten(self.out_tree, outs)

    def outputs(self, inputs):
        """The graph's outputs, a list, on `inputs` (its invars' values, then its captured values)."""
        env = list(inputs)
        env.extend([None] * (self.slots - len(env)))
        _run_steps(self.steps, env)
        return [_value(o, env) for o in self.results]


_SLOT, _CONSTANT, _NESTED = "slot", "constant", "nested"
_REFUSED = object()  # Replay.run's result where a guard is false


def _operand(x, slot):
    """An equation's operand as (kind, what): a slot of the values, a constant, or a tuple,
    list or dict of operands."""
    if isinstance(x, Var):
        return _SLOT, slot[x]
    t = type(x)
    if t is tuple or t is list:
        items = [_operand(y, slot) for y in x]
        if all(kind is _CONSTANT for kind, _ in items):
            return _CONSTANT, x
        return _NESTED, (t, items)
    if t is dict:
        items = {k: _operand(y, slot) for k, y in x.items()}
        if all(kind is _CONSTANT for kind, _ in items.values()):
            return _CONSTANT, x
        return _NESTED, (t, items)
    return _CONSTANT, x


def _slots_read(operands):
    """The slots `operands` read."""
    for kind, x in operands:
        if kind is _SLOT:
            yield x
        elif kind is _NESTED:
            yield from _slots_read(x[1].values() if x[0] is dict else x[1])


def _value(operand, env):
    kind, x = operand
    if kind is _SLOT:
        return env[x]
    if kind is _CONSTANT:
        return x
    t, items = x
    if t is dict:
        return {k: _value(a, env) for k, a in items.items()}
    return t([_value(a, env) for a in items])


def zero_d_positions(result):
    """The positions of `result`'s leaves that are 0-d numpy arrays. numpy's ufuncs make numpy
    scalars of 0-d operands; plain autograd's results may be 0-d arrays all the same, where an
    ndarray subclass's ufuncs gave 0-d arrays (a PennyLane tensor's bias gradient, summed by
    `add`s of 0-d tensors): the tier's are then made 0-d arrays too, learned at the first check."""
    return tuple(k for k, x in enumerate(tree.flatten(result)[0]) if type(x) is np.ndarray and x.ndim == 0)


def same(a, b):
    """Whether two results are the same: structure, types, dtypes, shapes and bits."""
    la, ta = tree.flatten(a)
    lb, tb = tree.flatten(b)
    if ta != tb or len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if type(x) is not type(y):
            return False
        if isinstance(x, (np.ndarray, np.generic)):
            if x.dtype != y.dtype or np.shape(x) != np.shape(y) or np.asarray(x).tobytes() != np.asarray(y).tobytes():
                return False
        elif not (x == y or (x != x and y != y)):
            return False
    return True


def split(graph, dynamic, n_value):
    """A SplitReplay of a value-and-VJP graph (autodiff.make_value_vjp_function's, traced:
    the cotangent its last input, its first `n_value` outputs the value), or None where it
    does not qualify (also where the value reads the cotangent, or the cotangent is static)."""
    if graph is None or graph.captured or graph.guards or not dynamic or dynamic[-1] != max(dynamic):
        return None
    graph = lowering.prune(graph)
    faces = _faces(graph)
    if faces is None:
        return None
    whole = Replay(graph, faces, dynamic)
    tainted = {len(dynamic) - 1}  # the cotangent's slot (the inputs' come first), and those of what reads it
    forward, backward = [], []
    for step in whole.steps:
        if any(x in tainted for x in _slots_read(list(step[1]) + list(step[2].values()))):
            out = step[3]
            tainted.update([out] if type(out) is int else [k for k in out if k is not None])
            backward.append(step)
        else:
            forward.append(step)
    if any(x in tainted for x in _slots_read(whole.results[:n_value])):
        return None
    return SplitReplay(whole, forward, backward, n_value)


class SplitReplay:
    """grad(jit_ps(f))'s calls run by numpy in autograd's own two halves: a traced graph of f's
    value and its VJP (autodiff.make_value_vjp_function) split into the equations that do not
    read the cotangent, run at the forward pass (the value, and all the backward half reads:
    the residuals), and the others, run at the backward pass on those residuals. One forward
    pass, as plain autograd's; its bits are plain autograd's (checked: autodiff.HeldVJP)."""

    def __init__(self, whole, forward, backward, n_value):
        steps = _letting_go(forward + backward, whole.results)
        self.forward_steps, self.backward_steps = steps[:len(forward)], steps[len(forward):]
        self.slots, self.dynamic, self.results, self.n_value = whole.slots, whole.dynamic, whole.results, n_value
        self.cotangent = len(whole.dynamic) - 1  # its slot (the inputs' slots come first)
        self.zero_d = ()  # the results plain autograd gives as 0-d arrays (zero_d_positions)

    def forward(self, leaves):
        """(the value's leaves, the residuals) at these leaves (the cotangent's not among them)."""
        env = [leaves[i] for i in self.dynamic[:-1]]
        env.extend([None] * (self.slots - len(env)))
        _run_steps(self.forward_steps, env)
        return [self._result(k, env) for k in range(self.n_value)], env

    def backward(self, env, g):
        """The gradients' leaves at cotangent `g`, from the residuals `env` (kept: autograd's
        jacobian runs one VJP at many cotangents)."""
        env = list(env)
        env[self.cotangent] = g
        _run_steps(self.backward_steps, env)
        return [self._result(k, env) for k in range(self.n_value, len(self.results))]

    def _result(self, k, env):
        x = _value(self.results[k], env)
        return np.asarray(x) if k in self.zero_d else x


def _letting_go(steps, results):
    """`steps` with each value let go after the step that reads it last (their last field), as
    plain autograd's backward pass lets its intermediates go (all kept to the end, an
    MNIST-sized MLP gradient's call takes fresh memory each time: 5-40 ms by numpy against
    plain autograd's 3.2); the `results` are kept."""
    last = {}
    for k, step in enumerate(steps):
        for x in _slots_read(list(step[1]) + list(step[2].values())):
            last[x] = k
    for x in _slots_read(results):
        last.pop(x, None)
    done = {}
    for x, k in last.items():
        done[k] = done.get(k, ()) + (x,)
    return [step[:5] + (done.get(k, ()),) for k, step in enumerate(steps)]


def _run_steps(steps, env):
    """Replay.outputs' loop: `steps` run on the values `env`, in place."""
    for fn, args, kwargs, out, flat, done in steps:
        if flat:
            r = fn(*[env[x] if kind is _SLOT else x for kind, x in args])
        else:
            r = fn(*[_value(a, env) for a in args], **{k: _value(a, env) for k, a in kwargs.items()})
        for k in done:
            env[k] = None
        if type(out) is int:
            env[out] = r
        elif type(out) is list:
            for k, x in zip(out, tree.flatten(r)[0]):
                if k is not None:
                    env[k] = x
