"""What every control-flow primitive shares: operand types and the checks of body outputs
against the carry; closure conversion (boxes a body closes over become operands:
`_Closure`, `closure_convert`); tracing bodies into sub-graphs (`trace_body`); the graph
side of a primitive (`ControlFlowPrimitive`, `Params`); and the autograd side: calling a
body under `make_vjp` / `make_jvp` (`call_vjp`, `call_jvp`), packing a primitive's result
and taking it apart, and operands flattened into leaves and gradients rebuilt from them.
"""
import copy
import functools
import types
import warnings

import autograd.numpy as anp
import numpy as np
from autograd import builtins as ag_builtins
from autograd.core import make_jvp, make_vjp
from autograd.tracer import box_types, getval, isbox, trace_stack

from .. import hlo, tracing, tree
from ..core import Aval, Var
from ..errors import ConcretizationError, annotate
from ..tracing import Tracer

PY_SCALARS = (bool, int, float, complex)
INT64 = np.dtype(np.int64)


# ============================================================================================
# Shared helpers: operand types
# ============================================================================================
def dtype_of(x):
    v = getval(x)
    return v.dtype if hasattr(v, "dtype") else np.result_type(v)


def is_float(x):
    return dtype_of(x).kind in "fc"


def is_weak(x):
    v = getval(x)
    return type(v) in PY_SCALARS or (type(v) is Tracer and v.aval.weak_type)


def aval_of(x, keep_weak=False):
    """Shape and dtype of an operand leaf; Python scalars take numpy's default dtypes and,
    unless `keep_weak`, become strong (a loop carry started from 0.0 is float64)."""
    v = getval(x)
    if type(v) is Tracer:
        return v.aval if keep_weak else v.aval.strong()
    if not isinstance(v, (np.ndarray, np.generic) + PY_SCALARS):
        raise TypeError(f"control-flow operands must be arrays, scalars or tuples/lists/dicts of them; "
                        f"got {type(v).__name__}")
    a = np.asarray(v)
    if not hlo.supported(a.dtype):
        raise TypeError(f"control-flow operand of dtype {a.dtype} is not supported")
    return Aval(a.shape, a.dtype, weak_type=keep_weak and type(v) in PY_SCALARS)


def python_mode(leaves):
    """Run as plain Python: no trace active and nothing traced among the operands."""
    return not tracing.is_tracing() and not any(type(getval(x)) is Tracer for x in leaves)


def astype(x, dtype):
    """x as `dtype` (differentiably when x is boxed); Python scalars become numpy arrays."""
    v = getval(x)
    weak_py = type(v) in PY_SCALARS
    if not weak_py and dtype_of(v) == dtype:
        return x
    if isbox(x):
        return anp.array(x, dtype=dtype) if weak_py else x.astype(dtype)
    if type(v) is Tracer:
        return v.astype(dtype)
    return np.asarray(v, dtype=dtype)


def zeros(x, dtype=None):
    return np.zeros(np.shape(getval(x)), dtype or dtype_of(x))


def incoming_dtype(values):
    """The widest float dtype among incoming cotangents or tangents (None if none)."""
    dtypes = [dtype_of(v) for v in tree.flatten(list(values))[0]]
    dtypes = [d for d in dtypes if d.kind in "fc"]
    return np.result_type(*dtypes) if dtypes else None


def like(primal, wide):
    """The dtype of a derivative for `primal`: like plain autograd, a float64 cotangent makes
    a float32 value's gradient float64, while a float32 one leaves a float64 gradient alone."""
    return dtype_of(primal) if wide is None else np.result_type(dtype_of(primal), wide)


def canonical(x):
    """A carry's initial leaf as an array: Python scalars get numpy's default dtype."""
    return astype(x, dtype_of(x)) if type(getval(x)) in PY_SCALARS else x


def leaf_labels(prefix, treedef):
    return [prefix + tree.format_path(p) for p in tree.leaf_paths(treedef)]


def check_leaf(got, weak, want, what, label):
    """A body output must keep its carry slot's shape and dtype; outputs of weak type
    (Python scalars) may take the slot's dtype if numpy would cast them same_kind."""
    if got.shape != want.shape:
        raise TypeError(f"{what}: {label} has shape {got.shape} but the carry's is {want.shape}. Loop bodies "
                        "must return a carry with the same structure, shapes and dtypes as its input.")
    if got.dtype != want.dtype and not (weak and np.can_cast(got.dtype, want.dtype, "same_kind")):
        raise TypeError(f"{what}: {label} has dtype {got.dtype} but the carry's is {want.dtype}. Loop bodies "
                        f"must keep the carry's dtypes: cast with .astype({want.dtype.name}) or start "
                        "from an initial value of the dtype the body produces.")


