"""scipy.special: every function autograd wraps, plus the few its VJPs and scipy.stats need.

On the CPU, the functions of SCIPY_LOOPS call scipy's own ufunc loops (ufunc_loops.py: a
custom call per function), so that they give plain scipy's results bit for bit: a derivative
taken by finite differences of them (autograd_gamma's of gammainc in `a`) agrees too. On
other platforms, and on the CPU where the C module is not built or FORCE_PORTABLE is set,
they lower to the portable algorithms below; `benchmarks/special_ulps.py` measures both
against scipy.

XLA has CHLO ops for lgamma, digamma, erf, erfc, erf_inv, polygamma, zeta and
bessel_i1e; they are used as they are, but for lgamma near its zeros at 1 and 2, digamma
near its positive zero and erf_inv near +-1, where they keep only an absolute accuracy
(series there, and erfcinv). The rest is written from the mathematics, in
special_kernels.py and bessel_kernels.py (the translation rules below call their kernels):
incomplete gamma (power series, Legendre continued fraction, a small-`a` series for Q),
incomplete beta (continued fraction with a Stirling-form prefactor; for a small b near
x = 1, the logarithm of the complement's series), Bessel J, Y, I of real order (Miller's
backward recurrence normalised by the Neumann sum, the power series, and Hankel's
asymptotic expansions), the tail of erfcinv (Newton steps on log erfc), log-gamma ratios
for large arguments (Stirling's series). Loops are elementwise `stablehlo.while` loops
that stop when every element has converged.

Like scipy's own float32 loops, which call the double routine, float32 inputs are
computed in float64 and rounded to the result dtype numpy's ufunc resolution gives.
Numerics are written with `N`, a Value with arithmetic operators, so they read like the
formulas they implement.

The rules are registered when scipy.special is imported (registry.when_imported), not
with this module: importing scipy.special is slow, and only a program that imports it
can call its functions.
"""
import math

import numpy as np

from .. import hlo, ufunc_loops
from ..context import kept_shape, normalize_axes, result_type
from ..registry import LazyModule, entry, lowers, when_imported
from .bessel_kernels import exp_times, ive_parts, jv, y01, yn
from .special_kernels import (F64, LOG_2PI, N, beta_parts, betaln, chlo2, complex_erf, digamma_near_root, erfcinv,
                              expit, gammasgn, ibeta, igamma, is_integer, is_odd, lgamma_diff, lgamma_near_zeros,
                              logit, polyval, scalar, where, while_)

sc = LazyModule("scipy.special")

#: Tests set this to lower as non-CPU platforms do: the portable algorithms, not scipy's loops.
FORCE_PORTABLE = False


def scipy_loop(ctx, ufunc, values, out_dtypes):
    """The custom call target of scipy's own loop of `ufunc` for these operands, or None:
    not the CPU, FORCE_PORTABLE set, or no such loop the handler can call. The loop is chosen
    by the types the buffers really have (hlo.canonical_dtype): with x64 off a float64 operand
    is float32, which scipy's double loop would read as half as many doubles. Registered with
    XLA only for a program being lowered: a trace (which builds the rule for its types alone)
    never imports jaxlib, and a trace run by numpy (numpy_tier) needs none."""
    if ctx.platform != "cpu" or FORCE_PORTABLE:
        return None
    return ufunc_loops.target(ufunc, [hlo.canonical_dtype(d) for d in [v.dtype for v in values] + list(out_dtypes)],
                              register=not ctx.module.shapes_only)


def call_scipy_loop(ctx, target, values, out_dtype):
    return ctx.custom_call(target, values, [(values[0].shape, out_dtype)])[0]


