"""scan: the user function, its Python and traced paths, the `scan_p` primitive's
translation rule (a `stablehlo.while` over the steps, writing ys into buffers) and replay,
and its derivatives. Under reverse mode the forward pass saves residuals planned by
residuals.py; without a plan the VJP is the recomputing scheme here: a scan that stacks the
forward carries, then a reverse scan of the body's VJP. The JVP is a scan over (primal,
tangent) pairs.
"""
import functools

import autograd.numpy as anp
import numpy as np
from autograd.core import VJPNode
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import box_types, getval, isbox

from .. import registry, tracing, tree
from ..core import Aval, Var
from ..lowering import lower_subgraph
from .common import (INT64, ControlFlowPrimitive, Opaque, Params, alias, as_list, astype, aval_of, call_jvp,
                     call_vjp, canonical, captured_operands, cast_all, check_outputs, check_structure,
                     closure_convert, conform, ext_tangents, flatten_items, incoming_dtype, is_float, item_grads,
                     leaf_labels, like, pack, python_mode, select_grads, trace_body, unflatten_items, unpack, zeros)
from .replay import eval_graph
from .residuals import MAX_STAGES, plan_forward, plan_jvp, plan_scan, plan_vjp


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
        check_structure(c_tree, carry_tree, "scan's f")
        y_leaves, yt = tree.flatten(out[1])
        if y_tree and y_tree[0] != yt:
            raise TypeError(f"scan's f returned y of structure {tree.describe(yt)} after "
                            f"{tree.describe(y_tree[0])}; it must be the same at every step")
        y_tree[:] = [yt]
        return c_leaves, y_leaves

    carry, ys = scan_flat(body, init_leaves, xs_leaves, length, bool(reverse), None,
                          leaf_labels("carry", carry_tree), "scan's f")
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


def scan_flat(body, carry, xs, length, reverse, index_dtype, labels, what, residuals=True):
    """scan on flat leaves: body(i, carry_leaves, x_leaves) -> (carry_leaves, y_leaves).

    `i` is the position in xs: a Python int (weakly typed when traced) if index_dtype
    is None, else a scalar of that dtype. Under reverse-mode autograd the forward pass
    saves residuals for the backward pass (see "scan: reverse mode with saved residuals");
    `residuals=False` asks for the recomputing scheme instead.
    """
    if python_mode(carry + xs):
        return _scan_python(body, carry, xs, length, reverse, index_dtype, labels, what)
    (body_c,), ext = closure_convert(body)
    if ext or any(isbox(x) for x in carry + xs):
        levels, hidden = _reverse_levels(carry + xs + ext) if residuals else (0, False)
        dx = [j for j, x in enumerate(xs) if isbox(x) and is_float(x)]
        spec = _ScanSpec(body_c, len(carry), len(xs), length, reverse, index_dtype, labels, what,
                         min(levels, MAX_STAGES), hidden, dx)
        out = unpack(_scan_ad(spec, *carry, *xs, *ext), spec.n_visible)
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
    carry = [canonical(c) for c in carry]
    avals = [aval_of(c) for c in carry]
    steps = [None] * length
    y_avals = None
    for k in (range(length - 1, -1, -1) if reverse else range(length)):
        i = k if index_dtype is None else index_dtype.type(k)
        new_carry, y = body(i, carry, [x[k] for x in xs])
        carry = conform(new_carry, avals, what, labels)
        if y_avals is None:
            y_avals = [aval_of(v) for v in y]
        steps[k] = conform(y, y_avals, what, [f"y[{j}]" for j in range(len(y))])
    if length == 0:  # no step ran: learn the shapes of y by tracing the body abstractly
        in_avals = [Aval((), index_dtype or INT64, index_dtype is None)] + avals
        in_avals += [Aval(aval_of(x).shape[1:], aval_of(x).dtype) for x in xs]
        nc = len(carry)
        _, infos = trace_body(lambda i, *a: _concat(body(i, list(a[:nc]), list(a[nc:]))), in_avals,
                              None, what, strip_boxes=True)
        return carry, [np.zeros((0,) + a.shape, a.dtype) for a, _ in infos[nc:]]
    return carry, [anp.stack([steps[k][j] for k in range(length)]) for j in range(len(y_avals))]


def _concat(pair):
    return list(pair[0]) + list(pair[1])


