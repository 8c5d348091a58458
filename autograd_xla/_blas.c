/* blas.py's four XLA FFI handlers (ROWS, COLUMNS, GEMM, SYMMETRIC) in C: the same products, by
 * the same BLAS numpy calls (its cblas functions, whose addresses blas.py finds and passes to
 * `handlers`), without Python in the call. The Python handlers take the GIL and cost 4-5 µs
 * a call in ctypes; these cost what cblas costs. Also the handlers of ufunc_loops.py, which
 * call a numpy ufunc's own inner loop (scipy.special's) on a custom call's buffers.
 *
 * The call frame is read as XLA's C FFI (xla/ffi/api/c_api.h of jaxlib 0.10.2, which is
 * pinned) lays it out; only the fields used are declared, in the order the header has them.
 * Each handler checks its operands as blas.py's do and answers with the same error messages. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

enum { S32 = 4, S64 = 5, F32 = 11, F64 = 12, C64 = 15, C128 = 18 };  /* XLA_FFI_DataType */
enum { EXTENSION_METADATA = 1, STAGE_EXECUTE = 3, INVALID_ARGUMENT = 3 };
enum { TRANSPOSED_A = 1, TRANSPOSED_B = 2, OFFSET_A = 4, OFFSET_B = 8 };  /* blas.py's flags */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, UPPER = 121 };  /* CBLAS_ORDER, _TRANSPOSE, _UPLO */
enum { ROWS_KIND, COLUMNS_KIND, SYMMETRIC_KIND };  /* the matrix-vector products */

typedef struct Extension { size_t struct_size; int type; struct Extension *next; } Extension;
typedef struct { size_t struct_size; Extension *extension_start; int major, minor; } ApiVersion;
typedef struct { size_t struct_size; ApiVersion api_version; uint32_t traits; int64_t state_type_id; } Metadata;
typedef struct { Extension base; Metadata *metadata; } MetadataExtension;
typedef struct { size_t struct_size; Extension *extension_start; int dtype; void *data; int64_t rank;
                 int64_t *dims; } Buffer;
typedef struct { size_t struct_size; Extension *extension_start; int64_t size; void *types; void **values; } Values;
typedef struct { size_t struct_size; Extension *extension_start; int64_t size; void *types; void *names;
                 void *attrs; } Attrs;
typedef struct { size_t struct_size; Extension *extension_start; const char *message; int errc; } ErrorArgs;
typedef void *(*ErrorCreate)(ErrorArgs *);
typedef struct { size_t struct_size; Extension *extension_start; ApiVersion api_version; void *internal_api;
                 ErrorCreate error_create; } Api;
typedef struct { size_t struct_size; Extension *extension_start; const Api *api; void *ctx; int stage;
                 Values args, rets; Attrs attrs; void *future; } CallFrame;

/* cblas_?gemv / cblas_?gemm / cblas_?symv with ints of type I and floats of type F; CALL passes
 * them 64-bit ints where the library's are (ILP64, numpy's scipy-openblas64), else 32-bit ones */
#define GEMV_T(I, F) void (*)(int, int, I, I, F, const void *, I, const void *, I, F, void *, I)
#define SYMV_T(I, F) void (*)(int, int, I, F, const void *, I, const void *, I, F, void *, I)
#define GEMM_T(I, F) void (*)(int, int, int, I, I, I, F, const void *, I, const void *, I, F, void *, I)
/* cblas_zgemm / cblas_cgemm: alpha and beta passed by address (F: const void *) */
#define CALL(T, F, fn, ...) (ilp64 ? ((T(int64_t, F))(fn))(__VA_ARGS__) : ((T(int32_t, F))(fn))(__VA_ARGS__))

static void *dgemv, *sgemv, *dgemm, *sgemm, *dsymv, *ssymv, *zgemm, *cgemm;
static int ilp64;

/* the targets' names, for the error messages: blas.ROWS, blas.COLUMNS, blas.GEMM, blas.SYMMETRIC */
static char ROWS[64], COLUMNS[64], GEMM[64], SYMMETRIC[64];

