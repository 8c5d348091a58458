"""The user's line, wherever it is reported: a traced value stored into a numpy array
(tracing.store_error), the equations of autograd's backward pass (errors.user_frame below
autograd.core.backward_pass, tracing._box_tracer's ForwardVJP), and XLA's metadata of
each op (the MLIR locations lowering.lower emits, hlo.Locations).

Lines are named by markers (`# @name`) in this file, so that the expectations are exact."""
import re
import warnings

import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, make_jvp
from autograd.extend import defvjp, primitive
from autograd.numpy.numpy_boxes import ArrayBox

from autograd_xla import (CompileError, ConcretizationError, FallbackWarning, fori_loop, hlo, jit_ps, lowering,
                          register_translation_rule, tracing)
from autograd_xla.core import prim_name
from helpers import assert_close

with open(__file__) as _f:
    LINE = {m.group(1): n for n, text in enumerate(_f, 1) for m in [re.search(r"# @(\w+)$", text)] if m}

X = onp.array([0.5, -1.0, 2.0])


def where(eqn):
    return (eqn.source.filename, eqn.source.lineno) if eqn.source is not None else None


# ----- A. a traced value stored into a numpy array -------------------------------------------
def store_element(x):
    y = onp.zeros(3)
    y[0] = x[0]  # @store_element
    return np.sum(y * x)


def store_slice(x):
    y = onp.zeros(3)
    y[:2] = x[:2]  # @store_slice
    return np.sum(y * x)


def store_int(x):
    y = onp.zeros(3, dtype=int)
    y[0] = x[0]  # @store_int
    return np.sum(y * x)


def store_augmented(x):
    y = onp.zeros(3)
    y[1] += x[0]  # @store_augmented
    return np.sum(y * x)


STORES = [(store_element, "f64[]"), (store_slice, "f64[2]"), (store_int, "f64[]"), (store_augmented, "f64[]")]
STORE_MESSAGE = ("Storing a value into a numpy array (`y[...] = value`, y a numpy array) needs a concrete value, but "
                 "this is a traced array {aval} computed from 'x' (f64[3]).\n"
                 'File "{file}", line {line}, in {name}\n'
                 "    {text}\n"
                 "A numpy array holds data, and inside jit_ps only shapes and dtypes are known. Make y a traced array: "
                 "create it from a traced value with autograd.numpy (y = np.zeros_like(x)), so that `y[...] = value` "
                 "is recorded; or build the array from the values (np.stack, np.concatenate, np.array([...]), "
                 "np.where), which grad can also differentiate.")


def store_message(f, aval):
    line = LINE[f.__name__]
    text = open(__file__).read().splitlines()[line - 1].strip()
    return STORE_MESSAGE.format(aval=aval, file=__file__, line=line, name=f.__name__, text=text)


@pytest.mark.parametrize("f, aval", STORES, ids=[f.__name__ for f, _ in STORES])
def test_storing_a_traced_value_into_a_numpy_array_says_so(f, aval):
    # numpy converts the value with float() / int() / np.asarray (and reports a failed float()
    # of a sequence-like value as "setting an array element with a sequence"): the Tracer, asked
    # from the user's store, says what happened, where, and what to write instead
    with pytest.raises(ConcretizationError) as info:
        jit_ps(f, fallback="error")(X)
    assert str(info.value) == store_message(f, aval)
    assert (info.value.source.filename, info.value.source.lineno) == (__file__, LINE[f.__name__])
    assert info.value.static_candidates == ()


@pytest.mark.parametrize("f, aval", STORES, ids=[f.__name__ for f, _ in STORES])
def test_storing_a_traced_value_runs_plainly_with_the_cause_named(f, aval):
    with pytest.warns(FallbackWarning) as record:
        out = jit_ps(f)(X)
    assert_close(out, f(X))
    (w,) = [w for w in record if w.category is FallbackWarning]
    assert str(w.message) == (f"<jit_ps {f.__name__}> runs as plain autograd for this signature: "
                              f"{store_message(f, aval)}\njit_ps(f, fallback='error') makes this an error.")


class Holder:
    buf = onp.zeros(3)


def store_into_out(x):
    out = onp.zeros(3)
    out[0] = x[0]
    return np.sum(out * x)


def store_over_two_lines(x):
    Holder.buf[
        1:] = x[1:]
    return np.sum(x)


