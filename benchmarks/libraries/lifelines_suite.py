"""By hand: lifelines' parametric-fitter tests and fits with its autograd derivatives compiled.

lifelines fits by scipy.optimize.minimize(value_and_grad(nll), jac=True, args=(Ts, E, entry,
weights)) (Nelder-Mead, then L-BFGS-B) and then takes hessian(nll)(...) once, both from
`lifelines.fitters`' module globals. Here those two globals are replaced as a user wanting
lifelines compiled would (benchmarks/lifelines_fits.py does the same):

    lifelines.fitters.value_and_grad = lambda f, *a, **k: jit_ps(value_and_grad(f, *a, **k))
    lifelines.fitters.hessian = lambda f, *a, **k: jit_ps(hessian(f, *a, **k))

1. The suite: lifelines' parametric-fitter test classes from its source distribution
   (`pip download --no-binary :all: --no-deps lifelines==0.30.3`, unpacked; --sdist) run plain
   and with the globals replaced (modes jit, and tiered: `jit_ps(..., tiered=True)`), each a
   pytest process of its own; outcomes compared test by test with plain's, fallbacks counted
   (lifelines fits under simplefilter('ignore'), so the causes are recorded around each call).
2. The fits (item 4 of issue 42: short fits must not lose): each fitter of lifelines_fits.py
   on lifelines' own data, plain, jit and tiered, each in a fresh process (lifelines and the
   data loaded before the clock starts; importing autograd_xla is reported apart), --rounds
   interleaved: the first fit (trace, lowering and XLA compile included), a second fit with a
   fresh fitter, the calls each made, and where the first fit's time went (jit_ps's stats:
   trace, lower, compile seconds). Parameters and log-likelihood are compared with plain's.

    PYTHONPATH=<worktree> <lifelines venv>/bin/python benchmarks/libraries/lifelines_suite.py \
        [--sdist /path/to/lifelines-0.30.3] [--modes plain,jit,tiered] [--no-suite] [--no-fits] \
        [--only WeibullFitter,...] [--rounds 2]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

_path = list(sys.path)
sys.path.insert(0, os.path.dirname(HERE))
import lifelines_fits  # noqa: E402
sys.path[:] = _path  # (lifelines_fits puts its worktree first: the autograd_xla under test is PYTHONPATH's)

SDIST = "lifelines-0.30.3"  # the unpacked sdist (pip download --no-binary :all: --no-deps lifelines==0.30.3)
PARAMETRIC_TESTS = ("TestParametricUnivariateFitters or TestPiecewiseExponentialFitter or TestLogNormalFitter or "
                    "TestLogLogisticFitter or TestWeibullFitter or TestGeneralizedGammaFitter or "
                    "TestExponentialFitter or TestParametricRegressionFitter or TestCustomRegressionModel or "
                    "TestRegressionFitters or TestPiecewiseExponentialRegressionFitter or TestAFTFitters or "
                    "TestLogNormalAFTFitter or TestLogLogisticAFTFitter or TestWeibullAFTFitter or "
                    "TestMixtureCureFitter")
FITTERS = lifelines_fits.UNIVARIATE + lifelines_fits.REGRESSION


def install(mode, made, record=False, counts=None):
    """Route lifelines' value_and_grad and hessian through jit_ps (mode 'jit': tiered=False,
    'tiered': tiered=True, 'default': jit_ps's default; 'jit_vg': value_and_grad only, the
    Hessian, taken once a fit, left plain); in every mode
    count the derivative functions' calls in `counts` when given."""
    import lifelines.fitters
    from autograd import hessian, value_and_grad

    def counted(f, name):
        if counts is None:
            return f

        def call(*args, **kwargs):
            counts[name] += 1
            return f(*args, **kwargs)
        return call

    def routed(transform, name):
        def make(f, *args, **kwargs):
            derivative = transform(f, *args, **kwargs)
            if mode != "plain" and not (mode == "jit_vg" and name == "hessian"):
                from autograd_xla import jit_ps
                derivative = jit_ps(derivative, tiered={"jit": False, "tiered": True}.get(mode))  # default: jit_ps's
                made.append(derivative)
                derivative.lifelines_name = name  # (fit_worker splits the stats by it)
                if record:
                    derivative = common.recording(derivative)
            return counted(derivative, name)
        return make
    if counts is not None:
        counts.update(value_and_grad=0, hessian=0)
    if mode != "plain" or counts is not None:
        lifelines.fitters.value_and_grad = routed(value_and_grad, "value_and_grad")
        lifelines.fitters.hessian = routed(hessian, "hessian")


def patch(mode, made):
    """suite_plugin's LIBRARY_PATCH."""
    install(mode, made, record=True)


def suite(sdist, modes, reuse_plain=None):
    runs = {}
    if reuse_plain:  # plain's outcomes do not depend on the autograd_xla under test
        with open(reuse_plain) as f:
            runs["plain"] = json.load(f)["suite"]["plain"]
        print(f"  plain: outcomes from {reuse_plain}")
    for mode in [m for m in modes if m not in runs]:
        results, seconds, summary = common.run_pytest(
            ["lifelines/tests/test_estimation.py", "-k", PARAMETRIC_TESTS, "-W", "ignore::DeprecationWarning"],
            sdist, "lifelines_suite:patch", mode, pythonpath=[sdist])
        runs[mode] = results
        print(f"  {mode}: pytest says '{summary}' ({seconds:.0f} s)", flush=True)
    print()
    common.suite_table(runs)
    return runs


STATS = ("trace_seconds", "lower_seconds", "compile_seconds", "traces", "compiles", "hits", "plain_tier_calls",
         "fallbacks", "upgrades", "upgrade_seconds")


