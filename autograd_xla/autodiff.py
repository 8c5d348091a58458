"""autograd differentiating through a jitted function: `grad(jit_ps(f))` and friends.

A call of a jitted function on autograd boxes is one autograd primitive, `jit_call`.
Its VJP and JVP are themselves jitted functions, built by running autograd's own
`make_vjp` / `make_jvp` over the user's function inside a trace; so the backward pass
is compiled too, and because those derivative functions are jitted functions again,
a second derivative (`grad(grad(jit_ps(f)))`, `hessian`) goes round the same loop.

Before a tiered signature is compiled, while it is held (traced, its calls run by numpy:
numpy_tier), such a call is `held_call` instead: f's value and VJP traced as one graph and
run by numpy in autograd's two halves (HeldVJP, numpy_tier.SplitReplay); and once f's
signature is compiled, until its VJP is compiled too (HeldVJP.vjp_compiled), which is
asked for then.
"""
import threading
import time

import numpy as np
from autograd import builtins as differentiable
from autograd.core import VJPNode, make_jvp, make_vjp
from autograd.extend import defjvp, defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import box_types, getval

from . import impurity, numpy_tier, tree
from .core import Var, trace_state

_LEAVES = 2  # jit_call(fn, spec, *leaves): leaves start at argument 2


@primitive
def jit_call(fn, spec, *leaves):
    return fn._call_flat(spec, list(leaves))


@primitive
def jit_call_leaves(fn, spec, *leaves):
    """jit_call's output as the tuple of its leaves, whose containers plain_containers
    rebuilds outside the primitive."""
    return tuple(tree.flatten(fn._call_flat(spec, list(leaves)))[0])


def _with(leaves, nums, values):
    full = list(leaves)
    for i, v in zip(nums, values):
        full[i] = v
    return full


class _Restricted:
    """fn as a function of leaves[nums] alone, returning its output's leaves.

    One differentiated leaf is passed bare, not in a 1-tuple: autograd accumulates a tuple's
    gradient in place into zeros of the leaf's dtype, while a bare array's gradient keeps the
    dtype the backward pass produced. A container output is returned as an autograd tuple of
    its leaves: autograd differentiates only outputs it boxed itself (a plain tuple of boxes
    looks constant to it, and it has no forward mode through dicts); `out_tree` restores it.
    """

    def __init__(self, fn, spec, leaves, nums, boxing):
        self.fn, self.spec, self.leaves, self.nums, self.boxing = fn, spec, leaves, nums, boxing
        self.out_tree = None

    def point(self):
        if len(self.nums) == 1:
            return self.leaves[self.nums[0]]
        return tuple(self.leaves[i] for i in self.nums)

    def __call__(self, diff):
        values = (diff,) if len(self.nums) == 1 else diff
        out = self.fn._apply(self.spec, _with(self.leaves, self.nums, values), self.boxing)
        outs, self.out_tree = tree.flatten(out)
        return outs[0] if self.out_tree is tree.LEAF else differentiable.tuple(outs)


def call(fn, spec, leaves, entry):
    """A call of jitted `fn` on autograd's boxes (leaves), compiled signature `entry`, as the
    function run plainly returns its output. autograd boxes a primitive's result whole: a
    container made by one of autograd's primitives (numpy's that return several arrays,
    autograd.builtins' tuple, list and dict: Trace.containers) is a container box plainly
    too, and comes from jit_call so, as do a derivative function's (`_derivative`: autograd's
    own VJPs and JVPs return container boxes); any other comes from jit_call_leaves and
    plain_containers. On reverse mode's boxes a real array's value and VJP come from
    programs that do not run its forward pass twice (reverse_mode; not for DeviceArray
    results, which the derivative functions do not give)."""
    if entry.out_tree is tree.LEAF or entry.autograd_out:
        reverse = None if fn.keep_on_device else reverse_mode(entry, leaves)
        if reverse is not None:
            if reverse.ahead():
                return jit_call_ahead(fn, spec, reverse, *leaves)
            if reverse.split_made(fn, spec, leaves):
                return jit_call_split(fn, spec, reverse, *leaves)
        return jit_call(fn, spec, *leaves)
    return plain_containers(jit_call_leaves(fn, spec, *leaves), entry, leaves)


