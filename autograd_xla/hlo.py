"""StableHLO text emission: element types, SSA values, and one builder method per op.

Everything here speaks StableHLO, not numpy: operands must already have the dtypes and
shapes the op requires. Numpy semantics (promotion, broadcasting, casting) live one layer
up, in `lowering.LoweringContext`, so that each translation rule reads as numpy.

Ops are printed in MLIR's generic form (`"stablehlo.add"(%a, %b) : (...) -> ...`): one
printer serves every op and there is no per-op pretty syntax to get wrong. Each method
computes its result type itself, which is what lets the tracer run a translation rule to
learn a primitive's output shape and dtype (see `tracing.abstract_eval`).
"""
import contextlib
import functools
import itertools
import math
import threading

import numpy as np

from .core import ELEMENT_TYPES, Aval, supported  # (in core: signatures ask them without importing hlo)
from .errors import ConcreteValueRequired, UnsupportedDtypeError

def element_type(dtype):
    try:
        return ELEMENT_TYPES[dtype]
    except (KeyError, TypeError):
        pass
    dtype = np.dtype(dtype)
    if not supported(dtype):
        raise UnsupportedDtypeError(f"dtype {dtype} has no XLA equivalent", dtype)
    return ELEMENT_TYPES[dtype]


#: 64-bit types computed in 32 bits under jit_ps(..., x64=False) (and on TPU).
NARROW_64 = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.complex64),
             np.dtype(np.int64): np.dtype(np.int32), np.dtype(np.uint64): np.dtype(np.uint32)}


class _Narrowing(threading.local):
    """While a module is emitted with x64 off, every 64-bit type is printed (and every
    constant stored) as its 32-bit counterpart; the graph itself keeps numpy's dtypes."""

    table = {}


_narrowing = _Narrowing()


@contextlib.contextmanager
def narrow_64_bit(enabled):
    previous = _narrowing.table
    _narrowing.table = NARROW_64 if enabled else {}
    try:
        yield
    finally:
        _narrowing.table = previous


def canonical_dtype(dtype):
    """The dtype a value of numpy dtype `dtype` really has in the module being emitted
    (rules choosing a kernel by dtype, e.g. LAPACK's d/s prefix, must ask this)."""
    dtype = np.dtype(dtype)
    return _narrowing.table.get(dtype, dtype)


def tensor_type(shape, dtype):
    table = _narrowing.table
    if table:
        dtype = table.get(np.dtype(dtype), dtype)
    return _tensor_type(tuple(shape), dtype)


@functools.lru_cache(maxsize=8192)
def _tensor_type(shape, dtype):
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{element_type(dtype)}>"


def i64_array(xs):
    xs = list(xs)
    return f"array<i64: {', '.join(str(int(x)) for x in xs)}>" if xs else "array<i64>"


def i64_list(xs):
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def i64(x):
    return f"{int(x)} : i64"


def boolean(x):
    return "true" if x else "false"


def string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hex_dense(array):
    """Exact bytes of a constant; a single element is read by MLIR as a splat."""
    return '"0x' + np.ascontiguousarray(array).tobytes().hex().upper() + '"'


