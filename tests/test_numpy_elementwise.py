"""Elementwise numpy under jit_ps: every unary and binary math ufunc and comparison
autograd.numpy exposes, against plain numpy/autograd in value, dtype, gradient (both
nestings of jit_ps and grad) and, where autograd defines one, JVP."""
import warnings

import autograd.numpy as np
from autograd import grad
import numpy as onp
import pytest

pytestmark = pytest.mark.filterwarnings("error:.*runs as plain autograd")

from numpy_checks import (C64, C128, F32, F64, FLOATS, check, check_exact, check_family, check_jvp,  # noqa: E402
                          check_value, jit_ps, rand, rands, sweep)
from helpers import NARROW, TPU_RTOL, representable_32  # noqa: E402

# (function, low, high): input range inside the function's domain, away from its poles
UNARY_DIFF = [
    (np.negative, -2, 2), (np.abs, 0.1, 2), (np.absolute, -2, -0.1), (np.fabs, -2, 2), (np.reciprocal, 0.5, 2),
    (np.exp, -2, 2), (np.exp2, -2, 2), (np.expm1, -2, 2), (np.log, 0.1, 3), (np.log2, 0.1, 3), (np.log10, 0.1, 3),
    (np.log1p, -0.5, 2), (np.sin, -3, 3), (np.cos, -3, 3), (np.tan, -1.2, 1.2), (np.arcsin, -0.9, 0.9),
    (np.arccos, -0.9, 0.9), (np.arctan, -3, 3), (np.sinh, -2, 2), (np.cosh, -2, 2), (np.tanh, -2, 2),
    (np.arcsinh, -3, 3), (np.arccosh, 1.1, 3), (np.arctanh, -0.9, 0.9), (np.rad2deg, -2, 2), (np.degrees, -2, 2),
    (np.deg2rad, -90, 90), (np.radians, -90, 90), (np.square, -2, 2), (np.sqrt, 0.1, 3), (np.sinc, 0.1, 2.5),
    (np.real, -2, 2), (np.imag, -2, 2), (np.conj, -2, 2), (np.conjugate, -2, 2), (np.angle, -2, 2),
    (np.real_if_close, -2, 2), (np.nan_to_num, -2, 2),
]
#: Functions of a float's bits or limits (ulps, neighbours, nan_to_num's largest float): where
#: float64 is computed in float32 (NARROW) they give float32's
#: (test_bit_level_functions_follow_the_precision_computed_in), not numpy's.
FLOAT64_BITS = {np.spacing, np.nextafter, np.nan_to_num}


def narrowed(dtype):
    return NARROW and onp.dtype(dtype) in (onp.dtype(F64), onp.dtype(C128))


UNARY_NODIFF = [np.floor, np.ceil, np.rint, np.round, np.around, np.fix, np.trunc, np.sign, np.cbrt, np.positive,
                np.signbit, np.isnan, np.isinf, np.isfinite, np.logical_not, np.spacing]


def _name(case):
    return case[0].__name__ if isinstance(case, tuple) else case.__name__


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_differentiable(dtype):
    """Every differentiable unary function over all shape cases, gradient and JVP, one program."""
    fns = {f.__name__ + str(i): sweep(f) for i, (f, lo, hi) in enumerate(UNARY_DIFF)}
    inputs = {f.__name__ + str(i): rands(dtype, lo, hi, seed=i) for i, (f, lo, hi) in enumerate(UNARY_DIFF)}
    check_family(fns, inputs)


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_values(dtype):
    fns = {f.__name__: sweep(f) for f in UNARY_NODIFF if not (f in FLOAT64_BITS and narrowed(dtype))}
    inputs = {f.__name__: rands(dtype, -3, 3, seed=i) for i, f in enumerate(UNARY_NODIFF)}
    check_family(fns, inputs, grad=False, jvp=False)


