"""tracing.py: how autograd's primitives are intercepted (only while a trace is active,
only in the tracing thread), what a trace records, and what its errors say. Graphs are
also lowered and run, and compared with numpy and plain autograd."""
import operator
import threading

import autograd.numpy as anp
import numpy as onp
import pytest
from autograd import grad
from autograd.extend import defvjp, primitive
from autograd.tracer import trace_primitives_map

from autograd_xla import backend, jit_ps, lowering, register_translation_rule, registry, tracing
from autograd_xla.core import Aval, prim_name
from autograd_xla.errors import ConcretizationError, TracerLeakError, UnsupportedPrimitiveError

F3 = Aval((3,), onp.float64)
CPU = backend.get_backend("cpu")


def f_raw_cell(wrapper):
    return wrapper.__closure__[wrapper.__code__.co_freevars.index("f_raw")]


TANH_CELL = f_raw_cell(anp.tanh)


def intercepted():
    return TANH_CELL.cell_contents is not onp.tanh


def swapped_cells():
    """autograd primitives (every one autograd knows of) whose f_raw cell is not the raw function."""
    return [raw for raw, wrapper in list(trace_primitives_map.items())
            if "f_raw" in getattr(getattr(wrapper, "__code__", None), "co_freevars", ())
            and f_raw_cell(wrapper).cell_contents is not raw]


def prims(graph):
    return [prim_name(e.prim) for e in graph.eqns]


def run_graph(graph, *args):
    lowered = lowering.lower(graph)
    program, _ = CPU.compile(lowered.text)
    exe = backend.Executable(CPU, program, lowered.in_avals, lowered.out_avals, lowered.consts, lowered.text,
                             sources=lowered.sources)
    return exe(list(args))


def test_cells_are_swapped_only_while_tracing():
    assert not intercepted() and not tracing.is_tracing() and swapped_cells() == []
    seen = []

    def f(x):
        seen.append((intercepted(), getattr(TANH_CELL.cell_contents, "__wrapped_raw__", None)))
        return anp.tanh(x)
    graph, _ = tracing.trace_function(f, [F3])
    assert seen == [(True, onp.tanh)]
    assert not intercepted() and TANH_CELL.cell_contents is onp.tanh and not tracing.is_tracing()
    assert swapped_cells() == []
    assert prims(graph) == ["tanh"]


def test_cells_are_restored_after_an_exception_in_the_traced_function():
    shape_before = anp.shape

    def f(x):
        anp.tanh(x)
        raise KeyError("boom")
    with pytest.raises(KeyError, match="boom"):
        tracing.trace_function(f, [F3])
    assert not intercepted() and not tracing.is_tracing() and anp.shape is shape_before
    assert swapped_cells() == []
    x = onp.array([0.5, -1.0, 2.0])
    onp.testing.assert_array_equal(anp.tanh(x), onp.tanh(x))  # plain autograd works as before
    onp.testing.assert_allclose(grad(lambda x: anp.sum(anp.tanh(x)))(x), 1 - onp.tanh(x) ** 2, rtol=1e-14)


def test_nested_traces():
    inner_graphs = []

    def outer(x):
        y = anp.sin(x)
        inner, _ = tracing.trace_function(lambda z: anp.exp(z) * y, [F3], parent=tracing.current_trace())
        inner_graphs.append(inner)
        assert intercepted()  # the outer trace is still active
        unrelated, _ = tracing.trace_function(lambda z: anp.cos(z), [F3])
        inner_graphs.append(unrelated)
        return anp.tanh(y)
    graph, _ = tracing.trace_function(outer, [F3])
    assert not intercepted()
    inner, unrelated = inner_graphs
    assert prims(graph) == ["sin", "tanh"]  # the inner traces' equations are their own
    assert prims(inner) == ["exp", "multiply"] and len(inner.captured) == 1  # y, from the outer trace
    assert inner.captured[0][0].aval == F3 and prims(unrelated) == ["cos"] and not unrelated.captured
    x = onp.array([0.1, 1.0, -2.0])
    onp.testing.assert_allclose(run_graph(graph, x)[0], onp.tanh(onp.sin(x)), rtol=1e-15)