def _scan_traced(body, carry, xs, length, reverse, index_dtype, labels, what):
    carry_avals = [aval_of(c) for c in carry]
    xs_avals = [aval_of(x) for x in xs]
    x_avals = [Aval(a.shape[1:], a.dtype) for a in xs_avals]
    index_aval = Aval((), index_dtype or INT64, weak_type=index_dtype is None)
    nc = len(carry)
    names = ["i"] + labels + [f"x[{j}]" for j in range(len(xs))]
    graph, outs = trace_body(lambda i, *a: _concat(body(i, list(a[:nc]), list(a[nc:]))),
                             [index_aval] + carry_avals + x_avals, names, what)
    check_outputs(outs[:nc], carry_avals, what, labels)
    y_avals = [a for a, _ in outs[nc:]]
    params = Params(f"scan(length={length}{', reverse' if reverse else ''}, body: {len(graph.eqns)} eqns)",
                    [graph], n_carry=nc, n_xs=len(xs), length=length, reverse=reverse, index_aval=index_aval,
                    carry_avals=carry_avals, xs_avals=xs_avals, y_avals=y_avals)
    out = tracing.bind(scan_p, (params, *carry, *xs, *captured_operands(graph)), {})
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
        return b.compare(i, b.scalar(n, INT64), "LT")

    def body(b, i, *state):
        zero = b.scalar(0, INT64)
        idx = b.binary("subtract", b.scalar(n - 1, INT64), i) if p.reverse else i
        x = [b.reshape(b.dynamic_slice(v, [idx] + [zero] * (v.ndim - 1), (1,) + v.shape[1:]), v.shape[1:])
             for v in xs]
        index = b.convert(idx, p.index_aval.dtype)
        outs = cast_all(b, lower_subgraph(b, graph, [alias(index)] + list(state[:nc]) + x, consts),
                        p.carry_avals + p.y_avals)
        bufs = [b.dynamic_update_slice(buf, b.reshape(outs[nc + k], (1,) + outs[nc + k].shape),
                                       [idx] + [zero] * outs[nc + k].ndim)
                for buf, k in zip(state[nc:], looped)]
        return [b.binary("add", i, b.scalar(1, INT64))] + outs[:nc] + bufs

    out = ctx.while_loop([ctx.scalar(0, INT64)] + carry + ys, cond, body)[1:]
    results, filled = list(out[:nc]), dict(zip(looped, out[nc:]))
    for k, a in enumerate(p.y_avals):
        if k in fixed:
            value = ctx.astype(ctx.asvalue(fixed[k]), a.dtype)
            filled[k] = ctx.broadcast_in_dim(value, (n,) + a.shape, list(range(1, 1 + value.ndim)))
        results.append(filled[k])
    return tuple(results)


registry.register_translation_rule(scan_p, _scan_rule)


class _ScanSpec(Opaque):
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
    call's tangent and gradient keep its dtype.

    Its methods run the scans of the call's derivatives (`scan`, `traced_scan`,
    `tangent_scan`): the residual planner (residuals.py) reaches scan's implementation
    through the spec it is given, so that it need not import this module."""

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
        return scan_flat(body, carry, xs, self.length, reverse, self.index_dtype, labels, what, residuals)

    def traced_scan(self, body, carry, xs):
        """The traced path (one scan equation) with this call's length, direction, index and labels."""
        return _scan_traced(body, carry, xs, self.length, self.reverse, self.index_dtype, self.labels, self.what)

    def tangent_scan(self, step, carry0, xs, given, dc, dx, extra, d_extra, t_extra, wide):
        """Both scan JVPs' loop (_scan_jvp, residuals.plan_jvp): one scan over (primal, tangent)
        pairs whose step runs `step(i, carry, x, extra)` -> (new carry, ys) under make_jvp,
        differentiated in the carry leaves dc, the xs leaves dx and the `extra` operands
        d_extra (tangents t_extra). Returns {output index: tangent} for the carry and the
        float ys."""
        nc, nx = self.n_carry, self.n_xs
        tc0 = [astype(given[j], like(carry0[j], wide)) if j in given else zeros(carry0[j], like(carry0[j], wide))
               for j in dc]
        tx = [astype(given[nc + j], like(xs[j], wide)) for j in dx]
        dy = []  # the float ys, known once the step has been traced

        def body(i, state, inp):
            c, tc = state[:nc], state[nc:]
            x, txi = inp[:nx], inp[nx:]

            def f(full):
                new_c, y = step(i, full[:nc], full[nc:nc + nx], full[nc + nx:])
                return list(new_c) + list(y)

            diff = dc + [nc + j for j in dx] + [nc + nx + j for j in d_extra]
            outs, touts = call_jvp(f, list(c) + list(x) + list(extra), diff, list(tc) + list(txi) + list(t_extra))
            new_c, y = outs[:nc], outs[nc:]
            dy[:] = [j for j in range(len(y)) if is_float(y[j])]
            t_c = [astype(touts[j], like(c[j], wide)) for j in dc]
            t_y = [astype(touts[nc + j], like(y[j], wide)) for j in dy]
            return list(new_c) + t_c, list(y) + t_y

        labels = self.labels + [f"tangent of {self.labels[j]}" for j in dc]
        state, ys = self.scan(body, list(carry0) + tc0, list(xs) + tx, self.reverse, labels, self.what)
        n_ys = len(ys) - len(dy)
        tangents = {j: state[nc + k] for k, j in enumerate(dc)}
        tangents.update({nc + j: ys[n_ys + k] for k, j in enumerate(dy)})
        return tangents


