"""lowering.py and context.py: argument packing, pruning, and the numpy semantics of
LoweringContext (NEP 50 promotion, ufunc casting and broadcasting, astype, constants,
axes), each checked against numpy, by running the emitted module where it computes."""
import re
import warnings

import autograd.numpy as anp
import numpy as onp
import pytest
from autograd import grad

from autograd_xla import backend, context, dispatch, hlo, jit_ps, lowering, tracing
from autograd_xla.context import LIFT_BYTES, LoweringContext, ModuleState, normalize_axes, normalize_axis
from autograd_xla.core import Aval, prim_name
from autograd_xla.errors import ConcreteValueRequired

f16, f32, f64, i32, i64 = onp.float16, onp.float32, onp.float64, onp.int32, onp.int64
CPU = backend.get_backend("cpu")


def execute(lowered, *args):
    program, _ = CPU.compile(lowered.text)
    exe = backend.Executable(CPU, program, lowered.in_avals, lowered.out_avals, lowered.consts, lowered.text,
                             sources=lowered.sources)
    return exe(list(args))


def run_ctx(build, arrays, weak=()):
    """`build(ctx, *params)` emitted into a module and run on `arrays`; params listed in
    `weak` are weakly typed (they stand for Python scalars)."""
    module = ModuleState()
    ctx = LoweringContext(module)
    params = [hlo.Value(f"%arg{i}", onp.shape(a), onp.asarray(a).dtype, i in weak) for i, a in enumerate(arrays)]
    outs = build(ctx, *params)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    lifted = list(module.lifted.values())
    text = hlo.module_text("t", params + [v for _, v in lifted], ctx.lines, outs)
    lowered = lowering.Lowered(text, [a for a, _ in lifted], [(p.shape, p.dtype) for p in params],
                               [(o.shape, o.dtype) for o in outs])
    return outs, execute(lowered, *[onp.asarray(a) for a in arrays])


def trace(fun, *avals):
    return tracing.trace_function(fun, list(avals))[0]


# ----- argument packing ----------------------------------------------------------------------
def avals(*specs):
    return [Aval(shape, dtype) for shape, dtype in specs]


SMALL_MAX = lowering.PACK_MAX_BYTES // 8  # float64 elements that still travel packed
PACKS = [
    ("small f64 pair and small f32 pair, one large", avals(((3,), f64), ((2, 2), f64), ((4,), f32), ((), f32),
                                                           ((SMALL_MAX + 1,), f64)), "cpu", True,
     [(f64, [0, 1]), (f32, [2, 3])]),
    ("exactly PACK_MAX_BYTES is small", avals(((SMALL_MAX,), f64), ((), f64)), "cpu", True, [(f64, [0, 1])]),
    ("a lone small argument of its dtype", avals(((3,), f64), ((3,), i32), ((2,), f64)), "cpu", True, [(f64, [0, 2])]),
    ("pack=False", avals(((3,), f64), ((2,), f64)), "cpu", False, []),
    ("off the CPU", avals(((3,), f64), ((2,), f64)), "gpu", True, []),
]


@pytest.mark.parametrize("label,avs,platform,pack,expected", PACKS, ids=[p[0] for p in PACKS])
def test_packs(label, avs, platform, pack, expected):
    got = lowering._packs(avs, platform, pack)
    assert [(onp.dtype(d), m) for d, m in got] == [(onp.dtype(d), m) for d, m in expected], label


ARGS = (onp.arange(6.0).reshape(3, 2) / 7, onp.array(0.5), onp.linspace(-1, 1, 600), onp.array([3, -4], i32),
        onp.array([0.25, -1.5, 2.0]))


def main_signature(text):
    return text.split("func.func public @main(")[1].split(") -> ")[0]


@pytest.mark.parametrize("pack,platform", [(True, "cpu"), (False, "cpu"), (True, "gpu")])
def test_lower_packs_small_arguments_per_dtype(pack, platform):
    f = lambda a, b, big, c: (anp.sum(a) * b + anp.sum(big) * anp.sum(c), a[:, 0] - c)
    args = ARGS[:3] + ARGS[4:]
    graph = trace(f, *[Aval(x.shape, x.dtype) for x in args])
    lowered = lowering.lower(graph, "several", platform, pack=pack)
    if pack and platform == "cpu":
        assert lowered.sources == [2, [0, 1, 3]]  # the large one alone, the small float64s together
        assert lowered.in_avals == [((600,), f64), ((6 + 1 + 3,), f64)]
    else:
        assert lowered.sources == [0, 1, 2, 3]
        assert lowered.in_avals == [(x.shape, x.dtype) for x in args]
    assert main_signature(lowered.text).count("%arg") == len(lowered.in_avals)
    if platform == "cpu":
        a, b, big, c = args
        got = execute(lowered, *args)
        onp.testing.assert_allclose(got[0], onp.sum(a) * b + onp.sum(big) * onp.sum(c), rtol=1e-13)
        onp.testing.assert_allclose(got[1], a[:, 0] - c, rtol=1e-13)


