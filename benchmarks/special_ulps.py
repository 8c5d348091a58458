"""Compiled scipy.special against scipy itself, in units in the last place (ulps).

For each function autograd.scipy.special wraps (and the few scipy.stats needs), one program
evaluates it over a grid covering its domain (small and large arguments, both sides of
the switches between series, continued fractions and asymptotic expansions) and the
table gives the largest and median error in ulps of scipy's result, the largest relative
error, and how many points differ at all:

    python benchmarks/special_ulps.py [--portable] [--dtype float32] [names...]

(log, log1p, exp, expm1 and divide are XLA's own, numpy's the reference: a platform's
arithmetic.)

--portable lowers as non-CPU platforms do (the algorithms of rules/special_kernels.py
everywhere); without it, on CPU, the functions that call scipy's own loops
(rules/special.py's SCIPY_LOOPS) do. Not a timing: the numbers are exact and repeatable.
"""
import argparse
import sys
import warnings

import autograd.numpy as anp
import numpy as np
import scipy.special as sc


def _grid(*axes):
    mesh = np.meshgrid(*axes, indexing="ij")
    return [m.ravel() for m in mesh]


def _logspace(lo, hi, n):
    return np.logspace(lo, hi, n)


def _signed(lo, hi, n):
    pos = np.logspace(lo, hi, n)
    return np.concatenate([-pos[::-1], [0.0], pos])


#: name -> (scipy function, argument arrays); arguments broadcast elementwise
def cases():
    rng = np.random.RandomState(0)
    a_gam = np.concatenate([_logspace(-3, 3, 60), [0.5, 1.0, 1.5, 2.0, 10.0, 100.0]])
    x_gam = np.concatenate([_logspace(-4, 3.3, 70), [0.5, 1.0, 2.0, 10.0]])
    ga, gx = _grid(a_gam, x_gam)
    near = rng.uniform(0.05, 30.0, 2000)             # around x = a + 1, the series / fraction switch
    ga = np.concatenate([ga, near, np.full(60, 0.2)])
    gx = np.concatenate([gx, near + rng.uniform(-1.5, 2.5, 2000), np.linspace(0.01, 1.5, 60)])
    gamma_x = np.concatenate([np.linspace(-20.5, -0.05, 400) + 0.013, np.linspace(0.01, 30, 600),
                              _logspace(-8, 2.2, 200), 1.0 + np.linspace(-0.1, 0.1, 81), 2.0 + np.linspace(-0.1, 0.1, 81)])
    lg_x = np.concatenate([gamma_x, _logspace(2, 300, 200)])
    dig_x = np.concatenate([np.linspace(-20.5, -0.05, 400) + 0.013, _logspace(-8, 300, 400),
                            1.4616321449683622 + np.linspace(-0.02, 0.02, 81)])
    erf_x = np.concatenate([_signed(-8, 1.45, 300), np.linspace(-6, 6, 601)])
    erfc_x = np.concatenate([erf_x, np.linspace(6, 27, 200)])
    inv_y = np.concatenate([np.linspace(-0.999999, 0.999999, 801), 1 - _logspace(-15, -1, 100), -1 + _logspace(-15, -1, 100)])
    inv_c = np.concatenate([_logspace(-300, -1, 200), np.linspace(0.01, 1.99, 400), 2 - _logspace(-15, -1, 50)])
    lo_x = np.concatenate([np.linspace(0.001, 0.999, 999), _logspace(-300, -2, 100), 1 - _logspace(-15, -2, 50)])
    ex_x = np.concatenate([_signed(-8, 2.85, 300), np.linspace(-40, 40, 401)])
    bes_x = np.concatenate([_logspace(-6, 3, 400), np.linspace(0.1, 60, 600)])
    bi, bb, bx = _grid(np.array([0.1, 0.5, 1, 2, 5, 20, 100, 1000]), np.array([0.05, 0.5, 1, 3, 10, 200]),
                       np.linspace(0.01, 0.99, 25))
    ba, bbb = _grid(_logspace(-2, 2.5, 40), _logspace(-2, 2.5, 40))
    pn, px = _grid(np.array([1, 2, 3, 5]), np.concatenate([_logspace(-3, 2, 50), np.linspace(-5.5, -0.3, 20) + 0.01]))
    vn, vx = _grid(np.array([0.0, 0.5, 1.0, 2.5, 10.0, 40.0]), _logspace(-3, 2.5, 60))
    zs, zq = _grid(np.array([1.5, 2.0, 3.0, 7.5, 20.0]), _logspace(-2, 2, 40))
    yv, yx = _grid(np.array([0, 1, 2, 5, 20]), _logspace(-3, 2.5, 60))
    return {
        "gammainc": (sc.gammainc, [ga, gx]),
        "gammaincc": (sc.gammaincc, [ga, gx]),
        "gammaln": (sc.gammaln, [lg_x]),
        "gamma": (sc.gamma, [gamma_x]),
        "rgamma": (sc.rgamma, [gamma_x]),
        "digamma": (sc.digamma, [dig_x]),
        "polygamma": (sc.polygamma, [pn, px]),
        "beta": (sc.beta, [ba, bbb]),
        "betaln": (sc.betaln, [ba, bbb]),
        "betainc": (sc.betainc, [bi, bb, bx]),
        "erf": (sc.erf, [erf_x]),
        "erfc": (sc.erfc, [erfc_x]),
        "erfinv": (sc.erfinv, [inv_y]),
        "erfcinv": (sc.erfcinv, [inv_c]),
        "expit": (sc.expit, [ex_x]),
        "logit": (sc.logit, [lo_x]),
        "i0": (sc.i0, [bes_x]),
        "i1": (sc.i1, [bes_x]),
        "ive": (sc.ive, [vn, vx]),
        "iv": (sc.iv, [vn, vx]),
        "j0": (sc.j0, [bes_x]),
        "j1": (sc.j1, [bes_x]),
        "jv": (sc.jv, [vn, vx]),
        "y0": (sc.y0, [bes_x]),
        "y1": (sc.y1, [bes_x]),
        "yn": (sc.yn, [yv.astype(np.int64).astype(float), yx]),
        "zeta": (sc.zeta, [zs, zq]),
        "ndtr": (sc.ndtr, [erf_x]),
        "log_ndtr": (sc.log_ndtr, [np.concatenate([erf_x, -_logspace(0, 3, 100)])]),
        # the elementary functions the portable algorithms are made of: XLA's own, so the
        # platform's arithmetic (a TPU v5e's float32 log up to 3,669 ulps off numpy's, the CPU's 2)
        "log": (anp.log, [np.concatenate([_logspace(-30, 30, 600), np.linspace(0.5, 4.0, 701)])]),
        "log1p": (anp.log1p, [np.concatenate([_signed(-8, 0, 300)[300:], np.linspace(-0.9, 4.0, 491)])]),
        "exp": (anp.exp, [np.linspace(-80, 80, 1601)]),
        "expm1": (anp.expm1, [np.concatenate([_signed(-8, 1, 300), np.linspace(-20, 20, 401)])]),
        "divide": (anp.divide, [np.linspace(0.37, 7.3, 997), np.linspace(0.9, 13.1, 997)]),
    }


