"""Structured control flow: `while_loop`, `fori_loop`, `cond`, `switch` and `scan`.

Semantics follow jax.lax's. Each function runs in one of three ways:

* outside jit_ps (no trace active, no traced operand) it is an ordinary Python loop or
  branch, so plain autograd differentiates it like any other Python code;
* inside jit_ps its bodies are traced once into sub-graphs, and the call becomes one
  equation that lowers to `stablehlo.while` / `stablehlo.case` (never unrolled);
* inside jit_ps with autograd boxes among its operands (`jit_ps(grad(f))`, and
  `grad(jit_ps(f))`, which re-traces f under autograd) the call is an autograd primitive
  whose VJP and JVP are written with these same functions and autograd's own
  `make_vjp` / `make_jvp`. They are traced and compiled in turn and are differentiable
  again, which is what makes `grad(grad(.))` and nested loops work. Under reverse mode
  a scan (and so a fori_loop with static bounds) saves residuals in its forward pass
  and its VJP is one reverse loop over them, as in jax (see "scan: reverse mode with
  saved residuals" below; partial_eval.py splits the traced step).

Bodies may close over values that are being differentiated
(`lambda c, x: (np.tanh(W @ c + x), None)` inside `grad` of a function of W). autograd
cannot see a value reach a primitive through a Python closure, so before such a call the
body's closure (cells, defaults, partials, bound objects, containers) is searched for
autograd boxes ("closure conversion"): they become explicit operands of the primitive,
and the body is rebuilt with them replaced wherever it runs (`_Closure`). A box the search
cannot reach (a global, an attribute behind __slots__) is reported with a clear error
instead of losing its gradient.

Types follow jax: a body returns its carry with the same structure, shapes and dtypes
(otherwise a TypeError names the leaf), and branches agree. Python scalars in an initial
carry become float64/int64/... arrays in the Python path and the traced path alike;
weakly typed results of a body (a Python scalar, `i * 0.5`) take the carry's dtype. The
index of a fori_loop with Python-int bounds is weakly typed, as the Python int it is
outside jit_ps.

Layout: shared helpers (types, closure conversion, body tracing); then one section per
primitive: user function, Python path, traced path, translation rule, derivatives.
"""
import copy
import functools
import operator
import types
import warnings
import weakref

import autograd.numpy as anp
import numpy as np
from autograd import builtins as ag_builtins
from autograd.core import VJPNode, make_jvp, make_vjp
from autograd.extend import defjvp, defjvp_argnums, defvjp, defvjp_argnums, primitive
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.tracer import box_types, getval, isbox, trace_primitives_map, trace_stack

from . import hlo, registry, tracing, tree
from .core import Aval, UfuncMethod, Var, dynamic_getitem, dynamic_update, map_vars, setitem
from .errors import ConcretizationError, annotate
from .lowering import lower_subgraph
from .partial_eval import PartialEval, cse
from .tracing import Tracer

__all__ = ["while_loop", "fori_loop", "cond", "switch", "scan"]

_PY_SCALARS = (bool, int, float, complex)
_INT64 = np.dtype(np.int64)


# ============================================================================================
# Shared helpers: operand types
# ============================================================================================
def _dtype(x):
    v = getval(x)
    return v.dtype if hasattr(v, "dtype") else np.result_type(v)


def _is_float(x):
    return _dtype(x).kind in "fc"


def _is_weak(x):
    v = getval(x)
    return type(v) in _PY_SCALARS or (type(v) is Tracer and v.aval.weak_type)


def _aval(x, keep_weak=False):
    """Shape and dtype of an operand leaf; Python scalars take numpy's default dtypes and,
    unless `keep_weak`, become strong (a loop carry started from 0.0 is float64)."""
    v = getval(x)
    if type(v) is Tracer:
        return v.aval if keep_weak else v.aval.strong()
    if not isinstance(v, (np.ndarray, np.generic) + _PY_SCALARS):
        raise TypeError(f"control-flow operands must be arrays, scalars or tuples/lists/dicts of them; "
                        f"got {type(v).__name__}")
    a = np.asarray(v)
    if a.dtype not in hlo.SUPPORTED_DTYPES:
        raise TypeError(f"control-flow operand of dtype {a.dtype} is not supported")
    return Aval(a.shape, a.dtype, weak_type=keep_weak and type(v) in _PY_SCALARS)


def _python_mode(leaves):
    """Run as plain Python: no trace active and nothing traced among the operands."""
    return not tracing.is_tracing() and not any(type(getval(x)) is Tracer for x in leaves)


def _astype(x, dtype):
    """x as `dtype` (differentiably when x is boxed); Python scalars become numpy arrays."""
    v = getval(x)
    weak_py = type(v) in _PY_SCALARS
    if not weak_py and _dtype(v) == dtype:
        return x
    if isbox(x):
        return anp.array(x, dtype=dtype) if weak_py else x.astype(dtype)
    if type(v) is Tracer:
        return v.astype(dtype)
    return np.asarray(v, dtype=dtype)


def _zeros(x, dtype=None):
    return np.zeros(np.shape(getval(x)), dtype or _dtype(x))


def _incoming_dtype(values):
    """The widest float dtype among incoming cotangents or tangents (None if none)."""
    dtypes = [_dtype(v) for v in tree.flatten(list(values))[0]]
    dtypes = [d for d in dtypes if d.kind in "fc"]
    return np.result_type(*dtypes) if dtypes else None


def _like(primal, wide):
    """The dtype of a derivative for `primal`: like plain autograd, a float64 cotangent makes
    a float32 value's gradient float64, while a float32 one leaves a float64 gradient alone."""
    return _dtype(primal) if wide is None else np.result_type(_dtype(primal), wide)


def _canonical(x):
    """A carry's initial leaf as an array: Python scalars get numpy's default dtype."""
    return _astype(x, _dtype(x)) if type(getval(x)) in _PY_SCALARS else x


def _labels(prefix, treedef):
    return [prefix + tree.format_path(p) for p in tree.leaf_paths(treedef)]


def _check_leaf(got, weak, want, what, label):
    """A body output must keep its carry slot's shape and dtype; outputs of weak type
    (Python scalars) may take the slot's dtype if numpy would cast them same_kind."""
    if got.shape != want.shape:
        raise TypeError(f"{what}: {label} has shape {got.shape} but the carry's is {want.shape}. Loop bodies "
                        "must return a carry with the same structure, shapes and dtypes as its input.")
    if got.dtype != want.dtype and not (weak and np.can_cast(got.dtype, want.dtype, "same_kind")):
        raise TypeError(f"{what}: {label} has dtype {got.dtype} but the carry's is {want.dtype}. Loop bodies "
                        f"must keep the carry's dtypes: cast with .astype({want.dtype.name}) or start "
                        "from an initial value of the dtype the body produces.")


def _check_structure(got, want, what):
    if got != want:
        raise TypeError(f"{what} returned a carry of structure {tree.describe(got)}, but its input carry is "
                        f"{tree.describe(want)}; the carry's structure must not change.")


def _conform(outs, avals, what, labels):
    """Python path: check body outputs against the carry and cast weak ones to it."""
    result = []
    for o, want, label in zip(outs, avals, labels):
        v = getval(o)
        weak = type(v) in _PY_SCALARS
        _check_leaf(Aval(np.shape(v), _dtype(v)), weak, want, what, label)
        result.append(_astype(o, want.dtype) if weak or _dtype(v) != want.dtype else o)
    return result


def _check_outputs(infos, avals, what, labels):
    """Traced path: the same check on the traced outputs' (aval, weak) pairs."""
    for (got, weak), want, label in zip(infos, avals, labels):
        _check_leaf(got, weak, want, what, label)


def _scalar_pred(p, what):
    v = getval(p)
    if np.shape(v) != () or _dtype(v).kind != "b":
        raise TypeError(f"{what} must return a boolean scalar, got {_describe(v)}")
    return v


def _describe(v):
    return f"{np.dtype(_dtype(v)).name}{list(np.shape(v))}"


# ============================================================================================
# Closure conversion: boxes a body closes over become operands
# ============================================================================================
class _Opaque:
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
    if isinstance(obj, (_Opaque, type, types.ModuleType, np.ndarray, np.generic, Tracer, str, bytes) + _PY_SCALARS):
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


class _Converted(_Opaque):
    """A body whose closed-over boxes are arguments: `call(ext, *args)` runs the body with
    the boxes at positions `index` of the shared operand list `ext` put in their place."""

    __slots__ = ("closure", "index")

    def __init__(self, closure, index):
        self.closure, self.index = closure, index

    def __call__(self, ext, *args):
        return self.closure.rebuild([ext[k] for k in self.index])(*args)


def _convert(*fns):
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


def _hidden_box_error(what):
    return TypeError(
        f"{what} returned a value that depends on an array being differentiated (an autograd box) which "
        "reaches the body neither through its arguments nor through its closure (a global variable, or an "
        "attribute of an object autograd_xla cannot copy). Pass that value into the body explicitly: as "
        "part of the carry, or as an operand.")


# ============================================================================================
# Shared helpers: tracing bodies, and the graph side of control-flow primitives
# ============================================================================================
def _trace_body(fn, in_avals, names, what, strip_boxes=False):
    """Trace `fn(*tracers) -> list of leaves` into a sub-graph of the current trace.

    Returns (graph, [(aval, weak) per output]); values the body closes over from enclosing
    traces appear in `graph.captured` and must be passed to the primitive as operands.
    """
    count = []

    def flat(*tracers):
        outs = list(fn(*tracers))
        for k, o in enumerate(outs):
            if isbox(o):
                if not strip_boxes:
                    raise _hidden_box_error(what)
                outs[k] = getval(o)
        count.append(len(outs))
        return outs

    try:
        graph, _ = tracing.trace_function(flat, in_avals, names, parent=tracing.current_trace())
    except ConcretizationError as e:
        raise annotate(e, f"(while tracing {what}: its arguments are traced, so Python `if`/`while` on them "
                          "needs cond/switch/while_loop, and a numpy constant indexed by the loop index needs "
                          "np.take(a, i, axis=0) instead of a[i])")
    return graph, [_out_info(v) for v in graph.outvars[:count[0]]]


def _out_info(v):
    if isinstance(v, Var):
        return v.aval.strong(), v.aval.weak_type
    return Aval(np.shape(v), np.result_type(v)), type(v) in _PY_SCALARS


def _consts(graph):
    return [outer for _, outer in graph.captured]


class ControlFlowPrimitive:
    """A graph primitive whose equation carries sub-graphs in its first argument."""

    def __init__(self, name):
        self.primitive_name = self.__name__ = name

    def subgraphs(self, eqn):
        return eqn.args[0].graphs

    def __repr__(self):
        return f"<control-flow primitive {self.primitive_name}>"


