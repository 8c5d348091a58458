"""The numerical kernels of scipy.special's rules (special.py): elementwise functions of
`N` values that build StableHLO as they compute, with nothing registered here.

`N` is a Value and its builder with arithmetic operators, so that kernels read like the
formulas they implement; `while_` and `converge` are elementwise `stablehlo.while` loops
that stop when every element has converged. On them: building blocks (sign of Gamma,
lgamma(1 + a), Stirling's corrections, log-gamma differences and beta), incomplete gamma
and beta, erfcinv, expit/logit, and erf/erfc of complex arguments (algorithm 680 for w(z));
Bessel functions in bessel_kernels.py, on the same blocks. The tolerances are float64's: special.py's rules
convert their operands before calling a kernel and round its result to numpy's dtype.
"""
import functools
import math

import numpy as np

from .. import hlo
from ..registry import LazyModule

sc = LazyModule("scipy.special")  # imported by then: these kernels serve its functions' rules

F64 = np.dtype(np.float64)
EULER = 0.57721566490153286061
LOG_2PI = math.log(2 * math.pi)
EPS = 2.0 ** -53


# ----- a Value with operators ----------------------------------------------------------------
def _deeper(b1, b2):
    return b1 if b1._depth >= b2._depth else b2


def in_32_bits(x):
    """Whether N `x` is computed in 32 bits: a float64 where x64 is off (a TPU), or a float32."""
    return hlo.canonical_dtype(x.dtype).itemsize <= 4


def eps_of(x):
    """The unit roundoff of the precision N `x` is computed in, which the loops' convergence
    tests compare with: float64's EPS asked of float32 arithmetic is never met by a continued
    fraction, whose factor delta hovers an ulp from 1 (gammaincc(3.3, 8) then ran all
    _IGAMMA_MAX_ITER steps and drifted 1.5e-4 off on a TPU)."""
    return 2.0 ** -24 if in_32_bits(x) else EPS


def lentz_tiny(x):
    """Modified Lentz's stand-in for a zero denominator: small, and its reciprocal finite, in
    the precision x is really computed in (1e-300 is float32's 0, and 1 / it inf: gammainc's
    and betainc's continued fractions gave NaN on a TPU)."""
    return 1e-30 if in_32_bits(x) else 1e-300


class N:
    """A Value and the builder to extend it with; scalars in expressions become constants
    of the same dtype. Mixing values of an enclosing builder with those of a loop body
    is fine: ops go to the innermost builder."""

    __slots__ = ("b", "v")

    def __init__(self, b, v):
        self.b, self.v = b, v

    shape = property(lambda self: self.v.shape)
    dtype = property(lambda self: self.v.dtype)

    def _pair(self, o):
        if isinstance(o, N):
            b = _deeper(self.b, o.b)
            x, y = self.v, o.v
            if x.shape != y.shape:
                shape = np.broadcast_shapes(x.shape, y.shape)
                x, y = b.broadcast_to(x, shape), b.broadcast_to(y, shape)
            if y.dtype != x.dtype and x.dtype.kind != "b":
                y = b.convert(y, x.dtype)
            return b, x, y
        return self.b, self.v, self.b.full(self.v.shape, o, self.v.dtype)

    def _bin(self, name, o, swap=False):
        b, x, y = self._pair(o)
        if swap:
            x, y = y, x
        return N(b, b.binary(name, x, y))

    def _cmp(self, o, direction):
        b, x, y = self._pair(o)
        return N(b, b.compare(x, y, direction))

    __add__ = lambda s, o: s._bin("add", o)
    __radd__ = lambda s, o: s._bin("add", o, True)
    __sub__ = lambda s, o: s._bin("subtract", o)
    __rsub__ = lambda s, o: s._bin("subtract", o, True)
    __mul__ = lambda s, o: s._bin("multiply", o)
    __rmul__ = lambda s, o: s._bin("multiply", o, True)
    __truediv__ = lambda s, o: s._bin("divide", o)
    __rtruediv__ = lambda s, o: s._bin("divide", o, True)
    __pow__ = lambda s, o: s._bin("power", o)
    __and__ = lambda s, o: s._bin("and", o)
    __or__ = lambda s, o: s._bin("or", o)
    __lt__ = lambda s, o: s._cmp(o, "LT")
    __le__ = lambda s, o: s._cmp(o, "LE")
    __gt__ = lambda s, o: s._cmp(o, "GT")
    __ge__ = lambda s, o: s._cmp(o, "GE")

    def eq(self, o):
        return self._cmp(o, "EQ")

    def ne(self, o):
        return self._cmp(o, "NE")

    def __neg__(self):
        return self._u("negate")

    def __invert__(self):
        return self._u("not")

    def _u(self, name):
        return N(self.b, self.b.unary(name, self.v))

    def _c(self, name):
        return N(self.b, self.b.chlo(name, self.v))

    exp = lambda s: s._u("exponential")
    expm1 = lambda s: s._u("exponential_minus_one")
    log = lambda s: s._u("log")

    def log1p(self):
        """XLA's log_plus_one loses ~7 bits for x in [-0.5, -0.3]; there this uses
        log1p(x) = -log1p(-x / (1 + x)), whose argument lies where it is accurate."""
        bad = (self > -0.6) & (self < -0.25)
        safe = where(bad, self, self.like(-0.4))
        return where(bad, -(-safe / (1.0 + safe))._u("log_plus_one"), self._u("log_plus_one"))

    sqrt = lambda s: s._u("sqrt")
    abs = lambda s: s._u("abs")
    floor = lambda s: s._u("floor")
    sin = lambda s: s._u("sine")
    cos = lambda s: s._u("cosine")
    sign = lambda s: s._u("sign")
    lgamma = lambda s: s._c("lgamma")
    digamma = lambda s: s._c("digamma")
    erf = lambda s: s._c("erf")
    erfc = lambda s: s._c("erfc")
    erfinv = lambda s: s._c("erf_inv")
    i1e = lambda s: s._c("bessel_i1e")

    def isnan(self):
        return self.ne(self)

    def isfinite(self):
        return N(self.b, self.b.op1("stablehlo.is_finite", [self.v], self.v.shape, np.bool_))

    def astype(self, dtype):
        return N(self.b, self.b.astype(self.v, dtype))

    def like(self, value):
        """A constant of this shape and dtype."""
        return N(self.b, self.b.full(self.v.shape, value, self.v.dtype))

    def any(self):
        return N(self.b, self.b.reduce_with(self.v, range(self.v.ndim), "or", False))

    def max(self):
        return N(self.b, self.b.reduce_with(self.v, range(self.v.ndim), "maximum", -np.inf))

    def min(self):
        return N(self.b, self.b.reduce_with(self.v, range(self.v.ndim), "minimum", np.inf))


