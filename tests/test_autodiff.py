"""autograd and jit_ps composed in every direction, to any order, agree with plain autograd;
derivatives of a jitted function run compiled, not as a silent Python fallback."""
import numpy as onp
import pytest

import autograd.numpy as np
from autograd import elementwise_grad, grad, hessian, jacobian, make_jvp, make_vjp, value_and_grad
from autograd.core import primitive_vjps
from autograd.tracer import box_types, getval
from autograd_xla import jit_ps
from autograd_xla.tracing import Tracer
from helpers import PLATFORM, assert_close

rs = onp.random.RandomState(1)


def loss(w, X, y):
    logits = X @ w
    return np.mean(np.logaddexp(0.0, -y * logits)) + 0.01 * np.sum(w ** 2)


X = rs.randn(30, 4)
y = onp.sign(rs.randn(30))
w = rs.randn(4)


def f_vec(x):
    return np.tanh(x) * np.sin(x[::-1]) + x ** 3


def test_jit_of_grad():
    assert_close(jit_ps(grad(loss))(w, X, y), grad(loss)(w, X, y))
    assert_close(jit_ps(value_and_grad(loss))(w, X, y), value_and_grad(loss)(w, X, y))


def test_grad_of_jit_runs_compiled():
    jl = jit_ps(loss)
    expected = grad(loss)(w, X, y)
    assert_close(grad(jl)(w, X, y), expected)
    (backward,) = jl._derivatives.values()
    assert backward.cache_info()["traces"] == 1
    assert_close(grad(jl)(w + 1, X, y), grad(loss)(w + 1, X, y))
    assert backward.cache_info()["traces"] == 1 and backward.cache_info()["hits"] == 1


def _kinds(jf):
    return {key[0] for key in jf._derivatives}


def test_a_scalars_gradient_comes_with_its_value_from_one_program():
    """grad(jit_ps(f)) and value_and_grad of a real scalar: its value and gradient from one
    compiled program (autodiff.jit_call_ahead: the "value_vjp" derivative at cotangent one),
    f's own program not run, nor compiled (untiered, a call on boxes lowers f alone: its
    first call took one compile more); jit_call's value and VJP ran the forward pass twice."""
    jl = jit_ps(loss, tiered=False)
    for k in range(3):
        assert_close(grad(jl)(w + k, X, y), grad(loss)(w + k, X, y), rtol=1e-12)
        assert_close(value_and_grad(jl)(w + k, X, y), value_and_grad(loss)(w + k, X, y), rtol=1e-12)
        assert_close(grad(jl, 1)(w + k, X, y), grad(loss, 1)(w + k, X, y), rtol=1e-12)
    assert _kinds(jl) == {"value_vjp"} and jl.stats.hits == 9  # (each call a hit: the derivative's program ran)
    assert jl.stats.compiles == 0
    assert_close(jl(w, X, y), loss(w, X, y), rtol=1e-12)  # (its own program, compiled at the call that needs it)
    assert jl.stats.compiles == 1
    for d in jl._derivatives.values():  # (of the first argument and of the second)
        assert d.stats.traces == 1 and d.stats.hits >= 2 and d.stats.plain_tier_calls == d.stats.fallbacks == 0


def test_a_kept_scalars_value_under_boxes_stays_a_device_array():
    """keep_on_device: value_and_grad(jit_ps(f)) gives the value as the function's calls do, a
    DeviceArray (jit_call's forward program; the gradient's program returns numpy arrays)."""
    from autograd_xla import DeviceArray
    jl = jit_ps(loss, keep_on_device=True)
    for k in range(2):
        value, g = value_and_grad(jl)(w + k, X, y)
        assert type(value) is DeviceArray and type(g) is onp.ndarray
        assert_close(onp.asarray(value), loss(w + k, X, y), rtol=1e-12)
        assert_close(g, grad(loss)(w + k, X, y), rtol=1e-12)


