"""scan: reverse mode with saved residuals. The planner (`plan_scan`: joint graphs of a
scan's body and its VJP, split by partial evaluation into `_Stage`s, gathered in a
`_ScanPlan`), the primitive's forward pass under a plan (`plan_forward`), and its VJP and
JVP (`plan_vjp`, `plan_jvp`).

Every function here takes the scan call's spec (scans.py's `_ScanSpec`) and runs scans
through its methods (`spec.scan`, `spec.traced_scan`, `spec.tangent_scan`), so that this
module sits below scans.py and never imports it.
"""
import functools
import warnings
import weakref

import numpy as np
from autograd import builtins as ag_builtins
from autograd.core import make_vjp
from autograd.tracer import box_types, getval

from .. import tracing
from ..core import Aval
from ..partial_eval import PartialEval, cse
from ..tracing import Tracer
from .common import (INT64, PY_SCALARS, Opaque, as_list, astype, aval_of, call_jvp, call_vjp, check_leaf, dtype_of,
                     ext_tangents, flatten_items, hidden_box_error, incoming_dtype, is_float, is_weak, item_grads,
                     like, pack, select_grads, unflatten_items, zeros)
from .replay import read, replay_eqns, replayable, unbox


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
#    residuals (and hoisted values) are extra outputs that `scans.scan_flat` hides from its
#    caller, so the value is computed once.
# 4. The VJP is one reverse scan of the unknown step over (residuals, cotangents).
#
# Both steps run as loop bodies by replaying their equations (replay_eqns), differentiably, so
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
MAX_STAGES = 2


class _NoPlan(Exception):
    pass