static void *error(CallFrame *frame, const char *message) {
    ErrorArgs args = {sizeof(ErrorArgs), NULL, message, INVALID_ARGUMENT};
    return frame->api->error_create(&args);
}

/* Whether the call is XLA's question which FFI version the handler speaks (asked when it is
 * registered, with a metadata extension), answered; or a stage other than execution. */
static int not_a_call(CallFrame *frame) {
    Extension *e = frame->extension_start;
    if (e != NULL && e->type == EXTENSION_METADATA) {
        ApiVersion *version = &((MetadataExtension *)e)->metadata->api_version;
        version->major = 0;
        version->minor = 1;
        return 1;
    }
    return frame->stage != STAGE_EXECUTE;
}

static size_t itemsize(int dtype) { return dtype == C128 ? 16 : dtype == F64 || dtype == C64 ? 8 : 4; }

/* ----- a BLAS library on one thread ---------------------------------------------------------
 * One thread while any call so wants: the first such call running sets the library to one
 * thread, the last gives it back the threads it had (a count under a mutex, so that calls on
 * several threads at once restore what was there before the first). */
typedef struct { void (*set)(int); int (*get)(void); pthread_mutex_t lock; int running, before; } Threads;
static Threads numpy_threads = {NULL, NULL, PTHREAD_MUTEX_INITIALIZER, 0, 0};   /* numpy's BLAS: these products */
static Threads lapack_threads = {NULL, NULL, PTHREAD_MUTEX_INITIALIZER, 0, 0};  /* scipy's: jaxlib's LAPACK */

static void one_thread(Threads *t) {
    pthread_mutex_lock(&t->lock);
    if (t->running++ == 0) {
        t->before = t->get();
        if (t->before > 1) t->set(1);
    }
    pthread_mutex_unlock(&t->lock);
}

static void threads_back(Threads *t) {
    pthread_mutex_lock(&t->lock);
    if (--t->running == 0 && t->before > 1) t->set(t->before);
    pthread_mutex_unlock(&t->lock);
}

/* ----- numpy's BLAS on one thread while the cores are busy (blas.py's STALL_SECONDS) ---------
 * OpenBLAS's threads wait for each other; where another process holds a core, a product on
 * two threads waits for a scheduler tick (4-33 ms for a 40 µs product). A product that took
 * more than stall_seconds and stall_factor times the fastest rate (seconds per element) seen
 * for its kind marks the cores busy: the products of the next serial_seconds run on one
 * thread, then the library's threads are tried again; each stall in a row doubles that, up to
 * serial_most seconds (a stall of up to 78 ms once a second cost a loaded logistic regression
 * 0.81 ms a call on average against 0.39 on one thread). A kind's first product runs on one
 * thread, which does not stall, so that the fastest rate is never a stall's (on a busy
 * machine every product on two threads may stall: 8 ms a call for logistic regression's). */
static double stall_seconds, stall_factor, serial_seconds, serial_most;
static double serial_next;                /* the seconds the next stall puts the products on one thread */
static double fastest[2] = {1e30, 1e30};  /* seconds per element: matrix-vector, matrix-matrix */
static int probed[2];                     /* whether a kind's first product has run */
static double serial_until;               /* CLOCK_MONOTONIC seconds */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Before a product of a kind (matrices: 0 matrix-vector, 1 matrix-matrix): its start, and
 * whether it runs on one thread (*serial). */
static double product_start(int matrices, int *serial) {
    double start = now(), until;
    __atomic_load(&serial_until, &until, __ATOMIC_RELAXED);
    *serial = numpy_threads.set != NULL && (start < until || !__atomic_exchange_n(&probed[matrices], 1, __ATOMIC_RELAXED));
    if (*serial) one_thread(&numpy_threads);
    return start;
}

