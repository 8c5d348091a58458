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
  again, which is what makes `grad(grad(.))` and nested loops work.

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
import types
import warnings

import autograd.numpy as anp
import numpy as np
from autograd import builtins as ag_builtins
from autograd.core import make_jvp, make_vjp
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import box_types, getval, isbox, trace_stack

from . import hlo, rules, tracing, tree
from .core import Aval, Var
from .errors import ConcretizationError, annotate
from .lowering import lower_subgraph
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


def _unpack(out):
    """The leaves of a primitive's result. Integer leaves are taken unboxed: they have no
    gradient, and autograd could not accumulate a float cotangent into their slot."""
    raw = _as_list(getval(out))
    return [o if _is_float(r) else r for o, r in zip(_as_list(out), raw)]


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


rules.register_translation_rule(while_p, _while_rule)


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
rules.register_trace_rule(_while_raw, _while_raw)


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


def _scan_flat(body, carry, xs, length, reverse, index_dtype, labels, what):
    """scan on flat leaves: body(i, carry_leaves, x_leaves) -> (carry_leaves, y_leaves).

    `i` is the position in xs: a Python int (weakly typed when traced) if index_dtype
    is None, else a scalar of that dtype.
    """
    if _python_mode(carry + xs):
        return _scan_python(body, carry, xs, length, reverse, index_dtype, labels, what)
    (body_c,), ext = _convert(body)
    if ext or any(isbox(x) for x in carry + xs):
        spec = _ScanSpec(body_c, len(carry), len(xs), length, reverse, index_dtype, labels, what)
        out = _unpack(_scan_ad(spec, *carry, *xs, *ext))
        return out[:len(carry)], out[len(carry):]
    return _scan_traced(body, carry, xs, length, reverse, index_dtype, labels, what)


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
    the enclosing scope. ys[idx] is written where xs[idx] was read."""
    (graph,) = p.graphs
    nc, nx, n = p.n_carry, p.n_xs, p.length
    carry = [ctx.asvalue(v, a.dtype) for v, a in zip(operands[:nc], p.carry_avals)]
    xs = [ctx.asvalue(v, a.dtype) for v, a in zip(operands[nc:nc + nx], p.xs_avals)]
    consts = operands[nc + nx:]
    if n == 0:
        return tuple(carry + [ctx.full((0,) + a.shape, 0, a.dtype) for a in p.y_avals])
    ys = [ctx.full((n,) + a.shape, 0, a.dtype) for a in p.y_avals]

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
        bufs = [b.dynamic_update_slice(buf, b.reshape(y, (1,) + y.shape), [idx] + [zero] * y.ndim)
                for buf, y in zip(state[nc:], outs[nc:])]
        return [b.binary("add", i, b.scalar(1, _INT64))] + outs[:nc] + bufs

    return tuple(ctx.while_loop([ctx.scalar(0, _INT64)] + carry + ys, cond, body)[1:])


rules.register_translation_rule(scan_p, _scan_rule)


class _ScanSpec(_Opaque):
    __slots__ = ("body", "n_carry", "n_xs", "length", "reverse", "index_dtype", "labels", "what")

    def __init__(self, body, n_carry, n_xs, length, reverse, index_dtype, labels, what):
        self.body, self.n_carry, self.n_xs, self.length = body, n_carry, n_xs, length
        self.reverse, self.index_dtype, self.labels, self.what = reverse, index_dtype, labels, what

    def split(self, leaves):
        nc, nx = self.n_carry, self.n_xs
        return list(leaves[:nc]), list(leaves[nc:nc + nx]), list(leaves[nc + nx:])

    def scan(self, body, carry, xs, reverse, labels, what):
        return _scan_flat(body, carry, xs, self.length, reverse, self.index_dtype, labels, what)


def _scan_raw(spec, *args):
    carry, xs, ext = spec.split(args)
    c, ys = _scan_traced(lambda i, c, x: spec.body(ext, i, c, x), carry, xs, spec.length, spec.reverse,
                         spec.index_dtype, spec.labels, spec.what)
    return _pack(c + ys)


_scan_ad = primitive(_scan_raw)
rules.register_trace_rule(_scan_raw, _scan_raw)


def _scan_vjp(argnums, ans, args, kwargs):
    """Reverse scan of the body's VJP. The forward carries are recomputed by a scan that
    stacks them (residuals); each backward step re-runs the body under make_vjp."""
    spec = args[0]
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
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = _as_list(ans)
    ny = len(ans) - nc
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = _flatten_items(ext)
    dc = [j for j in range(nc) if _is_float(carry0[j])]
    dx = [j for j in range(nx) if nc + j in given and _is_float(xs[j])]
    dy = [j for j in range(ny) if _is_float(ans[nc + j])]
    wide = _incoming_dtype(gs)
    de, te = _ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc + nx, wide)
    tc0 = [_astype(given[j], _like(carry0[j], wide)) if j in given else _zeros(carry0[j], _like(carry0[j], wide))
           for j in dc]
    tx = [_astype(given[nc + j], _like(xs[j], wide)) for j in dx]

    def body(i, state, inp):
        c, tc = state[:nc], state[nc:]
        x, txi = inp[:nx], inp[nx:]

        def f(full):
            e = _unflatten_items(ext_trees, offsets, full[nc + nx:])
            new_c, y = spec.body(e, i, full[:nc], full[nc:nc + nx])
            return list(new_c) + list(y)

        diff = dc + [nc + j for j in dx] + [nc + nx + j for j in de]
        outs, touts = _call_jvp(f, list(c) + list(x) + ext_leaves, diff, list(tc) + list(txi) + te)
        new_c, y = outs[:nc], outs[nc:]
        t_c = [_astype(touts[j], _like(c[j], wide)) for j in dc]
        t_y = [_astype(touts[nc + j], _like(y[j], wide)) for j in dy]
        return list(new_c) + t_c, list(y) + t_y

    labels = spec.labels + [f"tangent of {spec.labels[j]}" for j in dc]
    state, ys = spec.scan(body, carry0 + tc0, xs + tx, spec.reverse, labels, spec.what)
    tangents = {j: state[nc + k] for k, j in enumerate(dc)}
    tangents.update({nc + j: ys[ny + k] for k, j in enumerate(dy)})
    return _pack([tangents[j] if j in tangents else _zeros(ans[j]) for j in range(len(ans))])


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
        index_dtype = None if weak else tracing._result_type(lo, hi)
        start = int(lo)

        def body(k, carry, _):
            return step(k + start if start else k, carry), []

        carry, _ = _scan_flat(body, leaves, [], max(int(hi) - start, 0), False, index_dtype, labels,
                              "fori_loop's body_fun")
        return tree.unflatten(treedef, carry)

    dtype = tracing._result_type(lo, hi)
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


rules.register_translation_rule(case_p, _case_rule)


class _CaseSpec(_Opaque):
    __slots__ = ("branches", "n_ops", "what")

    def __init__(self, branches, n_ops, what):
        self.branches, self.n_ops, self.what = branches, n_ops, what


def _case_raw(spec, index, *args):
    ops, ext = list(args[:spec.n_ops]), args[spec.n_ops:]
    branches = [functools.partial(b, ext) for b in spec.branches]
    return _pack(_case_traced(index, branches, ops, spec.what))


_case_ad = primitive(_case_raw)
rules.register_trace_rule(_case_raw, _case_raw)


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
