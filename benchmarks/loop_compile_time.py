"""Trace and compile time of a Python loop unrolled at trace time versus the same loop as
`fori_loop` / `scan` (one `stablehlo.while` whose body is traced once).

    python benchmarks/loop_compile_time.py [--sizes 10,100,1000] [--repeat 3] [--no-grad] [--width 16]

The loop is an RNN step, c = tanh(W @ c + x[i]), over n rows of x. For each n and each
form it reports, for jit_ps(loss) and (unless --no-grad) jit_ps(grad(loss)): the seconds
spent tracing, lowering to StableHLO and compiling with XLA on the first call (median of
--repeat fresh functions; each repeat changes a constant so XLA's program cache cannot
answer), and the median steady-state time of one call. Prints a markdown table.
"""
import argparse
import os
import platform
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autograd.numpy as np  # noqa: E402
import numpy as onp  # noqa: E402
from autograd import grad  # noqa: E402

import timing  # noqa: E402
from autograd_xla import fori_loop, jit_ps, scan  # noqa: E402


def losses(scale):
    """The three forms of one loss; `scale` differs per repeat to defeat program caching."""
    def step(W, c, x):
        return np.tanh(np.dot(W, c) * scale + x)

    def unrolled(W, c, xs):
        for i in range(xs.shape[0]):
            c = step(W, c, xs[i])
        return np.sum(c ** 2)

    def with_fori(W, c, xs):
        return np.sum(fori_loop(0, xs.shape[0], lambda i, c: step(W, c, xs[i]), c) ** 2)

    def with_scan(W, c, xs):
        return np.sum(scan(lambda c, x: (step(W, c, x), None), c, xs)[0] ** 2)

    return {"unrolled Python loop": unrolled, "fori_loop": with_fori, "scan": with_scan}


def measure(fn, args):
    jf = jit_ps(fn)
    jf(*args)
    s = jf.stats
    compile_s = s.compile_seconds
    steady = timing.time_calls(jf, args, 20) / 20
    return s.trace_seconds, s.lower_seconds, compile_s, steady


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--no-grad", action="store_true")
    opts = parser.parse_args()
    sizes = [int(n) for n in opts.sizes.split(",")]
    rng = onp.random.RandomState(0)
    W = rng.randn(opts.width, opts.width) / onp.sqrt(opts.width)
    c0 = rng.randn(opts.width)
    modes = [("value", lambda f: f)] + ([] if opts.no_grad else [("grad", lambda f: grad(f))])

    print(f"Loop trace/compile time: {platform.machine()}, Python {platform.python_version()}, "
          f"width {opts.width}, float64, median of {opts.repeat} fresh compiles\n")
    print("| n | form | jit_ps of | trace (s) | lower (s) | XLA compile (s) | first call total (s) "
          "| steady call (µs) |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    for n in sizes:
        xs = rng.randn(n, opts.width)
        for name in losses(1.0):
            for mode, transform in modes:
                rows = []
                for r in range(opts.repeat):
                    fn = transform(losses(1.0 + 1e-9 * (r + 1) + 1e-6 * n)[name])
                    rows.append(measure(fn, (W, c0, xs)))
                trace, lower, comp, steady = (statistics.median(col) for col in zip(*rows))
                print(f"| {n} | {name} | {mode} | {trace:.3f} | {lower:.3f} | {comp:.3f} | "
                      f"{trace + lower + comp:.3f} | {steady * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
