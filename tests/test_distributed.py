"""Several processes as one job (autograd_xla.distributed): two processes on 127.0.0.1, two
CPU devices each, run tests/distributed_worker.py; each reports one RESULT line.

Every child has a hard timeout here (killed by its PID, then reaped) and an alarm of its own,
so a hang fails the test instead of stalling it and nothing is left running.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import autograd_xla as ax
from autograd_xla import distributed

pytestmark = pytest.mark.sockets  # (conftest: skipped where loopback sockets are not allowed)

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_worker.py")
CHILD_TIMEOUT_S = 25


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(scenario, nproc=2, timeout=CHILD_TIMEOUT_S):
    """Run the worker's `scenario` in `nproc` processes; [(returncode, RESULT dict or None,
    stderr)] per process, and the wall time."""
    port = free_port()
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="1", PYTHONUNBUFFERED="1")
    env.pop("AUTOGRAD_XLA_CPU_DEVICES", None)
    procs = [subprocess.Popen([sys.executable, WORKER, scenario, str(rank), str(nproc), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(nproc)]
    t0 = time.perf_counter()
    outs = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1.0, timeout - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                kill_all(procs)
                out, err = p.communicate()
                err += f"\n[test] killed after {timeout} s"
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            outs.append((p.returncode, json.loads(lines[-1][7:]) if lines else None, err))
    finally:
        kill_all(procs)
        for p in procs:
            p.wait()  # reaped: no zombies
    return outs, time.perf_counter() - t0


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)


def tail(err, n=15):
    return "\n".join([line[:300] for line in err.splitlines() if not line.startswith(("I1", "    @"))][-n:])


def test_psum_and_data_parallel_gradient_step_over_two_processes():
    outs, _ = launch("collectives")
    for rank, (rc, res, err) in enumerate(outs):
        assert rc == 0 and res is not None, f"process {rank}: rc={rc}\n{tail(err)}"
        assert res["global_ids"] == [0, 1, 2048, 2049] and res["local_ids"] == [[0, 1], [2048, 2049]][rank]
        assert (res["process_index"], res["process_count"]) == (rank, 2)
        assert res["psum_shape"] == [2, 3] and res["psum_ok"]  # local results only, the sum of all 4 shards
        assert res["axis_index"] == [2 * rank, 2 * rank + 1]  # global positions
        assert res["all_gather_ok"] and res["ppermute_ok"] and res["out_axes_none_ok"] and res["imr_ok"]
        assert res["kept_shape"] == [2, 3] and res["kept_ok"]  # a ShardedArray holds this process's shards
        assert res["jit_local_ok"]  # single-device programs run on this process's own first device
        assert res["grad_step_shape"] == [2, 5] and res["grad_step_err"] < 1e-12
        assert res["grad_of_pmap_err"] < 1e-12


@pytest.mark.parametrize("when", ["before", "during"])
def test_killed_peer_raises_then_the_job_stops(when):
    """Process 1 exits before a collective (or a second into process 0's wait in it):
    process 0's collective raises ProcessLostError at once (when the peer dies), and the
    coordination service terminates process 0 after the heartbeat timeout (fail-stop)."""
    (rc0, res0, err0), (rc1, _, _) = launch("kill1" + ("during" if when == "during" else ""))[0]
    assert rc1 == 3
    assert res0 is not None, tail(err0)
    assert res0["raised"] == "ProcessLostError", res0
    assert "process 0 (of 2)" in res0["message"] and "Connection closed" in res0["message"]
    assert res0["seconds"] < (1 if when == "before" else 5)
    assert rc0 == -signal.SIGABRT, f"rc={rc0}\n{tail(err0)}"
    assert "Terminating process because the JAX distributed service detected fatal errors" in err0


def test_killed_coordinator_terminates_the_others_at_once():
    """The coordination service lives in process 0: when it dies, the others are terminated
    right away (their connection to the service breaks), not left hanging."""
    outs, _ = launch("kill0")
    (rc0, _, _), (rc1, res1, err1) = outs
    assert rc0 == 3
    assert rc1 == -signal.SIGABRT, f"rc={rc1}\n{tail(err1)}"
    assert "Terminating process because the JAX distributed service detected fatal errors" in err1


def test_initialize_checks_its_arguments():
    with pytest.raises(ValueError, match="host:port"):
        distributed.initialize("localhost", 2, 0)
    with pytest.raises(ValueError, match="process_id"):
        distributed.initialize("127.0.0.1:1", 2, 2)
    with pytest.raises(ValueError, match="num_processes"):
        distributed.initialize("127.0.0.1:1", 0, 0)


def test_initialize_after_the_cpu_client_started_is_an_error():
    ax.jit_ps(lambda x: x + 1)(np.ones(2))  # starts the CPU client
    with pytest.raises(RuntimeError, match="before anything else runs on the CPU"):
        distributed.initialize(f"127.0.0.1:{free_port()}", 1, 0)
    assert not distributed.is_initialized()
    assert (distributed.process_index(), distributed.process_count()) == (0, 1)
