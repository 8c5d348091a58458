"""By hand: mici's autograd tests and three MCMC workloads with the model compiled by jit_ps.

mici 0.4.1 (Hamiltonian Monte Carlo; derivatives by HIPS/autograd through its `autograd`
backend) comes from its source distribution (`pip download --no-binary :all: --no-deps
mici==0.4.1`, unpacked; --sdist names its folder).

1. The suite: mici's tests/test_autodiff.py and tests/test_interface.py (the files that use its
   autograd backend; the jax-parametrised cases deselected) copied to a scratch folder and run
   in a pytest process of their own per mode (suite_plugin records outcomes, fallbacks,
   traces and compiles test by test; outcomes are compared with plain's):

   * plain: as mici ships them;
   * inner: mici's autograd differential-operator makers (grad_and_value, vjp_and_value,
     hessian_grad_and_value, ...) differentiate jit_ps(f, tiered=False): grad(jit_ps(f));
   * outer (not run by default): each maker's result is compiled, jit_ps(maker(f),
     tiered=False); the makers returning functions (vjp, matrix-Hessian products) cannot be;
   * usergrad: the user's recipe at mici's entry points (sample_hmc_chains,
     sample_constrained_hmc_chains): neg_log_dens=jit_ps(f), grad_neg_log_dens=jit_ps(grad(f))
     (or jit_ps of the gradient the test gives), constr=jit_ps(c), jacob_constr=
     jit_ps(jacobian(c)) (or of the one given), all tiered=False. mici deep-copies its
     transitions, and with them these functions, once per chain, and the backend=None cases
     (n_worker=n_chain) pickle them to worker processes. test_autodiff's cases call the makers
     directly: not routed in this mode (they count as 'not traced');
   * deterministic: inner's and usergrad's routings together, every jit_ps deterministic=True.

   Unless --no-shadow, every routed function also runs plainly at each call and the two
   results (gradients, values, Hessians, and what the vjp / mtp / mhp functions they return
   give) are compared to 1e-12 (relative to the result's magnitude): the tests themselves
   check derivatives to np.allclose's 1e-5 (test_autodiff) or only shapes (test_interface).

2. The examples: three workloads:
   hier (eight schools, non-centred, 10-D, DynamicMultinomialHMC with step-size and
   variance adaptation), banana (4-D, same sampler) and torus (mici's README example, the
   constrained sampler on a torus in 3-D). Each is sampled, seeded identically, plain and
   with the user's recipe (neg_log_dens=jit_ps(f), grad_neg_log_dens=jit_ps(grad(f)), for
   torus constr=jit_ps(c), jacob_constr=jit_ps(jacobian(c))) under three jit_ps settings:
   tiered (jit_ps's default), untiered (tiered=False), deterministic (deterministic=True).
   Each run is a fresh process, --rounds interleaved; wall time of the sampling (median) and
   with autograd_xla's import. The chains (positions, and for hier and banana the Hamiltonian;
   warm-up included) are
   compared with plain's: the first iteration where they depart by more than rtol 1e-8 /
   atol 1e-10, and, where they do, whether the first difference was a rounding-sized one
   (<= 1e-12 relative) that the chain amplified (reported as such) or not (WRONG). The
   contender's gradient (and Jacobian) is checked against plain autograd at the initial and
   first three states of each chain (must agree to 1e-12, else WRONG). Reproducibility: the
   deterministic contender's chains must be bit-identical from run to run (its --rounds
   runs, or two runs where --rounds 1); the other contenders' are reported too.

    PYTHONPATH=<worktree> <mici venv>/bin/python benchmarks/libraries/mici_suite.py \
        --sdist /path/to/mici-0.4.1 [--modes plain,inner,usergrad,deterministic] \
        [--contenders plain,tiered,untiered,deterministic] [--examples hier,banana,torus] \
        [--no-suite] [--no-examples] [--no-shadow] [--rounds 3] [--json out.json]
"""
import argparse
import atexit
import copy
import functools
import inspect
import json
import os
import shutil
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

