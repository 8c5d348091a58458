"""Shape and layout: reshape, transpose and friends, joining and splitting, repeating,
flipping and rolling, padding, triangles and diagonals, dtype casts.

All of these are static rearrangements: the shapes and offsets are known when tracing,
so each lowers to StableHLO's reshape / transpose / slice / concatenate / pad / reverse.
"""
import operator

import numpy as np

from ..context import normalize_axes, normalize_axis, result_type
from ..registry import lowers
from .indexing import take_along
from .reductions import numpy_result_dtype


def _shape_arg(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(operator.index(s) for s in shape)


def _resolve_shape(shape, size):
    shape = list(_shape_arg(shape))
    unknown = [i for i, s in enumerate(shape) if s == -1]
    if len(unknown) > 1:
        raise ValueError("can only specify one unknown dimension")
    if unknown:
        known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
        shape[unknown[0]] = size // known
    if int(np.prod(shape, dtype=np.int64)) != size:
        raise ValueError(f"cannot reshape array of size {size} into shape {tuple(shape)}")
    return tuple(shape)


def reshape(ctx, v, shape, order="C"):
    shape = _resolve_shape(shape, v.size)
    if order == "F":
        rev = ctx.transpose(v, tuple(reversed(range(v.ndim))))
        out = ctx.reshape(rev, tuple(reversed(shape)))
        return ctx.transpose(out, tuple(reversed(range(len(shape)))))
    if order not in ("C", "A", "K", None):  # traced arrays are C-contiguous: A and K mean C
        raise NotImplementedError(f"reshape order={order!r} is not supported under jit_ps")
    return ctx.reshape(v, shape)


@lowers(np.reshape)
def _reshape(ctx, a, shape=None, order="C", *, newshape=None, copy=None):
    return reshape(ctx, ctx.asvalue(a), shape if shape is not None else newshape, order)


@lowers(np.ravel)
def _ravel(ctx, a, order="C"):
    v = ctx.asvalue(a)
    return reshape(ctx, v, (v.size,), order)


@lowers(np.transpose, np.permute_dims)
def _transpose(ctx, a, axes=None):
    v = ctx.asvalue(a)
    if axes is None:
        return ctx.transpose(v, tuple(reversed(range(v.ndim))))
    perm = tuple(normalize_axis(ax, v.ndim) for ax in axes)
    if sorted(perm) != list(range(v.ndim)):
        raise ValueError("axes don't match array")
    return ctx.transpose(v, perm)


@lowers(np.matrix_transpose)
def _matrix_transpose(ctx, x):
    v = ctx.asvalue(x)
    if v.ndim < 2:
        raise ValueError("matrix_transpose needs at least 2 dimensions")
    return _swapaxes(ctx, v, -1, -2)


@lowers(np.swapaxes)
def _swapaxes(ctx, a, axis1, axis2):
    v = ctx.asvalue(a)
    perm = list(range(v.ndim))
    i, j = normalize_axis(axis1, v.ndim), normalize_axis(axis2, v.ndim)
    perm[i], perm[j] = perm[j], perm[i]
    return ctx.transpose(v, perm)


def moveaxis_perm(ndim, source, destination):
    source = [normalize_axis(s, ndim) for s in (source if isinstance(source, (tuple, list)) else [source])]
    destination = [normalize_axis(d, ndim) for d in
                   (destination if isinstance(destination, (tuple, list)) else [destination])]
    if len(source) != len(destination):
        raise ValueError("`source` and `destination` arguments must have the same number of elements")
    order = [n for n in range(ndim) if n not in source]
    for dest, src in sorted(zip(destination, source)):
        order.insert(dest, src)
    return order


@lowers(np.moveaxis)
def _moveaxis(ctx, a, source, destination):
    v = ctx.asvalue(a)
    return ctx.transpose(v, moveaxis_perm(v.ndim, source, destination))


@lowers(np.rollaxis)
def _rollaxis(ctx, a, axis, start=0):
    v = ctx.asvalue(a)
    n = v.ndim
    axis = normalize_axis(axis, n)
    if start < 0:
        start += n
    if not 0 <= start <= n:
        raise np.exceptions.AxisError(f"start arg {start} out of range")
    if axis < start:
        start -= 1
    if axis == start:
        return v
    perm = list(range(n))
    perm.remove(axis)
    perm.insert(start, axis)
    return ctx.transpose(v, perm)


@lowers(np.expand_dims)
def _expand_dims(ctx, a, axis):
    v = ctx.asvalue(a)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out_ndim = v.ndim + len(axes)
    axes = sorted(normalize_axis(ax, out_ndim) for ax in axes)
    shape = list(v.shape)
    for ax in axes:
        shape.insert(ax, 1)
    return ctx.reshape(v, shape)


@lowers(np.squeeze)
def _squeeze(ctx, a, axis=None):
    v = ctx.asvalue(a)
    if axis is None:
        axes = [i for i, d in enumerate(v.shape) if d == 1]
    else:
        axes = normalize_axes(axis, v.ndim)
        for ax in axes:
            if v.shape[ax] != 1:
                raise ValueError("cannot select an axis to squeeze out which has size not equal to one")
    return ctx.reshape(v, [d for i, d in enumerate(v.shape) if i not in axes])


@lowers(np.broadcast_to)
def _broadcast_to(ctx, array, shape, subok=False):
    return ctx.broadcast_to(ctx.asvalue(array), _shape_arg(shape))


@lowers(np.astype)
def _astype(ctx, x, dtype, /, *, copy=True, device=None):
    return ctx.astype(ctx.asvalue(x), np.dtype(dtype))


@lowers(np.copy, np.ascontiguousarray, np.asfortranarray)
def _copy(ctx, a, order="K", subok=False, *, dtype=None, like=None):
    return ctx.asvalue(a, dtype)


@lowers(np.asarray)  # autograd.numpy's asarray (a bare np.asarray of a traced value asks for its data)
def _asarray(ctx, a, dtype=None, order=None, *, device=None, copy=None, like=None):
    return ctx.asvalue(a, dtype)


# ----- joining and splitting -----------------------------------------------------------------
def concatenate(ctx, arrays, axis=0, dtype=None):
    if not arrays:
        raise ValueError("need at least one array to concatenate")
    dtype = np.dtype(dtype) if dtype is not None else result_type(*[_strong(a) for a in arrays])
    values = [ctx.asvalue(a, dtype) for a in arrays]
    if axis is None:
        values = [ctx.reshape(v, (v.size,)) for v in values]
        axis = 0
    ndim = values[0].ndim
    if ndim == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(axis, ndim)
    for v in values:
        if v.ndim != ndim or any(d != e for i, (d, e) in enumerate(zip(v.shape, values[0].shape)) if i != axis):
            raise ValueError("all the input array dimensions except for the concatenation axis must match exactly, "
                             f"got shapes {[x.shape for x in values]}")
    return ctx.concatenate([v for v in values if v.shape[axis] > 0] or values[:1], axis)


def _strong(x):
    """np.concatenate treats every input, Python scalars included, as an array."""
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x)
    if getattr(x, "weak_type", False):
        return x.dtype
    return x


