"""Elementwise numpy: ufuncs, and the functions that are ufunc-like (where, clip, real...).

A ufunc's rule is built from a short body that sees its operands already converted to
numpy's loop dtypes and broadcast together (`ctx.ufunc_inputs`), so each table entry
only says what the operation is. Where numpy's definition differs from the StableHLO op
of the same name (floor division, remainder, hypot, logaddexp...), the body spells
numpy's definition out, because results must match numpy, not C.
"""
import math

import numpy as np

from .. import hlo
from ..context import result_type
from ..registry import lowers, register_translation_rule

_UFUNC_KWARGS = {"casting", "order", "subok"}


def ufunc_rule(ufunc, body):
    """Rule for `ufunc` from `body(ctx, *operands) -> Value | tuple` on loop-typed operands."""

    def rule(ctx, *inputs, dtype=None, where=True, signature=None, **kwargs):
        unknown = set(kwargs) - _UFUNC_KWARGS
        if unknown or where is not True or signature is not None:
            raise NotImplementedError(f"np.{ufunc.__name__} keyword arguments {sorted(unknown) or ['where']} "
                                      "are not supported under jit_ps")
        if len(inputs) != ufunc.nin:
            raise TypeError(f"{ufunc.__name__}() takes {ufunc.nin} positional arguments, got {len(inputs)}")
        values, out_dtypes = ctx.ufunc_inputs(ufunc, inputs, dtype)
        out = body(ctx, *values)
        outs = out if isinstance(out, tuple) else (out,)
        outs = tuple(ctx.astype(o, dt) for o, dt in zip(outs, out_dtypes))
        return outs if ufunc.nout > 1 else outs[0]

    rule.__name__ = f"{ufunc.__name__}_rule"
    register_translation_rule(ufunc, rule)
    return rule


def _op(name):
    return lambda ctx, *xs: ctx.op1(f"stablehlo.{name}", xs, xs[0].shape, xs[0].dtype)


def _chlo(name):
    return lambda ctx, x: ctx.chlo(name, x)


def _real_dtype(dtype):
    return np.empty(0, dtype).real.dtype


def _const_like(ctx, value, v):
    return ctx.full(v.shape, value, v.dtype)


def _is_float(v):
    return v.dtype.kind in "fc"


# ----- unary ---------------------------------------------------------------------------------
def _abs(ctx, x):
    if x.dtype.kind == "b":
        return x
    if x.dtype.kind == "u":
        return x
    return ctx.op1("stablehlo.abs", [x], x.shape, _real_dtype(x.dtype))


def _sign(ctx, x):
    if x.dtype.kind == "c":  # numpy 2: x / |x|, and 0 at 0
        mag = ctx.convert(ctx.unary("abs", x, _real_dtype(x.dtype)), x.dtype)
        zero = ctx.zeros_like(x)
        safe = ctx.select(ctx.compare(mag, zero, "EQ"), _const_like(ctx, 1, x), mag)
        return ctx.select(ctx.compare(mag, zero, "EQ"), zero, ctx.binary("divide", x, safe))
    if x.dtype.kind == "u":
        return ctx.convert(ctx.compare(x, ctx.zeros_like(x), "NE"), x.dtype)
    if x.dtype.kind == "f":  # numpy's sign of -0.0 is +0.0; stablehlo.sign keeps the zero's sign
        zero = ctx.zeros_like(x)
        return ctx.select(ctx.compare(x, zero, "EQ"), zero, ctx.unary("sign", x))
    return ctx.unary("sign", x)


def _square(ctx, x):
    return ctx.binary("multiply", x, x)


def _reciprocal(ctx, x):
    return ctx.binary("divide", _const_like(ctx, 1, x), x)


def _log_base(base):
    return lambda ctx, x: ctx.binary("divide", ctx.unary("log", x), _const_like(ctx, math.log(base), x))


def _exp2(ctx, x):
    return ctx.binary("power", _const_like(ctx, 2, x), x)


def _scale(factor):
    return lambda ctx, x: ctx.binary("multiply", x, _const_like(ctx, factor, x))


def _trunc(ctx, x):
    if not _is_float(x):
        return x
    return ctx.select(ctx.compare(x, ctx.zeros_like(x), "LT"), ctx.unary("ceil", x), ctx.unary("floor", x))


def _rounding(name):
    return lambda ctx, x: ctx.unary(name, x) if _is_float(x) else x


def _not(ctx, x):
    return ctx.unary("not", x)


def _logical_not(ctx, x):
    if x.dtype.kind == "b":
        return ctx.unary("not", x)
    return ctx.compare(x, ctx.zeros_like(x), "EQ")


