"""Module globals of autograd and numpy that look at concrete data, swapped for traced
equivalents while a trace is active.

Each patch is registered with `registry.register_module_patch` once, when this module is
imported, and `tracing.intercepting` installs them all while a trace runs (restoring the
originals as stored when it ends). Several replacements wrap the attribute they replace
(`np.int64.__new__`, `anp.ndim` / `anp.shape`, `ArrayVSpace.zeros`, `VJPNode.__init__` and
`JVPNode.__init__`, autograd's `unpermuter` and `select`), read when they are built: import
time is outside any trace, while nothing is swapped, so they wrap the originals. (Built during a trace, they would
wrap the patches themselves.)
"""
import sys

import autograd.numpy as anp
import numpy as np
from autograd import differential_operators
from autograd.core import JVPNode, VJPNode, primitive_vjps
from autograd.extend import vspace
from autograd.numpy import numpy_vjps, numpy_wrapper
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.numpy.numpy_vspaces import ArrayVSpace
from autograd.tracer import getval, isbox
from numpy._core.einsumfunc import _parse_einsum_input as _numpy_parse_einsum_input

from .. import registry, tracing
from ..tracing import Tracer


def _parse_einsum_input(operands):
    """autograd's einsum VJP parses subscripts with numpy's parser, which calls asarray on
    the operands; parse zero-strided stand-ins instead and hand back the traced operands."""
    if not any(type(x) is Tracer for x in operands):
        return _numpy_parse_einsum_input(operands)
    stand_ins = [np.broadcast_to(np.empty((), np.int8), x.shape) if type(x) is Tracer else x for x in operands]
    in_subs, out_subs, _ = _numpy_parse_einsum_input(stand_ins)
    arrays = list(operands[1:]) if isinstance(operands[0], str) else list(operands[0::2])
    return in_subs, out_subs, arrays


# np.r_ / np.c_: numpy's AxisConcatenator makes each item an array with `array(item, ndmin=...)`
# (no __array_function__ dispatch), then concatenates; autograd's r_/c_ wrap numpy's. While
# tracing, that `array` passes traced values and boxes through as reshapes and casts, and the
# concatenation is autograd's, so the result is traced and differentiable.
_numpy_index_tricks_array = np.lib._index_tricks_impl.array


def _index_tricks_array(obj, dtype=None, copy=None, subok=False, ndmin=0, **kwargs):
    x = getval(obj)
    if type(x) is not Tracer:
        return _numpy_index_tricks_array(obj, dtype=dtype, copy=copy, subok=subok, ndmin=ndmin, **kwargs)
    if dtype is not None and np.dtype(dtype) != x.dtype:
        obj = obj.astype(dtype)
    if len(x.shape) < ndmin:
        obj = anp.reshape(obj, (1,) * (ndmin - len(x.shape)) + tuple(x.shape))
    return obj


def _traced_concatenator(numpy_class):
    class Traced(numpy_class):
        concatenate = staticmethod(anp.concatenate)
    concatenator = Traced()

    def getitem(self, args):
        return concatenator[args]
    return getitem


# autograd's integer scalar types (anp.int64...) construct through numpy's: np.int64(x) of an
# array is x.astype(np.int64), which for a traced x is a traced cast.
_AUTOGRAD_INT_TYPES = tuple({anp.int8, anp.int16, anp.int32, anp.int64})


def _traced_int_scalar(original):
    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and type(getval(args[0])) is Tracer:
            return getval(args[0]).astype(np.dtype(cls))  # not differentiated, as autograd's notrace
        return original.__func__(cls, *args, **kwargs)
    return staticmethod(__new__)


def _nested_shape_query(query):
    """np.ndim / np.shape of a list of traced arrays (autograd's gradient VJP asks it of a
    cotangent list): numpy makes an array of the list; ask it of stand-ins of the same shapes."""
    def stand_in(x):
        x = getval(x)
        if type(x) is Tracer:
            return np.broadcast_to(np.empty((), np.int8), x.shape)
        return [stand_in(e) for e in x] if type(x) in (list, tuple) else x

    def traced_query(a):
        a = getval(a)
        return query(stand_in(a) if type(a) in (list, tuple) and tracing.holds_tracer(a) else a)
    traced_query.__wrapped__ = query
    return traced_query


