"""vmap as one equation, its derivatives, and the Jacobians built on it.

`batch(fun, args, kwargs, in_axes, out_axes)` maps `fun` over an axis of some arguments.
Like the control-flow functions it runs in one of three ways:

* with nothing traced (no trace active, no traced argument) it is a Python loop over the
  examples, stacked: what plain autograd differentiates, and the meaning of the others;
* inside a trace, `fun` is traced once for one example into a sub-graph and the call is
  one `batch` equation, lowered by batching.py's BatchingContext (every translation rule
  batches through it);
* with autograd boxes among the arguments, or in `fun`'s closure (found by control_flow's
  closure conversion), the call is an autograd primitive whose VJP is again a `batch` of
  the example's VJP (cotangents mapped as the outputs are; gradients of unmapped
  arguments summed over the batch), and its JVP a `batch` of the example's JVP; both are
  differentiable once more, so any order of derivatives works in both directions.

The Jacobians follow: reverse mode maps the VJP over the basis of the output space, forward
mode the JVP over that of the input space, one batched pass each instead of one pass per
row or column. While a trace is active, autograd's own `jacobian` (and so `hessian`, which
calls it twice) is this reverse-mode one, so `jit_ps(hessian(f))` in legacy code compiles
to a program whose size does not grow with the input.
"""
import functools

import autograd.differential_operators as ag_differential
import autograd.builtins as ag_builtins
import autograd.numpy as anp
import numpy as np
from autograd.core import make_jvp, make_vjp
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import getval, isbox

from . import registry, tracing, tree
from .batching import BatchingContext, from_front, to_front
from .control_flow.common import (ControlFlowPrimitive, Opaque, Params, alias, as_list, aval_of, call_jvp, call_vjp,
                                  captured_operands, closure_convert, ext_tangents, flatten_items, is_float, item_grads,
                                  pack, python_mode, select_grads, trace_body, unflatten_items, unpack, zeros)
from .control_flow.replay import graph_fn
from .core import Aval, Var
from .lowering import lower_subgraph
from .tracing import Tracer


# ----- arguments: in_axes, sizes -------------------------------------------------------------
def leaf_axes(in_axes, args, kwargs, names):
    """The mapped axis (or None) of each leaf of (args, kwargs), with their labels; in_axes is
    an int, None, or a container prefix of the positional arguments (keyword arguments are
    mapped over axis 0, as in jax)."""
    axes, labels = [], []

    def walk(axis, obj, label):
        if axis is None or isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
            leaves, treedef = tree.flatten(obj)
            for path, leaf in zip(tree.leaf_paths(treedef), leaves):
                labels.append(label + tree.format_path(path))
                axes.append(_normalized(axis, leaf, labels[-1]))
            return
        kind = type(axis)
        # a container being differentiated is an autograd box (a SequenceBox, a DictBox), as
        # autograd passes a list or dict argument it differentiates, and tree.flatten reads it
        value = getval(obj)
        if kind in (tuple, list) and isinstance(value, (tuple, list)) and len(axis) == len(value):
            for k, a in enumerate(axis):
                walk(a, obj[k], f"{label}[{k}]")
            return
        if kind is dict and isinstance(value, dict) and set(axis) == set(value):
            for k in value:  # in the order tree.flatten visits them
                walk(axis[k], obj[k], f"{label}[{k!r}]")
            return
        raise ValueError(f"vmap in_axes {axis!r} does not match the structure of {label} "
                         f"({tree.describe(tree.flatten(obj)[1])}): give an int, None, or a container of the "
                         "same kind and length")

    # a list of axes for the positional arguments, as jax reads one (in_axes=[0] for one array
    # argument too); only a list that cannot be that is the prefix of a single argument's structure
    if isinstance(in_axes, list) and (len(args) != 1 or len(in_axes) == 1):
        in_axes = tuple(in_axes)
    if type(in_axes) is tuple:
        if len(in_axes) != len(args):
            raise ValueError(f"vmap in_axes has {len(in_axes)} entries but the function was called with "
                             f"{len(args)} positional arguments")
        for k, (a, x) in enumerate(zip(in_axes, args)):
            walk(a, x, _arg_label(names, k))
    else:
        for k, x in enumerate(args):
            walk(in_axes, x, _arg_label(names, k))
    for key, x in kwargs.items():
        walk(0, x, f"'{key}'")
    return axes, labels


def _arg_label(names, k):
    return f"'{names[k]}'" if k < len(names) else f"argument {k}"


