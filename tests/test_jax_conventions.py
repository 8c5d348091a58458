"""Where a JAX user looks: `device_put`, `block_until_ready`, `process_index`,
`process_count` and `local_devices` at the top level, each behaving as jax's documentation
says (jax.device_put: a pytree of arrays placed on a device; jax.block_until_ready: waits for
the leaves and returns its argument; jax.process_index / process_count / local_devices), the
values checked against plain numpy."""
import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
import autograd_xla
from autograd_xla import DeviceArray, block_until_ready, device_put, distributed, jit_ps
from helpers import NARROW, PLATFORM, assert_close

rs = onp.random.RandomState(0)


def test_device_put_keeps_values_dtypes_and_structure():
    tree = {"w": rs.randn(3, 2), "b": (onp.arange(4, dtype=onp.int32), onp.float32(1.5)), "n": 2.0}
    put = device_put(tree)
    assert set(put) == {"w", "b", "n"} and type(put["b"]) is tuple
    for got, want in ((put["w"], tree["w"]), (put["b"][0], tree["b"][0]), (put["b"][1], tree["b"][1]),
                      (put["n"], onp.asarray(2.0))):
        assert type(got) is DeviceArray
        assert onp.asarray(got).dtype == onp.asarray(want).dtype and got.shape == onp.shape(want)
        assert_close(onp.asarray(got), want, rtol=0)


def test_device_put_copies_and_is_read_without_a_transfer():
    # a dtype the default platform computes in (a 32-bit one converts float64 at each call:
    # placement.device_put)
    x = rs.randn(100).astype(onp.float32 if NARROW else onp.float64)
    d = device_put(x)
    x[:] = 0.0  # the device copy is the caller's no longer
    jf = jit_ps(lambda a: np.sum(np.sin(a)))
    assert_close(jf(d), onp.sum(onp.sin(onp.asarray(d))))
    before = jf.cache_info()["host_to_device"]
    jf(d)
    assert jf.cache_info()["host_to_device"] == before  # the argument is already on the device
    assert_close(grad(jf)(d), onp.cos(onp.asarray(d)))  # differentiable like the numpy array it holds


def test_device_put_on_a_device_or_platform_and_again():
    x = rs.randn(3)
    first = autograd_xla.devices("cpu")[0]
    for device in (None, "cpu", first):
        d = device_put(x, device)
        assert d.platform == (PLATFORM if device is None else "cpu")  # None: the default platform
        assert device_put(d, device) is d  # already there
    with pytest.raises(TypeError, match="XLA has no type"):
        device_put(onp.array(["a"]))
    with pytest.raises(TypeError, match="device must be None, a platform name"):
        device_put(x, 0)


def test_block_until_ready_waits_for_every_result_type_and_returns_its_argument():
    x = rs.randn(4)
    kept = jit_ps(lambda a: (a * 2.0, {"s": np.sum(a)}), keep_on_device=True)(x)
    host = jit_ps(lambda a: (a * 2.0, {"s": np.sum(a)}))(x)
    for result in (kept, host, kept[0], host[0], host[1]["s"], [kept, 3.0, None], [kept[0], kept[1]["s"]]):
        assert block_until_ready(result) is result
    assert kept[0].block_until_ready() is kept[0]
    assert_close(onp.asarray(kept[0]), host[0], rtol=0)


def test_process_functions_at_the_top_level():
    assert autograd_xla.process_index() == distributed.process_index() == 0  # no distributed.initialize here
    assert autograd_xla.process_count() == distributed.process_count() == 1
    assert autograd_xla.local_devices() == autograd_xla.devices(autograd_xla.default_platform())
    assert autograd_xla.local_devices("cpu") == autograd_xla.devices("cpu")
