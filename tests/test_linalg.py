"""numpy.linalg and scipy.linalg under jit_ps: values against numpy/scipy, gradients against
plain autograd (jit_ps(grad(f)) and grad(jit_ps(f))), forward mode where autograd has it.

Tolerances. numpy/scipy and our LAPACK kernels run the same routines, so most values agree
to rounding and the default tolerances of helpers.py hold (1e-12 float64, 2e-5 float32,
relative to the largest entry). Gradients run autograd's own VJP code in both cases; XLA
sums and multiplies in a different order than numpy, so agreement is to rounding, but the
VJPs divide by eigenvalue gaps (eigh/eig/svd) or invert matrices: float32 gradients of
those use 1e-4. sqrtm and solve_sylvester use a different algorithm than scipy (complex
Schur form + column recurrences, scipy: real Schur form + recursive blocks / trsyl): the
test matrices are well conditioned, and 1e-11 leaves room for cond(A) * eps.
Eigenvectors and singular vectors are only defined up to sign (real) or phase (complex):
they are compared after fixing the phase of each column (largest entry real positive),
and gradients go through functions invariant to that choice.
"""
import warnings

import numpy as onp
import pytest
import scipy.linalg as sla

import autograd.numpy as np
import autograd.scipy.linalg as asl
import autograd.scipy.special as asp
from autograd import grad, hessian, make_jvp
from autograd_xla import jit_ps
from autograd_xla.rules import lapack as linalg_rules
from autograd_xla.rules import linalg as linalg_rules_of_scipy
from helpers import NARROW, assert_close, check, check_falls_back, check_grad, check_value, scalarize

F64, F32, C128, C64 = onp.float64, onp.float32, onp.complex128, onp.complex64

# Everything here must compile whole: a silent fallback to plain autograd would pass the
# comparisons, so the fallback warning is an error.
pytestmark = pytest.mark.filterwarnings("error:jit_ps.*runs as plain autograd")


def general(*shape, dtype=F64, seed=0):
    r = onp.random.RandomState(seed)
    x = r.standard_normal(shape)
    if onp.dtype(dtype).kind == "c":
        x = x + 1j * r.standard_normal(shape)
    return x.astype(dtype)


def well(*shape, dtype=F64, seed=0):
    """A well-conditioned square (batch of) matrix: random plus a multiple of I."""
    n = shape[-1]
    return (general(*shape, dtype=dtype, seed=seed) + 3 * onp.eye(n)).astype(dtype)


def spd(*shape, dtype=F64, seed=0):
    g = general(*shape, dtype=dtype, seed=seed).astype(onp.complex128 if onp.dtype(dtype).kind == "c" else F64)
    n = shape[-1]
    return (g @ onp.conj(onp.swapaxes(g, -1, -2)) + n * onp.eye(n)).astype(dtype)


def fix_phase(v):
    """Columns scaled so that their largest-magnitude entry is real and positive."""
    v = onp.asarray(v)
    idx = onp.argmax(onp.abs(v), axis=-2)[..., None, :]
    top = onp.take_along_axis(v, idx, axis=-2)
    return v * (onp.conj(top) / onp.abs(top))


def cat(*xs):
    """Several results as one vector, for check_grad's sum(w * f(x))."""
    return np.concatenate([np.ravel(x) for x in xs])


def jvp_check(f, x, v, rtol=None):
    """Forward mode: jit_ps of autograd's make_jvp against plain make_jvp."""
    expected = make_jvp(f)(x)(v)
    assert_close(jit_ps(lambda x, v: make_jvp(f)(x)(v))(x, v), expected, rtol=rtol)


def check_grad_joint(f, *args, rtol=None, both_ways=True):
    """check_grad with respect to all arguments at once, as one tuple: one compile each
    way instead of one per argument (the compiles dominate this file's run time)."""
    s = scalarize(f)
    joint = lambda args: s(*args)
    expected = grad(joint)(args)
    assert_close(jit_ps(grad(joint))(args), expected, rtol=rtol, path="jit(grad)")
    if both_ways:
        assert_close(grad(jit_ps(joint))(args), expected, rtol=rtol, path="grad(jit)")


def jvp_check_joint(f, args, tangents, rtol=None):
    jvp_check(lambda args: f(*args), tuple(args), tuple(tangents), rtol=rtol)


# ----- cholesky --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_cholesky_values(dtype):
    a = spd(2, 3, 4, 4, dtype=dtype)
    check_value(np.linalg.cholesky, a)
    check_value(lambda x: np.linalg.cholesky(x, upper=True), a[0, 0])


def test_cholesky_grad():
    # one matrix and a batch in one function: one compile each way covers both
    check_grad_joint(lambda a, b: cat(np.linalg.cholesky(a), np.linalg.cholesky(b)), spd(4, 4), spd(2, 3, 3))
    check_grad(np.linalg.cholesky, spd(3, 3, dtype=F32), rtol=1e-4, both_ways=False)


def test_cholesky_not_positive_definite_gives_nan():
    """numpy raises LinAlgError; compiled code cannot, so the failed matrix is all NaN."""
    a = onp.stack([spd(3, 3), -onp.eye(3)])
    with pytest.raises(onp.linalg.LinAlgError):
        onp.linalg.cholesky(a)
    out = jit_ps(np.linalg.cholesky)(a)
    assert_close(out[0], onp.linalg.cholesky(a[0]))
    assert onp.isnan(out[1]).all()


# ----- det, slogdet, inv, solve --------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_det_slogdet_inv_values(dtype):
    a = well(3, 4, 4, dtype=dtype)
    check_value(lambda x: (np.linalg.det(x), np.linalg.slogdet(x), np.linalg.inv(x)), a)
    check_value(lambda x: (np.linalg.det(x), np.linalg.slogdet(x)), general(5, 5, dtype=dtype, seed=3))


def test_det_slogdet_inv_grads():
    f = lambda x: cat(np.linalg.det(x), np.linalg.slogdet(x)[1], np.linalg.inv(x))
    check_grad_joint(lambda a, b: cat(f(a), f(b)), well(4, 4), well(2, 3, 3))
    check_grad(np.linalg.inv, well(3, 3, dtype=F32), rtol=1e-4, both_ways=False)
    check_grad(lambda x: cat(np.abs(np.linalg.det(x)), np.real(np.linalg.inv(x))), well(3, 3, dtype=C128),
               both_ways=False)


def test_singular_matrices():
    """det/slogdet are exact like numpy's; inv/solve (numpy: LinAlgError) give NaN."""
    a = onp.array([[[1.0, 2.0], [2.0, 4.0]], [[2.0, 0.0], [0.0, 3.0]]])
    check_value(lambda x: (np.linalg.det(x), np.linalg.slogdet(x)), a)
    inv = jit_ps(np.linalg.inv)(a)
    assert onp.isnan(inv[0]).all()
    assert_close(inv[1], onp.linalg.inv(a[1]))
    x = jit_ps(np.linalg.solve)(a, onp.ones((2, 2, 1)))
    assert onp.isnan(x[0]).all() and not onp.isnan(x[1]).any()


def test_slogdet_complex_singular():
    a = onp.array([[1 + 1j, 2 + 2j], [1.0, 2.0]])
    check_value(np.linalg.slogdet, a)


@pytest.mark.parametrize("dtype", [F64, F32, C128])
def test_solve_values(dtype):
    a = well(2, 4, 4, dtype=dtype)
    check_value(np.linalg.solve, a, general(2, 4, 3, dtype=dtype, seed=1))
    check_value(np.linalg.solve, a, general(4, dtype=dtype, seed=2))          # one vector, broadcast over a's batch
    check_value(np.linalg.solve, a[0], general(3, 4, 2, dtype=dtype, seed=3))  # a broadcast over b's batch


