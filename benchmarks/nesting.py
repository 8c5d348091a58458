"""Which nesting to use: `jit_ps(grad(f))` (the backward pass compiled with the forward pass,
one program) against `grad(jit_ps(f))` (autograd differentiates a compiled call, its
programs called from autograd's forward and backward passes).

    python benchmarks/nesting.py [--repeat N] [--target-ms MS] [--n 5000] [--d 100] [--layer 2000,500,400]

Two functions, each's gradient taken three ways, interleaved in one process (timing.py):
plain autograd, and the two nestings. The benchmarks' logistic loss (workloads.logreg_loss)
on X n x d, float64, a scalar jitted whole; and a loss computed outside a jitted layer,
sum(layer(W, X) ** 2) + sum(W ** 2) with layer = 2 tanh(X W), X m x k, W k x h (--layer
m,k,h), whose jitted part returns an m x h array (grad(jit_ps(f)) there: the loss of
jit_ps(layer)). Prints markdown
tables of median times per call and the speed-up over plain autograd.
"""
import argparse
import os
import sys

import autograd.numpy as np
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
    parser.add_argument("--layer", default="2000,500,400", help="m,k,h: the layer's X m x k, W k x h")
    args = parser.parse_args()
    rs = onp.random.RandomState(0)
    X, y, w = rs.randn(args.n, args.d), (rs.rand(args.n) > 0.5).astype(float), rs.randn(args.d) * 0.1
    m, k, h = (int(v) for v in args.layer.split(","))
    X2, W = rs.randn(m, k), rs.randn(k, h) / onp.sqrt(k)
    jitted_layer = jit_ps(layer, fallback="error")
    compare(f"Gradient of a logistic loss, X {args.n}x{args.d} float64", grad(logreg_loss),
            jit_ps(grad(logreg_loss), fallback="error"), grad(jit_ps(logreg_loss, fallback="error")), (w, X, y), args)
    compare(f"Gradient of a loss outside a layer 2 tanh(X W), X {m}x{k}, W {k}x{h} float64",
            grad(outside_loss), jit_ps(grad(outside_loss), fallback="error"),
            grad(lambda W, X: outside_loss(W, X, jitted_layer)), (W, X2), args)


def layer(W, X):
    return 2.0 * np.tanh(X @ W)


def outside_loss(W, X, layer=layer):
    return np.sum(layer(W, X) ** 2) + np.sum(W ** 2)


def compare(title, plain_grad, whole, outside, inputs, args):
    want = plain_grad(*inputs)
    for f in (whole, outside):
        assert onp.allclose(f(*inputs), want, rtol=1e-10, atol=0), "a nesting disagrees with plain autograd"
    settle(whole, inputs)
    contenders = {"grad(f), plain autograd": (plain_grad, inputs),
                  "jit_ps(grad(f))": (whole, inputs),
                  "grad(jit_ps(f))": (outside, inputs)}
    samples, _ = interleaved(contenders, args.repeat, args.target_ms / 1e3, lead=0.15)
    plain = summarize(samples["grad(f), plain autograd"])["median"]
    print(f"{title}, median of {args.repeat} samples\n")
    print("| nesting | time per call | speed-up over plain autograd |\n|---|---|---|")
    for name in contenders:
        median = summarize(samples[name])["median"]
        print(f"| `{name}` | {format_seconds(median)} | {plain / median:.2f}x |")
    print()


if __name__ == "__main__":
    main()