# ----- translation rules ---------------------------------------------------------------------
def special_ufunc(ufunc, body, native=False, loop=False):
    """Rule for a scipy.special ufunc from `body(ctx, *operands) -> N`. Operands arrive
    broadcast, in float64 (or, if native, in the loop dtype numpy resolves); the result is
    rounded to the loop's output dtype. With `loop`, scipy's own loop where there is one
    (scipy_loop)."""
    name = ufunc.__name__

    def rule(ctx, *inputs, **kwargs):
        if kwargs:
            raise NotImplementedError(f"scipy.special.{name}: keyword arguments {sorted(kwargs)} are not "
                                      "supported under jit_ps")
        if len(inputs) != ufunc.nin:
            raise TypeError(f"{name}() takes {ufunc.nin} positional arguments, got {len(inputs)}")
        values, out_dtypes = ctx.ufunc_inputs(ufunc, inputs)
        if any(v.dtype.kind == "c" for v in values):
            if name in ("erf", "erfc"):
                out = complex_erf(ctx, ctx.astype(values[0], np.complex128), name == "erfc")
                return ctx.astype(out, out_dtypes[0])
            raise NotImplementedError(f"scipy.special.{name} of complex arguments is not supported under jit_ps")
        target = scipy_loop(ctx, ufunc, values, out_dtypes) if loop else None
        if target is not None:
            return call_scipy_loop(ctx, target, values, out_dtypes[0])
        work = out_dtypes[0] if native else F64
        out = body(ctx, *[N(ctx, ctx.astype(v, work)) for v in values])
        return ctx.astype(out.v, out_dtypes[0])

    rule.__name__ = f"{name}_rule"
    lowers(ufunc)(rule)
    return rule


def _gamma(ctx, x):
    return gammasgn(x) * x.lgamma().exp()


def _rgamma(ctx, x):
    out = gammasgn(x) * (-x.lgamma()).exp()
    pole = ((x < 0) & is_integer(x)) | x.eq(-np.inf)
    return where(pole, x.like(0.0), out)


def _gammaln(ctx, x):
    return where(x.eq(-np.inf), x, lgamma_near_zeros(x))


def _digamma(ctx, x):
    out = digamma_near_root(x)
    out = where(x.eq(0), gammasgn(x) * -np.inf, out)        # -inf at +0, +inf at -0
    return where(((x < 0) & is_integer(x)) | x.eq(-np.inf), x.like(np.nan), out)


def erfinv(x):
    """XLA's erf_inv, but erfcinv(1 - |x|) past |x| = 0.9 (1 - |x| is exact there), where
    XLA's loses digits as x nears 1: 8.8e-11 relative at 1 - 6e-9."""
    ax = x.abs()
    tail = ax > 0.9
    z = erfcinv(where(tail, 1.0 - ax, x.like(0.5)))
    out = where(tail, where(x < 0, -z, z), x.erfinv())
    return where(ax > 1.0, x.like(np.nan), out)


def _beta(ctx, a, b):
    sign, log_b = beta_parts(a, b)
    return sign * log_b.exp()


def _i0(ctx, x):
    log_mag, sign, bad = ive_parts(ctx, x.like(0.0), x)
    # scipy's i0 is exp(|x|) * i0e(x), infinite past |x| ~ 709.78 like this product
    return where(bad, x.like(np.nan), sign * (log_mag.exp() * x.abs().exp()))


def _i1(ctx, x):
    return x.i1e() * x.abs().exp()


def _iv(ctx, v, x):
    log_mag, sign, bad = ive_parts(ctx, v, x)
    return where(bad, x.like(np.nan), exp_times(log_mag, sign, x.abs()))


def _ive(ctx, v, x):
    log_mag, sign, bad = ive_parts(ctx, v, x)
    out = sign * log_mag.exp()
    neg_frac_at_zero = x.eq(0) & (v < 0) & ~is_integer(v)
    return where(bad | neg_frac_at_zero, x.like(np.nan), out)


def _y0(ctx, x):
    y0, _ = y01(ctx, x)
    y0 = where(x.eq(0), x.like(-np.inf), y0)
    return where((x < 0) | x.isnan() | x.eq(np.inf), x.like(np.nan), y0)


def _y1(ctx, x):
    _, y1 = y01(ctx, x)
    y1 = where(x.eq(0), x.like(-np.inf), y1)
    return where((x < 0) | x.isnan() | x.eq(np.inf), x.like(np.nan), y1)


# ----- helpers of scipy.stats ----------------------------------------------------------------
def xlogy(x, y):
    return where(x.eq(0) & ~y.isnan(), x.like(0.0), x * y.log())


def xlog1py(x, y):
    return where(x.eq(0) & ~y.isnan(), x.like(0.0), x * y.log1p())


