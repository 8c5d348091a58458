"""Tiered execution (jit_ps(f, tiered=True)): a new signature runs as plain autograd, until
its calls have cost a compile (tiering.PLAIN_SECONDS, 0 here but where said) and while XLA
compiles it on the compile thread, then compiled; plain autograd is the reference in both tiers. `compile_thread.paused()` holds a compile in flight for as long as a test needs,
and `compile_thread.wait()` lets it finish: no sleeps, no timing."""
import gc
import os
import subprocess
import sys
import threading
import warnings

import numpy as onp
import numpy.random as npr
import pytest

import autograd.numpy as np
from autograd import grad, hessian
from autograd_xla import (CompileError, backend, DeviceArray, FallbackWarning, jit_ps,
                          set_default_tiered, tiering)
from autograd_xla import calls
from autograd_xla.aot import COMPILED
from helpers import PLATFORM, assert_close, twice_xla_rejects

compile_thread = tiering.compile_thread
rs = npr.RandomState(0)


@pytest.fixture(autouse=True)
def no_compile_left_running(monkeypatch):
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0)  # compiled at a new signature's first call
    assert compile_thread.wait(60)
    gc.collect()
    backend.get_backend().release_recent()  # every test's compiles are counted from a cold cache (the default platform's)
    yield
    assert compile_thread.wait(60)
    set_default_tiered(None)


def loss(W, b, x):
    return np.sum(np.tanh(x @ W + b) ** 2)


W, B, X = rs.randn(4, 3), rs.randn(3), rs.randn(5, 4)


def mlp_loss(params, x):
    for Wi, bi in params:
        x = np.tanh(x @ Wi + bi)
    return np.sum(x ** 2)


PARAMS = [(rs.randn(4, 6), rs.randn(6)), (rs.randn(6, 2), rs.randn(2))]


def test_first_calls_plain_while_compiling_then_compiled():
    g = grad(loss, argnum=(0, 1))
    jf = jit_ps(g, tiered=True)
    with compile_thread.paused():
        for k in range(3):
            assert_close(jf(W, B + k, X), g(W, B + k, X))
        assert (jf.stats.plain_tier_calls, jf.stats.compiles, jf.stats.hits, jf.stats.traces) == (3, 0, 0, 1)
    assert compile_thread.wait(60)
    assert jf.stats.compiles == 1
    for k in range(3):
        assert_close(jf(W, B + k, X), g(W, B + k, X), rtol=1e-12)
    assert (jf.stats.plain_tier_calls, jf.stats.hits, jf.stats.traces) == (3, 3, 1)


def test_containers_keywords_and_static_arguments():
    def f(params, x, scale, power=2):
        return mlp_loss(params, x) * scale ** power

    g = grad(f)
    jf = jit_ps(g, static_argnames="power", tiered=True)
    with compile_thread.paused():
        assert_close(jf(PARAMS, X, 1.5, power=3), g(PARAMS, X, 1.5, power=3))
        assert_close(jf(PARAMS, X, 1.5, power=2), g(PARAMS, X, 1.5, power=2))
        assert (jf.stats.plain_tier_calls, jf.stats.traces) == (2, 2)
    assert compile_thread.wait(60)
    assert_close(jf(PARAMS, X, 0.5, power=3), g(PARAMS, X, 0.5, power=3), rtol=1e-12)
    assert_close(jf(PARAMS, X, 0.5, power=2), g(PARAMS, X, 0.5, power=2), rtol=1e-12)
    assert (jf.stats.compiles, jf.stats.hits, jf.stats.plain_tier_calls) == (2, 2, 2)


def test_plain_and_untraced_until_the_calls_have_cost_a_compile(monkeypatch):
    """A new signature is not traced while its plain calls cost less than the compile
    expected (the rent-or-buy rule: a short job costs what plain autograd does)."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 3600.0)
    f = jit_ps(loss, tiered=True)
    for k in range(5):
        assert_close(f(W, B, X + k), loss(W, B, X + k))
    assert f.cache_info()["traces"] == 0 and f.cache_info()["plain_tier_calls"] == 5 and compile_thread.idle()
    g = jit_ps(grad(loss), tiered=True)  # also inside autograd's trace, and differentiated
    assert_close(grad(lambda W: f(W, B, X) * 2.0)(W), 2.0 * grad(loss)(W, B, X))
    assert_close(g(W, B, X), grad(loss)(W, B, X))
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0)  # spent: the next call traces and compiles
    assert_close(f(W, B, X), loss(W, B, X))
    assert compile_thread.wait(60)
    assert_close(f(W, B, X), loss(W, B, X))
    info = f.cache_info()
    assert info["traces"] == 1 and info["compiles"] == 1 and info["hits"] >= 1
    f.clear_cache()
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 3600.0)
    f(W, B, X)
    assert f.cache_info()["traces"] == 0  # cleared (the counters too): plain and untraced again


@pytest.fixture
def fresh_learning(monkeypatch):
    """The plain budget from this process's learning alone, with nothing learned yet (and a
    traced signature compiled at once: no second stage, but where a test says)."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "HORIZON", float("inf"))
    monkeypatch.setattr(tiering, "_made", [0, 0.0])
    monkeypatch.setattr(tiering, "_sized", [0, 0.0])
    monkeypatch.setattr(tiering, "_traced", [0, 0.0])
    monkeypatch.setattr(tiering, "_boxed", [0, 0.0])
    monkeypatch.setattr(tiering, "_costs", tiering.collections.OrderedDict())
    monkeypatch.setattr(tiering, "_savings", tiering.collections.OrderedDict())


def compiled_after_plain_calls():
    """A tiered jit_ps of loss's gradient, called until its program is compiled, each result
    plain autograd's."""
    g = grad(loss, argnum=(0, 1))
    jf = jit_ps(grad(loss, argnum=(0, 1)), tiered=True)
    while jf.stats.compiles == 0:
        assert_close(jf(W, B, X), g(W, B, X))
        assert compile_thread.wait(60)
    return jf