class _Params(_Opaque):
    """The static half of a control-flow equation: its sub-graphs and result types."""

    def __init__(self, label, graphs, **fields):
        self.label, self.graphs = label, graphs
        self.__dict__.update(fields)

    def __repr__(self):
        return self.label


def _alias(value, weak=None):
    """A fresh handle on `value`: lower_subgraph marks its inputs' weak types in place."""
    return hlo.Value(value.name, value.shape, value.dtype, value.weak_type if weak is None else weak)


def _cast_all(ctx, values, avals):
    return [ctx.astype(ctx.asvalue(v), a.dtype) for v, a in zip(values, avals)]


def _call_vjp(f, leaves, diff, outs, cts):
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


def _call_jvp(f, leaves, diff, tangents):
    """(f(leaves), its tangents along `tangents` of leaves[diff]); f returns a list."""
    if not diff:
        outs = list(f(list(leaves)))
        return outs, [_zeros(o) for o in outs]

    def restricted(d):
        full = list(leaves)
        for k, j in enumerate(diff):
            full[j] = d[k]
        return ag_builtins.list(list(f(full)))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outs, touts = make_jvp(restricted, [leaves[j] for j in diff])(list(tangents))
    return [outs[k] for k in range(len(outs))], [touts[k] for k in range(len(outs))]


def _pack(leaves):
    """A primitive's result: one leaf bare, several as a tuple. autograd accumulates a tuple's
    cotangent in place into zeros of each leaf's dtype, while a bare array's keeps the dtype
    the backward pass produced (as it would through the plain Python loop)."""
    return leaves[0] if len(leaves) == 1 else tuple(leaves)


def _as_list(out):
    return [out[k] for k in range(len(getval(out)))] if isinstance(getval(out), tuple) else [out]


def _unpack(out, n=None):
    """The leaves of a primitive's result (the first n). Integer leaves are taken unboxed: they
    have no gradient, and autograd could not accumulate a float cotangent into their slot."""
    raw = _as_list(getval(out))
    n = len(raw) if n is None else n
    if not isinstance(getval(out), tuple):
        return [out if _is_float(raw[0]) else raw[0]]
    return [out[k] if _is_float(r) else r for k, r in enumerate(raw[:n])]


def _flatten_items(items):
    """Leaves of each operand (a closed-over dict of parameters is one operand)."""
    leaves, trees, offsets = [], [], []
    for item in items:
        ls, td = tree.flatten(item)
        offsets.append(len(leaves))
        leaves += ls
        trees.append(td)
    return leaves, trees, offsets


def _unflatten_items(trees, offsets, leaves):
    return [tree.unflatten(td, leaves[o:o + tree.num_leaves(td)]) for td, o in zip(trees, offsets)]


def _item_grads(trees, offsets, leaves, grads):
    """Per operand, its gradient rebuilt from `grads` (leaf index -> gradient; zeros if absent)."""
    out = []
    for td, o in zip(trees, offsets):
        span = range(o, o + tree.num_leaves(td))
        out.append(tree.unflatten(td, [grads[j] if j in grads else _zeros(leaves[j]) for j in span]))
    return out


def _select(args, argnums, first, grads):
    """The gradient for each argnum from `grads`, a dict leaf index -> gradient (zeros if absent)."""
    return tuple(grads[a - first] if (a - first) in grads else _zeros(args[a]) for a in argnums)


# ============================================================================================
# Replaying a traced graph on new operands, differentiably
# ============================================================================================
# The derivatives of scan (below) run pieces of a traced graph as loop bodies. A piece is
# replayed equation by equation on the current operands. Without autograd boxes among an
# equation's operands that is `tracing.bind`, which records the same primitive call again.
# With boxes it is the primitive's autograd wrapper, so the replay is differentiable once
# more (grad of grad, forward over reverse): autograd's own wrapper of the raw function, or
# for the few primitives the tracer records without one, a wrapper below (indexing,
# functional forms of in-place updates, and the control-flow primitives, which become
# calls of scan / while_loop / cond again with replayed bodies).
def _eval_graph(graph, args, captured):
    """`graph`'s outputs on `args` (its invars) and `captured` (values for graph.captured)."""
    env = dict(zip(graph.invars, args))
    env.update((inner, value) for (inner, _), value in zip(graph.captured, captured))
    _replay(graph.eqns, env)
    return [_read(env, v) for v in graph.outvars]


def _read(env, v):
    return env[v] if isinstance(v, Var) else v


def _replay(eqns, env):
    """Run `eqns` on the values in `env` (Var -> Tracer, box or constant), adding their results."""
    for eqn in eqns:
        args, kwargs = map_vars((eqn.args, eqn.kwargs), env.__getitem__)
        if any(type(env[v]) in box_types for v in eqn.invars()):
            handler = _box_handler(eqn.prim)
            if handler is None:  # _replayable() rules this out for the graphs we replay
                raise NotImplementedError(f"cannot differentiate a replayed '{eqn.prim!r}'")
            out = handler(args, kwargs)
        else:
            out = tracing.bind(eqn.prim, args, kwargs)
        leaves = tree.flatten(out)[0]
        if len(leaves) != len(eqn.outvars):
            raise RuntimeError(f"replaying {eqn.prim!r} gave {len(leaves)} results for {len(eqn.outvars)}")
        for v, x in zip(eqn.outvars, leaves):
            if v is not None:
                if v.aval.weak_type:
                    _mark_weak(x, args, kwargs)
                env[v] = x


def _mark_weak(x, args, kwargs):
    """The tracer's operator methods mark results of weak operands weak (NEP 50: `i * 0.5` of
    a Python-int loop index stays a Python float), which `bind` alone does not: redo it."""
    v = _unbox(x)
    if type(v) is not Tracer or v.aval.weak_type:
        return
    inputs = set()
    _operand_vars((args, kwargs), inputs)
    if v._var not in inputs:  # a fresh result, not an operand passed through
        v._var.aval = Aval(v.shape, v.dtype, weak_type=True)


def _unbox(x):
    while type(x) in box_types:
        x = x._value
    return x


def _operand_vars(obj, found):
    obj = _unbox(obj)
    t = type(obj)
    if t is Tracer:
        found.add(obj._var)
    elif t is tuple or t is list:
        for x in obj:
            _operand_vars(x, found)
    elif t is dict:
        for x in obj.values():
            _operand_vars(x, found)


def _box_handler(prim):
    """fn(args, kwargs) applying `prim` differentiably, or None if there is none."""
    entry = registry.lookup(prim)
    if entry is not None and entry.replay is not None:
        return entry.replay
    wrapped = trace_primitives_map.get(prim)
    if wrapped is None:
        return None
    return lambda args, kwargs: wrapped(*args, **kwargs)


def _replayable(eqns):
    """Whether every equation that may meet an autograd box (one with traced operands) can be
    replayed differentiably, looking inside control-flow bodies."""
    for eqn in eqns:
        if not eqn.invars():
            continue
        if _box_handler(eqn.prim) is None:
            return False
        for sub in getattr(eqn.prim, "subgraphs", lambda e: ())(eqn):
            if not _replayable(sub.eqns):
                return False
    return True


def _graph_fn(graph, consts, args):
    return _eval_graph(graph, list(args), consts)


def _graph_pred(graph, consts, args):
    return _eval_graph(graph, list(args), consts)[0]


def _graph_step(graph, consts, n_carry, i, carry, x):
    outs = _eval_graph(graph, [i] + list(carry) + list(x), consts)
    return outs[:n_carry], outs[n_carry:]


def _replay_scan(args, kwargs):
    p = args[0]
    nc, nx = p.n_carry, p.n_xs
    carry, xs, consts = list(args[1:1 + nc]), list(args[1 + nc:1 + nc + nx]), list(args[1 + nc + nx:])
    index_dtype = None if p.index_aval.weak_type else p.index_aval.dtype
    body = functools.partial(_graph_step, p.graphs[0], consts, nc)
    c, ys = _scan_flat(body, carry, xs, p.length, p.reverse, index_dtype, [f"carry[{j}]" for j in range(nc)],
                       "scan's f")
    return tuple(c + ys)


def _replay_while(args, kwargs):
    p = args[0]
    nc = p.n_carry
    carry = list(args[1:1 + nc])
    cconsts, bconsts = list(args[1 + nc:1 + nc + p.n_cond]), list(args[1 + nc + p.n_cond:])
    cgraph, bgraph = p.graphs
    cond = functools.partial(_graph_pred, cgraph, cconsts)
    body = functools.partial(_graph_fn, bgraph, bconsts)
    weak = [a.weak_type for a in p.carry_avals]
    return tuple(_while_flat(cond, body, carry, [f"carry[{j}]" for j in range(nc)], weak))


def _replay_case(args, kwargs):
    p, index = args[0], args[1]
    ops, start, branches = list(args[2:2 + p.n_ops]), 2 + p.n_ops, []
    for graph, count in zip(p.graphs, p.n_consts):
        branches.append(functools.partial(_graph_fn, graph, list(args[start:start + count])))
        start += count
    return tuple(_case_flat(index, branches, ops, "cond/switch"))


# Functional forms of the tracer's in-place updates and traced-bound slices, as autograd
# primitives: `x[idx] += v` (np.add.at), `x[idx] = v`, and their DynamicSlice versions.
def _zeros_like(x, like=None):
    return np.zeros(np.shape(getval(x)), _dtype(like if like is not None else x))


def _unbroadcast_to(g, like):
    """g summed down to like's shape (a value that was broadcast into g) and like's dtype."""
    shape = np.shape(getval(like))
    extra = np.ndim(getval(g)) - len(shape)
    if extra > 0:
        g = anp.sum(g, axis=tuple(range(extra)))
    axes = tuple(k for k, n in enumerate(shape) if n == 1 and np.shape(getval(g))[k] != 1)
    if axes:
        g = anp.sum(g, axis=axes, keepdims=True)
    if _dtype(g).kind == "c" and _dtype(like).kind != "c":
        g = anp.real(g)
    return _astype(g, _dtype(like))


@primitive
def _scatter_add(x, idx, v):
    """np.add.at(x, idx, v) as a function: x with v added at idx."""
    return tracing.bind(_ADD_AT, (x, idx, v), {})


@primitive
def _set_items(x, idx, v):
    """x with x[idx] = v, as a function."""
    return tracing.bind(setitem, (x, idx, v), {})


@primitive
def _dyn_getitem(x, idx):
    return tracing.bind(dynamic_getitem, (x, idx), {})


@primitive
def _dyn_update(x, idx, v, accumulate):
    return tracing.bind(dynamic_update, (x, idx, v, accumulate), {})


