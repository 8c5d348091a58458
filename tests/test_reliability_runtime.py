"""Reliability over time: the executable cache (bounded, least recently used, freed with
the function, warning with what changed on repeated recompiles), many threads calling
jitted functions at once, and memory that stays flat over 100,000 calls."""
import gc
import os
import sys
import threading
import warnings
import weakref

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
from autograd_xla import backend, jit_ps
from autograd_xla.api import RETRACE_WARN_AFTER
from helpers import PLATFORM, assert_close

rs = onp.random.RandomState(0)


# ----- the cache -----------------------------------------------------------------------------------
def test_cache_size_is_configurable_and_least_recently_used_is_evicted():
    f = jit_ps(lambda x: x * 3 + 1, cache_size=3)
    hot = onp.ones(1)
    for n in range(2, 8):
        f(hot)                                  # keep one signature in use...
        f(onp.ones(n))                          # ...among a stream of new ones
    info = f.cache_info()
    assert info["max_size"] == 3 and info["size"] == 3 and info["evictions"] == 4
    traces = info["traces"]
    f(hot)
    assert f.cache_info()["traces"] == traces   # the hot signature was never evicted


def test_evicted_and_cleared_executables_are_freed(monkeypatch):
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 0)  # none kept beyond their functions' caches
    backend.get_backend("cpu").release_recent()
    f = jit_ps(lambda x: np.cos(x) * 1.75 - 0.5, cache_size=1)   # programs no other test compiles
    f(onp.ones(3))
    program = weakref.ref(next(iter(f._cache.values())).executable.program)
    f(onp.ones(4))                                               # evicts the first signature
    gc.collect()
    assert program() is None
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 64)  # cleared: freed although among the recent ones
    f(onp.ones(5))
    program = weakref.ref(next(iter(f._cache.values())).executable.program)
    f.clear_cache()
    gc.collect()
    assert program() is None


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="memory maps are counted on Linux alone")
def test_a_process_near_its_bound_of_memory_maps_runs_new_signatures_plainly(monkeypatch):
    """XLA:CPU maps ~12 memory regions for each program it holds, and a process past
    vm.max_map_count crashed in its next compile (geomstats kept ~5,000 programs): past
    backend.MAPS_FRACTION of the bound a compile is refused, and the call runs plainly with
    a FallbackWarning saying why (fallback="error" raises TooManyProgramsError)."""
    from autograd_xla import FallbackWarning, TooManyProgramsError
    with open("/proc/self/maps", "rb") as f:
        now = f.read().count(b"\n")
    monkeypatch.setitem(backend._maps, "bound", now / 2)  # as if past the bound already
    monkeypatch.setitem(backend._maps, "unchecked", 0)
    f = lambda x: np.sin(x) * 1.125 + 0.375  # noqa: E731  (a program no other test compiles)
    x = onp.linspace(0.0, 1.0, 7)
    with pytest.warns(FallbackWarning, match="memory maps, near the system's bound"):
        assert_close(jit_ps(f, tiered=False)(x), f(x))
    with pytest.raises(TooManyProgramsError, match="vm.max_map_count"):
        jit_ps(f, tiered=False, fallback="error")(x)
    monkeypatch.setitem(backend._maps, "bound", now * 100.0)  # room again: compiled, the count deferred
    monkeypatch.setitem(backend._maps, "unchecked", 0)
    g = jit_ps(f, tiered=False, fallback="error")
    assert_close(g(x), f(x))
    assert g.cache_info()["compiles"] == 1 and backend._maps["unchecked"] > 0


def test_jitted_gradient_and_its_derivatives_are_freed_with_the_function(monkeypatch):
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 0)
    backend.get_backend("cpu").release_recent()

    def make():
        f = jit_ps(lambda x: np.sum(np.sin(x) * 2.625))
        g = grad(f)
        g(onp.ones(3))
        return weakref.ref(f), [weakref.ref(e.executable.program) for d in f._derivatives.values()
                                for e in d._cache.values()]
    f_ref, programs = make()
    gc.collect()
    assert f_ref() is None and programs and all(p() is None for p in programs)


