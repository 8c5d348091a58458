"""The numpy tier (numpy_tier.py): a tiered signature's calls while it is held or compiling run
its trace by numpy, and give plain autograd's results bit for bit; a call its guards refuse
runs as plain autograd, as does what does not qualify (random draws, sub-graphs) or differs
at its first call."""
import operator

import numpy as onp
import numpy.random as npr
import pytest

import autograd.numpy as np
from autograd import grad, jacobian, make_jvp, make_vjp, value_and_grad
from autograd.extend import VSpace, defvjp, primitive
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.numpy.numpy_vspaces import ArrayVSpace
from autograd.scipy.stats import norm
from autograd_xla import cond, fori_loop, jit_ps, numpy_tier, tiering
from autograd_xla.control_flow.scans import scan_p
from helpers import assert_close

compile_thread = tiering.compile_thread
rs = npr.RandomState(0)


@pytest.fixture(autouse=True)
def held(monkeypatch):
    """Traced at a signature's second call, then held: no program pays back (tiering's second stage)."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 0.0 if call is not None else float("inf"))
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e6)
    for name in ("_costs", "_savings"):  # nothing learned from earlier tests' programs
        monkeypatch.setattr(tiering, name, tiering.collections.OrderedDict())
    monkeypatch.setattr(tiering, "_sized", [0, 0.0])
    monkeypatch.setattr(numpy_tier, "CHECKED_CALLS", 1)  # (test_each_of_the_first_checked_calls_may_keep_...)
    assert compile_thread.wait(60)
    yield
    assert compile_thread.wait(60)


def mlp_loss(params, x, y):
    for W, b in params:
        x = np.tanh(np.dot(x, W) + b)
    return np.mean((x - y) ** 2)


def mlp_sum(params, x, y):
    for W, b in params:
        x = np.tanh(np.dot(x, W) + b)
    return np.sum((x - y) ** 2)


def picked(x, idx):
    return np.sum(x[idx] ** 2) + np.sum(x[1:3] * 2.0)  # getitem's VJP: np.add.at, which the tier runs on a copy


def scaled(x, scale, power=2):
    return np.sum(np.sin(x) * scale ** power)


def log_survival(x, mu):
    return -np.sum(norm.logsf(x, mu, 2.0))  # a composition (compositions/stats.py): scipy.special.log_ndtr


def head(x, n):
    return np.sum(x[:int(n)] ** 3)  # n made static by the trace


PARAMS = [(rs.randn(3, 5), rs.randn(5)), (rs.randn(5, 2), rs.randn(2))]
X, Y = rs.randn(4, 3), rs.randn(4, 2)
PARAMS32 = [(W.astype(onp.float32), b.astype(onp.float32)) for W, b in PARAMS]
V = rs.randn(6)
CASES = {
    "a list of pairs' gradient": (grad(mlp_loss), lambda k: ((PARAMS, X + k, Y), {})),
    "value and gradient": (value_and_grad(mlp_loss), lambda k: ((PARAMS, X * k, Y), {})),
    "indexing's gradient": (grad(picked), lambda k: ((V + k, onp.array([0, 2, 2, 5])), {})),
    "keywords, Python floats": (grad(scaled), lambda k: ((V, 1.5 + k), {"power": 3})),
    "float32": (grad(mlp_sum), lambda k: ((PARAMS32, (X + k).astype(onp.float32), Y.astype(onp.float32)), {})),
    "a composition": (grad(log_survival, 1), lambda k: ((V, 0.5 + k), {})),
    "a value the trace made static": (grad(head), lambda k: ((V + k, onp.array(4)), {})),
}


@pytest.mark.parametrize("name", CASES)
def test_held_calls_run_the_trace_by_numpy_with_plain_autograd_s_bits(name):
    g, args = CASES[name]
    jf = jit_ps(g, tiered=True)
    for k in range(6):
        a, kw = args(k)
        got = jf(*a, **kw)
        assert numpy_tier.same(got, g(*a, **kw)), k
    info = jf.cache_info()
    assert (info["traces"], info["compiles"], info["plain_tier_calls"]) == (1, 0, 6)
    assert info["numpy_tier_calls"] == 4  # (call 1 untraced; call 2 traced and checked against plain autograd)
    held, = jf._untraced._untraced.values()
    assert held.by_numpy[1] == 4 and 0 < held.by_numpy[0] < held.spent  # (what tiering.OVERHEAD_BOUND weighs)


def contraction(arrays):
    return np.sum(np.tensordot(arrays[0], arrays[1], axes=([0, 1], [1, 0])) ** 2)


def test_a_held_function_differentiated_from_outside_runs_its_value_and_vjp_by_numpy():
    """grad(jit_ps(f)) of a signature held with a trace (quimb's value_and_grad(jit_ps(fn))):
    its calls under autograd's boxes run f's value and VJP, traced as one graph, by numpy in
    autograd's two halves (one forward pass), never numpy's functions on boxes (numpy's
    tensordot's Python parts on boxes took quimb's MPS energy 3x plain autograd's time)."""
    arrays = [rs.randn(3, 4), rs.randn(4, 3)]
    jf = jit_ps(contraction, tiered=True)
    for _ in range(3):
        assert numpy_tier.same(jf(arrays), contraction(arrays))
    assert jf.stats.numpy_tier_calls == 1
    for k in range(4):
        moved = [a + k for a in arrays]
        assert numpy_tier.same(value_and_grad(jf)(moved), value_and_grad(contraction)(moved)), k
    assert (jf.stats.numpy_tier_calls, jf.stats.traces) == (4, 1)  # (the first checked against plain autograd)
    assert numpy_tier.same(jf(arrays), contraction(arrays)) and jf.stats.numpy_tier_calls == 5


def test_a_held_function_compiled_since_stays_held_under_boxes_until_its_vjp_is_compiled(monkeypatch):
    """grad(jit_ps(f)) once f's held signature is compiled: its calls under boxes stay held
    (value and VJP by numpy) until f's VJP is compiled too, which is asked for then, whatever
    the VJP's own plain budget: for a scalar's gradient, its value and VJP's program
    (autodiff.jit_call_ahead). Never f's compiled program beside its VJP's plain tier, which
    runs f's Python again at each call: pymanopt's Gaussian mixture's gradients took 1.5x plain
    autograd's time that way, and a loop of 1,500 of them never compiled the VJP."""
    arrays = [rs.randn(3, 4), rs.randn(4, 3)]
    jf = jit_ps(contraction, tiered=True)
    g, want = value_and_grad(jf), value_and_grad(contraction)
    for k in range(3):  # untraced; traced and checked against plain autograd; held
        moved = [a + k for a in arrays]
        assert numpy_tier.same(g(moved), want(moved)), k
    assert jf.stats.compiles == 0 and jf.stats.numpy_tier_calls == 1
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e-9)  # its next decision compiles it
    for k in range(3, 30):
        moved = [a + k for a in arrays]
        (value, (d0, d1)), (value_want, (w0, w1)) = g(moved), want(moved)
        assert_close(value, value_want, rtol=1e-12)
        assert_close(d0, w0, rtol=1e-12)
        assert_close(d1, w1, rtol=1e-12)
        assert compile_thread.wait(60)
    assert {key[0] for key in jf._derivatives} == {"value_vjp"}
    (vjp,) = jf._derivatives.values()
    assert jf.stats.compiles == 1 and vjp.stats.compiles == 1 and vjp.stats.hits > 0
    assert vjp.stats.plain_tier_calls == 0  # (f's compiled program never ran beside it)

def unwrapped(x, w):
    """A 0-d numpy result handed back as a Python float (as quimb's contractions do), a box
    or a traced value as it is."""
    r = np.sum(np.tanh(x * w) ** 2)
    return float(r) if isinstance(r, (onp.generic, onp.ndarray)) else r


@pytest.mark.parametrize("argnum", [0, 1])
def test_grad_of_a_held_function_by_numpy_gives_plain_autograd_s_values_types_and_bits(argnum):
    """Called only under boxes (quimb's value_and_grad(jit_ps(fn))): its value is the box's,
    a numpy float64 (its calls by numpy alone would give a numpy float64 where plain autograd
    gives a Python float: they would keep to plain autograd)."""
    x, w = rs.randn(5), rs.randn(5)
    jf = jit_ps(unwrapped, tiered=True)
    for k in range(6):
        got, want = value_and_grad(jf, argnum)(x + k, w * k), value_and_grad(unwrapped, argnum)(x + k, w * k)
        assert numpy_tier.same(got, want) and type(got[0]) is onp.float64, k
    assert jf.stats.numpy_tier_calls == 4  # (call 1 untraced; call 2 traced, checked against plain autograd)
    # at another cotangent (autograd's make_vjp) by numpy too; one of another dtype through a VJP of its own
    for g in (2.5, onp.float32(0.5)):
        vjp, ans = make_vjp(jf, argnum)(x, w)
        plain_vjp, plain_ans = make_vjp(unwrapped, argnum)(x, w)
        assert numpy_tier.same(ans, plain_ans)
        assert_close(vjp(g), plain_vjp(g), rtol=1e-15)
    # derivatives of derivatives and forward mode: the jitted VJP and JVP functions
    assert_close(grad(lambda x: np.sum(grad(jf)(x, w) ** 2))(x), grad(lambda x: np.sum(grad(unwrapped)(x, w) ** 2))(x),
                 rtol=1e-12)
    assert_close(make_jvp(jf, argnum)(x, w)(onp.ones(5))[1], make_jvp(unwrapped, argnum)(x, w)(onp.ones(5))[1],
                 rtol=1e-12)


def test_a_held_function_s_jacobian_runs_one_forward_pass_by_numpy_for_all_its_rows():
    """autograd's jacobian: one forward pass, its VJP at each row's cotangent."""
    f = lambda x: np.tanh(np.outer(x, x[::-1]) @ x)
    jf = jit_ps(f, tiered=True)
    x = rs.randn(4)
    for k in range(4):
        assert numpy_tier.same(jacobian(jf)(x + k), jacobian(f)(x + k)), k
    assert jf.stats.numpy_tier_calls == 2


def test_grad_of_a_held_function_whose_numpy_run_differs_keeps_plain_autograd(monkeypatch):
    x, w = rs.randn(5), rs.randn(5)
    jf = jit_ps(unwrapped, tiered=True)
    assert numpy_tier.same(value_and_grad(jf)(x, w), value_and_grad(unwrapped)(x, w))  # (untraced)
    same = numpy_tier.same
    monkeypatch.setattr(numpy_tier, "same", lambda a, b: False)  # the check of the value and VJP's run finds a difference
    by_numpy = jf.stats.numpy_tier_calls
    for k in range(3):
        assert same(value_and_grad(jf)(x + k, w), value_and_grad(unwrapped)(x + k, w)), k
    assert jf.stats.numpy_tier_calls == by_numpy


def test_calls_while_compiling_in_the_background_run_the_trace_by_numpy(monkeypatch):
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e-12)  # every program pays back: compiled in the background
    g = grad(mlp_loss)
    jf = jit_ps(g, tiered=True)
    with compile_thread.paused():
        for k in range(5):
            assert numpy_tier.same(jf(PARAMS, X + k, Y), g(PARAMS, X + k, Y))
        assert (jf.stats.compiles, jf.stats.numpy_tier_calls) == (0, 3)
    assert compile_thread.wait(60)
    assert_close(jf(PARAMS, X, Y), g(PARAMS, X, Y), rtol=1e-12)
    assert jf.stats.compiles == 1 and jf.stats.numpy_tier_calls == 3