/* After a product of `elements` (matrix-vector: the matrix's; matrix-matrix: m k n). */
static void product_end(double start, int serial, int matrices, double elements) {
    if (numpy_threads.set == NULL) return;
    double end = now(), took = end - start, best;
    if (serial) threads_back(&numpy_threads);
    __atomic_load(&fastest[matrices], &best, __ATOMIC_RELAXED);
    if (took < best * elements) {
        double rate = took / elements;
        __atomic_store(&fastest[matrices], &rate, __ATOMIC_RELAXED);
    } else if (!serial && took > stall_seconds && took > stall_factor * best * elements) {
        double period, until, next;
        __atomic_load(&serial_next, &period, __ATOMIC_RELAXED);
        until = end + period, next = period * 2 < serial_most ? period * 2 : serial_most;
        __atomic_store(&serial_until, &until, __ATOMIC_RELAXED);
        __atomic_store(&serial_next, &next, __ATOMIC_RELAXED);
        return;
    }
    if (!serial) __atomic_store(&serial_next, &serial_seconds, __ATOMIC_RELAXED);
}

/* y = A x (rows), y = x A (columns) or y = A x with A symmetric (only its upper triangle read),
 * A row-major rows x cols; operands (A[, offset], x) */
static void *gemv(CallFrame *frame, int kind) {
    if (not_a_call(frame)) return NULL;
    int64_t n_args = frame->args.size;
    int columns = kind == COLUMNS_KIND;
    const char *name = kind == SYMMETRIC_KIND ? SYMMETRIC : columns ? COLUMNS : ROWS;
    Buffer *x = frame->args.values[n_args - 1], *y = frame->rets.values[0];
    if ((y->dtype != F32 && y->dtype != F64) || x->dtype != y->dtype || (n_args != 2 && n_args != 3)) {
        char message[200];
        snprintf(message, sizeof message, "%s: float32 or float64 (matrix[, offset], vector) expected, got %lld "
                 "operands of types %d -> %d", name, (long long)n_args, x->dtype, y->dtype);
        return error(frame, message);
    }
    char *a = ((Buffer *)frame->args.values[0])->data;
    if (n_args == 3) a += *(int32_t *)((Buffer *)frame->args.values[1])->data * itemsize(y->dtype);
    int64_t n_x = x->dims[0], n_y = y->dims[0];
    int64_t rows = columns ? n_x : n_y, cols = columns ? n_y : n_x;
    int trans = columns ? TRANS : NO_TRANS;
    if (rows == 0 || cols == 0) {  /* BLAS refuses a leading dimension of 0 */
        memset(y->data, 0, n_y * itemsize(y->dtype));
        return NULL;
    }
    if (kind == SYMMETRIC_KIND) {
        if (n_x != n_y) {
            char message[200];
            snprintf(message, sizeof message, "%s: a square matrix expected, got one of %lld x %lld", name,
                     (long long)n_y, (long long)n_x);
            return error(frame, message);
        }
    }
    int serial;
    double start = product_start(0, &serial);
    if (kind == SYMMETRIC_KIND) {
        if (y->dtype == F64)
            CALL(SYMV_T, double, dsymv, ROW_MAJOR, UPPER, n_x, 1.0, a, n_x, x->data, 1, 0.0, y->data, 1);
        else
            CALL(SYMV_T, float, ssymv, ROW_MAJOR, UPPER, n_x, 1.0f, a, n_x, x->data, 1, 0.0f, y->data, 1);
    } else if (y->dtype == F64)
        CALL(GEMV_T, double, dgemv, ROW_MAJOR, trans, rows, cols, 1.0, a, cols, x->data, 1, 0.0, y->data, 1);
    else
        CALL(GEMV_T, float, sgemv, ROW_MAJOR, trans, rows, cols, 1.0f, a, cols, x->data, 1, 0.0f, y->data, 1);
    product_end(start, serial, 0, (double)rows * cols);
    return NULL;
}

static void *gemv_rows(CallFrame *frame) { return gemv(frame, ROWS_KIND); }
static void *gemv_columns(CallFrame *frame) { return gemv(frame, COLUMNS_KIND); }
static void *symv(CallFrame *frame) { return gemv(frame, SYMMETRIC_KIND); }