def test_unary_special_values():
    # no subnormals: XLA's CPU code flushes them to zero (numpy does not)
    special = onp.array([onp.nan, onp.inf, -onp.inf, 0.0, -0.0, 1.5, -1.5, 2.5, -0.5, 1e300, 3e-300])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fs = [np.negative, np.abs, np.exp, np.expm1, np.log, np.log1p, np.sqrt, np.sin, np.tanh, np.arctan,
              np.arcsinh, np.floor, np.ceil, np.rint, np.trunc, np.sign, np.cbrt, np.reciprocal, np.square,
              np.signbit, np.isnan, np.isinf, np.isfinite, np.nan_to_num, np.sinc, np.spacing, np.exp2, np.log2,
              np.log10, np.deg2rad, np.fix, np.round, np.angle]
        for x in (special, special.astype(F32)):
            if narrowed(x.dtype):  # float64 computed in float32: 1e300 and 3e-300 are not float32's
                x = x[representable_32(x)]
            kept = [f for f in fs if not (f in FLOAT64_BITS and narrowed(x.dtype))]
            check_value(lambda x: tuple(f(x) for x in [x] for f in kept), x, atol=0)  # relative only
        check_value(lambda x: np.nan_to_num(x, nan=1.0, posinf=2.0, neginf=-3.0), special[representable_32(special)])
        check_value(lambda x: np.round(x, 2), onp.array([1.23456, -2.5555, 0.125]))
        check_value(lambda x: np.round(x, -1), onp.array([14.0, -25.0, 35.0]))


@pytest.mark.parametrize("dtype", [C128, C64])
def test_unary_complex(dtype):
    fs = [np.negative, np.exp, np.log, np.sqrt, np.sin, np.cos, np.tanh, np.sinh, np.cosh, np.square,
          np.reciprocal, np.conj, np.real, np.imag, np.abs, np.angle, np.expm1, np.log1p, np.tan, np.arctan,
          np.arcsinh]
    fns = {f.__name__: sweep(f) for f in fs}
    inputs = {f.__name__: rands(dtype, 0.2, 1.2, shapes=[(2, 3), ()], seed=i) for i, f in enumerate(fs)}
    check_family(fns, inputs, grad_rtol=1e-10 if dtype == C128 else 1e-4, exclude_jvp=["absolute", "angle"])
    xs = inputs["exp"]
    check_value(lambda x: (np.sign(x), np.isnan(x), np.isfinite(x), np.round(x, 1), np.log10(x), np.log2(x),
                           np.exp2(x), np.arcsin(x), np.arccos(x), np.arccosh(x + 2), np.arctanh(x / 3)), xs[0],
                rtol=1e-10 if dtype == C128 else 1e-4)


# ----- binary --------------------------------------------------------------------------------
BINARY_DIFF = [
    (np.add, -2, 2), (np.subtract, -2, 2), (np.multiply, -2, 2), (np.divide, 0.5, 2), (np.true_divide, 0.5, 2),
    (np.power, 0.5, 2), (np.maximum, -2, 2), (np.minimum, -2, 2), (np.fmax, -2, 2), (np.fmin, -2, 2),
    (np.logaddexp, -2, 2), (np.logaddexp2, -2, 2), (np.arctan2, 0.5, 2), (np.hypot, 0.5, 2), (np.mod, 0.5, 3),
    (np.remainder, 0.5, 3),
]
BINARY_VALUES = [np.floor_divide, np.fmod, np.copysign, np.float_power, np.heaviside, np.nextafter, np.equal,
                 np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal, np.logical_and,
                 np.logical_or, np.logical_xor]
BCAST = [((3, 1), (4,)), ((2, 3), ()), ((), ()), ((0, 3), (1, 3)), ((1,), (2, 1, 1))]


def _bcast(dtype):
    return BCAST if dtype == F64 else BCAST[:2]


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_differentiable(dtype):
    """Every differentiable binary ufunc over the broadcasting cases, in one program."""
    fns, inputs = {}, {}
    for i, (f, lo, hi) in enumerate(BINARY_DIFF):
        name = f"{f.__name__}{i}"
        fns[name] = lambda xs, ys, f=f: tuple(f(x, y) for x, y in zip(xs, ys))
        inputs[name] = (tuple(rand(a, dtype, lo, hi, 1 + i) for a, _ in _bcast(dtype)),
                        tuple(rand(b, dtype, lo, hi, 2 + i) for _, b in _bcast(dtype)))
    # (derivatives that cancel, power's JVP 0.36 - 0.34: on a TPU at its pow's and log's precision, helpers.TPU_RTOL)
    check_family(fns, inputs, exclude_jvp=[n for n in fns if n.startswith("hypot")],  # autograd: no hypot JVP
                 grad_rtol=TPU_RTOL)


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_values(dtype):
    fns, inputs = {}, {}
    for i, f in enumerate(BINARY_VALUES):
        fns[f.__name__] = lambda xs, ys, f=f: tuple(f(x, y) for x, y in zip(xs, ys))
        inputs[f.__name__] = (tuple(rand(a, dtype, -3, 3, 1 + i) for a, _ in BCAST),
                              tuple(rand(b, dtype, -3, 3, 2 + i) for _, b in BCAST))
    check_family(fns, inputs, grad=False, jvp=False)


