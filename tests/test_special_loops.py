"""scipy.special on the CPU by scipy's own ufunc loops (ufunc_loops.py, rules/special.py's
SCIPY_LOOPS): every function gives plain scipy's result bit for bit (0 ulps) over grids of
its domain, in float64 and float32, under grad and vmap; where the loops cannot be called
(the C module not built, FORCE_PORTABLE) the portable algorithms are lowered instead
(test_special.py measures those)."""
import warnings

import numpy as onp
import pytest
import scipy.special as sc
from autograd import grad

import autograd.numpy as anp
import autograd.scipy.special as sp
from autograd_xla import jit_ps, ufunc_loops, vmap
from autograd_xla.rules import special as special_rules
from helpers import run_with_a_persistent_cache


def _grid(*axes):
    return [m.ravel() for m in onp.meshgrid(*axes, indexing="ij")]


def _pos(lo, hi, n):
    return onp.logspace(lo, hi, n)


EDGES = [0.0, -0.0, -1.0, -2.5, onp.inf, -onp.inf, onp.nan]
X = onp.concatenate([onp.linspace(-20.3, 30.1, 150), _pos(-8, 2.5, 40), 1.0 + onp.linspace(-1e-3, 1e-3, 9), EDGES])
A_GAM, X_GAM = _grid(onp.concatenate([_pos(-3, 3, 20), [0.5, 1.0, 2.0, 0.0, onp.inf, onp.nan]]),
                     onp.concatenate([_pos(-4, 3.3, 24), [0.5, 0.0, -1.0, onp.inf]]))
A_BETA, B_BETA = _grid(onp.concatenate([_pos(-2, 2.5, 15), [-0.5, -2.0, 0.0]]),
                       onp.concatenate([_pos(-2, 2.5, 15), [-1.5, 0.0, onp.inf]]))
A_INC, B_INC, X_INC = _grid([0.1, 1.0, 5.0, 300.0], [0.05, 1.0, 30.0], onp.concatenate([onp.linspace(0, 1, 11), [0.999]]))
V, X_V = _grid([-2.5, -1.0, 0.0, 0.5, 1.0, 7.0, 40.0], onp.concatenate([_pos(-3, 2.5, 20), [0.0, -2.0, onp.inf]]))
N_Y, X_Y = _grid([0.0, 1.0, 2.0, 5.0, -3.0], onp.concatenate([_pos(-3, 2.5, 20), [0.0, -1.0]]))
P = onp.concatenate([onp.linspace(-0.1, 1.1, 49), _pos(-300, -1, 20), [0.0, 1.0, 2.0, onp.nan]])
U = onp.concatenate([onp.linspace(-1.1, 1.1, 45), [-1.0, 1.0, 1 - 1e-15, onp.nan]])

