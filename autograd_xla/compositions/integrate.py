"""scipy.integrate.odeint, as autograd wraps it: an adaptive Runge-Kutta integrator that
compiles to loops.

scipy's odeint drives LSODA (Fortran) with a Python callback, so it cannot run on traced
values. This trace rule integrates the same problem with the explicit Dormand-Prince 5(4)
pair instead, written with scan / while_loop / fori_loop:

* a scan over the output intervals [t[k], t[k+1]]; in each, a while_loop of adaptive step
  attempts, the last one shortened to land exactly on t[k+1] (no interpolation); in each
  attempt, a fori_loop over the stages (first same as last: the derivative at the end of
  an accepted step is the first stage of the next, so a step costs six evaluations).
  `func` is traced once, as the stage body, whatever the number of steps: the program is
  one nest of three `stablehlo.while` loops, never unrolled.
* error control follows scipy's rtol/atol: the local error estimate divided by
  atol + rtol * max(|y_old|, |y_new|), componentwise, must have root-mean-square <= 1.
  The step size follows the usual controller h *= clip(0.9 * err**(-1/5), 0.2, 10); hmax
  caps it and hmin is a floor. The very first attempt only evaluates func at y0 and picks
  the first step: h0 if given, else 0.01 * rms(y0 / w) / rms(func(y0) / w).
* mxstep bounds the step attempts (accepted and rejected) per output interval, 500 when
  0 as in LSODA. Compiled code cannot raise or warn: when an interval needs more attempts,
  or a step is rejected at hmin, that row of the result and every later one are NaN
  (where scipy warns with ODEintWarning and returns unreliable values). A solution that
  overflows or turns NaN is rejected until mxstep runs out, with the same result.

The result is float64 of shape (len(t), len(y0)) like scipy's (a scalar y0 counts as
length 1; func receives y as a 1-D array). It agrees with LSODA's only to the integration
tolerance: both solvers keep each step's local error near atol + rtol*|y|, and the
results differ by a few multiples of that, as global errors accumulate over the steps
(tests/test_integrate.py measures it). Stiff problems, where LSODA switches to an implicit
method, take many tiny explicit steps here and may exhaust mxstep (NaN). t must be
monotonic as in scipy; that is checked when t is a constant; a traced t that is not
monotonic is integrated interval by interval, backwards where it decreases.

Derivatives: autograd's VJP of odeint calls odeint again on an augmented system integrated
backwards in time, with make_vjp of func inside its dynamics; those calls come through this
rule too, so jit_ps(grad(f)) and grad(jit_ps(f)) compile whole. autograd defines no JVP
for odeint.

Not supported: full_output=1 (the diagnostics are LSODA's) and tcrit. Dfun, col_deriv, ml,
mu, mxordn, mxords (Jacobian and order settings of LSODA's implicit methods) and the
printing options ixpr, mxhnil, printmessg are accepted and ignored: an explicit method
needs none of them.
"""
import autograd.numpy as anp
import numpy as np

from ..control_flow import fori_loop, scan, while_loop
from ..tracing import Tracer
from ..registry import traces, when_imported

_F64 = np.dtype(np.float64)
_DEFAULT_TOL = 1.49012e-8  # scipy's default rtol and atol for odeint
_DEFAULT_MXSTEP = 500       # LSODA's default when mxstep=0

# Dormand & Prince (1980), "A family of embedded Runge-Kutta formulae": nodes, coupling
# coefficients (row 6 is the 5th-order solution: first same as last), and the difference
# between the 5th- and 4th-order weights, which estimates the local error.
_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0])
_A = np.zeros((7, 7))
_A[1, :1] = [1 / 5]
_A[2, :2] = [3 / 40, 9 / 40]
_A[3, :3] = [44 / 45, -56 / 15, 32 / 9]
_A[4, :4] = [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729]
_A[5, :5] = [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656]
_A[6, :6] = [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]
_B4 = np.array([5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40])
_E = _A[6] - _B4
# Step-size controller: the error estimate is O(h**5), so h * err**(-1/5) would just meet
# the tolerance; aim a little lower and change h by a bounded factor per attempt.
_SAFETY, _MIN_FACTOR, _MAX_FACTOR = 0.9, 0.2, 10.0


