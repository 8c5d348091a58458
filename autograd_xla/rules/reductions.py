"""Reductions and scans: sum, prod, mean, var, std, max, min, any, all, argmax, argmin,
cumsum, cumprod, and the ufunc methods `reduce` / `accumulate`.

Result dtypes are numpy's, read off numpy itself on an empty array (sum of int32 is
int64, mean of int is float64, var of complex is real): one small call per dtype,
cached, instead of a table that could drift from numpy's rules.
"""
import functools

import numpy as np

from ..lowering import normalize_axes, normalize_axis
from . import lowers, ufunc_method_rule


@functools.lru_cache(maxsize=None)
def numpy_result_dtype(fn, dtype, out_dtype=None):
    with np.errstate(all="ignore"):
        return np.dtype(fn(np.ones((1,), dtype), **({"dtype": out_dtype} if out_dtype is not None else {})).dtype)


def _keep(ctx, out, shape, axes, keepdims):
    if not keepdims:
        return out
    return ctx.reshape(out, [1 if i in axes else d for i, d in enumerate(shape)])


def _check(where=np._NoValue, out=None, **unsupported):
    if where is not np._NoValue and where is not True:
        raise NotImplementedError("the where= argument of reductions is not supported under jit_ps; "
                                  "use np.where to mask the input instead")
    if out is not None:
        raise NotImplementedError("out= is not supported under jit_ps")