def test_a_trace_leaves_other_threads_alone():
    started, release, errors, graphs = threading.Event(), threading.Event(), [], []

    def slow(x):
        y = anp.tanh(x)
        started.set()
        release.wait(20)
        return anp.sin(y)

    def tracer_thread():
        try:
            graphs.append(tracing.trace_function(slow, [F3])[0])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            started.set()
    t = threading.Thread(target=tracer_thread)
    t.start()
    try:
        assert started.wait(20)
        assert intercepted()  # the cells are swapped for everyone while the other thread traces
        assert not tracing.is_tracing() and tracing.current_trace() is None  # but no trace is this thread's
        x = onp.array([0.3, -1.2, 2.5])
        for _ in range(3):
            onp.testing.assert_array_equal(anp.tanh(x), onp.tanh(x))
            g = grad(lambda x: anp.sum(anp.sin(anp.tanh(x))))(x)
            onp.testing.assert_allclose(g, onp.cos(onp.tanh(x)) * (1 - onp.tanh(x) ** 2), rtol=1e-14)
            g = grad(lambda x: anp.sum(x[1:] ** 2))(x)  # indexing's VJP starts from vspace zeros
            onp.testing.assert_allclose(g, [0.0, 2 * x[1], 2 * x[2]], rtol=1e-15)
            assert type(anp.sum(x)) is onp.float64
    finally:
        release.set()
        t.join(20)
    assert not errors, errors
    assert prims(graphs[0]) == ["tanh", "sin"]  # this thread's calls were not recorded
    assert not intercepted()


def test_a_primitive_created_while_another_thread_traces_is_found():
    started, release = threading.Event(), threading.Event()

    def slow(x):
        started.set()
        release.wait(20)
        return x
    t = threading.Thread(target=lambda: tracing.trace_function(slow, [F3]))
    t.start()
    try:
        assert started.wait(20)

        @primitive
        def opaque_double(x):
            return onp.asarray(x) * 2.0  # needs data: only its rule can trace it
        register_translation_rule(opaque_double, lambda ctx, x: ctx.binary("add", x, x))
        graph, _ = tracing.trace_function(lambda x: opaque_double(x), [F3])
    finally:
        release.set()
        t.join(20)
    assert prims(graph) == ["opaque_double"]


def test_a_raw_function_wrapped_twice_is_intercepted_through_its_first_wrapper_too():
    def halved(x):
        return onp.asarray(x) / 2.0  # needs data: only its rule can trace it
    register_translation_rule(halved, lambda ctx, x: ctx.binary("multiply", x, ctx.full(x.shape, 0.5, x.dtype)))
    first = primitive(halved)
    second = primitive(halved)  # autograd's map now names this wrapper alone
    assert trace_primitives_map[halved] is second
    for wrapper in (first, second):
        defvjp(wrapper, lambda ans, x: lambda g: g / 2.0)
    loss = lambda x: anp.sum(anp.sin(first(x)) + second(x))
    x = onp.array([0.5, -1.0, 1.5])
    graph, _ = tracing.trace_function(lambda x: anp.sin(first(x)), [F3])
    assert prims(graph) == ["halved", "sin"]
    onp.testing.assert_allclose(jit_ps(grad(loss), fallback="error")(x), grad(loss)(x), rtol=1e-15)


def test_an_interceptor_registered_after_its_primitive_was_found_is_used():
    """impurity.py registers numpy.random's interceptors at its import: a trace made before
    it (tracing.trace_function, without jit_ps) found autograd.numpy.random's wrappers first,
    and their draws were then frozen into every later trace."""
    def shifted(x):
        return x + 1.0
    wrapped = primitive(shifted)
    tracing.trace_function(lambda x: wrapped(x), [F3])  # found: intercepted as any primitive
    seen = []

    def interceptor(*args, **kwargs):
        seen.append(len(args))
        return shifted(*args, **kwargs)
    registry.register_interceptor(shifted, interceptor)
    graph, _ = tracing.trace_function(lambda x: wrapped(x), [F3])
    assert seen == [1] and prims(graph) == ["add"]
    assert not intercepted()


def test_a_primitive_defined_after_import_is_found_and_recorded():
    @primitive
    def scaled_cube(x, k):
        return k * onp.asarray(x) ** 3  # asarray: without its rule it cannot be traced
    defvjp(scaled_cube, lambda ans, x, k: lambda g: g * 3 * k * x ** 2)

    def rule(ctx, x, k):
        x = ctx.asvalue(x)
        return ctx.binary("multiply", ctx.binary("multiply", x, ctx.binary("multiply", x, x)),
                          ctx.full(x.shape, k, x.dtype))
    # intercepted (hence named), but with no rule: its raw code needs data
    with pytest.raises(UnsupportedPrimitiveError, match="no translation rule for 'scaled_cube'"):
        tracing.trace_function(lambda x: scaled_cube(x, 2.0), [F3])
    register_translation_rule(scaled_cube, rule)
    graph, _ = tracing.trace_function(lambda x: anp.sin(scaled_cube(x, 2.0)), [F3])
    assert prims(graph) == ["scaled_cube", "sin"] and graph.eqns[0].args[1] == 2.0
    x = onp.array([0.5, -1.0, 1.5])
    onp.testing.assert_allclose(run_graph(graph, x)[0], onp.sin(2 * x ** 3), rtol=1e-14)
    loss = lambda x: anp.sum(anp.sin(scaled_cube(x, 2.0)))
    onp.testing.assert_allclose(jit_ps(grad(loss))(x), grad(loss)(x), rtol=1e-14)
    onp.testing.assert_allclose(grad(loss)(x), onp.cos(2 * x ** 3) * 6 * x ** 2, rtol=1e-14)