class Reverse:
    """A compiled signature's calls on reverse-mode boxes at leaves[nums], its output one real
    array (reverse_mode). A real scalar's compute its gradient with its value
    (jit_call_ahead), at cotangent `one`, until that gradient went unused MISSES times (the
    backward pass's cotangent another, or no backward pass); the others run the value and
    VJP's graph cut where the cotangent enters (`split`, jit_call_split)."""

    __slots__ = ("nums", "aval", "one", "misses", "split", "work")
    MISSES = 2

    def __init__(self, nums, aval, work):
        self.nums, self.aval, self.misses, self.split, self.work = nums, aval, 0, None, work
        self.one = np.ones((), aval.dtype) if aval.shape == () else None

    def ahead(self):
        """Whether this call's gradient is computed with its value."""
        return self.one is not None and self.misses < self.MISSES

    def takes(self, g):
        """Whether the gradient computed ahead is the VJP at cotangent g."""
        return (self.one is not None and type(g) not in box_types and np.shape(g) == ()
                and np.result_type(g) == self.one.dtype and g == self.one)

    def split_made(self, fn, spec, leaves):
        """Whether the split (Split.make) takes this call: made at the first, False for good
        where it cannot be."""
        if self.split is None:
            self.split = Split.make(fn, spec, [getval(x) for x in leaves], self.nums, self.aval, self.work) or False
        return bool(self.split)


def reverse_mode(entry, leaves):
    """The Reverse of a call of compiled signature `entry` on these leaves: its output one real
    array, its boxes autograd's reverse mode's, of one level. Else None."""
    outvars = entry.graph.outvars
    if entry.out_tree is not tree.LEAF or len(outvars) != 1 or type(outvars[0]) is not Var:
        return None
    aval = outvars[0].aval
    if aval.dtype.kind != "f":
        return None
    nums, trace = [], None
    for i, x in enumerate(leaves):
        if type(x) in box_types:
            if type(x._value) in box_types or type(x._node) is not VJPNode or trace not in (None, x._trace):
                return None
            trace = x._trace
            nums.append(i)
    nums = tuple(nums)
    reverse = entry.reverse.get(nums)
    if reverse is None:
        reverse = entry.reverse[nums] = Reverse(nums, aval, getattr(entry.lowered, "work", 0))
    return reverse


class Split:
    """fn's value and VJP at leaves[nums] (make_value_vjp_function's graph) cut where the
    cotangent enters (partial_eval): `forward` takes the leaves it reads (`forward_leaves`)
    and gives the value and the residuals, the values the other half reads from the first;
    `backward` takes the leaves it reads (`backward_leaves`), the residuals and the cotangent
    and gives the gradients. Each is a jitted function of the graph's equations replayed
    (control_flow.replay), compiled at its first call: so the backward pass does not run the
    forward pass again, as jit_call's VJP does (a jacobian runs it once per output)."""

    __slots__ = ("forward", "backward", "forward_leaves", "backward_leaves")
    #: Each residual is a result and an argument more, ~2-4 µs a call on the Python path, and
    #: recomputing the forward pass costs its elements (`work`, the forward program's
    #: context.op_work) at ~1 ns each: split only where that work is WORK_PER_RESIDUAL a
    #: residual at least. PennyLane's qml.jacobian(jit_ps(circuit)) of a 2-qubit probs, 34
    #: residuals of 1-4 complex numbers: 999 µs a jacobian split, 560 with jit_call's VJP.
    WORK_PER_RESIDUAL = 4096

    @classmethod
    def make(cls, fn, spec, values, nums, aval, work):
        """The Split at these leaf values, or None where the value and VJP's trace is not one
        the split holds for at other values (static leaves, guards, random draws), whose
        residuals would come back narrowed (x64=False), off the CPU, where they would go
        to the host and back to the device, which recomputing them on the device spares, or
        where the forward pass's `work` is too little to pay for passing them."""
        if fn.x64 is False or fn._backend().platform != "cpu":
            return None
        from .control_flow import replay
        from .partial_eval import PartialEval
        try:
            d = _derivative(fn, "value_vjp", spec, nums)
            entry = d._traced_entry(*values, np.zeros(aval.shape, aval.dtype))
        except Exception:  # (not the call's to raise: jit_call's, as before)
            return None
        graph, n = entry.graph, len(values)  # leaf n: the cotangent
        if entry.impure or entry.static_leaves or entry.guards or graph.captured or n not in entry.dynamic:
            return None
        value, grads = graph.outvars[0], graph.outvars[1:]
        timed = PartialEval(graph, [int(i == n) for i in entry.dynamic])
        backward_eqns, backward_in = timed.slice(grads, {1})
        leaf_of = dict(zip(graph.invars, entry.dynamic))
        residuals = [v for v in backward_in if v not in leaf_of]
        forward_eqns, forward_in = timed.slice([value, *residuals], {0})
        if any(v not in leaf_of for v in forward_in) or work < cls.WORK_PER_RESIDUAL * len(residuals):
            return None
        backward_in = [v for v in backward_in if v in leaf_of and leaf_of[v] != n]
        g = graph.invars[entry.dynamic.index(n)]

        def forward(*xs):
            return tuple(replay.eval_eqns(forward_eqns, forward_in, xs, (value, *residuals)))

        def backward(*xs):
            return differentiable.tuple(replay.eval_eqns(backward_eqns, (*backward_in, *residuals, g), xs, grads))

        name = getattr(fn._fun, "__name__", "fn")
        forward.__name__, backward.__name__ = f"forward_{name}", f"backward_{name}"
        split = cls()
        split.forward, split.backward = (_jitted_like(fn, f, fallback="error", tiered=False) for f in (forward, backward))
        split.forward_leaves = [leaf_of[v] for v in forward_in]
        split.backward_leaves = [leaf_of[v] for v in backward_in]
        return split