def test_the_plain_budget_is_the_rent_factor_times_the_cost_expected_in_plain_calls(fresh_learning, monkeypatch):
    """Before any program is made, a signature runs plainly for RENT_FACTOR * COST_IN_CALLS
    of its calls, within RENT_FACTOR times COST_FLOOR_SECONDS and COST_CAP_SECONDS; each
    program a tiered signature makes moves that count towards its own
    cost in calls (trace, lowering and compile over its mean plain call)."""
    assert tiering.plain_budget(None, None) == float("inf")  # no call yet: the first is plain
    assert tiering.plain_budget(None, 0.001) == pytest.approx(tiering.RENT_FACTOR * tiering.COST_IN_CALLS * 0.001)
    assert tiering.plain_budget(None, 1.0) == pytest.approx(tiering.RENT_FACTOR * tiering.COST_CAP_SECONDS)
    assert tiering.plain_budget(None, 1e-6) == pytest.approx(tiering.RENT_FACTOR * tiering.COST_FLOOR_SECONDS)
    monkeypatch.setattr(tiering, "COST_FLOOR_SECONDS", 0.0)
    monkeypatch.setattr(tiering, "COST_IN_CALLS", 1.0)
    jf = compiled_after_plain_calls()
    calls = jf.stats.plain_tier_calls
    assert calls >= tiering.RENT_FACTOR  # 1 call's cost, twice, before tracing
    (n, in_calls), ((learned, seconds),) = tiering._made, tiering._costs.items()
    assert n == 1 and seconds > 0 and in_calls > 0
    info = jf.cache_info()
    assert seconds == pytest.approx(info["trace_seconds"] + info["lower_seconds"] + info["compile_seconds"])
    assert tiering.plain_budget(None, 0.001) == pytest.approx(tiering.RENT_FACTOR * 0.001 * (1.0 + in_calls) / 2)
    # a function of the same shape made afresh (a library's next fit): that program's cost
    assert tiering.plain_budget(learned, 0.001) == pytest.approx(tiering.RENT_FACTOR * seconds)


@pytest.mark.parametrize("numpy_call, compiled", [(0.02, True), (0.09, False)])
def test_a_held_signature_ruled_by_python_s_overhead_is_budgeted_by_its_program_s_size(fresh_learning, monkeypatch,
                                                                                        numpy_call, compiled):
    """A legacy loop's gradient: 0.1 s plain calls, whose time gives the COST_CAP_SECONDS prior,
    and a small rolled program. Traced early (trace_budget) and held, it is judged again once
    its calls by numpy have cost a third more: where they take at most OVERHEAD_BOUND of a plain
    call's time its budget becomes RENT_FACTOR times its program's program_cost, already spent,
    and it compiles; where they take as long (large matrix products), the prior stands."""
    monkeypatch.setattr(tiering, "TRACE_IN_CALLS", 3.0)
    assert tiering.trace_budget(0.1) == pytest.approx(tiering.TRACE_FACTOR * (tiering.TRACE_FLOOR_SECONDS + 0.3))
    signatures = tiering.NewSignatures(8, "shape")
    untraced = signatures.plain("key")
    untraced.spent, untraced.calls = 1.0, 10
    assert signatures.plain("key") is None  # traced early: 1.0 s spent, its trace budget 0.99 s
    assert signatures.hold("key", "key", 120) is untraced and untraced.budget == pytest.approx(
        tiering.RENT_FACTOR * tiering.COST_CAP_SECONDS)
    assert untraced.due == pytest.approx((1 + 1 / tiering.TRACE_FACTOR) * 1.0)
    untraced.spent, untraced.calls, untraced.by_numpy = 1.0 + 20 * numpy_call, 30, [20 * numpy_call, 20]
    assert (signatures.plain("key") is None) is compiled
    if compiled:
        assert untraced.budget == pytest.approx(tiering.RENT_FACTOR * tiering.program_cost(120))
        assert signatures.hold("key", "key", 120) is None  # judged: worth compiling


def test_a_signature_run_once_or_twice_is_never_traced(fresh_learning):
    """A Hessian taken once at the end of a fit runs as plain autograd: no trace, no compile."""
    h = jit_ps(hessian(loss), tiered=True)
    for k in range(2):
        assert_close(h(W, B + k, X), hessian(loss)(W, B + k, X))
    info = h.cache_info()
    assert (info["traces"], info["compiles"], info["plain_tier_calls"]) == (0, 0, 2)


def test_a_signature_s_saving_sets_the_budget_of_the_next_function_of_its_shape(fresh_learning, monkeypatch):
    """A tiered signature compiled after its plain calls notes, after LEARN_CALLS calls of its
    first program, what they cost against the plain ones (c / p); a function of
    the same shape made afresh (a library's next fit) then runs that signature plainly for
    p / (p - c) times its cost (at most MAX_RENT_FACTOR), other signatures for RENT_FACTOR."""
    monkeypatch.setattr(tiering, "COST_FLOOR_SECONDS", 0.0)
    monkeypatch.setattr(tiering, "COST_IN_CALLS", 1.0)
    monkeypatch.setattr(tiering, "LEARN_CALLS", 1)
    g = grad(loss, argnum=(0, 1))
    first = compiled_after_plain_calls()
    assert first.stats.plain_tier_calls > 1 and not tiering._savings
    assert_close(first(W, B, X), g(W, B, X))  # the first compiled call
    (learned, ratio), = tiering._savings.items()
    cost = tiering._costs[learned]
    factor = 1 / max(1 - ratio, 1 / tiering.MAX_RENT_FACTOR)
    assert 0 < ratio and tiering.plain_budget(learned, 1.0) == pytest.approx(factor * cost)
    again = jit_ps(grad(loss, argnum=(0, 1)), tiered=True)
    untraced = again._untraced.plain(learned[1])
    untraced.spent, untraced.calls = (factor + tiering.RENT_FACTOR) / 2 * cost, 1  # between the two budgets
    assert (again._untraced.plain(learned[1]) is None) == (factor < tiering.RENT_FACTOR)


def head_loss(W, b, x, n):
    return loss(W, b, x[:int(n)])


@pytest.mark.parametrize("f", [loss, head_loss])  # head_loss: the trace makes n static, the key then holding its value
def test_a_traced_signature_whose_compile_would_not_pay_back_runs_plainly_until_it_would(fresh_learning, monkeypatch, f):
    """The second stage: once its plain budget is spent a signature is traced, and compiled
    only if its program's expected cost (program_cost of its size) is saved within HORIZON
    times the calls run so far; else its calls run plainly, giving plain autograd's results,
    until they have cost HOLD_GROWTH times as much, and the decision is taken again on the
    trace kept."""
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 0.0 if call is not None else float("inf"))
    monkeypatch.setattr(tiering, "HORIZON", 0.5)
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e6)  # no program pays back
    g = grad(f, argnum=(0, 1))
    extra = (onp.array(3),) if f is head_loss else ()
    jf = jit_ps(g, tiered=True)
    for k in range(6):
        assert_close(jf(W, B + k, X, *extra), g(W, B + k, X, *extra))
        assert compile_thread.wait(60)  # (a compile, had one started)
    assert (jf.stats.traces, jf.stats.compiles, jf.stats.plain_tier_calls) == (1, 0, 6)
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e-12)  # every program pays back
    for k in range(2000):  # (its held calls run by numpy, ~30 µs each, until they have doubled its time)
        jf(W, B + k, X, *extra)
        assert compile_thread.wait(60)
        if jf.stats.compiles:
            break
    assert (jf.stats.traces, jf.stats.compiles) == (1, 1)  # the trace kept
    assert_close(jf(W, B, X, *extra), g(W, B, X, *extra), rtol=1e-12)


