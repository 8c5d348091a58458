"""hlo.Builder: each op's result type as StableHLO defines it, checked against numpy and
against XLA itself (a module whose printed types are wrong does not compile), constants'
exact bytes, 64-bit narrowing, region structure, and Value's refusals."""
import operator
import threading

import ml_dtypes
import numpy as onp
import pytest

from autograd_xla import backend, hlo
from autograd_xla.errors import ConcreteValueRequired

f32, f64, i32 = onp.float32, onp.float64, onp.int32


def params_of(arrays):
    return [hlo.Value(f"%arg{i}", a.shape, a.dtype) for i, a in enumerate(arrays)]


def run(build, *arrays):
    """Emit `build(builder, *params)` as a module, compile it on CPU, run it on `arrays`."""
    b = hlo.Builder()
    params = params_of(arrays)
    outs = build(b, *params)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    text = hlo.module_text("t", params, b.lines, outs)
    cpu = backend.get_backend("cpu")
    program, _ = cpu.compile(text)
    exe = backend.Executable(cpu, program, [(p.shape, p.dtype) for p in params],
                             [(o.shape, o.dtype) for o in outs], [], text)
    return outs, exe(list(arrays))


def rng_array(shape, dtype=f32, seed=0):
    return onp.random.RandomState(seed).uniform(-2, 2, size=shape).astype(dtype)


def np_pad(x, value, low, high, interior):
    """numpy reference of stablehlo.pad (edges may be negative: they then crop)."""
    shape = [(d - 1) * (it + 1) + 1 if d else 0 for d, it in zip(x.shape, interior)]
    out = onp.full(shape, value, x.dtype)
    out[tuple(slice(None, None, it + 1) for it in interior)] = x
    out = onp.pad(out, [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)], constant_values=value)
    return out[tuple(slice(max(-lo, 0), out.shape[k] - max(-hi, 0)) for k, (lo, hi) in enumerate(zip(low, high)))]


def updated(x, idx, u):
    out = x.copy()
    out[idx] = u
    return out


A, B, C = rng_array((2, 3, 4)), rng_array((2, 4, 5), seed=1), rng_array((4, 3), seed=2)
V3 = rng_array((3,), seed=3)
Z = (rng_array((2, 3), seed=4) + 1j * rng_array((2, 3), seed=5)).astype(onp.complex64)

