"""The README demo: unmodified autograd models, trained plainly and under jit_ps.

The model code below is ordinary HIPS/autograd code (a small regression network and an
MLP classifier, with L2 priors, trained with autograd's own Adam). The only difference
between the two runs of each is the line that builds the gradient function:

    plain:    objective_grad = grad(objective)
    compiled: objective_grad = jit_ps(grad(objective))

Both runs start from the same parameters and print the same losses.
"""
import argparse
import time

import numpy as onp

import autograd.numpy as np
from autograd import grad
from autograd.misc.flatten import flatten
from autograd.misc.optimizers import adam
from autograd.scipy.special import logsumexp
from autograd.scipy.stats import norm

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


def regression_data(n, rs):
    """Noisy samples of a cosine: the data of autograd's neural_net_regression example."""
    inputs = onp.concatenate([onp.linspace(0, 2, num=n // 2), onp.linspace(6, 8, num=n - n // 2)])
    targets = onp.cos(inputs) + rs.randn(n) * 0.1
    return ((inputs - 4.0) / 4.0).reshape((n, 1)), targets.reshape((n, 1))


def regression_log_posterior(params, inputs, targets, noise_scale=0.1, l2_reg=0.1):
    for W, b in params[:-1]:
        inputs = np.tanh(np.dot(inputs, W) + b)
    W, b = params[-1]
    predictions = np.dot(inputs, W) + b
    log_prior = -l2_reg * l2_norm(params)
    log_lik = np.sum(norm.logpdf(predictions, targets, noise_scale))
    return log_prior + log_lik


# ----- training --------------------------------------------------------------------------------
def train(name, objective_grad, objective, init_params, num_iters, report_every):
    """Adam from init_params; logs the loss every report_every steps, and prints progress on one
    line as it goes. Returns the losses, the seconds in all, the seconds spent logging and the
    seconds spent in the gradient calls."""
    losses, logging, in_gradient, start = [], [0.0], [0.0], time.perf_counter()
    print(f"  {name:>8}: iteration", end="", flush=True)

    def timed_grad(params, it):
        begin = time.perf_counter()
        try:
            return objective_grad(params, it)
        finally:
            in_gradient[0] += time.perf_counter() - begin

    def callback(params, it, g):
        if it % report_every == 0:
            begin = time.perf_counter()
            losses.append((it, float(objective(params, it))))
            logging[0] += time.perf_counter() - begin
            print(f"{',' if it else ''} {it} at {begin - start:.1f} s", end="", flush=True)

    adam(timed_grad, init_params, step_size=0.01, num_iters=num_iters, callback=callback)
    seconds = time.perf_counter() - start
    print(f", {num_iters} at {seconds:.1f} s")
    return losses, seconds, logging[0], in_gradient[0]


def seconds_per_call(gradient, params, budget=0.5):
    """Best of five batches of calls, about `budget` seconds in all."""
    gradient(params, 0)
    start = time.perf_counter()
    gradient(params, 0)
    calls = max(1, int(budget / 5 / max(time.perf_counter() - start, 1e-6)))
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            gradient(params, 0)
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def compare(title, objective, init_params, num_iters):
    """Train with grad(objective), then with jit_ps(grad(objective)); print both."""
    print(f"{title}, Adam, {num_iters} iterations (float64)\n")
    every = max(1, num_iters // 5)
    plain_losses, plain_time, _, plain_gradients = train("autograd", grad(objective), objective, init_params,
                                                         num_iters, every)
    compiled_grad = jit_ps(grad(objective))
    jit_losses, jit_time, jit_logging, gradients = train("jit_ps", compiled_grad, objective, init_params,
                                                         num_iters, every)
    info = compiled_grad.cache_info()
    plain_tier = compiled_grad.stats.plain_tier_calls  # (before the calls timed below)
    plain_g, jit_g = flatten(grad(objective)(init_params, 0))[0], flatten(compiled_grad(init_params, 0))[0]
    start_gap = onp.max(onp.abs(plain_g - jit_g)) / onp.max(onp.abs(plain_g))
    per_call = [seconds_per_call(g, init_params) for g in (grad(objective), compiled_grad)]

    print(f"\n{'iter':>6} {'autograd loss':>16} {'jit_ps loss':>16}")
    for (it, a), (_, b) in zip(plain_losses, jit_losses):
        print(f"{it:>6} {a:>16.6f} {b:>16.6f}")
    first_call = info["trace_seconds"] + info["lower_seconds"] + info["compile_seconds"]
    one_call = per_call[0] / per_call[1]
    print(f"\nplain autograd : {plain_time:7.3f} s")
    print(f"jit_ps         : {jit_time:7.3f} s  (of which {first_call:.3f} s tracing and compiling, once; "
          f"{plain_tier} first calls ran as plain autograd: tiered execution)")
    print(f"speed-up       : {plain_time / jit_time:7.2f}x  (one gradient call: {1e3 * per_call[0]:.2f} ms plain, "
          f"{1e3 * per_call[1]:.2f} ms jit_ps, {one_call:.1f}x)")
    # The rest of a step is autograd's Adam: unflatten_optimizer (autograd.misc.optimizers) flattens
    # the gradient and unflattens the parameters every step (twice more for the callback), each a
    # make_vjp trace or a backward pass in autograd, and updates them in numpy; none of it is compiled.
    # The gradient calls are timed as they ran: a signature's first calls run as plain autograd
    # until they have cost about twice a compile, then the program XLA compiles fastest while a
    # faster one is made and tried beside it (autograd_xla.tiering).
    adam_own = jit_time - gradients - jit_logging
    print(f"why not {one_call:.1f}x: of jit_ps's {jit_time:.3f} s, {gradients:.3f} s went to the {num_iters} "
          f"gradient calls (plain: {plain_gradients:.3f} s), {first_call:.3f} s of it tracing and compiling, "
          f"{plain_tier} of them plain, and {num_iters * per_call[1]:.3f} s what they all cost once settled; "
          f"{adam_own:.3f} s is "
          f"Adam's own work, which jit_ps leaves to autograd (it flattens and unflattens the parameters every "
          f"step), {jit_logging:.3f} s logging losses")
    worst = max(abs(a - b) / max(abs(a), 1e-300) for (_, a), (_, b) in zip(plain_losses, jit_losses))
    print(f"largest relative difference: gradient at the start {start_gap:.1e}, loss curves {worst:.1e}")
    print("(a training run amplifies last-digit differences between BLAS and XLA arithmetic)\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="Adam iterations of the classifier")
    parser.add_argument("--samples", type=int, default=1000, help="training images of the classifier")
    args = parser.parse_args()
    rs = onp.random.RandomState(0)

    # 1. A small regression network: autograd's tape costs more than the arithmetic, which
    #    jit_ps compiles away (one fused program per gradient call); autograd's Adam, which
    #    flattens and unflattens the parameters every step, then takes most of the time (the
    #    "why not" line measures it).
    inputs, y = regression_data(80, rs)
    small_params = init_random_params(0.1, [1, 20, 20, 1], rs)

    def regression_objective(params, iter):
        return -regression_log_posterior(params, inputs, y)
    compare("Regression MLP [1, 20, 20, 1], 80 points", regression_objective, small_params, 5 * args.iters)

    # 2. An MNIST-sized classifier: the time goes into large matrix products and the
    #    elementwise work around them, which XLA fuses; Adam's own work per step weighs less.
    images, targets = make_data(args.samples, rs)
    layer_sizes, l2_reg = [784, 200, 100, 10], 1.0
    big_params = init_random_params(0.1, layer_sizes, rs)

    def objective(params, iter):
        return -log_posterior(params, images, targets, l2_reg)
    compare(f"Classifier MLP {layer_sizes}, {args.samples} samples", objective, big_params, args.iters)


if __name__ == "__main__":
    main()