def _traced_metadata(original):
    """autograd's `metadata(A)` (shape, ndim, result_type, iscomplexobj: its VJPs ask it of every
    operand they unbroadcast to) of a Tracer answered from its aval, as numpy's four queries of
    it answer (tracing's metadata rules), without numpy's dispatch of each: 26,000 of them in
    Euler 500's gradient, a tenth of its trace."""
    def metadata(A):
        value = getval(A)
        if type(value) is Tracer:
            aval = value.aval
            return aval.shape, len(aval.shape), tracing.result_type(value), aval.dtype.kind == "c"
        return original(A)
    metadata.__wrapped__ = original
    return metadata


_original_unpermuter = numpy_vjps.unpermuter


def traced_unpermuter(g, permutation):
    """autograd's VJP of sort/partition inverts the permutation by assigning into a concrete
    array (`unsort[permutation] = range(n)`); with a traced permutation the inverse is its
    argsort, and the cotangent is gathered with it."""
    if isinstance(permutation, np.ndarray):
        return _original_unpermuter(g, permutation)
    return g[anp.argsort(permutation)]


_original_repeat_to_match_shape = numpy_vjps.repeat_to_match_shape


def traced_repeat_to_match_shape(g, shape, dtype, axis, keepdims):
    """autograd's VJPs of reductions (sum, mean, max, prod, var) spread the cotangent over the
    reduced axes by adding `onp.zeros(shape)`: a concrete array of the operand's size, which a
    trace would hold as a constant (SeLU's 4096x4096 gradient: 64 MiB, read whole by lowering
    to find it one value) and the program would add. A traced cotangent is broadcast instead,
    as jax's sum transposes: the same values but a zero's sign (0.0 + -0.0 is 0.0), which
    XLA drops from the sum too (its import folds x + 0 to x)."""
    value = getval(g)
    if type(value) is not Tracer or shape == () or value.aval.weak_type or np.result_type(
            value.dtype, dtype) != value.dtype:
        return _original_repeat_to_match_shape(g, shape, dtype, axis, keepdims)
    axis = list(axis) if isinstance(axis, tuple) else axis
    new_shape = np.array(shape)
    new_shape[axis] = 1
    num_reps = np.prod(np.array(shape)[axis])
    return anp.broadcast_to(anp.reshape(g, new_shape), shape), num_reps


_original_select = numpy_wrapper.select


def traced_select(condlist, choicelist, default=0):
    """autograd.numpy.select rebuilds numpy's result element by element (so that arrays of
    boxes work); on traced arrays without boxes numpy's select is one primitive."""
    items = list(condlist) + list(choicelist) + [default]
    traced = any(type(getval(x)) is Tracer for x in items)
    if not traced:
        return _original_select(condlist, choicelist, default)
    if any(isbox(x) for x in items):  # numpy's semantics (the first true condition wins) as differentiable wheres
        out = default
        for cond, choice in reversed(list(zip(condlist, choicelist))):
            out = anp.where(cond, choice, out)
        shape = np.broadcast_shapes(*[anp.shape(x) for x in items])
        return anp.broadcast_to(out, shape) if anp.shape(out) != shape else out
    return np.select(list(condlist), list(choicelist), default=default)


_custom_where = anp.custom_where  # (autograd's own, not a patch installed while tracing)
_PYTHON_NUMBERS = (bool, int, float, complex)