def ndtr(x):
    """Standard normal cdf; erfc in the lower tail, where it keeps relative accuracy."""
    z = x * math.sqrt(0.5)
    mid = 0.5 + 0.5 * z.erf()
    return where(z < -math.sqrt(0.5), 0.5 * (-z).erfc(), where(z > math.sqrt(0.5), 1.0 - 0.5 * z.erfc(), mid))


def log_ndtr(x):
    """log of the normal cdf: log1p(-ndtr(-x)) above -1, the asymptotic series of the Mills
    ratio below -20 (ndtr underflows by -38), log(ndtr) between."""
    upper = (-0.5 * (x * math.sqrt(0.5)).erfc()).log1p()
    middle = (0.5 * (-x * math.sqrt(0.5)).erfc()).log()
    xs = where(x < -20.0, x, x.like(-20.0))
    r = 1.0 / (xs * xs)
    # sum_k (-1)^k (2k-1)!! / x^(2k)
    coeffs, c = [1.0], 1.0
    for k in range(1, 12):
        c *= -(2 * k - 1)
        coeffs.append(c)
    tail = -0.5 * xs * xs - (-xs).log() - 0.5 * LOG_2PI + polyval(coeffs, r).log()
    return where(x > -1.0, upper, where(x < -20.0, tail, middle))


def stdtr(b, df, t):
    """Student t cdf: 1/2 I_{df/(df+t^2)}(df/2, 1/2) in the lower tail, with both the
    argument and its complement formed directly so neither cancels."""
    t2 = t * t
    x = df / (df + t2)
    y = t2 / (df + t2)
    lower = 0.5 * ibeta(b, 0.5 * df, df.like(0.5), x, y)
    out = where(t < 0, lower, 1.0 - lower)
    out = where(df > 1e13, ndtr(t), out)      # within ~1e-13 of the t cdf there
    out = where(t.eq(np.inf), t.like(1.0), where(t.eq(-np.inf), t.like(0.0), out))
    return where((df <= 0) | df.isnan() | t.isnan(), t.like(np.nan), out)


def poch(z, m):
    """Pochhammer's (z)_m = Gamma(z + m) / Gamma(z), through lgamma_diff where both are
    positive (accurate when z is large)."""
    zm = z + m
    pos = (z > 0) & (zm > 0)
    diff = lgamma_diff(where(pos, z, z.like(1.0)), where(pos, m, m.like(1.0)))
    general = gammasgn(zm) * gammasgn(z) * (zm.lgamma() - z.lgamma()).exp()
    out = where(pos, diff.exp(), general)
    out = where(((zm <= 0) & is_integer(zm)) & ~((z <= 0) & is_integer(z)), z.like(np.inf), out)
    out = where(((z <= 0) & is_integer(z)) & ~((zm <= 0) & is_integer(zm)), z.like(0.0), out)
    return where(m.eq(0), z.like(1.0), out)


UFUNCS = {
    "gammaln": _gammaln,
    "digamma": _digamma,                      # scipy.special.psi is digamma
    "gamma": _gamma,
    "rgamma": _rgamma,
    "gammasgn": lambda ctx, x: gammasgn(x),
    "gammainc": lambda ctx, a, x: igamma(ctx, a, x, upper=False),
    "gammaincc": lambda ctx, a, x: igamma(ctx, a, x, upper=True),
    "beta": _beta,
    "betaln": lambda ctx, a, b: betaln(a, b),
    "betainc": lambda ctx, a, b, x: ibeta(ctx, a, b, x),
    "erf": lambda ctx, x: x.erf(),
    "erfc": lambda ctx, x: x.erfc(),
    "erfinv": lambda ctx, x: erfinv(x),
    "erfcinv": lambda ctx, y: erfcinv(y),
    "exprel": lambda ctx, x: where(x.eq(0), x.like(1.0), where(x.eq(np.inf), x, x.expm1() / x)),  # (e^x - 1)/x
    "j0": lambda ctx, x: jv(ctx, x.like(0.0), x),
    "j1": lambda ctx, x: jv(ctx, x.like(1.0), x),
    "jv": lambda ctx, v, x: jv(ctx, v, x),    # scipy.special.jn is jv
    "y0": _y0,
    "y1": _y1,
    "yn": lambda ctx, n, x: yn(ctx, n, x),
    "i0": _i0,
    "i1": _i1,
    "iv": _iv,
    "ive": _ive,
    "zeta": lambda ctx, s, q: chlo2("zeta", s, q),
    "xlogy": lambda ctx, x, y: xlogy(x, y),
    "xlog1py": lambda ctx, x, y: xlog1py(x, y),
    "ndtr": lambda ctx, x: ndtr(x),
    "log_ndtr": lambda ctx, x: log_ndtr(x),
    "stdtr": lambda ctx, df, t: stdtr(ctx, df, t),
    "poch": lambda ctx, z, m: poch(z, m),
}
#: The UFUNCS whose rules emit `while` loops (special_kernels.while_): their independent
#: calls in one program are emitted as one call (registry.Entry.merge, lowering.schedule).
LOOPING = frozenset({"gammainc", "gammaincc", "betainc", "j0", "j1", "jv", "y0", "y1", "yn", "i0", "iv", "ive",
                     "stdtr"})
