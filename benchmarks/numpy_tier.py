"""One call of a signature's trace run by numpy (numpy_tier.py: tiered execution's calls while a
signature is held or compiling) against one plain autograd call, and whether their results
are the same bits.

    python benchmarks/numpy_tier.py [--repeat 7]

Workloads: the README demo's regression network and classifier (examples/demo.py), the
benchmarks' small and MNIST-sized MLP gradients, legacy Python loops' gradients (an LSTM, an
Euler integrator, an HMM recursion: rolled into scans), and, where lifelines is installed, the
value_and_grad of each of its parametric fitters on lifelines' Waltons data, captured from a
plain fit as lifelines calls it. Each function is wrapped in a tiered jit_ps whose
signatures are traced at their second call and held (tiering's constants set here), so that
its later calls run by numpy; per workload the fastest of --repeat rounds of calls, one
process, the two sides alternating.
"""
import argparse
import os
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
import bytecode  # noqa: E402,F401  (the package byte-compiled, as installed)

import numpy as onp  # noqa: E402
from autograd import grad  # noqa: E402

from autograd_xla import jit_ps, numpy_tier, tiering  # noqa: E402


def held(fn):
    """A tiered jit_ps of fn whose signatures are traced at their second call and then held."""
    tiering.PLAIN_SECONDS = None
    tiering.plain_budget = lambda learned, call: 0.0 if call is not None else float("inf")
    tiering.COST_PER_EQN = 1e6  # no program pays back: held
    return jit_ps(fn, tiered=True)


def demo_workloads():
    import demo

    class Args:
        samples, iters = 1000, 200
    models = demo.models(Args())
    for name in ("regression", "classifier"):
        _, objective, params, _ = models[name]
        yield f"demo {name}", grad(objective), (params, 0), {}


def mlp_workloads():
    import autograd.numpy as np
    rs = onp.random.RandomState(0)

    def loss(params, x, y):
        for W, b in params[:-1]:
            x = np.tanh(np.dot(x, W) + b)
        W, b = params[-1]
        return np.mean((np.dot(x, W) + b - y) ** 2)
    for sizes, batch in (([4, 16, 16, 1], 16), ([784, 200, 100, 10], 128)):
        params = [(0.1 * rs.randn(m, n), 0.1 * rs.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]
        yield f"MLP {sizes}, batch {batch}", grad(loss), (params, rs.randn(batch, sizes[0]),
                                                          rs.randn(batch, sizes[-1])), {}


def loop_workloads():
    """Legacy Python loops (benchmarks/loop_compile_time.py's), their gradients: traced,
    rolled into scans (rolling.py), whose bodies the tier runs step by step."""
    import loop_compile_time as loops
    for name, f, args in (("LSTM, T = 30", loops.lstm_loop, loops.lstm_args(30, onp.float64)),
                          ("LSTM, T = 100", loops.lstm_loop, loops.lstm_args(100, onp.float64)),
                          ("Euler, 500 steps", loops.euler_loop, loops.euler_args(500, onp.float64)),
                          ("HMM forward, 100 observations", loops.hmm_loop, loops.hmm_args(100, onp.float64))):
        yield f"{name} gradient", grad(f), args, {}


def lifelines_workloads():
    try:
        import lifelines
        import lifelines.fitters as fitters
        from lifelines.datasets import load_waltons
    except ImportError:
        return
    data = load_waltons()
    T, E = data["T"], data["E"]
    made = {
        "WeibullFitter": lifelines.WeibullFitter, "ExponentialFitter": lifelines.ExponentialFitter,
        "LogNormalFitter": lifelines.LogNormalFitter, "LogLogisticFitter": lifelines.LogLogisticFitter,
        "GeneralizedGammaFitter": lifelines.GeneralizedGammaFitter,
        "PiecewiseExponentialFitter": lambda: lifelines.PiecewiseExponentialFitter(breakpoints=[20, 40]),
        "SplineFitter": lambda: lifelines.SplineFitter(knot_locations=onp.percentile(T, [0, 25, 50, 75, 100])),
    }
    original = fitters.value_and_grad
    for name, make in made.items():
        first = []

        def capture(f, *a, **k):
            vg = original(f, *a, **k)

            def call(*args, **kwargs):
                if not first:
                    first.append((vg, args, kwargs))
                return vg(*args, **kwargs)
            return call
        fitters.value_and_grad = capture
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                make().fit(T, E)
        finally:
            fitters.value_and_grad = original
        vg, args, kwargs = first[0]
        yield f"lifelines {name}", vg, args, kwargs


def seconds(call, n):
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    return (time.perf_counter() - t0) / n


def measure(name, fn, args, kwargs, repeat):
    jf = held(fn)
    for _ in range(3):  # untraced, traced and checked against plain autograd, then by numpy
        jf(*args, **kwargs)
    same = numpy_tier.same(jf(*args, **kwargs), fn(*args, **kwargs))
    ran = jf.cache_info()["numpy_tier_calls"] > 0
    plain = numpy = float("inf")
    n = max(1, int(0.05 / max(seconds(lambda: fn(*args, **kwargs), 1), 1e-6)))
    for _ in range(repeat):
        plain = min(plain, seconds(lambda: fn(*args, **kwargs), n))
        numpy = min(numpy, seconds(lambda: jf(*args, **kwargs), n))
    eqns = jf.graph(*args, **kwargs).size()
    how = f"{plain / numpy:.2f}x" if ran else "runs plainly (no numpy tier)"
    print(f"| {name} | {eqns} | {1e3 * plain:.3f} | {1e3 * numpy:.3f} | {how} | {'yes' if same else 'NO'} |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=7)
    opts = p.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores\n")
    print("| workload | primitive calls (a loop's body once) | plain autograd ms | numpy tier ms | speed-up | same bits |")
    print("|---|---:|---:|---:|---:|---|")
    for workloads in (demo_workloads, mlp_workloads, loop_workloads, lifelines_workloads):
        for name, fn, args, kwargs in workloads():
            measure(name, fn, args, kwargs, opts.repeat)


if __name__ == "__main__":
    main()
