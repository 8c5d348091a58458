"""By hand: pymanopt's autograd tests and example problems with the cost compiled by jit_ps.

pymanopt's tests come from its source distribution (`pip download --no-binary :all: --no-deps
pymanopt==2.2.1`, unpacked; --sdist names its folder). They are copied to a scratch folder with
a conftest of our own: pymanopt's imports tensorflow and torch, and the examples import jax,
tensorflow and torch at the top; here those names are stand-in modules that raise when used,
and only the autograd tests run (the six test files that use `pymanopt.function.autograd`, and
the examples' `autograd` cases). Three modes, each a pytest run in a process of its own:

* plain: as pymanopt ships them;
* stack: the user's decorator stack, `@pymanopt.function.autograd(manifold)` over `@jit_ps`
  (pymanopt's autograd backend then differentiates the jitted cost: autograd.grad(jit_ps(f)));
* backend: pymanopt's autograd backend patched to wrap the cost, its gradient operator and its
  Hessian-vector product each in jit_ps (no change to the user's code).

Each test's outcome is compared with plain's, and the FallbackWarnings it raised are counted.
Then the example problems (Sphere, Grassmann, Stiefel PCA, PSD fixed rank, the notebook's
Gaussian mixture on a product manifold) are solved plain and in each jit mode, each solve in a
fresh process (first call's trace and compile included), --rounds interleaved, and the final
cost compared.

    PYTHONPATH=<worktree> <pymanopt venv>/bin/python benchmarks/libraries/pymanopt_suite.py \
        [--sdist /path/to/pymanopt-2.2.1] [--modes plain,stack,backend] [--no-suite] [--no-examples] [--rounds 2]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

SDIST = "pymanopt-2.2.1"  # the unpacked sdist (pip download --no-binary :all: --no-deps pymanopt==2.2.1)
TEST_FILES = ["tests/backends/test_autograd.py", "tests/test_problem_backend_interface.py",
              "tests/optimizers/test_optimizers.py", "tests/optimizers/test_conjugate_gradient.py",
              "tests/manifolds/test_product.py", "tests/manifolds/test_fixed_rank.py",
              "tests/test_examples.py"]
EXAMPLES = {"sphere": "dominant_eigenvector", "grassmann": "dominant_invariant_subspace", "stiefel_pca": "pca",
            "psd_fixed_rank": "low_rank_psd_matrix_approximation", "gaussian_mixture": None}


STAND_INS = ("tensorflow", "torch", "jax", "jax.numpy")


def stand_ins():
    """Modules named tensorflow, torch, jax, jax.numpy that import, any attribute another
    stand-in, none callable: the examples import them at the top and the autograd cases never
    use them. Installed after pymanopt is imported, so that its backends still find them
    missing, and dropped once the examples are imported (drop_stand_ins): autograd_xla takes a
    module named jax for jax and shares its C++ dispatch state."""
    import types

    class StandIn(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return StandIn(f"{self.__name__}.{name}")
    for name in STAND_INS[:3]:
        sys.modules.setdefault(name, StandIn(name))
    sys.modules.setdefault("jax.numpy", sys.modules["jax"].numpy)


def drop_stand_ins():
    for name in STAND_INS:
        if type(sys.modules.get(name)).__name__ == "StandIn":
            del sys.modules[name]


def install(mode, made, tiered=None):
    """Make pymanopt's autograd backend compile as `mode` says; JittedFunctions go to `made`.
    `tiered`: jit_ps's (None, its default, for the examples' whole solves; False for the
    tests, whose results are to come from compiled programs)."""
    import pymanopt
    from pymanopt.autodiff.backends._autograd import AutogradBackend

    if mode == "plain":
        return
    from autograd_xla import jit_ps  # (not plain's: its import is part of a jit mode's solve, `solve`)

    def jitted(f):
        j = jit_ps(f, tiered=tiered)
        made.append(j)
        return j
    if mode == "stack":
        decorator = pymanopt.function.autograd

        def autograd(manifold):
            outer = decorator(manifold)
            return lambda f: outer(jitted(f))
        pymanopt.function.autograd = autograd
    elif mode == "backend":
        for name in ("prepare_function", "generate_gradient_operator", "generate_hessian_operator"):
            original = getattr(AutogradBackend, name)

            def wrapped(self, *args, _original=original):
                return jitted(_original(self, *args))
            setattr(AutogradBackend, name, wrapped)
    else:
        raise ValueError(mode)


CONFTEST = """import random

