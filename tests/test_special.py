"""autograd.scipy.special under jit_ps: values against scipy (float64 and float32,
broadcasting, 0-d and empty), gradients against plain autograd both ways round, forward
mode where autograd defines it (logsumexp), and accuracy sweeps over wide domains (edges
included) of the functions whose numerics are written here.

Every test here lowers as non-CPU platforms do (rules/special.py's FORCE_PORTABLE): the
portable algorithms, which on the CPU give way to scipy's own loops (test_special_loops.py).

XLA compiles each copy of a loop-based function (incomplete gamma and beta, Bessel) in
about a second, so each is compiled few times: one sweep program for values and edges,
one gradient each way; the shape cases (0-d, empty, broadcasting, Python scalars, float32)
go through the shared ufunc rule and each loop helper once.
"""
import warnings

import numpy as onp
import pytest
import scipy.special as sc
import autograd.numpy as anp
from autograd import grad, hessian_tensor_product, make_jvp

import autograd.scipy.special as sp
from autograd_xla import jit_ps, registry, scan, tiering, vmap
from autograd_xla.rules import special as special_rules
from helpers import (NARROW, TOL_32, TPU_RTOL, TPU_SWEEP_RTOL, assert_close, check, check_falls_back, check_grad,
                     check_value, dtypes_of, relative_32, representable_32, scalarize)

F64, F32 = onp.float64, onp.float32
rs = onp.random.RandomState(0)


@pytest.fixture(autouse=True)
def _portable(monkeypatch):
    monkeypatch.setattr(special_rules, "FORCE_PORTABLE", True)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def assert_rel(got, expected, rtol, floor=0.0):
    """|got - expected| <= rtol * max(|expected|, floor) elementwise, with nan and inf where
    scipy has them. A floor of ~1e-290 makes subnormal results (where XLA's exp and
    products keep fewer digits, or flush to zero) compare absolutely."""
    got, expected = onp.asarray(got), onp.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.dtype,
                                                                        expected.shape)
    rtol, floor = relative_32(rtol, expected, onp.broadcast_to(floor, expected.shape))  # (the platform's
    kept = representable_32(expected)                                                   # precision, range)
    got, expected, floor = got[kept], expected[kept], floor[kept]
    finite = onp.isfinite(expected)
    onp.testing.assert_array_equal(onp.isnan(got), onp.isnan(expected), err_msg="nan positions")
    onp.testing.assert_array_equal(got[onp.isinf(expected)], expected[onp.isinf(expected)], err_msg="infinities")
    err = onp.abs(got[finite] - expected[finite])
    bound = rtol * onp.maximum(onp.abs(expected[finite]), onp.broadcast_to(floor, expected.shape)[finite])
    bad = err > bound
    assert not bad.any(), (f"{bad.sum()} elements off; worst relative error "
                           f"{onp.max(err / onp.maximum(onp.abs(expected[finite]), 1e-300)):.3g}")


def check_grads(f, *args, argnums=(0,), both_ways=True):
    """Gradient with respect to all of argnums at once, in one program each way."""
    s = scalarize(f)
    expected = grad(s, tuple(argnums))(*args)
    assert_close(jit_ps(grad(s, tuple(argnums)))(*args), expected, path="jit(grad)", inputs=dtypes_of(*args))
    if both_ways:
        assert_close(grad(jit_ps(s), tuple(argnums))(*args), expected, path="grad(jit)", inputs=dtypes_of(*args))


def as_computed(a):
    """A float64 input as the platform computes it: rounded to float32 where float64 is
    computed in 32 bits (NARROW; near x = 1 betainc's value moves far more than float32's
    rounding of its result), float32's subnormals flushed to zero as XLA's float32 arithmetic
    does (erfcinv(1e-40) is infinite there), else itself."""
    a = onp.asarray(a)
    if not (NARROW and a.dtype == onp.float64):
        return a
    a32 = a.astype(onp.float32)
    return onp.where(onp.abs(a32) < onp.finfo(onp.float32).tiny, onp.copysign(0.0, a32), a32).astype(a.dtype)


def sweep_check(f, ref, *args, rtol=1e-12, floor=1e-290):
    got, expected = jit_ps(f)(*args), ref(*map(as_computed, args))
    if isinstance(expected, tuple):
        for g, e in zip(got, expected):
            assert_rel(g, e, rtol, floor)
    else:
        assert_rel(got, expected, rtol, floor)


EDGE = onp.array([0.0, -0.0, -1.0, -2.0, -0.5, 1.0, 171.5, 1e5, onp.inf, -onp.inf, onp.nan])