def ulps(got, expected):
    """Elementwise |got - expected| in units of expected's last place; 0 where both are the
    same nan or infinity, inf where only one is."""
    got, expected = np.asarray(got), np.asarray(expected)
    same = (got == expected) | (np.isnan(got) & np.isnan(expected))
    with np.errstate(all="ignore"):
        err = np.abs(got.astype(np.float64) - expected) / np.spacing(np.abs(expected).astype(expected.dtype))
    err = np.where(same, 0.0, err)
    return np.where(~same & ~(np.isfinite(got) & np.isfinite(expected)), np.inf, err)


def relative(got, expected):
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    with np.errstate(all="ignore"):
        r = np.abs(got - expected) / np.maximum(np.abs(expected), 1e-300)
    return np.where((got == expected) | (np.isnan(got) & np.isnan(expected)), 0.0, r)


def measure(names=None, dtype=np.float64):
    import autograd.scipy.special as sp
    from autograd_xla import jit_ps
    rows = []
    for name, (fn, args) in cases().items():
        if names and name not in names:
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            args = [np.asarray(a, dtype) for a in args]
            expected = fn(*args)
            got = jit_ps(getattr(sp, name, fn), fallback="error")(*args)
        u, r = ulps(got, expected), relative(got, expected)
        rows.append((name, u.size, np.max(u), np.median(u), np.max(r), int(np.count_nonzero(u))))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--portable", action="store_true", help="lower as non-CPU platforms do")
    parser.add_argument("--dtype", default="float64")
    opts = parser.parse_args(argv)
    import scipy.special  # noqa: F401  (registers the rules)
    from autograd_xla.rules import special
    if opts.portable:
        special.FORCE_PORTABLE = True
    print(f"{'function':14s} {'points':>7s} {'max ulps':>12s} {'median':>7s} {'max rel':>10s} {'differ':>7s}")
    for name, n, worst, med, rel, differ in measure(opts.names, np.dtype(opts.dtype)):
        print(f"{name:14s} {n:7d} {worst:12.4g} {med:7.3g} {rel:10.3g} {differ:7d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
