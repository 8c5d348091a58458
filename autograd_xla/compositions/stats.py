"""scipy.stats, as autograd wraps it: trace rules written from the densities.

scipy's distribution methods call np.asarray on their arguments, so they cannot run on
traced values; each rule here restates the method on traced arrays with numpy and the
scipy.special ufuncs that special.py lowers (gammaln, betaln, xlogy, ndtr, stdtr, ...).
The bookkeeping follows scipy's rv_continuous / rv_discrete methods: x is standardised as
(x - loc) / scale in x's promoted dtype and then made at least float64; outside the
parameters' domain (scale <= 0, shape <= 0) or for nan x the result is nan; outside the
support it is 0 (pdf, cdf below), 1 (cdf above) or -inf (log densities). autograd's own
VJPs still differentiate these primitives; the rules only give their values. They are
registered once scipy.stats is imported (registry.when_imported): importing it is slow.
"""
import numpy as np

from ..tracing import Tracer, bind
from ..registry import LazyModule, traces, when_imported

sc = LazyModule("scipy.special")           # both imported by scipy.stats
scipy_linalg = LazyModule("scipy.linalg")

_LOG_2PI = float(np.log(2 * np.pi))


def _asarray(v):
    return v if isinstance(v, Tracer) else np.asarray(v)


def _standardize(x, loc, scale):
    """scipy's (x - loc) / scale in x's dtype promoted with float64, and the parameters."""
    x, loc, scale = _asarray(x), _asarray(loc), _asarray(scale)
    dtype = np.promote_types(x.dtype, np.float64)
    return np.astype((x - loc) / scale, dtype), scale, dtype


def _finish(cond, value, default, bad):
    """value where cond, nan where bad, default elsewhere."""
    out = np.where(cond, value, np.where(bad, np.nan, default))
    return np.astype(out, np.float64) if out.dtype != np.float64 else out


def _shape_ok(*args):
    ok = True
    for a in args:
        ok = ok & (_asarray(a) > 0)
    return ok


def _continuous(x, shapes, loc, scale, kind, value, lower=-np.inf, upper=np.inf, argcheck=_shape_ok):
    """One rv_continuous method: kind is pdf, logpdf, cdf, logcdf, sf or logsf;
    value(y, *shapes) its standardised form (densities are divided by scale here)."""
    y, scale, _ = _standardize(x, loc, scale)
    shapes = tuple(_asarray(s) for s in shapes)
    cond0 = argcheck(*shapes) & (scale > 0)
    bad = ~cond0 | np.isnan(y)
    if kind in ("pdf", "logpdf"):
        cond = cond0 & (y >= lower) & (y <= upper)
        if kind == "pdf":
            return _finish(cond, value(y, *shapes) / scale, 0.0, bad)
        return _finish(cond, value(y, *shapes) - np.log(scale), -np.inf, bad)
    cond = cond0 & (y > lower) & (y < upper)
    if kind in ("cdf", "logcdf"):
        edge, edge_value = cond0 & (y >= upper), (1.0 if kind == "cdf" else 0.0)
    else:
        edge, edge_value = cond0 & (y <= lower), (1.0 if kind == "sf" else 0.0)
    default = 0.0 if kind in ("cdf", "sf") else -np.inf
    return _finish(cond, value(y, *shapes), np.where(edge, edge_value, default), bad)


def _density_rule(method, kind, value, n_shapes, **support):
    """A trace rule for `method` (e.g. scipy.stats.t.logpdf) taking x, the shapes, loc, scale."""
    def impl(x, *args, loc=0, scale=1, **kw):
        names = _SHAPE_NAMES[method.__self__.name][:n_shapes]
        args = list(args) + [kw.pop(n) for n in names[len(args):] if n in kw]
        if len(args) > n_shapes:
            extra = args[n_shapes:]
            loc = extra[0]
            if len(extra) > 1:
                scale = extra[1]
        if kw or len(args) < n_shapes:
            raise TypeError(f"{method.__self__.name}.{kind}: unexpected arguments {sorted(kw)} / missing shapes")
        return _continuous(x, args[:n_shapes], loc, scale, kind, value, **support)
    impl.__name__ = f"{method.__self__.name}_{kind}"
    traces(method)(impl)