_ADD_AT = UfuncMethod(np.add, "at")
defvjp(_scatter_add, lambda ans, x, idx, v: lambda g: g,
       lambda ans, x, idx, v: lambda g: _unbroadcast_to(g[idx], v), argnums=(0, 2))
defjvp(_scatter_add, lambda g, ans, x, idx, v: g,
       lambda g, ans, x, idx, v: _scatter_add(_zeros_like(ans, g), idx, g), argnums=(0, 2))
defvjp(_set_items, lambda ans, x, idx, v: lambda g: _set_items(g, idx, 0),
       lambda ans, x, idx, v: lambda g: _unbroadcast_to(g[idx], v), argnums=(0, 2))
defjvp(_set_items, lambda g, ans, x, idx, v: _set_items(g, idx, 0),
       lambda g, ans, x, idx, v: _set_items(_zeros_like(ans, g), idx, g), argnums=(0, 2))
defvjp(_dyn_getitem, lambda ans, x, idx: lambda g: _dyn_update(_zeros_like(x, g), idx, g, True))
defjvp(_dyn_getitem, lambda g, ans, x, idx: _dyn_getitem(g, idx))
defvjp(_dyn_update,
       lambda ans, x, idx, v, accumulate: lambda g: g if accumulate else _dyn_update(g, idx, 0, False),
       lambda ans, x, idx, v, accumulate: lambda g: _unbroadcast_to(_dyn_getitem(g, idx), v), argnums=(0, 2))
defjvp(_dyn_update, lambda g, ans, x, idx, v, accumulate: g if accumulate else _dyn_update(g, idx, 0, False),
       lambda g, ans, x, idx, v, accumulate: _dyn_update(_zeros_like(ans, g), idx, g, accumulate), argnums=(0, 2))


def _wrap(fn):
    return lambda args, kwargs: fn(*args, **kwargs)


for _prim, _fn in {operator.getitem: ArrayBox.__getitem__, _ADD_AT: _scatter_add, setitem: _set_items,
                   dynamic_getitem: _dyn_getitem, dynamic_update: _dyn_update}.items():
    registry.register_replay(_prim, _wrap(_fn))  # and the control-flow primitives, where they are defined


# ============================================================================================
# while_loop
# ============================================================================================
def while_loop(cond_fun, body_fun, init_val):
    """Repeat `val = body_fun(val)` while `cond_fun(val)` is true; returns the final val.

    `val` is an array or a tuple/list/dict of arrays; body_fun must keep its structure,
    shapes and dtypes. Forward-mode differentiable (make_jvp); reverse mode needs a trip
    count known at trace time: use fori_loop with static bounds, or scan.
    """
    leaves, treedef = tree.flatten(init_val)
    labels = _labels("carry", treedef)

    def cond_flat(carry):
        return cond_fun(tree.unflatten(treedef, carry))

    def body_flat(carry):
        out_leaves, out_tree = tree.flatten(body_fun(tree.unflatten(treedef, carry)))
        _check_structure(out_tree, treedef, "while_loop's body_fun")
        return out_leaves

    return tree.unflatten(treedef, _while_flat(cond_flat, body_flat, leaves, labels))


def _while_flat(cond, body, carry, labels, weak=None, reverse_error=None, what="while_loop"):
    """while_loop on a flat list of carry leaves. `weak[k]` keeps leaf k weakly typed (a
    loop index from Python ints); `reverse_error()` is raised by reverse-mode AD."""
    if _python_mode(carry):
        return _while_python(cond, body, carry, labels, what)
    (cond_c, body_c), ext = _convert(cond, body)
    if ext or any(isbox(x) for x in carry):
        spec = _WhileSpec(cond_c, body_c, len(carry), labels, weak, reverse_error, what)
        return _unpack(_while_ad(spec, *carry, *ext))
    return _while_traced(cond, body, carry, labels, weak, what)


def _while_python(cond, body, carry, labels, what):
    carry = [_canonical(c) for c in carry]
    avals = [_aval(c) for c in carry]
    while bool(_scalar_pred(cond(carry), f"{what}'s cond_fun")):
        carry = _conform(body(carry), avals, f"{what}'s body_fun", labels)
    return carry


def _while_traced(cond, body, carry, labels, weak, what):
    avals = [_aval(c) for c in carry]
    if weak:
        avals = [Aval(a.shape, a.dtype, weak_type=True) if w else a for a, w in zip(avals, weak)]
    names = list(labels)
    cgraph, (pred,) = _trace_body(lambda *c: [cond(list(c))], avals, names, f"{what}'s cond_fun", strip_boxes=True)
    if pred[0].shape != () or pred[0].dtype.kind != "b":
        raise TypeError(f"{what}'s cond_fun must return a boolean scalar, got {pred[0]}")
    bgraph, outs = _trace_body(lambda *c: body(list(c)), avals, names, f"{what}'s body_fun")
    _check_outputs(outs, avals, f"{what}'s body_fun", labels)
    params = _Params(f"while(cond: {len(cgraph.eqns)} eqns, body: {len(bgraph.eqns)} eqns)", [cgraph, bgraph],
                     n_carry=len(carry), n_cond=len(cgraph.captured), carry_avals=avals)
    out = tracing.bind(while_p, (params, *carry, *_consts(cgraph), *_consts(bgraph)), {})
    return list(out)


while_p = ControlFlowPrimitive("while_loop")
registry.register_replay(while_p, _replay_while)


def _while_rule(ctx, p, *operands):
    cgraph, bgraph = p.graphs
    nc = p.n_carry
    carry = [ctx.asvalue(x, a.dtype) for x, a in zip(operands[:nc], p.carry_avals)]
    cconsts, bconsts = operands[nc:nc + p.n_cond], operands[nc + p.n_cond:]

    def cond(b, *c):
        return b.astype(b.asvalue(lower_subgraph(b, cgraph, c, cconsts)[0]), np.bool_)

    def body(b, *c):
        return _cast_all(b, lower_subgraph(b, bgraph, c, bconsts), p.carry_avals)

    return tuple(ctx.while_loop(carry, cond, body))


registry.register_translation_rule(while_p, _while_rule)


class _WhileSpec(_Opaque):
    __slots__ = ("cond", "body", "n_carry", "labels", "weak", "reverse_error", "what")

    def __init__(self, cond, body, n_carry, labels, weak, reverse_error, what):
        self.cond, self.body, self.n_carry, self.labels = cond, body, n_carry, labels
        self.weak, self.reverse_error, self.what = weak, reverse_error, what


def _while_raw(spec, *args):
    ext = args[spec.n_carry:]
    return _pack(_while_traced(lambda c: spec.cond(ext, c), lambda c: spec.body(ext, c), list(args[:spec.n_carry]),
                               spec.labels, spec.weak, spec.what))


_while_ad = primitive(_while_raw)
registry.register_trace_rule(_while_raw, _while_raw)


def _while_vjp(argnums, ans, args, kwargs):
    spec = args[0]
    nc = spec.n_carry
    body_ext = set(spec.body.index)
    for a in argnums:
        j = a - 1
        if (j < nc and _is_float(args[a])) or (j >= nc and j - nc in body_ext):
            raise (spec.reverse_error or _while_reverse_error)()
    # only the predicate saw the differentiated values: the result does not vary with them
    return lambda g: tuple(_zeros(args[a]) for a in argnums)


def _while_reverse_error():
    return NotImplementedError(
        "reverse-mode differentiation (grad, make_vjp) of while_loop is not supported: its trip count depends "
        "on traced data, so the loop cannot be run backwards. Use fori_loop with bounds known at trace time "
        "(Python ints, or jit_ps static arguments) or scan, which are reverse-differentiable; forward mode "
        "(make_jvp) works with while_loop.")


def _while_jvp(argnums, gs, ans, args, kwargs):
    spec = args[0]
    nc = spec.n_carry
    carry, ext = list(args[1:nc + 1]), list(args[nc + 1:])
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    dc = [j for j in range(nc) if _is_float(carry[j])]
    wide = _incoming_dtype(gs)
    de, te = _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc, wide)
    t0 = [_astype(given[j], _like(carry[j], wide)) if j in given else _zeros(carry[j], _like(carry[j], wide))
          for j in dc]

    def cond_j(state):
        return spec.cond(ext, state[:nc])

    def body_j(state):
        c, tc = state[:nc], state[nc:]

        def f(full):
            return spec.body(_unflatten_items(ext_trees, offsets, full[nc:]), full[:nc])

        outs, touts = _call_jvp(f, list(c) + ext_leaves, dc + [nc + j for j in de], list(tc) + te)
        return list(outs) + [_astype(touts[j], _like(c[j], wide)) for j in dc]

    labels = spec.labels + [f"tangent of {spec.labels[j]}" for j in dc]
    weak = (spec.weak or [False] * nc) + [False] * len(dc)
    state = _while_flat(cond_j, body_j, carry + t0, labels, weak, spec.reverse_error, spec.what)
    tangents = {j: state[nc + k] for k, j in enumerate(dc)}
    return _pack([tangents[j] if j in tangents else _zeros(carry[j]) for j in range(nc)])


defvjp_argnums(_while_ad, _while_vjp)
defjvp_argnums(_while_ad, _while_jvp)


# ============================================================================================
# scan (and fori_loop with a trip count known at trace time)
# ============================================================================================
def scan(f, init, xs=None, length=None, reverse=False):
    """Scan `f(carry, x) -> (carry, y)` over the leading axis of xs.

    Returns (final carry, ys stacked along a new leading axis). `init`, `xs` and the
    outputs are arrays or tuples/lists/dicts of arrays; xs may be None with `length`
    given. With reverse=True the scan runs from the last element to the first, and
    ys[i] is still the output for xs[i]. Reverse- and forward-mode differentiable.
    """
    init_leaves, carry_tree = tree.flatten(init)
    xs_leaves, xs_tree = tree.flatten(xs)
    length = _scan_length(xs_leaves, length)
    y_tree = []

    def body(i, carry, x):
        out = f(tree.unflatten(carry_tree, carry), tree.unflatten(xs_tree, x))
        if not isinstance(getval(out), (tuple, list)) or len(out) != 2:
            raise TypeError(f"scan's f must return a pair (carry, y); got {type(getval(out)).__name__}")
        c_leaves, c_tree = tree.flatten(out[0])
        _check_structure(c_tree, carry_tree, "scan's f")
        y_leaves, yt = tree.flatten(out[1])
        if y_tree and y_tree[0] != yt:
            raise TypeError(f"scan's f returned y of structure {tree.describe(yt)} after "
                            f"{tree.describe(y_tree[0])}; it must be the same at every step")
        y_tree[:] = [yt]
        return c_leaves, y_leaves

    carry, ys = _scan_flat(body, init_leaves, xs_leaves, length, bool(reverse), None,
                           _labels("carry", carry_tree), "scan's f")
    return tree.unflatten(carry_tree, carry), tree.unflatten(y_tree[0], ys)