def repeats_one_value(array):
    """Whether every element has the first one's bytes (so 0.0 and -0.0 differ, and NaNs of
    one payload repeat): a constant that MLIR may store as a splat. Compared as unsigned
    words of the element's size, the first 64 first: a 2 MB float64 array of zeros (autograd's
    where builds them in its VJP) took 1.3 ms compared byte by byte, 0.04 ms as words."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if not flat.size:
        return True
    word = np.dtype(f"u{math.gcd(flat.dtype.itemsize, 8)}")  # complex128: two words an element
    raw = flat.view(np.uint8).view(word).reshape(flat.size, -1)
    return bool((raw[:64] == raw[0]).all() and (raw == raw[0]).all())


def compare_type(dtype):
    kind = np.dtype(dtype).kind
    if kind in "fc":
        return "FLOAT"
    if kind in "ub":
        return "UNSIGNED"
    return "SIGNED"


# ----- op names ------------------------------------------------------------------------------
#: StableHLO's elementwise ops by arity, as the specification names them, and the CHLO ops
#: (XLA's client-library ops, decomposed into StableHLO when XLA legalizes the module) that
#: rules use. `Builder.op` checks every name against OPS: a misspelt op fails where the rule
#: runs, at trace time with the rule on the stack, not as a parse error from XLA later.
UNARY_OPS = frozenset("""abs cbrt ceil cosine count_leading_zeros exponential exponential_minus_one floor
    is_finite log log_plus_one logistic negate not popcnt round_nearest_afz round_nearest_even rsqrt sign
    sine sqrt tan tanh""".split())
BINARY_OPS = frozenset("""add and atan2 divide maximum minimum multiply or power remainder shift_left
    shift_right_arithmetic shift_right_logical subtract xor""".split())
#: The precision_config of products and convolutions: numpy multiplies float32 in float32, so
#: reduced-precision products (e.g. TF32, which an H200 used for convolutions left DEFAULT: a
#: convnet step's float32 gradient 2 % off autograd's, benchmarks/gpu_check.sh) are forbidden.
HIGHEST = "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"
#: The ops HIGHEST is given to where a rule leaves their precision_config out: XLA:TPU's DEFAULT
#: multiplies float32 in one bfloat16 pass (a user rule's convolution 0.8 % off numpy's on a v5e).
_PRODUCTS = frozenset({"stablehlo.convolution", "stablehlo.dot_general", "stablehlo.dot"})
CHLO_OPS = frozenset("""acos acosh asin asinh atan atanh bessel_i1e conj cosh digamma erf erf_inv erfc
    is_inf is_neg_inf is_pos_inf lgamma next_after polygamma sinh square tan top_k zeta""".split())
_OTHER_OPS = frozenset("""after_all all_gather all_reduce all_to_all batch_norm_grad batch_norm_inference
    batch_norm_training bitcast_convert broadcast broadcast_in_dim case cholesky clamp collective_broadcast
    collective_permute compare complex composite concatenate constant convert convolution custom_call dot
    dot_general dynamic_gather dynamic_slice dynamic_update_slice fft gather get_tuple_element if imag
    infeed iota map optimization_barrier outfeed pad partition_id real recv reduce reduce_precision
    reduce_scatter reduce_window replica_id reshape return reverse rng rng_bit_generator scatter select
    select_and_scatter send slice sort transpose triangular_solve tuple while""".split())
OPS = frozenset({f"stablehlo.{n}" for n in UNARY_OPS | BINARY_OPS | _OTHER_OPS} | {f"chlo.{n}" for n in CHLO_OPS})


class Value(Aval):
    """An SSA value of the function being built: its name, and the abstract value (shape,
    dtype, weak type: core.Aval) it has. `weak_type` is numpy-level promotion only; HLO
    ignores it. Values compare by identity: two values of one type are different values."""

    __slots__ = ("name",)

    def __init__(self, name, shape, dtype, weak_type=False):
        self.name = name
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    @property
    def type(self):
        return tensor_type(self.shape, self.dtype)

    def with_weak_type(self, weak):
        """This value under another handle, of weak type `weak` (numpy promotion only)."""
        return Value(self.name, self.shape, self.dtype, weak)

    def as_dtype(self, dtype):
        """This value under another handle standing for `dtype`, which it is computed in (float64
        as float32 where 64-bit types are narrowed: `convert`); a batched one stays batched."""
        return Value(self.name, self.shape, dtype, self.weak_type)

    def __repr__(self):
        return f"{self.name}: {self.type}"

    __str__ = __repr__

    # A rule that asks an operand for a Python integer (an axis, a count, a split point)
    # needs its value: tracing retries with that argument static, or says which it is.
    def __index__(self):
        raise ConcreteValueRequired(self, "an integer argument (an axis, size, count or index)")

    __int__ = __index__

    def __bool__(self):  # a flag passed as 0/1 (`lower=1`): never silently true
        raise ConcreteValueRequired(self, "a flag argument")

    def __iter__(self):  # a sequence of ints expected (split points, tensordot axes)
        raise ConcreteValueRequired(self, "a sequence argument (split points, axes)")

    def _arithmetic(self, *other):  # a rule computing with an int argument (`n - ddof`, `n < 0`)
        raise ConcreteValueRequired(self, "an integer argument used in the rule's arithmetic")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = _arithmetic
    __mod__ = __rmod__ = __neg__ = __lt__ = __le__ = __gt__ = __ge__ = _arithmetic


class Locations:
    """The source locations of one module's ops, as MLIR location aliases defined after the
    module (MLIR resolves an alias used before its definition), so that an op carries only
    ` loc(#b)`: `#b = loc(fused["tanh", #L0])`, `#L0 = loc("file.py":12:0)`, one alias per
    distinct (op name, line) and per distinct line. XLA turns an op's location into its
    metadata: the name into `op_name`, the file and line into `source_file` / `source_line`
    (a fused location keeps both)."""

    def __init__(self):
        self._ops = {}    # (name, filename, line) -> alias: letters only
        self._lines = {}  # (filename, line) -> alias: "L" and a number

    def alias(self, name, filename, line):
        key = (name, filename, line)
        alias = self._ops.get(key)
        if alias is None:
            alias = self._ops[key] = "#" + _letters(len(self._ops))
            if (filename, line) not in self._lines:
                self._lines[filename, line] = f"#L{len(self._lines)}"
        return alias

    def definitions(self):
        return ([f"{alias} = loc({string(filename)}:{line}:0)" for (filename, line), alias in self._lines.items()]
                + [f"{alias} = loc(fused[{string(name)}, {self._lines[filename, line]}])"
                   for (name, filename, line), alias in self._ops.items()])


def without_source_lines(text):
    """A module's text without the files and lines of its ops (the `#L` aliases Locations
    defines after it; op names, and which ops share a line, stay): what the compile caches key
    on, so that a program traced from another line, or from a file edited above it, finds the
    executable compiled before. XLA keeps locations only as op metadata (profiles, dumps), so
    the executable's are the first trace's."""
    start = text.find("\n#L0 = loc(")
    if start < 0:
        return text
    return text[:start + 1] + "\n".join(line for line in text[start + 1:].split("\n") if not line.startswith("#L"))


def _letters(k):
    """The k-th name made of letters only: a, ..., Z, aa, ab, ... (the shortest alias names)."""
    name = ""
    k += 1
    while k:
        k, r = divmod(k - 1, 52)
        name = _LETTERS[r] + name
    return name


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


#: The indentation depth of a main function's ops (a region's are deeper).
MAIN_DEPTH = 2
#: How many times a while loop's body runs, as guessed where its trip count is not known
#: (Builder.trips): the work estimate (context.ModuleState.work) counts its ops this often.
WHILE_TRIPS = 100


class Builder:
    """Appends ops to one block. Child builders (regions) share the name counter, so
    names are unique across the whole function and regions may use outer values.

    `location`: the alias (Locations) of the source location of the ops emitted now, or
    None; set by lowering per equation, and inherited by the regions of an op. `trips`:
    how many times, as guessed, the ops emitted here run in one run of the function (a
    while loop's body WHILE_TRIPS times as often as the block around the loop)."""

    trips = 1

    def __init__(self, counter=None, depth=MAIN_DEPTH, transposed=None):
        self._counter = counter if counter is not None else itertools.count()
        self._depth = depth
        self.lines = []
        self.location = None
        # name of a transpose result -> (operand, permutation), shared with child regions, so
        # dot_general can read through transposes (see fold_transpose)
        self._transposed = transposed if transposed is not None else {}

    # ----- plumbing -------------------------------------------------------------------------
    def fresh_name(self, prefix="%"):
        return f"{prefix}{next(self._counter)}"

    def child(self):
        return type(self)(self._counter, self._depth + 2, self._transposed)

    def emit(self, line):
        self.lines.append("  " * self._depth + line)

    def op(self, name, operands, results, attrs=None, regions=()):
        """Emit one op; `results` is a list of (shape, dtype). Returns a list of Values."""
        if name not in OPS:
            raise ValueError(f"'{name}' is not a StableHLO or CHLO op (hlo.OPS lists them)")
        if name in _PRODUCTS and "precision_config" not in (attrs or {}):
            attrs = {**(attrs or {}), "precision_config": HIGHEST}  # a user's rule too (HIGHEST's comment)
        operands = list(operands)
        names = self.fresh_name()
        outs = [Value(names if len(results) == 1 else f"{names}#{i}", s, d) for i, (s, d) in enumerate(results)]
        lhs = ""
        if len(results) == 1:
            lhs = f"{names} = "
        elif results:
            lhs = f"{names}:{len(results)} = "
        text = f'{lhs}"{name}"({", ".join(v.name for v in operands)})'
        if regions:
            text += " (" + ", ".join(regions) + ")"
        if attrs:
            text += " {" + ", ".join(f"{k} = {v}" for k, v in attrs.items()) + "}"
        in_types = ", ".join(v.type for v in operands)
        out_types = [tensor_type(s, d) for s, d in results]
        out_text = out_types[0] if len(out_types) == 1 else "(" + ", ".join(out_types) + ")"
        if self.location is None:
            self.emit(f"{text} : ({in_types}) -> {out_text}")
        else:
            self.emit(f"{text} : ({in_types}) -> {out_text} loc({self.location})")
        return outs

    def op1(self, name, operands, shape, dtype, attrs=None, regions=()):
        return self.op(name, operands, [(shape, dtype)], attrs, regions)[0]

    def region(self, arg_types, body, trips=1):
        """Text of a one-block region. `body(builder, *args)` returns the values to yield;
        its ops run `trips` times (as guessed) as often as this block's."""
        inner = self.child()
        inner.location = self.location
        inner.trips = self.trips * trips
        args = [Value(inner.fresh_name("%a"), s, d) for s, d in arg_types]
        results = body(inner, *args)
        results = list(results) if isinstance(results, (list, tuple)) else [results]
        inner.emit(
            f'"stablehlo.return"({", ".join(v.name for v in results)}) : '
            f'({", ".join(v.type for v in results)}) -> ()'
        )
        pad = "  " * (self._depth + 1)
        head = ""
        if args:
            head = f"{pad}^bb0({', '.join(f'{a.name}: {a.type}' for a in args)}):\n"
        return "{\n" + head + "\n".join(inner.lines) + "\n" + "  " * self._depth + "}", results

    # ----- constants and shapes -------------------------------------------------------------
    def constant(self, array):
        array = np.asarray(array)
        stored = array.astype(canonical_dtype(array.dtype), copy=False)  # x64 off: 32-bit bytes
        if stored.size > 1 and repeats_one_value(stored):
            data = hex_dense(stored.flat[:1])
        else:
            data = hex_dense(stored)
        attr = {"value": f"dense<{data}> : {tensor_type(array.shape, array.dtype)}"}
        return self.op1("stablehlo.constant", [], array.shape, array.dtype, attr)

    def splat(self, value, shape, dtype):
        scalar = self.constant(np.asarray(value, dtype=dtype))
        return scalar if not shape else self.broadcast_in_dim(scalar, shape, ())

    def iota(self, shape, dtype, dimension):
        return self.op1("stablehlo.iota", [], shape, dtype, {"iota_dimension": i64(dimension)})

    def broadcast_in_dim(self, x, shape, dims):
        shape = tuple(shape)
        if x.shape == shape and tuple(dims) == tuple(range(len(shape))):
            return x
        return self.op1("stablehlo.broadcast_in_dim", [x], shape, x.dtype, {"broadcast_dimensions": i64_array(dims)})

    def reshape(self, x, shape):
        shape = tuple(shape)
        if x.shape == shape:
            return x
        return self.op1("stablehlo.reshape", [x], shape, x.dtype)

    def transpose(self, x, perm):
        perm = tuple(perm)
        if perm == tuple(range(x.ndim)):
            return x
        shape = tuple(x.shape[p] for p in perm)
        out = self.op1("stablehlo.transpose", [x], shape, x.dtype, {"permutation": i64_array(perm)})
        self._transposed[out.name] = (x, perm)
        return out

    def barrier(self, x):
        """x, which XLA neither folds into nor moves across its users (an
        optimization_barrier): a transpose stays a copy, a product's operands stay as made."""
        return self.op1("stablehlo.optimization_barrier", [x], x.shape, x.dtype)

    def slice(self, x, starts, limits, strides=None):
        strides = strides or [1] * x.ndim
        shape = tuple(max(0, -(-(hi - lo) // st)) for lo, hi, st in zip(starts, limits, strides))
        if shape == x.shape:
            return x
        attrs = {"start_indices": i64_array(starts), "limit_indices": i64_array(limits), "strides": i64_array(strides)}
        return self.op1("stablehlo.slice", [x], shape, x.dtype, attrs)

    def dynamic_slice(self, x, starts, sizes):
        return self.op1("stablehlo.dynamic_slice", [x, *starts], sizes, x.dtype, {"slice_sizes": i64_array(sizes)})

    def dynamic_update_slice(self, x, update, starts):
        return self.op1("stablehlo.dynamic_update_slice", [x, update, *starts], x.shape, x.dtype)

    def concatenate(self, xs, dimension):
        if len(xs) == 1:
            return xs[0]
        shape = list(xs[0].shape)
        shape[dimension] = sum(x.shape[dimension] for x in xs)
        return self.op1("stablehlo.concatenate", xs, shape, xs[0].dtype, {"dimension": i64(dimension)})

    def pad(self, x, value, low, high, interior=None):
        interior = interior or [0] * x.ndim
        shape = [lo + hi + d + max(0, d - 1) * it for d, lo, hi, it in zip(x.shape, low, high, interior)]
        attrs = {"edge_padding_low": i64_array(low), "edge_padding_high": i64_array(high),
                 "interior_padding": i64_array(interior)}
        return self.op1("stablehlo.pad", [x, value], shape, x.dtype, attrs)

    def reverse(self, x, dims):
        if not dims:
            return x
        return self.op1("stablehlo.reverse", [x], x.shape, x.dtype, {"dimensions": i64_array(dims)})

    # ----- elementwise ----------------------------------------------------------------------
    def unary(self, name, x, dtype=None):
        """An elementwise StableHLO op of one operand, named as in UNARY_OPS."""
        if name not in UNARY_OPS:
            raise ValueError(f"'{name}' is not a unary StableHLO op (hlo.UNARY_OPS lists them)")
        return self.op1(f"stablehlo.{name}", [x], x.shape, dtype or x.dtype)

    def binary(self, name, x, y, dtype=None):
        """An elementwise StableHLO op of two operands of one shape, named as in BINARY_OPS."""
        if name not in BINARY_OPS:
            raise ValueError(f"'{name}' is not a binary StableHLO op (hlo.BINARY_OPS lists them)")
        return self.op1(f"stablehlo.{name}", [x, y], x.shape, dtype or x.dtype)

    def chlo(self, name, *xs, dtype=None):
        """An elementwise CHLO op, named as in CHLO_OPS."""
        if name not in CHLO_OPS:
            raise ValueError(f"'{name}' is not a CHLO op (hlo.CHLO_OPS lists them)")
        return self.op1(f"chlo.{name}", xs, xs[0].shape, dtype or xs[0].dtype)

    def compare(self, x, y, direction, kind=None):
        attrs = {"comparison_direction": f"#stablehlo<comparison_direction {direction}>",
                 "compare_type": f"#stablehlo<comparison_type {kind or compare_type(x.dtype)}>"}
        return self.op1("stablehlo.compare", [x, y], x.shape, np.bool_, attrs)

    def select(self, pred, on_true, on_false):
        return self.op1("stablehlo.select", [pred, on_true, on_false], on_true.shape, on_true.dtype)

    def convert(self, x, dtype):
        dtype = np.dtype(dtype)
        if x.dtype == dtype:
            return x
        if canonical_dtype(x.dtype) == canonical_dtype(dtype):  # x64 off: float64 to float32 is no op
            return x.as_dtype(dtype)
        if x.dtype == np.bool_ and dtype.kind in "fc":
            # A select, not a convert: XLA's simplifier rewrites a * convert(mask) into
            # select(mask, a, 0), which drops numpy's nan * False = nan and -1.0 * False = -0.0
            # (autograd's max/min gradients multiply by such masks).
            return self.select(x, self.splat(1, x.shape, dtype), self.splat(0, x.shape, dtype))
        return self.op1("stablehlo.convert", [x], x.shape, dtype)

    def bitcast_convert(self, x, dtype):
        return self.op1("stablehlo.bitcast_convert", [x], x.shape, dtype)

    def real(self, x):
        return self.op1("stablehlo.real", [x], x.shape, np.empty(0, x.dtype).real.dtype)

    def imag(self, x):
        return self.op1("stablehlo.imag", [x], x.shape, np.empty(0, x.dtype).real.dtype)

    def complex(self, re, im):
        return self.op1("stablehlo.complex", [re, im], re.shape, np.result_type(re.dtype, np.complex64))

    def clamp(self, lo, x, hi):
        return self.op1("stablehlo.clamp", [lo, x, hi], x.shape, x.dtype)

    # ----- contractions and reductions ------------------------------------------------------
    def dot_general(self, x, y, contracting, batching=((), ()), dtype=None):
        (lc, rc), (lb, rb) = contracting, batching
        x, lc, lb = self.fold_transpose(x, lc, lb)
        y, rc, rb = self.fold_transpose(y, rc, rb)
        free_x = [d for i, d in enumerate(x.shape) if i not in lc and i not in lb]
        free_y = [d for i, d in enumerate(y.shape) if i not in rc and i not in rb]
        shape = [x.shape[i] for i in lb] + free_x + free_y
        dims = (f"lhs_batching_dimensions = {i64_list(lb)}, rhs_batching_dimensions = {i64_list(rb)}, "
                f"lhs_contracting_dimensions = {i64_list(lc)}, rhs_contracting_dimensions = {i64_list(rc)}")
        attrs = {"dot_dimension_numbers": f"#stablehlo.dot<{dims}>"}  # (precision: HIGHEST, in op)
        return self.op1("stablehlo.dot_general", [x, y], shape, dtype or x.dtype, attrs)

    def fold_transpose(self, v, contracting, batching):
        """Read a dot operand through a transpose by renumbering its dimensions, when that
        keeps the order of its free dimensions. autograd's matmul VJP transposes before it
        multiplies (`swapaxes(X) @ g`); XLA's CPU backend materialises such a transpose before
        a matrix-vector product, so we fold it here, as a dot's transpose rule would."""
        hit = self._transposed.get(v.name)
        if hit is None:
            return v, contracting, batching
        source, perm = hit
        free = [perm[d] for d in range(v.ndim) if d not in contracting and d not in batching]
        if free != sorted(free):
            return v, contracting, batching
        if source.dtype != v.dtype:  # v: the transpose standing for float64 computed in 32 bits (`convert`)
            source = source.as_dtype(v.dtype)
        return source, [perm[d] for d in contracting], [perm[d] for d in batching]

    def reduce(self, operands, inits, dims, body):
        """Variadic reduce; `body(builder, *accumulators, *elements)` returns new accumulators."""
        dims = sorted(dims)
        shape = [d for i, d in enumerate(operands[0].shape) if i not in dims]
        scalars = [((), v.dtype) for v in operands]
        region, _ = self.region(scalars + scalars, body)
        results = [(shape, v.dtype) for v in operands]
        return self.op("stablehlo.reduce", [*operands, *inits], results, {"dimensions": i64_array(dims)}, [region])

    def reduce_window(self, operands, inits, window, strides, padding, body):
        def out(d, w, s, p):
            return (d + p[0] + p[1] - w) // s + 1
        shape = [out(d, w, s, p) for d, w, s, p in zip(operands[0].shape, window, strides, padding)]
        scalars = [((), v.dtype) for v in operands]
        region, _ = self.region(scalars + scalars, body)
        pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
        attrs = {"window_dimensions": i64_array(window), "window_strides": i64_array(strides),
                 "padding": f"dense<[{pads}]> : tensor<{len(padding)}x2xi64>"}
        return self.op("stablehlo.reduce_window", [*operands, *inits], [(shape, v.dtype) for v in operands],
                       attrs, [region])

    def sort(self, operands, dimension, comparator, stable=True):
        scalars = []
        for v in operands:
            scalars += [((), v.dtype), ((), v.dtype)]
        region, _ = self.region(scalars, comparator)
        attrs = {"dimension": i64(dimension), "is_stable": boolean(stable)}
        return self.op("stablehlo.sort", operands, [(v.shape, v.dtype) for v in operands], attrs, [region])

    # ----- gather / scatter -----------------------------------------------------------------
    def gather(self, x, indices, offset_dims, collapsed, start_index_map, index_vector_dim, slice_sizes, shape,
               batching=((), ())):
        """`batching`: (operand dims, index dims) that pair example by example (vmap's gathers)."""
        dims = (f"offset_dims = {i64_list(offset_dims)}, collapsed_slice_dims = {i64_list(collapsed)}, "
                + _batching_dims("operand_batching_dims", "start_indices_batching_dims", batching)
                + f"start_index_map = {i64_list(start_index_map)}, index_vector_dim = {index_vector_dim}")
        attrs = {"dimension_numbers": f"#stablehlo.gather<{dims}>", "slice_sizes": i64_array(slice_sizes),
                 "indices_are_sorted": "false"}
        return self.op1("stablehlo.gather", [x, indices], shape, x.dtype, attrs)

    def scatter(self, x, indices, updates, window_dims, inserted, to_operand, index_vector_dim, combine,
                batching=((), ())):
        dims = (f"update_window_dims = {i64_list(window_dims)}, inserted_window_dims = {i64_list(inserted)}, "
                + _batching_dims("input_batching_dims", "scatter_indices_batching_dims", batching)
                + f"scatter_dims_to_operand_dims = {i64_list(to_operand)}, index_vector_dim = {index_vector_dim}")
        region, _ = self.region([((), x.dtype), ((), x.dtype)], combine)
        attrs = {"scatter_dimension_numbers": f"#stablehlo.scatter<{dims}>", "indices_are_sorted": "false",
                 "unique_indices": "false"}
        return self.op1("stablehlo.scatter", [x, indices, updates], x.shape, x.dtype, attrs, [region])

    # ----- control flow ---------------------------------------------------------------------
    def while_loop(self, inits, cond, body):
        """`cond(builder, *carry)` returns a bool scalar; `body(builder, *carry)` the new carry."""
        types = [(v.shape, v.dtype) for v in inits]
        cond_region, _ = self.region(types, cond, WHILE_TRIPS)
        body_region, _ = self.region(types, body, WHILE_TRIPS)
        return self.op("stablehlo.while", inits, types, None, [cond_region, body_region])

    def case(self, index, branches, result_types):
        """`branches` are callables `f(builder)` returning the branch results."""
        regions = [self.region([], branch)[0] for branch in branches]
        return self.op("stablehlo.case", [index], result_types, None, regions)

    # ----- collectives (replica mode: one program per device, replica_groups over all) -------
    # No channel_handle: in replica mode a collective_permute carrying one crashes the process
    # (SIGABRT, shared/notes/parallel-and-cache.md, pitfall 2); all_reduce and all_gather
    # need none there either.
    def all_reduce(self, x, groups, op):
        """Every device's `x` combined elementwise with the binary op `op` over its group."""
        region, _ = self.region([((), x.dtype), ((), x.dtype)], lambda b, a, c: b.binary(op, a, c))
        return self.op1("stablehlo.all_reduce", [x], x.shape, x.dtype, {"replica_groups": _groups(groups)}, [region])

    def all_gather(self, x, dimension, groups):
        """The group's `x`s concatenated along `dimension`, in device order."""
        shape = list(x.shape)
        shape[dimension] *= len(groups[0])
        return self.op1("stablehlo.all_gather", [x], shape, x.dtype,
                        {"all_gather_dim": i64(dimension), "replica_groups": _groups(groups)})

    def collective_permute(self, x, pairs):
        """Device `target` receives `x` of device `source` for each (source, target); others get zeros."""
        attr = f"dense<{_nested(pairs)}> : tensor<{len(pairs)}x2xi64>"
        return self.op1("stablehlo.collective_permute", [x], x.shape, x.dtype, {"source_target_pairs": attr})

    def replica_id(self):
        return self.op1("stablehlo.replica_id", [], (), np.uint32)

    def custom_call(self, target, operands, results, backend_config=None, api_version=4, layouts=None,
                    extra=None):
        """`layouts`: (operands', results') minor-to-major orders; a typed FFI call (api_version
        4: ours, scipy's loops, jaxlib's LAPACK kernels) without them reads and writes every
        buffer row-major. Left free, XLA chooses them: it gave a product's result, multiplied
        by BLAS (blas.GEMM) or made by scipy's loop, the column-major layout of the LAPACK
        kernel that reads it, which the handler then filled row-major (np.linalg.inv of a
        complex product, of scipy.special.gammaln(a): the inverse of the transpose)."""
        attrs = {"call_target_name": string(target)}
        if backend_config is not None:
            attrs["backend_config"] = backend_config
        attrs["api_version"] = f"{api_version} : i32"
        if layouts is None and api_version == 4:
            layouts = ([range(v.ndim - 1, -1, -1) for v in operands], [range(len(s) - 1, -1, -1) for s, _ in results])
        if layouts is not None:
            ins, outs = layouts
            attrs["operand_layouts"] = "[" + ", ".join(_layout(l) for l in ins) + "]"
            attrs["result_layouts"] = "[" + ", ".join(_layout(l) for l in outs) + "]"
        attrs.update(extra or {})
        return self.op("stablehlo.custom_call", operands, results, attrs)


def _groups(groups):
    return f"dense<{_nested(groups)}> : tensor<{len(groups)}x{len(groups[0])}xi64>"


def _nested(rows):
    return "[" + ", ".join(i64_list(r) for r in rows) + "]"


def _batching_dims(operand_name, indices_name, batching):
    operand, indices = batching
    if not operand:
        return ""
    return f"{operand_name} = {i64_list(operand)}, {indices_name} = {i64_list(indices)}, "


def _layout(minor_to_major):
    n = len(minor_to_major)
    return f"dense<{i64_list(minor_to_major)}> : tensor<{n}xindex>" if n else "dense<> : tensor<0xindex>"


def module_text(name, params, body_lines, results, replicas=1, partitions=1, arg_attrs=None, locations=None):
    """Wrap a finished main-function body (parameters are Values) into a module, followed by
    the definitions of the location aliases its ops use (`locations`, a Locations)."""
    args = []
    for i, p in enumerate(params):
        attr = f" {arg_attrs[i]}" if arg_attrs and arg_attrs.get(i) else ""
        args.append(f"{p.name}: {p.type}{attr}")
    out_types = ", ".join(v.type for v in results)
    ret = f'    "func.return"({", ".join(v.name for v in results)}) : ({out_types}) -> ()'
    return (
        f"module @{name} attributes {{mhlo.num_partitions = {partitions} : i32, "
        f"mhlo.num_replicas = {replicas} : i32}} {{\n"
        f"  func.func public @main({', '.join(args)}) -> ({out_types}) {{\n"
        + "\n".join(body_lines) + ("\n" if body_lines else "") + ret + "\n  }\n}\n"
        + "".join(d + "\n" for d in (locations.definitions() if locations is not None else ()))
    )
