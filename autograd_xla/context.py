"""What a translation rule receives as `ctx`: `LoweringContext`, the StableHLO builder of
`hlo.Builder` plus the numpy semantics every rule needs (NEP 50 promotion, broadcasting,
casting, constants), and the helpers rule authors share (`result_type`, `normalize_axis`).

Rules call `ctx.<op>(...)` and never print text themselves. The same rules run twice: at
trace time on a scratch context, to learn each primitive's output shapes and dtypes
(`tracing.abstract_eval`), and in lowering.py to emit the module.
"""
import collections
import functools
import math

import numpy as np

from . import blas, hlo
from .errors import ConcreteValueRequired, UnsupportedDtypeError

#: Constants larger than this (and not a single repeated value) become executable
#: parameters held on the device, instead of literals baked into the program text.
LIFT_BYTES = 1024

# Python bools promote exactly like np.bool_ (the lowest kind), and ufunc.resolve_dtypes
# accepts only int/float/complex as weak Python types.
_WEAK_PYTYPE = {"b": np.dtype(np.bool_), "i": int, "u": int, "f": float, "c": complex}
_PY_SCALARS = (bool, int, float, complex)
_DEFAULT_DTYPE = {bool: np.dtype(bool), int: np.dtype(np.int64), float: np.dtype(np.float64),
                  complex: np.dtype(np.complex128)}


def promotion_type(x):
    """What NEP 50 promotion sees: a Python type for weak scalars, else a dtype."""
    if isinstance(x, hlo.Value):
        return _WEAK_PYTYPE[x.dtype.kind] if x.weak_type else x.dtype
    t = type(x)
    if t in _PY_SCALARS:
        return t if t is not bool else np.dtype(np.bool_)
    if isinstance(x, (np.ndarray, np.generic)):
        return x.dtype
    return np.asarray(x).dtype


def shape_of(x):
    return x.shape if isinstance(x, hlo.Value) else np.shape(x)


@functools.lru_cache(maxsize=4096)
def resolve_ufunc(ufunc, types, out_dtype=None):
    """Loop dtypes numpy would pick for operands of `types` and the call's `dtype=`
    (`out_dtype`): (input dtypes, output dtypes)."""
    n_in, n_out = ufunc.nin, ufunc.nout
    if all(isinstance(t, type) for t in types):  # only Python scalars: numpy makes them arrays
        types = tuple(_DEFAULT_DTYPE[t] for t in types)
    types = tuple(_DEFAULT_DTYPE[bool] if t is bool else t for t in types)  # no weak-bool type in numpy
    # numpy's `dtype=` chooses the loop (a signature), unlike an `out=` array's dtype, which
    # only receives the result: np.add(int32, int32, dtype=float32) adds in float32
    operands = tuple(types) + (None,) * n_out
    if out_dtype is None:
        dts = ufunc.resolve_dtypes(operands)
    else:
        dts = ufunc.resolve_dtypes(operands, signature=(None,) * n_in + (np.dtype(out_dtype),) * n_out)
    return tuple(dts[:n_in]), tuple(dts[n_in:])


def result_type(*xs):
    """np.result_type with weak Values behaving like Python scalars."""
    args = []
    for x in xs:
        p = promotion_type(x) if not isinstance(x, (np.dtype, type)) else x
        args.append({bool: False, int: 0, float: 0.0, complex: 0j}.get(p, p))
    return np.result_type(*args)


#: Ops that read every element of their operands for fewer results (op_work).
REDUCING_OPS = frozenset({"stablehlo.reduce", "stablehlo.reduce_window", "stablehlo.select_and_scatter"})
#: Ops that compute nothing: XLA's fused loops index their operands instead (op_work).
INDEXING_OPS = frozenset({"stablehlo.constant", "stablehlo.iota", "stablehlo.broadcast_in_dim", "stablehlo.reshape",
                       "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.optimization_barrier"})