def test_solve_mixed_dtypes_and_ints():
    check_value(np.linalg.solve, well(3, 3, dtype=F32), general(3, 2))
    check_value(np.linalg.solve, onp.array([[2, 1], [1, 3]]), onp.array([1, 2]))


def test_solve_grads():
    check_grad_joint(np.linalg.solve, well(4, 4), general(4, 2))
    check_grad_joint(np.linalg.solve, well(4, 4), general(4), both_ways=False)
    check_grad_joint(np.linalg.solve, well(2, 3, 3), general(2, 3, 2), both_ways=False)
    check_grad_joint(np.linalg.solve, well(3, 3, dtype=F32), general(3, 2, dtype=F32), rtol=1e-4, both_ways=False)


# ----- eigh ----------------------------------------------------------------------------------
def _check_eigh(a, uplo):
    result, values = jit_ps(lambda x: (np.linalg.eigh(x, UPLO=uplo), np.linalg.eigvalsh(x, UPLO=uplo)))(a)
    w, v = result
    w0, v0 = onp.linalg.eigh(a, UPLO=uplo)
    assert type(result).__name__ == "EighResult"
    assert w.dtype == w0.dtype and v.dtype == v0.dtype
    assert_close(w, w0)
    assert_close(fix_phase(v), fix_phase(v0))
    assert_close(values, onp.linalg.eigvalsh(a, UPLO=uplo))


@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_values(dtype, uplo):
    h = general(2, 4, 4, dtype=dtype)
    # only the `uplo` triangle is read: make the other one garbage
    a = onp.tril(h) + onp.triu(onp.conj(onp.swapaxes(h, -1, -2)), 1) if uplo == "L" else \
        onp.triu(h) + onp.tril(onp.conj(onp.swapaxes(h, -1, -2)), -1)
    a = a + (5 * onp.triu(onp.ones((4, 4)), 1) if uplo == "L" else 5 * onp.tril(onp.ones((4, 4)), -1))
    _check_eigh(a.astype(dtype), uplo)


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_grads(uplo):
    a = general(4, 4)
    sym = a + a.T
    f = lambda x: np.linalg.eigh(x, UPLO=uplo)[0] + np.sum(np.abs(np.linalg.eigh(x, UPLO=uplo)[1]), axis=-2)
    check_grad_joint(lambda a, b: cat(f(a), f(b)), sym, general(2, 3, 3) + onp.swapaxes(general(2, 3, 3), -1, -2))
    h = general(3, 3, dtype=C128)
    check_grad(lambda x: np.linalg.eigh(x, UPLO=uplo)[0] + np.abs(np.linalg.eigh(x, UPLO=uplo)[1][0]),
               h + onp.conj(h.T), both_ways=False)


def test_eigh_grad_float32():
    a = general(4, 4, dtype=F32)
    check_grad(lambda x: np.linalg.eigh(x)[0] * 2 + np.abs(np.linalg.eigh(x)[1][0]), a + a.T, rtol=1e-4,
               both_ways=False)


def test_eigh_grad_of_eigenvalues_with_repeated_eigenvalues():
    """autograd skips the eigenvector term when its cotangent is zero (`if anp.any(vg)`),
    which would be 0 * inf = NaN for repeated eigenvalues; traced, the zero cotangent is
    recognised from how autograd built it, and the gradient stays finite."""
    a = onp.diag([1.0, 1.0, 2.0])
    f = lambda x: np.sum(np.linalg.eigh(x)[0] ** 2)
    expected = grad(f)(a)
    assert onp.isfinite(expected).all()
    assert_close(jit_ps(grad(f))(a), expected)
    assert_close(grad(jit_ps(f))(a), expected)


# ----- eig -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_eig_values(dtype):
    a = general(2, 4, 4, dtype=dtype, seed=5)  # real ones have complex eigenvalue pairs
    (w, v), values = jit_ps(lambda x: (np.linalg.eig(x), np.linalg.eigvals(x)))(a)
    w0, v0 = onp.linalg.eig(a)
    assert w.dtype == w0.dtype and v.dtype == v0.dtype
    assert_close(w, w0)
    assert_close(fix_phase(v), fix_phase(v0))
    assert_close(values, onp.linalg.eigvals(a))


def test_eig_of_real_spectrum_is_complex():
    """numpy before 2.5 returns real arrays when every eigenvalue is real, numpy 2.5 complex
    ones; we always return complex (the dtype cannot depend on the data). The values agree."""
    a = onp.array([[2.0, 1.0], [0.5, 3.0]])
    w, v = jit_ps(np.linalg.eig)(a)
    w0, v0 = onp.linalg.eig(a)
    assert w0.dtype == (F64 if onp.lib.NumpyVersion(onp.__version__) < "2.5.0" else C128) and w.dtype == C128
    assert_close(w, w0.astype(C128))
    assert_close(fix_phase(v), fix_phase(v0.astype(C128)))


def per_eigenpair(*parts):
    """cat(*parts), parts whose last axis runs over eigenpairs; on a 32-bit platform (NARROW)
    each part summed over that axis: there eigenvalues come in the order of another
    algorithm (the portable Schur form's) or precision (LAPACK's cgeev ordered a complex
    3 x 3 matrix's first two unlike zgeev), which numpy does not specify, and check_grad's
    weights per position would weigh different eigenpairs."""
    return cat(*[np.sum(p, axis=-1) for p in parts]) if NARROW else cat(*parts)


def test_eig_grads():
    f = lambda x: per_eigenpair(np.real(np.linalg.eig(x)[0]), np.imag(np.linalg.eig(x)[0]) ** 2,
                                np.abs(np.linalg.eig(x)[1]))
    check_grad_joint(lambda a, b: cat(f(a), f(b)), general(4, 4, seed=5), general(2, 3, 3, seed=2))
    check_grad(lambda x: per_eigenpair(np.abs(np.linalg.eig(x)[0]) + np.abs(np.linalg.eig(x)[1][1])),
               general(3, 3, dtype=C128), both_ways=False)


# ----- svd, pinv -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3)])
def test_svd_values(dtype, shape):
    a = general(*shape, dtype=dtype)
    *results, values, svdvals = jit_ps(lambda x: (np.linalg.svd(x), np.linalg.svd(x, full_matrices=False),
                                                 np.linalg.svd(x, compute_uv=False), np.linalg.svdvals(x)))(a)
    assert type(results[0]).__name__ == "SVDResult"
    assert_close((values, svdvals), (onp.linalg.svd(a, compute_uv=False), onp.linalg.svdvals(a)))
    for full, (u, s, vh) in zip((True, False), results):
        u0, s0, vh0 = onp.linalg.svd(a, full_matrices=full)
        assert (u.shape, s.shape, vh.shape) == (u0.shape, s0.shape, vh0.shape)
        assert u.dtype == u0.dtype and s.dtype == s0.dtype
        assert_close(s, s0)
        k = s0.shape[-1]  # the first k singular vectors are unique up to phase
        assert_close(fix_phase(u[..., :k]), fix_phase(u0[..., :k]))
        assert_close(fix_phase(onp.conj(onp.swapaxes(vh, -1, -2))[..., :k]),
                     fix_phase(onp.conj(onp.swapaxes(vh0, -1, -2))[..., :k]))
        if full:  # the completion is some orthonormal basis: check unitarity
            eye = onp.eye(u.shape[-1])
            assert_close(onp.conj(onp.swapaxes(u, -1, -2)) @ u, onp.broadcast_to(eye, u.shape), atol=1e-5,
                         check_dtype=False)


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (3, 3), (2, 4, 3)])
def test_svd_grads(shape):
    a = general(*shape, seed=1)

    def f(x):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return (s + np.sum(np.abs(u), axis=-2) + np.sum(vh ** 2 * np.arange(vh.shape[-1]), axis=-1)
                + np.linalg.svd(x, compute_uv=False) ** 2)
    check_grad(f, a, both_ways=shape in ((4, 3), (3, 5)))