_SHAPE_NAMES = {"norm": (), "t": ("df",), "gamma": ("a",), "beta": ("a", "b"), "chi2": ("df",)}


# ----- norm ----------------------------------------------------------------------------------
_NORM = [("pdf", lambda y: np.exp(-y ** 2 / 2.0) / np.sqrt(2 * np.pi)),
         ("logpdf", lambda y: -y ** 2 / 2.0 - _LOG_2PI / 2),
         ("cdf", lambda y: sc.ndtr(y)),
         ("logcdf", lambda y: sc.log_ndtr(y)),
         ("sf", lambda y: sc.ndtr(-y)),
         ("logsf", lambda y: sc.log_ndtr(-y))]


# ----- t -------------------------------------------------------------------------------------
def _t_logpdf(y, df):
    finite = (np.log(sc.poch(0.5 * df, 0.5)) - 0.5 * (np.log(df) + np.log(np.pi))
              - (df + 1) / 2 * np.log1p(y * y / df))
    return np.where(df == np.inf, -y ** 2 / 2.0 - _LOG_2PI / 2, finite)


def _t_pdf(y, df):
    return np.where(df == np.inf, np.exp(-y ** 2 / 2.0) / np.sqrt(2 * np.pi), np.exp(_t_logpdf(y, df)))


_T = [("pdf", _t_pdf), ("logpdf", _t_logpdf), ("cdf", lambda y, df: sc.stdtr(df, y)),
      ("logcdf", lambda y, df: np.log(sc.stdtr(df, y)))]


# ----- gamma, chi2, beta ---------------------------------------------------------------------
def _gamma_logpdf(y, a):
    return sc.xlogy(a - 1.0, y) - y - sc.gammaln(a)


def _chi2_logpdf(y, df):
    return sc.xlogy(df / 2.0 - 1, y) - y / 2.0 - sc.gammaln(df / 2.0) - (np.log(2) * df) / 2.0


def _beta_logpdf(y, a, b):
    return sc.xlog1py(b - 1.0, -y) + sc.xlogy(a - 1.0, y) - sc.betaln(a, b)


_GAMMA = [("logpdf", _gamma_logpdf), ("pdf", lambda y, a: np.exp(_gamma_logpdf(y, a))),
          ("cdf", lambda y, a: sc.gammainc(a, y))]
_CHI2 = [("logpdf", _chi2_logpdf), ("pdf", lambda y, df: np.exp(_chi2_logpdf(y, df))),
         ("cdf", lambda y, df: sc.gammainc(df / 2, y / 2))]
_BETA = [("logpdf", _beta_logpdf), ("pdf", lambda y, a, b: np.exp(_beta_logpdf(y, a, b))),
         ("cdf", lambda y, a, b: sc.betainc(a, b, y))]

#: distribution -> (its number of shape parameters, its support, [(method, standardised value)])
CONTINUOUS = {"norm": (0, {}, _NORM), "t": (1, {}, _T), "gamma": (1, {"lower": 0.0}, _GAMMA),
              "chi2": (1, {"lower": 0.0}, _CHI2), "beta": (2, {"lower": 0.0, "upper": 1.0}, _BETA)}


# ----- poisson -------------------------------------------------------------------------------
def _poisson_args(k, mu, loc):
    k, mu, loc = _asarray(k), _asarray(mu), _asarray(loc)
    return k - loc, mu


def _poisson_logpmf(k, mu, loc=0):
    k, mu = _poisson_args(k, mu, loc)
    cond0 = mu >= 0
    cond = cond0 & (k >= 0) & (np.floor(k) == k)
    value = sc.xlogy(k, mu) - sc.gammaln(k + 1) - mu
    return _finish(cond, value, -np.inf, ~cond0 | np.isnan(k))


