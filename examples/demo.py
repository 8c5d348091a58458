"""The README demo: unmodified autograd models, trained plainly and under jit_ps.

The model code below is ordinary HIPS/autograd code (a small regression network and an
MLP classifier, with L2 priors, trained with autograd's own Adam). Each model is trained
three times, each in a process of its own, from the same parameters; the only difference
is the line that builds the gradient function:

    plain:            objective_grad = grad(objective)
    jit_ps (tiered):  objective_grad = jit_ps(grad(objective))
    compiled at once: objective_grad = jit_ps(grad(objective), tiered=False)

All three print the same losses.
"""
import argparse
import json
import subprocess
import sys
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
CONTENDERS = {
    "plain": ("plain autograd", "grad(objective)"),
    "tiered": ("jit_ps", "jit_ps(grad(objective))"),
    "at_once": ("jit_ps, tiered=False", "jit_ps(grad(objective), tiered=False)"),
}


def models(args):
    """name -> (title, objective, initial parameters, iterations): the two models, their data
    made from one seed, so that every process trains the same ones."""
    rs = onp.random.RandomState(0)
    # 1. A small regression network: autograd's tape costs more than the arithmetic, which
    #    jit_ps compiles away (one fused program per gradient call); autograd's Adam, which
    #    flattens and unflattens the parameters every step, is the rest of a step's time.
    inputs, y = regression_data(80, rs)
    small_params = init_random_params(0.1, [1, 20, 20, 1], rs)

    def regression_objective(params, iter):
        return -regression_log_posterior(params, inputs, y)

    # 2. An MNIST-sized classifier: the time goes into large matrix products (BLAS on the
    #    host, XLA's own in the compiled program), which compiling barely speeds up.
    images, targets = make_data(args.samples, rs)
    layer_sizes, l2_reg = [784, 200, 100, 10], 1.0
    big_params = init_random_params(0.1, layer_sizes, rs)

    def objective(params, iter):
        return -log_posterior(params, images, targets, l2_reg)
    return {"regression": ("Regression MLP [1, 20, 20, 1], 80 points", regression_objective, small_params,
                           5 * args.iters),
            "classifier": (f"Classifier MLP {layer_sizes}, {args.samples} samples", objective, big_params, args.iters)}


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


