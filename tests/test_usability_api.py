"""What a newcomer trips over in jit_ps's API: argument names under autograd's wrappers,
introspection that compiles, the advice of the retrace warning, and why a function
recompiles (the compile log of `explain=True` / $AUTOGRAD_XLA_LOG_COMPILES)."""
import logging
import re
import warnings

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import elementwise_grad, grad, hessian, jacobian, value_and_grad
from autograd_xla import ArgumentError, ConcretizationError, JitError, backend, jit_ps
from autograd_xla.api import RETRACE_WARN_AFTER
from helpers import assert_close

rs = onp.random.RandomState(0)


def loss(P, x, n):
    return np.sum(np.tanh(P * x)) * n


def branchy(P, x):
    while np.sum(P) > 0:  # a differentiated value decides 105 steps, past tracing.SPECULATED_BRANCHES
        P = P - 0.01
    return np.sum(P * x)


P, X = rs.randn(3), rs.randn(3)


# ----- 1. argument names under autograd's wrappers --------------------------------------------
@pytest.mark.parametrize("wrap", [lambda f: f, grad, lambda f: grad(f, 1), value_and_grad, elementwise_grad,
                                  jacobian, hessian, lambda f: elementwise_grad(grad(f))],
                         ids=["plain", "grad", "grad_argnum_1", "value_and_grad", "elementwise_grad", "jacobian",
                              "hessian", "nested"])
def test_graph_inputs_are_named_as_the_function_names_them(wrap):
    graph = jit_ps(wrap(loss)).graph(P, X, 2.0)
    assert graph.arg_names == ["P", "x", "n"]
    assert "inputs: v0:f64[3] (P), v1:f64[3] (x), v2:f64[]~ (n)" in str(graph)


def test_grad_argnum_is_differentiated_as_autograd_does():
    jf = jit_ps(grad(loss, 1))
    assert_close(jf(P, X, 2.0), grad(loss, 1)(P, X, 2.0))
    assert jf.graph(P, X, 2.0).arg_names == ["P", "x", "n"]


def test_argument_error_names_the_argument_under_grad():
    masked = onp.ma.array([1.0, 2.0, 3.0], mask=[0, 1, 0])
    messages = []
    for f in (loss, grad(loss)):
        with pytest.raises(ArgumentError) as info:
            jit_ps(f, fallback="error")(P, masked, 2.0)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert messages[1].startswith("argument x: it is a masked array")


def test_concretization_error_names_the_argument_under_grad():
    messages = []
    for f in (branchy, grad(branchy)):
        with pytest.raises(ConcretizationError) as info:
            jit_ps(f, fallback="error")(P, X)
        messages.append(str(info.value).split("\n")[0])
    assert messages[0] == messages[1]
    assert messages[1].endswith("computed from 'P' (f64[3]).")


def test_retrace_warning_names_the_argument_under_grad():
    jf = jit_ps(grad(loss))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, RETRACE_WARN_AFTER + 1):
            jf(onp.ones(n), onp.ones(n), 2.0)
    (w,) = [w for w in caught if "traced for" in str(w.message)]
    assert (f"the latest differed from the previous one in the shape of argument P (float64[{RETRACE_WARN_AFTER - 1}]"
            f" -> float64[{RETRACE_WARN_AFTER}])") in str(w.message)


def test_static_argnames_and_donate_argnums_see_through_grad():
    jf = jit_ps(grad(loss), static_argnames="n")  # n given by position is static too, as for jit_ps(loss)
    assert jf.graph(P, X, 2.0).arg_names == ["P", "x"]
    assert_close(jf(P, X, 2.0), grad(loss)(P, X, 2.0))
    with pytest.raises(ArgumentError, match="below 3, the number of positional parameters"):
        jit_ps(grad(loss), donate_argnums=3)


# ----- 2. introspection traces, never compiles -------------------------------------------------
@pytest.fixture
def no_recent_programs(monkeypatch):
    """Programs freed with their functions: a test counting compiles must not find one an
    earlier test compiled and the backend still holds (backend.RECENT_PROGRAMS)."""
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 0)
    backend.get_backend().release_recent()  # the default platform's


def test_graph_traces_without_compiling_and_the_call_reuses_the_trace(no_recent_programs):
    jf = jit_ps(grad(loss))
    graph = jf.graph(P, X, 2.0)
    info = jf.cache_info()
    assert (info["traces"], info["compiles"], info["compile_seconds"]) == (1, 0, 0.0)
    assert len(graph.eqns) > 0
    assert_close(jf(P, X, 2.0), grad(loss)(P, X, 2.0))
    info = jf.cache_info()
    assert (info["traces"], info["compiles"], info["hits"]) == (1, 1, 1)
    assert jf.graph(P, X, 2.0) is graph