def test_a_signature_traced_early_runs_its_trace_by_numpy_until_its_plain_budget_then_compiles(monkeypatch):
    """The first stage's trace (tiering.trace_budget) comes before the plain budget: the
    signature is held, whatever worth_compiling would say, until its plain budget is spent;
    then the kept trace is judged and compiled, not traced again."""
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 1e9 if call is not None else float("inf"))
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e-12)  # every program pays back once judged
    monkeypatch.setattr(tiering, "TRACE_IN_CALLS", 0.0)
    monkeypatch.setattr(tiering, "TRACE_FLOOR_SECONDS", 0.0)
    monkeypatch.setattr(tiering, "_traced", [0, 0.0])  # traced at the second call
    g = grad(mlp_loss)
    jf = jit_ps(g, tiered=True)
    for k in range(6):
        assert numpy_tier.same(jf(PARAMS, X + k, Y), g(PARAMS, X + k, Y)), k
    assert (jf.stats.traces, jf.stats.compiles, jf.stats.numpy_tier_calls) == (1, 0, 4)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 0.0)  # spent: the kept trace compiles
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0)  # (asked at each call, not halfway to 1e9)
    for k in range(100):  # until its held calls have cost HOLD_GROWTH times their cost at the trace
        assert_close(jf(PARAMS, X + k, Y), g(PARAMS, X + k, Y), rtol=1e-12)  # (compiled in the call where no core is free)
        if jf.stats.compiles or not compile_thread.idle() or jf.stats.plain_tier_calls < 7 + k:
            break
    assert compile_thread.wait(60)
    plain_calls = jf.stats.plain_tier_calls
    assert_close(jf(PARAMS, X, Y), g(PARAMS, X, Y), rtol=1e-12)
    assert (jf.stats.traces, jf.stats.plain_tier_calls) == (1, plain_calls)  # compiled (or found compiled) from the trace