def isnan(ctx, x):
    if not _is_float(x):
        return ctx.full(x.shape, False, np.bool_)
    if x.dtype.kind == "c":
        re, im = ctx.real(x), ctx.imag(x)
        return ctx.binary("or", ctx.compare(re, re, "NE"), ctx.compare(im, im, "NE"))
    return ctx.compare(x, x, "NE")


def _isinf(ctx, x):
    if not _is_float(x):
        return ctx.full(x.shape, False, np.bool_)
    if x.dtype.kind == "c":
        return ctx.binary("or", _isinf(ctx, ctx.real(x)), _isinf(ctx, ctx.imag(x)))
    return ctx.compare(ctx.unary("abs", x), _const_like(ctx, np.inf, x), "EQ")


def _isfinite(ctx, x):
    if not _is_float(x):
        return ctx.full(x.shape, True, np.bool_)
    if x.dtype.kind == "c":
        return ctx.binary("and", _isfinite(ctx, ctx.real(x)), _isfinite(ctx, ctx.imag(x)))
    return ctx.op1("stablehlo.is_finite", [x], x.shape, np.bool_)


def _signbit(ctx, x):
    if x.dtype.kind == "f":
        bits = np.dtype(f"i{x.dtype.itemsize}")
        as_int = ctx.bitcast_convert(x, bits)
        return ctx.compare(as_int, ctx.zeros_like(as_int), "LT")
    return ctx.compare(x, ctx.zeros_like(x), "LT")


def conj(ctx, x):
    if x.dtype.kind != "c":
        return x
    return ctx.complex(ctx.real(x), ctx.unary("negate", ctx.imag(x), _real_dtype(x.dtype)))


def _positive(ctx, x):
    return x


UNARY = {
    np.negative: _op("negate"),
    np.positive: _positive,
    np.absolute: _abs,
    np.fabs: _abs,
    np.sign: _sign,
    np.exp: _op("exponential"),
    np.expm1: _op("exponential_minus_one"),
    np.exp2: _exp2,
    np.log: _op("log"),
    np.log1p: _op("log_plus_one"),
    np.log2: _log_base(2),
    np.log10: _log_base(10),
    np.sqrt: _op("sqrt"),
    np.cbrt: _op("cbrt"),
    np.square: _square,
    np.reciprocal: _reciprocal,
    np.sin: _op("sine"),
    np.cos: _op("cosine"),
    np.tan: _op("tan"),
    np.arcsin: _chlo("asin"),
    np.arccos: _chlo("acos"),
    np.arctan: _chlo("atan"),
    np.sinh: _chlo("sinh"),
    np.cosh: _chlo("cosh"),
    np.tanh: _op("tanh"),
    np.arcsinh: _chlo("asinh"),
    np.arccosh: _chlo("acosh"),
    np.arctanh: _chlo("atanh"),
    np.floor: _rounding("floor"),
    np.ceil: _rounding("ceil"),
    np.rint: _rounding("round_nearest_even"),
    np.trunc: _trunc,
    np.logical_not: _logical_not,
    np.invert: _not,
    np.isnan: isnan,
    np.isinf: _isinf,
    np.isfinite: _isfinite,
    np.signbit: _signbit,
    np.deg2rad: _scale(math.pi / 180),
    np.rad2deg: _scale(180 / math.pi),
    np.degrees: _scale(180 / math.pi),
    np.radians: _scale(math.pi / 180),
    np.spacing: lambda ctx, x: _spacing(ctx, x),
    np.bitwise_count: lambda ctx, x: _bitwise_count(ctx, x),
    np.modf: lambda ctx, x: _modf(ctx, x),
    np.frexp: lambda ctx, x: _frexp(ctx, x),
    np.conjugate: conj,
}


# ----- binary --------------------------------------------------------------------------------
def _arith(name, bool_name):
    def body(ctx, x, y):
        if x.dtype.kind == "b":
            return ctx.binary(bool_name, x, y)
        return ctx.binary(name, x, y)
    return body


def _float_remainder(ctx, a, b):
    """C's fmod: XLA's remainder, except that XLA:TPU's gives NaN for a finite `a` over an
    infinite `b` (a - b * trunc(a / b)), where fmod gives `a` (np.mod(-2.0, -inf) == -2.0)."""
    rem = ctx.binary("remainder", a, b)
    if ctx.platform == "cpu":  # (XLA:CPU's is fmod)
        return rem
    return ctx.select(ctx.binary("and", _isinf(ctx, b), _isfinite(ctx, a)), a, rem)