def test_svd_grads_complex_and_float32():
    check_grad(lambda x: np.linalg.svd(x, compute_uv=False) + np.abs(np.linalg.svd(x, full_matrices=False)[0][0]),
               general(3, 4, dtype=C128), both_ways=False)
    check_grad(lambda x: np.linalg.svd(x, compute_uv=False), general(4, 3, dtype=F32), rtol=1e-4, both_ways=False)


def test_svd_full_matrices_grad_not_implemented_as_in_autograd():
    f = lambda x: np.sum(np.linalg.svd(x)[0])
    a = general(3, 3)
    with pytest.raises(NotImplementedError):
        grad(f)(a)
    with pytest.raises(NotImplementedError):
        jit_ps(grad(f))(a)


@pytest.mark.parametrize("dtype", [F64, F32, C128])
def test_pinv_values(dtype):
    check_value(np.linalg.pinv, general(4, 3, dtype=dtype))
    check_value(np.linalg.pinv, general(2, 3, 5, dtype=dtype))
    low_rank = general(4, 2) @ general(2, 4, seed=1)  # rank 2: two singular values cut off
    # (the cut-off singular values are rounding noise: a cut well above it; results then
    # depend on that noise only through rounding, 1e-9 / 1e-3)
    check_value(lambda x: np.linalg.pinv(x, rcond=1e-10 if dtype != F32 else 1e-4), low_rank.astype(dtype),
                rtol=1e-9 if dtype != F32 else 1e-3)
    check_value(lambda x: np.linalg.pinv(x, rtol=None), general(3, 3, dtype=dtype))


def test_pinv_cutoff_follows_the_precision_computed_in():
    """float64 computed in float32 (x64=False, a TPU): an rcond under float32's rounding would
    invert the SVD's noise (a rank-2 matrix's pinv came out 1.9e6 for numpy's 0.076)."""
    low_rank = general(4, 2) @ general(2, 4, seed=1)
    narrow = jit_ps(lambda x: np.linalg.pinv(x, rcond=1e-10), x64=False)
    onp.testing.assert_allclose(narrow(low_rank), onp.linalg.pinv(low_rank, rcond=1e-10), rtol=1e-3, atol=1e-4)


def test_pinv_grads():
    check_grad_joint(lambda a, b: cat(np.linalg.pinv(a), np.linalg.pinv(b)), general(4, 3), general(2, 2, 3))
    check_grad(np.linalg.pinv, general(3, 4, dtype=F32), rtol=1e-4, both_ways=False)


# ----- norm ----------------------------------------------------------------------------------
VECTOR_ORDS = [None, 2, 1, 0, 3, 0.5, -1, onp.inf, -onp.inf]
MATRIX_ORDS = [None, "fro", "nuc", 1, -1, 2, -2, onp.inf, -onp.inf]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # numpy's, for ord=-1 with a zero
@pytest.mark.parametrize("dtype", [F64, F32, C128])
def test_norm_values(dtype):
    x = general(3, 4, 2, dtype=dtype)
    x[0, 0, 0] = 0  # for ord=0

    def f(x):
        out = [np.linalg.norm(x), np.linalg.norm(x, keepdims=True)]
        out += [np.linalg.norm(x, o, axis=1) for o in VECTOR_ORDS]
        out += [np.linalg.norm(x, o, axis=(2, 0), keepdims=True) for o in MATRIX_ORDS]
        if dtype == F64:  # the other axis and keepdims forms, once
            out += [np.linalg.norm(x, o, axis=-3, keepdims=True) for o in VECTOR_ORDS]
            out += [np.linalg.norm(x, o, axis=(1, 2)) for o in MATRIX_ORDS]
            out += [np.linalg.norm(x[0], o) for o in MATRIX_ORDS]
            out += [np.linalg.norm(x[0, 0], o) for o in VECTOR_ORDS]
        return tuple(out)
    check_value(f, x)


def test_norm_of_integers_and_other_entry_points():
    check_value(lambda x: (np.linalg.norm(x), np.linalg.norm(x, 1, axis=0), np.linalg.norm(x, "nuc")),
                onp.array([[1, -2], [3, 4]]))
    x = general(2, 3, 4)
    check_value(lambda x: (np.linalg.vector_norm(x), np.linalg.vector_norm(x, axis=(0, 2), ord=3, keepdims=True),
                           np.linalg.vector_norm(x, axis=1, ord=1), np.linalg.matrix_norm(x),
                           np.linalg.matrix_norm(x, ord="nuc", keepdims=True)), x)


def test_norm_bad_arguments():
    x = general(2, 3, 4)
    for args in [("fro", 1), (None, (0, 0)), ("foo", (0, 1)), (2, None)]:
        with pytest.raises(ValueError):
            onp.linalg.norm(x, *args)
        with pytest.raises(ValueError):
            jit_ps(lambda x: np.linalg.norm(x, *args))(x)


@pytest.mark.parametrize("dtype", [F64, F32])
def test_norm_grads(dtype):
    """Every form autograd's VJP supports: vector ords None, 2 and p > 1, matrix None,
    'fro', 'nuc', with axes and keepdims."""
    x = general(3, 4, 2, dtype=dtype, seed=2)
    rtol = 1e-4 if dtype == F32 else None

    def f(x):
        return cat(np.linalg.norm(x), np.linalg.norm(x, 2, axis=1), np.linalg.norm(x, 3, axis=1),
                   np.linalg.norm(x, 1.5, axis=-2), np.linalg.norm(x, None, axis=(0, 2)),
                   np.linalg.norm(x, "fro", axis=(2, 0)), np.linalg.norm(x, "nuc", axis=(0, 2)),
                   np.linalg.norm(x[0], "nuc"), np.linalg.norm(x[0], "fro"), np.linalg.norm(x, keepdims=True))
    check_grad(f, x, rtol=rtol, both_ways=dtype == F64)


def test_norm_grad_complex():
    check_grad(lambda x: np.linalg.norm(x) + np.linalg.norm(x, 3, axis=0) + np.linalg.norm(x, "nuc"),
               general(3, 2, dtype=C128), both_ways=False)


def test_norm_forward_mode():
    x = general(3, 4, 2, seed=2)
    v = general(3, 4, 2, seed=3)
    jvp_check(lambda x: cat(np.linalg.norm(x), np.linalg.norm(x, 3, axis=1), np.linalg.norm(x, "nuc", axis=(0, 2)),
                            np.linalg.norm(x, "fro", axis=(1, 2)), np.linalg.norm(x, 2, axis=0),
                            np.linalg.norm(x[0], "nuc")), x, v)


# ----- qr (no derivative in autograd) ------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F64, F32, C128])
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 4, 4)])
def test_qr_values(dtype, shape):
    """Same LAPACK routines as numpy (geqrf, orgqr/ungqr): Q and R compare directly."""
    a = general(*shape, dtype=dtype)
    got = jit_ps(lambda x: tuple(np.linalg.qr(x, mode=m) for m in ("reduced", "complete", "r")))(a)
    assert type(got[0]).__name__ == "QRResult"
    assert_close(got, tuple(onp.linalg.qr(a, mode=m) for m in ("reduced", "complete", "r")))


# ----- matrix_power ----------------------------------------------------------------------------
def test_matrix_power():
    a = well(2, 3, 3) / 3

    def f(x):
        return tuple(np.linalg.matrix_power(x, n) for n in (0, 1, 2, 3, 5, 8, 13, -1, -3))
    check_value(f, a)
    check_value(lambda x: np.linalg.matrix_power(x, 6), general(3, 3, dtype=F32))
    check_value(lambda x: (np.linalg.matrix_power(x, 5), np.linalg.matrix_power(x, -2)),
                onp.array([[1, 2], [3, 4]]))