#: XLA's algebraic simplifier folds compositions that are identities over the reals but not
#: in floating point, where an intermediate value overflows, underflows or is NaN: log(exp(A))
#: -> A, log(pow(A, B)) -> B log|A| (log((-2) ** 0.5): numpy NaN, folded 0.35), pow(exp(A),
#: B) -> exp(A B), exp(A) exp(B) -> exp(A + B), exp(A) / exp(B) -> exp(A - B), (A / B) / C
#: -> A / (B C), A / (B / C) -> A C / B, sqrt(A A) -> |A| (jaxlib 0.10.2's XLA; later XLA
#: keeps most of them for fast math). numpy computes each op as written; on the CPU the
#: results of FOLDED_RESULTS, the operands of FOLDED_OPERANDS (an operand that other folds,
#: x * 1 -> x, make the product the rule looks for) and a division's operands that are
#: quotients pass through an optimization_barrier, which the simplifier does not look through
#: and XLA:CPU removes after it, before fusion (log(exp(x)) * 2 + 1 on 2^20 float64 stays one
#: loop fusion; the default workloads' programs keep their fusions). Found by reliability
#: 0.9.0's normal log-density, log(exp(-z ** 2 / 2)): +inf plainly where exp underflows,
#: finite compiled, which changed its optimiser's path. (Every quotient behind a barrier cost
#: the patch convnet's step a 128x12x12x10 product that a mean's broadcast folds away.)
FOLDED_RESULTS = frozenset({"stablehlo.exponential", "stablehlo.power"})
FOLDED_OPERANDS = {"stablehlo.sqrt": 0, "stablehlo.power": 0}


def op_work(name, operands, results):
    """Elements an op computes, for ModuleState.work: its results', a reduction's operands',
    a convolution's results' times its kernel's (an overestimate: as if each result read the
    whole kernel), none for an op that only indexes its operands. A product counts its
    results only: XLA gives the large ones to libraries (Eigen, YNNPACK), whose code its
    compile options do not change."""
    if name in INDEXING_OPS:
        return 0
    out = sum(math.prod(v.shape) for v in results)
    if name in REDUCING_OPS:
        return max(out, sum(math.prod(v.shape) for v in operands))
    if name == "stablehlo.convolution":
        return out * math.prod(operands[1].shape)
    return out


class ModuleState:
    """What all builders of one module share: lifted constants become parameters; the
    source locations of its ops (an hlo.Locations, or None for none); the named axes its
    collectives may reduce over (`axes`: name -> size), each a pmap's devices; whether it is
    built only for its types (`shapes_only`: tracing.abstract_eval's, never compiled)."""

    def __init__(self, platform="cpu", locations=None, axes=None, use_blas=False, merge=True, gemm=True,
                 shapes_only=False):
        self.platform, self.shapes_only = platform, shapes_only
        self.quotients = set()  # names of the divisions' results (FOLDED_RESULTS)
        # whether independent calls of a looping primitive are emitted as one
        # (lowering.schedule), and how many such groups were
        self.merge, self.merged = merge, 0
        self.lifted = {}  # id(array) -> (array, Value)
        self.constants = {}  # a lifted constant's Value name -> its array
        self.symmetric = {}  # a lifted constant's Value name -> whether blas.symmetric holds (asked once)
        self.locations = locations
        self.axes = dict(axes or {})
        # value name -> Uses, for the values lowering watches (its large arguments: their
        # views, blas.GEMM_ALONE); a transpose's uses are its operand's
        self.uses = None
        self.views = {}  # value name -> View, the arguments lowering reads through views
        # whether matrix-vector products go to BLAS (blas.py: a single-device CPU program) and
        # matrix products too (`gemm`), the products it took, the matrix products it could
        # take (with `gemm` or not) and those of them that read no watched value (a large
        # argument: blas.GEMM_ALONE), and value name -> (memory, offset) for the arguments read
        # through views they may read in place
        self.blas, self.gemm = use_blas, use_blas and gemm
        self.blas_products = self.gemm_products = self.gemm_apart = 0
        self.in_place = {}
        # value name -> (x, y, contracting, batching) of the matrix product that made it, on
        # the CPU (LoweringContext.transpose)
        self.products = {}
        # elements the module's ops compute in one run, as estimated (op_work): what decides
        # whether its first program may be compiled quickly (backend.QUICK_WORK)
        self.work = 0

    def lift(self, array):
        hit = self.lifted.get(id(array))
        if hit is None:
            hit = (array, hlo.Value(f"%k{len(self.lifted)}", array.shape, array.dtype))
            self.lifted[id(array)] = hit
            self.constants[hit[1].name] = array
        return hit[1]

    def is_symmetric(self, v):
        """Whether Value v is a lifted constant blas.symmetric holds for."""
        if v.name not in self.symmetric:
            array = self.constants.get(v.name)
            self.symmetric[v.name] = array is not None and blas.symmetric(array)
        return self.symmetric[v.name]


def view_pad(dtype):
    """The most elements of `dtype` an argument's data can start after the 64-byte boundary
    at or below it (XLA's CPU code assumes that alignment; numpy gives 16): what a view's
    parameter, read from there, holds beyond the argument (or a View's `rest`)."""
    return 64 // np.dtype(dtype).itemsize - 1