def _float_divmod(ctx, a, b):
    """numpy's npy_divmod for floats: (floor quotient, remainder with the divisor's sign)."""
    zero, one = ctx.zeros_like(a), _const_like(ctx, 1, a)
    mod = _float_remainder(ctx, a, b)
    div = ctx.binary("divide", ctx.binary("subtract", a, mod), b)
    mod_nonzero = ctx.compare(mod, zero, "NE")
    wrong_sign = ctx.compare(ctx.compare(b, zero, "LT"), ctx.compare(mod, zero, "LT"), "NE")
    fix = ctx.binary("and", mod_nonzero, wrong_sign)
    mod = ctx.select(fix, ctx.binary("add", mod, b), mod)
    div = ctx.select(fix, ctx.binary("subtract", div, one), div)
    mod = ctx.select(mod_nonzero, mod, _copysign(ctx, zero, b))
    floordiv = ctx.unary("floor", div)
    round_up = ctx.compare(ctx.binary("subtract", div, floordiv), _const_like(ctx, 0.5, a), "GT")
    floordiv = ctx.select(round_up, ctx.binary("add", floordiv, one), floordiv)
    quotient = ctx.binary("divide", a, b)
    floordiv = ctx.select(ctx.compare(div, zero, "NE"), floordiv, _copysign(ctx, zero, quotient))
    b_zero = ctx.compare(b, zero, "EQ")
    floordiv = ctx.select(b_zero, quotient, floordiv)
    mod = ctx.select(b_zero, ctx.binary("remainder", a, b), mod)
    return floordiv, mod


def int_divmod(ctx, a, b):
    """numpy's integer floor division and remainder, with x // 0 == x % 0 == 0."""
    zero, one = ctx.zeros_like(a), _const_like(ctx, 1, a)
    b_zero = ctx.compare(b, zero, "EQ")
    safe_b = ctx.select(b_zero, one, b)
    q = ctx.binary("divide", a, safe_b)
    r = ctx.binary("remainder", a, safe_b)
    if a.dtype.kind == "i":
        fix = ctx.binary("and", ctx.compare(r, zero, "NE"),
                         ctx.compare(ctx.compare(r, zero, "LT"), ctx.compare(safe_b, zero, "LT"), "NE"))
        q = ctx.select(fix, ctx.binary("subtract", q, one), q)
        r = ctx.select(fix, ctx.binary("add", r, safe_b), r)
    return ctx.select(b_zero, zero, q), ctx.select(b_zero, zero, r)


def _divmod(ctx, a, b):
    return _float_divmod(ctx, a, b) if _is_float(a) else int_divmod(ctx, a, b)


def _floor_divide(ctx, a, b):
    return _divmod(ctx, a, b)[0]


def _remainder(ctx, a, b):
    return _divmod(ctx, a, b)[1]


def _fmod(ctx, a, b):
    if _is_float(a):
        return _float_remainder(ctx, a, b)
    zero = ctx.zeros_like(a)
    b_zero = ctx.compare(b, zero, "EQ")
    return ctx.select(b_zero, zero, ctx.binary("remainder", a, ctx.select(b_zero, _const_like(ctx, 1, a), b)))


def _copysign(ctx, x, y):
    mag = ctx.unary("abs", x)
    return ctx.select(_signbit(ctx, y), ctx.unary("negate", mag), mag)


def complex_order(ctx, x, y, direction):
    """numpy's order of complex numbers: lexicographic on (real, imag), and a NaN imaginary
    part makes the real parts' verdict false too."""
    xr, xi, yr, yi = ctx.real(x), ctx.imag(x), ctx.real(y), ctx.imag(y)
    strict = "LT" if direction in ("LT", "LE") else "GT"
    imag_ok = ctx.binary("and", ctx.compare(xi, xi, "EQ"), ctx.compare(yi, yi, "EQ"))
    return ctx.binary("or", ctx.binary("and", ctx.compare(xr, yr, strict), imag_ok),
                      ctx.binary("and", ctx.compare(xr, yr, "EQ"), ctx.compare(xi, yi, direction)))


def minmax(ctx, x, y, name, ignore_nan=False):
    """numpy's maximum/minimum (NaN wins) or fmax/fmin (NaN loses), complex included."""
    if x.dtype.kind == "b":
        return ctx.binary("or" if name == "maximum" else "and", x, y)
    if x.dtype.kind == "c":
        order = complex_order(ctx, x, y, "GE" if name == "maximum" else "LE")
        keep_x = ctx.binary("or", isnan(ctx, y if ignore_nan else x), order)
        return ctx.select(keep_x, x, y)
    out = ctx.binary(name, x, y)
    if not ignore_nan or not _is_float(x):
        return out
    return ctx.select(isnan(ctx, x), y, ctx.select(isnan(ctx, y), x, out))