def _f64(x):
    """x as a float64 array (scipy's odeint casts y0, t and func's values so); lists may
    hold traced values."""
    x = anp.array(x) if isinstance(x, (list, tuple)) else x if isinstance(x, Tracer) else np.asarray(x)
    if x.dtype.kind == "c":
        raise TypeError("odeint integrates real systems only (scipy casts complex values to float64); "
                        "split a complex state into real and imaginary parts")
    return x if x.dtype == _F64 else x.astype(_F64)


def _rms(x):
    return np.sqrt(np.mean(x * x))


def _tolerance(tol, n, name):
    tol = _f64(_DEFAULT_TOL if tol is None else tol)
    if tol.ndim > 1 or tol.size not in (1, n):
        raise ValueError(f"odeint: {name} must be a scalar or have one entry per component of y0 ({n}); "
                         f"got shape {tol.shape}")
    if not isinstance(tol, Tracer) and (tol < 0).any():
        raise ValueError(f"odeint: {name} must be non-negative")
    return tol


def _concrete(value, name, kind):
    if isinstance(value, Tracer):
        raise TypeError(f"odeint: {name} must be known at trace time (a Python number or a jit_ps static "
                        f"argument): it shapes the compiled loop")
    return kind(value)


def odeint(func, y0, t, args=(), Dfun=None, col_deriv=0, full_output=0, ml=None, mu=None, rtol=None,
           atol=None, tcrit=None, h0=0.0, hmax=0.0, hmin=0.0, ixpr=0, mxstep=0, mxhnil=0, mxordn=12,
           mxords=5, printmessg=0, tfirst=False):
    if full_output:
        raise NotImplementedError("odeint(full_output=1) is not supported under jit_ps: its diagnostics are "
                                  "LSODA's, and the compiled integrator is Dormand-Prince. Call it with "
                                  "full_output=0, or outside jit_ps")
    if tcrit is not None:
        raise NotImplementedError("odeint(tcrit=...) is not supported under jit_ps; put the critical times "
                                  "into t instead (steps never cross an output time)")
    if not isinstance(args, tuple):
        raise TypeError("odeint: extra arguments must be in a tuple (as scipy requires)")
    y0, t = _f64(y0), _f64(t)
    if y0.ndim > 1:
        raise ValueError("odeint: initial condition y0 must be one-dimensional")
    if t.ndim != 1 or t.shape[0] == 0:
        raise ValueError(f"odeint: t must be a non-empty 1-D sequence of times, got shape {t.shape}")
    y0 = np.reshape(y0, (-1,))
    n = y0.shape[0]
    if n == 0:
        raise ValueError("odeint: y0 is empty (scipy reports illegal input)")
    if not isinstance(t, Tracer):
        dt = np.diff(t)
        if not ((dt >= 0).all() or (dt <= 0).all()):
            raise ValueError("odeint: the values in t must be monotonically increasing or monotonically "
                             "decreasing; repeated values are allowed")
    rtol, atol = _tolerance(rtol, n, "rtol"), _tolerance(atol, n, "atol")
    mxstep = _concrete(mxstep, "mxstep", int) or _DEFAULT_MXSTEP
    tfirst = _concrete(tfirst, "tfirst", bool)
    h0, hmin, hmax = _f64(h0), _f64(hmin), _f64(hmax)
    hmax = np.where(hmax > 0, hmax, np.inf)
    return _dormand_prince(func, y0, t, args, rtol, atol, h0, hmax, hmin, mxstep, tfirst)


@when_imported("scipy.integrate")
def _register(integrate):
    """Once scipy.integrate is imported: importing it is slow, and only then can it be called."""
    traces(integrate.odeint)(odeint)