# ----- one-argument functions ----------------------------------------------------------------
CHEAP = {
    "gammaln": (sp.gammaln, sc.gammaln, [-3.7, -0.5, 0.3, 1.5, 7.2, 30.0]),
    "digamma": (sp.digamma, sc.digamma, [-3.7, -0.5, 0.3, 1.5, 7.2, 30.0]),
    "psi": (sp.psi, sc.psi, [-2.2, -0.7, 0.01, 1.0, 4.5, 90.0]),
    "gamma": (sp.gamma, sc.gamma, [-2.5, -0.3, 0.4, 1.7, 5.5, 20.0]),
    "rgamma": (sp.rgamma, sc.rgamma, [-2.5, -0.3, 0.4, 1.7, 5.5, 20.0]),
    "gammasgn": (sp.gammasgn, sc.gammasgn, [-2.5, -1.5, -0.3, 0.4, 3.0, 7.7]),
    "erf": (sp.erf, sc.erf, [-2.1, -0.3, 0.0, 0.5, 1.7, 3.2]),
    "erfc": (sp.erfc, sc.erfc, [-2.1, -0.3, 0.0, 0.5, 1.7, 3.2]),
    "erfinv": (sp.erfinv, sc.erfinv, [-0.9, -0.3, 0.0, 0.2, 0.7, 0.99]),
    "erfcinv": (sp.erfcinv, sc.erfcinv, [0.05, 0.4, 1.0, 1.3, 1.9, 1e-5]),
    "expit": (sp.expit, sc.expit, [-30.0, -2.0, 0.0, 0.5, 3.0, 40.0]),
    "logit": (sp.logit, sc.logit, [0.01, 0.2, 0.5, 0.6, 0.9, 0.999]),
    "i1": (sp.i1, sc.i1, [-3.3, 0.3, 1.7, 9.5, 26.0, 40.0]),
}
BESSEL = {
    "j0": (sp.j0, sc.j0, [-3.3, 0.3, 1.7, 9.5, 26.0, 40.0]),
    "j1": (sp.j1, sc.j1, [-3.3, 0.3, 1.7, 9.5, 26.0, 40.0]),
    "y0": (sp.y0, sc.y0, [0.1, 0.3, 1.7, 9.5, 26.0, 40.0]),
    "y1": (sp.y1, sc.y1, [0.1, 0.3, 1.7, 9.5, 26.0, 40.0]),
    "i0": (sp.i0, sc.i0, [-3.3, 0.3, 1.7, 9.5, 26.0, 40.0]),
}
EDGE_NAMES = {"gammaln", "digamma", "psi", "gamma", "rgamma", "gammasgn", "erf", "erfc", "expit", "i1"}
#: The ones XLA's lgamma and digamma compute: on a TPU its log1p's error (helpers.TPU_RTOL).
LANCZOS = {"gammaln", "digamma", "psi", "gamma", "rgamma"}


@pytest.mark.parametrize("name", CHEAP)
def test_unary(name):
    """Values on (2, 3), 0-d, size-1, empty and the edges of the domain, then gradients."""
    f, ref, values = CHEAP[name]
    v = onp.asarray(values)
    xs = (v.reshape(2, 3), v[0].copy(), v[:1].copy(), onp.zeros((0, 3))) + ((EDGE,) if name in EDGE_NAMES else ())
    got = jit_ps(lambda xs: tuple(f(x) for x in xs))(xs)
    rtol = (TPU_RTOL if name in LANCZOS else None) or 1e-12
    for g, x in zip(got, xs):
        assert_rel(g, ref(x), rtol, floor=1e-290)
    check_grad(f, v.reshape(2, 3))


def test_a_32_bit_platform_compares_near_zeros_at_the_results_scale(monkeypatch):
    """assert_rel on a 32-bit platform (helpers.relative_32): TOL_32 of the largest finite
    result float32 holds, as assert_close's tolerance; on the CPU the test's own."""
    import helpers
    monkeypatch.setattr(helpers, "NARROW", True)
    rtol, floor = relative_32(1e-12, onp.array([0.0365, -3.5, onp.inf, 1e39]), onp.full(4, 1e-290))
    assert rtol == TOL_32[onp.dtype(F64)] and (floor == 3.5).all()
    monkeypatch.setattr(helpers, "NARROW", False)
    assert relative_32(1e-12, onp.array([0.0365, -3.5]), 1e-290) == (1e-12, 1e-290)


# scipy.special functions that autograd does not wrap: called on traced values they compile
# too (values only: autograd has no derivative for them)
UNWRAPPED = {
    "exprel": (sc.exprel, [-800.0, -30.0, -1.0, -1e-300, 0.0, 1e-300, 1e-10, 0.5, 3.0, 700.0, 710.0]),
}


@pytest.mark.parametrize("name", UNWRAPPED)
def test_unwrapped_scipy_special(name):
    ref, values = UNWRAPPED[name]
    x = onp.array(values + [onp.inf, -onp.inf, onp.nan])
    assert_rel(jit_ps(ref, fallback="error")(x), ref(x), 1e-14)
    assert_rel(jit_ps(ref, fallback="error")(x.astype(onp.float32)), ref(x.astype(onp.float32)), 1e-6)


SWEEP_X = onp.concatenate([onp.linspace(-30, 30, 241), 10 ** onp.linspace(-8, 3, 45), -(10 ** onp.linspace(-8, 2, 21)),
                           EDGE])