def _normalized(axis, leaf, label):
    if axis is None:
        return None
    ndim = np.ndim(getval(leaf))
    if not -ndim <= axis < ndim:
        raise ValueError(f"vmap in_axes {axis} is out of range for {label}, of rank {ndim}")
    return int(axis) % ndim


def batch_size(leaves, axes, labels, what="vmap"):
    sizes = {label: np.shape(getval(x))[a] for x, a, label in zip(leaves, axes, labels) if a is not None}
    if not sizes:
        raise ValueError(f"{what} needs at least one mapped argument: in_axes is None for every argument")
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{label} has size {n}" for label, n in sizes.items())
        raise ValueError(f"{what} got arguments of different sizes along their mapped axes: {listed}")
    return next(iter(sizes.values()))


def out_leaf_axes(out_axes, out_tree, out_ndims):
    """The axis (or None) of each result leaf; out_axes an int, None or a container prefix."""
    axes = []

    def walk(axis, treedef):
        if axis is None or isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
            axes.extend([axis] * tree.num_leaves(treedef))
            return
        kind = treedef[0] if treedef is not tree.LEAF else None
        children = treedef[-1] if kind is not None else ()
        if type(axis) in (tuple, list) and kind in (tuple, list) and len(axis) == len(children):
            for a, c in zip(axis, children):
                walk(a, c)
            return
        if type(axis) is dict and kind is dict and set(axis) == set(treedef[1]):
            for k, c in zip(treedef[1], children):
                walk(axis[k], c)
            return
        raise ValueError(f"vmap out_axes {axis!r} does not match the structure of the result "
                         f"({tree.describe(treedef)})")

    walk(out_axes, out_tree)
    out = []
    for a, nd in zip(axes, out_ndims):
        if a is not None and not -(nd + 1) <= a <= nd:
            raise ValueError(f"vmap out_axes {a} is out of range for a result of rank {nd} (batched: {nd + 1})")
        out.append(None if a is None else int(a) % (nd + 1))
    return out


# ----- the three ways to run ------------------------------------------------------------------
def batch(fun, args, kwargs, in_axes=0, out_axes=0, names=(), axis_name=None):
    """`fun(*args, **kwargs)` mapped over the axes `in_axes` of its arguments; the results
    stacked along `out_axes`. Collectives over `axis_name` reduce over the examples."""
    leaves, in_tree = tree.flatten((tuple(args), dict(kwargs)))
    axes, labels = leaf_axes(in_axes, tuple(args), dict(kwargs), names)
    size = batch_size(leaves, axes, labels)
    out_tree = []

    def flat(example):
        a, k = tree.unflatten(in_tree, list(example))
        out_leaves, t = tree.flatten(fun(*a, **k))
        out_tree.append(t)
        return out_leaves

    def resolve(ndims):
        return out_leaf_axes(out_axes, out_tree[-1], ndims)

    outs = batch_flat(flat, leaves, axes, resolve, size, labels, axis_name)
    return tree.unflatten(out_tree[-1], outs)


def batch_flat(f, leaves, axes, out_axes, size, labels=None, axis_name=None):
    """f(example leaves) -> result leaves, mapped. `out_axes(ranks of the example's results)`
    gives each result's axis (None: the same for every example)."""
    if python_mode(leaves):
        return _python_loop(f, leaves, axes, out_axes, size)
    converted, ext = closure_convert(f)
    if ext or any(isbox(x) for x in leaves):
        spec = MappedSpec(converted[0], len(leaves), axes, out_axes, size, labels,
                          run=functools.partial(batch_flat, axis_name=axis_name))
        out = mapped_call(spec, *leaves, *ext)
        return unpack(out)
    return _traced(f, leaves, axes, out_axes, size, labels, axis_name)


def _python_loop(f, leaves, axes, out_axes, size):
    results = []
    for i in range(size):
        # indexing, not anp.take: autograd has no VJP for take, and boxes pass through here
        # (a jit_ps run as plain autograd, a batch called on boxes outside any trace)
        example = [x if a is None else x[(slice(None),) * a + (i,)] for x, a in zip(leaves, axes)]
        results.append(f(example))
    if not results:
        raise ValueError("vmap over a mapped axis of size 0 runs no example, so its results' shapes are unknown")
    ranks = [np.ndim(getval(r)) for r in results[0]]
    stacked = []
    for k, axis in enumerate(out_axes(ranks)):
        column = [r[k] for r in results]
        if axis is None and not all(np.array_equal(getval(c), getval(column[0])) for c in column[1:]):
            raise ValueError(f"vmap out_axes is None for result {k}, but it varies across the batch")
        stacked.append(column[0] if axis is None else anp.stack(column, axis=axis))
    return stacked


