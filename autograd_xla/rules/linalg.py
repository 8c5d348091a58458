"""Linear algebra: numpy.linalg and scipy.linalg, as autograd wraps and differentiates them.

Two lowerings of every primitive. On CPU, LAPACK (jaxlib's `lapack_*_ffi` kernels, which
exist only there): numpy and scipy call the same routines, so values agree with them to
rounding (bit for bit in most of the tests). On every other platform (GPU, TPU; on CPU too
when `FORCE_PORTABLE` is set, which is how the tests run it), portable StableHLO only, no
vendor custom call, so one module compiles wherever XLA runs. Accuracies quoted are
measured in float64 against numpy (relative to the largest entry), on random and on
well-conditioned test matrices; float32 reaches the same multiples of its own eps.

* cholesky, cho_factor, scipy cholesky: potrf; elsewhere `stablehlo.cholesky`.
* solve_triangular, cho_solve and the triangular halves of every LU solve: trsm; elsewhere
  `stablehlo.triangular_solve`. (XLA expands or maps both of these itself.)
* det, slogdet, inv, solve, matrix_power (n < 0), solve_banded: getrf, then the row
  permutation and two triangular solves (what getrs does). Banded matrices are expanded to
  dense ones: same pivoting as gbsv/gtsv, O(n^3) not O(n l u). Elsewhere `portable_lu`:
  Gaussian elimination with partial pivoting, one column per iteration of a while loop
  (pivot = first largest |re| + |im|, as LAPACK's i?amax, so the same pivots barring ties
  and rounding); ~1e-16, singular matrices detected exactly as getrf's info.
* eigh, eigvalsh: syevd / heevd; elsewhere `jacobi_eigh`, the cyclic two-sided Jacobi
  method (Brent and Luk's parallel ordering: n/2 rotations at once), run until the
  off-diagonal part is below eps * ||A||_F; eigenvalues ~1e-15, eigenvectors ~1e-15 to
  1e-14 (n = 5 to 20; their conditioning allows no better). Not XLA's own `Eigh` custom call: its
  EighExpander pass (xla/hlo/transforms/expanders/eigh_expander.cc) is run by the CPU and
  the GPU compilers (gpu_compiler.cc adds QrExpander and EighExpander, with a TODO to use
  cuSOLVER instead) and by TPU's, so it is portable, but its 2x2 step leaves alone any
  off-diagonal entry below 0.1 * float32 eps * min(|a_pp|, |a_qq|), in float64 too:
  measured with jaxlib 0.10.2, its float64 eigenvectors are accurate to ~1e-8 only.
* svd, svdvals, pinv, matrix norms 2 / -2 / 'nuc': gesdd; elsewhere `jacobi_svd`, one-sided
  (Hestenes) Jacobi on the columns of A (of A^H when A is wide) with the same ordering, until
  every pair of columns is orthogonal to sqrt(m) eps relative; V accumulates the rotations,
  U is the Householder Q of the normalised columns (below), which also completes it where
  singular values are zero or for full_matrices. Singular values ~1e-15, vectors ~1e-14.
* qr: geqrf + orgqr / ungqr; elsewhere the `Qr` and `ProductOfElementaryHouseholderReflectors`
  custom calls, which XLA's QrExpander pass (same compilers as above) turns into blocked
  Householder HLO before code generation. It keeps geqrf's conventions: Q and R agree with
  numpy's to ~1e-15, signs included.
* eig, eigvals: geev; elsewhere the complex Schur form (below), eigenvalues its diagonal,
  eigenvectors by back substitution (as trevc), normalised as geev does; ~1e-15. Their
  order differs from LAPACK's (numpy does not specify one), and real matrices get their
  real eigenvalues with rounding-size imaginary parts and conjugate pairs only to rounding
  (LAPACK's real Schur form makes those exact).
* sqrtm, solve_sylvester: complex Schur form (gees), then the triangular recurrences
  (Bjorck-Hammarling square root; Bartels-Stewart) one column per iteration of a
  `stablehlo.while`, each column one triangular solve. Elsewhere the same recurrences on
  `portable_schur`: Householder reduction to Hessenberg form, then the single-shift QR
  algorithm with Wilkinson shifts, exceptional shifts and deflation as LAPACK's zlahqr,
  each QR step a bulge-chasing loop of Givens rotations; ~1e-15.

The portable loops run over the whole batch at once (a loop runs until its slowest matrix
is done), on matrices scaled by their largest entry where squares could under- or
overflow. Their tolerances and iteration limits follow the precision really emitted
(`hlo.canonical_dtype`: float32 under x64=False). The LU, Jacobi, Hessenberg, QR-step and
eigenvector loops multiply elementwise and reduce rather than call dots (which some GPUs
run in TF32 for float32); the remaining matrix products (z x for eigenvectors, and those
of sqrtm and solve_sylvester) are dots. The loops are sequential
in n: LU takes n steps, Jacobi ~8 sweeps of n - 1 rounds, the Schur form about 2-3 QR
steps per eigenvalue, each of up to n Givens steps. So they suit small and moderate
matrices (each step is O(n^2) or O(n) work over the batch); compiling one such loop takes
~0.5 s on CPU.

Where numpy/scipy raise LinAlgError on the data (a matrix that is not positive definite,
a singular matrix to inv/solve/solve_triangular/solve_banded, an eigen or SVD solver that
did not converge, NaN input), compiled code cannot raise: the affected matrices of a batch
come out as NaN, as jax does. det and slogdet of singular matrices are exact like numpy's
(0 and (0, -inf)).

Where numpy/scipy choose the result dtype from the data, we cannot:
* eig / eigvals always return complex results (numpy returns real arrays when every
  eigenvalue happens to be real).
* sqrtm of a real matrix is real; where scipy would switch to a complex result (a real
  negative eigenvalue) the compiled root is NaN, and a guard runs such a call as plain
  autograd (inside a loop body, which has no guards, it stays NaN: pass a complex matrix). (The
  portable path, which has no real Schur form, tells this case by the root's imaginary
  part exceeding sqrt(eps) times its largest entry.)

scipy.linalg.cho_factor and sqrtm are trace rules (compositions/linalg.py) that bind the
primitives `cho_factor_matrix` and `sqrtm_matrix` lowered here; the patch of
autograd.numpy.linalg that eigh's VJP needs is there too.
"""
import functools
import operator
import warnings

import numpy as np
import scipy.linalg
from numpy.linalg import LinAlgError

from .. import hlo
from ..hlo import Value
from ..registry import lowers
from .shape import diagonal, embed_diagonal

_LAPACK_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
                  np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_I32 = np.dtype(np.int32)

#: Tests set this to lower every rule the way non-CPU platforms do (no LAPACK).
FORCE_PORTABLE = False


# ----- dtypes and operands -------------------------------------------------------------------
def _real(dtype):
    return np.empty(0, dtype).real.dtype


def _complex(dtype):
    return np.result_type(dtype, np.complex64)


def linalg_dtype(*dtypes):
    """The dtype LAPACK computes in: numpy's common type, integers and bools as float64."""
    dt = np.result_type(*dtypes)
    if dt.kind in "biu":
        return np.dtype(np.float64)
    if dt not in _LAPACK_PREFIX:
        raise TypeError(f"array type {dt} is unsupported in linalg")
    return dt


def _dtype_of(x):
    return x.dtype if isinstance(x, Value) else np.asarray(x).dtype


def _square(ctx, a, dtype=None):
    v = ctx.asvalue(a)
    if v.ndim < 2:
        raise LinAlgError(f"{v.ndim}-dimensional array given. Array must be at least two-dimensional")
    if v.shape[-1] != v.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    return ctx.astype(v, dtype or linalg_dtype(v.dtype))


def numpy_if_empty(fn):
    """A rule decorator: with a zero-size array among the operands the result does not
    depend on any data, so numpy/scipy compute it (and raise its errors) at trace time."""
    def deco(rule):
        @functools.wraps(rule)
        def wrapped(ctx, *args, **kwargs):
            values = [x for x in _leaves((args, kwargs)) if isinstance(x, Value)]
            if any(v.size == 0 for v in values):
                stand_in_args, stand_in_kwargs = _map_values((args, kwargs), _stand_in)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = fn(*stand_in_args, **stand_in_kwargs)
                return _map_arrays(out, lambda x: ctx.const(np.asarray(x)))
            return rule(ctx, *args, **kwargs)
        return wrapped
    return deco


def _stand_in(v):
    """Data for an operand of a result that depends on no data: identities for square
    matrices (nonsingular, positive definite), ones otherwise."""
    if v.ndim >= 2 and v.shape[-1] == v.shape[-2]:
        return np.broadcast_to(np.eye(v.shape[-1], dtype=v.dtype), v.shape).copy()
    return np.ones(v.shape, v.dtype)


def _leaves(obj):
    if isinstance(obj, (tuple, list)):
        return [y for x in obj for y in _leaves(x)]
    if isinstance(obj, dict):
        return [y for x in obj.values() for y in _leaves(x)]
    return [obj]


def _map_values(obj, f):
    if isinstance(obj, Value):
        return f(obj)
    if isinstance(obj, dict):
        return {k: _map_values(x, f) for k, x in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_map_values(x, f) for x in obj)
    return obj


def _map_arrays(out, f):
    if isinstance(out, tuple) and hasattr(out, "_fields"):
        return type(out)(*[_map_arrays(x, f) for x in out])
    if isinstance(out, (tuple, list)):
        return type(out)(_map_arrays(x, f) for x in out)
    return f(out)


# ----- small matrix helpers ------------------------------------------------------------------
def _conj(ctx, x):
    if x.dtype.kind != "c":
        return x
    return ctx.complex(ctx.real(x), ctx.unary("negate", ctx.imag(x), _real(x.dtype)))


def _mT(ctx, x):
    perm = list(range(x.ndim))
    perm[-1], perm[-2] = perm[-2], perm[-1]
    return ctx.transpose(x, perm)


def _adjoint(ctx, x):
    return _conj(ctx, _mT(ctx, x))


def _mm(ctx, a, b):
    """Batched matrix product; a and b have the same batch dimensions."""
    nb = a.ndim - 2
    return ctx.dot_general(a, b, ([nb + 1], [nb]), (list(range(nb)), list(range(nb))))


def _eye(ctx, shape, dtype):
    nd = len(shape)
    same = ctx.compare(ctx.iota(shape, _I32, nd - 2), ctx.iota(shape, _I32, nd - 1), "EQ")
    return ctx.convert(same, dtype) if np.dtype(dtype).kind != "c" else \
        ctx.convert(ctx.convert(same, _real(dtype)), dtype)


def _diag(ctx, x):
    return diagonal(ctx, x, 0, x.ndim - 2, x.ndim - 1)


def _tri_mask(ctx, shape, lower, k=0):
    """Boolean mask of the lower (col <= row + k) or upper (col >= row + k) triangle."""
    nd = len(shape)
    rows = ctx.iota(shape, _I32, nd - 2)
    cols = ctx.iota(shape, _I32, nd - 1)
    if k:
        rows = ctx.binary("add", rows, ctx.full(shape, k, _I32))
    return ctx.compare(cols, rows, "LE" if lower else "GE")


def _triangle(ctx, x, lower):
    return ctx.select(_tri_mask(ctx, x.shape, lower), x, ctx.zeros_like(x))


def _bcast_batch(ctx, ok, x):
    return ctx.broadcast_in_dim(ok, x.shape, list(range(ok.ndim)))


def nan_unless(ctx, ok, *xs):
    """Each x (batch + core) with NaN in the matrices whose `ok` (batch) is false."""
    outs = tuple(ctx.select(_bcast_batch(ctx, ok, x), x, ctx.full(x.shape, np.nan, x.dtype)) for x in xs)
    return outs if len(outs) > 1 else outs[0]


def _all(ctx, pred, axes):
    return ctx.reduce_with(pred, axes, "and", True)


def _info_ok(ctx, info):
    return ctx.compare(info, ctx.zeros_like(info), "EQ")


# ----- LAPACK custom calls -------------------------------------------------------------------
def _use_lapack(ctx):
    return ctx.platform == "cpu" and not FORCE_PORTABLE


def _require_cpu(ctx, what):
    if ctx.platform != "cpu":  # every caller checks _use_lapack first: reaching this is a bug
        raise NotImplementedError(f"{what} is a LAPACK kernel (jaxlib's lapack_*_ffi), which exists only on CPU; "
                                  f"platform {ctx.platform!r} needs the portable lowering")


