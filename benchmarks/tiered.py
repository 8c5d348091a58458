"""End-to-end time of a short job: plain autograd vs jit_ps with a cold cache vs jit_ps(tiered=True).

    python benchmarks/tiered.py [--calls 10,30,100] [--repeat 5] [--quick]

A job is an SGD fit of N gradient calls of the benchmarks' MLP loss (tanh 784-200-100-10,
softmax cross-entropy, batch 256, float64: workloads.mlp_loss), each call on the parameters
the previous step made, with a fresh `grad(mlp_loss)` function object (and a fresh jit_ps
wrapper) per job, as a library's `fit()` builds one. Every jitted job compiles cold: the
program the previous job compiled is freed (its function is gone, and the backend's recent
programs are released, Backend.release_recent) and each job's compile count is checked (a tiered
job whose plain calls cost less than tiering.plain_budget compiles nothing).
The modes run in a rotated order in every repeat (load from other processes then falls on
all of them); the table shows the median over --repeat jobs, and for tiered jobs also the
time until their background compile has finished (what a process exiting right after the
job waits for, tiering.CompileThread.stop), and the CPU seconds of each job's process (all
threads) until then: what the job cost whether or not a core was free. Then the steady
state: one call of each jitted function once compiled, and each mode's first call.
OPENBLAS_NUM_THREADS=1 in the environment makes plain autograd's BLAS single-threaded.
"""
import argparse
import gc
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as onp  # noqa: E402
from autograd import grad  # noqa: E402

import timing  # noqa: E402
import workloads  # noqa: E402
from autograd_xla import backend, jit_ps, tiering  # noqa: E402

MODES = ("autograd", "jit_ps cold", "jit_ps tiered")