def test_metadata_queries_record_no_equation():
    answers = []

    def f(x, w):
        answers.extend([onp.shape(x), onp.ndim(x), onp.size(x), onp.size(x, 1), anp.shape(x), anp.ndim(x),
                        onp.result_type(x, onp.float32), onp.result_type(w, onp.float32),
                        onp.result_type(w, onp.int8), onp.iscomplexobj(x), onp.isrealobj(x)])
        return x
    graph, _ = tracing.trace_function(f, [Aval((2, 5), onp.float32), Aval((), onp.float64, weak_type=True)])
    assert graph.eqns == []
    assert answers == [(2, 5), 2, 10, 5, (2, 5), 2, onp.dtype(onp.float32), onp.result_type(0.0, onp.float32),
                       onp.result_type(0.0, onp.int8), False, True]


def small(x, y):
    return anp.sum(anp.tanh(x) * y, axis=0)


# label, function, input avals, the primitives it records
GRAPHS = [
    ("tanh * y summed", small, [Aval((2, 3), onp.float64), Aval((3,), onp.float64)], ["tanh", "multiply", "sum"]),
    ("matmul and exp", lambda a, b: anp.exp(anp.dot(a, b)), [Aval((2, 3), onp.float32), Aval((3, 4), onp.float32)],
     ["dot", "exp"]),
    ("reshape, transpose", lambda a: anp.transpose(anp.reshape(a, (3, 2))) + 1.0, [Aval((6,), onp.float64)],
     ["reshape", "transpose", "add"]),
    ("comparison and where", lambda a, b: anp.where(a > b, a, b), [F3, F3], ["greater", "where"]),
    ("int arithmetic", lambda n: n * 3 - 1, [Aval((4,), onp.int32)], ["multiply", "subtract"]),
]


@pytest.mark.parametrize("label,fun,avals,expected", GRAPHS, ids=[g[0] for g in GRAPHS])
def test_graph_lists_the_primitives_and_computes_like_numpy(label, fun, avals, expected):
    graph, out_tree = tracing.trace_function(fun, avals)
    assert prims(graph) == expected, label
    args = [onp.random.RandomState(k).uniform(-2, 2, a.shape).astype(a.dtype) for k, a in enumerate(avals)]
    want = fun(*args)
    assert graph.out_avals == [Aval(onp.shape(want), onp.asarray(want).dtype)], label
    got = run_graph(graph, *args)[0]
    assert onp.asarray(got).dtype == onp.asarray(want).dtype
    onp.testing.assert_allclose(got, want, rtol=1e-6 if onp.asarray(want).dtype == onp.float32 else 1e-14)


def test_tracing_grad_records_the_backward_pass():
    loss = lambda x, y: anp.sum(small(x, y) ** 2)
    graph, _ = tracing.trace_function(grad(loss), [Aval((2, 3), onp.float64), Aval((3,), onp.float64)])
    assert {"tanh", "multiply", "sum"} <= set(prims(graph)) and len(graph.eqns) > 5
    x, y = onp.random.RandomState(0).standard_normal((2, 3)), onp.array([0.5, -1.0, 2.0])
    expected = 2 * (onp.tanh(x) * y).sum(0) * y * (1 - onp.tanh(x) ** 2)  # closed form
    onp.testing.assert_allclose(run_graph(graph, x, y)[0], expected, rtol=1e-13)
    onp.testing.assert_allclose(grad(loss)(x, y), expected, rtol=1e-13)