def traced_where(condition, *args, **kwargs):
    """autograd.numpy.where gives Python numbers (numpy's result `.tolist()`) where none of
    the condition, x and y is a numpy value or a box: traced values standing for Python
    numbers (weak) give a weak value, that number (`a32 + np.where(True, s, 0.0)` of a Python
    float s is float32, as plainly)."""
    out = _custom_where(condition, *args, **kwargs)
    operands = (condition, *args, *kwargs.values())
    if (type(out) is Tracer and not out.shape and len(operands) == 3
            and all(type(x) in _PYTHON_NUMBERS or type(x) is Tracer and x.aval.weak_type for x in operands)):
        out.mark_weak()
    return out


def _array_vspace_zeros(concrete_zeros):
    """Gradients with respect to a concrete array (a constant being differentiated inside a
    traced function) start as zeros that autograd then adds traced cotangents into in place
    (`x += g`, `np.add.at`), which a numpy array cannot hold: in a tracing thread, they
    start as traced zeros instead (the same values)."""
    def zeros(vs):
        if tracing.state.traces:
            return tracing.accumulator_zeros(vs.shape, vs.dtype)
        return concrete_zeros(vs)
    zeros.__wrapped__ = concrete_zeros
    return zeros


def _array_vspace_mut_add(concrete_mut_add):
    """Adding a traced cotangent into the traced zeros `_array_vspace_zeros` gave: the
    cotangent (tracing.accumulate)."""
    def mut_add(vs, x, y):
        if type(x) is Tracer:
            return tracing.accumulate(x, y)
        return concrete_mut_add(vs, x, y)
    mut_add.__wrapped__ = concrete_mut_add
    return mut_add


def _weak_creation(raw, dtype_position):
    """np.zeros, np.ones, np.eye or np.identity (`raw`) as autograd's wrapper calls it while
    tracing: called by autograd's derivative code (tracing.derivative_code) with numpy's
    default dtype, a weakly typed traced array, which takes the dtype of what it meets (a
    float32 cotangent stays float32: tracing.in_dtype); otherwise numpy's."""
    def creation(*args, **kwargs):
        dtype = kwargs.get("dtype", args[dtype_position] if len(args) > dtype_position else None)
        # frame 1 is autograd's wrapper (anp.zeros), 2 its caller
        if dtype is not None or not tracing.state.traces or not tracing.derivative_code(sys._getframe(2)):
            return raw(*args, **kwargs)
        if raw in (np.zeros, np.ones):
            shape = kwargs.get("shape", args[0] if args else None)
            out = tracing.full(shape, 1.0 if raw is np.ones else 0.0, np.float64)
        else:  # np.identity(n) is np.eye(n)
            out = tracing.bind(np.eye, args[:1] if raw is np.identity else args, kwargs)
        out.mark_weak()
        return out
    return creation


for _raw, _position in ((np.zeros, 1), (np.ones, 1), (np.eye, 3), (np.identity, 1)):
    registry.register_interceptor(_raw, _weak_creation(_raw, _position))


def _vjp_node_init(original):
    """VJPNode.__init__ while tracing: the node's VJP gives cotangents in their primals' dtypes
    (tracing.in_primal_dtypes), and is made when the backward pass first calls it (_LazyVJP)."""
    def __init__(self, value, fun, args, kwargs, parent_argnums, parents):
        if not tracing.state.traces:
            return original(self, value, fun, args, kwargs, parent_argnums, parents)
        self.parents = parents
        if fun not in primitive_vjps:
            fun_name = getattr(fun, "__name__", fun)  # (autograd's error, at the forward operation)
            raise NotImplementedError(f"VJP of {fun_name} wrt argnums {parent_argnums} not defined")
        self.vjp = _LazyVJP(value, fun, args, kwargs, parent_argnums)
    return __init__


class _LazyVJP:
    """A traced node's VJP, made at its first call: the nodes of a forward pass whose VJP comes
    from its rolled graph (rolled_vjps.py) are never called, and making each VJP (its maker,
    its dtypes) was a quarter of a loop's forward pass under autograd."""

    __slots__ = ("made", "parts")

    def __init__(self, value, fun, args, kwargs, parent_argnums):
        self.made, self.parts = None, (value, fun, args, kwargs, parent_argnums)

    def __call__(self, g):
        if self.made is None:
            value, fun, args, kwargs, parent_argnums = self.parts
            self.made = tracing.in_primal_dtypes(primitive_vjps[fun](parent_argnums, value, args, kwargs),
                                                 [args[i] for i in parent_argnums], value, args)
            self.parts = None
        return self.made(g)