def _fminmax(name):
    return lambda ctx, x, y: minmax(ctx, x, y, name, ignore_nan=True)


def _hypot(ctx, x, y):
    ax, ay = ctx.unary("abs", x), ctx.unary("abs", y)
    big, small = ctx.binary("maximum", ax, ay), ctx.binary("minimum", ax, ay)
    zero = ctx.zeros_like(big)
    safe = ctx.select(ctx.compare(big, zero, "EQ"), _const_like(ctx, 1, big), big)
    ratio = ctx.binary("divide", small, safe)
    out = ctx.binary("multiply", big, ctx.unary("sqrt", ctx.binary("add", _const_like(ctx, 1, big),
                                                                      ctx.binary("multiply", ratio, ratio))))
    out = ctx.select(ctx.compare(big, zero, "EQ"), zero, out)
    inf = _const_like(ctx, np.inf, big)
    any_inf = ctx.binary("or", ctx.compare(ax, inf, "EQ"), ctx.compare(ay, inf, "EQ"))
    return ctx.select(any_inf, inf, out)  # numpy: hypot(inf, nan) is inf


def _logaddexp_base(log_of_two, exp_name, log1p):
    """numpy's npy_logaddexp(2): exact at x == y (infinities included)."""
    def body(ctx, x, y):
        same = ctx.compare(x, y, "EQ")
        d = ctx.binary("subtract", x, y)
        m = ctx.binary("maximum", x, y)
        tail = log1p(ctx, exp_name(ctx, ctx.unary("negate", ctx.unary("abs", d))))
        out = ctx.select(ctx.compare(d, d, "NE"), d, ctx.binary("add", m, tail))
        return ctx.select(same, ctx.binary("add", x, _const_like(ctx, log_of_two, x)), out)
    return body


_logaddexp = _logaddexp_base(math.log(2), lambda ctx, v: ctx.unary("exponential", v),
                             lambda ctx, v: ctx.unary("log_plus_one", v))
_logaddexp2 = _logaddexp_base(
    1.0, _exp2,
    lambda ctx, v: ctx.binary("divide", ctx.unary("log_plus_one", v), _const_like(ctx, math.log(2), v)))


def _compare(direction):
    def body(ctx, x, y):
        if x.dtype.kind == "c" and direction not in ("EQ", "NE"):
            return complex_order(ctx, x, y, direction)
        return ctx.compare(x, y, direction)
    return body


def _logical(name):
    def body(ctx, x, y):
        return ctx.binary(name, ctx.astype(x, np.bool_), ctx.astype(y, np.bool_))
    return body


def _shift_right(ctx, x, y):
    return ctx.binary("shift_right_arithmetic" if x.dtype.kind == "i" else "shift_right_logical", x, y)


def _heaviside(ctx, x, h0):
    zero = ctx.zeros_like(x)
    out = ctx.select(ctx.compare(x, zero, "LT"), zero, _const_like(ctx, 1, x))
    out = ctx.select(ctx.compare(x, zero, "EQ"), h0, out)
    return ctx.select(isnan(ctx, x), x, out)


def _ldexp(ctx, x, e):
    two = _const_like(ctx, 2, x)
    return ctx.binary("multiply", x, ctx.binary("power", two, ctx.convert(e, x.dtype)))


# ----- bit-level float functions and integer number theory -------------------------------------
def _width(dtype):
    """Bits of a value of numpy dtype `dtype` in the module being emitted: a float64 computed in
    float32 (x64 off, a TPU) has float32's bits, its int64 bit pattern int32's."""
    return hlo.canonical_dtype(dtype).itemsize * 8


def _sign_constant(idt):
    n = _width(idt)
    return np.array(1 << (n - 1), dtype=f"u{n // 8}").view(f"i{n // 8}")


def _float_bits(dtype):
    """(signed int dtype of the same width, mantissa bits, exponent bits, exponent bias), the
    widths those of the float really computed in (hlo.canonical_dtype)."""
    dtype = np.dtype(dtype)
    nbits = _width(dtype)
    nmant = np.finfo(hlo.canonical_dtype(dtype)).nmant
    nexp = nbits - 1 - nmant
    return np.dtype(f"i{dtype.itemsize}"), nmant, nexp, 2 ** (nexp - 1) - 1


