"""The fixed cost of a call: µs of this thread's CPU time per call, the fastest of 25 blocks
of 2000 calls, of functions that compute next to nothing, on the CPU.

    python benchmarks/launch.py [jit_ps | jax | PATH]

jit_ps: this checkout's autograd_xla; PATH: the autograd_xla of another checkout (before and
after a change, run one after the other); jax: jax.jit. Rows: `tiny` (x + 1.0, 3 float32) and
`many` (seven arrays in, a list of three (W, b) pairs, and six out: [(W * 0.5, b - 1.0)]),
each as `kept launch` (jit_ps(..., keep_on_device=True) / jax.jit on arrays on the device, the
call alone), `kept wait` (and each result waited for, as benchmarks/tpu.py's device row does),
`numpy in/out` and `device in, numpy out` (jit_ps only). Thread time leaves out the time other
processes take the core, which the wall clock of a loaded machine does not; jax's CPU client
runs its programs on another thread, so its rows leave their execution out, ours (synchronous)
keep it in.
"""
import os
import sys
import time

import numpy as onp

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCKS, CALLS = 25, 2000
SIZES = (8, 6, 4, 2)


def per_call(fn):
    best = float("inf")
    for _ in range(BLOCKS):
        t = time.thread_time()
        for _ in range(CALLS):
            fn()
        best = min(best, (time.thread_time() - t) / CALLS)
    return best * 1e6


def many(params, x, y):
    return [(W * 0.5, b - 1.0) for W, b in params]


def cases():
    rng = onp.random.default_rng(0)
    params = [(rng.standard_normal((m, n)).astype(onp.float32), rng.standard_normal(n).astype(onp.float32))
              for m, n in zip(SIZES[:-1], SIZES[1:])]
    return [("tiny", lambda x: x + 1.0, (onp.array([0.5, -1.0, 2.0], onp.float32),)),
            ("many", many, (params, rng.standard_normal((3, 8)).astype(onp.float32),
                            rng.standard_normal((3, 2)).astype(onp.float32)))]


def leaves(tree):
    return [leaf for t in tree for leaf in leaves(t)] if isinstance(tree, (list, tuple)) else [tree]


def run_jax():
    import jax
    out = {}
    for name, fun, args in cases():
        f = jax.jit(fun)
        on = jax.device_put(list(args))
        for _ in range(50):
            jax.block_until_ready(f(*on))
        out[name + " kept launch"] = per_call(lambda: f(*on))
        out[name + " kept wait"] = per_call(lambda: jax.block_until_ready(f(*on)))
    return out


def run_jit_ps(root):
    sys.path.insert(0, root)
    sys.path.insert(0, HERE)
    import autograd_xla as ax
    import timing
    out = {}
    for name, fun, args in cases():
        kept, plain = ax.jit_ps(fun, keep_on_device=True), ax.jit_ps(fun)
        on = ax.device_put(list(args))
        kept(*on)
        timing.settle(kept, on)  # (its programs' ladder climbed: C++ takes the calls it can)
        plain(*args)
        timing.settle(plain, args)
        for _ in range(50):
            kept(*on), plain(*args), plain(*on)
        out[name + " kept launch"] = per_call(lambda: kept(*on))
        out[name + " kept wait"] = per_call(lambda: [x.block_until_ready() for x in leaves(kept(*on))])
        out[name + " numpy in/out"] = per_call(lambda: plain(*args))
        out[name + " device in, numpy out"] = per_call(lambda: plain(*on))
    return out


def main(argv=None):
    which = (argv if argv is not None else sys.argv[1:] or ["jit_ps"])[0]
    out = run_jax() if which == "jax" else run_jit_ps(os.path.dirname(HERE) if which == "jit_ps" else which)
    print(which + ": " + " | ".join(f"{k} {v:.2f}" for k, v in out.items()))


if __name__ == "__main__":
    main()