class Uses:
    """How the main function reads a value lowering watches: `ops`, a Counter of the ops
    (None for one inside a region), besides `dots`, the dots a View would do, which would
    read and write `traffic` elements more than the same dots of a copy (View.traffic)."""

    __slots__ = ("ops", "dots", "traffic")

    def __init__(self):
        self.ops, self.dots, self.traffic = collections.Counter(), 0, 0


class View:
    """A matrix argument read where numpy keeps it (lowering.LARGE_ARRAY_BYTES), by dots too:
    `main`, the module parameter holding its first m*k elements' worth of memory from the
    64-byte boundary at or below its data; `rest`, the up to `max_offset` elements that
    follow those in memory (the argument's last ones; zeros beyond); `offset`, where the
    argument starts in `main` (an int32 scalar, 0 to `max_offset`, known only at run time).

    Elementwise ops read the argument as a dynamic slice of main and rest, which XLA fuses
    into their loops. A dot would make XLA copy that slice out first, and so would a dot of a
    slice of a parameter; so `dot` multiplies `main` itself as the m x k matrix Y, whose row i
    is the argument's row i shifted right by `offset` (its first elements are row i-1's last;
    row i's last are in the next row, read as the few columns E, `shifted`). Multiplying by a
    vector or matrix shifted to match, a row then meets zeros where it holds another row's
    elements, or before the argument's start other memory (never written); a NaN or infinity
    there would spread, so such a result that is not all finite is computed again from the
    copied argument. Measured, a float64 matrix times a vector (µs; argument at 16 mod 64,
    as numpy's large arrays are, copied / viewed, and 64-byte aligned): 1000x1000 286 / 131
    / 112; 2000x500 305 / 141 / 113; 5000x100 129 / 108 / 58 (E's 5000 short rows cost
    ~25 µs a dot: lowering.VIEW_DOT_ROW_BYTES). Its program takes XLA 30-110 ms longer to
    compile (each `case` and extra dot costs XLA:CPU 20-60 ms; the quadratic 0.5 x'Ax - b'x
    with A an argument: 140-153 ms against 57 ms copied), so only a later program of a
    signature whose calls have cost a few compiles uses it, if it runs faster (lowering.lower's
    dot_views, tiering.Ladder)."""

    def __init__(self, main, rest, offset, shape):
        self.main, self.rest, self.offset, self.shape = main, rest, offset, tuple(shape)
        self.max_offset = view_pad(hlo.canonical_dtype(main.dtype))

    @staticmethod
    def multiplies(v, contracting, w, batching, dtype=None):
        """Whether `dot` can multiply `v`, were it a view, by `w`, contracting v's `contracting`."""
        real = hlo.canonical_dtype(v.dtype)
        return (v.ndim == 2 and len(contracting) == 1 and not batching and real in (np.float32, np.float64)
                and w.dtype == v.dtype and (dtype is None or np.dtype(dtype) == v.dtype) and v.shape[0] > 1
                and v.shape[1] >= view_pad(real))

    @staticmethod
    def traffic(shape, dim, w, w_dim):
        """Elements `shifted` reads and writes more than the plain dot, roughly: contracting
        the rows (dim 0), its result once more (concatenated, then sliced); contracting the
        columns, w once more (shifted), and its result twice (checked, then returned)."""
        (m, k), n = shape, w.size // w.shape[w_dim]
        return 2 * k * n if dim == 0 else 2 * k * n + 2 * m * n

    def dot(self, ctx, w, dim, w_dim, first):
        """dot_general(view, w) contracting the view's `dim` with w's `w_dim` (w first unless
        `first`): of Y itself when the offset is 0 (an aligned argument), else `shifted`."""
        free = [n for d, n in enumerate(w.shape) if d != w_dim]
        mine = self.shape[1 - dim]
        shape = [mine] + free if first else free + [mine]
        aligned = ctx.convert(ctx.compare(self.offset, ctx.scalar(0, np.int32), "EQ"), np.int32)
        branches = [lambda b: self.shifted(b, w, dim, w_dim, first),
                    lambda b: _dot(b, b.reshape(self.main, self.shape), dim, w, w_dim, first)]
        return ctx.case(aligned, branches, [(shape, w.dtype)])[0]

    def shifted(self, ctx, w, dim, w_dim, first):
        """The dot of a view at offset o, maybe not 0. With p max_offset, the argument's row i
        is Y[i, o:] followed by E[i, :o], where E[i] = Y[i + 1, :p] and E's last row is `rest`."""
        (m, k), o, p = self.shape, self.offset, self.max_offset
        y = ctx.reshape(self.main, (m, k))
        ends = ctx.concatenate([ctx.slice(y, [1, 0], [m, p]), ctx.reshape(self.rest, (1, p))], 0)
        if dim == 0:  # out[j] = (Y^T w)[o + j] for o + j < k, else (E^T w)[o + j - k]
            axis = 0 if first else w.ndim - 1  # where the result has the view's free dimension
            both = ctx.concatenate([_dot(ctx, y, 0, w, w_dim, first), _dot(ctx, ends, 0, w, w_dim, first)], axis)
            start = [o if d == axis else ctx.scalar(0, np.int32) for d in range(both.ndim)]
            return ctx.dynamic_slice(both, start, [k if d == axis else n for d, n in enumerate(both.shape)])
        # out[i] = sum_c Y[i, c] w[c - o] (c >= o) + sum_c E[i, c] w[k - o + c] (c < o)
        zero, back = ctx.scalar(0, w.dtype), ctx.binary("subtract", ctx.scalar(k, np.int32), o)
        start = [back if d == w_dim else ctx.scalar(0, np.int32) for d in range(w.ndim)]

        def moved(low, high, size):  # w, padded with zeros on its contracted axis, from `back`
            padded = ctx.pad(w, zero, [low if d == w_dim else 0 for d in range(w.ndim)],
                             [high if d == w_dim else 0 for d in range(w.ndim)])
            return ctx.dynamic_slice(padded, start, [size if d == w_dim else n for d, n in enumerate(w.shape)])
        out = ctx.binary("add", _dot(ctx, y, 1, moved(k, 0, k), w_dim, first),
                         _dot(ctx, ends, 1, moved(0, p, p), w_dim, first))
        finite = ctx.reduce_with(ctx.unary("is_finite", out, np.bool_), range(out.ndim), "and", True)
        again = lambda b: _dot(b, self.copied(b), 1, w, w_dim, first)  # noqa: E731
        return ctx.case(ctx.convert(finite, np.int32), [again, lambda b: out], [(out.shape, out.dtype)])[0]

    def copied(self, ctx):
        """The argument, as a dynamic slice of main and rest."""
        whole = ctx.concatenate([self.main, self.rest], 0)
        return ctx.reshape(ctx.dynamic_slice(whole, [self.offset], [self.main.shape[0]]), self.shape)