def test_a_signature_called_on_boxes_is_judged_with_the_vjp_its_compile_commits_to(fresh_learning, monkeypatch):
    """grad(jit_ps(f)): compiling a held signature compiles, at its next call on autograd's
    boxes, the VJP those calls run (autodiff.HeldVJP), so its second stage waits for that
    VJP's trace and weighs its program's expected cost too (worth_compiling's vjps); its
    calls give plain autograd's gradients meanwhile."""
    untraced = tiering.Untraced()
    untraced.spent, untraced.calls = 0.19, 400  # the Gaussian mixture's at its decision: 0.475 ms a call
    monkeypatch.setattr(tiering, "HORIZON", 0.5)
    saving = 0.5 * 400 * 0.75 * untraced.spent / untraced.calls
    assert tiering.program_cost(17) < saving < tiering.program_cost(17) + tiering.program_cost(58)
    assert tiering.worth_compiling(None, 17, untraced) and not tiering.worth_compiling(None, 17, untraced, [58])

    weighed = []

    def spy(learned, eqns, untraced, vjps=()):
        weighed.append((eqns, list(vjps)))
        return False  # held: decided again soon (HOLD_GROWTH below)
    monkeypatch.setattr(tiering, "worth_compiling", spy)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 0.0 if call is not None else float("inf"))
    monkeypatch.setattr(tiering, "HOLD_GROWTH", 1.0)
    f = lambda W: np.sum(np.tanh(X @ W) ** 2)  # noqa: E731
    jf = jit_ps(f, tiered=True)
    for k in range(12):
        assert_close(grad(jf)(W + k), grad(f)(W + k), rtol=1e-12)
    assert jf.stats.compiles == 0 and weighed
    assert all(vjps and vjps[0] > eqns for eqns, vjps in weighed)


def test_a_signature_called_on_boxes_whose_vjp_is_not_held_is_still_compiled(fresh_learning, monkeypatch):
    """A signature called on boxes whose calls run no held VJP (its output a tuple: plain
    autograd's boxed calls, autodiff.HeldVJP takes one array's) waits for a VJP's trace once
    only: its next decisions weigh its own program, and it compiles."""
    monkeypatch.setattr(tiering, "plain_budget", lambda learned, call: 0.0 if call is not None else float("inf"))
    monkeypatch.setattr(tiering, "COST_PER_EQN", 1e-12)  # every program pays back
    f = lambda W: (np.sum(np.tanh(X @ W) ** 2), np.sum(W))  # noqa: E731
    jf = jit_ps(f, tiered=True)
    for k in range(200):
        assert_close(grad(lambda W: jf(W)[0])(W + k), grad(lambda W: f(W)[0])(W + k), rtol=1e-12)
        assert compile_thread.wait(60)
        if jf.stats.compiles:
            break
    assert jf.stats.traces == 1 and jf.stats.compiles == 1


def test_the_first_stage_of_a_signature_called_on_boxes_expects_its_vjp_s_trace_too(fresh_learning, monkeypatch):
    """A signature called on autograd's boxes is traced twice once held (its own trace, and its
    VJP's at its first held call: autodiff.HeldVJP), so its first stage waits for both
    traces' expected cost (tiering.trace_budget, boxed_traces: BOXED_TRACES before this
    process has measured any); called directly, for one."""
    assert tiering.trace_budget(1e-3, 3) == pytest.approx(3 * tiering.trace_budget(1e-3)) and tiering.trace_budget(1e-3) > 0
    asked = []
    trace_budget = tiering.trace_budget

    def spy(call, traces=1):
        asked.append(traces)
        return trace_budget(call, traces)
    monkeypatch.setattr(tiering, "trace_budget", spy)
    f = lambda W: np.sum(np.tanh(X @ W) ** 2)  # noqa: E731
    jf = jit_ps(f, tiered=True)
    for k in range(5):
        assert_close(jf(W + k), f(W + k), rtol=1e-12)
    assert asked and set(asked) == {1}
    asked.clear()
    W2 = rs.randn(4, 2)  # a signature of its own
    for k in range(5):
        assert_close(grad(jf)(W2 + k), grad(f)(W2 + k), rtol=1e-12)
    assert asked and asked[0] == tiering.BOXED_TRACES > 1 and min(asked) > 1


def test_what_a_boxed_signature_s_two_traces_cost_moves_the_next_ones_budget(fresh_learning, monkeypatch):
    """Once a held signature's VJP is traced, both traces' seconds over one trace's expected
    are noted (tiering.note_boxed), and boxed_traces moves from BOXED_TRACES to their
    geometric mean with it, counted as one: later signatures' first stages wait for what
    such traces cost here."""
    untraced = tiering.Untraced()
    untraced.spent, untraced.calls, untraced.traced = 0.5, 100, 0.05
    one = tiering.trace_budget(5e-3) / tiering.TRACE_FACTOR
    tiering.note_boxed(untraced, 0.03)
    assert tiering.boxed_traces() == pytest.approx((tiering.BOXED_TRACES * 0.08 / one) ** 0.5)

    monkeypatch.setattr(tiering, "_boxed", [0, 0.0])
    monkeypatch.setattr(tiering, "trace_budget", lambda call, traces=1: 0.0)  # traced at the second call
    monkeypatch.setattr(tiering, "plain_budget", lambda learned=None, call=None: 1e9 if call is not None else float("inf"))
    f = lambda W: np.sum(np.tanh(X @ W) ** 2)  # noqa: E731
    jf = jit_ps(f, tiered=True)
    for k in range(6):
        assert_close(grad(jf)(W + k), grad(f)(W + k), rtol=1e-12)
    assert jf.stats.traces == 1 and jf.stats.numpy_tier_calls and tiering._boxed[0] == 1