def _column_major(ndim):
    return (ndim - 2, ndim - 1) + tuple(range(ndim - 3, -1, -1))


def lapack(ctx, routine, operands, results, **attrs):
    """Call jaxlib's `lapack_<s|d|c|z><routine>_ffi`. Matrices (operands and results of the
    operands' largest rank) are column-major, as LAPACK wants; leading dimensions are a
    batch the kernel loops over. Attributes are one-character LAPACK flags."""
    _require_cpu(ctx, f"LAPACK {routine}")
    target = f"lapack_{_LAPACK_PREFIX[hlo.canonical_dtype(operands[0].dtype)]}{routine}_ffi"
    nd = max(v.ndim for v in operands)

    def layout(ndim):
        return _column_major(ndim) if ndim == nd else tuple(range(ndim - 1, -1, -1))

    config = "{" + ", ".join(f"{k} = {ord(v)} : ui8" for k, v in sorted(attrs.items())) + "}"
    return ctx.custom_call(target, list(operands), [(tuple(s), np.dtype(d)) for s, d in results],
                           backend_config=config,
                           layouts=([layout(v.ndim) for v in operands], [layout(len(s)) for s, _ in results]))


# ----- factorizations and solves shared by several rules ---------------------------------------
def cholesky_factor(ctx, a, lower):
    """(factor, ok): the factor in the `lower`/upper triangle, a's own entries in the other."""
    batch = a.shape[:-2]
    if _use_lapack(ctx):
        f, info = lapack(ctx, "potrf", [a], [(a.shape, a.dtype), (batch, _I32)], uplo="L" if lower else "U")
        return f, _info_ok(ctx, info)
    f = ctx.op1("stablehlo.cholesky", [a], a.shape, a.dtype, {"lower": "true" if lower else "false"})
    f = ctx.select(_tri_mask(ctx, a.shape, lower), f, a)
    d = ctx.real(_diag(ctx, f)) if a.dtype.kind == "c" else _diag(ctx, f)
    ok = _all(ctx, ctx.compare(d, ctx.zeros_like(d), "GT"), [d.ndim - 1])  # NaN compares false
    return f, ok


_TRANSPOSE = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE", "C": "ADJOINT"}


def triangular_solve(ctx, a, b, lower, trans="N", unit=False):
    """x with op(a) x = b; a (..., n, n) triangular, b (..., n, k), equal batch dims."""
    if a.dtype.kind != "c" and trans == "C":
        trans = "T"
    if _use_lapack(ctx):
        return lapack(ctx, "trsm", [a, b], [(b.shape, b.dtype)], side="L", uplo="L" if lower else "U",
                      trans_x=trans, diag="U" if unit else "N")[0]
    attrs = {"left_side": "true", "lower": "true" if lower else "false",
             "unit_diagonal": "true" if unit else "false",
             "transpose_a": f"#stablehlo<transpose {_TRANSPOSE[trans]}>"}
    return ctx.op1("stablehlo.triangular_solve", [a, b], b.shape, b.dtype, attrs)


def lu_factor(ctx, a, permutation=True):
    """(lu, 1-based int32 pivots, perm, info) of LAPACK getrf for square a; perm (None
    without `permutation`) is the row permutation with a[perm] = L U."""
    if not _use_lapack(ctx):
        return portable_lu(ctx, a)
    batch = a.shape[:-2]
    k = min(a.shape[-2:])
    lu, piv, info = lapack(ctx, "getrf", [a], [(a.shape, a.dtype), (batch + (k,), _I32), (batch, _I32)])
    return lu, piv, pivots_to_permutation(ctx, piv, a.shape[-1]) if permutation else None, info


def pivots_to_permutation(ctx, piv, n):
    """LAPACK's row interchanges (row i swapped with row piv[i], in order) as the
    permutation `perm` with A[perm] = L U, built in a loop over the k interchanges."""
    batch = piv.shape[:-1]
    nb, k = len(batch), piv.shape[-1]
    shape = batch + (n,)
    piv0 = ctx.binary("subtract", piv, ctx.full(piv.shape, 1, _I32))

    def cond(b, i, perm):
        return b.compare(i, b.scalar(k, _I32), "LT")

    def body(b, i, perm):
        zero = b.scalar(0, _I32)
        p = b.dynamic_slice(piv0, [zero] * nb + [i], batch + (1,))
        perm_i = b.dynamic_slice(perm, [zero] * nb + [i], batch + (1,))
        idx = b.iota(shape, _I32, nb)
        at_p = b.compare(idx, b.broadcast_in_dim(p, shape, range(nb + 1)), "EQ")
        perm_p = b.reduce_with(b.select(at_p, perm, b.zeros_like(perm)), [nb], "add", 0)
        at_i = b.compare(idx, b.broadcast_in_dim(i, shape, []), "EQ")
        new = b.select(at_i, b.broadcast_in_dim(perm_p, shape, range(nb)),
                       b.select(at_p, b.broadcast_in_dim(perm_i, shape, range(nb + 1)), perm))
        return b.binary("add", i, b.scalar(1, _I32)), new

    _, perm = ctx.while_loop([ctx.scalar(0, _I32), ctx.iota(shape, _I32, nb)], cond, body)
    return perm


def _take_rows(ctx, b, perm):
    """b[..., perm[..., i], :] for every i: one gather over the flattened batch."""
    batch, (n, k) = b.shape[:-2], b.shape[-2:]
    count = int(np.prod(batch, dtype=np.int64))
    flat = ctx.reshape(b, (count * n, k))
    offsets = ctx.binary("multiply", ctx.iota((count, n), _I32, 0), ctx.full((count, n), n, _I32))
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
                         ctx.iota(a.shape, _I32, a.ndim - 1), "EQ")  # rows of the identity, permuted
    b = ctx.convert(ctx.convert(onehot, _real(a.dtype)), a.dtype)
    y = triangular_solve(ctx, lu, b, lower=True, unit=True)
    x = triangular_solve(ctx, lu, y, lower=False)
    return nan_unless(ctx, _info_ok(ctx, info), x)


def svd_parts(ctx, a, full_matrices, compute_uv):
    """(s, u, vh, ok) of LAPACK gesdd; u and vh are None without compute_uv."""
    if not _use_lapack(ctx):
        s, u, vh = jacobi_svd(ctx, a, full_matrices, compute_uv)
        return s, u, vh, ctx.full(a.shape[:-2], True, np.bool_)
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    k = min(m, n)
    mode = ("A" if full_matrices else "S") if compute_uv else "N"
    ucols, vrows = (m, n) if (compute_uv and full_matrices) else (k, k)
    _, s, u, vh, info = lapack(ctx, "gesdd", [a], [(a.shape, a.dtype), (batch + (k,), _real(a.dtype)),
                                                   (batch + (m, ucols), a.dtype), (batch + (vrows, n), a.dtype),
                                                   (batch, _I32)], mode=mode)
    ok = _info_ok(ctx, info)
    if not compute_uv:
        return nan_unless(ctx, ok, s), None, None, ok
    s, u, vh = nan_unless(ctx, ok, s, u, vh)
    return s, u, vh, ok


def eigh_parts(ctx, a, lower, vectors=True):
    if not _use_lapack(ctx):
        return jacobi_eigh(ctx, _hermitian_part(ctx, a, lower), vectors)
    batch = a.shape[:-2]
    routine = "heevd" if a.dtype.kind == "c" else "syevd"
    v, w, info = lapack(ctx, routine, [a], [(a.shape, a.dtype), (a.shape[:-1], _real(a.dtype)), (batch, _I32)],
                        mode="V" if vectors else "N", uplo="L" if lower else "U")
    w, v = nan_unless(ctx, _info_ok(ctx, info), w, v)
    return w, v


def eig_parts(ctx, a, vectors=True):
    if not _use_lapack(ctx):
        return portable_eig(ctx, a, vectors)
    batch = a.shape[:-2]
    cdt = _complex(a.dtype)
    flags = dict(compute_left="N", compute_right="V" if vectors else "N")
    if a.dtype.kind == "c":
        w, _, vr, info = lapack(ctx, "geev", [a], [(a.shape[:-1], a.dtype), (a.shape, cdt), (a.shape, cdt),
                                                   (batch, _I32)], **flags)
    else:
        wr, wi, _, vr, info = lapack(ctx, "geev", [a], [(a.shape[:-1], a.dtype), (a.shape[:-1], a.dtype),
                                                        (a.shape, cdt), (a.shape, cdt), (batch, _I32)], **flags)
        w = ctx.complex(wr, wi)
    w, vr = nan_unless(ctx, _info_ok(ctx, info), w, vr)
    return w, vr


def schur_complex(ctx, a):
    """(T, Z) with a = Z T Z^H, T upper triangular (complex Schur form, LAPACK gees)."""
    if not _use_lapack(ctx):
        t, z, ok = portable_schur(ctx, a)
        return nan_unless(ctx, ok, t, z)
    a = ctx.astype(a, _complex(a.dtype))
    batch = a.shape[:-2]
    t, z, _, _, info = lapack(ctx, "gees", [a], [(a.shape, a.dtype), (a.shape, a.dtype), (a.shape[:-1], a.dtype),
                                                 (batch, _I32), (batch, _I32)], mode="V", sort="N")
    return nan_unless(ctx, _info_ok(ctx, info), t, z)


def _real_root(ctx, x):
    """Whether the principal square root x (complex) of a real matrix is real: it is unless
    the matrix has a negative real eigenvalue, and then its imaginary part is as large as
    sqrt(|eigenvalue|). Without the real Schur form (which tells real eigenvalues exactly)
    the portable path asks for |Im x| <= sqrt(eps) max |x| instead."""
    nb = x.ndim - 2
    imag = ctx.reduce_with(_abs(ctx, ctx.imag(x)), [nb, nb + 1], "maximum", 0)
    size = ctx.reduce_with(_abs(ctx, x), [nb, nb + 1], "maximum", 0)
    return ctx.compare(imag, _mul(ctx, _like(ctx, size, np.sqrt(_eps(size.dtype))), size), "LE")


def _real_eigenvalues(ctx, a):
    """(wr, wi) of a real matrix from its real Schur form: wi is exactly 0 for real ones."""
    batch = a.shape[:-2]
    _, _, wr, wi, _, _ = lapack(ctx, "gees", [a], [(a.shape, a.dtype), (a.shape, a.dtype), (a.shape[:-1], a.dtype),
                                                   (a.shape[:-1], a.dtype), (batch, _I32), (batch, _I32)],
                                mode="N", sort="N")
    return wr, wi


def _loop(ctx, count, init, step):
    """for i in range(count): carry = step(builder, i, *carry); one stablehlo.while. Returns
    the final carry (a list)."""
    def cond(b, i, *carry):
        return b.compare(i, b.scalar(count, _I32), "LT")

    def body(b, i, *carry):
        out = step(b, i, *carry)
        return [b.binary("add", i, b.scalar(1, _I32))] + ([out] if isinstance(out, Value) else list(out))

    return ctx.while_loop([ctx.scalar(0, _I32)] + list(init), cond, body)[1:]


def triangular_sylvester(ctx, ta, tb, f):
    """y with ta y + y tb = f for upper triangular ta (..., n, n), tb (..., m, m): column j
    solves (ta + tb[j, j] I) y[:, j] = f[:, j] - y[:, :j] tb[:j, j] (columns >= j of y are
    still zero, so the full product gives the partial sum)."""
    batch, (n, m) = f.shape[:-2], f.shape[-2:]
    nb = len(batch)
    eye = _eye(ctx, batch + (n, n), f.dtype)

    def step(b, j, y):
        zero = b.scalar(0, _I32)
        col = b.dynamic_slice(tb, [zero] * nb + [zero, j], batch + (m, 1))
        tjj = b.dynamic_slice(tb, [zero] * nb + [j, j], batch + (1, 1))
        fj = b.dynamic_slice(f, [zero] * nb + [zero, j], batch + (n, 1))
        rhs = b.binary("subtract", fj, _mm(b, y, col))
        shifted = b.binary("add", ta, b.binary("multiply", eye, b.broadcast_in_dim(tjj, eye.shape, range(nb + 2))))
        yj = triangular_solve(b, shifted, rhs, lower=False)
        return b.dynamic_update_slice(y, yj, [zero] * nb + [zero, j])

    return _loop(ctx, m, [ctx.zeros_like(f)], step)[0]