@pytest.mark.parametrize("name", BESSEL)
def test_bessel_unary(name):
    f, ref, values = BESSEL[name]
    # scipy's own J/Y lose ~1e-12 at x ~ 1e3..1e5 (checked against mpmath); ours are closer.
    # J and Y oscillate, so their error is measured against the envelope sqrt(2/(pi x)).
    floor = onp.minimum(1.0, onp.sqrt(2 / (onp.pi * onp.abs(SWEEP_X) + 1e-300))) if name[0] in "jy" else 1e-290
    sweep_check(f, ref, SWEEP_X, rtol=5e-12 if name[0] in "jy" else 1e-12, floor=floor)
    check_grad(f, onp.asarray(values).reshape(2, 3), both_ways=name == "j1")


def test_unary_float32_and_other_inputs():
    """float32 in, float32 out (computed in float64 and rounded, as scipy's float loops
    do); Python scalars, ints, 0-d and empty arrays through the loop-based rules."""
    names = ["gammaln", "digamma", "gamma", "erf", "erfinv", "erfcinv", "expit", "logit", "i1", "j1"]
    table = {**CHEAP, **BESSEL}
    xs = [onp.asarray(table[n][2], F32) for n in names]
    got = jit_ps(lambda xs: tuple(table[n][0](x) for n, x in zip(names, xs)))(xs)
    for n, g, x in zip(names, got, xs):
        expected = table[n][1](x)
        assert g.dtype == expected.dtype == F32, n
        assert_close(g, expected, rtol=2e-6, path=n)
    check_value(lambda x: sp.gammaln(x), 2.5, rtol=TPU_RTOL)
    check_value(lambda x: sp.erf(x), onp.arange(4))                               # int64 -> float64
    check_value(lambda x: sp.expit(x), onp.arange(-2, 2, dtype=onp.int32))
    # 0-d and empty through each loop-based family (Miller, Y recurrence, I series)
    check_value(lambda x, e: (sp.jn(1.5, x), sp.yn(2, e), sp.iv(0.5, e)), onp.float64(2.5), onp.zeros((0, 3)),
                rtol=TPU_RTOL)


def test_complex_input_is_rejected():
    check_falls_back(sp.gamma, onp.ones(2, complex), error=NotImplementedError, match="complex")


_RE = onp.concatenate([-onp.logspace(-8, 1.5, 25)[::-1], [0.0], onp.logspace(-8, 1.5, 25)])
COMPLEX_GRID = (_RE[:, None] + 1j * _RE[None, :]).ravel()


@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_erf_complex(name):
    """Complex erf/erfc (Taylor series for |z| <= 2, else exp(-z^2) w(iz) by algorithm
    680) against scipy on a grid spanning 1e-8 .. 30 in both parts, both signs, the axes;
    max relative error (complex modulus) ~1e-13."""
    f, ref = getattr(sp, name), getattr(sc, name)
    # (on a 32-bit platform: at the complex64 inputs it computes on, relative to float32's
    # precision, where the value fits float32)
    grid = COMPLEX_GRID.astype(onp.complex64).astype(onp.complex128) if NARROW else COMPLEX_GRID
    with onp.errstate(all="ignore"):
        expected = ref(grid)
    got = jit_ps(f)(COMPLEX_GRID)
    assert got.dtype == onp.complex128
    fin = onp.isfinite(expected)
    compared = fin & representable_32(onp.abs(expected))
    rtol = max(5e-13, TOL_32[onp.dtype(onp.complex128)]) if NARROW else 5e-13
    assert onp.all(onp.abs(got - expected)[compared] <= rtol * onp.abs(expected)[compared])
    assert not onp.any(onp.isfinite(got[~fin]))
    z = onp.array([0.3 + 0.4j, -1.2 + 2.5j, 3.0 - 0.7j, -0.05 - 4.0j])
    check(f, z)                    # with autograd's VJP 2/sqrt(pi) exp(-z^2), complex
    check_value(f, z.astype(onp.complex64))


# ----- functions of two or three arguments ---------------------------------------------------
A = onp.array([[0.3, 1.5, 4.0], [12.0, 0.7, 2.2]])
X = onp.array([[0.2, 2.5, 3.1], [10.0, 0.05, 6.0]])


def test_broadcasting_scalars_and_float32():
    """The shared ufunc rule: broadcasting, Python and 0-d scalars, empty, float32, mixed (all
    built on lgamma: on a TPU at its precision, helpers.TPU_RTOL)."""
    r = TPU_RTOL
    check_value(sp.beta, A[:, :1], X[0] + 0.5, rtol=r)
    check_value(sp.betaln, 2.0, onp.float64(0.5), rtol=r)
    check_value(sp.betaln, A[:0], X[:0])
    check_value(sp.beta, A.astype(F32), X.astype(F32) + 0.5, rtol=r)
    check_value(sp.beta, A.astype(F32), X + 0.5, rtol=r)                         # float32 with float64
    check_value(lambda a, x: (sp.gammainc(a, x), sp.gammaincc(a, x)), A[:, :1], X[0], rtol=r)
    check_value(lambda a, x: (sp.gammainc(a, x), sp.gammaincc(a, x)), onp.zeros((0, 3)), 2.0)
    check_value(lambda x: (sp.betainc(2.0, 3.0, x), sp.betainc(x, x, 0.25)), onp.float64(0.4), rtol=r)
    check_value(lambda a, x: (sp.gammainc(a, x), sp.betainc(a, a, x / 20)), A.astype(F32), X.astype(F32), rtol=r)