#: name -> (the function traced (autograd's wrapper where it has one), scipy's, arguments)
TABLE = {
    "gammainc": (sp.gammainc, sc.gammainc, (A_GAM, X_GAM)),
    "gammaincc": (sp.gammaincc, sc.gammaincc, (A_GAM, X_GAM)),
    "gammaln": (sp.gammaln, sc.gammaln, (X,)),
    "gamma": (sp.gamma, sc.gamma, (X,)),
    "rgamma": (sp.rgamma, sc.rgamma, (X,)),
    "gammasgn": (sp.gammasgn, sc.gammasgn, (X,)),
    "digamma": (sp.digamma, sc.digamma, (X,)),
    "beta": (sp.beta, sc.beta, (A_BETA, B_BETA)),
    "betaln": (sp.betaln, sc.betaln, (A_BETA, B_BETA)),
    "betainc": (sp.betainc, sc.betainc, (A_INC, B_INC, X_INC)),
    "erfc": (sp.erfc, sc.erfc, (X,)),
    "erfinv": (sp.erfinv, sc.erfinv, (U,)),
    "erfcinv": (sp.erfcinv, sc.erfcinv, (2 * P,)),
    "i0": (sp.i0, sc.i0, (X,)),
    "i1": (sp.i1, sc.i1, (X,)),
    "iv": (sp.iv, sc.iv, (V, X_V)),
    "ive": (sp.ive, sc.ive, (V, X_V)),
    "j0": (sp.j0, sc.j0, (X,)),
    "j1": (sp.j1, sc.j1, (X,)),
    "jv": (sp.jn, sc.jv, (V, X_V)),
    "y0": (sp.y0, sc.y0, (X,)),
    "y1": (sp.y1, sc.y1, (X,)),
    "yn": (sp.yn, sc.yn, (N_Y, X_Y)),
    "ndtr": (sc.ndtr, sc.ndtr, (X,)),
    "log_ndtr": (sc.log_ndtr, sc.log_ndtr, (X,)),
    "poch": (sc.poch, sc.poch, (A_BETA, B_BETA)),
    "stdtr": (sc.stdtr, sc.stdtr, (A_BETA, B_BETA)),
    "zeta": (sc.zeta, sc.zeta, (onp.concatenate([onp.linspace(-3.5, 30.0, 30), [1.0, 2.0, 0.0]])[:, None],
                                 onp.concatenate([_pos(-2, 2, 12), [-1.5, 0.0]])[None, :])),
    "polygamma": (sp.polygamma, sc.polygamma, (onp.array([0, 1, 2, 3, 5])[:, None], X[None, :])),
}


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings(), onp.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def assert_bitwise(got, expected):
    got, expected = onp.asarray(got), onp.asarray(expected)
    assert got.dtype == expected.dtype and got.shape == expected.shape, (got.dtype, got.shape, expected.dtype,
                                                                        expected.shape)
    differ = ~((got == expected) | (onp.isnan(got) & onp.isnan(expected)))
    differ |= (got == 0) & (onp.signbit(got) != onp.signbit(expected))
    if differ.any():
        with onp.errstate(all="ignore"):
            ulps = onp.abs(got - expected) / onp.spacing(onp.abs(expected))
        raise AssertionError(f"{differ.sum()} of {differ.size} differ, by up to {onp.nanmax(ulps[differ]):.3g} ulps; "
                             f"first at {onp.argwhere(differ)[0]}: {got[differ][0]!r} against {expected[differ][0]!r}")


def test_the_table_covers_every_function_calling_scipys_loops():
    assert set(TABLE) == special_rules.SCIPY_LOOPS | {"polygamma"}


@pytest.mark.parametrize("dtype", [onp.float64, onp.float32])
@pytest.mark.parametrize("name", TABLE)
def test_scipys_own_loop_bit_for_bit(name, dtype):
    f, ref, args = TABLE[name]
    args = tuple(a if a.dtype.kind == "i" else a.astype(dtype) for a in map(onp.asarray, args))
    jf = jit_ps(f, fallback="error")
    assert_bitwise(jf(*args), ref(*args))
    assert ufunc_loops.PREFIX in jf.stablehlo(*args)


def test_with_x64_off_the_loop_of_the_buffers_types():
    """With x64 off a float64 operand is a float32 buffer (hlo.canonical_dtype): scipy's float32
    loop is called, giving scipy's results for the operands rounded to float32, bit for bit."""
    a, x = onp.linspace(0.3, 9.0, 7), onp.linspace(0.1, 12.0, 7)
    jf = jit_ps(lambda a, x: (sp.gammainc(a, x), sp.gammaln(a)), x64=False, fallback="error")
    got = jf(a, x)
    a32, x32 = a.astype(onp.float32), x.astype(onp.float32)
    for g, e in zip(got, (sc.gammainc(a32, x32), sc.gammaln(a32))):
        assert_bitwise(g.astype(onp.float32), e)
    assert ufunc_loops.PREFIX in jf.stablehlo(a, x)


def test_portable_where_the_loops_cannot_be_called(monkeypatch):
    """Without the C module (or with FORCE_PORTABLE) the portable algorithms are lowered: no
    custom call, values within their measured accuracy (test_special.py)."""
    a, x = onp.array([0.5, 2.0, 7.5]), onp.array([0.3, 2.5, 6.0])
    for name, value in (("native", None), ("FORCE_PORTABLE", True)):
        with monkeypatch.context() as m:
            m.setattr(ufunc_loops if name == "native" else special_rules, name, value)
            jf = jit_ps(lambda a, x: sp.gammainc(a, x) + sp.gammaln(a))
            assert ufunc_loops.PREFIX not in jf.stablehlo(a, x)
            onp.testing.assert_allclose(jf(a, x), sc.gammainc(a, x) + sc.gammaln(a), rtol=1e-13)