def _scan_length(xs_leaves, length):
    sizes = []
    for x in xs_leaves:
        shape = np.shape(getval(x))
        if not shape:
            raise ValueError("scan: every leaf of xs needs a leading axis to scan over; got a 0-d value")
        sizes.append(shape[0])
    if length is not None:
        try:
            length = int(length.__index__())
        except (AttributeError, TypeError):
            raise TypeError(f"scan: length must be a Python int known at trace time, got {length!r}") from None
        sizes.append(length)
    if not sizes:
        raise ValueError("scan: xs is empty or None, so `length` must be given")
    if len(set(sizes)) != 1:
        raise ValueError(f"scan: xs leaves and length disagree on the number of steps: {sorted(set(sizes))}")
    if sizes[0] < 0:
        raise ValueError(f"scan: length must be non-negative, got {sizes[0]}")
    return sizes[0]


def _scan_flat(body, carry, xs, length, reverse, index_dtype, labels, what, residuals=True):
    """scan on flat leaves: body(i, carry_leaves, x_leaves) -> (carry_leaves, y_leaves).

    `i` is the position in xs: a Python int (weakly typed when traced) if index_dtype
    is None, else a scalar of that dtype. Under reverse-mode autograd the forward pass
    saves residuals for the backward pass (see "scan: reverse mode with saved residuals");
    `residuals=False` asks for the recomputing scheme instead.
    """
    if _python_mode(carry + xs):
        return _scan_python(body, carry, xs, length, reverse, index_dtype, labels, what)
    (body_c,), ext = _convert(body)
    if ext or any(isbox(x) for x in carry + xs):
        levels, hidden = _reverse_levels(carry + xs + ext) if residuals else (0, False)
        dx = [j for j, x in enumerate(xs) if isbox(x) and _is_float(x)]
        spec = _ScanSpec(body_c, len(carry), len(xs), length, reverse, index_dtype, labels, what,
                         min(levels, _MAX_STAGES), hidden, dx)
        out = _unpack(_scan_ad(spec, *carry, *xs, *ext), spec.n_visible)
        return out[:len(carry)], out[len(carry):]
    return _scan_traced(body, carry, xs, length, reverse, index_dtype, labels, what)


def _reverse_levels(values):
    """(How many reverse-mode differentiations (grad, make_vjp) box any of `values`, whether
    the only one is also the outermost differentiation boxing them)."""
    reverse, outermost = set(), None
    for v in values:
        while type(v) in box_types:
            if type(v._node) is VJPNode:
                reverse.add(v._trace)
            outermost = v._trace if outermost is None else min(outermost, v._trace)
            v = v._value
    return len(reverse), reverse == {outermost}


def _scan_python(body, carry, xs, length, reverse, index_dtype, labels, what):
    carry = [_canonical(c) for c in carry]
    avals = [_aval(c) for c in carry]
    steps = [None] * length
    y_avals = None
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        i = k if index_dtype is None else index_dtype.type(k)
        new_carry, y = body(i, carry, [x[k] for x in xs])
        carry = _conform(new_carry, avals, what, labels)
        if y_avals is None:
            y_avals = [_aval(v) for v in y]
        steps[k] = _conform(y, y_avals, what, [f"y[{j}]" for j in range(len(y))])
    if length == 0:  # no step ran: learn the shapes of y by tracing the body abstractly
        in_avals = [Aval((), index_dtype or _INT64, index_dtype is None)] + avals
        in_avals += [Aval(_aval(x).shape[1:], _aval(x).dtype) for x in xs]
        nc = len(carry)
        _, infos = _trace_body(lambda i, *a: _concat(body(i, list(a[:nc]), list(a[nc:]))), in_avals,
                               None, what, strip_boxes=True)
        return carry, [np.zeros((0,) + a.shape, a.dtype) for a, _ in infos[nc:]]
    return carry, [anp.stack([steps[k][j] for k in range(length)]) for j in range(len(y_avals))]


def _concat(pair):
    return list(pair[0]) + list(pair[1])


def _scan_traced(body, carry, xs, length, reverse, index_dtype, labels, what):
    carry_avals = [_aval(c) for c in carry]
    xs_avals = [_aval(x) for x in xs]
    x_avals = [Aval(a.shape[1:], a.dtype) for a in xs_avals]
    index_aval = Aval((), index_dtype or _INT64, weak_type=index_dtype is None)
    nc = len(carry)
    names = ["i"] + labels + [f"x[{j}]" for j in range(len(xs))]
    graph, outs = _trace_body(lambda i, *a: _concat(body(i, list(a[:nc]), list(a[nc:]))),
                              [index_aval] + carry_avals + x_avals, names, what)
    _check_outputs(outs[:nc], carry_avals, what, labels)
    y_avals = [a for a, _ in outs[nc:]]
    params = _Params(f"scan(length={length}{', reverse' if reverse else ''}, body: {len(graph.eqns)} eqns)",
                     [graph], n_carry=nc, n_xs=len(xs), length=length, reverse=reverse, index_aval=index_aval,
                     carry_avals=carry_avals, xs_avals=xs_avals, y_avals=y_avals)
    out = tracing.bind(scan_p, (params, *carry, *xs, *_consts(graph)), {})
    return list(out[:nc]), list(out[nc:])


scan_p = ControlFlowPrimitive("scan")


def _scan_rule(ctx, p, *operands):
    """A while loop over (step, carry, ys buffers); xs and captured values are read from
    the enclosing scope. ys[idx] is written where xs[idx] was read. A y the body returns
    as a constant (`return c, 0.0`) is filled outside the loop."""
    (graph,) = p.graphs
    nc, nx, n = p.n_carry, p.n_xs, p.length
    carry = [ctx.asvalue(v, a.dtype) for v, a in zip(operands[:nc], p.carry_avals)]
    xs = [ctx.asvalue(v, a.dtype) for v, a in zip(operands[nc:nc + nx], p.xs_avals)]
    consts = operands[nc + nx:]
    if n == 0:
        return tuple(carry + [ctx.full((0,) + a.shape, 0, a.dtype) for a in p.y_avals])
    fixed = {k: v for k, v in enumerate(graph.outvars[nc:]) if not isinstance(v, Var)}
    looped = [k for k in range(len(p.y_avals)) if k not in fixed]
    ys = [ctx.full((n,) + p.y_avals[k].shape, 0, p.y_avals[k].dtype) for k in looped]

    def cond(b, i, *state):
        return b.compare(i, b.scalar(n, _INT64), "LT")

    def body(b, i, *state):
        zero = b.scalar(0, _INT64)
        idx = b.binary("subtract", b.scalar(n - 1, _INT64), i) if p.reverse else i
        x = [b.reshape(b.dynamic_slice(v, [idx] + [zero] * (v.ndim - 1), (1,) + v.shape[1:]), v.shape[1:])
             for v in xs]
        index = b.convert(idx, p.index_aval.dtype)
        outs = _cast_all(b, lower_subgraph(b, graph, [_alias(index)] + list(state[:nc]) + x, consts),
                         p.carry_avals + p.y_avals)
        bufs = [b.dynamic_update_slice(buf, b.reshape(outs[nc + k], (1,) + outs[nc + k].shape),
                                       [idx] + [zero] * outs[nc + k].ndim)
                for buf, k in zip(state[nc:], looped)]
        return [b.binary("add", i, b.scalar(1, _INT64))] + outs[:nc] + bufs

    out = ctx.while_loop([ctx.scalar(0, _INT64)] + carry + ys, cond, body)[1:]
    results, filled = list(out[:nc]), dict(zip(looped, out[nc:]))
    for k, a in enumerate(p.y_avals):
        if k in fixed:
            value = ctx.astype(ctx.asvalue(fixed[k]), a.dtype)
            filled[k] = ctx.broadcast_in_dim(value, (n,) + a.shape, list(range(1, 1 + value.ndim)))
        results.append(filled[k])
    return tuple(results)


registry.register_translation_rule(scan_p, _scan_rule)


class _ScanSpec(_Opaque):
    """The static half of one differentiated scan call. `levels` > 0 asks the primitive to
    save residuals for that many nested reverse-mode differentiations; `plan` is then set
    by the forward pass (None when it kept the recomputing scheme), and `n_visible` is the
    number of outputs (carry and ys) the caller sees.

    The residuals are extra outputs of the primitive, so that enclosing differentiations
    see how they depend on the operands, except with `hidden`: when the differentiation
    that reads them boxes the operands and nothing outside it does, nothing will
    differentiate them, and the forward pass leaves them in `saved` instead. The result
    is then exactly the caller's outputs, one leaf bare: autograd accumulates a tuple's
    cotangent into zeros of each leaf's dtype, and a bare leaf's keeps the dtype it
    arrives with (a float64 cotangent into a float32 loop gives a float64 gradient, as
    through the Python loop). With residual outputs that holds for tuples only: under
    nested grads a call with a single float32 (float16, complex64) result keeps the
    recomputing scheme, whose result stays bare; under forward mode over grad such a
    call's tangent and gradient keep its dtype."""

    __slots__ = ("body", "n_carry", "n_xs", "length", "reverse", "index_dtype", "labels", "what", "levels",
                 "hidden", "dx", "plan", "n_visible", "saved")

    def __init__(self, body, n_carry, n_xs, length, reverse, index_dtype, labels, what, levels=0, hidden=False,
                 dx=()):
        self.body, self.n_carry, self.n_xs, self.length = body, n_carry, n_xs, length
        self.reverse, self.index_dtype, self.labels, self.what = reverse, index_dtype, labels, what
        self.levels, self.hidden, self.dx = levels, hidden, list(dx)
        self.plan = self.n_visible = None
        self.saved = []

    def split(self, leaves):
        nc, nx = self.n_carry, self.n_xs
        return list(leaves[:nc]), list(leaves[nc:nc + nx]), list(leaves[nc + nx:])

    def scan(self, body, carry, xs, reverse, labels, what, residuals=True):
        return _scan_flat(body, carry, xs, self.length, reverse, self.index_dtype, labels, what, residuals)


