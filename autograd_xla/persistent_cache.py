"""An opt-in cache of compiled XLA executables on disk, shared by this user's processes.

Off by default. Turn it on with the environment variable `AUTOGRAD_XLA_CACHE_DIR=/path` or
`autograd_xla.set_cache_dir(path)`; a process's first call of a jitted function whose program
is in the cache then loads the executable (tens of milliseconds) instead of recompiling it
(`cache_info()` counts `persistent_hits` and `persistent_load_seconds`).

What is cached, and when (backend.Backend.compile looks in its in-process cache first, then
here, then asks XLA and stores the result): programs whose compile took at least
`min_compile_seconds` (default 0.1 s; env AUTOGRAD_XLA_CACHE_MIN_COMPILE_SECONDS), zlib
compressed, while the directory holds at most `max_bytes` (default 1 GiB; env
AUTOGRAD_XLA_CACHE_MAX_BYTES): the least recently used entries (file mtime, touched on each
hit) are deleted to stay within it.

The key (`key`) is a SHA-256 over everything that changes the executable: the StableHLO
text (without its ops' files and lines: hlo.without_source_lines), jaxlib's version and C++
API counter, the client's platform and platform version, the CompileOptions' bytes
(XLA_FLAGS are parsed into them; dump-only flags are normalised away by the backend, as jax
does), the device kinds and count, and LOWERING_VERSION.

Safety. A serialized executable holds native code that deserializing maps and runs; jaxlib
checks the proto around it but not the code (a byte flipped inside its ELF object was
accepted and crashed a process, shared/notes/parallel-and-cache.md (d)). So anyone who can
write the cache could run code as you, and corruption could crash you. Hence:
  * the directory is created 0700 and refused (a warning; the cache stays off) when it is
    group- or world-writable or owned by another user; entries are 0600 files written
    atomically (a temporary file, then os.replace);
  * every entry carries an HMAC-SHA256 made with a per-user secret (32 random bytes in a 0600
    file outside the cache: ~/.config/autograd_xla/cache.key, or env
    AUTOGRAD_XLA_CACHE_KEY_FILE), checked with its header (format version, key) before
    anything is deserialized. An entry that fails is never loaded: it is reported once,
    deleted, and the program is compiled again.
Do not point the cache at a shared or network directory.
"""
import functools
import hashlib
import hmac
import os
import stat
import struct
import threading
import warnings
import zlib

from .clients import xc

#: Bump whenever lowering changes the text it emits for the same program in a way that the
#: text itself does not show (it is part of every key, so old entries stop matching).
LOWERING_VERSION = 1
FORMAT_VERSION = 1
#: Programs that compiled faster than this are not stored: a load costs 9-35 ms in a fresh process
#: (../shared/notes/parallel-and-cache.md (d)), an MLP gradient's first program (the fast
#: options, backend.FAST_COMPILE_OVERRIDES) compiles in 0.15-0.24 s here.
MIN_COMPILE_SECONDS = 0.1
MAX_BYTES = 1 << 30

#: Prefixes of the XLA flags (and DebugOptions fields) that do not change the executable.
NEUTRAL_FLAGS = ("--xla_dump", "--xla_enable_dumping", "--xla_force_host_platform_device_count",
                 "--xla_gpu_dump_", "--xla_gpu_cuda_data_dir")

_MAGIC = b"AGXLAEXE"
# magic, format version, key (raw SHA-256), payload length; then the HMAC, then the payload
_HEADER = struct.Struct("<8sI32sQ")
_MAC_SIZE = 32
_SUFFIX = ".xlaexe"
_UNSAFE_DIR_BITS = stat.S_IWGRP | stat.S_IWOTH

_lock = threading.Lock()
_state = {"configured": False, "cache": None}


@functools.cache
def jaxlib_version():
    """jaxlib's release and its C++ API counter, both in the key (an executable is only valid for
    the XLA that compiled it); read at the first key, not at import (clients.xc)."""
    from jaxlib import version
    return f"{version.__version__}/{xc._version}"