def _traced(f, leaves, axes, out_axes, size, labels, axis_name):
    """One batch equation. Unmapped arguments that are not traced (Python numbers, numpy
    arrays) stay constants of the example's function, as jax's vmap passes them on: an int
    can still be an axis or a length there."""
    operand = [a is not None or type(getval(x)) is Tracer for x, a in zip(leaves, axes)]
    ops = [x for x, o in zip(leaves, operand) if o]
    op_axes = [a for a, o in zip(axes, operand) if o]
    avals = []
    for x, a in zip(ops, op_axes):
        aval = aval_of(x, keep_weak=True)
        if a is not None:
            aval = type(aval)(aval.shape[:a] + aval.shape[a + 1:], aval.dtype, aval.weak_type)
        avals.append(aval)

    def example_fn(*traced):
        it = iter(traced)
        return f([next(it) if o else x for x, o in zip(leaves, operand)])

    names = [label for label, o in zip(labels or [None] * len(leaves), operand) if o]
    origins = {k: getval(x) for k, (x, a) in enumerate(zip(ops, op_axes)) if a is None and type(getval(x)) is Tracer}
    with tracing.binding_axis(axis_name, size):
        graph, infos = trace_body(example_fn, avals, names, "the function vmap maps", origins=origins)
    outs_axes = out_axes([aval.ndim for aval, _ in infos])
    params = Params(f"vmap(size={size})", [graph], in_axes=op_axes, in_avals=avals, out_axes=outs_axes,
                    size=size, n_ops=len(ops), axis_name=axis_name)
    return list(tracing.bind(batch_p, (params, *ops, *captured_operands(graph)), {}))


batch_p = ControlFlowPrimitive("batch")


def _batch_rule(ctx, p, *operands):
    """The example's graph lowered into a BatchingContext; mapped axes moved to the front."""
    n = p.n_ops
    bctx = BatchingContext(ctx, p.size, axis_name=p.axis_name)
    args = []
    for x, axis, aval in zip(operands[:n], p.in_axes, p.in_avals):
        v = ctx.asvalue(x, aval.dtype)
        args.append(alias(v) if axis is None else bctx.wrap(to_front(ctx, v, axis), v.weak_type))
    outs = lower_subgraph(bctx, p.graphs[0], args, operands[n:])
    results = []
    for k, (o, axis) in enumerate(zip(outs, p.out_axes)):
        if axis is None:
            if bctx.batched(o):
                raise ValueError(f"vmap out_axes is None for result {k}, but it varies across the batch")
            results.append(o)
        else:
            results.append(from_front(ctx, bctx.physical(o), axis))
    return tuple(results)


def _batch_shapes(p, *operands):
    """batch_p's result types without lowering the example's graph (registry.Entry.shape;
    its rule, run to learn them, made up ~2/3 of tracing a Hessian of lifelines' log-normal
    likelihood): an example's, with the batch's size at its out axis."""
    out = []
    for v, axis in zip(p.graphs[0].outvars, p.out_axes):
        a = v.aval if isinstance(v, Var) else Aval(np.shape(v), np.asarray(v).dtype)
        out.append(Aval(a.shape if axis is None else a.shape[:axis] + (p.size,) + a.shape[axis:], a.dtype))
    return out


registry.register_translation_rule(batch_p, _batch_rule)
registry.entry(batch_p).shape = _batch_shapes


def _replay_batch(args, kwargs):
    """A batch equation of a graph replayed with autograd boxes (control_flow's loop derivatives)."""
    p = args[0]
    ops, consts = list(args[1:1 + p.n_ops]), list(args[1 + p.n_ops:])
    return tuple(batch_flat(functools.partial(graph_fn, p.graphs[0], consts), ops, p.in_axes,
                            lambda ranks: p.out_axes, p.size, axis_name=p.axis_name))


registry.register_replay(batch_p, _replay_batch)


# ----- derivatives --------------------------------------------------------------------------
# A mapped call (vmap's batch, and pmap's devices: parallel.py) differentiated by autograd:
# its VJP maps the example's VJP, its JVP the example's JVP, with the same mapping function.
class MappedSpec(Opaque):
    """The static half of a differentiable mapped call: the converted function (closure boxes
    as arguments after the leaves), the axes, the results' axes once known, and `run(f,
    leaves, axes, out_axes, size, labels) -> result leaves`, the mapping (batch_flat for vmap)."""

    __slots__ = ("fun", "n_ops", "in_axes", "resolve", "out_axes", "size", "labels", "run", "what", "reduce")

    def __init__(self, fun, n_ops, in_axes, resolve, size, labels, run=None, what="vmap", reduce=None):
        self.fun, self.n_ops, self.in_axes, self.resolve = fun, n_ops, in_axes, resolve
        self.size, self.labels, self.out_axes = size, labels, None
        self.run, self.what = run or batch_flat, what
        # how the VJP sums an unmapped operand's gradients over the members, inside the mapped
        # call (pmap: a psum over the devices, so that every process gets the whole sum);
        # None: they come back stacked and are summed after it (vmap's batch is one program)
        self.reduce = reduce

    def __repr__(self):
        return f"{self.what}(size={self.size})"