#: The UFUNCS that call scipy's own loops on the CPU (scipy_loop): all but the cheap formulas
#: within 3 ulps of scipy's over benchmarks/special_ulps.py's grids (erf 2, xlogy, exprel),
#: which stay StableHLO that XLA fuses with the ops around them.
SCIPY_LOOPS = frozenset(UFUNCS) - {"erf", "xlogy", "xlog1py", "exprel"}
#: ufuncs computed in the loop dtype numpy resolves, not in float64
NATIVE_UFUNCS = {
    "expit": lambda ctx, x: expit(x),
    "logit": lambda ctx, x: where((x < 0) | (x > 1), x.like(np.nan), logit(x)),
}


def _probe_dtype(fn, *args):
    """The dtype scipy's Python-level function returns for these argument types."""
    dummies = [a if isinstance(a, (bool, int, float)) else np.ones(1, a.dtype) for a in args]
    with np.errstate(all="ignore"):
        return np.asarray(fn(*dummies)).dtype


def polygamma(b, n, x):
    """polygamma(n, x) for integer n >= 1. XLA's polygamma is used for x > 0; below, the
    recurrence psi_n(x) = psi_n(x + m) - (-1)^n n! sum_{k<m} (x + k)^-(n+1) moves x
    into (0, 1]. Non-positive integers are poles: (-1)^(n+1) inf, as scipy has it."""
    neg = (x <= 0) & x.isfinite()
    m = where(neg, (-x).floor() + 1.0, x.like(0.0))
    shifted = x + m
    p = n + 1.0
    sign_odd = is_odd(p)

    def cond(bb, c):
        return c[0] < m.max()

    def body(bb, c):
        k, acc = c
        base = x + k
        term = base.abs() ** (-p)
        term = where((base < 0) & sign_odd, -term, term)
        return [k + 1.0, acc + where(k < m, term, x.like(0.0))]
    _, acc = while_(b, [scalar(b, 0.0), x.like(0.0)], cond, body)
    fact = (p.lgamma()).exp()
    out = chlo2("polygamma", n, where(shifted > 0, shifted, x.like(1.0))) \
        - where(is_odd(n), -fact, fact) * acc
    pole = neg & is_integer(x)
    return where(pole, where(sign_odd, x.like(-np.inf), x.like(np.inf)), out)


def _scipy_call(ctx, ufunc, *inputs):
    """`ufunc` of `inputs` by scipy's own loop (numpy's dtype resolution), or None where
    scipy_loop has none."""
    values, out_dtypes = ctx.ufunc_inputs(ufunc, inputs)
    target = scipy_loop(ctx, ufunc, values, out_dtypes)
    return None if target is None else call_scipy_loop(ctx, target, values, out_dtypes[0])