def check_structure(got, want, what):
    if got != want:
        raise TypeError(f"{what} returned a carry of structure {tree.describe(got)}, but its input carry is "
                        f"{tree.describe(want)}; the carry's structure must not change.")


def conform(outs, avals, what, labels):
    """Python path: check body outputs against the carry and cast weak ones to it."""
    result = []
    for o, want, label in zip(outs, avals, labels):
        v = getval(o)
        weak = type(v) in PY_SCALARS
        check_leaf(Aval(np.shape(v), dtype_of(v)), weak, want, what, label)
        result.append(astype(o, want.dtype) if weak or dtype_of(v) != want.dtype else o)
    return result


def check_outputs(infos, avals, what, labels):
    """Traced path: the same check on the traced outputs' (aval, weak) pairs."""
    for (got, weak), want, label in zip(infos, avals, labels):
        check_leaf(got, weak, want, what, label)


def describe(v):
    return f"{np.dtype(dtype_of(v)).name}{list(np.shape(v))}"


# ============================================================================================
# Closure conversion: boxes a body closes over become operands
# ============================================================================================
class Opaque:
    """Our own objects (specs, converted bodies): closure conversion never looks inside."""

    __slots__ = ()


_WALK_BUDGET = 20000  # objects visited per function at most; anything beyond is left alone


def _children(obj):
    """What `obj` refers to that a call may read, or None for objects that are leaves."""
    t = type(obj)
    if t is types.FunctionType:
        found = []
        for cell in obj.__closure__ or ():
            try:
                found.append(cell.cell_contents)
            except ValueError:  # an empty cell
                pass
        return found + list(obj.__defaults__ or ()) + list((obj.__kwdefaults__ or {}).values())
    if t is types.MethodType:
        return [obj.__func__, obj.__self__]
    if t is functools.partial:
        return [obj.func, *obj.args, *obj.keywords.values()]
    if isinstance(obj, (tuple, list)):
        return list(obj)
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, (Opaque, type, types.ModuleType, np.ndarray, np.generic, Tracer, str, bytes) + PY_SCALARS):
        return None
    attrs = getattr(obj, "__dict__", None)
    return list(attrs.values()) if type(attrs) is dict else None


class _Closure:
    """The autograd boxes reachable from `fn` and how to rebuild `fn` with other values in
    their place. Functions, partials, bound methods, containers and objects on the way to
    a box are copied; everything else (and every cell not leading to a box) is shared."""

    def __init__(self, fn):
        self.fn = fn
        self.boxes = []
        self._has = {}    # id(obj) -> whether a box is reachable from it
        self._alive = []  # keeps visited objects alive, so their ids stay unique
        self._budget = _WALK_BUDGET
        if trace_stack.top >= 0:  # else nothing is being differentiated: no box can be live (~200 µs saved)
            self._visit(fn)

    def _visit(self, obj):
        key = id(obj)
        hit = self._has.get(key)
        if hit is not None:
            return hit
        if type(obj) in box_types:
            if obj._trace > trace_stack.top:  # its differentiation has finished: not ours to wire
                return False
            self._has[key] = True
            self._alive.append(obj)
            self.boxes.append(obj)
            return True
        children = _children(obj)
        if children is None or self._budget <= 0:
            return False
        self._budget -= 1
        self._has[key] = False  # provisional, for cycles
        self._alive.append(obj)
        found = False
        for child in children:
            found = self._visit(child) or found
        self._has[key] = found
        return found

    def rebuild(self, values):
        if not self.boxes:
            return self.fn
        memo = {id(b): v for b, v in zip(self.boxes, values)}
        return self._rebuild(self.fn, memo)

    def _rebuild(self, obj, memo):
        key = id(obj)
        if key in memo:
            return memo[key]
        if not self._has.get(key):
            return obj
        t = type(obj)
        sub = functools.partial(self._rebuild, memo=memo)
        if t is types.FunctionType:
            cells = obj.__closure__ or ()
            new_cells = tuple(types.CellType() if self._cell_has_box(c) else c for c in cells)
            new = types.FunctionType(obj.__code__, obj.__globals__, obj.__name__, None, new_cells or None)
            memo[key] = new
            new.__defaults__ = tuple(map(sub, obj.__defaults__)) if obj.__defaults__ else None
            new.__kwdefaults__ = {k: sub(v) for k, v in obj.__kwdefaults__.items()} if obj.__kwdefaults__ else None
            new.__qualname__, new.__module__ = obj.__qualname__, obj.__module__
            new.__dict__.update(obj.__dict__)
            for old, cell in zip(cells, new_cells):
                if cell is not old:
                    cell.cell_contents = sub(old.cell_contents)
            return new
        if t is types.MethodType:
            new = memo[key] = types.MethodType(sub(obj.__func__), sub(obj.__self__))
            return new
        if t is functools.partial:
            new = memo[key] = functools.partial(sub(obj.func), *map(sub, obj.args),
                                                **{k: sub(v) for k, v in obj.keywords.items()})
            return new
        if isinstance(obj, tuple):
            items = [sub(x) for x in obj]
            new = memo[key] = t(*items) if hasattr(obj, "_fields") else t(items)
            return new
        new = memo[key] = copy.copy(obj)
        if isinstance(obj, list):
            new[:] = [sub(x) for x in obj]
        elif isinstance(obj, dict):
            for k, v in obj.items():
                new[k] = sub(v)
        else:
            for k, v in vars(obj).items():
                if self._has.get(id(v)):
                    vars(new)[k] = sub(v)
        return new

    def _cell_has_box(self, cell):
        try:
            return bool(self._has.get(id(cell.cell_contents)))
        except ValueError:
            return False