SDIST = "mici-0.4.1"  # the unpacked sdist (pip download --no-binary :all: --no-deps mici==0.4.1)
TEST_FILES = ["tests/test_autodiff.py", "tests/test_interface.py"]
SUITE_MODES = ("plain", "inner", "outer", "usergrad", "deterministic")
CONTENDERS = {"plain": None, "tiered": {}, "untiered": {"tiered": False}, "deterministic": {"deterministic": True}}
SHADOW_RTOL = 1e-12  # a compiled result against plain autograd's (relative to its magnitude)
GRAD_RTOL = 1e-12    # the examples' gradient check
ROUNDING = 1e-12     # a chain's first difference at most this (relative) is rounding, amplified later


# ---------------------------------------------------------------- the suite's routing

SHADOW = {"calls": 0, "leaves": 0, "worst": 0.0, "mismatches": []}


def _current_test():
    return os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]


def _compare(name, got, want):
    """got (the routed function's result) against want (plain's), leaf by leaf; callables in
    the result (vjp, mtp, mhp functions) are compared when called. Returns got."""
    from autograd.tracer import getval
    if callable(got) and callable(want):
        @functools.wraps(got)
        def compared(*args, **kwargs):
            return _compare(name + "(...)", got(*args, **kwargs), want(*args, **kwargs))
        return compared
    g, w = getval(got), getval(want)  # (under a derivative, a tuple comes boxed: SequenceBox)
    if isinstance(g, (tuple, list)) and isinstance(w, (tuple, list)) and len(g) == len(w):
        compared = type(g)(_compare(f"{name}[{i}]", a, b) for i, (a, b) in enumerate(zip(g, w)))
        return compared if g is got else got
    x, y = np.asarray(g, dtype=float), np.asarray(w, dtype=float)
    SHADOW["leaves"] += 1
    if x.shape != y.shape:
        SHADOW["mismatches"].append([_current_test(), name, f"shape {x.shape}, plain {y.shape}"])
        return got
    scale = float(np.max(np.abs(y))) if y.size else 0.0
    err = float(np.max(np.abs(x - y))) / max(scale, 1e-300) if y.size else 0.0
    if np.isfinite(err):
        SHADOW["worst"] = max(SHADOW["worst"], err)
    if not np.allclose(x, y, rtol=SHADOW_RTOL, atol=SHADOW_RTOL * scale, equal_nan=True):
        SHADOW["mismatches"].append([_current_test(), name, f"off by {err:.2e} relative (magnitude {scale:.2e})"])
    return got


class Shadow:
    """The routed function `jitted`, and `plain` run alongside at each call (_compare). Deep-copies
    by deep-copying the jitted function (mici deep-copies its transitions: that is what usergrad
    tests) and pickles as the pair (the jitted function pickles like the function it wraps)."""

    def __init__(self, jitted, plain, name):
        self.jitted, self.plain, self.name = jitted, plain, name
        functools.update_wrapper(self, plain)

    def __call__(self, *args, **kwargs):
        from autograd.tracer import getval
        got = self.jitted(*args, **kwargs)
        if not all(isinstance(getval(a), (np.ndarray, np.generic, float, int)) for a in (*args, *kwargs.values())):
            return got  # (called inside another jit_ps's trace, outer mode: no concrete values to compare)
        SHADOW["calls"] += 1
        return _compare(self.name, got, self.plain(*args, **kwargs))

    def __deepcopy__(self, memo):
        return Shadow(copy.deepcopy(self.jitted, memo), self.plain, self.name)

    def __reduce__(self):
        return Shadow, (self.jitted, self.plain, self.name)


def _write_shadow():
    path = os.environ.get("MICI_SUITE_SHADOW_FILE")
    if path:
        with open(path, "w") as f:
            json.dump(SHADOW, f)


