"""Comparison helpers: a jitted function must agree with plain autograd, in value and
dtype, and so must its derivatives, whichever way jit_ps and grad are nested.

They compare at the precision the suite's default platform computes in: on a platform without
64-bit floating point (a TPU: backend.FLOAT64_PLATFORMS) float64 programs are computed in
float32, so every floating-point comparison there uses TOL_32 at least (the chip's float32
transcendentals and its matrix products at HIGHEST precision, after the inputs were rounded
to float32), while dtypes stay numpy's (results come back float64). On the CPU nothing is
loosened."""
import contextlib
import json
import os
import subprocess
import sys
import threading

import numpy as onp
from autograd import grad
from autograd import test_util as _autograd_test_util
from autograd.extend import primitive

import autograd_xla
from autograd_xla import jit_ps, register_translation_rule
from autograd_xla import backend as _backend

TOL = {onp.dtype("float64"): 1e-12, onp.dtype("complex128"): 1e-12, onp.dtype("float32"): 2e-5,
       onp.dtype("complex64"): 2e-5, onp.dtype("float16"): 2e-3}

#: The suite's default platform (conftest), and whether it computes float64 in 32 bits.
PLATFORM = autograd_xla.default_platform()
NARROW = PLATFORM not in _backend.FLOAT64_PLATFORMS
#: Relative tolerances (of the result's scale) there: float64 work done in float32 and float32
#: work on the chip, against numpy's float64 or float32.
#: The element type of a float64 value in program text: f32 where it is computed in 32 bits.
F64_TEXT = "f32" if NARROW else "f64"
TOL_32 = {onp.dtype("float64"): 1e-4, onp.dtype("complex128"): 1e-4, onp.dtype("float32"): 1e-4,
          onp.dtype("complex64"): 1e-4, onp.dtype("float16"): 2e-3}
#: A TPU's own float32 transcendentals are less accurate than XLA:CPU's float32 ones, which
#: AUTOGRAD_XLA_TESTS_32BIT computes with (log1p, log, exp, pow within 2e-7 relative; lgamma
#: within 2.1e-5 absolute on (0, 30], 7e-8 at 2.5). Measured on a v5e: log1p up to
#: 2.3e-4 relative off on [-0.172, -0.139] (test_gammaln_and_digamma_near_their_zeros' identity
#: lgamma(2 + d) - lgamma(1 + d) = log1p(d)); XLA's lgamma and digamma, which take log1p of the
#: Lanczos sum's argument, 7.1e-5 off at gammaln(2.5), 6.0e-5 at betaln(2, 0.5), 1.3e-4 relative
#: at rgamma(-2.5); pow or log ~2.4e-5 (power's JVP 0.36 - 0.34 came 4.4e-4 off). TPU_RTOL: the
#: relative tolerance (of a result's scale) there of a value built on a few of them, where the
#: value sums or cancels them (a digamma difference, a logpdf's lgammas: up to 6.9e-4, beta.pdf's
#: gradient in a); TPU_SWEEP_RTOL: that of the accuracy sweeps of the functions built on lgamma
#: over wide domains (incomplete gamma and beta, beta: up to 5.5e-3 of a value). None elsewhere:
#: the tolerances the tests give.
TPU_RTOL, TPU_SWEEP_RTOL = (2e-3, 1e-2) if PLATFORM == "tpu" else (None, None)
#: The absolute tolerance there of a sum of lgammas of moderate arguments (dirichlet.logpdf's four
#: came 1.8e-4 off a value of 0.108); None elsewhere.
TPU_LGAMMA_ATOL = 5e-4 if PLATFORM == "tpu" else None


def relative_32(rtol, expected, floor=0.0):
    """(rtol, floor) of a test's own relative comparison |got - e| <= rtol * max(|e|, floor) at
    the platform's precision: on a 32-bit platform (NARROW) rtol at least TOL_32's and a floor
    of the largest finite |e| that float32 holds, so that every result may be off by TOL_32
    of the results' scale (results near a zero compare absolutely, as assert_close's do:
    digamma(-0.5) = 0.036, near its zero at -0.504, came 5e-6 off on a TPU, 1.5e-6 of the
    scale of digamma's other values); elsewhere as given."""
    if not NARROW:
        return rtol, floor
    e = onp.abs(onp.asarray(expected, dtype=float))
    e = e[onp.isfinite(e) & (e < onp.finfo(onp.float32).max)]
    return max(rtol, TOL_32[onp.dtype("float64")]), onp.maximum(floor, e.max() if e.size else 1.0)