def _scan_raw(spec, *args):
    carry, xs, ext = spec.split(args)
    if spec.levels:
        plan = _plan_scan(spec, carry, xs, ext)
        if plan is not None and spec.levels > 1 and spec.n_carry + plan.n_y == 1:
            out = plan.stages[0].fwd_outs[0]
            dtype = out.aval.dtype if isinstance(out, Var) else np.result_type(out)
            if dtype.kind in "fc" and dtype not in (np.dtype(np.float64), np.dtype(np.complex128)):
                plan = None  # see _ScanSpec: keep a bare result, whose cotangent may be wider
        if plan is not None:
            spec.plan = plan
            spec.n_visible = spec.n_carry + plan.n_y
            outs = _plan_forward(plan, spec, carry, xs, _flatten_items(ext)[0])
            if spec.hidden:
                spec.saved = outs[spec.n_visible:]
                outs = outs[:spec.n_visible]
            return _pack(outs)
    c, ys = _scan_traced(lambda i, c, x: spec.body(ext, i, c, x), carry, xs, spec.length, spec.reverse,
                         spec.index_dtype, spec.labels, spec.what)
    spec.n_visible = len(c) + len(ys)
    return _pack(c + ys)


_scan_ad = primitive(_scan_raw)
registry.register_trace_rule(_scan_raw, _scan_raw)
registry.register_replay(scan_p, _replay_scan)


def _scan_vjp(argnums, ans, args, kwargs):
    """Reverse scan of the body's VJP. With a plan, the backward pass reads the residuals the
    forward pass saved (_plan_vjp). Without one (the recomputing scheme) the forward carries
    are recomputed by a scan that stacks them, and each backward step re-runs the body under
    make_vjp."""
    spec = args[0]
    if spec.plan is not None:
        return _plan_vjp(argnums, ans, args)
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = _as_list(ans)
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    dc = [j for j in range(nc) if _is_float(carry0[j])]
    dx = [j for j in range(nx) if _is_float(xs[j])]
    de = [j for j in range(len(ext_leaves)) if _is_float(ext_leaves[j])]
    dy = [j for j in range(len(ans) - nc) if _is_float(ans[nc + j])]

    def vjp(g):
        g = _as_list(g)
        wide = _incoming_dtype([g[j] for j in dc] + [g[nc + j] for j in dy])

        def forward(i, c, x):
            return spec.body(ext, i, c, x)[0], list(c)

        _, carries = spec.scan(forward, carry0, xs, spec.reverse, spec.labels, spec.what)

        def backward(i, state, inp):
            ct_c, acc = state[:len(dc)], state[len(dc):]
            c, x, ct_y = inp[:nc], inp[nc:nc + nx], inp[nc + nx:]

            def f(full):
                e = _unflatten_items(ext_trees, offsets, full[nc + nx:])
                new_c, y = spec.body(e, i, full[:nc], full[nc:nc + nx])
                return list(new_c) + list(y)

            grads = _call_vjp(f, list(c) + list(x) + ext_leaves, dc + [nc + j for j in dx] + [nc + nx + j for j in de],
                              dc + [nc + j for j in dy], list(ct_c) + list(ct_y))
            gc = [_astype(grads[k], _like(c[j], wide)) for k, j in enumerate(dc)]
            gx = [_astype(grads[len(dc) + k], _like(x[j], wide)) for k, j in enumerate(dx)]
            ge = [a + _astype(grads[len(dc) + len(dx) + k], _like(ext_leaves[j], wide)) for k, (a, j) in
                  enumerate(zip(acc, de))]
            return gc + ge, gx

        init = [_astype(g[j], _like(carry0[j], wide)) for j in dc]
        init += [_zeros(ext_leaves[j], _like(ext_leaves[j], wide)) for j in de]
        ct_ys = [_astype(g[nc + j], _like(ans[nc + j], wide)) for j in dy]
        labels = [f"cotangent of {spec.labels[j]}" for j in dc] + [f"cotangent of closed-over value {j}" for j in de]
        state, ct_xs = spec.scan(backward, init, list(carries) + xs + ct_ys, not spec.reverse, labels,
                                 f"{spec.what} (backward pass)")
        grads = {j: state[k] for k, j in enumerate(dc)}
        grads.update({nc + j: ct_xs[k] for k, j in enumerate(dx)})
        ext_grads = _item_grads(ext_trees, offsets, ext_leaves, {j: state[len(dc) + k] for k, j in enumerate(de)})
        grads.update({nc + nx + m: gr for m, gr in enumerate(ext_grads)})
        return _select(args, argnums, 1, grads)

    return vjp


def _scan_jvp(argnums, gs, ans, args, kwargs):
    """A scan over (primal, tangent) pairs: each step runs the body under make_jvp."""
    spec = args[0]
    if spec.plan is not None:
        return _plan_jvp(argnums, gs, ans, args)
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = _as_list(ans)
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    dc = [j for j in range(nc) if _is_float(carry0[j])]
    dx = [j for j in range(nx) if nc + j in given and _is_float(xs[j])]
    wide = _incoming_dtype(gs)
    de, te = _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc + nx, wide)

    def step(i, c, x, e_leaves):
        return spec.body(_unflatten_items(ext_trees, offsets, e_leaves), i, c, x)
    tangents = _tangent_scan(spec, step, carry0, xs, given, dc, dx, ext_leaves, de, te, wide)
    return _pack([tangents[j] if j in tangents else _zeros(ans[j]) for j in range(len(ans))])


def _tangent_scan(spec, step, carry0, xs, given, dc, dx, extra, d_extra, t_extra, wide):
    """Both scan JVPs' loop: one scan over (primal, tangent) pairs whose step runs
    `step(i, carry, x, extra)` -> (new carry, ys) under make_jvp, differentiated in the carry
    leaves dc, the xs leaves dx and the `extra` operands d_extra (tangents t_extra). Returns
    {output index: tangent} for the carry and the float ys."""
    nc, nx = spec.n_carry, spec.n_xs
    tc0 = [_astype(given[j], _like(carry0[j], wide)) if j in given else _zeros(carry0[j], _like(carry0[j], wide))
           for j in dc]
    tx = [_astype(given[nc + j], _like(xs[j], wide)) for j in dx]
    dy = []  # the float ys, known once the step has been traced

    def body(i, state, inp):
        c, tc = state[:nc], state[nc:]
        x, txi = inp[:nx], inp[nx:]

        def f(full):
            new_c, y = step(i, full[:nc], full[nc:nc + nx], full[nc + nx:])
            return list(new_c) + list(y)

        diff = dc + [nc + j for j in dx] + [nc + nx + j for j in d_extra]
        outs, touts = _call_jvp(f, list(c) + list(x) + list(extra), diff, list(tc) + list(txi) + list(t_extra))
        new_c, y = outs[:nc], outs[nc:]
        dy[:] = [j for j in range(len(y)) if _is_float(y[j])]
        t_c = [_astype(touts[j], _like(c[j], wide)) for j in dc]
        t_y = [_astype(touts[nc + j], _like(y[j], wide)) for j in dy]
        return list(new_c) + t_c, list(y) + t_y

    labels = spec.labels + [f"tangent of {spec.labels[j]}" for j in dc]
    state, ys = spec.scan(body, list(carry0) + tc0, list(xs) + tx, spec.reverse, labels, spec.what)
    n_ys = len(ys) - len(dy)
    tangents = {j: state[nc + k] for k, j in enumerate(dc)}
    tangents.update({nc + j: ys[n_ys + k] for k, j in enumerate(dy)})
    return tangents


def _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, first, wide):
    """Float leaves of the closed-over operands that have a tangent, and those tangents."""
    de, te = [], []
    for m in range(len(ext)):
        if first + m not in given:
            continue
        t_leaves, _ = tree.flatten(given[first + m])
        for k, t in enumerate(t_leaves):
            j = offsets[m] + k
            if _is_float(ext_leaves[j]):
                de.append(j)
                te.append(_astype(t, _like(ext_leaves[j], wide)))
    return de, te


defvjp_argnums(_scan_ad, _scan_vjp)
defjvp_argnums(_scan_ad, _scan_jvp)


# ----- scan: reverse mode with saved residuals -----------------------------------------------
# Under reverse-mode autograd (jit_ps(grad(f)), grad(jit_ps(f)), hessians) a scan is one
# primitive whose forward pass also saves what its backward pass needs, as jax does:
#
# 1. The body and its VJP are traced together into one "joint" graph of
#    (i, carry, x, closed-over values p, cotangents of the new carry and of y) ->
#    (new carry, y, gradients for carry, x and p)  (_trace_stage).
# 2. Partial evaluation (partial_eval.py) gives each equation a time: constants; invariant
#    (only p and captured values: computed once, before the loop, "hoisted"); indexed (also
#    the loop index: recomputed wherever needed); varying (carry or x); unknown (needs
#    cotangents). The known step runs the varying equations; the unknown step, the rest of
#    the VJP. Residuals are the varying values the unknown step reads (carries included).
# 3. The forward pass is one scan of the known step, emitting the new carry, y and the
#    residuals stacked along the scan axis. It *is* the primitive's computation: the
#    residuals (and hoisted values) are extra outputs that `_scan_flat` hides from its
#    caller, so the value is computed once.
# 4. The VJP is one reverse scan of the unknown step over (residuals, cotangents).
#
# Both steps run as loop bodies by replaying their equations (_replay), differentiably, so
# derivatives of these scans are scans again. A second reverse-mode differentiation (a
# Hessian) also differentiates the residual outputs; for it the forward pass is planned two
# stages deep when two grads box its operands: stage 2 is the joint of stage 1's known step
# (outputs: carry, y and stage-1 residuals), and its residuals let the outer VJP run one
# reverse scan too. Cotangents on residuals deeper than the plan (third order), and incoming
# cotangents of another dtype than the outputs' (float64 into a float32 scan, whose joint
# graph was traced for float32), fall back to differentiating the forward pass as a
# recomputing scan (_plan_math). So does the whole call, before anything is saved, when a
# joint graph has an equation that cannot be replayed under autograd (no autograd wrapper
# for its primitive) or tracing it fails for any reason: the recomputing scheme then traces
# the body itself and reports errors as before.
_CONST, _INVARIANT, _INDEXED, _VARYING, _UNKNOWN = range(5)
_MAX_STAGES = 2


class _NoPlan(Exception):
    pass