def _polygamma_by_loops(ctx, n, x):
    """scipy's own formula, where(n == 0, psi(x), (-1.0)**(n+1) * gamma(n+1.0) * zeta(n+1, x)),
    its ufuncs by their loops and each step in the dtype numpy gives it; None where a loop
    is missing."""
    nn = N(ctx, n)
    real = np.result_type(n.dtype, 1.0)                  # of n + 1.0 and (-1.0)**(n + 1)
    gam = _scipy_call(ctx, sc.gamma, (nn.astype(real) + 1.0).v)
    zeta = _scipy_call(ctx, sc._ufuncs._zeta, (nn + 1).v, x)
    psi = _scipy_call(ctx, sc.psi, x)
    if gam is None or zeta is None or psi is None:
        return None
    p = (nn + 1).astype(F64)
    sign = where(is_integer(p), where(is_odd(p), p.like(-1.0), p.like(1.0)), p.like(np.nan)).astype(real)

    def times(u, v):  # numpy's product: both operands in their promoted dtype
        dt = np.result_type(u.dtype, v.dtype)
        return u.astype(dt) * N(ctx, v).astype(dt)
    fac2 = times(times(sign, gam), zeta)
    dt = np.result_type(fac2.dtype, psi.dtype)
    return where(nn.eq(0), N(ctx, psi).astype(dt), fac2.astype(dt)).v


def _polygamma(ctx, n, x):
    dtype = _probe_dtype(sc.polygamma, n, x)
    # scipy makes both arrays (np.asarray): Python numbers take their default dtypes, not weak ones
    nv, xv = (ctx.asvalue(v, None if isinstance(v, hlo.Value) else np.asarray(v).dtype) for v in (n, x))
    if nv.dtype.kind == "c" or xv.dtype.kind == "c":
        raise NotImplementedError("scipy.special.polygamma of complex arguments is not supported under jit_ps")
    shape = np.broadcast_shapes(nv.shape, xv.shape)
    if nv.dtype.kind in "iuf" and xv.dtype.kind == "f":
        out = _polygamma_by_loops(ctx, ctx.broadcast_to(nv, shape), ctx.broadcast_to(xv, shape))
        if out is not None:
            return ctx.astype(out, dtype)
    nn = N(ctx, ctx.broadcast_to(ctx.astype(nv, F64), shape))
    xx = N(ctx, ctx.broadcast_to(ctx.astype(xv, F64), shape))
    valid = is_integer(nn) & (nn >= 0)
    n_safe = where(valid, nn, nn.like(1.0))
    out = where(nn.eq(0), _digamma(ctx, xx), polygamma(ctx, n_safe, xx))
    return ctx.astype(where(valid, out, xx.like(np.nan)).v, dtype)


def _logsumexp(ctx, a, axis=None, b=None, keepdims=False, return_sign=False):
    av = ctx.asvalue(a)
    bv = None if b is None else ctx.asvalue(b)
    dtype = result_type(av, *([bv] if bv is not None else []))
    if dtype.kind in "biu":
        dtype = F64
    if dtype.kind == "c":
        raise NotImplementedError("scipy.special.logsumexp of complex arrays is not supported under jit_ps")
    shape = av.shape if bv is None else np.broadcast_shapes(av.shape, bv.shape)
    shape = shape or (1,)                         # scipy makes its input at least 1-d
    x = N(ctx, ctx.broadcast_to(ctx.astype(av, dtype), shape))
    w = None if bv is None else N(ctx, ctx.broadcast_to(ctx.astype(bv, dtype), shape))
    axes = normalize_axes(axis, len(shape))
    kept = kept_shape(shape, axes)
    out_shape = kept if keepdims else tuple(d for i, d in enumerate(shape) if i not in axes)

    def total(v):
        red = ctx.reduce_with(v.v, axes, "add", 0)
        return N(ctx, ctx.reshape(red, kept))

    if x.v.size == 0:
        out = ctx.full(out_shape, -np.inf, dtype)
        return (out, ctx.full(out_shape, -1.0, dtype)) if return_sign else out
    if w is None and not return_sign:
        return _logsumexp_unweighted(ctx, x, axes, kept, out_shape)
    # the plain formula, which scipy falls back to where the shifted one is not finite
    plain = total(x.exp()) if w is None else total(w * x.exp())
    if w is not None:
        x = where(w.eq(0), x.like(-np.inf), x)   # a zero weight drops its term, even inf or nan
    amax = N(ctx, ctx.reshape(ctx.reduce_with(x.v, axes, "maximum", -np.inf), kept))
    at_max = x.eq(amax)
    ones = x.like(1.0) if w is None else w
    m = total(where(at_max, ones, x.like(0.0)))
    terms = (x - amax).exp() if w is None else w * (x - amax).exp()
    s = total(where(at_max, x.like(0.0), terms))
    s = where(s.eq(0), s, s / m)
    sgn = (s + 1.0).sign() * m.sign()
    s = where(s < -1.0, -s - 2.0, s)
    out = s.log1p() + m.abs().log() + amax
    if not return_sign:
        out = where(sgn < 0, out.like(np.nan), out)
    plain_sgn = plain.sign()
    if return_sign:
        plain = plain.abs()
    finite = out.isfinite()
    out = where(finite, out, plain.log())
    out = N(ctx, ctx.reshape(out.v, out_shape))
    if return_sign:
        sgn = N(ctx, ctx.reshape(where(finite, sgn, plain_sgn).v, out_shape))
        return out.v, sgn.v
    return out.v


