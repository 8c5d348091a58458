"""Two processes on loopback as one job (autograd_xla.distributed): what joining costs, what an
all-reduce of 1e6 float64 costs per call through pmap, and compiling a program in every
process against compiling it in process 0 and shipping the executable through the
coordination service's key-value store. Prints a markdown table.

    python benchmarks/distributed.py [--reps N] [--rounds N]

The parent starts the processes (a free port on 127.0.0.1), each with a hard timeout, and
kills any that are left by their PID; every child also has an alarm of its own.
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
N = 1_000_000
CHILD_TIMEOUT_S = 120


def child(rank, nproc, port, local, reps, rounds):
    signal.alarm(CHILD_TIMEOUT_S)
    sys.path.insert(0, os.path.dirname(HERE))
    import autograd.numpy as anp
    import numpy as np
    from autograd import grad
    from jaxlib import xla_client as xc

    import autograd_xla as ax
    from autograd_xla import backend, distributed

    out = {"rank": rank}
    t0 = time.perf_counter()
    if nproc > 1:
        distributed.initialize(f"127.0.0.1:{port}", nproc, rank, local_device_count=local)
    else:
        ax.set_cpu_device_count(local)
    out["initialize_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    be = backend.get_backend("cpu")
    out["client_s"] = time.perf_counter() - t0
    kv = distributed.key_value_client()

    def barrier(name):
        if kv is not None:
            kv.wait_at_barrier(name, 60_000)

    compiled = []  # (text, options, devices) of every program pmap compiles
    compile_ = be.compile

    def recording(text, options=None, devices=None, **kw):
        compiled.append((text, options, devices))
        return compile_(text, options, devices, **kw)

    be.compile = recording

    def per_call(f, arg, tag):
        """Median over `rounds` rounds (each started at a barrier) of one call's time."""
        f(arg)
        samples = []
        for k in range(rounds):
            barrier(f"{tag}{k}")
            t0 = time.perf_counter()
            for _ in range(reps):
                y = f(arg)
            np.asarray(y)
            samples.append((time.perf_counter() - t0) / reps)
        return float(np.median(samples)), float(np.min(samples))

    x = np.full((local, N), float(rank + 1))
    psum = ax.pmap(lambda x: ax.psum(x, "i"), "i")
    out["psum_ok"] = bool(np.allclose(psum(x), local * sum(range(1, nproc + 1))))
    out["psum_host"] = per_call(psum, x, "host")
    pmean = ax.pmap(lambda x: ax.pmean(x, "i"), "i", keep_on_device=True)
    resident = pmean(x)
    out["pmean_device"] = per_call(pmean, resident, "dev")

    # a data-parallel step of a tanh MLP 784-200-100-10, for a program of realistic size
    rng = np.random.default_rng(0)
    sizes = [784, 200, 100, 10]
    params = [(rng.normal(size=(m, n)) * 0.05, np.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]

    def loss(params, X, Y):
        h = X
        for W, b in params[:-1]:
            h = anp.tanh(anp.dot(h, W) + b)
        logits = anp.dot(h, params[-1][0]) + params[-1][1]
        return -anp.mean(anp.sum(Y * (logits - anp.log(anp.sum(anp.exp(logits), 1, keepdims=True))), 1))

    def step(params, X, Y):
        g = ax.pmean(grad(loss)(params, X, Y), "i")
        return [(W - 0.01 * dW, b - 0.01 * db) for (W, b), (dW, db) in zip(params, g)]

    X = rng.normal(size=(local, 64, 784))
    Y = np.eye(10)[rng.integers(0, 10, size=(local, 64))]
    ax.pmap(step, "i", in_axes=(None, 0, 0))(params, X, Y)
    programs = {"all-reduce 1e6 f64": compiled[0], "MLP data-parallel step": compiled[-1]}
    for name, (text, options, devices) in programs.items():
        devs = xc.DeviceList(tuple(devices))
        times = []
        for k in range(3):
            barrier(f"everywhere{name}{k}")
            t0 = time.perf_counter()
            exe = be.client.compile_and_load(text, devs, options)
            times.append(time.perf_counter() - t0)
        entry = {"everywhere_s": float(np.median(times)), "text_bytes": len(text)}
        if kv is not None:  # process 0 compiles and shares; the others wait for it and load it
            shared = []
            for k in range(3):
                barrier(f"share{name}{k}")
                t0 = time.perf_counter()
                if rank == 0:
                    blob = be.client.compile_and_load(text, devs, options).serialize()
                    kv.key_value_set_bytes(f"exe/{name}/{k}", blob)
                    entry["blob_bytes"] = len(blob)
                else:
                    blob = kv.blocking_key_value_get_bytes(f"exe/{name}/{k}", 60_000)
                    t1 = time.perf_counter()
                    exe = be.client.deserialize_executable(blob, devs, None)
                    entry.setdefault("deserialize_s", []).append(time.perf_counter() - t1)
                shared.append(time.perf_counter() - t0)
            entry["shared_s"] = float(np.median(shared))
        out[name] = entry
    del exe
    print("RESULT " + json.dumps(out), flush=True)
    barrier("done")


def launch(nproc, local, reps, rounds):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", str(r), str(nproc), str(port),
                               str(local), str(reps), str(rounds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(nproc)]
    results, t0 = [], time.perf_counter()
    try:
        for p in procs:
            try:
                o, e = p.communicate(timeout=max(1.0, CHILD_TIMEOUT_S - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                o, e = "", "timed out"
            found = [json.loads(line[7:]) for line in o.splitlines() if line.startswith("RESULT ")]
            if not found:
                err = [line[:200] for line in e.splitlines() if line.strip() and not line.startswith(("I1", "    @"))]
                raise RuntimeError(f"{nproc} x {local}: process exited {p.returncode} without a result:\n"
                                   + "\n".join(err[-10:]))
            results.append(found[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
    return results


def ms(seconds):
    return f"{1e3 * seconds:.1f} ms"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--child", nargs=6, type=int)
    a = parser.parse_args()
    if a.child:
        child(*a.child)
        return
    configs = [(1, 2), (2, 1), (2, 2)]
    runs = {c: launch(*c, a.reps, a.rounds) for c in configs}
    print("| processes × devices | join (initialize) | all-reduce 1e6 f64, numpy in/out | "
          "all-reduce 1e6 f64, on device (pmean) |")
    print("|---|---|---|---|")
    for (nproc, local), res in runs.items():
        join = max(r["initialize_s"] + r["client_s"] for r in res)
        host = max(r["psum_host"][0] for r in res)
        dev = max(r["pmean_device"][0] for r in res)
        ok = all(r["psum_ok"] for r in res)
        print(f"| {nproc} × {local}{'' if nproc > 1 else ' (one process)'} | {ms(join) if nproc > 1 else '–'} | "
              f"{ms(host)}{'' if ok else ' (WRONG)'} | {ms(dev)} |")
    print()
    print("| program (2 processes × 1 device) | StableHLO | compile in every process | "
          "process 0 compiles, shares the executable (KV store) | of which deserialize | executable |")
    print("|---|---|---|---|---|---|")
    res = runs[(2, 1)]
    for name in ("all-reduce 1e6 f64", "MLP data-parallel step"):
        everywhere = max(r[name]["everywhere_s"] for r in res)
        entry1 = res[1][name]
        print(f"| {name} | {res[0][name]['text_bytes'] / 1024:.0f} KiB | {ms(everywhere)} | {ms(entry1['shared_s'])} | "
              f"{ms(sorted(entry1['deserialize_s'])[1])} | {res[0][name]['blob_bytes'] / 1024:.0f} KiB |")
    print("\nTimes are medians of rounds (each round started at a barrier) and the slowest process's.")


if __name__ == "__main__":
    main()