def _dot(ctx, a, a_dim, w, w_dim, first):
    """dot_general contracting a's `a_dim` with w's `w_dim`, a first unless not `first`."""
    return ctx.dot_general(a, w, ([a_dim], [w_dim])) if first else ctx.dot_general(w, a, ([w_dim], [a_dim]))


#: The call_target_name attribute of a BLAS product -> the kind of use it makes of its
#: matrix (Uses.ops): one that reads an argument's view where it is (lowering.FUSED_USES).
_BLAS_USES = {hlo.string(t): t for t in (blas.ROWS, blas.COLUMNS, blas.GEMM)}


def _left_transposed(x, y, lc, rc, lb, rb, dtype):
    """Whether XLA:CPU would multiply x . y with Eigen only because x contracts the first of
    its two matrix dimensions: YNNPACK takes a real float32/float64 product of two matrices
    (after leading batch dimensions) with a free extent above 1 on each side and one of 8
    on some side, but only with the left operand contracting its last (XLA's
    ynn_support.cc, IsDotSupportedByYnn, jaxlib 0.10.2). Measured (float64, the product alone,
    Eigen's time = 1, the better way round): 784x256 @ 256x200 0.80-0.87, 200x256 @ 256x784
    0.71, 1000^3 0.88, 2000x100 @ 100x30 0.86, 64^3 0.92; float32 0.90. The MLP step's program
    gained only with XLA's own scheduler (backend.XLA_SCHEDULER): 2688 against 2758 µs."""
    nb = len(lb)
    if (len(lc) != 1 or list(lb) != list(range(nb)) or list(rb) != list(range(nb)) or x.ndim != nb + 2
            or y.ndim != nb + 2 or lc[0] != nb or x.dtype != y.dtype
            or x.dtype not in _YNN_DOT_DTYPES or (dtype is not None and np.dtype(dtype) != x.dtype)):
        return False
    m, k, n = x.shape[nb + 1], x.shape[nb], y.shape[2 * nb + 1 - rc[0]]
    return m > 1 and n > 1 and max(m, k, n) >= 8