def _logsumexp_unweighted(ctx, x, axes, kept, out_shape):
    """The common case, with scipy's arithmetic (log1p of the terms below the maximum, over
    the number of maxima) but one pass fewer: a non-finite maximum (inf, -inf, nan) is
    itself the answer, so no unshifted fallback sum is needed. Loop bodies (an HMM's
    forward recursion) run this once per step."""
    amax, terms, m, s = _logsumexp_terms(ctx, x, axes, kept)
    out = where(amax.isfinite(), (s / m).log1p() + m.log() + amax, amax)
    return ctx.reshape(out.v, out_shape)


def _logsumexp_terms(ctx, x, axes, kept):
    """The maximum, the terms exp(x - max), the number of maxima and the sum of the terms
    below them. The last two are one variadic reduction, one pass over the terms: the HMM's
    value then ran at 1.02x jax.jit's time, 1.19x with two reductions (median ratio of
    3,000 paired calls). The maximum shifts the terms even where it is not finite (no
    select of a finite shift, which XLA kept as a fusion of its own in every loop step):
    the answer is then the maximum itself."""
    amax = N(ctx, ctx.reshape(ctx.reduce_with(x.v, axes, "maximum", -np.inf), kept))
    terms = (x - amax).exp()
    at_max = x.eq(amax)
    zero = ctx.scalar(0, x.v.dtype)
    m, s = (N(ctx, ctx.reshape(r, kept)) for r in ctx.reduce(
        [where(at_max, x.like(1.0), x.like(0.0)).v, where(at_max, x.like(0.0), terms).v], [zero, zero],
        axes, lambda b, m0, s0, m1, s1: [b.binary("add", m0, m1), b.binary("add", s0, s1)]))
    return amax, terms, m, s


def logsumexp_softmax(x, ans, axis=None, keepdims=False):
    """exp(x - ans) for ans = scipy.special.logsumexp(x, axis, keepdims=keepdims): what
    autograd's derivatives of logsumexp compute (compositions/special.py makes this an
    autograd primitive for them)."""
    x = np.asarray(x)
    return np.exp(x - np.reshape(ans, kept_shape(x.shape, normalize_axes(axis, x.ndim))))


@lowers(logsumexp_softmax)
def _logsumexp_softmax(ctx, x, ans, axis=None, keepdims=False):
    """The forward pass's own terms over their sum, exp(x - max) / exp(ans - max), built
    with the very ops logsumexp's rule emits, so that XLA's common-subexpression pass merges
    the two (one exponential per element where autograd's formula takes a second one; the
    HMM's gradient saved its loop's second exponential of 400 terms a step). `ans` is not
    read: its value is logsumexp's of `x`, and it stays an operand for the derivatives."""
    xv = ctx.asvalue(x)
    axes = normalize_axes(axis, xv.ndim)
    amax, terms, m, s = _logsumexp_terms(ctx, N(ctx, xv), axes, kept_shape(xv.shape, axes))
    return where(amax.isfinite(), terms / (m + s), terms).v


@when_imported("scipy.special")
def _register(special):
    for name, body in UFUNCS.items():
        ufunc = getattr(special, name)
        if not isinstance(ufunc, np.ufunc):   # zeta: a Python function calling the ufunc _zeta
            ufunc = getattr(special._ufuncs, "_" + name)
        special_ufunc(ufunc, body, loop=name in SCIPY_LOOPS)
        entry(ufunc).merge = name in LOOPING
    for name, body in NATIVE_UFUNCS.items():
        special_ufunc(getattr(special, name), body, native=True)
    lowers(special.polygamma)(_polygamma)
    lowers(special.logsumexp)(_logsumexp)
