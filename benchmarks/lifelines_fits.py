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

--jobs N: each fit as a short job instead, a fresh process each, plain and under jit_ps's
default (tiered), N rounds interleaved: from before `import autograd_xla` (plain imports none
of it) to the fit's end, lifelines and autograd imported before in both; the fit alone (from
after that import); and each process's wall time. --roots label=path,... measures the autograd_xla of each path side by side.

    pip install lifelines
    python benchmarks/lifelines_fits.py [--only WeibullFitter,...] [--repeat 3] [--jobs 3 [--roots a=/x,b=/y]]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT_ENV = "LIFELINES_FITS_ROOT"  # the checkout whose autograd_xla a worker imports (--roots)
ROOT = os.environ.get(ROOT_ENV) or os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
import bytecode  # noqa: E402,F401  (ROOT's package byte-compiled, as installed)

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


def job(name, mode):
    """One fit as a short job in this fresh process (`mode` plain or tiered, jit_ps's default):
    seconds from before autograd_xla's import to the fit's end, and the fit's alone."""
    import autograd  # noqa: F401 (imported by both: not part of the job)
    import lifelines.fitters  # noqa: F401
    t0 = time.perf_counter()
    made = compile_lifelines(tiered=None) if mode == "tiered" else []
    t1 = time.perf_counter()
    model = fit(name)
    t2 = time.perf_counter()
    info = [j.cache_info() for j in made]
    return {"seconds": t2 - t0, "fit": t2 - t1, "compiles": sum(i["compiles"] for i in info), "jaxlib": "jaxlib" in sys.modules,
            "params": fitted(model)[0].tolist()}


def compiled_bytecode(root):
    """Write the bytecode of `root`'s autograd_xla where its jobs' imports look for it (the
    __pycache__ folders, or $PYTHONPYCACHEPREFIX), as installing a package does: a job is to
    time the package, not Python compiling its source. Under $PYTHONDONTWRITEBYTECODE no
    import writes it, and a stale cache costs each job the source's compile (0.07-0.13 s for
    the import alone, measured, and more for the modules imported at the first calls)."""
    import compileall
    compileall.compile_dir(os.path.join(root, "autograd_xla"), quiet=1)


def job_in_subprocess(name, mode, root=None):
    """job() in a fresh process with the autograd_xla of `root` (None: this script's), and
    that process's wall time."""
    env = dict(os.environ, **({ROOT_ENV: root} if root else {}))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--worker", "job-" + mode, "--only", name],
                         capture_output=True, text=True, timeout=900, env=env)
    wall = time.perf_counter() - t0
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return dict(json.loads(out.stdout.strip().splitlines()[-1]), process=wall)


def jobs(names, rounds, roots):
    """The --jobs table: per fitter, the medians of `rounds` interleaved rounds (the order
    rotated), plain against jit_ps's default from each root."""
    contenders = [("plain", "plain", None)] + [(f"tiered {label}".strip(), "tiered", root) for label, root in roots]
    for root in {root or ROOT for _, _, root in contenders[1:]}:
        compiled_bytecode(root)
    print(f"short jobs: import + first fit, a fresh process each, median of {rounds} interleaved rounds;"
          f" load average {os.getloadavg()[0]:.2f}\n")
    print("| fitter | " + " | ".join(c[0] for c in contenders) + " | fit alone: " + " / ".join(c[0] for c in contenders)
          + " | process: " + " / ".join(c[0] for c in contenders) + " | compiles; jaxlib imported | params vs plain |")
    print("|---|" + "---:|" * len(contenders) + "---|---|---|---|")
    for name in names:
        samples = {c[0]: [] for c in contenders}
        for r in range(rounds):
            for label, mode, root in contenders[r % len(contenders):] + contenders[:r % len(contenders)]:
                samples[label].append(job_in_subprocess(name, mode, root))
        errors = [s["error"] for v in samples.values() for s in v if "error" in s]
        if errors:
            print(f"| {name} | error: {errors[0]} |", flush=True)
            continue
        med = {label: tuple(float(np.median([s[k] for s in v])) for k in ("seconds", "process", "fit"))
               for label, v in samples.items()}
        plain = med["plain"][0]
        cells = [fmt(plain)] + [f"{fmt(med[c[0]][0])} ({plain / med[c[0]][0]:.2f}x)" for c in contenders[1:]]
        walls = " / ".join(fmt(med[c[0]][1]) for c in contenders)
        alone = " / ".join([fmt(med["plain"][2])] + [f"{fmt(med[c[0]][2])} ({med['plain'][2] / med[c[0]][2]:.2f}x)"
                                                      for c in contenders[1:]])
        notes = "; ".join(f"{[s['compiles'] for s in samples[c[0]]]} {[s['jaxlib'] for s in samples[c[0]]]}"
                          for c in contenders[1:])
        reference = np.array(samples["plain"][0]["params"])
        agree = max(relative(reference, np.array(s["params"])) for c in contenders[1:] for s in samples[c[0]])
        print(f"| {name} | " + " | ".join(cells) + f" | {alone} | {walls} | {notes} | {agree:.1e} |", flush=True)


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
    parser.add_argument("--jobs", type=int, help="rounds of short jobs (see the docstring)")
    parser.add_argument("--roots", help="label=path,... : autograd_xla roots side by side (--jobs)")
    parser.add_argument("--worker", choices=["jit", "tiered", "job-plain", "job-tiered"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = args.only.split(",")
    if args.worker:
        import warnings
        warnings.simplefilter("ignore")
        row = (measure(names[0], args.repeat) if args.worker == "jit" else measure_tiered(names[0])
               if args.worker == "tiered" else job(names[0], args.worker.removeprefix("job-")))
        print(json.dumps(row))
        return
    try:
        import lifelines
    except ImportError:
        sys.exit("lifelines is not installed: pip install lifelines")
    print(f"lifelines {lifelines.__version__}, load average {os.getloadavg()[0]:.2f}\n")
    if args.jobs:
        roots = [tuple(r.split("=", 1)) for r in args.roots.split(",")] if args.roots else [("", None)]
        jobs(names, args.jobs, roots)
        return
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