_YNN_DOT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class LoweringContext(hlo.Builder):
    """A builder with numpy semantics: the `ctx` of every translation rule."""

    def __init__(self, module, counter=None, depth=hlo.MAIN_DEPTH, transposed=None):
        super().__init__(counter, depth, transposed)
        self.module = module

    def child(self):
        return type(self)(self.module, self._counter, self._depth + 2, self._transposed)

    @property
    def platform(self):
        return self.module.platform

    def op(self, name, operands, results, attrs=None, regions=()):
        unfold = self.module.platform == "cpu" and not self.module.shapes_only  # (FOLDED_RESULTS)
        if unfold and name in FOLDED_OPERANDS:
            operands = list(operands)
            i = FOLDED_OPERANDS[name]
            operands[i] = self.barrier(operands[i])
        elif unfold and name == "stablehlo.divide":
            quotients = self.module.quotients
            operands = [self.barrier(v) if v.name in quotients else v for v in operands]
        uses = self.module.uses
        seen = [uses[v.name] for v in operands if v.name in uses] if uses else ()
        outs = super().op(name, operands, results, attrs, regions)
        if unfold and name in FOLDED_RESULTS:
            outs = [self.barrier(outs[0])]
        elif unfold and name == "stablehlo.divide":
            self.module.quotients.add(outs[0].name)
        self.module.work += self.trips * op_work(name, operands, outs)
        if seen and name == "stablehlo.custom_call":  # a BLAS product is a use of its own kind
            name = _BLAS_USES.get(attrs["call_target_name"], name)
        for u in seen:
            if name == "stablehlo.transpose":  # dots read through it (hlo.Builder.fold_transpose)
                uses[outs[0].name] = u
            elif name != "stablehlo.dot_general":  # dot_general tells its own kind of use
                u.ops[name if self._depth == hlo.MAIN_DEPTH else None] += 1
        return outs

    def dot_general(self, x, y, contracting, batching=((), ()), dtype=None):
        """hlo.Builder.dot_general, multiplying an argument read through a view (View) where
        it is, and a large matrix by a vector with BLAS (blas.py) where the module may."""
        (lc, rc), (lb, rb) = contracting, batching
        x, lc, lb = self.fold_transpose(x, lc, lb)
        y, rc, rb = self.fold_transpose(y, rc, rb)
        if self.module.blas and not lb:
            product = self._gemv(x, lc, y, rc, dtype)
            if product is None:
                product = self._gemm(x, lc, y, rc, dtype)
            if product is not None:
                return product
        return self._dot_general(x, y, (lc, rc), (lb, rb), dtype)

    def _gemv(self, x, lc, y, rc, dtype):
        """dot_general(x, y) as BLAS's matrix-vector product, when it is one blas.applies to:
        blas.ROWS contracts the matrix's columns, blas.COLUMNS its rows, blas.SYMMETRIC either
        of a symmetric constant (ModuleState.is_symmetric); an argument read
        through a view (ModuleState.in_place) is passed as its memory and offset there. A
        column or row (n x 1, 1 x n) counts as a vector: autograd's matmul gradient multiplies
        by one (logistic regression's X.T @ g is X contracted with a 5000 x 1 matrix)."""
        for matrix, dims, other, other_dims, first in ((x, lc, y, rc, True), (y, rc, x, lc, False)):
            real = hlo.canonical_dtype(matrix.dtype)
            column = other.ndim == 2 and len(other_dims) == 1 and other.shape[1 - other_dims[0]] == 1
            length = (other.shape[other_dims[0]],) if column else other.shape
            if (len(dims) != 1 or matrix.dtype != other.dtype or (dtype is not None and np.dtype(dtype) != real)
                    or not blas.applies(matrix.shape, length, dims[0], real)):
                continue
            if matrix.name in self.module.views:  # a View multiplies it where it is (a dot_views program)
                continue
            vector = self.reshape(other, length) if column else other
            place = self.module.in_place.get(matrix.name)
            operands = [matrix, vector] if place is None else [*place, vector]
            target, free = (blas.ROWS, 0) if dims[0] == 1 else (blas.COLUMNS, 1)
            if self.module.is_symmetric(matrix):  # either way, A x: symv reads half of A
                target = blas.SYMMETRIC
            self.module.blas_products += 1
            product = self.custom_call(target, operands, [((matrix.shape[free],), vector.dtype)])[0]
            if column:  # the dot's own shape: the matrix's free dimension where its operand was
                product = self.reshape(product, (matrix.shape[free], 1) if first else (1, matrix.shape[free]))
            return product
        return None

    def _gemm(self, x, lc, y, rc, dtype):
        """dot_general(x, y) of two matrices as BLAS's product (blas.GEMM), when blas.multiplies
        and the module takes them (`gemm`; counted either way, for blas.GEMM_ALONE), a complex
        one always (XLA's is slower: blas.COMPLEX): each read where it is stored, transposed or
        not, an argument read through a view as its memory and offset there (as _gemv's)."""
        real = hlo.canonical_dtype(x.dtype)
        if (x.ndim != 2 or y.ndim != 2 or len(lc) != 1 or x.dtype != y.dtype
                or (dtype is not None and np.dtype(dtype) != real) or x.name in self.module.views
                or y.name in self.module.views):
            return None
        (ka,), (kb,) = lc, rc
        m, k, n = x.shape[1 - ka], x.shape[ka], y.shape[1 - kb]
        if not blas.multiplies(m, k, n, real):
            return None
        if real.kind != "c":
            watched = self.module.uses or {}  # the large arguments, in the first emission (the one asked)
            self.module.gemm_products += 1
            self.module.gemm_apart += x.name not in watched and y.name not in watched
            if not self.module.gemm:
                return None
        flags, operands = (blas.TRANSPOSED_A if ka == 0 else 0) | (blas.TRANSPOSED_B if kb == 1 else 0), []
        for v, offset in ((x, blas.OFFSET_A), (y, blas.OFFSET_B)):
            place = self.module.in_place.get(v.name)
            operands += [v] if place is None else list(place)
            flags |= 0 if place is None else offset
        layout = self.constant(np.array([m, k, n, flags], np.int32))
        self.module.blas_products += 1
        return self.custom_call(blas.GEMM, [layout, *operands], [((m, n), x.dtype)])[0]

    def _dot_general(self, x, y, contracting, batching, dtype):
        (lc, rc), (lb, rb) = contracting, batching
        views, uses = self.module.views, self.module.uses
        for v, dims, first in ((x, lc, True), (y, rc, False)):
            view = views.get(v.name)
            other, other_dims = (y, rc) if first else (x, lc)
            if view is not None and View.multiplies(v, dims, other, lb, dtype):
                return view.dot(self, other, dims[0], other_dims[0], first)
            u = uses.get(v.name) if uses else None
            if u is not None and self._depth == hlo.MAIN_DEPTH and View.multiplies(v, dims, other, lb, dtype):
                u.dots += 1
                u.traffic += View.traffic(v.shape, dims[0], other, other_dims[0])
            elif u is not None:
                u.ops["stablehlo.dot_general" if self._depth == hlo.MAIN_DEPTH else None] += 1
        if self.platform == "cpu" and _left_transposed(x, y, lc, rc, lb, rb, dtype):
            return self._left_canonical(x, y, rc[0], lb, rb)
        return self._product(x, y, (lc, rc), (lb, rb), dtype)

    def _product(self, x, y, contracting, batching, dtype=None):
        out = super().dot_general(x, y, contracting, batching, dtype)
        if self.platform == "cpu":
            self.module.products[out.name] = (x, y, contracting, batching)
        return out

    def transpose(self, x, perm):
        """hlo.Builder.transpose; on the CPU a matrix product's transpose reads it through a
        barrier where XLA would otherwise fold the transpose into the product as the product
        of its operands swapped, and that product's left operand would contract its first
        matrix dimension (_left_transposed): autograd's `dot` VJP transposes `g.T @ x`."""
        made = self.module.products.get(x.name)
        if made is not None:
            a, b, (lc, rc), (lb, rb) = made
            nb = len(lb)
            if list(perm) == [*range(nb), nb + 1, nb] and _left_transposed(b, a, rc, lc, rb, lb, None):
                x = self.barrier(x)
        return super().transpose(x, perm)

    def _left_canonical(self, x, y, ky, lb, rb):
        """x . y, x contracting the first of its two matrix dimensions (autograd's weight
        gradient `x.T @ g`), as a product whose left operand contracts its last, which XLA:CPU
        gives YNNPACK (see _left_transposed): either x transposed first, or (y' x)' with y'
        y contracting its last, transposing y first where it does not; the one copying fewer
        elements, a result's transpose counted at half (it fuses into an elementwise user, as
        the SGD update's `W - lr * dW`: 0.85x the Eigen product's time there, where
        transposing x first took 1.10x). Barriers keep XLA from folding the transposes back
        into the product."""
        nb = len(lb)
        swap = [*range(nb), nb + 1, nb]
        m, n = x.shape[nb + 1], y.shape[2 * nb + 1 - ky]
        batch = int(np.prod(x.shape[:nb]))
        copy_y = 0 if ky == nb + 1 else y.size
        if x.size <= copy_y + batch * m * n / 2:
            return self._product(self.barrier(self.transpose(x, swap)), y, ([nb + 1], [ky]), (lb, rb))
        if copy_y:
            y = self.barrier(self.transpose(y, swap))
        product = super().dot_general(y, x, ([nb + 1], [nb]), (lb, rb))
        return self.transpose(self.barrier(product), swap)

    def rule(self, entry):
        """The rule this context lowers a primitive's calls with (a registry.Entry's face):
        the translation rule. (batching.BatchingContext prefers a batching rule.)"""
        return entry.lowering

    # ----- collectives over a named axis ----------------------------------------------------
    def collective(self, kind, x, axis_name, **params):
        """A collective of the devices of pmap axis `axis_name` (batching.BatchingContext
        answers those over a vmap's own axis): `kind` psum / pmax / pmin (elementwise over
        the devices), all_gather (`axis`, `tiled`), ppermute (`perm`: (source, target)
        pairs), axis_index (x unused)."""
        size = self.module.axes.get(axis_name)
        if size is None:
            raise NameError(f"unbound axis name {axis_name!r}: collectives ({kind}) run inside pmap(..., "
                            f"axis_name={axis_name!r}) or vmap(..., axis_name={axis_name!r})")
        if size == 1:  # one device: no communication (XLA still runs an all-reduce of one: 0.7 ms an MLP step)
            return self._alone(kind, x, params)
        groups = [list(range(size))]
        if kind in REDUCTIONS:
            return self.all_reduce(x, groups, collective_reduction(kind, x.dtype)[0])
        if kind == "all_gather":
            gathered = self.all_gather(self.reshape(x, (1,) + x.shape), 0, groups)
            return gathered_layout(self, gathered, params["axis"], params["tiled"])
        if kind == "ppermute":
            return self.collective_permute(x, params["perm"])
        if kind == "axis_index":
            return self.convert(self.replica_id(), np.int32)
        raise ValueError(f"unknown collective {kind!r}")

    def _alone(self, kind, x, params):
        """A collective over an axis of one member."""
        if kind in REDUCTIONS:
            return x
        if kind == "all_gather":
            return gathered_layout(self, self.reshape(x, (1,) + x.shape), params["axis"], params["tiled"])
        if kind == "ppermute":
            return x if (0, 0) in params["perm"] else self.zeros_like(x)
        if kind == "axis_index":
            return self.scalar(0, np.int32)
        raise ValueError(f"unknown collective {kind!r}")

    # ----- constants ------------------------------------------------------------------------
    def const(self, array):
        array = np.asarray(array)
        if not hlo.supported(array.dtype):
            raise UnsupportedDtypeError(f"constant of dtype {array.dtype} cannot be compiled", array.dtype)
        if array.size > 1 and hlo.repeats_one_value(array):  # one value: a scalar broadcast, as jax emits zeros
            return self.splat(array.reshape(-1)[0], array.shape, array.dtype)
        if array.nbytes > LIFT_BYTES:
            return self.module.lift(array)
        return self.constant(array)

    def asvalue(self, x, dtype=None):
        """Any operand (Value, numpy array or scalar, Python scalar, list) as a Value,
        converted to `dtype` with numpy's casting when given."""
        if isinstance(x, hlo.Value):
            return x if dtype is None else self.astype(x, dtype)
        if dtype is None:
            dtype = _DEFAULT_DTYPE.get(type(x))
        if type(x) in _PY_SCALARS and dtype is not None:
            dtype = np.dtype(dtype)
            if type(x) is complex and dtype.kind != "c":
                x = x.real
            elif type(x) is float and dtype.kind in "iub":
                return self.astype(self.asvalue(x), dtype)
            return self.const(np.asarray(x, dtype=dtype))
        array = np.asarray(x)
        if dtype is not None and array.dtype != dtype:
            array = array.astype(dtype)
        return self.const(array)

    def full(self, shape, value, dtype):
        return self.splat(value, tuple(shape), dtype)

    def zeros_like(self, v):
        return self.full(v.shape, 0, v.dtype)

    # ----- numpy casting and broadcasting ---------------------------------------------------
    def astype(self, v, dtype):
        dtype = np.dtype(dtype)
        if v.dtype == dtype:
            return v
        if dtype.kind == "b":  # nonzero, for a complex value in either part
            return self.compare(v, self.zeros_like(v), "NE")
        if v.dtype.kind == "c" and dtype.kind != "c":
            v = self.real(v)
        if v.dtype.kind == "b" and dtype.kind == "c":
            v = self.convert(v, np.float64 if dtype == np.complex128 else np.float32)
        return self.convert(v, dtype)

    def broadcast_to(self, v, shape):
        shape = tuple(shape)
        if v.shape == shape:
            return v
        if v.ndim > len(shape):
            raise ValueError(f"cannot broadcast shape {v.shape} to {shape}")
        offset = len(shape) - v.ndim
        for d, s in zip(v.shape, shape[offset:]):
            if d != s and d != 1:
                raise ValueError(f"operands could not be broadcast together: {v.shape} to {shape}")
        return self.broadcast_in_dim(v, shape, range(offset, len(shape)))

    def ufunc_inputs(self, ufunc, inputs, dtype=None):
        """Operands converted to numpy's loop dtypes and broadcast to one shape."""
        in_dts, out_dts = resolve_ufunc(ufunc, tuple(promotion_type(x) for x in inputs), dtype)
        shape = np.broadcast_shapes(*[shape_of(x) for x in inputs])
        values = [self.broadcast_to(self.asvalue(x, dt), shape) for x, dt in zip(inputs, in_dts)]
        return values, out_dts

    # ----- small numpy building blocks shared by rules --------------------------------------
    def reduce_with(self, v, axes, op, init):
        """One-operand reduction with a stablehlo binary op (`add`, `maximum`, ...)."""
        axes = sorted(set(axes))
        if not axes:
            return v
        init_v = self.constant(np.asarray(init, dtype=v.dtype))
        return self.reduce([v], [init_v], axes, lambda b, acc, x: b.binary(op, acc, x))[0]

    def where(self, pred, x, y):
        shape = np.broadcast_shapes(pred.shape, x.shape, y.shape)
        return self.select(self.broadcast_to(pred, shape), self.broadcast_to(x, shape), self.broadcast_to(y, shape))

    def scalar(self, value, dtype):
        return self.constant(np.asarray(value, dtype=dtype))


