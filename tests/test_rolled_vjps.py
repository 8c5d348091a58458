"""autograd's VJP of a loop made from its rolled forward pass (compositions/rolled_vjps.py):
the backward pass a scan's VJP, not a node per traced primitive call, in programs that are
compiled (not tiered); plain autograd's results, and its own derivative wherever the
replay's would differ."""
import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, value_and_grad
from autograd.extend import defvjp, primitive
from autograd.scipy.stats import norm

from autograd_xla import jit_ps, tree
from autograd_xla.compositions import rolled_vjps
from autograd_xla.control_flow.scans import scan_p

from helpers import assert_close
from test_rolling import interpret

RNG = onp.random.RandomState(3)
W = RNG.randn(4, 4) * 0.5
X0 = RNG.randn(4)


@pytest.fixture
def made(monkeypatch):
    """The forward passes whose VJP came from their rolled graph, as a list."""
    found = []
    original = rolled_vjps._rolled_forward

    def spy(*args):
        out = original(*args)
        found.append(out is not None)
        return out
    monkeypatch.setattr(rolled_vjps, "_rolled_forward", spy)
    return found


def euler(w, x):
    for _ in range(40):
        x = x + 0.1 * np.tanh(np.dot(w, x))
    return np.sum(x ** 2)


def test_the_backward_pass_is_on_the_lines_of_the_forward_operations_it_differentiates(made):
    graph = jit_ps(grad(euler), tiered=False).graph(W, X0)
    lines = {eqn.source.lineno for eqn in graph.eqns}
    lines |= {eqn.source.lineno for p in (e.args[0] for e in graph.eqns if e.prim is scan_p)
              for eqn in p.graphs[0].eqns}
    first = euler.__code__.co_firstlineno
    assert made == [True] and lines == {first + 2, first + 3}  # the step's line and the loss's


def euler_dict(params, x):
    for _ in range(40):
        x = x + 0.1 * np.tanh(np.dot(params["W"], x))  # read at every step: a node per step to autograd
    return np.sum(x ** 2)


def euler_read_once(params, x):
    w = params["W"]
    for _ in range(40):
        x = x + 0.1 * np.tanh(np.dot(w, x))
    return np.sum(x ** 2)


def same_bits(got, want):
    for a, b in zip(tree.flatten(got)[0], tree.flatten(want)[0]):
        onp.testing.assert_array_equal(a, b, strict=True)


@pytest.mark.parametrize("f, args", [(euler, (W, X0)), (euler_read_once, ({"W": W}, X0))])
def test_a_loop_s_vjp_from_its_rolled_forward_pass_gives_plain_autograd_s_bits(made, f, args):
    g = jit_ps(grad(f), tiered=False)
    graph = g.graph(*args)
    assert made == [True]
    assert sum(eqn.prim is scan_p for eqn in graph.eqns) == 2  # the forward loop and its VJP's
    same_bits(interpret(graph, args), grad(f)(*args))
    assert_close(g(*args), grad(f)(*args))
    assert len(graph.eqns) < 20


def test_a_tiered_trace_keeps_autograd_s_backward_pass(made):
    """A tiered trace also runs by numpy, with plain autograd's bits, which a scan's VJP does
    not always give: autograd sums the per-step gradients of `params["W"]` in the steps' order,
    a scan's VJP last step first. The compiled-only program rolls and agrees within tolerance."""
    args, want = ({"W": W}, X0), grad(euler_dict)({"W": W}, X0)
    tiered = jit_ps(grad(euler_dict), tiered=True)
    same_bits(interpret(tiered.graph(*args), args), want)
    assert made == []  # (not even tried)
    compiled = jit_ps(grad(euler_dict), tiered=False)
    assert_close(compiled(*args), want)
    assert made == [True]


def test_float32_keeps_autograd_s_backward_pass(made):
    args = (W.astype(onp.float32), X0.astype(onp.float32))
    g = jit_ps(grad(euler), tiered=False)
    got, want = g(*args), grad(euler)(*args)
    assert got.dtype == want.dtype == onp.float32
    assert_close(got, want)
    assert made == [False]


@primitive
def clipped_tanh(x):
    return onp.tanh(x)