# label, builder function, operands, numpy oracle
OPS = [
    ("dot_general batched bij,bjk->bik", lambda b, x, y: b.dot_general(x, y, ((2,), (1,)), ((0,), (0,))),
     (A, B), lambda x, y: onp.einsum("bij,bjk->bik", x, y)),
    ("dot_general contracting dim 0", lambda b, x, y: b.dot_general(x, y, ((0,), (0,))),
     (C, rng_array((4, 2), seed=6)), lambda x, y: x.T @ y),
    ("dot_general batch dim not leading", lambda b, x, y: b.dot_general(x, y, ((1,), (0,)), ((0,), (1,))),
     (rng_array((2, 3, 4)), rng_array((3, 2))), lambda x, y: onp.einsum("bjk,jb->bk", x, y)),
    ("dot_general through a transpose", lambda b, x, y: b.dot_general(b.transpose(x, (1, 0)), y, ((1,), (0,))),
     (C, rng_array((4, 2), seed=7)), lambda x, y: x.T @ y),
    ("dot_general through a transpose that reorders free dims",
     lambda b, x, y: b.dot_general(b.transpose(x, (2, 1, 0)), y, ((2,), (0,))),
     (A, rng_array((2, 5))), lambda x, y: onp.einsum("kjb,bl->kjl", x.transpose(2, 1, 0), y)),
    ("reduce sum over dims (2, 0)", lambda b, x:
     b.reduce([x], [b.constant(onp.zeros((), f32))], (2, 0), lambda r, acc, e: r.binary("add", acc, e))[0],
     (A,), lambda x: x.sum(axis=(0, 2))),
    ("variadic reduce (sum, max)",
     lambda b, x: b.reduce([x, x], [b.constant(onp.zeros((), f32)), b.constant(onp.array(-onp.inf, f32))], (1,),
                           lambda r, s, m, e1, e2: [r.binary("add", s, e1), r.binary("maximum", m, e2)]),
     (C,), lambda x: (x.sum(axis=1), x.max(axis=1))),
    ("slice with strides", lambda b, x: b.slice(x, [1, 0, 1], [2, 3, 4], [1, 2, 2]), (A,),
     lambda x: x[1:2, 0:3:2, 1:4:2]),
    ("slice, length not a multiple of the stride", lambda b, x: b.slice(x, [0], [3], [2]), (V3,), lambda x: x[0:3:2]),
    ("pad with interior padding", lambda b, x: b.pad(x, b.constant(onp.array(9, f32)), [1], [2], [2]),
     (V3,), lambda x: np_pad(x, 9, [1], [2], [2])),
    ("pad, negative edge and interior", lambda b, x: b.pad(x, b.constant(onp.array(-1, f32)), [1, -1], [0, 2], [1, 0]),
     (C,), lambda x: np_pad(x, -1, [1, -1], [0, 2], [1, 0])),
    ("concatenate along 1", lambda b, x, y: b.concatenate([x, y, x], 1),
     (C, rng_array((4, 1))), lambda x, y: onp.concatenate([x, y, x], 1)),
    ("broadcast_in_dim (3,) -> (2, 3)", lambda b, x: b.broadcast_in_dim(x, (2, 3), (1,)), (V3,),
     lambda x: onp.broadcast_to(x, (2, 3))),
    ("broadcast_in_dim (3,) -> (3, 2)", lambda b, x: b.broadcast_in_dim(x, (3, 2), (0,)), (V3,),
     lambda x: onp.broadcast_to(x[:, None], (3, 2))),
    ("broadcast_in_dim expands size-1 dims", lambda b, x: b.broadcast_in_dim(x, (4, 2, 3), (1, 2)),
     (rng_array((1, 3)),), lambda x: onp.broadcast_to(x, (4, 2, 3))),
    ("transpose (2, 0, 1)", lambda b, x: b.transpose(x, (2, 0, 1)), (A,), lambda x: x.transpose(2, 0, 1)),
    ("reshape", lambda b, x: b.reshape(x, (4, 6)), (A,), lambda x: x.reshape(4, 6)),
    ("reverse", lambda b, x: b.reverse(x, [0, 2]), (A,), lambda x: x[::-1, :, ::-1]),
    ("compare LT -> bool", lambda b, x, y: b.compare(x, y, "LT"), (C, rng_array((4, 3), seed=9)),
     lambda x, y: x < y),
    ("compare unsigned GT", lambda b, x, y: b.compare(x, y, "GT"),
     (onp.array([200, 100, 7], onp.uint8), onp.array([100, 200, 7], onp.uint8)), lambda x, y: x > y),
    ("real of complex64", lambda b, z: b.real(z), (Z,), onp.real),
    ("imag of complex128", lambda b, z: b.imag(z), (Z.astype(onp.complex128),), onp.imag),
    ("complex of float32 parts", lambda b, x, y: b.complex(x, y), (C, C[::-1].copy()), lambda x, y: x + 1j * y),
    ("iota int32 along 1", lambda b: b.iota((3, 4), i32, 1), (),
     lambda: onp.broadcast_to(onp.arange(4, dtype=i32), (3, 4))),
    ("iota float64 along 0", lambda b: b.iota((3, 2), f64, 0), (),
     lambda: onp.broadcast_to(onp.arange(3.0)[:, None], (3, 2))),
    ("select", lambda b, p, x, y: b.select(p, x, y), (C > 0, C, -C), lambda p, x, y: onp.where(p, x, y)),
    ("clamp", lambda b, x: b.clamp(b.splat(-0.5, (4, 3), f32), x, b.splat(0.5, (4, 3), f32)), (C,),
     lambda x: onp.clip(x, -0.5, 0.5)),
    ("convert float -> int truncates", lambda b, x: b.convert(x, i32), (C,), lambda x: x.astype(i32)),
    ("convert bool -> float", lambda b, p: b.convert(p, f32), (C > 0,), lambda p: p.astype(f32)),
    ("dynamic_slice", lambda b, x, i: b.dynamic_slice(x, [i, b.constant(onp.array(1, i32))], (2, 2)),
     (C, onp.array(2, i32)), lambda x, i: x[2:4, 1:3]),
    ("dynamic_update_slice", lambda b, x, u, i: b.dynamic_update_slice(x, u, [i, i]),
     (C, onp.full((2, 2), 9, f32), onp.array(1, i32)), lambda x, u, i: updated(x, (slice(1, 3), slice(1, 3)), u)),
]