def plain_containers(out, entry, leaves):
    """jit_call_leaves' result, the tuple of the output's leaves (autograd boxes it whole, a
    SequenceBox), in the output's structure as plain autograd's own code returns it: plain
    containers (a DictBox or SequenceBox is no dict or tuple to the caller, and a None in it
    has no vector space for its derivative) holding boxes for what depends on the boxed
    arguments and plain values for the rest (pymoo's autograd backend adds to the dict
    returned and differentiates the outputs it finds boxed). A leaf its graph computes from
    the boxed leaves (`_reached`) is taken out through the box, as code indexing it does
    (autograd's container_take), the others are values; under boxes of several levels (a
    higher derivative's) every leaf is taken through the box."""
    nums, traces = [], set()
    for i, x in enumerate(leaves):
        if type(x) in box_types:
            nums.append(i)
            traces.add(x._trace)
            if type(x._value) in box_types:
                traces.add(None)  # boxes of several levels: every leaf through the box
    values = list(getval(out))
    if type(out) not in box_types:
        reached = ()
    elif len(traces) == 1:
        nums = tuple(nums)
        reached = entry.reached.get(nums)
        if reached is None:
            reached = entry.reached[nums] = _reached(entry, nums)
    else:
        reached = range(len(values))
    for i in reached:
        values[i] = out[i]
    return tree.unflatten(entry.out_tree, values)


def _reached(entry, nums):
    """Indices of entry's output leaves that its graph computes from leaves[nums] (a
    control-flow equation's operands include the values its sub-graphs capture)."""
    graph, n = entry.graph, tree.num_leaves(entry.out_tree)
    marked = {v for v, leaf in zip(graph.invars, entry.dynamic) if leaf in nums}
    for eqn in graph.eqns:
        if any(v in marked for v in eqn.invars()):
            marked.update(v for v in eqn.outvars if v is not None)
    return tuple(i for i, v in enumerate(graph.outvars[:n]) if type(v) is Var and v in marked)


# Argument containers holding boxes are rebuilt as autograd's container boxes, as `grad`
# would have passed them (see tree.unflatten), in both directions and for a function run as
# plain autograd on boxes. autograd's dict constructor has a VJP but no JVP: it gets one
# here (it is linear in the values), so that forward mode works over dicts too.
BOXING = {tuple: differentiable.tuple, list: differentiable.list, dict: differentiable.dict}
defjvp(differentiable._make_dict, lambda g, ans, keys, vals: differentiable._make_dict(keys, g), argnums=(1,))

# The derivative functions take the leaves as separate positional arguments, never as one
# tuple: differentiated again, a tuple holding boxes would be rebuilt as a SequenceBox, and
# reading it would box every leaf, differentiating also those autograd did not.


