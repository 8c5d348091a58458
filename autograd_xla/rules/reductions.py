"""Reductions and scans: sum, prod, mean, var, std, max, min, any, all, argmax, argmin,
cumsum, cumprod, and the ufunc methods `reduce` / `accumulate`.

Result dtypes are numpy's, read off numpy itself on an empty array (sum of int32 is
int64, mean of int is float64, var of complex is real): one small call per dtype,
cached, instead of a table that could drift from numpy's rules.
"""
import functools

import numpy as np

from ..context import highest, kept_shape, lowest, normalize_axes, normalize_axis, result_type
from ..registry import lowers, ufunc_method_rule
from .elementwise import complex_order, isnan, minmax


@functools.lru_cache(maxsize=None)
def numpy_result_dtype(fn, dtype, out_dtype=None):
    with np.errstate(all="ignore"):
        return np.dtype(fn(np.ones((1,), dtype), **({"dtype": out_dtype} if out_dtype is not None else {})).dtype)


def reduction_axes(axis, ndim):
    """Axes of a ufunc-style reduction (sum, prod, max, min, any, all): like numpy's
    ufunc.reduce, a 0-d array accepts axis 0 / -1 (and reduces nothing)."""
    if ndim == 0 and axis is not None:
        for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
            if a not in (0, -1):
                raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension 0")
        return ()
    return normalize_axes(axis, ndim)


def _keep(ctx, out, shape, axes, keepdims):
    if not keepdims:
        return out
    return ctx.reshape(out, kept_shape(shape, axes))


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
        axes = reduction_axes(axis, v.ndim)
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
    denom = max(n - ddof, 0)  # numpy divides by zero here: inf, or nan for an all-equal slice
    var = ctx.binary("divide", total, ctx.full(total.shape, denom, sq.dtype))
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


