"""Matrix-vector and matrix products on the CPU by the BLAS numpy runs them with, as XLA FFI
custom calls (ROWS, COLUMNS; SYMMETRIC and GEMM, whose notes give their measurements; GEMM
also complex, COMPLEX).

XLA:CPU multiplies a matrix by a vector on one thread; numpy's OpenBLAS uses every core.
Measured on this 2-core machine (µs, float64, a 1000x1000 matrix the function closes over,
C++'s call path): XLA's dot 100-145, this custom call 67-75, numpy 59-64. On one thread the
two kernels are equal (OPENBLAS_NUM_THREADS=1: XLA 84, OpenBLAS 93-107), and splitting the
product into row blocks XLA runs side by side did not help (a batch of 2 or 4 blocks:
103-126). So lowering (context.LoweringContext.dot_general) sends here the product of a
matrix of at least MIN_ELEMENTS elements and a vector; the paper's Table 1 quadratic's
value went from 0.41-0.63 of plain autograd's speed to 0.81. But OpenBLAS's threads wait
for each other spinning, and when another process holds a core a product on two threads
waits for a scheduler tick, so after such a stall the products run on one thread for a while
(STALL_SECONDS), and a signature's ladder tries a program leaving its products to XLA
(lowering.XLA_DOTS, tiering.Ladder) and keeps the faster.

The handlers are C (_blas.c, built by setup.py where a compiler is): XLA calls them with a
pointer to its call frame (xla/ffi/api/c_api.h, the ABI of jaxlib 0.10.2's headers; only the
fields used are read), and they call the cblas gemv and gemm of the BLAS numpy itself links
(`_cblas`), so the product runs in numpy's BLAS and numpy's threads, without the GIL.
Without the C module (or with AUTOGRAD_XLA_NATIVE_BLAS=0) the same handlers run in Python,
called through ctypes: they wrap the buffers as numpy arrays and multiply them with np.dot
(`out=` the result's buffer). XLA releases the GIL while a program runs and the ctypes
callback takes it again, so threads calling compiled functions cannot deadlock on it; np.dot
releases it while BLAS runs. The Python handler costs about 4-5 µs a call more (a 10x10
matrix: 10.8-12.0 against 6.4 µs).

A matrix argument only these products and elementwise ops read is read where numpy keeps
it (a matrix product's two operands alike): lowering passes the memory from the 64-byte
boundary below it (a view, lowering.LARGE_ARRAY_BYTES) and its offset there as a further
operand, and BLAS, which needs no alignment, starts at the offset: no copy, no correction
(lowering.FUSED_USES). That copy saved is what BLAS's matrix products gain, so a program
gets them only where each reads such an argument (GEMM_ALONE).

A module naming these targets runs only in a process that registered them (`register`,
done when the CPU backend starts; the persistent cache's entries load after that; jaxlib's
LAPACK kernels when a program naming them is lowered: register_lapack).
"""
import ctypes
import os
import threading

import numpy as np

from .clients import xc

try:
    from . import _blas as native  # the handlers in C (_blas.c); absent where setup.py had no compiler
except ImportError:
    native = None

