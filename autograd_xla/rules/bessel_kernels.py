"""The Bessel-function kernels of scipy.special's rules (special.py): J, Y and I of real order
(Hankel's asymptotic expansions, Miller's backward recurrence, the power series), on
special_kernels.py's `N` values and elementwise loops; nothing registered here."""
import math

import numpy as np

from .special_kernels import (EULER, converge, eps_of, gammasgn, in_32_bits, is_integer, is_odd, maximum, minimum,
                              scalar, where, while_)


_HANKEL_TERMS = 40


def _hankel_sums(b, v, x):
    """Sums of the terms a_k = prod_{j<=k} (4v^2 - (2j-1)^2) / (k! (8x)^k) of Hankel's
    expansions, taken while they still decrease (past the first 2|v| of them):
    P = sum (-1)^k a_2k, Q = sum (-1)^k a_2k+1, S = sum (-1)^k a_k."""
    mu = 4.0 * v * v
    one, zero = x.like(1.0), x.like(0.0)
    alive = one > 0.0

    def cond(bb, c):
        return (c[0] <= float(_HANKEL_TERMS)) & c[5].any()

    def body(bb, c):
        k, t, p, q, s, alive = c
        odd_sq = (2.0 * k - 1.0) * (2.0 * k - 1.0)
        new = t * (mu - odd_sq) / (8.0 * k * x)
        alive = alive & ((new.abs() < t.abs()) | (mu > odd_sq))
        term = where(alive, new, zero)
        r = k - 4.0 * (k * 0.25).floor()               # k mod 4
        q = q + where(r.eq(1.0), term, where(r.eq(3.0), -term, zero))
        p = p + where(r.eq(2.0), -term, where(r.eq(0.0), term, zero))
        s = s + where(is_odd(k), -term, term)
        return [k + 1.0, new, p, q, s, alive]
    _, _, p, q, s, _ = while_(b, [scalar(b, 1.0), one, one, zero, one, alive], cond, body)
    return p, q, s


def _hankel_jy(b, v, x):
    """J_v(x), Y_v(x) from Hankel's asymptotic expansion (x large)."""
    p, q, _ = _hankel_sums(b, v, x)
    phase = (0.5 * v + 0.25) * math.pi
    cx, sx, cp, sp = x.cos(), x.sin(), phase.cos(), phase.sin()
    cos_chi = cx * cp + sx * sp
    sin_chi = sx * cp - cx * sp
    amp = (2.0 / (math.pi * x)).sqrt()
    return amp * (p * cos_chi - q * sin_chi), amp * (p * sin_chi + q * cos_chi)


def _hankel_ive(b, v, x):
    """I_v(x) exp(-x) from its asymptotic expansion (x large)."""
    _, _, s = _hankel_sums(b, v, x)
    return s / (2.0 * math.pi * x).sqrt()


def _miller_start(x, order):
    """An even order far enough above max(x, order) for backward recurrence."""
    top = maximum(x, order)
    return 2.0 * ((top + 20.0 + 3.0 * (top + 10.0).sqrt()) * 0.5).floor() + 2.0