def test_stablehlo_lowers_without_compiling():
    jf = jit_ps(loss)
    text = jf.stablehlo(P, X, 2.0)
    assert text.startswith("module @loss") and "stablehlo.tanh" in text
    info = jf.cache_info()
    assert (info["traces"], info["compiles"]) == (1, 0) and info["lower_seconds"] > 0
    assert_close(jf(P, X, 2.0), loss(P, X, 2.0))
    assert jf.cache_info()["traces"] == 1


def undefined(x):
    return np.sum(undefined_name * x)  # noqa: F821


@pytest.mark.parametrize("method", ["graph", "lower", "stablehlo"])
def test_introspection_raises_the_error_of_the_users_code_as_a_call_does(method):
    """A function that fails in the user's own code (a NameError) has no program to show:
    graph() and lower() raise that error, as calling it does, not a JitError hiding it."""
    with pytest.raises(NameError, match="undefined_name"):
        undefined(X)
    jf = jit_ps(undefined)
    with pytest.raises(NameError, match="undefined_name"):
        getattr(jf, method)(X)
    with pytest.raises(NameError, match="undefined_name"):
        jf(X)
    with pytest.raises(NameError, match="undefined_name"):
        getattr(jf, method)(X)  # after the call too


def test_introspection_of_a_signature_running_plainly_says_why():
    """What stops a signature compiling, when it is not the user's error, is named."""
    with pytest.warns(UserWarning):
        jit_ps(branchy)(P, X)
    with pytest.raises(JitError, match=r"runs as plain autograd for these arguments \(ConcretizationError: "):
        jit_ps(branchy).graph(P, X)


def test_clear_cache_sets_the_counters_back_to_zero():
    """As functools.lru_cache's cache_clear does: the counters count from the clear."""
    jf = jit_ps(loss)
    jf(P, X, 2.0)
    jf(P, X, 3.0)
    info = jf.cache_info()
    assert (info["traces"], info["hits"], info["size"]) == (1, 1, 1) and info["trace_seconds"] > 0
    jf.clear_cache()
    info = jf.cache_info()
    assert all(info[k] == 0 for k in jf.stats.FIELDS) and info["size"] == 0
    assert_close(jf(P, X, 2.0), loss(P, X, 2.0))
    info = jf.cache_info()
    assert (info["traces"], info["hits"], info["size"]) == (1, 0, 1)


