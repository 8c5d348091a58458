"""`import autograd_xla` imports no slow scipy submodule: the rules keyed by their functions
are registered when a program imports them (registry.when_imported), and still compile. Nor
jaxlib (clients.xc): a tiered function's plain calls never import it, its first program does.

Each check runs in a fresh interpreter, where nothing has imported scipy's submodules yet.
"""
import os
import subprocess
import sys
import textwrap

import pytest

from autograd_xla import clients, registry

SLOW = ("scipy.stats", "scipy.integrate", "scipy.signal", "scipy.special", "scipy.linalg", "autograd.scipy")


def run(code, env=None):
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                            timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_the_package_imports_no_slow_scipy_module():
    out = run(f"""
        import sys
        import autograd_xla
        print(sorted(m for m in {SLOW!r} if m in sys.modules), hasattr(autograd_xla, "os"))
        """)
    assert out == "[] False"


def test_a_scipy_module_imported_afterwards_compiles():
    """scipy.stats (and with it scipy.special and scipy.linalg) imported after the package:
    autograd's wrappers of its functions, and a scipy.special ufunc called plainly, compile
    with fallback='error'."""
    out = run("""
        import numpy as onp
        import autograd_xla
        from autograd_xla import jit_ps
        import scipy.stats
        import scipy.special
        from autograd import grad
        import autograd.scipy.stats.norm as norm
        import autograd.scipy.special as asp
        x = onp.linspace(-1.0, 1.0, 5)
        f = jit_ps(lambda x: norm.logpdf(x, 0.5, 2.0) + scipy.special.gammaln(x + 3), fallback="error")
        assert onp.allclose(f(x), scipy.stats.norm.logpdf(x, 0.5, 2.0) + scipy.special.gammaln(x + 3))
        g = jit_ps(grad(lambda x: (norm.cdf(x) * asp.expit(x)).sum()), fallback="error")
        assert onp.allclose(g(x), grad(lambda x: (norm.cdf(x) * asp.expit(x)).sum())(x))
        from autograd.scipy.stats import multivariate_normal
        mvn = jit_ps(lambda x: multivariate_normal.logpdf(x, onp.zeros(2), onp.eye(2)), fallback="error")
        assert onp.allclose(mvn(onp.ones(2)), scipy.stats.multivariate_normal.logpdf(onp.ones(2), onp.zeros(2),
                                                                                  onp.eye(2)))
        print("ok")
        """)
    assert out == "ok"


def test_odeint_and_convolve_imported_afterwards_compile():
    out = run("""
        import numpy as onp
        from autograd_xla import jit_ps
        from autograd.scipy.integrate import odeint
        from autograd.scipy.signal import convolve
        t = onp.linspace(0.0, 1.0, 4)
        f = jit_ps(lambda y0: odeint(lambda y, t: -y, y0, t), fallback="error")
        assert onp.allclose(f(onp.ones(2)), onp.exp(-t)[:, None] * onp.ones(2), atol=1e-6)
        c = jit_ps(lambda a, b: convolve(a, b), fallback="error")
        assert onp.allclose(c(onp.arange(5.0), onp.ones(3)), onp.convolve(onp.arange(5.0), onp.ones(3)))
        print("ok")
        """)
    assert out == "ok"


def test_a_rule_registered_by_the_user_replaces_the_waiting_one():
    """The package's own registrations for scipy.special run before a user's, so the user's
    rule is the one kept."""
    out = run("""
        import numpy as onp
        import autograd_xla
        import scipy.special
        from autograd_xla import jit_ps, register_translation_rule
        register_translation_rule(scipy.special.erf, lambda ctx, x: ctx.asvalue(x))   # "erf" is the identity
        print(jit_ps(lambda x: scipy.special.erf(x))(onp.array([0.5, 2.0])).tolist())
        """)
    assert out == "[0.5, 2.0]"