def test_the_array_stored_into_is_named_as_the_user_wrote_it():
    """The message names the array as the store writes it (tracing.stored_array reads the
    store's source span), not a generic `y`: a local, and an attribute over two lines."""
    with pytest.raises(ConcretizationError) as info:
        jit_ps(store_into_out, fallback="error")(X)
    assert str(info.value).startswith("Storing a value into a numpy array (`out[...] = value`, out a numpy array)")
    assert "Make out a traced array" in str(info.value) and "(out = np.zeros_like(x))" in str(info.value)
    with pytest.raises(ConcretizationError, match=r"\(`Holder\.buf\[\.\.\.\] = value`, Holder\.buf a numpy"):
        jit_ps(store_over_two_lines, fallback="error")(X)


def test_the_remedy_a_traced_array_compiles():
    def f(x):
        y = np.zeros_like(x)
        y[0] = x[0]
        return np.sum(y * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(jit_ps(f, fallback="error")(X), store_element(X))


def test_storing_a_value_being_differentiated_fails_in_both_paths_with_the_remedy():
    # plain autograd cannot do this either (the numpy array would keep a float, not the box):
    # fallback="error" raises a ConcretizationError; the default runs it plainly, where numpy's
    # own error is raised, carrying the same note
    with pytest.raises(ConcretizationError) as info:
        jit_ps(grad(store_element), fallback="error")(X)
    line = LINE["store_element"]
    assert str(info.value) == (
        "Storing a value being differentiated into a numpy array (`y[...] = value`, y a numpy array) needs a "
        "concrete value, but this is a traced array f64[] computed from 'x' (f64[3]).\n"
        f'File "{__file__}", line {line}, in store_element\n    y[0] = x[0]  # @store_element')
    assert info.value.__notes__ == [tracing.ASSIGNMENT_NOT_DIFFERENTIABLE]
    with pytest.raises(ValueError, match="setting an array element with a sequence") as plain:
        grad(store_element)(X)
    assert not getattr(plain.value, "__notes__", None)
    with pytest.raises(ValueError, match="setting an array element with a sequence") as info:
        jit_ps(grad(store_element))(X)
    assert info.value.__notes__ == [tracing.ASSIGNMENT_NOT_DIFFERENTIABLE]
    assert info.value.__traceback__.tb_next is not None  # raised by the plain run of the user's code


def test_the_remedies_for_a_value_being_differentiated_compile():
    for f in (lambda x: np.sum(np.stack([x[0], 0.0, 0.0]) * x),
              lambda x: np.sum(np.array([x[0], 0.0, 0.0]) * x),
              lambda x: np.sum(np.concatenate([x[:1], np.zeros(2)]) * x),
              lambda x: np.sum(np.where(np.arange(3) == 0, x, onp.zeros(3)) * x)):
        assert_close(jit_ps(grad(f), fallback="error")(X), grad(f)(X))
        assert_close(jit_ps(grad(f), fallback="error")(X), onp.array([2 * X[0], 0.0, 0.0]))


def test_box_conversions_exist_only_while_tracing_and_keep_their_type_error():
    assert not hasattr(ArrayBox, "__float__") and not hasattr(ArrayBox, "__int__")

    def f(x):
        return float(np.sum(x)) * x[0]  # not a store: a TypeError, as plain autograd raises
    with pytest.raises(TypeError):
        grad(f)(X)
    with pytest.raises(TypeError, match="float\\(\\) argument must be a real number, not 'ArrayBox'"):
        jit_ps(grad(f), fallback="error")(X)
    assert not hasattr(ArrayBox, "__float__") and not hasattr(ArrayBox, "__complex__")


# ----- B. the backward pass, on the lines of the forward operations ------------------------------
def loss(w):
    h = np.tanh(w)  # @tanh
    s = np.sin(h) * w  # @sin
    return np.sum(s ** 2)  # @sum


def test_backward_equations_point_at_the_forward_line_they_differentiate():
    graph = jit_ps(grad(loss)).graph(X)  # @caller
    lines = {LINE["tanh"], LINE["sin"], LINE["sum"]}
    assert {where(e) for e in graph.eqns} == {(__file__, n) for n in lines}
    names = [(prim_name(e.prim), e.source.lineno) for e in graph.eqns]
    tanh, sin, total = LINE["tanh"], LINE["sin"], LINE["sum"]
    assert names == [
        ("tanh", tanh), ("sin", sin), ("multiply", sin), ("power", total), ("sum", total),     # forward
        ("full", total),                                                                      # the seed, 1.0
        ("reshape", total), ("broadcast_to", total), ("multiply", total), ("power", total),   # VJP of sum, **
        ("multiply", total),
        ("multiply", sin), ("multiply", sin), ("cos", sin), ("multiply", sin),                # of * and sin
        ("cosh", tanh), ("power", tanh), ("divide", tanh),                                    # of tanh
        ("add", tanh)]                       # w's two cotangents added, as tanh's reaches it


@primitive
def scaled(x):
    return 3.0 * x  # @scaled_body


defvjp(scaled, lambda ans, x: lambda g: g * 3.0)  # @user_vjp


def test_a_user_defined_vjp_is_the_users_line():
    def f(w):
        return np.sum(scaled(np.tanh(w)))  # @scaled_call
    graph = jit_ps(grad(f)).graph(X)
    by_prim = {}
    for e in graph.eqns:
        by_prim.setdefault(prim_name(e.prim), set()).add(e.source.lineno)
    assert by_prim["cosh"] == {LINE["scaled_call"]}           # autograd's VJP of tanh
    assert LINE["user_vjp"] in by_prim["multiply"]            # the user's own VJP code, line and all
    assert {e.source.lineno for e in graph.eqns} == {LINE["scaled_call"], LINE["user_vjp"], LINE["scaled_body"]}


def test_forward_mode_equations_are_on_the_forward_lines():
    def f(w):
        return make_jvp(loss)(w)(onp.ones(3))[1]
    graph = jit_ps(f, fallback="error").graph(X)
    assert {e.source.lineno for e in graph.eqns} == {LINE["tanh"], LINE["sin"], LINE["sum"]}
    assert {prim_name(e.prim): e.source.lineno for e in graph.eqns}["cosh"] == LINE["tanh"]


def looped(w):
    def body(i, c):
        return np.sin(c) * w  # @body
    c = fori_loop(0, 3, body, w)  # @fori
    return np.sum(c ** 2)  # @looped_sum


def test_loop_bodies_replayed_for_the_gradient_keep_the_body_line():
    graph = jit_ps(grad(looped), fallback="error").graph(X)
    body_sources = set()
    for e in graph.eqns:
        for sub in getattr(e.prim, "subgraphs", lambda e: ())(e):
            body_sources |= {(prim_name(s.prim), s.source.lineno) for s in sub.eqns}
    assert ("sin", LINE["body"]) in body_sources and ("cos", LINE["body"]) in body_sources
    assert {n for _, n in body_sources} <= {LINE["body"], LINE["fori"]}
    assert {e.source.lineno for e in graph.eqns} <= {LINE["fori"], LINE["looped_sum"]}


# ----- C. XLA's metadata names the user's file, line and primitive ---------------------------------
def small(x):
    return np.sum(np.tanh(x) * 2.0)  # @small


def test_optimized_hlo_names_the_users_file_and_line():
    text = jit_ps(small).optimized_hlo(X)
    tanh = [line for line in text.splitlines() if " tanh(" in line]
    assert tanh and all(f'op_name="tanh" source_file="{__file__}" source_line={LINE["small"]} ' in line
                        for line in tanh), text
    assert 'source_file="-"' not in text


def test_backward_ops_in_the_optimized_hlo_name_the_forward_line():
    text = jit_ps(grad(loss)).optimized_hlo(X)
    cosh = [line for line in text.splitlines() if 'op_name="cosh"' in line]
    assert cosh and all(f'source_file="{__file__}" source_line={LINE["tanh"]} ' in line for line in cosh), text


def test_module_text_locations():
    locations = hlo.Locations()
    b = hlo.Builder()
    x = hlo.Value("%arg0", (2,), onp.float64)
    y = b.unary("tanh", x)
    b.location = locations.alias("tanh", "/a/b.py", 7)
    z = b.unary("sine", y)
    b.location = locations.alias("sum", "/a/b.py", 7)
    s = b.reduce([z], [b.constant(onp.float64(0))], [0], lambda r, acc, e: r.binary("add", acc, e))[0]
    b.location = locations.alias("tanh", "/a/b.py", 7)
    assert b.location == "#a"
    text = hlo.module_text("m", [x], b.lines, [s], locations=locations)
    assert text.splitlines()[2:] == [
        '    %0 = "stablehlo.tanh"(%arg0) : (tensor<2xf64>) -> tensor<2xf64>',
        '    %1 = "stablehlo.sine"(%0) : (tensor<2xf64>) -> tensor<2xf64> loc(#a)',
        '    %2 = "stablehlo.constant"() {value = dense<"0x0000000000000000"> : tensor<f64>} : () -> tensor<f64> '
        'loc(#b)',
        '    %6 = "stablehlo.reduce"(%1, %2) ({',
        '      ^bb0(%a3: tensor<f64>, %a4: tensor<f64>):',
        # the region's ops have their op's location too
        '        %5 = "stablehlo.add"(%a3, %a4) : (tensor<f64>, tensor<f64>) -> tensor<f64> loc(#b)',
        '        "stablehlo.return"(%5) : (tensor<f64>) -> ()',
        '    }) {dimensions = array<i64: 0>} : (tensor<2xf64>, tensor<f64>) -> tensor<f64> loc(#b)',
        '    "func.return"(%6) : (tensor<f64>) -> ()',
        '  }',
        '}',
        '#L0 = loc("/a/b.py":7:0)',
        '#a = loc(fused["tanh", #L0])',
        '#b = loc(fused["sum", #L0])']


def test_a_module_without_its_source_lines_keeps_its_op_names():
    """What the compile caches key on (hlo.without_source_lines): moving the lines changes
    nothing, renaming an op or regrouping ops by line does."""
    def module(*aliases):
        locations = hlo.Locations()
        b = hlo.Builder()
        x = hlo.Value("%arg0", (2,), onp.float64)
        y = x
        for name, filename, line in aliases:
            b.location = locations.alias(name, filename, line)
            y = b.unary(name, y)
        return hlo.module_text("m", [x], b.lines, [y], locations=locations)

    here = module(("tanh", "/a/b.py", 7), ("sine", "/a/b.py", 8))
    moved = module(("tanh", "/c/d.py", 70), ("sine", "/c/d.py", 9))
    assert here != moved and "/a/b.py" in here
    assert hlo.without_source_lines(here) == hlo.without_source_lines(moved)
    assert "/a/b.py" not in hlo.without_source_lines(here) and '"tanh"' in hlo.without_source_lines(here)
    for other in (module(("tanh", "/a/b.py", 7), ("sine", "/a/b.py", 7)),  # one line for both
                  module(("tanh", "/a/b.py", 7), ("cosine", "/a/b.py", 8))):
        assert hlo.without_source_lines(other) != hlo.without_source_lines(here)
    plain = hlo.module_text("m", [hlo.Value("%arg0", (2,), onp.float64)], [], [hlo.Value("%arg0", (2,), onp.float64)])
    assert hlo.without_source_lines(plain) == plain


def test_lowering_without_locations_is_the_same_module_without_them():
    graph = jit_ps(grad(loss)).graph(X)
    located = lowering.lower(graph).text
    plain = lowering.lower(graph, locations=False).text
    assert " loc(" not in plain and "#" not in plain.replace("#stablehlo", "")
    assert re.sub(r" loc\(#\w+\)", "", located.split("\n}\n")[0]) == plain.split("\n}\n")[0]
    assert len(located.split("\n}\n")[0].splitlines()) == len(plain.splitlines()) - 1  # same lines: XLA's -:LINE


@primitive
def _halved(x):
    return 0.5 * x


# a deliberately wrong rule (a transposed result type for an elementwise op), which XLA rejects
register_translation_rule(_halved, lambda ctx, x: ctx.op1("stablehlo.multiply", [x, x], tuple(reversed(x.shape)),
                                                          x.dtype))


def test_xla_names_the_users_line_of_a_rejected_op_and_the_error_its_primitive():
    def f(x):
        y = np.tanh(x)
        return np.sum(_halved(y))  # @halved
    with pytest.raises(CompileError) as info:
        jit_ps(f, fallback="error")(onp.ones((2, 3)))
    assert f"{__file__}:{LINE['halved']}:0: error: 'stablehlo.multiply' op" in info.value.xla_message
    assert info.value.primitive is _halved.fun
    assert (info.value.source.filename, info.value.source.lineno) == (__file__, LINE["halved"])
    assert str(info.value).startswith(f"XLA rejected the program compiled for <jit_ps {f.__qualname__}>: "
                                      "'stablehlo.multiply' op requires compatible types for all operands and results\n"
                                      "The operation was emitted for primitive '_halved', traced from\n"
                                      f'File "{__file__}", line {LINE["halved"]}, in f\n')