@pytest.mark.parametrize("f", [sp.gammainc, sp.gammaincc])
def test_incomplete_gamma(f):
    check(f, A, X, argnums=(1,))                         # autograd differentiates x only


@pytest.mark.parametrize("f", [sp.beta, sp.betaln])
def test_beta(f):
    check_value(f, A, X + 0.5)
    check_grads(f, A, X + 0.5, argnums=(0, 1))


def test_betainc():
    x = onp.array([[0.1, 0.5, 0.9], [0.3, 0.99, 0.6]])
    check(sp.betainc, A, X + 0.5, x, argnums=(2,))


ORDERS = onp.array([[0.0, 1.0, 2.5], [-1.5, 5.0, 0.25]])
XB = onp.array([[0.4, 2.7, 7.3], [30.0, 12.5, 0.9]])


@pytest.mark.parametrize("name", ["jn", "yn", "iv", "ive"])
def test_bessel_order(name):
    """Gradients at integer and (except yn) fractional and negative orders: the VJPs need
    order n +- 1. (Values: the sweeps below.)"""
    f = getattr(sp, name)
    orders = onp.round(ORDERS) if name == "yn" else ORDERS
    check_grad(f, orders, XB, argnums=(1,), both_ways=name in ("jn", "iv"))


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_polygamma(n):
    x = onp.array([[-3.7, -0.5, 0.3], [1.5, 7.2, 30.0]])
    check(lambda x: sp.polygamma(n, x), x, both_ways=n < 2)


def test_polygamma_dtypes_and_shapes():
    check_value(sp.polygamma, onp.array([0, 1, 2]), onp.array([[0.5], [2.5]]))
    assert jit_ps(sp.polygamma)(1, F32(2.0)).dtype == sc.polygamma(1, F32(2.0)).dtype == F64
    assert jit_ps(sp.polygamma)(F32(1), F32(2.0)).dtype == F32
    check_value(sp.polygamma, 1, onp.zeros((0, 2)))


def test_multigammaln():
    a = onp.array([[3.0, 4.5], [2.2, 10.0]])
    check(lambda a: sp.multigammaln(a, 3), a)
    check_value(lambda a: sp.multigammaln(a, 1), F32(2.5), rtol=TPU_RTOL)  # (lgamma(2.5): helpers.TPU_RTOL)
    check_value(sp.multigammaln, a, onp.int64(3), rtol=TPU_RTOL)  # d is needed concretely: it is made static


# ----- logsumexp -----------------------------------------------------------------------------
LSE_CASES = [dict(), dict(axis=0), dict(axis=1, keepdims=True), dict(axis=(0, 1)), dict(axis=-1, keepdims=True)]


@pytest.mark.parametrize("kw", LSE_CASES, ids=str)
def test_logsumexp(kw):
    a = rs.randn(3, 4)
    f = lambda a: sp.logsumexp(a, **kw)  # noqa: E731
    check(f, a)
    v = rs.randn(3, 4)
    assert_close(jit_ps(lambda a, v: make_jvp(f)(a)(v))(a, v), make_jvp(f)(a)(v), path="jit(jvp)")
    assert_close(make_jvp(jit_ps(f))(a)(v), make_jvp(f)(a)(v), path="jvp(jit)")


@pytest.mark.parametrize("kw", LSE_CASES, ids=str)
def test_logsumexp_second_derivatives(kw):
    own = onp.random.RandomState(1)  # draws of its own: the sweeps below keep theirs
    a, v = own.randn(3, 4), own.randn(3, 4)
    f = lambda a: anp.sum(anp.sin(sp.logsumexp(a, **kw)))  # noqa: E731
    hvp = hessian_tensor_product(f)
    assert_close(jit_ps(hvp, fallback="error")(a, v), hvp(a, v), path="jit(hvp)")
    jvp_of_grad = lambda a, v: make_jvp(grad(f))(a)(v)[1]  # noqa: E731
    assert_close(jit_ps(jvp_of_grad, fallback="error")(a, v), jvp_of_grad(a, v), path="jit(jvp(grad))")


@pytest.mark.parametrize("dtype", [F64, F32])
def test_logsumexp_derivatives_take_the_forward_passs_exponentials(dtype):
    """autograd's VJP and JVP of logsumexp take exp(x - ans) anew; under jit_ps they divide
    the forward pass's terms by their sum (compositions/special.py), so that XLA's CSE leaves
    one exponential per term: in a loop's step, the gradient saves its residual from them."""
    own = onp.random.RandomState(2)
    a, v = own.randn(5, 7).astype(dtype), own.randn(5, 7).astype(dtype)
    f = lambda a: anp.sum(anp.sin(sp.logsumexp(a, axis=0)))  # noqa: E731
    jvp = lambda a, v: make_jvp(f)(a)(v)[1]  # noqa: E731
    for name, fun, args in (("grad", grad(f), (a,)), ("jvp", jvp, (a, v))):
        jf = jit_ps(fun, fallback="error")
        assert_close(jf(*args), fun(*args), path=name)
        assert jf.optimized_hlo(*args).count(" exponential(") == 1, name

    def hmm(log_a, log_alpha):
        step = lambda alpha, _: (sp.logsumexp(alpha[:, None] + log_a, axis=0), 0.0)  # noqa: E731
        return anp.sum(scan(step, log_alpha, anp.zeros(6))[0])
    g = grad(hmm)
    jg = jit_ps(g, fallback="error")
    log_a, alpha = own.randn(4, 4).astype(dtype), own.randn(4).astype(dtype)
    assert_close(jg(log_a, alpha), g(log_a, alpha), path="grad(scan)")
    assert jg.optimized_hlo(log_a, alpha).count(" exponential(") == 1