def make_vjp_function(fn, spec, nums):
    """(*leaves, g) -> gradients of fn's output . g with respect to leaves[nums]."""
    def vjp_fn(*args):
        leaves, g = args[:-1], args[-1]
        f = _Restricted(fn, spec, leaves, nums, BOXING)
        vjp, _ = make_vjp(f, f.point())
        grads = vjp(g if f.out_tree is tree.LEAF else tuple(tree.flatten(g)[0]))
        # a tuple built with autograd.builtins.tuple stays differentiable (a SequenceBox when
        # its elements are boxes), which higher derivatives of this function need
        return differentiable.tuple([grads] if len(nums) == 1 else grads)
    vjp_fn.__name__ = f"vjp_{getattr(fn._fun, '__name__', 'fn')}"
    return vjp_fn


def make_value_vjp_function(fn, spec, nums):
    """(*leaves, g) -> (fn's output, the gradients of its output . g with respect to
    leaves[nums]): one forward pass for both, as grad(fn) makes them (HeldVJP traces it)."""
    def value_vjp_fn(*args):
        leaves, g = args[:-1], args[-1]
        f = _Restricted(fn, spec, leaves, nums, BOXING)
        vjp, ans = make_vjp(f, f.point())
        grads = vjp(g)
        return ans, differentiable.tuple([grads] if len(nums) == 1 else grads)
    value_vjp_fn.__name__ = f"value_vjp_{getattr(fn._fun, '__name__', 'fn')}"
    return value_vjp_fn


def make_jvp_function(fn, spec, nums):
    """(*leaves, *tangents) -> the tangent of fn's output along tangents of leaves[nums]."""
    def jvp_fn(*args):
        leaves, tangents = args[:-len(nums)], args[-len(nums):]
        f = _Restricted(fn, spec, leaves, nums, BOXING)
        _, out_tangent = make_jvp(f, f.point())(tangents[0] if len(nums) == 1 else tuple(tangents))
        return out_tangent if f.out_tree is tree.LEAF else tree.unflatten(f.out_tree, out_tangent)
    jvp_fn.__name__ = f"jvp_{getattr(fn._fun, '__name__', 'fn')}"
    return jvp_fn


def _derivative(fn, kind, spec, nums):
    """The jitted VJP or JVP of jitted `fn` with respect to leaves[nums]: one per set of
    differentiated leaves, as autograd asks for them."""
    key = (kind, spec, nums)
    d = fn._derivatives.get(key)
    if d is None:
        maker = {"vjp": make_vjp_function, "jvp": make_jvp_function, "value_vjp": make_value_vjp_function}[kind]
        d = fn._derivatives[key] = _jitted_like(fn, maker(fn, spec, nums))
        d._warned = fn._warned  # one warning per problem, not one per derivative
        d.derivative = True
        # its leaves are fn's, then the cotangent or tangents: the leaves fn's traces needed the
        # values of, its trace needs too, which it would else find by tracing again (a 200-step
        # loop ending in y[:n]: grad(jit_ps(f)) ran f's Python twice for its trace, now once)
        d._auto_static.prior = lambda _, fn=fn, spec=spec: fn._auto_static[spec]
    return d


def _jitted_like(fn, f, **options):
    """`f` jitted with jitted `fn`'s options, `options` replacing some."""
    kept = dict(fallback=fn.fallback, backend=fn.backend, cache_size=fn.cache_size, x64=fn.x64,
                max_program=fn.max_program, explain=fn.explain, tiered=fn.tiered, deterministic=fn.deterministic)
    return type(fn)(f, **{**kept, **options})


def _vjp(argnums, ans, args, kwargs):
    fn, spec, leaves = args[0], args[1], args[_LEAVES:]
    bwd = _derivative(fn, "vjp", spec, tuple(a - _LEAVES for a in argnums))
    return lambda g: bwd(*leaves, g)


def _jvp(argnums, gs, ans, args, kwargs):
    fn, spec, leaves = args[0], args[1], args[_LEAVES:]
    fwd = _derivative(fn, "jvp", spec, tuple(a - _LEAVES for a in argnums))
    return fwd(*leaves, *gs)


defvjp_argnums(jit_call, _vjp)
defjvp_argnums(jit_call, _jvp)
defvjp_argnums(jit_call_leaves, _vjp)
defjvp_argnums(jit_call_leaves, lambda argnums, gs, ans, args, kwargs: differentiable.tuple(
    tree.flatten(_jvp(argnums, gs, ans, args, kwargs))[0]))


