"""Helpers shared by the linear algebra modules (linalg.py, lapack.py, linalg_portable.py):
dtypes, batched matrix helpers (every matrix operand is (batch..., rows, cols)), masks,
NaN for the matrices of a batch that failed, and a counted `stablehlo.while`.
"""
import numpy as np

from ..hlo import Value
from .elementwise import conj
from .shape import diagonal

LAPACK_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
                  np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
I32 = np.dtype(np.int32)


# ----- dtypes --------------------------------------------------------------------------------
def real_dtype(dtype):
    return np.empty(0, dtype).real.dtype


def complex_dtype(dtype):
    return np.result_type(dtype, np.complex64)


def linalg_dtype(*dtypes):
    """The dtype LAPACK computes in: numpy's common type, integers and bools as float64."""
    dt = np.result_type(*dtypes)
    if dt.kind in "biu":
        return np.dtype(np.float64)
    if dt not in LAPACK_PREFIX:
        raise TypeError(f"array type {dt} is unsupported in linalg")
    return dt


# ----- small matrix helpers ------------------------------------------------------------------
def matrix_transpose(ctx, x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.transpose(x, perm)


def adjoint(ctx, x):
    return conj(ctx, matrix_transpose(ctx, x))


def mm(ctx, a, b):
    """Batched matrix product; a and b have the same batch dimensions."""
    nb = a.ndim - 2
    return ctx.dot_general(a, b, ([nb + 1], [nb]), (list(range(nb)), list(range(nb))))


def eye(ctx, shape, dtype):
    nd = len(shape)
    same = ctx.compare(ctx.iota(shape, I32, nd - 2), ctx.iota(shape, I32, nd - 1), "EQ")
    return ctx.convert(same, dtype) if np.dtype(dtype).kind != "c" else \
        ctx.convert(ctx.convert(same, real_dtype(dtype)), dtype)


def diag(ctx, x):
    return diagonal(ctx, x, 0, x.ndim - 2, x.ndim - 1)


def tri_mask(ctx, shape, lower, k=0):
    """Boolean mask of the lower (col <= row + k) or upper (col >= row + k) triangle."""
    nd = len(shape)
    rows = ctx.iota(shape, I32, nd - 2)
    cols = ctx.iota(shape, I32, nd - 1)
    if k:
        rows = ctx.binary("add", rows, ctx.full(shape, k, I32))
    return ctx.compare(cols, rows, "LE" if lower else "GE")


def triangle(ctx, x, lower):
    return ctx.select(tri_mask(ctx, x.shape, lower), x, ctx.zeros_like(x))


def _bcast_batch(ctx, ok, x):
    return ctx.broadcast_in_dim(ok, x.shape, list(range(ok.ndim)))


def nan_unless(ctx, ok, *xs):
    """Each x (batch + core) with NaN in the matrices whose `ok` (batch) is false."""
    outs = tuple(ctx.select(_bcast_batch(ctx, ok, x), x, ctx.full(x.shape, np.nan, x.dtype)) for x in xs)
    return outs if len(outs) > 1 else outs[0]


def all_true(ctx, pred, axes):
    return ctx.reduce_with(pred, axes, "and", True)


def counted_loop(ctx, count, init, step):
    """for i in range(count): carry = step(builder, i, *carry); one stablehlo.while. Returns
    the final carry (a list)."""
    def cond(b, i, *carry):
        return b.compare(i, b.scalar(count, I32), "LT")

    def body(b, i, *carry):
        out = step(b, i, *carry)
        return [b.binary("add", i, b.scalar(1, I32))] + ([out] if isinstance(out, Value) else list(out))

    return ctx.while_loop([ctx.scalar(0, I32)] + list(init), cond, body)[1:]


def abs_value(ctx, x):
    return ctx.unary("abs", x, real_dtype(x.dtype)) if x.dtype.kind in "fc" else x


def abs_squared(ctx, x):
    if x.dtype.kind == "c":
        re, im = ctx.real(x), ctx.imag(x)
        return ctx.binary("add", ctx.binary("multiply", re, re), ctx.binary("multiply", im, im))
    return ctx.binary("multiply", x, x)


def geqrf_results(a):
    """(shape, dtype) of geqrf's results for a (..., m, n): R with the reflectors below it, and the taus."""
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    return [(a.shape, a.dtype), (batch + (min(m, n),), a.dtype)]


def q_reflectors(ctx, raw, cols):
    """The reflectors that make the first `cols` columns of Q (k = min(m, n) <= cols <= m) from
    geqrf's results for an m x n matrix: columns past n come from reflectors padded with zero
    columns."""
    batch, (m, n) = raw.shape[:-2], raw.shape[-2:]
    nb = len(batch)
    if cols <= n:
        return ctx.slice(raw, [0] * (nb + 2), list(batch) + [m, cols])
    return ctx.pad(raw, ctx.scalar(0, raw.dtype), [0] * (nb + 2), [0] * (nb + 1) + [cols - n])
