"""By hand, on a machine with a TPU: a kept call's launch (the time until the call returns,
its results not waited for), jax.jit against jit_ps, each side in a process of its own:

    python3 benchmarks/tpu_launch_probe.py jax
    python3 benchmarks/tpu_launch_probe.py jit_ps

Calls: the MLP's SGD step (benchmarks/tpu.py's mlp_step_b1024) with its parameters as the
workload passes them (a list of (W, b) tuples), the same step taking its eight arrays as
positional arguments, and ``a * b + 1.0`` on 3 float32; each 2,000 launches, each call's
results waited for after its launch is timed; medians of 5 rounds, µs. jit_ps then profiles
2,000 launches of the step (cProfile: the Python its calls run).
"""
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as onp  # noqa: E402

import tpu  # noqa: E402
import workloads as w  # noqa: E402


def launches(call, wait, n=2000, rounds=5):
    for _ in range(200):
        wait(call())
    res = []
    for _ in range(rounds):
        ts = []
        for _ in range(n):
            t = time.perf_counter()
            out = call()
            ts.append(time.perf_counter() - t)
            wait(out)
        res.append(statistics.median(ts))
    return 1e6 * statistics.median(res), 1e6 * min(res)


def main(side_name):
    side = tpu.Side(side_name)
    warm = side.build(w.BY_NAME["tiny"])
    side.fetch(warm(onp.ones(3, onp.float32)))
    workload = w.BY_NAME["mlp_step"]
    params, x, y = tpu.CASES["mlp_step_b1024"][1](onp.float32, onp.random.default_rng(0))
    step = workload.build_autograd() if side_name == "jit_ps" else workload.build_jax(side.jax, side.jnp)

    def positional(W1, b1, W2, b2, W3, b3, x, y):
        return step([(W1, b1), (W2, b2), (W3, b3)], x, y)

    def jit(f):
        return side.jax.jit(f) if side_name == "jax" else side.ax.jit_ps(f, keep_on_device=True, fallback="error")

    on_chip = side.put([params, x, y])
    flat = side.put([a for p in params for a in p] + [x, y])
    small = side.put([onp.ones(3, onp.float32), onp.ones(3, onp.float32)])
    calls = {"step (list of tuples)": (jit(step), on_chip), "step (8 positional)": (jit(positional), flat),
             "a * b + 1.0": (jit(lambda a, b: a * b + 1.0), small)}
    for name, (f, args) in calls.items():
        median, least = launches(lambda: f(*args), side.wait)
        print(f"{side_name} {name}: launch {median:.1f} µs (least round {least:.1f})"
              + (f" cpp {f._fast_calls}" if side_name == "jit_ps" else ""), flush=True)
    if side_name == "jit_ps":
        f, args = calls["step (list of tuples)"]
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            side.wait(f(*args))
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())


if __name__ == "__main__":
    main(sys.argv[1])