def test_program_size_counts_a_rolled_loop_s_body():
    def f(x):
        for i in range(40):
            x = np.sin(x) * 0.5 + i
        return np.sum(x)
    jf = jit_ps(f, tiered=False)
    jf(onp.ones(3))
    graph = next(iter(jf._cache.values())).graph
    assert (len(graph.eqns), graph.size()) == (2, 2 + 3)  # rolled: the loop and the sum; the body's sin, multiply, add


def test_off_compiles_in_the_call():
    jf = jit_ps(grad(loss), tiered=False)
    with compile_thread.paused():  # nothing is handed to the thread: the call compiles
        jf(W, B, X)
        assert (jf.stats.compiles, jf.stats.plain_tier_calls) == (1, 0)
        assert compile_thread.idle()


@pytest.mark.parametrize("cores, load, background", [({0}, 0.0, False), ({0, 1}, 0.9, True), ({0, 1}, 1.7, False),
                                                     ({3, 5, 7}, 2.0, True)])
def test_on_by_default_compiling_in_the_background_where_a_core_is_free(monkeypatch, cores, load, background):
    monkeypatch.delenv(tiering.TIERED_ENV, raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: cores, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    monkeypatch.setattr(os, "getloadavg", lambda: (load, load, load), raising=False)
    assert tiering.default_tiered() is None and tiering.spare_core() is background
    with compile_thread.paused():
        jf = jit_ps(grad(loss))  # PLAIN_SECONDS 0: its first call spends the plain budget
        assert_close(jf(W, B, X), grad(loss)(W, B, X))
        # in the background: that call ran plainly; else it compiled and ran compiled
        assert (jf.stats.plain_tier_calls, compile_thread.idle()) == ((1, False) if background else (0, True))
        strict = jit_ps(grad(loss), fallback="error")  # a signature that cannot compile raises at its first call
        assert_close(strict(W, B, X), grad(loss)(W, B, X))
        assert (strict.stats.plain_tier_calls, strict.stats.traces) == (0, 1)
    assert compile_thread.wait(60)
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 3600.0)
    plain_first = jit_ps(grad(loss))  # tiered by default, with or without a free core
    assert_close(plain_first(W, B, X), grad(loss)(W, B, X))
    assert (plain_first.stats.plain_tier_calls, plain_first.stats.traces) == (1, 0)
    monkeypatch.setenv(tiering.TIERED_ENV, "0")
    assert tiering.default_tiered() is False


@pytest.mark.parametrize("options", [dict(keep_on_device=True), dict(x64=False), dict(donate_argnums=0)])
def test_by_default_not_where_a_plain_call_returns_other_kinds_of_results(monkeypatch, options):
    """The default tiers only where a plain call returns what a compiled one does: DeviceArrays
    (keep_on_device), 32-bit results (x64=False) and donated arguments compile at the first
    call, as does any function whose platform is not the CPU; tiered=True still tiers them."""
    monkeypatch.delenv(tiering.TIERED_ENV, raising=False)
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 3600.0)
    W0, B0, X0 = (onp.array(a) for a in (W, B, X))
    default = jit_ps(grad(loss), **options)
    default(W0, B0, X0)
    assert (default.stats.plain_tier_calls, default.stats.traces) == (0, 1)
    asked = jit_ps(grad(loss), tiered=True, **options)
    asked(onp.array(W0), B0, X0)
    assert (asked.stats.plain_tier_calls, asked.stats.traces) == (1, 0)
    plain = jit_ps(grad(loss))
    plain(W0, B0, X0)
    assert (plain.stats.plain_tier_calls, plain.stats.traces) == (1, 0)


def test_process_default_from_environment_and_setter(monkeypatch):
    monkeypatch.setenv(tiering.TIERED_ENV, "1")
    with compile_thread.paused():
        on = jit_ps(grad(loss))
        on(W, B, X)
        assert on.stats.plain_tier_calls == 1
        set_default_tiered(False)  # the setter wins over the environment
        off = jit_ps(grad(loss))
        off(W, B, X)
        off(W, B, X)
        assert (off.stats.plain_tier_calls, off.stats.hits) == (0, 1)
        explicit = jit_ps(grad(loss), tiered=True)  # and the argument over both
        explicit(W, B, X)
        assert explicit.stats.plain_tier_calls == 1
    with pytest.raises(TypeError):
        set_default_tiered("yes")


def rejected(x):
    return np.sum(twice_xla_rejects(np.tanh(x)))