/* C = op(A) op(B); operands (layout [m, k, n, flags], A[, offset], B[, offset]) as blas.GEMM's */
static void *gemm(CallFrame *frame) {
    if (not_a_call(frame)) return NULL;
    int64_t n_args = frame->args.size;
    Buffer *out = frame->rets.values[0], *layout = frame->args.values[0];
    char message[200];
    int complex = out->dtype == C64 || out->dtype == C128;
    if ((out->dtype != F32 && out->dtype != F64 && !complex) || n_args < 3 || layout->dtype != S32
        || layout->rank != 1 || layout->dims[0] != 4) {
        snprintf(message, sizeof message, "%s: (int32 layout[4], A[, offset], B[, offset]) -> float32, float64, "
                 "complex64 or complex128 expected, got %lld operands -> type %d", GEMM, (long long)n_args,
                 out->dtype);
        return error(frame, message);
    }
    int32_t *l = layout->data;
    int64_t m = l[0], k = l[1], n = l[2];
    int flags = l[3];
    int64_t wanted = 3 + !!(flags & OFFSET_A) + !!(flags & OFFSET_B);
    if (n_args != wanted || out->rank != 2 || out->dims[0] != m || out->dims[1] != n) {
        snprintf(message, sizeof message, "%s: layout [%lld, %lld, %lld, %d] does not fit %lld operands -> a result "
                 "of rank %lld", GEMM, (long long)m, (long long)k, (long long)n, flags, (long long)n_args,
                 (long long)out->rank);
        return error(frame, message);
    }
    char *matrices[2];
    int at = 1;
    for (int i = 0; i < 2; i++) {
        Buffer *buffer = frame->args.values[at++];
        if (buffer->dtype != out->dtype) {
            snprintf(message, sizeof message, "%s: operand %d has type %d, the result %d", GEMM, at - 1,
                     buffer->dtype, out->dtype);
            return error(frame, message);
        }
        matrices[i] = buffer->data;
        if (flags & (i ? OFFSET_B : OFFSET_A))
            matrices[i] += *(int32_t *)((Buffer *)frame->args.values[at++])->data * itemsize(out->dtype);
    }
    if (m == 0 || n == 0) return NULL;
    if (k == 0) {
        memset(out->data, 0, m * n * itemsize(out->dtype));
        return NULL;
    }
    int ta = flags & TRANSPOSED_A ? TRANS : NO_TRANS, tb = flags & TRANSPOSED_B ? TRANS : NO_TRANS;
    int64_t lda = flags & TRANSPOSED_A ? m : k, ldb = flags & TRANSPOSED_B ? k : n;
    int serial;
    double start = product_start(1, &serial);
    static const double one[2] = {1.0, 0.0}, zero[2] = {0.0, 0.0};
    static const float one_f[2] = {1.0f, 0.0f}, zero_f[2] = {0.0f, 0.0f};
    if (out->dtype == F64)
        CALL(GEMM_T, double, dgemm, ROW_MAJOR, ta, tb, m, n, k, 1.0, matrices[0], lda, matrices[1], ldb, 0.0, out->data, n);
    else if (out->dtype == F32)
        CALL(GEMM_T, float, sgemm, ROW_MAJOR, ta, tb, m, n, k, 1.0f, matrices[0], lda, matrices[1], ldb, 0.0f, out->data,
             n);
    else if (out->dtype == C128)
        CALL(GEMM_T, const void *, zgemm, ROW_MAJOR, ta, tb, m, n, k, one, matrices[0], lda, matrices[1], ldb, zero,
             out->data, n);
    else
        CALL(GEMM_T, const void *, cgemm, ROW_MAJOR, ta, tb, m, n, k, one_f, matrices[0], lda, matrices[1], ldb, zero_f,
             out->data, n);
    product_end(start, serial, 1, (double)m * k * n * (complex ? 4 : 1));  /* (a complex multiply-add: four) */
    return NULL;
}

/* handlers((rows, columns, gemm, symmetric), (dgemv, sgemv, dgemm, sgemm, dsymv, ssymv, zgemm, cgemm), ilp64):
 * the targets' names and the cblas functions' addresses; returns the four handlers' capsules, in
 * the names' order, for xla_client.register_custom_call_target. */