def representable_32(expected):
    """Where float64 values `expected` fit float32's range (all of them unless NARROW): a
    32-bit platform overflows or flushes the others."""
    e = onp.abs(onp.asarray(expected))
    if not NARROW:
        return onp.ones(e.shape, bool)
    info = onp.finfo(onp.float32)
    return ~onp.isfinite(e) | (e == 0) | ((e < info.max) & (e > info.tiny))


def tolerance(*dtypes, rtol=None):
    """The loosest tolerance among the dtypes involved (inputs and result); on a 32-bit platform
    (NARROW) never below TOL_32's."""
    floor = max([TOL_32.get(onp.dtype(d), 0) for d in dtypes] + [0]) if NARROW else 0
    if rtol is not None:
        return max(rtol, floor)
    return max([TOL.get(onp.dtype(d), 0) for d in dtypes] + [floor])


def dtypes_of(*args):
    out = []
    for a in args:
        if isinstance(a, (tuple, list)):
            out += dtypes_of(*a)
        elif isinstance(a, dict):
            out += dtypes_of(*a.values())
        else:
            out.append(onp.asarray(a).dtype)
    return out


def assert_close(got, expected, rtol=None, atol=None, check_dtype=True, path="result", inputs=()):
    if isinstance(expected, (tuple, list)):
        assert type(got) is type(expected) or isinstance(got, type(expected)), f"{path}: {type(got)} vs {type(expected)}"
        assert len(got) == len(expected), f"{path}: length {len(got)} vs {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, rtol, atol, check_dtype, f"{path}[{i}]", inputs)
        return
    if isinstance(expected, dict):
        assert set(got) == set(expected), path
        for k in expected:
            assert_close(got[k], expected[k], rtol, atol, check_dtype, f"{path}[{k!r}]", inputs)
        return
    g, e = onp.asarray(got), onp.asarray(expected)
    assert g.shape == e.shape, f"{path}: shape {g.shape} vs expected {e.shape}"
    if check_dtype:
        assert g.dtype == e.dtype, f"{path}: dtype {g.dtype} vs expected {e.dtype}"
    if e.dtype.kind in "fc":
        r = tolerance(e.dtype, *[d for d in inputs if d.kind in "fc"], rtol=rtol)
        scale = onp.max(onp.abs(e[onp.isfinite(e)])) if onp.isfinite(e).any() else 1.0
        a = atol if atol is not None else r * max(float(scale), 1e-300)
        if NARROW:
            a = max(a, r * max(float(scale), 1e-30))
        onp.testing.assert_allclose(g, e, rtol=r, atol=a, equal_nan=True, err_msg=path)
    else:
        onp.testing.assert_array_equal(g, e, err_msg=path)


def check_value(f, *args, rtol=None, atol=None, check_dtype=True, **kwargs):
    expected = f(*args, **kwargs)
    got = jit_ps(f)(*args, **kwargs)
    assert_close(got, expected, rtol, atol, check_dtype, inputs=dtypes_of(*args))
    return got


def scalarize(f, seed=0):
    """A scalar function of f's output with a non-trivial gradient: sum(w * f(...))."""
    def s(*args):
        out = f(*args)
        import autograd.numpy as anp
        w = onp.random.RandomState(seed).uniform(0.5, 1.5, size=anp.shape(out))
        if anp.iscomplexobj(out):
            out = anp.real(out) + 0.3 * anp.imag(out)
        return anp.sum(out * w)
    return s


def as_jit_ps_gives(derivative, primal, got):
    """Plain autograd's `derivative` in the dtype jit_ps gave (`got`'s) where that is its float32
    (complex64) `primal`'s and plain's is wider: autograd's derivative code widened it by
    itself, which jit_ps casts back (tracing.in_primal_dtypes); values then agree at the
    primal's precision. Otherwise plain's, dtype and all."""
    have, want, gave = (onp.asarray(x).dtype for x in (derivative, primal, got))
    if gave == want and have.kind == want.kind and have.kind in "fc" and have.itemsize > want.itemsize:
        return onp.asarray(derivative).astype(want)
    return derivative


def check_grad(f, *args, argnums=(0,), rtol=None, atol=None, both_ways=True):
    """grad of sum(w * f) wrt each argnum: plain vs jit_ps(grad(.)) vs grad(jit_ps(.))."""
    s = scalarize(f)
    for argnum in argnums:
        plain, dts = grad(s, argnum)(*args), dtypes_of(*args)
        got = jit_ps(grad(s, argnum))(*args)
        assert_close(got, as_jit_ps_gives(plain, args[argnum], got), rtol, atol, path=f"jit(grad) wrt arg {argnum}",
                     inputs=dts)
        if both_ways:
            got = grad(jit_ps(s), argnum)(*args)
            assert_close(got, as_jit_ps_gives(plain, args[argnum], got), rtol, atol,
                         path=f"grad(jit) wrt arg {argnum}", inputs=dts)


