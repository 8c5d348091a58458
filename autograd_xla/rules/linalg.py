"""Linear algebra: numpy.linalg and scipy.linalg, as autograd wraps and differentiates them.

Two lowerings of every primitive. On CPU, LAPACK (jaxlib's `lapack_*_ffi` kernels, which
exist only there): numpy and scipy call the same routines, so values agree with them to
rounding (bit for bit in most of the tests). On every other platform (GPU, TPU; on CPU too
when `lapack.FORCE_PORTABLE` is set, which is how the tests run it), portable StableHLO
only, no vendor custom call, so one module compiles wherever XLA runs. Accuracies quoted
are measured in float64 against numpy (relative to the largest entry), on random and on
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

The code: this module holds the translation rules; lapack.py the LAPACK custom calls and
the factorizations and solves the rules share, each choosing at lowering time between
LAPACK and the portable algorithms of linalg_portable.py; linalg_common.py the helpers the
three share. scipy.linalg.cho_factor and sqrtm are trace rules (compositions/linalg.py)
that bind the primitives `cho_factor_matrix` and `sqrtm_matrix` lowered here; the patch of
autograd.numpy.linalg that eigh's VJP needs is there too.
"""
import functools
import operator
import warnings

import numpy as np
from numpy.linalg import LinAlgError

from .. import hlo
from ..context import kept_shape
from ..hlo import Value
from ..registry import LazyModule, lowers, when_imported
from .elementwise import conj
from .lapack import (cholesky_factor, eig_parts, eigh_parts, householder_qr, inverse, lu_factor, lu_solve, q_factor,
                     real_eigenvalues, schur_complex, svd_parts, triangular_solve, use_lapack)
from .linalg_common import (I32, abs_squared, abs_value, adjoint, all_true, complex_dtype, counted_loop, diag, eye,
                            linalg_dtype, matrix_transpose, mm, nan_unless, real_dtype, triangle)
from .linalg_portable import is_real_root
from .shape import embed_diagonal

scipy_linalg = LazyModule("scipy.linalg")  # imported when a program uses it: see SCIPY_RULES


# ----- operands ------------------------------------------------------------------------------
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


# ----- numpy.linalg --------------------------------------------------------------------------
@lowers(np.linalg.cholesky)
@numpy_if_empty(np.linalg.cholesky)
def _cholesky(ctx, a, /, *, upper=False):
    v = _square(ctx, a)
    f, ok = cholesky_factor(ctx, v, lower=not upper)
    return nan_unless(ctx, ok, triangle(ctx, f, lower=not upper))


def slogdet_parts(ctx, a):
    lu, piv, _, info = lu_factor(ctx, a, permutation=False)
    nb = a.ndim - 2
    d = diag(ctx, lu)
    absd = ctx.unary("abs", d, real_dtype(a.dtype))
    logdet = ctx.reduce_with(ctx.unary("log", absd), [nb], "add", 0)
    swaps = ctx.compare(piv, ctx.binary("add", ctx.iota(piv.shape, I32, nb), ctx.full(piv.shape, 1, I32)), "NE")
    odd = ctx.binary("remainder", ctx.reduce_with(ctx.convert(swaps, I32), [nb], "add", 0),
                     ctx.full(logdet.shape, 2, I32))
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
    s, u, vh, _ = svd_parts(ctx, conj(ctx, v), False, True)
    nb = s.ndim - 1
    rc = rcond if isinstance(rcond, Value) else ctx.const(np.asarray(rcond))
    cdt = np.result_type(rc.dtype, s.dtype)  # numpy: rcond[..., newaxis] is an array, not a weak scalar
    computed = hlo.canonical_dtype(real_dtype(v.dtype))
    if computed != real_dtype(v.dtype):
        # float64 computed in float32 (x64 off, a TPU): singular values below the float32 SVD's
        # rounding (numpy's default cutoff for the dtype computed in) are its noise, not the
        # matrix's; a float64 rcond under it inverted that noise (1.9e6 for numpy's 0.076)
        floor = ctx.const(np.asarray(max(v.shape[-2:]) * np.finfo(computed).eps, rc.dtype))
        rc = ctx.binary("maximum", rc, ctx.broadcast_to(floor, rc.shape))
    smax = ctx.reduce_with(s, [nb], "maximum", -np.inf)
    cutoff = ctx.binary("multiply", ctx.broadcast_to(ctx.astype(rc, cdt), smax.shape), ctx.astype(smax, cdt))
    large = ctx.compare(ctx.astype(s, cdt), ctx.broadcast_in_dim(cutoff, s.shape, range(nb)), "GT")
    inv_s = ctx.select(large, ctx.binary("divide", ctx.full(s.shape, 1, s.dtype), s), ctx.zeros_like(s))
    ut = matrix_transpose(ctx, u)
    scaled = ctx.binary("multiply", ctx.broadcast_in_dim(ctx.astype(inv_s, u.dtype), ut.shape, range(nb + 1)), ut)
    return mm(ctx, matrix_transpose(ctx, vh), scaled)


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
    r = triangle(ctx, ctx.slice(raw, [0] * (nb + 2), list(batch) + [rows, n]) if rows < m else raw, lower=False)
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
        return eye(ctx, v.shape, v.dtype)
    if n < 0:
        v = inverse(ctx, ctx.astype(v, linalg_dtype(v.dtype))) if v.size else ctx.astype(v, linalg_dtype(v.dtype))
        n = -n
    if n == 1:
        return v
    if n == 2:
        return mm(ctx, v, v)
    if n == 3:
        return mm(ctx, mm(ctx, v, v), v)
    z = result = None  # numpy's order of products, so rounding agrees
    while n > 0:
        z = v if z is None else mm(ctx, z, z)
        n, bit = divmod(n, 2)
        if bit:
            result = z if result is None else mm(ctx, result, z)
    return result


