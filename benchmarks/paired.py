"""jit_ps against jax.jit in pairs of samples, each in a worker process of its own.

run.py's steady state interleaves four contenders, plain autograd among them; this script
times only jit_ps (numpy arguments, as its users call it) and jax.jit (its inputs and results
on the device, each call waited for, as a JAX training loop keeps them), one sample of each
in turn, each library in a worker process of its own (procs.py; run.py's cases), and takes
the ratio of each pair: drift and other people's load then cancel within a pair. The
workloads are run.py's (workloads.py).

    python benchmarks/paired.py [--only mlp_step,selu_fwd] [--dtype float32] [--pairs 40]

Prints a markdown table: per workload the median over pairs of jit_ps / jax.jit, its
quartiles, and each side's median time.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import procs  # noqa: E402
import timing  # noqa: E402
from workloads import BY_NAME, WORKLOADS  # noqa: E402


def pair_ratios(ws, pairs, target, warm):
    """(ratios, our times, their times) per call, `pairs` pairs of samples, each sample after
    `warm` seconds of its own calls, the order alternating."""
    sides = ((ws["jit_ps"], "jit_ps"), (ws["jax"], "jax_dev"))
    numbers = [w.request("calibrate", key, target, 0.2) for w, key in sides]
    times = ([], [])
    for p in range(pairs):
        for side in ((0, 1) if p % 2 == 0 else (1, 0)):
            w, key = sides[side]
            times[side].append(w.request("sample", key, numbers[side], warm))
    return [a / b for a, b in zip(*times)], times[0], times[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", metavar="NAME[,NAME]", help="workloads (default: run.py's default ones)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float64")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--target-ms", type=float, default=20.0, help="minimum duration of one sample")
    p.add_argument("--warm-ms", type=float, default=30.0, help="untimed calls before each sample")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    names = args.only.split(",") if args.only else [w.name for w in WORKLOADS if w.default]
    print(f"{args.dtype}; each library in a worker process of its own\n")
    print("| workload | jit_ps / jax.jit (median of pairs) | quartiles | jit_ps "
          "| jax.jit, inputs and results on device |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        dtype = BY_NAME[name].row_dtypes([args.dtype])[0]
        with procs.Workers(["jit_ps", "jax"]) as ws:
            for w in ws.values():
                w.build("run:cases", workload=name, dtype=dtype, seed=args.seed)
                w.request("first", w.kind)
            ws["jit_ps"].request("settle", "jit_ps")
            ratios, ours, theirs = pair_ratios(ws, args.pairs, args.target_ms / 1e3, args.warm_ms / 1e3)
        q1, median, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        print(f"| {name} | {median:.3f} | {q1:.3f}-{q3:.3f} | {timing.format_seconds(statistics.median(ours))} "
              f"| {timing.format_seconds(statistics.median(theirs))} |", flush=True)
    print(f"\nload average at end {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