@pytest.mark.parametrize("use", ["scaled", "unused"])
def test_a_gradient_computed_ahead_and_left_unused_turns_it_off(use):
    """Where the gradient computed with the value is not the one asked for (a cotangent other
    than one, 3 * f) or not asked for (f's value not reaching the result), the answer is plain
    autograd's, and after autodiff.Reverse.MISSES such calls the signature's calls go as a
    vector function's do (jit_call's here: too little work to split)."""
    from autograd_xla import autodiff
    jl = jit_ps(loss, tiered=False)
    outer = {"scaled": lambda w, f: 3.0 * f(w, X, y) + np.sum(w),
             "unused": lambda w, f: (f(w, X, y), np.sum(w ** 3))[1]}[use]
    for k in range(autodiff.Reverse.MISSES + 2):
        assert_close(grad(outer)(w + k, jl), grad(outer)(w + k, loss), rtol=1e-12)
    (entry,) = jl._cache.values()
    (reverse,) = entry.reverse.values()
    assert reverse.misses == autodiff.Reverse.MISSES
    assert reverse.split is False and jl.stats.hits == 4  # (its little work: Split.WORK_PER_RESIDUAL)
    ran = {key[0] for key, d in jl._derivatives.items() if d.stats.traces}
    assert ran == ({"value_vjp", "vjp"} if use == "scaled" else {"value_vjp"})


def predict(W, X):
    return np.tanh(X @ W) * 2.0


W = rs.randn(4, 3)


def test_a_vector_functions_vjp_does_not_run_its_forward_pass_again():
    """grad of a loss computed outside a jitted function of an array's value (a model jitted,
    its loss not), jacobian, elementwise_grad and a VJP differentiated again: plain autograd's
    answers, from the value and VJP's graph cut where the cotangent enters
    (autodiff.jit_call_split: the forward half's program gives the value and what the
    backward half's reads), never the VJP that runs the forward pass again (jit_call's)."""
    X, W = rs.randn(300, 40), rs.randn(40, 30)  # (work enough to pay for passing the residuals: Split.WORK_PER_RESIDUAL)
    jp = jit_ps(predict, tiered=False)
    outside = lambda W, f: np.sum(f(W, X) ** 2) + np.sum(W ** 2)
    for k in range(3):
        assert_close(grad(outside)(W + k, jp), grad(outside)(W + k, predict), rtol=1e-12)
    corner = lambda W, f: f(W, X)[:2, 0]  # (each row of the jacobian a VJP call on the split's residuals)
    assert_close(jacobian(corner)(W, jp), jacobian(corner)(W, predict), rtol=1e-12)
    of_x = lambda X, f: np.sum(np.sin(f(W, X)))
    assert_close(grad(of_x)(X, jp), grad(of_x)(X, predict), rtol=1e-12)
    u = rs.randn(300, 30)
    twice = lambda v, f: np.sum(make_vjp(lambda W: f(W, X))(W)[0](v) ** 2)
    assert_close(grad(twice)(u, jp), grad(twice)(u, predict), rtol=1e-12)
    entry = jp._cache[next(iter(jp._cache))]
    splits = [r.split for e in jp._cache.values() for r in e.reverse.values()]
    if PLATFORM != "cpu":  # the residuals would go to the host and back: jit_call's VJP
        assert splits and not any(splits)
        return
    assert splits and all(splits) and not any(key[0] == "vjp" for key in jp._derivatives)
    reverse = entry.reverse[(0,)]
    assert reverse.split.forward.stats.traces == 1 and reverse.split.backward.stats.traces == 1
    assert jp.stats.hits == 6  # (each call a hit: the forward half's program ran, not its own)


def test_a_vjp_of_little_work_is_jit_calls():
    """Where the forward pass computes too little to pay for passing its residuals
    (Split.WORK_PER_RESIDUAL: a small layer), jit_call's VJP, which computes it again."""
    jp = jit_ps(predict, tiered=False)
    outside = lambda W, f: np.sum(f(W, X[:2]) ** 2)
    for k in range(2):
        assert_close(grad(outside)(W + k, jp), grad(outside)(W + k, predict), rtol=1e-12)
    assert all(r.split is False for e in jp._cache.values() for r in e.reverse.values())
    assert jp.stats.hits == 2 and any(key[0] == "vjp" for key in jp._derivatives)


