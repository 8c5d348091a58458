"""jaxlib's C++ call path driving our executables (dispatch.py): which calls it takes, that
what they return is what the Python path returns, and that what it cannot do still runs
(through the Python path) with the same results."""
import gc
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import types
import warnings
import weakref

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
from autograd_xla import DeviceArray, FallbackWarning, backend, background, dispatch, fastpaths, jit_ps, lowering, tiering
from autograd_xla import calls as calls_mod
from helpers import assert_close, placed, run_threads

pytestmark = [pytest.mark.skipif(not dispatch.available(), reason="this jaxlib offers no C++ dispatch"),
              pytest.mark.usefixtures("on_the_cpu")]  # features of the CPU runtime (conftest)
rs = onp.random.RandomState(11)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def one_program(monkeypatch):
    """One program per signature (no tiering.Ladder, whose calls stay in Python while it
    climbs): C++ takes the calls it can from the second on."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", None)


def test_cpp_takes_the_calls_once_the_ladder_is_done(monkeypatch):
    """While a signature may still move to a faster program its calls are timed in Python;
    once it has settled, C++ takes them."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 2)
    monkeypatch.setattr(tiering, "TURN_SETTLE_SECONDS", 0.0)
    jf = jit_ps(lambda x: np.tanh(x) * 2.0)
    calls = counting(jf)
    x = rs.randn(3)
    for k in range(21):
        assert_close(jf(x + k), onp.tanh(x + k) * 2.0)
        assert tiering.compile_thread.wait(60)
    (entry,) = jf._cache.values()
    # LLVM's optimisations, default options, XLA's own scheduler
    assert entry.ladder is None and jf.cache_info()["upgrades"] == 3
    for _ in range(first_calls(jf)):  # what reaches Python once C++ takes a signature, if not above
        jf(x)
    n = len(calls)
    for k in range(5):
        assert_close(jf(x - k), onp.tanh(x - k) * 2.0)
    assert len(calls) == n


def first_calls(jf):
    """How many calls of a signature C++ takes reach the Python path: the first, and where
    arguments are staged (dispatch._stage) the first staged one (a new signature to C++)."""
    return 2 if isinstance(jf, dispatch.Front) else 1


def counting(jf):
    """Count the calls reaching jf's Python path (C++ calls it for what it cannot do)."""
    calls = []
    python = jf._call_python

    def counted(*args, **kwargs):
        calls.append(1)
        return python(*args, **kwargs)
    jf._call_python = counted
    return calls


def test_small_calls_go_through_cpp_and_count_as_hits():
    jf = jit_ps(lambda x, y: (np.tanh(x) * y, {"s": np.sum(x), "y": [y + 1.0]}))
    calls = counting(jf)
    x, y = rs.randn(3), rs.randn(3)
    first = jf(x, y)
    assert len(calls) == 1 and jf._fast._cache_size() == 1
    for k in range(10):
        got = jf(x + k, y)
        assert_close(got[0], onp.tanh(x + k) * y)
        assert_close(got[1]["s"], onp.sum(x + k))
        assert_close(got[1]["y"][0], y + 1.0)
    assert len(calls) == first_calls(jf)
    info = jf.cache_info()
    assert info["hits"] == 10 and info["host_to_device"] == 22 and info["device_to_host"] == 33
    for out in first, got:  # the Python path's and C++'s
        assert type(out) is tuple and type(out[1]) is dict and type(out[1]["y"]) is list
        assert type(out[1]["s"]) is onp.float64 and out[0].flags.writeable and type(out[0]) is onp.ndarray


RESULT_CASES = [(onp.float64, (2, 3)), (onp.float32, ()), (onp.complex128, (1, 2, 1, 3)), (onp.int32, (0, 3)),
                (onp.int64, (4,)), (onp.bool_, (2, 2)), (onp.complex64, ())]


@pytest.mark.parametrize("dtype,shape", RESULT_CASES, ids=[f"{onp.dtype(d).name}{s}" for d, s in RESULT_CASES])
def test_cpp_s_results_are_numpy_s_arrays_that_keep_their_memory(dtype, shape):
    """C++'s results are made with numpy's C API (_callpath's convert): numpy arrays (0-d ones
    numpy scalars) of the dtype and shape, writeable, whose memory outlives the function."""
    x = (rs.randn(*shape) * 3).astype(dtype) if shape else dtype(2.5)
    jf = jit_ps(lambda x: (x, x * 2, x == x))
    calls = counting(jf)
    for _ in range(4):
        outs = jf(onp.asarray(x))
    assert len(calls) <= first_calls(jf)  # the last calls C++'s (an empty argument is not staged)
    want = (x, x * 2, x == x)
    del jf
    gc.collect()
    for got, expected in zip(outs, want):
        expected = onp.asarray(expected)
        if shape == ():
            assert type(got) is type(expected[()]) and got == expected[()]
            continue
        assert type(got) is onp.ndarray and got.dtype == expected.dtype and got.shape == shape
        assert got.flags.writeable and got.flags.c_contiguous and (got.size == 0 or not got.flags.owndata)
        onp.testing.assert_array_equal(got, expected)
        got[...] = expected  # writeable memory of its own: another result's is not touched
    onp.testing.assert_array_equal(outs[1], onp.asarray(want[1]))


@pytest.mark.parametrize("structure", [
    lambda a, b: [(a, None), [b, (a * b,)], ()],
    lambda a, b: ((a,), [], (b, [a + b, None])),
    lambda a, b: {"z": a, "a": [b, {"y": a * b, "b": ()}]},  # keys in the function's order, not sorted
], ids=["lists_tuples_none", "empty_lists", "dicts"])
def test_cpp_builds_results_in_the_function_s_own_structure(structure):
    """C++'s results are built into the structure the function returned (dispatch._unflattener:
    jaxlib's pytrees for tuples, lists and None), containers of the same types and dict keys
    in the same order as on the Python path and in plain autograd."""
    f = lambda x: structure(np.sin(x), np.cos(x))  # noqa: E731
    jf = jit_ps(f)
    calls = counting(jf)
    x = rs.randn(4)
    outs = [jf(x + k) for k in range(4)]
    assert len(calls) == first_calls(jf)

    def shape_of(t):
        if isinstance(t, dict):
            return (dict, [(k, shape_of(v)) for k, v in t.items()])
        if isinstance(t, (list, tuple)):
            return (type(t), [shape_of(v) for v in t])
        return None if t is None else type(t)
    for k, out in enumerate(outs):  # the Python path's first, then C++'s
        assert shape_of(out) == shape_of(f(x + k))
        assert_close(out, f(x + k))


def test_a_gradient_goes_through_cpp():
    loss = lambda w: np.sum(np.tanh(w) * w)  # noqa: E731
    g = jit_ps(grad(loss))
    calls = counting(g)
    w = rs.randn(5)
    for k in range(5):
        assert_close(g(w * k), grad(loss)(w * k))
    assert len(calls) == first_calls(g)


