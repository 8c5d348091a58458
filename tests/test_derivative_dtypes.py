"""Derivatives in their primal's precision (tracing.in_dtype, compositions/autograd_patches.py's
weak creation): every autograd VJP and JVP that makes arrays or numbers of numpy's default
dtype (np.where's zeros, np.mean's count, np.trace's eye, np.einsum's ones, linspace's
linspace, the linear algebra derivatives' eye and ones, rfft's factors) gives a float32
primal a float32 derivative under jit_ps, equal to plain autograd's (which is float64 for
several of them) to float32's precision; a float64 primal's is plain
autograd's, dtype and all. The float32 SeLU and MLP gradients compile to programs with no
float64 operation."""
import os
import re
import sys

import numpy as onp
import pytest

import autograd.numpy as np
import autograd.scipy.special as special
from autograd import grad, make_jvp
from autograd_xla import jit_ps
from autograd_xla.tree import flatten
from helpers import F64_TEXT, NARROW, assert_close

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import workloads  # noqa: E402

rs = onp.random.RandomState(0)
V = rs.randn(6)
A = rs.randn(4, 4)
SPD = A @ A.T + 4 * onp.eye(4)
SYM = A + A.T

#: (name, function of x, x): each reaches a derivative that makes a default-dtype array or number
CASES = [
    ("where_vjp_both", lambda x: np.sum(np.where(x > 0, x, 2 * x) ** 2), V),
    ("selu", lambda x: np.sum(1.05 * np.where(x > 0, x, 1.67 * (np.exp(x) - 1.0))), V),
    ("mean", lambda x: np.mean(x ** 2), V),
    ("mean_axis", lambda x: np.sum(np.mean(x ** 2, axis=0)), A),
    ("trace", lambda x: np.trace(x @ x), A),
    ("einsum_summed_out", lambda x: np.sum(np.einsum("ij->i", x) ** 2), A),
    ("linspace", lambda x: np.sum(np.linspace(x[0], x[1], 5) ** 2), V),
    ("diff_empty", lambda x: np.sum(np.diff(x, n=6)) + np.sum(x ** 2), V),
    ("pinv", lambda x: np.sum(np.linalg.pinv(x)), A),
    ("cholesky", lambda x: np.sum(np.linalg.cholesky(x @ x.T + 4 * np.eye(4, dtype=x.dtype))), A),
    ("eigh", lambda x: np.sum(np.linalg.eigh(x + x.T)[0] ** 2) + np.sum(np.abs(np.linalg.eigh(x + x.T)[1])), A),
    ("svd", lambda x: np.sum(np.linalg.svd(x, full_matrices=False)[1]), A),
    ("rfft", lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), V),
]


@pytest.mark.parametrize("name,f,x", CASES, ids=[c[0] for c in CASES])
def test_a_float32_gradient_is_float32_and_plain_autograds(name, f, x):
    x32 = x.astype(onp.float32)
    got, want = jit_ps(grad(f))(x32), grad(f)(x32)
    assert got.dtype == onp.float32, name
    assert_close(got, want, rtol=2e-4, check_dtype=False, path=name, inputs=(onp.dtype(onp.float32),))


def test_a_derivative_the_forward_pass_widened_is_plain_autograds():
    """multigammaln of float32 computes in float64 (autograd's composition subtracts
    np.arange(d) / 2.0), so its cotangent is float64 and so is the gradient, as plain's: only
    what the derivative code widens by itself is cast back (tracing.widest)."""
    f = lambda x: np.sum(special.multigammaln(np.exp(x) + 3.0, 2))  # noqa: E731
    x32 = V.astype(onp.float32)
    got, want = jit_ps(grad(f))(x32), grad(f)(x32)
    assert got.dtype == want.dtype == onp.float64
    assert_close(got, want, rtol=1e-12)


@pytest.mark.parametrize("name,f", [("where", lambda x: np.where(x > 0, x, 0.5 * x)),
                                    ("mean", lambda x: np.mean(x, axis=0)),
                                    ("cumsum", lambda x: np.cumsum(x, axis=-1))], ids=lambda c: c if isinstance(c, str) else "")
