"""Slices with traced bounds: `x[i:i + k]`, `x[b*n:(b+1)*n]` inside jit_ps.

The tracer turns such a slice into a `core.DynamicSlice(start, size)` when the length is a
known constant (it follows integer arithmetic on traced scalars, tracing.py), and records
a guard that the slice lies inside the array; if a call violates it, that call runs as
plain autograd, since numpy would then return a shorter array. These rules read and
write through `dynamic_slice` / `dynamic_update_slice`; the other components of such an
index may be integers, slices and None.
"""
import numpy as np

from ..core import DynamicSlice, dynamic_getitem, dynamic_update, index_axes, index_components, static_index
from ..hlo import Value
from ..registry import lowers
from .indexing import INDEX_DTYPE, getitem


def _start(ctx, d, n):
    start = d.start
    if isinstance(start, Value):
        return ctx.convert(start, INDEX_DTYPE)
    return ctx.scalar(int(start) % n if int(start) < 0 else int(start), INDEX_DTYPE)


@lowers(dynamic_getitem)
def _dynamic_getitem(ctx, x, idx):
    v = ctx.asvalue(x)
    comps = index_components(idx)
    axes = index_axes(comps, v.ndim)
    # static part first, keeping one axis per component (ints become length-1 slices)
    static = []
    for c in comps:
        if isinstance(c, DynamicSlice):
            static.append(slice(None))
        elif isinstance(c, (int, np.integer)):
            static.append(slice(int(c), int(c) + 1 if int(c) != -1 else None))
        else:
            static.append(c)
    y = getitem(ctx, v, tuple(static))
    out_axis, k = [], 0  # the axis of y each component produced
    for c in comps:
        if c is Ellipsis:
            out_axis.append(None)
            k += v.ndim - sum(1 for a in axes if a is not None)
        else:
            out_axis.append(k)
            k += 1
    starts, sizes = [], list(y.shape)
    zero = ctx.scalar(0, INDEX_DTYPE)
    dynamic = {out_axis[i]: (c, axes[i]) for i, c in enumerate(comps) if isinstance(c, DynamicSlice)}
    for a in range(y.ndim):
        if a in dynamic:
            c, src_axis = dynamic[a]
            if c.size > y.shape[a]:
                raise IndexError(f"a slice of length {c.size} does not fit axis {src_axis} of size {y.shape[a]}")
            starts.append(_start(ctx, c, v.shape[src_axis]))
            sizes[a] = c.size
        else:
            starts.append(zero)
    out = ctx.dynamic_slice(y, starts, sizes)
    drop = {out_axis[i] for i, c in enumerate(comps) if isinstance(c, (int, np.integer))}
    return ctx.reshape(out, [d for a, d in enumerate(out.shape) if a not in drop])


def _update_plan(ctx, v, idx):
    """Start index per axis and the shape the update is placed with (one axis per array axis)."""
    comps = index_components(idx)
    axes = index_axes(comps, v.ndim)
    starts = [ctx.scalar(0, INDEX_DTYPE)] * v.ndim
    shape = list(v.shape)
    for c, axis in zip(comps, axes):
        if axis is None:
            continue
        n = v.shape[axis]
        if isinstance(c, DynamicSlice):
            starts[axis], shape[axis] = _start(ctx, c, n), c.size
        elif isinstance(c, (int, np.integer)):
            starts[axis], shape[axis] = ctx.scalar(int(c) % n, INDEX_DTYPE), 1
        elif isinstance(c, slice):
            lo, hi, step = c.indices(n)
            if step != 1:
                raise NotImplementedError("writing through a traced slice combined with a strided slice is "
                                          "not supported under jit_ps")
            starts[axis], shape[axis] = ctx.scalar(lo, INDEX_DTYPE), max(0, hi - lo)
        else:
            raise NotImplementedError("writing through a traced slice combined with array indices is not "
                                      "supported under jit_ps")
    return starts, shape


@lowers(dynamic_update)
def _dynamic_update(ctx, x, idx, value, accumulate):
    v = ctx.asvalue(x)
    starts, shape = _update_plan(ctx, v, idx)
    read_shape = dynamic_result_shape(v.shape, idx)
    update = ctx.reshape(ctx.broadcast_to(ctx.asvalue(value, v.dtype), read_shape), shape)
    if accumulate:
        current = ctx.dynamic_slice(v, starts, shape)
        update = ctx.binary("add" if v.dtype.kind != "b" else "or", current, update)
    return ctx.dynamic_update_slice(v, update, starts)


def dynamic_result_shape(shape, idx):
    """Shape of x[idx] for an index with DynamicSlice components."""
    probe = np.broadcast_to(np.empty((), np.int8), shape)
    return probe[static_index(idx, lambda d: slice(0, d.size))].shape
