"""By hand, on a machine with a TPU: whether a first call's compile differs between jax.jit and
jit_ps because of the program or because of the process. Each side in a process of its own
(one process holds the chip), jax's first:

    python3 benchmarks/tpu_compile_texts.py jax DIR [--only NAME,...]
    python3 benchmarks/tpu_compile_texts.py jit_ps DIR [--only NAME,...] [--rounds 5]

jax's side lowers each of benchmarks/tpu.py's workloads (logistic regression, the tiny
gradient and the 5000² powers by default: the rows whose first calls trailed jax's) as tpu.py
builds it, times its lowering and XLA's compile, and writes its StableHLO text to DIR. jit_ps's
side lowers its own program of each, then compiles jax's text and its own alternately with
jit_ps's client and compile options, `--rounds` times each (XLA keeps no cache of its own:
each compile is a whole one), and prints each text's compile times and their medians."""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402

import tpu  # noqa: E402
import workloads as w  # noqa: E402

ONLY = "logreg_1e5x1000,tiny_grad,powers_5000"


def cases(only):
    rng = onp.random.default_rng(0)
    for name, (wname, make, _) in tpu.CASES.items():
        if name in only:
            yield name, w.BY_NAME[wname], make(onp.float32, rng)


def jax_side(folder, only):
    side = tpu.Side("jax")
    side.fetch(side.build(w.BY_NAME["tiny"])(onp.ones(3, onp.float32)))  # the chip's start
    for name, workload, args in cases(only):
        f = side.build(workload)
        t0 = time.perf_counter()
        lowered = f.lower(*args)
        t1 = time.perf_counter()
        lowered.compile()
        t2 = time.perf_counter()
        with open(os.path.join(folder, name + ".mlir"), "w") as out:
            out.write(lowered.as_text())
        print(f"jax {name}: lowering {1e3 * (t1 - t0):.0f} ms, compile {1e3 * (t2 - t1):.0f} ms", flush=True)


def jit_ps_side(folder, only, rounds):
    side = tpu.Side("jit_ps")
    side.fetch(side.build(w.BY_NAME["tiny"])(onp.ones(3, onp.float32)))  # the chip's start, the lazy imports
    be = side.backend
    devices = side.ax.backend.xc.DeviceList((be.default_device,))
    for name, workload, args in cases(only):
        try:
            with open(os.path.join(folder, name + ".mlir")) as f:
                theirs = f.read()
        except OSError:
            print(f"{name}: no text of jax's (run the jax side first)")
            continue
        f = side.build(workload)
        t0 = time.perf_counter()
        ours = f.lower(*args).as_text()
        print(f"jit_ps {name}: trace and lowering {1e3 * (time.perf_counter() - t0):.0f} ms; "
              f"text {len(ours):,} characters against jax's {len(theirs):,}", flush=True)
        times = {"jax's": [], "jit_ps's": []}
        for i in range(rounds):
            for which in sorted(times, reverse=bool(i % 2)):
                t0 = time.perf_counter()
                be.client.compile_and_load(theirs if which == "jax's" else ours, devices, be._options())
                times[which].append(time.perf_counter() - t0)
        for which, ts in times.items():
            print(f"  {which} text, jit_ps's client: compile median {1e3 * statistics.median(ts):.0f} ms "
                  f"({', '.join(f'{1e3 * t:.0f}' for t in ts)})", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("side", choices=["jax", "jit_ps"])
    parser.add_argument("folder")
    parser.add_argument("--only", default=ONLY)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    os.makedirs(args.folder, exist_ok=True)
    only = args.only.split(",")
    if args.side == "jax":
        jax_side(args.folder, only)
    else:
        jit_ps_side(args.folder, only, args.rounds)


if __name__ == "__main__":
    main()