def _scan_raw(spec, *args):
    carry, xs, ext = spec.split(args)
    if spec.levels:
        plan = plan_scan(spec, carry, xs, ext)
        if plan is not None and spec.levels > 1 and spec.n_carry + plan.n_y == 1:
            out = plan.stages[0].fwd_outs[0]
            dtype = out.aval.dtype if isinstance(out, Var) else np.result_type(out)
            if dtype.kind in "fc" and dtype not in (np.dtype(np.float64), np.dtype(np.complex128)):
                plan = None  # see _ScanSpec: keep a bare result, whose cotangent may be wider
        if plan is not None:
            spec.plan = plan
            spec.n_visible = spec.n_carry + plan.n_y
            outs = plan_forward(plan, spec, carry, xs, flatten_items(ext)[0])
            if spec.hidden:
                spec.saved = outs[spec.n_visible:]
                outs = outs[:spec.n_visible]
            return pack(outs)
    c, ys = spec.traced_scan(lambda i, c, x: spec.body(ext, i, c, x), carry, xs)
    spec.n_visible = len(c) + len(ys)
    return pack(c + ys)


_scan_ad = primitive(_scan_raw)
registry.register_trace_rule(_scan_raw, _scan_raw)


def _scan_vjp(argnums, ans, args, kwargs):
    """Reverse scan of the body's VJP. With a plan, the backward pass reads the residuals the
    forward pass saved (plan_vjp). Without one (the recomputing scheme) the forward carries
    are recomputed by a scan that stacks them, and each backward step re-runs the body under
    make_vjp."""
    spec = args[0]
    if spec.plan is not None:
        return plan_vjp(argnums, ans, args)
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = as_list(ans)
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    dc = [j for j in range(nc) if is_float(carry0[j])]
    dx = [j for j in range(nx) if is_float(xs[j])]
    de = [j for j in range(len(ext_leaves)) if is_float(ext_leaves[j])]
    dy = [j for j in range(len(ans) - nc) if is_float(ans[nc + j])]

    def vjp(g):
        g = as_list(g)
        wide = incoming_dtype([g[j] for j in dc] + [g[nc + j] for j in dy])

        def forward(i, c, x):
            return spec.body(ext, i, c, x)[0], list(c)

        _, carries = spec.scan(forward, carry0, xs, spec.reverse, spec.labels, spec.what)

        def backward(i, state, inp):
            ct_c, acc = state[:len(dc)], state[len(dc):]
            c, x, ct_y = inp[:nc], inp[nc:nc + nx], inp[nc + nx:]

            def f(full):
                e = unflatten_items(ext_trees, offsets, full[nc + nx:])
                new_c, y = spec.body(e, i, full[:nc], full[nc:nc + nx])
                return list(new_c) + list(y)

            grads = call_vjp(f, list(c) + list(x) + ext_leaves, dc + [nc + j for j in dx] + [nc + nx + j for j in de],
                             dc + [nc + j for j in dy], list(ct_c) + list(ct_y))
            gc = [astype(grads[k], like(c[j], wide)) for k, j in enumerate(dc)]
            gx = [astype(grads[len(dc) + k], like(x[j], wide)) for k, j in enumerate(dx)]
            ge = [a + astype(grads[len(dc) + len(dx) + k], like(ext_leaves[j], wide)) for k, (a, j) in
                  enumerate(zip(acc, de))]
            return gc + ge, gx

        init = [astype(g[j], like(carry0[j], wide)) for j in dc]
        init += [zeros(ext_leaves[j], like(ext_leaves[j], wide)) for j in de]
        ct_ys = [astype(g[nc + j], like(ans[nc + j], wide)) for j in dy]
        labels = [f"cotangent of {spec.labels[j]}" for j in dc] + [f"cotangent of closed-over value {j}" for j in de]
        state, ct_xs = spec.scan(backward, init, list(carries) + xs + ct_ys, not spec.reverse, labels,
                                 f"{spec.what} (backward pass)")
        grads = {j: state[k] for k, j in enumerate(dc)}
        grads.update({nc + j: ct_xs[k] for k, j in enumerate(dx)})
        ext_grads = item_grads(ext_trees, offsets, ext_leaves, {j: state[len(dc) + k] for k, j in enumerate(de)})
        grads.update({nc + nx + m: gr for m, gr in enumerate(ext_grads)})
        return select_grads(args, argnums, 1, grads)

    return vjp