def where(c, x, y):
    """Elementwise select; x or y may be Python numbers."""
    ref = x if isinstance(x, N) else y
    if not isinstance(x, N):
        x = ref.like(x)
    if not isinstance(y, N):
        y = ref.like(y)
    b = _deeper(_deeper(c.b, x.b), y.b)
    shape = np.broadcast_shapes(c.shape, x.shape, y.shape)
    return N(b, b.select(b.broadcast_to(c.v, shape), b.broadcast_to(x.v, shape), b.broadcast_to(y.v, shape)))


def maximum(x, y):
    return x._bin("maximum", y)


def minimum(x, y):
    return x._bin("minimum", y)


def chlo2(name, x, y):
    b, xv, yv = x._pair(y)
    return N(b, b.chlo(name, xv, yv))


def polyval(coeffs, x):
    """sum(c[k] * x**k), Horner's scheme."""
    out = x.like(coeffs[-1])
    for c in reversed(coeffs[:-1]):
        out = out * x + c
    return out


def is_integer(x):
    return x.eq(x.floor())


def is_odd(n):
    """n integer-valued (any magnitude): n/2 not an integer."""
    half = n * 0.5
    return half.ne(half.floor())


def scalar(b, value, dtype=F64):
    return N(b, b.constant(np.asarray(value, dtype)))


# ----- loops ---------------------------------------------------------------------------------
def while_(b, carry, cond, body):
    """stablehlo.while over N values: cond(builder, carry) -> bool N scalar,
    body(builder, carry) -> new carry (same shapes and dtypes)."""
    def wrap(bb, args):
        return [N(bb, a) for a in args]

    def body_fn(bb, *args):
        new = body(bb, wrap(bb, args))
        out = []
        for n, old in zip(new, args):
            v = n.v if isinstance(n, N) else bb.full(old.shape, n, old.dtype)
            if v.shape != old.shape:
                v = bb.broadcast_to(v, old.shape)
            out.append(v)
        return out

    outs = b.while_loop([c.v for c in carry], lambda bb, *a: cond(bb, wrap(bb, a)).v, body_fn)
    return [N(b, o) for o in outs]


def converge(b, active, state, step, max_iter):
    """Iterate `step(builder, state) -> (new_state, still_active)` elementwise while any
    element is active (and at most max_iter times); inactive elements keep their state."""
    i0 = scalar(b, 0, np.int64)

    def cond(bb, c):
        return (c[0] < max_iter) & c[1].any()

    def body(bb, c):
        i, act, st = c[0], c[1], c[2:]
        new, still = step(bb, st)
        return [i + 1, act & still] + [where(act, n, s) for n, s in zip(new, st)]

    return while_(b, [i0, active] + list(state), cond, body)[2:]


# ----- building blocks -----------------------------------------------------------------------
def gammasgn(x):
    """Sign of Gamma(x): scipy's conventions (nan at poles and -inf, signed zero at 0)."""
    one = x.like(1.0)
    neg = where(is_odd(x.floor()), -one, one)
    bits = N(x.b, x.b.bitcast_convert(x.v, np.int64))
    zero_sign = where(bits < 0, -one, one)                       # -0.0 has the sign bit
    out = where(x > 0, one, where(x.eq(0), zero_sign, where(is_integer(x), x.like(np.nan), neg)))
    return where(x.isnan(), x, out)


