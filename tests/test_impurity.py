"""Reliability: impure functions. Random draws inside a jitted function are never frozen at
trace time: numpy.random's module functions, and the numpy generators a function holds, are
replayed on every call (same numbers, same order, same state afterwards as plain autograd);
other generators are detected and the function runs as plain autograd. A print or format
of a traced value runs the function plainly; other Python side effects run at trace time
(documented)."""
import functools
import io
import logging
import os
import random
import re
import subprocess
import sys
import threading
import types
import warnings

import numpy as onp
import numpy.random as npr
import pytest
import scipy.stats
from numpy.random import randn as randn_imported_by_name

import autograd.numpy as np
import autograd.numpy.random as anpr
from autograd import grad, hessian, make_jvp, make_vjp, value_and_grad
from autograd_xla import FallbackWarning, ImpureFunctionError, fori_loop, jit_ps
from helpers import assert_close

pytestmark = pytest.mark.filterwarnings("ignore:.*(runs as plain autograd|draws random numbers)")


def same_draws(f, *args, calls=3, seed=0, jf=None):
    """Plain f and jit_ps(f), from the same global seed: identical outputs call by call and
    the same global state afterwards."""
    jf = jf or jit_ps(f)
    onp.random.seed(seed)
    expected = [f(*args) for _ in range(calls)]
    after = onp.random.get_state()[1].copy(), onp.random.random()
    onp.random.seed(seed)
    got = [jf(*args) for _ in range(calls)]
    assert onp.array_equal(onp.random.get_state()[1], after[0]) and onp.random.random() == after[1], \
        "the global RandomState sequence differs from plain autograd's"
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-14)
    assert not all(onp.array_equal(onp.asarray(got[0]), onp.asarray(g)) for g in got[1:]), "draws were frozen"
    return jf


X = onp.linspace(-1, 1, 6)


@pytest.mark.parametrize("via", ["autograd.numpy.random", "numpy.random", "np.random"])
def test_module_functions_are_replayed_on_every_call(via):
    mod = {"autograd.numpy.random": anpr, "numpy.random": npr, "np.random": np.random}[via]

    def f(x):
        return x * mod.randn(6) + mod.uniform(-1, 1, size=(2, 6)) + mod.normal(2.0, 3.0, 6) + mod.rand()
    jf = same_draws(f, X)
    assert jf.cache_info()["traces"] == 1 and jf.cache_info()["fallbacks"] == 0
    assert "numpy.random.randn(6)" in str(jf.graph(X))     # the draws are graph inputs