def test_compile_error_in_background_falls_back_with_one_warning():
    x = rs.randn(2, 3)
    jf = jit_ps(rejected, tiered=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plain tier is not a fallback: no warning yet
        with compile_thread.paused():
            assert_close(jf(x), rejected(x))
        assert compile_thread.wait(60)
    with pytest.warns(FallbackWarning, match="twice_xla_rejects"):
        assert_close(jf(x), rejected(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(jf(x + 1), rejected(x + 1))
    assert (jf.stats.fallbacks, jf.stats.compiles, jf.stats.plain_tier_calls) == (1, 0, 1)


def test_compile_error_in_background_raises_under_fallback_error():
    x = rs.randn(2, 3)
    jf = jit_ps(rejected, fallback="error", tiered=True)
    with compile_thread.paused():
        assert_close(jf(x), rejected(x))
    assert compile_thread.wait(60)
    with pytest.raises(CompileError, match="twice_xla_rejects"):
        jf(x)
    with pytest.raises(CompileError, match="twice_xla_rejects"):  # as without tiers: each call compiles it again
        jf(x)
    assert jf.stats.plain_tier_calls == 1


def noisy(x):
    return np.sum(np.tanh(x) * np.random.randn(*x.shape)) + np.random.rand()


def test_random_draws_are_plain_autograds_sequence_across_the_switch():
    x = rs.randn(3, 2)
    onp.random.seed(1)
    expected = [noisy(x) for _ in range(5)]
    state = onp.random.get_state(legacy=False)
    jf = jit_ps(noisy, tiered=True)
    onp.random.seed(1)
    with compile_thread.paused():
        got = [jf(x) for _ in range(2)]
    assert compile_thread.wait(60)
    got += [jf(x) for _ in range(3)]
    assert (jf.stats.plain_tier_calls, jf.stats.hits) == (2, 3)
    assert_close(onp.array(got), onp.array(expected), rtol=1e-12)
    after = onp.random.get_state(legacy=False)
    assert onp.array_equal(after["state"]["key"], state["state"]["key"]) and after["state"]["pos"] == state["state"]["pos"]
    assert (after["has_gauss"], after["gauss"]) == (state["has_gauss"], state["gauss"])


def test_a_closed_over_generator_keeps_its_sequence():
    gen = npr.RandomState(3)

    def f(x):
        return np.sum(x * gen.randn(*x.shape))

    x = rs.randn(4)
    gen.seed(3)
    expected = [grad(f)(x) for _ in range(4)]
    gen.seed(3)
    jf = jit_ps(grad(f), tiered=True)
    with compile_thread.paused():
        got = [jf(x) for _ in range(2)]
    assert compile_thread.wait(60)
    got += [jf(x) for _ in range(2)]
    assert jf.stats.plain_tier_calls == 2 and jf.stats.compiles == 1
    assert_close(onp.array(got), onp.array(expected), rtol=1e-12)
    assert gen.randn() == npr.RandomState(3).randn(4 * 4 + 1)[-1]  # the generator moved as plain autograd moves it


def test_differentiating_a_tiered_function_from_outside():
    def f(W, x):
        return np.sum(np.tanh(x @ W))

    jf = jit_ps(f, tiered=True)
    outer = grad(lambda W: jf(W, X) ** 2)
    expected = grad(lambda W: f(W, X) ** 2)
    with compile_thread.paused():
        assert_close(outer(W), expected(W))  # forward and backward as plain autograd
    assert compile_thread.wait(60)
    assert_close(outer(W), expected(W), rtol=1e-12)  # compiled forward; its VJP tiered in turn
    assert compile_thread.wait(60)
    assert_close(outer(W + 1), expected(W + 1), rtol=1e-12)  # both compiled
    assert jf.stats.plain_tier_calls == 1 and jf.stats.compiles == 1


def test_threads_calling_a_new_signature_at_once():
    g = grad(mlp_loss)
    jf = jit_ps(g, tiered=True)
    inputs = [X + k for k in range(8)]
    expected = [g(PARAMS, x) for x in inputs]
    errors, start = [], threading.Barrier(4)

    def work():
        start.wait()
        try:
            for _ in range(3):
                for x, e in zip(inputs, expected):
                    assert_close(jf(PARAMS, x), e, rtol=1e-12)
        except Exception as e:  # reported by the main thread
            errors.append(e)

    with compile_thread.paused():
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        threads[0].join(60)  # one thread's calls all ran plainly; the others may be mid-way
    for t in threads:
        t.join(60)
    assert compile_thread.wait(60)
    assert not errors, errors[0]
    s = jf.stats
    assert (s.traces, s.compiles, s.plain_tier_calls + s.hits) == (1, 1, 4 * 3 * len(inputs))
    assert s.plain_tier_calls >= 3 * len(inputs)


def test_eviction_while_compiling():
    jf = jit_ps(grad(loss), cache_size=1, tiered=True)
    x5, x7 = rs.randn(5, 4), rs.randn(7, 4)
    with compile_thread.paused():
        assert_close(jf(W, B, x5), grad(loss)(W, B, x5))
        assert_close(jf(W, B, x7), grad(loss)(W, B, x7))  # evicts the first before its compile started
    assert compile_thread.wait(60)
    assert (jf.stats.evictions, jf.stats.compiles) == (1, 1)  # the evicted one was not compiled
    assert_close(jf(W, B, x7), grad(loss)(W, B, x7), rtol=1e-12)
    assert_close(jf(W, B, x5), grad(loss)(W, B, x5))  # traced again, plain while it compiles
    assert compile_thread.wait(60)
    assert_close(jf(W, B, x5), grad(loss)(W, B, x5), rtol=1e-12)
    assert (jf.stats.traces, jf.stats.compiles, jf.stats.plain_tier_calls, jf.stats.hits) == (3, 2, 3, 2)


def test_clear_cache_while_compiling():
    jf = jit_ps(grad(loss), tiered=True)
    with compile_thread.paused():
        jf(W, B, X)
        jf.clear_cache()
    assert compile_thread.wait(60)
    assert jf.stats.compiles == 0  # left the cache before its turn
    assert_close(jf(W, B, X), grad(loss)(W, B, X))
    assert jf.stats.traces == 1  # counted from the clear


def test_introspection_waits_for_the_compile_in_flight():
    jf = jit_ps(grad(loss), tiered=True)
    with compile_thread.paused():
        jf(W, B, X)
        assert "stablehlo" in jf.stablehlo(W, B, X)  # lowering needs no compile
    assert jf.cost_analysis(W, B, X)["flops"] > 0
    assert jf.stats.compiles == 1 and jf.stats.traces == 1


def test_keep_on_device_and_donation():
    def step(p, x):
        return p - 0.1 * grad(lambda q: np.sum(np.tanh(x @ q)))(p)

    jf = jit_ps(step, keep_on_device=True, donate_argnums=0, tiered=True)
    p = jit_ps(lambda a: a + 0.0, keep_on_device=True)(W)
    expected = step(W, X)
    with compile_thread.paused():
        out = jf(p, X)  # plain autograd's numpy result, as for a signature that falls back
        assert type(out) is onp.ndarray
        assert_close(out, expected)
        assert_close(onp.asarray(p), W)  # nothing donated in the plain tier
    assert compile_thread.wait(60)
    out = jf(p, X)
    assert type(out) is DeviceArray
    assert_close(onp.asarray(out), expected, rtol=1e-12)


def test_a_process_exiting_while_a_compile_runs_exits_cleanly():
    script = """if True:
        import numpy as onp
        import autograd.numpy as np
        from autograd import grad, hessian
        from autograd_xla import jit_ps, tiering
        tiering.PLAIN_SECONDS = 0

        def loss(params, x):
            for W, b in params:
                x = np.tanh(x @ W + b)
            return np.sum(x ** 2)

        rs = onp.random.RandomState(0)
        params = [(rs.randn(784, 200), rs.randn(200)), (rs.randn(200, 100), rs.randn(100)), (rs.randn(100, 10), rs.randn(10))]
        jit_ps(grad(loss), tiered=True)(params, rs.randn(8, 784))
        print(tiering.compile_thread.idle())  # exits with its compile (about 0.3 s) usually still running
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "terminate" not in done.stderr, done.stderr


class Clock:
    """tiering's time, moved only by the calls (`plain_call` and `compiled_call` seconds each)."""

    def __init__(self, plain_call, compiled_call):
        self.now, self.plain_call, self.compiled_call, self.plain_runs = 0.0, plain_call, compiled_call, 0

    def perf_counter(self):
        return self.now


@pytest.fixture
def timed(monkeypatch, caplog):
    """clock(plain, compiled): tiering timing each plain call of `sine` at `plain` seconds and
    each compiled call (backend.Executable's, the Python path, which every timed call takes)
    at `compiled`; a few plain calls before the compile, every compiled call paying its
    ladder's rent, trials of TRIAL_CALLS pairs; nothing learned yet."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 2.5e-3)
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 4)
    monkeypatch.setattr(tiering, "_savings", tiering.collections.OrderedDict())
    monkeypatch.setattr(tiering, "_costs", tiering.collections.OrderedDict())
    caplog.set_level("INFO", logger="autograd_xla.tiering")
    run = backend.Executable.__call__

    def make(plain, compiled):
        clock = Clock(plain, compiled)
        monkeypatch.setattr(tiering, "time", clock)

        def slowed(self, *args, **kwargs):
            clock.now += clock.compiled_call
            return run(self, *args, **kwargs)
        monkeypatch.setattr(backend.Executable, "__call__", slowed)
        return clock
    return make


def sine(clock):
    def f(x):
        if type(x) is onp.ndarray:  # a plain call (a trace's x is a tracer)
            clock.now += clock.plain_call
            clock.plain_runs += 1
        return np.sin(x) * 2.0
    return f


def until_settled(jf, x):
    """Call jf(x) until its signature runs plainly for good or its ladder is done."""
    for _ in range(300):
        jf(x)
        assert compile_thread.wait(60)
        entries = list(jf._cache.values())
        if jf.stats.plain_kept or (entries and entries[0].stage == COMPILED and entries[0].ladder is None):
            return entries
    raise AssertionError("not settled in 300 calls")


def test_a_signature_whose_plain_calls_are_faster_runs_plainly_for_good(timed, caplog, monkeypatch):
    """A tiered signature whose compiled calls took PLAIN_TRIAL_RATIO of its plain calls or
    more tries plain autograd last on its ladder (tiering.PlainStep), against the program it
    settled on; plain autograd measured faster, the signature leaves the cache and its calls
    are plain autograd's own from then on (stats.plain_kept), logged; a function of its shape
    made afresh (a library's next fit) runs it plainly at once, untraced."""
    clock = timed(plain=1e-3, compiled=2e-3)
    f = sine(clock)
    jf = jit_ps(f, tiered=True)
    x = rs.randn(50)
    assert until_settled(jf, x) == []
    info = jf.cache_info()
    assert (info["plain_kept"], info["size"], info["traces"], info["climbing"]) == (1, 0, 1, 0)
    assert clock.plain_runs - info["plain_tier_calls"] == tiering.TRIAL_CALLS  # the trial's plain calls
    assert "plain autograd kept" in caplog.text
    for k in range(3):
        assert onp.array_equal(jf(x + k), f(x + k))  # plain autograd's own results
    assert jf.stats.plain_tier_calls == info["plain_tier_calls"] + 3 and jf.stats.traces == 1
    assert list(jf._simple.values()) == [(None, tiering.PLAIN)]  # straight to the function from now on
    if calls.Calls is not calls._Calls:  # (_callpath.c's Front runs those calls itself)
        entered = []
        python = jf._call_python
        monkeypatch.setattr(jf, "_call_python", lambda *a, **kw: entered.append(1) or python(*a, **kw))
        for k in range(3):
            assert onp.array_equal(jf(x + k), f(x + k))
        assert not entered and jf.stats.plain_tier_calls == info["plain_tier_calls"] + 6
    (learned, ratio), = tiering._savings.items()
    assert ratio >= 1
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    assert tiering.plain_budget(learned, 1e-3) == float("inf")
    again = jit_ps(f, tiered=True)
    for _ in range(20):
        assert onp.array_equal(again(x), f(x))
    assert (again.stats.traces, again.stats.plain_tier_calls, again.cache_info()["climbing"]) == (0, 20, 0)


@pytest.mark.parametrize("compiled, tried", [(0.9e-3, True), (0.5e-3, False)])
def test_a_signature_whose_compiled_calls_are_faster_stays_compiled(timed, caplog, compiled, tried):
    """Compiled calls faster than plain ones: plain autograd is tried where they took
    PLAIN_TRIAL_RATIO of a plain call or more (here 0.9) and the program is kept; below
    (0.5) it is not tried. Either way C++ may take the calls once the ladder is done."""
    clock = timed(plain=1e-3, compiled=compiled)
    f = sine(clock)
    jf = jit_ps(f, tiered=True)
    x = rs.randn(50)
    (entry,) = until_settled(jf, x)
    assert jf.stats.plain_kept == 0 and entry.stage == COMPILED
    assert clock.plain_runs - jf.stats.plain_tier_calls == (tiering.TRIAL_CALLS if tried else 0)
    assert ("the compiled program kept" in caplog.text) == tried
    tier = jf.stats.plain_tier_calls
    assert_close(jf(x), f(x))
    assert jf.stats.plain_tier_calls == tier
    assert all(ratio < 1 for ratio in tiering._savings.values())


@pytest.mark.parametrize("options", [dict(tiered=False), dict(tiered=True, keep_on_device=True),
                                     dict(tiered=True, x64=False), dict(tiered=True, donate_argnums=0),
                                     dict(tiered=True, fallback="error")])
def test_plain_autograd_is_not_tried_where_a_plain_call_returns_other_results(timed, options):
    """Plain autograd is not a contender where a plain call returns what a compiled one does
    not (DeviceArrays, 32-bit results, donated arguments; fallback="error" asks for compiled
    calls or an error: api.JittedFunction._plain_is_alike), nor for a function compiled at its
    first call (tiered=False: no plain calls to weigh it by)."""
    clock = timed(plain=1e-3, compiled=2e-3)
    f = sine(clock)
    jf = jit_ps(f, **options)
    x = rs.randn(50)
    (entry,) = until_settled(jf, x)
    assert jf.stats.plain_kept == 0 and entry.stage == COMPILED
    assert clock.plain_runs == jf.stats.plain_tier_calls  # none in a trial
    narrow = options.get("x64") is False
    assert_close(onp.asarray(jf(x)), f(x), rtol=1e-6 if narrow else None, check_dtype=not narrow)


def test_plain_autograd_is_kept_only_where_faster_by_the_margin():
    """tiering.faster with PLAIN_MARGIN and PLAIN_MARGIN_SECONDS: a plain call must save a
    share of the compiled call and the Python path's seconds besides."""
    margin = (tiering.PLAIN_MARGIN, tiering.PLAIN_MARGIN_SECONDS)
    compiled = [1e-3] * 8
    assert tiering.faster(compiled, [0.999e-3] * 8)  # (no margin: a program's trial)
    assert not tiering.faster(compiled, [0.999e-3] * 8, margin)
    assert not tiering.faster(compiled, [(1 - tiering.PLAIN_MARGIN) * 1e-3] * 8, margin)
    assert tiering.faster(compiled, [0.9e-3] * 8, margin)


def test_a_plain_trial_ends_once_plain_autograd_is_not_even_ahead(monkeypatch):
    """A trial whose contender must win by a margin (plain autograd's) ends after
    TRIAL_CALLS pairs where the contender is behind, without waiting for TRIAL_SECONDS; one
    ahead runs on until those have passed (a program's trial, without a margin, too)."""
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 4)
    monkeypatch.setattr(tiering, "TRIAL_SECONDS", 1.0)
    margin = (tiering.PLAIN_MARGIN, tiering.PLAIN_MARGIN_SECONDS)

    def complete(margin, compiled, plain, pairs):
        trial = tiering.Trial((None, None, None), 0.0, margin)
        trial.times[0].extend([compiled] * pairs)
        trial.times[1].extend([plain] * pairs)
        return trial.complete()
    assert complete(margin, 1e-3, 2e-3, 4) and not complete(margin, 1e-3, 2e-3, 3)
    assert not complete(margin, 2e-3, 1e-3, 4) and complete(margin, 2e-3, 1e-3, 1000)
    assert not complete((0.0, 0.0), 1e-3, 2e-3, 4)


def test_plain_tier_gives_the_function_the_calls_own_arguments(monkeypatch):
    """The plain tier calls the function with the very objects the call was given, as plain
    autograd would be (not ones rebuilt from their leaves), static arguments in place."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 3600.0)
    seen = []

    def f(params, x, power=2):
        seen.append((params, x))
        return mlp_loss(params, x) ** power

    jf = jit_ps(f, static_argnames="power", tiered=True)
    for power in (1, 2):
        assert_close(jf(PARAMS, X, power=power), f(PARAMS, X, power=power), rtol=0)
        assert seen[-2][0] is PARAMS and seen[-2][1] is X
    assert jf.cache_info()["traces"] == 0 and jf.stats.plain_tier_calls == 2


def test_plain_tier_simple_path_then_compiled(monkeypatch):
    """Positional arrays of a signature in the plain tier go straight to the function (its
    calls timed) until the budget is asked again, which then traces and compiles it."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned=None, call=None: (
        3600.0 if tiering.PLAIN_SECONDS is None else tiering.PLAIN_SECONDS))  # an hour, then as set below
    seen = []

    def f(W, b, x):
        seen.append(x)
        return loss(W, b, x)

    jf = jit_ps(f, tiered=True)
    for k in range(4):
        x = X + k
        assert jf(W, B, x) == f(W, B, x)
        assert seen[-2] is x
    assert jf._simple_untraced and jf.stats.plain_tier_calls == 4 and jf.cache_info()["traces"] == 0
    ((untraced, flat),) = jf._simple_untraced.values()
    assert flat and untraced.calls == 4 and 0 < untraced.spent < untraced.due
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0)  # spent: the next call traces and compiles
    assert_close(jf(W, B, X), loss(W, B, X))
    assert compile_thread.wait(60)
    assert_close(jf(W, B, X), loss(W, B, X), rtol=1e-12)
    assert not jf._simple_untraced
    info = jf.cache_info()
    assert (info["traces"], info["compiles"], info["plain_tier_calls"]) == (1, 1, 5)