class _Stage(_Opaque):
    """One joint graph split into hoisted / known-step / unknown-step equations.

    Its inputs are (i, carry[n_c], x[n_x], p[n_p], cotangents): p are the stage's invariant
    operands (the closed-over leaves; for stage 2 also stage 1's hoisted values). Its
    outputs are the new carry, `n_out` per-step outputs (y; for stage 2 also stage 1's
    residuals), then the gradients for carry[dc], x[dx] and p[dp] in the dtypes
    `_like(operand, wide)`. The cotangent inputs are for carry[dc] and outs[dout].
    """

    def __init__(self, graph, n_c, n_x, n_p, dc, dx, dp, dout, n_out, wide):
        self.graph, self.n_c, self.n_p, self.n_out = graph, n_c, n_p, n_out
        self.dc, self.dx, self.dp, self.dout, self.wide = dc, dx, dp, dout, wide
        inv = graph.invars
        self.i_var = inv[0]
        self.c_vars = inv[1:1 + n_c]
        self.x_vars = inv[1 + n_c:1 + n_c + n_x]
        self.p_vars = inv[1 + n_c + n_x:1 + n_c + n_x + n_p]
        self.ct_vars = inv[1 + n_c + n_x + n_p:]
        self.captured = list(graph.captured)
        self.fwd_outs = graph.outvars[:n_c + n_out]
        self.grad_outs = graph.outvars[n_c + n_out:]
        times = [_INDEXED] + [_VARYING] * (n_c + n_x) + [_INVARIANT] * n_p + [_UNKNOWN] * len(self.ct_vars)
        pe = PartialEval(graph, times, captured_time=_INVARIANT)
        given = set(self.p_vars) | {inner for inner, _ in self.captured} | {self.i_var}
        x_pos = {v: j for j, v in enumerate(self.x_vars)}

        self.unknown_eqns, needs = pe.slice(self.grad_outs, (_CONST, _INDEXED, _UNKNOWN))
        self.x_used, self.res_vars, hoisted = [], [], []
        for v in needs:
            if v in given or v in self.ct_vars:
                continue
            if v in x_pos:
                self.x_used.append(x_pos[v])  # read from xs itself, not saved again
            elif pe.time[v] == _VARYING:
                self.res_vars.append(v)
            elif pe.time[v] == _INVARIANT:
                hoisted.append(v)
            else:
                raise _NoPlan(f"unexpected input of the backward step: {v}")
        self.known_eqns, needs = pe.slice(self.fwd_outs + self.res_vars, (_CONST, _INDEXED, _VARYING))
        for v in needs:
            if v in given or v in x_pos or v in self.c_vars:
                continue
            if pe.time[v] != _INVARIANT:
                raise _NoPlan(f"unexpected input of the forward step: {v}")
            hoisted.append(v)
        self.h_vars = sorted(set(hoisted), key=lambda v: v.count)
        self.hoist_eqns, needs = pe.slice(self.h_vars, (_CONST, _INVARIANT))
        if any(v not in given for v in needs):
            raise _NoPlan("unexpected input of the hoisted equations")
        if any(v.aval.weak_type for v in self.res_vars):
            raise _NoPlan("weakly typed residual")  # stacking would make it strong

    def _env(self, P, h):
        env = {inner: outer for inner, outer in self.captured}
        env.update(zip(self.p_vars, P))
        env.update(zip(self.h_vars, h))
        return env

    def hoist(self, P):
        """The hoisted values, from the stage's invariant operands P."""
        env = self._env(P, ())
        _replay(self.hoist_eqns, env)
        return [_read(env, v) for v in self.h_vars]

    def known(self, P, h, i, c, x):
        """One forward step: (new carry, outs, residuals)."""
        env = self._env(P, h)
        env[self.i_var] = i
        env.update(zip(self.c_vars, c))
        env.update(zip(self.x_vars, x))
        _replay(self.known_eqns, env)
        fwd = [_read(env, v) for v in self.fwd_outs]
        return fwd[:self.n_c], fwd[self.n_c:], [env[v] for v in self.res_vars]

    def unknown(self, P, h, i, x_used, res, cts):
        """One backward step: the gradients for carry[dc], x[dx] and P[dp]."""
        env = self._env(P, h)
        env[self.i_var] = i
        env.update(zip([self.x_vars[j] for j in self.x_used], x_used))
        env.update(zip(self.res_vars, res))
        env.update(zip(self.ct_vars, cts))
        _replay(self.unknown_eqns, env)
        return [_read(env, v) for v in self.grad_outs]


def _own(value, level, what):
    """A forward output of the joint function, unboxed from its own make_vjp."""
    if type(value) in box_types and value._trace == level:
        value = value._value
    if type(value) in box_types:
        raise _hidden_box_error(what)
    return value


def _trace_stage(step, index_aval, c_avals, x_avals, p_avals, dx, dp, labels, what):
    """Trace step(i, c, x, p) -> (new carry, outs) jointly with its VJP into a _Stage."""
    nc, nx, npar = len(c_avals), len(x_avals), len(p_avals)
    dc = [j for j, a in enumerate(c_avals) if a.dtype.kind in "fc"]
    diff = dc + [nc + j for j in dx] + [nc + nx + j for j in dp]
    if not diff:
        raise _NoPlan("nothing to differentiate")
    info = {}

    def joint(i, *leaves):
        leaves = list(leaves)

        def restricted(d):
            full = list(leaves)
            for k, j in enumerate(diff):
                full[j] = d[k]
            new_c, outs = step(i, full[:nc], full[nc:nc + nx], full[nc + nx:])
            new_c, outs = list(new_c), list(outs)
            for o, want, label in zip(new_c, c_avals, labels):
                v = getval(o)
                _check_leaf(Aval(np.shape(v), _dtype(v)), _is_weak(o), want, what, label)
            new_c = [_astype(o, a.dtype) for o, a in zip(new_c, c_avals)]
            dout = [j for j, o in enumerate(outs) if _is_float(o)]
            info.update(level=d._trace, fwd=new_c + outs, dout=dout)
            return ag_builtins.list([new_c[j] for j in dc] + [outs[j] for j in dout])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Output seems independent of input": zeros are right
            vjp, _ = make_vjp(restricted, [leaves[j] for j in diff])
            fwd = [_own(o, info["level"], what) for o in info["fwd"]]
            float_outs = [fwd[j] for j in dc] + [fwd[nc + j] for j in info["dout"]]
            if not float_outs:
                raise _NoPlan("no float outputs")
            wide = info["wide"] = np.result_type(*[_dtype(o) for o in float_outs])
            trace = tracing.current_trace()
            cts = [trace.new_arg(Aval(np.shape(getval(o)), _like(o, wide)), f"cotangent[{k}]")
                   for k, o in enumerate(float_outs)]
            grads = vjp(list(cts))
        grads = [_astype(grads[k], _like(leaves[j], wide)) for k, j in enumerate(diff)]
        return fwd + grads

    names = ["i"] + list(labels) + [f"x[{j}]" for j in range(nx)] + [f"p[{j}]" for j in range(npar)]
    graph, _ = tracing.trace_function(joint, [index_aval] + c_avals + x_avals + p_avals, names,
                                      parent=tracing.current_trace())
    graph = cse(graph)
    if not _replayable(graph.eqns):
        raise _NoPlan("an equation cannot be replayed under autograd")
    n_out = len(graph.outvars) - nc - len(diff)
    return _Stage(graph, nc, nx, npar, dc, dx, dp, info["dout"], n_out, info["wide"])


class _ScanPlan(_Opaque):
    """The stages of a scan differentiated with saved residuals, and where the primitive's
    outputs are: carry (n_c), y (n_y), each stage's stacked residuals, each stage's hoisted
    values. A residual that is already one of its stage's per-step outputs (stage 2 often
    needs a value stage 1 saves) is not saved twice: `res_pos[k]` gives the output
    position of each residual of stage k, `out_pos[k]` that of each per-step output of
    stage k, and `own[k]` the positions stage k adds."""

    def __init__(self, stages, n_c, n_y):
        self.stages, self.n_y = stages, n_y
        start = n_c + n_y
        outs = list(range(n_c, start))
        self.out_pos, self.res_pos, self.own = [], [], []
        for st in stages:
            per_step = st.fwd_outs[n_c:]
            rp, own = [], []
            for v in st.res_vars:
                hit = next((j for j, o in enumerate(per_step) if o is v), None)
                if hit is None:
                    rp.append(start)
                    own.append(start)
                    start += 1
                else:
                    rp.append(outs[hit])
            self.out_pos.append(outs)
            self.res_pos.append(rp)
            self.own.append(own)
            outs = outs + rp
        self.n_steps = start - n_c  # per-step outputs (stacked): y and owned residuals
        # which of the last stage's per-step values (outs + residuals) gives each of them
        self.step_select = [outs.index(q) for q in range(n_c, start)]
        self.hoist_pos = []
        for st, own in zip(stages, self.own):
            self.hoist_pos.append(list(range(start, start + len(st.h_vars))))
            own += self.hoist_pos[-1]
            start += len(st.h_vars)
        self.n_out = start

    def depth(self, g):
        """How many stages' residual outputs have a cotangent that is not a symbolic zero."""
        for k in range(len(self.stages), 0, -1):
            if any(_is_float(g[q]) and not _is_zero(g[q]) for q in self.own[k - 1]):
                return k
        return 0


def _plan_scan(spec, carry, xs, ext):
    """The _ScanPlan for this call, or None to keep the recomputing scheme."""
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    try:
        c_avals = [_aval(c) for c in carry]
        x_avals = [Aval(_aval(x).shape[1:], _aval(x).dtype) for x in xs]
        p_avals = [_aval(e, keep_weak=True) for e in ext_leaves]
        index_aval = Aval((), spec.index_dtype or _INT64, weak_type=spec.index_dtype is None)
        dp = [j for j, a in enumerate(p_avals) if a.dtype.kind in "fc"]

        def step(i, c, x, p):
            return spec.body(_unflatten_items(ext_trees, offsets, p), i, c, x)

        stages = [_trace_stage(step, index_aval, c_avals, x_avals, p_avals, spec.dx, dp, spec.labels, spec.what)]
    except Exception:  # noqa: BLE001 -- the recomputing scheme re-traces and reports it
        return None
    n_y = stages[0].n_out
    while len(stages) < spec.levels:
        prev, n_p = stages[-1], len(p_avals)
        p_next = p_avals + [v.aval for v in prev.h_vars]
        dp_next = dp + [n_p + k for k, v in enumerate(prev.h_vars) if v.aval.dtype.kind in "fc"]
        try:
            stages.append(_trace_stage(functools.partial(_stage_step, prev, n_p), index_aval, c_avals, x_avals,
                                       p_next, spec.dx, dp_next, spec.labels, spec.what))
        except Exception:  # noqa: BLE001 -- a shallower plan is still right
            break
        p_avals, dp = p_next, dp_next
    return _ScanPlan(stages, len(carry), n_y)


def _stage_step(stage, n_p, i, c, x, P):
    """A stage's known step as a step function of the next stage: outs + residuals."""
    new_c, outs, res = stage.known(P[:n_p], P[n_p:], i, c, x)
    return new_c, outs + res


def _known_body(stage, select, P, h, i, c, x):
    """The forward step of the primitive: the new carry, and y and the residuals to stack."""
    new_c, outs, res = stage.known(P, h, i, c, x)
    values = outs + res
    return new_c, [values[k] for k in select]