_ahead = threading.local()  # jit_call_ahead's and jit_call_split's forward pass -> the VJP autograd makes right after it


@primitive
def jit_call_ahead(fn, spec, ahead, *leaves):
    """jit_call of a real scalar on reverse-mode boxes (`ahead`, a Reverse): its value and its
    gradient at cotangent `ahead.one` from one program, the "value_vjp" derivative function;
    the VJP hands out that gradient where autograd's cotangent is that one (grad's,
    value_and_grad's), and runs jit_call's VJP otherwise. jit_call's value and VJP run the
    function's forward pass twice, in two programs: pymanopt's Gaussian mixture's gradient
    by grad(jit_ps(cost)) took 0.68 ms a call against jit_ps(grad(cost))'s 0.27."""
    ans, grads = _derivative(fn, "value_vjp", spec, ahead.nums)(*leaves, ahead.one)
    fn.stats.hits += 1  # (a call of its compiled signature, as jit_call's is; its derivatives' counts say which program ran)
    _ahead.state = grads
    return ans


class _Backward:
    """jit_call_ahead's VJP: the gradient computed ahead, where the cotangent is `ahead.one`;
    one never called (no backward pass reached it) or called at another cotangent is a miss."""

    __slots__ = ("fn", "spec", "ahead", "leaves", "grads", "used")

    def __init__(self, fn, spec, ahead, leaves, grads):
        self.fn, self.spec, self.ahead, self.leaves, self.grads, self.used = fn, spec, ahead, leaves, grads, False

    def __call__(self, g):
        ahead = self.ahead
        if not self.used and ahead.takes(g):
            self.used = True
            return self.grads
        self.used = True
        ahead.misses += 1
        return _derivative(self.fn, "vjp", self.spec, ahead.nums)(*self.leaves, g)

    def __del__(self):
        if not self.used:
            self.ahead.misses += 1


def _taken_state(argnums, args):
    """What jit_call_ahead's or jit_call_split's forward pass left for the VJP autograd makes
    right after it (`_ahead`), taken; None where there is none or the call's Reverse is for
    other boxed leaves than these (then jit_call's VJP: _as_jit_call)."""
    state, _ahead.state = getattr(_ahead, "state", None), None
    return state if tuple(a - _LEAVES - 1 for a in argnums) == args[_LEAVES].nums else None


def _as_jit_call(argnums, args):
    """A jit_call_ahead's or jit_call_split's argnums and args as jit_call's (its Reverse out)."""
    return tuple(a - 1 for a in argnums), args[:_LEAVES] + args[_LEAVES + 1:]


def _vjp_as_jit_call(argnums, ans, args, kwargs):
    argnums, args = _as_jit_call(argnums, args)
    return _vjp(argnums, ans, args, kwargs)


def _jvp_as_jit_call(argnums, gs, ans, args, kwargs):
    argnums, args = _as_jit_call(argnums, args)
    return _jvp(argnums, gs, ans, args, kwargs)


def _vjp_ahead(argnums, ans, args, kwargs):
    grads = _taken_state(argnums, args)
    if grads is None:
        return _vjp_as_jit_call(argnums, ans, args, kwargs)
    return _Backward(args[0], args[1], args[_LEAVES], args[_LEAVES + 1:], grads)


defvjp_argnums(jit_call_ahead, _vjp_ahead)
defjvp_argnums(jit_call_ahead, _jvp_as_jit_call)


@primitive
def jit_call_split(fn, spec, reverse, *leaves):
    """jit_call on reverse-mode boxes by `reverse.split`: the forward half's program gives the
    value and the residuals its VJP, the backward half's program, reads."""
    split = reverse.split
    try:
        out = split.forward(*[leaves[i] for i in split.forward_leaves])
    except Exception:  # its program did not compile: jit_call's from now on
        reverse.split = False
        _ahead.state = None
        return fn._call_flat(spec, list(leaves))
    fn.stats.hits += 1
    _ahead.state = out[1:]
    return out[0]


