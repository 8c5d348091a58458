"""Indexing: `x[idx]`, `x[idx] = v`, `np.add.at` (the VJP of indexing), take and friends.

Any numpy index is first normalised into one entry per result axis (`_entries`):
None, a static slice, a static integer, a traced scalar integer, or an integer array
(static or traced). Reading then lowers to static slices (+ reverse for negative steps),
a dynamic_slice for traced scalars, and one gather for the array indices, placing the
broadcast index dimensions where numpy does. Writing (scatter) into basic (slice/int)
positions is a pad of the update; anything else becomes one scatter with a full index
vector per element, computed by running numpy's own indexing on position arrays.

numpy raises IndexError for out-of-range indices; traced indices cannot be checked when
compiling, so there XLA's clamping applies (documented in the README).
"""
import operator

import numpy as np

from ..core import UfuncMethod, setitem
from ..errors import ConcreteValueRequired
from ..hlo import Value
from ..context import normalize_axis
from ..registry import entry, lowers, ufunc_method_rule
from .elementwise import BINARY, int_divmod

INDEX_DTYPE = np.dtype(np.int64)


class _Entry:
    __slots__ = ("kind", "value", "dim")

    def __init__(self, kind, value=None, dim=None):
        self.kind, self.value, self.dim = kind, value, dim  # dim: axis of x it indexes (None for 'none')


def _is_int_scalar(i):
    return isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_))


def _as_index_array(ctx, i):
    if isinstance(i, Value):
        return i
    if isinstance(i, (list, tuple)) and any(isinstance(e, Value) for e in np.ravel(np.asarray(i, dtype=object))):
        parts = [ctx.reshape(ctx.asvalue(e, INDEX_DTYPE), (1,)) for e in i]
        return ctx.concatenate(parts, 0)
    return np.asarray(i)


def _entries(ctx, shape, idx):
    """One _Entry per output-producing index component, with Ellipsis expanded."""
    if not isinstance(idx, tuple):
        idx = (idx,)
    items = []
    for i in idx:
        if i is None or i is Ellipsis or isinstance(i, slice) or _is_int_scalar(i):
            items.append(i)
        elif isinstance(i, (bool, np.bool_)) or (isinstance(i, np.ndarray) and i.ndim == 0 and i.dtype == bool):
            if not i:
                raise IndexError("x[False] selects nothing along a new axis; under jit_ps write x[None][:0]")
            items.append(None)  # x[True] adds an axis of length 1, like None
        elif isinstance(i, list) and len(i) == 0:
            items.append(np.zeros(0, dtype=INDEX_DTYPE))  # numpy reads [] as an empty integer index
        elif isinstance(i, Value) and i.ndim == 0 and i.dtype.kind in "iu":
            items.append(i)
        else:
            a = _as_index_array(ctx, i)
            if a.dtype.kind == "b":
                if isinstance(a, Value):
                    raise ConcreteValueRequired(a, "a boolean mask index (it selects a data-dependent number of "
                                                "elements; np.where(mask, x, 0) keeps the shape)")
                items.extend(np.nonzero(a))
                continue
            if a.dtype.kind not in "iu":
                raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and "
                                 "integer or boolean arrays are valid indices")
            items.append(a)
    n_ellipsis = sum(i is Ellipsis for i in items)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(not (i is None or i is Ellipsis) for i in items)
    if consumed > len(shape):
        raise IndexError(f"too many indices for array: array is {len(shape)}-dimensional, but {consumed} were indexed")
    if n_ellipsis:
        at = items.index(Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(shape) - consumed)
    else:
        items += [slice(None)] * (len(shape) - consumed)
    entries, dim = [], 0
    for i in items:
        if i is None:
            entries.append(_Entry("none"))
        elif isinstance(i, slice):
            entries.append(_Entry("slice", _static_slice(i, shape[dim]), dim))
            dim += 1
        elif _is_int_scalar(i):
            n = shape[dim]
            if not -n <= int(i) < n:
                raise IndexError(f"index {int(i)} is out of bounds for axis {dim} with size {n}")
            entries.append(_Entry("int", int(i) % n, dim))
            dim += 1
        elif isinstance(i, Value) and i.ndim == 0:
            entries.append(_Entry("dyn", i, dim))
            dim += 1
        else:
            if not isinstance(i, Value) and i.size:
                n = shape[dim]
                if i.max() >= n or i.min() < -n:
                    bad = i.max() if i.max() >= n else i.min()
                    raise IndexError(f"index {bad} is out of bounds for axis {dim} with size {n}")
            entries.append(_Entry("adv", i, dim))
            dim += 1
    return entries


