"""Patterns met in libraries built on autograd (benchmarks/libraries/: PennyLane, pymanopt,
lifelines, mici; and paragami, momi), each reduced to numpy and autograd alone: the jitted answer
is plain autograd's."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("absent", ["None", "types.ModuleType('jax')"])
def test_a_jax_entry_that_is_not_jax(absent):
    """A None under "jax" in sys.modules is how a test makes jax unimportable (and harnesses
    stand a module in for jax, as pymanopt's examples need); neither has set jaxlib's C++
    states, which jax's config sets when jax is imported: taken for jax, every call raised
    "ValueError: disable_jit_state is not set"."""
    code = f"""
import sys, types
sys.modules["jax"] = {absent}
import autograd.numpy as np
from autograd import grad
from autograd_xla import jit_ps
f = jit_ps(grad(lambda w: np.sum(np.tanh(w) ** 2)))
x = np.linspace(-1.0, 1.0, 5)
for _ in range(3):
    out = f(x)
assert np.allclose(out, 2 * np.tanh(x) / np.cosh(x) ** 2, rtol=1e-12, atol=0), out
assert f(x).dtype == np.float64
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")


def test_a_hessian_by_central_differences_of_gammainc():
    """autograd_gamma's pattern (lifelines' GeneralizedGamma fitters): scipy's gammainc as an
    autograd primitive whose derivative in `a` is a 5-point central difference (step ~6e-6 a).
    The Hessian divides gammainc's differences by the step once per order, so it agrees only
    where the compiled gammainc is scipy's bit for bit (rules/special.py's SCIPY_LOOPS, on the
    CPU): with an algorithm 3e-15 away it agreed to 4e-8, and lifelines' variance matrix to 3e-3."""
    import numpy as onp
    import scipy.special as sc

    import autograd.numpy as np
    from autograd import hessian
    from autograd.extend import defvjp, primitive
    from autograd.numpy.numpy_vjps import unbroadcast_f
    from autograd.scipy.special import gammaln
    from autograd_xla import jit_ps

    gammainc = primitive(sc.gammainc)
    step = onp.finfo(float).eps ** (1 / 3)

    def by_differences(ans, a, x):
        d = np.maximum(a * step, 1e-7)
        d = (a + d) - a
        return unbroadcast_f(a, lambda g: g * (-gammainc(a + 2 * d, x) + 8 * gammainc(a + d, x)
                                               - 8 * gammainc(a - d, x) + gammainc(a - 2 * d, x)) / (12 * d))
    defvjp(gammainc, by_differences,
           lambda ans, a, x: unbroadcast_f(x, lambda g: g * np.exp((a - 1) * np.log(x) - x - gammaln(a))))
    x = onp.linspace(0.5, 30.0, 40)

    def nll(p):
        return -np.sum(np.log(gammainc(np.exp(p[0]), np.exp(p[1]) * x)))
    p = onp.array([1.2, -0.3])
    plain = hessian(nll)(p)
    onp.testing.assert_allclose(jit_ps(hessian(nll), fallback="error")(p), plain, rtol=1e-10, atol=1e-10 * abs(plain).max())


def _module_level_loss(x, power):
    import autograd.numpy as np
    return np.sum(np.sin(x) ** power)


class _Holder:  # an object holding a user's function, as mici's transitions and paragami's patterns do
    def __init__(self, f):
        self.f = f


def test_a_jitted_function_copies_and_pickles_as_the_function_it_wraps():
    """mici deep-copies its transitions, and paragami its patterns, with the user's functions
    in them; mici's worker processes get them pickled. A Python function is its own copy and
    pickles by reference: a jitted one raised `TypeError: cannot pickle 'JittedFunction'
    object`. Now copies are the function itself (its programs shared); a pickle is the
    module's global where the jitted function is one, else jit_ps of the pickled function
    with the same options; and a function that does not pickle plainly does not jitted."""
    import copy
    import pickle

    import numpy as onp

    from autograd import grad
    from autograd_xla import jit_ps
    import test_library_patterns as here

    x = onp.linspace(0.1, 2.0, 5)
    jf = jit_ps(_module_level_loss, static_argnums=(1,), tiered=False)
    onp.testing.assert_allclose(jf(x, 3), _module_level_loss(x, 3), rtol=1e-12)
    assert copy.copy(jf) is jf and copy.deepcopy(_Holder(jf)).f is jf
    again = pickle.loads(pickle.dumps(_Holder(jf))).f
    assert type(again) is type(jf) and again is not jf and again._static_argnums == jf._static_argnums
    onp.testing.assert_allclose(again(x, 3), _module_level_loss(x, 3), rtol=1e-12)
    assert again.tiered is False and again.fallback == jf.fallback

    here.module_level_jitted = jit_ps(_module_level_loss)
    here.module_level_jitted.__qualname__ = "module_level_jitted"  # as `@jit_ps` over a def of that name
    try:
        assert pickle.loads(pickle.dumps(here.module_level_jitted)) is here.module_level_jitted
    finally:
        del here.module_level_jitted

    local = jit_ps(grad(lambda w: onp.sum(w)))
    with pytest.raises((pickle.PicklingError, AttributeError)) as jitted_error:
        pickle.dumps(local)
    with pytest.raises(type(jitted_error.value)):
        pickle.dumps(local._fun)


def test_a_jitted_function_on_boxes_returns_plain_containers_as_plain_autograd_does():
    """pymoo's autograd backend boxes its input itself, calls the problem's function, adds to
    the dict it returns and differentiates each output it finds boxed (backward_pass from its
    node). Run plainly, the function returns a plain dict holding boxes for what depends on
    the input and plain arrays for the rest; jitted, autograd boxed the primitive's whole
    result: a DictBox, no dict, its every entry boxed (42 of pymoo's 76 gradient tests
    failed). Now the same containers and boxes as plain autograd's, and the same gradients;
    what depends on the input through a loop of the program (a rolled Python loop: its
    equation's operands include what its body captures) is boxed too."""
    import numpy as onp

    import autograd.numpy as np
    from autograd.core import VJPNode, backward_pass
    from autograd.tracer import isbox, new_box
    from autograd_xla import jit_ps

    def f(x):
        terms = []
        for i in range(x.shape[1] - 1):  # a Python loop, rolled into a loop of the program where jitted
            terms.append(100 * (x[:, i + 1] - x[:, i] ** 2) ** 2 + (1 - x[:, i]) ** 2)
        return {"F": np.sum(np.column_stack(terms), axis=1), "G": onp.zeros((x.shape[0], 0)),
                "parts": (np.sum(x), onp.ones(2), [x[0] * 3.0, None])}

    def boxes(out):
        if isinstance(out, dict):
            return {k: boxes(v) for k, v in out.items()}
        if isinstance(out, (tuple, list)):
            return type(out)(boxes(v) for v in out)
        return out if out is None else isbox(out)

    x = onp.random.RandomState(0).rand(4, 10)
    results = {}
    for name, fun in (("plain", f), ("jitted", jit_ps(f, tiered=False))):
        out = fun(new_box(x, 0, VJPNode.new_root()))
        out["H"] = None  # the caller's own entry
        results[name] = (boxes(out), backward_pass(onp.arange(4.0), out["F"]._node),
                         backward_pass(1.0, out["parts"][0]._node))
    assert type(out) is dict and results["jitted"][0] == results["plain"][0]
    assert results["plain"][0]["G"] is False and results["plain"][0]["parts"][2][0] is True
    for a, b in zip(results["jitted"][1:], results["plain"][1:]):
        onp.testing.assert_allclose(a, b, rtol=1e-12, atol=0)

    # made by autograd's own container constructors (to be differentiated whole, make_vjp of
    # several outputs): autograd's container box, as plainly
    from autograd import make_vjp
    from autograd.builtins import dict as adict

    def g(x):
        return adict(a=np.sin(x), b=np.sum(x ** 2))
    cotangent = {"a": onp.arange(10.0), "b": 2.0}
    for fun in (jit_ps(g, tiered=False), g):
        vjp, ans = make_vjp(fun)(x[0])
        results[fun is g] = vjp(cotangent)
    onp.testing.assert_allclose(results[False], results[True], rtol=1e-12)


def test_a_dict_whose_keys_cannot_be_sorted_is_an_argument_as_plainly():
    """momi 2.1 differentiates functions of dicts keyed by tuples holding functions, and a
    dict may mix key types: jaxlib's C++ pytrees sort a dict's keys and raised ValueError
    ('Comparator raised exception while sorting pytree dictionary keys') at every call of a
    function compiled at its first call; such calls take the Python path, which keeps a
    dict's order, as autograd does."""
    import autograd.numpy as anp
    import numpy as np
    from autograd import value_and_grad

    from autograd_xla import jit_ps

    def k1():
        pass

    def k2():
        pass
    d = {(k1, (2, 0)): np.array([0.5, -2.0, 3.0]), (k2, (1, 0)): np.array(2.0), 1: np.ones(2), "a": np.ones(2)}

    def f(d):
        return anp.sum(d[(k1, (2, 0))] ** 2) * d[(k2, (1, 0))] + anp.sum(d[1] * d["a"])
    expected = value_and_grad(f)(d)
    for options in ({"tiered": False}, {}):
        jf = jit_ps(value_and_grad(f), **options)
        for _ in range(3):
            value, g = jf(d)
            assert value == expected[0] and list(g) == list(expected[1])
            for k in d:
                np.testing.assert_array_equal(g[k], expected[1][k])
    assert jf.cache_info()["fallbacks"] == 0
