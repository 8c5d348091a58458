"""scipy.linalg.cho_factor and sqrtm as trace rules over primitives of rules/linalg.py,
expm by scaling and squaring, and autograd.numpy.linalg's module globals patched while
tracing.

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
from ..control_flow import while_loop
from ..registry import traces, when_imported
from ..rules.linalg import cho_factor_matrix, sqrtm_matrix, sqrtm_zero_pivots


def _cho_factor(a, lower=False, overwrite_a=False, check_finite=True):
    return tracing.bind(cho_factor_matrix, (a,), {"lower": lower}), lower


def _sqrtm(A, disp=np._NoValue, blocksize=np._NoValue):
    """scipy returns a complex root exactly where a real matrix has a negative real eigenvalue,
    a dtype the data decide; the compiled root is real (NaN there), so the program checks
    that the root is finite and otherwise runs the call plainly (scipy's complex answer).
    Where this scipy's root of a repeated zero eigenvalue is not the recurrence's
    (rules.linalg.sqrtm_zero_pivots), the compiled root is NaN there too, of any dtype."""
    out = tracing.bind(sqrtm_matrix, (A,), {"disp": disp, "blocksize": blocksize})
    pivots = not sqrtm_zero_pivots()
    if out.dtype.kind == "f" or pivots:
        finite_in = np.all(np.isfinite(A))
        tracing.add_guard(np.logical_or(np.all(np.isfinite(out)), np.logical_not(finite_in)),
                          "scipy.linalg.sqrtm of a real matrix with a negative real eigenvalue is complex"
                          if not pivots else "scipy.linalg.sqrtm of a matrix with a repeated zero eigenvalue, or of "
                          "a real matrix with a negative real eigenvalue (a complex root)")
    return out


#: expm's Padé approximants (Higham 2005, "The scaling and squaring method for the matrix
#: exponential revisited"): each degree's coefficients b_0..b_m, and the 1-norm up to which it
#: is accurate to the dtype's precision (theta_m; float32's from the same paper's single
#: precision table, where degree 7 is the last needed)
_PADE = {3: (120., 60., 12., 1.), 5: (30240., 15120., 3360., 420., 30., 1.),
         7: (17297280., 8648640., 1995840., 277200., 25200., 1512., 56., 1.),
         9: (17643225600., 8821612800., 2075673600., 302702400., 30270240., 2162160., 110880., 3960., 90., 1.),
         13: (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
              10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)}
_THETA = {8: ((3, 1.495585217958292e-2), (5, 2.539398330063230e-1), (7, 9.504178996162932e-1),
              (9, 2.097847961257068e0), (13, 5.371920351148152e0)),
          4: ((3, 4.258730016922831e-1), (5, 1.880152677804762e0), (7, 3.925724783138660e0))}


def _pade(A, m):
    """(U, V) of the degree-m Padé approximant, exp(A) ~ (V - U)^-1 (V + U)."""
    b = _PADE[m]
    eye = np.eye(A.shape[-1], dtype=A.dtype)
    powers = [eye, A @ A]
    while len(powers) < (m + 1) // 2 and m != 13:
        powers.append(powers[-1] @ powers[1])
    if m == 13:
        A2 = powers[1]
        A4 = A2 @ A2
        A6 = A4 @ A2
        u = A6 @ (b[13] * A6 + b[11] * A4 + b[9] * A2) + b[7] * A6 + b[5] * A4 + b[3] * A2 + b[1] * eye
        v = A6 @ (b[12] * A6 + b[10] * A4 + b[8] * A2) + b[6] * A6 + b[4] * A4 + b[2] * A2 + b[0] * eye
        return A @ u, v
    u = sum(b[2 * k + 1] * p for k, p in enumerate(powers))
    v = sum(b[2 * k] * p for k, p in enumerate(powers))
    return A @ u, v


def _expm(A):
    """scipy.linalg.expm by scaling and squaring (Higham 2005): per matrix of a batch, the
    lowest Padé degree accurate at its 1-norm, or degree 13 after dividing it by 2^s, then s
    squarings (a while_loop to the batch's largest s); a diagonal matrix's is the exponential
    of its diagonal, as scipy's. scipy picks degree and s from estimates of the norms of A's
    powers (Al-Mohy and Higham 2009) and corrects triangular matrices' diagonals while it
    squares: results agree with scipy's to a few units of the dtype's precision, not in their
    last bits."""
    A = A if isinstance(A, tracing.Tracer) else np.asarray(A)
    if A.size == 1 and A.ndim < 2:
        return np.reshape(np.exp(np.astype(A, np.result_type(A.dtype, np.float64))), (1, 1))
    if A.ndim < 2:
        raise np.linalg.LinAlgError("The input array must be at least two-dimensional")
    if A.shape[-1] != A.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    if min(A.shape) == 0:
        return np.zeros(A.shape, np.result_type(A.dtype, np.float32 if A.dtype == np.float16 else np.float64))
    if A.dtype.kind not in "fc":
        A = np.astype(A, np.float64)
    elif A.dtype == np.float16:
        A = np.astype(A, np.float32)
    if A.shape[-2:] == (1, 1):
        return np.exp(A)
    thetas = _THETA[8 if A.dtype in (np.float64, np.complex128) else 4]
    norm = np.max(np.sum(np.abs(A), axis=-2), axis=-1)[..., None, None]
    last, theta_last = thetas[-1]
    squarings = np.maximum(np.ceil(np.log2(norm / theta_last)), 0.0)
    scaled = A / np.astype(2.0 ** squarings, A.dtype)
    u, v = _pade(scaled, last)
    for m, theta in reversed(thetas[:-1]):
        small = norm <= theta
        um, vm = _pade(A, m)
        u, v = np.where(small, um, u), np.where(small, vm, v)
    R = np.linalg.solve(v - u, v + u)
    steps = np.astype(squarings, np.int32)

    def square(carry):
        i, R = carry
        return i + 1, np.where(i < steps, R @ R, R)
    _, R = while_loop(lambda carry: carry[0] < np.max(steps), square, (np.int32(0), R))
    n = A.shape[-1]
    off = np.abs(A) * (1.0 - np.eye(n))
    diagonal = np.all(np.reshape(off == 0, A.shape[:-2] + (n * n,)), axis=-1)[..., None, None]
    exp_diagonal = np.exp(np.diagonal(A, axis1=-2, axis2=-1))[..., None, :] * np.eye(n, dtype=A.dtype)
    return np.where(diagonal, exp_diagonal, R)


@when_imported("scipy.linalg")
def _register(linalg):
    traces(linalg.cho_factor)(_cho_factor)
    traces(linalg.sqrtm)(_sqrtm)
    traces(linalg.expm)(_expm)


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
