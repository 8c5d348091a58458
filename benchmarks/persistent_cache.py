"""First calls of a new process with the persistent executable cache: off, cold, warm.

    python benchmarks/persistent_cache.py [--repeat 3]

Each measurement is a fresh child process timing the first call of `jit_ps(grad(f))` (trace,
lower, compile or load from disk, one run) for the benchmarks' MLP loss (784-200-100-10, batch
256, float64) and the Table 1 HMM (`scan`, T = 100, K = 20): --repeat processes without the
cache, one with a new cache directory (compiles and stores), then --repeat with it (loads).
The cache is set with `set_cache_dir(dir)`, its defaults as a user gets them (programs that
compile in under 0.1 s are not stored). Prints a markdown table of medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import numpy as onp
from autograd import grad
import autograd_xla
from autograd_xla import backend, jit_ps
import table1, workloads
if {cache!r}:
    autograd_xla.set_cache_dir({cache!r})
backend.get_backend("cpu")  # the client, outside the timing
f, _, theta0, _ = table1.make_hmm(onp.random.RandomState(0))
params, x, y = workloads._mlp_inputs(onp.dtype("float64"), onp.random.default_rng(0))
out = {{}}
for name, fn, args in [("HMM gradient", f, (theta0,)), ("MLP gradient", workloads.mlp_loss, (params, x, y))]:
    jf = jit_ps(grad(fn), fallback="error")
    t = time.perf_counter()
    jf(*args)
    out[name] = (time.perf_counter() - t, jf.stats.compiles, jf.stats.persistent_hits)
print(json.dumps(out))
"""


def child(cache):
    code = CHILD.format(here=HERE, cache=cache)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        off = [child("") for _ in range(args.repeat)]
        cold = child(cache)
        warm = [child(cache) for _ in range(args.repeat)]
    print(f"load average {os.getloadavg()[0]:.2f}\n")
    print("| program | cache off | cold (compile + store) | warm (load) | warm / off | warm: compiles, disk hits |")
    print("|---|---:|---:|---:|---:|---|")
    for name in cold:
        o = statistics.median(r[name][0] for r in off)
        w = statistics.median(r[name][0] for r in warm)
        print(f"| {name} | {o * 1e3:.0f} ms | {cold[name][0] * 1e3:.0f} ms | {w * 1e3:.0f} ms | {w / o:.0%} | "
              f"{warm[-1][name][1]}, {warm[-1][name][2]} |")


if __name__ == "__main__":
    main()