def test_the_trace_budget_learns_what_this_process_s_traces_cost_besides_their_calls(monkeypatch):
    monkeypatch.setattr(tiering, "_traced", [0, 0.0])
    monkeypatch.setattr(tiering, "TRACE_FLOOR_SECONDS", 0.01)
    assert tiering.trace_budget(1e-3) == pytest.approx(tiering.TRACE_FACTOR * (0.01 + 1e-3 * tiering.TRACE_IN_CALLS))
    tiering.note_trace(0.05, 1e-3)  # a trace of 50 plain calls' time
    besides = 0.05 - tiering.TRACE_IN_CALLS * 1e-3
    assert tiering.trace_budget(2e-3) == pytest.approx(
        tiering.TRACE_FACTOR * ((0.01 + besides) / 2 + 2e-3 * tiering.TRACE_IN_CALLS))


def test_powers_of_values_autograd_does_not_box_are_numpy_s_operator():
    """Plainly, `s ** 3` of a numpy scalar is numpy's scalar math and `a ** 0.5` of an array
    its sqrt, where np.power's loop (which autograd's boxed ** calls) differs in the last bit
    for some values (the fuzzer's `x0 ** 3`, np.float64(0.7366...): 1 ulp); the gradient's
    boxed ** stays np.power."""
    def f(s, a):
        return s ** 3, a ** 0.5, a ** s

    g = grad(lambda s, a: np.sum(f(s, a)[1] * f(s, a)[0] + f(s, a)[2]), argnum=1)
    jf, jg = jit_ps(f, tiered=True), jit_ps(g, tiered=True)
    for v in onp.linspace(0.5, 1.5, 200):
        s, a = onp.float64(v), onp.abs(V) * v
        assert numpy_tier.same(jf(s, a), f(s, a)) and numpy_tier.same(jg(s, a), g(s, a)), v
    assert jf.stats.numpy_tier_calls == jg.stats.numpy_tier_calls == 198


