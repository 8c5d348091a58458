"""scipy.linalg.cho_factor and sqrtm as trace rules over primitives of rules/linalg.py,
and autograd.numpy.linalg's module globals patched while tracing.

cho_factor returns a tuple (factor, lower) whose second item is a Python bool; its trace
rule binds only the factor (`cho_factor_matrix`). sqrtm's binds `sqrtm_matrix` and adds a
guard where scipy would change the result's dtype on the data. Both are registered once
scipy.linalg is imported (registry.when_imported).
"""
import numpy as np
from autograd.numpy import linalg as _autograd_linalg
from autograd.numpy import numpy_wrapper as _anp
from autograd.tracer import getval

from .. import registry, tracing
from ..registry import traces, when_imported
from ..rules.linalg import cho_factor_matrix, sqrtm_matrix


def _cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    return tracing.bind(cho_factor_matrix, (a,), {"lower": lower}), lower


def _sqrtm(A, disp=np._NoValue, blocksize=np._NoValue):
    """scipy returns a complex root exactly where a real matrix has a negative real eigenvalue,
    a dtype the data decide; the compiled root is real (NaN there), so the program checks
    that the root is finite and otherwise runs the call plainly (scipy's complex answer)."""
    out = tracing.bind(sqrtm_matrix, (A,), {"disp": disp, "blocksize": blocksize})
    if out.dtype.kind == "f":
        finite_in = np.all(np.isfinite(A))
        tracing.add_guard(np.logical_or(np.all(np.isfinite(out)), np.logical_not(finite_in)),
                          "scipy.linalg.sqrtm of a real matrix with a negative real eigenvalue is complex")
    return out


@when_imported("scipy.linalg")
def _register(linalg):
    traces(linalg.cho_factor)(_cho_factor)
    traces(linalg.sqrtm)(_sqrtm)


# ----- autograd's VJPs that look at data -----------------------------------------------------
def _is_traced_zeros(t):
    """Whether the traced array is a literal zeros made by the trace (autograd's vspace
    zeros for an unused output, np.zeros_like)."""
    for eqn in reversed(t.owner.eqns):
        if t.graph_var in eqn.outvars:
            if eqn.prim is np.full:
                fill = eqn.args[1] if len(eqn.args) > 1 else eqn.kwargs.get("fill_value")
                return isinstance(fill, (int, float, complex, np.number, np.ndarray)) and np.all(np.asarray(fill) == 0)
            return eqn.prim is np.zeros_like
    return False


class _LinalgNamespace:
    """autograd.numpy.linalg's `anp` while tracing. eigh's VJP asks `if anp.any(vg):`
    (is the eigenvector cotangent nonzero) to skip a term that is NaN for repeated
    eigenvalues. On a traced cotangent, answer from how it was made: autograd's zeros for
    an unused output are a traced `np.full(shape, 0)`; anything else counts as nonzero."""

    def __getattr__(self, name):
        return getattr(_anp, name)

    @staticmethod
    def any(a, *args, **kwargs):
        value = getval(a)
        if type(value) is tracing.Tracer and not args and not kwargs:
            return not _is_traced_zeros(value)
        return _anp.any(a, *args, **kwargs)


registry.register_module_patch(_autograd_linalg, "anp", _LinalgNamespace())