def install_suite(mode, made, shadow):
    """Route mici's autograd backend (inner, outer) and/or its entry points (usergrad) through
    jit_ps as `mode` says; the JittedFunctions go to `made`."""
    import autograd

    import mici.interface
    from mici.autodiff import DIFF_OPS
    from mici.autodiff import autograd_wrapper as aw
    if mode == "plain":
        return
    from autograd_xla import jit_ps
    options = {"deterministic": True} if mode == "deterministic" else {"tiered": False}

    def jitted(f):
        j = jit_ps(f, **options)
        made.append(j)
        return j

    def shadowed(routed, plain, name):
        return Shadow(routed, plain, name) if shadow else routed

    if mode in ("inner", "outer", "deterministic"):
        for op in DIFF_OPS:
            def maker(func, _original=getattr(aw, op), _op=op):
                routed = jitted(_original(func)) if mode == "outer" else _original(jitted(func))
                return shadowed(routed, _original(func), _op)
            setattr(aw, op, maker)
    if mode in ("usergrad", "deterministic"):
        def user(original, constrained):
            signature = inspect.signature(original)

            @functools.wraps(original)
            def call(*args, **kwargs):
                bound = signature.bind(*args, **kwargs)
                a = bound.arguments
                f = a["neg_log_dens"]
                grad_f = a.get("grad_neg_log_dens") or autograd.grad(f)
                a["grad_neg_log_dens"] = shadowed(jitted(grad_f), grad_f, "grad_neg_log_dens")
                a["neg_log_dens"] = shadowed(jitted(f), f, "neg_log_dens")
                if constrained:
                    c = a["constr"]
                    jacob_c = a.get("jacob_constr") or autograd.jacobian(c)
                    a["jacob_constr"] = shadowed(jitted(jacob_c), jacob_c, "jacob_constr")
                    a["constr"] = shadowed(jitted(c), c, "constr")
                return original(*bound.args, **bound.kwargs)
            return call
        mici.interface.sample_hmc_chains = user(mici.interface.sample_hmc_chains, False)
        mici.interface.sample_constrained_hmc_chains = user(mici.interface.sample_constrained_hmc_chains, True)


def patch(mode, made):
    """suite_plugin's LIBRARY_PATCH: mici imported first (its jax backend finds no jax), then
    the routing (autograd_xla imported in the jit modes)."""
    import mici  # noqa: F401
    install_suite(mode, made, shadow=os.environ.get("MICI_SUITE_SHADOW") == "1")
    atexit.register(_write_shadow)


def run_suite(sdist, mode, shadow):
    """mici's autograd tests under `mode` in a fresh pytest process: ({nodeid: result}, seconds,
    pytest's last line, the shadow's record)."""
    scratch = tempfile.mkdtemp(prefix="mici_tests_")
    shadow_file = os.path.join(scratch, "shadow.json")
    saved = {k: os.environ.get(k) for k in ("MICI_SUITE_SHADOW", "MICI_SUITE_SHADOW_FILE")}
    try:
        os.makedirs(os.path.join(scratch, "tests"))
        for name in TEST_FILES:
            shutil.copy(os.path.join(sdist, name), os.path.join(scratch, name))
        os.environ["MICI_SUITE_SHADOW"] = "1" if shadow else "0"
        os.environ["MICI_SUITE_SHADOW_FILE"] = shadow_file
        results, seconds, summary = common.run_pytest([*TEST_FILES, "-k", "not jax"], scratch, "mici_suite:patch",
                                                      mode, pythonpath=[scratch])
        record = None
        if os.path.exists(shadow_file):
            with open(shadow_file) as f:
                record = json.load(f)
        return results, seconds, summary, record
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(scratch, ignore_errors=True)