def _static_slice(s, n):
    for part in (s.start, s.stop, s.step):
        if isinstance(part, Value):
            raise IndexError("slice bounds must be known when compiling; use a static argument, "
                             "or index with a traced integer (x[i]) for a single element")
    start, stop, step = slice(*(None if p is None else operator.index(p) for p in (s.start, s.stop, s.step))) \
        .indices(n)
    return start, stop, step


def _slice_len(start, stop, step):
    return max(0, -(-(stop - start) // step)) if step > 0 else max(0, -(-(start - stop) // -step))


def _wrap(ctx, i, n):
    """numpy's negative indices: i + n where i < 0."""
    i = ctx.convert(i, INDEX_DTYPE) if i.dtype != INDEX_DTYPE else i
    zero = ctx.full(i.shape, 0, INDEX_DTYPE)
    return ctx.select(ctx.compare(i, zero, "LT"), ctx.binary("add", i, ctx.full(i.shape, n, INDEX_DTYPE)), i)


def _basic(ctx, x, entries):
    """Apply slices, static ints and traced scalars; one result axis per entry."""
    starts, limits, strides, flips = [], [], [], []
    for d in range(x.ndim):
        e = next(e for e in entries if e.dim == d)
        n = x.shape[d]
        if e.kind == "slice":
            start, stop, step = e.value
            length = _slice_len(start, stop, step)
            if step < 0:
                flips.append(d)
                start = n - 1 - start
                step = -step
            starts.append(start)
            limits.append(start + (length - 1) * step + 1 if length else start)
            strides.append(step)
        elif e.kind == "int":
            starts.append(e.value)
            limits.append(e.value + 1)
            strides.append(1)
        else:
            starts.append(0)
            limits.append(n)
            strides.append(1)
    y = ctx.slice(ctx.reverse(x, flips), starts, limits, strides)
    dyn = [e for e in entries if e.kind == "dyn"]
    if dyn:
        zero = ctx.scalar(0, INDEX_DTYPE)
        start_values = []
        for d in range(y.ndim):
            e = next(e for e in entries if e.dim == d)
            start_values.append(_wrap(ctx, e.value, x.shape[d]) if e.kind == "dyn" else zero)
        y = ctx.dynamic_slice(y, start_values, [1 if next(e for e in entries if e.dim == d).kind == "dyn"
                                                else y.shape[d] for d in range(y.ndim)])
    shape = []
    for e in entries:
        shape.append(1 if e.kind == "none" else y.shape[e.dim])
    return ctx.reshape(y, shape)


def getitem(ctx, x, idx):
    entries = _entries(ctx, x.shape, idx)
    adv = [k for k, e in enumerate(entries) if e.kind == "adv"]
    if adv:
        for e in entries:
            if e.kind in ("int", "dyn"):
                e.kind, e.value = "adv", (np.asarray(e.value) if e.kind == "int" else e.value)
        adv = [k for k, e in enumerate(entries) if e.kind == "adv"]
    y = _basic(ctx, x, entries)
    if not adv:
        return ctx.reshape(y, [y.shape[k] for k, e in enumerate(entries) if e.kind not in ("int", "dyn")])
    return _gather(ctx, y, entries, adv, x.shape)


def _gather(ctx, y, entries, adv, x_shape):
    arrays = [entries[k].value for k in adv]
    batch = np.broadcast_shapes(*[a.shape for a in arrays])
    if y.size == 0 or int(np.prod(batch)) == 0:  # nothing to read; XLA rejects empty gathers
        kept = [y.shape[k] for k in range(y.ndim) if k not in adv]
        adjacent = adv == list(range(adv[0], adv[0] + len(adv)))
        position = adv[0] if adjacent else 0
        return ctx.full(kept[:position] + list(batch) + kept[position:], 0, y.dtype)
    index_parts = []
    for k, a in zip(adv, arrays):
        n = x_shape[entries[k].dim]
        if isinstance(a, Value):
            v = _wrap(ctx, a, n)
        else:
            v = ctx.const(np.where(a < 0, a + n, a).astype(INDEX_DTYPE))
        index_parts.append(ctx.reshape(ctx.broadcast_to(v, batch), batch + (1,)))
    indices = ctx.concatenate(index_parts, len(batch)) if len(index_parts) > 1 else index_parts[0]
    rank = y.ndim
    adjacent = adv == list(range(adv[0], adv[0] + len(adv)))
    position = adv[0] if adjacent else 0
    kept = [k for k in range(rank) if k not in adv]
    offset_dims = list(range(position)) + list(range(position + len(batch), len(batch) + len(kept)))
    kept_shape = [y.shape[k] for k in kept]
    out_shape = kept_shape[:position] + list(batch) + kept_shape[position:]
    slice_sizes = [1 if k in adv else y.shape[k] for k in range(rank)]
    return ctx.gather(y, indices, offset_dims, adv, adv, len(batch), slice_sizes, out_shape)


@lowers(operator.getitem)
def _getitem(ctx, x, idx):
    return getitem(ctx, ctx.asvalue(x), idx)


_IN_RANGE = (int, "in range")  # (never an int's own key: that holds the int)


def _row_key(args, keys):
    """`x[i]` of an integer i in range of x's first axis is a row of x, whichever row: one key
    for them all (registry's type_key)."""
    if len(args) == 2 and type(args[1]) is int:  # (the other operand then the traced one)
        shape = args[0].shape
        if shape and -shape[0] <= args[1] < shape[0]:
            return [keys[0], _IN_RANGE]
    return keys


entry(operator.getitem).type_key = _row_key


def take_along(ctx, v, index, axis):
    """v indexed along `axis` by a static 1-D integer array."""
    return getitem(ctx, v, (slice(None),) * axis + (np.asarray(index, dtype=INDEX_DTYPE),))


# ----- writing: scatter ----------------------------------------------------------------------
def _unslice(ctx, u, x_shape, entries, fill):
    """Inverse of `_basic` for static entries: put `u` (one axis per entry) back at its
    positions in an array of shape x_shape, `fill` elsewhere."""
    u = ctx.reshape(u, [u.shape[k] for k, e in enumerate(entries) if e.kind != "none"])
    low, high, interior, flips = [], [], [], []
    for e in (e for e in entries if e.kind != "none"):
        n = x_shape[e.dim]
        if e.kind == "slice":
            start, stop, step = e.value
            length = _slice_len(start, stop, step)
            if step < 0:
                flips.append(e.dim)
                start, step = n - 1 - start, -step
            last = start + (length - 1) * step if length else start - 1
            low.append(start)
            high.append(n - 1 - last if length else n - start)
            interior.append(step - 1 if length > 1 else 0)
        else:
            low.append(e.value)
            high.append(n - 1 - e.value)
            interior.append(0)
    padded = ctx.pad(u, ctx.scalar(fill, u.dtype), low, high, interior)
    return ctx.reverse(padded, flips)


def _point_indices(ctx, shape, entries, result_shape):
    """Full index vectors (result_shape + (ndim,)) for arbitrary entries, traced or not."""
    has_adv = any(e.kind == "adv" for e in entries)
    fake = list(shape)
    static_idx, traced = [], {}
    for e in entries:
        if e.kind == "none":
            static_idx.append(None)
        elif e.kind == "slice":
            start, stop, step = e.value
            static_idx.append(slice(start, None if stop < 0 else stop, step))
        elif e.kind == "int":
            static_idx.append(np.asarray(e.value) if has_adv else e.value)
        elif e.kind == "dyn" and not has_adv:
            static_idx.append(0)
            traced[e.dim] = ("scalar", e.value)
        else:
            a = e.value
            if isinstance(a, Value):
                traced[e.dim] = ("array", a)
                fake[e.dim] = max(fake[e.dim], a.size, 1)
                static_idx.append(np.arange(a.size).reshape(a.shape))
            else:
                static_idx.append(a)
    parts = []
    for d in range(len(shape)):
        base = np.broadcast_to(np.arange(fake[d]).reshape([-1 if k == d else 1 for k in range(len(shape))]), fake)
        positions = base[tuple(static_idx)].astype(INDEX_DTYPE)
        assert positions.shape == tuple(result_shape), (positions.shape, result_shape)
        kind = traced.get(d)
        if kind is None:
            part = ctx.const(positions)
        elif kind[0] == "scalar":
            part = ctx.broadcast_to(_wrap(ctx, kind[1], shape[d]), result_shape)
        else:
            flat = ctx.reshape(kind[1], (kind[1].size,))
            picked = ctx.gather(flat, ctx.const(positions.reshape(positions.shape + (1,))), [], [0], [0],
                                positions.ndim, [1], positions.shape)
            part = _wrap(ctx, picked, shape[d])
        parts.append(ctx.reshape(part, tuple(result_shape) + (1,)))
    return ctx.concatenate(parts, len(result_shape)) if len(parts) > 1 else parts[0]


def scatter(ctx, x, idx, updates, combine):
    """x with x[idx] combined with `updates`; `combine(builder, old, new)` or None to replace."""
    entries = _entries(ctx, x.shape, idx)
    result_shape = _result_shape(ctx, x, idx)
    u = ctx.broadcast_to(ctx.asvalue(updates, x.dtype), result_shape)
    if all(e.kind in ("none", "slice", "int") for e in entries):
        spread = _unslice(ctx, ctx.reshape(u, [1 if e.kind in ("none", "int") else _slice_len(*e.value)
                                               for e in entries]), x.shape, entries, 0)
        if combine is None:
            mask = _unslice(ctx, ctx.full([1 if e.kind in ("none", "int") else _slice_len(*e.value)
                                           for e in entries], True, np.bool_), x.shape, entries, False)
            return ctx.select(mask, spread, x)
        if combine == "add":
            return ctx.binary("add" if x.dtype.kind != "b" else "or", x, spread)
    if u.size == 0:
        return x
    indices = _point_indices(ctx, x.shape, entries, result_shape)

    def body(b, old, new):
        if combine is None:
            return new
        if combine == "add":
            return b.binary("add" if x.dtype.kind != "b" else "or", old, new)
        return combine(b, old, new)

    n = x.ndim
    return ctx.scatter(x, indices, u, [], list(range(n)), list(range(n)), len(result_shape), body)


def _result_shape(ctx, x, idx):
    """Shape of x[idx], by numpy on a zero-strided stand-in (no data is touched)."""
    probe = np.broadcast_to(np.empty((), dtype=np.int8), x.shape)
    static = []
    for i in (idx if isinstance(idx, tuple) else (idx,)):
        if isinstance(i, Value):
            static.append(np.zeros(i.shape, dtype=np.intp) if i.dtype.kind in "iu" else np.zeros(i.shape, bool))
        elif isinstance(i, (list, tuple)) and any(isinstance(e, Value) for e in i):
            static.append(np.zeros(len(i), dtype=np.intp))
        else:
            static.append(i)
    return probe[tuple(static)].shape


@lowers(setitem)
def _setitem(ctx, x, idx, value):
    v = ctx.asvalue(x)
    return scatter(ctx, v, idx, ctx.asvalue(value, v.dtype), None)


@lowers(UfuncMethod(np.add, "at"))
def _add_at(ctx, a, indices, b=None):
    v = ctx.asvalue(a)
    return scatter(ctx, v, indices, ctx.asvalue(b, v.dtype), "add")


@ufunc_method_rule("at")
def _ufunc_at(ufunc):
    body = BINARY.get(ufunc)
    if ufunc.nin != 2 or body is None:
        return None

    def rule(ctx, a, indices, b=None):
        v = ctx.asvalue(a)
        return scatter(ctx, v, indices, ctx.asvalue(b, v.dtype), lambda bld, old, new: body(bld, old, new))
    return rule


# ----- take and friends ----------------------------------------------------------------------
@lowers(np.take)
def _take(ctx, a, indices, axis=None, out=None, mode=None):
    v = ctx.asvalue(a)
    if axis is None:
        v, axis = ctx.reshape(v, (v.size,)), 0
    axis = normalize_axis(axis, v.ndim)
    idx = _as_index_array(ctx, indices) if not _is_int_scalar(indices) else indices
    n = v.shape[axis]
    if mode == "wrap" or mode == "clip":
        iv = ctx.asvalue(idx, INDEX_DTYPE)
        if mode == "wrap":
            iv = int_divmod(ctx, iv, ctx.full(iv.shape, n, INDEX_DTYPE))[1]
        else:
            iv = ctx.clamp(ctx.scalar(0, INDEX_DTYPE), iv, ctx.scalar(n - 1, INDEX_DTYPE))
        idx = iv
    return getitem(ctx, v, (slice(None),) * axis + (idx,))


@lowers(np.take_along_axis)
def _take_along_axis(ctx, arr, indices, axis=-1):
    v = ctx.asvalue(arr)
    if axis is None:
        v, axis = ctx.reshape(v, (v.size,)), 0
    axis = normalize_axis(axis, v.ndim)
    ind = _as_index_array(ctx, indices)
    if ind.ndim != v.ndim:
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    idx = []
    for d in range(v.ndim):
        if d == axis:
            idx.append(ind)
        else:
            shape = [1] * v.ndim
            shape[d] = v.shape[d]
            idx.append(np.arange(v.shape[d]).reshape(shape))
    return getitem(ctx, v, tuple(idx))