def test_a_vjp_whose_trace_made_a_leaf_static_is_jit_calls():
    """A value and VJP traced with a leaf made static (an integer read as a number) holds at
    that value alone: not split, jit_call's VJP (which traces at each such value)."""
    def scaled(W, n):
        return np.tanh(W) * float(n)
    js = jit_ps(scaled, tiered=False)
    outside = lambda W, f, n: np.sum(f(W, n) ** 2)
    for n in (2, 3):
        assert_close(grad(outside)(W, js, n), grad(outside)(W, scaled, n), rtol=1e-12)
    assert all(r.split is False for e in js._cache.values() for r in e.reverse.values())


def test_backward_pass_does_not_run_python_primitives(monkeypatch):
    """Once compiled, grad(jit_ps(f)) calls no autograd VJP maker in Python but its one
    primitive's (its gradient computed with its value: jit_call_ahead)."""
    jl = jit_ps(loss)
    grad(jl)(w, X, y)
    calls = []
    for prim in list(primitive_vjps):
        maker = primitive_vjps[prim]
        monkeypatch.setitem(primitive_vjps, prim, (lambda m, p: lambda *a, **k: calls.append(p) or m(*a, **k))(maker, prim))
    grad(jl)(w * 2, X, y)
    names = {getattr(p, "__name__", "") for p in calls}
    assert names == {"jit_call_ahead"}, names


def test_forward_mode_of_jit():
    v = rs.randn(4)
    assert_close(make_jvp(jit_ps(loss))(w, X, y)(v), make_jvp(loss)(w, X, y)(v))
    x = rs.randn(5)
    t = rs.randn(5)
    assert_close(make_jvp(jit_ps(f_vec))(x)(t), make_jvp(f_vec)(x)(t))


def test_jacobian_and_hessian_of_jit():
    x = rs.randn(5)
    assert_close(jacobian(jit_ps(f_vec))(x), jacobian(f_vec)(x))
    assert_close(hessian(jit_ps(loss))(w, X, y), hessian(loss)(w, X, y))
    assert_close(elementwise_grad(jit_ps(f_vec))(x), elementwise_grad(f_vec)(x))


def test_jit_of_hessian_and_jacobian():
    x = rs.randn(5)
    assert_close(jit_ps(hessian(loss))(w, X, y), hessian(loss)(w, X, y))
    assert_close(jit_ps(jacobian(f_vec))(x), jacobian(f_vec)(x))


def test_higher_order_through_jit():
    f = lambda x: np.sum(np.sin(x) ** 3 * np.exp(-x))
    x = rs.randn(3)
    assert_close(grad(grad(jit_ps(lambda s: f(s * x))))(0.7), grad(grad(lambda s: f(s * x)))(0.7))
    third = grad(grad(grad(jit_ps(lambda s: np.sin(s) ** 3))))
    assert_close(third(0.3), grad(grad(grad(lambda s: np.sin(s) ** 3)))(0.3))
    assert_close(jit_ps(grad(grad(lambda s: f(s * x))))(0.7), grad(grad(lambda s: f(s * x)))(0.7))


def test_mixed_nesting():
    inner = jit_ps(lambda x: np.sum(np.tanh(x) ** 2))
    outer = jit_ps(grad(lambda x: inner(x * 2)))
    x = rs.randn(4)
    assert_close(outer(x), grad(lambda x: np.sum(np.tanh(x * 2) ** 2))(x))
    assert_close(grad(lambda x: jit_ps(grad(inner))(x) @ x)(x),
                 grad(lambda x: grad(lambda z: np.sum(np.tanh(z) ** 2))(x) @ x)(x))


def test_make_vjp_of_jit_with_tuple_output():
    from autograd.builtins import tuple as atuple

    def f(x):  # autograd differentiates tuple outputs built with autograd.builtins.tuple
        return atuple((np.sin(x), np.sum(x ** 2)))
    x = rs.randn(3)
    vjp_j, ans_j = make_vjp(jit_ps(f))(x)
    vjp_p, ans_p = make_vjp(f)(x)
    assert_close(ans_j, ans_p)
    g = (rs.randn(3), 0.5)
    assert_close(vjp_j(g), vjp_p(g))


def test_grad_with_respect_to_several_arguments():
    both = lambda w, X: grad(lambda pair: loss(pair[0], pair[1], y))((w, X))
    assert_close(jit_ps(both)(w, X), both(w, X))
    assert_close(grad(lambda pair: jit_ps(loss)(pair[0], pair[1], y))((w, X)), both(w, X))