class _Converted(Opaque):
    """A body whose closed-over boxes are arguments: `call(ext, *args)` runs the body with
    the boxes at positions `index` of the shared operand list `ext` put in their place."""

    __slots__ = ("closure", "index")

    def __init__(self, closure, index):
        self.closure, self.index = closure, index

    def __call__(self, ext, *args):
        return self.closure.rebuild([ext[k] for k in self.index])(*args)


def closure_convert(*fns):
    """Closure-convert several bodies of one primitive: ([_Converted], shared box list)."""
    converted, ext, position = [], [], {}
    for fn in fns:
        closure = _Closure(fn)
        index = []
        for box in closure.boxes:
            k = position.setdefault(id(box), len(ext))
            if k == len(ext):
                ext.append(box)
            index.append(k)
        converted.append(_Converted(closure, index))
    return converted, ext


def hidden_box_error(what):
    return TypeError(
        f"{what} returned a value that depends on an array being differentiated (an autograd box) which "
        "reaches the body neither through its arguments nor through its closure (a global variable, or an "
        "attribute of an object autograd_xla cannot copy). Pass that value into the body explicitly: as "
        "part of the carry, or as an operand.")


# ============================================================================================
# Shared helpers: tracing bodies, and the graph side of control-flow primitives
# ============================================================================================
def trace_body(fn, in_avals, names, what, strip_boxes=False, origins=None):
    """Trace `fn(*tracers) -> list of leaves` into a sub-graph of the current trace.

    Returns (graph, [(aval, weak) per output]); values the body closes over from enclosing
    traces appear in `graph.captured` and must be passed to the primitive as operands.
    `origins`: argument index -> the traced value of the current trace it equals.
    """
    count = []

    def flat(*tracers):
        outs = list(fn(*tracers))
        for k, o in enumerate(outs):
            if isbox(o):
                if not strip_boxes:
                    raise hidden_box_error(what)
                outs[k] = getval(o)
        count.append(len(outs))
        return outs

    try:
        graph, _ = tracing.trace_function(flat, in_avals, names, parent=tracing.current_trace(), origins=origins)
    except ConcretizationError as e:
        raise annotate(e, f"(while tracing {what}: its arguments are traced, so Python `if`/`while` on them "
                          "needs cond/switch/while_loop, and a numpy constant indexed by the loop index needs "
                          "np.take(a, i, axis=0) instead of a[i])")
    return graph, [_out_info(v) for v in graph.outvars[:count[0]]]


def _out_info(v):
    if isinstance(v, Var):
        return v.aval.strong(), v.aval.weak_type
    return Aval(np.shape(v), np.result_type(v)), type(v) in PY_SCALARS


def captured_operands(graph):
    return [outer for _, outer in graph.captured]


class ControlFlowPrimitive:
    """A graph primitive whose equation carries sub-graphs in its first argument."""

    def __init__(self, name):
        self.primitive_name = self.__name__ = name

    def subgraphs(self, eqn):
        return eqn.args[0].graphs

    def __repr__(self):
        return f"<control-flow primitive {self.primitive_name}>"