#: y[i] = sum_j A[i, j] x[j] (A @ x) and y[j] = sum_i A[i, j] x[i] (x @ A), A row-major;
#: with three operands the second is A's offset in elements from where the first starts.
ROWS, COLUMNS = "autograd_xla_gemv_rows", "autograd_xla_gemv_columns"
#: y = A x with A a symmetric n x n constant (a matrix the function closes over, equal to its
#: transpose bit for bit: `symmetric`), by BLAS's symv, which reads half of A: the same
#: operands as ROWS. A covariance, precision or kernel matrix in a Gaussian's log-density
#: x'Ax, the paper's Table 1 quadratic. Measured, numpy's OpenBLAS, float64 1000x1000 (µs):
#: symv 44-46 against gemv 59 on two threads, 74-79 against 112 on one. Only constants: an
#: argument's values are not known when the program is made.
SYMMETRIC = "autograd_xla_symv"
#: The smallest matrix (elements) lowering gives BLAS; None: never. Measured (µs, C++'s call
#: path, float64, XLA / BLAS / numpy): 512x512 37-46 / 41-48 / 26-30, 256x1024 38-52 / 40-54 / 28-37,
#: 5000x100 52-64 / 42-61 / 36-42, 1000x1000 80-128 / 67-125 / 59-72 (this machine is noisy).
MIN_ELEMENTS = 1 << 18
#: C = op(A) @ op(B), A and B row-major matrices, op a transpose or not: the operands are
#: (layout, A[, A's offset], B[, B's offset]), layout an int32 [m, k, n, flags] with C m x n,
#: flags' bits TRANSPOSED_A (A is stored k x m), TRANSPOSED_B (B is stored n x k), OFFSET_A,
#: OFFSET_B (an int32 offset in elements follows the matrix, which is then the memory from
#: the 64-byte boundary below it: a view). numpy's BLAS multiplies misaligned arguments where
#: they are, where XLA's dot copies them first (a large argument at 16 mod 64, as numpy keeps
#: them), and runs faster: measured, float64, 64-byte aligned operands, µs, numpy / XLA's dot:
#: 256x1024 @ 1024x1024 3610 / 4041, 256x784 @ 784x200 651 / 738, 256x200 @ 200x100 118 / 169;
#: float32 1820 / 1997, 305 / 455, 52 / 84.
GEMM = "autograd_xla_gemm"
TRANSPOSED_A, TRANSPOSED_B, OFFSET_A, OFFSET_B = 1, 2, 4, 8
#: The fewest multiply-adds (m * k * n) of a matrix product lowering gives BLAS; None: never.
GEMM_MIN_PRODUCT = 1 << 20
#: Whether BLAS multiplies a program's matrices (GEMM) only where each of the products it
#: would take reads a large argument (lowering.LARGE_ARRAY_BYTES) where numpy keeps it, else
#: XLA multiplies them all (lowering.emit). What BLAS saves is the copy XLA's dot makes of a
#: misaligned matrix, and a program switching between OpenBLAS's threads and XLA's pays for
#: it, as they spin after their work. Measured (ms a call, float64, arguments at 16 mod 64,
#: each program alone; first programs, legacy emitters, BLAS / XLA): the SeLU layer, its one
#: product reading its 8 MiB weights, 7.8 / 9.1, its gradient 13.7 / 15.3; the MLP step, 5
#: products, 3 reading no argument, 4.15 / 3.63; the demo's classifier (its images closed
#: over) 13.7 / 11.8. BLAS for the MLP step's two products that read its arguments and XLA
#: for the three others took longer than either (default emitters: 3.27-3.58 against
#: 2.91-3.08 and 2.97-3.13). False: BLAS takes every product it can.
GEMM_ALONE = True
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: Complex matrix products go to BLAS (cblas_zgemm, cgemm) whatever they read, from this many
#: multiply-adds: XLA:CPU's complex dot runs on one thread and slower than OpenBLAS even there.
#: Measured (ms, complex128, n x n @ n x n, numpy / XLA's dot; 2 cores): n = 64 0.030 / 0.092,
#: 128 0.142 / 0.601, 194 0.520 / 1.54, 400 3.51 / 11.5, 800 25.3 / 76.7; on one OpenBLAS thread
#: 194 0.84 / 1.75, 800 51.3 / 78.9; complex64 alike.
COMPLEX = (np.dtype(np.complex64), np.dtype(np.complex128))
COMPLEX_MIN_PRODUCT = 1 << 15

_P = ctypes.c_void_p
_S32, _F32, _F64, _C64, _C128 = 4, 11, 12, 15, 18  # XLA_FFI_DataType
_EXECUTE = 3  # XLA_FFI_ExecutionStage
_METADATA = 1  # XLA_FFI_Extension_Type
_INVALID_ARGUMENT = 3  # XLA_FFI_Error_Code