def _hoists(plan, p, depth):
    """(P, [h_1, ..., h_depth]): the hoisted values of the first `depth` stages, and the
    invariant operands of stage depth + 1 (p, then those hoisted values)."""
    P, hs = list(p), []
    for st in plan.stages[:depth]:
        h = st.hoist(P)
        hs.append(h)
        P = P + h
    return P, hs


def _plan_forward(plan, spec, carry, xs, p):
    """The primitive's computation: one scan of the last stage's known step."""
    d = len(plan.stages)
    P, hs = _hoists(plan, p, d)
    last = plan.stages[-1]
    body = functools.partial(_known_body, last, plan.step_select, P[:len(P) - len(hs[-1])], hs[-1])
    c, ys = _scan_traced(body, carry, xs, spec.length, spec.reverse, spec.index_dtype, spec.labels, spec.what)
    return c + ys + [v for h in hs for v in h]


def _plan_math(plan, spec, carry, xs, p, residuals):
    """The same outputs as _plan_forward, as differentiable code (for JVPs, and for VJPs the
    plan has no residuals for): the scan goes through _scan_flat again."""
    d = len(plan.stages)
    P, hs = _hoists(plan, p, d)
    body = functools.partial(_known_body, plan.stages[-1], plan.step_select, P[:len(P) - len(hs[-1])], hs[-1])
    c, ys = spec.scan(body, list(carry), list(xs), spec.reverse, spec.labels, spec.what, residuals)
    return list(c) + list(ys) + [v for h in hs for v in h]


_PRODUCERS = weakref.WeakKeyDictionary()  # Trace -> [equations seen, {Var: np.full equation}]


def _is_zero(x):
    """Whether x is known to be zero: autograd's zero cotangent of an output nobody used is
    a traced `np.full(shape, 0)` (TracerVSpace.zeros). Under a second differentiation it
    arrives boxed (taken from a boxed tuple of cotangents) but is still that constant, so
    its derivative is zero too."""
    v = _unbox(x)
    if isinstance(v, (np.ndarray, np.generic) + _PY_SCALARS):
        return v is x and not np.any(v)
    if type(v) is not Tracer:
        return False
    x, trace = v, v._trace
    entry = _PRODUCERS.get(trace)
    if entry is None:
        entry = _PRODUCERS[trace] = [0, {}]
    for eqn in trace.eqns[entry[0]:]:
        if eqn.prim is np.full:
            for v in eqn.outvars:
                entry[1][v] = eqn
    entry[0] = len(trace.eqns)
    eqn = entry[1].get(x._var)
    return eqn is not None and len(eqn.args) > 1 and type(eqn.args[1]) in _PY_SCALARS and eqn.args[1] == 0


def _plan_vjp(argnums, ans, args):
    spec = args[0]
    plan = spec.plan
    carry0, xs, ext = spec.split(args[1:])
    ans = _as_list(ans) + spec.saved
    ext_leaves, ext_trees, offsets = _flatten_items(ext)

    def vjp(g):
        g = _as_list(g)
        depth = 0 if spec.hidden else plan.depth(g)
        grads = None
        if depth < len(plan.stages):
            grads = _stage_vjp(plan, depth, spec, carry0, xs, ext_leaves, ans, g)
        if grads is None:
            grads = _recompute_vjp(plan, spec, carry0, xs, ext_leaves, ans, g)
        nc, nx = spec.n_carry, spec.n_xs
        out = {j: grads[j] for j in range(nc + nx) if j in grads}
        ext_grads = _item_grads(ext_trees, offsets, ext_leaves,
                                {j - nc - nx: gr for j, gr in grads.items() if j >= nc + nx})
        out.update({nc + nx + m: gr for m, gr in enumerate(ext_grads)})
        return _select(args, argnums, 1, out)

    return vjp


def _stage_vjp(plan, depth, spec, carry0, xs, p, ans, g):
    """One reverse scan of stage depth+1's unknown step; None if the cotangents' dtypes are not
    the ones its joint graph was traced for. Returns {operand leaf index: gradient}."""
    st = plan.stages[depth]
    nc, nx, n_p = spec.n_carry, spec.n_xs, len(p)
    out_pos = plan.out_pos[depth]  # y, then residuals of the stages below
    ct_pos = st.dc + [out_pos[j] for j in st.dout]
    if _incoming_dtype([g[q] for q in ct_pos]) != st.wide:
        return None
    P, hs = list(p), []
    for k in range(depth):
        hs.append([ans[q] for q in plan.hoist_pos[k]])
        P = P + hs[-1]
    h = [ans[q] for q in plan.hoist_pos[depth]]
    res = [ans[q] for q in plan.res_pos[depth]]
    ndc, ndx = len(st.dc), len(st.dx)
    ct_c = [_astype(g[j], _like(ans[j], st.wide)) for j in st.dc]
    ct_outs = [_astype(g[out_pos[j]], _like(ans[out_pos[j]], st.wide)) for j in st.dout]
    acc0 = [_zeros(P[j], _like(P[j], st.wide)) for j in st.dp]
    x_used = [xs[j] for j in st.x_used]
    nr, nxu = len(res), len(x_used)

    def backward(i, state, inp):
        ct_c, acc = list(state[:ndc]), state[ndc:]
        r, xu, ct_o = list(inp[:nr]), list(inp[nr:nr + nxu]), list(inp[nr + nxu:])
        grads = st.unknown(P, h, i, xu, r, ct_c + ct_o)
        gp = grads[ndc + ndx:]
        return grads[:ndc] + [a + b for a, b in zip(acc, gp)], grads[ndc:ndc + ndx]

    labels = [f"cotangent of {spec.labels[j]}" for j in st.dc] + [f"cotangent of closed-over value {j}" for j in st.dp]
    state, ct_xs = spec.scan(backward, ct_c + acc0, res + x_used + ct_outs, not spec.reverse, labels,
                             f"{spec.what} (backward pass)")
    grads = {j: state[k] for k, j in enumerate(st.dc)}
    grads.update({nc + j: ct_xs[k] for k, j in enumerate(st.dx)})
    acc = dict(zip(st.dp, state[ndc:]))
    grads.update({nc + nx + j: acc[j] for j in acc if j < n_p})
    if depth:  # hoisted values of the stages below: their own and accumulated cotangents
        flat_h = [v for hh in hs for v in hh]
        pos = [q for k in range(depth) for q in plan.hoist_pos[k]]
        dh = [k for k, v in enumerate(flat_h) if _is_float(v)]
        dpp = [j for j in range(n_p) if _is_float(p[j])]
        if dh and dpp:
            cts = []
            for k in dh:
                ct = _astype(g[pos[k]], _like(flat_h[k], st.wide))
                if n_p + k in acc:
                    ct = ct + acc[n_p + k]
                cts.append(ct)
            through = _call_vjp(lambda full: _hoists(plan, full, depth)[0][n_p:], list(p), dpp, dh, cts)
            for j, gr in zip(dpp, through):
                gr = _astype(gr, _like(p[j], st.wide))
                key = nc + nx + j
                grads[key] = grads[key] + gr if key in grads else gr
    return grads


def _recompute_vjp(plan, spec, carry0, xs, p, ans, g):
    """The VJP of the primitive's outputs (those g has cotangents for) by differentiating
    _plan_math (a recomputing scan)."""
    nc, nx = spec.n_carry, spec.n_xs
    leaves = list(carry0) + list(xs) + list(p)
    # numpy constants (a closed-over xs) are not differentiated: they have no gradient, and
    # autograd would accumulate traced cotangents into numpy zeros
    diff = [j for j, v in enumerate(leaves) if _is_float(v) and type(getval(v)) is Tracer]
    outs = [j for j in range(len(g)) if _is_float(ans[j])]
    wide = _incoming_dtype([g[j] for j in outs])
    cts = [_astype(g[j], _like(ans[j], wide)) for j in outs]

    def f(full):
        return _plan_math(plan, spec, full[:nc], full[nc:nc + nx], full[nc + nx:], residuals=False)

    grads = _call_vjp(f, leaves, diff, outs, cts)
    return {j: _astype(gr, _like(leaves[j], wide)) for j, gr in zip(diff, grads)}


def _plan_jvp(argnums, gs, ans, args):
    """Tangents of the primitive's outputs (residuals included unless hidden): the hoisted
    values under make_jvp, then one scan over (primal, tangent) pairs whose steps run the
    last stage's known step under make_jvp."""
    spec = args[0]
    plan = spec.plan
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = _as_list(ans)
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    n_p, d = len(ext_leaves), len(plan.stages)
    wide = _incoming_dtype(gs)
    dc = [j for j in range(nc) if _is_float(carry0[j])]
    dx = [j for j in range(nx) if nc + j in given and _is_float(xs[j])]
    de, te = _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc + nx, wide)
    P, tP = _call_jvp(lambda p: _hoists(plan, p, d)[0], ext_leaves, de, te)
    dP = de + ([j for j in range(n_p, len(P)) if _is_float(P[j])] if de else [])
    tP = [_astype(tP[j], _like(P[j], wide)) for j in dP]
    n_last = len(P) - len(plan.stages[-1].h_vars)  # the last stage's P; its hoisted values follow
    last = plan.stages[-1]

    def step(i, c, x, Pf):
        return _known_body(last, plan.step_select, Pf[:n_last], Pf[n_last:], i, c, x)
    tangents = _tangent_scan(spec, step, carry0, xs, given, dc, dx, P, dP, tP, wide)
    hoisted_tangents = dict(zip(dP, tP))
    for j, q in zip(range(n_p, len(P)), [q for pos in plan.hoist_pos for q in pos]):
        if q < len(ans) and j in hoisted_tangents:
            tangents[q] = _astype(hoisted_tangents[j], _like(ans[q], wide))
    return _pack([tangents[j] if j in tangents else _zeros(ans[j]) for j in range(len(ans))])


