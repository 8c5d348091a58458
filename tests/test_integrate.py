"""autograd.scipy.integrate.odeint under jit_ps: values and gradients against closed forms,
scipy's odeint (LSODA) and plain autograd; the program is a loop; mxstep and failures.

Tolerances. The compiled integrator (Dormand-Prince 5(4), compositions/integrate.py) and LSODA
both keep each step's local error near w = atol + rtol*|y|, so they agree only to the
integration tolerance, not to 1e-12. Errors are measured in units of that weight,
max|got - ref| / (tol * (1 + |ref|)), with rtol = atol = tol. Over the short spans used
here the compiled results, and the gradients from autograd's adjoint system (integrated
with the same tolerance), stay within 2.3 units of the closed forms, and LSODA within 17
(measured at tol 1e-6 ... 1e-12). Hence: 5 units against closed forms (or LSODA run 100x
tighter), 30 units (both solvers' errors) against plain autograd, which runs LSODA.
"""
import warnings

import autograd.numpy as np
import numpy as onp
import pytest
import scipy.integrate
from autograd import grad
from autograd.builtins import tuple as ag_tuple
from autograd.scipy.integrate import odeint

from autograd_xla import jit_ps
from helpers import NARROW, TOL_32

TOL = 1e-10 if not NARROW else TOL_32[onp.dtype("float64")]  # (a 32-bit platform's precision: helpers)
# (a 32-bit platform's float32 steps accumulate: the chip's logistic gradient and the nonlinear
# system were 5.8 and 9.5 units of TOL_32 from the exact values)
EXACT_UNITS, SOLVER_UNITS = (5 if not NARROW else 20), 30


def units(got, ref, tol=TOL):
    """The largest error of got in units of the integration tolerance at ref."""
    got, ref = onp.concatenate([onp.ravel(g) for g in got]), onp.concatenate([onp.ravel(r) for r in ref])
    tol = max(tol, TOL) if NARROW else tol  # no tighter than the platform computes
    return onp.max(onp.abs(got - ref) / (tol * (1 + onp.abs(ref))))


def flat(tree):
    if isinstance(tree, (tuple, list)):
        return [leaf for x in tree for leaf in flat(x)]
    return [onp.asarray(tree)]


# ----- test problems: rhs, y0, args, closed form y(t) with t measured from t[0] -------------
def decay(y, t, k):
    return -k * y


def oscillator(y, t, w):
    return np.array([y[1], -w ** 2 * y[0]])


def logistic(y, t, r, K):
    return r * y * (1 - y / K)


def decay_exact(y0, t, k):
    return y0 * np.exp(-k * (t[:, None] - t[0]))


def oscillator_exact(y0, t, w):
    s = t - t[0]
    return np.stack([y0[0] * np.cos(w * s) + y0[1] / w * np.sin(w * s),
                     -y0[0] * w * np.sin(w * s) + y0[1] * np.cos(w * s)], axis=1)


def logistic_exact(y0, t, r, K):
    e = np.exp(r * (t[:, None] - t[0]))
    return K * y0 * e / (K + y0 * (e - 1))


PROBLEMS = {
    "decay": (decay, onp.array([1.0, -2.0, 0.5]), (onp.array([0.5, 1.0, 3.0]),), decay_exact),
    "oscillator": (oscillator, onp.array([1.0, 0.5]), (2.0,), oscillator_exact),
    "logistic": (logistic, onp.array([0.1, 2.0]), (1.5, 1.0), logistic_exact),
}
T = onp.array([0.0, 0.7, 1.9, 3.0])
WEIGHTS = onp.random.RandomState(0).uniform(0.5, 1.5, (len(T), 3))