class _Extension(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", _P)]


class _ApiVersion(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("major", ctypes.c_int),
                ("minor", ctypes.c_int)]


class _Metadata(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("api_version", _ApiVersion), ("traits", ctypes.c_uint32),
                ("state_type_id", ctypes.c_int64)]


class _MetadataExtension(ctypes.Structure):
    _fields_ = [("extension_base", _Extension), ("metadata", ctypes.POINTER(_Metadata))]


class _Buffer(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("dtype", ctypes.c_int), ("data", _P),
                ("rank", ctypes.c_int64), ("dims", ctypes.POINTER(ctypes.c_int64))]


class _Values(ctypes.Structure):  # XLA_FFI_Args and XLA_FFI_Rets
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("size", ctypes.c_int64), ("types", _P),
                ("values", ctypes.POINTER(_P))]


class _Attrs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("size", ctypes.c_int64), ("types", _P),
                ("names", _P), ("attrs", _P)]


class _CallFrame(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("api", _P), ("ctx", _P),
                ("stage", ctypes.c_int), ("args", _Values), ("rets", _Values), ("attrs", _Attrs), ("future", _P)]


class _ErrorCreateArgs(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("message", ctypes.c_char_p),
                ("errc", ctypes.c_int)]


class _Api(ctypes.Structure):  # its head: XLA_FFI_Error_Create is the first function
    _fields_ = [("struct_size", ctypes.c_size_t), ("extension_start", _P), ("api_version", _ApiVersion),
                ("internal_api", _P), ("error_create", ctypes.CFUNCTYPE(_P, ctypes.POINTER(_ErrorCreateArgs)))]


#: XLA_FFI_DataType -> numpy dtype, of the buffers a handler multiplies
_DTYPES = {_F32: np.dtype(np.float32), _F64: np.dtype(np.float64), _C64: np.dtype(np.complex64),
           _C128: np.dtype(np.complex128)}


class _Memory:
    """Memory at an address, as numpy reads it (`__array_interface__`)."""

    __slots__ = ("__array_interface__",)


#: (address, shape, dtype) -> an ndarray of the memory there; such an array does not own it,
#: and is used only while a handler runs, when that memory is its operand's
_arrays = {}
ARRAYS_KEPT = 256


def _array(address, shape, dtype):
    key = (address, shape, dtype)
    array = _arrays.get(key)
    if array is None:
        memory = _Memory()
        memory.__array_interface__ = {"shape": shape, "typestr": dtype.str, "data": (address, False), "version": 3}
        array = np.asarray(memory)
        if len(_arrays) >= ARRAYS_KEPT:
            _arrays.clear()
        _arrays[key] = array
    return array


def _metadata_asked(address):
    """Whether the call is XLA's question which FFI version the handler speaks (asked when it
    is registered, with a metadata extension), answered."""
    if not address or _Extension.from_address(address).type != _METADATA:
        return False
    version = _MetadataExtension.from_address(address).metadata.contents.api_version
    version.major, version.minor = 0, 1
    return True


def _error(frame, message):
    create = _Api.from_address(frame.api).error_create
    args = _ErrorCreateArgs(ctypes.sizeof(_ErrorCreateArgs), None, message.encode(), _INVALID_ARGUMENT)
    return create(ctypes.byref(args))


