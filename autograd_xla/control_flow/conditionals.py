"""cond and switch: the user functions, the traced path (one `case_p` equation whose
branches are sub-graphs), its translation rule (`stablehlo.case`) and replay, and its
derivatives: a branch op over the branches' VJPs or JVPs.
"""
import functools

import numpy as np
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import getval, isbox

from .. import registry, tracing, tree
from ..core import Aval
from ..lowering import lower_subgraph
from ..tracing import Tracer
from .common import (ControlFlowPrimitive, Opaque, Params, alias, as_list, astype, aval_of, call_jvp, call_vjp,
                     captured_operands, cast_all, closure_convert, describe, dtype_of, ext_tangents, flatten_items,
                     incoming_dtype, is_float, item_grads, like, pack, select_grads, trace_body, unflatten_items,
                     unpack, zeros)
from .replay import graph_fn


def cond(pred, true_fun, false_fun, *operands):
    """`true_fun(*operands)` if pred else `false_fun(*operands)`, as one branch op when pred
    is traced. Both branches must return the same structure, shapes and dtypes."""
    p = getval(pred)
    if np.shape(p) != () or dtype_of(p).kind not in "biuf":
        raise TypeError(f"cond: pred must be a boolean or numeric scalar, got {describe(p)}")
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
    if np.shape(i) != () or dtype_of(i).kind not in "iu" or isinstance(i, bool):
        raise TypeError(f"switch: index must be an integer scalar, got {describe(i)}")
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
    converted, ext = closure_convert(*branches)
    if ext or any(isbox(x) for x in operands):
        spec = _CaseSpec(converted, len(operands), what)
        return unpack(_case_ad(spec, index, *operands, *ext))
    return _case_traced(index, branches, operands, what)


def _case_traced(index, branches, operands, what):
    avals = [aval_of(x, keep_weak=True) for x in operands]
    names = [f"operand[{j}]" for j in range(len(operands))]
    traced = [trace_body(lambda *a, b=b: b(list(a)), avals, names, f"{what} branch {k}")
              for k, b in enumerate(branches)]
    graphs = [g for g, _ in traced]
    out_avals = _join_branch_types([infos for _, infos in traced], what)
    params = Params(f"{what}({len(graphs)} branches)", graphs, n_ops=len(operands), in_avals=avals,
                    n_consts=[len(g.captured) for g in graphs], out_avals=out_avals)
    consts = [c for g in graphs for c in captured_operands(g)]
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
        return lambda b: cast_all(b, lower_subgraph(b, graph, [alias(o) for o in ops], cs), p.out_avals)

    results = [(a.shape, a.dtype) for a in p.out_avals]
    return tuple(ctx.case(idx, [branch(g, cs) for g, cs in zip(p.graphs, consts)], results))


registry.register_translation_rule(case_p, _case_rule)


class _CaseSpec(Opaque):
    __slots__ = ("branches", "n_ops", "what")

    def __init__(self, branches, n_ops, what):
        self.branches, self.n_ops, self.what = branches, n_ops, what


def _case_raw(spec, index, *args):
    ops, ext = list(args[:spec.n_ops]), args[spec.n_ops:]
    branches = [functools.partial(b, ext) for b in spec.branches]
    return pack(_case_traced(index, branches, ops, spec.what))


_case_ad = primitive(_case_raw)
registry.register_trace_rule(_case_raw, _case_raw)


def _case_vjp(argnums, ans, args, kwargs):
    """A branch op over the branches' VJPs, each giving gradients for every operand."""
    spec, index = args[0], args[1]
    n = spec.n_ops
    ops, ext = list(args[2:2 + n]), list(args[2 + n:])
    ans = as_list(ans)
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    do = [j for j in range(n) if is_float(ops[j])]
    de = [j for j in range(len(ext_leaves)) if is_float(ext_leaves[j])]
    dout = [j for j in range(len(ans)) if is_float(ans[j])]
    primal = ops + ext_leaves
    diff = do + [n + j for j in de]
    if not diff or not dout:
        return lambda g: select_grads(args, argnums, 2, {})

    def vjp(g):
        g = as_list(g)
        wide = incoming_dtype([g[j] for j in dout])
        cts = [astype(g[j], like(ans[j], wide)) for j in dout]

        def branch_vjp(branch):
            def run(leaves):
                p, ct = leaves[:len(primal)], leaves[len(primal):]

                def f(full):
                    return branch(unflatten_items(ext_trees, offsets, full[n:]), list(full[:n]))

                grads = call_vjp(f, p, diff, dout, ct)
                return [astype(gr, like(p[j], wide)) for gr, j in zip(grads, diff)]
            return run

        grads = _case_flat(index, [branch_vjp(b) for b in spec.branches], primal + cts, f"{spec.what} (VJP)")
        by_leaf = dict(zip(diff, grads))
        out = {j: by_leaf[j] for j in do}
        ext_grads = item_grads(ext_trees, offsets, ext_leaves, {j: by_leaf[n + j] for j in de})
        out.update({n + m: gr for m, gr in enumerate(ext_grads)})
        return select_grads(args, argnums, 2, out)

    return vjp


def _case_jvp(argnums, gs, ans, args, kwargs):
    """A branch op over the branches' JVPs."""
    spec, index = args[0], args[1]
    n = spec.n_ops
    ops, ext = list(args[2:2 + n]), list(args[2 + n:])
    ans = as_list(ans)
    given = {a - 2: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    do = [j for j in range(n) if j in given and is_float(ops[j])]
    wide = incoming_dtype(gs)
    de, te = ext_tangents(ext, ext_leaves, ext_trees, offsets, given, n, wide)
    dout = [j for j in range(len(ans)) if is_float(ans[j])]
    primal = ops + ext_leaves
    diff = do + [n + j for j in de]
    tangents = [astype(given[j], like(ops[j], wide)) for j in do] + te
    if not diff or not dout:
        return pack([zeros(a) for a in ans])

    def branch_jvp(branch):
        def run(leaves):
            p, t = leaves[:len(primal)], leaves[len(primal):]

            def f(full):
                return branch(unflatten_items(ext_trees, offsets, full[n:]), list(full[:n]))

            _, touts = call_jvp(f, p, diff, t)
            return [astype(touts[j], like(ans[j], wide)) for j in dout]
        return run

    outs = _case_flat(index, [branch_jvp(b) for b in spec.branches], primal + tangents, f"{spec.what} (JVP)")
    by_out = dict(zip(dout, outs))
    return pack([by_out[j] if j in by_out else zeros(ans[j]) for j in range(len(ans))])


defvjp_argnums(_case_ad, _case_vjp)
defjvp_argnums(_case_ad, _case_jvp)


# Replaying a case equation that meets autograd boxes (replay.py): a branch op again, whose
# branches replay the equation's sub-graphs.
def _replay_case(args, kwargs):
    p, index = args[0], args[1]
    ops, start, branches = list(args[2:2 + p.n_ops]), 2 + p.n_ops, []
    for graph, count in zip(p.graphs, p.n_consts):
        branches.append(functools.partial(graph_fn, graph, list(args[start:start + count])))
        start += count
    return tuple(_case_flat(index, branches, ops, "cond/switch"))


registry.register_replay(case_p, _replay_case)
