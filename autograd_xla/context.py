"""What a translation rule receives as `ctx`: `LoweringContext`, the StableHLO builder of
`hlo.Builder` plus the numpy semantics every rule needs (NEP 50 promotion, broadcasting,
casting, constants), and the helpers rule authors share (`result_type`, `normalize_axis`).

Rules call `ctx.<op>(...)` and never print text themselves. The same rules run twice: at
trace time on a scratch context, to learn each primitive's output shapes and dtypes
(`tracing.abstract_eval`), and in lowering.py to emit the module.
"""
import functools

import numpy as np

from . import hlo
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


class ModuleState:
    """What all builders of one module share: lifted constants become parameters; the
    source locations of its ops (an hlo.Locations, or None for none); the named axes its
    collectives may reduce over (`axes`: name -> size), each a pmap's devices."""

    def __init__(self, platform="cpu", locations=None, axes=None):
        self.platform = platform
        self.lifted = {}  # id(array) -> (array, Value)
        self.locations = locations
        self.axes = dict(axes or {})
        # value name -> ops that use it, for the values lowering watches (its argument views);
        # a use inside a region is recorded as None
        self.uses = None

    def lift(self, array):
        hit = self.lifted.get(id(array))
        if hit is None:
            hit = (array, hlo.Value(f"%k{len(self.lifted)}", array.shape, array.dtype))
            self.lifted[id(array)] = hit
        return hit[1]


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
        uses = self.module.uses
        if uses:
            for v in operands:
                seen = uses.get(v.name)
                if seen is not None:
                    seen.add(name if self._depth == hlo.MAIN_DEPTH else None)
        return super().op(name, operands, results, attrs, regions)

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
        if array.dtype not in hlo.SUPPORTED_DTYPES:
            raise UnsupportedDtypeError(f"constant of dtype {array.dtype} cannot be compiled", array.dtype)
        if array.nbytes > LIFT_BYTES and not hlo.repeats_one_value(array):
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
