"""Transfers of 100 MB of float32 between the host and a TPU, jit_ps's and jax's, each in a
process of its own (one process holds the chip): python3 benchmarks/tpu_transfers.py jax,
then python3 benchmarks/tpu_transfers.py jit_ps. Fresh arrays each sample (a fetched
array's host copy is cached), medians of 5. The first fetch in a process where jax is
installed imports it (jaxlib builds an array's abstract value with jax.core)."""
import os, sys, time
mode = sys.argv[1]
N = 25_000_000  # 100 MB of float32
REPS = 5

def timeit(make, fetch, reps=REPS):
    ts = []
    for _ in range(reps):
        b = make()
        t0 = time.perf_counter(); fetch(b); ts.append(time.perf_counter() - t0)
    return "%.1f ms (min %.1f)" % (1e3 * sorted(ts)[len(ts) // 2], 1e3 * min(ts))

import numpy as np
x = np.arange(N, dtype=np.float32)
if mode == "jax":
    import jax, jax.numpy as jnp
    d = jax.device_put(x); d.block_until_ready()
    f = jax.jit(lambda a: a * 2)
    def make():
        r = f(d); r.block_until_ready(); return r
    print(mode, "d2h result", timeit(make, np.asarray))
    def make2():
        r = jax.device_put(x); r.block_until_ready(); return r
    print(mode, "d2h device_put", timeit(make2, np.asarray))
    print(mode, "layout", make()._pjrt_layout if hasattr(make(), "_pjrt_layout") else "?")
    sys.exit()

import autograd_xla
from autograd_xla import backend
be = backend.get_backend("tpu")
t0 = time.perf_counter()
d = autograd_xla.device_put(x, "tpu"); autograd_xla.block_until_ready(d)
first = d.buffer._single_device_array_to_np_array_did_copy()
print(mode, "first fetch %.2f s" % (time.perf_counter() - t0), "jax imported:", "jax" in sys.modules)
f = autograd_xla.jit_ps(lambda a: a * 2, keep_on_device=True, backend="tpu")
def make():
    r = f(d); autograd_xla.block_until_ready(r); return r
print(mode, "d2h result np.asarray", timeit(make, np.asarray))
print(mode, "d2h result raw", timeit(lambda: make().buffer, lambda b: b._single_device_array_to_np_array_did_copy()))
def make2():
    r = autograd_xla.device_put(x, "tpu"); autograd_xla.block_until_ready(r); return r.buffer
print(mode, "d2h device_put raw", timeit(make2, lambda b: b._single_device_array_to_np_array_did_copy()))
print(mode, "d2h device_put async+raw", timeit(make2, lambda b: (b._copy_single_device_array_to_host_async(), b._single_device_array_to_np_array_did_copy())))
print(mode, "layout", make().buffer._pjrt_layout, make2()._pjrt_layout)
print(mode, "h2d", timeit(lambda: x, lambda a: autograd_xla.block_until_ready(autograd_xla.device_put(a, "tpu"))))