def _dormand_prince(func, y0, t, args, rtol, atol, h0, hmax, hmin, mxstep, tfirst):
    n = y0.shape[0]

    def rhs(y, s):
        out = func(s, y, *args) if tfirst else func(y, s, *args)
        out = _f64(out)
        if out.ndim > 1:
            raise ValueError(f"odeint: the array returned by func must be one-dimensional, got shape {out.shape}")
        if out.size != n:
            raise ValueError(f"odeint: the size of the array returned by func ({out.size}) does not match the "
                             f"size of y0 ({n})")
        return np.reshape(out, (n,))

    def weights(y, y_new):
        return atol + rtol * np.maximum(np.abs(y), np.abs(y_new))

    def first_step(y, f):
        w = weights(y, y)
        d0, d1 = _rms(y / w), _rms(f / w)
        guess = np.where((d0 < 1e-5) | (d1 < 1e-5), 1e-6, 0.01 * d0 / d1)
        return np.minimum(np.where(h0 != 0, np.abs(h0), guess), hmax)

    def stages(s, y, h, f, first, stop):
        """Stages first..stop-1 of a Dormand-Prince step of signed size h from (s, y);
        stage 0 is f, the derivative at (s, y), when first is 1."""
        def stage(i, k):
            k_i = rhs(y + h * (anp.take(_A, i, axis=0) @ k), s + anp.take(_C, i) * h)
            return np.where((np.arange(7) == i)[:, None], k_i[None, :], k)

        return fori_loop(first, stop, stage, np.concatenate([f[None, :], np.zeros((6, n))]))

    def interval(carry, ends):
        y, f, h, ok, started = carry
        t_start, t_end = ends
        direction = np.sign(t_end - t_start)

        def running(state):
            s, _, _, _, count, ok, _ = state
            return ok & (s != t_end) & (count < mxstep)

        def attempt(state):
            """One step attempt; the very first only evaluates f(y0) and picks the first step."""
            s, y, f, h, count, ok, started = state
            remaining = t_end - s
            last = h >= np.abs(remaining)
            step = np.where(last, remaining, direction * h)
            k = stages(s, y, step, f, np.where(started, 1, 0), np.where(started, 7, 1))
            y_new, err_vec = y + step * (_A[6] @ k), step * (_E @ k)
            err = _rms(err_vec / weights(y, y_new))
            accept = started & (err <= 1.0)  # false for nan
            factor = np.where(err > 0, _SAFETY * np.where(err > 0, err, 1.0) ** (-1.0 / 5), _MAX_FACTOR)
            factor = np.where(np.isnan(err), _MIN_FACTOR, np.clip(factor, _MIN_FACTOR, _MAX_FACTOR))
            h_next = np.abs(step) * factor
            # a last step shortened to land on t_end says little when its error is tiny: keep h
            h_next = np.where(accept & last & (factor == _MAX_FACTOR), np.maximum(h_next, h), h_next)
            h_next = np.minimum(np.maximum(h_next, hmin), hmax)
            ok = ok & (accept | ~started | (np.abs(step) > hmin))
            return (np.where(accept, np.where(last, t_end, s + step), s),
                    np.where(accept, y_new, y),
                    np.where(accept, k[6], k[0]),
                    np.where(started, h_next, first_step(y, k[0])),
                    count + np.where(started, 1, 0), ok, np.asarray(True))

        s, y, f, h, _, ok, started = while_loop(running, attempt, (t_start, y, f, h, 0, ok, started))
        ok = ok & (s == t_end)  # false when mxstep ran out
        return (y, f, h, ok, started), np.where(ok, y, np.nan)

    start = (y0, np.zeros(n), np.asarray(0.0), np.asarray(True), np.asarray(False))
    _, ys = scan(interval, start, (t[:-1], t[1:]))
    return np.concatenate([y0[None, :], ys])