def _vjp_split(argnums, ans, args, kwargs):
    residuals = _taken_state(argnums, args)
    if residuals is None:
        return _vjp_as_jit_call(argnums, ans, args, kwargs)
    reverse, leaves = args[_LEAVES], args[_LEAVES + 1:]
    split = reverse.split

    def backward(g):
        try:
            return split.backward(*[leaves[i] for i in split.backward_leaves], *residuals, g)
        except Exception:  # its program did not compile: jit_call's from now on
            reverse.split = False
            return _derivative(args[0], "vjp", args[1], reverse.nums)(*leaves, g)
    return backward


defvjp_argnums(jit_call_split, _vjp_split)
defjvp_argnums(jit_call_split, _jvp_as_jit_call)


# ----- a signature that draws random numbers, under boxes ----------------------------------
def drawing_call(fn, spec, leaves, entry):
    """A call of jitted `fn` on autograd's boxes, of signature `entry` (compiled or compiling)
    whose program replays random draws (impurity.py): the draws made once, on the host,
    where plain autograd's forward pass makes them, and handed as arguments to the programs of
    fn's `Drawing` function (its value's, its VJP's, its JVP's), which compute at them: the
    backward pass sees the very numbers the forward pass drew, and numpy's random state moves
    as plainly. A real scalar's value and gradient come from one program (jit_call_ahead),
    compiled in the background where fn compiles there, plain autograd's calls meanwhile.
    autograd's black-box variational inference examples (black_box_svi, 2,000 Adam steps of
    grad(jit_ps(objective))): 0.22 ms a step against plain's 0.68. A signature with guards
    (a Python branch on a traced value, which may choose other draws) runs plainly."""
    if entry.guards or entry.variant is not None:
        return fn._apply(spec, leaves, BOXING)
    drawing = fn._derivatives.get(("drawing", spec))
    if drawing is None:
        drawing = fn._derivatives[("drawing", spec)] = Drawing(fn, spec, entry)
    reverse = None if fn.keep_on_device else reverse_mode(entry, leaves)
    if reverse is not None and reverse.ahead():
        if not drawing.ready(leaves, reverse):
            return fn._apply(spec, leaves, BOXING)  # plain autograd's meanwhile, drawing as it does
        return jit_call_ahead(drawing.fn, drawing.spec, reverse, *leaves, *drawing.draw())
    if not drawing.ready(leaves, None):
        return fn._apply(spec, leaves, BOXING)
    return drawing.fn(*leaves, *drawing.draw())


class Drawing:
    """A jitted function's function of (*leaves, *drawn) at one signature that draws (`fn`,
    jitted like it; `spec`, its arguments' structure): the function on its leaves, its
    draws returning `drawn` in order (impurity.given), so that its traces take them as
    arguments. Run plainly (a derivative program of it that did not compile runs as plain
    autograd), it draws them again from the generators' states before they were drawn, kept
    for the last KEPT calls (`draw`), and puts back the states it found."""

    KEPT = 8

    def __init__(self, jitted, spec, entry):
        self.draws, self.made, self.asked = entry.draws, [], {}
        self.generators = impurity.generators(self.draws)  # (whose states `draw` keeps)
        n = sum(d.returns for d in self.draws)
        # examples of the draws, by their graph inputs (the last n): the signature to compile before a call draws
        self.examples = [np.zeros(v.aval.shape, v.aval.dtype)[()] if not v.aval.weak_type else
                         v.aval.dtype.type(0).item() for v in entry.graph.invars[len(entry.graph.invars) - n:]]
        made = self.made

        def drawing_fn(*args):
            leaves, drawn = list(args[:len(args) - n]), args[len(args) - n:]
            if trace_state.traces:
                with impurity.given(drawn):
                    return jitted._apply(spec, leaves, BOXING)
            for values, saved in reversed(made):
                if all(a is b or numpy_tier.same(a, b) for a, b in zip(values, drawn)):
                    now = impurity.states([gen for gen, _ in saved])
                    impurity.set_states(saved)
                    try:
                        return jitted._apply(spec, leaves, BOXING)
                    finally:
                        impurity.set_states(now)
            raise RuntimeError(f"{jitted!r} cannot draw again the random numbers of a call made {Drawing.KEPT} "
                               "calls ago or more: differentiate it within its call")
        drawing_fn.__name__ = f"drawing_{getattr(jitted._fun, '__name__', 'fn')}"
        self.jitted, self.fn = jitted, _jitted_like(jitted, drawing_fn)
        self.fn._warned = jitted._warned
        self.spec = None

    def draw(self):
        """The call's draws, made on the host now, the generators' states before them kept."""
        saved = impurity.states(self.generators)
        drawn = impurity.replay(self.draws)
        self.made.append((drawn, saved))
        del self.made[:-self.KEPT]
        return drawn

    def ready(self, leaves, reverse):
        """Whether the program these calls run is compiled: the value and gradient's where
        `reverse` (a Reverse computing ahead), else the function's own; asked for at the first
        call (in the background where fn compiles there). False for good where it does not
        compile: plain autograd's calls, with the FallbackWarning of its cause (fallback="error":
        raised)."""
        nums = None if reverse is None else reverse.nums
        asked = self.asked.get(nums)
        if asked is None:
            values = [*[getval(x) for x in leaves], *self.examples]
            if self.spec is None:
                self.spec = self.fn._split(tuple(values), {})[0]
            try:
                program = self.fn if reverse is None else _derivative(self.fn, "value_vjp", self.spec, nums)
                asked = program._compiling_entry(*values, *([] if reverse is None else [reverse.one]))
                cause = asked.fallback_cause if asked.python_fallback else None
            except Exception as e:
                if self.fn.fallback == "error":
                    raise
                asked, cause = False, e  # (the plain call that follows raises it, if it is the function's)
            if asked is False or asked.python_fallback:
                self.asked[nums] = asked = False
                if cause is not None:
                    self.jitted._warn_fallback(cause)
            else:
                self.asked[nums] = asked
        ready = getattr(asked, "ready", None)
        if ready is None and asked is not False:  # held by its own tiering: asked again
            del self.asked[nums]
        return ready is not None and ready()