def test_closed_over_arrays_go_through_cpp_too():
    """Arrays a function closes over are lifted into device-resident parameters; C++ passes
    them before the arguments (the fast path's const_args)."""
    data, other = rs.randn(300, 4), rs.randn(4, 200)  # both above context.LIFT_BYTES
    loss = lambda w, b: np.sum(np.tanh(np.dot(data, w) + b) * np.dot(w, other)[:1])  # noqa: E731
    f, g = jit_ps(loss), jit_ps(grad(loss, argnum=(0, 1)))
    calls_f, calls_g = counting(f), counting(g)
    w, b = rs.randn(4), rs.randn(300)
    assert "%k1" in f.stablehlo(w, b)
    for k in range(4):
        assert_close(f(w * k, b), loss(w * k, b))
        for got, want in zip(g(w * k, b - k), grad(loss, argnum=(0, 1))(w * k, b - k)):
            assert_close(got, want)
    assert len(calls_f) == first_calls(f) and len(calls_g) == first_calls(g)


@pytest.mark.parametrize("case", ["keyword", "python bool", "dict", "static", "x64 off", "large", "draws"])
def test_what_cpp_cannot_do_runs_through_python(case):
    x = rs.randn(4)
    if case == "keyword":
        jf, call, expect = jit_ps(lambda x, s: x * s), lambda f: f(x, s=2.0), x * 2.0
    elif case == "python bool":  # static: part of the key, where C++'s signature has its type only
        jf, call, expect = jit_ps(lambda x, s: x * s), lambda f: f(x, True), x * 1.0
    elif case == "dict":  # C++ orders a dict's leaves by sorted key, ours by insertion (tree.sequences_only)
        jf, call, expect = jit_ps(lambda xs: xs["b"] - xs["a"]), lambda f: f({"b": x, "a": 2 * x}), -x
    elif case == "static":
        jf, call, expect = jit_ps(lambda x, n: x * n, static_argnums=1), lambda f: f(x, 3), 3 * x
    elif case == "x64 off":  # the executable takes float32: C++ would hand it float64 buffers
        jf, call, expect = jit_ps(lambda x: x + 1.0, x64=False), lambda f: f(x), (x + 1.0).astype(onp.float32)
    elif case == "large":  # misaligned, read through a view, whose offset Python puts at each call
        big = placed((lowering.LARGE_ARRAY_BYTES // 8,), offset=16)
        jf, call, expect = jit_ps(lambda x: x + 1.0), lambda f: f(big), big + 1.0
    else:
        jf, call = jit_ps(lambda x: x + onp.random.normal(size=4)), lambda f: f(x)
        state = onp.random.get_state()
        expect = x + onp.random.normal(size=4)
        onp.random.set_state(state)
    calls = counting(jf)
    for _ in range(3):
        if case == "draws":
            state = onp.random.get_state()
            assert_close(call(jf), expect)
            onp.random.set_state(state)
        else:
            got = call(jf)
            assert_close(got, expect)
            assert onp.asarray(got).dtype == onp.asarray(expect).dtype
    assert len(calls) == 3


def test_device_arrays_go_through_cpp_as_their_buffers():
    """C++ passes a DeviceArray's buffer to the executable as it is (dispatch._setup),
    positional or in lists and tuples, and a kept function's results are DeviceArrays: a
    training loop's parameters fed back never reach Python, nor count as moved."""
    jf = jit_ps(sgd_step, keep_on_device=True)
    calls = counting(jf)
    params, x = mlp_params(), rs.randn(6, 5)
    kept = jf(params, x)  # numpy in: through Python, the signature's first call
    dx = jit_ps(lambda a: a * 1.0, keep_on_device=True)(x)
    moved = jf.cache_info()["host_to_device"]
    want = sgd_step(params, x)
    for k in range(5):
        kept = jf(kept, dx)  # the first: a new signature to C++
        want = sgd_step(want, x)
        assert type(kept) is list and all(type(p) is tuple and all(type(a) is DeviceArray for a in p) for p in kept)
    for (W, b), (W0, b0) in zip(kept, want):
        assert_close(onp.asarray(W), W0)
        assert_close(onp.asarray(b), b0)
    assert len(calls) == 2 and jf._fast_calls[0] == 0
    info = jf.cache_info()
    assert info["host_to_device"] == moved and info["device_to_host"] == 0 and info["hits"] == 5
    mixed = jf(kept, x)  # x moved, the parameters not: its own count
    assert len(calls) == 3 and jf.cache_info()["host_to_device"] == moved + 1
    jf(kept, x)
    assert len(calls) == 3 and jf.cache_info()["host_to_device"] == moved + 2
    assert_close(onp.asarray(mixed[0][0]), sgd_step(want, x)[0][0])
    f = jit_ps(lambda a: np.tanh(a) + 1.0)  # numpy results of a DeviceArray argument
    calls = counting(f)
    for _ in range(3):
        assert_close(f(dx), onp.tanh(x) + 1.0)
    assert len(calls) == 1


def test_kept_results_of_cpp_calls_are_whole_device_arrays():
    """A fast call's kept results are made in C (_callpath's `kept`, where it is built): each a
    DeviceArray with the four slots its __init__ sets, weak-referenceable, freed with its last
    reference and holding no extra one to its buffer."""
    jf = jit_ps(lambda x: (x * 2.0, [x + 1.0]), keep_on_device=True)
    calls = counting(jf)
    x = jit_ps(lambda a: a * 1.0, keep_on_device=True)(rs.randn(3))
    for _ in range(4):
        out = jf(x)
    assert len(calls) == 1 and jf._fast_calls[0] == 0  # (DeviceArrays are not staged)
    a, (b,) = out
    model = DeviceArray(a.buffer, a.aval, a.backend, a.host_dtype)
    for d in (a, b):
        assert type(d) is DeviceArray and d.aval == x.aval and d.backend is x.backend and d.host_dtype is None
        assert [getattr(d, n) for n in ("aval", "backend", "host_dtype")] == [getattr(model, n) for n in
                                                                             ("aval", "backend", "host_dtype")]
    assert_close(onp.asarray(a), onp.asarray(x) * 2.0)
    assert_close(onp.asarray(b), onp.asarray(x) + 1.0)
    buffer, alive = a.buffer, weakref.ref(a)
    held = sys.getrefcount(buffer)
    del a, out, model
    assert alive() is None and sys.getrefcount(buffer) == held - 2  # (a's slot and model's)


def test_a_donated_device_array_passed_again_raises_the_python_path_s_error():
    """C++ signs a deleted buffer like a live one and its execution raises a ValueError: a
    deleted DeviceArray's call goes to the Python path instead, whose RuntimeError it raises."""
    jf = jit_ps(lambda x: x * 2.0, keep_on_device=True, donate_argnums=0)
    x = rs.randn(3)
    d = jf(x)
    for k in range(3):
        e = jf(d)
        assert_close(onp.asarray(e), x * 2.0 ** (k + 2))
        with pytest.raises(RuntimeError, match="deleted or donated"):
            jf(d)
        d = e
    assert jf._fast_calls[1] >= 1


def test_a_donated_device_array_passed_to_another_function_raises_the_python_path_s_error():
    """C++ flattens a DeviceArray to its buffer with no Python call (dispatch._setup), a deleted
    one too: any function's fast call of it fails in C++ and runs again in Python, which raises
    its error; the function's fast path stays."""
    step = jit_ps(lambda x: x * 2.0, keep_on_device=True, donate_argnums=0)
    other = jit_ps(lambda x: x + 1.0, keep_on_device=True)
    x = rs.randn(3)
    live = step(x)
    for _ in range(3):
        assert_close(onp.asarray(other(live)), x * 2.0 + 1.0)  # C++'s fast path of the signature
    hits = other.cache_info()["hits"]
    gone = step(x)
    step(gone)  # donated: its buffer deleted
    with pytest.raises(RuntimeError, match="deleted or donated"):
        other(gone)
    assert_close(onp.asarray(other(live)), x * 2.0 + 1.0)
    assert other.cache_info()["hits"] > hits and other._fast_calls[1] >= 1


def test_which_arguments_cpp_is_given_off_the_cpu():
    """An accelerator's client copies a numpy argument C++ puts to the chip after the call
    returns (jaxlib's zero-copy put): C++ is given numpy arrays only where the call waits for
    its results; DeviceArrays only of the executable's backend and device, holding what they
    stand for (dispatch.takes_arguments; stand-in executables of another platform)."""
    cpu = backend.get_backend("cpu")
    tpu = types.SimpleNamespace(platform="tpu", sharding=cpu.sharding)

    def executable(where, out_avals=(backend.Aval((3,), onp.float64),)):
        return types.SimpleNamespace(backend=where, out_avals=list(out_avals))
    d = jit_ps(lambda a: a * 1.0, keep_on_device=True)(rs.randn(3))
    wide = DeviceArray(d.buffer, d.aval, cpu, onp.dtype(onp.complex128))  # holds less than it stands for
    x = rs.randn(3)
    assert dispatch.takes_arguments(executable(cpu), [x, d, 1.0], keep=True)
    assert dispatch.takes_arguments(executable(tpu), [x, 1.0], keep=False)
    assert not dispatch.takes_arguments(executable(tpu), [x], keep=True)
    assert not dispatch.takes_arguments(executable(tpu, [backend.Aval((0,), onp.float64)]), [x], keep=False)
    assert not dispatch.takes_arguments(executable(tpu, []), [x], keep=False)
    assert dispatch.takes_arguments(executable(tpu), [1.0, 2], keep=True)
    assert not dispatch.takes_arguments(executable(tpu), [d], keep=True)  # another backend's
    assert not dispatch.takes_arguments(executable(cpu), [wide], keep=True)


@pytest.mark.skipif(dispatch.Front == (), reason="the Front (_callpath.c) is not in use")
def test_an_accelerator_s_functions_give_cpp_arrays_pjrt_would_copy_apart(monkeypatch):
    """_callpath's scan keeps from C++ numpy arrays the CPU client would copy on a worker
    thread; an accelerator's executions wait for those copies, so its functions give C++ all
    (`_ordered`, set once the function's platform is known)."""
    cpu = jit_ps(lambda x: x + 1.0)
    cpu(rs.randn(3))
    assert cpu._ordered == 0
    accelerated = jit_ps(lambda x: x + 1.0)
    monkeypatch.setattr(backend, "get_backend", lambda platform=None: types.SimpleNamespace(platform="tpu"))
    accelerated._backend()
    assert accelerated._ordered == 1


def test_evicted_and_cleared_signatures_leave_cpp():
    jf = jit_ps(lambda x: x * 2.0, cache_size=1)
    a, b = rs.randn(3), rs.randn(4)
    for _ in range(3):  # each new signature evicts the other
        assert_close(jf(a), a * 2.0)
        assert_close(jf(b), b * 2.0)
    assert jf.cache_info()["evictions"] == 5 and jf._fast._cache_size() <= 1
    jf.clear_cache()
    assert jf._fast._cache_size() == 0
    assert_close(jf(a), a * 2.0)


def test_the_signature_evicted_is_the_least_recently_used_whichever_path_its_calls_took():
    """C++'s hits move their key to the end of the cache only when another signature was
    touched since (_callpath.Counts): here a new signature, between a's calls."""
    jf = jit_ps(lambda x: x * 2.0, cache_size=2)
    a, b, c = rs.randn(3), rs.randn(4), rs.randn(5)
    settled(jf, a)
    jf(b)  # its first call, through Python
    for _ in range(3):
        jf(a)  # through C++: b is now the least recently used
    traces = jf.cache_info()["traces"]
    assert_close(jf(c), c * 2.0)  # evicts b
    assert_close(jf(a), a * 2.0)
    assert jf.cache_info()["traces"] == traces + 1  # a was kept
    assert_close(jf(b), b * 2.0)
    assert jf.cache_info()["traces"] == traces + 2 and jf.cache_info()["evictions"] == 2


def test_a_jitted_function_and_its_program_are_freed():
    """C++ holds the jitted function weakly: dropping it frees it and its executable."""
    jf = jit_ps(lambda x: x * 3.0 + 0.125)
    x = rs.randn(3)
    jf(x)
    jf(x)
    program = weakref.ref(next(iter(jf._cache.values())).executable.program)
    ref = weakref.ref(jf)
    del jf
    gc.collect()
    backend.get_backend("cpu").release_recent()  # the programs the backend keeps after their functions
    assert ref() is None and program() is None


def test_threads_share_one_function():
    jf = jit_ps(lambda x: np.sin(x) * 2.0)
    jf(rs.randn(3))
    errors = []

    def work(seed):
        local = onp.random.RandomState(seed)
        for _ in range(500):
            x = local.randn(3)
            if not onp.allclose(jf(x), onp.sin(x) * 2.0, rtol=1e-13):
                errors.append(seed)
    run_threads(work, [(s,) for s in range(4)], timeout=60)
    assert not errors


def test_inside_another_trace_the_call_is_inlined():
    inner = jit_ps(lambda x: x * 2.0)
    c = rs.randn(3)
    inner(c)
    inner(c)
    outer = jit_ps(lambda x: inner(x) + inner(c))   # a traced argument, and a numpy constant
    assert_close(outer(c + 1.0), (c + 1.0) * 2.0 + c * 2.0)
    assert "multiply" in str(outer.graph(c))


def test_a_stand_in_jax_module_has_no_x64_state(monkeypatch):
    """A module named jax that is not jax (a stand-in; None, which makes it unimportable) sets
    none of jaxlib's C++ states: ours stay in effect and calls take C++ as without it."""
    if "jax._src.config" in sys.modules:
        pytest.skip("jax itself is imported in this process")
    monkeypatch.setitem(sys.modules, "jax", types.ModuleType("jax"))
    assert calls_mod._jax_x64() is None and not dispatch._jax_states()
    jf = jit_ps(lambda x: x - 1.0)
    calls = counting(jf)
    x = rs.randn(2)
    for _ in range(3):
        assert_close(jf(x), x - 1.0)
    assert len(calls) == first_calls(jf)


#: An accelerator's calls in a process where jax is installed (run by the test below): each
#: result is a host copy (backend.viewable False, as off the CPU), whose first imports jax.
_JAX_TAKES_OVER = """
import sys
import numpy as onp
import autograd.numpy as np
from autograd_xla import backend, dispatch, jit_ps, tiering
from autograd_xla.tree import flatten
from helpers import assert_close
tiering.UPGRADE_RENT = None
backend.viewable = lambda aval, platform="cpu": False
rs = onp.random.RandomState(0)


def taken(jf, *args, expect, calls=6):  # whether C++ took the calls after the first two (staged: a miss)
    python, reached = jf._call_python, []
    jf._call_python = lambda *a, **k: reached.append(1) or python(*a, **k)
    for k in range(calls):
        if k == 2:
            reached.clear()
        got = jf(*args)
        assert_close(got, expect)
        assert all(onp.asarray(g).dtype == onp.asarray(e).dtype for g, e in zip(flatten(got)[0], flatten(expect)[0]))
    return not reached


x32, x64 = rs.randn(3).astype(onp.float32), rs.randn(3)
f = jit_ps(lambda x: np.tanh(x) * 2.0, fallback="error")
f(x32)
import jax
assert "jax._src.config" in sys.modules and dispatch._jax_states() and not jax.config.jax_enable_x64
# jax's x64 state, off, is set on in the thread for each call into C++, under which each
# dtype is keyed and put as its own: float32 and float64 calls of one shape each get their own
# fast path and their own dtype back, and the user's jax keeps its state
assert taken(f, x32, expect=onp.tanh(x32) * 2.0), f._fast_calls
assert taken(f, x64, expect=onp.tanh(x64) * 2.0), f._fast_calls
assert taken(f, x32 + 1.0, expect=onp.tanh(x32 + 1.0) * 2.0, calls=3)
assert not jax.config.jax_enable_x64 and jax.jit(lambda x: x * 2)(x64).dtype == onp.float32
several = jit_ps(lambda x: (np.tanh(x), [x[:0], x * 2.0], np.sum(x)), fallback="error")
assert taken(several, x32, expect=(onp.tanh(x32), [x32[:0], x32 * 2.0], onp.sum(x32)))
assert next(iter(several._cache.values())).executable.fetched == [0, 2, 3]  # copied to the host together
kept = jit_ps(lambda x: np.tanh(x) * 2.0, keep_on_device=True, fallback="error")
d = kept(x32)
assert taken(kept, d, expect=onp.tanh(onp.asarray(d)) * 2.0)
scaled = jit_ps(lambda x, s: x * s, fallback="error")
assert taken(scaled, x64, 3.0, expect=x64 * 3.0), scaled._fast_calls
five = jit_ps(lambda x: x.reshape(5) * 2.0, fallback="error")
assert taken(five, x64[:1].repeat(5), expect=x64[:1].repeat(5) * 2.0)
try:  # a call C++ misses, whose trace raises: the thread's state is put back all the same
    five(x64)
    raise AssertionError("no error")
except ValueError as e:
    assert "reshape" in str(e) or "size" in str(e), e
assert not jax.config.jax_enable_x64 and jax.jit(lambda x: x * 2)(x64).dtype == onp.float32
jax.config.update("jax_enable_x64", True)
assert taken(f, x32, expect=onp.tanh(x32) * 2.0), f._fast_calls
assert taken(f, x64, expect=onp.tanh(x64) * 2.0), f._fast_calls
assert jax.jit(lambda x: x * 2)(x64).dtype == onp.float64
print("ok")
"""


def test_with_jax_imported_by_a_host_copy_cpp_takes_what_it_puts_as_the_programs_take():
    """Off the CPU a result's host copy imports jax where it is installed (jaxlib's single-
    device array to numpy imports jax.core), and jax's C++ states, x64 off, replace ours:
    C++ still takes calls of numpy arrays, Python numbers and DeviceArrays, each dtype its own
    (jax's x64 state set on for each call: calls._jax_x64); every result as plain numpy's,
    in value and dtype, and jax's own state as it was."""
    if importlib.util.find_spec("jax") is None:  # (not imported here: its states would replace ours)
        pytest.skip("jax is not installed")
    # (jax's own calls on the CPU: beside a TPU the suite's process holds the chip)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]), JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, "-c", _JAX_TAKES_OVER], capture_output=True, text=True, timeout=300,
                       cwd=ROOT, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout[-3000:] + r.stderr[-3000:]

def test_an_argument_cpp_hands_back_is_put_on_the_sharding_device():
    sharding = backend.get_backend("cpu").sharding()
    x = rs.randn(2, 3)
    put = dispatch._shard_arg(x, sharding, None)
    # read as results are (jaxlib's _single_device_array_to_np_array_did_copy imports jax where
    # it is installed, whose configuration then takes over C++'s: the tests after this one failed)
    assert onp.array_equal(backend.converter(backend.Aval(x.shape, x.dtype))(put), x)


@pytest.mark.parametrize("offset", [0, 8, 16])
def test_the_largest_qualifying_arguments_at_any_alignment_are_read_in_full(offset):
    """C++ puts numpy arguments zero-copy; one it cannot alias PJRT copies inline below 100 KiB,
    so results of the largest qualifying arguments (under IN_PLACE_MIN_BYTES) are complete
    when the call returns, at every alignment."""
    n = backend.IN_PLACE_MIN_BYTES // 8 - 8
    raw = onp.empty(n + 16)
    start = (-raw.ctypes.data % 64 + offset) // 8
    x = raw[start:start + n]
    jf = jit_ps(lambda x: np.sin(x) * 2.0 + 1.0)
    calls = counting(jf)
    for k in range(30):
        x[:] = rs.randn(n)
        assert_close(jf(x), onp.sin(x) * 2.0 + 1.0)
    assert len(calls) == first_calls(jf)


def sgd_step(params, x):
    """An MLP's step, its parameters a list of (W, b) pairs, as autograd's examples keep them."""
    def loss(params):
        h = x
        for W, b in params:
            h = np.tanh(np.dot(h, W) + b)
        return np.sum(h ** 2)
    return [(W - 0.1 * dW, b - 0.1 * db) for (W, b), (dW, db) in zip(params, grad(loss)(params))]


def mlp_params(sizes=(5, 4, 3)):
    return [(rs.randn(m, n), rs.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]


def test_arrays_in_tuples_and_lists_go_through_cpp():
    """C++ flattens tuples and lists as tree.flatten does, so a signature of numpy arrays in
    them takes C++'s path like one of positional arrays (staged alike: their leaves copied
    into buffers kept for the signature, given to C++ flat), and returns the function's
    structure."""
    jf = jit_ps(sgd_step)
    calls = counting(jf)
    params, x = mlp_params(), rs.randn(6, 5)
    jf(params, x)
    assert len(calls) == 1
    for k in range(6):
        moved = [(W + k, b - k) for W, b in params]
        got, want = jf(moved, x), sgd_step(moved, x)
        assert type(got) is list and all(type(pair) is tuple for pair in got)
        for (W, b), (W0, b0) in zip(got, want):
            assert_close(W, W0)
            assert_close(b, b0)
    assert len(calls) == first_calls(jf) and jf.cache_info()["hits"] == 6
    assert jf._fast_calls[0] == 0 and (not isinstance(jf, dispatch.Front) or len(jf.staged()) == 1)


@pytest.mark.filterwarnings("ignore:the matrix subclass")
@pytest.mark.parametrize("case", ["matrix", "recarray", ">f8", "misaligned large", "nested 40 deep"])
def test_arrays_in_lists_that_cpp_would_misread_run_through_python(case):
    """Inside tuples and lists as at the top (_callpath's walk, calls._foreign),
    an array C++ would read otherwise than the Python path goes to Python: a subclass (an
    np.matrix's operators are not an array's: plain autograd runs it), one of the other
    byte order, arrays nested deeper than 32 levels; one PJRT would copy apart (100 KiB,
    misaligned) is copied into its signature's stage where the Front stages it, else goes
    to Python. Ordinary calls between them stay on C++'s path."""
    n = 20_000 if case == "misaligned large" else 4
    below = lambda xs: xs if type(xs) is not list else below(xs[0])  # noqa: E731
    jf = jit_ps(lambda xs, y: xs[0] * 2.0 + below(xs[1]) * y)
    a, b, y = placed((n,), offset=0), rs.randn(n), rs.randn(n)
    a[:] = rs.randn(n)
    deep = b
    for _ in range(calls_mod.MAX_DEPTH + 8 if case == "nested 40 deep" else 1):
        deep = [deep]
    odd = {"matrix": lambda: onp.asmatrix(a), "recarray": lambda: a.view(onp.recarray),
           ">f8": lambda: a.astype(">f8"), "misaligned large": lambda: placed((n,), offset=16),
           "nested 40 deep": lambda: a}[case]()
    odd[...] = a
    for _ in range(3):
        assert_close(jf([a, deep], y), a * 2.0 + b * y)
    calls = counting(jf)
    for _ in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FallbackWarning)  # an np.matrix runs as plain autograd
            assert_close(onp.asarray(jf([odd, deep], y)).ravel(), a * 2.0 + b * y)
        assert_close(jf([a, deep], y), a * 2.0 + b * y)
    if dispatch.native is not None:
        assert dispatch.native.MAX_DEPTH == calls_mod.MAX_DEPTH  # the C and the Python check alike
    # (without the Front no fast path takes arguments from backend.IN_PLACE_MIN_BYTES: dispatch.ARGUMENT_BYTES)
    ordinary_in_cpp = case != "nested 40 deep" and (case != "misaligned large" or isinstance(jf, dispatch.Front))
    # staged: the first call with it copied into the stage is a new signature to C++ (the aligned
    # one is passed itself)
    staged = case == "misaligned large" and isinstance(jf, dispatch.Front)
    assert len(calls) == (1 if staged else 3 if ordinary_in_cpp else 6)


@pytest.mark.filterwarnings("ignore:.*does not fit in int64:autograd_xla.FallbackWarning")
def test_python_numbers_beside_arrays_go_through_cpp():
    """autograd's examples call `objective(params, i)` with the iteration's number: C++ puts a
    Python int, float or complex as the weakly typed 64-bit scalar the program takes (as
    signatures.aval_of traces it), so such calls take its path, staged beside the arrays
    (the numbers passed as they are; read or not). An int beyond int64 runs as plain
    autograd (C++'s signature of it fails, and so does ours)."""
    jf = jit_ps(grad(lambda params, i, rate: rate * np.sum(np.tanh(params[0] * i + params[1]) ** 2)))
    calls = counting(jf)
    params = (rs.randn(4), rs.randn(4))
    for i in range(6):
        got = jf(params, i, 0.5 + i)
        want = grad(lambda params, i, rate: rate * np.sum(np.tanh(params[0] * i + params[1]) ** 2))(params, i, 0.5 + i)
        assert type(got) is tuple and all(assert_close(a, b) is None for a, b in zip(got, want))
    assert len(calls) == first_calls(jf) and jf._fast_calls[0] == 0
    assert not isinstance(jf, dispatch.Front) or len(jf.staged()) == 1
    unread = jit_ps(grad(lambda params, i: np.sum(np.tanh(params[0] * params[1]))))  # (adam's `i`)
    counted = counting(unread)
    for i in range(6):
        got = unread([p + i for p in params], i)
        want = grad(lambda params, i: np.sum(np.tanh(params[0] * params[1])))([p + i for p in params], i)
        assert all(assert_close(a, b) is None for a, b in zip(got, want))
    assert len(counted) == first_calls(unread)
    scale = jit_ps(lambda x, i: x * i)
    for i in range(3):
        assert_close(scale(params[0], i), params[0] * i)
    assert scale._fast_calls[0] == 0
    assert_close(scale(params[0], 2 ** 70), params[0] * 2.0 ** 70)
    if isinstance(scale, dispatch.Front):  # beside a large argument: C++'s program without its view
        big = placed((lowering.LARGE_ARRAY_BYTES // 8 + 1000,), offset=0)
        big[:] = rs.randn(big.size)
        for i in range(4):
            assert_close(scale(big, i + 0.5), big * (i + 0.5))
        assert scale._fast_calls[1] >= 2 and not next(reversed(scale._cache.values())).direct.views


@pytest.mark.parametrize("unused", ["array", "int"])
def test_arguments_the_function_never_reads_are_skipped_by_cpp(unused):
    """A leaf the program does not take (the function never reads it: autograd's optimizers
    pass the iteration's number to gradients that ignore it) is one C++ flattens and skips
    (the fast path's kept_var_bitvec), so the call still takes its path."""
    jf = jit_ps(lambda params, i, y: [np.tanh(W) * y for W in params])
    calls = counting(jf)
    params, y = [rs.randn(3), rs.randn(3)], rs.randn(3)
    for k in range(5):
        i = rs.randn(2) if unused == "array" else k
        for got, W in zip(jf(params, i, y + k), params):
            assert_close(got, onp.tanh(W) * (y + k))
    (entry,) = jf._cache.values()
    assert len(entry.executable.in_avals) == 3 and len(calls) == first_calls(jf) and jf._fast_calls[0] == 0


def test_a_function_whose_calls_cpp_always_hands_back_keeps_to_python():
    """Keyword arguments never take the C++ path; after FAST_REFUSALS such calls, with none
    taken, the function stops asking C++ (its lookup cost each call ~2 µs for nothing)."""
    jf = jit_ps(lambda x, s: x * s)
    x = rs.randn(3)
    for k in range(fastpaths.FAST_REFUSALS + 2):
        assert_close(jf(x, s=float(k)), x * k)
    assert jf._fast is None
    mixed = jit_ps(lambda x, s=1.0: x * s)
    for k in range(fastpaths.FAST_REFUSALS + 2):   # a fast path given once: C++ stays
        assert_close(mixed(x), x)
        assert_close(mixed(x, s=float(k)), x * k)
    assert mixed._fast is not None


# ----- staged arguments (_callpath.Front) ------------------------------------------------------
staging = pytest.mark.skipif(dispatch.Front == (), reason="the Front (_callpath.c) is not in use")


def settled(jf, *args):
    """Call `jf` until C++ takes its calls of this signature (staged, where they are)."""
    for _ in range(3):
        jf(*args)
    return jf


@staging
def test_staged_calls_of_nested_arguments_match_their_structure():
    """A stage matches a call's leaves and the lists and tuples around them (_callpath's
    `walk`), and a staged call's miss rebuilds the arguments as the call had them
    (dispatch._unstaged): the same arrays in another structure are another signature, with
    its own results, staged apart."""
    def weigh(xs, depth=1):  # a function of its argument's structure as much as of its arrays
        if isinstance(xs, (list, tuple)):
            step = 1.0 if type(xs) is list else -0.5
            return sum((i + step) * depth * weigh(x, depth + 1) for i, x in enumerate(xs))
        return np.sin(xs)
    jf = jit_ps(weigh)
    calls = counting(jf)
    a, b, c = rs.randn(3), rs.randn(3), rs.randn(3)
    shapes = [lambda a, b, c: [a, (b, c)], lambda a, b, c: [(a, b), c], lambda a, b, c: (a, [b, c]),
              lambda a, b, c: [a, b, c], lambda a, b, c: ((a,), [b], c),
              lambda a, b, c: [a, 2, (b, c)], lambda a, b, c: [a, 2.0, (b, c)]]  # numbers passed as they are
    for k in range(4):
        for shape in shapes:
            args = shape(a + k, b - k, c * k)
            assert_close(jf(args), weigh(args))
    assert len(calls) == 2 * len(shapes) and len(jf.staged()) == len(shapes)


@staging
def test_threads_calling_while_ladders_hand_their_calls_back(monkeypatch):
    """Threads calling staged signatures whose ladders hand their calls to C++ and back
    (tiering.Ladder.hand: the stages are dropped from a call's finish, dispatch.forget) and
    calling plain too: each result right, and no stage freed twice (_callpath's free_stages
    takes them out first: freeing one's device arrays may let another thread run, which had
    freed them again: a crash in 2 of 6 runs of this test)."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 4.0)  # (the module's fixture turns ladders off)
    monkeypatch.setattr(tiering, "CHEAP_CALLS", 30)
    monkeypatch.setattr(tiering, "CHEAP_CALL_SECONDS", 1.0)
    for _ in range(6):
        A = rs.randn(40, 40)
        closed = jit_ps(lambda x: np.tanh(np.dot(A, x)))
        argument = jit_ps(lambda B, x: np.dot(B, x) + 1.0)
        errors = []

        def work(seed):
            local = onp.random.RandomState(seed)
            for _ in range(150):
                x = local.randn(40)
                if not (onp.allclose(closed(x), onp.tanh(A @ x), rtol=1e-12)
                        and onp.allclose(argument(A, x), A @ x + 1.0, rtol=1e-12)):
                    errors.append(seed)
        run_threads(work, [(s,) for s in range(4)], timeout=120)
        assert not errors


@staging
def test_staged_calls_with_numbers_of_each_type_are_their_own_signatures():
    """A number beside staged arrays is passed as it is, and its type is part of the stage
    (an int, a float, a complex: C++'s signature, and so the results' dtype, follow it): an
    integer array times 3 is an integer array, times 3.0 a float one, times 3j a complex one."""
    jf = jit_ps(lambda x, n: x * n)
    x = onp.arange(6, dtype=onp.int64)
    for k in range(4):
        for n in (3 + k, 3.0 + k, complex(3, k)):
            got = jf(x + k, n)
            assert got.dtype == (x * n).dtype
            assert_close(got, (x + k) * n)
    assert len(jf.staged()) == 3


@staging
def test_staged_calls_read_each_call_s_arguments_and_keep_each_call_s_results():
    jf = settled(jit_ps(lambda x, y: (np.sin(x) * y, np.sum(y))), rs.randn(5), rs.randn(2, 5))
    assert len(jf.staged()) == 1
    calls = counting(jf)
    inputs = [(rs.randn(5), rs.randn(2, 5)) for _ in range(50)]
    kept = [(x.copy(), y.copy()) for x, y in inputs]
    results = [jf(x, y) for x, y in inputs]
    assert not calls
    for (x, y), (got, total) in zip(kept, results):  # none overwritten by a later call
        assert onp.array_equal(got, onp.sin(x) * y) and type(total) is onp.float64
        assert_close(total, onp.sum(y))
    assert all(onp.array_equal(a, b) for (a, _), (b, _) in zip(inputs, kept))  # the arguments untouched
    results[0][0][:] = 7.0  # results are the caller's, writable
    assert onp.all(results[0][0] == 7.0) and onp.array_equal(results[1][0], onp.sin(kept[1][0]) * kept[1][1])


@staging
@pytest.mark.parametrize("case", ["strided", "read-only", "subclass", "int32", "0-d", "bool"])
def test_arguments_that_are_not_the_staged_kind_run_as_they_are(case):
    """An argument that is not a C-contiguous numpy array of the staged dtype (as the buffer
    protocol describes it) and shape is passed to C++ as it is: same results."""
    jf = settled(jit_ps(lambda x: x * 2 + 1), rs.randn(4))
    base = rs.randn(8)
    x = {"strided": base[::2], "read-only": base[:4].copy(),
         "subclass": base[:4].view(onp.recarray), "int32": onp.arange(4, dtype=onp.int32), "0-d": onp.float64(3.0),
         "bool": onp.array([True, False, True, True])}[case]
    if case == "read-only":
        x.flags.writeable = False
    for _ in range(4):
        got = jf(x)
        assert_close(got, onp.asarray(x) * 2 + 1)
        assert onp.asarray(got).dtype == (onp.asarray(x) * 2 + 1).dtype


@staging
@pytest.mark.parametrize("offset", [0, 8, 16, "strided", "threads"])
def test_arguments_pjrt_would_copy_apart_are_staged_or_run_through_python(offset):
    """PJRT copies a numpy argument it cannot read in place on a worker thread from 100 KiB
    on, and the synchronous client does not wait for that copy: C++ is never handed such an
    argument (_callpath's scan). A staged call copies it into its staging buffer; one that is
    not staged (not C-contiguous, or while another thread's staged call is in C++) runs
    through Python. The results are right at every alignment and from every thread. (A small
    arguments beside them travel alone, not packed: C++ takes one buffer per argument.)"""
    n = 3 * backend.IN_PLACE_MIN_BYTES // 8 + 5  # ~192 KiB
    jf = jit_ps(lambda x, y, s, t: np.sin(x) * s + y - t)
    calls = counting(jf)
    y, s, t = rs.randn(n), onp.array([2.0]), onp.array([0.5])
    if offset == "threads":
        errors = []

        def work(seed):
            local = onp.random.RandomState(seed)
            for _ in range(60):
                x = placed((n,), offset=16)
                x[:] = local.randn(n)
                if not onp.allclose(jf(x, y, s, t), onp.sin(x) * 2.0 + y - 0.5, rtol=1e-13):
                    errors.append(seed)
        run_threads(work, [(s,) for s in range(3)], timeout=120)
        assert not errors and jf.cache_info()["hits"] > 0
        return
    x = rs.randn(2 * n)[::2] if offset == "strided" else placed((n,), offset=offset)
    for k in range(30):
        x[:] = rs.randn(n)
        assert_close(jf(x, y, s, t), onp.sin(x) * 2.0 + y - 0.5)
    if offset == "strided":
        assert len(calls) == 30
    else:  # the first (compiled), the second (staged: dispatch._stage), the first staged one (a miss)
        assert len(calls) <= 3 and len(jf.staged()) == 1


@pytest.mark.parametrize("order", [">f8", ">f4", ">i8", "<f8"])
def test_an_array_of_the_other_byte_order_is_read_as_numpy_reads_it(order):
    """C++'s signatures and puts ignore byte order (a '>f8' array took a '<f8' fast path and
    was read with its bytes swapped): such arrays go to the Python path, which converts them."""
    jf = settled(jit_ps(lambda x: x * 2 + 1), rs.randn(4).astype(onp.dtype(order).newbyteorder("=")))
    x = (rs.randn(4) * 10).astype(order)
    for _ in range(3):
        got = jf(x)
        assert_close(got, x.astype(x.dtype.newbyteorder("=")) * 2 + 1)


@staging
@pytest.mark.filterwarnings("ignore:.*has been traced for")
def test_stages_are_bounded_and_leave_with_the_fast_paths():
    jf = jit_ps(lambda x: x - 0.5)
    arrays = [rs.randn(n) for n in range(1, 13)]
    for _ in range(3):
        for x in arrays:
            assert_close(jf(x), x - 0.5)
    assert len(jf.staged()) == 8  # _callpath's MAX_STAGES: later signatures are passed as they are
    jf.clear_cache()
    assert jf.staged() == []
    assert_close(jf(arrays[0]), arrays[0] - 0.5)


@staging
@pytest.mark.parametrize("beside", [True, False])
def test_an_aligned_argument_from_100_kib_is_read_where_it_is(beside):
    """From 100 KiB a staged signature's aligned argument is passed to C++ as it is, read in
    place rather than copied into its staging buffer (a jitted function's results are aligned:
    feeding them back costs no copy); a misaligned one is copied, and so is a small one beside
    (`beside`; without it the call is an unstaged one). Alternating them, every result is right."""
    n = 20_000  # 160 KB
    jf = jit_ps((lambda x, s: np.sin(x) * s) if beside else (lambda x: np.sin(x) * 2.0))
    calls = counting(jf)
    extra = (onp.array([2.0]),) if beside else ()
    misaligned, aligned = placed((n,), offset=16), placed((n,), offset=0)
    for k in range(12):
        misaligned[:] = rs.randn(n)
        assert_close(jf(misaligned, *extra), onp.sin(misaligned) * 2.0)
        copied = misaligned.copy()
        aligned[:] = rs.randn(n)
        assert_close(jf(aligned, *extra), onp.sin(aligned) * 2.0)
        if k >= 2:  # staged by now: the staging buffer holds the misaligned call's data still
            onp.testing.assert_array_equal(onp.array(memoryview(jf.staged()[0][0])), copied)
    assert len(calls) <= 4 and jf.cache_info()["hits"] == 23  # all but the first, which compiled


@staging
@pytest.mark.parametrize("fed_back", [False, True])
def test_large_aligned_arguments_go_through_cpp_and_misaligned_ones_through_python(fed_back):
    """A signature whose program reads a large argument through a view and writes its result
    into a recycled buffer (both need Python at each call) runs through C++ a program lowered
    without them (api.JittedFunction._direct), for calls whose large argument is aligned;
    a misaligned one's call runs the view's program in Python. Alternated, or each result
    fed back (aligned: XLA's), every result is right and stays so."""
    n = lowering.LARGE_ARRAY_BYTES // 8 + 1000
    jf = jit_ps(lambda x, s: np.cos(x) * s + 1.0)
    calls = counting(jf)
    s = onp.array([0.5])
    misaligned, aligned = placed((n,), offset=16), placed((n,), offset=0)
    for _ in range(3):  # misaligned calls alone make no program for C++
        assert_close(jf(misaligned, s), onp.cos(misaligned) * 0.5 + 1.0)
    assert next(iter(jf._cache.values())).direct is None
    calls.clear()
    y, kept = aligned, []
    for k in range(8):
        x = y if fed_back else aligned
        want = onp.cos(x) * 0.5 + 1.0
        y = jf(x, s)
        assert_close(y, want)
        kept.append((y, want.copy()))
        assert_close(jf(misaligned, s), onp.cos(misaligned) * 0.5 + 1.0)
    for got, want in kept:  # no later call wrote into an earlier result
        assert_close(got, want)
    (entry,) = jf._cache.values()
    assert entry.executable.views and entry.direct is not None and not entry.direct.views
    assert len(calls) == 8 + first_calls(jf) - 1  # the misaligned calls, and the first aligned one
    assert jf.cache_info()["hits"] == 18


@staging
def test_small_arguments_packed_beside_a_large_one_go_through_cpp_unpacked():
    """Beside a large argument the Python path's program packs the small ones into one buffer
    (api.JittedFunction._lowering), which C++ cannot pass: C++ runs the graph lowered
    unpacked (_direct), even where nothing else (views, recycled results) needs Python.
    A gradient w.r.t. small parameters of a reduced data matrix (a reduction reads it whole,
    with no view) went through Python at every call before."""
    X = placed((lowering.LARGE_ARRAY_BYTES // 800 + 10, 100), offset=0)
    a, b = rs.randn(100), rs.randn(100)

    def loss(a, b, X):
        return np.sum(np.tanh(np.sum(X, axis=0) * a + b) ** 2)
    jf = jit_ps(grad(loss, (0, 1)))
    calls = counting(jf)
    want = grad(loss, (0, 1))
    for k in range(6):
        a_k, b_k = a + k, b - k
        assert_close(jf(a_k, b_k, X), want(a_k, b_k, X))
    (entry,) = jf._cache.values()
    assert any(type(s) is list for s in entry.executable.sources)  # packed for the Python path
    assert all(type(s) is int for s in entry.direct.sources)
    assert len(calls) == 1 and jf.cache_info()["hits"] == 5  # (a large argument: not staged)


@staging
def test_a_program_for_cpp_that_fails_to_lower_leaves_the_calls_in_python(monkeypatch, caplog):
    """Should the graph fail to lower for C++ (_direct: a rule replaced since, a lowering bug),
    the call that asked has its result, and the signature's calls keep to the Python path."""
    X = placed((lowering.LARGE_ARRAY_BYTES // 800 + 10, 100), offset=0)
    jf = jit_ps(lambda a, b, X: np.sum(X, axis=0) * a + b)
    calls = counting(jf)
    a, b = rs.randn(100), rs.randn(100)
    original = jf._lowering

    def failing(entry, donate, direct=False, **variant):
        if direct:
            raise ValueError("no lowering today")
        return original(entry, donate, direct, **variant)
    monkeypatch.setattr(jf, "_lowering", failing)
    for k in range(4):
        assert_close(jf(a + k, b, X), onp.sum(X, axis=0) * (a + k) + b)
    assert len(calls) == 4 and caplog.text.count("no lowering today") == 1


@staging
def test_signatures_beyond_the_direct_bounds_keep_to_python():
    """From dispatch.DIRECT_BYTES a large argument's calls run in Python, aligned or not."""
    jf = jit_ps(lambda x: x * 2.0)
    calls = counting(jf)
    x = placed((dispatch.DIRECT_BYTES // 8,), offset=0)
    for _ in range(3):
        assert_close(jf(x), x * 2.0)
    assert len(calls) == 3 and next(iter(jf._cache.values())).direct is None


@staging
def test_a_long_program_for_cpp_compiles_on_the_compile_thread(monkeypatch):
    """C++'s program of a signature with large arguments (api.JittedFunction._direct) whose
    text is longer than dispatch.DIRECT_TEXT_BYTES compiles on the compile thread; its calls
    run in Python meanwhile, and C++, told that no fast path is to be had yet (not: none),
    asks again and takes them once it is there. The list holds it too (arrays in lists)."""
    monkeypatch.setattr(dispatch, "DIRECT_TEXT_BYTES", 100)
    jf = jit_ps(lambda xs, s: np.cos(xs[0]) * s + 1.0)
    calls = counting(jf)
    x, s = placed((lowering.LARGE_ARRAY_BYTES // 8 + 1000,), offset=0), onp.array([0.5])
    x[:] = rs.randn(x.size)
    with tiering.compile_thread.paused():
        for _ in range(3):
            assert_close(jf([x], s), onp.cos(x) * 0.5 + 1.0)
        (entry,) = jf._cache.values()
        assert type(entry.direct) is background.Job and entry.direct.running() and len(calls) == 3
        assert jf.cache_info()["climbing"] == 1  # not settled: timing.settle waits for it
    assert tiering.compile_thread.wait(60) and not entry.direct.views and jf.cache_info()["climbing"] == 0
    for k in range(5):
        assert_close(jf([x + k], s), onp.cos(x + k) * 0.5 + 1.0)
    assert len(calls) == 4 and jf._fast_calls == [0, 1]
    # the cache cleared while such a compile is in flight: its program is let go, calls go on
    again = jit_ps(lambda xs, s: np.sin(xs[0]) * s - 1.0)
    with tiering.compile_thread.paused():
        for _ in range(3):
            assert_close(again([x], s), onp.sin(x) * 0.5 - 1.0)
        (pending,) = again._cache.values()
        assert type(pending.direct) is background.Job
        again.clear_cache()
        assert pending.direct.forgotten
    assert tiering.compile_thread.wait(60) and again.cache_info()["size"] == 0
    for _ in range(3):
        assert_close(again([x], s), onp.sin(x) * 0.5 - 1.0)


@staging
def test_stages_hold_16_mib_at_most():
    """Staging buffers live as long as the function: its stages hold 16 MiB at most
    (_callpath's MAX_STAGED_BYTES); calls of a signature beyond run as they are."""
    jf = jit_ps(lambda x, y, z: x * y - z)
    n = 120_000  # 0.96 MB an argument, 2.9 MB a signature
    for k in range(7):
        args = [placed((n + k,), offset=16) for _ in range(3)]
        for _ in range(3):
            assert_close(jf(*args), args[0] * args[1] - args[2])
    assert len(jf.staged()) == 5


@staging
def test_a_donating_function_is_not_staged():
    jf = settled(jit_ps(lambda x: x * 2.0, donate_argnums=0), rs.randn(3))
    assert jf.staged() == []
    x = rs.randn(3)
    assert_close(jf(x), x * 2.0)


@staging
def test_staged_calls_hold_no_reference_of_theirs():
    jf = settled(jit_ps(lambda x: np.tanh(x)), rs.randn(3))
    x = rs.randn(3)
    before = sys.getrefcount(x)
    for _ in range(200):
        out = jf(x)
    assert sys.getrefcount(x) == before and sys.getrefcount(out) == 2
    holder = out.base  # the result views its device buffer through an object keeping it alive
    del out
    assert sys.getrefcount(holder) == 2


@pytest.mark.skipif(dispatch.native is None or os.environ.get(calls_mod.NATIVE_ENV) == "0",
                    reason="the Python finishing is the one this run tests")
def test_the_python_call_path_passes_this_file_too():
    """Where the Front runs, this file's tests run again in a process with it off."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]),
               **{calls_mod.NATIVE_ENV: "0"})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "not python_call_path_passes"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout
    assert isinstance(jit_ps(lambda x: x), dispatch.Front)


def test_where_a_c_compiler_is_the_c_parts_are_the_ones_tested():
    """setup.py builds _callpath.c and _blas.c where a C compiler is; the tests must then
    run them (an install the tests' imports do not see, such as a non-editable one run from
    the clone, would test only the Python stand-ins)."""
    from autograd_xla import blas
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        pytest.skip(f"no C compiler ({compiler}): the Python stand-ins are what runs here")
    assert dispatch.native is not None and blas.native is not None