def loss(rhs, **kw):
    """A scalar of odeint's result, differentiable in (y0, t, args) packed as one tuple."""
    def f(p):
        y0, t, args = p
        ys = odeint(rhs, y0, t, ag_tuple(args), **kw)
        return np.sum(WEIGHTS[:ys.shape[0], :ys.shape[1]] * ys)
    return f


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_values_and_gradients_match_closed_forms(name):
    rhs, y0, args, exact = PROBLEMS[name]
    p = (y0, T, args)
    got = jit_ps(lambda y0, t, args: odeint(rhs, y0, t, args, rtol=TOL, atol=TOL), fallback="error")(*p)
    expected = exact(y0, T, *args)
    assert got.dtype == onp.float64 and got.shape == (len(T), len(y0))
    assert units([got], [expected]) < EXACT_UNITS
    assert units([got], [odeint(rhs, y0, T, args, rtol=TOL, atol=TOL)]) < SOLVER_UNITS

    def exact_loss(p):
        ys = exact(p[0], p[1], *p[2])
        return np.sum(WEIGHTS[:ys.shape[0], :ys.shape[1]] * ys)

    g = flat(jit_ps(grad(loss(rhs, rtol=TOL, atol=TOL)), fallback="error")(p))
    assert units(g, flat(grad(exact_loss)(p))) < EXACT_UNITS
    assert units(g, flat(grad(loss(rhs, rtol=TOL, atol=TOL))(p))) < SOLVER_UNITS


def lotka_volterra(y, t, a, b, c, d):
    prey, pred = y[0], y[1]
    return np.array([a * prey - b * prey * pred, c * prey * pred - d * pred])


def test_nonlinear_system_matches_tight_lsoda():
    y0, args, t = onp.array([10.0, 5.0]), (1.1, 0.4, 0.1, 0.4), onp.linspace(0.0, 8.0, 9)
    got = jit_ps(lambda y0, t: odeint(lotka_volterra, y0, t, args, rtol=TOL, atol=TOL), fallback="error")(y0, t)
    tight = scipy.integrate.odeint(lotka_volterra, y0, t, args, rtol=TOL / 100, atol=TOL / 100, mxstep=10000)
    assert units([got], [tight]) < EXACT_UNITS


def forced(y, t, a):
    return -a * y + np.sin(t)


def test_default_tolerance_and_both_nestings_match_plain_autograd():
    """scipy's default rtol = atol = 1.49012e-8; grad(jit_ps(f)) compiles f's VJP, whose
    backward odeint calls must compile through the rule as well (fallback='error')."""
    tol = 1.49012e-8
    p = (onp.array([0.3, -0.5]), onp.array([0.0, 0.8, 2.0]), (onp.array([0.7, 1.3]),))
    f = loss(forced)
    assert units([jit_ps(f, fallback="error")(p)], [f(p)], tol) < SOLVER_UNITS
    expected = flat(grad(f)(p))
    assert units(flat(grad(jit_ps(f, fallback="error"))(p)), expected, tol) < SOLVER_UNITS


def mlp_dynamics(y, t, params):
    for W, b in params:
        out = np.dot(y, W) + b
        y = np.tanh(out)
    return out


def test_neural_ode_with_a_parameter_list_as_in_autograds_ode_net_example():
    """autograd's examples/ode_net.py passes its list of (W, b) layers on whole, as
    odeint(f, y0, t, tuple((params,))). That works because grad hands the list to the loss as
    one box; grad(jit_ps(loss)) must rebuild it the same way in the compiled VJP."""
    rs = onp.random.RandomState(0)
    params = [(0.3 * rs.randn(2, 8), 0.1 * rs.randn(8)), (0.3 * rs.randn(8, 2), 0.1 * rs.randn(2))]
    y0, t = onp.array([2.0, 0.0]), onp.linspace(0.0, 1.0, 5)

    def loss(params):
        return np.sum(odeint(mlp_dynamics, y0, t, ag_tuple((params,)), rtol=TOL, atol=TOL) ** 2)

    expected = flat(grad(loss)(params))
    assert units(flat(grad(jit_ps(loss, fallback="error"))(params)), expected) < SOLVER_UNITS
    assert units(flat(jit_ps(grad(loss), fallback="error")(params)), expected) < SOLVER_UNITS


# ----- the program ---------------------------------------------------------------------------
def cos_decay(y, t, a):
    return -np.cos(y) * a