def test_matrix_power_has_no_gradient_in_autograd():
    f = lambda x: np.sum(np.linalg.matrix_power(x, 3))
    with pytest.raises(NotImplementedError):
        grad(f)(well(3, 3))
    with pytest.raises(NotImplementedError):
        jit_ps(grad(f))(well(3, 3))


# ----- scipy.linalg.solve_triangular, cholesky, cho_factor, cho_solve --------------------------
TRANS = [0, 1, 2, "N", "T", "C"]


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular_values(lower, unit):
    a = well(4, 4)
    b = general(4, 3, seed=1)

    def f(a, b):
        return tuple(asl.solve_triangular(a, rhs, trans=t, lower=lower, unit_diagonal=unit)
                     for t in TRANS for rhs in (b, b[:, 0]))
    check_value(f, a, b)


@pytest.mark.parametrize("dtype", [F32, C128, C64])
def test_solve_triangular_dtypes(dtype):
    a, b = well(4, 4, dtype=dtype), general(4, 2, dtype=dtype, seed=1)
    check_value(lambda a, b: tuple(asl.solve_triangular(a, b, trans=t, lower=True) for t in (0, 1, 2)), a, b)


def test_solve_triangular_batched_and_mixed():
    check_value(lambda a, b: asl.solve_triangular(a, b, lower=True), well(2, 4, 4), general(2, 4, 3))
    check_value(lambda a, b: asl.solve_triangular(a, b, trans="T"), well(2, 4, 4), general(4))
    check_value(lambda a, b: asl.solve_triangular(a, b), well(3, 3, dtype=F32), general(3, 2))
    check_value(lambda a, b: asl.solve_triangular(a, b), onp.array([[2, 1], [0, 4]]), onp.array([1, 2]))


def test_solve_triangular_singular_gives_nan():
    a = onp.triu(well(3, 3))
    a[1, 1] = 0
    with pytest.raises(onp.linalg.LinAlgError):
        sla.solve_triangular(a, onp.ones(3))
    assert onp.isnan(jit_ps(asl.solve_triangular)(a, onp.ones(3))).all()
    # a unit diagonal is not read
    check_value(lambda a, b: asl.solve_triangular(a, b, unit_diagonal=True), a, onp.ones(3))


@pytest.mark.parametrize("lower", [True, False])
def test_solve_triangular_grads(lower):
    check_grad_joint(lambda a, b: cat(*[asl.solve_triangular(a, b, trans=t, lower=lower) for t in (0, 1, 2, "T")]),
                     well(4, 4), general(4, 2))


def test_solve_triangular_grads_vector_unit_float32_complex():
    # autograd's VJP ignores unit_diagonal; compiled code runs the same VJP
    check_grad_joint(lambda a, b: cat(asl.solve_triangular(a, b, lower=True),
                                      asl.solve_triangular(a, b, unit_diagonal=True)), well(3, 3), general(3),
                     both_ways=False)
    check_grad_joint(lambda a, b: asl.solve_triangular(a, b, trans=1), well(3, 3, dtype=F32),
                     general(3, 2, dtype=F32), rtol=1e-4, both_ways=False)
    # for complex matrices autograd's VJP passes trans='H', which scipy reads as 'T'
    check_grad_joint(lambda a, b: asl.solve_triangular(a, b, lower=True), well(3, 3, dtype=C128),
                     general(3, 2, dtype=C128), both_ways=False)


@pytest.mark.parametrize("dtype", [F64, F32, C128])
def test_cho_factor_cho_solve_cholesky(dtype):
    a, b = spd(4, 4, dtype=dtype), general(4, 2, dtype=dtype)
    for lower in (True, False):
        c, low = jit_ps(lambda a: asl.cho_factor(a, lower=lower))(a)
        c0, low0 = sla.cho_factor(a, lower=lower)
        assert low == low0
        assert_close(c, c0)  # the other triangle holds a's entries in both
        check_value(lambda c, b: asl.cho_solve((c, lower), b), c0, b)
        check_value(lambda c, b: asl.cho_solve((c, lower), b), c0, b[:, 0])
        check_value(lambda a: asl.cholesky(a, lower=lower), a)


@pytest.mark.parametrize("zeroes", [False, True])
def test_cho_factor_other_triangle_as_this_scipy_leaves_it(monkeypatch, zeroes):
    """scipy 1.18's cho_factor returns zeros in the triangle the factor leaves, earlier ones
    the matrix's entries (LAPACK's potrf leaves them): the compiled factor follows what the
    installed scipy does (rules.linalg.cho_factor_zeroes_other_triangle), either way here (a
    size of each's own: a trace finds a program made from an equal graph before)."""
    monkeypatch.setattr(linalg_rules_of_scipy, "cho_factor_zeroes_other_triangle", lambda: zeroes)
    a = spd(6 + zeroes, 6 + zeroes)
    for lower in (True, False):
        c = jit_ps(lambda a: asl.cho_factor(a, lower=lower)[0], fallback="error")(a)
        c0 = sla.cho_factor(a, lower=lower)[0]
        triangle = onp.tril(c0) if lower else onp.triu(c0)
        assert_close(c, triangle if zeroes else onp.where(triangle == 0, a, triangle))


# ----- solve_banded ----------------------------------------------------------------------------
def banded(lower, upper, n, seed=0):
    ab = general(lower + upper + 1, n, seed=seed)
    ab[upper] += 4  # diagonally dominant
    return ab


@pytest.mark.parametrize("lu", [(1, 1), (1, 2), (0, 2), (2, 0), (0, 0)])
def test_solve_banded_values(lu):
    ab = banded(*lu, 5)
    check_value(lambda ab, b: (asl.solve_banded(lu, ab, b), asl.solve_banded(lu, ab, b[:, 0])), ab, general(5, 2))


def test_solve_banded_dtypes_and_1x1():
    check_value(lambda ab, b: asl.solve_banded((1, 1), ab, b), banded(1, 1, 4).astype(F32), general(4, dtype=F32))
    ab = banded(1, 2, 4).astype(C128) + 1j * general(4, 4, seed=2)
    check_value(lambda ab, b: asl.solve_banded((1, 2), ab, b), ab, general(4, 3, dtype=C128))
    check_value(lambda ab, b: asl.solve_banded((1, 1), ab, b), onp.array([[0.0], [2.0], [0.0]]), onp.array([3.0]))


@pytest.mark.parametrize("lu", [(1, 1), (1, 2), (2, 0)])
def test_solve_banded_grads(lu):
    check_grad_joint(lambda ab, b: asl.solve_banded(lu, ab, b), banded(*lu, 5), general(5), both_ways=lu == (1, 2))


# ----- sqrtm, solve_sylvester -------------------------------------------------------------------
SCHUR_RTOL = 1e-11


@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_sqrtm_values(dtype):
    rtol = SCHUR_RTOL if dtype in (F64, C128) else 1e-4
    # the second matrix, when real, has complex eigenvalue pairs (and a real square root)
    check_value(lambda a, b: (asl.sqrtm(a), asl.sqrtm(b)), spd(4, 4, dtype=dtype), well(5, 5, dtype=dtype, seed=1),
                rtol=rtol)


@pytest.mark.filterwarnings("ignore:Matrix is singular")  # scipy's
def test_sqrtm_batched_and_special_shapes():
    check_value(asl.sqrtm, onp.stack([spd(3, 3), well(3, 3, seed=1)]), rtol=SCHUR_RTOL)
    check_value(asl.sqrtm, onp.array([[4.0]]))
    check_value(asl.sqrtm, onp.array([[1, 2], [0, 4]]), rtol=SCHUR_RTOL)  # integers -> float64
    check_value(asl.sqrtm, onp.array([[4.0, 1.0], [0.0, 0.0]]), rtol=SCHUR_RTOL)  # singular, with a root
    check_value(asl.sqrtm, onp.zeros((3, 3)))  # 0 / 0 in the recurrence is 0, as in scipy
    assert not onp.isfinite(jit_ps(asl.sqrtm)(onp.array([[0.0, 1.0], [0.0, 0.0]]))).all()  # no root: scipy inf