def suite(sdist, modes, shadow):
    runs, shadows = {}, {}
    for mode in modes:
        results, seconds, summary, record = run_suite(sdist, mode, shadow)
        runs[mode], shadows[mode] = results, record
        print(f"  {mode}: pytest says '{summary}' ({seconds:.0f} s)", flush=True)
    print()
    common.suite_table(runs)
    print("\n| mode | traces | compiles | routed calls shadowed | results compared | disagree (> 1e-12) |"
          " worst relative difference |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in modes:
        if mode == "plain":
            continue
        traces = sum(v.get("traces", 0) for v in runs[mode].values())
        compiles = sum(v.get("compiles", 0) for v in runs[mode].values())
        r = shadows[mode]
        if not shadow or r is None:
            print(f"| {mode} | {traces} | {compiles} | – | – | – | – |")
            continue
        print(f"| {mode} | {traces} | {compiles} | {r['calls']} | {r['leaves']} | {len(r['mismatches'])} |"
              f" {r['worst']:.1e} |")
    for mode in modes:
        r = shadows[mode]
        for test, name, what in (r or {}).get("mismatches", [])[:5]:
            print(f"  {mode}: WRONG {name} in {test.split('::', 1)[-1]}: {what}")
    return {"runs": runs, "shadow": shadows}


# ---------------------------------------------------------------- the examples

WORKLOADS = {  # warm-up and main iterations, chains (tens of seconds plain)
    "hier": dict(n_warm=200, n_main=500, n_chain=2, dim=10),
    "banana": dict(n_warm=150, n_main=350, n_chain=2, dim=4),
    "torus": dict(n_warm=40, n_main=100, n_chain=2, dim=3),
}


def model(workload):
    """(neg_log_dens, constr or None) of a workload, in autograd.numpy."""
    import autograd.numpy as anp
    if workload == "hier":  # eight schools, non-centred
        y_obs = np.array([28., 8., -3., 7., -1., 1., 18., 12.])
        sig = np.array([15., 10., 16., 11., 9., 11., 10., 18.])

        def neg_log_dens(q):
            mu, log_tau, eta = q[0], q[1], q[2:]
            theta = mu + anp.exp(log_tau) * eta
            return (anp.sum(((y_obs - theta) / sig) ** 2) / 2 + anp.sum(eta ** 2) / 2
                    + mu ** 2 / 50 + anp.log1p((anp.exp(log_tau) / 5) ** 2) - log_tau)
        return neg_log_dens, None
    if workload == "banana":
        def neg_log_dens(q):
            return (q[0] ** 2) / 20 + (q[1] - 0.5 * q[0] ** 2 + 2.0) ** 2 / 2 + anp.sum(q[2:] ** 2) / 2
        return neg_log_dens, None
    if workload == "torus":  # mici's README example (symnum there), in autograd.numpy
        R, r, alpha = 1.0, 0.5, 0.9

        def constr(q):
            x, y, z = q
            return anp.array([((x ** 2 + y ** 2) ** 0.5 - R) ** 2 + z ** 2 - r ** 2])

        def neg_log_dens(q):
            x, y, z = q
            th = anp.arctan2(y, x)
            ph = anp.arctan2(z, x / anp.cos(th) - R)
            return anp.log1p(r * anp.cos(ph) / R) - anp.log1p(anp.sin(4 * th) * anp.cos(ph) * alpha)
        return neg_log_dens, constr
    raise ValueError(workload)


def sample(workload, contender, out):
    """One workload sampled in this fresh process by `contender`; the chains go to `out` (npz).
    Returns seconds (sampling), job (with autograd_xla's import), jit_ps's counts, the
    FallbackWarnings' causes and the gradient check's worst relative difference."""
    import autograd

    import mici
    spec = WORKLOADS[workload]
    neg_log_dens, constr = model(workload)
    rng = np.random.default_rng(1234)
    made = []
    t0 = time.perf_counter()
    if CONTENDERS[contender] is not None:
        from autograd_xla import jit_ps

        def J(f):
            j = jit_ps(f, **CONTENDERS[contender])
            made.append(j)
            return j
    else:
        def J(f):
            return f
    imported = time.perf_counter() - t0
    user = {"neg_log_dens": J(neg_log_dens), "grad_neg_log_dens": J(autograd.grad(neg_log_dens))}
    if constr is not None:
        user.update(constr=J(constr), jacob_constr=J(autograd.jacobian(constr)))
    n_chain, dim = spec["n_chain"], spec["dim"]
    if workload == "torus":
        R, r = 1.0, 0.5
        th0, ph0 = rng.uniform(0, 2 * np.pi, size=(2, n_chain))
        q_init = np.stack([(R + r * np.cos(ph0)) * np.cos(th0), (R + r * np.cos(ph0)) * np.sin(th0),
                           r * np.sin(ph0)], -1)
    else:
        q_init = rng.standard_normal((n_chain, dim)) * 0.5
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        if workload == "torus":
            def trace_func(state):  # (the system is made inside: positions only, and mici's statistics)
                return {"pos": state.pos}
            _, traces, stats = mici.sample_constrained_hmc_chains(
                n_warm_up_iter=spec["n_warm"], n_main_iter=spec["n_main"], init_states=q_init, backend="autograd",
                seed=rng, n_worker=1, trace_funcs=[trace_func], display_progress=False, trace_warm_up=True, **user)
        else:
            system = mici.systems.EuclideanMetricSystem(user["neg_log_dens"], backend="autograd",
                                                        grad_neg_log_dens=user["grad_neg_log_dens"])
            integrator = mici.integrators.LeapfrogIntegrator(system)
            adapters = [mici.adapters.DualAveragingStepSizeAdapter(0.8), mici.adapters.OnlineVarianceMetricAdapter()]
            sampler = mici.samplers.DynamicMultinomialHMC(system, integrator, rng)

            def trace_func(state):
                return {"pos": state.pos, "hamiltonian": system.h(state)}
            _, traces, stats = sampler.sample_chains(
                spec["n_warm"], spec["n_main"], q_init, adapters=adapters, trace_funcs=[trace_func], n_worker=1,
                display_progress=False, trace_warm_up=True)
        seconds = time.perf_counter() - t0
    from_jit = [w for w in caught if w.category.__name__ == "FallbackWarning"]
    chains = {f"trace_{k}": np.stack([np.asarray(c) for c in v]) for k, v in traces.items()}
    chains.update({f"stat_{k}": np.stack([np.asarray(c) for c in v]) for k, v in stats.items()})
    np.savez(out, **chains)
    # the gradient (and Jacobian) at the initial and first three states of each chain, against plain autograd's
    check = None
    if made:
        points = [q for q in q_init] + [q for c in chains["trace_pos"] for q in c[:3]]
        pairs = [(user["grad_neg_log_dens"], autograd.grad(neg_log_dens)), (user["neg_log_dens"], neg_log_dens)]
        if constr is not None:
            pairs.append((user["jacob_constr"], autograd.jacobian(constr)))
        check = 0.0
        for q in points:
            for compiled, plain in pairs:
                a, b = np.asarray(compiled(q), dtype=float), np.asarray(plain(q), dtype=float)
                scale = max(float(np.max(np.abs(b))), 1e-300)
                check = max(check, float(np.max(np.abs(a - b))) / scale)
    info = [j.cache_info() for j in made]
    return {"seconds": seconds, "job": imported + seconds,
            "n_step": int(chains["stat_n_step"].sum()) if "stat_n_step" in chains else None,
            **{k: sum(i[k] for i in info) for k in ("traces", "compiles", "upgrades", "fallbacks", "hits",
                                                     "plain_tier_calls", "numpy_tier_calls")},
            "causes": sorted({common.fallback_cause(w.message) for w in from_jit}),
            "grad_check": check}


def chain_agreement(plain, other):
    """plain and other: {name: array (chain, iteration, ...)}. Returns (first iteration where any
    entry differs at all, its relative size there, first iteration beyond RTOL/ATOL, iterations)."""
    first_diff, size, departure = None, None, None
    n = None
    for k in sorted(plain):
        if not k.startswith("trace_"):
            continue
        a, b = np.asarray(plain[k], dtype=float), np.asarray(other[k], dtype=float)
        if a.shape != b.shape:
            return 0, float("inf"), 0, a.shape[1]
        n = a.shape[1]
        a, b = a.reshape(a.shape[0], n, -1), b.reshape(b.shape[0], n, -1)
        differs = np.any((a != b) & ~(np.isnan(a) & np.isnan(b)), axis=(0, 2))
        beyond = np.any(~np.isclose(b, a, rtol=common.RTOL, atol=common.ATOL, equal_nan=True), axis=(0, 2))
        if differs.any():
            i = int(np.argmax(differs))
            if first_diff is None or i < first_diff:
                rel = np.abs(a[:, i] - b[:, i]) / np.maximum(np.abs(a[:, i]), 1e-300)
                first_diff, size = i, float(np.max(rel[np.isfinite(rel)], initial=0.0))
        if beyond.any():
            i = int(np.argmax(beyond))
            departure = i if departure is None else min(departure, i)
    return first_diff, size, departure, n


def identical(x, y):
    return sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k], equal_nan=True) for k in x)