def _ibits(ctx, x, value):
    """A constant of x's shape holding the float whose bit pattern is the integer `value`."""
    idt = _float_bits(x.dtype)[0]
    return ctx.bitcast_convert(ctx.full(x.shape, value, idt), x.dtype)


def _order_key(ctx, x):
    """An integer with the order of the floats x (-0 and +0 equal), from the bits alone:
    XLA's CPU code treats subnormal operands of float comparisons as zero."""
    idt, _, _, _ = _float_bits(x.dtype)
    nbits = _width(idt)
    bits = ctx.bitcast_convert(x, idt)
    mag = ctx.binary("and", bits, ctx.full(x.shape, (1 << (nbits - 1)) - 1, idt))
    negative = ctx.compare(bits, ctx.full(x.shape, 0, idt), "LT")
    return ctx.select(negative, ctx.unary("negate", mag), mag), bits, mag


def _sign_bit(ctx, bits):
    idt = bits.dtype
    return ctx.binary("and", bits, ctx.full(bits.shape, _sign_constant(idt), idt))


def _nextafter(ctx, x, y):
    idt, _, _, _ = _float_bits(x.dtype)
    kx, bits, _ = _order_key(ctx, x)
    ky, ybits, _ = _order_key(ctx, y)
    izero, ione = ctx.full(x.shape, 0, idt), ctx.full(x.shape, 1, idt)
    away = ctx.compare(ctx.compare(ky, kx, "GT"), ctx.compare(kx, izero, "GT"), "EQ")
    out = ctx.binary("add", bits, ctx.select(away, ione, ctx.unary("negate", ione)))
    tiny = ctx.binary("or", ione, _sign_bit(ctx, ybits))  # the smallest subnormal, signed like y
    out = ctx.select(ctx.compare(kx, izero, "EQ"), tiny, out)
    out = ctx.bitcast_convert(out, x.dtype)
    out = ctx.select(ctx.compare(kx, ky, "EQ"), y, out)
    nan = ctx.binary("or", isnan(ctx, x), isnan(ctx, y))
    return ctx.select(nan, _const_like(ctx, np.nan, x), out)


def _spacing(ctx, x):
    """2**(exponent - mantissa bits), signed like x, built from bits: the result is often
    subnormal, and XLA flushes subnormal results of float arithmetic to zero."""
    if not _is_float(x):
        x = ctx.astype(x, np.float64)
    idt, nmant, nexp, _ = _float_bits(x.dtype)

    def c(v):
        return ctx.full(x.shape, v, idt)

    _, bits, mag = _order_key(ctx, x)
    e = ctx.binary("shift_right_logical", mag, c(nmant))
    normal = ctx.binary("shift_left", ctx.binary("subtract", e, c(nmant)), c(nmant))
    sub = ctx.binary("shift_left", c(1), ctx.binary("subtract", e, c(1)))
    out = ctx.select(ctx.compare(e, c(nmant), "GT"), normal, sub)
    out = ctx.select(ctx.compare(e, c(0), "EQ"), c(1), out)
    out = ctx.binary("or", out, _sign_bit(ctx, bits))
    out = ctx.select(ctx.compare(mag, c(0), "EQ"), c(1), out)  # spacing(-0.0) is +tiny
    finite_max = c(((1 << nexp) - 2) << nmant | ((1 << nmant) - 1))
    out = ctx.bitcast_convert(out, x.dtype)
    inf = ctx.select(_signbit(ctx, x), _const_like(ctx, -np.inf, x), _const_like(ctx, np.inf, x))
    out = ctx.select(ctx.compare(mag, finite_max, "EQ"), inf, out)
    return ctx.select(_isfinite(ctx, x), out, _const_like(ctx, np.nan, x))


def _modf(ctx, x):
    whole = _trunc(ctx, x)
    frac = ctx.select(_isinf(ctx, x), ctx.zeros_like(x), ctx.binary("subtract", x, whole))
    return _copysign(ctx, frac, x), whole


