"""Comparison helpers: a jitted function must agree with plain autograd, in value and
dtype, and so must its derivatives, whichever way jit_ps and grad are nested."""
import threading

import numpy as onp
from autograd import grad
from autograd.extend import primitive

from autograd_xla import jit_ps, register_translation_rule

TOL = {onp.dtype("float64"): 1e-12, onp.dtype("complex128"): 1e-12, onp.dtype("float32"): 2e-5,
       onp.dtype("complex64"): 2e-5, onp.dtype("float16"): 2e-3}


def tolerance(*dtypes, rtol=None):
    """The loosest tolerance among the dtypes involved (inputs and result)."""
    if rtol is not None:
        return rtol
    return max(TOL.get(onp.dtype(d), 0) for d in dtypes)


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


def in_primal_dtype(derivative, primal):
    """Plain autograd's `derivative` as jit_ps gives it: in its primal's dtype where it is a
    wider float (complex) than a float32 (complex64) primal, as autograd's derivative code
    makes it by promoting with float64 arrays of its own (tracing.in_dtype)."""
    have, want = onp.asarray(derivative).dtype, onp.asarray(primal).dtype
    if have.kind == want.kind and have.kind in "fc" and have.itemsize > want.itemsize:
        return onp.asarray(derivative).astype(want)
    return derivative


def check_grad(f, *args, argnums=(0,), rtol=None, atol=None, both_ways=True):
    """grad of sum(w * f) wrt each argnum: plain vs jit_ps(grad(.)) vs grad(jit_ps(.))."""
    s = scalarize(f)
    for argnum in argnums:
        expected = in_primal_dtype(grad(s, argnum)(*args), args[argnum])
        dts = dtypes_of(*args)
        assert_close(jit_ps(grad(s, argnum))(*args), expected, rtol, atol, path=f"jit(grad) wrt arg {argnum}",
                     inputs=dts)
        if both_ways:
            assert_close(grad(jit_ps(s), argnum)(*args), expected, rtol, atol, path=f"grad(jit) wrt arg {argnum}",
                         inputs=dts)


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