# ----- a held signature's calls under boxes, by numpy --------------------------------------
class HeldVJP:
    """The calls on autograd's boxes (leaves[nums] boxed) of a tiered signature of `fn` held
    with a run by numpy (tiering), whose output is one array: make_value_vjp_function traced
    at the first call's cotangent, split (numpy_tier.SplitReplay), its halves run at the
    forward and the backward pass. The first numpy_tier.CHECKED_CALLS calls run plain
    autograd (make_vjp over fn's function, boxed: what grad(jit_ps(f)) computes plainly) and
    compare; a difference of structure, type, dtype or bits keeps plain autograd for good.
    quimb's MPS fit by value_and_grad(jit_ps(loss)), 105 evaluations: 380 ms against plain
    autograd's 558 (the same held signature's boxed calls run plainly: 582)."""

    def __init__(self, fn, spec, nums):
        self.fn, self.spec, self.nums = fn, spec, nums
        self.split = None  # the SplitReplay; False: plain autograd's for good
        self.unchecked = numpy_tier.CHECKED_CALLS
        self.cotangent = None  # (shape, dtype) of the cotangent the split was traced at
        self.g = None  # ... and that cotangent
        self.compiled = None  # fn's VJP's entry for these calls once fn's program is compiled; False: none
        self.static = {}  # leaf index -> the value the trace made static (the split holds for it alone)
        self.traced = None  # its trace's seconds, until the held signature notes them (tiering.note_boxed)
        self.eqns = 0  # its graph's size (core.Graph.size): the program compiling fn commits to

    def forward(self, leaves):
        """The output at these leaves; what the backward pass needs goes to _handoff."""
        split = self.split
        if split and not self.unchecked and self._holds(leaves):
            value, env = split.forward(leaves)
            self.fn.stats.numpy_tier_calls += 1
            _handoff.state = (leaves, env, None, None)
            return value[0]
        f = _Restricted(self.fn, self.spec, leaves, self.nums, BOXING)
        vjp, ans = make_vjp(f, f.point())
        self.fn.stats.plain_tier_calls += 1
        _handoff.state = (leaves, None, vjp, ans)
        return ans

    def vjp(self, argnums):
        """The backward pass's function of the call just run (autograd makes it right after)."""
        leaves, env, plain, ans = _handoff.state
        _handoff.state = None
        if tuple(a - 1 for a in argnums) != self.nums:  # (autograd boxed other leaves than forward saw)
            return lambda g: _derivative(self.fn, "vjp", self.spec, tuple(a - 1 for a in argnums))(*leaves, g)

        def backward(g):
            if plain is None:  # by numpy, at the cotangent the split was traced at
                if type(g) in box_types or (np.shape(g), np.result_type(g)) != self.cotangent:
                    return _derivative(self.fn, "vjp", self.spec, self.nums)(*leaves, g)
                return differentiable.tuple(self.split.backward(env, g))
            grads = plain(g)
            grads = differentiable.tuple([grads] if len(self.nums) == 1 else grads)
            if self.unchecked and type(g) not in box_types:
                self._check(leaves, g, ans, grads)
            return grads
        return backward

    def vjp_compiled(self, leaves, reverse):
        """Whether fn's compiled VJP takes these calls (boxes) from now on, fn's own program
        being compiled: jit_call_ahead's value and VJP program where it takes them (`reverse`,
        reverse_mode: a real scalar, at the cotangent the split was traced at), else
        jit_call_split's where it is made (its halves compiled at their first call) or, where
        neither, jit_call's VJP. The first and last are asked for at the first such call
        (compiled in the background where tiering compiles there, as fn's was); meanwhile, and
        for good where there is none, the calls stay held."""
        if reverse is not None and reverse.one is None and reverse.split_made(self.fn, self.spec, leaves):
            return True
        if self.compiled is None:
            try:
                kind = "value_vjp" if reverse is not None and reverse.takes(self.g) else "vjp"
                d = _derivative(self.fn, kind, self.spec, self.nums)
                self.compiled = d._compiling_entry(*[getval(x) for x in leaves], self.g)
            except Exception:  # (not the call's to raise: held, as its calls were)
                self.compiled = False
        ready = getattr(self.compiled, "ready", None)
        if ready is None and self.compiled is not False:  # held by the VJP's own tiering: asked again
            self.compiled = None
        return ready is not None and ready()

    def _check(self, leaves, g, ans, grads):
        """A checked call: the split (traced now at the first) run at these leaves and
        cotangent against plain autograd's output `ans` and `grads`."""
        if self.split is None:
            self._trace(leaves, g)
        if not self.split or (np.shape(g), np.result_type(g)) != self.cotangent or not self._holds(leaves):
            return
        if self.unchecked == numpy_tier.CHECKED_CALLS:  # the results plain autograd gives as 0-d arrays
            self.split.zero_d = numpy_tier.zero_d_positions([ans, *grads])
        try:
            value, env = self.split.forward(leaves)
            got = self.split.backward(env, g)
        except Exception:
            return self._differs()
        if numpy_tier.same(value[0], ans) and numpy_tier.same(tuple(got), tuple(grads)):
            self.unchecked -= 1
        else:
            self._differs()

    def _trace(self, leaves, g):
        """make_value_vjp_function traced at these leaves and cotangent, and split; False
        where it does not trace or qualify."""
        self.split = False
        g = np.asarray(g) if type(g) in (float, int, complex) else g
        if type(g) is not np.ndarray and not isinstance(g, np.generic):
            return
        t0 = time.perf_counter()
        try:
            d = _derivative(self.fn, "value_vjp", self.spec, self.nums)
            entry = d._traced_entry(*leaves, g)
        except Exception:
            return
        finally:
            self.traced = time.perf_counter() - t0
        if entry.python_fallback or entry.impure or len(leaves) in entry.static_leaves:
            return
        self.split = numpy_tier.split(entry.graph, entry.dynamic, 1) or False
        self.eqns = entry.graph.size()
        self.cotangent, self.g = (np.shape(g), np.result_type(g)), g
        self.static = {i: leaves[i] for i in entry.static_leaves}

    def _holds(self, leaves):
        """Whether the split holds for these leaves: those the trace made static are the same."""
        return all(numpy_tier.same(leaves[i], v) for i, v in self.static.items())

    def _differs(self):
        self.split, self.unchecked = False, 0


_handoff = threading.local()  # held_call's forward pass -> the VJP autograd makes right after it


@primitive
def held_call(held, *leaves):
    return held.forward(leaves)


defvjp_argnums(held_call, lambda argnums, ans, args, kwargs: args[0].vjp(argnums))
defjvp_argnums(held_call, lambda argnums, gs, ans, args, kwargs: _derivative(
    args[0].fn, "jvp", args[0].spec, tuple(a - 1 for a in argnums))(*args[1:], *gs))
