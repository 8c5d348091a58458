"""The LAPACK path of linear algebra, and the factorizations and solves the rules of
linalg.py share, each choosing at lowering time between LAPACK and linalg_portable.py.

On CPU, jaxlib's `lapack_*_ffi` kernels (which exist only there) are called as custom calls
(`lapack`); on every other platform, and on CPU when `FORCE_PORTABLE` is set, the same
function lowers to portable StableHLO: `stablehlo.cholesky` / `stablehlo.triangular_solve`
(which XLA expands itself) or an algorithm of linalg_portable.py. Results have the LAPACK
routine's form either way (getrf's pivots and info, geqrf's reflectors), with the matrices
of a batch where the routine failed set to NaN (`nan_unless`). The docstring of linalg.py
says which routine and which portable algorithm serve each function.
"""
import numpy as np

from .. import blas, hlo
from .linalg_common import (I32, LAPACK_PREFIX, all_true, complex_dtype, diag, geqrf_results, nan_unless,
                            q_reflectors, real_dtype, tri_mask)
from .linalg_portable import (hermitian_part, jacobi_eigh, jacobi_svd, portable_eig, portable_lu, portable_schur,
                              xla_householder_product, xla_qr)

#: Tests set this to lower every rule the way non-CPU platforms do (no LAPACK).
FORCE_PORTABLE = False


# ----- LAPACK custom calls -------------------------------------------------------------------
def use_lapack(ctx):
    """Whether `ctx` lowers to LAPACK (CPU, FORCE_PORTABLE unset, read at lowering time)."""
    return ctx.platform == "cpu" and not FORCE_PORTABLE


def _require_cpu(ctx, what):
    if ctx.platform != "cpu":  # every caller checks use_lapack first: reaching this is a bug
        raise NotImplementedError(f"{what} is a LAPACK kernel (jaxlib's lapack_*_ffi), which exists only on CPU; "
                                  f"platform {ctx.platform!r} needs the portable lowering")


def _column_major(ndim):
    return (ndim - 2, ndim - 1) + tuple(range(ndim - 3, -1, -1))


def lapack(ctx, routine, operands, results, **attrs):
    """Call jaxlib's `lapack_<s|d|c|z><routine>_ffi`. Matrices (operands and results of the
    operands' largest rank) are column-major, as LAPACK wants; leading dimensions are a
    batch the kernel loops over. Attributes are one-character LAPACK flags."""
    _require_cpu(ctx, f"LAPACK {routine}")
    nd = max(v.ndim for v in operands)
    name = f"lapack_{LAPACK_PREFIX[hlo.canonical_dtype(operands[0].dtype)]}{routine}_ffi"
    # A trace builds the rule for its types alone (shapes_only) and a trace run by numpy
    # never lowers: the kernels are registered (jaxlib imported, 19 ms) for a program lowered.
    target = name if ctx.module.shapes_only else \
        blas.lapack_target(name, lapack_work([v.shape for v in operands if v.ndim == nd]))

    def layout(ndim):
        return _column_major(ndim) if ndim == nd else tuple(range(ndim - 1, -1, -1))

    config = "{" + ", ".join(f"{k} = {ord(v)} : ui8" for k, v in sorted(attrs.items())) + "}"
    return ctx.custom_call(target, list(operands), [(tuple(s), np.dtype(d)) for s, d in results],
                           backend_config=config,
                           layouts=([layout(v.ndim) for v in operands], [layout(len(s)) for s, _ in results]))


def lapack_work(shapes):
    """The multiply-adds of a LAPACK routine on one matrix of a batch (the kernels loop over
    the batch, BLAS's threads share one matrix's work), from its operands' matrix shapes: a
    factorization's m x n matrix about m n min(m, n), a solve's n x n matrix and n x k right
    sides n^2 k."""
    (m, n), k = shapes[0][-2:], min(shapes[0][-2:]) if len(shapes) == 1 else shapes[1][-1]
    return m * n * k


def _info_ok(ctx, info):
    return ctx.compare(info, ctx.zeros_like(info), "EQ")


# ----- factorizations and solves shared by several rules ---------------------------------------
def cholesky_factor(ctx, a, lower):
    """(factor, ok): the factor in the `lower`/upper triangle, a's own entries in the other."""
    batch = a.shape[:-2]
    if use_lapack(ctx):
        f, info = lapack(ctx, "potrf", [a], [(a.shape, a.dtype), (batch, I32)], uplo="L" if lower else "U")
        return f, _info_ok(ctx, info)
    f = ctx.op1("stablehlo.cholesky", [a], a.shape, a.dtype, {"lower": "true" if lower else "false"})
    f = ctx.select(tri_mask(ctx, a.shape, lower), f, a)
    d = ctx.real(diag(ctx, f)) if a.dtype.kind == "c" else diag(ctx, f)
    ok = all_true(ctx, ctx.compare(d, ctx.zeros_like(d), "GT"), [d.ndim - 1])  # NaN compares false
    return f, ok