def rnn(params, xs):
    """A legacy Python loop (rolled into scans: rolling.py): a carried pair, a per-step `xs[t]`
    and a constant per step, `** 2` of unboxed values in the backward pass's body."""
    W, U = params["W"], params["U"]
    h, total = np.zeros(W.shape[1]), 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(np.dot(h, W) + np.dot(xs[t], U) + 0.1 * t)
        total = total + np.sum(h ** 2)
    return total


def scaled_steps(x):
    """A per-step Python number (`1.0 + 0.1 * t`, stacked when rolled) on float32 values: weak,
    so float32 steps, as plainly (a numpy float64 would make them float64)."""
    total = 0.0
    for t in range(16):
        total = total + np.sum(np.sin(x * (1.0 + 0.1 * t)) * V)
    return total


def layers_in_time(Ws, xs):
    """Nested loops: layers within time steps."""
    h = np.zeros(Ws[0].shape[0])
    for t in range(xs.shape[0]):
        for W in Ws:
            h = np.sin(np.dot(h, W) + xs[t])
    return np.sum(h)


def looped(x):
    return np.sum(fori_loop(0, 3, lambda i, c: np.sin(c) + x, x))  # a scan equation


def test_rolled_loops_run_by_numpy_step_by_step():
    """A legacy loop's trace is rolled into scans, whose bodies the tier runs step by step
    (control_flow/scans.py's `numpy` face), as it runs a fori_loop's: plain autograd's bits
    for the loops and their gradients."""
    params = {"W": rs.randn(4, 4) * 0.5, "U": rs.randn(3, 4)}
    Ws = [rs.randn(4, 4) * 0.5 for _ in range(3)]
    cases = [(rnn, lambda k: (params, rs.randn(12, 3) + k)), (grad(rnn), lambda k: (params, rs.randn(12, 3) + k)),
             (scaled_steps, lambda k: ((V + k).astype(onp.float32),)),
             (grad(layers_in_time), lambda k: (Ws, rs.randn(8, 4) + k)), (grad(looped), lambda k: (V + k,))]
    for g, args in cases:
        jf = jit_ps(g, tiered=True)
        for k in range(5):
            a = args(k)
            assert numpy_tier.same(jf(*a), g(*a)), (g, k)
        assert jf.stats.numpy_tier_calls == 3, g
        assert any(eqn.prim is scan_p for eqn in jf.graph(*args(0)).eqns)