def recompile_warning(calls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        calls()
    found = [w for w in caught if "has been traced for" in str(w.message)]
    assert len(found) == 1, [str(w.message) for w in caught]
    assert found[0].filename == __file__            # attributed to the caller's line
    return str(found[0].message)


def test_recompile_warning_names_a_shape_change():
    f = jit_ps(lambda x, y: x * y)
    msg = recompile_warning(lambda: [f(onp.ones(n), 2.0) for n in range(1, RETRACE_WARN_AFTER + 1)])
    assert "the shape of argument x (float64[7] -> float64[8])" in msg and "pad inputs" in msg


def test_recompile_warning_names_a_dtype_change():
    f = jit_ps(lambda x, y: x * y)
    y = onp.ones(2)
    dtypes = [onp.float64, onp.float32, onp.int64, onp.int32, onp.int16, onp.uint8, onp.complex128, onp.float16]
    msg = recompile_warning(lambda: [f(onp.ones(2), y.astype(d)) for d in dtypes])
    assert "the dtype of argument y (complex128[2] -> float16[2])" in msg


def test_recompile_warning_names_a_structure_change():
    f = jit_ps(lambda xs: sum(np.sum(x) for x in xs))
    msg = recompile_warning(lambda: [f([onp.ones(1)] * n) for n in range(1, RETRACE_WARN_AFTER + 1)])
    assert "the structure of argument xs ([*, *, *, *, *, *, *] -> [*, *, *, *, *, *, *, *])" in msg


def test_recompile_warning_names_a_static_argument():
    f = jit_ps(lambda x, n: x ** n, static_argnums=1)
    msg = recompile_warning(lambda: [f(onp.ones(2), n) for n in range(RETRACE_WARN_AFTER)])
    assert "the value of static argument 'n' (6 -> 7)" in msg and "static arguments" in msg


def test_recompile_warning_says_what_an_object_argument_holds_changed():
    class Model:
        def __init__(self):
            self.w = onp.ones(2)
    model = Model()
    f = jit_ps(lambda m, x: np.sum(m.w * x))

    def calls():
        for k in range(RETRACE_WARN_AFTER):
            model.w = onp.full(2, float(k))  # (signatures.state_digest: a new signature each)
            assert f(model, onp.ones(2)) == 2.0 * k
    msg = recompile_warning(calls)
    assert "what argument m holds (an array or number reachable from its attributes" in msg


def test_recompile_warning_names_a_python_scalar_type_change():
    f = jit_ps(lambda x, s: x * s)
    values = [2.0, 2, True, 2j, onp.float32(2), onp.float64(2), onp.int8(2), 2.0]
    x = onp.ones(2)
    msg = recompile_warning(lambda: [f(x, v) for v in values[:-1]] + [f(x.astype(onp.float32), 2.0)])
    assert "argument x" in msg and "float64[2] -> float32[2]" in msg
    g = jit_ps(lambda x, s: x * s)
    msg = recompile_warning(lambda: [g(onp.ones(n), 2.0) for n in range(1, RETRACE_WARN_AFTER)] + [g(onp.ones(7), 2)])
    assert "the type of argument s (Python float -> Python int)" in msg


def test_recompile_warning_names_an_automatically_static_scalar():
    data = onp.arange(100.0)
    f = jit_ps(lambda w, i: np.sum(data[i * 4:(i + 1) * 4] * w))    # i slices a closed-over array
    msg = recompile_warning(lambda: [f(onp.ones(4), i) for i in range(RETRACE_WARN_AFTER)])
    assert "argument used as a static value" in msg and "'i'" in msg and "as arguments" in msg


def test_a_large_unrolled_program_warns_once_naming_the_loop_line(monkeypatch):
    """XLA compile time grows with program size; a Python loop unrolled at trace time is
    the usual cause, so the warning (before compiling) names the lines that made it."""
    import autograd_xla.api as api
    monkeypatch.setattr(api, "LARGE_PROGRAM_WARN_AFTER", 100)

    def rnn(W, c, xs):
        for i in range(xs.shape[0]):
            c = np.tanh(np.dot(W, c) + xs[i])
        return np.sum(c ** 2)
    loop_line = rnn.__code__.co_firstlineno + 2
    args = (onp.eye(3) * 0.5, onp.ones(3), onp.ones((40, 3)))
    f = jit_ps(grad(rnn), roll_loops=False)  # (rolled, it is small: tests/test_rolling.py)
    with pytest.warns(UserWarning, match="grad_of_rnn_wrt_argnum_0> traced to a program of") as w:
        assert_close(f(*args), grad(rnn)(*args))
    msg = str(w[0].message)
    # the loop's 160 forward calls and the 238 of their backward pass, which is the loop's too
    assert f"398 from {__file__}:{loop_line}" in msg and "scan or fori_loop" in msg
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(onp.eye(3), onp.ones(3), onp.ones((41, 3)))   # new signature, still large: warned once only
        jit_ps(rnn, roll_loops=False)(*args[:2], onp.ones((20, 3)))  # 20 steps x 4 calls + 2: under the bound


# ----- threads ---------------------------------------------------------------------------------------
THREADS, CALLS = 8, 150


@pytest.mark.filterwarnings("ignore:.*has been traced for")
def test_many_threads_mixed_signatures():
    """THREADS threads x CALLS calls over 3 jitted functions (one a compiled gradient, one
    differentiated from outside) and 8 signatures, all first called at the same moment:
    every answer is right, each signature is traced exactly once, nothing deadlocks."""
    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)
    fs = {"value": jit_ps(lambda w, x: np.tanh(x @ w) * 2), "jit_grad": jit_ps(grad(loss)),
          "grad_jit": grad(jit_ps(loss))}
    plain = {"value": lambda w, x: onp.tanh(x @ w) * 2, "jit_grad": grad(loss), "grad_jit": grad(loss)}
    shapes = [(3, 2), (5, 2), (3, 4), (1, 1)]
    dtypes = [onp.float64, onp.float32]
    cases = []
    for k, (n, d) in enumerate(shapes):
        for dt in dtypes:
            w, x = rs.randn(d).astype(dt), rs.randn(n, d).astype(dt)
            cases.append((w, x, {name: plain[name](w, x) for name in fs}))
    barrier = threading.Barrier(THREADS)
    errors = []

    def worker(t):
        local = onp.random.RandomState(t)
        barrier.wait()
        try:
            for i in range(CALLS):
                name = list(fs)[(t + i) % len(fs)]
                w, x, expected = cases[local.randint(len(cases))]
                assert_close(fs[name](w, x), expected[name], rtol=1e-5 if x.dtype == onp.float32 else 1e-12)
        except Exception as e:  # noqa: BLE001 - report any failure of any thread
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "deadlock"
    assert not errors, errors[:3]
    n_sigs = len(cases)
    assert fs["value"].cache_info()["traces"] <= n_sigs
    assert fs["jit_grad"].cache_info()["traces"] <= n_sigs
    for f in (fs["value"], fs["jit_grad"]):
        assert f.cache_info()["traces"] == f.cache_info()["size"]    # no signature traced twice


