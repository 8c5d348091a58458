"""jit_ps against jax.jit in pairs of samples, with nothing else called in the process.

run.py's steady state interleaves four contenders, plain autograd among them, whose calls
leave XLA's next ones slower for a while (run.py's --lead-ms); this script times only
jit_ps (numpy arguments, as its users call it) and jax.jit (its inputs and results on the
device, each call waited for, as a JAX training loop keeps them), one sample of each in
turn, and takes the ratio of each pair: drift and other people's load then cancel within a
pair. The workloads are run.py's (workloads.py).

    /work/venv-jax/bin/python benchmarks/paired.py [--only mlp_step,selu_fwd] [--pairs 40]

Prints a markdown table: per workload the median over pairs of jit_ps / jax.jit, its
quartiles, and each side's median time.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import timing  # noqa: E402
from workloads import BY_NAME, WORKLOADS  # noqa: E402

from autograd_xla import jit_ps  # noqa: E402


def pair_ratios(ours, theirs, pairs, target, warm):
    """(ratios, our times, their times) per call, `pairs` pairs of samples, each sample after
    `warm` seconds of its own calls, the order alternating."""
    for fn, args in (ours, theirs):
        timing.warm_up(fn, args, 0.2)
    numbers = [timing.calibrate(fn, args, target) for fn, args in (ours, theirs)]
    times = ([], [])
    for p in range(pairs):
        for side in ((0, 1) if p % 2 == 0 else (1, 0)):
            fn, args = (ours, theirs)[side]
            timing.warm_up(fn, args, warm, min_calls=1)
            times[side].append(timing.time_calls(fn, args, numbers[side]) / numbers[side])
    return [a / b for a, b in zip(*times)], times[0], times[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", metavar="NAME[,NAME]", help="workloads (default: run.py's default ones)")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--target-ms", type=float, default=20.0, help="minimum duration of one sample")
    p.add_argument("--warm-ms", type=float, default=30.0, help="untimed calls before each sample")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    names = args.only.split(",") if args.only else [w.name for w in WORKLOADS if w.default]
    print("| workload | jit_ps / jax.jit (median of pairs) | quartiles | jit_ps "
          "| jax.jit, inputs and results on device |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        wl = BY_NAME[name]
        inputs = wl.make_inputs(onp.float64, onp.random.default_rng(args.seed))  # (the big ones are float32)
        jf = jit_ps(wl.build_autograd(), fallback="error")
        jf(*inputs)
        timing.settle(jf, inputs)
        jitted = jax.jit(wl.build_jax(jax, jnp))
        on_device = jax.block_until_ready(jax.device_put(inputs))
        jitted(*on_device)
        ratios, ours, theirs = pair_ratios((jf, inputs), (lambda *a: jax.block_until_ready(jitted(*a)), on_device),
                                           args.pairs, args.target_ms / 1e3, args.warm_ms / 1e3)
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        print(f"| {name} | {median:.3f} | {q1:.3f}-{q3:.3f} | {timing.format_seconds(statistics.median(ours))} "
              f"| {timing.format_seconds(statistics.median(theirs))} |", flush=True)
    print(f"\nload average at end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
