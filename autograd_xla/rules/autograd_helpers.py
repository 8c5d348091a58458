"""autograd's own helper primitives, the ones its numpy wrappers and VJPs call.

autograd builds `np.array([...])` of boxes, `np.concatenate` and the dot/tensordot
adjoints from helpers whose raw code touches concrete data (`np.array(list)`,
`onp.asarray(out, dtype)`); these rules give them traced equivalents so `grad` of a
traced function lowers whole.
"""
import numpy as np
from autograd.numpy import numpy_vjps, numpy_wrapper

from ..context import result_type
from ..registry import lowers
from .contractions import tensordot
from .shape import concatenate, embed_diagonal


def _array_options(array_args, array_kwargs):
    names = ("dtype", "copy", "order", "subok", "ndmin")
    opts = dict(zip(names, array_args))
    opts.update(array_kwargs)
    return opts.get("dtype"), int(opts.get("ndmin", 0) or 0)


def _with_ndmin(ctx, v, ndmin):
    return v if v.ndim >= ndmin else ctx.reshape(v, (1,) * (ndmin - v.ndim) + v.shape)


@lowers(numpy_wrapper._array_from_scalar_or_array)
def _array_from_scalar_or_array(ctx, array_args, array_kwargs, scalar):
    dtype, ndmin = _array_options(array_args, array_kwargs)
    return _with_ndmin(ctx, ctx.asvalue(scalar, dtype), ndmin)


def _strong_type(x):
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x).dtype
    return x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype


@lowers(numpy_wrapper.array_from_args)
def _array_from_args(ctx, array_args, array_kwargs, *args):
    dtype, ndmin = _array_options(array_args, array_kwargs)
    dtype = np.dtype(dtype) if dtype is not None else result_type(*[_strong_type(a) for a in args])
    values = [ctx.asvalue(a, dtype) for a in args]
    shapes = {v.shape for v in values}
    if len(shapes) != 1:
        raise ValueError("setting an array element with a sequence: the elements have different shapes "
                         f"{sorted(shapes)}")
    stacked = ctx.concatenate([ctx.reshape(v, (1,) + v.shape) for v in values], 0)
    return _with_ndmin(ctx, stacked, ndmin)


@lowers(numpy_wrapper.concatenate_args)
def _concatenate_args(ctx, axis, *args):
    return concatenate(ctx, list(args), axis)


@lowers(numpy_wrapper.make_diagonal)
def _make_diagonal(ctx, D, offset=0, axis1=0, axis2=1):
    """autograd writes D into `np.zeros(...)`: the result is float64 whatever D's dtype (the
    imaginary part of a complex D is dropped); this matches it."""
    if not (offset == 0 and axis1 == -1 and axis2 == -2):
        raise NotImplementedError("make_diagonal only supports offset=0, axis1=-1, axis2=-2")
    return embed_diagonal(ctx, ctx.astype(ctx.asvalue(D), np.float64), 0)


def _swap_last(ctx, v):
    perm = list(range(v.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.transpose(v, perm)


@lowers(numpy_vjps.dot_adjoint_0)
def _dot_adjoint_0(ctx, B, G, A_meta, B_meta):
    """d/dA of np.dot(A, B) applied to G, in A's dtype."""
    _, a_ndim, a_dtype, _ = A_meta
    _, b_ndim, _, _ = B_meta
    b, g = ctx.asvalue(B), ctx.asvalue(G)
    dt = result_type(b, g)
    b, g = ctx.astype(b, dt), ctx.astype(g, dt)
    if b_ndim <= 1 or a_ndim == 0:
        out = tensordot(ctx, g, b, max(0, b_ndim - (a_ndim != 0)))
    else:
        out = tensordot(ctx, g, _swap_last(ctx, b), b_ndim - 1)
    return ctx.astype(out, a_dtype)


@lowers(numpy_vjps.dot_adjoint_1)
def _dot_adjoint_1(ctx, A, G, A_meta, B_meta):
    """d/dB of np.dot(A, B) applied to G, in B's dtype."""
    _, a_ndim, _, _ = A_meta
    _, b_ndim, b_dtype, _ = B_meta
    a, g = ctx.asvalue(A), ctx.asvalue(G)
    dt = result_type(a, g)
    a, g = ctx.astype(a, dt), ctx.astype(g, dt)
    if a_ndim <= 1 or b_ndim == 0:
        out = tensordot(ctx, g, a, max(0, a_ndim - (b_ndim != 0)))
    else:
        g_axes = [g.ndim - a_ndim - b_ndim + 2 + i for i in range(a_ndim - 1)]
        out = tensordot(ctx, g, a, (g_axes, list(range(a_ndim - 1))))
    if b_ndim > 1 and a_ndim != 0:
        out = _swap_last(ctx, out)
    return ctx.astype(out, b_dtype)