def key(text, options_bytes, platform, platform_version, devices_desc):
    """The hex SHA-256 naming a program's entry (see the module docstring for what it covers);
    `devices_desc`: one (platform, device kind) per device, plus anything else describing them."""
    h = hashlib.sha256()
    for part in (text, jaxlib_version(), platform, platform_version, xla_flags(),
                 repr(devices_desc), f"devices={len(devices_desc)}", f"lowering={LOWERING_VERSION}"):
        h.update(hashlib.sha256(part.encode()).digest())
    h.update(hashlib.sha256(options_bytes).digest())
    return h.hexdigest()


def xla_flags():
    """XLA_FLAGS as they matter to the executable: sorted, without the dump-only ones (the
    list jax leaves out of its cache key: dump flags and the host device count)."""
    return " ".join(sorted(f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(NEUTRAL_FLAGS)))


class Cache:
    """One checked cache directory with its secret; `load` and `store` entries by key."""

    def __init__(self, directory, secret, min_compile_seconds=MIN_COMPILE_SECONDS, max_bytes=MAX_BYTES):
        self.directory, self._secret = directory, secret
        self.min_compile_seconds, self.max_bytes = min_compile_seconds, max_bytes
        self._warned = set()

    def _path(self, hex_key):
        return os.path.join(self.directory, hex_key + _SUFFIX)

    def _mac(self, header, payload):
        return hmac.new(self._secret, header + payload, hashlib.sha256).digest()

    def load(self, hex_key):
        """The serialized executable stored under `hex_key`, or None: absent, or refused (not
        authentic, truncated, another key's or format's: reported once, deleted)."""
        path = self._path(hex_key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            self._refuse(path, f"it cannot be read ({e})")
            return None
        head, mac, payload = data[:_HEADER.size], data[_HEADER.size:_HEADER.size + _MAC_SIZE], \
            data[_HEADER.size + _MAC_SIZE:]
        if len(head) < _HEADER.size or not hmac.compare_digest(mac, self._mac(head, payload)):
            self._refuse(path, "its HMAC does not match (tampered, truncated, or written with another secret)")
            return None
        magic, version, stored_key, length = _HEADER.unpack(head)
        if magic != _MAGIC or version != FORMAT_VERSION or stored_key != bytes.fromhex(hex_key) \
                or length != len(payload):
            self._refuse(path, "its header names another format or key")
            return None
        try:
            blob = zlib.decompress(payload)
        except zlib.error as e:
            self._refuse(path, f"it does not decompress ({e})")
            return None
        try:
            os.utime(path)  # least recently used = oldest mtime (eviction)
        except OSError:
            pass
        return blob

    def discard(self, hex_key, reason):
        """Report and delete an entry that passed its checks but XLA would not load."""
        self._refuse(self._path(hex_key), reason)

    def store(self, hex_key, blob):
        """Write an entry atomically (0600), then evict down to max_bytes."""
        import tempfile  # here: with shutil, bz2 and lzma it took ~3 ms of the package's import, for an opt-in cache
        payload = zlib.compress(blob, 6)
        head = _HEADER.pack(_MAGIC, FORMAT_VERSION, bytes.fromhex(hex_key), len(payload))
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".tmp-", suffix=_SUFFIX)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(head + self._mac(head, payload) + payload)
            os.replace(tmp, self._path(hex_key))
        except BaseException:
            _remove(tmp)
            raise
        self.evict()

    def evict(self):
        """Delete the least recently used entries until the directory holds at most max_bytes."""
        entries = []
        with os.scandir(self.directory) as it:
            for e in it:
                if e.name.endswith(_SUFFIX) and not e.name.startswith(".tmp-"):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    entries.append((st.st_mtime, st.st_size, e.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            _remove(path)
            total -= size

    def _refuse(self, path, reason):
        if path not in self._warned:
            self._warned.add(path)
            warnings.warn(f"autograd_xla's executable cache ignored {path}: {reason}; it was deleted and the "
                          "program is compiled again", stacklevel=4)
        _remove(path)


def _remove(path):
    try:
        os.remove(path)
    except OSError:
        pass


def _check_private(path, what, writable_only):
    """None when `path` is ours and private enough, else why not."""
    st = os.stat(path)
    if st.st_uid != os.getuid():
        return f"the {what} {path} is owned by another user"
    bits = _UNSAFE_DIR_BITS if writable_only else stat.S_IRWXG | stat.S_IRWXO
    if st.st_mode & bits:
        return f"the {what} {path} has mode {stat.S_IMODE(st.st_mode):o} (others may {'write' if writable_only else 'read'} it)"
    return None


def _secret(directory):
    """The per-user HMAC secret, created (os.urandom, 0600) on first use; (secret, None) or
    (None, why it cannot be used)."""
    path = os.path.abspath(os.environ.get("AUTOGRAD_XLA_CACHE_KEY_FILE")
                           or os.path.join(os.path.expanduser("~"), ".config", "autograd_xla", "cache.key"))
    real_dir = os.path.realpath(directory)
    if os.path.commonpath([os.path.realpath(path), real_dir]) == real_dir:
        return None, f"the secret key file {path} lies inside the cache directory"
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
    problem = _check_private(path, "secret key file", writable_only=False)
    if problem:
        return None, problem
    with open(path, "rb") as f:
        secret = f.read()
    if len(secret) < 32:
        return None, f"the secret key file {path} holds {len(secret)} bytes (32 expected)"
    return secret, None


def _open(directory, min_compile_seconds, max_bytes):
    """A Cache on `directory` (created 0700), or None with a warning saying why not."""
    directory = os.path.abspath(os.path.expanduser(directory))
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
        problem = _check_private(directory, "cache directory", writable_only=True)
        secret = None
        if problem is None:
            secret, problem = _secret(directory)
    except OSError as e:
        problem = f"{directory}: {e}"
    if problem:
        warnings.warn(f"autograd_xla's executable cache is off: {problem}", stacklevel=3)
        return None
    return Cache(directory, secret, min_compile_seconds, max_bytes)


def set_cache_dir(path, min_compile_seconds=None, max_bytes=None):
    """Keep compiled executables in `path` so later processes load them instead of compiling
    (None turns the cache off; it is off unless this or env AUTOGRAD_XLA_CACHE_DIR sets it).

    Only programs whose compile took at least `min_compile_seconds` (default 0.1 s) are
    stored; the directory is kept under `max_bytes` (default 1 GiB) by deleting the least
    recently used entries. The directory is created with mode 0700 and refused, with a warning,
    if others can write it or another user owns it. Entries are authenticated with an
    HMAC-SHA256 under a per-user secret (~/.config/autograd_xla/cache.key, or env
    AUTOGRAD_XLA_CACHE_KEY_FILE) before being loaded: they contain native code. Returns
    whether the cache is on."""
    cache = None if path is None else _open(
        os.fspath(path), MIN_COMPILE_SECONDS if min_compile_seconds is None else float(min_compile_seconds),
        MAX_BYTES if max_bytes is None else int(max_bytes))
    with _lock:
        _state["configured"], _state["cache"] = True, cache
    return cache is not None


def active():
    """The Cache in use, or None (off). The environment is read on first use only."""
    if not _state["configured"]:
        with _lock:
            if not _state["configured"]:
                env = os.environ.get("AUTOGRAD_XLA_CACHE_DIR")
                _state["cache"] = _open(env, float(os.environ.get("AUTOGRAD_XLA_CACHE_MIN_COMPILE_SECONDS",
                                                                  MIN_COMPILE_SECONDS)),
                                        int(os.environ.get("AUTOGRAD_XLA_CACHE_MAX_BYTES", MAX_BYTES))) \
                    if env else None
                _state["configured"] = True
    return _state["cache"]
