"""The process's memory (memory.py): numpy's arrays at 64-byte boundaries, which XLA reads in
place, through a numpy memory handler (_aligned.c) the package sets when it is imported."""
import os
import subprocess
import sys
import threading
import tracemalloc

import numpy as onp
import pytest

import autograd.numpy as anp
from autograd import grad

from autograd_xla import backend, jit_ps, memory
from helpers import assert_close, placed

pytestmark = pytest.mark.skipif(memory._aligned is None, reason="_aligned.c not built")

#: The sizes numpy allocates through the handler's aligned blocks (from 64 KiB) and below.
LARGE = [8 << 10, 100_000, 1 << 20, (4 << 20) - 8]   # float64 elements: 64 KiB to just below 32 MiB
SMALL = [0, 1, 3, 1000, (8 << 10) - 1]
rs = onp.random.RandomState(0)


@pytest.fixture
def numpy_handler():
    """numpy's own handler for the test (and the package's again after it)."""
    was = memory.align_numpy(False)
    yield
    memory.align_numpy(was)


def made(n):
    """Arrays of n float64 made the ways numpy makes them."""
    x = rs.rand(n)
    return {"rand": x, "empty": onp.empty(n), "zeros": onp.zeros(n), "ones": onp.ones(n), "arithmetic": x * 2.0 + 1.0,
            "copy": x[::-1].copy(), "fancy index": x[onp.arange(n)], "concatenate": onp.concatenate([x, x])[:n],
            "float32 cast": x.astype(onp.float32), "reshaped copy": onp.ascontiguousarray(x.reshape(1, n).T)}


def test_the_package_aligns_numpys_large_arrays_in_the_importing_thread():
    assert memory.numpy_aligned()
    for n in LARGE:
        for how, x in made(n).items():
            if x.nbytes >= memory._aligned.ALIGN_FROM:  # (a float32 cast of 8192 is smaller)
                assert x.ctypes.data % 64 == 0, (n, how, x.ctypes.data % 64)


@pytest.mark.parametrize("n", SMALL + LARGE)
def test_arrays_hold_what_numpy_puts_in_them(n):
    arrays = made(n)
    x = arrays["rand"]
    assert not arrays["zeros"].any() and (arrays["ones"] == 1).all()
    for how in ("arithmetic", "copy", "fancy index", "concatenate", "float32 cast", "reshaped copy"):
        expected = {"arithmetic": x * 2.0 + 1.0, "copy": x[::-1], "fancy index": x, "concatenate": x,
                    "float32 cast": x.astype(onp.float32), "reshaped copy": x.reshape(n, 1)}[how]
        assert onp.array_equal(arrays[how], expected), how


def test_zeros_from_32_mib_stay_lazily_zeroed_pages():
    """calloc's fresh pages (numpy's own alignment): np.zeros of 64 MiB is not written through."""
    n = 8 << 20
    z = onp.zeros(n)
    assert not z[:: 4096].any() and not z[-10:].any()
    z[-1] = 1.0
    assert z.sum() == 1.0


@pytest.mark.parametrize("sizes", [(100, 200_000), (200_000, 100), (100_000, 300_000), (300_000, 200_000)],
                         ids=["small to large", "large to small", "large to larger", "larger to large"])
def test_resize_in_place_keeps_the_data(sizes):
    """ndarray.resize reallocates the handler's block: the data moves with it, aligned when large."""
    before, after = sizes
    x = onp.arange(before, dtype=onp.float64)
    x.resize(after, refcheck=False)
    kept = min(before, after)
    assert onp.array_equal(x[:kept], onp.arange(kept)) and not x[kept:].any()
    if after * 8 >= memory._aligned.ALIGN_FROM:
        assert x.ctypes.data % 64 == 0