_TRANSPOSE = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}


def triangular_solve(ctx, a, b, lower, trans="N", unit=False):
    """x with op(a) x = b; a (..., n, n) triangular, b (..., n, k), equal batch dims."""
    if a.dtype.kind != "c" and trans == "C":
        trans = "T"
    if use_lapack(ctx):
        return lapack(ctx, "trsm", [a, b], [(b.shape, b.dtype)], side="L", uplo="L" if lower else "U",
                      trans_x=trans, diag="U" if unit else "N")[0]
    attrs = {"left_side": "true", "lower": "true" if lower else "false",
             "unit_diagonal": "true" if unit else "false",
             "transpose_a": f"#stablehlo<transpose {_TRANSPOSE[trans]}>"}
    return ctx.op1("stablehlo.triangular_solve", [a, b], b.shape, b.dtype, attrs)


def lu_factor(ctx, a, permutation=True):
    """(lu, 1-based int32 pivots, perm, info) of LAPACK getrf for square a; perm (None
    without `permutation`) is the row permutation with a[perm] = L U."""
    if not use_lapack(ctx):
        return portable_lu(ctx, a)
    batch = a.shape[:-2]
    k = min(a.shape[-2:])
    lu, piv, info = lapack(ctx, "getrf", [a], [(a.shape, a.dtype), (batch + (k,), I32), (batch, I32)])
    return lu, piv, pivots_to_permutation(ctx, piv, a.shape[-1]) if permutation else None, info


def pivots_to_permutation(ctx, piv, n):
    """LAPACK's row interchanges (row i swapped with row piv[i], in order) as the
    permutation `perm` with A[perm] = L U, built in a loop over the k interchanges."""
    batch = piv.shape[:-1]
    nb, k = len(batch), piv.shape[-1]
    shape = batch + (n,)
    piv0 = ctx.binary("subtract", piv, ctx.full(piv.shape, 1, I32))

    def cond(b, i, perm):
        return b.compare(i, b.scalar(k, I32), "LT")

    def body(b, i, perm):
        zero = b.scalar(0, I32)
        p = b.dynamic_slice(piv0, [zero] * nb + [i], batch + (1,))
        perm_i = b.dynamic_slice(perm, [zero] * nb + [i], batch + (1,))
        idx = b.iota(shape, I32, nb)
        at_p = b.compare(idx, b.broadcast_in_dim(p, shape, range(nb + 1)), "EQ")
        perm_p = b.reduce_with(b.select(at_p, perm, b.zeros_like(perm)), [nb], "add", 0)
        at_i = b.compare(idx, b.broadcast_in_dim(i, shape, []), "EQ")
        new = b.select(at_i, b.broadcast_in_dim(perm_p, shape, range(nb)),
                       b.select(at_p, b.broadcast_in_dim(perm_i, shape, range(nb + 1)), perm))
        return b.binary("add", i, b.scalar(1, I32)), new

    _, perm = ctx.while_loop([ctx.scalar(0, I32), ctx.iota(shape, I32, nb)], cond, body)
    return perm


def _take_rows(ctx, b, perm):
    """b[..., perm[..., i], :] for every i: one gather over the flattened batch."""
    batch, (n, k) = b.shape[:-2], b.shape[-2:]
    count = int(np.prod(batch, dtype=np.int64))
    flat = ctx.reshape(b, (count * n, k))
    offsets = ctx.binary("multiply", ctx.iota((count, n), I32, 0), ctx.full((count, n), n, I32))
    index = ctx.binary("add", offsets, ctx.reshape(perm, (count, n)))
    rows = ctx.gather(flat, ctx.reshape(index, (count * n, 1)), [1], [0], [0], 1, [1, k], (count * n, k))
    return ctx.reshape(rows, b.shape)


def lu_solve(ctx, a, b):
    """x with a x = b (a (..., n, n), b (..., n, k), equal batch dims), NaN where a is singular."""
    lu, _, perm, info = lu_factor(ctx, a)
    y = triangular_solve(ctx, lu, _take_rows(ctx, b, perm), lower=True, unit=True)
    x = triangular_solve(ctx, lu, y, lower=False)
    return nan_unless(ctx, _info_ok(ctx, info), x)


def inverse(ctx, a):
    lu, _, perm, info = lu_factor(ctx, a)
    onehot = ctx.compare(ctx.broadcast_in_dim(perm, a.shape, range(a.ndim - 1)),
                         ctx.iota(a.shape, I32, a.ndim - 1), "EQ")  # rows of the identity, permuted
    b = ctx.convert(ctx.convert(onehot, real_dtype(a.dtype)), a.dtype)
    y = triangular_solve(ctx, lu, b, lower=True, unit=True)
    x = triangular_solve(ctx, lu, y, lower=False)
    return nan_unless(ctx, _info_ok(ctx, info), x)