def _mapped_raw(spec, *args):
    ops, ext = list(args[:spec.n_ops]), list(args[spec.n_ops:])

    def resolve(ranks):
        spec.out_axes = spec.resolve(ranks)
        return spec.out_axes

    return pack(spec.run(functools.partial(spec.fun, ext), ops, spec.in_axes, resolve, spec.size, spec.labels))


def _split(spec, args):
    """(operands, closure items, their leaves, trees, offsets, the function of all leaves)."""
    n = spec.n_ops
    ops, ext = list(args[1:1 + n]), list(args[1 + n:])
    ext_leaves, ext_trees, offsets = flatten_items(ext)

    def f(full):
        return spec.fun(unflatten_items(ext_trees, offsets, full[n:]), list(full[:n]))

    return ops, ext, ext_leaves, ext_trees, offsets, f


def _mapped_vjp(argnums, ans, args, kwargs):
    """The example's VJP mapped: cotangents mapped like the results, gradients of unmapped
    operands summed over the batch."""
    spec = args[0]
    n = spec.n_ops
    ops, ext, ext_leaves, ext_trees, offsets, f = _split(spec, args)
    ans = as_list(ans)
    primal = ops + ext_leaves
    axes = list(spec.in_axes) + [None] * len(ext_leaves)
    diff = _differentiated(argnums, primal, n, ext_trees)
    dout = [j for j in range(len(ans)) if is_float(ans[j])]
    if not diff or not dout:
        return lambda g: select_grads(args, argnums, 1, {})

    def vjp(g):
        g = as_list(g)
        # a result that is the same for every example (out_axes None) reaches the loss once, but
        # its cotangent goes to every example's VJP and the gradients of the unmapped operands
        # are summed over the batch: each example gets 1/size of it
        cts = [g[j] if spec.out_axes[j] is not None else g[j] / spec.size for j in dout]

        summed_inside = spec.reduce is not None

        def example_vjp(leaves):
            grads = call_vjp(f, leaves[:len(primal)], diff, dout, leaves[len(primal):])
            if summed_inside:
                grads = [spec.reduce(gr) if axes[j] is None else gr for gr, j in zip(grads, diff)]
            return grads

        grad_axes = [axes[j] if axes[j] is not None else None if summed_inside else 0 for j in diff]
        grads = spec.run(example_vjp, primal + cts, axes + [spec.out_axes[j] for j in dout],
                         lambda ranks: grad_axes, spec.size)
        by_leaf = {j: anp.sum(gr, axis=0) if axes[j] is None and not summed_inside else gr
                   for j, gr in zip(diff, grads)}
        out = {j: by_leaf[j] for j in range(n) if j in by_leaf}
        ext_grads = item_grads(ext_trees, offsets, ext_leaves, {j: by_leaf[n + j] for j in range(len(ext_leaves))
                                                                if n + j in by_leaf})
        out.update({n + m: gr for m, gr in enumerate(ext_grads)})
        return select_grads(args, argnums, 1, out)

    return vjp


def _differentiated(argnums, primal, n, ext_trees):
    """The float leaves among those autograd asks about (argnums count from 1: the spec is
    argument 0): operands, then the leaves of closure items. Only those: a primitive inside
    may have no VJP for the others (gammainc's first argument)."""
    wanted = {a - 1 for a in argnums}
    owners = list(range(n)) + [n + m for m, td in enumerate(ext_trees) for _ in range(tree.num_leaves(td))]
    return [j for j, owner in enumerate(owners) if owner in wanted and is_float(primal[j])]