def _scan_jvp(argnums, gs, ans, args, kwargs):
    """A scan over (primal, tangent) pairs: each step runs the body under make_jvp."""
    spec = args[0]
    if spec.plan is not None:
        return plan_jvp(argnums, gs, ans, args)
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = as_list(ans)
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    dc = [j for j in range(nc) if is_float(carry0[j])]
    dx = [j for j in range(nx) if nc + j in given and is_float(xs[j])]
    wide = incoming_dtype(gs)
    de, te = ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc + nx, wide)

    def step(i, c, x, e_leaves):
        return spec.body(unflatten_items(ext_trees, offsets, e_leaves), i, c, x)
    tangents = spec.tangent_scan(step, carry0, xs, given, dc, dx, ext_leaves, de, te, wide)
    return pack([tangents[j] if j in tangents else zeros(ans[j]) for j in range(len(ans))])


defvjp_argnums(_scan_ad, _scan_vjp)
defjvp_argnums(_scan_ad, _scan_jvp)


# Replaying a scan equation that meets autograd boxes (replay.py): a scan again, whose body
# replays the equation's sub-graph.
def _graph_step(graph, consts, n_carry, i, carry, x):
    outs = eval_graph(graph, [i] + list(carry) + list(x), consts)
    return outs[:n_carry], outs[n_carry:]


def _replay_scan(args, kwargs):
    p = args[0]
    nc, nx = p.n_carry, p.n_xs
    carry, xs, consts = list(args[1:1 + nc]), list(args[1 + nc:1 + nc + nx]), list(args[1 + nc + nx:])
    index_dtype = None if p.index_aval.weak_type else p.index_aval.dtype
    body = functools.partial(_graph_step, p.graphs[0], consts, nc)
    c, ys = scan_flat(body, carry, xs, p.length, p.reverse, index_dtype, [f"carry[{j}]" for j in range(nc)],
                      "scan's f")
    return tuple(c + ys)


registry.register_replay(scan_p, _replay_scan)


def _numpy_scan(eqn, prepare):
    """The numpy tier's run of a scan equation (registry's `numpy` face): its body's run by
    numpy, step by step, on numpy values; each step's per-step inputs read at its index
    and its per-step outputs stacked, as plain autograd's unrolled loop computes them (a loop
    rolled from one: rolling.py)."""
    p = eqn.args[0]
    graph = p.graphs[0]
    body = prepare(graph)
    if body is None:
        return None
    nc, nx, n = p.n_carry, p.n_xs, p.length
    index = int if p.index_aval.weak_type else p.index_aval.dtype.type
    # a per-step Python number (a loop's `1.0 + 0.1 * t`, rolled: stacked) is one again, weak as it was
    # (NEP 50: float32 times np.float64 is float64, times a Python float float32)
    weak = [v.aval.weak_type for v in graph.invars[1 + nc:1 + nc + nx]]

    def run(params, *operands):
        carry, xs, consts = list(operands[:nc]), operands[nc:nc + nx], list(operands[nc + nx:])
        steps = []
        for i in (range(n - 1, -1, -1) if p.reverse else range(n)):
            outs = body([index(i)] + carry + [x[i].item() if w else x[i] for x, w in zip(xs, weak)] + consts)
            carry = outs[:nc]
            steps.append(outs[nc:])
        if p.reverse:
            steps.reverse()
        ys = [np.stack([step[j] for step in steps]) if n else np.zeros((0,) + a.shape, a.dtype)
              for j, a in enumerate(p.y_avals)]
        return tuple(carry + ys)
    return run


registry.register_numpy(scan_p, _numpy_scan)
