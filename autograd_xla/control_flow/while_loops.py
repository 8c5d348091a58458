"""while_loop: the user function, its Python and traced paths, the `while_p` primitive's
translation rule (`stablehlo.while`) and replay, and its forward-mode derivative (a
while_loop over (primal, tangent) pairs). Reverse mode raises: the trip count depends on
traced data.
"""
import functools

import numpy as np
from autograd.extend import defjvp_argnums, defvjp_argnums, primitive
from autograd.tracer import getval, isbox

from .. import registry, tracing, tree
from ..core import Aval
from ..lowering import lower_subgraph
from .common import (ControlFlowPrimitive, Opaque, Params, astype, aval_of, call_jvp, canonical, captured_operands,
                     cast_all, check_outputs, check_structure, closure_convert, conform, describe, dtype_of,
                     ext_tangents, flatten_items, incoming_dtype, is_float, leaf_labels, like, pack, python_mode,
                     trace_body, unflatten_items, unpack, zeros)
from .replay import eval_graph, graph_fn


def while_loop(cond_fun, body_fun, init_val):
    """Repeat `val = body_fun(val)` while `cond_fun(val)` is true; returns the final val.

    `val` is an array or a tuple/list/dict of arrays; body_fun must keep its structure,
    shapes and dtypes. Forward-mode differentiable (make_jvp); reverse mode needs a trip
    count known at trace time: use fori_loop with static bounds, or scan.
    """
    leaves, treedef = tree.flatten(init_val)
    labels = leaf_labels("carry", treedef)

    def cond_flat(carry):
        return cond_fun(tree.unflatten(treedef, carry))

    def body_flat(carry):
        out_leaves, out_tree = tree.flatten(body_fun(tree.unflatten(treedef, carry)))
        check_structure(out_tree, treedef, "while_loop's body_fun")
        return out_leaves

    return tree.unflatten(treedef, while_flat(cond_flat, body_flat, leaves, labels))


def while_flat(cond, body, carry, labels, weak=None, reverse_error=None, what="while_loop"):
    """while_loop on a flat list of carry leaves. `weak[k]` keeps leaf k weakly typed (a
    loop index from Python ints); `reverse_error()` is raised by reverse-mode AD."""
    if python_mode(carry):
        return _while_python(cond, body, carry, labels, what)
    (cond_c, body_c), ext = closure_convert(cond, body)
    if ext or any(isbox(x) for x in carry):
        spec = _WhileSpec(cond_c, body_c, len(carry), labels, weak, reverse_error, what)
        return unpack(_while_ad(spec, *carry, *ext))
    return _while_traced(cond, body, carry, labels, weak, what)


def _while_python(cond, body, carry, labels, what):
    carry = [canonical(c) for c in carry]
    avals = [aval_of(c) for c in carry]
    while bool(_scalar_pred(cond(carry), f"{what}'s cond_fun")):
        carry = conform(body(carry), avals, f"{what}'s body_fun", labels)
    return carry


def _scalar_pred(p, what):
    v = getval(p)
    if np.shape(v) != () or dtype_of(v).kind != "b":
        raise TypeError(f"{what} must return a boolean scalar, got {describe(v)}")
    return v


def _while_traced(cond, body, carry, labels, weak, what):
    avals = [aval_of(c) for c in carry]
    if weak:
        avals = [Aval(a.shape, a.dtype, weak_type=True) if w else a for a, w in zip(avals, weak)]
    names = list(labels)
    cgraph, (pred,) = trace_body(lambda *c: [cond(list(c))], avals, names, f"{what}'s cond_fun", strip_boxes=True)
    if pred[0].shape != () or pred[0].dtype.kind != "b":
        raise TypeError(f"{what}'s cond_fun must return a boolean scalar, got {pred[0]}")
    bgraph, outs = trace_body(lambda *c: body(list(c)), avals, names, f"{what}'s body_fun")
    check_outputs(outs, avals, f"{what}'s body_fun", labels)
    params = Params(f"while(cond: {len(cgraph.eqns)} eqns, body: {len(bgraph.eqns)} eqns)", [cgraph, bgraph],
                    n_carry=len(carry), n_cond=len(cgraph.captured), carry_avals=avals)
    out = tracing.bind(while_p, (params, *carry, *captured_operands(cgraph), *captured_operands(bgraph)), {})
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
        return cast_all(b, lower_subgraph(b, bgraph, c, bconsts), p.carry_avals)

    return tuple(ctx.while_loop(carry, cond, body))