def test_binary_special_values():
    v = onp.array([onp.nan, onp.inf, -onp.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0])
    x, y = onp.repeat(v, v.size), onp.tile(v, v.size)
    fs = [np.add, np.subtract, np.multiply, np.divide, np.power, np.maximum, np.minimum, np.fmax, np.fmin,
          np.logaddexp, np.logaddexp2, np.arctan2, np.hypot, np.mod, np.fmod, np.floor_divide, np.copysign,
          np.heaviside, np.nextafter, np.equal, np.less, np.greater_equal, np.float_power, np.logical_and]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for a, b in ((x, y), (x.astype(F32), y.astype(F32))):
            kept = [f for f in fs if not (f in FLOAT64_BITS and narrowed(a.dtype))]
            check_value(lambda a, b: tuple(f(a, b) for f in kept), a, b, atol=0)
            check_value(lambda a, b: np.divmod(a, b), a, b, atol=0)


def test_binary_complex():
    x, y = rand((2, 3), C128, -2, 2, 1), rand((3,), C128, -2, 2, 2)
    for f in (np.add, np.subtract, np.multiply, np.divide, np.power):
        check(lambda x, y: f(x, y), x, y, argnums=(0, 1), rtol=1e-10)
    check(lambda x, y: x * y + 2.0, x.astype(C64), y.astype(C64), argnums=(0, 1))
    check(lambda x, y: x * y, x, rand((3,), F64, -2, 2, 3), argnums=(0, 1))  # complex * real
    check_value(lambda x, y: (np.equal(x, y), np.not_equal(x, x), np.maximum(x, y), np.minimum(x, y)), x, y)
    # numpy orders complex numbers lexicographically; NaN wins in maximum, loses in fmax
    a = onp.array([1 + 2j, 1 - 1j, 2 + 0j, 1 + 2j, onp.nan + 1j, 3 + 0j])
    b = onp.array([1 + 1j, 1 + 3j, 1 + 0j, 1 + 2j, 0j, complex(1, onp.nan)])
    check_value(lambda a, b: (np.less(a, b), np.less_equal(a, b), np.greater(a, b), np.greater_equal(a, b),
                              np.maximum(a, b), np.minimum(a, b), np.fmax(a, b), np.fmin(a, b),
                              np.clip(a, 1 + 0j, 1 + 2j), np.sort(a), np.argsort(b)), a, b)


def test_mixed_precision_and_scalars():
    x32, x64 = rand((3,), F32), rand((3,), F64)
    check(lambda x: x * 2.0 + 1 - 3.5 / (x + 4.0), x32)
    check(lambda x: np.float64(2) * x, x32)
    check(lambda x: x * onp.array(2.0), x32)
    check(lambda x, y: x * y, x32, x64, argnums=(0, 1))
    check(lambda x, y: x ** y, x32, 3, argnums=(0,))
    check(lambda x: x ** 2 + 2 ** x + x ** 0.5, onp.abs(x32) + 0.1)
    check(lambda x, s: x * s, x32, 2.5)  # a traced Python float stays weak
    check(lambda x: np.float32(2) * x + 1j, x32)
    check(lambda x: np.sqrt(x + 0j), x32)


INT_TYPES = [onp.int8, onp.int32, onp.int64, onp.uint8, onp.uint32]


@pytest.mark.parametrize("dtype", INT_TYPES, ids=lambda d: onp.dtype(d).name)
def test_integer_ops(dtype):
    signed = onp.dtype(dtype).kind == "i"
    x = rand((24,), dtype, -9 if signed else 0, 9, 1)
    y = rand((24,), dtype, -4 if signed else 0, 4, 2)
    y[:4] = 0
    fs = [np.add, np.subtract, np.multiply, np.floor_divide, np.remainder, np.fmod, np.maximum, np.minimum,
          np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.equal, np.less, np.greater_equal, np.logical_and,
          np.logical_xor, np.fmax, np.fmin, np.gcd, np.lcm]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_exact(lambda x, y: tuple(f(x, y) for f in fs), x, y)
        check_exact(lambda x, y: np.divmod(x, y), x, y)
        check_value(lambda x, y: (np.true_divide(x, y), np.divide(x, 2), np.arctan2(x, y), np.hypot(x, y)), x, y)
    check_exact(lambda x: (np.negative(x), np.abs(x), np.sign(x), np.invert(x), np.square(x), np.positive(x),
                           np.left_shift(x, 2), np.right_shift(x, 1), np.bitwise_count(x), x + 3, x * 2, x // 3,
                           x % 3, -x, ~x, x ** 2, np.floor(x), np.trunc(x), np.isnan(x), np.signbit(x)), x)
    check_value(lambda x: (np.sqrt(np.abs(x)), np.exp(x), np.sin(x), x / 2, x * 2.5, np.logaddexp(x, x)), x)