# ============================================================================================
# fori_loop
# ============================================================================================
def fori_loop(lower, upper, body_fun, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`; returns the final val.

    With bounds known at trace time (Python or numpy ints) this is a scan: reverse- and
    forward-mode differentiable. Traced bounds make it a while_loop (forward mode only).
    """
    leaves, treedef = tree.flatten(init_val)
    labels = _labels("carry", treedef)
    lo, hi = getval(lower), getval(upper)
    for b in (lo, hi):
        if isinstance(b, bool) or np.shape(b) != () or _dtype(b).kind not in "iu":
            raise TypeError(f"fori_loop: lower and upper must be integer scalars, got {_describe(b)}")

    def step(i, carry):
        out_leaves, out_tree = tree.flatten(body_fun(i, tree.unflatten(treedef, carry)))
        _check_structure(out_tree, treedef, "fori_loop's body_fun")
        return out_leaves

    if type(lo) is not Tracer and type(hi) is not Tracer:
        weak = type(lo) is int and type(hi) is int
        index_dtype = None if weak else tracing.result_type(lo, hi)
        start = int(lo)

        def body(k, carry, _):
            return step(k + start if start else k, carry), []

        carry, _ = _scan_flat(body, leaves, [], max(int(hi) - start, 0), False, index_dtype, labels,
                              "fori_loop's body_fun")
        return tree.unflatten(treedef, carry)

    dtype = tracing.result_type(lo, hi)
    weak = all(_is_weak(b) for b in (lo, hi))
    start = (lo if lo.dtype == dtype else lo.astype(dtype)) if type(lo) is Tracer else np.asarray(lo, dtype)
    bound = hi if type(hi) is Tracer else lo

    def cond(state):
        return state[0] < hi

    def body(state):
        return [state[0] + 1] + step(state[0], state[1:])

    def reverse_error():
        err = tracing.concretization_error(bound, "reverse-mode differentiation of fori_loop")
        err.add_note("fori_loop is reverse-differentiable when lower and upper are known at trace time (Python "
                     "ints, or jit_ps static arguments); otherwise use scan, or forward mode (make_jvp).")
        return err

    out = _while_flat(cond, body, [start] + leaves, ["i"] + labels, [weak] + [False] * len(leaves), reverse_error,
                      "fori_loop")
    return tree.unflatten(treedef, out[1:])


# ============================================================================================
# cond and switch
# ============================================================================================
def cond(pred, true_fun, false_fun, *operands):
    """`true_fun(*operands)` if pred else `false_fun(*operands)`, as one branch op when pred
    is traced. Both branches must return the same structure, shapes and dtypes."""
    p = getval(pred)
    if np.shape(p) != () or _dtype(p).kind not in "biuf":
        raise TypeError(f"cond: pred must be a boolean or numeric scalar, got {_describe(p)}")
    if type(p) is not Tracer:
        return (true_fun if bool(p) else false_fun)(*operands)
    if p.dtype.kind != "b":
        p = p != 0
    return _branches(p, [false_fun, true_fun], operands, "cond")


def switch(index, branches, *operands):
    """`branches[index](*operands)`, with index clamped to [0, len(branches) - 1]."""
    branches = list(branches)
    if not branches:
        raise ValueError("switch needs at least one branch")
    i = getval(index)
    if np.shape(i) != () or _dtype(i).kind not in "iu" or isinstance(i, bool):
        raise TypeError(f"switch: index must be an integer scalar, got {_describe(i)}")
    if type(i) is not Tracer:
        return branches[min(max(int(i), 0), len(branches) - 1)](*operands)
    if len(branches) == 1:
        return branches[0](*operands)
    return _branches(i, branches, operands, "switch")


def _branches(index, branches, operands, what):
    leaves, treedef = tree.flatten(operands)
    out_trees = [None] * len(branches)

    def flat(k):
        def branch(ops):
            out = branches[k](*tree.unflatten(treedef, ops))
            out_leaves, out_trees[k] = tree.flatten(out)
            return out_leaves
        return branch

    outs = _case_flat(index, [flat(k) for k in range(len(branches))], leaves, what)
    for k, t in enumerate(out_trees):
        if t is not None and t != out_trees[0]:
            raise TypeError(f"{what}: branch {k} returns {tree.describe(t)} but branch 0 returns "
                            f"{tree.describe(out_trees[0])}; branches must return the same structure")
    return tree.unflatten(out_trees[0], outs)


def _case_flat(index, branches, operands, what):
    """branches[index](operand_leaves) -> leaves; index is a traced bool (false, true) or
    integer scalar."""
    converted, ext = _convert(*branches)
    if ext or any(isbox(x) for x in operands):
        spec = _CaseSpec(converted, len(operands), what)
        return _unpack(_case_ad(spec, index, *operands, *ext))
    return _case_traced(index, branches, operands, what)


def _case_traced(index, branches, operands, what):
    avals = [_aval(x, keep_weak=True) for x in operands]
    names = [f"operand[{j}]" for j in range(len(operands))]
    traced = [_trace_body(lambda *a, b=b: b(list(a)), avals, names, f"{what} branch {k}")
              for k, b in enumerate(branches)]
    graphs = [g for g, _ in traced]
    out_avals = _join_branch_types([infos for _, infos in traced], what)
    params = _Params(f"{what}({len(graphs)} branches)", graphs, n_ops=len(operands), in_avals=avals,
                     n_consts=[len(g.captured) for g in graphs], out_avals=out_avals)
    consts = [c for g in graphs for c in _consts(g)]
    return list(tracing.bind(case_p, (params, index, *operands, *consts), {}))


def _join_branch_types(infos, what):
    """One result type per output: strong dtypes must agree, weak ones adopt theirs."""
    counts = {len(i) for i in infos}
    if len(counts) != 1:
        raise TypeError(f"{what}: branches return different numbers of values: {[len(i) for i in infos]}")
    joined = []
    for j in range(counts.pop()):
        column = [i[j] for i in infos]
        shapes = {a.shape for a, _ in column}
        if len(shapes) != 1:
            raise TypeError(f"{what}: output {j} has different shapes in different branches: "
                            f"{[str(a) for a, _ in column]}")
        strong = {a.dtype for a, weak in column if not weak}
        if len(strong) > 1:
            raise TypeError(f"{what}: output {j} has different dtypes in different branches: "
                            f"{[str(a) for a, _ in column]}; cast them to one dtype")
        dtype = strong.pop() if strong else np.result_type(*[a.dtype for a, _ in column])
        for a, weak in column:
            if not np.can_cast(a.dtype, dtype, "same_kind"):
                raise TypeError(f"{what}: output {j} is {a} in one branch but {dtype.name} in another")
        joined.append(Aval(shapes.pop(), dtype))
    return joined


case_p = ControlFlowPrimitive("case")
registry.register_replay(case_p, _replay_case)


def _case_rule(ctx, p, index, *operands):
    idx = ctx.asvalue(index)
    if idx.dtype.kind == "b":  # cond: false -> branch 0, true -> branch 1
        idx = ctx.convert(idx, np.int32)
    else:
        last = len(p.graphs) - 1
        idx = ctx.convert(ctx.clamp(ctx.scalar(0, idx.dtype), idx, ctx.scalar(last, idx.dtype)), np.int32)
    n = p.n_ops
    ops = [ctx.asvalue(x, a.dtype) for x, a in zip(operands[:n], p.in_avals)]
    consts, start = [], n
    for count in p.n_consts:
        consts.append(operands[start:start + count])
        start += count

    def branch(graph, cs):
        return lambda b: _cast_all(b, lower_subgraph(b, graph, [_alias(o) for o in ops], cs), p.out_avals)

    results = [(a.shape, a.dtype) for a in p.out_avals]
    return tuple(ctx.case(idx, [branch(g, cs) for g, cs in zip(p.graphs, consts)], results))


registry.register_translation_rule(case_p, _case_rule)


class _CaseSpec(_Opaque):
    __slots__ = ("branches", "n_ops", "what")

    def __init__(self, branches, n_ops, what):
        self.branches, self.n_ops, self.what = branches, n_ops, what


def _case_raw(spec, index, *args):
    ops, ext = list(args[:spec.n_ops]), args[spec.n_ops:]
    branches = [functools.partial(b, ext) for b in spec.branches]
    return _pack(_case_traced(index, branches, ops, spec.what))


_case_ad = primitive(_case_raw)
registry.register_trace_rule(_case_raw, _case_raw)


def _case_vjp(argnums, ans, args, kwargs):
    """A branch op over the branches' VJPs, each giving gradients for every operand."""
    spec, index = args[0], args[1]
    n = spec.n_ops
    ops, ext = list(args[2:2 + n]), list(args[2 + n:])
    ans = _as_list(ans)
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    do = [j for j in range(n) if _is_float(ops[j])]
    de = [j for j in range(len(ext_leaves)) if _is_float(ext_leaves[j])]
    dout = [j for j in range(len(ans)) if _is_float(ans[j])]
    primal = ops + ext_leaves
    diff = do + [n + j for j in de]
    if not diff or not dout:
        return lambda g: _select(args, argnums, 2, {})

    def vjp(g):
        g = _as_list(g)
        wide = _incoming_dtype([g[j] for j in dout])
        cts = [_astype(g[j], _like(ans[j], wide)) for j in dout]

        def branch_vjp(branch):
            def run(leaves):
                p, ct = leaves[:len(primal)], leaves[len(primal):]

                def f(full):
                    return branch(_unflatten_items(ext_trees, offsets, full[n:]), list(full[:n]))

                grads = _call_vjp(f, p, diff, dout, ct)
                return [_astype(gr, _like(p[j], wide)) for gr, j in zip(grads, diff)]
            return run

        grads = _case_flat(index, [branch_vjp(b) for b in spec.branches], primal + cts, f"{spec.what} (VJP)")
        by_leaf = dict(zip(diff, grads))
        out = {j: by_leaf[j] for j in do}
        ext_grads = _item_grads(ext_trees, offsets, ext_leaves, {j: by_leaf[n + j] for j in de})
        out.update({n + m: gr for m, gr in enumerate(ext_grads)})
        return _select(args, argnums, 2, out)

    return vjp


def _case_jvp(argnums, gs, ans, args, kwargs):
    """A branch op over the branches' JVPs."""
    spec, index = args[0], args[1]
    n = spec.n_ops
    ops, ext = list(args[2:2 + n]), list(args[2 + n:])
    ans = _as_list(ans)
    given = {a - 2: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    do = [j for j in range(n) if j in given and _is_float(ops[j])]
    wide = _incoming_dtype(gs)
    de, te = _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, n, wide)
    dout = [j for j in range(len(ans)) if _is_float(ans[j])]
    primal = ops + ext_leaves
    diff = do + [n + j for j in de]
    tangents = [_astype(given[j], _like(ops[j], wide)) for j in do] + te
    if not diff or not dout:
        return _pack([_zeros(a) for a in ans])

    def branch_jvp(branch):
        def run(leaves):
            p, t = leaves[:len(primal)], leaves[len(primal):]

            def f(full):
                return branch(_unflatten_items(ext_trees, offsets, full[n:]), list(full[:n]))

            _, touts = _call_jvp(f, p, diff, t)
            return [_astype(touts[j], _like(ans[j], wide)) for j in dout]
        return run

    outs = _case_flat(index, [branch_jvp(b) for b in spec.branches], primal + tangents, f"{spec.what} (JVP)")
    by_out = dict(zip(dout, outs))
    return _pack([by_out[j] if j in by_out else _zeros(ans[j]) for j in range(len(ans))])


defvjp_argnums(_case_ad, _case_vjp)
defjvp_argnums(_case_ad, _case_jvp)