@pytest.mark.filterwarnings("ignore:Matrix is singular")  # scipy's
@pytest.mark.parametrize("dtype", [F64, C128])
def test_sqrtm_of_a_repeated_zero_eigenvalue_runs_plainly_where_scipy_differs(monkeypatch, dtype):
    """Where the installed scipy's root of a repeated zero eigenvalue is not the column
    recurrence's (scipy 1.18's blocked algorithm: inf in the 3x3 zero matrix's first row,
    rules.linalg.sqrtm_zero_pivots False), the compiled root is NaN there and the call runs
    plainly, with scipy's answer and a FallbackWarning; other matrices compile. (7x7: a trace
    finds a program made from an equal graph before, and other tests' are of the recurrence.)"""
    from autograd_xla import FallbackWarning
    from autograd_xla.compositions import linalg as compositions_linalg
    monkeypatch.setattr(compositions_linalg, "sqrtm_zero_pivots", lambda: False)
    monkeypatch.setattr(linalg_rules_of_scipy, "sqrtm_zero_pivots", lambda: False)
    f = jit_ps(asl.sqrtm)
    singular = onp.diag([1.0] + [0.0] * 6).astype(dtype)
    with pytest.warns(FallbackWarning, match="repeated zero eigenvalue"):
        assert_close(f(singular), sla.sqrtm(singular))
    a = spd(7, 7).astype(dtype)
    assert_close(f(a), sla.sqrtm(a), rtol=SCHUR_RTOL)
    assert f.cache_info()["fallbacks"] == 1


def test_sqrtm_needing_complex_result_runs_plainly():
    """scipy returns a complex matrix for a real one with a negative eigenvalue; a compiled
    dtype cannot depend on the data: the compiled root (NaN there) is guarded, so such a call
    runs as plain autograd, with scipy's complex answer. A complex matrix compiles."""
    from autograd_xla import FallbackWarning
    a = -spd(3, 3)
    assert sla.sqrtm(a).dtype == C128
    f = jit_ps(asl.sqrtm)
    with pytest.warns(FallbackWarning, match="negative real eigenvalue"):
        assert_close(f(a), sla.sqrtm(a))
    assert_close(f(spd(3, 3)), sla.sqrtm(spd(3, 3)), rtol=SCHUR_RTOL)  # the same program, no fallback
    assert f.cache_info()["traces"] == 1
    check_value(asl.sqrtm, a.astype(C128), rtol=SCHUR_RTOL)


# ----- expm -----------------------------------------------------------------------------------
@pytest.mark.filterwarnings("error:.*runs as plain autograd")
@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_expm_values_at_norms_where_scipy_and_the_compiled_algorithm_agree(dtype):
    """scipy picks the Padé degree and the squarings from estimates of the norms of A's
    powers (Al-Mohy and Higham 2009), the compiled rule from A's 1-norm (Higham 2005): both
    accurate to a few units of the dtype's precision at moderate norms."""
    rtol = 1e-13 if dtype in (F64, C128) else 2e-5
    for scale in (1e-3, 0.3, 1.0, 4.0, 9.0):
        a = (general(5, 5, dtype=dtype, seed=int(scale * 10)) * (scale / 5)).astype(dtype)
        check_value(asl.expm, a, rtol=rtol)
    check_value(asl.expm, general(3, 4, 4, dtype=dtype) * onp.array([0.01, 1.0, 8.0])[:, None, None].astype(dtype),
                rtol=rtol)  # a batch, each matrix its own degree and squarings


@pytest.mark.filterwarnings("error:.*runs as plain autograd")
def test_expm_against_closed_forms_at_large_norms():
    """Where the norm asks for squarings scipy's choice is the less accurate (a random 3x3
    of norm ~50: scipy 1.6e-12 off the exponential in 40 digits, the compiled 8e-15): the
    compiled exponential against closed forms: a rotation's generator, a shifted nilpotent
    matrix; a diagonal one is exp of its diagonal, as scipy's; 1x1, integers, a vector of one."""
    f = jit_ps(asl.expm)
    for theta in (0.7, 40.0):
        a = onp.array([[0.0, -theta], [theta, 0.0]])
        assert_close(f(a), onp.array([[onp.cos(theta), -onp.sin(theta)], [onp.sin(theta), onp.cos(theta)]]),
                     rtol=1e-14, atol=1e-14)
    n = onp.triu(onp.ones((4, 4)), 1) * 3.0
    expected = onp.exp(20.0) * (onp.eye(4) + n + n @ n / 2 + n @ n @ n / 6)
    assert_close(f(20.0 * onp.eye(4) + n), expected, rtol=1e-14)
    d = onp.diag([1.0, -2.0, 30.0])
    assert_close(f(d), onp.diag(onp.exp([1.0, -2.0, 30.0])), rtol=1e-15, atol=0)
    check_value(asl.expm, onp.array([[2.0]]))
    check_value(asl.expm, onp.array([[1, 2], [0, 1]]))  # integers: float64
    check_value(asl.expm, onp.array([0.5]))  # scipy's [[exp(0.5)]]


def test_sqrtm_grad_and_jvp():
    check_grad(asl.sqrtm, spd(4, 4), rtol=SCHUR_RTOL)
    jvp_check(asl.sqrtm, well(3, 3, seed=1), general(3, 3, seed=2), rtol=SCHUR_RTOL)


@pytest.mark.parametrize("dtype", [F64, F32, C128])
def test_solve_sylvester_values(dtype):
    rtol = SCHUR_RTOL if dtype != F32 else 1e-4
    a, b, q = well(4, 4, dtype=dtype), well(3, 3, dtype=dtype, seed=1), general(4, 3, dtype=dtype, seed=2)
    check_value(asl.solve_sylvester, a, b, q, rtol=rtol)


def test_solve_sylvester_batched_and_mixed():
    check_value(asl.solve_sylvester, well(2, 3, 3), well(2, 2, seed=1), general(2, 3, 2, seed=2), rtol=SCHUR_RTOL)
    # scipy computes the Schur form of a float32 `a` in float32 even when b and q are float64;
    # we compute in the common dtype (float64), so the two agree to float32 precision
    check_value(asl.solve_sylvester, well(3, 3, dtype=F32), well(2, 2, seed=1), general(3, 2, seed=2), rtol=1e-5)


def test_solve_sylvester_grads_and_jvp():
    args = well(4, 4), well(3, 3, seed=1), general(4, 3, seed=2)
    check_grad_joint(asl.solve_sylvester, *args, rtol=SCHUR_RTOL)
    jvp_check_joint(asl.solve_sylvester, args, [general(*x.shape, seed=10 + i) for i, x in enumerate(args)],
                    rtol=SCHUR_RTOL)


# ----- shapes, errors, forward mode, second order ---------------------------------------------
def test_empty_matrices():
    e = onp.zeros((0, 0))
    check_value(lambda x: (np.linalg.det(x), np.linalg.slogdet(x), np.linalg.inv(x), np.linalg.eigh(x),
                           np.linalg.cholesky(x), np.linalg.norm(x)), e)
    check_value(np.linalg.solve, well(3, 3), onp.zeros((3, 0)))
    check_value(lambda x: (np.linalg.svd(x), np.linalg.pinv(x)), onp.zeros((0, 3)))
    check_value(np.linalg.inv, onp.zeros((2, 0, 0)))
    check_value(lambda x: np.linalg.det(x), onp.zeros((0, 3, 3)))
    check_value(asl.solve_triangular, well(3, 3), onp.zeros((3, 0)))