import autograd.numpy as anp
import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def initialize_test_state():  # pymanopt's, less torch's and tensorflow's seeds
    seed = 42
    random.seed(seed)
    anp.random.seed(seed)
    np.random.seed(seed)


def pytest_collection_finish(session):
    import pymanopt_suite
    pymanopt_suite.drop_stand_ins()
"""


def patch(mode, made):
    """suite_plugin's LIBRARY_PATCH: pymanopt imported first (its backends find no jax, torch,
    tensorflow), then the routing (autograd_xla imported), then the stand-ins for the examples."""
    import pymanopt  # noqa: F401
    install(mode, made, tiered=False)
    stand_ins()


def run_suite(sdist, mode):
    """pymanopt's autograd tests under `mode` in a fresh pytest process: {nodeid: result}."""
    scratch = tempfile.mkdtemp(prefix="pymanopt_tests_")
    try:
        for folder in ("tests", "examples"):
            shutil.copytree(os.path.join(sdist, folder), os.path.join(scratch, folder))
        os.remove(os.path.join(scratch, "tests", "test_problem.py"))  # tensorflow only
        with open(os.path.join(scratch, "tests", "conftest.py"), "w") as f:
            f.write(CONFTEST)
        return common.run_pytest([*TEST_FILES, "-k", "not test_examples or autograd"], scratch,
                                 "pymanopt_suite:patch", mode, pythonpath=[scratch])
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def gaussian_mixture_run(backend="autograd", quiet=True):
    """The mixture-of-Gaussians notebook: N=1000 2-D points from 3 clusters, fitted on
    Product([SymmetricPositiveDefinite(3, k=3), Euclidean(2)]) by SteepestDescent."""
    import autograd.numpy as np
    from autograd.scipy.special import logsumexp

    import pymanopt
    from pymanopt import Problem
    from pymanopt.manifolds import Euclidean, Product, SymmetricPositiveDefinite
    from pymanopt.optimizers import SteepestDescent
    N, D, K = 1000, 2, 3
    pi = [0.1, 0.6, 0.3]
    mu = [np.array([-4, 1]), np.array([0, 0]), np.array([2, -1])]
    Sigma = [np.array([[3, 0], [0, 1]]), np.array([[1, 1.0], [1, 3]]), 0.5 * np.eye(2)]
    components = np.random.choice(K, size=N, p=pi)
    samples = np.zeros((N, D))
    for k in range(K):
        indices = k == components
        n_k = indices.sum()
        if n_k > 0:
            samples[indices, :] = np.random.multivariate_normal(mu[k], Sigma[k], n_k)
    manifold = Product([SymmetricPositiveDefinite(D + 1, k=K), Euclidean(K - 1)])

    @pymanopt.function.autograd(manifold)
    def cost(S, v):
        nu = np.append(v, 0)
        logdetS = np.expand_dims(np.linalg.slogdet(S)[1], 1)
        y = np.concatenate([samples.T, np.ones((1, N))], axis=0)
        y = np.expand_dims(y, 0)
        log_q = -0.5 * (np.sum(y * np.linalg.solve(S, y), axis=1) + logdetS)
        alpha = np.exp(nu)
        alpha = alpha / np.sum(alpha)
        alpha = np.expand_dims(alpha, 1)
        loglikvec = logsumexp(np.log(alpha) + log_q, axis=0)
        return -np.sum(loglikvec)

    SteepestDescent(verbosity=0, max_iterations=200).run(Problem(manifold, cost))