#: The collectives that combine every member's value elementwise (collective_reduction).
REDUCTIONS = frozenset({"psum", "pmax", "pmin"})


def collective_reduction(kind, dtype):
    """(StableHLO op combining two members' values, its identity) of a reducing collective on
    values of `dtype`; booleans sum and maximise with `or`, minimise with `and`."""
    boolean = np.dtype(dtype) == np.bool_
    if kind == "psum":
        return ("or", False) if boolean else ("add", 0)
    if kind == "pmax":
        return ("or", False) if boolean else ("maximum", lowest(dtype))
    return ("and", True) if boolean else ("minimum", highest(dtype))


def lowest(dtype):
    """The identity of a maximum over `dtype`."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def highest(dtype):
    """The identity of a minimum over `dtype`."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max


def gathered_layout(ctx, gathered, axis, tiled):
    """all_gather's result from the stack of every device's value (size, *shape): the stack
    axis moved to `axis`, or merged into the axis there (`tiled`)."""
    size, shape = gathered.shape[0], gathered.shape[1:]
    if tiled:
        moved = ctx.transpose(gathered, list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(shape) + 1)))
        return ctx.reshape(moved, shape[:axis] + (size * shape[axis],) + shape[axis + 1:])
    return ctx.transpose(gathered, list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(shape) + 1)))


def normalize_axis(axis, ndim, name="axis"):
    if isinstance(axis, (np.integer, int)) and not isinstance(axis, bool):
        axis = int(axis)
        if not -ndim <= axis < ndim:
            raise np.exceptions.AxisError(f"{name} {axis} is out of bounds for array of dimension {ndim}")
        return axis % ndim
    if isinstance(axis, hlo.Value):
        raise ConcreteValueRequired(axis, f"the {name}")
    raise TypeError(f"{name} must be an integer, got {axis!r}")


def kept_shape(shape, axes):
    """`shape` with the reduced `axes` kept as ones (a reduction's keepdims=True shape)."""
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def normalize_axes(axis, ndim):
    """None -> all axes; int or sequence -> sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (tuple, list)):
        axes = tuple(normalize_axis(a, ndim) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError("duplicate value in 'axis'")
        return tuple(sorted(axes))
    return (normalize_axis(axis, ndim),)
