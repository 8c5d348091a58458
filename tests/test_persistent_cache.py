"""The on-disk executable cache (persistent_cache.py): hits across processes, what makes a key
miss, refusal of tampered / truncated / foreign entries and of unsafe directories, LRU
eviction, and that it is off by default."""
import gc
import json
import os
import site
import subprocess
import sys
import warnings

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from jaxlib import xla_client as xc

import autograd_xla
from autograd_xla import api, backend, jit_ps, persistent_cache
from helpers import run_with_a_persistent_cache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
X = np.linspace(-1.0, 1.0, 5)

CHILD = """
import json, sys
import autograd.numpy as np
from autograd import grad
from autograd_xla import jit_ps
f = jit_ps(grad(lambda x: np.sum(np.tanh(x * {c}) ** 2)))
out = f(np.linspace(-1.0, 1.0, 5))
info = f.cache_info()
print(json.dumps({{"out": out.tolist(), "compiles": info["compiles"], "hits": info["persistent_hits"],
                   "load_seconds": info["persistent_load_seconds"]}}))
"""


def loss(c):
    return lambda x: anp.sum(anp.tanh(x * c) ** 2)


def fresh_jit(c):
    """A jitted gradient whose program is in no in-process cache: earlier functions with the same
    program were dropped, and Backend.compile's cache only holds weak references."""
    gc.collect()
    return jit_ps(grad(loss(c)))


def entries(directory):
    return sorted(p for p in os.listdir(directory) if p.endswith(".xlaexe"))


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    # no program kept in memory past its function: a fresh function must go to the disk cache
    monkeypatch.setattr(backend, "RECENT_PROGRAMS", 0)
    backend.get_backend("cpu").release_recent()
    monkeypatch.setenv("AUTOGRAD_XLA_CACHE_KEY_FILE", str(tmp_path / "secret" / "cache.key"))
    directory = tmp_path / "cache"
    assert autograd_xla.set_cache_dir(directory, min_compile_seconds=0)
    yield str(directory)
    autograd_xla.set_cache_dir(None)


def run_child(c, env):
    r = subprocess.run([sys.executable, "-c", CHILD.format(c=c)], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, **env))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_hit_across_processes(tmp_path):
    env = {"AUTOGRAD_XLA_CACHE_DIR": str(tmp_path / "cache"), "AUTOGRAD_XLA_CACHE_MIN_COMPILE_SECONDS": "0",
           "AUTOGRAD_XLA_CACHE_KEY_FILE": str(tmp_path / "key" / "cache.key")}
    first = run_child(1.25, env)
    assert (first["compiles"], first["hits"]) == (1, 0)
    assert len(entries(tmp_path / "cache")) == 1
    assert os.stat(tmp_path / "cache").st_mode & 0o777 == 0o700
    assert os.stat(tmp_path / "key" / "cache.key").st_mode & 0o777 == 0o600
    second = run_child(1.25, env)
    assert (second["compiles"], second["hits"]) == (0, 1) and second["load_seconds"] > 0
    expected = grad(loss(1.25))(X)
    np.testing.assert_allclose(second["out"], expected, rtol=1e-12)
    assert second["out"] == first["out"]
    # a dump-only flag changes CompileOptions' bytes but not the key (backend resets those fields)
    dumped = run_child(1.25, dict(env, XLA_FLAGS=f"--xla_dump_to={tmp_path / 'dump'} --xla_dump_hlo_as_text"))
    assert (dumped["compiles"], dumped["hits"]) == (0, 1)


MOVED_CHILD = """
import hashlib, json
import autograd.numpy as np
import numpy
from autograd import grad
from autograd_xla import jit_ps

def loss(params, x):  # autograd's zeros for params[0]'s gradient are made on the caller's line
    W, b = params[-1]
    return np.sum(np.tanh(x @ W + b))

rs = numpy.random.RandomState(0)
params = [(rs.randn(3, 2), rs.randn(2)), (rs.randn(3, 2), rs.randn(2))]
x = rs.randn(4, 3){pad}
f = jit_ps(grad(loss))
out = f(params, x)
info = f.cache_info()
print(json.dumps({{"out": [a.tolist() for a in out[1]], "compiles": info["compiles"], "hits": info["persistent_hits"],
                   "text": hashlib.sha256(f.stablehlo(params, x).encode()).hexdigest()}}))
"""


def test_hit_from_a_script_whose_lines_moved(tmp_path):
    """An edit above the call moves the lines a program's ops carry (hlo.Locations); the
    entry is found all the same (hlo.without_source_lines)."""
    first, moved = run_with_a_persistent_cache(tmp_path, *(MOVED_CHILD.format(pad=pad)
                                                             for pad in ("", "\n\n# an edit\n")))
    assert first["text"] != moved["text"]
    assert (first["compiles"], first["hits"]) == (1, 0) and (moved["compiles"], moved["hits"]) == (0, 1)
    assert moved["out"] == first["out"]


