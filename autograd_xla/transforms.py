"""The batching transformations as users call them: `vmap`, `jacfwd`, `jacrev`, `hessian`.

Each returns a jitted function (traced and compiled once per signature, like jit_ps, and
inlined when called inside another traced function); batched.py holds what they do.
"""
import functools

import numpy as np
from autograd.tracer import trace_stack
from autograd.util import subvals

from . import tracing
from .api import JittedFunction, jit_ps
from .batched import batch, jacobian_forward, jacobian_reverse
from .control_flow.common import closure_convert
from .errors import ArgumentError
from .signatures import positional_names, signature_of


def vmap(fun, in_axes=0, out_axes=0, axis_name=None):
    """`fun` mapped over an axis of its arguments, as jax.vmap: `in_axes` is an int, None (not
    mapped) or a container (tuple, list, dict) matching a prefix of the positional arguments'
    structure, negative axes counting from the end; keyword arguments are mapped over axis 0.
    Every mapped argument must have the same size on its axis. `out_axes` places the batch
    axis in each result likewise (None: a result that does not depend on the mapped inputs).

    The result compiles like jit_ps (one executable per signature), works inside jit_ps,
    nests, and autograd differentiates it in both directions, as it does the function
    (`vmap(grad(loss), in_axes=(None, 0, 0))` gives per-example gradients). With `axis_name`,
    the collectives (psum, pmean, all_gather, ppermute, axis_index...) over that name combine
    the examples, as pmap's combine devices."""
    _check_axes(in_axes, "in_axes")
    _check_axes(out_axes, "out_axes")
    names = positional_names(signature_of(fun))

    @functools.wraps(fun)
    def vmapped(*args, **kwargs):
        return batch(fun, args, kwargs, in_axes, out_axes, names, axis_name)

    def closed(converted, ext, args, kwargs):
        return batch(functools.partial(converted, ext), args, kwargs, in_axes, out_axes, names, axis_name)
    closed.__name__ = vmapped.__name__
    return _Vmapped(vmapped, mapped=fun, closed=JittedFunction(closed, static_argnums=(0,)))


class _Vmapped(JittedFunction):
    """vmap's jitted function. Called outside any trace on a function that closes over
    autograd boxes (`grad(lambda w: np.sum(vmap(lambda x: f(w, x))(X)))(w)`), it passes the
    boxes as arguments of a jitted function of its own: a jitted function cannot take a box
    through its closure (the box would escape its trace, and jit_ps would run plain autograd,
    a Python loop over the examples), but it differentiates its arguments both ways."""

    def __init__(self, fun, *args, mapped=None, closed=None, **kwargs):
        super().__init__(fun, *args, **kwargs)  # also as the jitted derivatives of one (autodiff)
        self._mapped, self._closed = mapped, closed

    def __call__(self, *args, **kwargs):
        # boxes exist only while autograd differentiates (trace_stack.top >= 0): the common call
        # goes straight to jit_ps's path
        if self._mapped is not None and trace_stack.top >= 0 and not tracing.is_tracing():
            converted, ext = closure_convert(self._mapped)
            if ext:
                return self._closed(converted[0], ext, args, kwargs)
        return super().__call__(*args, **kwargs)


def jacrev(fun, argnum=0):
    """The Jacobian of `fun` with respect to positional argument `argnum` (an int, or a tuple
    of them: a tuple of Jacobians), by reverse mode: one backward pass batched over the
    output's basis. Shape: the output's, then the argument's (as autograd's `jacobian`)."""
    return jit_ps(_jacobian(jacobian_reverse, fun, argnum))


def jacfwd(fun, argnum=0):
    """The same Jacobian by forward mode: one forward pass batched over the argument's basis
    (fewer passes than jacrev when the argument is smaller than the output)."""
    return jit_ps(_jacobian(jacobian_forward, fun, argnum))


def hessian(fun, argnum=0):
    """The Hessian of scalar `fun` with respect to argument `argnum`: forward mode over reverse
    mode, the shape of the argument twice (as autograd's `hessian`). For a tuple of argnums,
    a tuple of tuples: block [i][j] the second derivative wrt arguments argnum[i] and
    argnum[j], of their shapes joined (as jax's `hessian`)."""
    hess = _jacobian(jacobian_forward, _jacobian(jacobian_reverse, fun, argnum), argnum)
    if isinstance(argnum, int):
        return jit_ps(hess)

    @functools.wraps(fun)
    def blocks(*args, **kwargs):
        # the outer Jacobian is a tuple over its argnums of Jacobians of the tuple of gradients:
        # h[j][i] = d(grad_i)/d(x_j), of shape x_i + x_j; the Hessian's block [i][j] (as jax's)
        h = hess(*args, **kwargs)
        return tuple(tuple(h[j][i] for j in range(len(argnum))) for i in range(len(argnum)))
    return jit_ps(blocks)


def _jacobian(method, fun, argnum):
    _check_argnum(argnum)

    @functools.wraps(fun)
    def jac(*args, **kwargs):
        def of(k):
            return method(lambda x: fun(*subvals(args, [(k, x)]), **kwargs), args[k])
        return of(argnum) if isinstance(argnum, int) else tuple(of(k) for k in argnum)

    return jac


def _check_argnum(argnum):
    nums = argnum if isinstance(argnum, tuple) else (argnum,)
    if not nums or not all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in nums):
        raise ArgumentError(f"argnum must be an int or a tuple of ints, got {argnum!r}")


def _check_axes(axes, what):
    if axes is None or isinstance(axes, (int, np.integer)) and not isinstance(axes, bool):
        return
    if isinstance(axes, (tuple, list)):
        for a in axes:
            _check_axes(a, what)
        return
    if isinstance(axes, dict):
        for a in axes.values():
            _check_axes(a, what)
        return
    raise ArgumentError(f"vmap {what} must be an int, None, or a tuple/list/dict of them; got {axes!r}")
