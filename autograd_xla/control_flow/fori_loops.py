"""fori_loop: a scan (scans.py) when its bounds are known at trace time, reverse- and
forward-mode differentiable; a while_loop (while_loops.py) over (index, carry) when they
are traced.
"""
import numpy as np
from autograd.tracer import getval

from .. import tracing, tree
from ..tracing import Tracer
from .common import check_structure, describe, dtype_of, is_weak, leaf_labels
from .scans import scan_flat
from .while_loops import while_flat


def fori_loop(lower, upper, body_fun, init_val):
    """`for i in range(lower, upper): val = body_fun(i, val)`; returns the final val.

    With bounds known at trace time (Python or numpy ints) this is a scan: reverse- and
    forward-mode differentiable. Traced bounds make it a while_loop (forward mode only).
    """
    leaves, treedef = tree.flatten(init_val)
    labels = leaf_labels("carry", treedef)
    lo, hi = getval(lower), getval(upper)
    for b in (lo, hi):
        if isinstance(b, bool) or np.shape(b) != () or dtype_of(b).kind not in "iu":
            raise TypeError(f"fori_loop: lower and upper must be integer scalars, got {describe(b)}")

    def step(i, carry):
        out_leaves, out_tree = tree.flatten(body_fun(i, tree.unflatten(treedef, carry)))
        check_structure(out_tree, treedef, "fori_loop's body_fun")
        return out_leaves

    if type(lo) is not Tracer and type(hi) is not Tracer:
        weak = type(lo) is int and type(hi) is int
        index_dtype = None if weak else tracing.result_type(lo, hi)
        start = int(lo)

        def body(k, carry, _):
            return step(k + start if start else k, carry), []

        carry, _ = scan_flat(body, leaves, [], max(int(hi) - start, 0), False, index_dtype, labels,
                             "fori_loop's body_fun")
        return tree.unflatten(treedef, carry)

    dtype = tracing.result_type(lo, hi)
    weak = all(is_weak(b) for b in (lo, hi))
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

    out = while_flat(cond, body, [start] + leaves, ["i"] + labels, [weak] + [False] * len(leaves), reverse_error,
                     "fori_loop")
    return tree.unflatten(treedef, out[1:])