class _Stage(Opaque):
    """One joint graph split into hoisted / known-step / unknown-step equations.

    Its inputs are (i, carry[n_c], x[n_x], p[n_p], cotangents): p are the stage's invariant
    operands (the closed-over leaves; for stage 2 also stage 1's hoisted values). Its
    outputs are the new carry, `n_out` per-step outputs (y; for stage 2 also stage 1's
    residuals), then the gradients for carry[dc], x[dx] and p[dp] in the dtypes
    `like(operand, wide)`. The cotangent inputs are for carry[dc] and outs[dout].
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
        replay_eqns(self.hoist_eqns, env)
        return [read(env, v) for v in self.h_vars]

    def known(self, P, h, i, c, x):
        """One forward step: (new carry, outs, residuals)."""
        env = self._env(P, h)
        env[self.i_var] = i
        env.update(zip(self.c_vars, c))
        env.update(zip(self.x_vars, x))
        replay_eqns(self.known_eqns, env)
        fwd = [read(env, v) for v in self.fwd_outs]
        return fwd[:self.n_c], fwd[self.n_c:], [env[v] for v in self.res_vars]

    def unknown(self, P, h, i, x_used, res, cts):
        """One backward step: the gradients for carry[dc], x[dx] and P[dp]."""
        env = self._env(P, h)
        env[self.i_var] = i
        env.update(zip([self.x_vars[j] for j in self.x_used], x_used))
        env.update(zip(self.res_vars, res))
        env.update(zip(self.ct_vars, cts))
        replay_eqns(self.unknown_eqns, env)
        return [read(env, v) for v in self.grad_outs]


def _own(value, level, what):
    """A forward output of the joint function, unboxed from its own make_vjp."""
    if type(value) in box_types and value._trace == level:
        value = value._value
    if type(value) in box_types:
        raise hidden_box_error(what)
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
                check_leaf(Aval(np.shape(v), dtype_of(v)), is_weak(o), want, what, label)
            new_c = [astype(o, a.dtype) for o, a in zip(new_c, c_avals)]
            # outputs the differentiated leaves reach: a constant's cotangent (a Python 0.0 stacked
            # as float64 ys) flows nowhere, and must not widen a float32 loop's gradients
            dout = [j for j, o in enumerate(outs) if is_float(o) and type(o) in box_types and o._trace == d._trace]
            info.update(level=d._trace, fwd=new_c + outs, dout=dout)
            return ag_builtins.list([new_c[j] for j in dc] + [outs[j] for j in dout])

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Output seems independent of input": zeros are right
            vjp, _ = make_vjp(restricted, [leaves[j] for j in diff])
            fwd = [_own(o, info["level"], what) for o in info["fwd"]]
            float_outs = [fwd[j] for j in dc] + [fwd[nc + j] for j in info["dout"]]
            if not float_outs:
                raise _NoPlan("no float outputs")
            wide = info["wide"] = np.result_type(*[dtype_of(o) for o in float_outs])
            trace = tracing.current_trace()
            cts = [trace.new_arg(Aval(np.shape(getval(o)), like(o, wide)), f"cotangent[{k}]")
                   for k, o in enumerate(float_outs)]
            grads = vjp(list(cts))
        grads = [astype(grads[k], like(leaves[j], wide)) for k, j in enumerate(diff)]
        return fwd + grads

    names = ["i"] + list(labels) + [f"x[{j}]" for j in range(nx)] + [f"p[{j}]" for j in range(npar)]
    graph, _ = tracing.trace_function(joint, [index_aval] + c_avals + x_avals + p_avals, names,
                                      parent=tracing.current_trace())
    graph = cse(graph)
    if not replayable(graph.eqns):
        raise _NoPlan("an equation cannot be replayed under autograd")
    n_out = len(graph.outvars) - nc - len(diff)
    return _Stage(graph, nc, nx, npar, dc, dx, dp, info["dout"], n_out, info["wide"])


class _ScanPlan(Opaque):
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
            if any(is_float(g[q]) and not _is_zero(g[q]) for q in self.own[k - 1]):
                return k
        return 0


def plan_scan(spec, carry, xs, ext):
    """The _ScanPlan for this call, or None to keep the recomputing scheme."""
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    try:
        c_avals = [aval_of(c) for c in carry]
        x_avals = [Aval(aval_of(x).shape[1:], aval_of(x).dtype) for x in xs]
        p_avals = [aval_of(e, keep_weak=True) for e in ext_leaves]
        index_aval = Aval((), spec.index_dtype or INT64, weak_type=spec.index_dtype is None)
        dp = [j for j, a in enumerate(p_avals) if a.dtype.kind in "fc"]

        def step(i, c, x, p):
            return spec.body(unflatten_items(ext_trees, offsets, p), i, c, x)

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


def plan_forward(plan, spec, carry, xs, p):
    """The primitive's computation: one scan of the last stage's known step."""
    d = len(plan.stages)
    P, hs = _hoists(plan, p, d)
    last = plan.stages[-1]
    body = functools.partial(_known_body, last, plan.step_select, P[:len(P) - len(hs[-1])], hs[-1])
    c, ys = spec.traced_scan(body, carry, xs)
    return c + ys + [v for h in hs for v in h]


def _plan_math(plan, spec, carry, xs, p, residuals):
    """The same outputs as plan_forward, as differentiable code (for JVPs, and for VJPs the
    plan has no residuals for): the scan goes through scan_flat again."""
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
    v = unbox(x)
    if isinstance(v, (np.ndarray, np.generic) + PY_SCALARS):
        return v is x and not np.any(v)
    if type(v) is not Tracer:
        return False
    x, trace = v, v.owner
    entry = _PRODUCERS.get(trace)
    if entry is None:
        entry = _PRODUCERS[trace] = [0, {}]
    for eqn in trace.eqns[entry[0]:]:
        if eqn.prim is np.full:
            for v in eqn.outvars:
                entry[1][v] = eqn
    entry[0] = len(trace.eqns)
    eqn = entry[1].get(x.graph_var)
    return eqn is not None and len(eqn.args) > 1 and type(eqn.args[1]) in PY_SCALARS and eqn.args[1] == 0


def plan_vjp(argnums, ans, args):
    spec = args[0]
    plan = spec.plan
    carry0, xs, ext = spec.split(args[1:])
    ans = as_list(ans) + spec.saved
    ext_leaves, ext_trees, offsets = flatten_items(ext)

    def vjp(g):
        g = as_list(g)
        depth = 0 if spec.hidden else plan.depth(g)
        grads = None
        if depth < len(plan.stages):
            grads = _stage_vjp(plan, depth, spec, carry0, xs, ext_leaves, ans, g)
        if grads is None:
            grads = _recompute_vjp(plan, spec, carry0, xs, ext_leaves, ans, g)
        nc, nx = spec.n_carry, spec.n_xs
        out = {j: grads[j] for j in range(nc + nx) if j in grads}
        ext_grads = item_grads(ext_trees, offsets, ext_leaves,
                               {j - nc - nx: gr for j, gr in grads.items() if j >= nc + nx})
        out.update({nc + nx + m: gr for m, gr in enumerate(ext_grads)})
        return select_grads(args, argnums, 1, out)

    return vjp


def _stage_vjp(plan, depth, spec, carry0, xs, p, ans, g):
    """One reverse scan of stage depth+1's unknown step; None if the cotangents' dtypes are not
    the ones its joint graph was traced for. Returns {operand leaf index: gradient}."""
    st = plan.stages[depth]
    nc, nx, n_p = spec.n_carry, spec.n_xs, len(p)
    out_pos = plan.out_pos[depth]  # y, then residuals of the stages below
    ct_pos = st.dc + [out_pos[j] for j in st.dout]
    if incoming_dtype([g[q] for q in ct_pos]) != st.wide:
        return None
    P, hs = list(p), []
    for k in range(depth):
        hs.append([ans[q] for q in plan.hoist_pos[k]])
        P = P + hs[-1]
    h = [ans[q] for q in plan.hoist_pos[depth]]
    res = [ans[q] for q in plan.res_pos[depth]]
    ndc, ndx = len(st.dc), len(st.dx)
    ct_c = [astype(g[j], like(ans[j], st.wide)) for j in st.dc]
    ct_outs = [astype(g[out_pos[j]], like(ans[out_pos[j]], st.wide)) for j in st.dout]
    acc0 = [zeros(P[j], like(P[j], st.wide)) for j in st.dp]
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
        dh = [k for k, v in enumerate(flat_h) if is_float(v)]
        dpp = [j for j in range(n_p) if is_float(p[j])]
        if dh and dpp:
            cts = []
            for k in dh:
                ct = astype(g[pos[k]], like(flat_h[k], st.wide))
                if n_p + k in acc:
                    ct = ct + acc[n_p + k]
                cts.append(ct)
            through = call_vjp(lambda full: _hoists(plan, full, depth)[0][n_p:], list(p), dpp, dh, cts)
            for j, gr in zip(dpp, through):
                gr = astype(gr, like(p[j], st.wide))
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
    diff = [j for j, v in enumerate(leaves) if is_float(v) and type(getval(v)) is Tracer]
    outs = [j for j in range(len(g)) if is_float(ans[j])]
    wide = incoming_dtype([g[j] for j in outs])
    cts = [astype(g[j], like(ans[j], wide)) for j in outs]

    def f(full):
        return _plan_math(plan, spec, full[:nc], full[nc:nc + nx], full[nc + nx:], residuals=False)

    grads = call_vjp(f, leaves, diff, outs, cts)
    return {j: astype(gr, like(leaves[j], wide)) for j, gr in zip(diff, grads)}


def plan_jvp(argnums, gs, ans, args):
    """Tangents of the primitive's outputs (residuals included unless hidden): the hoisted
    values under make_jvp, then one scan over (primal, tangent) pairs whose steps run the
    last stage's known step under make_jvp."""
    spec = args[0]
    plan = spec.plan
    carry0, xs, ext = spec.split(args[1:])
    nc, nx = spec.n_carry, spec.n_xs
    ans = as_list(ans)
    given = {a - 1: g for a, g in zip(argnums, gs)}
    ext_leaves, ext_trees, offsets = flatten_items(ext)
    n_p, d = len(ext_leaves), len(plan.stages)
    wide = incoming_dtype(gs)
    dc = [j for j in range(nc) if is_float(carry0[j])]
    dx = [j for j in range(nx) if nc + j in given and is_float(xs[j])]
    de, te = ext_tangents(ext, ext_leaves, ext_trees, offsets, given, nc + nx, wide)
    P, tP = call_jvp(lambda p: _hoists(plan, p, d)[0], ext_leaves, de, te)
    dP = de + ([j for j in range(n_p, len(P)) if is_float(P[j])] if de else [])
    tP = [astype(tP[j], like(P[j], wide)) for j in dP]
    n_last = len(P) - len(plan.stages[-1].h_vars)  # the last stage's P; its hoisted values follow
    last = plan.stages[-1]

    def step(i, c, x, Pf):
        return _known_body(last, plan.step_select, Pf[:n_last], Pf[n_last:], i, c, x)
    tangents = spec.tangent_scan(step, carry0, xs, given, dc, dx, P, dP, tP, wide)
    hoisted_tangents = dict(zip(dP, tP))
    for j, q in zip(range(n_p, len(P)), [q for pos in plan.hoist_pos for q in pos]):
        if q < len(ans) and j in hoisted_tangents:
            tangents[q] = astype(hoisted_tangents[j], like(ans[q], wide))
    return pack([tangents[j] if j in tangents else zeros(ans[j]) for j in range(len(ans))])
