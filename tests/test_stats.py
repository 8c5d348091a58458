"""autograd.scipy.stats under jit_ps: every pdf/logpdf/cdf/... autograd wraps, against scipy
(loc/scale positional and by keyword, broadcasting, 0-d, empty, float32 in -> float64 out,
outside the support and the parameter domain), and gradients both ways round against
plain autograd for every argument autograd differentiates."""
import warnings

import numpy as onp
import pytest

import autograd.numpy as np
import autograd.scipy.stats as st
from autograd_xla import jit_ps
from autograd import grad
from helpers import TPU_LGAMMA_ATOL, TPU_RTOL, assert_close, check, check_falls_back, check_value, dtypes_of, scalarize

rs = onp.random.RandomState(0)
X = rs.randn(2, 3)
POS = onp.abs(X) + 0.3
UNIT = onp.array([[0.1, 0.35, 0.5], [0.62, 0.8, 0.97]])


def check_grads(f, *args, argnums=(0,), rtol=None, atol=None):
    """The gradient with respect to all of argnums in one program each way: the
    distributions' VJPs call the heavier special functions again, so one compile per
    direction rather than one per argument keeps the file fast."""
    s = scalarize(f)
    argnums = tuple(argnums)
    expected = grad(s, argnums)(*args)
    dts = dtypes_of(*args)
    assert_close(jit_ps(grad(s, argnums))(*args), expected, rtol, atol, path="jit(grad)", inputs=dts)
    assert_close(grad(jit_ps(s), argnums)(*args), expected, rtol, atol, path="grad(jit)", inputs=dts)


def check(f, *args, argnums=(0,), rtol=None, atol=None):
    check_value(f, *args, rtol=rtol, atol=atol)
    check_grads(f, *args, argnums=argnums, rtol=rtol, atol=atol)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


# (function, arguments, argnums autograd differentiates)
CASES = {
    "norm.pdf": (st.norm.pdf, (X, 0.5, 2.0), (0, 1, 2)),
    "norm.logpdf": (st.norm.logpdf, (X, X[0], POS), (0, 1, 2)),
    "norm.cdf": (st.norm.cdf, (X, 0.3, 1.5), (0, 1, 2)),
    "norm.logcdf": (st.norm.logcdf, (3 * X, 0.2, 0.9), (0, 1, 2)),
    "norm.sf": (st.norm.sf, (X, -0.3, 1.2), (0, 1, 2)),
    "norm.logsf": (st.norm.logsf, (3 * X, 0.1, 1.1), (0, 1, 2)),
    "t.pdf": (st.t.pdf, (X, 3.5, 0.2, 1.3), (0, 1, 2, 3)),
    "t.logpdf": (st.t.logpdf, (X, POS + 1, 0.2, 1.3), (0, 1, 2, 3)),
    "t.cdf": (st.t.cdf, (X, 4.5, 0.1, 1.2), (0, 2)),
    "t.logcdf": (st.t.logcdf, (X, 2.0, -0.1, 2.0), (0, 2)),
    "gamma.pdf": (st.gamma.pdf, (POS, 1.7), (0, 1)),
    # (a = x + 1 made the gradient in x, (a - 1) / x - 1, exactly 0: float32's rounding of a all that was left)
    "gamma.logpdf": (st.gamma.logpdf, (POS, POS + 1.5), (0, 1)),
    "gamma.cdf": (st.gamma.cdf, (POS, 2.5), (0,)),
    "beta.pdf": (st.beta.pdf, (UNIT, 1.5, 2.5), (0, 1, 2)),
    "beta.logpdf": (st.beta.logpdf, (UNIT, POS, 2.0), (0, 1, 2)),
    "beta.cdf": (st.beta.cdf, (UNIT, 2.5, 1.5), (0,)),
    "chi2.pdf": (st.chi2.pdf, (POS, 4.0), (0,)),
    "chi2.logpdf": (st.chi2.logpdf, (POS, 3.0), (0,)),
    "chi2.cdf": (st.chi2.cdf, (3 * POS, 3.0), (0,)),
    "poisson.pmf": (st.poisson.pmf, (onp.array([[0.0, 1, 3], [2, 5, 7]]), POS * 3), (1,)),
    "poisson.logpmf": (st.poisson.logpmf, (onp.array([[0.0, 1, 3], [2, 5, 7]]), POS * 3), (1,)),
    "poisson.cdf": (st.poisson.cdf, (onp.array([[0.0, 1, 3], [2, 5, 7]]), POS * 3), (1,)),
}


