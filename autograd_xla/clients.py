"""jaxlib's clients, made without jax: the CPU's, and an accelerator's through its PJRT
plugin (CUDA from jax-cudaNN-pjrt, TPU from libtpu), with the vendor kernels each registers;
and the runtime calls whose form differs between jaxlib versions. backend.py wraps a client
in a Backend.

jaxlib is imported at the first use of one of its names (`xc`), not with the package.
"""
import functools
import importlib
import importlib.util
import os
import warnings

from .errors import PlatformUnavailableError
from .registry import LazyModule


class KeptModule(LazyModule):
    """A LazyModule whose attributes are kept here once read: jaxlib's, read on every call's
    path (a LazyModule's read is an import_module's look-up, ~1 µs)."""

    def __getattr__(self, attr):
        value = super().__getattr__(attr)
        setattr(self, attr, value)
        return value


#: jaxlib, imported at its first use (its xla_client ~30 ms after numpy and autograd, python
#: -X importtime, with ml_dtypes 0.6; ml_dtypes 0.7.0's extension alone took 0.55-0.85 s, which
#: setup.cfg's constraint excludes): a process whose calls all run as plain autograd
#: (tiering.py) never imports it.
xc = KeptModule("jaxlib.xla_client")
jaxlib_ext = KeptModule("jaxlib._jax")  # jaxlib's C++ extension: its pjit, pytrees, distributed runtime

JAXLIB_API_VERSION = 467  # xla_client._version of the jaxlib we are pinned to

#: The pip extra that provides each accelerator platform.
PLATFORM_EXTRAS = {"gpu": "pip install 'autograd-xla[cuda12]' (or [cuda13] for CUDA 13)",
                   "tpu": "pip install 'autograd-xla[tpu]'"}


def _check_jaxlib():
    version = getattr(xc, "_version", None)
    if version != JAXLIB_API_VERSION:
        warnings.warn(f"autograd_xla was built against jaxlib's runtime API version {JAXLIB_API_VERSION}, "
                      f"the installed jaxlib reports {version}; install the pinned jaxlib version")


_takes_skip_checks = [True]  # whether this jaxlib's array_result_handler has _skip_checks


def result_handler(aval, sharding):
    """jaxlib's handler that makes a committed array of `aval` from a result buffer. The
    pinned jaxlib's takes _skip_checks (its per-result checks of what the executable already
    guarantees); 0.11.2's takes no such keyword (probed on a GPU machine: every compile failed
    with a TypeError), so where it is refused once the keyword is left out from then on."""
    if _takes_skip_checks[0]:
        try:
            return xc.array_result_handler(aval, sharding, True, _skip_checks=True)
        except TypeError:
            _takes_skip_checks[0] = False
    return xc.array_result_handler(aval, sharding, True)


def _unavailable_error(platform, reason, installed=False):
    remedy = "" if installed else f"Install it with {PLATFORM_EXTRAS[platform]}, or use"
    return PlatformUnavailableError(
        f"platform {platform!r} is not available: {reason}. {remedy or 'Use'} the CPU instead "
        "(jit_ps(f, backend='cpu') or AUTOGRAD_XLA_PLATFORM=cpu).")


#: Platform names users may write, and the name we use for each.
PLATFORM_ALIASES = {"cpu": "cpu", "gpu": "gpu", "cuda": "gpu", "tpu": "tpu"}
#: What names the default platform (backend.default_platform) before anything else does.
PLATFORM_ENV = "AUTOGRAD_XLA_PLATFORM"