def test_derivatives_call_the_loops_as_autograd_does():
    """autograd's VJPs call scipy's functions (gammaln's is digamma, polygamma's the next
    order): their compiled values are plain autograd's, the products around them rounded
    by XLA's arithmetic."""
    a, x = onp.array([0.5, 2.0, 7.5, 30.0]), onp.array([0.3, 2.5, 6.0, 31.0])

    def in_a(a):
        return anp.sum(sp.gammaln(a) * sp.polygamma(1, a) + sp.rgamma(a) + sp.iv(a, 2.0))

    def in_x(x):
        return anp.sum(sp.gammaincc(a, x) * sp.i0(x) + sp.betainc(a, 2.0, x / 40) + sp.erfcinv(x / 40) + sp.y1(x))
    for loss, v in ((in_a, a), (in_x, x)):
        onp.testing.assert_allclose(jit_ps(grad(loss))(v), grad(loss)(v), rtol=1e-14)
    # the gradient of gammaln is digamma's value bit for bit
    assert_bitwise(jit_ps(grad(lambda a: anp.sum(sp.gammaln(a))))(a), sc.digamma(a))


def test_under_vmap():
    a, x = onp.linspace(0.5, 5.0, 12).reshape(3, 4), onp.linspace(0.1, 9.0, 4)
    assert_bitwise(jit_ps(vmap(lambda a: sp.gammainc(a, x)))(a), sc.gammainc(a, x))
    assert_bitwise(jit_ps(vmap(sp.gammaln))(a), sc.gammaln(a))


def test_a_central_difference_in_a_is_scipys():
    """autograd_gamma's derivative of gammainc in `a` (lifelines' GeneralizedGamma): a
    5-point central difference with step ~6e-6 a, which multiplies a difference in the last
    bit by ~1e5; the compiled one is plain numpy's bit for bit."""
    a, x = onp.linspace(0.2, 20.0, 30), onp.linspace(0.05, 40.0, 30)
    d = a * onp.finfo(float).eps ** (1 / 3)

    def diff(a, x, d):
        return (-sc.gammainc(a + 2 * d, x) + 8 * sc.gammainc(a + d, x) - 8 * sc.gammainc(a - d, x)
                + sc.gammainc(a - 2 * d, x)) / (12 * d)
    onp.testing.assert_allclose(jit_ps(diff)(a, x, d), diff(a, x, d), rtol=1e-15, atol=0)


def test_scipys_error_settings_reach_the_caller():
    """scipy.special.errstate applies as plainly: a warning is a warning, and an error (which
    the loop sets in the calling thread) becomes an error of the call naming scipy's."""
    x = onp.array([-1.0, 2.5])
    f = jit_ps(sp.gammaln)
    with sc.errstate(all="warn"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert_bitwise(f(x), sc.gammaln(x))
    assert any("lgam: singularity" in str(w.message) for w in caught)
    with sc.errstate(all="raise"):
        with pytest.raises(sc.SpecialFunctionError):
            sc.gammaln(x)
        with pytest.raises(Exception, match="SpecialFunctionError: scipy.special/lgam: singularity"):
            f(x)
    assert_bitwise(f(x), sc.gammaln(x))      # nothing left over


CHILD = """
import json
import numpy as np, scipy.special as sc, autograd.scipy.special as sp
from autograd_xla import jit_ps
a, x = np.linspace(0.5, 9.0, 50), np.linspace(0.1, 12.0, 50)
f = jit_ps(lambda a, x: sp.gammainc(a, x) * sp.gammaln(a) + sp.i0(x))
out = f(a, x)
info = f.cache_info()
print(json.dumps({"exact": bool((out == sc.gammainc(a, x) * sc.gammaln(a) + sc.i0(x)).all()),
                  "compiles": info["compiles"], "hits": info["persistent_hits"]}))
"""


def test_a_program_from_the_persistent_cache_calls_the_loops(tmp_path):
    """The cached executable names the targets; a new process registers them while lowering,
    before the cache (keyed by the program's text) loads it."""
    runs = run_with_a_persistent_cache(tmp_path, CHILD, CHILD)
    assert all(r["exact"] for r in runs)
    assert (runs[0]["compiles"], runs[0]["hits"]) == (1, 0) and (runs[1]["compiles"], runs[1]["hits"]) == (0, 1)