@pytest.mark.parametrize("label,build,args,oracle", OPS, ids=[o[0] for o in OPS])
def test_result_types_and_values_match_numpy(label, build, args, oracle):
    outs, got = run(build, *args)
    expected = oracle(*args)
    expected = list(expected) if isinstance(expected, tuple) else [expected]
    assert len(outs) == len(expected), label
    for k, (v, g, e) in enumerate(zip(outs, got, expected)):
        path = f"{label}, result {k}"
        assert (v.shape, v.dtype) == (e.shape, e.dtype), f"{path}: built {v.type}, numpy {e.shape} {e.dtype}"
        assert (onp.shape(g), onp.asarray(g).dtype) == (e.shape, e.dtype), path
        onp.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6, err_msg=path)


X = hlo.Value("%x", (2, 3), f32)
IDENTITIES = [
    ("reshape to the same shape", lambda b: b.reshape(X, (2, 3))),
    ("identity transpose", lambda b: b.transpose(X, (0, 1))),
    ("full slice", lambda b: b.slice(X, [0, 0], [2, 3])),
    ("full slice, unit strides", lambda b: b.slice(X, [0, 0], [2, 3], [1, 1])),
    ("broadcast to its own shape", lambda b: b.broadcast_in_dim(X, (2, 3), (0, 1))),
    ("concatenate of one", lambda b: b.concatenate([X], 0)),
    ("reverse of no dims", lambda b: b.reverse(X, [])),
    ("convert to its own dtype", lambda b: b.convert(X, f32)),
]


@pytest.mark.parametrize("label,op", IDENTITIES, ids=[i[0] for i in IDENTITIES])
def test_identity_ops_return_their_operand_and_emit_nothing(label, op):
    b = hlo.Builder()
    assert op(b) is X, label
    assert b.lines == [], label


def test_non_identity_shape_ops_emit_one_op():
    for op in (lambda b: b.reshape(X, (3, 2)), lambda b: b.transpose(X, (1, 0)), lambda b: b.slice(X, [0, 1], [2, 3]),
               lambda b: b.broadcast_in_dim(X, (1, 2, 3), (1, 2))):
        b = hlo.Builder()
        assert op(b) is not X and len(b.lines) == 1


def constant_text(array):
    b = hlo.Builder()
    b.constant(array)
    (line,) = b.lines
    return line


def test_constant_printing():
    splat = constant_text(onp.full((2, 3), 1.5, f32))
    assert f'dense<"0x{onp.float32(1.5).tobytes().hex().upper()}"> : tensor<2x3xf32>' in splat
    exact = constant_text(onp.array([1, 2, 258], i32))
    assert 'dense<"0x010000000200000002010000"> : tensor<3xi32>' in exact
    payloads = onp.array([0x7FC00001, 0x7FC00000, 0x7FC00000], onp.uint32).view(f32)  # NaNs: never splatted
    assert f'"0x{payloads.tobytes().hex().upper()}"' in constant_text(payloads)
    nans = onp.full(3, onp.nan, f32)  # one payload repeated: a splat of exactly its bytes
    assert f'dense<"0x{nans[:1].tobytes().hex().upper()}"> : tensor<3xf32>' in constant_text(nans)
    (_,), (got,) = run(lambda b: b.constant(nans))
    assert onp.asarray(got).tobytes() == nans.tobytes()
    assert 'dense<"0x01000001"> : tensor<4xi1>' in constant_text(onp.array([True, False, False, True]))


REPEATS = [  # (array, whether every element has the first one's bytes)
    (onp.zeros((256, 1024)), True), (onp.array([0.0, -0.0]), False), (onp.full(70, onp.nan, f32), True),
    (onp.array([0x7FC00000] * 65 + [0x7FC00001], onp.uint32).view(f32), False), (onp.full(3, 1 + 2j), True),
    (onp.array([1 + 2j, 1 + 3j]), False), (onp.array([2 - 1j] * 100, onp.complex64), True),
    (onp.r_[onp.ones(100), 2.0], False), (onp.array([True, True]), True), (onp.array([True, False]), False),
    (onp.zeros(5, ml_dtypes.bfloat16), True), (onp.zeros((0, 3), f32), True), (onp.array(-7, onp.int8), True),
]


