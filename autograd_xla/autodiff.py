"""autograd differentiating through a jitted function: `grad(jit_ps(f))` and friends.

A call of a jitted function on autograd boxes is one autograd primitive, `jit_call`.
Its VJP and JVP are themselves jitted functions, built by running autograd's own
`make_vjp` / `make_jvp` over the user's function inside a trace; so the backward pass
is compiled too, and because those derivative functions are jitted functions again,
a second derivative (`grad(grad(jit_ps(f)))`, `hessian`) goes round the same loop.
"""
from autograd import builtins as differentiable
from autograd.core import make_jvp, make_vjp
from autograd.extend import defjvp, defjvp_argnums, defvjp_argnums, primitive

from . import tree

_LEAVES = 2  # jit_call(fn, spec, *leaves): leaves start at argument 2


@primitive
def jit_call(fn, spec, *leaves):
    return fn._call_flat(spec, list(leaves))


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
        maker = make_vjp_function if kind == "vjp" else make_jvp_function
        d = fn._derivatives[key] = type(fn)(maker(fn, spec, nums), fallback=fn.fallback, backend=fn.backend,
                                            cache_size=fn.cache_size, x64=fn.x64, max_program=fn.max_program,
                                            explain=fn.explain, tiered=fn.tiered)
        d._warned = fn._warned  # one warning per problem, not one per derivative
    return d


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