def test_logsumexp_weights_and_sign():
    a = rs.randn(3, 4)
    b = rs.rand(3, 4)
    check(lambda a, b: sp.logsumexp(a, axis=1, b=b), a, b, argnums=(0,))       # autograd: d/da only
    signed = onp.array([1.0, -1.0, 2.0, 0.5])
    check_value(lambda a: sp.logsumexp(a, axis=1, b=signed), a)                  # nan where the sum is < 0
    check_value(lambda a: sp.logsumexp(a, axis=1, b=signed, return_sign=True), a)
    b3 = rs.rand(2, 3, 4)
    check_value(lambda a: sp.logsumexp(a, axis=0, b=b3), a)                      # b broadcasts a up
    check_value(lambda a: sp.logsumexp(a, b=onp.array([0.0, 0.0, 1.0])), onp.array([onp.inf, onp.nan, 1.0]))
    check_value(lambda a: sp.logsumexp(a, axis=1), onp.ones((2, 0)))
    check_value(lambda a: sp.logsumexp(a, axis=0, keepdims=True), onp.ones((0, 2)))


@pytest.mark.parametrize("a", [onp.array([-onp.inf, -onp.inf]), onp.array([onp.inf, 1.0]), onp.array([onp.inf, -onp.inf]),
                               onp.array([onp.nan, 1.0]), onp.float64(2.0), onp.array([1.0, -40.0, -800.0]),
                               onp.ones(3, F32), onp.arange(3)], ids=repr)
def test_logsumexp_edges(a):
    check_value(sp.logsumexp, a)
    if a.dtype.kind == "f":
        check_grad(lambda a: sp.logsumexp(a, **({} if a.ndim == 0 else {"axis": 0})), a)


def test_logsumexp_rejects_complex():
    check_falls_back(sp.logsumexp, onp.ones(3, complex), error=NotImplementedError, match="complex")


# ----- accuracy sweeps of the hand-written numerics, edges included --------------------------
def test_inverse_function_sweeps():
    tail = 1 - 10 ** onp.linspace(-15, -1, 60)           # XLA's erf_inv alone: 8.8e-11 at 1 - 6e-9
    x = onp.concatenate([onp.linspace(-1.1, 1.1, 221), tail, -tail, [-1.0, 1.0, onp.nan]])
    sweep_check(sp.erfinv, sc.erfinv, x, rtol=1e-14)
    y = onp.concatenate([10 ** rs.uniform(-300, 0, 300), rs.uniform(0, 2, 200),
                         [0.0, 2.0, 1.0, -1.0, 3.0, onp.nan, 2 - 1e-16]])
    sweep_check(sp.erfcinv, sc.erfcinv, y, rtol=1e-14)
    p = onp.concatenate([onp.linspace(-0.1, 1.1, 121), 10.0 ** -onp.arange(1, 300, 10), 0.5 + 10.0 ** -onp.arange(2, 13),
                         [0.0, 1.0, onp.nan]])
    sweep_check(sp.logit, sc.logit, p, rtol=1e-14)


def test_incomplete_gamma_sweep():
    a = onp.concatenate([rs.uniform(0, 5, 300), rs.uniform(0, 60, 200), 10 ** rs.uniform(-8, 2.5, 200),
                         [0, 0, 1, 1, -1, 1, onp.inf, 2, 0, onp.nan, 1e-300]])
    x = onp.concatenate([rs.uniform(0, 5, 300), rs.uniform(0, 80, 200), a[500:700] * 10 ** rs.uniform(-0.5, 0.5, 200),
                         [0, 1, 0, onp.inf, 1, -1, 1, onp.nan, onp.inf, 1, 1]])
    # a up to ~300 here: past a ~ 1e3 scipy itself drifts by ~1e-12 (checked against mpmath)
    # far below the mode, a = 30..60 and x = 1e-4..1e-2 (was 1.5e-9 off: 1 + (x - a)/a)
    far_a, far_x = (v.ravel() for v in onp.meshgrid(onp.linspace(30, 60, 7), 10 ** onp.linspace(-4, -2, 7)))
    a, x = onp.concatenate([a, far_a]), onp.concatenate([x, far_x])
    sweep_check(sp.gammainc, sc.gammainc, a, x, rtol=TPU_SWEEP_RTOL or 1e-12)
    sweep_check(sp.gammaincc, sc.gammaincc, a, x, rtol=TPU_SWEEP_RTOL or 1e-12)