@pytest.mark.parametrize("array,repeats", REPEATS, ids=[f"{a.dtype}{a.shape}-{r}" for a, r in REPEATS])
def test_repeats_one_value_compares_each_elements_bytes(array, repeats):
    assert hlo.repeats_one_value(array) is repeats


CONSTANTS = [onp.array([1.5, -2.25, 1e30], f32), onp.arange(6, dtype=onp.int64).reshape(2, 3) - 3,
             onp.full((3, 2), 7, onp.uint16), onp.array([1 + 2j, -3j], onp.complex128), onp.array([[True, False]]),
             onp.array([0.5, -4], ml_dtypes.bfloat16), onp.array([onp.nan, 1.0, onp.inf, -onp.inf], onp.float16),
             onp.zeros((0, 3), f32), onp.array(-7, onp.int8), onp.array([2**63 + 5], onp.uint64)]


@pytest.mark.parametrize("c", CONSTANTS, ids=lambda c: f"{c.dtype}{list(c.shape)}")
def test_constants_round_trip_through_xla(c):
    (v,), (got,) = run(lambda b: b.constant(c))
    assert (v.shape, v.dtype) == (c.shape, c.dtype)
    assert onp.asarray(got).dtype == c.dtype
    onp.testing.assert_array_equal(got, c)


def test_constant_keeps_signed_zeros():
    c = onp.array([0.0, -0.0, 0.0])
    (_,), (got,) = run(lambda b: b.constant(c))
    assert list(onp.signbit(got)) == list(onp.signbit(c))


def test_narrow_64_bit_prints_and_stores_32_bit():
    c = onp.array([0.1, 1e30, -2.5])
    with hlo.narrow_64_bit(True):
        assert hlo.tensor_type((2,), f64) == "tensor<2xf32>"
        assert hlo.tensor_type((), onp.int64) == "tensor<i32>"
        assert hlo.tensor_type((), onp.complex128) == "tensor<complex<f32>>"
        assert hlo.canonical_dtype(onp.uint64) == onp.uint32
        line = constant_text(c)
        seen = []
        t = threading.Thread(target=lambda: seen.append(hlo.tensor_type((2,), f64)))  # per thread
        t.start()
        t.join()
        with hlo.narrow_64_bit(False):
            assert hlo.tensor_type((2,), f64) == "tensor<2xf64>"
        assert hlo.tensor_type((2,), f64) == "tensor<2xf32>"
    assert seen == ["tensor<2xf64>"]
    assert f'dense<"0x{c.astype(f32).tobytes().hex().upper()}"> : tensor<3xf32>' in line
    assert hlo.tensor_type((2,), f64) == "tensor<2xf64>" and hlo.canonical_dtype(f64) == f64


def test_region_text_structure():
    b = hlo.Builder()
    first = b.fresh_name()
    text, results = b.region([((), f32), ((2,), i32)], lambda r, a, c: [r.binary("add", a, a), c])
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1].strip() == "}"
    assert lines[1].strip() == "^bb0(%a1: tensor<f32>, %a2: tensor<2xi32>):"
    assert '"stablehlo.add"(%a1, %a1)' in lines[2]
    assert lines[-2].strip() == '"stablehlo.return"(%3, %a2) : (tensor<f32>, tensor<2xi32>) -> ()'
    assert [r.name for r in results] == ["%3", "%a2"] and first == "%0"
    assert b.fresh_name() == "%4"  # names are unique across regions and the function
    assert b.lines == []  # a region is text for an op, not emitted by itself
    text, _ = b.region([], lambda r: r.constant(onp.ones((), f32)))
    assert "^bb0" not in text


