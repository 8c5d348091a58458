"""A platform whose floating point is 32-bit (a TPU: backend.FLOAT64_PLATFORMS) computes float64
programs in float32 and hands results back in numpy's dtypes, with one PrecisionWarning per
function; x64=False returns float32, x64=True computes in float64. Simulated on the CPU by
taking it out of FLOAT64_PLATFORMS. And results leave the device in one copy: the host's array
is the transfer's own, never one a later copy shares."""
import os
import subprocess
import sys
import warnings

import autograd.numpy as np
import ml_dtypes
import numpy as onp
import pytest
from autograd import grad

import autograd_xla
from autograd_xla import DeviceArray, PrecisionWarning, jit_ps
from autograd_xla import backend as backend_mod
from helpers import NARROW, ROOT

X = onp.linspace(-2.0, 2.0, 7)


def loss(x):
    return np.sum(np.tanh(x) * np.exp(x / 3.0))


@pytest.fixture
def narrow_cpu(monkeypatch):
    """The CPU with a TPU's floating-point rule, for functions jitted with backend="cpu"."""
    monkeypatch.setattr(backend_mod, "FLOAT64_PLATFORMS", backend_mod.FLOAT64_PLATFORMS - {"cpu"})


def caught(call):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        out = call()
    return out, [w for w in seen if issubclass(w.category, PrecisionWarning)]


def test_float64_is_computed_in_float32_and_comes_back_float64_with_one_warning(narrow_cpu):
    f = jit_ps(loss, backend="cpu")
    (value, gradient, again), warned = caught(lambda: (f(X), grad(f)(X), f(X + 1.0)))
    assert len(warned) == 1  # one per function: its derivatives' programs share it
    text = str(warned[0].message)
    assert "float32" in text and "x64=False" in text and "x64=True" in text and warned[0].filename == __file__
    exact, exact_grad = loss(X), grad(loss)(X)
    assert type(value) is onp.float64 and gradient.dtype == onp.float64
    assert 0 < abs(value - exact) < 1e-5 * abs(exact)  # float32's precision, not float64's
    onp.testing.assert_allclose(gradient, exact_grad, rtol=1e-5)
    assert onp.abs(gradient - exact_grad).max() > 1e-12
    assert jit_ps(grad(loss), backend="cpu")(X).dtype == onp.float64


def test_a_product_of_float32_and_float64_read_through_a_transpose(narrow_cpu):
    """A float64 value computed in float32 is the float32 value under a float64 handle (hlo's
    convert emits nothing): a product that reads such a handle of a transpose through the
    transpose (fold_transpose) computes in float64's handle, as the trace says. matmul's
    gradient of float32 operands under a float64 weight multiplies swapaxes(a) by a float64
    cotangent (it was lowered as float32 and the program refused)."""
    a, b = onp.linspace(-1.0, 1.0, 12, dtype=onp.float32).reshape(3, 4), onp.ones((4, 2), onp.float32)
    w = onp.linspace(0.5, 1.5, 6).reshape(3, 2)
    f = lambda a, b: np.sum((a @ b) * w)
    with warnings.catch_warnings():
        warnings.simplefilter("error", autograd_xla.FallbackWarning)
        got = jit_ps(grad(f, 1), backend="cpu")(a, b)
    onp.testing.assert_allclose(got, grad(f, 1)(a, b), rtol=1e-6)