@lowers(np.concatenate)
def _concatenate(ctx, arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    return concatenate(ctx, list(arrays), axis, dtype)


@lowers(np.stack)
def _stack(ctx, arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    if not arrays:
        raise ValueError("need at least one array to stack")
    values = [ctx.asvalue(a) for a in arrays]
    shapes = {v.shape for v in values}
    if len(shapes) != 1:
        raise ValueError("all input arrays must have the same shape")
    axis = normalize_axis(axis, values[0].ndim + 1)
    expanded = [ctx.reshape(v, v.shape[:axis] + (1,) + v.shape[axis:]) for v in values]
    return concatenate(ctx, expanded, axis, dtype or result_type(*[_strong(a) for a in arrays]))


def _split_points(n, indices_or_sections, allow_uneven):
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError("number sections must be larger than 0.")
        if n % sections and not allow_uneven:
            raise ValueError("array split does not result in an equal division")
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        return np.cumsum([0] + sizes).tolist()
    return [0] + [int(i) for i in indices_or_sections] + [n]


def split(ctx, v, indices_or_sections, axis, allow_uneven):
    axis = normalize_axis(axis, v.ndim)
    n = v.shape[axis]
    points = _split_points(n, indices_or_sections, allow_uneven)
    parts = []
    for lo, hi in zip(points[:-1], points[1:]):
        lo, hi = min(max(lo if lo >= 0 else lo + n, 0), n), min(max(hi if hi >= 0 else hi + n, 0), n)
        hi = max(hi, lo)
        starts = [lo if i == axis else 0 for i in range(v.ndim)]
        limits = [hi if i == axis else d for i, d in enumerate(v.shape)]
        parts.append(ctx.slice(v, starts, limits))
    return parts


@lowers(np.split)
def _split(ctx, ary, indices_or_sections, axis=0):
    return split(ctx, ctx.asvalue(ary), indices_or_sections, axis, allow_uneven=False)


@lowers(np.array_split)
def _array_split(ctx, ary, indices_or_sections, axis=0):
    return split(ctx, ctx.asvalue(ary), indices_or_sections, axis, allow_uneven=True)


def _split_along(axis, min_ndim):
    def rule(ctx, ary, indices_or_sections):
        v = ctx.asvalue(ary)
        if v.ndim < min_ndim:
            raise ValueError(f"this split only works on arrays of {min_ndim} or more dimensions")
        ax = 0 if (axis == 1 and v.ndim == 1) else axis
        return split(ctx, v, indices_or_sections, ax, allow_uneven=False)
    return rule


lowers(np.hsplit)(_split_along(1, 1))
lowers(np.vsplit)(_split_along(0, 2))
lowers(np.dsplit)(_split_along(2, 3))


def _atleast(nd):
    def one(ctx, a):
        v = ctx.asvalue(a)
        if v.ndim >= nd:
            return v
        if nd == 3 and v.ndim == 2:
            return ctx.reshape(v, v.shape + (1,))
        if nd == 3 and v.ndim == 1:
            return ctx.reshape(v, (1,) + v.shape + (1,))
        return ctx.reshape(v, (1,) * (nd - v.ndim) + v.shape)

    def rule(ctx, *arys):
        outs = [one(ctx, a) for a in arys]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return rule


lowers(np.atleast_1d)(_atleast(1))
lowers(np.atleast_2d)(_atleast(2))
lowers(np.atleast_3d)(_atleast(3))


# ----- repeating, flipping, rolling, padding -------------------------------------------------
@lowers(np.repeat)
def _repeat(ctx, a, repeats, axis=None):
    v = ctx.asvalue(a)
    if axis is None or v.ndim == 0:  # numpy repeats a 0-d array as a 1-element vector
        if v.ndim == 0 and axis not in (None, 0, -1):
            raise np.exceptions.AxisError(f"axis {axis} is out of bounds for array of dimension 1")
        v, axis = ctx.reshape(v, (v.size,)), 0
    axis = normalize_axis(axis, v.ndim)
    reps = np.asarray(repeats)
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(()))
        expanded = ctx.broadcast_in_dim(v, v.shape[:axis + 1] + (r,) + v.shape[axis + 1:],
                                        [i if i <= axis else i + 1 for i in range(v.ndim)])
        shape = list(v.shape)
        shape[axis] *= r
        return ctx.reshape(expanded, shape)
    index = np.repeat(np.arange(v.shape[axis]), reps)
    return take_along(ctx, v, index, axis)


@lowers(np.tile)
def _tile(ctx, A, reps):
    v = ctx.asvalue(A)
    reps = (int(reps),) if np.ndim(reps) == 0 else tuple(int(r) for r in reps)
    nd = max(len(reps), v.ndim)
    reps = (1,) * (nd - len(reps)) + reps
    v = ctx.reshape(v, (1,) * (nd - v.ndim) + v.shape)
    big = []
    dims = []
    for i, (r, d) in enumerate(zip(reps, v.shape)):
        big += [r, d]
        dims.append(2 * i + 1)
    tiled = ctx.broadcast_in_dim(v, big, dims)
    return ctx.reshape(tiled, [r * d for r, d in zip(reps, v.shape)])


@lowers(np.flip)
def _flip(ctx, m, axis=None):
    v = ctx.asvalue(m)
    return ctx.reverse(v, normalize_axes(axis, v.ndim))


@lowers(np.fliplr)
def _fliplr(ctx, m):
    v = ctx.asvalue(m)
    if v.ndim < 2:
        raise ValueError("Input must be >= 2-d.")
    return ctx.reverse(v, [1])


@lowers(np.flipud)
def _flipud(ctx, m):
    v = ctx.asvalue(m)
    if v.ndim < 1:
        raise ValueError("Input must be >= 1-d.")
    return ctx.reverse(v, [0])


def roll(ctx, v, shift, axis):
    n = v.shape[axis]
    if n == 0:
        return v
    s = int(shift) % n
    if s == 0:
        return v
    head = ctx.slice(v, [n - s if i == axis else 0 for i in range(v.ndim)], list(v.shape))
    tail = ctx.slice(v, [0] * v.ndim, [n - s if i == axis else d for i, d in enumerate(v.shape)])
    return ctx.concatenate([head, tail], axis)


@lowers(np.roll)
def _roll(ctx, a, shift, axis=None):
    v = ctx.asvalue(a)
    if axis is None:
        flat = ctx.reshape(v, (v.size,))
        return ctx.reshape(roll(ctx, flat, int(np.sum(shift)), 0), v.shape)
    shifts = np.broadcast_to(np.asarray(shift), np.broadcast_shapes(np.shape(shift), np.shape(axis)))
    axes = np.broadcast_to(np.asarray(axis), shifts.shape)
    total = {}
    for s, ax in zip(shifts.reshape(-1), axes.reshape(-1)):
        ax = normalize_axis(int(ax), v.ndim)
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        v = roll(ctx, v, s, ax)
    return v


@lowers(np.rot90)
def _rot90(ctx, m, k=1, axes=(0, 1)):
    v = ctx.asvalue(m)
    a0, a1 = normalize_axis(axes[0], v.ndim), normalize_axis(axes[1], v.ndim)
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return v
    if k == 2:
        return ctx.reverse(v, [a0, a1])
    perm = list(range(v.ndim))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    if k == 1:
        return ctx.transpose(ctx.reverse(v, [a1]), perm)
    return ctx.reverse(ctx.transpose(v, perm), [a1])


def _pad_widths(pad_width, ndim):
    """np.pad's pad_width forms (n, (b, a), ((b, a),), ((b1, a1), ...)) as ndim pairs."""
    w = np.asarray(pad_width, dtype=np.int64)
    if w.ndim <= 1 and w.size <= 2:
        w = w.reshape(1, -1)
    return np.broadcast_to(w, (ndim, 2)).tolist()


@lowers(np.pad)
def _pad(ctx, array, pad_width, mode="constant", **kwargs):
    v = ctx.asvalue(array)
    if v.ndim == 0:  # numpy returns a 0-d array unpadded
        return v
    widths = _pad_widths(pad_width, v.ndim)
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        raise ValueError("index can't contain negative values")
    if mode == "constant":
        values = np.broadcast_to(np.asarray(kwargs.get("constant_values", 0)), (v.ndim, 2))
        if (values == values.flat[0]).all():
            return ctx.pad(v, ctx.asvalue(values.flat[0], v.dtype), [lo for lo, _ in widths], [hi for _, hi in widths])
        for ax, (lo, hi) in enumerate(widths):
            v = ctx.pad(v, ctx.asvalue(values[ax, 0], v.dtype), [lo if i == ax else 0 for i in range(v.ndim)],
                        [0] * v.ndim)
            v = ctx.pad(v, ctx.asvalue(values[ax, 1], v.dtype), [0] * v.ndim,
                        [hi if i == ax else 0 for i in range(v.ndim)])
        return v
    for ax, (lo, hi) in enumerate(widths):
        v = _pad_axis(ctx, v, ax, lo, hi, mode, kwargs)
    return v


def _take_range(ctx, v, axis, start, stop):
    return ctx.slice(v, [start if i == axis else 0 for i in range(v.ndim)],
                     [stop if i == axis else d for i, d in enumerate(v.shape)])


def _pad_axis(ctx, v, axis, lo, hi, mode, kwargs):
    """Non-constant modes of np.pad along one axis, from slices of the array itself."""
    if lo == 0 and hi == 0:
        return v
    n = v.shape[axis]
    if n == 0:
        raise ValueError(f"can't extend empty axis {axis} using modes other than 'constant' or 'empty'")
    if mode == "edge":
        first, last = _take_range(ctx, v, axis, 0, 1), _take_range(ctx, v, axis, n - 1, n)
        parts = [first] * lo + [v] + [last] * hi
        return ctx.concatenate(parts, axis)
    if mode == "wrap":
        index = np.arange(-lo, n + hi) % n
    elif mode == "reflect":
        if n == 1:
            index = np.zeros(n + lo + hi, dtype=np.int64)
        else:
            period = 2 * (n - 1)
            index = np.abs(np.arange(-lo, n + hi)) % period
            index = np.where(index >= n, period - index, index)
    elif mode == "symmetric":
        period = 2 * n
        index = np.arange(-lo, n + hi) % period
        index = np.where(index >= n, period - 1 - index, index)
    else:
        raise NotImplementedError(f"np.pad mode={mode!r} is not supported under jit_ps")
    return take_along(ctx, v, index, axis)


# ----- triangles and diagonals ---------------------------------------------------------------
def _tri_mask(ctx, n, m, k, lower):
    rows = ctx.iota((n, m), np.int64, 0)
    cols = ctx.iota((n, m), np.int64, 1)
    shifted = ctx.binary("add", rows, ctx.full((n, m), k, np.int64))
    return ctx.compare(cols, shifted, "LE" if lower else "GE")


def _tri(lower):
    def rule(ctx, m, k=0):
        v = ctx.asvalue(m)
        if v.ndim == 0:
            raise ValueError("input must be at least 1-d")
        if v.ndim == 1:  # numpy applies the (n, n) mask to the vector broadcast along rows
            v = ctx.broadcast_to(v, (v.shape[0], v.shape[0]))
        n, mm = v.shape[-2:]
        mask = ctx.broadcast_in_dim(_tri_mask(ctx, n, mm, int(k), lower), v.shape, [v.ndim - 2, v.ndim - 1])
        return ctx.select(mask, v, ctx.zeros_like(v))
    return rule


lowers(np.tril)(_tri(True))
lowers(np.triu)(_tri(False))


def diagonal(ctx, v, offset=0, axis1=0, axis2=1):
    a1, a2 = normalize_axis(axis1, v.ndim), normalize_axis(axis2, v.ndim)
    if a1 == a2:
        raise ValueError("axis1 and axis2 cannot be the same")
    rest = [i for i in range(v.ndim) if i not in (a1, a2)]
    x = ctx.transpose(v, rest + [a1, a2])
    n, m = x.shape[-2:]
    batch = x.shape[:-2]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    if length == 0:
        return ctx.full(batch + (0,), 0, v.dtype)
    flat = ctx.reshape(x, batch + (n * m,))
    start = offset if offset >= 0 else -offset * m
    stop = start + (length - 1) * (m + 1) + 1
    nb = len(batch)
    return ctx.slice(flat, [0] * nb + [start], list(batch) + [stop], [1] * nb + [m + 1])


@lowers(np.diagonal)
def _diagonal(ctx, a, offset=0, axis1=0, axis2=1):
    return diagonal(ctx, ctx.asvalue(a), int(offset), axis1, axis2)


@lowers(np.trace)
def _trace(ctx, a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    d = diagonal(ctx, ctx.asvalue(a), int(offset), axis1, axis2)
    rdt = numpy_result_dtype(np.sum, d.dtype, None if dtype is None else np.dtype(dtype))
    return ctx.reduce_with(ctx.astype(d, rdt), [d.ndim - 1], "add", 0)


def embed_diagonal(ctx, d, k=0):
    """Square matrices with `d` (last axis) on diagonal k, zeros elsewhere: (..., n) -> (..., N, N)."""
    n = d.shape[-1]
    size = n + abs(k)
    batch = d.shape[:-1]
    nb = len(batch)
    rows = ctx.iota((size, size), np.int64, 0)
    cols = ctx.iota((size, size), np.int64, 1)
    on_diag = ctx.compare(ctx.binary("add", rows, ctx.full((size, size), k, np.int64)), cols, "EQ")
    # the element for row i (col i+k) is d[i] if k >= 0, else d[col]
    pad_hi = [0] * nb + [abs(k)]
    padded = ctx.pad(d, ctx.scalar(0, d.dtype), [0] * (nb + 1), pad_hi)
    along = nb if k >= 0 else nb + 1
    spread = ctx.broadcast_in_dim(padded, batch + (size, size), list(range(nb)) + [along])
    mask = ctx.broadcast_in_dim(on_diag, batch + (size, size), [nb, nb + 1])
    return ctx.select(mask, spread, ctx.full(batch + (size, size), 0, d.dtype))


@lowers(np.diag)
def _diag(ctx, v, k=0):
    x = ctx.asvalue(v)
    if x.ndim == 1:
        return embed_diagonal(ctx, x, int(k))
    if x.ndim == 2:
        return diagonal(ctx, x, int(k))
    raise ValueError("Input must be 1- or 2-d.")
