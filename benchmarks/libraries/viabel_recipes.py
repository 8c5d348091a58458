"""By hand: viabel 0.5.1's black-box variational inference (autograd) under the recipes a user of
jit_ps would try, each a whole fit in a fresh process, contenders interleaved over --rounds.

viabel's `bbvi` fits a mean-field Gaussian to a user's log density; its objective
(`viabel.objectives.ExclusiveKL`) draws its Monte Carlo samples at every call
(`approx.sample`: numpy's global RandomState) and is differentiated by
`autograd.value_and_grad`. Workload: a 10-dimensional correlated Gaussian with a softplus
term, 50 samples a step, --iters steps of RMSProp (`adaptive=False, fixed_lr=True`: the
adaptive default fits a Stan model, pystan, which is not installed; viabel imports pystan at
its top, here a stand-in module; paragami calls `np.product`, gone in numpy 2, given here).
Contenders:

* plain: as viabel runs;
* density / density:untiered: `log_density=jit_ps(log_density)` (jit_ps's default; tiered=False);
* stack / stack:untiered: the objective compiled where viabel differentiates it,
  `value_and_grad(jit_ps(variational_objective))` (its draws replayed under autograd's boxes:
  autodiff.drawing_call);
* vg / vg:untiered: `jit_ps(value_and_grad(variational_objective))`.

Each fit reports its seconds (viabel's import and the fit, first call included), its final
variational parameters' largest relative difference from plain's (the same draws: rounding
apart, the same path) and any FallbackWarning.

    PYTHONPATH=<worktree> <viabel venv>/bin/python benchmarks/libraries/viabel_recipes.py [--rounds 3] [--iters 1000]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

CONTENDERS = ("plain", "density", "density:untiered", "stack", "stack:untiered", "vg", "vg:untiered")


def fit(contender, iters):
    """One fit in this process: seconds, final parameters, fallbacks."""
    import numpy as onp
    t0 = time.perf_counter()
    sys.modules.setdefault("pystan", types.ModuleType("pystan"))  # (imported at viabel's top, unused here)
    import autograd
    import autograd.numpy as np
    np.product = onp.product = np.prod  # paragami's np.product, gone in numpy 2
    import viabel.objectives
    from viabel import bbvi
    rs = onp.random.RandomState(0)
    dim = 10
    a = rs.randn(dim, dim)
    precision, mu = a @ a.T / dim + onp.eye(dim), rs.randn(dim)

    def log_density(x):  # x: (samples, dim)
        d = x - mu
        return -0.5 * np.sum(d @ precision * d, axis=-1) - 0.1 * np.sum(np.log1p(np.exp(x)), axis=-1)
    kind, _, untiered = contender.partition(":")
    density = log_density
    if kind != "plain":
        from autograd_xla import jit_ps
        tiered = False if untiered else None
        if kind == "density":
            density = jit_ps(log_density, tiered=tiered)
        else:
            viabel.objectives.value_and_grad = {
                "stack": lambda f: autograd.value_and_grad(jit_ps(f, tiered=tiered)),
                "vg": lambda f: jit_ps(autograd.value_and_grad(f), tiered=tiered)}[kind]
    onp.random.seed(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with open(os.devnull, "w") as quiet:  # (its progress bar)
            stderr, sys.stderr = sys.stderr, quiet
            try:
                result = bbvi(dim, log_density=density, n_iters=iters, num_mc_samples=50, adaptive=False,
                              fixed_lr=True)
            finally:
                sys.stderr = stderr
    seconds = time.perf_counter() - t0
    fallbacks = sorted({str(w.message).splitlines()[0][:160] for w in caught
                        if type(w.message).__name__ == "FallbackWarning"})
    return {"seconds": seconds, "params": onp.asarray(result["opt_param"]).tolist(), "fallbacks": fallbacks}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=1000)
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        print(json.dumps(fit(opts.worker[0], int(opts.worker[1]))))
        return
    import numpy as onp
    contenders = opts.contenders.split(",")
    print(f"{common.under_test()}; {common.load()}")
    runs = {c: [] for c in contenders}
    for _ in range(opts.rounds):
        for c in contenders:
            out = subprocess.run([sys.executable, __file__, "--worker", c, str(opts.iters)], capture_output=True,
                                 text=True, check=True)
            runs[c].append(json.loads(out.stdout.strip().splitlines()[-1]))
    plain = statistics.median(r["seconds"] for r in runs["plain"])
    reference = onp.asarray(runs["plain"][0]["params"])
    print(f"viabel bbvi, {opts.iters} RMSProp steps, medians of {opts.rounds} fresh processes; {common.load()}")
    for c in contenders:
        seconds = statistics.median(r["seconds"] for r in runs[c])
        rel = max(float(onp.max(onp.abs(onp.asarray(r["params"]) - reference)) / onp.max(onp.abs(reference)))
                  for r in runs[c])
        fell = sorted({f for r in runs[c] for f in r["fallbacks"]})
        print(f"  {c:18s} {seconds:7.3f} s ({plain / seconds:.2f}x plain's speed); parameters within {rel:.1e} of plain's"
              + (f"; fell back: {fell[0]}" if fell else ""))


if __name__ == "__main__":
    main()
