"""By hand: lifelines' parametric fitters, an autograd-based library none of us wrote, with
their gradients and Hessians compiled by jit_ps.

lifelines fits by scipy.optimize.minimize(value_and_grad(nll), jac=True) and then takes
hessian(nll) once, both from `lifelines.fitters` (module globals, built afresh inside every
`fit`). This script replaces those two globals, as a user wanting lifelines compiled would:

    lifelines.fitters.value_and_grad = lambda f, *a, **k: jit_ps(value_and_grad(f, *a, **k), tiered=...)
    lifelines.fitters.hessian = lambda f, *a, **k: jit_ps(hessian(f, *a, **k), tiered=...)

and fits each model on lifelines' own datasets: plainly (median of --repeat), then under jit_ps
twice with fresh fitters (the first fit traces and compiles; the second traces again, a fresh
closure, and finds its programs compiled: `compiles` 0), and once more with tiered execution in a
fresh process. It reports the parameters' and variance matrices' largest difference from
the plain fit, and the fallbacks (lifelines silences warnings while it fits, so they are
counted from cache_info(), not caught).

    pip install lifelines
    python benchmarks/lifelines_fits.py [--only WeibullFitter,...] [--repeat 3]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

UNIVARIATE = ["WeibullFitter", "ExponentialFitter", "LogNormalFitter", "LogLogisticFitter", "GeneralizedGammaFitter",
              "PiecewiseExponentialFitter", "SplineFitter", "MixtureCureFitter"]
REGRESSION = ["WeibullAFTFitter", "LogNormalAFTFitter", "LogLogisticAFTFitter", "PiecewiseExponentialRegressionFitter",
              "GeneralizedGammaRegressionFitter"]


def fit(name):
    """A fresh fitter of lifelines' class `name`, fitted to one of lifelines' datasets."""
    import lifelines
    from lifelines.datasets import load_rossi, load_waltons
    cls = getattr(lifelines, name)
    if name in UNIVARIATE:
        waltons = load_waltons()
        T, E = waltons["T"].values, waltons["E"].values
        model = (cls(breakpoints=[20, 40]) if name == "PiecewiseExponentialFitter" else
                 cls(knot_locations=np.percentile(T, [0, 33, 66, 100])) if name == "SplineFitter" else
                 cls(base_fitter=lifelines.ExponentialFitter()) if name == "MixtureCureFitter" else cls())
        return model.fit(T, E)
    rossi = load_rossi()
    if name == "GeneralizedGammaRegressionFitter":
        data = rossi.assign(Intercept=1.0)
        covariates = list(rossi.columns.difference(["week", "arrest"]))
        return cls().fit(data, "week", "arrest",
                         regressors={"mu_": covariates, "sigma_": ["Intercept"], "lambda_": ["Intercept"]})
    model = cls(breakpoints=[10, 30]) if name == "PiecewiseExponentialRegressionFitter" else cls()
    return model.fit(rossi, "week", "arrest")


def compile_lifelines(tiered):
    """Route lifelines' value_and_grad and hessian through jit_ps; returns the jitted functions
    made so far (a list that grows)."""
    import lifelines.fitters
    from autograd import hessian, value_and_grad

    from autograd_xla import jit_ps
    made = []

    def compiled(transform):
        def make(f, *args, **kwargs):
            jitted = jit_ps(transform(f, *args, **kwargs), tiered=tiered)
            made.append(jitted)
            return jitted
        return make
    lifelines.fitters.value_and_grad = compiled(value_and_grad)
    lifelines.fitters.hessian = compiled(hessian)
    return made


def fitted(model):
    return np.asarray(model.params_, dtype=float).ravel(), np.asarray(model.variance_matrix_, dtype=float)


def relative(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-300))


def measure(name, repeat):
    """One fitter in this process: plain, then jit_ps twice (cold, then a fresh fitter)."""
    seconds = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        plain = fit(name)
        seconds.append(time.perf_counter() - t0)
    reference = fitted(plain)
    made = compile_lifelines(tiered=False)
    row = {"plain": float(np.median(seconds))}
    for label in ("first", "second"):
        del made[:]
        t0 = time.perf_counter()
        model = fit(name)
        row[label] = time.perf_counter() - t0
        info = [j.cache_info() for j in made]
        row[label + " compiles"] = sum(i["compiles"] for i in info)
        row["fallbacks"] = sum(i["fallbacks"] for i in info)
        params, variance = fitted(model)
        row["params"], row["variance"] = relative(reference[0], params), relative(reference[1], variance)
    return row


def measure_tiered(name):
    compile_lifelines(tiered=True)
    t0 = time.perf_counter()
    fit(name)
    return {"tiered": time.perf_counter() - t0}


def in_subprocess(name, what, repeat):
    out = subprocess.run([sys.executable, __file__, "--worker", what, "--only", name, "--repeat", str(repeat)],
                         capture_output=True, text=True, timeout=900)
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def fmt(seconds):
    return f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(UNIVARIATE + REGRESSION))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--worker", choices=["jit", "tiered"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.only.split(",")
    if args.worker:
        import warnings
        warnings.simplefilter("ignore")
        row = measure(names[0], args.repeat) if args.worker == "jit" else measure_tiered(names[0])
        print(json.dumps(row))
        return
    try:
        import lifelines
    except ImportError:
        sys.exit("lifelines is not installed: pip install lifelines")
    print(f"lifelines {lifelines.__version__}, load average {os.getloadavg()[0]:.2f}\n")
    print("| fitter | plain | jit_ps: first fit | second fit (compiles) | tiered first fit | params / variance vs plain"
          " | fallbacks |")
    print("|---|---:|---:|---:|---:|---|---:|")
    for name in names:
        row = in_subprocess(name, "jit", args.repeat)
        if "error" in row:
            print(f"| {name} | error: {row['error']} | | | | | |")
            continue
        row.update(in_subprocess(name, "tiered", args.repeat))
        tiered = fmt(row["tiered"]) if "tiered" in row else row.get("error", "?")
        print(f"| {name} | {fmt(row['plain'])} | {fmt(row['first'])} | {fmt(row['second'])} ({row['second compiles']})"
              f" | {tiered} | {row['params']:.1e} / {row['variance']:.1e} | {row['fallbacks']} |", flush=True)


if __name__ == "__main__":
    main()