def _miller(b, frac, x, target, active, with_y=False):
    """Backward recurrence for f_m ~ J_{frac+m}(x), m from a start order down to
    min(target, 0), normalised with (x/2)^frac / Gamma(frac+1) = sum_k e_k J_{frac+2k}.
    Returns J_{frac+target}(x) and, if with_y (frac = 0), J_0, J_1 and the two Neumann
    sums that give Y_0 and Y_1. `active` marks the elements that need it."""
    one, zero = x.like(1.0), x.like(0.0)
    # the recurrence grows towards low orders: rescaled past `huge`, which float32 (x64 off,
    # a TPU) holds squared too (1e200 was its inf, and J, Y came out NaN for |x| < 5)
    huge = 1e18 if in_32_bits(x) else 1e200
    x = where(active, x, one)
    frac = where(active, frac, zero)
    target = where(active, target, zero)
    n_start = where(active, _miller_start(x, frac + target), x.like(2.0))
    k_start = n_start * 0.5
    e_start = ((frac + k_start).lgamma() - (frac + 1.0).lgamma() - k_start.lgamma()).exp() \
        * (frac + n_start) / k_start
    m0 = n_start.max()
    m_min = minimum(where(active, target, zero).min(), zero.min())
    state = [m0, zero, zero, zero, one, zero]  # m, f_{m+1}, f_{m+2}, sum, e, target value
    if with_y:
        state += [zero, zero, zero, zero]  # f_0, f_1, T0, T1

    def cond(bb, c):
        return c[0] >= m_min

    def body(bb, c):
        m, p1, p2, total, e, tgt = c[:6]
        started = m <= n_start
        at_start = m.eq(n_start)
        cur = (2.0 * (frac + m + 1.0) / x) * p1 - p2
        cur = where(at_start, one, where(started, cur, zero))
        k = m * 0.5
        even = k.eq(k.floor()) & (m >= 0.0)
        ratio = (frac + 2.0 * k) * (k + 1.0) / ((frac + 2.0 * k + 2.0) * (frac + k))
        e_new = where(at_start, e_start, where(k >= 1.0, e * ratio, one))
        e = where(even & started, e_new, e)
        total = total + where(even & started, e * cur, zero)
        tgt = where(m.eq(target), cur, tgt)
        out = [total, tgt]
        if with_y:
            f0, f1, t0, t1 = c[6:]
            f0 = where(m.eq(0.0), cur, f0)
            f1 = where(m.eq(1.0), cur, f1)
            sign_k = where(is_odd(k), -one, one)
            t0 = t0 + where(even & (m >= 2.0) & started, sign_k * cur / maximum(k, one), zero)
            j = (m - 1.0) * 0.5
            odd = j.eq(j.floor()) & (m >= 1.0)
            js = maximum(j, one)
            coef = where(j.eq(0.0), -one, where(is_odd(j), one, -one) * (2.0 * js + 1.0) / (js * (js + 1.0)))
            t1 = t1 + where(odd & started, coef * cur, zero)
            out += [f0, f1, t0, t1]
        scale = where(cur.abs() > huge, x.like(1.0 / huge), one)
        out = [v * scale for v in out]
        return [m - 1.0, cur * scale, p1 * scale, out[0], e] + out[1:]

    res = while_(b, state, cond, body)
    total, tgt = res[3], res[5]
    norm = (frac * (0.5 * x).log() - (frac + 1.0).lgamma()).exp() / total
    if not with_y:
        return tgt * norm
    f0, f1, t0, t1 = res[6:]
    j0, j1 = f0 * norm, f1 * norm
    lg = (0.5 * x).log() + EULER
    y0 = (2.0 / math.pi) * (lg * j0 - 2.0 * t0 * norm)
    y1 = (2.0 / math.pi) * (lg * j1 + t1 * norm - j0 / x)
    return tgt * norm, j0, j1, y0, y1


def _asymptotic_from(v):
    """Where Hankel's expansions take over from the recurrences and series."""
    return maximum(v.like(25.0), minimum(0.5 * v * v, v.like(2000.0)))


_SMALL_X = 1e-5


def _jv_small(v, x):
    """Power series of J_v at tiny x: three terms."""
    q = 0.25 * x * x
    lead = gammasgn(v + 1.0) * (v * (0.5 * x).log() - (v + 1.0).lgamma()).exp()
    return lead * (1.0 - q / (v + 1.0) + q * q / (2.0 * (v + 1.0) * (v + 2.0)))


def jv(b, v, x):
    """Bessel J_v(x) of real order v and real x, with scipy's values at x <= 0."""
    v_int = is_integer(v)
    flip = v_int & (v < 0)                        # J_{-n} = (-1)^n J_n
    vv = where(flip, -v, v)
    sign = where(flip & is_odd(v), v.like(-1.0), v.like(1.0))
    ax = x.abs()
    sign = where((x < 0) & v_int & is_odd(v), -sign, sign)
    inner = (ax > 0) & ax.isfinite() & vv.isfinite()
    asym = inner & (ax >= _asymptotic_from(vv))
    small = inner & (ax < _SMALL_X)
    rec = inner & ~asym & ~small
    frac = vv - vv.floor()
    j_rec = _miller(b, frac, ax, vv.floor(), rec)
    xa = where(asym, ax, ax.like(30.0))
    j_asym, _ = _hankel_jy(b, where(asym, vv, vv.like(0.0)), xa)
    xs = where(small, ax, ax.like(_SMALL_X))
    j_small = _jv_small(vv, xs)
    out = where(asym, j_asym, where(small, j_small, j_rec)) * sign
    # x == 0: 1 for order 0, 0 for positive (or negative integer) orders, +-inf otherwise
    at_zero = where(vv.eq(0), v.like(1.0), where(vv > 0, v.like(0.0), gammasgn(vv + 1.0) * np.inf))
    out = where(ax.eq(0), at_zero, out)
    bad = v.isnan() | x.isnan() | ((x < 0) & ~v_int) | ax.eq(np.inf)   # scipy: nan at +-inf
    return where(bad, v.like(np.nan), out)


