"""One process of tests/test_distributed.py's two-process jobs (run as a script, never
collected): `python distributed_worker.py SCENARIO PROCESS_ID NUM_PROCESSES PORT`.
Prints one `RESULT {json}` line; every child ends itself after ALARM_S seconds whatever
happens, so nothing outlives the test."""
import json
import os
import signal
import sys
import time

ALARM_S = 40
LOCAL_DEVICES = 2
HEARTBEAT_S = 3  # seconds until the coordination service counts a silent process as dead

signal.alarm(ALARM_S)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import autograd.numpy as anp  # noqa: E402
import numpy as np  # noqa: E402
from autograd import grad  # noqa: E402

import autograd_xla as ax  # noqa: E402
from autograd_xla import distributed  # noqa: E402


def loss(w, X, y):
    """Mean logistic loss of one shard."""
    z = anp.dot(X, w)
    return anp.mean(anp.logaddexp(0.0, z) - y * z)


def batch(num_devices, per_device=8, features=5):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(num_devices, per_device, features))
    y = (rng.random((num_devices, per_device)) < 0.5).astype(np.float64)
    return rng.normal(size=features), X, y


def collectives(rank, out):
    gdevs, ldevs = ax.devices("cpu"), distributed.local_devices("cpu")
    out["global_ids"] = [d.id for d in gdevs]
    out["local_ids"] = [d.id for d in ldevs]
    out["process_index"], out["process_count"] = distributed.process_index(), distributed.process_count()
    n_global = len(gdevs)
    # this process's shards are the global shards rank*L ... rank*L + L - 1, in devices() order
    mine = slice(rank * LOCAL_DEVICES, (rank + 1) * LOCAL_DEVICES)
    xs = np.arange(n_global * 3, dtype=np.float64).reshape(n_global, 3) ** 2
    got = ax.pmap(lambda x: ax.psum(x, "i"), "i")(xs[mine])
    out["psum_shape"] = list(np.shape(got))
    out["psum_ok"] = bool(np.allclose(got, np.broadcast_to(xs.sum(0), got.shape)))
    index = ax.pmap(lambda x: ax.axis_index("i") + 0 * x[0], "i")(xs[mine])
    out["axis_index"] = np.asarray(index).tolist()
    gathered = ax.pmap(lambda x: ax.all_gather(x, "i"), "i")(xs[mine])
    ring = [(d, (d + 1) % n_global) for d in range(n_global)]
    shifted = ax.pmap(lambda x: ax.ppermute(x, "i", ring), "i")(xs[mine])
    out["all_gather_ok"] = bool(np.allclose(gathered, np.broadcast_to(xs, (LOCAL_DEVICES,) + xs.shape)))
    out["ppermute_ok"] = bool(np.allclose(shifted, np.roll(xs, 1, axis=0)[mine]))
    # results kept on the devices, passed to the next call; a result equal everywhere (out_axes=None)
    double = ax.pmap(lambda x: 2.0 * x, "i", keep_on_device=True)
    kept = double(double(xs[mine]))
    out["kept_shape"] = list(kept.shape)
    out["kept_ok"] = bool(np.allclose(np.asarray(kept), 4 * xs[mine]))
    mean = ax.pmap(lambda x: ax.pmean(x, "i"), "i", out_axes=None)(xs[mine])
    out["out_axes_none_ok"] = bool(np.allclose(mean, xs.mean(0)))
    state = ax.iterated_map_reduce(lambda s, x: anp.sum(x) + 0.0 * s, lambda s, r: 0.5 * s + r, 0.0, xs[mine], 3)
    expect = 0.0
    for _ in range(3):
        expect = 0.5 * expect + xs.sum()
    out["imr_ok"] = bool(np.allclose(state, expect))
    out["jit_local_ok"] = bool(np.allclose(ax.jit_ps(lambda x: anp.sin(x) * 2)(xs[0]), np.sin(xs[0]) * 2))

    w, X, y = batch(n_global)

    def step(w, X, y):
        return w - 0.1 * ax.pmean(grad(loss)(w, X, y), "i")

    new_w = ax.pmap(step, "i", in_axes=(None, 0, 0))(w, X[mine], y[mine])
    want = w - 0.1 * grad(loss)(w, X.reshape(-1, X.shape[-1]), y.reshape(-1))
    out["grad_step_shape"] = list(np.shape(new_w))
    out["grad_step_err"] = float(np.max(np.abs(new_w - want)))
    # autograd through the pmap call: a broadcast argument's gradient is summed over every device
    # of the job, in the program; psum's VJP sums the cotangents of every process's results, so
    # each process gets the gradient of the job's loss (the sum of all processes' losses), as in jax
    total = grad(lambda w: anp.sum(ax.pmap(lambda w, X, y: ax.psum(loss(w, X, y), "i"), "i",
                                           in_axes=(None, 0, 0))(w, X[mine], y[mine])))(w)
    whole = n_global * sum(grad(loss)(w, X[d], y[d]) for d in range(n_global))
    out["grad_of_pmap_err"] = float(np.max(np.abs(total - whole)))


def killed_peer(rank, out, victim, during=False):
    """`victim` exits before the others' next collective, or (`during`) a second into it."""
    shards = np.ones((LOCAL_DEVICES, 3))
    f = ax.pmap(lambda x: ax.psum(x, "i"), "i")
    f(shards)  # compiled and run once by both
    distributed.key_value_client().wait_at_barrier("before_exit", 20_000)
    if rank == victim:
        time.sleep(1.0 if during else 0.0)
        os._exit(3)  # vanish without a word
    if not during:
        time.sleep(0.5)
    t0 = time.perf_counter()
    try:
        f(shards)
        out["raised"] = None
    except Exception as e:
        out["raised"] = type(e).__name__
        out["message"] = str(e)
    out["seconds"] = time.perf_counter() - t0
    print("RESULT " + json.dumps(out), flush=True)
    time.sleep(ALARM_S)  # the coordination service ends this process (fail-stop) before the alarm does


def main():
    scenario, rank, nproc, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    t0 = time.perf_counter()
    distributed.initialize(f"127.0.0.1:{port}", nproc, rank, local_device_count=LOCAL_DEVICES,
                           heartbeat_timeout=HEARTBEAT_S, init_timeout=20, shutdown_timeout=10)
    out = {"rank": rank, "initialize_s": time.perf_counter() - t0}
    if scenario.startswith("kill"):  # kill0: the coordinator's process dies; kill1: the other one
        killed_peer(rank, out, int(scenario[4]), during=scenario.endswith("during"))
        return
    collectives(rank, out)
    print("RESULT " + json.dumps(out), flush=True)
    distributed.shutdown()


if __name__ == "__main__":
    main()