@functools.cache
def _lgamma1p_series():
    """Coefficients of lgamma(1 + a) about a = 0: -EULER*a + sum_{k>=2} (-1)^k zeta(k) a^k / k."""
    return [0.0, -EULER] + [(-1) ** k * float(sc.zeta(k)) / k for k in range(2, 28)]


def lgamma1p(a):
    """lgamma(1 + a), accurate for small |a| (1 + a would round a away)."""
    small = a.abs() < 0.2
    t = where(small, a, a.like(0.0))
    series = polyval(_lgamma1p_series(), t)
    return where(small, series, (a + 1.0).lgamma())


def lgamma_near_zeros(x):
    """lgamma(x), from lgamma1p's series within 0.2 of its zeros at 1 and 2 (lgamma(2 + d) =
    log1p(d) + lgamma1p(d); x - 1 and x - 2 are exact there), where XLA's lgamma keeps only
    an absolute accuracy: 1.8e-12 relative at x = 2.0025, 8.9e-16 for lgamma(2) = 0."""
    d1, d2 = x - 1.0, x - 2.0
    near1, near2 = d1.abs() < 0.2, d2.abs() < 0.2
    t1, t2 = where(near1, d1, x.like(0.0)), where(near2, d2, x.like(0.0))
    return where(near1, lgamma1p(t1), where(near2, t2.log1p() + lgamma1p(t2), x.lgamma()))


#: digamma's positive zero and its value there in float64, as scipy's digamma has them
DIGAMMA_ROOT, DIGAMMA_AT_ROOT = 1.4616321449683622, -9.2412655217294275e-17


@functools.cache
def _digamma_root_series():
    """Coefficients of digamma about its positive zero: the value there, then
    (-1)^(k+1) zeta(k + 1, root) for k >= 1 (scipy's own series there)."""
    return [DIGAMMA_AT_ROOT] + [(-1) ** (k + 1) * float(sc.zeta(k + 1, DIGAMMA_ROOT)) for k in range(1, 36)]


def _digamma_root_taylor(x):
    """(digamma(x) from its Taylor series about its positive zero, where |x - root| < 0.3)."""
    d = x - DIGAMMA_ROOT
    near = d.abs() < 0.3
    return near, polyval(_digamma_root_series(), where(near, d, x.like(0.0)))


def digamma_near_root(x):
    """digamma(x), from its Taylor series within 0.3 of its positive zero (1.4616...), where
    XLA's digamma keeps only an absolute accuracy (1e-12 relative 5e-4 away from it); for
    x within 0.3 of 1 - root, where XLA reflects to digamma(1 - x) near the root, by the
    reflection digamma(1 - x) - pi cot(pi x) with that series (on a TPU, digamma(-0.5) =
    0.036 came 5e-6 off from XLA's)."""
    near, series = _digamma_root_taylor(x)
    reflected, series_1mx = _digamma_root_taylor(1.0 - x)
    cos_pi, sin_pi = cos_sin_pi(where(reflected, x, x.like(-0.5)))
    out = where(reflected, series_1mx - math.pi * cos_pi / sin_pi, x.digamma())
    return where(near, series, out)


def cos_sin_pi(x):
    """(cos(pi x), sin(pi x)) from x's distance r to the nearest half-integer, exact in
    floating point, and Taylor polynomials in it on |pi r| <= pi / 4 (|term| < 1e-17 past
    the 19th power): no trigonometric function of XLA, so cos(pi / 2) is exactly 0."""
    n = x.floor()
    r = x - n                                       # [0, 1), exact
    low, high = r <= 0.25, r > 0.75
    u = where(low, r, where(high, 1.0 - r, 0.5 - r))  # |u| <= 1/4, each difference exact
    t = math.pi * u
    t2 = t * t
    s = t * polyval([(-1) ** k / math.factorial(2 * k + 1) for k in range(10)], t2)   # sin(pi u)
    c = polyval([(-1) ** k / math.factorial(2 * k) for k in range(11)], t2)           # cos(pi u)
    sin_r = where(low | high, s, c)                 # sin(pi r): sin(pi (1 - r)) = sin(pi r)
    cos_r = where(low, c, where(high, -c, s))       # cos(pi r): cos(pi (1/2 - u)) = sin(pi u)
    sign = where(is_odd(n), x.like(-1.0), x.like(1.0))
    return sign * cos_r, sign * sin_r


def stirling_corr(x):
    """lgamma(x) - ((x - 1/2) log x - x + log(2 pi)/2), for x >= 10 (Stirling's series)."""
    xs = maximum(x, x.like(10.0))
    r = 1.0 / xs
    r2 = r * r
    # B_2k / (2k (2k - 1)) for k = 1..8
    c = [1 / 12, -1 / 360, 1 / 1260, -1 / 1680, 1 / 1188, -691 / 360360, 1 / 156, -3617 / 122400]
    return r * polyval(c, r2)