LOOP_BASED = {"t.cdf", "t.logcdf", "gamma.cdf", "beta.cdf", "chi2.cdf", "poisson.cdf"}
#: The distributions built on lgamma and digamma (their normalisers, their VJPs in the shape
#: parameters): on a TPU at the precision its log1p leaves them (helpers.TPU_RTOL).
LANCZOS = {name for name in CASES if name.split(".")[0] in ("t", "gamma", "beta", "chi2", "poisson")}
EDGE = onp.array([-1.0, 0.0, 0.5, 1.0, 2.0, onp.inf, -onp.inf, onp.nan])


@pytest.mark.parametrize("name", CASES)
def test_values(name):
    """x of (2, 3) with array parameters, and in one compile the edges (outside the
    support, infinities, nan) with scalar parameters; for the closed-form ones also 0-d,
    empty and float32 x (results are float64, as scipy's)."""
    f, args, _ = CASES[name]
    x, rest = args[0], args[1:]
    scalars = tuple(onp.ravel(r)[0] for r in rest)
    xs = (EDGE,) if name in LOOP_BASED else (EDGE, onp.float64(x[0, 0]), onp.zeros((0, 2)), x.astype(onp.float32))
    check_value(lambda x, xs: (f(x, *rest),) + tuple(f(v, *scalars) for v in xs), x, xs)


@pytest.mark.parametrize("name", CASES)
def test_gradients(name):
    f, args, argnums = CASES[name]
    check_grads(f, *args, argnums=argnums, rtol=TPU_RTOL if name in LANCZOS else None)


def test_keyword_and_positional_parameters():
    check_value(lambda x: (st.norm.logpdf(x, loc=1.0, scale=2.0), st.t.logpdf(x, df=3.0, loc=0.5),
                           st.gamma.pdf(onp.abs(x), a=2.0, scale=0.5), st.beta.logpdf(UNIT, a=2.0, b=3.0),
                           st.chi2.cdf(onp.abs(x), df=2.0, loc=0.1, scale=3.0), st.poisson.pmf(3.0, mu=x * x, loc=1)), X)


def test_parameter_domain():
    """nan where scipy has it: scale <= 0, shapes <= 0, mu < 0."""
    scale = onp.array([1.0, 0.0, -1.0])
    check_value(lambda x: (st.norm.logpdf(x, 0.0, scale), st.t.cdf(x, onp.array([2.0, -1.0, 0.0])),
                           st.gamma.logpdf(onp.abs(x), onp.array([1.0, 0.0, -2.0])),
                           st.beta.pdf(UNIT, onp.array([1.0, -1.0, 2.0]), 2.0),
                           st.poisson.logpmf(2.0, onp.array([1.0, 0.0, -1.0]))), X)


def test_t_infinite_df_is_normal():
    check_value(lambda x: (st.t.logpdf(x, onp.inf), st.t.pdf(x, onp.inf), st.t.cdf(x, onp.inf)), X)


