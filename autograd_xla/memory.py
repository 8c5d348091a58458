"""The process's memory as XLA:CPU reads and writes it: glibc's malloc thresholds, and numpy's
arrays at the 64-byte boundaries XLA reads them from in place. Both are set when the package
is imported (__init__.py)."""
import ctypes
import os

from numpy._core import multiarray

try:
    from . import _aligned  # numpy's memory handler aligning large arrays to 64 bytes (_aligned.c)
except ImportError:  # not built (no C compiler): numpy's arrays stay aligned to 16 bytes
    _aligned = None

#: glibc's malloc serves a request below its mmap threshold from its heap, and gives the
#: heap's free top back to the kernel (brk) once that exceeds the trim threshold, twice the
#: mmap threshold. Both start at 128 and 256 KiB and rise, up to 32 and 64 MiB on 64 bits, as
#: the process frees larger mmapped blocks. XLA:CPU allocates each result afresh
#: (posix_memalign) and frees it when numpy lets go of it, so with the thresholds part-way up
#: a result at the heap's top was given back and faulted in again at every call: `x + 1.0` on
#: 120,000 float64 (a settled program, C++'s call path) took 90-176 µs a call with 28-69 page
#: faults a call for about half of the arrays tried (which array decided where the result
#: fell), numpy 22 µs; with the thresholds raised, 25-29 µs and no faults for every array.
#: Plain autograd's temporaries paid the same: the benchmarks' MLP fit ran at 11-11.8 ms a
#: gradient call, 3.8-5.1 with the thresholds raised. So importing the package frees a block
#: of this size (raise_malloc_thresholds): the thresholds then stand where a process that
#: freed one 32 MiB array has them, from the first call on, plain (tiered) ones included.
#: Thresholds the user set (mallopt, MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES) are fixed, and
#: glibc then leaves them as they are.
MALLOC_RAISING_BYTES = (32 << 20) - (64 << 10)
#: "0" keeps numpy's own memory handler when the package is imported (align_numpy).
ALIGN_ENV = "AUTOGRAD_XLA_ALIGN_NUMPY"


def glibc():
    """Whether the C library is glibc (whose malloc raise_malloc_thresholds tunes)."""
    return ("CS_GNU_LIBC_VERSION" in getattr(os, "confstr_names", {})
            and (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"))


def raise_malloc_thresholds():
    """Move glibc's mmap and trim thresholds to their highest (MALLOC_RAISING_BYTES); nothing
    elsewhere."""
    if not glibc():
        return
    libc = ctypes.CDLL(None)  # a handle of our own: the restypes set here stay ours
    malloc, free = libc.malloc, libc.free
    malloc.restype, malloc.argtypes, free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
    free(malloc(MALLOC_RAISING_BYTES))


def align_numpy(on=True):
    """Have numpy place the data of the arrays it makes from now on, in this thread (numpy's
    memory handler is a context variable: other threads keep theirs), at 64-byte boundaries
    from 64 KiB on, so that a jitted function reads such an argument where it is instead of
    copying it; with on=False, numpy's own handler again (16-byte boundaries). Returns whether
    it was on before. On by default when the package is imported, in the importing thread
    ($AUTOGRAD_XLA_ALIGN_NUMPY=0: off). The blocks are malloc's, as numpy's own: np.zeros
    of 32 MiB and more keeps its lazily zeroed pages (and numpy's alignment). Measured (MLP
    step, batch 256, float64, a settled program, first quartiles of 40 blocks of calls):
    3.57 -> 3.35 ms a call, the copies of its 1.6 MB batch and 1.25 MB first layer saved.
    Without the C extension (_aligned.c, built where a C compiler is) it stays off: returns
    False."""
    if _aligned is None:
        return False
    hugepages = multiarray._set_madvise_hugepage(True)  # numpy's own setting, read back
    multiarray._set_madvise_hugepage(hugepages)
    return _aligned.use(on, hugepages)


def numpy_aligned():
    """Whether numpy allocates through align_numpy's handler in this thread."""
    return _aligned is not None and _aligned.in_use()


def align_numpy_unless_told_not():
    """align_numpy() at import, unless $AUTOGRAD_XLA_ALIGN_NUMPY is "0" or numpy already
    allocates through a handler other than its default (someone else's: kept)."""
    if os.environ.get(ALIGN_ENV, "1").strip() != "0" and multiarray.get_handler_name() == "default_allocator":
        align_numpy(True)
