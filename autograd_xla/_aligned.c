/* numpy's memory handler (NEP 49) that places large array data at 64-byte boundaries
 * (memory.py). numpy's own aligns to 16 bytes: XLA:CPU reads a 64-byte aligned argument where
 * it is and copies any other (backend.PUT_STAGED), so a misaligned 1.6 MB batch cost the MLP
 * step a copy a call.
 *
 * Allocations from ALIGN_FROM bytes come from posix_memalign, smaller ones from numpy's default
 * handler (malloc, and its cache of small blocks: without it `x * 2.0 + 1.0` on 3 elements took
 * 5 % longer); the blocks are all malloc's, which free() and realloc() take, so a size numpy
 * misreported, or C code that frees an array's data itself (which NEP 49 forbids, but old
 * extensions do), still frees one correctly. calloc from LAZY_ZEROS_FROM bytes stays numpy's
 * (misaligned): a block that large comes from fresh mmapped pages that need no zeroing, and
 * np.zeros of a huge array must not touch every page at once.
 * Like numpy's default handler, blocks from HUGE_FROM bytes are advised onto transparent huge
 * pages where numpy's own setting (_set_madvise_hugepage) says so. numpy tracks the blocks for
 * tracemalloc itself, whatever the handler.
 *
 * Nothing here uses numpy's headers: the handler's layout is NEP 49's version 1, and
 * PyDataMem_SetHandler / GetHandler are entries 304 / 305 of numpy's C-API table, which keeps
 * its entries' places across numpy versions (numpy >= 1.22 has them). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

enum { ALIGNMENT = 64, PAGE = 4096 };
static const size_t ALIGN_FROM = 64 << 10;       /* backend.IN_PLACE_MIN_BYTES: smaller ones are copied anyway */
static const size_t LAZY_ZEROS_FROM = 32 << 20;  /* glibc's largest mmap threshold (memory.MALLOC_RAISING_BYTES) */
static const size_t HUGE_FROM = 4 << 20;         /* numpy's default handler's */
enum { SET_HANDLER = 304, GET_HANDLER = 305, DEFAULT_HANDLER = 306, FEATURE_VERSION = 211, NPY_1_22_API_VERSION = 0xf };

typedef struct {
    void *ctx;
    void *(*malloc)(void *ctx, size_t size);
    void *(*calloc)(void *ctx, size_t nelem, size_t elsize);
    void *(*realloc)(void *ctx, void *ptr, size_t new_size);
    void (*free)(void *ctx, void *ptr, size_t size);
} Allocator;

typedef struct {
    char name[127];
    uint8_t version;
    Allocator allocator;
} Handler;

static Allocator numpy_default;  /* numpy's default handler's functions */
static int hugepages;  /* numpy's _set_madvise_hugepage setting, when the handler was set */