def draws(x):
    return np.sum(x * npr.randn(*x.shape))


def guarded(x):
    return np.sum(x ** 2) if np.sum(x) > 0 else np.sum(x ** 3)  # a guard: the branch the trace took must hold


def branched(x):
    return np.sum(cond(np.sum(x) > 0, lambda y: np.sin(y), lambda y: np.cos(y), x))  # a case equation: no numpy face


def test_a_guarded_trace_runs_by_numpy_where_its_guards_hold():
    """`guarded`'s trace takes the branch of its second call's values (sum > 0) and guards it:
    calls whose values take the other branch run as plain autograd, the rest by numpy."""
    g = grad(guarded)
    jf = jit_ps(g, tiered=True)
    signs = [1, 1, 1, -1, 1, -1, 1, 1]
    for k, sign in enumerate(signs):
        x = sign * (V + 1.0 + k)
        assert numpy_tier.same(jf(x), g(x)), k
    assert jf.stats.traces == 1 and jf.stats.numpy_tier_calls == 4  # (the 1st untraced, 2nd checked, two refused)


def test_a_trace_whose_guards_refuse_most_calls_keeps_to_plain_autograd(monkeypatch):
    """Each refused call ran by numpy before it ran plainly: past REFUSALS_KEPT refusals, more
    than the calls let through, the tier stops trying."""
    monkeypatch.setattr(numpy_tier, "REFUSALS_KEPT", 2)
    runs = []
    run = numpy_tier.Replay.run
    monkeypatch.setattr(numpy_tier.Replay, "run", lambda self, leaves: runs.append(1) or run(self, leaves))
    g = grad(guarded)
    jf = jit_ps(g, tiered=True)
    for k in range(8):
        x = (1 if k < 2 else -1) * (V + 1.0 + k)
        assert numpy_tier.same(jf(x), g(x)), k
    assert jf.stats.numpy_tier_calls == 0 and len(runs) == 4  # (the 2nd call's check, then 3 refused)


