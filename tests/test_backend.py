"""Platform selection, the absent-platform error, the optional extras, device-resident
results and the 32-bit switch: everything about accelerators the CPU can check."""
import configparser
import os
import subprocess
import sys

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
import autograd_xla
from autograd_xla import DeviceArray, PlatformUnavailableError, jit_ps
from autograd_xla import backend as backend_mod, clients, memory
from helpers import assert_close

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rs = onp.random.RandomState(3)
HAS_PLUGIN = clients.cuda_plugin()[0] is not None
HAS_GPU = HAS_PLUGIN and backend_mod.is_available("gpu")
#: what the absent-GPU error must say: the extra to install, or (plugin installed) that no GPU is visible
GPU_ABSENT = "no usable GPU" if HAS_PLUGIN else r"autograd-xla\[cuda12\]"


def test_cpu_is_listed_and_is_the_default_without_accelerators():
    cpus = autograd_xla.devices("cpu")
    assert cpus and all(d.platform == "cpu" for d in cpus)
    assert set(map(str, cpus)) <= set(map(str, autograd_xla.devices()))
    if not HAS_GPU and not backend_mod.is_available("tpu"):
        assert autograd_xla.default_platform() == "cpu"


def test_explicit_cpu_backend():
    f = jit_ps(lambda x: np.tanh(x) * 2, backend="cpu")
    x = rs.randn(4)
    assert_close(f(x), onp.tanh(x) * 2)


@pytest.mark.skipif(HAS_GPU, reason="a GPU is available here")
def test_absent_gpu_is_a_clear_error_naming_the_extra():
    f = jit_ps(lambda x: x + 1, backend="gpu")
    with pytest.raises(PlatformUnavailableError, match=GPU_ABSENT):
        f(onp.ones(3))
    with pytest.raises(PlatformUnavailableError, match="gpu"):
        autograd_xla.set_default_platform("gpu")
    assert autograd_xla.default_platform() in ("cpu", "tpu")  # unchanged by the failed request


def test_absent_tpu_is_a_clear_error_naming_the_extra():
    if backend_mod.is_available("tpu"):
        pytest.skip("a TPU is available here")
    with pytest.raises(PlatformUnavailableError, match=r"autograd-xla\[tpu\]"):
        jit_ps(lambda x: x, backend="tpu")(onp.ones(2))


def test_unknown_platform_name_fails_at_definition():
    with pytest.raises(ValueError, match="unknown platform"):
        jit_ps(lambda x: x, backend="quantum")


def test_set_default_platform_roundtrip():
    autograd_xla.set_default_platform("cpu")
    try:
        assert autograd_xla.default_platform() == "cpu"
        assert_close(jit_ps(lambda x: x * 3)(onp.ones(2)), onp.full(2, 3.0))
    finally:
        autograd_xla.set_default_platform(None)