static PyObject *handlers(PyObject *self, PyObject *args) {
    const char *rows, *columns, *product, *symmetric;
    unsigned long long d_gemv, s_gemv, d_gemm, s_gemm, d_symv, s_symv, z_gemm, c_gemm;
    int wide;
    if (!PyArg_ParseTuple(args, "(ssss)(KKKKKKKK)p", &rows, &columns, &product, &symmetric, &d_gemv, &s_gemv, &d_gemm,
                          &s_gemm, &d_symv, &s_symv, &z_gemm, &c_gemm, &wide))
        return NULL;
    if (!d_gemv || !s_gemv || !d_gemm || !s_gemm || !d_symv || !s_symv || !z_gemm || !c_gemm) {
        PyErr_SetString(PyExc_ValueError, "a cblas function's address is 0");
        return NULL;
    }
    snprintf(ROWS, sizeof ROWS, "%s", rows);
    snprintf(COLUMNS, sizeof COLUMNS, "%s", columns);
    snprintf(GEMM, sizeof GEMM, "%s", product);
    snprintf(SYMMETRIC, sizeof SYMMETRIC, "%s", symmetric);
    dgemv = (void *)(uintptr_t)d_gemv, sgemv = (void *)(uintptr_t)s_gemv;
    dgemm = (void *)(uintptr_t)d_gemm, sgemm = (void *)(uintptr_t)s_gemm;
    dsymv = (void *)(uintptr_t)d_symv, ssymv = (void *)(uintptr_t)s_symv;
    zgemm = (void *)(uintptr_t)z_gemm, cgemm = (void *)(uintptr_t)c_gemm;
    ilp64 = wide;
    return Py_BuildValue("(NNNN)", PyCapsule_New((void *)gemv_rows, "xla._CUSTOM_CALL_TARGET", NULL),
                         PyCapsule_New((void *)gemv_columns, "xla._CUSTOM_CALL_TARGET", NULL),
                         PyCapsule_New((void *)gemm, "xla._CUSTOM_CALL_TARGET", NULL),
                         PyCapsule_New((void *)symv, "xla._CUSTOM_CALL_TARGET", NULL));
}

/* ----- LAPACK on one BLAS thread (blas.py's SERIAL) -----------------------------------------
 * A wrapper handler per wrapped target: it calls the wrapped handler (jaxlib's lapack_*_ffi)
 * with the same call frame, the LAPACK's OpenBLAS on one thread. XLA's frame carries no hint
 * of which target was called, so each wrapped target gets a trampoline of its own. */
typedef void *(*Handler)(CallFrame *);
enum { SERIAL_SLOTS = 128 };
static Handler wrapped[SERIAL_SLOTS];
static int serial_count;

static void *serial_call(int slot, CallFrame *frame) {
    if (frame->stage != STAGE_EXECUTE || (frame->extension_start != NULL
                                          && frame->extension_start->type == EXTENSION_METADATA))
        return wrapped[slot](frame);  /* XLA's questions (version, stages) go to the kernel itself */
    one_thread(&lapack_threads);
    void *result = wrapped[slot](frame);
    threads_back(&lapack_threads);
    return result;
}

/* 16 rows of 8 trampolines: serial_<row>_<column> calls slot 8 row + column */
#define SLOT(r, c) static void *serial_##r##_##c(CallFrame *f) { return serial_call(8 * r + c, f); }
#define ROW(r) SLOT(r, 0) SLOT(r, 1) SLOT(r, 2) SLOT(r, 3) SLOT(r, 4) SLOT(r, 5) SLOT(r, 6) SLOT(r, 7)
ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7) ROW(8) ROW(9) ROW(10) ROW(11) ROW(12) ROW(13) ROW(14) ROW(15)
#define ENTRIES(r) serial_##r##_0, serial_##r##_1, serial_##r##_2, serial_##r##_3, serial_##r##_4, serial_##r##_5, \
                   serial_##r##_6, serial_##r##_7