def _poisson_pmf(k, mu, loc=0):
    k, mu = _poisson_args(k, mu, loc)
    cond0 = mu >= 0
    cond = cond0 & (k >= 0) & (np.floor(k) == k)
    value = np.clip(np.exp(sc.xlogy(k, mu) - sc.gammaln(k + 1) - mu), 0, 1)
    return _finish(cond, value, 0.0, ~cond0 | np.isnan(k))


def _poisson_cdf(k, mu, loc=0):
    k, mu = _poisson_args(k, mu, loc)
    k = np.floor(k)
    cond0 = mu >= 0
    cond = cond0 & (k >= 0) & (k < np.inf)
    value = np.clip(sc.gammaincc(k + 1, mu), 0, 1)
    default = np.where(k >= np.inf, 1.0, 0.0)
    return _finish(cond, value, default, ~cond0 | np.isnan(k))


# ----- dirichlet -----------------------------------------------------------------------------
def _dirichlet_x(x, alpha):
    x = _asarray(x)
    if alpha.ndim != 1:
        raise ValueError(f"Parameter vector 'a' must be one dimensional, but a.shape = {alpha.shape}.")
    if x.shape[0] + 1 != alpha.shape[0] and x.shape[0] != alpha.shape[0]:
        raise ValueError("Vector 'x' must have either the same number of entries as, or one entry fewer than, "
                         f"parameter vector 'a', but alpha.shape = {alpha.shape} and x.shape = {x.shape}.")
    if x.shape[0] != alpha.shape[0]:
        last = 1 - np.sum(x, 0)
        x = np.concatenate([x, last[None]], axis=0)
    return x


def dirichlet_logpdf(x, alpha):
    """scipy's checks that x lies in the simplex need data and are skipped under jit_ps."""
    alpha = _asarray(alpha)
    x = _dirichlet_x(x, alpha)
    ln_b = np.sum(sc.gammaln(alpha)) - sc.gammaln(np.sum(alpha))
    out = -ln_b + np.sum(np.transpose(sc.xlogy(alpha - 1, np.transpose(x))), 0)
    return np.squeeze(out)


def _dirichlet_pdf(x, alpha):
    return np.exp(dirichlet_logpdf(x, alpha))


# ----- multivariate normal -------------------------------------------------------------------
def _mvn_parameters(mean, cov):
    """scipy's _process_parameters for a 2-d (or scalar / diagonal) covariance."""
    if mean is None:
        cov_a = _asarray(cov)
        dim = 1 if cov_a.ndim < 2 else cov_a.shape[0]
        mean = np.zeros(dim)
    mean = np.astype(_asarray(mean), np.float64) if _asarray(mean).dtype != np.float64 else _asarray(mean)
    dim = int(np.size(mean))
    cov = _asarray(cov)
    cov = np.astype(cov, np.float64) if cov.dtype != np.float64 else cov
    if dim == 1:
        mean = np.reshape(mean, (1,))
        cov = np.reshape(cov, (1, 1))
    if mean.ndim != 1 or mean.shape[0] != dim:
        raise ValueError(f"Array 'mean' must be a vector of length {dim}.")
    if cov.ndim == 0:
        cov = cov * np.eye(dim)
    elif cov.ndim == 1:
        cov = np.diag(cov)
    elif cov.ndim == 2 and cov.shape != (dim, dim):
        raise ValueError(f"Dimension mismatch: array 'cov' is of shape {cov.shape}, but 'mean' is a vector of "
                         f"length {dim}.")
    elif cov.ndim > 2:
        raise ValueError(f"Array 'cov' must be at most two-dimensional, but cov.ndim = {cov.ndim}")
    return dim, mean, cov