# ----- norms ---------------------------------------------------------------------------------
def _sum(ctx, x, axes):
    return ctx.reduce_with(x, axes, "add", 0)


def _vector_norm(ctx, x, ord, axis):
    ax = [axis]
    if ord == np.inf:
        return ctx.reduce_with(abs_value(ctx, x), ax, "maximum", 0)
    if ord == -np.inf:
        return ctx.reduce_with(abs_value(ctx, x), ax, "minimum", np.inf)
    if ord == 0:
        nz = ctx.compare(x, ctx.zeros_like(x), "NE")
        return _sum(ctx, ctx.convert(nz, real_dtype(x.dtype)), ax)
    if ord == 1:
        return _sum(ctx, abs_value(ctx, x), ax)
    if ord is None or ord == 2:
        return ctx.unary("sqrt", _sum(ctx, abs_squared(ctx, x), ax))
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")
    a = abs_value(ctx, x)
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
        red = _sum(ctx, abs_value(ctx, x), [row])
        c = col - 1 if col > row else col
        return ctx.reduce_with(red, [c], "maximum", 0) if ord == 1 else ctx.reduce_with(red, [c], "minimum", np.inf)
    if ord in (np.inf, -np.inf):
        red = _sum(ctx, abs_value(ctx, x), [col])
        r = row - 1 if row > col else row
        return ctx.reduce_with(red, [r], "maximum", 0) if ord == np.inf else \
            ctx.reduce_with(red, [r], "minimum", np.inf)
    if ord in (None, "fro", "f"):
        return ctx.unary("sqrt", _sum(ctx, abs_squared(ctx, x), [row, col]))
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
        out = ctx.unary("sqrt", _sum(ctx, abs_squared(ctx, x), range(nd)))
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
            return ctx.reshape(out, kept_shape(v.shape, axes))
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


def _solve_triangular(ctx, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False, check_finite=True):
    dt = linalg_dtype(_dtype_of(a), _dtype_of(b))
    av = _scipy_square(ctx, a, dt, "solve_triangular")
    bv, vector = _rhs(ctx, b, av.shape[-1], dt, "solve_triangular")
    av, bv = _batched(ctx, av, bv)
    x = triangular_solve(ctx, av, bv, lower=bool(lower), trans=_trans_flag(trans), unit=bool(unit_diagonal))
    if not unit_diagonal:  # scipy: LinAlgError "singular matrix"
        d = diag(ctx, av)
        x = nan_unless(ctx, all_true(ctx, ctx.compare(d, ctx.zeros_like(d), "NE"), [d.ndim - 1]), x)
    return _unrhs(ctx, x, vector)


def cho_factor_matrix(a, lower=False):
    """The factor half of scipy.linalg.cho_factor, as its own primitive."""
    return scipy_linalg.cho_factor(a, lower=lower)[0]