class Params(Opaque):
    """The static half of a control-flow equation: its sub-graphs and result types."""

    def __init__(self, label, graphs, **fields):
        self.label, self.graphs = label, graphs
        self.__dict__.update(fields)

    def __repr__(self):
        return self.label


def alias(value, weak=None):
    """A fresh handle on `value`: lower_subgraph marks its inputs' weak types in place."""
    return value.with_weak_type(value.weak_type if weak is None else weak)


def cast_all(ctx, values, avals):
    return [ctx.astype(ctx.asvalue(v), a.dtype) for v, a in zip(values, avals)]


def call_vjp(f, leaves, diff, outs, cts):
    """Gradients of <cts, f(leaves)[outs]> with respect to leaves[diff]; f returns a list."""
    if not diff:
        return []

    def restricted(d):
        full = list(leaves)
        for k, j in enumerate(diff):
            full[j] = d[k]
        out = f(full)
        return ag_builtins.list([out[j] for j in outs])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Output seems independent of input": zeros are right
        vjp, _ = make_vjp(restricted, [leaves[j] for j in diff])
        grads = vjp([cts[k] for k in range(len(outs))])
    return [grads[k] for k in range(len(diff))]


def call_jvp(f, leaves, diff, tangents):
    """(f(leaves), its tangents along `tangents` of leaves[diff]); f returns a list."""
    if not diff:
        outs = list(f(list(leaves)))
        return outs, [zeros(o) for o in outs]

    def restricted(d):
        full = list(leaves)
        for k, j in enumerate(diff):
            full[j] = d[k]
        return ag_builtins.list(list(f(full)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs, touts = make_jvp(restricted, [leaves[j] for j in diff])(list(tangents))
    return [outs[k] for k in range(len(outs))], [touts[k] for k in range(len(outs))]


def pack(leaves):
    """A primitive's result: one leaf bare, several as a tuple. autograd accumulates a tuple's
    cotangent in place into zeros of each leaf's dtype, while a bare array's keeps the dtype
    the backward pass produced (as it would through the plain Python loop)."""
    return leaves[0] if len(leaves) == 1 else tuple(leaves)


def as_list(out):
    return [out[k] for k in range(len(getval(out)))] if isinstance(getval(out), tuple) else [out]


def unpack(out, n=None):
    """The leaves of a primitive's result (the first n). Integer leaves are taken unboxed: they
    have no gradient, and autograd could not accumulate a float cotangent into their slot."""
    raw = as_list(getval(out))
    n = len(raw) if n is None else n
    if not isinstance(getval(out), tuple):
        return [out if is_float(raw[0]) else raw[0]]
    return [out[k] if is_float(r) else r for k, r in enumerate(raw[:n])]


def flatten_items(items):
    """Leaves of each operand (a closed-over dict of parameters is one operand)."""
    leaves, trees, offsets = [], [], []
    for item in items:
        ls, td = tree.flatten(item)
        offsets.append(len(leaves))
        leaves += ls
        trees.append(td)
    return leaves, trees, offsets


def unflatten_items(trees, offsets, leaves):
    return [tree.unflatten(td, leaves[o:o + tree.num_leaves(td)]) for td, o in zip(trees, offsets)]


def item_grads(trees, offsets, leaves, grads):
    """Per operand, its gradient rebuilt from `grads` (leaf index -> gradient; zeros if absent)."""
    out = []
    for td, o in zip(trees, offsets):
        span = range(o, o + tree.num_leaves(td))
        out.append(tree.unflatten(td, [grads[j] if j in grads else zeros(leaves[j]) for j in span]))
    return out


def select_grads(args, argnums, first, grads):
    """The gradient for each argnum from `grads`, a dict leaf index -> gradient (zeros if absent)."""
    return tuple(grads[a - first] if (a - first) in grads else zeros(args[a]) for a in argnums)


def ext_tangents(ext, ext_leaves, ext_trees, offsets, given, first, wide):
    """Float leaves of the closed-over operands that have a tangent, and those tangents."""
    de, te = [], []
    for m in range(len(ext)):
        if first + m not in given:
            continue
        t_leaves, _ = tree.flatten(given[first + m])
        for k, t in enumerate(t_leaves):
            j = offsets[m] + k
            if is_float(ext_leaves[j]):
                de.append(j)
                te.append(astype(t, like(ext_leaves[j], wide)))
    return de, te