def log1pmx(d):
    """log1p(d) - d, accurate near d = 0: with t = d/(2+d), log1p(d) = 2 atanh(t), so
    log1p(d) - d = -d^2/(2+d) + 2 t^3 (1/3 + t^2/5 + t^4/7 + ...)."""
    small = d.abs() < 0.3
    ds = where(small, d, d.like(0.0))
    t = ds / (2.0 + ds)
    t2 = t * t
    series = -ds * ds / (2.0 + ds) + 2.0 * t * t2 * polyval([1.0 / (2 * k + 3) for k in range(12)], t2)
    return where(small, series, d.log1p() - d)


def _stirling_diff(a, b):
    """lgamma(a + b) - lgamma(a) from Stirling's series; valid for a, a + b >= 10."""
    s = a + b
    return (a - 0.5) * (b / a).log1p() + b * s.log() - b + stirling_corr(s) - stirling_corr(a)


def lgamma_diff(a, b):
    """lgamma(a + b) - lgamma(a); Stirling's form when both arguments are >= 10, where
    the plain difference would cancel (a large, b small)."""
    s = a + b
    big = (a >= 10.0) & (s >= 10.0)
    stirling = _stirling_diff(where(big, a, a.like(10.0)), where(big, b, b.like(1.0)))
    return where(big, stirling, s.lgamma() - a.lgamma())


def _betaln_core(a, b):
    lg_a, lg_b = a.lgamma(), b.lgamma()
    lo, hi = minimum(a, b), maximum(a, b)
    big = (lo > 0) & (hi >= 10.0) & hi.isfinite()
    plain = lg_a + lg_b - (a + b).lgamma()
    stirling = where(a < b, lg_a, lg_b) - _stirling_diff(where(big, hi, hi.like(10.0)), where(big, lo, lo.like(1.0)))
    out = where(big, stirling, plain)
    return where(hi.eq(np.inf) & (lo > 0) & lo.isfinite(), a.like(-np.inf), out)


def beta_parts(a, b):
    """(sign, log|B(a, b)|) with scipy's limits where an argument is a pole of Gamma:
    for a a non-positive integer, B = (-1)^b B(1 - a - b, b) when b is an integer with
    1 - a - b > 0, and +inf otherwise (likewise with a and b exchanged)."""
    sign = gammasgn(a) * gammasgn(b) * gammasgn(a + b)
    sign = where(sign.isnan(), a.like(1.0), sign)
    pa, pb = (a <= 0) & is_integer(a), (b <= 0) & is_integer(b)
    p, q = where(pa, a, b), where(pa, b, a)           # p: the pole argument, if any
    c = 1.0 - p - q
    pole = pa | pb
    limit = pole & is_integer(q) & (c > 0) & q.isfinite()
    finite = limit & (q > 0)                          # B(c, q) itself is infinite for q <= 0
    aa, bb = where(finite, c, a), where(finite, q, b)
    aa, bb = where(pole & ~finite, a.like(1.0), aa), where(pole & ~finite, b.like(1.0), bb)
    log_b = _betaln_core(aa, bb)
    sign = where(pole, where(limit & is_odd(q), a.like(-1.0), a.like(1.0)), sign)
    log_b = where(pole & ~finite, a.like(np.inf), log_b)
    nan = a.isnan() | b.isnan()
    return where(nan, a.like(np.nan), sign), where(nan, a.like(np.nan), log_b)


def betaln(a, b):
    """log|B(a, b)|."""
    return beta_parts(a, b)[1]


def log_gamma_prefactor(a, x):
    """log(x**a exp(-x) / Gamma(a)); for a >= 10 as a*(log1p(d) - d) + Stirling terms with
    d = (x - a)/a, which does not lose a*log(x) - x - lgamma(a) to cancellation."""
    big = a >= 10.0
    aa = where(big, a, a.like(10.0))
    d = (x - aa) / aa
    # far below the mode log1p(d) is log(x / a): 1 + d would keep d's rounding error, which
    # is x/a's relative error times a/x (gammainc(47.6, 1e-4) was 1.5e-9 off)
    far = d < -0.5
    ratio = where(far, x / aa, x.like(1.0))
    log1pmx_d = where(far, ratio.log() - d, log1pmx(where(far, d.like(0.0), d)))
    stirling = aa * log1pmx_d + 0.5 * (aa.log() - LOG_2PI) - stirling_corr(aa)
    xs = where(x > 0, x, x.like(1.0))
    plain = a * xs.log() - x - a.lgamma()
    return where(big, stirling, plain)


# ----- incomplete gamma ----------------------------------------------------------------------
_IGAMMA_MAX_ITER = 5000  # both loops need O(sqrt(a)) steps near x = a: a up to ~1e5