def without_libtpu(tmp_path):
    """The environment of a child process in which libtpu cannot start: TPU_LIBRARY_PATH unset,
    and a package `libtpu` ahead of the real one on the path that leaves a file `tried`
    behind when imported (the TPU client's first step, clients.tpu_client) and then refuses.
    On a TPU machine, where this suite's process holds the chip, a child asking for another
    platform must never reach it (libtpu reserves gigabytes of host memory when it starts)."""
    stub = tmp_path / "stub" / "libtpu"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text(f"open({str(tmp_path / 'tried')!r}, 'w').close()\n"
                                      "raise ImportError('libtpu is stubbed out in this test')\n")
    env = {k: v for k, v in os.environ.items() if k != "TPU_LIBRARY_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "stub"), ROOT] + env.get("PYTHONPATH", "").split(os.pathsep))
    return env


def test_environment_variable_selects_the_platform(tmp_path):
    """A process asked for the CPU (or an absent GPU) runs there without trying libtpu."""
    code = ("import autograd_xla, numpy as np; print(autograd_xla.default_platform()); "
            "f = autograd_xla.jit_ps(lambda x: x + 1)\n"
            "try:\n    f(np.ones(2))\nexcept autograd_xla.PlatformUnavailableError as e:\n    print('unavailable', e)")
    env = dict(without_libtpu(tmp_path), AUTOGRAD_XLA_PLATFORM="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.split()[0] == "cpu", out.stderr
    if not HAS_GPU:
        env["AUTOGRAD_XLA_PLATFORM"] = "gpu"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
        expected = "no usable GPU" if HAS_PLUGIN else "cuda12"
        assert "gpu" in out.stdout and "unavailable" in out.stdout and expected in out.stdout, out.stdout + out.stderr
    assert not (tmp_path / "tried").exists()


def test_the_stub_of_libtpu_records_a_try(tmp_path):
    """without_libtpu's stub does record a process that starts the TPU client (so that the
    test above can fail)."""
    code = ("import autograd_xla\n"
            "try:\n    autograd_xla.devices('tpu')\nexcept autograd_xla.PlatformUnavailableError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], env=without_libtpu(tmp_path), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and "libtpu is not installed" in out.stdout, out.stdout + out.stderr
    assert (tmp_path / "tried").exists()


@pytest.mark.skipif(not memory.glibc(), reason="glibc's malloc thresholds")
@pytest.mark.parametrize("imported", [False, True], ids=["numpy and jaxlib alone", "autograd_xla imported"])
def test_importing_the_package_raises_glibcs_malloc_thresholds(imported):
    """Once autograd_xla is imported, a 16 MiB block comes from malloc's heap, not from mmap
    (the chunk header's IS_MMAPPED bit): results and temporaries of 64 KiB-1 MiB are then not
    given back to the kernel and faulted in again at every call (memory.MALLOC_RAISING_BYTES).
    In a fresh process with numpy and jaxlib alone the block is mmapped: the check can fail."""
    code = ("import ctypes, numpy, jaxlib.xla_client\n"
            f"if {imported}:\n    import autograd_xla\n"
            "libc = ctypes.CDLL(None)\n"
            "libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]\n"
            "libc.free.argtypes = [ctypes.c_void_p]\n"
            "p = libc.malloc(16 << 20)\n"
            "print(bool(ctypes.c_size_t.from_address(p - ctypes.sizeof(ctypes.c_size_t)).value & 2))\n"
            "libc.free(p)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(not imported)]


def test_jaxlibs_info_lines_stay_quiet():
    """The package sets TF_CPP_MIN_LOG_LEVEL=1 (unless set) before any of its modules imports
    jaxlib, whose client otherwise logs two INFO lines to stderr when it starts."""
    code = "import numpy, autograd_xla; autograd_xla.jit_ps(lambda x: x + 1)(numpy.ones(3))"
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "pjrt_client" not in out.stderr, out.stderr


def test_extras_pin_plugins_to_the_jaxlib_version():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    requires = [r.strip() for r in cfg["options"]["install_requires"].strip().splitlines()]
    jaxlib = next(r for r in requires if r.startswith("jaxlib=="))
    version = jaxlib.split("==")[1]
    extras = {k: [r.strip() for r in v.strip().splitlines()] for k, v in cfg["options.extras_require"].items()}
    for cuda in ("cuda12", "cuda13"):
        assert f"jax-{cuda}-pjrt=={version}" in extras[cuda]
        assert any(r.startswith(f"jax-{cuda}-plugin") and r.endswith(f"=={version}") for r in extras[cuda])
    assert any(r.startswith("libtpu") for r in extras["tpu"])
    assert not any(r.split("[")[0].split("=")[0] == "jax" for r in requires)  # never a runtime dependency
    # jaxlib's ml_dtypes below 0.7, whose import costs a first compiled call 0.55 s (setup.cfg)
    assert "ml_dtypes>=0.5,<0.7" in requires


def test_device_resident_results_round_trip():
    step = jit_ps(lambda w, g: w - 0.1 * g, keep_on_device=True)
    w0 = rs.randn(5)
    g = rs.randn(5)
    w = step(w0, g)
    assert isinstance(w, DeviceArray) and w.shape == (5,) and w.dtype == onp.float64
    for _ in range(3):
        w = step(w, g)                       # parameters stay on the device
    info = step.cache_info()
    assert info["device_to_host"] == 0
    assert info["host_to_device"] == 2 + 3   # w0 and g, then only g
    host = onp.asarray(w)
    assert_close(host, w0 - 0.4 * g)
    assert host.flags.writeable
    assert_close(w + 1.0, w0 - 0.4 * g + 1.0)        # numpy operators work on the host copy
    plain = jit_ps(lambda w: np.sum(w ** 2))
    assert_close(plain(w), onp.sum((w0 - 0.4 * g) ** 2))  # a DeviceArray is a valid argument anywhere
    assert_close(grad(lambda w: np.sum(np.sin(w)))(onp.asarray(w)), onp.cos(w0 - 0.4 * g))


def test_a_trace_copies_a_device_argument_to_the_host_only_where_it_needs_its_value(monkeypatch):
    """A trace reads the call's values only where it needs one (a Python branch on the data, a
    slice's bound): a DeviceArray argument is copied to the host then, not at every trace (a
    128 MB argument's first call 345 ms against 52)."""
    copies = []
    to_numpy = DeviceArray.to_numpy
    monkeypatch.setattr(DeviceArray, "to_numpy", lambda self: copies.append(self.shape) or to_numpy(self))
    w = jit_ps(lambda a: a * 2.0, keep_on_device=True)(rs.randn(4, 3))
    host = onp.asarray(w)
    copies.clear()
    f = jit_ps(lambda a: np.sum(a ** 2), keep_on_device=True)
    assert_close(onp.asarray(f(w)), onp.sum(host ** 2))
    assert copies == [()]  # the result, by onp.asarray; none of the argument

    def branchy(a, b):
        return a * 2.0 if np.sum(b) > 0 else a * 3.0  # the branch reads b's value
    copies.clear()
    g = jit_ps(branchy, keep_on_device=True)
    assert_close(onp.asarray(g(w, w)), branchy(host, host))
    assert (4, 3) in copies  # b's, for the branch


def test_transfers_are_counted():
    f = jit_ps(lambda a, b: (a + b, a * b))
    f(onp.ones(2), onp.ones(2))
    assert f.cache_info()["host_to_device"] == 2 and f.cache_info()["device_to_host"] == 2


def test_x64_off_computes_in_32_bits_and_says_so_in_the_result_dtype():
    x = rs.randn(6)
    f = jit_ps(lambda x: np.sum(np.exp(x) * 2.5) + np.arange(3).sum(), x64=False)
    out = f(x)
    assert out.dtype == onp.float32
    assert_close(out, onp.float32(onp.sum(onp.exp(x.astype(onp.float32)) * 2.5) + 3), rtol=1e-5)
    assert "xf64>" not in f.stablehlo(x) and "<f64>" not in f.stablehlo(x) and "xi64>" not in f.stablehlo(x)
    g = jit_ps(grad(lambda x: np.sum(np.tanh(x) ** 2)), x64=False)
    assert g(x).dtype == onp.float32
    assert_close(g(x), grad(lambda x: np.sum(np.tanh(x) ** 2))(x).astype(onp.float32), rtol=1e-5)
    assert jit_ps(lambda x: x * 2)(x).dtype == onp.float64   # the default keeps numpy's float64


def test_x64_off_reads_each_narrowed_argument_not_the_next_ones():
    """x64=False narrows float64 arguments into float32 copies; those large enough to be read
    in place (backend.IN_PLACE_MIN_BYTES) stay alive through the call, so a freed copy's
    memory, which the next copy may take, is never read as the argument (it was: results
    off by 2.0)."""
    rs = onp.random.RandomState(3)
    a, b = rs.randn(300, 400), rs.randn(400, 200)
    for fun in (lambda a, b: np.tanh(a @ b), lambda a, b: np.tanh(a) + np.sum(np.tanh(b))):
        f = jit_ps(fun, x64=False)
        for _ in range(4):
            got = f(a, b)
            assert got.dtype == onp.float32
            assert onp.allclose(got, fun(a, b), rtol=1e-4, atol=1e-4)


def test_x64_off_linear_algebra_uses_32_bit_kernels():
    A = rs.randn(4, 4)
    A = A @ A.T + 4 * onp.eye(4)
    f = jit_ps(lambda A: np.linalg.cholesky(A) @ np.linalg.inv(A), x64=False)
    out = f(A)
    assert out.dtype == onp.float32
    assert_close(out, (onp.linalg.cholesky(A) @ onp.linalg.inv(A)).astype(onp.float32), rtol=1e-5)


def test_the_cuda_plugin_is_found_where_its_namespace_package_is(tmp_path, monkeypatch):
    """clients.cuda_plugin looks for the jax_plugins namespace package first (without it,
    none), then its CUDA flavours' plugin library."""
    if HAS_PLUGIN:
        pytest.skip("a CUDA plugin is installed here")
    assert clients.cuda_plugin() == (None, None)
    package = tmp_path / "jax_plugins" / "xla_cuda12"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "xla_cuda_plugin.so").write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert clients.cuda_plugin() == (str(package / "xla_cuda_plugin.so"), "xla_cuda12")
    finally:  # (the namespace package its look-up imported, whose path is this test's)
        for name in [m for m in sys.modules if m == "jax_plugins" or m.startswith("jax_plugins.")]:
            del sys.modules[name]


def test_installed_plugin_without_a_device_is_a_clear_error(monkeypatch):
    """The CUDA plugin loads on a machine without a GPU and then reports it; we pass that on.
    (Simulated with a plugin path that cannot load; with jax-cuda12-pjrt installed on a CPU
    machine the message ends in the plugin's own 'No visible GPU devices'.)"""
    if HAS_GPU:
        pytest.skip("a GPU is available here")
    monkeypatch.setattr(clients, "cuda_plugin", lambda: ("/nonexistent/xla_cuda_plugin.so", "xla_cuda12"))
    monkeypatch.setattr(backend_mod, "_unavailable", {})
    with pytest.raises(PlatformUnavailableError, match="installed but found no usable GPU") as info:
        jit_ps(lambda x: x + 1, backend="gpu")(onp.ones(2))
    assert "Install it" not in str(info.value)
    assert_close(jit_ps(lambda x: x + 1)(onp.ones(2)), onp.full(2, 2.0))   # the CPU keeps working