def _frexp(ctx, x):
    """Mantissa in [0.5, 1) and exponent from the bits (subnormal inputs included)."""
    idt, nmant, nexp, bias = _float_bits(x.dtype)
    nbits = _width(idt)

    def c(v):
        return ctx.full(x.shape, v, idt)

    bits = ctx.bitcast_convert(x, idt)
    sign = ctx.binary("and", bits, c(_sign_constant(idt)))
    mag = ctx.binary("and", bits, c((1 << (nbits - 1)) - 1))
    exp_field = ctx.binary("shift_right_logical", mag, c(nmant))
    mant = ctx.binary("and", mag, c((1 << nmant) - 1))
    # subnormals: shift the leading 1 of the mantissa up to the implicit-bit position
    lead = ctx.binary("subtract", c(nbits - 1), ctx.unary("count_leading_zeros", mant))
    shift = ctx.binary("subtract", c(nmant), lead)
    subnormal = ctx.compare(exp_field, c(0), "EQ")
    mant = ctx.select(subnormal, ctx.binary("and", ctx.binary("shift_left", mant, shift), c((1 << nmant) - 1)), mant)
    exp_field = ctx.select(subnormal, ctx.binary("subtract", c(1), shift), exp_field)
    m_bits = ctx.binary("or", ctx.binary("or", sign, mant), c((bias - 1) << nmant))
    m = ctx.bitcast_convert(m_bits, x.dtype)
    e = ctx.binary("add", exp_field, c(1 - bias))
    special = ctx.binary("or", ctx.compare(mag, c(0), "EQ"), ctx.unary("not", _isfinite(ctx, x)))
    return ctx.select(special, x, m), ctx.convert(ctx.select(special, c(0), e), np.int32)


def _bitwise_count(ctx, x):
    if x.dtype.kind == "b":
        return ctx.convert(x, np.uint8)
    if x.dtype.kind == "i":
        x = ctx.unary("abs", x)
    return ctx.unary("popcnt", x)


def _gcd(ctx, a, b):
    """Euclid's algorithm, all elements at once, until every remainder is zero."""
    if a.dtype.kind == "b":
        return ctx.binary("or", a, b)
    if a.dtype.kind == "i":
        a, b = ctx.unary("abs", a), ctx.unary("abs", b)

    def cond(bld, x, y):
        nz = bld.compare(y, bld.zeros_like(y), "NE")
        return bld.reduce_with(nz, range(nz.ndim), "or", False)

    def body(bld, x, y):
        nz = bld.compare(y, bld.zeros_like(y), "NE")
        safe = bld.select(nz, y, bld.full(y.shape, 1, y.dtype))
        return bld.select(nz, y, x), bld.select(nz, bld.binary("remainder", x, safe), bld.zeros_like(y))

    return ctx.while_loop([a, b], cond, body)[0]


def _lcm(ctx, a, b):
    if a.dtype.kind == "b":
        return ctx.binary("and", a, b)
    g = _gcd(ctx, a, b)
    zero = ctx.zeros_like(a)
    g_zero = ctx.compare(g, zero, "EQ")
    safe = ctx.select(g_zero, _const_like(ctx, 1, g), g)
    if a.dtype.kind == "i":
        a, b = ctx.unary("abs", a), ctx.unary("abs", b)
    out = ctx.binary("multiply", ctx.binary("divide", a, safe), b)
    return ctx.select(g_zero, zero, out)


BINARY = {
    np.add: _arith("add", "or"),
    np.subtract: _arith("subtract", "xor"),
    np.multiply: _arith("multiply", "and"),
    np.true_divide: _op("divide"),
    np.floor_divide: _floor_divide,
    np.remainder: _remainder,
    np.fmod: _fmod,
    np.divmod: _divmod,
    np.power: _op("power"),
    np.float_power: _op("power"),
    np.maximum: lambda ctx, x, y: minmax(ctx, x, y, "maximum"),
    np.minimum: lambda ctx, x, y: minmax(ctx, x, y, "minimum"),
    np.fmax: _fminmax("maximum"),
    np.fmin: _fminmax("minimum"),
    np.arctan2: _op("atan2"),
    np.hypot: _hypot,
    np.logaddexp: _logaddexp,
    np.logaddexp2: _logaddexp2,
    np.copysign: _copysign,
    np.equal: _compare("EQ"),
    np.not_equal: _compare("NE"),
    np.less: _compare("LT"),
    np.less_equal: _compare("LE"),
    np.greater: _compare("GT"),
    np.greater_equal: _compare("GE"),
    np.logical_and: _logical("and"),
    np.logical_or: _logical("or"),
    np.logical_xor: _logical("xor"),
    np.bitwise_and: _op("and"),
    np.bitwise_or: _op("or"),
    np.bitwise_xor: _op("xor"),
    np.left_shift: _op("shift_left"),
    np.right_shift: _shift_right,
    np.heaviside: _heaviside,
    np.ldexp: _ldexp,
    np.nextafter: _nextafter,
    np.gcd: _gcd,
    np.lcm: _lcm,
}

for _table in (UNARY, BINARY):
    for _ufunc, _body in _table.items():
        ufunc_rule(_ufunc, _body)