def _mapped_jvp(argnums, gs, ans, args, kwargs):
    """The example's JVP mapped: tangents mapped like their primals."""
    spec = args[0]
    n = spec.n_ops
    ops, ext, ext_leaves, ext_trees, offsets, f = _split(spec, args)
    ans = as_list(ans)
    given = {a - 1: g for a, g in zip(argnums, gs)}
    do = [j for j in range(n) if j in given and is_float(ops[j])]
    de, te = ext_tangents(ext, ext_leaves, ext_trees, offsets, given, n, None)
    dout = [j for j in range(len(ans)) if is_float(ans[j])]
    primal = ops + ext_leaves
    diff = do + [n + j for j in de]
    if not diff or not dout:
        return pack([zeros(a) for a in ans])
    axes = list(spec.in_axes) + [None] * len(ext_leaves)

    def example_jvp(leaves):
        _, touts = call_jvp(f, leaves[:len(primal)], diff, leaves[len(primal):])
        return [touts[j] for j in dout]

    touts = spec.run(example_jvp, primal + [given[j] for j in do] + te, axes + [axes[j] for j in diff],
                       lambda ranks: [spec.out_axes[j] for j in dout], spec.size)
    by_out = dict(zip(dout, touts))
    return pack([by_out[j] if j in by_out else zeros(ans[j]) for j in range(len(ans))])


#: A mapped call as autograd sees it: mapped_call(spec, *leaves, *closure boxes).
mapped_call = primitive(_mapped_raw)
defvjp_argnums(mapped_call, _mapped_vjp)
defjvp_argnums(mapped_call, _mapped_jvp)
registry.register_trace_rule(_mapped_raw, _mapped_raw)


# ----- Jacobians ------------------------------------------------------------------------------
def _basis(like):
    """The standard basis of `like`'s space, stacked: shape (size,) + like's shape; built in
    the program when tracing (an identity is n * n numbers to store and move otherwise)."""
    v = getval(like)
    shape, dtype = np.shape(v), np.result_type(v)
    if dtype.kind not in "f":
        dtype = np.dtype(np.float64)
    size = int(np.prod(shape, dtype=np.int64))
    if tracing.is_tracing():
        eye = tracing.bind(np.eye, (size,), {"dtype": dtype})
    else:
        eye = np.eye(size, dtype=dtype)
    return eye.reshape((size,) + tuple(shape))


def jacobian_reverse(fun, x):
    """autograd's `jacobian(fun)(x)` (shape: output's + x's), as one batched backward pass."""
    ans = fun(getval(x))  # for the output's shape only: traced, never differentiated, pruned unused
    if not _real(ans):  # autograd's basis of a complex space has 1 and 1j per element
        return _autograd_jacobian(fun, x)

    def row(x, g):
        return make_vjp(fun, x)[0](g)

    rows = batch(row, (x, _basis(ans)), {}, in_axes=(None, 0), out_axes=0)
    return anp.reshape(rows, np.shape(getval(ans)) + np.shape(getval(x)))


def jacobian_forward(fun, x):
    """The same Jacobian as one batched forward pass over x's basis (out_axes -1)."""
    out_tree = []

    def flat(x):  # the results' leaves as autograd's tuple: make_jvp finds no tangent in a plain
        leaves, t = tree.flatten(fun(x))  # tuple of boxes ("independent of input": zeros)
        out_tree.append(t)
        return ag_builtins.tuple(leaves)

    def column(x, t):
        return tuple(make_jvp(flat, x)(t)[1])

    columns = batch(column, (x, _basis(x)), {}, in_axes=(None, 0), out_axes=-1)
    _, leaves = _reshaped_columns(columns, np.shape(getval(x)))
    return tree.unflatten(out_tree[-1], leaves)


def _reshaped_columns(columns, x_shape):
    leaves, treedef = tree.flatten(columns)
    return treedef, [anp.reshape(c, np.shape(getval(c))[:-1] + tuple(x_shape)) for c in leaves]


def _real(x):
    v = getval(x)
    return isinstance(v, (np.ndarray, np.generic, Tracer, float)) and np.result_type(v).kind == "f"


# autograd's jacobian, the unary function its nary `jacobian` wraps (a closure cell of it):
# while a trace is active the cell holds the batched one instead (the package's import
# registers the swap with the other patches of autograd; tracing.intercepting makes it).
_AUTOGRAD_JACOBIAN_CELL = ag_differential.jacobian.__closure__[
    ag_differential.jacobian.__code__.co_freevars.index("unary_operator")]
_autograd_jacobian = _AUTOGRAD_JACOBIAN_CELL.cell_contents


def _traced_jacobian(fun, x):
    """autograd's jacobian inside a trace: batched when x is a real array (autograd's own for
    complex values and containers)."""
    return jacobian_reverse(fun, x) if _real(x) else _autograd_jacobian(fun, x)


registry.register_module_patch(_AUTOGRAD_JACOBIAN_CELL, "cell_contents", _traced_jacobian)
