"""What the runtime shows users: cost_analysis's keys, DeviceArray's immutability, and the
log lines around a compile expected to be long (backend.py)."""
import logging
import warnings

import autograd.numpy as np
import numpy as onp
import pytest

import autograd_xla.api as api
from autograd_xla import backend, jit_ps
from helpers import NARROW, PLATFORM


# ----- cost_analysis -------------------------------------------------------------------------
def test_cost_analysis_keys_are_clean_and_documented():
    a, b = onp.ones((4, 5)), onp.ones((5, 3))
    cost = jit_ps(lambda a, b: np.tanh(a @ b) + 1.0).cost_analysis(a, b)
    # XLA:TPU (GPU) estimate "optimal seconds" too (backend.COST_KEYS)
    extra = set() if PLATFORM == "cpu" else {"optimal seconds"}
    assert set(cost) - extra == set(backend.COST_KEYS) == {"flops", "transcendentals", "bytes accessed"}
    assert all(type(v) is float for v in cost.values())
    # XLA counts 2*m*n*k for the product and one flop per element of the add; tanh is
    # a transcendental per element
    assert cost["flops"] == 2 * 4 * 3 * 5 + 4 * 3
    assert cost["transcendentals"] == 4 * 3
    itemsize = 4 if NARROW else 8  # (float64 computed in float32 on a 32-bit platform)
    assert cost["bytes accessed"] >= (4 * 5 + 5 * 3 + 4 * 3) * itemsize   # at least its operands and result


def test_cost_analysis_of_a_matmul_counts_2mnk_and_no_transcendentals():
    m, k, n = 6, 7, 8
    cost = jit_ps(lambda a, b: a @ b).cost_analysis(onp.ones((m, k)), onp.ones((k, n)))
    assert cost["flops"] == 2 * m * n * k
    assert cost["transcendentals"] == 0.0   # XLA leaves the key out when there are none


# ----- DeviceArray ---------------------------------------------------------------------------
def test_device_arrays_are_immutable_with_a_clear_error():
    d = jit_ps(lambda x: x * 2.0, keep_on_device=True)(onp.arange(3.0))
    with pytest.raises(TypeError, match="DeviceArray is immutable") as e:
        d[0] = 5
    assert "np.asarray(d)" in str(e.value) and "compute a new array" in str(e.value)
    host = onp.asarray(d)
    host[0] = 5                                    # the documented way: a writable host copy
    assert host.tolist() == [5.0, 2.0, 4.0] and onp.asarray(d).tolist() == [0.0, 2.0, 4.0]


# ----- compiles expected to be long ----------------------------------------------------------
def _unrolled(x):
    for _ in range(30):
        x = np.sin(x) * 1.01
    return x


def test_a_compile_expected_to_be_long_is_logged_before_and_after(monkeypatch, caplog):
    monkeypatch.setattr(api, "LARGE_PROGRAM_WARN_AFTER", 50)   # 60 calls: "large"
    f = jit_ps(_unrolled, roll_loops=False)  # (rolled, it is small)
    with caplog.at_level(logging.WARNING, logger="autograd_xla.backend"):
        with pytest.warns(UserWarning, match="traced to a program of 60 primitive calls"):
            f(onp.ones(3))
    before, after = [r.getMessage() for r in caplog.records if r.name == "autograd_xla.backend"]
    assert before.startswith("XLA is compiling _unrolled (") and "can take minutes" in before
    assert after.startswith("XLA compiled _unrolled in ") and after.endswith(" s")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autograd_xla.backend"):
        jit_ps(lambda x: np.sin(x))(onp.ones(3))   # small: nothing logged
        f(onp.ones(3))                             # cached: no compile, nothing logged
    assert not caplog.records


def test_a_program_large_in_stablehlo_alone_warns(monkeypatch):
    """A few primitive calls whose rules emit much (loops inlined by special functions) warn
    by the size of their StableHLO, once lowered."""
    monkeypatch.setattr(api, "LARGE_PROGRAM_WARN_BYTES", 5000)
    with pytest.warns(UserWarning, match=r"traced to a program of 60 primitive calls and [\d.]+ MiB of StableHLO"):
        jit_ps(_unrolled, roll_loops=False)(onp.ones(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jit_ps(_cos3)(onp.ones(3))                 # small in both: silent


def _cos3(x):
    return np.cos(x) * 3.0


def test_a_large_program_text_alone_counts_as_long(monkeypatch, caplog):
    monkeypatch.setattr(backend, "LONG_COMPILE_BYTES", 100)
    with caplog.at_level(logging.WARNING, logger="autograd_xla.backend"):
        jit_ps(_cos3)(onp.ones(2))
    before, after = [r.getMessage() for r in caplog.records]
    assert before.startswith("XLA is compiling _cos3 (0.0 MiB of StableHLO)")
    assert after.startswith("XLA compiled _cos3 in ")