def problem(seed=0):
    rs = onp.random.RandomState(seed)
    sizes = workloads.MLP_SIZES
    params = [(rs.randn(m, n) / onp.sqrt(m), onp.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    x = rs.randn(256, sizes[0])
    y = onp.eye(sizes[-1])[rs.randint(0, sizes[-1], 256)]
    return params, x, y


def make(mode):
    g = grad(workloads.mlp_loss)  # a fresh function object per job
    if mode == "autograd":
        return g
    return jit_ps(g, fallback="error", tiered=mode == "jit_ps tiered")


def fit(step, params, x, y, n):
    for _ in range(n):
        grads = step(params, x, y)
        params = [(W - workloads.LEARNING_RATE * dW, b - workloads.LEARNING_RATE * db)
                  for (W, b), (dW, db) in zip(params, grads)]
    return params


def cpu_seconds():
    """CPU time of the whole process (every thread: the compile thread and XLA's own)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def job(mode, n, data):
    """(seconds of the job, seconds until its compile is done, CPU seconds until then, stats,
    result) of one fresh job."""
    step = make(mode)
    t0, c0 = time.perf_counter(), cpu_seconds()
    out = fit(step, *data, n)
    seconds = time.perf_counter() - t0
    tiering.compile_thread.wait()
    finished, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    stats = getattr(step, "stats", None)
    # a tiered job shorter than a compile is never compiled (tiering.plain_budget)
    if stats is not None and stats.compiles != 1 and not (mode == "jit_ps tiered" and stats.compiles == 0):
        raise RuntimeError(f"{mode} job compiled {stats.compiles} times, not once: the cache was not cold")
    return seconds, finished, cpu, stats, out


def cold_start():
    """Forget the previous job's program, so that the next jitted job compiles it again."""
    gc.collect()
    backend.get_backend().release_recent()


def measure(ns, repeat, data, reference):
    rows = {}
    for n in ns:
        samples = {m: [] for m in MODES}
        cpu = {m: [] for m in MODES}
        finished, plain_calls = [], []
        for r in range(repeat):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                cold_start()
                seconds, done, used, stats, out = job(mode, n, data)
                check(out, reference[n], mode)
                samples[mode].append(seconds)
                cpu[mode].append(used)
                if mode == "jit_ps tiered":
                    finished.append(done)
                    plain_calls.append(stats.plain_tier_calls)
        rows[n] = ({m: statistics.median(v) for m, v in samples.items()}, statistics.median(finished),
                   statistics.median(plain_calls), {m: statistics.median(v) for m, v in cpu.items()})
    return rows


def check(out, ref, mode):
    worst = max(float(onp.max(onp.abs(a - b))) for pa, pb in zip(out, ref) for a, b in zip(pa, pb))
    if worst > 1e-9:
        raise RuntimeError(f"{mode}: parameters differ from plain autograd's by {worst:.3g}")


def steady_state(data, repeat):
    """Median seconds of one call of a compiled cold and a compiled tiered function, and of
    each mode's first call (fresh function, cold cache)."""
    out = {}
    calls = {}
    for mode in MODES[1:]:
        cold_start()
        f = make(mode)
        budget, tiering.PLAIN_SECONDS = tiering.PLAIN_SECONDS, 0  # compiled at once: this measures its calls
        f(*data)
        tiering.PLAIN_SECONDS = budget
        tiering.compile_thread.wait()
        f(*data)
        calls[mode] = f
    samples, _ = timing.interleaved({mode: (f, data) for mode, f in calls.items()}, max(repeat, 9), 0.04)
    for mode, s in samples.items():
        out[mode] = statistics.median(s)
    calls.clear()  # their programs, alive, would be found by the first calls below (whatever line traced them)
    first = {}
    for mode in MODES:
        samples = []
        for _ in range(repeat):
            cold_start()
            f = make(mode)
            t0 = time.perf_counter()
            f(*data)
            samples.append(time.perf_counter() - t0)
            tiering.compile_thread.wait()
            del f
        first[mode] = statistics.median(samples)
    return out, first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", default="10,30,100", help="job lengths (gradient calls)")
    parser.add_argument("--repeat", type=int, default=5, help="jobs per mode and length (median)")
    parser.add_argument("--quick", action="store_true", help="3 repeats")
    args = parser.parse_args(argv)
    repeat = 3 if args.quick else args.repeat
    ns = [int(n) for n in args.calls.split(",")]
    load = os.getloadavg()[0]
    data = problem()
    reference = {n: fit(grad(workloads.mlp_loss), *data, n) for n in ns}
    # the process's first compile pays XLA's one-time start-up; not part of any job
    jit_ps(grad(lambda p, x, y: workloads.mlp_loss(p, x, y) * 2.0))(*data)
    timing.warm_up(grad(workloads.mlp_loss), data, 0.2)
    rows = measure(ns, repeat, data, reference)
    fmt = timing.format_seconds
    blas = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    print(f"MLP 784-200-100-10, batch 256, float64; median of {repeat} fresh jobs per cell; "
          f"{os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"OPENBLAS_NUM_THREADS={blas}\n")
    print("| calls | autograd | jit_ps cold | jit_ps tiered | tiered, compile done | plain-tier calls "
          "| cold / autograd | tiered / autograd | CPU s: autograd, cold, tiered |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, (med, done, plain, cpu) in rows.items():
        a = med["autograd"]
        print(f"| {n} | {fmt(a)} | {fmt(med['jit_ps cold'])} | {fmt(med['jit_ps tiered'])} | {fmt(done)} | "
              f"{plain:g} | {med['jit_ps cold'] / a:.2f}× | {med['jit_ps tiered'] / a:.2f}× | "
              f"{cpu['autograd']:.2f}, {cpu['jit_ps cold']:.2f}, {cpu['jit_ps tiered']:.2f} |")
    per_call, first = steady_state(data, repeat)
    print("\n| | autograd | jit_ps cold | jit_ps tiered |")
    print("|---|---|---|---|")
    print(f"| first call | {fmt(first['autograd'])} | {fmt(first['jit_ps cold'])} | {fmt(first['jit_ps tiered'])} |")
    print(f"| a call once compiled | | {fmt(per_call['jit_ps cold'])} | {fmt(per_call['jit_ps tiered'])} |")


if __name__ == "__main__":
    main()