def test_concurrent_first_calls_trace_once():
    f = jit_ps(lambda x: np.exp(x) - 1)
    x = rs.randn(5)
    barrier = threading.Barrier(6)
    results = []

    def worker():
        barrier.wait()
        results.append(f(x))
    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 6 and f.cache_info()["traces"] == 1
    for r in results:
        assert_close(r, onp.exp(x) - 1)


def test_threads_tracing_different_functions_at_once():
    """Tracing swaps autograd's primitives for interceptors process-wide; threads that trace
    at the same time, and threads running plain autograd meanwhile, must not interfere."""
    barrier = threading.Barrier(6)
    errors = []

    def worker(k):
        f = lambda x: np.sum(np.sin(x * (k + 1)) ** 2)   # noqa: E731 - a new function per thread
        x = rs.randn(4)
        barrier.wait()
        try:
            if k % 2:
                assert_close(grad(f)(x), grad(f)(x))      # plain autograd while others trace
                assert_close(onp.asarray(np.sin(x)), onp.sin(x))
            assert_close(jit_ps(grad(f))(x), grad(f)(x))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors


# ----- long runs ---------------------------------------------------------------------------------------
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


# A synchronised call on a TPU takes ~0.5 ms (the 100,000 took 136 s on a v5e) against ~10 us
# on the CPU: 20,000 there still show a leak of 1 KiB a call (20 MiB) above RSS_BOUND_MIB.
LONG_RUN_CALLS = 100_000 if PLATFORM == "cpu" else 20_000
RSS_BOUND_MIB = 16


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_stays_flat_over_100k_calls_of_a_jitted_gradient():
    g = jit_ps(grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2)))
    w, x = rs.randn(5), rs.randn(8, 5)
    expected = g(w, x)
    for _ in range(2000):                          # warm up: allocator pools, caches
        g(w, x)
    gc.collect()
    before = rss_mib()
    for _ in range(LONG_RUN_CALLS):
        out = g(w, x)
    gc.collect()
    growth = rss_mib() - before
    print(f"RSS growth over {LONG_RUN_CALLS} calls: {growth:.2f} MiB")
    assert growth < RSS_BOUND_MIB, f"RSS grew by {growth:.1f} MiB over {LONG_RUN_CALLS} calls"
    assert_close(out, expected)
    assert g.cache_info()["traces"] == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_memory_stays_flat_for_other_call_paths():
    """grad(jit_ps(f)), keep_on_device results and replayed random draws, 5,000 calls each."""
    f = jit_ps(lambda w, x: np.sum(np.tanh(x @ w) ** 2))
    gf = grad(f)
    d = jit_ps(lambda w: w * 2, keep_on_device=True)
    r = jit_ps(lambda w: w + np.random.randn(5))
    w, x = rs.randn(5), rs.randn(8, 5)
    for _ in range(300):
        gf(w, x), d(w), r(w)
    gc.collect()
    before = rss_mib()
    for _ in range(5000):
        gf(w, x)
        onp.asarray(d(w))
        r(w)
    gc.collect()
    assert rss_mib() - before < RSS_BOUND_MIB