#: autograd.test_util's finite-difference step and tolerances for a function computed in float32
#: (NARROW): its step of 1e-6 moves a float32 input by a few ulps and the quotient is rounding
#: noise (a float32 gamma.cdf's "numeric derivative" came out -103 for -0.098). A step of 1e-2
#: makes rounding (inputs and outputs to float32, ~1e-7 each, over the step) and truncation
#: (step**2 / 24 times f''' / f') both ~1e-5 of the derivative, well inside 1e-3.
STEPS_32 = {"EPS": 1e-2, "TOL": 1e-3, "RTOL": 1e-3}


@contextlib.contextmanager
def _float32_steps():
    saved = {k: getattr(_autograd_test_util, k) for k in STEPS_32}
    for k, v in STEPS_32.items():
        setattr(_autograd_test_util, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(_autograd_test_util, k, v)


def check_grads(f, argnum=0, modes=("fwd", "rev"), order=2):
    """autograd.test_util.check_grads(f, argnum, modes, order)(*args), autograd's own numeric
    derivative check; on a 32-bit platform (NARROW) with float32-sized steps (STEPS_32), on
    the CPU exactly autograd's."""
    checker = _autograd_test_util.check_grads(f, argnum, list(modes), order)
    if not NARROW:
        return checker

    def run(*args, **kwargs):
        with _float32_steps():
            return checker(*args, **kwargs)
    return run


def check(f, *args, argnums=(0,), rtol=None, atol=None, grad_rtol=None, both_ways=True):
    check_value(f, *args, rtol=rtol, atol=atol)
    if argnums:
        check_grad(f, *args, argnums=argnums, rtol=grad_rtol or rtol, atol=atol, both_ways=both_ways)


def check_falls_back(f, *args, error=Exception, match=None, **kwargs):
    """What cannot compile runs as plain autograd: one FallbackWarning naming the cause (`match`)
    and plain autograd's result; with fallback="error" the cause is raised (`error`, `match`)."""
    import warnings

    import pytest

    from autograd_xla import FallbackWarning
    with pytest.raises(error, match=match):
        jit_ps(f, fallback="error")(*args, **kwargs)
    jf = jit_ps(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = jf(*args, **kwargs)
        again = jf(*args, **kwargs)
    fallbacks = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in caught]
    if match is not None:
        import re
        assert re.search(match, str(fallbacks[0].message)), str(fallbacks[0].message)
    expected = f(*args, **kwargs)
    assert_close(got, expected)
    assert_close(again, expected)
    assert jf.cache_info()["fallbacks"] >= 1
    return str(fallbacks[0].message)


def jit_strict(f, **kwargs):
    """jit_ps raising what stops compiling (fallback="error"), for tests of those errors."""
    return jit_ps(f, fallback="error", **kwargs)


@primitive
def twice_xla_rejects(x):
    """2 * x, whose translation rule (below) is deliberately wrong: it claims a transposed
    shape for an elementwise add, which XLA's verifier rejects, while tracing accepts it (the
    rule is the source of truth): a program XLA will not compile, for the error paths."""
    return 2.0 * x


def _transposed_add(ctx, x):
    return ctx.op1("stablehlo.add", [x, x], tuple(reversed(x.shape)), x.dtype)


register_translation_rule(twice_xla_rejects, _transposed_add)


def run_threads(target, args, timeout=120):
    """Run target(*a) for each `a` of `args` on a thread of its own, all at once; fails if one
    has not finished within `timeout` seconds."""
    threads = [threading.Thread(target=target, args=a) for a in args]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"


_placed_rs = onp.random.RandomState(0)


def placed(shape, dtype=onp.float64, offset=0):
    """A random array whose data starts `offset` bytes past a 64-byte boundary."""
    n, itemsize = int(onp.prod(shape)), onp.dtype(dtype).itemsize
    raw = onp.empty(n * itemsize + 128, onp.uint8)
    start = -raw.ctypes.data % 64 + offset
    out = raw[start:start + n * itemsize].view(dtype).reshape(shape)
    out[:] = _placed_rs.rand(*shape)
    return out


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_with_a_persistent_cache(tmp_path, *children):
    """Run each script in `children` in a fresh Python process, one after the other, sharing a
    persistent cache in `tmp_path` (every program stored); the JSON each prints last."""
    env = dict(os.environ, PYTHONPATH=ROOT, AUTOGRAD_XLA_CACHE_DIR=str(tmp_path / "cache"),
               AUTOGRAD_XLA_CACHE_MIN_COMPILE_SECONDS="0", AUTOGRAD_XLA_CACHE_KEY_FILE=str(tmp_path / "key"))
    runs = []
    for child in children:
        r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120, cwd=ROOT,
                           env=env)
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return runs