def test_program_is_a_loop_nest_with_func_traced_once():
    """50 output times, hundreds of steps: three nested while loops (output intervals,
    steps, stages), and func appears once, as the stage body."""
    t = onp.linspace(0.0, 10.0, 50)
    jf = jit_ps(lambda y0: odeint(cos_decay, y0, t, (0.5,), rtol=TOL, atol=TOL), fallback="error")
    text = jf.stablehlo(onp.array([1.0, 2.0]))
    assert text.count("stablehlo.while") == 3
    assert text.count("stablehlo.cosine") == 1
    expected = odeint(cos_decay, onp.array([1.0, 2.0]), t, (0.5,), rtol=TOL, atol=TOL)
    assert units([jf(onp.array([1.0, 2.0]))], [expected]) < SOLVER_UNITS


def test_gradient_with_constant_args_compiles_each_backward_call_to_loops():
    """autograd's VJP integrates the augmented system backwards once per output interval
    (a Python loop over len(t) - 1 intervals); each call is one more loop nest. args are
    constants here, so autograd accumulates traced gradients for concrete arrays (see
    compositions/integrate.py). (autograd's VJP needs args passed positionally.)"""
    f = lambda y0: np.sum(odeint(cos_decay, y0, onp.array([0.0, 1.0, 2.5]), (0.5,)) ** 2)
    jg = jit_ps(grad(f), fallback="error")
    y0 = onp.array([1.0, 2.0])
    assert jg.stablehlo(y0).count("stablehlo.while") == 3 * 3
    expected = grad(f)(y0)
    assert units([jg(y0)], [expected], 1.49012e-8) < SOLVER_UNITS
    assert units([grad(jit_ps(f, fallback="error"))(y0)], [expected], 1.49012e-8) < SOLVER_UNITS


@pytest.mark.slow
def test_second_derivative_compiles():
    """grad of grad: autograd differentiates its own VJP, whose odeint calls have VJPs again."""
    t = onp.array([0.0, 1.0, 2.0])
    f = lambda y0: np.sum(odeint(decay, y0, t, ag_tuple((0.7,)), rtol=TOL, atol=TOL) ** 2)
    h = lambda y0: grad(f)(y0)[0]
    got = jit_ps(grad(h), fallback="error")(onp.array([1.0, 2.0]))
    exact = onp.array([2 * onp.sum(onp.exp(-1.4 * t)), 0.0])  # d2/dy0[0]^2 of sum(y0**2 * exp(-1.4 t))
    assert units([got], [exact]) < EXACT_UNITS


# ----- mxstep and failures -------------------------------------------------------------------
def constant_rate(y, t):
    return np.ones_like(y)


@pytest.mark.parametrize("mxstep, ok", [(1, False), (2, True)])
def test_mxstep_bounds_step_attempts_per_interval(mxstep, ok):
    """y' = 1 from h0 = 0.1: the error estimate vanishes, so the step grows tenfold and the
    second step (shortened to 0.9) lands on t = 1: two attempts are needed on [0, 1]."""
    t = onp.array([0.0, 1.0, 1.5])
    got = jit_ps(lambda y0: odeint(constant_rate, y0, t, h0=0.1, mxstep=mxstep), fallback="error")(onp.zeros(2))
    if ok:
        onp.testing.assert_allclose(got, onp.array([[0.0, 0.0], [1.0, 1.0], [1.5, 1.5]]), rtol=1e-14)
    else:  # the interval that ran out of steps, and every later one, is nan
        assert onp.all(got[0] == 0) and onp.all(onp.isnan(got[1:]))


def blow_up(y, t):
    return y ** 2


def test_failure_to_converge_gives_nan_from_that_time_on():
    """y' = y**2, y(0) = 1 has y = 1 / (1 - t): it cannot be continued past t = 1, where
    scipy warns (ODEintWarning) and returns garbage."""
    t = onp.array([0.0, 0.5, 0.9, 2.0, 3.0])
    got = jit_ps(lambda y0: odeint(blow_up, y0, t), fallback="error")(onp.array([1.0]))
    assert units([got[:3]], [1 / (1 - t[:3, None])], 1.49012e-8) < EXACT_UNITS
    assert onp.all(onp.isnan(got[3:]))