@functools.cache
def cho_factor_zeroes_other_triangle():
    """Whether this scipy's cho_factor returns zeros in the triangle the factor leaves (scipy
    1.18), not what the matrix held there (before: LAPACK's potrf leaves it as it was)."""
    return bool(scipy_linalg.cho_factor(np.array([[4.0, 2.0], [2.0, 3.0]]))[0][1, 0] == 0.0)


@lowers(cho_factor_matrix)
@numpy_if_empty(cho_factor_matrix)
def _cho_factor_matrix_rule(ctx, a, lower=False):
    v = _scipy_square(ctx, a, linalg_dtype(_dtype_of(a)), "cho_factor")
    f, ok = cholesky_factor(ctx, v, bool(lower))
    return nan_unless(ctx, ok, triangle(ctx, f, bool(lower)) if cho_factor_zeroes_other_triangle() else f)


def _scipy_cholesky(ctx, a, lower=False, overwrite_a=False, check_finite=True):
    v = _scipy_square(ctx, a, linalg_dtype(_dtype_of(a)), "cholesky")
    f, ok = cholesky_factor(ctx, v, bool(lower))
    return nan_unless(ctx, ok, triangle(ctx, f, bool(lower)))


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
    rows = ctx.iota(shape, I32, nb)
    cols = ctx.iota(shape, I32, nb + 1)
    offset = ctx.binary("subtract", cols, rows)
    dense = ctx.zeros_like(ctx.full(shape, 0, ab.dtype))
    for r in range(lower + upper + 1):
        band = ctx.slice(ab, [0] * nb + [r, 0], list(batch) + [r + 1, n])  # (..., 1, n)
        spread = ctx.broadcast_in_dim(ctx.reshape(band, batch + (n,)), shape, list(range(nb)) + [nb + 1])
        on = ctx.compare(offset, ctx.full(shape, upper - r, I32), "EQ")
        dense = ctx.select(on, spread, dense)
    return dense


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


# Schur-form recurrences of solve_sylvester (Bartels-Stewart) and sqrtm (Bjorck-Hammarling).
def triangular_sylvester(ctx, ta, tb, f):
    """y with ta y + y tb = f for upper triangular ta (..., n, n), tb (..., m, m): column j
    solves (ta + tb[j, j] I) y[:, j] = f[:, j] - y[:, :j] tb[:j, j] (columns >= j of y are
    still zero, so the full product gives the partial sum)."""
    batch, (n, m) = f.shape[:-2], f.shape[-2:]
    nb = len(batch)
    identity = eye(ctx, batch + (n, n), f.dtype)

    def step(b, j, y):
        zero = b.scalar(0, I32)
        col = b.dynamic_slice(tb, [zero] * nb + [zero, j], batch + (m, 1))
        tjj = b.dynamic_slice(tb, [zero] * nb + [j, j], batch + (1, 1))
        fj = b.dynamic_slice(f, [zero] * nb + [zero, j], batch + (n, 1))
        rhs = b.binary("subtract", fj, mm(b, y, col))
        shifted = b.binary("add", ta, b.binary("multiply", identity,
                                               b.broadcast_in_dim(tjj, identity.shape, range(nb + 2))))
        yj = triangular_solve(b, shifted, rhs, lower=False)
        return b.dynamic_update_slice(y, yj, [zero] * nb + [zero, j])

    return counted_loop(ctx, m, [ctx.zeros_like(f)], step)[0]


