"""Compile time of loop-heavy translation rules: jit_ps(grad(f)) where f makes k calls of the
regularised incomplete gamma function (whose portable rule emits two or three `while` loops
each; on the CPU it calls scipy's own loop instead, rules/special.py's SCIPY_LOOPS, unless
--portable lowers as other platforms do).

    python benchmarks/special_compile_time.py [--ks 1,2,4,8] [--repeat 3] [--portable]

For each k: the StableHLO size, and trace / lower / XLA compile seconds of a fresh function
(median of --repeat; a constant differs per repeat so that no cached program answers), with
the gradient checked against plain autograd. Prints a markdown table.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import autograd.numpy as np  # noqa: E402
import numpy as onp  # noqa: E402
from autograd import grad  # noqa: E402
from autograd.scipy.special import gammainc  # noqa: E402

from autograd_xla import jit_ps  # noqa: E402


def loss(k, scale):
    """sum over i < k of sum(gammainc(1.5 + i, x * (1 + 0.1 i) * scale) ** 2): the gradient
    needs each call's value, so every loop is compiled."""
    def f(x):
        total = 0.0
        for i in range(k):
            total = total + np.sum(gammainc(1.5 + i, x * (1.0 + 0.1 * i) * scale) ** 2)
        return total
    return f


def measure(k, repeat, x):
    rows = []
    for r in range(repeat):
        f = loss(k, 1.0 + 1e-3 * r)
        jf = jit_ps(grad(f), fallback="error")
        got = jf(x)
        assert onp.allclose(got, grad(f)(x), rtol=1e-10, atol=1e-12), k
        s = jf.stats
        rows.append((s.trace_seconds, s.lower_seconds, s.compile_seconds, len(jf.stablehlo(x))))
    return [statistics.median(col) for col in zip(*rows)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ks", default="1,2,4,8")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--portable", action="store_true", help="lower as non-CPU platforms do")
    args = p.parse_args()
    if args.portable:
        import scipy.special  # noqa: F401  (registers the rules)
        from autograd_xla.rules import special
        special.FORCE_PORTABLE = True
    x = onp.linspace(0.1, 5.0, 10)
    print(f"load average {os.getloadavg()[0]:.2f}\n")
    print("| k | StableHLO | trace | lower | XLA compile |\n|---:|---:|---:|---:|---:|")
    for k in map(int, args.ks.split(",")):
        trace, lower, comp, size = measure(k, args.repeat, x)
        print(f"| {k} | {size / 1024:.0f} KiB | {trace * 1e3:.0f} ms | {lower * 1e3:.0f} ms | {comp:.2f} s |")


if __name__ == "__main__":
    main()