def test_vmap_of_a_switch_on_a_batched_int64_index(narrow_cpu):
    """A batched value's float64 or int64 handle (hlo.Value.as_dtype) stays batched: vmap of a
    switch whose index differs per example selects per example (a case on the batched index,
    typed as a scalar, was refused)."""
    from autograd_xla import switch
    branches = [np.sin, lambda x: x * 3.0, lambda x: -x]
    f = lambda x, i: switch(i, branches, x)
    x, i = onp.linspace(-1.0, 1.0, 12).reshape(3, 4), onp.array([2, 0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", autograd_xla.FallbackWarning)
        got = jit_ps(autograd_xla.vmap(f), backend="cpu")(x, i)
    onp.testing.assert_allclose(got, onp.stack([branches[k](x[n]) for n, k in enumerate(i)]), rtol=1e-6)


@pytest.mark.skipif(NARROW, reason="this run computes float64 in 32 bits already")
def test_the_products_and_vmap_files_pass_under_the_tpus_floating_point_rule():
    """tests/test_numpy_contractions.py and test_vmap.py again, in a process where the CPU
    computes float64 in 32 bits (AUTOGRAD_XLA_TESTS_32BIT=1, a TPU's rule): the chip's run of
    the suite found float64 handles of float32 values losing what they stand for there
    (the two tests above), which CI, without a TPU, sees this way."""
    env = dict(os.environ, AUTOGRAD_XLA_TESTS_32BIT="1", PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_numpy_contractions.py",
                        "tests/test_vmap.py"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_x64_false_returns_float32_and_x64_true_float64_without_a_warning(narrow_cpu):
    (low, high), warned = caught(lambda: (jit_ps(loss, backend="cpu", x64=False)(X),
                                          jit_ps(loss, backend="cpu", x64=True)(X)))
    assert warned == []
    assert low.dtype == onp.float32 and high.dtype == onp.float64
    assert abs(high - loss(X)) <= 1e-14 * abs(loss(X))


def test_float32_programs_say_nothing(narrow_cpu):
    x = X.astype(onp.float32)
    out, warned = caught(lambda: jit_ps(loss, backend="cpu")(x))
    assert warned == [] and out.dtype == onp.float32


def test_the_warning_made_an_error_reaches_the_caller_not_a_fallback(narrow_cpu):
    f = jit_ps(loss, backend="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        with pytest.raises(PrecisionWarning):
            f(X)
    assert f.cache_info()["fallbacks"] == 0


def test_device_arrays_hold_float32_say_float64_and_go_back_in_without_a_transfer(narrow_cpu):
    f = jit_ps(lambda x: x * 2.0 + 1.0, backend="cpu", keep_on_device=True)
    d = f(X)
    assert isinstance(d, DeviceArray) and d.dtype == onp.float64 and d.aval.dtype == onp.float32
    assert onp.asarray(d).dtype == onp.float64 and d.to_numpy().dtype == onp.float64
    onp.testing.assert_allclose(onp.asarray(d), X * 2.0 + 1.0, rtol=1e-6)
    moved = f.stats.host_to_device
    e = f(d)
    assert f.stats.host_to_device == moved and e.dtype == onp.float64  # the buffer itself went in
    onp.testing.assert_allclose(onp.asarray(e), (X * 2.0 + 1.0) * 2.0 + 1.0, rtol=1e-6)
    shape = autograd_xla.eval_shape(jit_ps(loss, backend="cpu"), X)
    assert shape.dtype == onp.float64


def test_pmap_on_one_device_follows_the_same_rule(narrow_cpu):
    f = autograd_xla.pmap(lambda x: np.sin(x) * 2.0, backend="cpu", devices=autograd_xla.devices("cpu")[:1])
    out = f(X[None])
    assert out.dtype == onp.float64
    onp.testing.assert_allclose(out[0], onp.sin(X) * 2.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", [onp.float64, ml_dtypes.bfloat16], ids=["viewed", "copied"])
def test_each_host_copy_of_a_device_array_is_its_own(dtype):
    """Both of the CPU's ways out (a view copied; jaxlib's array of a dtype numpy cannot view,
    the way every TPU result takes): each call a fresh writable array, no other's memory."""
    d = jit_ps(lambda x: x * 2, backend="cpu", keep_on_device=True)(onp.arange(6.0).astype(dtype))
    a, b = d.to_numpy(), onp.asarray(d)
    assert a.flags.writeable and b.flags.writeable and not onp.shares_memory(a, b)
    a[0] = 99
    assert float(b[0]) == 0.0 and float(onp.asarray(d)[0]) == 0.0


def test_results_of_a_dtype_numpy_cannot_view_are_writable_and_unshared():
    f = jit_ps(lambda x: x + 1, backend="cpu")
    x = onp.arange(4.0).astype(ml_dtypes.bfloat16)
    r1, r2 = f(x), f(x)
    assert r1.dtype == ml_dtypes.bfloat16 and r1.flags.writeable and not onp.shares_memory(r1, r2)
    r1[0] = 50
    assert float(r2[0]) == 1.0


def test_the_tpu_check_runs_every_test_file():
    """benchmarks/tpu_check.sh's two chunks (benchmarks/tpu_chunks.txt) and the CPU's own files
    (conftest.CPU_FILES, run apart there) hold every test file, each once."""
    import conftest
    chunks = [line.split() for line in open(os.path.join(ROOT, "benchmarks", "tpu_chunks.txt")).read().splitlines()]
    listed = [f for chunk in chunks for f in chunk] + [f"tests/{name}" for name in conftest.CPU_FILES]
    files = sorted(f"tests/{name}" for name in os.listdir(os.path.join(ROOT, "tests"))
                   if name.startswith("test_") and name.endswith(".py"))
    assert sorted(listed) == files