def triangular_sqrtm(ctx, t, zero_pivots=True):
    """Upper triangular r with r @ r = t (principal branch on the diagonal). Column j solves
    (r[:j, :j] + r[j, j] I) r[:j, j] = t[:j, j]; in full size, rows >= j get an identity
    diagonal and a zero right-hand side so they stay zero. `zero_pivots` False: NaN where
    r[k, k] + r[j, j] = 0 (sqrtm_zero_pivots)."""
    batch, n = t.shape[:-2], t.shape[-1]
    nb = len(batch)
    root = ctx.unary("sqrt", diag(ctx, t))  # (..., n)
    vec = batch + (n,)
    idx = ctx.iota(vec, I32, nb)

    def step(b, j, r):
        zero = b.scalar(0, I32)
        rjj = b.dynamic_slice(root, [zero] * nb + [j], batch + (1,))
        rjj_v = b.broadcast_in_dim(rjj, vec, range(nb + 1))
        jj = b.broadcast_in_dim(j, vec, [])
        above = b.compare(idx, jj, "LT")
        shift = b.select(above, rjj_v, b.full(vec, 1, t.dtype))
        mat = b.binary("add", r, embed_diagonal(b, shift))
        # r[k, k] + r[j, j] = 0 (a repeated zero eigenvalue): divide by 1 instead, so that
        # 0 / 0 gives 0 as in scipy
        denom_zero = b.compare(diag(b, mat), b.zeros_like(shift), "EQ")
        mat = b.binary("add", mat, embed_diagonal(b, b.select(denom_zero, b.full(vec, 1, t.dtype),
                                                              b.zeros_like(shift))))
        tcol = b.reshape(b.dynamic_slice(t, [zero] * nb + [zero, j], batch + (n, 1)), vec)
        rhs = b.select(above, tcol, b.zeros_like(tcol))
        x = b.reshape(triangular_solve(b, mat, b.reshape(rhs, vec + (1,)), lower=False), vec)
        # a zero denominator with a nonzero numerator: no square root exists (scipy: inf)
        nonzero = b.compare(x, b.zeros_like(x), "NE")
        x = b.select(b.binary("and", denom_zero, nonzero), b.full(vec, np.inf, t.dtype), x)
        if not zero_pivots:
            x = b.select(denom_zero, b.full(vec, np.nan, t.dtype), x)
        col = b.select(b.compare(idx, jj, "EQ"), rjj_v, x)
        return b.dynamic_update_slice(r, b.reshape(col, vec + (1,)), [zero] * nb + [zero, j])

    return counted_loop(ctx, n, [ctx.zeros_like(t)], step)[0]


def _complex_operands(ctx, *xs):
    dt = linalg_dtype(*[_dtype_of(x) for x in xs])
    return dt, [ctx.astype(ctx.asvalue(x), complex_dtype(dt)) for x in xs]


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
    f = mm(ctx, mm(ctx, adjoint(ctx, u), qv), v)
    y = triangular_sylvester(ctx, ta, tb, f)
    x = mm(ctx, mm(ctx, u, y), adjoint(ctx, v))
    return ctx.real(x) if dt.kind != "c" else x


def sqrtm_matrix(A, disp=np._NoValue, blocksize=np._NoValue):
    """scipy.linalg.sqrtm with a result of the input's kind, as its own primitive."""
    return scipy_linalg.sqrtm(A, disp=disp, blocksize=blocksize)


@functools.cache
def sqrtm_zero_pivots():
    """Whether this scipy's sqrtm gives what triangular_sqrtm's column recurrence does where
    it divides by r[k, k] + r[j, j] = 0 (a repeated zero eigenvalue): 0 for 0 / 0, inf else
    (scipy 1.17: the 3x3 zero matrix's root is zero). scipy 1.18's recursive blocked algorithm
    gives inf in some of those places (in that root's first row): there the compiled root is
    NaN, and such a call runs plainly (compositions/linalg.py's guard)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (its singular matrix warning)
        return bool(np.all(np.isfinite(scipy_linalg.sqrtm(np.zeros((3, 3))))))


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
    x = mm(ctx, mm(ctx, z, triangular_sqrtm(ctx, t, sqrtm_zero_pivots())), adjoint(ctx, z))
    if dt.kind == "c":
        return x
    if not use_lapack(ctx):
        return nan_unless(ctx, is_real_root(ctx, x), ctx.real(x))
    wr, wi = real_eigenvalues(ctx, v)
    negative = ctx.binary("and", ctx.compare(wi, ctx.zeros_like(wi), "EQ"),
                          ctx.compare(wr, ctx.zeros_like(wr), "LT"))
    real_root = ctx.unary("not", ctx.reduce_with(negative, [wr.ndim - 1], "or", False))
    return nan_unless(ctx, real_root, ctx.real(x))


#: scipy.linalg's functions lowered here, registered once scipy.linalg is imported (importing
#: it is slow, and only a program that imports it can call them)
SCIPY_RULES = {"solve_triangular": _solve_triangular, "cholesky": _scipy_cholesky, "cho_solve": _cho_solve,
               "solve_banded": _solve_banded, "solve_sylvester": _solve_sylvester}


@when_imported("scipy.linalg")
def _register_scipy(linalg):
    for name, rule in SCIPY_RULES.items():
        fn = getattr(linalg, name)
        lowers(fn)(numpy_if_empty(fn)(rule))