static Handler trampolines[SERIAL_SLOTS] = {ENTRIES(0), ENTRIES(1), ENTRIES(2), ENTRIES(3), ENTRIES(4), ENTRIES(5),
                                            ENTRIES(6), ENTRIES(7), ENTRIES(8), ENTRIES(9), ENTRIES(10), ENTRIES(11),
                                            ENTRIES(12), ENTRIES(13), ENTRIES(14), ENTRIES(15)};

/* serial(capsules, set_num_threads, get_num_threads): a capsule per given handler capsule, whose
 * handler calls it with the library of those two functions' addresses on one thread. */
static PyObject *serial(PyObject *self, PyObject *args) {
    PyObject *capsules;
    unsigned long long set_address, get_address;
    if (!PyArg_ParseTuple(args, "O!KK", &PyList_Type, &capsules, &set_address, &get_address)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(capsules);
    if (!set_address || !get_address) {
        PyErr_SetString(PyExc_ValueError, "a thread function's address is 0");
        return NULL;
    }
    if (serial_count + n > SERIAL_SLOTS) {
        PyErr_Format(PyExc_ValueError, "%zd more handlers than the %d slots left", n, SERIAL_SLOTS - serial_count);
        return NULL;
    }
    lapack_threads.set = (void (*)(int))(uintptr_t)set_address;
    lapack_threads.get = (int (*)(void))(uintptr_t)get_address;
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Handler handler = PyCapsule_GetPointer(PyList_GET_ITEM(capsules, i), "xla._CUSTOM_CALL_TARGET");
        if (handler == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        wrapped[serial_count] = handler;
        PyList_SET_ITEM(out, i, PyCapsule_New((void *)trampolines[serial_count++], "xla._CUSTOM_CALL_TARGET", NULL));
    }
    return out;
}

/* ----- a ufunc's inner loop (ufunc_loops.py) --------------------------------------------------
 * A target per (ufunc, loop): its handler calls the loop numpy itself calls (a
 * PyUFuncGenericFunction and its data, as the ufunc object holds them) once, over all the
 * elements of its operands and results, which lowering gives one shape and the loop's dtypes.
 * scipy.special's loops take the GIL themselves where they must (a warning or an error its
 * sf_error settings ask for); XLA runs a program without it. XLA's threads flush subnormal
 * numbers to zero (x86's MXCSR FTZ and DAZ bits, aarch64's FPCR FZ); numpy's do not, so the
 * loop runs with them cleared (scipy.special.gammainc(0.5, 1e-310) is 1.1e-155, not 0).
 * A loop that raises (scipy.special.errstate(all="raise"), or a warning the filters make an
 * error) leaves the exception set in its thread: where that is the caller's (XLA runs small
 * programs on it), the handler takes it and answers with its text, an error XLA raises. */
typedef void (*Loop)(char **, const intptr_t *, const intptr_t *, void *);
enum { LOOP_SLOTS = 192, LOOP_ARGS = 8 };
static Loop loop_fn[LOOP_SLOTS];
static void *loop_data[LOOP_SLOTS];
static int loop_nin[LOOP_SLOTS], loop_nout[LOOP_SLOTS], loop_count;
static char loop_name[LOOP_SLOTS][80];

static size_t dtype_size(int dtype) {
    return dtype == S32 || dtype == F32 ? 4 : dtype == S64 || dtype == F64 ? 8 : 0;
}

/* Whether this thread's Python state holds an exception; read without the GIL, as only this
 * thread sets it. */
static int exception_pending(void) {
    PyThreadState *t = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030C0000
    return t != NULL && t->current_exception != NULL;
#else
    return t != NULL && t->curexc_type != NULL;
#endif
}

/* The pending exception as an FFI error ("name: type: message"), cleared. */
static void *exception_error(CallFrame *frame, const char *name) {
    char message[400];
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *text = value != NULL ? PyObject_Str(value) : NULL;
    const char *what = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(message, sizeof message, "%s: %s: %s", name, type != NULL ? ((PyTypeObject *)type)->tp_name : "?",
             what != NULL ? what : "?");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    PyGILState_Release(gil);
    return error(frame, message);
}

static void *loop_call(int slot, CallFrame *frame) {
    if (not_a_call(frame)) return NULL;
    int nin = loop_nin[slot], nout = loop_nout[slot];
    char message[200], *data[LOOP_ARGS];
    intptr_t steps[LOOP_ARGS];
    if (frame->args.size != nin || frame->rets.size != nout) {
        snprintf(message, sizeof message, "%s: %d operands and %d results expected, got %lld and %lld",
                 loop_name[slot], nin, nout, (long long)frame->args.size, (long long)frame->rets.size);
        return error(frame, message);
    }
    int64_t n = -1;
    for (int i = 0; i < nin + nout; i++) {
        Buffer *b = i < nin ? frame->args.values[i] : frame->rets.values[i - nin];
        int64_t count = 1;
        for (int64_t d = 0; d < b->rank; d++) count *= b->dims[d];
        if (n < 0) n = count;
        if (count != n || dtype_size(b->dtype) == 0) {
            snprintf(message, sizeof message, "%s: buffers of one size and of types int32, int64, float32 or "
                     "float64 expected, buffer %d has %lld elements of type %d", loop_name[slot], i,
                     (long long)count, b->dtype);
            return error(frame, message);
        }
        data[i] = b->data;
        steps[i] = (intptr_t)dtype_size(b->dtype);
    }
    intptr_t size = (intptr_t)n;
    if (size == 0) return NULL;
#if defined(__x86_64__) || defined(__i386__)
    unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr & ~0x8040u);  /* FTZ (bit 15) and DAZ (bit 6) off */
    loop_fn[slot](data, &size, steps, loop_data[slot]);
    _mm_setcsr(csr);
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr & ~(1ull << 24)));  /* FZ (bit 24) off */
    loop_fn[slot](data, &size, steps, loop_data[slot]);
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
#else
    loop_fn[slot](data, &size, steps, loop_data[slot]);