ufunc_rule(np._core.umath.clip, lambda ctx, x, lo, hi: minmax(ctx, minmax(ctx, x, lo, "maximum"), hi, "minimum"))


# ----- ufunc-like functions ------------------------------------------------------------------
@lowers(np.clip)
def _clip(ctx, a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kw):
    lo = a_min if a_min is not np._NoValue else min
    hi = a_max if a_max is not np._NoValue else max
    lo = None if lo is np._NoValue else lo
    hi = None if hi is np._NoValue else hi
    if lo is None and hi is None:
        raise ValueError("One of max or min must be given")
    if lo is None:
        return ctx_minimum(ctx, a, hi)
    if hi is None:
        return ctx_maximum(ctx, a, lo)
    values, (dt,) = ctx.ufunc_inputs(np._core.umath.clip, (a, lo, hi))
    x, lo_v, hi_v = values
    return ctx.astype(minmax(ctx, minmax(ctx, x, lo_v, "maximum"), hi_v, "minimum"), dt)


def ctx_minimum(ctx, a, b):
    (x, y), (dt,) = ctx.ufunc_inputs(np.minimum, (a, b))
    return ctx.astype(minmax(ctx, x, y, "minimum"), dt)


def ctx_maximum(ctx, a, b):
    (x, y), (dt,) = ctx.ufunc_inputs(np.maximum, (a, b))
    return ctx.astype(minmax(ctx, x, y, "maximum"), dt)


@lowers(np.where)
def _where(ctx, condition, x=None, y=None):
    if x is None or y is None:
        raise NotImplementedError(
            "np.where(condition) with one argument returns indices, whose number depends on the data; "
            "under jit_ps use the three-argument form np.where(condition, x, y)")
    dtype = result_type(x, y)
    c = ctx.asvalue(condition, np.bool_)
    xv, yv = ctx.asvalue(x, dtype), ctx.asvalue(y, dtype)
    return ctx.where(c, xv, yv)


@lowers(np.real)
def _real(ctx, val):
    v = ctx.asvalue(val)
    return ctx.real(v) if v.dtype.kind == "c" else v


@lowers(np.imag)
def _imag(ctx, val):
    v = ctx.asvalue(val)
    return ctx.imag(v) if v.dtype.kind == "c" else ctx.zeros_like(v)


@lowers(np.iscomplex)
def _iscomplex(ctx, x):
    v = ctx.asvalue(x)
    return ctx.compare(ctx.imag(v), ctx.zeros_like(ctx.imag(v)), "NE") if v.dtype.kind == "c" else \
        ctx.full(v.shape, False, np.bool_)


@lowers(np.isreal)
def _isreal(ctx, x):
    return ctx.unary("not", _iscomplex(ctx, x))


@lowers(np.conj)
def _conj_fn(ctx, x):
    return conj(ctx, ctx.asvalue(x))


@lowers(np.angle)
def _angle(ctx, z, deg=False):
    v = ctx.asvalue(z)
    if v.dtype.kind == "c":
        out = ctx.binary("atan2", ctx.imag(v), ctx.real(v))
    else:
        v = ctx.astype(v, np.result_type(v.dtype, np.float16) if v.dtype.kind == "f" else np.float64)
        out = ctx.binary("atan2", ctx.zeros_like(v), v)
    return _scale(180 / math.pi)(ctx, out) if deg else out


@lowers(np.round, np.around)
def _round(ctx, a, decimals=0, out=None):
    v = ctx.asvalue(a)
    if not _is_float(v):
        return v
    if v.dtype.kind == "c":
        return ctx.complex(_round(ctx, ctx.real(v), decimals), _round(ctx, ctx.imag(v), decimals))
    if decimals == 0:
        return ctx.unary("round_nearest_even", v)
    scale = _const_like(ctx, 10.0 ** abs(decimals), v)
    if decimals > 0:
        return ctx.binary("divide", ctx.unary("round_nearest_even", ctx.binary("multiply", v, scale)), scale)
    return ctx.binary("multiply", ctx.unary("round_nearest_even", ctx.binary("divide", v, scale)), scale)


@lowers(np.fix)
def _fix(ctx, x, out=None):
    return _trunc(ctx, ctx.asvalue(x))


@lowers(np.sinc)
def _sinc(ctx, x):
    v = ctx.asvalue(x)
    if not _is_float(v):
        v = ctx.astype(v, np.float64)
    pix = ctx.binary("multiply", v, _const_like(ctx, math.pi, v))
    zero = ctx.compare(v, ctx.zeros_like(v), "EQ")
    safe = ctx.select(zero, _const_like(ctx, 1, v), pix)
    return ctx.select(zero, _const_like(ctx, 1, v), ctx.binary("divide", ctx.unary("sine", safe), safe))


