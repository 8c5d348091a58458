"""The TPU benchmark: jit_ps against jax.jit on the same chip, float32, and the seed's powers
against numpy on the host.

    python benchmarks/tpu.py run jit_ps|jax|numpy [--only NAME,...] [--json PATH] [--budget S] [--first-only]
    python benchmarks/tpu.py table A.json B.json ...

One process holds a TPU at a time, so each contender runs in a process of its own, one after
the other (benchmarks/tpu_check.sh runs them); samples cannot be interleaved between them as
benchmarks/run.py does on the CPU. Per workload a process measures:
  first   the first call of a freshly built function, numpy in, results on the host (trace,
          compile, transfers, run); the process's chip start is paid before, by a warm-up
          program of its own, on both sides
  numpy   the median call with numpy arrays in and numpy arrays out (np.asarray of jax's)
  device  the median call with inputs and results kept on the chip, each call waited for
          (jit_ps(..., keep_on_device=True) / jax.device_put), the launch alone in `launch`
The transfers of 100 MB of float32 each way are rows of their own. With --json the file is
written after each row, so that a run stopped by a time limit keeps the rows it finished.
XLA's compile time on the chip varies from process to process (the same 5000² program: 0.20
or 0.46 s, on either side), so one first call per side says little: `--first-only` runs
measure the first calls alone, and `table` gives each side's median over all its files
(benchmarks/tpu_check.sh's FIRST_ROUNDS alternates such processes of the two sides, and
its ROUNDS whole runs: `table` gives the median of every value over the files that have it).
The workloads are benchmarks/workloads.py's, at TPU sizes (the convnet is patch_convnet_step:
XLA:TPU compiled convnet_step's 5x5 convolutions of NCHW batches, on either side, for over
140 s); jax runs with jax_default_matmul_precision=highest,
the precision jit_ps asks for (hlo.HIGHEST), so both compute the same float32 products.
"""
import argparse
import functools
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository's autograd_xla

import numpy as onp  # noqa: E402

import workloads as w  # noqa: E402

#: name -> (workload in workloads.py, its inputs at TPU sizes, what one call does); the
#: convnet last: its first compile is the longest (a run stopped by its time keeps the others)
CASES = {
    "powers_1000": ("poly_big", w._big_inputs((1000, 1000), onp.float32), "x + x*x + x*x*x, 1000x1000 float32"),
    "powers_5000": ("poly_big", w._big_inputs((5000, 5000), onp.float32), "x + x*x + x*x*x, 5000x5000 float32"),
    "mlp_step_b1024": ("mlp_step", functools.partial(w._mlp_inputs, batch=1024),
                       "SGD step of the MLP 784-200-100-10 (its gradient and update), batch 1024"),
    "selu_fwd_4096": ("selu_fwd", functools.partial(w._selu_inputs, batch=4096, width=4096),
                      "selu(x @ W + b), 4096x4096"),
    "selu_grad_4096": ("selu_grad", functools.partial(w._selu_inputs, batch=4096, width=4096),
                       "grad of sum(selu(x @ W + b)) w.r.t. W, b; 4096x4096"),
    "logreg_1e5x1000": ("logreg", functools.partial(w._logreg_inputs, N=100000, D=1000),
                        "value and gradient of the logistic loss, X 100000x1000"),
    "tiny_grad": ("tiny_grad", w._tiny_inputs, "grad(sum(tanh(x) * x)), 3 elements"),
    "convnet_step_b128": ("patch_convnet_step", w._patch_convnet_inputs,
                          "convnet SGD step (convolutions as products of patches), batch 128, 32x32x3"),
}
TRANSFER_MB = 100