def train(model, contender, args):
    """One training in this process (a process of its own per contender: two XLA clients, or
    one contender's compiled programs, would otherwise share what the other measures): Adam
    from the model's initial parameters, the loss logged five times; its losses, seconds in
    all, in the gradient calls and in logging, printed as one JSON line."""
    _, objective, params, num_iters = models(args)[model]
    plain = grad(objective)
    gradient = {"plain": lambda: plain, "tiered": lambda: jit_ps(plain),
                "at_once": lambda: jit_ps(plain, tiered=False)}[contender]()
    every, losses, in_gradient, logging = max(1, num_iters // 5), [], [0.0], [0.0]
    start = time.perf_counter()

    def timed_grad(params, it):
        begin = time.perf_counter()
        try:
            return gradient(params, it)
        finally:
            in_gradient[0] += time.perf_counter() - begin

    def callback(params, it, g):
        if it % every == 0:
            begin = time.perf_counter()
            losses.append((it, float(objective(params, it))))
            logging[0] += time.perf_counter() - begin
            print(f"{',' if it else f'  {CONTENDERS[contender][0]:>20}: iteration'} {it} at {begin - start:.1f} s",
                  end="", file=sys.stderr, flush=True)

    adam(timed_grad, params, step_size=0.01, num_iters=num_iters, callback=callback)
    seconds = time.perf_counter() - start
    print(f", {num_iters} at {seconds:.1f} s", file=sys.stderr, flush=True)
    result = {"losses": losses, "seconds": seconds, "gradient": in_gradient[0], "logging": logging[0]}
    if contender != "plain":
        info = gradient.cache_info()
        result["plain_calls"] = info["plain_tier_calls"]
        result["numpy_calls"] = info["numpy_tier_calls"]
        result["making"] = info["trace_seconds"] + info["lower_seconds"] + info["compile_seconds"]
        result["compiled"] = info["compiles"] > 0
        plain_g, jit_g = flatten(plain(params, 0))[0], flatten(gradient(params, 0))[0]
        result["start_gap"] = float(onp.max(onp.abs(plain_g - jit_g)) / onp.max(onp.abs(plain_g)))
    if contender != "tiered":  # one call once settled: plain, and compiled at the first call
        result["per_call"] = seconds_per_call(gradient, params)
    print(json.dumps(result))


def compare(model, args):
    """Each contender's training in a process of its own, one after the other; a table of the
    three."""
    title, _, _, num_iters = models(args)[model]
    print(f"{title}, Adam, {num_iters} iterations (float64)", flush=True)
    runs = {}
    for contender in CONTENDERS:
        out = subprocess.run([sys.executable, __file__, "--iters", str(args.iters), "--samples", str(args.samples),
                              "--train", model, contender], stdout=subprocess.PIPE, text=True, check=True).stdout
        runs[contender] = json.loads(out.splitlines()[-1])
    plain = runs["plain"]
    print(f"\n{'iter':>6}" + "".join(f" {CONTENDERS[c][0] + ' loss':>26}" for c in runs))
    for i, (it, _) in enumerate(plain["losses"]):
        print(f"{it:>6}" + "".join(f" {runs[c]['losses'][i][1]:>26.6f}" for c in runs))
    width = max(len(code) for _, code in CONTENDERS.values())
    print(f"\n{'':>{width}} {'whole run':>10} {'gradient calls':>15} {'speed-up':>9}")
    for contender, run in runs.items():
        name, code = CONTENDERS[contender]
        line = f"{code:>{width}} {run['seconds']:>8.3f} s {run['gradient']:>13.3f} s"
        if contender == "plain":
            print(line)
            continue
        numpy = f" ({run['numpy_calls']} of them the trace run by numpy)" if run["numpy_calls"] else ""
        how = (f"its first {run['plain_calls']} calls plain{numpy}, then compiled" if run["compiled"]
               else f"all {run['plain_calls']} calls plain{numpy}: a compile would not have paid") if contender == "tiered" \
            else "compiled at the first call"
        making = f" ({run['making']:.2f} s tracing and compiling)" if run["compiled"] else ""
        print(f"{line} {plain['seconds'] / run['seconds']:>8.2f}x  {how}{making}")
    settled = runs["at_once"]["per_call"]
    print(f"one gradient call once compiled: {1e3 * settled:.2f} ms against plain autograd's "
          f"{1e3 * plain['per_call']:.2f} ms ({plain['per_call'] / settled:.1f}x); the rest of a step, "
          f"{plain['seconds'] - plain['gradient'] - plain['logging']:.2f} s of plain's run, is autograd's Adam "
          f"(it flattens and unflattens the parameters every step), which jit_ps leaves to autograd")
    worst = max(abs(a - b) / max(abs(a), 1e-300) for c in ("tiered", "at_once")
                for (_, a), (_, b) in zip(plain["losses"], runs[c]["losses"]))
    start_gap = max(runs[c]["start_gap"] for c in ("tiered", "at_once"))
    print(f"largest relative difference: gradient at the start {start_gap:.1e}, loss curves {worst:.1e}")
    print("(a training run amplifies last-digit differences between BLAS and XLA arithmetic)\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=200, help="Adam iterations of the classifier (5x the regression's)")
    parser.add_argument("--samples", type=int, default=1000, help="training images of the classifier")
    parser.add_argument("--train", nargs=2, metavar=("MODEL", "CONTENDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.train:
        return train(*args.train, args)
    for model in ("regression", "classifier"):
        compare(model, args)
    print("By default (tiered) a new signature runs as plain autograd until its calls have cost about twice\n"
          "what compiling it is expected to, so that a short job costs what plain autograd does; a job known\n"
          "to be long compiles at its first call with tiered=False, as jax.jit does.")


if __name__ == "__main__":
    main()