def _handler(target):
    """The FFI handler of ROWS, COLUMNS or SYMMETRIC (`target`): numpy's own np.dot on the
    buffers, so that the product runs in the BLAS (and the threads) numpy's calls around it
    use. Two OpenBLAS libraries, scipy's called here and numpy's, measured slower by 15-30 µs
    a 1000x1000 product: the threads of the one just used still spin while the other's work.
    (numpy has no symv: SYMMETRIC's product is ROWS'.)"""
    columns = target == COLUMNS

    def gemv(address):
        frame = _CallFrame.from_address(address)
        if _metadata_asked(frame.extension_start) or frame.stage != _EXECUTE:
            return None
        args, n_args = frame.args.values, frame.args.size
        x, y = _Buffer.from_address(args[n_args - 1]), _Buffer.from_address(frame.rets.values[0])
        dtype = _DTYPES.get(y.dtype)
        if dtype is None or dtype.kind == "c" or x.dtype != y.dtype or n_args not in (2, 3):
            return _error(frame, f"{target}: float32 or float64 (matrix[, offset], vector) "
                                 f"expected, got {n_args} operands of types {x.dtype} -> {y.dtype}")
        data = _Buffer.from_address(args[0]).data
        if n_args == 3:
            data += ctypes.c_int32.from_address(_Buffer.from_address(args[1]).data).value * dtype.itemsize
        n_x, n_y = x.dims[0], y.dims[0]
        if target == SYMMETRIC and n_x != n_y:
            return _error(frame, f"{target}: a square matrix expected, got one of {n_y} x {n_x}")
        try:  # an exception must not escape: ctypes would print it and XLA see success
            vector, result = _array(x.data, (n_x,), dtype), _array(y.data, (n_y,), dtype)
            if columns:
                np.dot(vector, _array(data, (n_x, n_y), dtype), out=result)
            else:
                np.dot(_array(data, (n_y, n_x), dtype), vector, out=result)
        except Exception as e:
            return _error(frame, f"{target}: {type(e).__name__}: {e}")
        return None
    return ctypes.CFUNCTYPE(_P, _P)(gemv)


def _gemm(address):
    """The FFI handler of GEMM: np.dot(op(A), op(B), out=C) on the buffers, as _handler's."""
    frame = _CallFrame.from_address(address)
    if _metadata_asked(frame.extension_start) or frame.stage != _EXECUTE:
        return None
    args, n_args = frame.args.values, frame.args.size
    out = _Buffer.from_address(frame.rets.values[0])
    dtype = _DTYPES.get(out.dtype)
    layout = _Buffer.from_address(args[0])
    if dtype is None or n_args < 3 or layout.dtype != _S32 or layout.rank != 1 or layout.dims[0] != 4:
        return _error(frame, f"{GEMM}: (int32 layout[4], A[, offset], B[, offset]) -> float32, float64, "
                             f"complex64 or complex128 expected, got {n_args} operands -> type {out.dtype}")
    m, k, n, flags = (ctypes.c_int32 * 4).from_address(layout.data)
    wanted = 3 + bool(flags & OFFSET_A) + bool(flags & OFFSET_B)
    if n_args != wanted or out.rank != 2 or (out.dims[0], out.dims[1]) != (m, n):
        return _error(frame, f"{GEMM}: layout {[m, k, n, flags]} does not fit {n_args} operands -> "
                             f"{[out.dims[d] for d in range(out.rank)]}")
    matrices, at = [], 1
    for rows, cols, transposed, offset in ((m, k, flags & TRANSPOSED_A, flags & OFFSET_A),
                                           (k, n, flags & TRANSPOSED_B, flags & OFFSET_B)):
        buffer = _Buffer.from_address(args[at])
        if buffer.dtype != out.dtype:
            return _error(frame, f"{GEMM}: operand {at} has type {buffer.dtype}, the result {out.dtype}")
        data, at = buffer.data, at + 1
        if offset:
            data += ctypes.c_int32.from_address(_Buffer.from_address(args[at]).data).value * dtype.itemsize
            at += 1
        matrices.append(_array(data, (cols, rows), dtype).T if transposed else _array(data, (rows, cols), dtype))
    try:  # an exception must not escape: ctypes would print it and XLA see success
        np.dot(matrices[0], matrices[1], out=_array(out.data, (m, n), dtype))
    except Exception as e:
        return _error(frame, f"{GEMM}: {type(e).__name__}: {e}")
    return None