@pytest.mark.parametrize("f", [draws, branched])
def test_what_does_not_qualify_runs_as_plain_autograd(f):
    g = grad(f)
    jf = jit_ps(g, tiered=True)
    for k in range(5):
        npr.seed(k)
        got = jf(V + 1.0)
        npr.seed(k)
        assert numpy_tier.same(got, g(V + 1.0))
    assert jf.stats.traces == 1 and jf.stats.numpy_tier_calls == 0


def test_a_trace_whose_first_results_differ_from_plain_autograd_s_keeps_to_plain_autograd():
    """np.mean's VJP in plain autograd divides by numpy's int64 count, in float64 (NEP 50) for
    a float32 model; the trace divides by the count as a Python int, in float32, as the
    compiled program does (README: float32, float64 and x64): its first replayed results are
    checked against plain autograd's, differ in their last bits, and its calls run plainly."""
    g = grad(mlp_loss)
    jf = jit_ps(g, tiered=True)
    for k in range(5):
        x = (X + k).astype(onp.float32)
        got = jf(PARAMS32, x, Y.astype(onp.float32))
        assert numpy_tier.same(got, g(PARAMS32, x, Y.astype(onp.float32)))
    assert jf.stats.traces == 1 and jf.stats.numpy_tier_calls == 0


def phases(x):
    """Products of complex scalars: autograd's VJPs multiply the unboxed ones by Python's `*`,
    numpy's scalar math, whose bits differ from np.multiply's loop (FMA) for 44 % of random
    pairs: the trace's operators run as operators (quimb's circuits)."""
    z = np.exp(1j * x[0]) * np.exp(1j * x[1]) * (x[2] + 1j * x[3])
    return np.abs(z * np.conj(z + x[4])) ** 2


def test_operators_on_unboxed_scalars_run_as_python_s_operators():
    g = grad(phases)
    jf = jit_ps(g, tiered=True)
    for k in range(5):
        x = rs.randn(5) + k
        assert numpy_tier.same(jf(x), g(x)), k
    assert jf.stats.numpy_tier_calls == 3


class ZeroDArrays(onp.ndarray):
    """An ndarray subclass whose ufuncs keep 0-d operands 0-d arrays, as PennyLane's tensor's do."""

    def __array_wrap__(self, obj, context=None, return_scalar=False):
        return obj.view(ZeroDArrays)


ArrayBox.register(ZeroDArrays)
VSpace.register(ZeroDArrays, ArrayVSpace)


def test_results_plain_autograd_gives_as_0d_arrays_stay_0d_arrays():
    """With a 0-d argument of such a subclass (PennyLane's trainable bias), plain autograd's
    gradient is a 0-d array (its cotangents summed by `add`s of 0-d subclass arrays), the
    trace's the numpy scalar numpy's `add` makes: the tier gives a 0-d array there, as
    plain autograd, learned at its first check."""
    g = grad(lambda w, b: np.sum(np.tanh(w)) * b + b * b, (0, 1))
    jf = jit_ps(g, tiered=True)
    b = onp.array(0.5).view(ZeroDArrays)
    for k in range(5):
        got, want = jf(V + k, b), g(V + k, b)
        assert type(want[1]) is onp.ndarray and numpy_tier.same(got, want), k
    assert jf.stats.numpy_tier_calls == 3


def test_a_held_function_s_gradient_by_numpy_gives_0d_arrays_where_plain_autograd_does():
    """grad(jit_ps(f)) (PennyLane's qml.grad(jit_ps(cost)) of a trainable 0-d bias): the same,
    learned at the split's first check."""
    f = lambda w, b: np.sum(np.tanh(w)) * b + b * b
    jf = jit_ps(f, tiered=True)
    b = onp.array(0.5).view(ZeroDArrays)
    for k in range(5):
        got, want = grad(jf, (0, 1))(V + k, b), grad(f, (0, 1))(V + k, b)
        assert type(want[1]) is onp.ndarray and numpy_tier.same(got, want), k
    assert jf.stats.numpy_tier_calls == 3


