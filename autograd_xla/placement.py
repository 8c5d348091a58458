"""Data on a device, as JAX users place it: `device_put` (arrays to a device without a jitted
identity to put them there) and `block_until_ready` (wait for results kept on a device)."""
import numpy as np

from . import backend, tree
from .backend import DeviceArray, OnDevice
from .clients import xc
from .core import Aval


def device_put(x, device=None):
    """`x` (an array, a number, or a tuple/list/dict of them) as DeviceArrays on `device`, in
    its structure, as jax.device_put: passed to a jitted function of that platform, they cost
    no transfer, without a jitted identity to put them there. `device`: None (the default
    platform's), a platform name ('cpu', 'gpu', 'tpu'), or a device of `devices()`, the first
    of its platform's on this process (the one jitted functions run on). A DeviceArray
    already there is returned as it is; arrays are copied, so later writes to `x` are not seen.
    float64 stays float64 (jit_ps's x64=False converts at the call)."""
    where = _backend_of(device)
    leaves, treedef = tree.flatten(x)
    return tree.unflatten(treedef, [_put_leaf(leaf, where) for leaf in leaves])


def _backend_of(device):
    if device is None or isinstance(device, str):
        return backend.get_backend(device)
    if not hasattr(device, "platform"):
        raise TypeError(f"device must be None, a platform name or a device of autograd_xla.devices(), not {device!r}")
    where = backend.get_backend(device.platform)
    if device != where.default_device:
        raise ValueError(f"device_put puts arrays on {where.default_device}, the device jitted functions of "
                         f"platform {where.platform!r} run on, not {device} (pmap places shards on several)")
    return where


def _put_leaf(x, where):
    if type(x) is DeviceArray and x.backend is where:
        return x
    array = np.asarray(x)
    if not backend.supported_dtype(array.dtype):
        raise TypeError(f"device_put: XLA has no type for dtype {array.dtype}")
    return DeviceArray(where.put(array), Aval(array.shape, array.dtype), where)


def block_until_ready(x):
    """Wait until every array in `x` (any structure of tuples, lists and dicts) is computed, and
    return `x`, as jax.block_until_ready. A jitted function's numpy results are ready when it
    returns; DeviceArray and ShardedArray results (keep_on_device=True) are waited for, all in
    one call into jaxlib (`batched_block_until_ready`, as jax.block_until_ready waits)."""
    arrays = []
    _on_device(x, arrays)
    if len(arrays) > 1:
        xc.batched_block_until_ready(arrays)
    elif arrays:
        arrays[0].block_until_ready()
    return x


def _on_device(x, arrays):
    """The jaxlib arrays of the DeviceArrays and ShardedArrays in `x`, appended to `arrays`: a
    walk of its containers, not tree.flatten, whose treedef a wait does not need (a 2-level
    list of 8 results: 5 µs a call)."""
    if isinstance(x, OnDevice):
        arrays.append(x.jaxlib_array)
    elif isinstance(x, (tuple, list)):
        for v in x:
            _on_device(v, arrays)
    elif isinstance(x, dict):
        for v in x.values():
            _on_device(v, arrays)