@pytest.mark.parametrize("dtype", [onp.float32, onp.float64])
def test_gradient_dtypes_match_autograd(dtype):
    x = rs.randn(4).astype(dtype)
    f = lambda x: np.sum(np.tanh(x) * 2.0)
    assert jit_ps(grad(f))(x).dtype == grad(f)(x).dtype
    assert grad(jit_ps(f))(x).dtype == grad(f)(x).dtype


def test_grad_of_python_scalar_argument():
    f = lambda s, x: np.sum(np.sin(s * x))
    x = rs.randn(3)
    assert_close(grad(jit_ps(f))(0.3, x), grad(f)(0.3, x))
    assert_close(jit_ps(grad(f))(0.3, x), grad(f)(0.3, x))


def test_container_outputs_are_differentiable_both_ways():
    step = jit_ps(lambda c, x: (np.tanh(c + x), c))
    x = rs.randn(4)
    assert_close(grad(lambda x: np.sum(step(x, x)[0]))(x), grad(lambda x: np.sum(np.tanh(2 * x)))(x))
    d = jit_ps(lambda x: {"a": np.sin(x), "b": [x * 2, x ** 2]})
    assert_close(grad(lambda x: np.sum(d(x)["b"][1]) + np.sum(d(x)["a"]))(x), 2 * x + onp.cos(x))
    t = rs.randn(4)
    assert_close(make_jvp(lambda x: d(x)["b"][1])(x)(t)[1], 2 * x * t)
    assert_close(make_jvp(lambda x: step(x, x)[1])(x)(t)[1], t)


def _arrays_held(graph):
    """The numpy arrays a graph's equations hold as constants."""
    found = []

    def visit(x):
        if isinstance(x, onp.ndarray):
            found.append(x)
        elif isinstance(x, (tuple, list)):
            for item in x:
                visit(item)
        elif isinstance(x, dict):
            for item in x.values():
                visit(item)
    for eqn in graph.eqns:
        visit((eqn.args, eqn.kwargs))
    return found


@pytest.mark.parametrize("f", [lambda x: np.sum(np.tanh(x)), lambda x: np.mean(np.sin(x) * x),
                               lambda x: np.sum(np.sum(np.exp(x), axis=0) ** 2), lambda x: np.max(x * x)])
def test_a_reduction_gradient_spreads_its_cotangent_without_an_array_of_zeros(f):
    x = rs.randn(40, 30)
    jf = jit_ps(grad(f), fallback="error")
    assert all(a.size < x.size for a in _arrays_held(jf.graph(x)))
    assert_close(jf(x), grad(f)(x))


@pytest.mark.parametrize("container", [tuple, list])
def test_gradients_of_container_elements_are_not_added_into_zeros(container):
    def f(p):
        u, v = p
        return np.sum(u + v) + np.sum(np.sin(u)) + np.sum(u * v)  # u + v: one cotangent for both
    p = container([rs.randn(5), rs.randn(5)])
    jf = jit_ps(grad(f), fallback="error")
    graph = jf.graph(p)
    zeros = {v for eqn in graph.eqns if eqn.prim is onp.full for v in eqn.outvars}
    assert not any(set(eqn.invars()) & zeros for eqn in graph.eqns if eqn.prim is onp.add)
    assert_close(jf(p), grad(f)(p))


@pytest.mark.parametrize("nesting", ["grad", "jvp"])
def test_a_derivative_starts_from_the_leaves_its_function_found_static(nesting):
    """A derivative of a jitted function (grad(jit_ps(f)), forward mode) takes as static from
    its first trace the leaves f's traces needed the values of (`n`, a slice bound), instead
    of finding them by tracing again: its trace runs f's Python once."""
    runs = []

    def f(x, n):
        if type(x) in box_types and type(getval(x)) is Tracer:  # the derivative's trace
            runs.append(n)
        return np.sum(np.tanh(x)[:n] ** 2)
    jf = jit_ps(f, tiered=False)
    x = rs.randn(5)
    assert_close(jf(x, 3), f(x, 3))
    if nesting == "grad":
        assert_close(grad(jf)(x, 3), grad(f)(x, 3))
    else:
        assert_close(make_jvp(jf)(x, 3)(onp.ones(5))[1], make_jvp(f)(x, 3)(onp.ones(5))[1])
    assert runs == [3]