def median_call(call, n_min=7, budget=1.0, n_max=2000):
    """Median seconds of call() over at least n_min calls and `budget` seconds."""
    times, end = [], time.perf_counter() + budget
    while len(times) < n_min or (time.perf_counter() < end and len(times) < n_max):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class Side:
    """What a contender's process does: build, jit, put on the device, wait, fetch."""

    def __init__(self, name):
        self.name = name
        if name == "jax":
            import jax
            import jax.numpy as jnp
            jax.config.update("jax_default_matmul_precision", "highest")
            self.jax, self.jnp = jax, jnp
            self.platform = jax.devices()[0].platform
        else:
            import autograd_xla
            self.ax = autograd_xla
            self.platform = autograd_xla.default_platform() if name == "jit_ps" else "host"
            self.backend = autograd_xla.backend.get_backend() if name == "jit_ps" else None

    def build(self, workload, kept=False):
        if self.name == "jax":
            return self.jax.jit(workload.build_jax(self.jax, self.jnp))
        f = workload.build_autograd()
        return self.ax.jit_ps(f, keep_on_device=kept, fallback="error") if self.name == "jit_ps" else f

    def put(self, tree):
        """`tree` copied to the chip: jax.device_put, or DeviceArrays of the backend's put."""
        if self.name == "jax":
            return self.jax.device_put(tree)
        if isinstance(tree, (list, tuple)):
            return type(tree)(self.put(t) for t in tree)
        x = onp.asarray(tree)
        aval = self.ax.core.Aval(x.shape, x.dtype)
        return self.ax.DeviceArray(self.backend.put(x, aval=aval), aval, self.backend)

    def wait(self, tree):
        """Each library's own wait: jax.block_until_ready, autograd_xla.block_until_ready (both
        wait for all the leaves in one call into jaxlib)."""
        if self.name == "jax":
            return self.jax.block_until_ready(tree)
        return self.ax.block_until_ready(tree) if self.name == "jit_ps" else tree

    def fetch(self, tree):
        return [onp.asarray(leaf) for leaf in _leaves(tree)]


def _leaves(tree):
    if isinstance(tree, (list, tuple)):
        return [leaf for t in tree for leaf in _leaves(t)]
    return [tree]


def steady(side, workload, f, args, row, budget):
    """`row`'s steady-state modes: numpy in and out, on the device, its launch. On the device
    jax runs the same jitted function `f` (its executable serves numpy and device arrays
    alike), and jit_ps a function with keep_on_device=True, which finds `f`'s executable in
    its backend's programs: each side compiles each program once. (XLA's compiles on the chip
    get faster with the compiles a process made before: compiling the SeLU layer a second time
    took the gradient's first call after it from 15.9-16.5 s to 14.0-14.5, on either side.)"""
    row["numpy"] = median_call(lambda: side.fetch(f(*args)), budget=budget)
    if side.name != "numpy":
        kept = f if side.name == "jax" else side.build(workload, kept=True)
        on_chip = side.put(list(args))
        side.wait(kept(*on_chip))
        row["device"] = median_call(lambda: side.wait(kept(*on_chip)), budget=budget)
        launches = []
        for _ in range(20):
            t = time.perf_counter()
            out = kept(*on_chip)
            launches.append(time.perf_counter() - t)
            side.wait(out)
        row["launch"] = statistics.median(launches)
        if side.name == "jit_ps":  # [calls C++ handed back for good, fast paths given it]: numpy, device
            row["cpp"] = [list(f._fast_calls), list(kept._fast_calls)]