def test_while_loop_counts():
    def cond(r, i, acc):
        return r.compare(i, r.constant(onp.array(10, i32)), "LT")

    def body(r, i, acc):
        return [r.binary("add", i, r.constant(onp.array(1, i32))), r.binary("add", acc, i)]

    b = hlo.Builder()
    outs = b.while_loop([hlo.Value("%i", (), i32), hlo.Value("%s", (), i32)], cond, body)
    name = outs[0].name.split("#")[0]
    assert [o.name for o in outs] == [f"{name}#0", f"{name}#1"] and [o.dtype for o in outs] == [i32, i32]
    assert b.lines[0].lstrip().startswith(f'{name}:2 = "stablehlo.while"(%i, %s) ({{')
    assert b.lines[0].rstrip().endswith(": (tensor<i32>, tensor<i32>) -> (tensor<i32>, tensor<i32>)")
    assert b.lines[0].count("stablehlo.return") == 2
    _, got = run(lambda b, i, s: b.while_loop([i, s], cond, body), onp.array(3, i32), onp.array(0, i32))
    assert [int(g) for g in got] == [10, sum(range(3, 10))]


@pytest.mark.parametrize("index,expected", [(0, lambda x: -x), (1, lambda x: x + x), (2, onp.abs),
                                            (7, onp.abs), (-1, onp.abs)])  # out of range: the last branch
def test_case_runs_the_indexed_branch(index, expected):
    x = onp.array([-1.5, 2.0], f32)

    def build(b, i, x):
        branches = [lambda c: c.unary("negate", x), lambda c: c.binary("add", x, x), lambda c: c.unary("abs", x)]
        return b.case(i, branches, [((2,), f32)])
    outs, (got,) = run(build, onp.array(index, i32), x)
    assert (outs[0].shape, outs[0].dtype) == ((2,), f32)
    onp.testing.assert_array_equal(got, expected(x))


def test_module_text():
    p = [hlo.Value("%arg0", (2,), f32), hlo.Value("%arg1", (), onp.int64)]
    text = hlo.module_text("my_mod", p, [], [p[1], p[0]], replicas=2, partitions=3, arg_attrs={1: "{foo.bar = 1}"})
    lines = text.splitlines()
    assert lines[0] == "module @my_mod attributes {mhlo.num_partitions = 3 : i32, mhlo.num_replicas = 2 : i32} {"
    assert lines[1] == ("  func.func public @main(%arg0: tensor<2xf32>, %arg1: tensor<i64> {foo.bar = 1}) -> "
                        "(tensor<i64>, tensor<2xf32>) {")
    assert lines[2] == '    "func.return"(%arg1, %arg0) : (tensor<i64>, tensor<2xf32>) -> ()'
    _, got = run(lambda b, x, n: [n, x], onp.array([1.0, 2.0], f32), onp.array(5, onp.int64))
    assert int(got[0]) == 5 and list(got[1]) == [1.0, 2.0]


@pytest.mark.parametrize("action,what", [
    (int, "an integer argument"), (operator.index, "an integer argument"), (range, "an integer argument"),
    (bool, "a flag argument"), (iter, "a sequence argument"), (list, "a sequence argument"),
    (lambda v: v + 1, "arithmetic"), (lambda v: 1 - v, "arithmetic"), (lambda v: v < 0, "arithmetic"),
    (lambda v: -v, "arithmetic"), (lambda v: 2 * v, "arithmetic")])
def test_value_refuses_concrete_use(action, what):
    v = hlo.Value("%n", (), onp.int64)
    with pytest.raises(ConcreteValueRequired) as info:
        action(v)
    assert info.value.value is v and what in info.value.what


def test_value_properties_and_element_types():
    assert (hlo.Value("%v", (2, 0, 3), f32).size, hlo.Value("%v", (), f32).size) == (0, 1)
    assert hlo.Value("%v", (2, 3), onp.complex64).ndim == 2
    assert hlo.Value("%v", (4,), onp.uint8).type == "tensor<4xui8>"
    assert repr(hlo.Value("%v", (), onp.bool_)) == "%v: tensor<i1>"
    with pytest.raises(TypeError, match="no XLA equivalent"):
        hlo.element_type(onp.dtype("U3"))
    assert [hlo.compare_type(d) for d in (f32, onp.complex64, onp.uint8, onp.bool_, onp.int16)] == \
        ["FLOAT", "FLOAT", "UNSIGNED", "UNSIGNED", "SIGNED"]