def canonical_platform(name):
    try:
        return PLATFORM_ALIASES[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(f"unknown platform {name!r}; choose one of 'cpu', 'gpu', 'tpu'") from None


def plugin_present(platform):
    """Cheap check before trying to start an accelerator client."""
    if platform == "gpu":
        return cuda_plugin()[0] is not None
    if platform == "tpu":
        return "TPU_LIBRARY_PATH" in os.environ or importlib.util.find_spec("libtpu") is not None
    return True


def cuda_plugin():
    """(path of the CUDA PJRT plugin library, its package name) or (None, None). The namespace
    package looked for first: a submodule's look-up without it fails through the import
    system, twice (api._default_platform at a process's first jit_ps call: 145-215 µs, 96-100 so)."""
    try:
        if importlib.util.find_spec("jax_plugins") is None:
            return None, None
    except (ImportError, ValueError):
        return None, None
    for flavor in ("xla_cuda13", "xla_cuda12"):
        try:
            spec = importlib.util.find_spec(f"jax_plugins.{flavor}")
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            path = os.path.join(list(spec.submodule_search_locations)[0], "xla_cuda_plugin.so")
            if os.path.exists(path):
                return path, flavor
    return None, None


def _load_plugin(name, path):
    if not xc.pjrt_plugin_loaded(name):
        c_api = xc.load_pjrt_plugin_dynamically(name, path)
    else:
        c_api = None
    if not xc.pjrt_plugin_initialized(name):
        xc.initialize_pjrt_plugin(name)
    return c_api


def _register_cuda_kernels(c_api, flavor):
    """cuSOLVER and friends as custom-call targets (from jax-cudaNN-plugin, when installed);
    without them the portable XLA expanders serve linear algebra on the GPU."""
    package = "jax_cuda13_plugin" if flavor.endswith("13") else "jax_cuda12_plugin"
    try:
        ext = importlib.import_module(f"{package}.cuda_plugin_extension")
        from jaxlib import gpu_linalg, gpu_prng, gpu_solver
    except ImportError:
        return False
    if c_api is not None:
        xc.register_custom_call_handler("CUDA", functools.partial(ext.register_custom_call_target, c_api))
        xc.register_custom_type_handler("CUDA", functools.partial(ext.register_custom_type, c_api))
    for module in (gpu_solver, gpu_linalg, gpu_prng):
        for name, capsule, *rest in module.registrations().get("CUDA", []):
            xc.register_custom_call_target(name, capsule, platform="CUDA", api_version=rest[0] if rest else 1)
    return True


def cpu_client(num_devices, options):
    """The CPU client is synchronous: execution runs on the calling thread, which measured
    faster per call than the asynchronous client for the small programs autograd code makes
    (shared/notes/jaxlib-runtime.md section 10). It has `num_devices` devices; a
    single-device call costs the same with several (6.6 µs either way, measured)."""
    _check_jaxlib()
    return xc.make_cpu_client(asynchronous=False, num_devices=num_devices, **options)


def gpu_client():
    """CUDA through the jax-cudaNN-pjrt plugin, loaded without jax (notes section 7): the
    client, and whether the vendor kernels (cuSOLVER...) were registered."""
    _check_jaxlib()
    path, flavor = cuda_plugin()
    if path is None:
        raise _unavailable_error("gpu", "no CUDA PJRT plugin (jax-cuda12-pjrt / jax-cuda13-pjrt) is installed")
    try:
        c_api = _load_plugin("cuda", path)
        options = dict(xc.generate_pjrt_gpu_plugin_options())
        client = xc.make_c_api_client("cuda", options, None)
    except Exception as e:  # the plugin reports a missing driver or GPU in its own words
        raise _unavailable_error("gpu", f"the CUDA plugin is installed but found no usable GPU ({e})",
                                 installed=True) from None
    return client, _register_cuda_kernels(c_api, flavor)


def tpu_client():
    _check_jaxlib()
    path = os.environ.get("TPU_LIBRARY_PATH")
    if path is None:
        try:
            import libtpu
            path = libtpu.get_library_path()
        except ImportError:
            raise _unavailable_error("tpu", "libtpu is not installed") from None
    try:
        _load_plugin("tpu", path)
        return xc.make_c_api_client("tpu", {}, None)
    except Exception as e:
        raise _unavailable_error("tpu", f"libtpu is installed but found no usable TPU ({e})", installed=True) from None
