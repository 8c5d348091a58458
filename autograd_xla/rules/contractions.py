"""Contractions: dot, matmul, tensordot, einsum, inner, outer, vdot, kron, cross.

Each becomes one `dot_general` (batch, contracting and free dimensions) around the
reshapes and transposes that put numpy's output axes in numpy's order.
"""
import functools
import warnings

import numpy as np
from numpy._core.einsumfunc import _parse_einsum_input

from ..errors import ConcreteValueRequired
from ..hlo import Value
from ..context import normalize_axis
from ..registry import lowers
from .elementwise import conj
from .shape import diagonal, moveaxis_perm


def _strong_dtype(x):
    """These functions convert every operand with np.asarray: Python scalars are not weak."""
    return x.dtype if isinstance(x, Value) else np.asarray(x).dtype


def _operands(ctx, *xs):
    """Operands in their common dtype; booleans are multiplied as int32 (see `_boolean`)."""
    dtype = np.result_type(*[_strong_dtype(x) for x in xs])
    if dtype.kind == "b":
        dtype = np.dtype(np.int32)
    return [ctx.asvalue(x, dtype) for x in xs]


def _boolean(rule):
    """numpy's boolean products are logical: any(a and b). Computed as an integer product
    (the operands are cast by `_operands`) compared with zero."""
    def wrapped(ctx, *args, **kwargs):
        out = rule(ctx, *args, **kwargs)
        arrays = [a for a in args if not isinstance(a, (str, list, tuple))] if rule is not _einsum_impl \
            else parse_einsum(list(args))[2]
        if kwargs.get("dtype") is None and arrays and np.result_type(*map(_strong_dtype, arrays)).kind == "b":
            return ctx.compare(out, ctx.zeros_like(out), "NE")
        return out
    wrapped.__name__ = rule.__name__
    return wrapped


def dot(ctx, a, b):
    if a.ndim == 0 or b.ndim == 0:
        shape = np.broadcast_shapes(a.shape, b.shape)
        return ctx.binary("multiply", ctx.broadcast_to(a, shape), ctx.broadcast_to(b, shape))
    rc = 0 if b.ndim == 1 else b.ndim - 2
    if a.shape[-1] != b.shape[rc]:
        raise ValueError(f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim {a.ndim - 1}) != "
                         f"{b.shape[rc]} (dim {rc})")
    return ctx.dot_general(a, b, ([a.ndim - 1], [rc]))


@lowers(np.dot)
@_boolean
def _dot(ctx, a, b, out=None):
    return dot(ctx, *_operands(ctx, a, b))


def matmul(ctx, a, b):
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    a2 = ctx.reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = ctx.reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
                         f"(n?,k),(k,m?)->(n?,m?) (size {b2.shape[-2]} is different from {a2.shape[-1]})")
    if max(a.ndim, b.ndim) <= 2:  # np.dot's product: a vector stays one (a matrix-vector product, blas.py)
        return dot(ctx, a, b)
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    nb = len(batch)
    a3 = ctx.broadcast_to(a2, batch + a2.shape[-2:])
    b3 = ctx.broadcast_to(b2, batch + b2.shape[-2:])
    out = ctx.dot_general(a3, b3, ([nb + 1], [nb]), (list(range(nb)), list(range(nb))))
    shape = list(out.shape)
    if b.ndim == 1:
        shape.pop(-1)
    if a.ndim == 1:
        shape.pop(-2 if b.ndim != 1 else -1)
    return ctx.reshape(out, shape)


@lowers(np.matmul)
@_boolean
def _matmul(ctx, x1, x2, out=None, **kwargs):
    if kwargs.get("axes") is not None or kwargs.get("axis") is not None:
        raise NotImplementedError("matmul axes= is not supported under jit_ps")
    dtype = kwargs.get("dtype")
    a, b = _operands(ctx, x1, x2)
    if dtype is not None:
        a, b = ctx.astype(a, dtype), ctx.astype(b, dtype)
    return matmul(ctx, a, b)


