"""scipy.special functions written as compositions of others, and autograd's derivatives of
logsumexp computed from its forward pass's terms.

multigammaln is a sum of gammaln terms whose count is its static argument d (scipy's own
code makes an array of `a` with np.asarray, to check its values, which traced values cannot
do). It is registered once scipy.special is imported (registry.when_imported).

autograd's VJP and JVP of logsumexp take exp(x - ans) anew. Inside a loop that costs a
second exponential of every term in each step, where the forward pass has just computed
exp(x - max): the HMM gradient of the paper's Table 1 ran at 1.10-1.29x jax.jit's time for
it (0.90x with one exponential). While a trace is active, both derivatives (module patches
of the `vjps_dict` and `jvps_dict` cells of autograd's `defvjp`/`defjvp` closures) compute
the same formula with `logsumexp_softmax`, a primitive whose rule (rules/special.py) divides
the forward pass's terms by their sum. Its own derivatives are those of exp(x - ans), so
higher orders see autograd's graph. Calls the rule does not cover (weights `b`, 0-d, empty
or non-float inputs, plain autograd outside a trace) use autograd's makers as they are.
"""
import operator

import autograd.numpy as anp
import numpy as np
from autograd.core import primitive_jvps, primitive_vjps
from autograd.extend import defjvp, defvjp, primitive
from autograd.numpy.numpy_vjps import repeat_to_match_shape
from autograd.tracer import getval

from .. import registry
from ..context import kept_shape, normalize_axes
from ..registry import LazyModule, traces, when_imported
from ..rules.special import logsumexp_softmax as softmax_raw
from ..tracing import Tracer

sc = LazyModule("scipy.special")


def _multigammaln(a, d):
    """log of the multivariate gamma function, as scipy sums it: a constant plus
    gammaln(a - j/2) for j < d. scipy's check a > (d - 1)/2 needs data and is skipped."""
    d = operator.index(d)  # a traced d needs its value: the argument it came from becomes static
    total = sc.gammaln(a)
    for j in range(2, d + 1):
        total = total + sc.gammaln(a - (j - 1.0) / 2)
    return (d * (d - 1) * 0.25) * np.log(np.pi) + total


@when_imported("scipy.special")
def _register(special):
    traces(special.multigammaln)(_multigammaln)


# ----- logsumexp's derivatives from the forward pass's terms -----------------------------------
logsumexp_softmax = primitive(softmax_raw)


def _kept(x, axis, t):
    """`t`, shaped as logsumexp's answer, with the reduced axes back as ones."""
    shape = getval(x).shape
    return anp.reshape(t, kept_shape(shape, normalize_axes(axis, len(shape))))


defvjp(logsumexp_softmax,
       lambda y, x, ans, axis=None, keepdims=False: lambda g: g * y,
       lambda y, x, ans, axis=None, keepdims=False: lambda g: -anp.sum(g * y, axis=axis, keepdims=keepdims))
defjvp(logsumexp_softmax,
       lambda g, y, x, ans, axis=None, keepdims=False: g * y,
       lambda g, y, x, ans, axis=None, keepdims=False: -_kept(x, axis, g) * y)


def _covered(x, b):
    """Whether logsumexp's rule computes exp(x - ans) from its terms here: a traced float
    array with elements and no weights."""
    v = getval(x)
    return (type(v) is Tracer and v.ndim > 0 and v.size > 0 and v.dtype.kind == "f"
            and isinstance(b, (int, float)) and b == 1)


def _vjp_maker(autograd_maker):
    def make_vjp(ans, x, axis=None, b=1.0, keepdims=False):
        if not _covered(x, b):
            return autograd_maker(ans, x, axis=axis, b=b, keepdims=keepdims)
        v = getval(x)

        def vjp(g):  # autograd's formula, g repeated times exp(x - ans)
            g_repeated, _ = repeat_to_match_shape(g, v.shape, v.dtype, axis, keepdims)
            return g_repeated * logsumexp_softmax(x, ans, axis=axis, keepdims=keepdims)
        return vjp
    return make_vjp


def _jvp_maker(autograd_jvp):
    def jvp(g, ans, x, axis=None, b=1.0, keepdims=False):
        if not _covered(x, b):
            return autograd_jvp(g, ans, x, axis=axis, b=b, keepdims=keepdims)
        return anp.sum(g * logsumexp_softmax(x, ans, axis=axis, keepdims=keepdims), axis=axis, keepdims=keepdims)
    return jvp


def _closure_cell(fn, name):
    try:
        return fn.__closure__[fn.__code__.co_freevars.index(name)]
    except (ValueError, TypeError):
        raise RuntimeError(f"autograd's defvjp/defjvp changed: no '{name}' closure cell "
                           "(autograd_xla supports autograd 1.9.x)") from None


@when_imported("autograd.scipy.special")
def _register_logsumexp(special):
    for table, name, maker in ((primitive_vjps, "vjps_dict", _vjp_maker), (primitive_jvps, "jvps_dict", _jvp_maker)):
        cell = _closure_cell(table[special.logsumexp], name)
        registry.register_module_patch(cell, "cell_contents", {0: maker(cell.cell_contents[0])})