def test_size_one_matrices():
    x = onp.array([[2.5]])
    check(lambda x: cat(np.linalg.det(x), np.linalg.inv(x), np.linalg.cholesky(x), np.linalg.eigh(x)[0],
                        np.linalg.svd(x, compute_uv=False), np.linalg.norm(x, "nuc")), x)


def test_shape_errors_are_raised_at_trace_time():
    with pytest.raises(onp.linalg.LinAlgError, match="square"):
        jit_ps(np.linalg.inv)(general(2, 3))
    with pytest.raises(onp.linalg.LinAlgError, match="two-dimensional"):
        jit_ps(np.linalg.det)(general(3))
    with pytest.raises(ValueError):
        jit_ps(np.linalg.solve)(well(3, 3), general(4, 2))
    with pytest.raises(ValueError):
        jit_ps(lambda ab, b: asl.solve_banded((1, 1), ab, b))(banded(1, 2, 4), general(4))
    with pytest.raises(TypeError):
        jit_ps(np.linalg.inv)(well(3, 3).astype(onp.float16))
    check_falls_back(lambda x: np.linalg.svd(x, hermitian=True), spd(3, 3), error=NotImplementedError)


def test_forward_mode_matches_autograd_where_it_has_no_jvp():
    """autograd defines JVPs only for norm, sqrtm and solve_sylvester among these; elsewhere
    make_jvp raises NotImplementedError, traced or not."""
    f = lambda x: np.linalg.det(x)
    with pytest.raises(NotImplementedError):
        make_jvp(f)(well(3, 3))(well(3, 3))
    with pytest.raises(NotImplementedError):
        jit_ps(lambda x, v: make_jvp(f)(x)(v))(well(3, 3), well(3, 3))


def test_hessian_of_log_det():
    f = lambda x: np.linalg.slogdet(x)[1] + np.sum(np.linalg.solve(x, onp.ones(3)))
    a = spd(3, 3)
    assert_close(jit_ps(hessian(f))(a), hessian(f)(a), rtol=1e-10)


def test_one_custom_call_per_factorization():
    """grad of a log-likelihood through cholesky compiles whole: LAPACK kernels, no fallback."""
    def nll(a, y):
        L = np.linalg.cholesky(a)
        z = asl.solve_triangular(L, y, lower=True)
        return 0.5 * np.sum(z ** 2) + np.sum(np.log(np.diag(L)))
    a, y = spd(4, 4), general(4)
    jf = jit_ps(grad(nll), fallback="error")
    assert_close(jf(a, y), grad(nll)(a, y))
    text = jf.stablehlo(a, y)
    assert "lapack_dpotrf_ffi" in text and "lapack_dtrsm_ffi" in text


@pytest.mark.parametrize("made", ["complex product", "scipy loop"])
def test_a_matrix_made_by_a_custom_call_and_factorized_is_not_transposed(made):
    """A matrix made by one of the CPU's custom calls (a complex product from 2^15
    multiply-adds by BLAS, blas.GEMM; scipy.special.gammaln by scipy's own loop) and read by a
    LAPACK kernel, which takes its operands column-major: every typed custom call states its
    layouts (row-major where its handler reads and writes so, hlo.Builder.custom_call), else
    XLA gave the product's result the kernel's layout and its handler filled it row-major,
    the inverse and solution of the transpose (relative errors 1.1 and 9.1; eig's vectors
    those of the transpose)."""
    rng = onp.random.RandomState(0)
    if made == "complex product":
        n = 40  # 64,000 multiply-adds
        a, b = (rng.randn(n, n) + 1j * rng.randn(n, n) for _ in range(2))

        def make(a, b):
            return np.dot(a, b)
    else:
        n = 8
        a, b = rng.rand(n, n) + 1.0 + n * onp.eye(n), None

        def make(a, b):
            return asp.gammaln(a)
    y = rng.randn(n)
    f = jit_ps(lambda a, b: (np.linalg.inv(make(a, b)), np.linalg.solve(make(a, b), y),
                             np.linalg.cholesky(np.dot(make(a, b), np.conj(make(a, b).T)))), fallback="error")
    assert_close(f(a, b), (onp.linalg.inv(make(a, b)), onp.linalg.solve(make(a, b), y),
                           onp.linalg.cholesky(make(a, b) @ make(a, b).conj().T)), rtol=1e-9)
    w, v = jit_ps(lambda a, b: np.linalg.eig(make(a, b)), fallback="error")(a, b)
    m = make(a, b)
    assert onp.abs(m @ v - v * w).max() <= (1e-5 if NARROW else 1e-12) * onp.abs(m).max() * n  # (NARROW: 32 bits)


def test_batched_lapack_kernels_take_batch_dimensions():
    """One custom call for a batch (layout [1, 2, 0]): no Python loop over the batch."""
    a = spd(3, 2, 4, 4)
    text = jit_ps(lambda a: (np.linalg.eigh(a)[0], np.linalg.cholesky(a), np.linalg.inv(a)))
    out = text(a)
    assert_close(out[0], onp.linalg.eigvalsh(a))
    hlo = text.stablehlo(a)
    assert hlo.count("lapack_dsyevd_ffi") == 1 and hlo.count("lapack_dgetrf_ffi") == 1
    assert "dense<[2, 3, 1, 0]>" in hlo


def test_no_warnings_from_compiled_calls():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jit_ps(np.linalg.inv)(well(3, 3))


# ----- portable lowerings: what GPU and TPU run, forced on CPU -----------------------------------
# FORCE_PORTABLE makes every rule lower as on a non-CPU platform: LU with partial pivoting,
# Jacobi eigh and SVD, XLA's QR expander, Hessenberg + shifted QR for the Schur form, all as
# stablehlo.while loops; no LAPACK custom call may appear. These algorithms round differently
# from LAPACK but are as accurate (backward stable; Jacobi runs until the off-diagonal part is
# below eps * ||A||, measured: eigenvalues and singular values to ~1e-15 relative in float64):
# on these well-conditioned matrices values and gradients agree to the default 1e-12 / 2e-5,
# except where noted. Eigenvalues of a general matrix come in another order than LAPACK's
# (numpy does not specify one): they are matched to numpy's before comparing.
# Compiling these loops costs ~0.5 s per factorization on CPU, so each test packs several
# primitives into one compiled function, and float32 / complex64 arithmetic of the costlier
# algorithms is covered once (float32 parametrisations, and x64=False, which emits float32).
#: Tiny and huge scales of the special matrices: float64's, or float32's on a 32-bit platform
#: (NARROW), where 1e-200 rounds to zero and 1e200 to inf (whose NaN results are right).
TINY, HUGE = (1e-30, 1e30) if NARROW else (1e-200, 1e200)


@pytest.fixture
def portable(monkeypatch):
    monkeypatch.setattr(linalg_rules, "FORCE_PORTABLE", True)


def portable_value(f, *args, rtol=None):
    """check_value, and the compiled module holds no LAPACK call."""
    jf = jit_ps(f)
    assert_close(jf(*args), f(*args), rtol=rtol, inputs=[onp.asarray(x).dtype for x in args])
    assert "lapack" not in jf.stablehlo(*args)


def match_eig(w, v, w0):
    """(w, v) with columns reordered to match numpy's eigenvalues w0: each of w0 in turn
    takes the nearest eigenvalue not taken yet."""
    w, w0 = onp.asarray(w), onp.asarray(w0)
    idx = onp.zeros(w.shape, int)
    for b in onp.ndindex(w.shape[:-1]):
        free = list(range(w.shape[-1]))
        for i, x in enumerate(w0[b]):
            idx[b + (i,)] = free.pop(int(onp.argmin(onp.abs(w[b][free] - x))))
    return onp.take_along_axis(w, idx, -1), (onp.take_along_axis(onp.asarray(v), idx[..., None, :], -1)
                                             if v is not None else None)