def test_gammaln_and_digamma_near_their_zeros():
    """XLA's lgamma and digamma keep an absolute accuracy only near their zeros (lgamma's at
    1 and 2: 1.8e-12 relative 0.0025 away; digamma's at 1.4616: 1e-12): series there. For
    lgamma the identity lgamma(2 + d) - lgamma(1 + d) = log1p(d), free of cancellation, is
    the oracle (scipy's own gammaln is off by up to 9e-14 there, checked against mpmath);
    digamma is scipy's, whose series about the root this is."""
    d = onp.concatenate([onp.arange(-97, 98) / 512, [2.0 ** -30, -(2.0 ** -40)]])   # 1 + d, 2 + d exact
    lg = jit_ps(lambda d: (sp.gammaln(2.0 + d), sp.gammaln(1.0 + d)))(d)
    assert_rel(lg[0] - lg[1], onp.log1p(d), TPU_RTOL or 4e-15)  # (on a TPU: its own log1p, helpers.TPU_RTOL)
    assert lg[0][d == 0] == 0 and lg[1][d == 0] == 0   # lgamma(2) = lgamma(1) = 0 (XLA's: 8.9e-16)
    x = 1.4616321449683622 + onp.concatenate([onp.linspace(-0.29, 0.29, 59), [0.0, 1e-10, -3e-13]])
    assert_rel(jit_ps(sp.digamma)(x), sc.digamma(x), 1e-14)


def test_digamma_where_its_reflection_meets_the_root():
    """For x < 0.5 XLA's digamma reflects to digamma(1 - x), near the root for x in
    (-0.76, -0.16): there the root's series and pi cot(pi x) from an exact reduction (no XLA
    tan) are used. Measured on the CPU: 2.8e-13 relative before (1.2e-14 now) in float64,
    7.7e-4 (1.4e-5) in float32 near the negative zero at -0.504; on a TPU digamma(-0.5)
    came 1.4e-4 relative off."""
    x = onp.concatenate([onp.linspace(-0.76, -0.165, 120), [-0.5, -0.25, -0.75]])
    assert_rel(jit_ps(sp.digamma)(x), sc.digamma(x), 5e-14)
    x32 = x.astype(F32)
    got = jit_ps(sp.digamma, x64=False)(x32.astype(F64))
    onp.testing.assert_allclose(got, sc.digamma(x32.astype(F64)), rtol=3e-5)
    assert abs(jit_ps(sp.digamma, x64=False)(onp.array([-0.5]))[0] / sc.digamma(-0.5) - 1) < 1e-6


def test_incomplete_beta_sweep():
    a = onp.concatenate([rs.uniform(0, 5, 300), rs.uniform(0, 50, 200), 10 ** rs.uniform(-8, 2.5, 200),
                         [0, 0, 1, 1, -1, 2, 0, 2, onp.inf, 1, 0.5, onp.inf]])
    b = onp.concatenate([rs.uniform(0, 5, 300), rs.uniform(0, 50, 200), 10 ** rs.uniform(-8, 2.5, 200),
                         [1, 0, 0, 1, 1, 2, 0, 3, 1, 1, 0.5, onp.inf]])
    x = onp.concatenate([rs.uniform(0, 1, 700), [0.5, 0.5, 0.5, 1.5, 0.5, 0, 0, 1, 0.5, onp.nan, 1.0, 0.5]])
    # a tiny b above the mean and x >= 0.99, where I = 1 - I_{1-x}(b, a) cancels to b's size
    # (betainc(2.23, 9.9e-8, 0.9934) was 5.5e-9 off): a grid over both sides of b = 1e-4
    grid = onp.array(onp.meshgrid([0.02, 0.7, 2.231228456925958, 15.0, 300.0],
                                  [1e-14, 1e-9, 9.904851856022594e-08, 3e-6, 9e-5, 2e-4, 0.3],
                                  [0.99, 0.9934049651503858, 0.999, 0.99999, 1 - 1e-12])).reshape(3, -1)
    a, b, x = (onp.concatenate([v, g]) for v, g in zip((a, b, x), grid))
    sweep_check(sp.betainc, sc.betainc, a, b, x, rtol=TPU_SWEEP_RTOL or 2e-12)


def test_beta_sweep():
    # betaln: scipy loses ~1e-12 when one argument is ~1e4 times the other (ours is exact to
    # ~1e-16 there against mpmath), so the sweep keeps the ratio moderate
    a = onp.concatenate([rs.uniform(0.1, 5, 300), rs.uniform(0.1, 50, 200),
                         [-0.5, -1.0, 0.0, 1.0, -1.5, onp.inf, -2.0, -3.0, 2.0, -0.5, onp.nan, 0.0]])
    b = onp.concatenate([rs.uniform(0.1, 5, 300), rs.uniform(0.1, 50, 200),
                         [1.0, 2.0, 1.0, 0.0, 0.5, 1.0, 3.0, -1.0, -1.5, -0.5, 1.0, 0.0]])
    sweep_check(lambda a, b: (sp.beta(a, b), sp.betaln(a, b)), lambda a, b: (sc.beta(a, b), sc.betaln(a, b)), a, b,
                rtol=TPU_SWEEP_RTOL or 1e-12)