def tensordot(ctx, a, b, axes=2):
    if isinstance(axes, (int, np.integer)):
        n = int(axes)
        if n < 0:
            raise ValueError("tensordot axes must be non-negative")
        ax_a, ax_b = list(range(a.ndim - n, a.ndim)), list(range(n))
    else:
        ax_a, ax_b = axes
        ax_a = [ax_a] if isinstance(ax_a, (int, np.integer)) else list(ax_a)
        ax_b = [ax_b] if isinstance(ax_b, (int, np.integer)) else list(ax_b)
        if len(ax_a) != len(ax_b):
            raise ValueError("shape-mismatch for sum")
        ax_a = [normalize_axis(int(i), a.ndim) for i in ax_a]
        ax_b = [normalize_axis(int(i), b.ndim) for i in ax_b]
    for i, j in zip(ax_a, ax_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError("shape-mismatch for sum")
    return ctx.dot_general(a, b, (ax_a, ax_b))


@lowers(np.tensordot)
@_boolean
def _tensordot(ctx, a, b, axes=2):
    return tensordot(ctx, *_operands(ctx, a, b), axes)


@lowers(np.inner)
@_boolean
def _inner(ctx, a, b):
    x, y = _operands(ctx, a, b)
    if x.ndim == 0 or y.ndim == 0:
        return dot(ctx, x, y)
    return tensordot(ctx, x, y, ([x.ndim - 1], [y.ndim - 1]))


@lowers(np.outer)
@_boolean
def _outer(ctx, a, b, out=None):
    x, y = _operands(ctx, a, b)
    x, y = ctx.reshape(x, (x.size,)), ctx.reshape(y, (y.size,))
    shape = (x.size, y.size)
    return ctx.binary("multiply", ctx.broadcast_in_dim(x, shape, [0]), ctx.broadcast_in_dim(y, shape, [1]))


@lowers(np.vdot)
def _vdot(ctx, a, b):
    x, y = _operands(ctx, a, b)
    if x.dtype.kind == "c":
        x = conj(ctx, x)
    return ctx.dot_general(ctx.reshape(x, (x.size,)), ctx.reshape(y, (y.size,)), ([0], [0]))


@lowers(np.kron)
@_boolean
def _kron(ctx, a, b):
    x, y = _operands(ctx, a, b)
    nd = max(x.ndim, y.ndim)
    x = ctx.reshape(x, (1,) * (nd - x.ndim) + x.shape)
    y = ctx.reshape(y, (1,) * (nd - y.ndim) + y.shape)
    shape = [s for pair in zip(x.shape, y.shape) for s in pair]
    xs = ctx.broadcast_in_dim(x, shape, list(range(0, 2 * nd, 2)))
    ys = ctx.broadcast_in_dim(y, shape, list(range(1, 2 * nd, 2)))
    return ctx.reshape(ctx.binary("multiply", xs, ys), [p * q for p, q in zip(x.shape, y.shape)])


@functools.cache
def cross_of_2_vectors():
    """Whether this numpy computes cross products of 2-vectors: numpy 2.0-2.4 does (with a
    DeprecationWarning), numpy 2.5 raises a ValueError."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            np.cross(np.ones(2), np.ones(2))
        except ValueError:
            return False
    return True


@lowers(np.cross)
def _cross(ctx, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    x, y = _operands(ctx, a, b)
    if axis is not None:
        axisa = axisb = axisc = axis
    x = ctx.transpose(x, moveaxis_perm(x.ndim, axisa, -1))
    y = ctx.transpose(y, moveaxis_perm(y.ndim, axisb, -1))
    if x.shape[-1] not in (2, 3) or y.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product (dimension must be 2 or 3)")
    if 2 in (x.shape[-1], y.shape[-1]) and not cross_of_2_vectors():
        np.cross(np.zeros(x.shape[-1]), np.zeros(y.shape[-1]))  # raises numpy's own error

    def comp(v, i):
        if i >= v.shape[-1]:
            return None
        part = ctx.slice(v, [0] * (v.ndim - 1) + [i], list(v.shape[:-1]) + [i + 1])
        return ctx.reshape(part, v.shape[:-1])

    batch = np.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    xc = [comp(x, i) for i in range(3)]
    yc = [comp(y, i) for i in range(3)]
    xc = [None if c is None else ctx.broadcast_to(c, batch) for c in xc]
    yc = [None if c is None else ctx.broadcast_to(c, batch) for c in yc]

    def mul(p, q):
        return None if p is None or q is None else ctx.binary("multiply", p, q)

    def sub(p, q):
        if p is None and q is None:
            return ctx.full(batch, 0, x.dtype)
        if q is None:
            return p
        if p is None:
            return ctx.unary("negate", q)
        return ctx.binary("subtract", p, q)

    z = sub(mul(xc[0], yc[1]), mul(xc[1], yc[0]))
    if x.shape[-1] == 2 and y.shape[-1] == 2:
        return z
    comps = [sub(mul(xc[1], yc[2]), mul(xc[2], yc[1])), sub(mul(xc[2], yc[0]), mul(xc[0], yc[2])), z]
    out = ctx.concatenate([ctx.reshape(c, batch + (1,)) for c in comps], len(batch))
    return ctx.transpose(out, moveaxis_perm(out.ndim, -1, axisc))


# ----- einsum --------------------------------------------------------------------------------
def parse_einsum(operands):
    """numpy's own subscript parser, run on zero-strided stand-ins of the operands."""
    def stand_in(x):
        return np.broadcast_to(np.empty((), np.int8), x.shape) if isinstance(x, Value) else np.asarray(x)

    if isinstance(operands[0], str):
        arrays = list(operands[1:])
        parsed = _parse_einsum_input([operands[0]] + [stand_in(x) for x in arrays])
    else:
        n = len(operands) - (len(operands) % 2)  # a trailing odd item is the output sublist
        arrays = list(operands[0:n:2])
        for sublist in operands[1::2]:  # axis labels passed as traced ints: needed concretely
            for label in sublist if isinstance(sublist, (list, tuple)) else ():
                if isinstance(label, Value):
                    raise ConcreteValueRequired(label, "einsum's subscript lists")
        parsed = _parse_einsum_input([stand_in(x) if i < n and i % 2 == 0 else x for i, x in enumerate(operands)])
    in_subs, out_subs, _ = parsed
    return in_subs.split(","), out_subs, arrays


def _sum_axes(ctx, v, labels, keep):
    drop = [i for i, c in enumerate(labels) if c not in keep]
    if not drop:
        return v, labels
    return ctx.reduce_with(v, drop, "add", 0), "".join(c for c in labels if c in keep)


def _take_diagonals(ctx, v, labels):
    while True:
        repeated = next((c for c in labels if labels.count(c) > 1), None)
        if repeated is None:
            return v, labels
        i = labels.index(repeated)
        j = labels.index(repeated, i + 1)
        v = diagonal(ctx, v, 0, i, j)
        labels = "".join(c for k, c in enumerate(labels) if k not in (i, j)) + repeated


@lowers(np.einsum)
def _einsum(ctx, *operands, out=None, dtype=None, order="K", casting="safe", optimize=False):
    return _boolean(_einsum_impl)(ctx, *operands, dtype=dtype)


def _einsum_impl(ctx, *operands, dtype=None):
    subs, out_subs, values = parse_einsum(list(operands))
    dtype = np.dtype(dtype) if dtype is not None else np.result_type(*map(_strong_dtype, values))
    if dtype.kind == "b":
        dtype = np.dtype(np.int32)
    vals = [ctx.asvalue(x, dtype) for x in values]
    sizes = {}
    for v, labels in zip(vals, subs):
        for c, d in zip(labels, v.shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d != 1 and d != sizes[c]:
                raise ValueError(f"einsum: operands could not be broadcast together along label {c!r}")
    terms = []
    for v, labels in zip(vals, subs):
        v, labels = _take_diagonals(ctx, v, labels)
        v = ctx.broadcast_in_dim(v, [sizes[c] for c in labels], range(len(labels))) \
            if any(d != sizes[c] for c, d in zip(labels, v.shape)) else v
        terms.append((v, labels))
    while True:
        # sum out labels used by one term only and not in the output
        for k, (v, labels) in enumerate(terms):
            elsewhere = set(out_subs).union(*[set(l) for m, (_, l) in enumerate(terms) if m != k])
            terms[k] = _sum_axes(ctx, v, labels, elsewhere)
        if len(terms) == 1:
            break
        (a, la), (b, lb) = terms[0], terms[1]
        later = set(out_subs).union(*[set(l) for _, l in terms[2:]])
        shared = [c for c in la if c in lb]
        batch = [c for c in shared if c in later]
        contract = [c for c in shared if c not in later]
        out = ctx.dot_general(a, b, ([la.index(c) for c in contract], [lb.index(c) for c in contract]),
                              ([la.index(c) for c in batch], [lb.index(c) for c in batch]))
        labels = "".join(batch) + "".join(c for c in la if c not in shared) + "".join(c for c in lb if c not in shared)
        terms = [(out, labels)] + terms[2:]
    v, labels = terms[0]
    return ctx.transpose(v, [labels.index(c) for c in out_subs])


# ----- the numpy 2 vector/matrix gufuncs -----------------------------------------------------
def _gufunc_kwargs(name, kwargs):
    unknown = set(kwargs) - {"dtype", "casting", "order", "subok"}
    if unknown or kwargs.get("dtype") is not None:
        raise NotImplementedError(f"np.{name} keyword arguments {sorted(unknown) or ['dtype']} are not supported "
                                  "under jit_ps")


@lowers(np.vecdot)
def _vecdot(ctx, x1, x2, /, *, axis=-1, out=None, keepdims=False, **kwargs):
    """sum(conj(x1) * x2) over `axis`, with the other axes broadcast."""
    _gufunc_kwargs("vecdot", kwargs)
    a, b = _operands(ctx, x1, x2)
    a = conj(ctx, a) if a.dtype.kind == "c" else a
    shape = np.broadcast_shapes(a.shape, b.shape)
    a, b = ctx.broadcast_to(a, shape), ctx.broadcast_to(b, shape)
    ax = normalize_axis(axis, len(shape))
    out_v = ctx.reduce_with(ctx.binary("multiply", a, b), [ax], "add", 0)
    if keepdims:
        out_v = ctx.reshape(out_v, [1 if i == ax else d for i, d in enumerate(shape)])
    return out_v


@lowers(np.matvec)
def _matvec(ctx, x1, x2, /, *, out=None, **kwargs):
    _gufunc_kwargs("matvec", kwargs)
    a, b = _operands(ctx, x1, x2)
    if a.ndim < 2 or b.ndim < 1:
        raise ValueError("matvec: the matrix needs 2 dimensions and the vector 1")
    return ctx.reshape(matmul(ctx, a, ctx.reshape(b, b.shape + (1,))), np.broadcast_shapes(
        a.shape[:-2], b.shape[:-1]) + a.shape[-2:-1])


@lowers(np.vecmat)
def _vecmat(ctx, x1, x2, /, *, out=None, **kwargs):
    _gufunc_kwargs("vecmat", kwargs)
    a, b = _operands(ctx, x1, x2)
    if a.ndim < 1 or b.ndim < 2:
        raise ValueError("vecmat: the vector needs 1 dimension and the matrix 2")
    a = conj(ctx, a) if a.dtype.kind == "c" else a
    out_v = matmul(ctx, ctx.reshape(a, a.shape[:-1] + (1,) + a.shape[-1:]), b)
    return ctx.reshape(out_v, np.broadcast_shapes(a.shape[:-1], b.shape[:-2]) + b.shape[-1:])