def run(side_name, only, budget, save=lambda rows: None, first_only=False):
    """The rows of `side_name`, each handed to `save` (with those before it) once measured;
    `first_only`: the first calls alone."""
    side = Side(side_name)
    rows = {"side": side_name, "platform": side.platform, "workloads": {}}
    if side_name != "numpy":  # the chip's start, paid here by both sides (not by a first call)
        warm = side.build(w.BY_NAME["tiny"])
        side.fetch(warm(onp.ones(3, onp.float32)))
    rng = onp.random.default_rng(0)
    for name, (wname, make, _) in CASES.items():
        if only and name not in only:
            continue
        workload, args = w.BY_NAME[wname], make(onp.float32, rng)
        row = rows["workloads"][name] = {}
        try:
            f = side.build(workload)
            t = time.perf_counter()
            side.fetch(f(*args))
            row["first"] = time.perf_counter() - t
            if not first_only:
                steady(side, workload, f, args, row, budget)
        except Exception as e:  # a row that failed says why, the others still run
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print(side_name, name, {k: (round(v * 1e3, 3) if isinstance(v, float) else v) for k, v in row.items()},
              "ms", flush=True)
        save(rows)
    if side_name != "numpy" and not first_only and (not only or "transfers" in only):
        x = rng.random(TRANSFER_MB * (1 << 20) // 4, dtype=onp.float32)
        rows["workloads"]["to_device_100MB"] = {"numpy": median_call(lambda: side.wait(side.put(x)), budget=budget)}
        fetches = []  # each from an array put afresh (jax's keeps its host copy once made)
        for _ in range(9):
            on_chip = side.wait(side.put(x))
            t = time.perf_counter()
            onp.asarray(on_chip)
            fetches.append(time.perf_counter() - t)
        rows["workloads"]["to_host_100MB"] = {"numpy": statistics.median(fetches)}
        print(side_name, "transfers", rows["workloads"]["to_device_100MB"], rows["workloads"]["to_host_100MB"],
              flush=True)
        save(rows)
    return rows


def saver(path):
    """What writes the rows so far to `path` (whole, through a file renamed over it); None: nothing."""
    def save(rows):
        if path:
            with open(path + ".part", "w") as fh:
                json.dump(rows, fh, indent=1)
            os.replace(path + ".part", path)
    return save


def table(paths):
    """A markdown table of jit_ps against jax.jit (and numpy's powers) from run's JSON files."""
    sides, samples = {}, {}  # side -> workload -> its row; (side, workload) -> mode -> every value measured
    for p in paths:
        with open(p) as fh:
            data = json.load(fh)
        for name, row in data["workloads"].items():
            sides.setdefault(data["side"], {}).setdefault(name, {}).update(row)
            for mode, v in row.items():
                if isinstance(v, float):
                    samples.setdefault((data["side"], name), {}).setdefault(mode, []).append(v)
    for (side, name), modes in samples.items():
        for mode, values in modes.items():
            sides[side][name][mode] = statistics.median(values)
            sides[side][name][mode + " samples"] = len(values)
    ours, theirs, host = sides.get("jit_ps", {}), sides.get("jax", {}), sides.get("numpy", {})
    ms = lambda v: "" if v is None else f"{v * 1e3:.2f}"  # noqa: E731
    ratio = lambda a, b: "" if a is None or b is None else f"{a / b:.2f}x"  # noqa: E731
    lines = ["| workload | mode | jax.jit ms | jit_ps ms | jit_ps / jax | numpy ms |", "|---|---|---:|---:|---:|---:|"]
    for name in list(CASES) + ["to_device_100MB", "to_host_100MB"]:
        a, b, h = ours.get(name, {}), theirs.get(name, {}), host.get(name, {})
        if not (a or b):
            continue
        for mode in ("numpy", "device", "launch", "first"):
            if mode in a or mode in b:
                n = (b.get(mode + " samples", 0), a.get(mode + " samples", 0))
                label = mode if max(n) <= 1 else f"{mode} (median of {n[0]} / {n[1]})"
                lines.append(f"| {name} | {label} | {ms(b.get(mode))} | {ms(a.get(mode))} | "
                             f"{ratio(a.get(mode), b.get(mode))} | {ms(h.get(mode)) if mode in ('numpy', 'first') else ''} |")
        for side, data in (("jit_ps", a), ("jax", b)):
            if "error" in data:
                lines.append(f"| {name} | {side} failed | | | | {data['error'][:120]} |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("side", choices=("jit_ps", "jax", "numpy"))
    r.add_argument("--only", help="workloads (and 'transfers'), comma-separated: " + ", ".join(CASES))
    r.add_argument("--json")
    r.add_argument("--budget", type=float, default=1.0, help="seconds of samples per median")
    r.add_argument("--first-only", action="store_true", help="the first calls alone (no steady state, no transfers)")
    t = sub.add_parser("table")
    t.add_argument("paths", nargs="+")
    args = p.parse_args(argv)
    if args.command == "table":
        print(table(args.paths))
        return
    run(args.side, set(args.only.split(",")) if args.only else None, args.budget, saver(args.json), args.first_only)


if __name__ == "__main__":
    main()
