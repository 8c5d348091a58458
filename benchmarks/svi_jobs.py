"""autograd's stochastic-objective examples as whole jobs: Adam on a fresh objective, each job a
fresh process, plain autograd against the recipes a user of them would write; contenders
interleaved over --rounds, medians.

    python benchmarks/svi_jobs.py [--rounds 3] [--only black_box_svi,...] [--iters N]

The objectives are autograd 1.9.1's examples/ as benchmarks/autograd_examples.py builds them
(black_box_svi: 2,000 samples of a 2-D funnel; bayesian_neural_net: 20 samples of a 1-20-20-1
network's weights; mixture_variational_inference: a mixture of 10 Gaussians, 2,000 samples
each component), each drawing its samples from a closed-over RandomState at every call, and the
examples' optimiser, `autograd.misc.optimizers.adam`, --iters steps (default: the examples'
own, 2,000 and 1,000; the mixture's 100). Contenders:

* plain: `grad(objective)`, as the examples run;
* grad_jit: `grad(jit_ps(objective))`, the objective compiled where a library differentiates
  it (jit_ps's default, tiered: plain calls first);
* grad_jit_compiled: the same with `jit_ps(objective, tiered=False)`, compiled at the first call;
* jit_grad: `jit_ps(grad(objective))`.

Each job reports its seconds, the final parameters' distance from plain's (the draws are the
same numbers: rounding apart, the same path) and whether a FallbackWarning was raised.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import bytecode  # noqa: E402,F401  (the package byte-compiled, as installed)

MODES = ("plain", "grad_jit", "grad_jit_compiled", "jit_grad")
ITERS = {"black_box_svi": 2000, "bayesian_neural_net": 1000, "mixture_variational_inference": 100}


def job(name, mode, iters):
    """One job in this process: seconds, the final parameters, fallback warnings."""
    sys.path.insert(0, HERE)
    import numpy as onp
    import autograd_examples as ex
    from autograd import grad
    from autograd.misc.optimizers import adam
    ex.stub_matplotlib()
    spec = getattr(ex, f"ex_{name}")()
    objective, (init, _) = spec["fun"], spec["args"]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode != "plain":
            from autograd_xla import jit_ps
        gradient = {"plain": lambda: grad(objective),
                    "grad_jit": lambda: grad(jit_ps(objective)),
                    "grad_jit_compiled": lambda: grad(jit_ps(objective, tiered=False)),
                    "jit_grad": lambda: jit_ps(grad(objective))}[mode]()
        params = adam(gradient, init, step_size=0.1, num_iters=iters)
    seconds = time.perf_counter() - t0
    fallbacks = [str(w.message).splitlines()[0] for w in caught if type(w.message).__name__ == "FallbackWarning"]
    return {"seconds": seconds, "params": onp.asarray(params).tolist(), "fallbacks": fallbacks}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=",".join(ITERS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--iters", type=int, default=None)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.worker:
        name, mode, iters = opts.worker
        print(json.dumps(job(name, mode, int(iters))))
        return
    import numpy as onp
    modes = opts.modes.split(",")
    for name in opts.only.split(","):
        iters = opts.iters or ITERS[name]
        runs = {m: [] for m in modes}
        for _ in range(opts.rounds):
            for mode in modes:
                out = subprocess.run([sys.executable, __file__, "--worker", name, mode, str(iters)],
                                     capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        plain = statistics.median(r["seconds"] for r in runs["plain"]) if "plain" in runs else None
        reference = onp.asarray(runs["plain"][0]["params"]) if "plain" in runs else None
        print(f"{name}, {iters} Adam steps (medians of {opts.rounds}, each job a fresh process):")
        for mode in modes:
            seconds = statistics.median(r["seconds"] for r in runs[mode])
            ratio = f" ({plain / seconds:.2f}x plain's speed)" if plain and mode != "plain" else ""
            diff = ""
            if reference is not None and mode != "plain":
                rel = max(float(onp.max(onp.abs(onp.asarray(r["params"]) - reference)) / onp.max(onp.abs(reference)))
                          for r in runs[mode])
                diff = f"; final parameters within {rel:.1e} of plain's"
            fell = sorted({f for r in runs[mode] for f in r["fallbacks"]})
            print(f"  {mode:18s} {seconds:8.3f} s{ratio}{diff}" + (f"; fell back: {fell[0][:150]}" if fell else ""))


if __name__ == "__main__":
    main()
