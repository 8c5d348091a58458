"""Which nesting to use: `jit_ps(grad(f))` (the backward pass compiled with the forward pass,
one program) against `grad(jit_ps(f))` (autograd differentiates a compiled call: a program
for the forward pass and one for its VJP, called from autograd's backward pass).

    python benchmarks/nesting.py [--repeat N] [--target-ms MS] [--n 5000] [--d 100]

The function is the benchmarks' logistic loss (workloads.logreg_loss) on X n x d, float64,
its gradient in w taken three ways, interleaved in one process (timing.py): plain autograd,
and the two nestings. Prints a markdown table of median times per call and the speed-up
over plain autograd.
"""
import argparse
import os
import sys

import numpy as onp
from autograd import grad

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autograd_xla import jit_ps  # noqa: E402
from timing import format_seconds, interleaved, settle, summarize  # noqa: E402
from workloads import logreg_loss  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--target-ms", type=float, default=40.0)
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--d", type=int, default=100)
    args = parser.parse_args()
    rs = onp.random.RandomState(0)
    X, y, w = rs.randn(args.n, args.d), (rs.rand(args.n) > 0.5).astype(float), rs.randn(args.d) * 0.1
    inputs = (w, X, y)
    whole, outside = jit_ps(grad(logreg_loss), fallback="error"), grad(jit_ps(logreg_loss, fallback="error"))
    want = grad(logreg_loss)(*inputs)
    for f in (whole, outside):
        assert onp.allclose(f(*inputs), want, rtol=1e-10, atol=0), "a nesting disagrees with plain autograd"
    settle(whole, inputs)
    contenders = {"grad(f), plain autograd": (grad(logreg_loss), inputs),
                  "jit_ps(grad(f))": (whole, inputs),
                  "grad(jit_ps(f))": (outside, inputs)}
    samples, _ = interleaved(contenders, args.repeat, args.target_ms / 1e3, lead=0.15)
    plain = summarize(samples["grad(f), plain autograd"])["median"]
    print(f"Gradient of a logistic loss, X {args.n}x{args.d} float64, median of {args.repeat} samples\n")
    print("| nesting | time per call | speed-up over plain autograd |\n|---|---|---|")
    for name in contenders:
        median = summarize(samples[name])["median"]
        print(f"| `{name}` | {format_seconds(median)} | {plain / median:.2f}x |")


if __name__ == "__main__":
    main()