def test_the_users_float64_through_a_float32_step_stays_plain_autograds(name, f):
    """A float64 argument cast to float32 by the user, and a float64 weight on the float32
    result: the cotangents are float64 from the user's own code, and the gradient is plain
    autograd's to float64's precision (not cast back to float32 on the way)."""
    w = onp.linspace(0.5, 1.5, A.size).reshape(A.shape)
    s = lambda x: np.sum(w[: 1 if name == "mean" else None] * f(x.astype(onp.float32)))  # noqa: E731
    got, want = jit_ps(grad(s))(A), grad(s)(A)
    assert got.dtype == want.dtype == onp.float64
    assert_close(got, want, rtol=1e-12)


@pytest.mark.parametrize("name,f,x", CASES, ids=[c[0] for c in CASES])
def test_a_float64_gradient_is_plain_autograds(name, f, x):
    assert_close(jit_ps(grad(f))(x), grad(f)(x), path=name)


#: (name, function of x, x): autograd's JVPs that make default-dtype arrays
JVP_CASES = [
    ("where_jvp", lambda x: np.where(x > 0, x, 2 * x) * np.where(x > 0.5, 0.5, x), V),
    ("linspace_jvp", lambda x: np.linspace(x[0], x[1], 5), V),
    ("mean_jvp", lambda x: np.mean(x * x, axis=0), A),
]


@pytest.mark.parametrize("name,f,x", JVP_CASES, ids=[c[0] for c in JVP_CASES])
@pytest.mark.parametrize("dtype", [onp.float32, onp.float64], ids=lambda d: d.__name__)
def test_a_tangent_has_its_primals_dtype(name, f, x, dtype):
    x = x.astype(dtype)
    t = onp.ones_like(x)
    got, want = jit_ps(lambda x: make_jvp(f)(x)(t))(x), make_jvp(f)(x)(t)
    assert got[1].dtype == dtype, name
    assert_close(got, want, rtol=2e-4 if dtype == onp.float32 else None, check_dtype=dtype == onp.float64, path=name,
                 inputs=(onp.dtype(dtype),))


def _ops_of_type(text, hlo_type):
    """The instructions of optimised HLO `text` that compute a value of `hlo_type` (f64...)."""
    return [line.strip() for line in text.splitlines() if re.search(rf"= {hlo_type}\[", line)]


@pytest.mark.parametrize("workload", ["selu_grad", "mlp_step"])
def test_float32_selu_and_mlp_gradients_compile_without_float64(workload):
    w = workloads.BY_NAME[workload]
    for dtype, kept in ((onp.float32, "f32"), (onp.float64, F64_TEXT)):
        args = w.make_inputs(dtype, onp.random.default_rng(0))
        f = w.build_autograd()
        jf = jit_ps(f)
        text = jf.optimized_hlo(*args)
        assert _ops_of_type(text, kept), f"{workload}: no {kept} operation read from {text[:200]}"
        if dtype == onp.float32:
            assert not _ops_of_type(text, "f64"), f"{workload}: " + "\n".join(_ops_of_type(text, "f64")[:5])
        got, want = flatten(jf(*args))[0], flatten(f(*args))[0]
        for g, e in zip(got, want):
            assert g.dtype == dtype
        if NARROW and workload == "selu_grad":
            # SELU's derivative jumps at 0: where the chip's float32 product rounds a
            # pre-activation within its rounding of 0 to the other side, that row's gradient
            # takes the other branch (1012 of 1048576 weights did); all others agree
            for g, e in zip(got, want):
                scale = onp.max(onp.abs(e))
                off = ~onp.isclose(g, e, rtol=1e-4, atol=1e-4 * scale)
                assert off.mean() < 5e-3, f"{workload}: {off.sum()} of {off.size} differ"
            continue
        assert_close(got, want, rtol=1e-4 if dtype == onp.float32 else None, check_dtype=False, path=workload,
                     inputs=(onp.dtype(dtype),))