def y01(b, x):
    """Y_0(x), Y_1(x) for x > 0 (other x give junk; callers mask them)."""
    ok = (x > 0) & x.isfinite()
    asym = ok & (x >= 25.0)
    small = ok & (x < _SMALL_X)
    rec = ok & ~asym & ~small
    zero = x.like(0.0)
    _, _, _, y0_rec, y1_rec = _miller(b, zero, x, zero, rec, with_y=True)
    xa = where(asym, x, x.like(30.0))
    _, y0_asym = _hankel_jy(b, zero, xa)
    _, y1_asym = _hankel_jy(b, x.like(1.0), xa)
    xs = where(small, x, x.like(_SMALL_X))
    lg = (0.5 * xs).log() + EULER
    q = 0.25 * xs * xs
    y0_small = (2.0 / math.pi) * (lg * (1.0 - q) + q)
    y1_small = -2.0 / (math.pi * xs) + (xs / math.pi) * (lg - 0.5)
    y0 = where(asym, y0_asym, where(small, y0_small, y0_rec))
    y1 = where(asym, y1_asym, where(small, y1_small, y1_rec))
    return y0, y1


def yn(b, n, x):
    """Bessel Y_n(x) for integer n (truncated toward zero, as scipy's double loop does)."""
    n = where(n < 0, -((-n).floor()), n.floor())
    an = n.abs()
    y0, y1 = y01(b, x)
    top = where(x > 0, an, an.like(0.0)).max()
    one = x.like(1.0)
    xs = where(x > 0, x, one)

    def cond(bb, c):
        return c[0] < top

    def body(bb, c):
        k, ykm1, yk, out = c
        ykp1 = (2.0 * k / xs) * yk - ykm1
        return [k + 1.0, yk, ykp1, where(an.eq(k + 1.0), ykp1, out)]
    _, _, _, yhi = while_(b, [scalar(b, 1.0), y0, y1, y1], cond, body)
    out = where(an.eq(0), y0, where(an.eq(1), y1, yhi))
    out = where((n < 0) & is_odd(n), -out, out)
    at_zero = where((n < 0) & is_odd(n), one * np.inf, -one * np.inf)
    out = where(x.eq(0), at_zero, out)
    return where(n.isnan() | x.isnan() | (x < 0) | x.eq(np.inf), x.like(np.nan), out)


def _ive_series(b, v, x, active):
    """log|I_v(x) e^-x| and its sign from the power series
    (x/2)^v / Gamma(v+1) * sum_k (x^2/4)^k / (k! (v+1)_k), summed with rescaling."""
    one, zero = x.like(1.0), x.like(0.0)
    x = where(active, x, one)
    v = where(active, v, zero)
    q = 0.25 * x * x
    # the rescaling threshold, and its product with a step's factor, within the precision's
    # range (1e280 is float32's inf: ive(30, 150) came out inf computed in 32 bits)
    power = 30 if in_32_bits(x) else 280
    big, big_log = 10.0 ** power, power * math.log(10.0)

    def step(bb, st):
        k, r, total, count = st
        k = k + 1.0
        r = r * q / (k * (v + k))
        total = total + r
        scale = total.abs() > big
        r = where(scale, r * (1.0 / big), r)
        total = where(scale, total * (1.0 / big), total)
        count = where(scale, count + 1.0, count)
        return [k, r, total, count], (k <= -v) | (r.abs() > total.abs() * eps_of(x))
    _, _, total, count = converge(b, active, [zero, one, one, zero], step, 20000)
    log_mag = v * (0.5 * x).log() - x - (v + 1.0).lgamma() + total.abs().log() + count * big_log
    return log_mag, gammasgn(v + 1.0) * total.sign()


def ive_parts(b, v, x):
    """I_v(|x|) e^-|x| as (log magnitude, sign), with the sign and nan of scipy's iv at
    x < 0, and the values at x = 0 and infinity."""
    v_int = is_integer(v)
    vv = where(v_int & (v < 0), -v, v)          # I_{-n} = I_n
    ax = x.abs()
    sign = where((x < 0) & v_int & is_odd(v), v.like(-1.0), v.like(1.0))
    inner = (ax > 0) & ax.isfinite() & vv.isfinite()
    asym = inner & (ax >= _asymptotic_from(vv))
    ser = inner & ~asym
    log_ser, sign_ser = _ive_series(b, vv, ax, ser)
    xa = where(asym, ax, ax.like(30.0))
    s_asym = _hankel_ive(b, where(asym, vv, vv.like(0.0)), xa)
    log_mag = where(asym, s_asym.abs().log(), log_ser)
    sign = sign * where(asym, s_asym.sign(), sign_ser)
    # x == 0: 1 for order 0, 0 for positive (and negative integer) orders, inf otherwise
    ninf = v.like(-np.inf)
    log_mag = where(ax.eq(0), where(vv.eq(0), v.like(0.0), where(vv > 0, ninf, v.like(np.inf))), log_mag)
    sign = where(ax.eq(0), v.like(1.0), sign)
    bad = v.isnan() | x.isnan() | ((x < 0) & ~v_int) | ax.eq(np.inf)
    return log_mag, sign, bad


def exp_times(log_mag, sign, shift):
    """sign * exp(log_mag + shift), splitting the exponential so that a huge shift and a
    small log_mag do not overflow where the product is finite."""
    half = 0.5 * shift
    return sign * (log_mag + half).exp() * half.exp()