def triangular_sqrtm(ctx, t):
    """Upper triangular r with r @ r = t (principal branch on the diagonal). Column j solves
    (r[:j, :j] + r[j, j] I) r[:j, j] = t[:j, j]; in full size, rows >= j get an identity
    diagonal and a zero right-hand side so they stay zero."""
    batch, n = t.shape[:-2], t.shape[-1]
    nb = len(batch)
    root = ctx.unary("sqrt", _diag(ctx, t))  # (..., n)
    vec = batch + (n,)
    idx = ctx.iota(vec, _I32, nb)

    def step(b, j, r):
        zero = b.scalar(0, _I32)
        rjj = b.dynamic_slice(root, [zero] * nb + [j], batch + (1,))
        rjj_v = b.broadcast_in_dim(rjj, vec, range(nb + 1))
        jj = b.broadcast_in_dim(j, vec, [])
        above = b.compare(idx, jj, "LT")
        shift = b.select(above, rjj_v, b.full(vec, 1, t.dtype))
        mat = b.binary("add", r, embed_diagonal(b, shift))
        # r[k, k] + r[j, j] = 0 (a repeated zero eigenvalue): divide by 1 instead, so that
        # 0 / 0 gives 0 as in scipy
        denom_zero = b.compare(_diag(b, mat), b.zeros_like(shift), "EQ")
        mat = b.binary("add", mat, embed_diagonal(b, b.select(denom_zero, b.full(vec, 1, t.dtype),
                                                              b.zeros_like(shift))))
        tcol = b.reshape(b.dynamic_slice(t, [zero] * nb + [zero, j], batch + (n, 1)), vec)
        rhs = b.select(above, tcol, b.zeros_like(tcol))
        x = b.reshape(triangular_solve(b, mat, b.reshape(rhs, vec + (1,)), lower=False), vec)
        # a zero denominator with a nonzero numerator: no square root exists (scipy: inf)
        nonzero = b.compare(x, b.zeros_like(x), "NE")
        x = b.select(b.binary("and", denom_zero, nonzero), b.full(vec, np.inf, t.dtype), x)
        col = b.select(b.compare(idx, jj, "EQ"), rjj_v, x)
        return b.dynamic_update_slice(r, b.reshape(col, vec + (1,)), [zero] * nb + [zero, j])

    return _loop(ctx, n, [ctx.zeros_like(t)], step)[0]


# ----- portable algorithms: what every platform but CPU runs (FORCE_PORTABLE: on CPU too) -----
# Arithmetic helpers for builders inside loop bodies (b is a LoweringContext or a child).
def _add(b, x, y):
    return b.binary("add", x, y)


def _sub(b, x, y):
    return b.binary("subtract", x, y)


def _mul(b, x, y):
    return b.binary("multiply", x, y)


def _div(b, x, y):
    return b.binary("divide", x, y)


def _neg(b, x):
    return b.unary("negate", x)


def _like(b, v, value, dtype=None):
    return b.full(v.shape, value, dtype or v.dtype)


def _eps(dtype):
    """Unit roundoff of the precision the module really computes in (x64=False: 32 bits)."""
    return float(np.finfo(hlo.canonical_dtype(_real(dtype))).eps)


def _to(b, x, dtype):
    """Real x as `dtype` (real or complex)."""
    return b.convert(x, dtype)


def _last(b, v, shape):
    """v (batch..., n) broadcast to `shape` (batch..., rows, n) along the last axis."""
    return b.broadcast_in_dim(v, shape, list(range(v.ndim - 1)) + [len(shape) - 1])


def _rows(b, v, shape):
    """v (batch..., n) broadcast to `shape` (batch..., n, cols) along the row axis."""
    return b.broadcast_in_dim(v, shape, list(range(v.ndim)))


def _abs1(b, x):
    """|re| + |im|: the magnitude LAPACK's i?amax compares."""
    if x.dtype.kind != "c":
        return b.unary("abs", x)
    return _add(b, b.unary("abs", b.real(x)), b.unary("abs", b.imag(x)))


def _argmax_first(b, mag, idx, axis):
    """(max, index of its first occurrence) along `axis`, as one variadic reduce; NaN never wins."""
    def body(c, acc_m, acc_i, m, i):
        take = c.binary("or", c.compare(m, acc_m, "GT"),
                        c.binary("and", c.compare(m, acc_m, "EQ"), c.compare(i, acc_i, "LT")))
        return [c.select(take, m, acc_m), c.select(take, i, acc_i)]
    return b.reduce([mag, idx], [b.scalar(-np.inf, mag.dtype), b.scalar(mag.shape[axis], idx.dtype)], [axis], body)


def portable_lu(ctx, a):
    """getrf's results by Gaussian elimination with partial pivoting, one column per iteration
    of a stablehlo.while over the whole batch: the pivot is the first row at or below the
    diagonal with the largest |re| + |im| (as LAPACK's i?amax), rows swapped with masks,
    then the multipliers and the rank-1 update of the trailing block, also under masks.
    A zero pivot (the column is zero from the diagonal down) is skipped, and info holds its
    1-based column as in LAPACK. The permutation travels as n extra columns (the identity)
    whose rows are swapped with the matrix's: one reduction per swap, not two."""
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    vec = batch + (n,)
    shape = batch + (n, 2 * n)
    ridx = ctx.iota(vec, _I32, nb)
    rows = ctx.iota(shape, _I32, nb)
    cols = ctx.iota(shape, _I32, nb + 1)
    left = ctx.compare(cols, ctx.full(shape, n, _I32), "LT")

    def step(b, j, x, piv, info):
        z = b.scalar(0, _I32)
        jv = b.broadcast_in_dim(j, vec, [])
        col = b.reshape(b.dynamic_slice(x, [z] * nb + [z, j], batch + (n, 1)), vec)
        mag = b.select(b.compare(ridx, jv, "GE"), _abs1(b, col), _like(b, col, -1, _real(a.dtype)))
        _, p = _argmax_first(b, mag, ridx, nb)
        p = b.select(b.compare(p, b.broadcast_in_dim(j, p.shape, []), "GE"),
                     b.binary("minimum", p, _like(b, p, n - 1)), b.broadcast_in_dim(j, p.shape, []))  # NaN: no swap
        # swap rows j and p
        at_p = _rows(b, b.compare(ridx, _rows(b, p, vec), "EQ"), shape)
        at_j = _rows(b, b.compare(ridx, jv, "EQ"), shape)
        row_j = b.broadcast_in_dim(b.dynamic_slice(x, [z] * nb + [j, z], batch + (1, 2 * n)), shape, range(nb + 2))
        row_p = _last(b, b.reduce_with(b.select(at_p, x, b.zeros_like(x)), [nb], "add", 0), shape)
        x = b.select(at_j, row_p, b.select(at_p, row_j, x))
        one = b.reshape(b.binary("add", p, _like(b, p, 1)), batch + (1,))
        piv = b.dynamic_update_slice(piv, one, [z] * nb + [j])
        # eliminate below the pivot
        u = b.dynamic_slice(x, [z] * nb + [j, j], batch + (1, 1))
        zero_pivot = b.compare(u, b.zeros_like(u), "EQ")
        first_zero = b.binary("and", b.reshape(zero_pivot, batch), b.compare(info, b.zeros_like(info), "EQ"))
        info = b.select(first_zero, b.broadcast_in_dim(b.binary("add", j, b.scalar(1, _I32)), batch, []), info)
        u = b.broadcast_in_dim(b.select(zero_pivot, _like(b, u, 1), u), shape, range(nb + 2))
        col = b.broadcast_in_dim(b.dynamic_slice(x, [z] * nb + [z, j], batch + (n, 1)), shape, range(nb + 2))
        mult = _div(b, col, u)
        jm = b.broadcast_in_dim(j, shape, [])
        below = b.compare(rows, jm, "GT")
        trailing = b.binary("and", below, b.binary("and", b.compare(cols, jm, "GT"), left))
        x = b.select(trailing, _sub(b, x, _mul(b, mult, row_p)),
                     b.select(b.binary("and", below, b.compare(cols, jm, "EQ")), mult, x))
        return x, piv, info

    init = [ctx.concatenate([a, _eye(ctx, a.shape, a.dtype)], nb + 1), ctx.full(vec, 0, _I32), ctx.full(batch, 0, _I32)]
    x, piv, info = _loop(ctx, n, init, step)
    lu = ctx.slice(x, [0] * (nb + 2), list(batch) + [n, n])
    onehot = ctx.slice(x, [0] * (nb + 1) + [n], list(batch) + [n, 2 * n])
    onehot = ctx.real(onehot) if a.dtype.kind == "c" else onehot
    perm = ctx.reduce_with(_mul(ctx, onehot, ctx.convert(ctx.iota(a.shape, _I32, nb + 1), onehot.dtype)), [nb + 1],
                           "add", 0)
    return lu, piv, ctx.convert(perm, _I32), info


# Jacobi methods. Pairs (i, i + k) of a 2k-long axis are rotated together, k pairs at once;
# between rounds the positions are shuffled so that in 2k - 1 rounds (a sweep) every pair
# has met once (the round-robin tournament of Brent and Luk's parallel Jacobi). An odd size
# is padded with a zero row/column that rotations leave untouched (its partner's rotation is
# the identity); `label` tracks where each original index went.
def _round_robin(n2):
    """Static order of positions for the next round: position 0 stays, the others rotate
    through the top row (0..k-1) and the bottom row (k..2k-1)."""
    k = n2 // 2
    if k < 2:
        return list(range(n2))
    return [0, k] + list(range(1, k - 1)) + list(range(k + 1, n2)) + [k - 1]


def _permute_axis(b, x, order, axis):
    """x's entries along `axis` in a static order: slices of contiguous runs, concatenated."""
    runs = []
    for i in order:
        if runs and runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, i + 1])
    if len(runs) == 1:
        return x
    pieces = []
    for lo, hi in runs:
        starts, limits = [0] * x.ndim, list(x.shape)
        starts[axis], limits[axis] = lo, hi
        pieces.append(b.slice(x, starts, limits))
    return b.concatenate(pieces, axis)


