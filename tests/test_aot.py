"""Ahead of time (aot.py): `jf.lower(...)` -> Lowered, `.compile()` -> Compiled, whose call
runs that executable as the jitted function would; `eval_shape` (trace only); and
`donate_argnums` (input-output aliasing, which the CPU client supports)."""
import types

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad, value_and_grad
from autograd_xla import ArgumentError, ConcretizationError, DeviceArray, backend, eval_shape, fori_loop, jit_ps
from autograd_xla.aot import Compiled, Lowered
from autograd_xla.core import Aval
from helpers import PLATFORM, assert_close

rs = onp.random.RandomState(0)


def mlp(params, x):
    for W, b in params:
        x = np.tanh(x @ W + b)
    return x


def mlp_loss(params, x, y):
    return np.mean((mlp(params, x) - y) ** 2)


PARAMS = [(rs.randn(4, 8), rs.randn(8)), (rs.randn(8, 2), rs.randn(2))]
X, Y = rs.randn(5, 4), rs.randn(5, 2)


def shapes_of(tree):
    """np.shape / dtype of every leaf of a result, in its structure."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(shapes_of(t) for t in tree)
    if isinstance(tree, dict):
        return {k: shapes_of(v) for k, v in tree.items()}
    return Aval(onp.shape(tree), onp.asarray(tree).dtype)


# ----- lower / compile ------------------------------------------------------------------------
def test_lower_is_traced_and_lowered_not_compiled():
    jf = jit_ps(grad(mlp_loss))
    lowered = jf.lower(PARAMS, X, Y)
    assert isinstance(lowered, Lowered)
    text = lowered.as_text()
    assert text.startswith("module @grad_of_mlp_loss_wrt_argnum_0") and "stablehlo.tanh" in text
    assert lowered.as_text() == jf.stablehlo(PARAMS, X, Y)
    assert lowered.graph is jf.graph(PARAMS, X, Y)
    assert lowered.graph.arg_names[0] == "params[0][0]"
    assert jf.cache_info()["compiles"] == 0 and jf.cache_info()["traces"] == 1


def test_compiled_runs_that_executable_like_the_jitted_function():
    jf = jit_ps(grad(mlp_loss))
    compiled = jf.lower(PARAMS, X, Y).compile()
    assert isinstance(compiled, Compiled) and jf.cache_info()["compiles"] == 1
    got = compiled(PARAMS, X, Y)
    assert_close(got, grad(mlp_loss)(PARAMS, X, Y))  # a list of tuples, as autograd returns it
    assert_close(got, jf(PARAMS, X, Y))
    other = [(W + 1, b) for W, b in PARAMS]  # other values of the same signature
    assert_close(compiled(other, X, Y), grad(mlp_loss)(other, X, Y))
    assert jf.cache_info()["traces"] == 1 and jf.cache_info()["compiles"] == 1


def test_compiled_keyword_static_and_scalar_results():
    def f(x, scale, axis=0, mode="sum"):
        out = np.sum(x, axis=axis) if mode == "sum" else np.max(x, axis=axis)
        return out * scale, np.sum(x)

    jf = jit_ps(f, static_argnames="mode")
    x = rs.randn(3, 4)
    compiled = jf.lower(x, 2.0, axis=1, mode="max").compile()
    got, expected = compiled(x, 2.0, axis=1, mode="max"), f(x, 2.0, axis=1, mode="max")
    assert_close(got, expected)
    assert type(got) is tuple and type(got[1]) is onp.float64  # 0-d results are numpy scalars, as jf gives them
    with pytest.raises(ArgumentError, match=r"differs? in the value of static argument 'mode'"):
        compiled(x, 2.0, axis=1, mode="sum")


def test_compiled_refuses_another_signature():
    jf = jit_ps(mlp_loss)
    compiled = jf.lower(PARAMS, X, Y).compile()
    with pytest.raises(ArgumentError) as info:
        compiled(PARAMS, X[:3], Y[:3])
    assert str(info.value) == ("<jit_ps mlp_loss> was compiled ahead of time for other arguments: these differ in the "
                               "shape of argument x (float64[5, 4] -> float64[3, 4]). Call the jitted function, or "
                               "lower these anew.")
    with pytest.raises(TypeError, match="concrete arguments"):
        grad(lambda p: compiled(p, X, Y))(PARAMS)


def test_compiled_text_and_analyses():
    jf = jit_ps(lambda a, b: np.tanh(a @ b) + 1.0)
    a, b = rs.randn(16, 32), rs.randn(32, 8)
    compiled = jf.lower(a, b).compile()
    text = compiled.as_text()
    assert text.startswith("HloModule ") and "fusion" in text
    assert text == jf.optimized_hlo(a, b)
    cost = compiled.cost_analysis()
    assert cost == jf.cost_analysis(a, b) and cost["flops"] >= 2 * 16 * 32 * 8
    memory = compiled.memory_analysis()
    assert memory["output_size_in_bytes"] == 16 * 8 * 8
    assert memory["argument_size_in_bytes"] == a.nbytes + b.nbytes and memory["alias_size_in_bytes"] == 0
    assert jf.cache_info()["compiles"] == 1  # the shortcuts reuse the executable


def test_memory_analysis_unavailable_is_not_implemented():
    class NoStats:
        def get_compiled_memory_stats(self):
            raise AttributeError("get_compiled_memory_stats")

    fake = types.SimpleNamespace(exe=NoStats(), backend=types.SimpleNamespace(platform="tpu"))
    with pytest.raises(NotImplementedError, match="the tpu client reports no memory statistics"):
        backend.Executable.memory_analysis(fake)


def test_compiled_replays_random_draws_like_the_jitted_function():
    def noisy(x):
        return x + np.random.randn(3)

    jf = jit_ps(noisy)
    x = rs.randn(3)
    compiled = jf.lower(x).compile()
    onp.random.seed(1)
    expected = noisy(x)
    onp.random.seed(1)
    assert_close(compiled(x), expected)
    onp.random.seed(1)
    assert_close(jf(x), expected)


def test_compiled_keeps_results_on_device_when_asked():
    jf = jit_ps(lambda x: np.sin(x), keep_on_device=True)
    x = rs.randn(4)
    out = jf.lower(x).compile()(x)
    assert type(out) is DeviceArray
    assert_close(onp.asarray(out), onp.sin(x))


# ----- eval_shape -----------------------------------------------------------------------------
@pytest.fixture
def no_compiling(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("eval_shape compiled")
    monkeypatch.setattr(backend.Backend, "compile", refuse)


def test_eval_shape_agrees_with_the_result(no_compiling):
    def f(params, x):
        h = mlp(params, x)
        return {"out": h, "norm": np.sum(h ** 2), "first": [h[0], x.astype(np.float32)]}

    got = eval_shape(f, PARAMS, X)
    assert got == shapes_of(f(PARAMS, X))
    assert got["out"] == Aval((5, 2), onp.float64) and got["norm"].shape == ()
    assert repr(got["first"][1]) == "f32[5,4]" and not got["first"][1].weak_type


def test_eval_shape_under_grad(no_compiling):
    got = eval_shape(grad(mlp_loss), PARAMS, X, Y)
    assert got == shapes_of(grad(mlp_loss)(PARAMS, X, Y))
    assert type(got) is list and type(got[0]) is tuple
    assert eval_shape(value_and_grad(mlp_loss), PARAMS, X, Y) == shapes_of(value_and_grad(mlp_loss)(PARAMS, X, Y))


def test_eval_shape_of_a_jitted_function_keeps_its_trace():
    jf = jit_ps(grad(mlp_loss))
    assert eval_shape(jf, PARAMS, X, Y) == shapes_of(grad(mlp_loss)(PARAMS, X, Y))
    assert jf.cache_info()["compiles"] == 0 and jf.cache_info()["traces"] == 1
    jf(PARAMS, X, Y)
    assert jf.cache_info()["traces"] == 1


def test_eval_shape_values_made_static_and_x64_off(no_compiling):
    def take(x, n):
        return np.stack([x[i] for i in range(n)]), 2.0 * n  # n decides a shape: traced with its value

    assert eval_shape(take, X, 3) == shapes_of(take(X, 3))
    narrow = jit_ps(lambda x: (x * 2, np.sum(x).astype(np.int64)), x64=False)
    assert eval_shape(narrow, X) == (Aval((5, 4), onp.float32), Aval((), onp.int32))


def test_eval_shape_raises_what_cannot_be_traced():
    def branchy(x):  # decided from the arguments given, as a call would (tracing.speculated_bool)
        return np.sum(x) if np.sum(x) > 0 else -np.sum(x)

    def loopy(x):  # a branch on a loop's carry cannot be
        return fori_loop(0, 2, lambda i, c: c * 2.0 if np.sum(c) > 0 else c, x)
    assert eval_shape(grad(branchy), X) == Aval(X.shape, X.dtype)
    with pytest.raises(ConcretizationError):
        eval_shape(loopy, X)


# ----- donate_argnums -------------------------------------------------------------------------
def step(p, g):
    return p - 0.1 * g


def aligned(n, value):
    """A 64-byte aligned array, of the kind the CPU path reads in place (backend.IN_PLACE_MIN_BYTES)."""
    buf = onp.empty(n * 8 + 64, onp.uint8)
    out = buf[(-buf.ctypes.data) % 64:][:n * 8].view(onp.float64)
    out[:] = value
    return out


def test_donation_is_input_output_aliasing():
    n = 1 << 14
    p, g = aligned(n, 1.0), aligned(n, 2.0)
    plain, donating = jit_ps(step), jit_ps(step, donate_argnums=0)
    text = donating.stablehlo(p, g)
    assert "%arg0: tensor<16384xf64> {jax.buffer_donor = true}, %arg1: tensor<16384xf64>)" in text
    assert "buffer_donor" not in plain.stablehlo(p, g)
    assert donating.lower(p, g).compile().memory_analysis()["alias_size_in_bytes"] == 8 * n
    assert plain.lower(p, g).compile().memory_analysis()["alias_size_in_bytes"] == 0


def test_donated_numpy_arguments_are_never_changed():
    for n in (4, 1 << 14):  # packed with others / read in place
        p, g = aligned(n, 1.0), aligned(n, 2.0)
        jf = jit_ps(step, donate_argnums=(0, 1))
        for _ in range(3):
            out = jf(p, g)
            assert_close(out, step(p, g))
            assert onp.all(p == 1.0) and onp.all(g == 2.0)
        out[:] = 7.0  # the result is the caller's own
        assert onp.all(p == 1.0)
        assert_close(jf(p, g), step(p, g))


def test_donated_device_array_is_consumed():
    n = 1 << 12
    g = onp.full(n, 2.0)
    jf = jit_ps(step, donate_argnums=0, keep_on_device=True)
    p0 = jf(onp.ones(n), g)
    p1 = jf(p0, g)
    assert_close(onp.asarray(p1), onp.full(n, 0.6))
    # (jaxlib's own message: XLA:TPU's reads "DeviceArray has been deleted.")
    with pytest.raises(RuntimeError, match="deleted or donated" if PLATFORM == "cpu" else "has been deleted"):
        onp.asarray(p0)
    kept = jit_ps(step, keep_on_device=True)
    q0 = kept(onp.ones(n), g)
    kept(q0, g)
    assert_close(onp.asarray(q0), onp.full(n, 0.8))  # without donation the input stays


def test_differentiated_calls_do_not_consume_donated_arguments():
    n = 1 << 12
    g = onp.full(n, 2.0)
    jf = jit_ps(step, donate_argnums=0, keep_on_device=True)
    p = jf(onp.ones(n), g)
    expected = grad(lambda q: np.sum(step(q, g) ** 2))(onp.full(n, 0.8))
    assert_close(grad(lambda q: np.sum(jf(q, g) ** 2))(p), expected)
    assert_close(onp.asarray(p), onp.full(n, 0.8))  # still there for the backward pass, and after


def test_signatures_with_guards_do_not_donate():
    def window(x, i):
        return x[i:i + 3] * 2.0  # a traced slice start: the program guards its bounds

    jf = jit_ps(window, donate_argnums=0, keep_on_device=True)
    x = jit_ps(lambda a: a + 0.0, keep_on_device=True)(onp.arange(10.0))
    assert "buffer_donor" not in jf.stablehlo(x, 2)
    assert_close(onp.asarray(jf(x, 2)), onp.arange(2.0, 5.0) * 2)
    with pytest.warns(UserWarning, match="reaches outside its array"):
        out = jf(x, 8)  # the guard fails: plain autograd reruns the call on x, which must still be there
    assert_close(onp.asarray(out), onp.arange(8.0, 10.0) * 2)
    assert_close(onp.asarray(x), onp.arange(10.0))


@pytest.mark.parametrize("bad", [2, -1, "a", True, 1.5, (0, 7)])
def test_donate_argnums_are_validated(bad):
    with pytest.raises(ArgumentError, match="donate_argnums must hold non-negative ints below 2"):
        jit_ps(step, donate_argnums=bad)


def test_donate_argnums_static_overlap_and_varargs():
    with pytest.raises(ArgumentError, match="both static and donated"):
        jit_ps(step, static_argnums=0, donate_argnums=0)
    jf = jit_ps(lambda *xs: xs[0] * 2, donate_argnums=3)  # *args: any index; beyond the call's, nothing donated
    assert_close(jf(onp.ones(3)), onp.full(3, 2.0))
    with pytest.raises(ArgumentError, match="non-negative"):
        jit_ps(lambda *xs: xs[0], donate_argnums=-1)