def _extremum(name, identity_of):
    def rule(ctx, a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
        _check(where, out)
        v = ctx.asvalue(a)
        axes = reduction_axes(axis, v.ndim)
        if initial is np._NoValue and any(v.shape[i] == 0 for i in axes):
            raise ValueError(f"zero-size array to reduction operation {name} which has no identity")
        if v.dtype.kind == "c":  # lexicographic order, NaN wins: elementwise.minmax as the reducer
            if not axes:
                red = v
            else:
                init = ctx.scalar(complex(identity_of(np.dtype(np.float64)), identity_of(np.dtype(np.float64))),
                                  v.dtype)
                red = ctx.reduce([v], [init], axes, lambda b, acc, x: minmax(b, acc, x, name))[0]
            if initial is not np._NoValue:
                red = minmax(ctx, red, ctx.full(red.shape, initial, v.dtype), name)
            return _keep(ctx, red, v.shape, axes, keepdims)
        op = ("or" if name == "maximum" else "and") if v.dtype.kind == "b" else name
        red = ctx.reduce_with(v, axes, op, identity_of(v.dtype))
        if initial is not np._NoValue:
            red = ctx.binary(op, red, ctx.full(red.shape, initial, v.dtype))
        return _keep(ctx, red, v.shape, axes, keepdims)
    return rule


lowers(np.max, np.amax)(_extremum("maximum", lowest))
lowers(np.min, np.amin)(_extremum("minimum", highest))


def _boolean(op, identity):
    def rule(ctx, a, axis=None, out=None, keepdims=False, where=np._NoValue):
        _check(where, out)
        v = ctx.astype(ctx.asvalue(a), np.bool_)
        axes = reduction_axes(axis, v.ndim)
        return _keep(ctx, ctx.reduce_with(v, axes, op, identity), v.shape, axes, keepdims)
    return rule


lowers(np.any)(_boolean("or", False))
lowers(np.all)(_boolean("and", True))


@lowers(np.ptp)
def _ptp(ctx, a, axis=None, out=None, keepdims=False):
    hi = _extremum("maximum", lowest)(ctx, a, axis, keepdims=keepdims)
    lo = _extremum("minimum", highest)(ctx, a, axis, keepdims=keepdims)
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
        if v.dtype.kind == "c":
            extreme = lowest(np.dtype(np.float64)) if better == "GT" else highest(np.dtype(np.float64))
            init_v = ctx.scalar(complex(extreme, extreme), v.dtype)
        else:
            init_v = ctx.scalar(lowest(v.dtype) if better == "GT" else highest(v.dtype), v.dtype)
        # the initial pair never wins, whatever its value compares as: an index of -1 marks it
        # (XLA:TPU's 64-bit integers are emulated; there int64's lowest read as 0, so the
        # initial pair beat a row of -1s and argmax gave its index, -1)
        init_i = ctx.scalar(-1, np.int64)

        def beats(b, x, y):
            return complex_order(b, x, y, better) if v.dtype.kind == "c" else b.compare(x, y, better)

        def body(b, av, ai, bv, bi):
            a_first = b.compare(ai, bi, "LT")
            if v.dtype.kind in "fc":
                a_nan, b_nan = isnan(b, av), isnan(b, bv)
                a_wins = b.binary("or", beats(b, av, bv),
                                  b.binary("and", b.compare(av, bv, "EQ"), a_first))
                a_wins = b.select(b.binary("or", a_nan, b_nan),
                                  b.binary("and", a_nan, b.binary("or", b.unary("not", b_nan), a_first)), a_wins)
            else:
                a_wins = b.binary("or", b.compare(av, bv, better), b.binary("and", b.compare(av, bv, "EQ"), a_first))
            a_wins = b.binary("or", b.compare(bi, b.scalar(0, np.int64), "LT"),
                              b.binary("and", b.compare(ai, b.scalar(0, np.int64), "GE"), a_wins))
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
        if axis is None or v.ndim == 0:  # numpy scans a 0-d array as a 1-element vector
            if v.ndim == 0 and axis not in (None, 0, -1):
                raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension 1")
            v = ctx.reshape(v, (v.size,))
            ax = 0
        else:
            ax = normalize_axis(axis, v.ndim)
        return cumulative(ctx, ctx.astype(v, rdt), ax, op_name, identity)
    return rule


def cumulative(ctx, v, axis, op_name, identity, reverse=False):
    """Inclusive scan along `axis` in log2(n) steps: each step combines every element with
    the one 2**k places before it (Hillis-Steele). O(n log n) work for any axis length,
    where a window over the whole axis would be O(n**2)."""
    n = v.shape[axis]
    if n <= 1:
        return v
    op = op_name if v.dtype.kind != "b" else {"add": "or", "multiply": "and"}.get(op_name, op_name)
    if reverse:
        v = ctx.reverse(v, [axis])
    init = ctx.scalar(identity, v.dtype)
    step = 1
    while step < n:
        head = ctx.slice(v, [0] * v.ndim, [n - step if i == axis else d for i, d in enumerate(v.shape)])
        shifted = ctx.pad(head, init, [step if i == axis else 0 for i in range(v.ndim)], [0] * v.ndim)
        v = ctx.binary(op, v, shifted)
        step *= 2
    return ctx.reverse(v, [axis]) if reverse else v


lowers(np.cumsum)(_cumulative(np.cumsum, "add", 0))
lowers(np.cumprod)(_cumulative(np.cumprod, "multiply", 1))

_REDUCIBLE = {np.add: ("add", 0), np.multiply: ("multiply", 1), np.maximum: ("maximum", None),
              np.minimum: ("minimum", None), np.logical_and: ("and", True), np.logical_or: ("or", False),
              np.bitwise_and: ("and", -1), np.bitwise_or: ("or", 0), np.bitwise_xor: ("xor", 0)}


def _ufunc_method_input(ctx, ufunc, a, dtype):
    """The operand of ufunc.reduce/accumulate in numpy's accumulator dtype: add and
    multiply widen small integers and bools like sum and prod do."""
    v = ctx.asvalue(a)
    if v.dtype.kind == "c" and ufunc in (np.maximum, np.minimum):
        raise NotImplementedError(f"np.{ufunc.__name__}.reduce/accumulate of complex arrays is not supported "
                                  f"under jit_ps; use np.{'max' if ufunc is np.maximum else 'min'}")
    if dtype is not None:
        return ctx.astype(v, dtype)
    if ufunc in (np.add, np.multiply) and v.dtype.kind in "biu":
        return ctx.astype(v, numpy_result_dtype(np.sum, v.dtype))
    if ufunc in (np.logical_and, np.logical_or):
        return ctx.astype(v, np.bool_)
    return v


@ufunc_method_rule("reduce")
def _ufunc_reduce(ufunc):
    if ufunc not in _REDUCIBLE:
        return None
    op, identity = _REDUCIBLE[ufunc]

    def rule(ctx, a, axis=0, dtype=None, out=None, keepdims=False, initial=np._NoValue, where=True):
        _check(np._NoValue if where is True else where, out)
        v = _ufunc_method_input(ctx, ufunc, a, dtype)
        axes = reduction_axes(axis, v.ndim)
        init = identity if identity is not None else (lowest(v.dtype) if op == "maximum" else highest(v.dtype))
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
        v = _ufunc_method_input(ctx, ufunc, a, dtype)
        init = identity if identity is not None else (lowest(v.dtype) if op == "maximum" else highest(v.dtype))
        return cumulative(ctx, v, normalize_axis(axis, v.ndim), op, init)
    return rule


def _new_style_cumulative(fn, legacy, op_name, identity):
    def rule(ctx, x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        if out is not None:
            raise NotImplementedError("out= is not supported under jit_ps")
        v = ctx.asvalue(x)
        if axis is None:
            if v.ndim > 1:
                raise ValueError("axis must be specified for multi-dimensional arrays")
            axis = 0
        if v.ndim == 0:
            raise ValueError(f"{fn.__name__} does not accept 0-d arrays")
        ax = normalize_axis(axis, v.ndim)
        rdt = numpy_result_dtype(legacy, v.dtype, None if dtype is None else np.dtype(dtype))
        out_v = cumulative(ctx, ctx.astype(v, rdt), ax, op_name, identity)
        if include_initial:
            out_v = ctx.pad(out_v, ctx.scalar(identity, rdt), [1 if i == ax else 0 for i in range(v.ndim)],
                            [0] * v.ndim)
        return out_v
    return rule


lowers(np.cumulative_sum)(_new_style_cumulative(np.cumulative_sum, np.cumsum, "add", 0))
lowers(np.cumulative_prod)(_new_style_cumulative(np.cumulative_prod, np.cumprod, "multiply", 1))


# ----- sorting -------------------------------------------------------------------------------
def _before_nan_last(b, x, y, descending=False):
    """numpy's sort order: NaN after everything, ascending or descending; complex numbers
    lexicographically (ascending only: sort_along)."""
    if x.dtype.kind == "c":
        xr, yr, xi, yi = b.real(x), b.real(y), b.imag(x), b.imag(y)
        real_less = _before_nan_last(b, xr, yr)
        real_same = b.binary("or", b.compare(xr, yr, "EQ"),
                             b.binary("and", b.compare(xr, xr, "NE"), b.compare(yr, yr, "NE")))
        return b.binary("or", real_less, b.binary("and", real_same, _before_nan_last(b, xi, yi)))
    direction = "GT" if descending else "LT"
    if x.dtype.kind == "f":
        x_nan, y_nan = b.compare(x, x, "NE"), b.compare(y, y, "NE")
        return b.binary("or", b.compare(x, y, direction), b.binary("and", y_nan, b.unary("not", x_nan)))
    return b.compare(x, y, direction)


def sort_along(ctx, v, axis, with_indices=False, descending=False):
    """Stable sort of v along axis (NaN last); with_indices also returns the permutation."""
    if descending and v.dtype.kind == "c":  # (numpy 2.5's order of complex NaNs descending: not reproduced)
        raise NotImplementedError("a descending sort of complex numbers is not supported under jit_ps")
    if v.shape[axis] <= 1 or v.size == 0:
        idx = ctx.full(v.shape, 0, np.int64)
        return (v, idx) if with_indices else v
    operands = [v]
    if with_indices:
        operands.append(ctx.iota(v.shape, np.int64, axis))
    outs = ctx.sort(operands, axis, lambda b, x, y, *rest: _before_nan_last(b, x, y, descending), stable=True)
    return (outs[0], outs[1]) if with_indices else outs[0]


def _sort_keywords(fn, dtype, kind, stable, descending):
    """Whether to sort descending, after numpy's own checks of the keywords on a stand-in of
    the dtype: a kind beside stable or descending raises its ValueError, descending where
    this numpy has none (before 2.5) its TypeError."""
    extra = {} if descending is np._NoValue else {"descending": descending}
    if extra or (kind is not None and stable is not None):
        fn(np.zeros(2, dtype), kind=kind, stable=stable, **extra)
    return bool(extra.get("descending"))


def _sort_input(ctx, a, axis, order):
    if order is not None:
        raise NotImplementedError("sorting by field order is not supported under jit_ps")
    v = ctx.asvalue(a)
    if axis is None:
        return ctx.reshape(v, (v.size,)), 0
    if v.ndim == 0:
        raise np.exceptions.AxisError("axis -1 is out of bounds for array of dimension 0")
    return v, normalize_axis(axis, v.ndim)


@lowers(np.sort)
def _sort(ctx, a, axis=-1, kind=None, order=None, *, stable=None, descending=np._NoValue):
    v, ax = _sort_input(ctx, a, axis, order)
    return sort_along(ctx, v, ax, descending=_sort_keywords(np.sort, v.dtype, kind, stable, descending))


@lowers(np.argsort)
def _argsort(ctx, a, axis=-1, kind=None, order=None, *, stable=None, descending=np._NoValue):
    """Always stable: numpy's default quicksort may order ties differently (numpy 2.5's
    descending=True too: its stable=True order, NaN last)."""
    v, ax = _sort_input(ctx, a, axis, order)
    return sort_along(ctx, v, ax, with_indices=True,
                      descending=_sort_keywords(np.argsort, v.dtype, kind, stable, descending))[1]


def _check_kth(kth, n):
    for k in np.atleast_1d(np.asarray(kth)):
        if not -n <= int(k) < n:
            raise ValueError(f"kth(={int(k)}) out of bounds ({n})")


@lowers(np.partition)
def _partition(ctx, a, kth, axis=-1, kind="introselect", order=None):
    """A full sort: a valid partition for every kth. numpy's introselect leaves the other
    elements in an unspecified order, which this does not reproduce."""
    v, ax = _sort_input(ctx, a, axis, order)
    _check_kth(kth, v.shape[ax])
    return sort_along(ctx, v, ax)


@lowers(np.argpartition)
def _argpartition(ctx, a, kth, axis=-1, kind="introselect", order=None):
    v, ax = _sort_input(ctx, a, axis, order)
    _check_kth(kth, v.shape[ax])
    return sort_along(ctx, v, ax, with_indices=True)[1]


# ----- differences ---------------------------------------------------------------------------
def _take_range(ctx, v, axis, lo, hi):
    return ctx.slice(v, [lo if i == axis else 0 for i in range(v.ndim)],
                     [hi if i == axis else d for i, d in enumerate(v.shape)])


@lowers(np.diff)
def _diff(ctx, a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    if n == 0:
        return ctx.asvalue(a)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    v = ctx.asvalue(a)
    if v.ndim == 0:
        raise ValueError("diff requires input that is at least one dimensional")
    ax = normalize_axis(axis, v.ndim)
    parts = []
    for extra in (prepend, append):
        if extra is np._NoValue:
            parts.append(None)
            continue
        e = ctx.asvalue(extra)
        if e.ndim == 0:
            e = ctx.broadcast_to(e, [1 if i == ax else d for i, d in enumerate(v.shape)])
        parts.append(e)
    if parts[0] is not None or parts[1] is not None:
        dt = result_type(*[p for p in (parts[0], v, parts[1]) if p is not None])
        v = ctx.concatenate([ctx.astype(p, dt) for p in (parts[0], v, parts[1]) if p is not None], ax)
    for _ in range(n):
        m = v.shape[ax]
        if m == 0:
            break
        hi, lo = _take_range(ctx, v, ax, 1, m), _take_range(ctx, v, ax, 0, m - 1)
        v = ctx.compare(hi, lo, "NE") if v.dtype.kind == "b" else ctx.binary("subtract", hi, lo)
    return v


@lowers(np.gradient)
def _gradient(ctx, f, *varargs, axis=None, edge_order=1):
    v = ctx.asvalue(f)
    axes = normalize_axes(axis, v.ndim) if axis is not None and not isinstance(axis, (tuple, list)) \
        else tuple(normalize_axis(a, v.ndim) for a in (axis if axis is not None else range(v.ndim)))
    if len(varargs) == 0:
        spacing = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacing = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes) and all(np.ndim(d) == 0 for d in varargs):
        spacing = list(varargs)
    else:
        raise NotImplementedError("np.gradient with coordinate arrays is not supported under jit_ps; "
                                  "pass scalar spacings")
    if any(isinstance(d, type(v)) for d in spacing):
        raise NotImplementedError("np.gradient spacings must be concrete numbers under jit_ps")
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    dt = v.dtype if v.dtype.kind in "fc" else np.dtype(np.float64)
    v = ctx.astype(v, dt)
    outs = [_gradient_axis(ctx, v, ax, float(h), edge_order) for ax, h in zip(axes, spacing)]
    return outs[0] if len(outs) == 1 else tuple(outs)


def _gradient_axis(ctx, v, ax, h, edge_order):
    n = v.shape[ax]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")

    def part(lo, hi):
        return _take_range(ctx, v, ax, lo % n if lo < 0 else lo, hi % n if hi <= 0 else hi)

    def scaled(x, c):
        return ctx.binary("multiply", x, ctx.full(x.shape, c, x.dtype))

    def div(x, c):
        return ctx.binary("divide", x, ctx.full(x.shape, c, x.dtype))

    sub, add = (lambda a, b: ctx.binary("subtract", a, b)), (lambda a, b: ctx.binary("add", a, b))
    interior = div(sub(_take_range(ctx, v, ax, 2, n), _take_range(ctx, v, ax, 0, n - 2)), 2.0 * h)
    f0, f1 = _take_range(ctx, v, ax, 0, 1), _take_range(ctx, v, ax, 1, 2)
    fl, fl1 = _take_range(ctx, v, ax, n - 1, n), _take_range(ctx, v, ax, n - 2, n - 1)
    if edge_order == 1:
        first, last = div(sub(f1, f0), h), div(sub(fl, fl1), h)
    else:
        f2, fl2 = _take_range(ctx, v, ax, 2, 3), _take_range(ctx, v, ax, n - 3, n - 2)
        first = add(add(scaled(f0, -1.5 / h), scaled(f1, 2.0 / h)), scaled(f2, -0.5 / h))
        last = add(add(scaled(fl2, 0.5 / h), scaled(fl1, -2.0 / h)), scaled(fl, 1.5 / h))
    return ctx.concatenate([first, interior, last], ax)