def _swap_halves(b, x, axis):
    n2 = x.shape[axis]
    return _permute_axis(b, x, list(range(n2 // 2, n2)) + list(range(n2 // 2)), axis)


def _rotate(b, x, c, s_top, s_bottom, axis):
    """x with every pair (i, i + k) along `axis` combined: x_i <- c x_i + s_top x_(i+k),
    x_(i+k) <- c x_(i+k) + s_bottom x_i; c, s_top, s_bottom are (batch..., k)."""
    nb = c.ndim - 1
    dims = list(range(nb)) + [axis]
    c2 = b.broadcast_in_dim(_to(b, b.concatenate([c, c], nb), x.dtype), x.shape, dims)
    s2 = b.broadcast_in_dim(b.concatenate([s_top, s_bottom], nb), x.shape, dims)
    return _add(b, _mul(b, c2, x), _mul(b, s2, _swap_halves(b, x, axis)))


def _jacobi_rotation(b, a, d, off, skip=None):
    """The rotation G = [[c, s], [-conj(s), c]] with G^H [[a, off], [conj(off), d]] G
    diagonal, for k such 2x2 Hermitian blocks at once (a, d real; GVL's sym.schur2 with the
    phase of off split out). Returns (c, s, t): t = tan of the angle, c real, s like off."""
    rdt = a.dtype
    mag = _abs(b, off)
    theta = _div(b, _sub(b, d, a), _mul(b, _like(b, mag, 2), mag))
    abs_theta = b.unary("abs", theta)
    big = b.compare(abs_theta, _like(b, theta, 1 / np.sqrt(_eps(rdt))), "GT")  # 1 + theta^2 == theta^2
    root = b.select(big, abs_theta, b.unary("sqrt", _add(b, _like(b, theta, 1), _mul(b, theta, theta))))
    sign = b.select(b.compare(theta, b.zeros_like(theta), "GE"), _like(b, theta, 1), _like(b, theta, -1))
    t = _div(b, sign, _add(b, abs_theta, root))
    none = b.compare(mag, b.zeros_like(mag), "EQ")
    if skip is not None:
        none = b.binary("or", none, skip)
    t = b.select(none, b.zeros_like(t), t)
    c = b.unary("rsqrt", _add(b, _like(b, t, 1), _mul(b, t, t)))
    safe = b.select(none, _like(b, mag, 1), mag)
    phase = b.select(none, _like(b, off, 1), _div(b, off, _to(b, safe, off.dtype)))  # off / |off|
    return c, _mul(b, _to(b, _mul(b, t, c), off.dtype), phase), t


def _shuffle(b, x, axes):
    for axis in axes:
        x = _permute_axis(b, x, _round_robin(x.shape[axis]), axis)
    return x


def _pad_to_even(ctx, x, axes):
    n = x.shape[axes[0]]
    if n % 2 == 0:
        return x
    high = [0] * x.ndim
    for axis in axes:
        high[axis] = 1
    return ctx.pad(x, ctx.scalar(0, x.dtype), [0] * x.ndim, high)


def _sweeps(ctx, init, sweep, converged, max_sweeps):
    """carry = sweep(builder, *carry) until converged, at least once, at most max_sweeps
    times. (No test before the first sweep: every reduction costs compile time, ~30 ms on
    CPU, and a sweep of an already diagonal matrix is cheap.)"""
    def cond(b, i, done, *carry):
        return b.binary("and", b.unary("not", done), b.compare(i, b.scalar(max_sweeps, _I32), "LT"))

    def body(b, i, done, *carry):
        carry = sweep(b, *carry)
        return [b.binary("add", i, b.scalar(1, _I32)), converged(b, *carry)] + list(carry)

    return ctx.while_loop([ctx.scalar(0, _I32), ctx.scalar(False, np.bool_)] + list(init), cond, body)[2:]


def _sums(b, xs, axes):
    """Several sums over the same axes of same-shaped real arrays, as one variadic reduce."""
    axes = sorted(axes)
    inits = [b.scalar(0, x.dtype) for x in xs]
    return b.reduce(list(xs), inits, axes, lambda c, *acc_x: [c.binary("add", p, q) for p, q in
                                                               zip(acc_x[:len(xs)], acc_x[len(xs):])])


def _any_batch(b, pred):
    """pred (batch...) reduced to one bool: any."""
    return b.reduce_with(pred, list(range(pred.ndim)), "or", False) if pred.ndim else pred


# Cyclic Jacobi converges quadratically: measured 7-8 sweeps for random 50 x 50 matrices in
# float64. The limit only guards against a criterion that rounding keeps out of reach.
_MAX_SWEEPS = 40


def _hermitian_part(ctx, a, lower):
    """The Hermitian matrix that LAPACK's ?syevd/?heevd read from a's `lower`/upper triangle
    (of a complex diagonal, the real part only)."""
    h = ctx.select(_tri_mask(ctx, a.shape, lower, -1 if lower else 1), a, _adjoint(ctx, a))
    if a.dtype.kind == "c":
        on_diag = ctx.compare(ctx.iota(a.shape, _I32, a.ndim - 2), ctx.iota(a.shape, _I32, a.ndim - 1), "EQ")
        h = ctx.select(on_diag, embed_diagonal(ctx, _to(ctx, ctx.real(_diag(ctx, a)), a.dtype)), h)
    return h


def _scaled(ctx, a):
    """(a / max |a_ij|, that max) per matrix (max 1 for zero or non-finite matrices), so that
    the squared norms Jacobi compares neither underflow nor overflow."""
    nb = a.ndim - 2
    top = ctx.reduce_with(_abs(ctx, a), [nb, nb + 1], "maximum", 0)
    usable = ctx.binary("and", ctx.compare(top, ctx.zeros_like(top), "GT"), ctx.unary("is_finite", top, np.bool_))
    top = ctx.select(usable, top, _like(ctx, top, 1))
    return _div(ctx, a, ctx.broadcast_in_dim(_to(ctx, top, a.dtype), a.shape, range(nb))), top


def _unscaled(ctx, x, top):
    return _mul(ctx, x, ctx.broadcast_in_dim(top, x.shape, range(top.ndim)))


def _finite(ctx, x):
    """Per matrix of a batch: whether every entry of x (batch..., n) is finite."""
    fin = ctx.unary("is_finite", ctx.real(x) if x.dtype.kind == "c" else x, np.bool_)
    return _all(ctx, fin, [x.ndim - 1])


def jacobi_eigh(ctx, h, vectors=True):
    """(w ascending, v) of a Hermitian h (both triangles set) by the cyclic two-sided Jacobi
    method: sweeps of rounds of k simultaneous rotations G^H W G, each zeroing the k paired
    off-diagonal entries, until the off-diagonal part is below eps * ||h||_F (each matrix
    of a batch: the loop runs until all are)."""
    batch, n = h.shape[:-2], h.shape[-1]
    nb = len(batch)
    h, top = _scaled(ctx, h)
    w = _pad_to_even(ctx, h, [nb, nb + 1])
    n2 = w.shape[-1]
    k = n2 // 2
    rdt = _real(h.dtype)
    tol2 = _eps(rdt) ** 2
    r_idx, c_idx = np.indices((n2, n2))
    diag_mask = ctx.broadcast_in_dim(ctx.const(r_idx == c_idx), w.shape, [nb, nb + 1])
    pair_mask = ctx.broadcast_in_dim(ctx.const(np.abs(r_idx - c_idx) == k), w.shape, [nb, nb + 1])
    off_mask = ctx.broadcast_in_dim(ctx.const(r_idx != c_idx), w.shape, [nb, nb + 1])

    def rnd(b, r, w, v, label):
        d = b.real(_diag(b, w)) if w.dtype.kind == "c" else _diag(b, w)
        da = b.slice(d, [0] * (nb + 1), list(batch) + [k])
        dd = b.slice(d, [0] * nb + [k], list(batch) + [n2])
        off = _diag(b, b.slice(w, [0] * nb + [0, k], list(batch) + [k, n2]))  # entries (i, i + k)
        c, s, t = _jacobi_rotation(b, da, dd, off)
        cs = _conj(b, s)
        w = _rotate(b, w, c, _neg(b, s), cs, nb)          # G^H W: rows
        w = _rotate(b, w, c, _neg(b, cs), s, nb + 1)      # (G^H W) G: columns
        mag = _abs(b, off)
        tm = _mul(b, t, mag)
        exact = b.concatenate([_sub(b, da, tm), _add(b, dd, tm)], nb)
        w = b.select(pair_mask, b.zeros_like(w), b.select(diag_mask, embed_diagonal(b, _to(b, exact, w.dtype)), w))
        if vectors:
            v = _shuffle(b, _rotate(b, v, c, _neg(b, cs), s, nb + 1), [nb + 1])
        return _shuffle(b, w, [nb, nb + 1]), v, _shuffle(b, label, [0])

    def sweep(b, w, v, label):
        return _loop(b, n2 - 1, [w, v, label], rnd)

    def converged(b, w, v, label):
        sq = _abs_squared(b, w)
        off2, all2 = _sums(b, [b.select(off_mask, sq, b.zeros_like(sq)), sq], [nb, nb + 1])
        return b.unary("not", _any_batch(b, b.compare(off2, _mul(b, all2, _like(b, all2, tol2)), "GT")))  # NaN: stop

    v0 = _eye(ctx, w.shape, w.dtype) if vectors else ctx.scalar(0, w.dtype)
    w, v, label = _sweeps(ctx, [w, v0, ctx.iota((n2,), _I32, 0)], sweep, converged, _MAX_SWEEPS)
    d = ctx.real(_diag(ctx, w)) if w.dtype.kind == "c" else _diag(ctx, w)
    key = ctx.select(_last(ctx, ctx.compare(label, ctx.full((n2,), n, _I32), "EQ"), d.shape),
                     _like(ctx, d, np.inf), d)  # the padding goes last
    less = lambda b, x, y, *rest: b.compare(x, y, "LT")
    if not vectors:
        return _unscaled(ctx, ctx.slice(ctx.sort([key], nb, less)[0], [0] * (nb + 1), list(batch) + [n]), top), None
    key_m = _last(ctx, key, w.shape)
    key_m, v = ctx.sort([key_m, v], nb + 1, less)
    evals = ctx.reshape(ctx.slice(key_m, [0] * (nb + 2), list(batch) + [1, n]), batch + (n,))
    return _unscaled(ctx, evals, top), ctx.slice(v, [0] * (nb + 2), list(batch) + [n, n])


def householder_qr(ctx, a):
    """(reflectors and R, taus) as LAPACK geqrf stores them. Off CPU: the `Qr` custom call,
    which XLA's QrExpander pass (run by the CPU, GPU and TPU compilers) turns into blocked
    Householder HLO before code generation; it follows geqrf's conventions (same signs)."""
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    taus = (batch + (min(m, n),), a.dtype)
    if _use_lapack(ctx):
        return lapack(ctx, "geqrf", [a], [(a.shape, a.dtype), taus])
    return ctx.custom_call("Qr", [a], [(a.shape, a.dtype), taus], api_version=1)


def householder_product(ctx, reflectors, taus):
    """Q = H_1 ... H_k from geqrf's reflectors (orgqr/ungqr). Off CPU: the
    `ProductOfElementaryHouseholderReflectors` custom call, expanded by QrExpander too."""
    if _use_lapack(ctx):
        routine = "ungqr" if reflectors.dtype.kind == "c" else "orgqr"
        return lapack(ctx, routine, [reflectors, taus], [(reflectors.shape, reflectors.dtype)])[0]
    return ctx.custom_call("ProductOfElementaryHouseholderReflectors", [reflectors, taus],
                           [(reflectors.shape, reflectors.dtype)], api_version=1)[0]


def q_factor(ctx, raw, taus, cols):
    """The first `cols` columns of Q (k = min(m, n) <= cols <= m) from geqrf's results for an
    m x n matrix: columns past n come from reflectors padded with zero columns."""
    batch, (m, n) = raw.shape[:-2], raw.shape[-2:]
    nb = len(batch)
    if cols <= n:
        reflectors = ctx.slice(raw, [0] * (nb + 2), list(batch) + [m, cols])
    else:
        reflectors = ctx.pad(raw, ctx.scalar(0, raw.dtype), [0] * (nb + 2), [0] * (nb + 1) + [cols - n])
    return householder_product(ctx, reflectors, taus)


def jacobi_svd(ctx, a, full_matrices, compute_uv):
    """(s descending, u, vh) by one-sided (Hestenes) Jacobi: rounds of k simultaneous
    rotations of column pairs of B = A V, each making the pair orthogonal (the rotation
    that diagonalises their 2x2 Gram matrix), until every pair met in a sweep had
    |b_i^H b_j| <= tol ||b_i|| ||b_j||. Then s = column norms, V the accumulated rotations,
    and U the Householder Q of the normalised columns (completed to an orthonormal basis
    where s = 0 or for full_matrices), its column phases set so that A V = U S. A wide A
    is handled through A^H."""
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    nb = len(batch)
    if m < n:
        s, u, vh = jacobi_svd(ctx, _adjoint(ctx, a), full_matrices, compute_uv)
        return s, (_adjoint(ctx, vh) if compute_uv else None), (_adjoint(ctx, u) if compute_uv else None)
    a, top = _scaled(ctx, a)
    x = _pad_to_even(ctx, a, [nb + 1])
    n2 = x.shape[-1]
    k = n2 // 2
    rdt = _real(a.dtype)
    tol = _eps(rdt) * np.sqrt(m)

    def rnd(b, r, x, v, label, worst):
        left = b.slice(x, [0] * (nb + 2), list(batch) + [m, k])
        right = b.slice(x, [0] * (nb + 1) + [k], list(batch) + [m, n2])
        cross = _mul(b, _conj(b, left), right)
        if a.dtype.kind == "c":
            alpha, beta, g_re, g_im = _sums(b, [_abs_squared(b, left), _abs_squared(b, right), b.real(cross),
                                                 b.imag(cross)], [nb])
            gamma = b.complex(g_re, g_im)
        else:
            alpha, beta, gamma = _sums(b, [_abs_squared(b, left), _abs_squared(b, right), cross], [nb])
        scale = _mul(b, b.unary("sqrt", alpha), b.unary("sqrt", beta))
        mag = _abs(b, gamma)
        positive = b.compare(scale, b.zeros_like(scale), "GT")
        rel = b.select(positive, _div(b, mag, b.select(positive, scale, _like(b, scale, 1))), b.zeros_like(scale))
        worst = b.binary("maximum", worst, rel)  # per position; reduced once per sweep
        c, s, _ = _jacobi_rotation(b, alpha, beta, gamma, skip=b.compare(rel, _like(b, rel, tol), "LE"))
        cs = _conj(b, s)
        x = _shuffle(b, _rotate(b, x, c, _neg(b, cs), s, nb + 1), [nb + 1])
        if compute_uv:
            v = _shuffle(b, _rotate(b, v, c, _neg(b, cs), s, nb + 1), [nb + 1])
        return x, v, _shuffle(b, label, [0]), worst

    def sweep(b, x, v, label, worst):
        return _loop(b, n2 - 1, [x, v, label, b.zeros_like(worst)], rnd)

    def converged(b, x, v, label, worst):
        return b.unary("not", _any_batch(b, b.compare(worst, _like(b, worst, tol), "GT")))  # NaN: stop

    v0 = _eye(ctx, batch + (n2, n2), a.dtype) if compute_uv else ctx.scalar(0, a.dtype)
    worst0 = ctx.full(batch + (k,), np.inf, rdt)
    x, v, label, _ = _sweeps(ctx, [x, v0, ctx.iota((n2,), _I32, 0), worst0], sweep, converged, _MAX_SWEEPS)
    norms = ctx.unary("sqrt", ctx.reduce_with(_abs_squared(ctx, x), [nb], "add", 0))  # (batch, n2)
    key = ctx.select(_last(ctx, ctx.compare(label, ctx.full((n2,), n, _I32), "EQ"), norms.shape),
                     _like(ctx, norms, -1), norms)  # the padding goes last
    greater = lambda b, p, q, *rest: b.compare(p, q, "GT")
    if not compute_uv:
        s = ctx.slice(ctx.sort([key], nb, greater)[0], [0] * (nb + 1), list(batch) + [n])
        return nan_unless(ctx, _finite(ctx, s), _unscaled(ctx, s, top)), None, None
    key_x, x = ctx.sort([_last(ctx, key, x.shape), x], nb + 1, greater)
    _, v = ctx.sort([_last(ctx, key, v.shape), v], nb + 1, greater)
    s = ctx.reshape(ctx.slice(key_x, [0] * (nb + 2), list(batch) + [1, n]), batch + (n,))
    v = ctx.slice(v, [0] * (nb + 2), list(batch) + [n, n])
    x = ctx.slice(x, [0] * (nb + 2), list(batch) + [m, n])
    positive = ctx.compare(s, ctx.zeros_like(s), "GT")
    inv = ctx.select(positive, _div(ctx, _like(ctx, s, 1), ctx.select(positive, s, _like(ctx, s, 1))),
                     ctx.zeros_like(s))
    unit = _mul(ctx, x, _last(ctx, _to(ctx, inv, a.dtype), x.shape))
    raw, taus = householder_qr(ctx, unit)
    q = q_factor(ctx, raw, taus, m if full_matrices else n)
    r = _diag(ctx, ctx.slice(raw, [0] * (nb + 2), list(batch) + [n, n]))
    r_mag = _abs(ctx, r)
    clear = ctx.compare(r_mag, _like(ctx, r_mag, 0.5), "GT")
    phase = ctx.select(clear, _div(ctx, r, _to(ctx, ctx.select(clear, r_mag, _like(ctx, r_mag, 1)), r.dtype)),
                       _like(ctx, r, 1))
    if q.shape[-1] > n:
        phase = ctx.concatenate([phase, ctx.full(batch + (q.shape[-1] - n,), 1, r.dtype)], nb)
    u = _mul(ctx, q, _last(ctx, phase, q.shape))
    return nan_unless(ctx, _finite(ctx, s), _unscaled(ctx, s, top), u, _adjoint(ctx, v))


# Complex Schur form: Householder reduction to Hessenberg form, then the single-shift QR
# algorithm (implicit, bulge chasing with Givens rotations; Wilkinson shifts, an exceptional
# shift after 10 steps without deflation, splitting at negligible subdiagonal entries),
# as in LAPACK's zgehrd + zlahqr, written as stablehlo.while loops over the whole batch.
def _pick_many(b, pairs):
    """[v[..., index[...]] for (v, index) in pairs]: per-matrix entries (index < len(v)) of
    vectors (batch..., len), as masked sums in one variadic reduce."""
    size = max(v.shape[-1] for v, _ in pairs)
    nb = pairs[0][0].ndim - 1
    parts, complex_at = [], []
    for v, index in pairs:
        if v.shape[-1] < size:
            v = b.pad(v, b.scalar(0, v.dtype), [0] * v.ndim, [0] * nb + [size - v.shape[-1]])
        at = b.compare(b.iota(v.shape, _I32, nb), _rows(b, index, v.shape), "EQ")
        v = b.select(at, v, b.zeros_like(v))
        complex_at.append(v.dtype.kind == "c")
        parts += [b.real(v), b.imag(v)] if v.dtype.kind == "c" else [v]
    sums = iter(_sums(b, parts, [nb]))
    return [b.complex(next(sums), next(sums)) if c else next(sums) for c in complex_at]


def _phase(b, x):
    """x / |x|, 1 where x = 0."""
    mag = _abs(b, x)
    zero = b.compare(mag, b.zeros_like(mag), "EQ")
    return b.select(zero, _like(b, x, 1), _div(b, x, _to(b, b.select(zero, _like(b, mag, 1), mag), x.dtype)))


def _givens(b, x, y):
    """(c, s): R = [[c, s], [-conj(s), c]] unitary with R [x, y] = [r, 0] (c real)."""
    ax, ay = _abs(b, x), _abs(b, y)
    big = b.binary("maximum", ax, ay)
    zero = b.compare(big, b.zeros_like(big), "EQ")
    big = b.select(zero, _like(b, big, 1), big)
    sx, sy = _div(b, ax, big), _div(b, ay, big)
    r = _mul(b, big, b.unary("sqrt", _add(b, _mul(b, sx, sx), _mul(b, sy, sy))))
    c = b.select(zero, _like(b, r, 1), _div(b, ax, r))
    s = _mul(b, _phase(b, x), _div(b, _conj(b, y), _to(b, r, x.dtype)))
    return c, b.select(zero, b.zeros_like(s), s)


def _vec_mat(b, x, m):
    """x (batch..., n) times m (batch..., n, k), as multiply and reduce: matrix-vector
    products are O(n^2) either way, and elementwise arithmetic has no reduced-precision
    mode (dots in float32 may use TF32 on some GPUs)."""
    return b.reduce_with(_mul(b, _rows(b, x, m.shape), m), [x.ndim - 1], "add", 0)


def _mat_vec(b, m, x):
    """m (batch..., k, n) times x (batch..., n)."""
    return b.reduce_with(_mul(b, m, _last(b, x, m.shape)), [m.ndim - 1], "add", 0)


def _hessenberg(ctx, a):
    """(h, q) with a = q h q^H, h upper Hessenberg: one Householder reflector P = I - f u u^H
    per column j < n - 2, applied as P h P and q P."""
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    vec = batch + (n,)
    ridx = ctx.iota(vec, _I32, nb)

    def step(b, j, h, q):
        z = b.scalar(0, _I32)
        jv = b.broadcast_in_dim(j, vec, [])
        col = b.reshape(b.dynamic_slice(h, [z] * nb + [z, j], batch + (n, 1)), vec)
        x = b.select(b.compare(ridx, jv, "GT"), col, b.zeros_like(col))
        first = b.compare(ridx, b.broadcast_in_dim(b.binary("add", j, b.scalar(1, _I32)), vec, []), "EQ")
        alpha = b.select(first, x, b.zeros_like(x))
        if x.dtype.kind == "c":
            a_re, a_im, x2 = _sums(b, [b.real(alpha), b.imag(alpha), _abs_squared(b, x)], [nb])
            alpha = b.complex(a_re, a_im)
        else:
            alpha, x2 = _sums(b, [alpha, _abs_squared(b, x)], [nb])
        xnorm = b.unary("sqrt", x2)
        beta = _mul(b, _neg(b, _phase(b, alpha)), _to(b, xnorm, h.dtype))
        u = _sub(b, x, b.select(first, _rows(b, beta, vec), b.zeros_like(x)))
        # |u|^2 = 2 |x| (|x| + |alpha|), so P = I - f u u^H with f = 1 / (|x| (|x| + |alpha|))
        unorm2 = _mul(b, xnorm, _add(b, xnorm, _abs(b, alpha)))
        skip = b.compare(unorm2, b.zeros_like(unorm2), "EQ")
        f = b.select(skip, b.zeros_like(unorm2),
                     _div(b, _like(b, unorm2, 1), b.select(skip, _like(b, unorm2, 1), unorm2)))
        f = _to(b, f, h.dtype)
        uc = _conj(b, u)
        fu = _mul(b, _rows(b, f, vec), u)
        uh_h = _vec_mat(b, uc, h)                                       # u^H h
        h = _sub(b, h, _mul(b, _rows(b, fu, h.shape), _last(b, uh_h, h.shape)))
        h = _sub(b, h, _mul(b, _rows(b, _mat_vec(b, h, fu), h.shape), _last(b, uc, h.shape)))  # - (h f u) u^H
        q = _sub(b, q, _mul(b, _rows(b, _mat_vec(b, q, fu), q.shape), _last(b, uc, q.shape)))
        # column j is now beta e_(j+1): store it exactly
        newcol = b.select(b.compare(ridx, jv, "LE"), col, b.select(first, _rows(b, beta, vec), b.zeros_like(col)))
        newcol = b.select(_rows(b, skip, vec), col, newcol)
        h = b.dynamic_update_slice(h, b.reshape(newcol, vec + (1,)), [z] * nb + [z, j])
        return h, q

    if n < 3:
        return a, _eye(ctx, a.shape, a.dtype)
    return tuple(_loop(ctx, n - 2, [a, _eye(ctx, a.shape, a.dtype)], step))


def portable_schur(ctx, a):
    """(t, z, ok): a = z t z^H with t upper triangular (complex), ok where the QR iteration
    converged within 30 max(10, n) steps (LAPACK's limit; else NaN, like gees' info > 0)."""
    a = ctx.astype(a, _complex(a.dtype))
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    if n == 1:
        return a, _eye(ctx, a.shape, a.dtype), ctx.full(batch, True, np.bool_)
    a, top = _scaled(ctx, a)  # as geev does, so that tiny and huge matrices neither under- nor overflow
    h, z = _hessenberg(ctx, a)
    rdt = _real(a.dtype)
    eps = _eps(rdt)
    smlnum = float(np.finfo(hlo.canonical_dtype(rdt)).tiny) * n / eps
    sub_shape = batch + (n - 1,)
    lidx = ctx.binary("add", ctx.iota(sub_shape, _I32, nb), ctx.full(sub_shape, 1, _I32))  # row of each subdiagonal
    sub_pos = ctx.compare(ctx.iota(a.shape, _I32, nb),
                          _add(ctx, ctx.iota(a.shape, _I32, nb + 1), ctx.full(a.shape, 1, _I32)), "EQ")
    max_iter = 30 * max(10, n)

    def cond(b, it, h, z, hi, stuck):
        running = b.compare(hi, b.zeros_like(hi), "GT")  # some matrix still has an active block
        if nb:
            running = b.reduce_with(running, list(range(nb)), "or", False)
        return b.binary("and", b.compare(it, b.scalar(max_iter, _I32), "LT"), running)

    def body(b, it, h, z, hi, stuck):
        d = diagonal(b, h, 0, nb, nb + 1)
        sd = diagonal(b, h, -1, nb, nb + 1)
        sup = diagonal(b, h, 1, nb, nb + 1)
        d_abs = _abs(b, d)
        near = _add(b, b.slice(d_abs, [0] * (nb + 1), list(batch) + [n - 1]),
                    b.slice(d_abs, [0] * nb + [1], list(batch) + [n]))
        sd_abs = _abs(b, sd)
        # as zlahqr: with both diagonal neighbours zero, compare with the neighbouring
        # subdiagonal entries instead; anything below smlnum is negligible too
        zero = b.scalar(0, rdt)
        before = b.slice(b.pad(sd_abs, zero, [0] * nb + [1], [0] * (nb + 1)), [0] * (nb + 1),
                         list(batch) + [n - 1])
        after = b.slice(b.pad(sd_abs, zero, [0] * (nb + 1), [0] * nb + [1]), [0] * nb + [1], list(batch) + [n])
        beside = _add(b, before, after)
        near = b.select(b.compare(near, b.zeros_like(near), "EQ"), beside, near)
        negligible = b.binary("or", b.compare(sd_abs, _mul(b, _like(b, near, eps), near), "LE"),
                              b.compare(sd_abs, _like(b, sd_abs, smlnum), "LE"))
        # zero the negligible subdiagonal entries
        neg_full = b.compare(embed_diagonal(b, b.convert(negligible, _I32), -1), b.full(h.shape, 0, _I32), "NE")
        h = b.select(b.binary("and", neg_full, sub_pos), b.zeros_like(h), h)
        # deflate at the bottom: the last row at or above hi whose subdiagonal is not negligible
        hiv = _rows(b, hi, sub_shape)
        live = b.binary("and", b.compare(lidx, hiv, "LE"), b.unary("not", negligible))
        new_hi = b.reduce_with(b.select(live, lidx, b.zeros_like(lidx)), [nb], "maximum", 0)
        stuck = b.select(b.compare(new_hi, hi, "LT"), b.zeros_like(stuck), _add(b, stuck, _like(b, stuck, 1)))
        hi = new_hi
        hiv = _rows(b, hi, sub_shape)
        # the active block starts below the last negligible subdiagonal above hi
        split = b.binary("and", b.compare(lidx, hiv, "LE"), negligible)
        lo = b.reduce_with(b.select(split, lidx, b.zeros_like(lidx)), [nb], "maximum", 0)
        # Wilkinson shift from the trailing 2x2 block of the active block
        hm1 = b.binary("maximum", _sub(b, hi, _like(b, hi, 1)), b.zeros_like(hi))
        ta, td, tb, tc = _pick_many(b, [(d, hm1), (d, hi), (sup, hm1), (sd, hm1)])
        p = _mul(b, _sub(b, ta, td), _like(b, ta, 0.5))
        bc = _mul(b, tb, tc)
        disc = b.unary("sqrt", _add(b, _mul(b, p, p), bc))
        flip = b.compare(b.real(_mul(b, _conj(b, p), disc)), b.zeros_like(b.real(p)), "LT")
        disc = b.select(flip, _neg(b, disc), disc)
        den = _add(b, p, disc)
        den_zero = b.compare(_abs(b, den), b.zeros_like(_abs(b, den)), "EQ")
        shift = _sub(b, td, b.select(den_zero, b.zeros_like(bc),
                                     _div(b, bc, b.select(den_zero, _like(b, den, 1), den))))
        exceptional = b.compare(b.binary("remainder", stuck, _like(b, stuck, 11)), _like(b, stuck, 10), "EQ")
        tc_abs = _abs(b, tc)
        shift = b.select(exceptional, _add(b, td, _to(b, _mul(b, _like(b, tc_abs, 0.75), tc_abs), td.dtype)), shift)
        # one implicit QR step on rows/columns lo..hi: bulge chasing with Givens rotations
        start = b.reduce_with(lo, list(range(nb)), "minimum", n) if nb else lo
        stop = b.reduce_with(hi, list(range(nb)), "maximum", 0) if nb else hi

        def chase_cond(c, k, h, z):
            return c.compare(k, stop, "LT")

        def chase(c, k, h, z):
            zr = c.scalar(0, _I32)
            kv = c.broadcast_in_dim(k, batch, [])
            first = c.compare(kv, lo, "EQ")
            active = c.binary("and", c.compare(kv, lo, "GE"), c.compare(kv, hi, "LT"))
            km1 = c.binary("maximum", c.binary("subtract", k, c.scalar(1, _I32)), zr)
            col_k = c.reshape(c.dynamic_slice(h, [zr] * nb + [k, k], batch + (2, 1)), batch + (2,))
            col_b = c.reshape(c.dynamic_slice(h, [zr] * nb + [k, km1], batch + (2, 1)), batch + (2,))
            x = c.select(first, _sub(c, c.reshape(c.slice(col_k, [0] * (nb + 1), list(batch) + [1]), batch), shift),
                         c.reshape(c.slice(col_b, [0] * (nb + 1), list(batch) + [1]), batch))
            y = c.select(first, c.reshape(c.slice(col_k, [0] * nb + [1], list(batch) + [2]), batch),
                         c.reshape(c.slice(col_b, [0] * nb + [1], list(batch) + [2]), batch))
            cs, sn = _givens(c, x, y)
            cs = c.select(active, cs, _like(c, cs, 1))
            sn = c.select(active, sn, c.zeros_like(sn))
            cc, sc = _to(c, cs, h.dtype), sn
            # rows k, k+1: R [r1; r2]
            rows = c.dynamic_slice(h, [zr] * nb + [k, zr], batch + (2, n))
            r1 = c.slice(rows, [0] * (nb + 2), list(batch) + [1, n])
            r2 = c.slice(rows, [0] * nb + [1, 0], list(batch) + [2, n])
            bs = lambda v: c.broadcast_in_dim(v, batch + (1, n), range(nb))
            n1 = _add(c, _mul(c, bs(cc), r1), _mul(c, bs(sc), r2))
            n2_ = _sub(c, _mul(c, bs(cc), r2), _mul(c, bs(_conj(c, sc)), r1))
            h = c.dynamic_update_slice(h, c.concatenate([n1, n2_], nb), [zr] * nb + [k, zr])
            # columns k, k+1: [c1 c2] R^H

            def cols(m):
                pair = c.dynamic_slice(m, [zr] * nb + [zr, k], batch + (n, 2))
                c1 = c.slice(pair, [0] * (nb + 2), list(batch) + [n, 1])
                c2 = c.slice(pair, [0] * (nb + 1) + [1], list(batch) + [n, 2])
                bc_ = lambda v: c.broadcast_in_dim(v, batch + (n, 1), range(nb))
                m1 = _add(c, _mul(c, bc_(cc), c1), _mul(c, bc_(_conj(c, sc)), c2))
                m2 = _sub(c, _mul(c, bc_(cc), c2), _mul(c, bc_(sc), c1))
                return c.dynamic_update_slice(m, c.concatenate([m1, m2], nb + 1), [zr] * nb + [zr, k])

            h, z = cols(h), cols(z)
            # the bulge below the subdiagonal (row k + 1, column k - 1) is gone: store the zero
            bulge = c.reshape(c.dynamic_slice(h, [zr] * nb + [c.binary("add", k, c.scalar(1, _I32)), km1],
                                              batch + (1, 1)), batch)
            kill = c.binary("and", active, c.unary("not", first))
            bulge = c.select(kill, c.zeros_like(bulge), bulge)
            h = c.dynamic_update_slice(h, c.reshape(bulge, batch + (1, 1)),
                                       [zr] * nb + [c.binary("add", k, c.scalar(1, _I32)), km1])
            return c.binary("add", k, c.scalar(1, _I32)), h, z

        _, h, z = b.while_loop([start, h, z], chase_cond, chase)
        return b.binary("add", it, b.scalar(1, _I32)), h, z, hi, stuck

    finite = _finite(ctx, ctx.reshape(a, batch + (n * n,)))  # NaN or inf: no iterations, NaN results
    start_hi = ctx.select(finite, ctx.full(batch, n - 1, _I32), ctx.full(batch, 0, _I32))
    init = [ctx.scalar(0, _I32), h, z, start_hi, ctx.full(batch, 0, _I32)]
    _, h, z, hi, _ = ctx.while_loop(init, cond, body)
    t = _mul(ctx, _triangle(ctx, h, lower=False), ctx.broadcast_in_dim(_to(ctx, top, h.dtype), h.shape, range(nb)))
    return t, z, ctx.binary("and", finite, ctx.compare(hi, ctx.zeros_like(hi), "EQ"))


def triangular_eigenvectors(ctx, t):
    """x upper triangular with unit diagonal and t x = x diag(t): back substitution, one row
    per iteration (bottom up) for all columns at once; as LAPACK's ztrevc, a divisor
    t_ii - t_jj smaller than eps |t_jj| (repeated eigenvalues) is replaced by that bound."""
    batch, n = t.shape[:-2], t.shape[-1]
    nb = len(batch)
    rdt = _real(t.dtype)
    lam = diagonal(ctx, t, 0, nb, nb + 1)
    eps = _eps(rdt)
    tiny = float(np.finfo(hlo.canonical_dtype(rdt)).tiny) / eps
    cols = ctx.iota(batch + (n,), _I32, nb)

    def step(b, r, x):
        z = b.scalar(0, _I32)
        i = b.binary("subtract", b.scalar(n - 2, _I32), r)
        iv = b.broadcast_in_dim(i, batch + (n,), [])
        row = b.reshape(b.dynamic_slice(t, [z] * nb + [i, z], batch + (1, n)), batch + (n,))
        row = b.select(b.compare(cols, iv, "GT"), row, b.zeros_like(row))
        acc = _vec_mat(b, row, x)  # sum_k>i t_ik x_kj: (batch, n)
        tii = b.reshape(b.dynamic_slice(lam, [z] * nb + [i], batch + (1,)), batch + (1,))
        den = _sub(b, b.broadcast_in_dim(tii, batch + (n,), range(nb + 1)), lam)
        floor = b.binary("maximum", _mul(b, _like(b, _abs(b, lam), eps), _abs(b, lam)), _like(b, _abs(b, lam), tiny))
        small = b.compare(_abs(b, den), floor, "LT")
        den = b.select(small, _to(b, floor, t.dtype), den)
        val = _neg(b, _div(b, acc, den))
        old = b.reshape(b.dynamic_slice(x, [z] * nb + [i, z], batch + (1, n)), batch + (n,))
        new = b.select(b.compare(cols, iv, "GT"), val, old)
        return (b.dynamic_update_slice(x, b.reshape(new, batch + (1, n)), [z] * nb + [i, z]),)

    return _loop(ctx, n - 1, [_eye(ctx, t.shape, t.dtype)], step)[0]


def portable_eig(ctx, a, vectors=True):
    """Eigenvalues diag(t) of the complex Schur form; eigenvectors z x (x from
    triangular_eigenvectors), normalised as LAPACK's geev: unit 2-norm, the entry of largest
    modulus real and positive."""
    t, z, ok = portable_schur(ctx, a)
    nb = a.ndim - 2
    w = diagonal(ctx, t, 0, nb, nb + 1)
    if not vectors:
        return nan_unless(ctx, ok, w), None
    v = _mm(ctx, z, triangular_eigenvectors(ctx, t))
    sq = _abs_squared(ctx, v)
    norm = ctx.unary("sqrt", ctx.reduce_with(sq, [nb], "add", 0))
    top = ctx.reduce_with(sq, [nb], "maximum", 0)
    rows = ctx.iota(v.shape, _I32, nb)
    first_top = ctx.reduce_with(ctx.select(ctx.compare(sq, _last(ctx, top, v.shape), "EQ"), rows,
                                           _like(ctx, rows, v.shape[-2])), [nb], "minimum", v.shape[-2])
    lead = ctx.reduce_with(ctx.select(ctx.compare(rows, _last(ctx, first_top, v.shape), "EQ"), v, ctx.zeros_like(v)),
                           [nb], "add", 0)
    scale = _div(ctx, _conj(ctx, _phase(ctx, lead)), _to(ctx, norm, v.dtype))
    v = _mul(ctx, v, _last(ctx, scale, v.shape))
    return nan_unless(ctx, ok, w, v)


# ----- numpy.linalg --------------------------------------------------------------------------
@lowers(np.linalg.cholesky)
@numpy_if_empty(np.linalg.cholesky)
def _cholesky(ctx, a, /, *, upper=False):
    v = _square(ctx, a)
    f, ok = cholesky_factor(ctx, v, lower=not upper)
    return nan_unless(ctx, ok, _triangle(ctx, f, lower=not upper))


def slogdet_parts(ctx, a):
    lu, piv, _, info = lu_factor(ctx, a, permutation=False)
    nb = a.ndim - 2
    d = _diag(ctx, lu)
    absd = ctx.unary("abs", d, _real(a.dtype))
    logdet = ctx.reduce_with(ctx.unary("log", absd), [nb], "add", 0)
    swaps = ctx.compare(piv, ctx.binary("add", ctx.iota(piv.shape, _I32, nb), ctx.full(piv.shape, 1, _I32)), "NE")
    odd = ctx.binary("remainder", ctx.reduce_with(ctx.convert(swaps, _I32), [nb], "add", 0),
                     ctx.full(logdet.shape, 2, _I32))
    parity = ctx.select(ctx.compare(odd, ctx.zeros_like(odd), "EQ"), ctx.full(logdet.shape, 1, a.dtype),
                        ctx.full(logdet.shape, -1, a.dtype))
    if a.dtype.kind == "c":
        unit = ctx.binary("divide", d, ctx.convert(absd, a.dtype))
    else:
        unit = ctx.unary("sign", d)
    sign = ctx.binary("multiply", parity, ctx.reduce_with(unit, [nb], "multiply", 1))
    singular = ctx.compare(info, ctx.zeros_like(info), "GT")  # numpy: sign 0, logdet -inf
    sign = ctx.select(singular, ctx.zeros_like(sign), sign)
    logdet = ctx.select(singular, ctx.full(logdet.shape, -np.inf, logdet.dtype), logdet)
    return sign, logdet


@lowers(np.linalg.slogdet)
@numpy_if_empty(np.linalg.slogdet)
def _slogdet(ctx, a):
    sign, logdet = slogdet_parts(ctx, _square(ctx, a))
    return np.linalg._linalg.SlogdetResult(sign, logdet)


@lowers(np.linalg.det)
@numpy_if_empty(np.linalg.det)
def _det(ctx, a):
    v = _square(ctx, a)
    sign, logdet = slogdet_parts(ctx, v)  # numpy's det is sign * exp(logdet) too
    return ctx.binary("multiply", sign, ctx.convert(ctx.unary("exponential", logdet), v.dtype))


@lowers(np.linalg.inv)
@numpy_if_empty(np.linalg.inv)
def _inv(ctx, a):
    return inverse(ctx, _square(ctx, a))


@lowers(np.linalg.solve)
@numpy_if_empty(np.linalg.solve)
def _solve(ctx, a, b):
    av, bv = ctx.asvalue(a), ctx.asvalue(b)
    dt = linalg_dtype(av.dtype, bv.dtype)
    av = _square(ctx, av, dt)
    bv = ctx.astype(bv, dt)
    n = av.shape[-1]
    vector = bv.ndim == 1
    if vector:
        bv = ctx.reshape(bv, (n, 1))
    if bv.ndim < 2 or bv.shape[-2] != n:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0, with gufunc signature "
                         f"(m,m),(m,n)->(m,n) (b has shape {bv.shape}, a has {n} rows)")
    batch = tuple(np.broadcast_shapes(av.shape[:-2], bv.shape[:-2]))
    x = lu_solve(ctx, ctx.broadcast_to(av, batch + av.shape[-2:]), ctx.broadcast_to(bv, batch + bv.shape[-2:]))
    return ctx.reshape(x, batch + (n,)) if vector else x


@lowers(np.linalg.eigh)
@numpy_if_empty(np.linalg.eigh)
def _eigh(ctx, a, UPLO="L"):
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    w, v = eigh_parts(ctx, _square(ctx, a), lower=UPLO == "L")
    return np.linalg._linalg.EighResult(w, v)


@lowers(np.linalg.eigvalsh)
@numpy_if_empty(np.linalg.eigvalsh)
def _eigvalsh(ctx, a, UPLO="L"):
    if UPLO not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    return eigh_parts(ctx, _square(ctx, a), lower=UPLO == "L", vectors=False)[0]


@lowers(np.linalg.eig)
@numpy_if_empty(np.linalg.eig)
def _eig(ctx, a):
    w, v = eig_parts(ctx, _square(ctx, a))
    return np.linalg._linalg.EigResult(w, v)


@lowers(np.linalg.eigvals)
@numpy_if_empty(np.linalg.eigvals)
def _eigvals(ctx, a):
    return eig_parts(ctx, _square(ctx, a), vectors=False)[0]


def _matrices(ctx, a):
    v = ctx.asvalue(a)
    if v.ndim < 2:
        raise LinAlgError(f"{v.ndim}-dimensional array given. Array must be at least two-dimensional")
    return ctx.astype(v, linalg_dtype(v.dtype))


@lowers(np.linalg.svd)
@numpy_if_empty(np.linalg.svd)
def _svd(ctx, a, full_matrices=True, compute_uv=True, hermitian=False):
    if hermitian:
        raise NotImplementedError("np.linalg.svd(..., hermitian=True) is not supported under jit_ps; "
                                  "use hermitian=False (same values, computed by gesdd)")
    s, u, vh, _ = svd_parts(ctx, _matrices(ctx, a), bool(full_matrices), bool(compute_uv))
    return np.linalg._linalg.SVDResult(u, s, vh) if compute_uv else s


@lowers(np.linalg.svdvals)
@numpy_if_empty(np.linalg.svdvals)
def _svdvals(ctx, x, /):
    return svd_parts(ctx, _matrices(ctx, x), False, False)[0]


@lowers(np.linalg.pinv)
@numpy_if_empty(np.linalg.pinv)
def _pinv(ctx, a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    if hermitian:
        raise NotImplementedError("np.linalg.pinv(..., hermitian=True) is not supported under jit_ps; "
                                  "use hermitian=False")
    v = _matrices(ctx, a)
    if rcond is None:
        rcond = 1e-15 if rtol is np._NoValue else \
            max(v.shape[-2:]) * np.finfo(v.dtype).eps if rtol is None else rtol
    elif rtol is not np._NoValue:
        raise ValueError("`rtol` and `rcond` can't be both set.")
    s, u, vh, _ = svd_parts(ctx, _conj(ctx, v), False, True)
    nb = s.ndim - 1
    rc = rcond if isinstance(rcond, Value) else ctx.const(np.asarray(rcond))
    cdt = np.result_type(rc.dtype, s.dtype)  # numpy: rcond[..., newaxis] is an array, not a weak scalar
    smax = ctx.reduce_with(s, [nb], "maximum", -np.inf)
    cutoff = ctx.binary("multiply", ctx.broadcast_to(ctx.astype(rc, cdt), smax.shape), ctx.astype(smax, cdt))
    large = ctx.compare(ctx.astype(s, cdt), ctx.broadcast_in_dim(cutoff, s.shape, range(nb)), "GT")
    inv_s = ctx.select(large, ctx.binary("divide", ctx.full(s.shape, 1, s.dtype), s), ctx.zeros_like(s))
    ut = _mT(ctx, u)
    scaled = ctx.binary("multiply", ctx.broadcast_in_dim(ctx.astype(inv_s, u.dtype), ut.shape, range(nb + 1)), ut)
    return _mm(ctx, _mT(ctx, vh), scaled)


@lowers(np.linalg.qr)
@numpy_if_empty(np.linalg.qr)
def _qr(ctx, a, mode="reduced"):
    """geqrf, then orgqr/ungqr for Q, as numpy does (autograd does not differentiate qr)."""
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(f"np.linalg.qr(..., mode={mode!r}) is not supported under jit_ps; "
                                  "use 'reduced', 'complete' or 'r'")
    v = _matrices(ctx, a)
    batch, (m, n) = v.shape[:-2], v.shape[-2:]
    k = min(m, n)
    nb = len(batch)
    raw, taus = householder_qr(ctx, v)
    rows = m if mode == "complete" else k
    r = _triangle(ctx, ctx.slice(raw, [0] * (nb + 2), list(batch) + [rows, n]) if rows < m else raw, lower=False)
    if mode == "r":
        return r
    q = q_factor(ctx, raw, taus, m if mode == "complete" else k)
    return np.linalg._linalg.QRResult(q, r)


@lowers(np.linalg.matrix_power)
def _matrix_power(ctx, a, n):
    v = ctx.asvalue(a)
    if v.ndim < 2:
        raise LinAlgError(f"{v.ndim}-dimensional array given. Array must be at least two-dimensional")
    if v.shape[-1] != v.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    if isinstance(n, Value):
        raise TypeError("matrix_power: the exponent must be a Python integer (static), not a traced array")
    n = operator.index(n)
    if v.dtype.kind == "b":
        raise NotImplementedError("matrix_power of boolean matrices is not supported under jit_ps")
    if n == 0:
        return _eye(ctx, v.shape, v.dtype)
    if n < 0:
        v = inverse(ctx, ctx.astype(v, linalg_dtype(v.dtype))) if v.size else ctx.astype(v, linalg_dtype(v.dtype))
        n = -n
    if n == 1:
        return v
    if n == 2:
        return _mm(ctx, v, v)
    if n == 3:
        return _mm(ctx, _mm(ctx, v, v), v)
    z = result = None  # numpy's order of products, so rounding agrees
    while n > 0:
        z = v if z is None else _mm(ctx, z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else _mm(ctx, result, z)
    return result


# ----- norms ---------------------------------------------------------------------------------
def _abs(ctx, x):
    return ctx.unary("abs", x, _real(x.dtype)) if x.dtype.kind in "fc" else x


def _sum(ctx, x, axes):
    return ctx.reduce_with(x, axes, "add", 0)


def _abs_squared(ctx, x):
    if x.dtype.kind == "c":
        re, im = ctx.real(x), ctx.imag(x)
        return ctx.binary("add", ctx.binary("multiply", re, re), ctx.binary("multiply", im, im))
    return ctx.binary("multiply", x, x)


def _vector_norm(ctx, x, ord, axis):
    ax = [axis]
    if ord == np.inf:
        return ctx.reduce_with(_abs(ctx, x), ax, "maximum", 0)
    if ord == -np.inf:
        return ctx.reduce_with(_abs(ctx, x), ax, "minimum", np.inf)
    if ord == 0:
        nz = ctx.compare(x, ctx.zeros_like(x), "NE")
        return _sum(ctx, ctx.convert(nz, _real(x.dtype)), ax)
    if ord == 1:
        return _sum(ctx, _abs(ctx, x), ax)
    if ord is None or ord == 2:
        return ctx.unary("sqrt", _sum(ctx, _abs_squared(ctx, x), ax))
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    a = _abs(ctx, x)
    powered = _sum(ctx, ctx.binary("power", a, ctx.full(a.shape, ord, a.dtype)), ax)
    inv = np.reciprocal(np.asarray(ord, dtype=powered.dtype))
    return ctx.binary("power", powered, ctx.full(powered.shape, inv, powered.dtype))


def _matrix_norm(ctx, x, ord, row, col):
    if ord in (2, -2, "nuc"):
        rest = [i for i in range(x.ndim) if i not in (row, col)]
        y = ctx.transpose(x, rest + [row, col])
        s = svd_parts(ctx, y, False, False)[0]
        last = [s.ndim - 1]
        if ord == 2:
            return ctx.reduce_with(s, last, "maximum", 0)
        if ord == -2:
            return ctx.reduce_with(s, last, "minimum", np.inf)
        return _sum(ctx, s, last)
    if ord in (1, -1):
        red = _sum(ctx, _abs(ctx, x), [row])
        c = col - 1 if col > row else col
        return ctx.reduce_with(red, [c], "maximum", 0) if ord == 1 else ctx.reduce_with(red, [c], "minimum", np.inf)
    if ord in (np.inf, -np.inf):
        red = _sum(ctx, _abs(ctx, x), [col])
        r = row - 1 if row > col else row
        return ctx.reduce_with(red, [r], "maximum", 0) if ord == np.inf else \
            ctx.reduce_with(red, [r], "minimum", np.inf)
    if ord in (None, "fro", "f"):
        return ctx.unary("sqrt", _sum(ctx, _abs_squared(ctx, x), [row, col]))
    raise ValueError("Invalid norm order for matrices.")


def _norm_axes(axis, nd):
    if axis is None:
        return tuple(range(nd))
    if not isinstance(axis, tuple):
        try:
            axis = int(axis)
        except Exception as e:
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from e
        return (axis,)
    return axis


def norm_value(ctx, x, ord=None, axis=None, keepdims=False):
    if x.dtype.kind not in "fc":
        x = ctx.astype(x, np.float64)
    nd = x.ndim
    if axis is None and (ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1)):
        out = ctx.unary("sqrt", _sum(ctx, _abs_squared(ctx, x), range(nd)))
        return ctx.reshape(out, (1,) * nd) if keepdims else out
    axes = _norm_axes(axis, nd)
    if len(axes) == 1:
        a = axes[0]
        if not -nd <= a < nd:
            raise np.exceptions.AxisError(f"axis {a} is out of bounds for array of dimension {nd}")
        a %= nd
        out = _vector_norm(ctx, x, ord, a)
        return ctx.reshape(out, [1 if i == a else d for i, d in enumerate(x.shape)]) if keepdims else out
    if len(axes) == 2:
        row, col = axes
        for ax in (row, col):
            if not -nd <= ax < nd:
                raise np.exceptions.AxisError(f"axis {ax} is out of bounds for array of dimension {nd}")
        row, col = row % nd, col % nd
        if row == col:
            raise ValueError("Duplicate axes given.")
        out = _matrix_norm(ctx, x, ord, row, col)
        if keepdims:
            return ctx.reshape(out, [1 if i in (row, col) else d for i, d in enumerate(x.shape)])
        return out
    raise ValueError("Improper number of dimensions to norm.")


@lowers(np.linalg.norm)
@numpy_if_empty(np.linalg.norm)
def _norm(ctx, x, ord=None, axis=None, keepdims=False):
    return norm_value(ctx, ctx.asvalue(x), ord, axis, keepdims)


@lowers(np.linalg.vector_norm)
@numpy_if_empty(np.linalg.vector_norm)
def _vector_norm_rule(ctx, x, /, *, axis=None, keepdims=False, ord=2):
    v = ctx.asvalue(x)
    if axis is None:
        flat = ctx.reshape(v, (v.size,))
        out = norm_value(ctx, flat, ord, 0)
        return ctx.reshape(out, (1,) * v.ndim) if keepdims else out
    if isinstance(axis, tuple) and len(axis) != 1:
        axes = [a % v.ndim for a in axis]
        rest = [i for i in range(v.ndim) if i not in axes]
        moved = ctx.transpose(v, rest + axes)
        flat = ctx.reshape(moved, tuple(v.shape[i] for i in rest) + (int(np.prod([v.shape[a] for a in axes])),))
        out = norm_value(ctx, flat, ord, flat.ndim - 1)
        if keepdims:
            return ctx.reshape(out, [1 if i in axes else d for i, d in enumerate(v.shape)])
        return out
    return norm_value(ctx, v, ord, axis, keepdims)


@lowers(np.linalg.matrix_norm)
@numpy_if_empty(np.linalg.matrix_norm)
def _matrix_norm_rule(ctx, x, /, *, keepdims=False, ord="fro"):
    return norm_value(ctx, ctx.asvalue(x), ord, (-2, -1), keepdims)


# ----- scipy.linalg --------------------------------------------------------------------------
def _trans_flag(trans):
    """scipy reads trans as {'N': 0, 'T': 1, 'C': 2}.get(trans, trans), then (for C-ordered
    arrays) 2 as 'C', any other true value as 'T' and false ones as 'N'. autograd's VJP
    passes trans='H' for complex matrices, which therefore means 'T'."""
    t = {"N": 0, "T": 1, "C": 2}.get(trans, trans)
    if isinstance(t, Value):
        raise TypeError("solve_triangular: trans must be static, not a traced array")
    return "C" if t == 2 else "T" if t else "N"


def _rhs(ctx, b, n, dtype, what):
    """b as (..., n, k): scipy treats a 1-D b as one vector, anything else as matrices."""
    bv = ctx.astype(ctx.asvalue(b), dtype)
    vector = bv.ndim == 1
    if vector:
        bv = ctx.reshape(bv, (bv.shape[0], 1))
    if bv.ndim < 2 or bv.shape[-2] != n:
        raise ValueError(f"{what}: shapes of a ({n}, {n}) and b {tuple(bv.shape[:-1]) if vector else bv.shape} "
                         "are incompatible")
    return bv, vector


def _scipy_square(ctx, a, dtype, what):
    v = ctx.astype(ctx.asvalue(a), dtype)
    if v.ndim < 2 or v.shape[-1] != v.shape[-2]:
        raise ValueError(f"{what}: expected square matrix, got shape {v.shape}")
    return v


def _batched(ctx, a, b):
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return ctx.broadcast_to(a, batch + a.shape[-2:]), ctx.broadcast_to(b, batch + b.shape[-2:])


def _unrhs(ctx, x, vector):
    return ctx.reshape(x, x.shape[:-1]) if vector else x


@lowers(scipy.linalg.solve_triangular)
@numpy_if_empty(scipy.linalg.solve_triangular)
def _solve_triangular(ctx, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    dt = linalg_dtype(_dtype_of(a), _dtype_of(b))
    av = _scipy_square(ctx, a, dt, "solve_triangular")
    bv, vector = _rhs(ctx, b, av.shape[-1], dt, "solve_triangular")
    av, bv = _batched(ctx, av, bv)
    x = triangular_solve(ctx, av, bv, lower=bool(lower), trans=_trans_flag(trans), unit=bool(unit_diagonal))
    if not unit_diagonal:  # scipy: LinAlgError "singular matrix"
        d = _diag(ctx, av)
        x = nan_unless(ctx, _all(ctx, ctx.compare(d, ctx.zeros_like(d), "NE"), [d.ndim - 1]), x)
    return _unrhs(ctx, x, vector)


def cho_factor_matrix(a, lower=False):
    """The factor half of scipy.linalg.cho_factor, as its own primitive."""
    return scipy.linalg.cho_factor(a, lower=lower)[0]


@lowers(cho_factor_matrix)
@numpy_if_empty(cho_factor_matrix)
def _cho_factor_matrix_rule(ctx, a, lower=False):
    v = _scipy_square(ctx, a, linalg_dtype(_dtype_of(a)), "cho_factor")
    f, ok = cholesky_factor(ctx, v, bool(lower))
    return nan_unless(ctx, ok, f)


@lowers(scipy.linalg.cholesky)
@numpy_if_empty(scipy.linalg.cholesky)
def _scipy_cholesky(ctx, a, lower=False, overwrite_a=False, check_finite=True):
    v = _scipy_square(ctx, a, linalg_dtype(_dtype_of(a)), "cholesky")
    f, ok = cholesky_factor(ctx, v, bool(lower))
    return nan_unless(ctx, ok, _triangle(ctx, f, bool(lower)))


@lowers(scipy.linalg.cho_solve)
@numpy_if_empty(scipy.linalg.cho_solve)
def _cho_solve(ctx, c_and_lower, b, overwrite_b=False, check_finite=True):
    c, lower = c_and_lower
    dt = linalg_dtype(_dtype_of(c), _dtype_of(b))
    cv = _scipy_square(ctx, c, dt, "cho_solve")
    bv, vector = _rhs(ctx, b, cv.shape[-1], dt, "cho_solve")
    cv, bv = _batched(ctx, cv, bv)
    if lower:  # L L^H x = b
        y = triangular_solve(ctx, cv, bv, lower=True)
        x = triangular_solve(ctx, cv, y, lower=True, trans="C")
    else:  # U^H U x = b
        y = triangular_solve(ctx, cv, bv, lower=False, trans="C")
        x = triangular_solve(ctx, cv, y, lower=False)
    return _unrhs(ctx, x, vector)


def _banded_to_dense(ctx, ab, lower, upper):
    """a[i, j] = ab[upper + i - j, j]: row r of ab is the diagonal at offset upper - r."""
    batch, n = ab.shape[:-2], ab.shape[-1]
    nb = len(batch)
    shape = batch + (n, n)
    rows = ctx.iota(shape, _I32, nb)
    cols = ctx.iota(shape, _I32, nb + 1)
    offset = ctx.binary("subtract", cols, rows)
    dense = ctx.zeros_like(ctx.full(shape, 0, ab.dtype))
    for r in range(lower + upper + 1):
        band = ctx.slice(ab, [0] * nb + [r, 0], list(batch) + [r + 1, n])  # (..., 1, n)
        spread = ctx.broadcast_in_dim(ctx.reshape(band, batch + (n,)), shape, list(range(nb)) + [nb + 1])
        on = ctx.compare(offset, ctx.full(shape, upper - r, _I32), "EQ")
        dense = ctx.select(on, spread, dense)
    return dense


@lowers(scipy.linalg.solve_banded)
@numpy_if_empty(scipy.linalg.solve_banded)
def _solve_banded(ctx, l_and_u, ab, b, overwrite_ab=False, overwrite_b=False, check_finite=True):
    lower, upper = (int(x) for x in np.asarray(l_and_u).reshape(-1))
    dt = linalg_dtype(_dtype_of(ab), _dtype_of(b))
    abv = ctx.astype(ctx.asvalue(ab), dt)
    if abv.ndim < 2:
        raise ValueError(f"solve_banded: ab must be at least 2-D, got shape {abv.shape}")
    if lower + upper + 1 != abv.shape[-2]:
        raise ValueError(f"invalid values for the number of lower and upper diagonals: l+u+1 "
                         f"({lower + upper + 1}) does not equal ab.shape[0] ({abv.shape[-2]})")
    n = abv.shape[-1]
    bv, vector = _rhs(ctx, b, n, dt, "solve_banded")
    a = _banded_to_dense(ctx, abv, lower, upper)
    a, bv = _batched(ctx, a, bv)
    return _unrhs(ctx, lu_solve(ctx, a, bv), vector)


def _complex_operands(ctx, *xs):
    dt = linalg_dtype(*[_dtype_of(x) for x in xs])
    return dt, [ctx.astype(ctx.asvalue(x), _complex(dt)) for x in xs]


@lowers(scipy.linalg.solve_sylvester)
@numpy_if_empty(scipy.linalg.solve_sylvester)
def _solve_sylvester(ctx, a, b, q):
    dt, (av, bv, qv) = _complex_operands(ctx, a, b, q)
    for name, v in (("a", av), ("b", bv)):
        if v.ndim < 2 or v.shape[-1] != v.shape[-2]:
            raise ValueError(f"solve_sylvester: {name} must be square, got shape {v.shape}")
    n, m = av.shape[-1], bv.shape[-1]
    if qv.ndim < 2 or qv.shape[-2:] != (n, m):
        raise ValueError(f"solve_sylvester: q must have shape (..., {n}, {m}), got {qv.shape}")
    batch = tuple(np.broadcast_shapes(av.shape[:-2], bv.shape[:-2], qv.shape[:-2]))
    av, bv, qv = (ctx.broadcast_to(v, batch + v.shape[-2:]) for v in (av, bv, qv))
    ta, u = schur_complex(ctx, av)
    tb, v = schur_complex(ctx, bv)
    f = _mm(ctx, _mm(ctx, _adjoint(ctx, u), qv), v)
    y = triangular_sylvester(ctx, ta, tb, f)
    x = _mm(ctx, _mm(ctx, u, y), _adjoint(ctx, v))
    return ctx.real(x) if dt.kind != "c" else x


def sqrtm_matrix(A, disp=np._NoValue, blocksize=np._NoValue):
    """scipy.linalg.sqrtm with a result of the input's kind, as its own primitive."""
    return scipy.linalg.sqrtm(A, disp=disp, blocksize=blocksize)


@lowers(sqrtm_matrix)
def _sqrtm_rule(ctx, A, disp=np._NoValue, blocksize=np._NoValue):
    if disp is not np._NoValue and not disp:
        raise NotImplementedError("sqrtm(..., disp=False) (the error estimate) is not supported under jit_ps")
    v = ctx.asvalue(A)
    if v.size == 1 and v.ndim < 2:  # scipy returns [[exp(a)]] here
        return ctx.reshape(ctx.unary("exponential", ctx.astype(v, np.float64)), (1, 1))
    if v.ndim < 2:
        raise LinAlgError("The input array must be at least two-dimensional")
    if v.shape[-1] != v.shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    dt = np.dtype(np.float32) if v.dtype == np.float16 else linalg_dtype(v.dtype)
    v = ctx.astype(v, dt)
    if v.size == 0:
        return v
    if v.shape[-2:] == (1, 1):  # scipy: np.emath.sqrt, complex for negative reals (NaN here)
        return ctx.unary("sqrt", v)
    t, z = schur_complex(ctx, v)
    x = _mm(ctx, _mm(ctx, z, triangular_sqrtm(ctx, t)), _adjoint(ctx, z))
    if dt.kind == "c":
        return x
    if not _use_lapack(ctx):
        return nan_unless(ctx, _real_root(ctx, x), ctx.real(x))
    wr, wi = _real_eigenvalues(ctx, v)
    negative = ctx.binary("and", ctx.compare(wi, ctx.zeros_like(wi), "EQ"),
                          ctx.compare(wr, ctx.zeros_like(wr), "LT"))
    real_root = ctx.unary("not", ctx.reduce_with(negative, [wr.ndim - 1], "or", False))
    return nan_unless(ctx, real_root, ctx.real(x))