def test_plain_tiered_calls_import_no_jaxlib_and_a_compile_does():
    """With tiering's default (conftest turns it off for the suite: not in this process), a new
    signature's first calls run as plain autograd and import neither jaxlib nor ml_dtypes
    (clients.xc); a function's first program imports them and computes as plain autograd does."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRAD_XLA_TIERED"}
    out = run("""
        import sys
        import autograd.numpy as np
        from autograd import grad
        from autograd_xla import jit_ps
        loss = lambda w: np.sum(np.tanh(w) ** 2 + w ** 3)
        w = np.linspace(-1.0, 1.0, 5)
        f = jit_ps(grad(loss))
        for _ in range(4):
            assert np.array_equal(f(w), grad(loss)(w))
        info = f.cache_info()
        print(info["plain_tier_calls"], info["compiles"], [m for m in ("jaxlib", "ml_dtypes") if m in sys.modules])
        g = jit_ps(grad(loss), tiered=False, fallback="error")
        assert np.allclose(g(w), grad(loss)(w), rtol=1e-12, atol=0)
        print(g.cache_info()["compiles"], [m for m in ("jaxlib", "ml_dtypes") if m in sys.modules])
        """, env)
    assert out.splitlines() == ["4 0 []", "1 ['jaxlib', 'ml_dtypes']"]


def test_a_trace_of_scipy_special_or_linear_algebra_imports_no_jaxlib():
    """A trace works out its scipy.special and linear algebra calls' types by building their
    rules, which name scipy's own loops and jaxlib's LAPACK kernels on the CPU (ufunc_loops,
    rules.lapack): registering those with XLA waits for a program lowered to compile, so a
    trace alone (one run by numpy: numpy_tier) imports no jaxlib. (A function made with
    tiered=False imports it at once: C++'s call path.)"""
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRAD_XLA_TIERED"}
    out = run("""
        import sys
        import autograd.numpy as np
        import autograd.scipy.special as sp
        from autograd import grad
        from autograd_xla import jit_ps
        a = np.eye(3) * 2.0 + 0.1
        loss = lambda x: np.sum(sp.gammaln(x) + sp.gammainc(2.0, x) + sp.erfc(x)) + \\
            np.sum(np.linalg.solve(a + np.diag(x[:3]), x[:3])) + np.linalg.slogdet(a * x[0])[1]
        x = np.linspace(0.5, 2.0, 5)
        jit_ps(grad(loss)).graph(x)
        print([m for m in ("jaxlib", "ml_dtypes") if m in sys.modules])
        f = jit_ps(grad(loss), tiered=False, fallback="error")
        assert np.allclose(f(x), grad(loss)(x), rtol=1e-12, atol=0)
        print(f.cache_info()["compiles"], "jaxlib" in sys.modules)
        """, env)
    assert out.splitlines() == ["[]", "1 True"]


#: The package's modules a trace needs and a plain call does not (registry.load_builtin; the
#: interpreters, the runtime, jaxlib's C++ call path and random draws' replay: api's
#: LazyModules), and the libraries only they import
AT_FIRST_TRACE = ("autograd_xla.rules", "autograd_xla.compositions", "autograd_xla.control_flow",
                  "autograd_xla.rolling", "autograd_xla.batched", "autograd_xla.tracing", "autograd_xla.context",
                  "autograd_xla.lowering", "autograd_xla.dispatch", "autograd_xla.impurity", "autograd_xla.backend",
                  "autograd_xla.blas", "autograd_xla.persistent_cache", "autograd_xla.hlo", "scipy", "numpy.ma")
#: ... and those a trace and compile of a function that calls no collective, pmap or vmap does
#: not import either: their public names do, at their first use (the package's _LAZY)
AT_FIRST_USE = ("autograd_xla.collectives", "autograd_xla.parallel", "autograd_xla.transforms",
                "autograd_xla.replicated")

#: ... and those that neither a plain call nor a compile on one device without autograd's
#: boxes imports: the derivatives of compiled calls, several processes, device placement; and
#: logging, imported at the first compile report or tiering's first message
NOT_AT_ALL = ("autograd_xla.autodiff", "autograd_xla.distributed", "autograd_xla.placement", "logging")
#: ... but where an accelerator's plugin is installed, finding the platform of a plain call
#: (whether tiering may run it plainly: api._plain_is_alike) starts the backend, which imports
#: these (on the TPU machine, whose chip the suite's process holds, the subprocess then finds
#: the CPU)
ASKS_THE_BACKEND = ("autograd_xla.backend", "autograd_xla.blas", "autograd_xla.persistent_cache", "autograd_xla.hlo",
                    "logging")


def test_plain_tiered_calls_import_no_rules_and_a_trace_does():
    """Tiered calls that stay plain (tiering's default, turned off by conftest for the suite:
    not in this process) import none of the translation rules, compositions, control flow,
    loop rolling, interpreters or C++ call path, nor the modules of several processes and
    device placement; the first trace imports them, and its program computes as plain
    autograd."""
    env = {k: v for k, v in os.environ.items() if k not in ("AUTOGRAD_XLA_TIERED", clients.PLATFORM_ENV)}
    asks = ASKS_THE_BACKEND if any(map(clients.plugin_present, ("gpu", "tpu"))) else ()
    out = run(f"""
        import sys
        import autograd.numpy as np
        from autograd import grad
        from autograd_xla import jit_ps
        loss = lambda w: np.sum(np.tanh(w) ** 2 + w ** 3)
        w = np.linspace(-1.0, 1.0, 5)
        f = jit_ps(grad(loss))
        for _ in range(4):
            assert np.array_equal(f(w), grad(loss)(w))
        print(f.cache_info()["plain_tier_calls"], [m for m in {AT_FIRST_TRACE!r} + {NOT_AT_ALL!r}
                                                   if m in sys.modules and m not in {asks!r}])
        g = jit_ps(grad(loss), tiered=False, fallback="error")
        assert np.allclose(g(w), grad(loss)(w), rtol=1e-12, atol=0)
        print(g.cache_info()["compiles"], all(m in sys.modules for m in {AT_FIRST_TRACE[:-2]!r}),
              [m for m in {AT_FIRST_USE!r} if m in sys.modules])
        """, env)
    assert out.splitlines() == ["4 []", "1 True []"]


def test_a_trace_imports_no_collectives_pmap_or_vmap_and_their_names_still_work():
    """A compiled hessian (autograd's jacobian, batched while tracing: batched.py's patch,
    imported with the package's rules) imports neither the collectives, pmap nor vmap's
    transforms; those names then import theirs, and a vmap and a psum under it compile."""
    out = run(f"""
        import sys
        import autograd.numpy as np
        from autograd import hessian
        from autograd_xla import jit_ps
        loss = lambda w: np.sum(np.tanh(w) ** 2 + w ** 3)
        w = np.linspace(-1.0, 1.0, 3)
        h = jit_ps(hessian(loss), tiered=False, fallback="error")
        assert np.allclose(h(w), hessian(loss)(w), rtol=1e-12, atol=0)
        sizes = {{h.graph(np.linspace(-1.0, 1.0, n)).size() for n in (3, 12)}}  # one batched VJP, any n
        print([m for m in {AT_FIRST_USE!r} if m in sys.modules], len(sizes))
        from autograd_xla import psum, vmap
        f = jit_ps(vmap(lambda x: x / psum(x, "i"), axis_name="i"), tiered=False, fallback="error")
        print(np.allclose(f(w + 2.0), (w + 2.0) / np.sum(w + 2.0), rtol=1e-12, atol=0))
        """)
    assert out.splitlines() == ["[] 1", "True"]


def test_a_rule_registered_before_the_first_trace_replaces_the_package_one():
    """numpy.sin's and numpy.exp's rules (rules/elementwise.py) are not imported yet when the
    user registers theirs: the registration imports the package's first, then replaces them."""
    out = run(f"""
        import sys
        import numpy as onp
        import autograd.numpy as np
        import autograd_xla
        from autograd_xla import jit_ps, register_trace_rule, register_translation_rule
        print([m for m in {AT_FIRST_TRACE!r} if m in sys.modules])
        register_translation_rule(onp.sin, lambda ctx, x: ctx.asvalue(x))   # "sin" is the identity
        register_trace_rule(onp.exp, lambda x: x * 2.0)                      # "exp" doubles
        x = onp.array([0.5, 2.0])
        f = jit_ps(lambda x: np.sin(x) + np.exp(x) + np.cos(x), tiered=False, fallback="error")
        assert onp.allclose(f(x), x + 2.0 * x + onp.cos(x), rtol=1e-12, atol=0), f(x)
        print("ok")
        """)
    assert out.splitlines() == ["[]", "ok"]


@pytest.mark.parametrize("module", ["autograd_xla.rules.special", "autograd_xla.batched",
                                    "autograd_xla.control_flow.common"])
def test_a_module_of_the_package_imported_first_then_the_rest_at_the_first_trace(module):
    """A module whose import registers rules, imported before any trace (a test, a user's
    `from autograd_xla.control_flow.common import ...`): its registrations do not import the
    package's others (which would import it half made); the first look-up and trace do."""
    out = run(f"""
        import importlib
        import numpy as onp
        import autograd.numpy as np
        importlib.import_module({module!r})
        from autograd_xla import jit_ps, registry
        assert registry.lookup(onp.sin).lowering is not None
        f = jit_ps(lambda x: np.sum(np.sin(x) * np.exp(x)), tiered=False, fallback="error")
        x = onp.linspace(0.0, 1.0, 4)
        assert onp.allclose(f(x), onp.sum(onp.sin(x) * onp.exp(x)), rtol=1e-12, atol=0)
        print("ok")
        """)
    assert out == "ok"


def test_public_names_import_their_modules_at_first_use():
    """Every name of __all__ is an attribute of the package (module __getattr__ for those whose
    modules come in at their first use), and so is a submodule not imported yet."""
    out = run("""
        import sys
        import autograd_xla
        names = [n for n in autograd_xla.__all__ if getattr(autograd_xla, n, None) is None]
        from autograd_xla import vmap, while_loop
        print(names, autograd_xla.rolling.__name__, "while_loop" in dir(autograd_xla), vmap is autograd_xla.vmap)
        """)
    assert out == "[] autograd_xla.rolling True True"


def test_a_boxed_plain_tier_call_and_device_put_arrays_differentiate():
    """grad of a tiered function (its call on autograd boxes runs plainly, the derivatives of
    compiled calls not imported) is plain autograd's; a DeviceArray (placement, no compile)
    is differentiable as the array it holds."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOGRAD_XLA_TIERED"}
    out = run("""
        import sys
        import numpy as onp
        import autograd.numpy as np
        from autograd import grad
        from autograd_xla import device_put, jit_ps
        loss = lambda w: np.sum(np.tanh(w) ** 2 + w ** 3)
        w = onp.linspace(-1.0, 1.0, 5)
        f = jit_ps(loss)
        assert onp.array_equal(grad(f)(w), grad(loss)(w))
        print("autograd_xla.autodiff" in sys.modules, f.cache_info()["plain_tier_calls"])
        assert onp.array_equal(grad(loss)(device_put(w)), grad(loss)(w))
        print("ok")
        """, env)
    assert out.splitlines() == ["False 1", "ok"]


def test_bfloat16_from_ml_dtypes_imported_afterwards_compiles():
    """hlo.supported admits ml_dtypes' bfloat16 at its first sight, ml_dtypes imported by the
    user after the package (which does not import it)."""
    out = run("""
        import numpy as onp
        import autograd_xla
        import ml_dtypes
        f = autograd_xla.jit_ps(lambda x: x * 2, tiered=False, fallback="error")
        x = onp.array([0.5, -4.0, 3.0], ml_dtypes.bfloat16)
        y = f(x)
        assert y.dtype == ml_dtypes.bfloat16 and onp.array_equal(y, x * 2), y
        print(f.cache_info()["compiles"])
        """)
    assert out == "1"


# ----- the mechanism -------------------------------------------------------------------------
def test_when_imported_waits_for_its_module(monkeypatch):
    calls = []
    monkeypatch.delitem(sys.modules, "_agx_not_yet", raising=False)
    registry.when_imported("_agx_not_yet")(calls.append)
    assert calls == [] and not registry.run_waiting()
    module = type(sys)("_agx_not_yet")
    monkeypatch.setitem(sys.modules, "_agx_not_yet", module)
    assert registry.lookup(object()) is None        # a look-up that finds nothing runs it
    assert calls == [module]
    registry.run_waiting()
    assert calls == [module]                        # once
    registry.when_imported("_agx_not_yet")(calls.append)   # imported already: at once
    assert calls == [module, module]


def test_lazy_module_imports_on_first_attribute():
    lazy = registry.LazyModule("json")
    assert lazy.dumps([1]) == "[1]"
    with pytest.raises(ModuleNotFoundError):
        registry.LazyModule("_agx_no_such_module").anything


def test_kept_module_keeps_what_it_read():
    kept = clients.KeptModule("json")
    assert kept.dumps([1]) == "[1]" and "dumps" in vars(kept)
    assert getattr(kept, "_agx_no_such_name", None) is None