registry.register_translation_rule(while_p, _while_rule)


class _WhileSpec(Opaque):
    __slots__ = ("cond", "body", "n_carry", "labels", "weak", "reverse_error", "what")

    def __init__(self, cond, body, n_carry, labels, weak, reverse_error, what):
        self.cond, self.body, self.n_carry, self.labels = cond, body, n_carry, labels
        self.weak, self.reverse_error, self.what = weak, reverse_error, what


def _while_raw(spec, *args):
    ext = args[spec.n_carry:]
    return pack(_while_traced(lambda c: spec.cond(ext, c), lambda c: spec.body(ext, c), list(args[:spec.n_carry]),
                              spec.labels, spec.weak, spec.what))


_while_ad = primitive(_while_raw)
registry.register_trace_rule(_while_raw, _while_raw)


def _while_vjp(argnums, ans, args, kwargs):
    spec = args[0]
    nc = spec.n_carry
    body_ext = set(spec.body.index)
    for a in argnums:
        j = a - 1
        if (j < nc and is_float(args[a])) or (j >= nc and j - nc in body_ext):
            raise (spec.reverse_error or _while_reverse_error)()
    # only the predicate saw the differentiated values: the result does not vary with them
    return lambda g: tuple(zeros(args[a]) for a in argnums)


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
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    dc = [j for j in range(nc) if is_float(carry[j])]
    wide = incoming_dtype(gs)
    de, te = ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc, wide)
    t0 = [astype(given[j], like(carry[j], wide)) if j in given else zeros(carry[j], like(carry[j], wide))
          for j in dc]

    def cond_j(state):
        return spec.cond(ext, state[:nc])

    def body_j(state):
        c, tc = state[:nc], state[nc:]

        def f(full):
            return spec.body(unflatten_items(ext_trees, offsets, full[nc:]), full[:nc])

        outs, touts = call_jvp(f, list(c) + ext_leaves, dc + [nc + j for j in de], list(tc) + te)
        return list(outs) + [astype(touts[j], like(c[j], wide)) for j in dc]

    labels = spec.labels + [f"tangent of {spec.labels[j]}" for j in dc]
    weak = (spec.weak or [False] * nc) + [False] * len(dc)
    state = while_flat(cond_j, body_j, carry + t0, labels, weak, spec.reverse_error, spec.what)
    tangents = {j: state[nc + k] for k, j in enumerate(dc)}
    return pack([tangents[j] if j in tangents else zeros(carry[j]) for j in range(nc)])


defvjp_argnums(_while_ad, _while_vjp)
defjvp_argnums(_while_ad, _while_jvp)


# Replaying a while equation that meets autograd boxes (replay.py): a while_loop again, whose
# cond and body replay the equation's sub-graphs.
def _graph_pred(graph, consts, args):
    return eval_graph(graph, list(args), consts)[0]


def _replay_while(args, kwargs):
    p = args[0]
    nc = p.n_carry
    carry = list(args[1:1 + nc])
    cconsts, bconsts = list(args[1 + nc:1 + nc + p.n_cond]), list(args[1 + nc + p.n_cond:])
    cgraph, bgraph = p.graphs
    cond = functools.partial(_graph_pred, cgraph, cconsts)
    body = functools.partial(graph_fn, bgraph, bconsts)
    weak = [a.weak_type for a in p.carry_avals]
    return tuple(while_flat(cond, body, carry, [f"carry[{j}]" for j in range(nc)], weak))


registry.register_replay(while_p, _replay_while)