class Weights:
    def __init__(self):
        self.w = rs.randn(*V.shape)


def test_grad_of_a_held_function_follows_what_an_object_argument_holds():
    """An object argument changed between calls (rebound, in place): a new signature, its
    value and VJP traced again, never the old state's (signatures.state_digest)."""
    f = lambda x, m: np.sum(np.tanh(x * m.w))
    jf = jit_ps(f, tiered=True)
    m = Weights()
    for k in range(9):
        if k == 3:
            m.w = m.w * 2.0
        if k == 6:
            m.w *= 3.0
        assert numpy_tier.same(grad(jf)(V + k, m), grad(f)(V + k, m)), k
    assert jf.stats.numpy_tier_calls == 3


@primitive
def times(x, k):
    return x * k


defvjp(times, lambda ans, x, k: lambda g: g * float(k))  # (its VJP reads k: traced, k is made static)


def test_grad_of_a_held_function_by_numpy_only_at_the_values_its_vjp_trace_made_static():
    f = lambda x, k: np.sum(np.tanh(times(x, k)))
    jf = jit_ps(f, tiered=True)
    for k, scale in enumerate([2.0] * 5 + [3.0] * 3):
        got, want = value_and_grad(jf)(V + k, scale), value_and_grad(f)(V + k, scale)
        assert numpy_tier.same(got, want), k
    assert jf.stats.numpy_tier_calls == 3  # (k = 3.0: plain autograd's)


def test_each_of_the_first_checked_calls_may_keep_the_signature_plain(monkeypatch):
    """The first CHECKED_CALLS calls by numpy also run plain autograd and compare: a difference
    at the second (a difference of precision shows at some arguments only) keeps the
    signature plain for good."""
    monkeypatch.setattr(numpy_tier, "CHECKED_CALLS", 2)
    verdicts = iter([True, False])
    monkeypatch.setattr(numpy_tier, "same", lambda got, want: next(verdicts))
    g = grad(mlp_loss)
    jf = jit_ps(g, tiered=True)
    for k in range(6):
        assert_close(jf(PARAMS, X + k, Y), g(PARAMS, X + k, Y), rtol=0)
    assert jf.stats.numpy_tier_calls == 0 and next(verdicts, "checked twice") == "checked twice"


def test_what_qualifies():
    from autograd.tracer import trace_primitives_map
    from autograd_xla.core import Aval, Eqn, Var

    def face(prim, operators=frozenset()):
        return numpy_tier._face(Eqn(prim, (), {}, [out], None, None), operators)
    out = Var(Aval((), onp.float64), 0)
    raw = onp.sin
    assert raw in trace_primitives_map and face(raw) is raw and face(operator.getitem) is operator.getitem
    assert face(lambda x: x) is None and face(np.sin) is None  # (autograd's wrapper, which boxes)
    assert face(onp.power) is onp.power and face(onp.power, {out}) is operator.pow and face(onp.power, None) is None


@pytest.mark.parametrize("a, b, equal", [
    (onp.float64(1.0), onp.float64(1.0), True),
    (onp.float64(1.0), 1.0, False),  # a numpy scalar is not a Python float
    (onp.zeros(3), onp.zeros(3, onp.float32), False),
    (onp.zeros(3), onp.zeros((3, 1)), False),
    (onp.array([0.0]), onp.array([-0.0]), False),  # bits, not values
    (onp.array([onp.nan]), onp.array([onp.nan]), True),
    ((onp.ones(2), [1.0]), (onp.ones(2), [1.0]), True),
    ((onp.ones(2), [1.0]), [onp.ones(2), [1.0]], False),
    (float("nan"), float("nan"), True),
])
def test_same_means_structure_types_dtypes_shapes_and_bits(a, b, equal):
    assert numpy_tier.same(a, b) is equal