def _igamma_series(b, a, x, active):
    """sum_n x^n / ((a+1)...(a+n)); P(a, x) = x^a e^-x / Gamma(a+1) * this."""
    def step(bb, st):
        n, term, total = st
        n = n + 1.0
        term = term * x / (a + n)
        total = total + term
        return [n, term, total], term > total * eps_of(x)
    one = a.like(1.0)
    _, _, total = converge(b, active, [a.like(0.0), one, one], step, _IGAMMA_MAX_ITER)
    return total


def _igamma_cf(b, a, x, active):
    """Legendre's continued fraction, modified Lentz; Q(a, x) = x^a e^-x / Gamma(a) * this."""
    tiny = lentz_tiny(x)
    bn = x + 1.0 - a
    c = a.like(1.0 / tiny)
    d = 1.0 / where(bn.abs() < tiny, bn.like(tiny), bn)
    h = d

    def step(bb, st):
        i, bn, c, d, h = st
        i = i + 1.0
        an = -i * (i - a)
        bn = bn + 2.0
        d = an * d + bn
        d = where(d.abs() < tiny, d.like(tiny), d)
        c = bn + an / c
        c = where(c.abs() < tiny, c.like(tiny), c)
        d = 1.0 / d
        delta = d * c
        return [i, bn, c, d, h * delta], (delta - 1.0).abs() > eps_of(x)
    *_, h = converge(b, active, [a.like(0.0), bn, c, d, h], step, _IGAMMA_MAX_ITER)
    return h


def _igamma_q_small(b, a, x, active):
    """Q(a, x) for a < 1, x < a + 1: 1 - x^a/Gamma(1+a) minus x^a/Gamma(1+a) * a *
    sum_{n>=1} (-x)^n / (n! (a + n)), so that Q stays accurate when it is ~a."""
    def step(bb, st):
        n, term, total = st
        n = n + 1.0
        term = -term * x / n
        add = term / (a + n)
        return [n, term, total + add], add.abs() > total.abs() * eps_of(x)
    zero = a.like(0.0)
    _, _, total = converge(b, active, [zero, a.like(1.0), zero], step, 200)
    u = a * x.log() - lgamma1p(a)
    return -u.expm1() - u.exp() * a * total


def igamma(b, a, x, upper):
    """Regularised incomplete gamma P(a, x) (upper=False) or Q(a, x), with scipy's values
    at the edges of the domain."""
    bad = a.isnan() | x.isnan() | (a < 0) | (x < 0) | (a.eq(0) & x.eq(0))
    inner = (a > 0) & (x > 0) & a.isfinite() & x.isfinite()
    use_cf = inner & (x >= a + 1.0)
    use_series = inner & ~use_cf
    use_q_small = use_series & (a < 1.0)
    # safe stand-ins where a branch does not apply, so no branch produces inf/nan
    one = a.like(1.0)
    a_s, x_s = where(use_series, a, one), where(use_series, x, one)
    a_c, x_c = where(use_cf, a, one), where(use_cf, x, x.like(3.0))
    prefactor = log_gamma_prefactor(where(use_series, a_s, a_c), where(use_series, x_s, x_c)).exp()
    p_series = prefactor / a_s * _igamma_series(b, a_s, x_s, use_series)
    q_cf = prefactor * _igamma_cf(b, a_c, x_c, use_cf)
    if upper:
        a_q, x_q = where(use_q_small, a, a.like(0.5)), where(use_q_small, x, one)
        q_small = _igamma_q_small(b, a_q, x_q, use_q_small)
        q = where(use_cf, q_cf, where(use_q_small, q_small, 1.0 - p_series))
        edge_one = x.eq(0) | (a.eq(np.inf) & x.isfinite())
        edge_zero = (a.eq(0) & (x > 0)) | (x.eq(np.inf) & (a > 0))
        out = where(edge_one, one, where(edge_zero, a.like(0.0), q))
    else:
        p = where(use_cf, 1.0 - q_cf, p_series)
        edge_zero = x.eq(0) | (a.eq(np.inf) & x.isfinite())
        edge_one = (a.eq(0) & (x > 0)) | (x.eq(np.inf) & (a > 0))
        out = where(edge_one, one, where(edge_zero, a.like(0.0), p))
    return where(bad, a.like(np.nan), out)


# ----- incomplete beta -----------------------------------------------------------------------
_IBETA_MAX_ITER = 5000