#: "0": the Python handlers run even where the C ones are built (read when they are registered)
NATIVE_ENV = "AUTOGRAD_XLA_NATIVE_BLAS"
#: The candidate names of numpy's cblas functions: (prefix, suffix, whether ints are 64-bit);
#: numpy 2's wheels link scipy-openblas64 (scipy_cblas_dgemv64_).
_CBLAS_NAMES = (("scipy_cblas_", "64_", True), ("cblas_", "64_", True), ("scipy_cblas_", "", False),
                ("cblas_", "", False))

_handlers = {}  # target -> its handler (a ctypes function or a capsule), kept alive as long as XLA may call it
#: Which handlers are registered: "c" or "python" (None before `register`)
implementation = None


#: The cblas functions the C handlers call, in the order _blas.handlers takes them
_CBLAS_FUNCTIONS = ("dgemv", "sgemv", "dgemm", "sgemm", "dsymv", "ssymv", "zgemm", "cgemm")


#: numpy's OpenBLAS runs these products on two threads, which wait for each other: where other
#: processes hold the cores, a product waits for a scheduler tick. Logistic regression's value
#: (X 5000x100 float64, an argument; ms a call, 400 calls, the load average 7 on 2 cores; BLAS
#: on OpenBLAS's 2 threads / on one / XLA's dot): median 0.134 / 0.228 / 0.22, mean 2.0-2.2 /
#: 0.36 / 0.59 (a tenth of the 2-thread calls took ~12 ms); a ladder kept such a gradient's
#: program and ran it at 24 ms a call, against 0.38 for XLA's dot. On a quiet machine two
#: threads win (the measurements at MIN_ELEMENTS). So the C handlers time each product, and
#: one that took more than STALL_SECONDS and STALL_FACTOR times the fastest rate seen for its
#: kind (seconds per element) runs the products of the next SERIAL_SECONDS on one thread
#: (_blas.c's product_end); then two threads are tried again, and each stall in a row doubles
#: the time, up to SERIAL_MOST_SECONDS: a stall of 8-78 ms once a second cost that gradient
#: 0.54-0.81 ms a call on average against 0.38-0.39 on one thread.
STALL_SECONDS = 1e-3
STALL_FACTOR = 10.0
SERIAL_SECONDS = 1.0
SERIAL_MOST_SECONDS = 30.0


def _threads(lib):
    """(set_num_threads, get_num_threads) addresses of the OpenBLAS `lib` (a ctypes.CDLL)
    links, or None (another BLAS: MKL's, Accelerate's)."""
    for names in _THREAD_FUNCTIONS:
        try:
            return tuple(ctypes.cast(getattr(lib, name), _P).value for name in names)
        except AttributeError:
            continue
    return None


def _cblas():
    """_CBLAS_FUNCTIONS' addresses in the BLAS numpy's own _multiarray_umath links
    (dlsym on its handle searches the libraries it depends on), whether their ints are
    64-bit, and its thread functions (_threads); None where none of _CBLAS_NAMES is found."""
    try:
        lib = ctypes.CDLL(np._core._multiarray_umath.__file__)
    except (AttributeError, OSError):
        return None
    for prefix, suffix, wide in _CBLAS_NAMES:
        try:
            return [ctypes.cast(getattr(lib, f"{prefix}{name}{suffix}"), _P).value
                    for name in _CBLAS_FUNCTIONS], wide, _threads(lib)
        except AttributeError:
            continue
    return None


def _native_handlers():
    """{target: capsule} of the C handlers, or None: not built, turned off, or no cblas found."""
    if native is None or os.environ.get(NATIVE_ENV, "1") == "0":
        return None
    found = _cblas()
    if found is None:
        return None
    functions, wide, threads = found
    if threads is not None:
        native.stalls(*threads, STALL_SECONDS, STALL_FACTOR, SERIAL_SECONDS, SERIAL_MOST_SECONDS)
    targets = (ROWS, COLUMNS, GEMM, SYMMETRIC)
    return dict(zip(targets, native.handlers(targets, functions, wide)))