@pytest.mark.skipif(calls.Calls is calls._Calls, reason="the C call path (_callpath.c) is not built")
def test_the_plain_tier_s_hot_path_runs_in_c_with_python_s_keys_and_bookkeeping(monkeypatch):
    """_callpath.c's Front takes a plain-tier call itself (_call_python's first hot path, in C):
    its key of the arguments is api._simple_signature's (arrays, None, tuples, boxes, Python
    numbers, another object), so after a signature's first call Python is not entered; each
    call counts into its tiering.Untraced and the function's stats as in Python, one that
    raises too, and raises."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned=None, call=None: 3600.0)
    monkeypatch.setattr(tiering, "trace_budget", lambda call: 3600.0)

    class Holder:
        pass

    def f(W, pair, k, obj, x):
        if k < 0:
            raise ValueError("negative")
        return np.sum(np.tanh(x @ W + pair[0]) * k)

    jf, holder = jit_ps(f, tiered=True), Holder()
    entered = []
    python = jf._call_python
    monkeypatch.setattr(jf, "_call_python", lambda *a, **kw: entered.append(1) or python(*a, **kw))
    for k in range(1, 5):
        assert jf(W, (B, None), float(k), holder, X) == f(W, (B, None), float(k), holder, X)
    assert len(entered) == 1  # the signature's first call, which made its key
    (untraced, flat), = jf._simple_untraced.values()
    assert untraced.calls == 4 and jf.stats.plain_tier_calls == 4 and 0 < untraced.least <= untraced.spent / 4
    with pytest.raises(ValueError, match="negative"):
        jf(W, (B, None), -1.0, holder, X)
    assert untraced.calls == 5 and jf.stats.plain_tier_calls == 5 and len(entered) == 1
    g, want = grad(jf), grad(f)
    for k in range(1, 4):
        assert onp.array_equal(g(W, (B, None), float(k), holder, X), want(W, (B, None), float(k), holder, X))
    assert len(entered) == 2 and jf.stats.plain_tier_calls == 8  # the boxes' signature: its first call
    jf(W, (B, None), 1.0, Holder(), X)  # another object: its own signature, made in Python
    assert len(entered) == 3 and jf.cache_info()["traces"] == 0


class _Sub(onp.ndarray):
    pass


_KINDS = {  # an argument of each kind _simple_signature keys, and how the function reads it
    "0-d array": onp.array(2.0),
    "numpy scalar (by identity)": onp.float64(2.0),
    "int array": onp.arange(3),
    "float32 array": onp.ones(3, onp.float32),
    "unsupported dtype (by identity)": onp.array(["a"], dtype=object),
    "ndarray subclass (by identity)": onp.ones(3).view(_Sub),
    "nested tuples": ((onp.ones(2), (None, onp.ones(1))), 3),
    "bool": True,
    "int": 3,
    "complex": 1j,
    "list (by identity)": [onp.ones(2)],
}


@pytest.mark.skipif(calls.Calls is calls._Calls, reason="the C call path (_callpath.c) is not built")
@pytest.mark.parametrize("kind", _KINDS)
def test_the_plain_tier_in_c_keys_each_kind_of_argument_as_python_does(kind, monkeypatch):
    """Each kind of argument api._simple_signature keys is keyed alike in C: after the
    signature's first call (made in Python) C finds it and takes the calls, with plain
    autograd's results."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned=None, call=None: 3600.0)
    monkeypatch.setattr(tiering, "trace_budget", lambda call: 3600.0)
    arg = _KINDS[kind]

    def f(x, a):
        return np.sum(np.tanh(x)) + len(repr(type(a)))

    jf = jit_ps(f, tiered=True)
    entered = []
    python = jf._call_python
    monkeypatch.setattr(jf, "_call_python", lambda *a, **kw: entered.append(1) or python(*a, **kw))
    for _ in range(3):
        assert jf(X, arg) == f(X, arg)
    assert len(entered) == 1 and jf.stats.plain_tier_calls == 3