# ----- 3. the advice for Python control flow on an int ----------------------------------------
def test_auto_static_warning_says_each_value_compiles_and_how_to_avoid_it():
    def partial_sum(x, n):
        s = 0.0
        for i in range(n):
            s = s + x[i]
        return s

    jf = jit_ps(partial_sum)
    x = onp.arange(10.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in range(1, RETRACE_WARN_AFTER + 1):
            assert jf(x, n) == sum(x[:n])
    (w,) = [w for w in caught if "traced for" in str(w.message)]
    text = str(w.message)
    info = jf.cache_info()
    assert info["traces"] == info["compiles"] == RETRACE_WARN_AFTER  # each value traced and compiled
    assert f"so far {RETRACE_WARN_AFTER} traces, {RETRACE_WARN_AFTER} compiles" in text
    assert "each distinct value costs a trace and a compile" in text
    assert "static_argnums would not change that" in text
    assert "autograd_xla.fori_loop(0, n, body, init) or while_loop" in text and "scan" in text
    assert "trace once" not in text and "static_argnums would do the same" not in text


# ----- 4. the compile log ---------------------------------------------------------------------
def _log(caplog):
    out = [r.getMessage() for r in caplog.records if r.name == "autograd_xla"]
    caplog.clear()
    return out


def test_explain_logs_each_trace_and_compile_with_its_reason(caplog, no_recent_programs):
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    jf = jit_ps(loss, explain=True)
    jf(P, X, 2.0)
    traced, compiled = _log(caplog)
    assert re.fullmatch(r"<jit_ps loss> traced in [0-9.e-]+ s \(\d+ primitive calls\) for \(P: float64\[3\], "
                        r"x: float64\[3\], n: Python float\): the first signature", traced), traced
    assert re.fullmatch(r"<jit_ps loss> compiled in [0-9.e-]+ s \(lowering took [0-9.e-]+ s\) for \(P: "
                        r"float64\[3\], x: float64\[3\], n: Python float\)", compiled), compiled
    jf(P, X, 3.0)  # a hit: nothing to report
    assert _log(caplog) == []
    jf(onp.ones(4), onp.ones(4), 2.0)
    assert _log(caplog)[0].endswith("the closest cached signature differs in the shape of argument P "
                                    "(float64[3] -> float64[4])")
    jf(P.astype(onp.float32), X, 2.0)
    assert _log(caplog)[0].endswith("the closest cached signature (of 2) differs in the dtype of argument P "
                                    "(float64[3] -> float32[3])")
    jf(P, X, 2)
    assert _log(caplog)[0].endswith("differs in the type of argument n (Python float -> Python int)")
    jf([P], X, 2.0)
    assert _log(caplog)[0].endswith("differs in the structure of argument P (float64[3] -> [*])")


def reduce(x, axis=None, mode="sum"):
    return np.sum(x, axis=axis) if mode == "sum" else np.max(x, axis=axis)


@pytest.mark.parametrize("static_argnames, calls, reason", [
    ("mode", [dict(mode="sum"), dict(mode="max")], "the value of static argument 'mode' ('sum' -> 'max')"),
    ("axis", [dict(axis=None), dict(axis=0)], "the value of static argument 'axis' (None -> 0)"),
    ((), [dict(axis=None), dict(axis=0)], "the value of argument axis (None -> Python int)"),
    ((), [dict(), dict(axis=0)], "the arguments given (axis given now)"),
    ("mode", [dict(mode="sum"), dict()], "the value of static argument 'mode' ('sum' -> not given)"),
], ids=["static_value", "static_none", "none_to_value", "given", "not_given"])
def test_explain_names_the_keyword_argument_whose_value_changed(caplog, static_argnames, calls, reason):
    """A new value of a keyword argument, static or None before, is reported as that, not as a
    change of "argument structure"."""
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    jf = jit_ps(reduce, static_argnames=static_argnames, explain=True)
    x = rs.randn(3, 2)
    for kwargs in calls:
        assert_close(jf(x, **kwargs), reduce(x, **kwargs))
    traced = [m for m in _log(caplog) if " traced in " in m]
    assert traced[-1].endswith(f"the closest cached signature differs in {reason}"), traced[-1]


def test_explain_says_an_argument_moved_between_position_and_keyword(caplog):
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    jf = jit_ps(reduce, static_argnums=2, explain=True)
    x = rs.randn(3, 2)
    jf(x, None, "max")
    jf(x, None, mode="max")
    assert _log(caplog)[-2].endswith("differs in how the arguments are passed (by position or by keyword)")


DATA = rs.randn(10, 256)  # rows above context.LIFT_BYTES: parameters of the program, not constants


def row_loss(w, i):
    return np.sum(DATA[i] * w)  # i indexes a closed-over array: made static, the row becomes data


def test_explain_names_static_values_and_reused_compiles(caplog):
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    jf = jit_ps(row_loss, explain=True)
    w = rs.randn(256)
    assert_close(jf(w, 1), row_loss(w, 1))
    needs, traced, compiled = _log(caplog)
    assert needs == ("<jit_ps row_loss>: the trace needs the value of i (used where a concrete value is needed): "
                     "tracing again with that value static")
    assert "for (w: float64[256], i: static 1)" in traced and "compiled in" in compiled
    assert_close(jf(w, 2), row_loss(w, 2))
    traced, compiled = _log(caplog)
    assert traced.endswith("differs in the value of i (1 -> 2), an argument used as a static value")
    assert compiled.startswith("<jit_ps row_loss> not compiled: its program is identical to one compiled before")
    assert jf.cache_info()["compiles"] == 1

    js = jit_ps(lambda x, k: x ** k, static_argnums=1, explain=True)
    js(w, 2)
    js(w, 3)
    assert "differs in the value of static argument 'k' (2 -> 3)" in _log(caplog)[-2]


def test_explain_follows_derivatives_and_plain_fallbacks(caplog):
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    jf = jit_ps(lambda x: np.sum(np.sin(x)), explain=True)
    assert_close(grad(jf)(X), onp.cos(X))
    assert any(m.startswith("<jit_ps value_vjp_") and " traced in " in m for m in _log(caplog))  # (autodiff.jit_call_ahead)
    with pytest.warns(UserWarning):
        jit_ps(branchy, explain=True)(P, X)
    assert any("runs as plain autograd for this signature: ConcretizationError" in m for m in _log(caplog))


def test_log_compiles_environment_variable(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="autograd_xla")
    monkeypatch.delenv("AUTOGRAD_XLA_LOG_COMPILES", raising=False)
    jit_ps(loss)(P, X, 2.0)
    assert _log(caplog) == []
    monkeypatch.setenv("AUTOGRAD_XLA_LOG_COMPILES", "1")
    jit_ps(loss)(P, X, 2.0)
    assert len(_log(caplog)) == 2
    jit_ps(loss, explain=False)(P, X, 2.0)  # an explicit False wins
    assert _log(caplog) == []
    monkeypatch.setenv("AUTOGRAD_XLA_LOG_COMPILES", "0")
    jit_ps(loss)(P, X, 2.0)
    assert _log(caplog) == []