def svd_parts(ctx, a, full_matrices, compute_uv):
    """(s, u, vh, ok) of LAPACK gesdd; u and vh are None without compute_uv."""
    if not use_lapack(ctx):
        s, u, vh = jacobi_svd(ctx, a, full_matrices, compute_uv)
        return s, u, vh, ctx.full(a.shape[:-2], True, np.bool_)
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    mode = ("A" if full_matrices else "S") if compute_uv else "N"
    ucols, vrows = (m, n) if (compute_uv and full_matrices) else (k, k)
    _, s, u, vh, info = lapack(ctx, "gesdd", [a], [(a.shape, a.dtype), (batch + (k,), real_dtype(a.dtype)),
                                                   (batch + (m, ucols), a.dtype), (batch + (vrows, n), a.dtype),
                                                   (batch, I32)], mode=mode)
    ok = _info_ok(ctx, info)
    if not compute_uv:
        return nan_unless(ctx, ok, s), None, None, ok
    s, u, vh = nan_unless(ctx, ok, s, u, vh)
    return s, u, vh, ok


def eigh_parts(ctx, a, lower, vectors=True):
    if not use_lapack(ctx):
        return jacobi_eigh(ctx, hermitian_part(ctx, a, lower), vectors)
    batch = a.shape[:-2]
    routine = "heevd" if a.dtype.kind == "c" else "syevd"
    v, w, info = lapack(ctx, routine, [a], [(a.shape, a.dtype), (a.shape[:-1], real_dtype(a.dtype)), (batch, I32)],
                        mode="V" if vectors else "N", uplo="L" if lower else "U")
    w, v = nan_unless(ctx, _info_ok(ctx, info), w, v)
    return w, v


def eig_parts(ctx, a, vectors=True):
    if not use_lapack(ctx):
        return portable_eig(ctx, a, vectors)
    batch = a.shape[:-2]
    cdt = complex_dtype(a.dtype)
    flags = dict(compute_left="N", compute_right="V" if vectors else "N")
    if a.dtype.kind == "c":
        w, _, vr, info = lapack(ctx, "geev", [a], [(a.shape[:-1], a.dtype), (a.shape, cdt), (a.shape, cdt),
                                                   (batch, I32)], **flags)
    else:
        wr, wi, _, vr, info = lapack(ctx, "geev", [a], [(a.shape[:-1], a.dtype), (a.shape[:-1], a.dtype),
                                                        (a.shape, cdt), (a.shape, cdt), (batch, I32)], **flags)
        w = ctx.complex(wr, wi)
    w, vr = nan_unless(ctx, _info_ok(ctx, info), w, vr)
    return w, vr


def schur_complex(ctx, a):
    """(T, Z) with a = Z T Z^H, T upper triangular (complex Schur form, LAPACK gees)."""
    if not use_lapack(ctx):
        t, z, ok = portable_schur(ctx, a)
        return nan_unless(ctx, ok, t, z)
    a = ctx.astype(a, complex_dtype(a.dtype))
    batch = a.shape[:-2]
    t, z, _, _, info = lapack(ctx, "gees", [a], [(a.shape, a.dtype), (a.shape, a.dtype), (a.shape[:-1], a.dtype),
                                                 (batch, I32), (batch, I32)], mode="V", sort="N")
    return nan_unless(ctx, _info_ok(ctx, info), t, z)


def real_eigenvalues(ctx, a):
    """(wr, wi) of a real matrix from its real Schur form: wi is exactly 0 for real ones."""
    batch = a.shape[:-2]
    _, _, wr, wi, _, _ = lapack(ctx, "gees", [a], [(a.shape, a.dtype), (a.shape, a.dtype), (a.shape[:-1], a.dtype),
                                                   (a.shape[:-1], a.dtype), (batch, I32), (batch, I32)],
                                mode="N", sort="N")
    return wr, wi


def householder_qr(ctx, a):
    """(reflectors and R, taus) as LAPACK geqrf stores them. Off CPU: linalg_portable.xla_qr,
    with the same conventions (same signs)."""
    if use_lapack(ctx):
        return lapack(ctx, "geqrf", [a], geqrf_results(a))
    return xla_qr(ctx, a)


def householder_product(ctx, reflectors, taus):
    """Q = H_1 ... H_k from geqrf's reflectors (orgqr/ungqr). Off CPU:
    linalg_portable.xla_householder_product."""
    if use_lapack(ctx):
        routine = "ungqr" if reflectors.dtype.kind == "c" else "orgqr"
        return lapack(ctx, routine, [reflectors, taus], [(reflectors.shape, reflectors.dtype)])[0]
    return xla_householder_product(ctx, reflectors, taus)


def q_factor(ctx, raw, taus, cols):
    """The first `cols` columns of Q (k = min(m, n) <= cols <= m) from geqrf's results for an
    m x n matrix (linalg_common.q_reflectors)."""
    return householder_product(ctx, q_reflectors(ctx, raw, cols), taus)