def test_off_and_on_again(numpy_handler):
    """align_numpy(False) gives numpy its own handler back (arrays made before are freed by the
    handler that made them); align_numpy returns whether it was on."""
    from numpy._core import multiarray
    assert multiarray.get_handler_name() == "default_allocator" and not memory.numpy_aligned()
    assert memory.align_numpy(True) is False
    kept = [onp.ones(n) for n in LARGE]
    assert multiarray.get_handler_name() == "autograd_xla_aligned_64"
    assert memory.align_numpy(False) is True
    assert [float(k.sum()) for k in kept] == [float(n) for n in LARGE]
    del kept
    fresh = onp.ones(1 << 20)
    assert multiarray.get_handler_name(fresh) == "default_allocator" and fresh.sum() == 1 << 20


def test_other_threads_keep_numpys_handler():
    """numpy's handler is a context variable; a new thread starts with numpy's own."""
    seen = []
    thread = threading.Thread(target=lambda: seen.append(memory.numpy_aligned()))
    thread.start()
    thread.join()
    assert seen == [False] and memory.numpy_aligned()


def test_tracemalloc_sees_the_arrays():
    """numpy reports its handlers' blocks to tracemalloc (its domain), this one's too."""
    tracemalloc.start()
    try:
        x = onp.ones(1 << 20)
        domain = tracemalloc.DomainFilter(True, onp.lib.tracemalloc_domain)
        traced = tracemalloc.take_snapshot().filter_traces([domain]).statistics("filename")
        assert sum(stat.size for stat in traced) >= x.nbytes
    finally:
        tracemalloc.stop()


def two_layers(x, W, V):
    return anp.sum(anp.tanh(anp.dot(anp.tanh(anp.dot(x, W)), V)))


@pytest.mark.usefixtures("on_the_cpu")
def test_fresh_large_arrays_are_read_in_place(monkeypatch):
    """What the handler is for: an MLP's batch and first layer (1.6 and 1.25 MB), read by XLA's
    matrix products, are passed to XLA as they are (Backend.alias of their own address) when
    numpy made them, where at numpy's 16-byte alignment each call copies them into aligned
    memory first (Backend.staging)."""
    read, staged = [], []
    alias, staging = backend.Backend.alias, backend.Backend.staging
    monkeypatch.setattr(backend.Backend, "alias",
                        lambda self, x, aval, view: read.append(x.ctypes.data) or alias(self, x, aval, view))
    monkeypatch.setattr(backend.Backend, "staging", lambda self, aval: staged.append(aval) or staging(self, aval))
    f = jit_ps(grad(two_layers, 1))
    for _ in range(3):
        x, W, V = rs.rand(256, 784), rs.rand(784, 200) / 784, rs.rand(200, 100)
        assert_close(f(x, W, V), grad(two_layers, 1)(x, W, V))
        assert x.ctypes.data in read and W.ctypes.data in read
    assert staged == []
    x, W = placed((256, 784), offset=16), placed((784, 200), offset=16)  # where numpy's own handler puts them
    W /= 784
    assert_close(f(x, W, V), grad(two_layers, 1)(x, W, V))
    assert len(staged) == 2


@pytest.mark.parametrize("value, aligned", [(None, True), ("0", False), ("1", True)])
def test_the_environment_variable_turns_it_off(value, aligned):
    env = {k: v for k, v in os.environ.items() if k != memory.ALIGN_ENV}
    if value is not None:
        env[memory.ALIGN_ENV] = value
    code = ("import autograd_xla, numpy; from autograd_xla import memory; "
            "print(memory.numpy_aligned(), numpy.empty(1 << 20).ctypes.data % 64 == 0 if memory.numpy_aligned() else '')")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == str(aligned)
    if aligned:
        assert out.split()[1] == "True"



def test_a_handler_someone_else_set_is_kept(numpy_handler, monkeypatch):
    """The import replaces numpy's default handler only, never one someone else set."""
    monkeypatch.setattr(memory.multiarray, "get_handler_name", lambda *a: "someone_elses")
    memory.align_numpy_unless_told_not()
    assert not memory.numpy_aligned()
    monkeypatch.undo()
    memory.align_numpy_unless_told_not()
    assert memory.numpy_aligned()