#endif
    return exception_pending() ? exception_error(frame, loop_name[slot]) : NULL;
}

/* 24 rows of 8 trampolines: loop_<row>_<column> calls slot 8 row + column */
#define LOOP_SLOT(r, c) static void *loop_##r##_##c(CallFrame *f) { return loop_call(8 * r + c, f); }
#define LOOP_ROW(r) LOOP_SLOT(r, 0) LOOP_SLOT(r, 1) LOOP_SLOT(r, 2) LOOP_SLOT(r, 3) LOOP_SLOT(r, 4) LOOP_SLOT(r, 5) \
                    LOOP_SLOT(r, 6) LOOP_SLOT(r, 7)
LOOP_ROW(0) LOOP_ROW(1) LOOP_ROW(2) LOOP_ROW(3) LOOP_ROW(4) LOOP_ROW(5) LOOP_ROW(6) LOOP_ROW(7) LOOP_ROW(8) LOOP_ROW(9)
LOOP_ROW(10) LOOP_ROW(11) LOOP_ROW(12) LOOP_ROW(13) LOOP_ROW(14) LOOP_ROW(15) LOOP_ROW(16) LOOP_ROW(17) LOOP_ROW(18)
LOOP_ROW(19) LOOP_ROW(20) LOOP_ROW(21) LOOP_ROW(22) LOOP_ROW(23)
#define LOOP_ENTRIES(r) loop_##r##_0, loop_##r##_1, loop_##r##_2, loop_##r##_3, loop_##r##_4, loop_##r##_5, \
                        loop_##r##_6, loop_##r##_7
static Handler loop_trampolines[LOOP_SLOTS] = {
    LOOP_ENTRIES(0), LOOP_ENTRIES(1), LOOP_ENTRIES(2), LOOP_ENTRIES(3), LOOP_ENTRIES(4), LOOP_ENTRIES(5),
    LOOP_ENTRIES(6), LOOP_ENTRIES(7), LOOP_ENTRIES(8), LOOP_ENTRIES(9), LOOP_ENTRIES(10), LOOP_ENTRIES(11),
    LOOP_ENTRIES(12), LOOP_ENTRIES(13), LOOP_ENTRIES(14), LOOP_ENTRIES(15), LOOP_ENTRIES(16), LOOP_ENTRIES(17),
    LOOP_ENTRIES(18), LOOP_ENTRIES(19), LOOP_ENTRIES(20), LOOP_ENTRIES(21), LOOP_ENTRIES(22), LOOP_ENTRIES(23)};