def test_a_module_imported_while_tracing_draws_at_its_import_once(tmp_path, monkeypatch):
    """A library imported for the first time inside the traced call (jax, which jaxlib imports
    at its first device-to-host copy where it is installed) may draw from numpy's global
    generator at its import: that draw is the import's, made once, as plain autograd's first
    call makes it, not one of the function's, replayed at every call (which also kept the
    signature off C++'s call path); the global sequence ends where plain autograd's does."""
    name = "autograd_xla_test_draws_at_import"
    (tmp_path / f"{name}.py").write_text("import numpy as np\nNOISE = np.random.rand(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def f(x):
        __import__(name)
        return np.sum(np.tanh(x) ** 2)

    try:
        onp.random.seed(0)
        expected = [f(X) for _ in range(4)], onp.random.random()
        del sys.modules[name]
        jf = jit_ps(f, tiered=False)
        onp.random.seed(0)
        got = [jf(X) for _ in range(4)]
        assert onp.random.random() == expected[1]  # one draw of 5 in all, at the import
        for g, e in zip(got, expected[0]):
            assert_close(g, e)
        assert jf.cache_info()["fallbacks"] == 0 and not any(e.draws for e in jf._cache.values())
    finally:
        sys.modules.pop(name, None)
    # a module whose top level calls a jitted function that draws: its draws are the function's
    around = "autograd_xla_test_jitted_at_import"
    (tmp_path / f"{around}.py").write_text(
        "import numpy as np\nfrom autograd_xla import jit_ps\n"
        "jf = jit_ps(lambda x: x + np.random.rand(3), tiered=False)\n"
        "A, B = jf(np.zeros(3)), jf(np.zeros(3))\n")
    try:
        module = __import__(around)
        assert not onp.array_equal(module.A, module.B), "draws were frozen"
        assert all(e.draws for e in module.jf._cache.values())
    finally:
        sys.modules.pop(around, None)



def test_the_host_copy_that_imports_jax_leaves_numpy_random_as_it_was():
    """jaxlib's copy of a device array to the host imports jax where it is installed (off the
    CPU every copy until the import succeeds; on the CPU a bfloat16 one), and jax 0.10.2's
    import draws numpy.random.rand(5): a seeded program's later draws then differed from plain
    autograd's (found on a TPU). Here a stand-in jax, found first, draws at its import and fails,
    as often as jaxlib tries it; numpy's global sequence ends where it began. Its own process,
    on the CPU (where the chip is held by this one)."""
    code = """
import importlib.abc, importlib.machinery, sys
import ml_dtypes, numpy as onp
tried = []
class DrawingJax(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith("jax."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        tried.append(module.__name__)
        onp.random.rand(5)
        raise ImportError("a stand-in jax, which draws at its import")
sys.meta_path.insert(0, DrawingJax())
from autograd_xla import jit_ps
f = jit_ps(lambda x: x * 2, tiered=False)
onp.random.seed(0)
outs = [f(onp.arange(3, dtype=ml_dtypes.bfloat16)) for _ in range(2)]
assert tried and [o.tolist() for o in outs] == [[0, 2, 4]] * 2, (tried, outs)
print(onp.random.random())
"""
    env = dict(os.environ, AUTOGRAD_XLA_PLATFORM="cpu")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    onp.random.seed(0)
    assert float(result.stdout.split()[-1]) == onp.random.random()

def test_many_kinds_of_draws():
    data = onp.arange(12.0).reshape(4, 3)

    def f(x):
        idx = np.random.permutation(4)
        pick = np.random.choice(4, size=2, replace=False)
        k = np.random.randint(0, 3)                    # a Python int, used as a traced index
        counts = np.random.binomial(10, 0.3, size=3)    # int64
        noise = np.random.multivariate_normal(onp.zeros(2), onp.eye(2), size=3)
        return (np.sum(data[idx] * x[:3]) + np.sum(data[pick]) + data[k, 0] + np.sum(counts * x[:3])
                + np.sum(noise) + np.random.standard_t(3.0) + np.random.gamma(2.0, size=2)[1])
    same_draws(f, X, calls=4)


def test_python_scalar_draws_are_weakly_typed():
    x32 = X.astype(onp.float32)
    f = lambda x: x * np.random.rand() + np.random.randn()  # noqa: E731
    onp.random.seed(1)
    expected = f(x32)
    onp.random.seed(1)
    got = jit_ps(f)(x32)
    assert got.dtype == expected.dtype == onp.float32
    assert_close(got, expected)


def test_seed_inside_the_function_is_replayed():
    def f(x):
        np.random.seed(42)
        a = np.random.randn(6)
        np.random.seed(7)
        return x + a + np.random.randn(6)
    jf = jit_ps(f)
    for _ in range(2):
        assert_close(jf(X), f(X), rtol=1e-15)
    onp.random.seed(3)
    jf(X)
    expected_next = onp.random.RandomState(7)
    expected_next.randn(6)
    assert onp.random.randn() == expected_next.randn()   # the state after the call is plain autograd's


def test_jit_of_grad_shares_the_draws_between_passes():
    def loss(w):
        return np.sum(np.tanh(w * np.random.randn(6)) ** 2)
    same_draws(grad(loss), X, jf=jit_ps(grad(loss)))


def _compiled_drawing(jf):
    """The programs of jf's drawing function and of its derivatives (autodiff.drawing_call):
    the signatures they traced, none of which fell back."""
    found = [d.fn for key, d in jf._derivatives.items() if key[0] == "drawing"]
    found += [e for d in found for e in d._derivatives.values()]
    assert all(d.cache_info()["fallbacks"] == 0 for d in found)
    return sum(d.cache_info()["traces"] for d in found)


RS_DRAWN = npr.RandomState(4)


def drawing_loss(w):
    """Draws from numpy's global state (an array, a Python float) and from a RandomState it
    reads as a global."""
    noise = np.random.randn(6)
    scale = np.random.rand()
    return np.sum(np.tanh(w * noise) ** 2) * scale + np.sum(w ** 3 * RS_DRAWN.standard_normal(6))


def same_draws_of(operator, f, jf, x, calls=3, quiet=True):
    """operator(f) and operator(jf) from the same states of numpy's global RandomState and
    RS_DRAWN: equal results call by call, and the same states afterwards; jf's calls with no
    warning where `quiet`."""
    def run(g):
        onp.random.seed(0), RS_DRAWN.seed(4)
        out = [operator(g)(x) for _ in range(calls)]
        return out, (onp.random.get_state()[1].copy(), RS_DRAWN.get_state()[1].copy())
    expected, after = run(f)
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("error")
        got, states = run(jf)
    assert all(onp.array_equal(a, b) for a, b in zip(states, after)), "the random states differ from plain autograd's"
    for g, e in zip(got, expected):
        for a, b in zip(*(tree_leaves(v) for v in (g, e))):
            assert_close(a, b, rtol=1e-12)
    return got


def tree_leaves(v):
    return list(v) if isinstance(v, tuple) else [v]


@pytest.mark.parametrize("operator", ["grad", "value_and_grad", "hessian", "forward mode"])
def test_grad_of_jit_of_a_drawing_function_compiles_at_its_draws(operator):
    """grad(jit_ps(f)) of a function that draws: the call draws on the host as plain autograd's
    forward pass does, and its value's and derivatives' programs take those draws as
    arguments, so the backward pass sees the very numbers the forward pass drew (fails if the
    VJP drew its own: other numbers, states moved twice)."""
    op = {"grad": grad, "value_and_grad": value_and_grad, "hessian": hessian,
          "forward mode": lambda f: lambda x: make_jvp(f)(x)(onp.ones(6))}[operator]
    jl = jit_ps(drawing_loss, tiered=False)
    got = same_draws_of(op, drawing_loss, jl, X)
    assert not all(onp.array_equal(tree_leaves(got[0])[-1], tree_leaves(g)[-1]) for g in got[1:]), "draws were frozen"
    assert jl.cache_info()["fallbacks"] == 0 and _compiled_drawing(jl) >= 1


def test_grad_of_jit_of_a_drawing_function_tiered_runs_plainly_until_compiled():
    """Tiered (the default): its first calls on boxes run as plain autograd, drawing as it
    does, with no FallbackWarning (there was one at each such function before)."""
    jl = jit_ps(drawing_loss)
    same_draws_of(grad, drawing_loss, jl, X, calls=4)
    assert jl.cache_info()["fallbacks"] == 0


def test_grad_of_jit_of_a_function_whose_branch_chooses_its_draws_runs_plainly():
    """A guarded signature (a branch on a traced value) may draw otherwise at other data: its
    calls on boxes run as plain autograd, drawing what it draws."""
    def f(w):
        if np.sum(w) > 0:
            return np.sum(w * np.random.randn(6))
        return np.sum(w ** 2 * np.random.rand(3)[0] * RS_DRAWN.rand(6))
    jf = jit_ps(f, tiered=False)
    for sign in (1.0, -1.0, 1.0):
        same_draws_of(grad, f, jf, sign * X - 0.01, calls=2)


@pytest.mark.parametrize("fallback", ["python", "error"])
def test_a_drawing_function_whose_gradient_does_not_compile_runs_plainly_and_says_why(monkeypatch, fallback):
    """Where its value and gradient's program does not trace (here a stand-in whose trace
    raises), its calls on boxes run as plain autograd, drawing as it does, with one
    FallbackWarning naming the cause; fallback="error" raises it."""
    from autograd_xla import UnsupportedPrimitiveError, autodiff

    def untraceable(fn, spec, nums):
        def value_vjp_fn(*args):
            raise UnsupportedPrimitiveError("a stand-in primitive without a rule")
        return value_vjp_fn
    monkeypatch.setattr(autodiff, "make_value_vjp_function", untraceable)
    jl = jit_ps(drawing_loss, tiered=False, fallback=fallback)
    if fallback == "error":
        with pytest.raises(UnsupportedPrimitiveError, match="stand-in primitive"):
            grad(jl)(X)
        return
    with pytest.warns(FallbackWarning, match="stand-in primitive") as caught:
        same_draws_of(grad, drawing_loss, jl, X, quiet=False)
    assert len([w for w in caught if issubclass(w.category, FallbackWarning)]) == 1


def test_a_drawing_functions_derivative_run_plainly_draws_its_call_s_numbers_again():
    """A derivative program of a drawing function that runs plainly (here: under numpy's
    error state 'raise', at a cotangent other than the one computed ahead) draws again the
    numbers of its call, from the generators' states before them, and leaves the states as
    it found them."""
    jl = jit_ps(drawing_loss, tiered=False)

    def vjp_at_2(f):
        onp.random.seed(0), RS_DRAWN.seed(4)
        vjp, ans = make_vjp(f)(X)
        after = onp.random.get_state()[1].copy(), RS_DRAWN.get_state()[1].copy()
        with onp.errstate(all="raise"):
            g = vjp(2.0)
        assert all(onp.array_equal(a, b) for a, b in zip(after, (onp.random.get_state()[1], RS_DRAWN.get_state()[1])))
        return ans, g
    expected = vjp_at_2(drawing_loss)
    with pytest.warns(FallbackWarning, match="floating-point error state"):
        got = vjp_at_2(jl)
    assert_close(got[0], expected[0], rtol=1e-12)
    assert_close(got[1], expected[1], rtol=1e-12)


GLOBAL_RS = npr.RandomState(3)
COMPILED_KINDS = ["RandomState", "Generator", "object attribute", "module attribute", "global"]


@pytest.mark.parametrize("kind", COMPILED_KINDS + ["python random", "imported by name", "static argument",
                                  "scipy random_state"])
def test_other_generators_are_replayed_or_detected(kind):
    """A numpy RandomState or Generator the function holds (closure, global, module or object
    attribute) is stood in for while tracing and its draws replayed on every call; other
    generators are detected and the function runs as plain autograd. Either way: the same
    numbers, in the same order, leaving every generator in the same state."""
    rs = npr.RandomState(0)
    gen = npr.default_rng(0)
    pyr = random.Random(0)

    class Model:
        def __init__(self):
            self.rng = npr.RandomState(5)

        def __call__(self, x):
            return x * self.rng.randn(6)

    model = Model()
    mod = types.ModuleType("user_module")
    mod.__file__ = __file__
    mod.rng = npr.RandomState(9)
    f, gens, static = {
        "module attribute": (lambda x: x - mod.rng.rand(6), [mod.rng], False),
        "RandomState": (lambda x: x + rs.randn(6) + rs.uniform(-1, 1, size=(2, 6)), [rs], False),
        "Generator": (lambda x: x * gen.normal(size=6) + gen.integers(0, 5, size=6), [gen.bit_generator], False),
        "global": (lambda x: x * GLOBAL_RS.standard_normal(6), [GLOBAL_RS], False),
        "python random": (lambda x: x * pyr.random(), [pyr], False),
        "imported by name": (lambda x: x + randn_imported_by_name(6), [], False),
        "object attribute": (model, [model.rng], False),
        "static argument": (lambda x, r: x + r.randn(6), [rs], True),
        # scipy rejects a stand-in as random_state: traced again with the real generator
        "scipy random_state": (lambda x: x + scipy.stats.norm.rvs(size=6, random_state=rs), [rs], False),
    }[kind]
    args = (X, rs) if static else (X,)

    def states():
        return [repr(g.get_state() if hasattr(g, "get_state") else getattr(g, "state", None) or g.getstate())
                for g in gens] + [repr(onp.random.get_state()[1][:4]), onp.random.get_state()[2]]

    def rewind():
        rs.seed(0), gen.bit_generator.__setstate__(npr.default_rng(0).bit_generator.__getstate__()), pyr.seed(0)
        model.rng.seed(5), mod.rng.seed(9), GLOBAL_RS.seed(3)
        onp.random.seed(0)
    jf = jit_ps(f, static_argnums=1 if static else ())
    rewind()
    before = states()
    expected = [f(*args) for _ in range(3)]
    after = states()
    rewind()
    assert states() == before
    if kind in COMPILED_KINDS:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = [jf(*args) for _ in range(3)]
        assert jf.cache_info()["fallbacks"] == 0 and jf.cache_info()["traces"] == 1
        assert "randn" in str(jf.graph(*args)) or kind != "RandomState"   # the draws are graph inputs
    else:
        with pytest.warns(UserWarning, match="runs as plain autograd"):
            got = [jf(*args) for _ in range(3)]
        assert jf.cache_info()["fallbacks"] == 1
    assert states() == after                       # the same sequence as plain autograd
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-15)
    assert not onp.array_equal(got[0], got[1]), "draws were frozen"