def register():
    """Register ROWS, COLUMNS, GEMM and SYMMETRIC with XLA:CPU (once per process, before the
    first compile or executable load that names them): the C handlers where they are built,
    else Python's."""
    global implementation
    if _handlers:
        return
    capsules = _native_handlers()
    implementation = "python" if capsules is None else "c"
    if capsules is None:
        new_capsule = ctypes.pythonapi.PyCapsule_New
        new_capsule.restype, new_capsule.argtypes = ctypes.py_object, [_P, ctypes.c_char_p, _P]
        capsules = {}
        for target, handler in ((ROWS, _handler(ROWS)), (COLUMNS, _handler(COLUMNS)),
                                (GEMM, ctypes.CFUNCTYPE(_P, _P)(_gemm)), (SYMMETRIC, _handler(SYMMETRIC))):
            _handlers[target] = handler
            capsules[target] = new_capsule(ctypes.cast(handler, _P).value, b"xla._CUSTOM_CALL_TARGET", None)
    for target, capsule in capsules.items():
        _handlers.setdefault(target, capsule)
        xc.register_custom_call_target(target, capsule, platform="cpu", api_version=1)


# ----- LAPACK on one BLAS thread -----------------------------------------------------------------
#: The prefix of a LAPACK kernel's target (jaxlib's lapack_*_ffi) called with the BLAS it runs
#: in (scipy's OpenBLAS, which jaxlib's LAPACK binds) on one thread: XLA:CPU's threads run the
#: program's other work on the same cores, and OpenBLAS's, which spin after their work for as
#: long again, stall the two in turn. Measured (ms a call, mean over 300 calls, 2 cores, the
#: load average 0.4-2; numpy / jit_ps with OpenBLAS's two threads / jit_ps with one):
#: np.sum(np.linalg.solve(S, y)), S 4x6x6, y 1x6x5000: 1.4-2.3 / 2.8-45 (medians 0.75-0.8) /
#: 1.3-1.7; n x n with n right-hand sides, n = 160: 0.89 / 98 / 0.92; n = 250: 1.7 / 4.6 / 2.7;
#: n = 500: 9.5-21 / 11-32 / 15-17. So the kernels of calls smaller than SERIAL_BELOW run on
#: one thread (`lapack_target`), larger ones on the library's threads.
SERIAL = "autograd_xla_serial_"
#: Multiply-adds a LAPACK kernel does on one matrix (lapack_work) from which it keeps the BLAS's
#: threads (n = 250's solve: 3 x 250^3 = 4.7e7; n = 500's 3.8e8); None: always one thread.
SERIAL_BELOW = 1 << 27
#: The thread functions of an OpenBLAS: (set, get) names, scipy's own OpenBLAS builds first
#: (numpy's links scipy_openblas_*64_; jaxlib's LAPACK binds scipy's).
_THREAD_FUNCTIONS = (("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
                     ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
                     ("openblas_set_num_threads", "openblas_get_num_threads"))
#: Whether SERIAL's targets are registered (the C handlers built, an OpenBLAS found)
serial_registered = False
_serial_handlers = {}  # SERIAL's target -> its capsule, kept alive as long as XLA may call it


def _lapack_threads():
    """(set_num_threads, get_num_threads) addresses of the OpenBLAS scipy's LAPACK runs in, or
    None (another BLAS)."""
    try:
        from scipy.linalg import cython_lapack
        return _threads(ctypes.CDLL(cython_lapack.__file__))
    except (ImportError, OSError):
        return None


_lapack_registered = False
_lapack_lock = threading.Lock()


def register_lapack():
    """jaxlib's LAPACK kernels (lapack_*_ffi custom calls) for CPU linear algebra, once, when
    the first program calling one is lowered (lapack_target): `_lapack.initialize()` binds
    scipy's LAPACK symbols (calling a kernel without it crashes), which imports scipy.linalg,
    0.2-0.4 s of a first call (measured) that a program without linear algebra never needs.
    Each is registered a second time under SERIAL's name, run on one BLAS thread."""
    global _lapack_registered
    if _lapack_registered:
        return
    with _lapack_lock:  # (the compile thread lowers a ladder's programs too)
        if _lapack_registered:
            return
        from jaxlib import lapack

        lapack._lapack.initialize()
        for platform, targets in lapack.registrations().items():
            for name, capsule, api_version in targets:
                xc.register_custom_call_target(name, capsule, platform=platform, api_version=api_version)
        register_serial(lapack.registrations().get("cpu", []))
        _lapack_registered = True


def register_serial(registrations):
    """Register SERIAL + name for each of jaxlib's CPU LAPACK kernels (name, capsule,
    api_version): where the C handlers are built and an OpenBLAS is found; else none, and
    lapack_target keeps the kernels' own names."""
    global serial_registered
    threads = _lapack_threads() if native is not None and os.environ.get(NATIVE_ENV, "1") != "0" else None
    if serial_registered or threads is None:
        return
    wrappers = native.serial([capsule for _, capsule, _ in registrations], *threads)
    for (name, _, api_version), wrapper in zip(registrations, wrappers):
        _serial_handlers[SERIAL + name] = wrapper
        xc.register_custom_call_target(SERIAL + name, wrapper, platform="cpu", api_version=api_version)
    serial_registered = True


def lapack_target(name, work):
    """The target a program calls jaxlib's LAPACK kernel `name` by, for a call doing `work`
    multiply-adds on each matrix: SERIAL's below SERIAL_BELOW, where registered (the kernels
    are registered here, before a program names them: register_lapack)."""
    register_lapack()
    small = SERIAL_BELOW is None or work < SERIAL_BELOW
    return SERIAL + name if small and serial_registered else name


def applies(matrix_shape, vector_shape, dim, dtype):
    """Whether a dot of a matrix contracting its `dim` with a vector, both of `dtype`, goes to
    BLAS: float32 or float64, the matrix at least MIN_ELEMENTS."""
    return (MIN_ELEMENTS is not None and len(matrix_shape) == 2 and len(vector_shape) == 1
            and matrix_shape[dim] == vector_shape[0] and np.prod(matrix_shape) >= MIN_ELEMENTS
            and np.dtype(dtype) in DTYPES)


def symmetric(array):
    """Whether a constant matrix may be multiplied as SYMMETRIC: square, at least MIN_ELEMENTS,
    of a dtype BLAS multiplies, and equal to its transpose bit for bit (NaNs and signed zeros
    included, so that symv, reading one triangle, meets the values gemv would). Costs a pass
    over a symmetric matrix (1 ms for 1000x1000 float64), once per program made; most others
    differ in their first row and column already."""
    if array.ndim != 2 or array.shape[0] != array.shape[1] or not applies(array.shape, array.shape[:1], 1, array.dtype):
        return False
    bits = array.view(f"u{array.itemsize}")
    return np.array_equal(bits[0], bits[:, 0]) and np.array_equal(bits, bits.T)


def multiplies(m, k, n, dtype):
    """Whether an m x k by k x n matrix product of `dtype` goes to BLAS (GEMM): float32 or
    float64, m, n > 1 (a vector's product is gemv's), at least GEMM_MIN_PRODUCT multiply-adds;
    complex64 or complex128 from COMPLEX_MIN_PRODUCT."""
    dtype = np.dtype(dtype)
    least = COMPLEX_MIN_PRODUCT if dtype in COMPLEX else GEMM_MIN_PRODUCT if dtype in DTYPES else None
    return least is not None and m > 1 and n > 1 and m * k * n >= least