@lowers(np.nan_to_num)
def _nan_to_num(ctx, x, copy=True, nan=0.0, posinf=None, neginf=None):
    v = ctx.asvalue(x)
    if not _is_float(v):
        return v
    if v.dtype.kind == "c":
        args = (copy, nan, posinf, neginf)
        return ctx.complex(_nan_to_num(ctx, ctx.real(v), *args), _nan_to_num(ctx, ctx.imag(v), *args))
    info = np.finfo(v.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf
    out = ctx.select(ctx.compare(v, v, "NE"), _const_like(ctx, nan, v), v)
    out = ctx.select(ctx.compare(out, _const_like(ctx, np.inf, v), "EQ"), _const_like(ctx, posinf, v), out)
    return ctx.select(ctx.compare(out, _const_like(ctx, -np.inf, v), "EQ"), _const_like(ctx, neginf, v), out)


@lowers(np.isclose)
def _isclose(ctx, a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    dt = result_type(a, b, 1.0)
    x, y = ctx.asvalue(a, dt), ctx.asvalue(b, dt)
    shape = np.broadcast_shapes(x.shape, y.shape)
    x, y = ctx.broadcast_to(x, shape), ctx.broadcast_to(y, shape)
    rdt = _real_dtype(dt)
    diff = ctx.unary("abs", ctx.binary("subtract", x, y), rdt)
    tol = ctx.binary("add", ctx.full(shape, atol, rdt),
                     ctx.binary("multiply", ctx.full(shape, rtol, rdt), ctx.unary("abs", y, rdt)))
    close = ctx.compare(diff, tol, "LE")
    both_inf_equal = ctx.binary("and", ctx.compare(x, y, "EQ"), _isinf(ctx, x))
    out = ctx.binary("or", ctx.binary("and", close, _isfinite(ctx, y)), both_inf_equal)
    if equal_nan:
        out = ctx.binary("or", out, ctx.binary("and", isnan(ctx, x), isnan(ctx, y)))
    return out


@lowers(np.real_if_close)
def _real_if_close(ctx, a, tol=100):
    v = ctx.asvalue(a)
    if v.dtype.kind != "c":
        return v
    raise NotImplementedError("np.real_if_close of a traced complex array has a data-dependent dtype; under "
                              "jit_ps use np.real(x) (or keep the complex array)")


@lowers(np.select)
def _select(ctx, condlist, choicelist, default=0):
    condlist, choicelist = list(condlist), list(choicelist)
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    dtype = result_type(*choicelist, default)
    conds = [ctx.asvalue(c) for c in condlist]
    for c in conds:
        if c.dtype.kind != "b":
            raise TypeError(f"invalid entry in condlist: should be boolean ndarray, got {c.dtype}")
    choices = [ctx.asvalue(c, dtype) for c in choicelist]
    shape = np.broadcast_shapes(*[v.shape for v in conds + choices], np.shape(default))
    out = ctx.broadcast_to(ctx.asvalue(default, dtype), shape)
    for c, v in reversed(list(zip(conds, choices))):  # the first true condition wins
        out = ctx.where(c, v, out)
    return out


@lowers(np.choose)
def _choose(ctx, a, choices, out=None, mode="raise"):
    if out is not None:
        raise NotImplementedError("np.choose out= is not supported under jit_ps")
    choices = list(choices)
    n = len(choices)
    dtype = result_type(*choices)
    idx = ctx.asvalue(a, np.int64)
    if not isinstance(a, type(idx)):
        bad = np.asarray(a)
        if mode == "raise" and bad.size and (bad.min() < 0 or bad.max() >= n):
            raise ValueError("invalid entry in choice array")
    if mode == "wrap":
        idx = int_divmod(ctx, idx, ctx.full(idx.shape, n, np.int64))[1]
    elif mode == "clip" or mode == "raise":  # traced indices cannot raise: they are clipped
        idx = ctx.clamp(ctx.scalar(0, np.int64), idx, ctx.scalar(n - 1, np.int64))
    values = [ctx.asvalue(c, dtype) for c in choices]
    shape = np.broadcast_shapes(idx.shape, *[v.shape for v in values])
    idx = ctx.broadcast_to(idx, shape)
    result = ctx.broadcast_to(values[-1], shape)
    for k in range(n - 2, -1, -1):
        result = ctx.where(ctx.compare(idx, ctx.full(shape, k, np.int64), "EQ"), values[k], result)
    return result