def test_replayed_generator_draws_are_shared_by_a_jitted_gradients_two_passes():
    """jit_ps(grad(f)) draws once per call for both passes, as plain autograd does."""
    rs = npr.RandomState(1)

    def objective(w):
        return np.sum(np.tanh(w * rs.randn(4, 3)) ** 2)
    w = onp.linspace(0.5, 1.5, 3)
    expected = [grad(objective)(w) for _ in range(3)]
    rs.seed(1)
    jg = jit_ps(grad(objective))
    got = [jg(w) for _ in range(3)]
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-14)
    assert jg.cache_info()["fallbacks"] == 0


def test_detected_generator_with_fallback_error_names_it():
    pyr = random.Random(0)

    def objective(x):
        return np.sum(x * pyr.random())
    state = pyr.getstate()
    with pytest.raises(ImpureFunctionError, match=r"Random \(closure variable 'pyr' of .*objective\).*pass it "
                                                  r"in as an argument"):
        jit_ps(objective, fallback="error")(X)
    assert pyr.getstate() == state     # the trace's draw was undone


def test_draws_made_once_and_kept_compile_and_leave_the_generator_as_plain_autograd_does():
    """A random search whose result is cached (cotengra's contraction paths, run by quimb's
    first contraction of a network) draws at the first trace only: traced again from the
    state its draws left, it compiles, and the generator ends where plain autograd's first
    call leaves it. A function that draws at every trace still runs plainly."""
    def run(cached):
        pyr = random.Random(0)

        @functools.lru_cache(maxsize=None)
        def order(n):
            o = list(range(n))
            pyr.shuffle(o)
            return tuple(sorted(o))

        def loss(x):
            return np.sum(np.tanh(x[list(order(x.shape[0]) if cached else sorted(pyr.sample(range(6), 6)))]) ** 2)
        return pyr, loss
    for cached in (True, False):
        plain_rng, plain_loss = run(cached)
        want = [grad(plain_loss)(X) for _ in range(2)]
        rng, loss = run(cached)
        jg = jit_ps(grad(loss), tiered=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [jg(X) for _ in range(2)]
        for g, w in zip(got, want):
            assert_close(g, w, rtol=1e-14)
        assert rng.getstate() == plain_rng.getstate()
        info = jg.cache_info()
        assert (info["compiles"], info["fallbacks"], len(caught)) == ((1, 0, 0) if cached else (0, 1, 1)), cached


def test_generator_methods_that_cannot_be_replayed_run_as_plain_autograd():
    rs = npr.RandomState(2)

    def f(x):
        state = rs.get_state()
        out = x + rs.randn(6)
        rs.set_state(state)
        return out + rs.randn(6)
    expected = f(X)
    rs.seed(2)
    with pytest.warns(UserWarning, match="RandomState.*get_state"):
        assert_close(jit_ps(f)(X), expected, rtol=0, atol=0)


@pytest.mark.parametrize("via", ["numpy", "autograd.numpy"])
def test_generator_from_fresh_entropy_runs_as_plain_autograd(via):
    mod = npr if via == "numpy" else anpr

    def f(x):
        return x + mod.default_rng().normal(size=6)
    with pytest.raises(ImpureFunctionError, match="default_rng"):
        jit_ps(f, fallback="error")(X)
    jf = jit_ps(f)
    with pytest.warns(UserWarning, match="fresh OS entropy"):
        a = jf(X)
    assert not onp.array_equal(a, jf(X)) and jf.cache_info()["fallbacks"] == 1
    seeded = jit_ps(lambda x: x + mod.default_rng(3).normal(size=6))  # the same numbers every call: compiled
    assert_close(seeded(X), X + npr.default_rng(3).normal(size=6))
    assert seeded.cache_info()["fallbacks"] == 0


def test_draw_used_as_a_concrete_value_runs_as_plain_autograd():
    def f(x):
        if np.random.rand() < 0.5:
            return x * 2
        return x[: np.random.randint(1, 6)].sum() + x
    jf = jit_ps(f)
    with pytest.warns(UserWarning, match=r"uses a random draw \(numpy.random.rand\(\)"):
        same_draws(f, X, calls=6, jf=jf)
    with pytest.raises(ImpureFunctionError):
        jit_ps(f, fallback="error")(X)


def test_python_scalar_draw_size_becomes_static():
    def f(x, n):
        return np.sum(x[:n] * np.random.randn(n))
    jf = jit_ps(f)
    onp.random.seed(0)
    expected = [f(X, n) for n in (2, 3, 2, 2)]
    onp.random.seed(0)
    got = [jf(X, n) for n in (2, 3, 2, 2)]
    assert_close(onp.array(got), onp.array(expected), rtol=1e-15)
    assert jf.cache_info()["traces"] == 2 and jf.cache_info()["fallbacks"] == 0


def test_draws_with_traced_arguments_run_as_plain_autograd():
    f = lambda mu: np.random.normal(mu, 1.0)  # noqa: E731
    with pytest.raises(ImpureFunctionError, match="traced"):
        jit_ps(f, fallback="error")(X)
    same_draws(f, X)


def test_draws_inside_a_loop_body_run_as_plain_autograd():
    def f(x):
        return fori_loop(0, 3, lambda i, acc: acc + np.random.randn(6), x)
    with pytest.raises(ImpureFunctionError, match="control-flow body"):
        jit_ps(f, fallback="error")(X)
    same_draws(f, X)


@pytest.mark.parametrize("name", ["get_state", "shuffle"])
def test_state_access_runs_as_plain_autograd(name):
    data = onp.arange(6.0)

    def f(x):
        if name == "get_state":
            s = np.random.get_state()
            y = np.random.randn(6)
            np.random.set_state(s)
            return x + y + np.random.randn(6)
        np.random.shuffle(data)
        return x * data
    jf = jit_ps(f)
    onp.random.seed(0)
    expected = [onp.array(f(X)) for _ in range(2)]
    data[:] = onp.arange(6.0)
    onp.random.seed(0)
    got = [onp.array(jf(X)) for _ in range(2)]
    for g, e in zip(got, expected):
        assert_close(g, e)
    assert jf.cache_info()["fallbacks"] == 1


def test_guard_failure_keeps_the_random_sequence():
    """A slice outside its array runs the call as plain autograd: the replayed draws of that
    call are undone first, so the sequence still matches plain autograd."""
    def f(x, i):
        return np.sum(x[i:i + 3]) + np.random.randn()
    x = onp.arange(6.0)
    jf = jit_ps(f)
    onp.random.seed(0)
    expected = [f(x, i) for i in (0, 5, 1)]
    onp.random.seed(0)
    with pytest.warns(UserWarning, match="outside its array"):
        got = [jf(x, onp.int64(i)) for i in (0, 5, 1)]
    assert_close(onp.array(got), onp.array(expected), rtol=1e-15)
    assert jf.cache_info()["traces"] == 1


def test_other_threads_draw_real_numbers_while_a_trace_records():
    """Interception is per thread: a thread drawing from numpy.random while another thread
    traces gets real numbers, not traced stand-ins."""
    started, release = threading.Event(), threading.Event()
    seen = []
    rs = npr.RandomState(0)

    def slow(x):
        started.set()
        release.wait(30)
        return x + np.random.randn(6) + rs.randn(6)

    def other():
        started.wait(30)
        seen.append(type(np.random.randn(2)))
        seen.append(type(anpr.randn(2)))
        seen.append(type(rs.randn(2)))    # the same closure cell, holding a stand-in meanwhile
        release.set()
    t = threading.Thread(target=other)
    t.start()
    jit_ps(slow)(X)
    t.join(30)
    assert seen == [onp.ndarray, onp.ndarray, onp.ndarray]
    assert type(rs) is npr.RandomState   # put back after the trace


def test_side_effects_and_prints_of_other_values_run_at_trace_time(capsys):
    log = []

    def f(x):
        print("tracing f with shape", x.shape)
        log.append(x.shape)
        return x * 2
    jf = jit_ps(f, tiered=False)
    for _ in range(3):
        jf(X)
    assert capsys.readouterr().out.count("tracing f with shape (6,)") == 1   # once per signature
    jf(onp.ones(2))
    assert capsys.readouterr().out.count("tracing f with shape (2,)") == 1
    assert log == [(6,), (2,)] and jf.cache_info()["compiles"] == 2


def addressless(text):
    """`text` without objects' addresses (a box's repr in a list)."""
    return re.sub(r"0x[0-9a-f]+", "0x", text)


def _loss_printed(x):
    y = np.sum(np.tanh(x) ** 2)
    print("loss", y)
    return y


def _loss_formatted(x):
    y = np.sum(np.tanh(x) ** 2)
    print("loss {} max {}".format(y, np.max(x)))
    return y


def _loss_to_digits(x):  # (a format with digits: plain autograd's boxes have none, so not under grad)
    y = np.sum(np.tanh(x) ** 2)
    print(f"loss {y:.6f}")
    return y


def _loss_as_str(x):
    y = np.sum(np.tanh(x) ** 2)
    print("loss " + str(y))
    return y


def _loss_in_a_list(x):
    y = np.sum(np.tanh(x) ** 2)
    print(["loss", {"y": y}])
    return y


PRINTING = [(f, nesting) for f in (_loss_printed, _loss_formatted, _loss_as_str, _loss_in_a_list)
            for nesting in ("jit", "jit_of_grad", "grad_of_jit")] + [(_loss_to_digits, "jit")]


@pytest.mark.parametrize("f, nesting", PRINTING)
def test_a_printed_traced_value_runs_plainly_printing_what_plain_autograd_prints(f, nesting, capsys):
    """Compiled, the print would run once while tracing, showing a placeholder: the function
    runs as plain autograd instead (one FallbackWarning naming the line), printing at every
    call exactly what plain autograd prints, boxes under grad included."""
    make = {"jit": lambda g: (jit_ps(g, tiered=False), g),
            "jit_of_grad": lambda g: (jit_ps(grad(g), tiered=False), grad(g)),
            "grad_of_jit": lambda g: (grad(jit_ps(g, tiered=False)), grad(g))}[nesting]
    jitted, plain = make(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            got = jitted(X + i)
            out = capsys.readouterr().out
            want = plain(X + i)
            assert addressless(out) == addressless(capsys.readouterr().out) and "loss" in out
            assert_close(got, want, rtol=0)
    texts = [str(w.message) for w in caught if "runs as plain autograd" in str(w.message)]
    assert len(texts) == 1 and "a traced value at" in texts[0] and f.__code__.co_filename in texts[0]
    assert "Traced<" not in out


def test_a_printed_traced_value_with_fallback_error_raises_naming_the_line():
    with pytest.raises(ImpureFunctionError, match=r"(?s)print shows a traced value at.*_loss_printed"):
        jit_ps(_loss_printed, fallback="error", tiered=False)(X)
    with pytest.raises(ImpureFunctionError, match=r"a format \('.6f'\) makes text of a traced value"):
        jit_ps(_loss_to_digits, fallback="error", tiered=False)(X)


def test_a_logged_traced_value_runs_plainly_and_a_record_not_let_through_compiles():
    """A record its logger lets through would show the placeholder once: the function runs
    plainly, logging what plain autograd logs; a record below the logger's level makes no
    text, plainly or compiled, and the function compiles."""
    stream = io.StringIO()
    logger = logging.getLogger("autograd_xla_test_impurity")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        def f(x):
            y = np.sum(np.tanh(x) ** 2)
            logger.info("loss %s", y)
            logger.debug("hidden %s", y)
            return y
        jf = jit_ps(f, tiered=False)
        with pytest.warns(FallbackWarning, match=r"(?s)a log record shows a traced value at.*logger\.info"):
            got = [jf(X + i) for i in range(2)]
        logged = stream.getvalue()
        stream.seek(0)
        stream.truncate()
        for i in range(2):
            assert_close(got[i], f(X + i), rtol=0)
        assert stream.getvalue() == logged and logged.count("loss") == 2
        logger.setLevel(logging.WARNING)
        stream.seek(0)
        stream.truncate()
        quiet = jit_ps(f, tiered=False)
        quiet(X)
        info = quiet.cache_info()
        assert info["traces"] == 1 and info["fallbacks"] == 0 and stream.getvalue() == ""
    finally:
        logger.removeHandler(handler)


def test_no_warnings_for_pure_functions():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jf = jit_ps(lambda x: np.tanh(x) * 2)
        jf(X)
        grad(lambda x: np.sum(jf(x)))(X)