def fit_worker(name, mode):
    """One fitter in this fresh process under `mode`: first and second fit, calls, stats."""
    import lifelines  # noqa: F401 - imported before the clock, as the data
    from lifelines.datasets import load_rossi, load_waltons
    load_rossi(), load_waltons()
    out = {}
    if mode != "plain":
        t0 = time.perf_counter()
        import autograd_xla  # noqa: F401
        out["import"] = time.perf_counter() - t0
    made, counts = [], {}
    install(mode, made, counts=counts)
    for label in ("first", "second"):
        del made[:]
        t0 = time.perf_counter()
        model = lifelines_fits.fit(name)
        out[label] = time.perf_counter() - t0
        out[label + "_calls"] = dict(counts)
        counts.update(value_and_grad=0, hessian=0)
        for kind in ("value_and_grad", "hessian"):
            info = [j.cache_info() for j in made if j.lifelines_name == kind]
            out[f"{label}_{kind}_stats"] = {k: sum(i[k] for i in info) for k in STATS}
        out[label + "_stats"] = {k: sum(out[f"{label}_{kind}_stats"][k] for kind in ("value_and_grad", "hessian"))
                                 for k in STATS}
    params, variance = lifelines_fits.fitted(model)
    out.update(params=params.tolist(), variance=variance.ravel().tolist(),
               ll=float(getattr(model, "log_likelihood_", np.nan)))
    return out


def fits(names, modes, rounds):
    print(f"whole fits, each a fresh process, median of {rounds} interleaved rounds; {common.load()}\n")
    header(modes)
    rows = {}
    for name in names:
        rows[name] = common.interleaved(__file__, {m: [name, m] for m in modes}, rounds)
        row(name, rows[name], modes)
    return rows


def header(modes):
    jit_modes = [m for m in modes if m != "plain"]
    print("| fitter | calls (v&g + hess) | plain first fit | " + " | ".join(
        f"{m} first fit (ratio)" for m in jit_modes) + " | plain second | " + " | ".join(
        f"{m} second (ratio)" for m in jit_modes) + " | jit first fit: trace / lower / compile (hessian's compile)"
        " ; background upgrades | agrees: params / variance |")
    print("|---|---:|" + "---:|" * (2 + 2 * len(jit_modes)) + "---|---|")


def row(name, samples, modes):
    """One fitter's line of the table from its workers' samples."""
    jit_modes = [m for m in modes if m != "plain"]
    errors = [(m, s["error"]) for m in modes for s in samples[m] if "error" in s]
    if errors:
        print(f"| {name} | error in {errors[0][0]}: {errors[0][1][:120]} |", flush=True)
        return
    plain = samples["plain"][0]
    calls = plain["first_calls"]
    med = {m: {k: common.median_of(samples[m], k) for k in ("first", "second")} for m in modes}
    split = "–"
    if "jit" in samples:
        stat = {k: common.median_of([s["first_stats"] for s in samples["jit"]], k)
                for k in ("trace_seconds", "lower_seconds", "compile_seconds", "upgrade_seconds")}
        hess = common.median_of([s.get("first_hessian_stats", {}) for s in samples["jit"]], "compile_seconds")
        split = (" / ".join(common.fmt(stat[k]) for k in ("trace_seconds", "lower_seconds", "compile_seconds"))
                 + f" ({common.fmt(hess)}) ; {common.fmt(stat['upgrade_seconds'])}")
    agree = []
    for m in jit_modes:
        s = samples[m][0]
        dp = lifelines_fits.relative(np.asarray(plain["params"]), np.asarray(s["params"]))
        dv = lifelines_fits.relative(np.asarray(plain["variance"]), np.asarray(s["variance"]))
        fb = s["first_stats"]["fallbacks"] + s["second_stats"]["fallbacks"]
        agree.append(f"{m}: {dp:.0e} / {dv:.0e}" + (f", {fb} fallbacks" if fb else ""))
    first = " | ".join(f"{common.fmt(med[m]['first'])} ({common.ratio(med['plain']['first'], med[m]['first'])})"
                       for m in jit_modes)
    second = " | ".join(f"{common.fmt(med[m]['second'])} ({common.ratio(med['plain']['second'], med[m]['second'])})"
                        for m in jit_modes)
    print(f"| {name} | {calls['value_and_grad']} + {calls['hessian']} | {common.fmt(med['plain']['first'])} | {first}"
          f" | {common.fmt(med['plain']['second'])} | {second} | {split} | {'; '.join(agree)} |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", default=SDIST)
    parser.add_argument("--modes", default="plain,jit,tiered")
    parser.add_argument("--only", default=",".join(FITTERS))
    parser.add_argument("--no-suite", action="store_true")
    parser.add_argument("--reuse-plain", help="a --json file whose plain suite outcomes to reuse")
    parser.add_argument("--no-fits", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--from-json", help="print the fits table of an earlier --json run, run nothing")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        import warnings
        warnings.simplefilter("ignore")
        print(json.dumps(fit_worker(*args.worker)))
        return
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)["fits"]
        modes = list(next(iter(rows.values())))
        header(modes)
        for name, samples in rows.items():
            row(name, samples, modes)
        return
    import lifelines
    modes = args.modes.split(",")
    print(f"lifelines {lifelines.__version__}; {common.under_test()}; {common.load()}\n")
    out = {}
    if not args.no_suite:
        print("lifelines' parametric-fitter tests:")
        out["suite"] = suite(args.sdist, modes, args.reuse_plain)
    if not args.no_fits:
        print()
        out["fits"] = fits(args.only.split(","), modes, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