def _identity_reduction(fn, op_name, identity):
    def rule(ctx, a, axis=None, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
        _check(where, out)
        v = ctx.asvalue(a)
        rdt = numpy_result_dtype(fn, v.dtype, None if dtype is None else np.dtype(dtype))
        axes = normalize_axes(axis, v.ndim)
        x = ctx.astype(v, rdt)
        if rdt.kind == "b":  # sum/prod with dtype=bool: logical or/and
            red = ctx.reduce_with(x, axes, "or" if op_name == "add" else "and", identity != 0 and True)
        else:
            red = ctx.reduce_with(x, axes, op_name, identity)
        if initial is not np._NoValue:
            red = ctx.binary(op_name, red, ctx.full(red.shape, initial, rdt))
        return _keep(ctx, red, v.shape, axes, keepdims)
    return rule


lowers(np.sum)(_identity_reduction(np.sum, "add", 0))
lowers(np.prod)(_identity_reduction(np.prod, "multiply", 1))


def _count(shape, axes):
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


@lowers(np.mean)
def _mean(ctx, a, axis=None, dtype=None, out=None, keepdims=False, where=np._NoValue):
    _check(where, out)
    v = ctx.asvalue(a)
    rdt = numpy_result_dtype(np.mean, v.dtype, None if dtype is None else np.dtype(dtype))
    axes = normalize_axes(axis, v.ndim)
    acc = np.dtype(np.float32) if rdt == np.float16 else rdt
    total = ctx.reduce_with(ctx.astype(v, acc), axes, "add", 0)
    n = _count(v.shape, axes)
    mean = ctx.binary("divide", total, ctx.full(total.shape, n if n else np.nan, acc))
    return _keep(ctx, ctx.astype(mean, rdt), v.shape, axes, keepdims)


def _variance(ctx, a, axis, dtype, ddof, keepdims, fn):
    v = ctx.asvalue(a)
    rdt = numpy_result_dtype(fn, v.dtype, None if dtype is None else np.dtype(dtype))
    axes = normalize_axes(axis, v.ndim)
    acc = v.dtype if v.dtype.kind in "fc" else np.dtype(np.float64)
    if acc == np.float16:
        acc = np.dtype(np.float32)
    x = ctx.astype(v, acc)
    n = _count(v.shape, axes)
    mean = ctx.binary("divide", ctx.reduce_with(x, axes, "add", 0), ctx.full([d for i, d in enumerate(v.shape)
                                                                           if i not in axes], n, acc))
    centered = ctx.binary("subtract", x, ctx.broadcast_in_dim(mean, v.shape, [i for i in range(v.ndim)
                                                                               if i not in axes]))
    if acc.kind == "c":
        re, im = ctx.real(centered), ctx.imag(centered)
        sq = ctx.binary("add", ctx.binary("multiply", re, re), ctx.binary("multiply", im, im))
    else:
        sq = ctx.binary("multiply", centered, centered)
    total = ctx.reduce_with(sq, axes, "add", 0)
    denom = max(n - ddof, 0)
    var = ctx.binary("divide", total, ctx.full(total.shape, denom if denom else np.nan, sq.dtype))
    return var, rdt, v.shape, axes


@lowers(np.var)
def _var(ctx, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=np._NoValue, mean=np._NoValue,
         correction=np._NoValue):
    _check(where, out)
    ddof = ddof if correction is np._NoValue else correction
    var, rdt, shape, axes = _variance(ctx, a, axis, dtype, ddof, keepdims, np.var)
    return _keep(ctx, ctx.astype(var, rdt), shape, axes, keepdims)


@lowers(np.std)
def _std(ctx, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, where=np._NoValue, mean=np._NoValue,
         correction=np._NoValue):
    _check(where, out)
    ddof = ddof if correction is np._NoValue else correction
    var, rdt, shape, axes = _variance(ctx, a, axis, dtype, ddof, keepdims, np.std)
    return _keep(ctx, ctx.astype(ctx.unary("sqrt", var), rdt), shape, axes, keepdims)


def _lowest(dtype):
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def _highest(dtype):
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def _extremum(name, identity_of):
    def rule(ctx, a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
        _check(where, out)
        v = ctx.asvalue(a)
        axes = normalize_axes(axis, v.ndim)
        if v.dtype.kind == "c":
            raise NotImplementedError(f"np.{name} of complex arrays is not supported under jit_ps")
        if initial is np._NoValue and any(v.shape[i] == 0 for i in axes):
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
        op = ("or" if name == "maximum" else "and") if v.dtype.kind == "b" else name
        red = ctx.reduce_with(v, axes, op, identity_of(v.dtype))
        if initial is not np._NoValue:
            red = ctx.binary(op, red, ctx.full(red.shape, initial, v.dtype))
        return _keep(ctx, red, v.shape, axes, keepdims)
    return rule


lowers(np.max, np.amax)(_extremum("maximum", _lowest))
lowers(np.min, np.amin)(_extremum("minimum", _highest))


def _boolean(op, identity):
    def rule(ctx, a, axis=None, out=None, keepdims=False, where=np._NoValue):
        _check(where, out)
        v = ctx.astype(ctx.asvalue(a), np.bool_)
        axes = normalize_axes(axis, v.ndim)
        return _keep(ctx, ctx.reduce_with(v, axes, op, identity), v.shape, axes, keepdims)
    return rule


lowers(np.any)(_boolean("or", False))
lowers(np.all)(_boolean("and", True))


@lowers(np.ptp)
def _ptp(ctx, a, axis=None, out=None, keepdims=False):
    hi = _extremum("maximum", _lowest)(ctx, a, axis, keepdims=keepdims)
    lo = _extremum("minimum", _highest)(ctx, a, axis, keepdims=keepdims)
    return ctx.binary("subtract", hi, lo)


@lowers(np.count_nonzero)
def _count_nonzero(ctx, a, axis=None, *, keepdims=False):
    v = ctx.asvalue(a)
    axes = normalize_axes(axis, v.ndim)
    nz = ctx.convert(ctx.astype(v, np.bool_), np.int64)
    return _keep(ctx, ctx.reduce_with(nz, axes, "add", 0), v.shape, axes, keepdims)


def _arg_extremum(better):
    """argmax/argmin: variadic reduce over (value, index); NaN wins, then the first index."""
    def rule(ctx, a, axis=None, out=None, *, keepdims=False):
        v = ctx.asvalue(a)
        if v.dtype.kind == "b":
            v = ctx.convert(v, np.int8)
        if axis is None:
            shape = v.shape
            v = ctx.reshape(v, (v.size,))
            ax = 0
        else:
            shape = v.shape
            ax = normalize_axis(axis, v.ndim)
        if v.shape[ax] == 0:
            raise ValueError("attempt to get argmax/argmin of an empty sequence")
        idx = ctx.iota(v.shape, np.int64, ax)
        init_v = ctx.scalar(_lowest(v.dtype) if better == "GT" else _highest(v.dtype), v.dtype)
        init_i = ctx.scalar(np.iinfo(np.int64).max, np.int64)

        def body(b, av, ai, bv, bi):
            a_first = b.compare(ai, bi, "LT")
            if v.dtype.kind == "f":
                a_nan, b_nan = b.compare(av, av, "NE"), b.compare(bv, bv, "NE")
                a_wins = b.binary("or", b.compare(av, bv, better),
                                  b.binary("and", b.compare(av, bv, "EQ"), a_first))
                a_wins = b.select(b.binary("or", a_nan, b_nan),
                                  b.binary("and", a_nan, b.binary("or", b.unary("not", b_nan), a_first)), a_wins)
            else:
                a_wins = b.binary("or", b.compare(av, bv, better), b.binary("and", b.compare(av, bv, "EQ"), a_first))
            return b.select(a_wins, av, bv), b.select(a_wins, ai, bi)

        _, out_i = ctx.reduce([v, idx], [init_v, init_i], [ax], body)
        if keepdims:
            out_shape = [1] * len(shape) if axis is None else [1 if i == ax else d for i, d in enumerate(shape)]
            out_i = ctx.reshape(out_i, out_shape)
        return out_i
    return rule


lowers(np.argmax)(_arg_extremum("GT"))
lowers(np.argmin)(_arg_extremum("LT"))


def _cumulative(fn, op_name, identity):
    def rule(ctx, a, axis=None, dtype=None, out=None):
        if out is not None:
            raise NotImplementedError("out= is not supported under jit_ps")
        v = ctx.asvalue(a)
        rdt = numpy_result_dtype(fn, v.dtype, None if dtype is None else np.dtype(dtype))
        if axis is None:
            v = ctx.reshape(v, (v.size,))
            ax = 0
        else:
            ax = normalize_axis(axis, v.ndim)
        return cumulative(ctx, ctx.astype(v, rdt), ax, op_name, identity)
    return rule


def cumulative(ctx, v, axis, op_name, identity, reverse=False):
    """Inclusive scan along `axis` as a reduce_window over a window of the whole axis."""
    n = v.shape[axis]
    if n <= 1:
        return v
    window = [n if i == axis else 1 for i in range(v.ndim)]
    padding = [((0, n - 1) if reverse else (n - 1, 0)) if i == axis else (0, 0) for i in range(v.ndim)]
    init = ctx.scalar(identity, v.dtype)
    op = op_name if v.dtype.kind != "b" else {"add": "or", "multiply": "and"}.get(op_name, op_name)
    return ctx.reduce_window([v], [init], window, [1] * v.ndim, padding,
                             lambda b, acc, x: b.binary(op, acc, x))[0]


lowers(np.cumsum)(_cumulative(np.cumsum, "add", 0))
lowers(np.cumprod)(_cumulative(np.cumprod, "multiply", 1))

_REDUCIBLE = {np.add: ("add", 0), np.multiply: ("multiply", 1), np.maximum: ("maximum", None),
              np.minimum: ("minimum", None), np.logical_and: ("and", True), np.logical_or: ("or", False),
              np.bitwise_and: ("and", -1), np.bitwise_or: ("or", 0), np.bitwise_xor: ("xor", 0)}


@ufunc_method_rule("reduce")
def _ufunc_reduce(ufunc):
    if ufunc not in _REDUCIBLE:
        return None
    op, identity = _REDUCIBLE[ufunc]

    def rule(ctx, a, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
        _check(None if where is True else where, out)
        v = ctx.asvalue(a)
        if dtype is not None:
            v = ctx.astype(v, dtype)
        elif ufunc in (np.add, np.multiply) and v.dtype.kind == "b":
            v = ctx.convert(v, np.int64)
        elif ufunc in (np.logical_and, np.logical_or):
            v = ctx.astype(v, np.bool_)
        axes = normalize_axes(axis, v.ndim)
        init = identity if identity is not None else (_lowest(v.dtype) if op == "maximum" else _highest(v.dtype))
        red = ctx.reduce_with(v, axes, op, init)
        if initial is not np._NoValue:
            red = ctx.binary(op, red, ctx.full(red.shape, initial, red.dtype))
        return _keep(ctx, red, v.shape, axes, keepdims)
    return rule


@ufunc_method_rule("accumulate")
def _ufunc_accumulate(ufunc):
    if ufunc not in _REDUCIBLE:
        return None
    op, identity = _REDUCIBLE[ufunc]

    def rule(ctx, a, axis=0, dtype=None, out=None):
        v = ctx.asvalue(a)
        if dtype is not None:
            v = ctx.astype(v, dtype)
        init = identity if identity is not None else (_lowest(v.dtype) if op == "maximum" else _highest(v.dtype))
        return cumulative(ctx, v, normalize_axis(axis, v.ndim), op, init)
    return rule
