"""Array creation from traced values: full, *_like, linspace; eye.

Creation from concrete arguments (np.zeros(3), np.eye(n)) needs no rule: numpy runs it
while tracing and the result enters the graph as a constant. np.eye has a rule all the
same, for code that binds it explicitly to build an identity inside the program instead
of storing one (the Jacobians' bases, batched.py: n * n numbers that XLA can fuse away).
"""
import numpy as np

from ..context import result_type
from ..registry import lowers
from .shape import moveaxis_perm


def _shape(shape):
    return (int(shape),) if np.ndim(shape) == 0 else tuple(int(s) for s in shape)


@lowers(np.full)
def _full(ctx, shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    shape = _shape(shape)
    dtype = np.dtype(dtype) if dtype is not None else np.asarray(fill_value).dtype \
        if not hasattr(fill_value, "dtype") else fill_value.dtype
    return ctx.broadcast_to(ctx.asvalue(fill_value, dtype), shape)


def _like(fill):
    def rule(ctx, a, dtype=None, order="K", subok=True, shape=None, *, device=None):
        v = ctx.asvalue(a)
        return ctx.full(_shape(shape) if shape is not None else v.shape, fill, dtype or v.dtype)
    return rule


lowers(np.zeros_like, np.empty_like)(_like(0))
lowers(np.ones_like)(_like(1))


@lowers(np.full_like)
def _full_like(ctx, a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    v = ctx.asvalue(a)
    out_shape = _shape(shape) if shape is not None else v.shape
    return ctx.broadcast_to(ctx.asvalue(fill_value, dtype or v.dtype), out_shape)


@lowers(np.eye)
def _eye(ctx, N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    shape = (int(N), int(N if M is None else M))
    rows = ctx.iota(shape, np.int64, 0)
    diagonal = ctx.compare(ctx.binary("add", rows, ctx.full(shape, int(k), np.int64)), ctx.iota(shape, np.int64, 1),
                           "EQ")
    return ctx.astype(diagonal, np.dtype(dtype))


@lowers(np.linspace)
def _linspace(ctx, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    num = int(num)
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    dt = result_type(start, stop, float)
    lo, hi = ctx.asvalue(start, dt), ctx.asvalue(stop, dt)
    base = np.broadcast_shapes(lo.shape, hi.shape)
    lo, hi = ctx.broadcast_to(lo, base), ctx.broadcast_to(hi, base)
    div = (num - 1) if endpoint else num
    shape = (num,) + base
    steps = ctx.iota(shape, dt, 0)
    delta = ctx.binary("subtract", hi, lo)
    step = ctx.binary("divide", delta, ctx.full(base, div if div > 0 else 1, dt))
    out = ctx.binary("add", ctx.binary("multiply", steps, ctx.broadcast_in_dim(step, shape, range(1, len(shape)))),
                     ctx.broadcast_in_dim(lo, shape, range(1, len(shape))))
    if endpoint and num > 1:
        last = ctx.iota(shape, np.int64, 0)
        is_last = ctx.compare(last, ctx.full(shape, num - 1, np.int64), "EQ")
        out = ctx.select(is_last, ctx.broadcast_in_dim(hi, shape, range(1, len(shape))), out)
    if dtype is not None:
        out = ctx.astype(out, dtype)
    if axis != 0:
        out = ctx.transpose(out, moveaxis_perm(out.ndim, 0, axis))
    if retstep:
        return out, (step if div > 0 else ctx.full(base, np.nan, dt))
    return out