def _ibeta_cf(b, a, bb_, x, y, active):
    """Continued fraction of I_x(a, b) (modified Lentz); I = x^a y^b / (a B(a,b)) * this.
    Its first denominator 1 - (a+b) x/(a+1) is formed as (1 - b + (a+b) y)/(a+1): for
    large a and x near 1 the former cancels."""
    tiny = lentz_tiny(x)
    qab, qap, qam = a + bb_, a + 1.0, a - 1.0
    c = a.like(1.0)
    d = (1.0 - bb_ + qab * y) / qap
    d = 1.0 / where(d.abs() < tiny, d.like(tiny), d)
    h = d

    def fix(v):
        return where(v.abs() < tiny, v.like(tiny), v)

    def step(bld, st):
        m, c, d, h = st
        m = m + 1.0
        m2 = 2.0 * m
        aa = m * (bb_ - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 / fix(1.0 + aa * d)
        c = fix(1.0 + aa / c)
        h = h * d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 / fix(1.0 + aa * d)
        c = fix(1.0 + aa / c)
        delta = d * c
        return [m, c, d, h * delta], (delta - 1.0).abs() > eps_of(x)
    *_, h = converge(b, active, [a.like(0.0), c, d, h], step, _IBETA_MAX_ITER)
    return h


def _ibeta_series(b, a, bb_, x, active):
    """1 + a sum_{j>=1} (1-b)(2-b)...(j-b)/j! x^j/(a+j); I_x(a,b) = x^a/(a B(a,b)) * this.
    Used for b < 1 above the mean, where 1 - I_{1-x}(b, a) would cancel."""
    def step(bld, st):
        j, t, total = st
        j = j + 1.0
        t = t * (j - bb_) * x / j
        add = a * t / (a + j)
        return [j, t, total + add], add.abs() > total.abs() * eps_of(x)
    one = a.like(1.0)
    _, _, total = converge(b, active, [a.like(0.0), one, one], step, _IBETA_MAX_ITER)
    return total


def _log_beta_prefactor(a, bb_, x, y):
    """log(x^a y^b / B(a, b)); for a, b >= 10 written around the mode, as
    -a*(dx - log1p(dx)) - b*(dy - log1p(dy)) + Stirling terms, free of cancellation."""
    big = (a >= 10.0) & (bb_ >= 10.0)
    a_s, b_s = where(big, a, a.like(10.0)), where(big, bb_, bb_.like(10.0))
    s = a_s + b_s
    x0, y0 = a_s / s, b_s / s
    stirling = (a_s * log1pmx((x - x0) / x0) + b_s * log1pmx((y - y0) / y0)
                + 0.5 * ((a_s * b_s / s).log() - LOG_2PI)
                + stirling_corr(s) - stirling_corr(a_s) - stirling_corr(b_s))
    lx = where(x > 0.5, (-y).log1p(), x.log())
    ly = where(y > 0.5, (-x).log1p(), y.log())
    plain = a * lx + bb_ * ly - _betaln_core(a, bb_)     # a, b > 0 here: no poles to handle
    return where(big, stirling, plain)


_SMALL_B = 0.2


@functools.cache
def _gauss_legendre(n):
    """Nodes and weights of n-point Gauss-Legendre quadrature on [-1, 1], as floats."""
    return [tuple(map(float, v)) for v in np.polynomial.legendre.leggauss(n)]


def _ibeta_small_b(a, bb_, y):
    """I_x(a, b) for b < 0.2 above the mean, as -expm1(log I_y(b, a)): 1 - I_y(b, a)
    cancels to about b's size (20,000 points with x > 0.97 and b < 1: two thirds were off by
    more than 2e-12, betainc(2.23, 9.9e-8, 0.9934) = 3.85e-7 by 5.5e-9, b < 1e-14 by 100 %;
    now at most 5e-13). From the series of I_y(b, a), log I_y(b, a) = b log y + log G +
    log1p(b T) with G = Gamma(a+b) / (Gamma(a) Gamma(1+b)) and T = sum_{j>=1} (1-a)_j/j!
    y^j/(b + j). log G is -log1p(b/a) + [lgamma(1+a+b) - lgamma(1+a)] - lgamma(1+b), the
    bracket as the integral of digamma over [1+a, 1+a+b] by 6-point Gauss-Legendre (digamma
    is analytic within 1 of an interval at most 0.2 long: the rule's error is ~20^-12).
    Above the mean y < (1+b)/(a+b+2), so a*y < 1+b and 20 terms of T suffice."""
    nodes, weights = _gauss_legendre(6)
    half = 0.5 * bb_
    z = a + 1.0 + half
    bracket = sum((z + half * t).digamma() * w for t, w in zip(nodes, weights)) * half
    log_g = bracket - (bb_ / a).log1p() - lgamma1p(bb_)
    t, total = a.like(1.0), a.like(0.0)
    for j in range(1, 21):
        t = t * (j - a) * y / j
        total = total + t / (bb_ + float(j))
    return -(bb_ * y.log() + log_g + (bb_ * total).log1p()).expm1()


def ibeta(b, a, bb_, x, y=None):
    """Regularised incomplete beta I_x(a, b); y = 1 - x when the caller knows it better."""
    if y is None:
        y = 1.0 - x
    bad = (a.isnan() | bb_.isnan() | x.isnan() | (a < 0) | (bb_ < 0) | (x < 0) | (x > 1)
           | (a.eq(0) & bb_.eq(0)) | (a.eq(np.inf) & bb_.eq(np.inf)))
    inner = (a > 0) & (bb_ > 0) & a.isfinite() & bb_.isfinite() & (x > 0) & (x < 1)
    swap = x > (a + 1.0) / (a + bb_ + 2.0)
    series = inner & swap & (bb_ < 1.0) & (x < 0.99)
    a1, b1 = where(swap, bb_, a), where(swap, a, bb_)
    x1, y1 = where(swap, y, x), where(swap, x, y)
    one, half = a.like(1.0), a.like(0.5)
    a1, b1 = where(inner, a1, one), where(inner, b1, one)
    x1, y1 = where(inner, x1, half), where(inner, y1, half)
    # one prefactor for both methods: the series needs x^a/(a B(a,b)), without y^b
    a2, b2, x2, y2 = where(series, a, a1), where(series, bb_, b1), where(series, x, x1), where(series, y, y1)
    log_pre = _log_beta_prefactor(a2, b2, x2, y2) - a2.log()
    ly = where(x2 > 0.5, y2.log(), (-x2).log1p())
    log_pre = where(series, log_pre - b2 * ly, log_pre)
    cf = _ibeta_cf(b, a1, b1, x1, y1, inner & ~series)
    ser = _ibeta_series(b, a2, b2, x2, series)
    r = log_pre.exp() * where(series, ser, cf)
    out = where(swap & ~series, 1.0 - r, r)
    small_b = inner & swap & ~series & (bb_ < _SMALL_B)
    out = where(small_b, _ibeta_small_b(where(small_b, a, one), where(small_b, bb_, a.like(_SMALL_B)),
                                        where(small_b, y, half)), out)
    zero = a.like(0.0)
    out = where(x.eq(0) & (a > 0), zero, out)
    out = where(x.eq(1) & (bb_ > 0), one, out)
    out = where(a.eq(0) & (bb_ > 0), one, out)
    out = where(bb_.eq(0) & (a > 0), zero, out)
    out = where(a.eq(np.inf) & bb_.isfinite() & (x < 1), zero, out)
    out = where(bb_.eq(np.inf) & a.isfinite() & (x > 0), one, out)
    return where(bad, a.like(np.nan), out)


# ----- error function inverses, logistic -----------------------------------------------------
def erfcinv(y):
    """Inverse of erfc on [0, 2]. Near y = 1 it is erfinv(1 - y), exact there; in the tails
    1 - y rounds away the information, so Newton steps on log(erfc(z)) = log(y) refine
    erfinv's guess (or, for tiny y, the asymptotic root of erfc(z) ~ exp(-z^2)/(z sqrt(pi)):
    below 1e-12, or 1e-5 in 32 bits, where 1 - y rounds to 1 from 3e-8 on and erfinv's guess
    is infinite)."""
    upper = y > 1.0
    t = where(upper, 2.0 - y, y)                      # exact for y in [1, 2]
    t_safe = where((t > 0) & (t <= 1.0), t, t.like(0.5))
    z = (1.0 - t_safe).erfinv()
    lt = t_safe.log()
    base = -(t_safe * math.sqrt(math.pi)).log()
    z_asym = (base - (base.sqrt()).log()).sqrt()
    z = where(t_safe < (1e-5 if in_32_bits(y) else 1e-12), z_asym, z)
    for _ in range(4):
        lec = z.erfc().log()
        # d/dz log(erfc(z)) = -2 exp(-z^2) / (sqrt(pi) erfc(z)), formed in log space (with
        # exp(-z^2) / erfc(z) as a quotient, XLA's simplifier stalled the iteration)
        deriv = -2.0 / math.sqrt(math.pi) * (-(z * z) - lec).exp()
        z = z - (lec - lt) / deriv
    z = where(t_safe >= 0.5, (1.0 - t_safe).erfinv(), z)
    z = where(upper, -z, z)
    z = where(y.eq(0), y.like(np.inf), where(y.eq(2), y.like(-np.inf), z))
    return where((y < 0) | (y > 2) | y.isnan(), y.like(np.nan), z)


def expit(x):
    e = (-x.abs()).exp()
    return where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def logit(x):
    """log(x / (1 - x)); near 1/2 as log1p((2x - 1) / (1 - x)), whose operands are exact."""
    mid = (x > 0.3) & (x < 0.65)
    plain = (x / (1.0 - x)).log()
    return where(mid, ((2.0 * x - 1.0) / (1.0 - x)).log1p(), plain)


# ----- complex erf / erfc ---------------------------------------------------------------------
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _round(x):
    return (x + 0.5).floor()


def wofz_upper(x, y):
    """Faddeeva w(x + iy) for y >= 0 by Poppe & Wijers' algorithm 680 (ACM TOMS 16, 1990),
    its data-dependent term counts as masks on fixed unrolled loops. Returns (re, im)."""
    xabs, yabs = x.abs(), y
    xs, ys = xabs / 6.3, yabs / 4.4
    qrho = xs * xs + ys * ys
    xquad = (xabs - yabs) * (xabs + yabs)
    yquad = 2.0 * xabs * yabs
    taylor = qrho < 0.085264
    # |z| small: the power series of exp(-z^2) erfc(-iz)
    n1 = _round(6.0 + 72.0 * ((1.0 - 0.85 * ys) * qrho.sqrt()))
    xsum, ysum = 1.0 / (2.0 * n1 + 1.0), x.like(0.0)
    for i in range(27, 0, -1):
        on = n1 >= i
        xaux = (xsum * xquad - ysum * yquad) / i
        ysum = where(on, (xsum * yquad + ysum * xquad) / i, ysum)
        xsum = where(on, xaux + 1.0 / (2 * i - 1), xsum)
    u1 = 1.0 - _TWO_OVER_SQRT_PI * (xsum * yabs + ysum * xabs)
    v1 = _TWO_OVER_SQRT_PI * (xsum * xabs - ysum * yabs)
    daux = (-xquad).exp()
    u2, v2 = daux * yquad.cos(), -daux * yquad.sin()
    ut, vt = u1 * u2 - v1 * v2, u1 * v2 + v1 * u2
    # elsewhere: Laplace's continued fraction, with Gautschi's series inside the ellipse
    big = qrho > 1.0
    nu_big = (3.0 + 1442.0 / (26.0 + 77.0 * where(big, qrho, 1.0).sqrt())).floor()
    q2 = (1.0 - ys) * where(big | taylor, 0.5, 1.0 - qrho).sqrt()
    h = where(big, 0.0, 1.88 * q2)
    h2 = 2.0 * h
    kapn = where(big, -1.0, _round(7.0 + 34.0 * q2))
    nu = where(big, nu_big, _round(16.0 + 26.0 * q2))
    qlambda = where(big, 1.0, h2) ** where(big, 0.0, kapn)
    rx = ry = sx = sy = x.like(0.0)
    for n in range(42, -1, -1):
        on = nu >= n
        tx = yabs + h + (n + 1) * rx
        ty = xabs - (n + 1) * ry
        c = 0.5 / (tx * tx + ty * ty)
        rx, ry = where(on, c * tx, rx), where(on, c * ty, ry)
        s_on = on & (kapn >= n)
        tx = qlambda + sx
        sx, sy = where(s_on, rx * tx - ry * sy, sx), where(s_on, ry * tx + rx * sy, sy)
        qlambda = where(s_on, qlambda / where(big, 1.0, h2), qlambda)
    uc = _TWO_OVER_SQRT_PI * where(big, rx, sx)
    vc = _TWO_OVER_SQRT_PI * where(big, ry, sy)
    uc = where(yabs.eq(0), (-(xabs * xabs)).exp(), uc)
    u, v = where(taylor, ut, uc), where(taylor, vt, vc)
    return u, where(x < 0, -v, v)


def _erf_series(a, b):
    """erf(a + ib) by its Taylor series (|z| <= 2: at most ~2 digits of cancellation)."""
    tr, ti = (b - a) * (b + a), -2.0 * a * b          # -z^2
    sr, si = a.like(1.0 / (math.factorial(40) * 81)), a.like(0.0)
    for n in range(39, -1, -1):
        sr, si = 1.0 / (math.factorial(n) * (2 * n + 1)) + (tr * sr - ti * si), tr * si + ti * sr
    return _TWO_OVER_SQRT_PI * (a * sr - b * si), _TWO_OVER_SQRT_PI * (a * si + b * sr)


def _erfc_first_quadrant(a, b):
    """erfc(a + ib) = exp(-z^2) w(iz) for a, b >= 0."""
    wr, wi = wofz_upper(-b, a)
    mag = (-(a - b) * (a + b)).exp()
    ph = 2.0 * a * b
    er, ei = mag * ph.cos(), -mag * ph.sin()
    return er * wr - ei * wi, er * wi + ei * wr


def complex_erf(ctx, z, complementary):
    """erf / erfc of a complex128 Value, by symmetry from the first quadrant: the Taylor
    series for |z| <= 2, otherwise exp(-z^2) w(iz) with w from algorithm 680."""
    x, y = N(ctx, ctx.real(z)), N(ctx, ctx.imag(z))
    a, b = x.abs(), y.abs()
    small = (a * a + b * b) <= 4.0
    sa, sb = where(small, a, 0.5), where(small, b, 0.5)
    la, lb = where(small, 3.0, a), where(small, 3.0, b)
    er, ei = _erf_series(sa, sb)                  # erf, first quadrant
    pr, pi_ = _erfc_first_quadrant(la, lb)        # erfc, first quadrant
    sx, sy = where(x < 0, -1.0, x.like(1.0)), where(y < 0, -1.0, y.like(1.0))
    if complementary:   # erfc(-z) = 2 - erfc(z), erfc(conj z) = conj erfc(z)
        re = where(small, 1.0 - sx * er, where(x < 0, 2.0 - pr, pr))
        im = sy * where(small, -ei, pi_)
    else:               # erf(-z) = -erf(z), erf(conj z) = conj erf(z)
        re = sx * where(small, er, 1.0 - pr)
        im = sy * where(small, ei, -pi_)
    nan = x.isnan() | y.isnan()
    re, im = where(nan, x.like(np.nan), re), where(nan, x.like(np.nan), im)
    return ctx.complex(re.v, im.v)