def test_plain_tier_hot_path_takes_tuples_none_and_boxes(monkeypatch):
    """The plain tier's hot path also takes a call of arrays in tuples beside None (lifelines
    passes `(T, None)`) and of autograd's boxes (grad(jit_ps(f)), pymanopt's decorator
    stack): after a signature's first call its calls skip the cache's look-up, with plain
    autograd's results, the function given the call's own objects; a call of another kind
    of argument at the same place does not take that signature's path."""
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", None)
    monkeypatch.setattr(tiering, "plain_budget", lambda learned=None, call=None: (
        3600.0 if tiering.PLAIN_SECONDS is None else tiering.PLAIN_SECONDS))
    seen = []

    def f(W, pair, x):
        seen.append(pair)
        scale = 1.0 if pair[1] is None else pair[1]
        return np.sum(np.tanh(x @ W + pair[0]) * scale)

    jf = jit_ps(f, tiered=True)
    looked_up = []
    lookup = jf._lookup
    monkeypatch.setattr(jf, "_lookup", lambda *a, **k: looked_up.append(1) or lookup(*a, **k))
    for k in range(3):
        pair = (B + k, None)
        assert jf(W, pair, X) == f(W, pair, X)
        assert seen[-2] is pair
    assert len(looked_up) == 1 and jf.stats.plain_tier_calls == 3
    assert jf(W, (B, 2.0), X) == f(W, (B, 2.0), X)  # a float where None was: its own signature
    assert len(looked_up) == 2
    untraced = {id(v[0]): v for v in jf._simple_untraced.values()}.values()
    assert sorted(u.calls for u, flat in untraced if not flat) == [1, 3]

    class Holder:  # an object argument: its contents are read by the function, not by the hot path
        scale = 1.0

    def h(W, holder, x):
        return np.sum(np.tanh(x @ W) * holder.scale)

    jh, holder = jit_ps(h, tiered=True), Holder()
    held_lookups = []
    h_lookup = jh._lookup
    monkeypatch.setattr(jh, "_lookup", lambda *a, **k: held_lookups.append(1) or h_lookup(*a, **k))
    for scale in (1.0, 2.0, 3.0):
        holder.scale = scale  # changed in place: plain autograd's answer for what it holds now
        assert jh(W, holder, X) == h(W, holder, X)
    assert len(held_lookups) == 1 and jh.stats.plain_tier_calls == 3

    inner = jit_ps(loss, tiered=True)
    boxed_lookups = []
    inner_lookup = inner._lookup
    monkeypatch.setattr(inner, "_lookup", lambda *a, **k: boxed_lookups.append(1) or inner_lookup(*a, **k))
    g = grad(inner, argnum=(0, 1))
    for k in range(3):
        for got, want in zip(g(W, B + k, X), grad(loss, argnum=(0, 1))(W, B + k, X)):
            assert onp.array_equal(got, want)
    assert len(boxed_lookups) == 1 and inner.stats.plain_tier_calls == 3
    assert inner.cache_info()["traces"] == 0
    monkeypatch.setattr(tiering, "PLAIN_SECONDS", 0.0)  # spent: the next call traces and compiles
    assert_close(jf(W, (B, None), X), f(W, (B, None), X))
    assert_close(g(W, B, X)[0], grad(loss)(W, B, X))
    assert compile_thread.wait(60)
    assert jf.cache_info()["traces"] == 1 and inner.cache_info()["traces"] == 1