def test_off_by_default(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOGRAD_XLA_CACHE")}
    # a HOME of its own (no cache appears there); the user's site-packages stay where they were
    # (where benchmarks/tpu_check.sh's .pth file finds autograd and jaxlib)
    env.update(HOME=str(tmp_path), PYTHONPATH=ROOT, PYTHONUSERBASE=site.getuserbase())
    code = CHILD.format(c=1.5) + "from autograd_xla import persistent_cache; assert persistent_cache.active() is None"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["compiles"] == 1
    assert os.listdir(tmp_path) == []  # no cache, no secret key file


def test_in_process_store_then_load(cache_dir):
    f = fresh_jit(1.75)
    f(X)
    assert (f.stats.compiles, f.stats.persistent_hits) == (1, 0)
    assert len(entries(cache_dir)) == 1
    assert os.stat(os.path.join(cache_dir, entries(cache_dir)[0])).st_mode & 0o777 == 0o600
    del f
    g = fresh_jit(1.75)
    np.testing.assert_allclose(g(X), grad(loss(1.75))(X), rtol=1e-12)
    assert (g.stats.compiles, g.stats.persistent_hits) == (0, 1)


@pytest.mark.parametrize("name, value", [("LOWERING_VERSION", 10**6), ("jaxlib_version", lambda: "0.0.0/1")])
def test_a_changed_version_misses(cache_dir, monkeypatch, name, value):
    fresh_jit(2.0)(X)
    monkeypatch.setattr(persistent_cache, name, value)
    g = fresh_jit(2.0)
    g(X)
    assert (g.stats.compiles, g.stats.persistent_hits) == (1, 0)
    assert len(entries(cache_dir)) == 2


def test_a_changed_compile_option_misses(cache_dir):
    cpu = backend.get_backend("cpu")
    text = jit_ps(grad(loss(2.25))).lower(X).as_text()
    gc.collect()
    stats = api.CacheStats()
    _, compiled = cpu.compile(text, stats=stats)
    assert compiled
    options = xc.CompileOptions()
    options.executable_build_options.debug_options.xla_cpu_enable_fast_math = True
    _, compiled = cpu.compile(text, options=options, stats=stats)
    assert compiled and stats.persistent_hits == 0
    assert len(entries(cache_dir)) == 2


def test_dump_flags_do_not_change_the_key(monkeypatch):
    text, platform = "module {}", ("cpu", "cpu", (("cpu", "cpu"),))
    plain = persistent_cache.key(text, b"", *platform)
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/somewhere --xla_dump_hlo_as_text")
    assert persistent_cache.key(text, b"", *platform) == plain
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true")
    assert persistent_cache.key(text, b"", *platform) != plain


def corrupt_flip(path):
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(path, "wb").write(bytes(data))


def corrupt_truncate(path):
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])


@pytest.mark.parametrize("corrupt", [corrupt_flip, corrupt_truncate])
def test_a_damaged_entry_is_refused_and_recompiled(cache_dir, corrupt):
    c = 2.5 if corrupt is corrupt_flip else 2.75
    fresh_jit(c)(X)
    path = os.path.join(cache_dir, entries(cache_dir)[0])
    corrupt(path)
    g = fresh_jit(c)
    with pytest.warns(UserWarning, match="HMAC does not match"):
        out = g(X)
    np.testing.assert_allclose(out, grad(loss(c))(X), rtol=1e-12)
    assert (g.stats.compiles, g.stats.persistent_hits) == (1, 0)
    assert len(entries(cache_dir)) == 1  # deleted, then stored afresh by the compile


def test_an_entry_from_another_secret_is_refused(cache_dir, tmp_path, monkeypatch):
    fresh_jit(3.0)(X)
    monkeypatch.setenv("AUTOGRAD_XLA_CACHE_KEY_FILE", str(tmp_path / "other" / "cache.key"))
    assert autograd_xla.set_cache_dir(cache_dir, min_compile_seconds=0)
    g = fresh_jit(3.0)
    with pytest.warns(UserWarning, match="another secret"):
        g(X)
    assert (g.stats.compiles, g.stats.persistent_hits) == (1, 0)


def test_a_world_writable_directory_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_XLA_CACHE_KEY_FILE", str(tmp_path / "secret" / "cache.key"))
    directory = tmp_path / "shared"
    directory.mkdir()
    os.chmod(directory, 0o777)
    try:
        with pytest.warns(UserWarning, match="cache is off: .*mode 777"):
            assert not autograd_xla.set_cache_dir(directory)
        assert persistent_cache.active() is None
        fresh_jit(3.25)(X)
        assert os.listdir(directory) == []
    finally:
        autograd_xla.set_cache_dir(None)


def test_a_key_file_inside_the_cache_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_XLA_CACHE_KEY_FILE", str(tmp_path / "cache" / "cache.key"))
    with pytest.warns(UserWarning, match="inside the cache directory"):
        assert not autograd_xla.set_cache_dir(tmp_path / "cache")
    autograd_xla.set_cache_dir(None)


def test_fast_compiles_are_not_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOGRAD_XLA_CACHE_KEY_FILE", str(tmp_path / "secret" / "cache.key"))
    try:
        assert autograd_xla.set_cache_dir(tmp_path / "cache", min_compile_seconds=1e9)
        fresh_jit(3.5)(X)
        assert entries(tmp_path / "cache") == []
    finally:
        autograd_xla.set_cache_dir(None)


def test_eviction_keeps_the_size_bound_least_recently_used_first(cache_dir):
    rng = np.random.default_rng(0)
    cache = persistent_cache.active()
    cache.max_bytes = 25_000  # room for two entries of ~10 kB
    keys = [persistent_cache.key(f"program {i}", b"", "cpu", "cpu", ()) for i in range(3)]
    blobs = [rng.bytes(10_000) for _ in keys]
    cache.store(keys[0], blobs[0])
    os.utime(os.path.join(cache_dir, keys[0] + ".xlaexe"), (1, 1))
    cache.store(keys[1], blobs[1])
    os.utime(os.path.join(cache_dir, keys[1] + ".xlaexe"), (2, 2))
    assert cache.load(keys[0]) == blobs[0]  # a hit makes entry 0 the most recently used
    cache.store(keys[2], blobs[2])
    assert entries(cache_dir) == sorted(k + ".xlaexe" for k in (keys[0], keys[2]))
    assert sum(os.path.getsize(os.path.join(cache_dir, e)) for e in entries(cache_dir)) <= cache.max_bytes
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.load(keys[1]) is None  # evicted: simply absent, no warning