/* loop(name, function, data, nin, nout): a capsule of a handler calling the inner loop at
 * `function` with `data` (addresses) on nin operands and nout results. */
static PyObject *loop(PyObject *self, PyObject *args) {
    const char *name;
    unsigned long long function, data;
    int nin, nout;
    if (!PyArg_ParseTuple(args, "sKKii", &name, &function, &data, &nin, &nout)) return NULL;
    if (!function || nin < 1 || nout < 1 || nin + nout > LOOP_ARGS) {
        PyErr_Format(PyExc_ValueError, "%s: a loop at %llu with %d operands and %d results cannot be called", name,
                     function, nin, nout);
        return NULL;
    }
    if (loop_count == LOOP_SLOTS) {
        PyErr_Format(PyExc_ValueError, "all %d loop slots are taken", LOOP_SLOTS);
        return NULL;
    }
    int slot = loop_count++;
    loop_fn[slot] = (Loop)(uintptr_t)function;
    loop_data[slot] = (void *)(uintptr_t)data;
    loop_nin[slot] = nin, loop_nout[slot] = nout;
    snprintf(loop_name[slot], sizeof loop_name[slot], "%s", name);
    return PyCapsule_New((void *)loop_trampolines[slot], "xla._CUSTOM_CALL_TARGET", NULL);
}

/* stalls(set_num_threads, get_num_threads, stall_seconds, stall_factor, serial_seconds,
 * serial_most): numpy's BLAS's thread functions and the stall rule's numbers. What was learned
 * before is forgotten. */
static PyObject *stalls(PyObject *self, PyObject *args) {
    unsigned long long set_address, get_address;
    if (!PyArg_ParseTuple(args, "KKdddd", &set_address, &get_address, &stall_seconds, &stall_factor, &serial_seconds,
                          &serial_most))
        return NULL;
    if (!set_address || !get_address) {
        PyErr_SetString(PyExc_ValueError, "a thread function's address is 0");
        return NULL;
    }
    numpy_threads.get = (int (*)(void))(uintptr_t)get_address;
    numpy_threads.set = (void (*)(int))(uintptr_t)set_address;
    serial_until = 0.0, serial_next = serial_seconds;
    fastest[0] = fastest[1] = 1e30;
    probed[0] = probed[1] = 0;
    Py_RETURN_NONE;
}

/* serial_for(): the seconds numpy's BLAS runs these products on one thread from now (0: its threads). */
static PyObject *serial_for(PyObject *self, PyObject *unused) {
    double until;
    __atomic_load(&serial_until, &until, __ATOMIC_RELAXED);
    double left = until - now();
    return PyFloat_FromDouble(left > 0 ? left : 0.0);
}

static PyMethodDef methods[] = {
    {"stalls", stalls, METH_VARARGS, "stalls(set_num_threads, get_num_threads, stall_seconds, stall_factor, "
                                     "serial_seconds, serial_most): the products on one thread for a while after a "
                                     "stall"},
    {"serial_for", serial_for, METH_NOARGS, "serial_for() -> seconds the products still run on one thread"},
    {"serial", serial, METH_VARARGS, "serial([capsule], set_num_threads, get_num_threads) -> [capsule]: each "
                                     "handler called with that BLAS on one thread"},
    {"loop", loop, METH_VARARGS, "loop(name, function, data, nin, nout) -> a capsule of a handler calling that "
                                 "ufunc inner loop"},
    {"handlers", handlers, METH_VARARGS, "handlers((rows, columns, gemm, symmetric), (dgemv, sgemv, dgemm, sgemm, "
                                         "dsymv, ssymv, zgemm, cgemm), ilp64) -> their four capsules"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_blas", NULL, -1, methods};

PyMODINIT_FUNC PyInit__blas(void) { return PyModule_Create(&module); }