def test_a_deterministic_function_keeps_one_program_made_with_xla_s_defaults():
    """deterministic=True: each signature compiles at its first call with XLA's default
    optimisations and keeps that program (no plain tier, no ladder), so its results are the
    same bits at every call and in every run. mici's seeded chains (its eight-schools
    gradient) differed from run to run: the faster programs a signature moves to when its
    calls' time says (LLVM's optimisations: fused multiply-adds) gave other last bits in 149 of
    200 points. Its derivatives under grad(jit_ps(f)) are deterministic too."""
    y, s = onp.array([28., 8., -3., 7., -1., 1., 18., 12.]), onp.array([15., 10., 16., 11., 9., 11., 10., 18.])

    def neg_log_density(q):
        theta = q[0] + np.exp(q[1]) * q[2:]
        return (np.sum(((y - theta) / s) ** 2) / 2 + np.sum(q[2:] ** 2) / 2 + q[0] ** 2 / 50
                + np.log1p((np.exp(q[1]) / 5) ** 2) - q[1])
    points = npr.RandomState(0).randn(50, 10)
    for f in (grad(neg_log_density), lambda q: grad(jit_ps(neg_log_density, deterministic=True))(q)):
        jf = jit_ps(f, deterministic=True, tiered=True)  # deterministic wins over tiered
        first = [jf(q) for q in points]
        for _ in range(20):
            assert all(onp.array_equal(jf(q), a) for q, a in zip(points, first))
        for q, a in zip(points, first):
            assert_close(a, grad(neg_log_density)(q))
    jd = jit_ps(grad(neg_log_density), deterministic=True)
    jd(points[0])
    (entry,) = jd._cache.values()
    assert entry.ladder is None and entry.options is None
    info = jd.cache_info()
    assert (info["plain_tier_calls"], info["numpy_tier_calls"], info["upgrades"]) == (0, 0, 0)
    inner = jit_ps(neg_log_density, deterministic=True)
    grad(inner)(points[0])
    assert inner._derivatives and all(d.deterministic for d in inner._derivatives.values())
    default = jit_ps(grad(neg_log_density), tiered=False)
    default(points[0])
    (entry,) = default._cache.values()
    assert (entry.ladder is not None) == (PLATFORM == "cpu")  # the CPU's default programs may still change