BESSEL_V = onp.concatenate([onp.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 7.0, 10.5])[rs.randint(0, 11, 500)],
                            [0, 1, 2, 3, -1, -2, 0.5, -0.5, 1.5, 2, 0]])
BESSEL_X = onp.concatenate([rs.uniform(0, 40, 300), 10 ** rs.uniform(-6, 2.5, 200),
                            [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -2.0, -2.0, onp.inf]])
ENVELOPE = onp.minimum(1.0, onp.sqrt(2 / (onp.pi * onp.abs(BESSEL_X) + 1e-300)))


def test_jv_sweep():
    # J oscillates: its error is measured against the envelope sqrt(2/(pi x)), not against
    # the value, which vanishes at the zeros
    sweep_check(sp.jn, sc.jv, BESSEL_V, BESSEL_X, rtol=2e-13, floor=ENVELOPE)


def test_yn_sweep():
    n = onp.round(BESSEL_V)
    expected = sc.yn(n, BESSEL_X)
    sweep_check(sp.yn, sc.yn, n, BESSEL_X, rtol=2e-13, floor=ENVELOPE * onp.maximum(1.0, onp.abs(expected)))


@pytest.mark.parametrize("name", ["iv", "ive"])
def test_iv_sweep(name):
    sweep_check(getattr(sp, name), getattr(sc, name), BESSEL_V, BESSEL_X, rtol=1e-13)


def test_polygamma_sweep():
    x = onp.concatenate([rs.uniform(-12, 0, 300), rs.uniform(0.01, 30, 100), [-1.0, -2.0, 0.0, -0.0]])
    # below zero the recurrence into (0, 1] cancels about as much as the function's own
    # condition number there: 1e-12
    sweep_check(lambda x: tuple(sp.polygamma(n, x) for n in (1, 2, 3)),
                lambda x: tuple(sc.polygamma(n, x) for n in (1, 2, 3)), x)


#: central_difference's step, and the relative tolerance of its result against plain numpy's
#: with the same step: its rounding, not its truncation. In float32 (NARROW) each gammainc is
#: within TOL_32 of values at most 1, and the difference's 18 of them over 12 h are within
#: 1.5 TOL_32 / h; over a step of 1e-4 that was 0.8 of the derivative on a TPU.
H, DIFFERENCE_RTOL = (0.1, 1.5 * TOL_32[onp.dtype(F64)] / 0.1) if NARROW else (1e-4, 1e-10)


def central_difference(f, x, h=H):
    """autograd_gamma's way to differentiate gammainc in `a`: four calls side by side."""
    return (-f(x + 2 * h) + 8 * f(x + h) - 8 * f(x - h) + f(x - 2 * h)) / (12 * h)


def test_independent_calls_of_a_looping_function_are_emitted_as_one(monkeypatch):
    """Calls of gammainc / gammaincc / jv that need no other's result become one call per kind
    and depth (registry.Entry.merge, lowering.schedule): the module has the loops of one
    call each; values are the individual calls' (shapes, broadcasting, Python scalars,
    float32 kept apart, under vmap and grad). A call may wait for others at a later depth,
    not past its first consumer."""
    a, x = A[0], X[0]                                    # 3 elements each
    m = rs.rand(2, 3) * 4 + 0.5

    def f(a, x, m):
        da = central_difference(lambda s: sp.gammainc(s, x), a)
        both = sp.gammainc(2.0, m) + sp.gammainc(3.0, x)   # Python scalars, other shapes
        upper = sp.gammaincc(a, x) * sp.gammaincc(m, x)
        later = sp.gammainc(da * 0 + a, x)                 # needs da: the next depth
        narrow = sp.gammainc(a.astype(F32), x.astype(F32))  # another dtype: a call of its own
        cross = sp.gammainc(x, a) + sp.gammainc(a, x * 2.0)  # depths 1 and 2: both may wait for the differences'
        return da, both, upper, later, narrow, sc.jv(a, x) + sc.jv(a, m), cross

    jitted = jit_ps(f, fallback="error")
    text = jitted.stablehlo(a, x, m)
    one = jit_ps(lambda a, x: sp.gammainc(a, x)).stablehlo(a, x).count("stablehlo.while")
    upper_one = jit_ps(lambda a, x: sp.gammaincc(a, x)).stablehlo(a, x).count("stablehlo.while")
    jv_one = jit_ps(lambda a, x: sc.jv(a, x)).stablehlo(a, x).count("stablehlo.while")
    # gammainc: side by side, with scalars, at the next depth, in float32
    assert text.count("stablehlo.while") == 4 * one + upper_one + jv_one
    merged = jitted(a, x, m)
    for name in ("gammainc", "gammaincc", "jv"):
        monkeypatch.setattr(registry.entry(getattr(sc, name)), "merge", False)
    apart = jit_ps(f, fallback="error")
    assert apart.stablehlo(a, x, m).count("stablehlo.while") == 10 * one + 2 * upper_one + 2 * jv_one
    for got, alone, want, rtol in zip(merged, apart(a, x, m), f(a, x, m), [DIFFERENCE_RTOL] + [TPU_RTOL or 1e-13] * 6):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert_close(got, alone, rtol=1e-15)
        assert_close(got, want, rtol=rtol)    # central differences: XLA's and scipy's last bits, over h
    batched = jit_ps(vmap(lambda a: f(a, x, m)[0]))(onp.stack([a, a + 0.25]))
    assert_close(batched, onp.stack([f(a, x, m)[0], f(a + 0.25, x, m)[0]]), rtol=DIFFERENCE_RTOL)
    g = lambda x: onp.sum(sp.gammainc(a, x) * sp.gammainc(a + 1.0, 2.0 * x))  # noqa: E731
    assert_close(jit_ps(grad(g))(x), grad(g)(x), rtol=TPU_RTOL or 1e-12)