defvjp(clipped_tanh, lambda ans, x: lambda g: g * 0.5)  # a user's own VJP, not tanh's derivative


def test_a_user_s_primitive_keeps_its_own_vjp(made):
    def f(w, x):
        for _ in range(40):
            x = x + 0.1 * clipped_tanh(np.dot(w, x))
        return np.sum(x ** 2)
    g = jit_ps(grad(f), tiered=False)
    assert_close(g(W, X0), grad(f)(W, X0))
    assert not any(made)


def test_a_composition_s_trace_rule_keeps_autograd_s_vjp(made):
    def f(w, x):
        for _ in range(40):
            x = x + 0.1 * np.tanh(np.dot(w, x)) + 0.01 * norm.logpdf(x, 0.5, 2.0)
        return np.sum(x ** 2)
    assert_close(jit_ps(grad(f), tiered=False)(W, X0), grad(f)(W, X0))
    assert not any(made)


def second_order(f):
    return grad(lambda w, x: np.sum(grad(f)(w, x) ** 2))


@pytest.mark.parametrize("derivative", [value_and_grad, second_order])
def test_other_operators_and_higher_orders_through_a_rolled_forward_pass(made, derivative):
    def f(w, x):
        for _ in range(30):
            x = x + 0.1 * np.sin(w * x)
        return np.sum(x ** 2)
    w = RNG.randn(4) * 0.5
    assert_close(jit_ps(derivative(f), tiered=False)(w, X0), derivative(f)(w, X0))
    assert True in made


def test_a_forward_value_kept_aside_is_still_computed(made):
    """The forward pass's equations stay in the trace: a value the function keeps from inside
    the differentiated one (through a closure) reads them."""
    def f(w, x):
        kept = []

        def loss(w):
            y = x
            for _ in range(40):
                y = y + 0.1 * np.tanh(np.dot(w, y))
                kept.append(y)
            return np.sum(y ** 2)
        g = grad(loss)(w)
        return g, getattr(kept[20], "_value", kept[20])
    got, want = jit_ps(f, tiered=False)(W, X0), f(W, X0)
    assert_close(got, want)
    assert made == [True]


def test_a_branch_on_a_traced_value_keeps_autograd_s_backward_pass(made):
    def f(w, x):
        for _ in range(40):
            x = x + 0.1 * np.tanh(np.dot(w, x))
        return np.sum(x ** 2) if np.sum(x) > 0 else np.sum(x ** 3)
    for x in (X0, -X0):
        assert_close(jit_ps(grad(f), tiered=False)(W, x), grad(f)(W, x))
    assert True not in made


def test_off_it_is_autograd_s_backward_pass_rolled_as_traced(monkeypatch, made):
    monkeypatch.setattr(rolled_vjps, "ENABLED", False)
    g = jit_ps(grad(euler), tiered=False)
    assert_close(g(W, X0), grad(euler)(W, X0))
    assert made == []


def test_loops_of_every_shape_make_their_vjp_from_the_rolled_forward_pass(made):
    """Loops like test_rolling.py's (each of its checks, nested loops included, runs them this
    way too), compiled only, take the rolled VJP."""
    xs = RNG.randn(40, 4)

    def constants(w, x, xs):  # a loop index baked in, a static slice per step
        for t in range(xs.shape[0]):
            x = x + 0.05 * np.sin(t * 0.1) * np.tanh(np.dot(w, x)) + 0.01 * xs[t]
        return np.sum(x ** 2)

    def carried(params, x):  # a tuple carried from step to step
        h, c = x, x * 0.5
        for _ in range(30):
            h, c = np.tanh(np.dot(params[0], h) + c), c * 0.9 + 0.1 * np.sin(h)
        return np.sum(h ** 2 + c)

    def hvp(x, v):
        return np.dot(grad(lambda y: euler(W, y))(x), v)
    for f, args in [(constants, (W, X0, xs)), (carried, ((W,), X0)), (hvp, (X0, xs[0]))]:
        made.clear()
        assert_close(jit_ps(grad(f), tiered=False)(*args), grad(f)(*args))
        assert True in made, f.__name__