def test_lower_x64_off_packs_in_32_bits():
    graph = trace(lambda x, y, n: (x * y, n + 1), Aval((3,), f64), Aval((3,), f64), Aval((2,), i64))
    lowered = lowering.lower(graph, x64=False)
    assert lowered.sources == [2, [0, 1]]
    assert lowered.in_avals == [((2,), onp.int32), ((6,), f32)]
    assert lowered.out_avals == [((3,), f32), ((2,), onp.int32)]
    x, y = onp.array([0.1, 2.0, -3.0]), onp.array([3.0, 0.5, 1.0])
    got = execute(lowered, x, y, onp.array([7, -8]))
    onp.testing.assert_allclose(got[0], (x * y).astype(f32), rtol=1e-7)
    assert got[0].dtype == f32 and list(got[1]) == [8, -7]


def test_jit_with_several_small_params_and_a_large_one():
    f = jit_ps(lambda a, b, big, n, c: (anp.sum(a) * b + anp.dot(big, anp.tanh(big)) * anp.sum(c),
                                        n * 2 + 1, a[:, 0] - c))
    a, b, big, n, c = ARGS
    got = f(*ARGS)
    onp.testing.assert_allclose(got[0], onp.sum(a) * b + big @ onp.tanh(big) * onp.sum(c), rtol=1e-12)
    assert got[1].dtype == i32 and list(got[1]) == [7, -7]
    onp.testing.assert_allclose(got[2], a[:, 0] - c, rtol=1e-15)
    # with C++ dispatch every argument is its own parameter (C++ puts each in ~1 µs) ...
    assert main_signature(f.stablehlo(*ARGS)).count("%arg") == (5 if dispatch.available() else 3)
    # ... unless one is too large for C++'s calls: then the large one, one float64 pack, the int32 alone
    big = onp.linspace(-1, 1, dispatch.ARGUMENT_BYTES // 8)
    assert main_signature(f.stablehlo(a, b, big, n, c)).count("%arg") == 3
    f(a, b, big, n, c)
    got2 = f(a + 1, onp.array(-2.0), big[::-1].copy(), n, c * 3)  # the cached executable, new packed data
    onp.testing.assert_allclose(got2[0], onp.sum(a + 1) * -2 + big[::-1] @ onp.tanh(big[::-1]) * onp.sum(c * 3),
                                rtol=1e-12)


# ----- prune ---------------------------------------------------------------------------------
def test_prune_drops_dead_equations():
    def f(x):
        anp.exp(anp.cos(x)) + 1  # a chain nobody uses
        return anp.sin(x) * 2
    graph = trace(f, Aval((3,), f64))
    assert [prim_name(e.prim) for e in graph.eqns] == ["cos", "exp", "add", "sin", "multiply"]
    pruned = lowering.prune(graph)
    assert [prim_name(e.prim) for e in pruned.eqns] == ["sin", "multiply"]
    assert len(graph.eqns) == 5 and pruned.outvars == graph.outvars and pruned.invars == graph.invars
    assert lowering.prune(pruned) is pruned  # nothing dead: the graph itself
    lowered = lowering.lower(graph)
    assert "cosine" not in lowered.text and "exponential" not in lowered.text
    x = onp.array([0.1, -1.0, 2.0])
    onp.testing.assert_allclose(execute(lowered, x)[0], onp.sin(x) * 2, rtol=1e-15)


# ----- numpy semantics of the context --------------------------------------------------------
def V(dtype, weak=False, shape=()):
    return hlo.Value("%v", shape, dtype, weak)


# each operand, and what numpy sees for it (a weak Value is the Python scalar it stands for)
PROMOTIONS = [
    ("f32 with a Python float", (V(f32), 1.5), (f32, 1.5)),
    ("i32 with a Python float", (V(i32), 1.5), (i32, 1.5)),
    ("f16 with a weak float", (V(f16), V(f64, True)), (f16, 0.0)),
    ("u8 with a weak int", (V(onp.uint8), V(i64, True)), (onp.uint8, 0)),
    ("i64 with a Python complex", (V(i64), 2j), (i64, 2j)),
    ("f32 with a weak complex", (V(f32), V(onp.complex128, True)), (f32, 0j)),
    ("bool with a Python int", (V(onp.bool_), 1), (onp.bool_, 1)),
    ("weak float with weak int", (V(f64, True), V(i64, True)), (0.0, 0)),
    ("i8 with a Python bool", (V(onp.int8), True), (onp.int8, True)),
    ("f32 with a dtype", (V(f32), onp.dtype(f64)), (f32, f64)),
    ("i16 array with a Python int", (onp.arange(3, dtype=onp.int16), 7), (onp.int16, 7)),
    ("strong f64 with f32", (V(f64), V(f32)), (f64, f32)),
]


@pytest.mark.parametrize("label,operands,numpy_view", PROMOTIONS, ids=[p[0] for p in PROMOTIONS])
def test_result_type_follows_nep50(label, operands, numpy_view):
    assert context.result_type(*operands) == onp.result_type(*numpy_view), label


def test_promotion_type():
    assert context.promotion_type(V(f32, True)) is float and context.promotion_type(V(i32, True)) is int
    assert context.promotion_type(V(f32)) == f32 and context.promotion_type(True) == onp.bool_
    assert context.promotion_type(3) is int and context.promotion_type(onp.float32(1)) == f32
    assert context.promotion_type([1, 2]) == onp.asarray([1, 2]).dtype


def binary_op(name):
    return lambda ctx, x, y: ctx.binary(name, x, y)


# label, ufunc, stablehlo op on the converted operands, operands (arrays are params), weak params, dtype=
UFUNCS = [
    ("f32 column + int16 row", onp.add, binary_op("add"),
     (onp.array([[0.5], [1.5], [-2.0]], f32), onp.arange(4, dtype=onp.int16)), (), None),
    ("f32 + Python int", onp.add, binary_op("add"), (onp.array([1.25, 2.0], f32), 2), (), None),
    ("int32 / int32 is float64", onp.true_divide, binary_op("divide"),
     (onp.array([1, 7, -9], i32), onp.array([3, 2, 4], i32)), (), None),
    ("int8 * weak float", onp.multiply, binary_op("multiply"), (onp.array([3, -2], onp.int8), onp.array(1.5)), (1,),
     None),
    ("uint8 + Python int wraps", onp.add, binary_op("add"), (onp.array([250, 3], onp.uint8), 10), (), None),
    ("bool + Python int", onp.add, binary_op("add"), (onp.array([True, False]), 1), (), None),
    ("complex64 * Python float", onp.multiply, binary_op("multiply"),
     (onp.array([1 + 2j, -1j], onp.complex64), 0.5), (), None),
    ("maximum of int64 and float32", onp.maximum, binary_op("maximum"),
     (onp.array([1, 5], i64), onp.array([2.5, -1.0], f32)), (), None),
    ("less of f32 and a Python float", onp.less, lambda ctx, x, y: ctx.compare(x, y, "LT"),
     (onp.array([0.5, 1.5], f32), 1.0), (), None),
    ("add int32s with dtype=float32 (the loop's dtype, not only the output's)", onp.add, binary_op("add"),
     (onp.array([2**31 - 1, 2], i32), onp.array([1, 4], i32)), (), f32),
]


@pytest.mark.parametrize("label,ufunc,op,operands,weak,dtype", UFUNCS,
                         ids=[getattr(u, "values", u)[0] for u in UFUNCS])
def test_ufunc_inputs_cast_and_broadcast_like_numpy(label, ufunc, op, operands, weak, dtype):
    arrays = [x for x in operands if isinstance(x, onp.ndarray)]
    numpy_args = [x[()] if i in weak else x for i, x in enumerate(operands)]
    numpy_args = [float(x) if isinstance(x, onp.floating) else x for x in numpy_args]
    expected = ufunc(*numpy_args, **({"dtype": dtype} if dtype else {}))
    seen = {}

    def build(ctx, *params):
        it = iter(params)
        inputs = [next(it) if isinstance(x, onp.ndarray) else x for x in operands]
        values, out_dts = ctx.ufunc_inputs(ufunc, inputs, dtype)
        seen["shapes"], seen["out"] = [v.shape for v in values], out_dts
        return ctx.astype(op(ctx, *values), out_dts[0])
    (out,), (got,) = run_ctx(build, arrays, weak={i for i in weak})
    assert seen["shapes"] == [expected.shape] * len(operands) and seen["out"] == (expected.dtype,), label
    assert (out.shape, out.dtype) == (expected.shape, expected.dtype), label
    onp.testing.assert_allclose(got, expected, rtol=1e-6, err_msg=label)


def test_ufunc_inputs_refuse_shapes_that_do_not_broadcast():
    ctx = LoweringContext(ModuleState())
    with pytest.raises(ValueError):
        ctx.ufunc_inputs(onp.add, [V(f32, shape=(3,)), V(f32, shape=(4,))])


ASTYPES = [
    (onp.array([0.0, -0.0, 0.5, onp.nan, -2.0, onp.inf]), onp.bool_),
    (onp.array([0, 3, -1], i32), onp.bool_),
    (onp.array([-1.7, 2.7, -0.2], f64), i32),
    (onp.array([3, -4], i64), onp.complex128),
    (onp.array([True, False]), onp.complex64),
    (onp.array([True, False]), f32),
    (onp.array([200, 7], onp.uint8), f32),
    (onp.array([1.5 + 2j, -3j]), f64),
    (onp.array([1j, 0j, 2 + 0j, 1e-300j]), onp.bool_),  # nonzero in either part
]


@pytest.mark.parametrize("x,dtype", ASTYPES, ids=lambda p: str(getattr(p, "dtype", p)))
def test_astype_matches_numpy(x, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", onp.exceptions.ComplexWarning)
        expected = x.astype(dtype)
    (out,), (got,) = run_ctx(lambda ctx, v: ctx.astype(v, dtype), [x])
    assert out.dtype == expected.dtype and onp.asarray(got).dtype == expected.dtype
    onp.testing.assert_array_equal(got, expected)


def test_astype_to_bool_is_compare_not_equal_zero():
    ctx = LoweringContext(ModuleState())
    v = V(f32, shape=(2,))
    assert ctx.astype(v, f32) is v
    ctx.astype(v, onp.bool_)
    assert '"stablehlo.compare"' in ctx.lines[-1] and "comparison_direction NE" in ctx.lines[-1]


def test_const_lifts_large_arrays_but_not_repeated_values():
    ctx = LoweringContext(ModuleState())
    big = onp.random.RandomState(0).standard_normal(LIFT_BYTES // 8 + 1)
    lifted = ctx.const(big)
    assert ctx.lines == [] and lifted.name.startswith("%k") and (lifted.shape, lifted.dtype) == (big.shape, f64)
    assert ctx.const(big) is lifted and len(ctx.module.lifted) == 1  # the same array, one parameter
    for literal in (big[:LIFT_BYTES // 8], onp.arange(3)):
        before = len(ctx.lines)
        v = ctx.const(literal)
        assert len(ctx.lines) == before + 1 and '"stablehlo.constant"' in ctx.lines[-1] and v.shape == literal.shape
    repeated = ctx.const(onp.full(10_000, -0.0))  # one value: a scalar, broadcast (its sign kept)
    assert '"stablehlo.constant"' in ctx.lines[-2] and "tensor<f64>" in ctx.lines[-2] and "80\"" in ctx.lines[-2]
    assert '"stablehlo.broadcast_in_dim"' in ctx.lines[-1] and repeated.shape == (10_000,)
    assert len(ctx.module.lifted) == 1
    with pytest.raises(TypeError, match="cannot be compiled"):
        ctx.const(onp.array(["a"]))


def test_lifted_constants_travel_as_executable_parameters():
    table = onp.random.RandomState(1).standard_normal((20, 10))
    ones = onp.ones((20, 10))
    graph = trace(lambda x: x * table + ones, Aval((20, 10), f64))
    lowered = lowering.lower(graph)
    assert len(lowered.consts) == 1 and onp.array_equal(lowered.consts[0], table)
    assert "%k0: tensor<20x10xf64>" in lowered.text
    x = onp.linspace(0, 1, 200).reshape(20, 10)
    onp.testing.assert_allclose(execute(lowered, x)[0], x * table + ones, rtol=1e-15)


# ----- axes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("axis,ndim,expected", [(0, 1, 0), (-1, 3, 2), (-3, 3, 0), (onp.int64(1), 2, 1)])
def test_normalize_axis(axis, ndim, expected):
    got = normalize_axis(axis, ndim)
    assert got == expected and type(got) is int


@pytest.mark.parametrize("axis,ndim", [(3, 3), (-4, 3), (0, 0)])
def test_normalize_axis_errors_read_like_numpy(axis, ndim):
    with pytest.raises(onp.exceptions.AxisError) as ours:
        normalize_axis(axis, ndim)
    with pytest.raises(onp.exceptions.AxisError) as theirs:
        onp.lib.array_utils.normalize_axis_index(axis, ndim)
    assert str(ours.value) == str(theirs.value)
    assert isinstance(ours.value, IndexError) and isinstance(ours.value, ValueError)


def test_normalize_axis_refuses_values_and_bools():
    v = V(i64)
    with pytest.raises(ConcreteValueRequired) as info:
        normalize_axis(v, 2, name="source")
    assert info.value.value is v and "source" in info.value.what
    with pytest.raises(TypeError):
        normalize_axis(True, 2)
    assert normalize_axes(None, 3) == (0, 1, 2) and normalize_axes([-1, 0], 3) == (0, 2)
    assert normalize_axes(-2, 3) == (1,)
    with pytest.raises(ValueError) as theirs:
        onp.sum(onp.zeros((2, 2)), axis=(0, -2))
    with pytest.raises(ValueError) as ours:
        normalize_axes((0, -2), 2)
    assert str(ours.value) == str(theirs.value)


# ----- modules kept for graphs of the same structure (lowering.lower) --------------------------
def fresh_loss(data, scale):
    """What a library's fit() does: a new closure over its data, every fit."""
    def loss(w):
        return anp.sum(anp.tanh(data * w) * scale)
    return loss


def test_a_fresh_closures_retrace_reuses_the_module_its_twin_had():
    data = onp.linspace(0.1, 1.0, 40)
    first, second = (jit_ps(fresh_loss(data, 2.0), fallback="error") for _ in range(2))
    w = onp.full(40, 0.3)
    assert_close = onp.testing.assert_allclose
    assert_close(first(w), onp.sum(onp.tanh(data * w) * 2.0), rtol=1e-13)
    assert_close(second(w), onp.sum(onp.tanh(data * w) * 2.0), rtol=1e-13)
    (a,), (b,) = first._cache.values(), second._cache.values()
    assert a.graph is not b.graph and a.lowered is b.lowered


@pytest.mark.parametrize("label,other", [
    ("another data value", lambda: fresh_loss(onp.linspace(0.1, 1.0, 40) * 1.5, 2.0)),
    ("another scale", lambda: fresh_loss(onp.linspace(0.1, 1.0, 40), 3.0)),
    ("the scale's sign, -0.0", lambda: fresh_loss(onp.linspace(0.1, 1.0, 40), -0.0)),
    ("an integer scale", lambda: fresh_loss(onp.linspace(0.1, 1.0, 40), 2)),
    ("another dtype of data", lambda: fresh_loss(onp.linspace(0.1, 1.0, 40).astype(f32), 2.0)),
])
def test_graphs_that_differ_in_any_value_get_their_own_module(label, other):
    """Equal structure means equal values: every constant, to the bit (-0.0 against 0.0)."""
    w = onp.full(40, 0.3)
    base = jit_ps(fresh_loss(onp.linspace(0.1, 1.0, 40), 0.0 if "sign" in label else 2.0), fallback="error")
    base(w)
    f = jit_ps(other(), fallback="error")
    out = f(w)
    (a,), (b,) = base._cache.values(), f._cache.values()
    assert a.lowered is not b.lowered, label
    closure = other()
    onp.testing.assert_allclose(out, closure(w), rtol=1e-6)
    if "sign" in label:
        assert onp.signbit(out) == onp.signbit(closure(w))


def test_a_changed_setting_or_rule_lowers_the_graph_again(monkeypatch):
    """What lowering reads besides the graph: module constants (here LIFT_BYTES, which decides
    whether a constant is inlined) and the registry's rules."""
    data = onp.linspace(0.1, 1.0, 400)  # above LIFT_BYTES: a parameter
    graph = jit_ps(fresh_loss(data, 2.0)).graph(onp.ones(400))
    before = lowering.lower(graph)
    assert lowering.lower(graph) is before
    monkeypatch.setattr(context, "LIFT_BYTES", 1 << 20)
    inlined = lowering.lower(graph)
    assert inlined is not before and len(inlined.consts) < len(before.consts)
    monkeypatch.undo()
    assert lowering.lower(graph) is before
    from autograd_xla import registry
    registry.entry(anp.tanh)  # what every registration goes through
    assert lowering.lower(graph) is not before


def test_a_user_rule_registered_later_is_the_one_compiled():
    from autograd.extend import primitive

    from autograd_xla import register_translation_rule

    @primitive
    def bump(x):
        return x + 1.0
    def adding(k):
        return lambda ctx, x: ctx.op1("stablehlo.add", [x, ctx.full(x.shape, k, x.dtype)], x.shape, x.dtype)
    def doubled(x):
        return bump(x) * 2.0
    register_translation_rule(bump, adding(2.0))  # wrong: the result says 2
    x = onp.arange(3.0)
    onp.testing.assert_allclose(jit_ps(doubled, fallback="error")(x), (x + 2.0) * 2.0)
    register_translation_rule(bump, adding(1.0))  # the user's fix, compiled by a fresh jit_ps of the same code
    onp.testing.assert_allclose(jit_ps(doubled, fallback="error")(x), (x + 1.0) * 2.0)


def test_modules_of_large_constants_are_not_kept_and_the_cache_is_bounded(monkeypatch):
    big = onp.linspace(0.0, 1.0, lowering.KEY_ARRAY_BYTES // 8 + 1)
    graph = jit_ps(lambda x: anp.sum(x * big)).graph(onp.ones_like(big))
    assert lowering.lower(graph) is not lowering.lower(graph)
    monkeypatch.setattr(lowering, "LOWERED_KEPT", 2)
    graphs = [jit_ps(fresh_loss(onp.linspace(0.1, 1.0, 40), float(k))).graph(onp.ones(40)) for k in range(3)]
    kept = [lowering.lower(g) for g in graphs]
    assert len(lowering._lowered) <= 2
    assert lowering.lower(graphs[2]) is kept[2] and lowering.lower(graphs[0]) is not kept[0]


def test_the_description_of_a_graph_tells_apart_what_lowering_would():
    """lowering._structure, on what graphs hold: equal descriptions only for equal values."""
    import collections
    import decimal

    class Frozen(list):  # pandas' FrozenList: its items are not in its __dict__
        pass
    Pair = collections.namedtuple("Pair", "a b")
    differ = [(0.0, -0.0), (True, 1), (1, 1.0), (Frozen([1, 2]), Frozen([1, 3])), (Pair(1, 2), Pair(1, 3)),
              (Pair(1, 2), (1, 2)), (onp.zeros(3), onp.zeros(3, f32)), (onp.zeros(3), onp.zeros((3, 1))),
              (onp.array([1.0, 2.0]), onp.array([1.0, 2.5])), (onp.array(["a"], object), onp.array(["b"], object)),
              (slice(1, 2), slice(1, 3)), (f64, f32), ({"a": 1}, {"b": 1})]
    for a, b in differ:
        assert lowering._structure(a) != lowering._structure(b), (a, b)
    same = [(onp.arange(3.0), onp.arange(3.0)), (Pair(1, [2.5]), Pair(1, [2.5])), (float("nan"), float("nan"))]
    for a, b in same:
        assert lowering._structure(a) == lowering._structure(b), (a, b)
    with pytest.raises(lowering._Unkeyable):
        lowering._structure([decimal.Decimal(1)])  # another library's object: its graph is lowered every time


def test_a_64_bit_value_computed_in_32_bits_is_not_converted_to_its_own_type():
    def f(x):  # autograd's where VJP: float64 zeros against a float64 cotangent, both 32-bit with x64=False
        return anp.sum(anp.where(x > 0, x, 2.0 * x) * x)
    x = onp.linspace(-1.0, 1.0, 6)
    jf = jit_ps(grad(f), x64=False, fallback="error")
    converts = re.findall(r'"stablehlo.convert"\(%\w+\) : \((tensor<[^>]*>)\) -> (tensor<[^>]*>)', jf.stablehlo(x))
    assert all(a != b for a, b in converts)
    onp.testing.assert_allclose(jf(x), grad(f)(x), rtol=1e-6)
