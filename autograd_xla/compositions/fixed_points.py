"""autograd.misc.fixed_points.fixed_point, as a compiled while loop.

`fixed_point(f, a, x0, distance, tol)` iterates x <- f(a)(x) from x0 until
distance(x, x_prev) <= tol: a trip count that depends on the data, which is what
`while_loop` compiles (one `stablehlo.while`, f traced once as its body). autograd's VJP of
fixed_point is another fixed_point, of the adjoint iteration g <- vjp_x(g) + x_bar, so it
comes through this rule as well and `jit_ps(grad(f))` / `grad(jit_ps(f))` compile whole.
autograd defines no JVP for it.
"""
import autograd.numpy as anp
from autograd.misc.fixed_points import fixed_point as _fixed_point

from ..control_flow import while_loop
from ..tree import flatten, unflatten
from ..registry import traces


@traces(_fixed_point)
def fixed_point(f, a, x0, distance, tol):
    step = f(a)
    x1 = step(x0)
    # the loop carries (x, x_prev); x_prev starts as x0, given the type the iterates have
    leaves, treedef = flatten(x1)
    x0 = unflatten(treedef, [_like(p, q) for p, q in zip(flatten(x0)[0], leaves)])

    def not_converged(carry):
        x, x_prev = carry
        return distance(x, x_prev) > tol

    def iterate(carry):
        x, _ = carry
        return step(x), x
    return while_loop(not_converged, iterate, (x1, x0))[0]


def _like(p, q):
    """p with q's shape and dtype (x0 is often a Python float, the iterates traced arrays)."""
    out = anp.zeros_like(q) + p
    dtype = anp.result_type(q)
    return out if anp.result_type(out) == dtype else out.astype(dtype)