def examples(workloads, contenders, rounds):
    scratch = tempfile.mkdtemp(prefix="mici_examples_")
    results = {}
    try:
        print("| workload | " + " | ".join(contenders) + " |")
        print("|---|" + "---:|" * len(contenders))
        chains = {}
        for workload in workloads:
            count = iter(range(10 ** 6))

            def args(c):
                return [workload, c, os.path.join(scratch, f"{workload}_{c}_{next(count)}.npz")]
            samples = {c: [] for c in contenders}
            labels = list(contenders)
            for r in range(rounds):  # common.interleaved, with a fresh output file per run
                order = labels[r % len(labels):] + labels[:r % len(labels)]
                for c in order:
                    a = args(c)
                    s = common.worker(__file__, *a)
                    s["out"] = a[2]
                    samples[c].append(s)
            if rounds < 2:  # reproducibility wants two runs of the deterministic contender
                for c in contenders:
                    if c == "deterministic":
                        a = args(c)
                        s = common.worker(__file__, *a)
                        s["out"], s["extra"] = a[2], True
                        samples[c].append(s)
            loaded = {}
            for c in contenders:
                loaded[c] = []
                for s in samples[c]:
                    if "error" not in s:
                        with np.load(s.pop("out")) as z:
                            loaded[c].append({k: z[k] for k in z.files})
                    else:
                        s.pop("out", None)
                        loaded[c].append(None)
            chains[workload] = loaded
            results[workload] = samples
            timed = {c: [s for s in samples[c] if not s.get("extra")] for c in contenders}
            plain = common.median_of(timed.get("plain", []), "seconds")
            cells = []
            for c in contenders:
                errors = [s["error"] for s in samples[c] if "error" in s]
                if errors:
                    cells.append(f"error: {errors[0][:80]}")
                    continue
                t, job = common.median_of(timed[c], "seconds"), common.median_of(timed[c], "job")
                fb = sum(s["fallbacks"] for s in timed[c])
                cells.append(common.fmt(t) + ("" if c == "plain" else
                                              f" ({common.ratio(plain, t)}; with import {common.fmt(job)}"
                                              + (f", {fb} fallbacks" if fb else "") + ")"))
            print(f"| {workload} | " + " | ".join(cells) + " |", flush=True)
        print("\nchains against plain's (positions and, but for torus, Hamiltonians; warm-up included), gradient"
              " check, reproducibility. compiles: per run (the first run's upgrades to faster programs); the first"
              " run's calls in the plain tier / numpy tier / compiled (cache hits)\n")
        print("| workload | contender | compiles | fallbacks | gradient at first states (worst relative) |"
              " chain vs plain | bit-identical from run to run |")
        print("|---|---|---:|---:|---|---|---|")
        verdicts = {}
        for workload in workloads:
            loaded, samples = chains[workload], results[workload]
            reference = next((z for z in loaded.get("plain", []) if z is not None), None)
            plain_same = (all(z is not None and identical(reference, z) for z in loaded.get("plain", []))
                          if reference is not None else None)
            for c in contenders:
                runs = [z for z in loaded[c] if z is not None]
                ok = [s for s in samples[c] if "error" not in s]
                if not runs:
                    print(f"| {workload} | {c} | – | – | – | error | – |")
                    continue
                same = all(identical(runs[0], z) for z in runs[1:])
                repro = (f"{'yes' if same else 'NO'} ({len(runs)} runs)" if len(runs) > 1 else "– (1 run)")
                if c == "plain":
                    print(f"| {workload} | plain | – | – | – | (reference; {ok[0].get('n_step')} leapfrog steps)"
                          f" | {repro} |")
                    verdicts[(workload, c)] = {"reproducible": plain_same}
                    continue
                described, wrong = [] if reference is not None else ["no plain run to compare with"], False
                for z in runs if reference is not None else ():
                    first, size, departure, n = chain_agreement(reference, z)
                    if first is None:
                        described.append("bit-identical")
                    elif departure is None:
                        described.append(f"within tolerance (first bit difference at it {first}, {size:.0e})")
                    elif first < departure and size <= ROUNDING:
                        described.append(f"departs at it {departure}/{n}: rounding amplified (first difference "
                                         f"at it {first}, {size:.0e})")
                    else:
                        wrong = True
                        described.append(f"WRONG: departs at it {departure}/{n} (first difference at it {first}, "
                                         f"{size:.1e})")
                described = sorted(set(described), key=described.index)
                grads = [s["grad_check"] for s in ok if s.get("grad_check") is not None]
                worst = max(grads) if grads else None
                grad_cell = "–" if worst is None else (f"{worst:.1e}" + (" WRONG" if worst > GRAD_RTOL else ""))
                compiles = "/".join(str(s["compiles"]) for s in ok) + (
                    f" (+{ok[0]['upgrades']} upgrades); {ok[0]['plain_tier_calls']}/{ok[0]['numpy_tier_calls']}/"
                    f"{ok[0]['hits']}")
                fb = sum(s["fallbacks"] for s in ok)
                causes = sorted({cause for s in ok for cause in s.get("causes", [])})
                fb_cell = str(fb) + (f" ({'; '.join(causes)[:200]})" if causes else "")
                if c == "deterministic" and not same:
                    repro = "NO: " + repro
                print(f"| {workload} | {c} | {compiles} | {fb_cell} | {grad_cell} | {'; '.join(described)} |"
                      f" {repro} |")
                verdicts[(workload, c)] = {"wrong": wrong or (worst is not None and worst > GRAD_RTOL),
                                           "reproducible": same}
            if plain_same is False:
                print(f"  {workload}: plain itself was not bit-identical from run to run")
        bad = [k for k, v in verdicts.items() if v.get("wrong")]
        unrepro = [k for k, v in verdicts.items() if k[1] == "deterministic" and not v["reproducible"]]
        print(f"\ndeterministic=True reproducible (bit-identical chains from run to run): "
              f"{'yes' if not unrepro else 'NO: ' + ', '.join(w for w, _ in unrepro)}"
              + (f"; WRONG: {', '.join(f'{w}/{c}' for w, c in bad)}" if bad else ""))
        return results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=SDIST)
    parser.add_argument("--modes", default="plain,inner,usergrad,deterministic",
                        help="the suite's modes, of " + ",".join(SUITE_MODES))
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="the examples' contenders")
    parser.add_argument("--examples", default=",".join(WORKLOADS))
    parser.add_argument("--no-suite", action="store_true")
    parser.add_argument("--no-examples", action="store_true")
    parser.add_argument("--no-shadow", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        workload, contender, out = args.worker
        print(json.dumps(sample(workload, contender, out)))
        return
    from importlib.metadata import version
    modes = args.modes.split(",")
    for m in modes:
        if m not in SUITE_MODES:
            parser.error(f"unknown mode {m}")
    contenders = args.contenders.split(",")
    for c in contenders:
        if c not in CONTENDERS:
            parser.error(f"unknown contender {c}")
    print(f"mici {version('mici')}; {common.under_test()}; {common.load()}\n")
    out = {}
    if not args.no_suite:
        print("mici's autograd tests (test_autodiff.py, test_interface.py; jax cases deselected):")
        out["suite"] = suite(args.sdist, modes, not args.no_shadow)
    if not args.no_examples:
        print(f"\nexamples: sampling time, a fresh process each (first call included), median of {args.rounds}"
              f" interleaved rounds, and (with import) with autograd_xla's import; {common.load()}; "
              + ", ".join(f"{w} {s['n_chain']} chains x {s['n_warm']}+{s['n_main']} it"
                          for w, s in WORKLOADS.items() if w in args.examples.split(",")) + "\n")
        out["examples"] = examples(args.examples.split(","), contenders, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