static void advise(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    if (hugepages && size >= HUGE_FROM) {
        uintptr_t start = ((uintptr_t)p + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
        madvise((void *)start, size - (start - (uintptr_t)p), MADV_HUGEPAGE);
    }
#endif
}

static void *aligned_block(size_t size) {
    void *p;
    if (posix_memalign(&p, ALIGNMENT, size))
        return NULL;
    advise(p, size);
    return p;
}

static void *handler_malloc(void *ctx, size_t size) {
    return size < ALIGN_FROM ? numpy_default.malloc(numpy_default.ctx, size) : aligned_block(size);
}

static void *handler_calloc(void *ctx, size_t nelem, size_t elsize) {
    if (elsize && nelem > SIZE_MAX / elsize)
        return NULL;
    size_t size = nelem * elsize;
    if (size < ALIGN_FROM || size >= LAZY_ZEROS_FROM)
        return numpy_default.calloc(numpy_default.ctx, nelem, elsize);
    void *p = aligned_block(size);
    if (p)
        memset(p, 0, size);
    return p;
}

static void *handler_realloc(void *ctx, void *ptr, size_t size) {
    void *q = numpy_default.realloc(numpy_default.ctx, ptr, size);
    if (q == NULL || size < ALIGN_FROM || (uintptr_t)q % ALIGNMENT == 0)
        return q;
    void *p = aligned_block(size);  /* the data moved to a misaligned block: once more */
    if (p == NULL)
        return q;  /* still a valid block holding the data */
    memcpy(p, q, size);
    free(q);
    return p;
}

static void handler_free(void *ctx, void *ptr, size_t size) {
    if (size < ALIGN_FROM)
        numpy_default.free(numpy_default.ctx, ptr, size);  /* (perhaps into its cache) */
    else
        free(ptr);
}

static Handler handler = {"autograd_xla_aligned_64", 1,
                          {NULL, handler_malloc, handler_calloc, handler_realloc, handler_free}};
static PyObject *capsule;  /* "mem_handler", numpy's name for a handler's capsule; lives forever */
static void **numpy_api;

static int load_numpy_api(void) {
    if (numpy_api)
        return 0;
    PyObject *module = PyImport_ImportModule("numpy._core._multiarray_umath");
    if (module == NULL)
        return -1;
    PyObject *table = PyObject_GetAttrString(module, "_ARRAY_API");
    Py_DECREF(module);
    if (table == NULL)
        return -1;
    void **api = PyCapsule_GetPointer(table, NULL);
    Py_DECREF(table);
    if (api == NULL)
        return -1;
    if (((unsigned (*)(void))api[FEATURE_VERSION])() < NPY_1_22_API_VERSION) {
        PyErr_SetString(PyExc_RuntimeError, "numpy has no memory handlers (NEP 49, numpy >= 1.22)");
        return -1;
    }
    Handler *numpy_handler = PyCapsule_GetPointer(*(PyObject **)api[DEFAULT_HANDLER], "mem_handler");
    if (numpy_handler == NULL)
        return -1;
    numpy_default = numpy_handler->allocator;
    numpy_api = api;
    return 0;
}

/* use(on, hugepages) -> whether this handler was the current context's before. */
static PyObject *use(PyObject *self, PyObject *args) {
    int on, huge;
    if (!PyArg_ParseTuple(args, "pp", &on, &huge) || load_numpy_api() < 0)
        return NULL;
    hugepages = huge;
    PyObject *old = ((PyObject * (*)(PyObject *)) numpy_api[SET_HANDLER])(on ? capsule : NULL);
    if (old == NULL)
        return NULL;
    PyObject *was = PyBool_FromLong(old == capsule);
    Py_DECREF(old);
    return was;
}

/* in_use() -> whether this handler is the current context's. */
static PyObject *in_use(PyObject *self, PyObject *unused) {
    if (load_numpy_api() < 0)
        return NULL;
    PyObject *current = ((PyObject * (*)(void)) numpy_api[GET_HANDLER])();
    if (current == NULL)
        return NULL;
    PyObject *is = PyBool_FromLong(current == capsule);
    Py_DECREF(current);
    return is;
}

static PyMethodDef methods[] = {
    {"use", use, METH_VARARGS, "use(on, hugepages): make (or stop making) this handler numpy's in the current "
                               "context; returns whether it was before"},
    {"in_use", in_use, METH_NOARGS, "whether this handler is numpy's in the current context"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_aligned", NULL, -1, methods};

PyMODINIT_FUNC PyInit__aligned(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    capsule = PyCapsule_New(&handler, "mem_handler", NULL);
    if (capsule == NULL || PyModule_AddIntConstant(m, "ALIGNMENT", ALIGNMENT) < 0 ||
        PyModule_AddIntConstant(m, "ALIGN_FROM", (long)ALIGN_FROM) < 0 ||
        PyModule_AddIntConstant(m, "LAZY_ZEROS_FROM", (long)LAZY_ZEROS_FROM) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
