"""The README demo: an unmodified autograd model, trained plainly and under jit_ps.

The model code below is ordinary HIPS/autograd code (an MLP classifier with L2 prior,
trained with autograd's own Adam). The only difference between the two runs is the line
that builds the gradient function:

    plain:    objective_grad = grad(objective)
    compiled: objective_grad = jit_ps(grad(objective))

Both runs start from the same parameters and print the same losses.
"""
import argparse
import time

import numpy as onp

import autograd.numpy as np
from autograd import grad
from autograd.misc.optimizers import adam
from autograd.scipy.special import logsumexp

from autograd_xla import jit_ps


# ----- an autograd model, exactly as autograd users write it ----------------------------------
def init_random_params(scale, layer_sizes, rs):
    return [(scale * rs.randn(m, n), scale * rs.randn(n)) for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    for W, b in params:
        outputs = np.dot(inputs, W) + b
        inputs = np.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    return sum(np.sum(W ** 2) + np.sum(b ** 2) for W, b in params)


def log_posterior(params, inputs, targets, l2_reg):
    log_prior = -l2_reg * l2_norm(params)
    log_lik = np.sum(neural_net_predict(params, inputs) * targets)
    return log_prior + log_lik


def make_data(n, rs):
    """Synthetic 784-pixel, 10-class data (no download): class means plus noise."""
    means = rs.randn(10, 784)
    labels = rs.randint(0, 10, size=n)
    images = means[labels] + 2.0 * rs.randn(n, 784)
    return images / onp.sqrt(784), onp.eye(10)[labels]


# ----- training --------------------------------------------------------------------------------
def train(objective_grad, objective, init_params, num_iters, report_every, label):
    losses = []

    def callback(params, it, g):
        if it % report_every == 0:
            losses.append((it, float(objective(params, it))))

    start = time.perf_counter()
    params = adam(objective_grad, init_params, step_size=0.01, num_iters=num_iters, callback=callback)
    elapsed = time.perf_counter() - start
    return params, losses, elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()

    rs = onp.random.RandomState(0)
    images, targets = make_data(args.samples, rs)
    layer_sizes, l2_reg = [784, 200, 100, 10], 1.0
    init_params = init_random_params(0.1, layer_sizes, rs)

    def objective(params, iter):
        return -log_posterior(params, images, targets, l2_reg)

    every = max(1, args.iters // 5)
    _, plain_losses, plain_time = train(grad(objective), objective, init_params, args.iters, every, "autograd")

    compiled_grad = jit_ps(grad(objective))
    _, jit_losses, jit_time = train(compiled_grad, objective, init_params, args.iters, every, "jit_ps")
    info = compiled_grad.cache_info()

    print(f"MLP {layer_sizes}, {args.samples} samples, Adam, {args.iters} iterations (float64)\n")
    print(f"{'iter':>6} {'autograd loss':>16} {'jit_ps loss':>16}")
    for (it, a), (_, b) in zip(plain_losses, jit_losses):
        print(f"{it:>6} {a:>16.6f} {b:>16.6f}")
    first_call = info["trace_seconds"] + info["lower_seconds"] + info["compile_seconds"]
    print(f"\nplain autograd : {plain_time:7.3f} s")
    print(f"jit_ps         : {jit_time:7.3f} s  (of which {first_call:.3f} s tracing and compiling, once)")
    print(f"speed-up       : {plain_time / jit_time:7.2f}x")
    worst = max(abs(a - b) / max(abs(a), 1e-300) for (_, a), (_, b) in zip(plain_losses, jit_losses))
    print(f"largest relative difference between the loss curves: {worst:.1e}")


if __name__ == "__main__":
    main()