def test_broadcasting_parameters():
    check(lambda x, loc, scale: st.norm.logpdf(x, loc, scale), X, X[:1], POS[:, :1], argnums=(0, 1, 2))
    # (in df, digamma((df + 1) / 2) - digamma(df / 2): on a TPU at its precision, helpers.TPU_RTOL)
    check(lambda x, df: st.t.logpdf(x, df), X[:, :, None], onp.array([1.5, 4.0, 30.0]), argnums=(0, 1), rtol=TPU_RTOL)


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_dirichlet(method):
    f = getattr(st.dirichlet, method)
    alpha = onp.array([1.5, 2.0, 0.7])
    x = onp.array([0.2, 0.3, 0.5])
    # (its lgammas: on a TPU at their precision, helpers.TPU_LGAMMA_ATOL and TPU_RTOL)
    r, a = TPU_RTOL, TPU_LGAMMA_ATOL
    check(f, x, alpha, argnums=(0, 1), rtol=r, atol=a)
    check_value(f, onp.array([0.2, 0.3]), alpha, rtol=r, atol=a)                  # K-1 entries: the last is implied
    check_value(f, onp.array([[0.2, 0.1], [0.3, 0.6], [0.5, 0.3]]), alpha, rtol=r, atol=a)  # columns are points


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
def test_multivariate_normal(method):
    f = getattr(st.multivariate_normal, method)
    cov = onp.array([[2.0, 0.3, 0.1], [0.3, 1.0, -0.2], [0.1, -0.2, 1.5]])
    mean = onp.array([0.1, -0.2, 0.3])
    check(f, X, mean, cov, argnums=(0, 1, 2))                                   # two points
    check(f, X[0], mean, cov, argnums=(0, 1, 2))                                # one point -> scalar
    check_value(f, rs.randn(4, 2, 3), mean, cov)                                # a batch of batches
    check_value(lambda x: f(x, None, 2.0), X[0])                                # scalar covariance
    check_value(lambda x: f(x, mean, onp.array([1.0, 2.0, 3.0])), X)            # diagonal covariance
    check_value(lambda x: f(x, 0.5, 2.0), X[0])                                 # one dimension


def test_multivariate_normal_entropy():
    cov = onp.array([[2.0, 0.3], [0.3, 1.0]])
    check(lambda c: st.multivariate_normal.entropy(onp.zeros(2), c), cov)
    check_value(lambda c: st.multivariate_normal.entropy(None, c), 2.5)


def test_multivariate_normal_allow_singular():
    """scipy's pseudo-determinant / pseudo-inverse through eigh with its cutoff; off the
    support -inf (autograd's own VJP wrt x and mean uses pinv)."""
    sing = onp.zeros((4, 4))
    sing[0, 0], sing[1, 1] = 1.0, 2.0
    mean = onp.array([0.3, -0.2, 0.0, 0.0])
    x = onp.array([0.5, 0.1, 0.0, 0.0])
    for fn in (st.multivariate_normal.logpdf, st.multivariate_normal.pdf):
        check(lambda x, m: fn(x, m, sing, allow_singular=True), x, mean, argnums=(0, 1))
    check_value(lambda x: st.multivariate_normal.logpdf(x, mean, sing, allow_singular=True),
                onp.array([0.5, 0.1, 0.3, 0.0]))                 # off the support: -inf
    b = rs.randn(4, 2)
    low_rank = b @ b.T                                            # rank 2, not exactly singular
    check_value(lambda x: st.multivariate_normal.logpdf(x, onp.zeros(4), low_rank, allow_singular=True),
                onp.concatenate([b @ onp.array([0.3, -0.7]), b @ onp.array([1.0, 0.2])]).reshape(2, 4))
    a = rs.randn(3, 3)
    spd = a @ a.T + onp.eye(3)
    check(lambda x: st.multivariate_normal.logpdf(x, onp.zeros(3), spd, allow_singular=True), X)


def test_gaussian_mixture_log_likelihood():
    """A typical model: a mixture's log-likelihood, differentiated in all parameters."""
    from autograd.scipy.special import logsumexp
    data = rs.randn(20)

    def loglik(means, log_scales, logits):
        comps = st.norm.logpdf(data[:, None], means, np.exp(log_scales))
        return np.sum(logsumexp(comps + logits - logsumexp(logits), axis=1))
    check(loglik, onp.array([-1.0, 0.5]), onp.array([0.1, -0.3]), onp.array([0.2, 0.0]), argnums=(0, 1, 2))