def _mvn_quantiles(x, dim):
    x = _asarray(x)
    x = np.astype(x, np.float64) if x.dtype != np.float64 else x
    if x.ndim == 0:
        x = np.reshape(x, (1,))
    elif x.ndim == 1:
        x = np.reshape(x, (-1, 1)) if dim == 1 else np.reshape(x, (1, -1))
    return x


def _squeeze_output(out):
    return np.squeeze(out)


def _mvn_logpdf_singular(x, mean, cov, dim):
    """scipy's _PSD: eigh of the (lower triangle of the) covariance; eigenvalues at most
    eps = 1e6 * machine eps * max|s| count as zero (masked, so shapes stay static); the
    rank is the count of the others. Points off the support get -inf, as in scipy (its
    ValueError for a matrix with eigenvalues below -eps needs data and is skipped)."""
    s, u = np.linalg.eigh(cov)
    eps = 1e6 * np.finfo(np.float64).eps * np.max(np.abs(s))
    keep = s > eps
    s_pinv = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
    white_u = u * np.sqrt(s_pinv)
    rank = np.sum(np.astype(keep, np.float64))
    log_pdet = np.sum(np.where(keep, np.log(np.where(keep, s, 1.0)), 0.0))
    dev = x - mean
    maha = np.sum(np.square(dev @ white_u), axis=-1)
    out = -0.5 * (rank * _LOG_2PI + log_pdet + maha)
    residual = np.sqrt(np.sum(np.square(dev @ np.where(keep, 0.0, u)), axis=-1))
    return np.where(residual < 1e3 * eps, out, -np.inf)


def _mvn_logpdf(x, mean, cov, allow_singular):
    dim, mean, cov = _mvn_parameters(mean, cov)
    x = _mvn_quantiles(x, dim)
    if allow_singular:
        return _mvn_logpdf_singular(x, mean, cov, dim)
    chol = np.linalg.cholesky(cov)
    dev = x - mean
    flat = np.reshape(dev, (-1, dim))
    white = bind(scipy_linalg.solve_triangular, (chol, np.transpose(flat)), {"lower": True})
    maha = np.reshape(np.sum(white * white, axis=0), dev.shape[:-1])
    log_det = 2.0 * np.sum(np.log(np.diagonal(chol)))
    return -0.5 * (dim * _LOG_2PI + log_det + maha)


def _mvn_logpdf_rule(x, mean=None, cov=1, allow_singular=False):
    """Through a Cholesky factor (scipy uses an eigendecomposition; the two agree to
    rounding for positive definite covariances, and scipy's check of that needs data)."""
    return _squeeze_output(_mvn_logpdf(x, mean, cov, allow_singular))


def _mvn_pdf_rule(x, mean=None, cov=1, allow_singular=False):
    return _squeeze_output(np.exp(_mvn_logpdf(x, mean, cov, allow_singular)))


def _mvn_entropy(mean=None, cov=1):
    dim, mean, cov = _mvn_parameters(mean, cov)
    chol = np.linalg.cholesky(cov)
    log_det = 2.0 * np.sum(np.log(np.diagonal(chol)))
    return 0.5 * (dim * (_LOG_2PI + 1.0) + log_det)


# ----- registration --------------------------------------------------------------------------
@when_imported("scipy.stats")
def _register(stats):
    for dist, (n_shapes, support, methods) in CONTINUOUS.items():
        for kind, value in methods:
            _density_rule(getattr(getattr(stats, dist), kind), kind, value, n_shapes, **support)
    for method, impl in ((stats.poisson.logpmf, _poisson_logpmf), (stats.poisson.pmf, _poisson_pmf),
                         (stats.poisson.cdf, _poisson_cdf), (stats.dirichlet.logpdf, dirichlet_logpdf),
                         (stats.dirichlet.pdf, _dirichlet_pdf), (stats.multivariate_normal.logpdf, _mvn_logpdf_rule),
                         (stats.multivariate_normal.pdf, _mvn_pdf_rule),
                         (stats.multivariate_normal.entropy, _mvn_entropy)):
        traces(method)(impl)