CONCRETE = [
    ("bool of a float array", lambda w: 1.0 if anp.sum(w) > 0 else 0.0, [F3], "bool(x)", ("'weights' (f64[3])",), ()),
    ("float of a sum of two args", lambda w, n: float(anp.sum(w) + n), [F3, Aval((), onp.int64)], "float(x)",
     ("'weights' (f64[3])", "'n' (i64[])"), ()),
    ("int of an int argument", lambda w, n: anp.ones(int(n)) * w[0], [F3, Aval((), onp.int64)], "int(x)",
     ("'n' (i64[])",), (1,)),
    ("a rule needing the axis", lambda w, n: anp.sum(w, axis=n), [F3, Aval((), onp.int64)], "the axis",
     ("'n' (i64[])",), (1,)),
]


@pytest.mark.parametrize("label,fun,avals,what,names,static", CONCRETE, ids=[c[0] for c in CONCRETE])
def test_concretization_errors_name_the_argument(label, fun, avals, what, names, static):
    with pytest.raises(ConcretizationError) as info:
        tracing.trace_function(fun, avals, arg_names=["weights", "n"][:len(avals)])
    message = str(info.value)
    assert what in message and all(n in message for n in names), message
    assert info.value.static_candidates == static, label
    assert info.value.source is not None and info.value.source.filename == __file__
    assert not intercepted()


def test_a_tracer_used_after_its_trace_leaks():
    kept = []
    tracing.trace_function(lambda x: kept.append(x) or x, [F3])
    with pytest.raises(TracerLeakError):
        tracing.trace_function(lambda y: y + kept[0], [F3])
    with pytest.raises(TracerLeakError):
        tracing.bind(onp.sin, (kept[0],), {})


@primitive
def scaled_pair(x, y, scale):
    """(x, x * y * scale): its first result passes x through."""
    return x, x * y * scale


_pair_rule_runs = []


def _scaled_pair_rule(ctx, x, y, scale):
    _pair_rule_runs.append(scale)
    x, y = ctx.asvalue(x), ctx.asvalue(y)
    product = ctx.binary("multiply", x, y)
    return x, ctx.binary("multiply", product, ctx.broadcast_to(ctx.asvalue(scale, product.dtype), product.shape))


register_translation_rule(scaled_pair, _scaled_pair_rule)


def test_abstract_evaluations_are_remembered_per_operands_signature():
    """A rule runs once per operands' signature while tracing (the avals of its Vars, which
    of them are the same Var, static values by type and value); a hit still says which
    result passes an input through, and small constants are keyed by value."""
    x, y, y4 = onp.arange(3.0), onp.arange(3.0) + 1.0, onp.arange(4.0)

    def f(x, y, y4):
        a, b = scaled_pair(x, y, 2.0)          # runs the rule
        c, d = scaled_pair(y, x, 2.0)          # the same signature: remembered
        e, g = scaled_pair(x, x, 2.0)          # the same Var twice: another signature
        h, k = scaled_pair(x, y, 2)            # an int, not a float
        m, n = scaled_pair(y4, y4, 2.0)        # other avals
        p, q = scaled_pair(x, onp.array([1.0, 2.0, 3.0]), 2.0)
        r, s = scaled_pair(x, onp.array([1.0, 2.0, 4.0]), 2.0)  # another constant
        return a + b + c + d + e + g + h + k + p + q + r + s, m + n

    del _pair_rule_runs[:]
    tracing._abstract.clear()
    graph = jit_ps(f).graph(x, y, y4)
    assert len(_pair_rule_runs) == 6
    assert all(eqn.outvars[0] is None for eqn in graph.eqns if eqn.prim is scaled_pair)  # x passed through
    expected = f(x, y, y4)
    for got, want in zip(jit_ps(f, fallback="error")(x, y, y4), expected):
        assert onp.allclose(got, want, rtol=1e-15)


def test_rows_read_by_constant_index_share_one_abstract_evaluation(monkeypatch):
    """x[i] of an int i in range of x's first axis: getitem's rule runs once for every such i
    (the result's type is a row's, whichever row), and still runs, and raises, for an index
    out of range."""
    rule = registry.lookup(operator.getitem).lowering
    runs = []
    real = tracing._run_rule

    def counted(r, args, kwargs):
        runs.append(r is rule)
        return real(r, args, kwargs)

    monkeypatch.setattr(tracing, "_run_rule", counted)
    xs = onp.arange(12.0).reshape(4, 3)

    def f(xs):
        return sum(xs[i] * (i + 1) for i in range(4)) + xs[-1]

    tracing._abstract.clear()
    assert onp.array_equal(jit_ps(f, fallback="error")(xs), f(xs))
    assert sum(runs) == 1
    with pytest.raises(IndexError):
        jit_ps(lambda xs: xs[4], fallback="error")(xs)
    with pytest.raises(IndexError):
        jit_ps(lambda xs: xs[-5], fallback="error")(xs)
