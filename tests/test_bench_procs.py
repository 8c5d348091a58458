"""benchmarks/procs.py, the worker protocol every benchmark uses: a tiny run of run.py's `tiny`
workload with plain autograd and jit_ps each in a worker process of its own (no jax needed),
and the guard that keeps jax out of those workers."""
import os
import sys

import numpy as onp
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import procs  # noqa: E402


def test_workers_time_the_same_inputs_and_agree():
    with procs.Workers(["autograd", "jit_ps"]) as ws:
        for w in ws.values():
            assert w.build("run:cases", workload="tiny", dtype="float32") == (
                ["jit_ps", "jit_ps_steady"] if w.kind == "jit_ps" else [w.kind])  # (first calls; steady state, tiered)
        seconds, ref, split = ws["autograd"].request("first", "autograd")
        assert split is None and seconds > 0
        onp.testing.assert_array_equal(ref, onp.array([0.5, -1.0, 2.0], onp.float32) + 1.0)  # seeded, same in each
        _, out, split = ws["jit_ps"].request("first", "jit_ps")
        assert set(split) == {"trace", "lower", "compile"}
        assert out.dtype == onp.float32 and procs.compare(ref, out, "float32") == 0.0
        assert ws["jit_ps"].request("settle", "jit_ps")[0] >= 1
        assert ws["jit_ps"].request("settle", "jit_ps_steady")[0] >= 1
        contenders = {"autograd": (ws["autograd"], "autograd"), "jit_ps": (ws["jit_ps"], "jit_ps_steady")}
        samples, numbers = procs.interleaved(contenders, 2, 1e-3)
        assert all(len(v) == 2 and min(v) > 0 for v in samples.values()) and set(numbers) == set(ws)
        assert ws["jit_ps"].extra("jit_ps_steady", "plain_kept") in (0, 1)
        assert ws["jit_ps"].extra("jit_ps", "hlo").startswith("HloModule")


def test_a_worker_that_imports_a_forbidden_library_fails_the_request():
    """jax in an autograd or jit_ps worker (here a stand-in module of that name) is an error
    naming it (on every request from then on), as is an error raised in the worker; the
    worker still answers after either."""
    with procs.Worker("autograd") as w:
        with pytest.raises(procs.WorkerError, match="ZeroDivisionError"):
            w.call("operator:truediv", 1, 0)
        assert w.call("operator:add", 1, 2) == 3
        with pytest.raises(procs.WorkerError, match="jax imported in the autograd worker"):
            w.call("builtins:exec", "import sys, types; sys.modules['jax'] = types.ModuleType('jax')")
        with pytest.raises(procs.WorkerError, match="jax imported in the autograd worker"):
            w.call("operator:add", 1, 2)


def test_the_tpu_benchmark_writes_its_rows_as_each_is_measured(tmp_path):
    """benchmarks/tpu.py keeps the rows a run measured before a time limit stopped it: its
    JSON file is written whole after each row (here numpy's side, on the host)."""
    import json

    import tpu
    path = str(tmp_path / "rows.json")
    write, seen = tpu.saver(path), []

    def save(rows):
        write(rows)
        with open(path) as fh:
            seen.append(list(json.load(fh)["workloads"]))
    tpu.run("numpy", {"powers_1000", "tiny_grad"}, 0.0, save)
    assert seen == [["powers_1000"], ["powers_1000", "tiny_grad"]]
    assert sorted(os.listdir(tmp_path)) == ["rows.json"]


def test_the_tpu_table_gives_each_side_the_median_of_its_runs(tmp_path):
    """tpu_check.sh's ROUNDS: several files of a side; the table's value is their median,
    and its label says over how many runs of each side."""
    import json

    import tpu
    runs = [("jax", 0.001, 0.004), ("jax", 0.003, None), ("jax", 0.002, None), ("jit_ps", 0.002, 0.005)]
    for k, (side, device, first) in enumerate(runs):
        row = {"device": device} if first is None else {"device": device, "first": first}
        (tmp_path / f"{k}.json").write_text(json.dumps({"side": side, "workloads": {"tiny_grad": row}}))
    lines = tpu.table(sorted(str(p) for p in tmp_path.iterdir())).splitlines()
    assert "| tiny_grad | device (median of 3 / 1) | 2.00 | 2.00 | 1.00x |  |" in lines
    assert "| tiny_grad | first | 4.00 | 5.00 | 1.25x |  |" in lines