def _jvp_node_init(original):
    """JVPNode.__init__ while tracing: the tangent in its primal's dtype, or its parents'
    tangents' where wider (tracing.in_dtype, tracing.widest)."""
    def __init__(self, value, fun, args, kwargs, parent_argnums, parents):
        original(self, value, fun, args, kwargs, parent_argnums, parents)
        if tracing.state.traces:
            primal = tracing.dtype_of(value)
            if tracing.narrower(primal):  # a float64 primal's tangent is left as it is, unread
                incoming = [tracing.dtype_of(x) for x in args] + [tracing.dtype_of(p.g) for p in parents
                                                                 if type(p) is JVPNode]
                self.g = tracing.in_dtype(self.g, tracing.widest(primal, incoming))
    return __init__


def _box_conversion(kind):
    """ArrayBox.__float__ (or __int__, __complex__) while tracing. autograd's ArrayBox has none,
    so Python raises TypeError; numpy's item assignment converts the value it stores with them,
    and a box of a traced value stored into a numpy array (`y[0] = x[0]` under grad) is
    told what autograd cannot do there and what to write instead."""
    def convert(self):
        caller = sys._getframe(1)
        if type(self._value) is Tracer and tracing.storing_into_array(caller):
            raise tracing.store_error(self._value, caller, boxed=True)
        raise TypeError(f"{kind}() argument must be a real number, not '{type(self).__name__}'")
    return convert


def _seed_vspace(x):
    """`vspace` as autograd's differential operators see it (grad's `vspace(ans).ones()`, the
    seed of the backward pass): for a traced value, a SeedVSpace, whose seed is attributed to
    the user's line that computed the value."""
    value = getval(x)
    return tracing.SeedVSpace(value) if type(value) is Tracer else vspace(x)


for _owner, _name, _replacement in (
        [(numpy_wrapper, "_parse_einsum_input", _parse_einsum_input),
         (numpy_wrapper.r_class, "__getitem__", _traced_concatenator(np.lib._index_tricks_impl.RClass)),
         (numpy_wrapper.c_class, "__getitem__", _traced_concatenator(np.lib._index_tricks_impl.CClass)),
         (np.lib._index_tricks_impl, "array", _index_tricks_array)]
        + [(cls, "__new__", _traced_int_scalar(vars(cls)["__new__"])) for cls in _AUTOGRAD_INT_TYPES]
        + [(module, name, _nested_shape_query(getattr(module, name)))
           for module in (anp, numpy_wrapper) for name in ("ndim", "shape")]
        + [(module, "metadata", _traced_metadata(numpy_wrapper.metadata)) for module in (anp, numpy_wrapper)]
        + [(numpy_vjps, "unpermuter", traced_unpermuter),
           (numpy_vjps, "repeat_to_match_shape", traced_repeat_to_match_shape),
           (numpy_wrapper, "select", traced_select),
           (anp, "select", traced_select),
           (numpy_wrapper, "where", traced_where),
           (anp, "where", traced_where),
           (ArrayVSpace, "zeros", _array_vspace_zeros(ArrayVSpace.zeros)),
           (ArrayVSpace, "_mut_add", _array_vspace_mut_add(ArrayVSpace._mut_add)),
           (VJPNode, "__init__", _vjp_node_init(VJPNode.__init__)),
           (JVPNode, "__init__", _jvp_node_init(JVPNode.__init__)),
           (differential_operators, "vspace", _seed_vspace)]
        + [(ArrayBox, f"__{kind}__", _box_conversion(kind)) for kind in ("float", "int", "complex")]):
    registry.register_module_patch(_owner, _name, _replacement)