# ----- scipy's options and argument forms ----------------------------------------------------
def compare_with_scipy(f, *args, tol=1.49012e-8, dtype=onp.float64, **jit_kw):
    got = jit_ps(f, fallback="error", **jit_kw)(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scipy must have succeeded
        expected = f(*args)
    assert got.dtype == dtype and got.shape == expected.shape
    assert units([got], [expected], tol) < SOLVER_UNITS
    return got


def test_scalar_y0_gives_one_column_like_scipy():
    compare_with_scipy(lambda y0, k: odeint(lambda y, t, k: -k * y, y0, onp.array([0.0, 1.0, 2.0]), (k,)),
                       0.8, onp.float64(1.5))


def test_tfirst_per_component_tolerances_and_step_limits():
    def f(y0, w):
        return odeint(lambda t, y, w: np.array([y[1], -w ** 2 * y[0] + np.cos(t)]), y0,
                      onp.linspace(0.0, 2.0, 4), (w,), tfirst=True, rtol=onp.array([1e-9, 1e-8]),
                      atol=onp.array([1e-10, 1e-9]), h0=1e-3, hmax=0.05, hmin=1e-12)
    compare_with_scipy(f, onp.array([1.0, 0.0]), 1.5, tol=1e-8)


def test_decreasing_and_repeated_times_and_a_single_time():
    f = lambda y0, t: odeint(forced, y0, t, (0.7,))
    compare_with_scipy(f, onp.array([0.3, -0.5]), onp.array([2.0, 1.5, 1.5, 0.0]))
    got = compare_with_scipy(f, onp.array([0.3, -0.5]), onp.array([1.0]))
    # the initial value itself, as the platform holds it (float32 on a 32-bit one)
    onp.testing.assert_array_equal(got, onp.array([[0.3, -0.5]], onp.float32 if NARROW else onp.float64))


def test_float32_and_integer_inputs_give_float64_like_scipy():
    """scipy casts y0, t and func's values to float64."""
    compare_with_scipy(lambda y0, t: odeint(forced, y0, t, (onp.float32(0.7),)),
                       onp.array([0.3, -0.5], onp.float32), onp.array([0, 1, 3]))


def test_func_returning_a_list_and_closed_over_times():
    t = onp.linspace(0.0, 3.0, 4)
    compare_with_scipy(lambda y0, w: odeint(lambda y, t: [y[1], -w * y[0]], y0, t), onp.array([1.0, 0.5]), 2.0)


def test_x64_false_integrates_in_float32():
    got = compare_with_scipy(lambda y0: odeint(forced, y0, onp.array([0.0, 1.0, 2.0]), (0.7,)),
                             onp.array([0.3, -0.5]), tol=1e-5, dtype=onp.float32, x64=False)
    assert onp.all(onp.isfinite(got))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(full_output=1), NotImplementedError, "full_output"),
    (dict(tcrit=onp.array([1.0])), NotImplementedError, "tcrit"),
    (dict(args=0.7), TypeError, "tuple"),
    (dict(y0=onp.ones((2, 2))), ValueError, "one-dimensional"),
    (dict(func=lambda y, t: np.ones(3)), ValueError, "size of the array returned by func"),
    (dict(rtol=onp.ones(3) * 1e-6), ValueError, "rtol"),
])
def test_unsupported_or_bad_arguments_raise(kwargs, error, match):
    func = kwargs.pop("func", lambda y, t: -y)
    y0 = kwargs.pop("y0", None)
    f = lambda x: odeint(func, x if y0 is None else x * y0, onp.array([0.0, 1.0]), **kwargs)
    with pytest.raises(error, match=match):
        jit_ps(f, fallback="error")(onp.array([1.0, 2.0]) if y0 is None else 1.0)


def test_dynamics_closing_over_a_traced_value_with_constant_state_and_times():
    """No traced value among odeint's own arguments: the rule still takes the call."""
    t = onp.linspace(0.0, 1.0, 4)

    def f(a):
        return np.sum(odeint(lambda y, s: -a * y, onp.array([1.0, 2.0]), t))

    a = 0.7
    expected = onp.sum(onp.exp(-a * t)[:, None] * onp.array([1.0, 2.0]))
    assert abs(jit_ps(f, fallback="error")(a) - expected) < 1e-6 * abs(expected)