def test_portable_cholesky_and_triangular_solve(portable):
    """The non-CPU formulations (stablehlo.cholesky / triangular_solve via XLA's expanders)
    also compile and agree on CPU. XLA's blocked algorithms round differently: 1e-10."""
    a = spd(2, 5, 5)
    b = general(2, 5, 3)
    f = lambda a, b: (np.linalg.cholesky(a), asl.cho_solve((np.linalg.cholesky(a), True), b),
                      asl.solve_triangular(a, b, trans=1, lower=False, unit_diagonal=True))
    expected = (onp.linalg.cholesky(a), sla.cho_solve((onp.linalg.cholesky(a), True), b),
                sla.solve_triangular(a, b, trans=1, unit_diagonal=True))
    jf = jit_ps(f)
    assert_close(jf(a, b), expected, rtol=1e-10)
    text = jf.stablehlo(a, b)
    assert "stablehlo.cholesky" in text and "stablehlo.triangular_solve" in text and "lapack" not in text
    bad = jit_ps(lambda a: np.linalg.cholesky(a))(onp.stack([a[0], -a[1]]))
    assert not onp.isnan(bad[0]).any() and onp.isnan(bad[1]).all()


def test_portable_lu_family(portable):
    """det, slogdet, inv, solve and solve_banded through the pivoted LU loop (matrix_power
    with n < 0 is inv, a vector right-hand side a reshape: the CPU tests cover those). The
    batch holds matrices needing row swaps (zero leading entries) and a singular one: exact
    zero determinant, NaN inverse and solution, as on CPU."""
    a = onp.stack([well(3, 3), well(3, 3, seed=1), [[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [4.0, 5.0, 0.0]],
                   [[0.0, 0.0, 1.0], [0.0, 2.0, 0.0], [3.0, 0.0, 0.0]], [[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]])
    b, ab = general(5, 3, 2, seed=1), banded(1, 2, 5)
    f = lambda a, b, ab: (np.linalg.det(a), np.linalg.slogdet(a), np.linalg.inv(a), np.linalg.solve(a, b),
                          asl.solve_banded((1, 2), ab, general(5, 2, seed=2)))
    jf = jit_ps(f)
    (det, (sign, logdet), inv, x, xb) = jf(a, b, ab)
    assert_close((det, sign, logdet, xb), (onp.linalg.det(a), *onp.linalg.slogdet(a),
                                           sla.solve_banded((1, 2), ab, general(5, 2, seed=2))))
    assert det[-1] == 0 and sign[-1] == 0 and logdet[-1] == -onp.inf
    assert onp.isnan(inv[-1]).all() and onp.isnan(x[-1]).all()
    assert_close((inv[:-1], x[:-1]), (onp.linalg.inv(a[:-1]), onp.linalg.solve(a[:-1], b[:-1])))
    assert "lapack" not in jf.stablehlo(a, b, ab)


@pytest.mark.parametrize("dtype", [F32, C128])
def test_portable_lu_dtypes(portable, dtype):
    portable_value(lambda a, b: (np.linalg.slogdet(a), np.linalg.solve(a, b)), well(2, 4, 4, dtype=dtype),
                   general(2, 4, 3, dtype=dtype, seed=1))


def test_portable_lu_grads(portable):
    f = lambda a, b, ab: cat(np.linalg.det(a), np.linalg.slogdet(a)[1], np.linalg.inv(a), np.linalg.solve(a, b),
                             asl.solve_banded((1, 1), ab, b[:, 0]))
    check_grad_joint(f, well(4, 4), general(4, 2), banded(1, 1, 4), both_ways=False)
    check_grad(np.linalg.inv, well(3, 3, dtype=F32), rtol=1e-4, both_ways=False)


@pytest.mark.parametrize("dtype", [F64, F32, C128, C64])
def test_portable_eigh(portable, dtype):
    """Cyclic Jacobi; odd n (5) exercises the padding. Only the UPLO triangle is read."""
    h = general(2, 5, 5, dtype=dtype)
    sym = (h + onp.conj(onp.swapaxes(h, -1, -2))) / 2
    low, up = onp.tril(sym) + 5 * onp.triu(onp.ones((5, 5)), 1), onp.triu(sym) - 5 * onp.tril(onp.ones((5, 5)), -1)
    jf = jit_ps(lambda a, b: (np.linalg.eigh(a), np.linalg.eigvalsh(b, UPLO="U")))
    (w, v), values = jf(low.astype(dtype), up.astype(dtype))
    w0, v0 = onp.linalg.eigh(sym)
    assert w.dtype == w0.dtype and v.dtype == v0.dtype
    assert_close((w, values), (w0, w0))
    assert_close(fix_phase(v), fix_phase(v0))
    assert "lapack" not in jf.stablehlo(low.astype(dtype), up.astype(dtype))


def test_portable_eigh_special_and_grads(portable):
    """Repeated eigenvalues (any orthonormal basis of the eigenspace), a zero matrix, tiny
    and huge scales (Jacobi runs on a / max|a|), and autograd's VJP."""
    q = onp.linalg.qr(general(4, 4))[0]
    special = onp.stack([q @ onp.diag([1.0, 1.0, 1.0, 2.0]) @ q.T, onp.zeros((4, 4)),
                         spd(4, 4) * TINY, spd(4, 4, seed=1) * HUGE])
    w, v = jit_ps(np.linalg.eigh)(special)
    assert_close(w, onp.linalg.eigvalsh(special))
    scale = onp.abs(special).max(axis=(-2, -1), initial=1e-300)[:, None, None]
    assert_close(v @ (w[..., None] * onp.swapaxes(v, -1, -2)) / scale, special / scale, atol=1e-14)
    f = lambda x: np.linalg.eigh(x)[0] + np.sum(np.abs(np.linalg.eigh(x)[1]), axis=-2)
    a = general(2, 3, 3)
    check_grad(f, a + onp.swapaxes(a, -1, -2), both_ways=False)


@pytest.mark.parametrize("dtype", [F64, C128])
def test_portable_svd_qr(portable, dtype):
    """One-sided Jacobi SVD (tall; wide through A^H), U completed by Householder QR; qr from
    XLA's expander, which keeps LAPACK's sign conventions, so Q and R compare directly."""
    shapes = [(2, 4, 3), (3, 5)] if dtype == F64 else [(2, 4, 3)]
    args = [general(*shape, dtype=dtype, seed=i) for i, shape in enumerate(shapes)]
    f = lambda x: (np.linalg.svd(x), np.linalg.qr(x, mode="complete"))
    jf = jit_ps(lambda *xs: tuple(f(x) for x in xs))
    for ((u, s, vh), qr), a in zip(jf(*args), args):
        (u0, s0, vh0), qr0 = f(a)
        assert (u.shape, vh.shape, u.dtype, s.dtype) == (u0.shape, vh0.shape, u0.dtype, s0.dtype)
        assert_close((s, qr), (s0, qr0))
        k = s0.shape[-1]  # the first k singular vectors are unique up to phase; the rest: unitarity
        assert_close(fix_phase(u[..., :k]), fix_phase(u0[..., :k]))
        assert_close(fix_phase(onp.conj(onp.swapaxes(vh, -1, -2))[..., :k]),
                     fix_phase(onp.conj(onp.swapaxes(vh0, -1, -2))[..., :k]))
        for m in (u, vh):
            assert_close(onp.conj(onp.swapaxes(m, -1, -2)) @ m, onp.broadcast_to(onp.eye(m.shape[-1]), m.shape),
                         atol=10 * onp.finfo(s.dtype).eps, check_dtype=False)
    assert "lapack" not in jf.stablehlo(*args)


def test_portable_svd_family_and_special(portable):
    """pinv and the 'nuc' norm (svd without vectors, as svdvals) on the Jacobi SVD; zero
    singular values (U stays unitary: QR completes the basis), zero and tiny matrices; NaN
    in, NaN out (numpy: LinAlgError), as on CPU."""
    x = general(2, 3, 4, seed=2)
    low_rank = general(4, 2) @ general(2, 4, seed=1)
    zero_col = general(4, 4, seed=2)
    zero_col[:, 1] = 0
    special = onp.stack([low_rank, zero_col, onp.zeros((4, 4)), general(4, 4, seed=3) * TINY,
                         onp.full((4, 4), onp.nan)])
    f = lambda x, special: ((np.linalg.pinv(x), np.linalg.norm(x[0], "nuc")), np.linalg.svd(special))
    values, (u, s, vh) = jit_ps(f)(x, special)
    assert_close(values, f(x, special[:1])[0])
    assert all(onp.isnan(r[-1]).all() for r in (u, s, vh))
    u, s, vh, special = u[:-1], s[:-1], vh[:-1], special[:-1]
    for got, a in zip(s, special):
        assert_close(got, onp.linalg.svdvals(a), atol=1e-14 * onp.abs(a).max())
    eye = onp.broadcast_to(onp.eye(4), special.shape)
    assert_close((onp.swapaxes(u, -1, -2) @ u, vh @ onp.swapaxes(vh, -1, -2)), (eye, eye), atol=1e-14)
    scale = onp.abs(special).max(axis=(-2, -1), initial=1e-300)[:, None, None]
    assert_close((u * s[..., None, :]) @ vh / scale, special / scale, atol=1e-14)


def test_portable_svd_grads(portable):
    """autograd's VJPs run on the portable values (real matrices: the backward passes are the
    same code for complex ones, whose values the tests above check)."""
    def f(x):
        u, s, vh = np.linalg.svd(x, full_matrices=False)
        return s + np.sum(np.abs(u), axis=-2) + np.sum(vh ** 2 * np.arange(vh.shape[-1]), axis=-1)
    check_grad(lambda b: cat(f(b), np.linalg.norm(b[0], "nuc")), general(2, 3, 5, seed=2), both_ways=False)


@pytest.mark.parametrize("dtype", [F64, C128])
def test_portable_eig(portable, dtype):
    """Complex Schur form by Hessenberg reduction and the shifted QR algorithm, eigenvectors
    by back substitution, normalised like geev (unit norm, largest entry real). With the
    random matrices (real ones have complex eigenvalue pairs) come some that trouble QR
    iterations: a cyclic permutation (needs complex shifts), a Jordan block, diagonal and
    triangular ones (eigenvalues only: some have no eigenvector basis), and NaN (numpy:
    LinAlgError)."""
    special = onp.stack([onp.roll(onp.eye(4), 1, axis=0), onp.diag([1.0, 1.0, 1.0], 1) + 2 * onp.eye(4),
                         onp.diag([3.0, -1.0, 2.0, 0.5]), onp.triu(general(4, 4)), onp.full((4, 4), onp.nan)])
    a = onp.concatenate([general(2, 4, 4, dtype=dtype, seed=5), special.astype(dtype)])
    w, v = jit_ps(np.linalg.eig)(a)
    assert onp.isnan(w[-1]).all() and onp.isnan(v[-1]).all()
    w0, v0 = onp.linalg.eig(a[:-1])
    assert w.dtype == C128 and v.dtype == C128
    w, v = match_eig(w[:-1], v[:-1], w0)
    assert_close(w, w0.astype(C128))
    assert_close(fix_phase(v[:2]), fix_phase(v0[:2]))
    assert_close(onp.linalg.norm(v, axis=-2), onp.ones(w.shape))
    assert_close(a[:-1] @ v, v * w[..., None, :], atol=1e-14)


def test_portable_eig_of_jordan_blocks_in_float32(portable):
    """A Jordan block's eigenvectors in float32 (as a TPU computes): back substitution
    divides by eps |lambda| once per row, so the unnormalised column grows like eps^-(n-1)
    (7e19 for 4 x 4, whose square overflows float32) unless rescaled on the way. Every
    column comes back finite, of unit norm, and an eigenvector: numpy's geev gives the same
    (nearly parallel) columns."""
    blocks = [onp.diag(onp.ones(n - 1), 1) + lam * onp.eye(n) for n, lam in ((4, 2.0), (8, 1.0), (8, 0.0))]
    for a in blocks:
        a32 = a.astype(F32)
        w, v = jit_ps(np.linalg.eig)(a32)
        assert onp.isfinite(v).all()
        assert_close(onp.linalg.norm(v, axis=-2), onp.ones(w.shape, F32))
        assert_close(a32 @ v, v * w[..., None, :], atol=1e-5)
        w64, v64 = jit_ps(np.linalg.eig, x64=False)(a)
        assert onp.isfinite(v64).all() and onp.allclose(onp.linalg.norm(v64, axis=-2), 1, rtol=1e-5)


def test_portable_eig_grads(portable):
    """autograd's VJP, through a function that does not depend on the order of the eigenvalues."""
    def f(x):
        w, v = np.linalg.eig(x)
        return np.sum(np.real(w) ** 2) + np.sum(np.abs(np.imag(w))) + np.sum(np.abs(v) ** 4)
    check_grad(f, general(4, 4, seed=5), both_ways=False)


def test_portable_sqrtm_and_sylvester(portable):
    """Both on the complex Schur form. A real matrix with a negative eigenvalue has no real
    principal root: NaN, as on CPU (detected here by the root's imaginary part), so that call
    runs plainly (the guard of test_sqrtm_needing_complex_result_runs_plainly). Their
    gradients are autograd's VJPs, which solve Sylvester equations: value-checked here, and
    the CPU tests check the VJPs."""
    from autograd_xla import FallbackWarning
    a = onp.stack([spd(4, 4), well(4, 4, seed=1), -spd(4, 4, seed=2)])
    b, q = well(3, 3, seed=3), general(4, 3, seed=4)
    f = jit_ps(lambda a, b, q: (asl.sqrtm(a), asl.solve_sylvester(a[1], b, q)))
    root, x = f(a[:2], b, q)
    assert_close((root, x), (sla.sqrtm(a[:2]), sla.solve_sylvester(a[1], b, q)), rtol=SCHUR_RTOL)
    with pytest.warns(FallbackWarning, match="negative real eigenvalue"):
        root, _ = f(a, b, q)
    assert_close(root, sla.sqrtm(a))


def test_portable_float32(portable):
    """float32 inputs, and float64 ones under x64=False, run the loops in float32 (tolerances
    and iteration limits follow the precision really computed in) and agree with numpy to
    float32 accuracy. (eigh and LU have their own float32 cases above.)"""
    a = general(2, 4, 3, dtype=F32)
    u, s, vh = jit_ps(np.linalg.svd)(a)
    u0, s0, vh0 = onp.linalg.svd(a)
    assert (u.dtype, s.dtype) == (F32, F32)
    assert_close((s, fix_phase(u[..., :3]), fix_phase(onp.swapaxes(vh, -1, -2))),
                 (s0, fix_phase(u0[..., :3]), fix_phase(onp.swapaxes(vh0, -1, -2))))
    b = general(2, 4, 4, seed=5)
    f = lambda b: (np.linalg.det(b), np.linalg.eig(b))
    jf = jit_ps(f, x64=False)
    det, (w, v) = jf(b)
    w0, v0 = onp.linalg.eig(b)
    w, v = match_eig(w, v, w0)
    assert (det.dtype, w.dtype) == (F32, C64)
    assert_close((det, w, fix_phase(v)), (onp.linalg.det(b).astype(F32), w0.astype(C64), fix_phase(v0).astype(C64)))
    assert "f64" not in jf.stablehlo(b)