def test_integer_division_signs():
    a = onp.array([7, -7, 7, -7, 0, 5, -5, 3], onp.int64)
    b = onp.array([2, 2, -2, -2, 3, 0, 0, 1], onp.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_exact(lambda a, b: (a // b, a % b, np.fmod(a, b), np.divmod(a, b)), a, b)
        check_exact(lambda a: (a // 2, a % -3, np.fmod(a, -3)), a)
        check_exact(lambda a, b: (a // b, a % b), a.astype(onp.int8), b.astype(onp.int8))
        check_value(lambda a, b: (a / b, a.astype(F64) // b, a.astype(F64) % b), a, b)
        wide = onp.int32 if NARROW else onp.int64  # (int64 computed in int32 on a 32-bit platform)
        mn = onp.array([onp.iinfo(wide).min, -1], wide)
        check_exact(lambda a: (a // -1, a % -1), mn)


def test_boolean_ops():
    p, q = rand((4, 5), onp.bool_, seed=1), rand((5,), onp.bool_, seed=2)
    check_exact(lambda p, q: (p & q, p | q, p ^ q, ~p, np.logical_and(p, q), np.logical_not(p), p + q, p * q,
                              np.maximum(p, q), np.minimum(p, q), p == q, p < q, np.add(p, True),
                              p + 1, p * 2.5, np.sum(p), np.invert(p)), p, q)
    check_exact(lambda p, q: (np.subtract(p.astype(int), q), p / 2), p, q)


def test_type_promotion():
    i32 = rand((3,), onp.int32, 1, 5)
    i8, f16 = rand((3,), onp.int8, 1, 5), rand((3,), onp.float16, 1, 2)
    b = rand((3,), onp.bool_)
    cases = [
        (lambda x: x * 2.0, (rand((3,), F32),)),
        (lambda x: x + 2, (i32,)),
        (lambda x: x + 2.0, (i32,)),
        (lambda x: x / 2, (i32,)),
        (lambda x, y: x + y, (i32, rand((3,), F32))),
        (lambda x, y: x + y, (i8, f16)),
        (lambda x: x + 1, (b,)),
        (lambda x: x + 1.0, (b,)),
        (lambda x: x == 1.0, (rand((3,), F32),)),
        (lambda x: np.float64(2) * x, (rand((3,), F32),)),
        (lambda x: np.float32(2) * x, (i8,)),
        (lambda x: np.int64(2) * x, (i8,)),
        (lambda x: x * onp.uint8(3), (i8,)),
    ]
    for f, args in cases:
        check_value(f, *args)


def test_clip_where_maximum():
    x = rand((4, 5), F64, -2, 2)
    check(lambda x: np.clip(x, -0.5, 0.7), x)
    check(lambda x: np.clip(x, -0.5, 0.7), x.astype(F32))
    check(lambda x, lo: np.clip(x, lo, 1.0), x, rand((5,), F64, -1, 0), argnums=(0,))
    check_jvp(lambda x: np.clip(x, -0.5, 0.7), x)
    check_value(lambda x: (np.clip(x, None, 0.5), np.clip(x, -0.5, None), x.clip(0, 1)), x)
    check_value(lambda x: np.clip(rand((3,), onp.int32, -5, 5), -2, 2) + x[0, :3], x)
    check(lambda x: np.where(x > 0, x, 0.1 * x), x)
    check(lambda x: np.where(x > 0, x, 0.0), x.astype(F32))
    check(lambda x, y: np.where(x > y, x, y), x, rand((5,), F64, -1, 1), argnums=(0, 1))
    check(lambda x: np.where(onp.array([True, False, True, True, False]), np.sin(x), np.cos(x)), x)
    check_jvp(lambda x: np.where(x > 0, x ** 2, -x), x)
    check_value(lambda x: (np.where(x > 0, 1, 0), np.where(x > 0, 1.0, x.astype(F32))), x)
    check(lambda x: np.maximum(x, 0.0) + np.minimum(x, 0.5) + np.maximum(x, x.T[0:1].T), x)
    check(lambda x: np.maximum(x, onp.zeros(5)), onp.array([[0.0, 1, -1, 0, 2]]))  # ties split the gradient


def test_nan_propagation():
    x = onp.array([1.0, onp.nan, -2.0, onp.inf, -onp.inf, 0.0])
    y = onp.array([onp.nan, 0.5, -3.0, onp.nan, 1.0, -0.0])
    check_value(lambda x, y: (np.maximum(x, y), np.minimum(x, y), np.fmax(x, y), np.fmin(x, y),
                              np.clip(x, -1, 1), np.where(np.isnan(x), 0.0, x)), x, y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_compositions_xla_folds_over_the_reals_keep_numpys_overflow_and_nan(dtype):
    """log(exp(x)), log(x ** y), sqrt(x * x), exp(x) ** y, exp(x) * exp(y), exp(x) / exp(y),
    (x / y) / z and x / (y / z), where an intermediate value overflows, underflows to 0 or is
    NaN: XLA's simplifier folds each into an expression of the reals (context.FOLDED_RESULTS),
    whose value there is finite (log(exp(-800.0)): numpy -inf, folded -800); and their
    gradients. And x ** 0.5, numpy's sqrt: sqrt(-0.0) is -0.0, sqrt(-inf) NaN."""
    if narrowed(dtype):
        pytest.skip("float64 computed in float32 overflows where numpy's float64 does not")
    fi = onp.finfo(dtype)
    over = float(onp.log(fi.max)) + 10.0        # exp(over) is inf
    under = -float(onp.log(2.0)) * (fi.nmant - fi.minexp) - 10.0  # exp(under) is 0, not subnormal
    huge, big = float(fi.max) / 4, float(fi.max) ** 0.75   # big * big is inf
    t = lambda *v: onp.array(v, dtype)  # noqa: E731
    cases = [
        (lambda x: np.log(np.exp(x)), t(under, -1.0, 0.5, over)),
        (lambda x, y: np.log(x ** y), t(-2.0, -2.0, 2.0, 0.5), t(0.5, 3.0, 3.0, -0.5)),
        (lambda x: np.sqrt(x * x), t(big, -big, 3.0)),
        (lambda x: np.sqrt(x ** 2), t(big, -big, 3.0)),
        (lambda x, y: np.exp(x) ** y, t(under, 1.0), t(1.0 / big, 2.0)),
        (lambda x, y: np.exp(x) * np.exp(y), t(over, 1.0), t(under, 2.0)),
        (lambda x, y: np.exp(x) / np.exp(y), t(over, 1.0), t(over, 2.0)),
        (lambda x, y, z: (x / y) / z, t(huge, 6.0), t(huge, 2.0), t(big, 3.0)),
        (lambda x, y, z: x / (y / z), t(huge, 6.0), t(huge, 2.0), t(huge, 3.0)),
        (lambda x: x ** 0.5, t(-0.0, -onp.inf, 4.0, 2.0)),  # ndarray's ** 0.5 is sqrt (tracing._sqrt_power)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for f, *args in cases:
            check_value(f, *args, atol=0)
            check_value(grad(lambda *a: np.sum(f(*a))), *args, atol=0)


def test_misc_elementwise():
    x = rand((3, 4), F64, 0.5, 2)
    check_value(lambda x: np.ldexp(x, 3), x)
    check_value(lambda x: (np.frexp(x), np.modf(x * 3 - 2), np.ldexp(x, onp.array([1, -2, 3, 0]))), x)
    check_value(lambda x: (np.frexp(x.astype(F32)), np.modf(x.astype(F32)), np.frexp(onp.array([0.0, -0.0, 1e-300]))), x)
    check_value(lambda x: np.isclose(x, x + 1e-9), x)
    check_value(lambda x: (np.isclose(x, onp.inf), np.isclose(x, 1.0, atol=0.5)), x)
    check_value(lambda x: (np.iscomplex(x), np.isreal(x), np.iscomplex(x + 1j * (x > 1)), np.isreal(x + 0j)), x)
    check(lambda x: np.logaddexp(x, 2 * x) + np.logaddexp2(x, -x), x, rtol=1e-11)
    check(lambda x: np.sinc(x - 1.0), onp.array([0.0, 0.5, 1.0, 2.0]))  # sinc(0) == 1; autograd's grad: nan
    check(lambda x: np.hypot(x, 3.0) + np.arctan2(2.0, x), x)
    check(lambda x: np.angle(x + 1j * x), x)


def test_expm1_log1p_accuracy():
    x = onp.array([1e-10, -1e-12, 1e-5, 0.3, -0.7])
    check(lambda x: np.expm1(x) + np.log1p(x), x)
    check(lambda x: np.expm1(x) * 1e10, x[:1])


def test_inplace_and_operators():
    x = rand((3, 4), F64)
    def f(x):
        y = x * 1.0
        y += 2.0
        y *= x
        y -= 1
        y /= 2.0
        y **= 2
        return y + abs(-y) + (y @ onp.ones((4, 2))).sum()
    check(f, x)

    def g(x):
        i = np.arange(4)
        i += 1
        i //= 2
        return x * i
    check(g, x)


def test_select_choose():
    """Values only: autograd differentiates select/choose through object arrays of its boxes, not
    through a VJP (under jit_ps(grad) np.select falls back to Python; use np.where)."""
    x = onp.linspace(-1, 1, 5)
    check_value(lambda x: (np.select([x < 0, x > 0.5], [x ** 2, np.sin(x)], default=0.0),
                           np.select([x < 0], [x.astype(F32)]), np.select([x > 0, x < 0.5], [x, 3], x[::-1])), x)
    check_value(lambda x: (np.choose(onp.array([0, 1, 0, 1, 1]), [x, 2 * x]),
                           np.choose(onp.array([[0], [2]]), [x, 2 * x, 3.0])), x)
    check_value(lambda x, i: (np.choose(i, [x, 2 * x, 3.0], mode="wrap"), np.choose(i, [x, -x], mode="clip")),
                x, onp.array([0, 1, 5, -1, 2]))


def test_bit_level_functions_follow_the_precision_computed_in():
    """float64 computed in float32 (x64=False, a TPU): spacing, nextafter, frexp and signbit
    are those of the float32 value (frexp's mantissas came out 0 and spacing 1.4e-45 when they
    read float64's 52-bit mantissa from a 32-bit pattern)."""
    x = onp.array([0.0, -0.0, 1.0, -2.0, 0.75, 3.5, -1e-30, onp.inf, onp.nan])
    y = onp.array([1.0, -1.0, 0.0, 0.0, 1.0, 3.5, 1.0, 0.0, 1.0])
    f = lambda x, y: (np.spacing(x), np.nextafter(x, y), *np.frexp(x), np.signbit(x))  # noqa: E731
    got = jit_ps(f, x64=False)(x, y)
    for g, e in zip(got, f(x.astype(F32), y.astype(F32))):
        onp.testing.assert_array_equal(g, e)


@pytest.mark.parametrize("dtype", FLOATS)
def test_bit_level_functions_exact(dtype):
    """spacing, nextafter and frexp are computed from the bits, so they are exact even where the
    result or the input is subnormal (XLA's CPU code flushes subnormal arithmetic to zero)."""
    fi = onp.finfo(dtype)
    x = onp.array([0.0, -0.0, 1.0, -2.0, onp.inf, -onp.inf, onp.nan, fi.max, -fi.max, fi.tiny, -fi.tiny,
                   fi.smallest_subnormal, -fi.smallest_subnormal, fi.tiny * 3, 1e-30, 3.5], dtype)
    y = onp.array([1.0, -1, 0, 0, 0, 0, 1, onp.inf, 0, 0, -1, onp.inf, onp.inf, 0, 1, 3.5], dtype)
    f = lambda x, y: (np.spacing(x), np.nextafter(x, y), *np.frexp(x), np.signbit(x))  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = f(x, y)
        got = jit_ps(f)(x, y)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype, i
        if e.dtype.kind == "f":  # bit for bit, except NaN payloads
            assert onp.array_equal(onp.isnan(g), onp.isnan(e)), i
            ok = ~onp.isnan(e)
            onp.testing.assert_array_equal(g[ok].view(f"i{e.itemsize}"), e[ok].view(f"i{e.itemsize}"), err_msg=str(i))
        else:
            onp.testing.assert_array_equal(g, e, err_msg=str(i))