def test_a_hot_signature_tries_its_merged_calls_apart(monkeypatch):
    """A program with merged calls is its signature's first; once hot, the ladder tries the
    program emitting them apart (lowering.APART; here put in use untried), whose loops each
    run only as long as their own elements need."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)
    a, x = A[0], X[0]
    f = jit_ps(lambda a, x: central_difference(lambda s: sp.gammainc(s, x), a))
    first = f(a, x)
    (entry,) = f._cache.values()
    one = jit_ps(lambda a, x: sp.gammainc(a, x)).stablehlo(a, x).count("stablehlo.while")
    assert entry.lowered.merged and entry.lowered.text.count("stablehlo.while") == one
    for _ in range(4):  # each call past the rent starts the next step
        f(a, x)
        assert tiering.compile_thread.wait(60)
    assert entry.ladder is None and entry.lowered.variant["merge"] is False
    assert entry.lowered.text.count("stablehlo.while") == 4 * one
    assert_close(f(a, x), first, rtol=1e-10)  # the emitters' last bits, over the difference's h


def test_loops_computed_in_32_bits_keep_their_scales():
    """float64 computed in float32 (x64=False, as a TPU computes it): Miller's recurrence and
    Lentz's continued fractions rescale within float32's range (their float64 constants, 1e200
    and 1e-300, were float32's inf and 0: J and Y were NaN for |x| < 5, gammainc and betainc
    NaN where the fraction's denominators vanish, ive(30, 150) inf)."""
    x = onp.array([0.5, 1.0, 1.75, 3.0, 4.5, 10.0])
    for f in (sp.j0, sp.j1, sp.y0, sp.y1):
        onp.testing.assert_allclose(jit_ps(f, x64=False)(x), getattr(sc, f.__name__)(x), atol=2e-6)
    a, b, z = onp.array([0.5, 3.0, 30.0, 2.0]), onp.array([2.0, 0.5, 4.0, 9.0]), onp.array([0.3, 0.9, 0.7, 0.1])
    for f, args in ((sp.gammainc, (a, 20 * z)), (sp.gammaincc, (a, 20 * z)), (sp.betainc, (a, b, z))):
        onp.testing.assert_allclose(jit_ps(f, x64=False)(*args), getattr(sc, f.__name__)(*args),
                                    rtol=1e-4, atol=1e-7)
    v, x = onp.array([10.0, 30.0, 60.0, 100.0]), onp.full(4, 150.0)  # the series' partial sums pass 1e30
    onp.testing.assert_allclose(jit_ps(sc.ive, x64=False)(v, x), sc.ive(v, x), rtol=1e-4)


def test_loops_computed_in_32_bits_stop_at_their_precision():
    """float64 computed in float32 (x64=False, as a TPU computes it): the loops stop when a
    step changes the sum below float32's roundoff. Asked for float64's, the continued fractions
    of gammaincc (x >= a + 1) and betainc never stopped and drifted: gammaincc(3.3, 8) was 1.5e-4
    off, the chi2 and gamma cdfs' finite differences missed their derivative by 4-7 %, a
    Hessian by differences of gammainc was 168287 for 46.6. Measured: 4000 random points,
    99 % within 100 float32 ulps (6e-6), against ~5000 before."""
    r = onp.random.RandomState(0)
    a = onp.exp(r.uniform(-1, 3, 200)).astype(F32).astype(F64)      # inputs float32 holds exactly
    x = (a * onp.exp(r.uniform(0.1, 1.2, 200))).astype(F32).astype(F64)  # most in the fraction's range
    b, y = onp.exp(r.uniform(-1, 3, 200)).astype(F32).astype(F64), r.uniform(0.05, 0.95, 200).astype(F32).astype(F64)
    f = jit_ps(lambda a, x, b, y: (sp.gammainc(a, x), sp.gammaincc(a, x), sp.betainc(a, b, y)), x64=False)
    for got, expected in zip(f(a, x, b, y), (sc.gammainc(a, x), sc.gammaincc(a, x), sc.betainc(a, b, y))):
        assert onp.percentile(onp.abs(got / expected - 1), 99) < 6e-6
        onp.testing.assert_allclose(got, expected, rtol=3e-5)