def solve(example, mode):
    """One example problem solved in this fresh process under `mode`: seconds, final cost;
    "job": those seconds and autograd_xla's import's (none plain)."""
    import numpy as np

    import pymanopt.optimizers
    sys.path.insert(0, SDIST)
    made, finals = [], []
    t0 = time.perf_counter()
    install(mode, made)
    imported = time.perf_counter() - t0
    stand_ins()
    for cls in (pymanopt.optimizers.SteepestDescent, pymanopt.optimizers.TrustRegions):
        def run(self, *args, _run=cls.run, **kwargs):
            result = _run(self, *args, **kwargs)
            finals.append((float(result.cost), int(result.iterations)))
            return result
        cls.run = run
    if EXAMPLES[example]:
        import importlib
        run_example = importlib.import_module("examples." + EXAMPLES[example]).run
    else:
        run_example = gaussian_mixture_run
    drop_stand_ins()
    np.random.seed(42)
    t0 = time.perf_counter()
    run_example("autograd", quiet=True)
    seconds = time.perf_counter() - t0
    info = [j.cache_info() for j in made]
    return {"seconds": seconds, "job": imported + seconds, "cost": finals[-1][0], "iterations": finals[-1][1],
            "fallbacks": sum(i["fallbacks"] for i in info), "compiles": sum(i["compiles"] for i in info)}


def suite(sdist, modes):
    runs = {}
    for mode in modes:
        results, seconds, summary = run_suite(sdist, mode)
        runs[mode] = results
        print(f"  {mode}: pytest says '{summary}' ({seconds:.0f} s)", flush=True)
    print()
    common.suite_table(runs)
    return runs


def main(argv=None):
    global SDIST
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=SDIST)
    parser.add_argument("--modes", default="plain,stack,backend")
    parser.add_argument("--examples", default=",".join(EXAMPLES))
    parser.add_argument("--no-suite", action="store_true")
    parser.add_argument("--no-examples", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        import warnings
        warnings.simplefilter("ignore")
        example, mode, SDIST = args.worker
        print(json.dumps(solve(example, mode)))
        return
    import pymanopt
    modes = args.modes.split(",")
    print(f"pymanopt {pymanopt.__version__}; {common.under_test()}; {common.load()}\n")
    out = {}
    if not args.no_suite:
        print("pymanopt's autograd tests:")
        out["suite"] = suite(args.sdist, modes)
    if not args.no_examples:
        print(f"\nexample problems: whole solve, a fresh process each (first call included), median of {args.rounds}"
              f" interleaved rounds, and (with import) with autograd_xla's import (none plain); {common.load()}\n")
        jit_modes = [m for m in modes if m != "plain"]
        print("| problem | plain | " + " | ".join(jit_modes) + " | final cost plain / " + " / ".join(jit_modes) + " |")
        print("|---|---:|" + "---:|" * len(jit_modes) + "---|")
        out["examples"] = {}
        for example in args.examples.split(","):
            samples = common.interleaved(__file__, {m: [example, m, args.sdist]
                                                    for m in ["plain"] + jit_modes}, args.rounds)
            out["examples"][example] = samples
            plain = common.median_of(samples["plain"], "seconds")
            plain_job = common.median_of(samples["plain"], "job")
            cells, costs = [], []
            for m in ["plain"] + jit_modes:
                errors = [s["error"] for s in samples[m] if "error" in s]
                if errors:
                    cells.append(f"error: {errors[0][:80]}")
                    costs.append("–")
                    continue
                t, job = common.median_of(samples[m], "seconds"), common.median_of(samples[m], "job")
                fb = sum(s["fallbacks"] for s in samples[m])
                cells.append(common.fmt(t) + (f" (with import {common.fmt(job)})" if m == "plain" else
                                              f" ({common.ratio(plain, t)}; with import {common.fmt(job)}, "
                                              f"{common.ratio(plain_job, job)}" + (f", {fb} fallbacks" if fb else "") + ")"))
                costs.append(f"{samples[m][0]['cost']:.6g} ({samples[m][0]['iterations']} it)")
            print(f"| {example} | " + " | ".join(cells) + " | " + " / ".join(costs) + " |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
