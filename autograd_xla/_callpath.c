/* dispatch.py's per-call work around jaxlib's C++ call (the PjitFunction) in C: what is left
 * of a fast call once C++ flattens, looks up and runs.
 *
 * Front: JittedFunction's base, so that a call enters C at once (a Python __call__ costs a
 * frame). Outside traces a call goes to `_fast`, the PjitFunction; in a trace, or where `_fast`
 * is None, or while `_waiting` (no fast path to be had yet: api.JittedFunction._fastpath), or
 * for a numpy array of the other byte order (which C++ would misread) or one PJRT would copy
 * apart (both `scan`), to `self._call_python`. A call whose arguments are numpy arrays of a
 * signature it stages (`stage`), positional or in lists and tuples, copies them into device
 * buffers kept for that signature and hands C++ those, in lists and tuples made alike: C++
 * then runs the executable on them as they are, where a numpy argument costs it a new device
 * buffer a call (made and freed: 7.5 µs a call of x + 1.0 against 5.5 µs, measured; a
 * two-layer network's value_and_grad, its parameters a list of pairs, 19.4 against 27.5);
 * from 100 KiB an aligned one is passed as it is (`scan`). The CPU
 * client is synchronous and staging copies inline, so the program has read the buffers when
 * C++ returns; a call made while a staged one is in C++ (a thread, or a miss calling back into
 * Python) is not staged.
 *
 * Finish: a fast call's results, from C++'s output arrays to the function's numpy results, with
 * the bookkeeping of a hit (dispatch._finisher's Python function: 1.6 µs a result, a frame
 * and numpy reading an __array_interface__ dict; this 0.9 µs), and a countdown of the calls
 * a climbing signature's ladder waits for (`due`, tiering.Ladder.hand).
 *
 * The plain tier: a call of a signature that runs as plain autograd before its trace (tiered
 * execution) runs here, looked up by api._simple_signature's key and timed into its
 * tiering.Untraced, where Python's _call_python would take its hot path.
 *
 * Counts: a jitted function's counts of fast hits and the arrays they moved, read by
 * aot.CacheStats, and which signature moved its key to the end of the function's cache last.
 *
 * Hold: the buffer a result array views (writable, as backend.converter's), keeping the device
 * array alive. Nothing here includes numpy's headers: arrays are read through the buffer
 * protocol and made through the entries of numpy's C API read from its capsule (or by calling
 * numpy.ndarray where it is missing), so the extension builds without them.
 *
 * This module is long because its types share one per-call state (the staging, numpy's entries
 * read from its capsule, the interned names) and each other's structs: split into extensions,
 * they would pass those through capsules of their own. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

enum { MAX_ARGS = 16, MAX_DIMS = 8, MAX_STAGES = 8, FORMAT_CHARS = 8, MAX_DEPTH = 32, MAX_TREE = 64 };
enum { MAX_RESULT_DIMS = 32 };  /* results of more dimensions are made by numpy.ndarray */
/* The stages' buffers live as long as the function: 16 MiB of them at most (MAX_STAGES
 * signatures of arguments below 1 MiB, dispatch.ARGUMENT_BYTES, could otherwise hold 128). */
enum { MAX_STAGED_BYTES = 16 << 20 };
/* A numpy argument C++ puts itself is read in place if it is C-contiguous and 64-byte aligned;
 * PJRT's CPU client copies any other inline below its kSmallDataTransferByteSize (100 KiB) but
 * on a worker thread from there, and the synchronous client then runs the program before the
 * copy is done (probed: 6 of 30 results wrong at 8 MiB). Such an argument is staged or the
 * call goes to Python (`scan`). */
enum { ALIGNMENT = 64, ASYNC_COPY_BYTES = 100 << 10 };

static PyObject *ndarray_type;   /* numpy.ndarray */
/* numpy's C API, read from the capsule numpy's own headers read (import_array), by the entries
 * NumPy keeps at fixed places in it (its __multiarray_api.h: PyArray_Type 2,
 * PyArray_NewFromDescr 94, PyArray_SetBaseObject 282), so that the extension still builds
 * without numpy's headers; NULL where the capsule is missing (results are then made by calling
 * numpy.ndarray). numpy works the flags out again from the memory (PyArray_UpdateFlags). The
 * call of `x + 1.0` on 3 elements took 5.37 µs against 5.68 through numpy.ndarray(shape,
 * dtype, buffer) (medians of six fresh processes each, alternating). */
typedef PyObject *(*new_from_descr_fn)(PyTypeObject *, PyObject *, int, const Py_intptr_t *, const Py_intptr_t *,
                                       void *, int, PyObject *);
typedef int (*set_base_object_fn)(PyObject *, PyObject *);
static PyTypeObject *array_type;
static new_from_descr_fn new_from_descr;
static set_base_object_fn set_base_object;
enum { ARRAY_CARRAY = 0x0001 | 0x0100 | 0x0400 };  /* C-contiguous, aligned, writeable (NPY_ARRAY_CARRAY) */
static PyObject *move_to_end;    /* collections.OrderedDict.move_to_end, unbound */
static PyObject *str_traces, *str_call_python, *str_python_takes, *str_jax_config, *str_enable_x64, *str_swap_local;
static PyObject *empty_tuple;

/* ----- Counts --------------------------------------------------------------------------- */

/* The counts are C fields, and while the Finish that moved its key to the end of the
 * function's cache last (`last`, by address) is the one finishing, its key is still the most
 * recently used and is not moved again (which hashed the key's tuple afresh): counting in
 * Python attributes and moving the key at every call cost 0.4-0.5 µs of a 5.8 µs call of
 * x + 1.0 (measured). The cache's own changes (calls.Signatures) call `reordered()`. */
typedef struct {
    PyObject_HEAD
    Py_ssize_t hits, host_to_device, device_to_host;
    void *last;
} Counts;

static PyMemberDef counts_members[] = {
    {"hits", T_PYSSIZET, offsetof(Counts, hits), 0, "calls that ran a compiled program"},
    {"host_to_device", T_PYSSIZET, offsetof(Counts, host_to_device), 0, "arrays the calls moved to the device"},
    {"device_to_host", T_PYSSIZET, offsetof(Counts, device_to_host), 0, "arrays the calls moved back"},
    {NULL},
};

static PyObject *counts_reordered(Counts *self, PyObject *unused) {
    self->last = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef counts_methods[] = {
    {"reordered", (PyCFunction)counts_reordered, METH_NOARGS, "the cache's order changed: the next hit moves its key"},
    {NULL},
};

static PyTypeObject CountsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "autograd_xla._callpath.Counts",
    .tp_basicsize = sizeof(Counts),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_members = counts_members,
    .tp_methods = counts_methods,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Counts(): a jitted function's fast hits and the arrays they moved (aot.CacheStats reads them).",
};

/* ----- Hold ----------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *owner;  /* the device array whose memory this is */
    void *data;
    Py_ssize_t nbytes;
} Hold;

static int hold_getbuffer(Hold *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->nbytes, 0, flags);
}

static void hold_dealloc(Hold *self) {
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs hold_as_buffer = {(getbufferproc)hold_getbuffer, NULL};

static PyTypeObject HoldType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "autograd_xla._callpath.Hold",
    .tp_basicsize = sizeof(Hold),
    .tp_dealloc = (destructor)hold_dealloc,
    .tp_as_buffer = &hold_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The memory of a device array on the CPU, for a numpy array to view.",
};

/* ----- Finish --------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    Counts *counts;       /* the function's */
    PyObject *cache_ref;  /* weakref to the function's signature cache (calls.Signatures) */
    PyObject *key;        /* this signature's key in it */
    PyObject *results;    /* per result: (shape, dtype, nbytes, scalar) to view, or a converter to call */
    PyObject *unflatten;  /* None (one result, a leaf) or unflatten(list of results) */
    Py_ssize_t n_in, n_out;
    PyObject *due;        /* NULL or None, or called once `countdown` more calls are finished */
    Py_ssize_t countdown;
} Finish;

/* The address of a device array's memory on the CPU (NULL with an error set), read through
 * its buffer protocol: its unsafe_buffer_pointer() imports jax where jax is installed
 * (jaxlib 0.10.2, probed), and the package never imports jax. The memory is the array's
 * while it lives. */
static void *address_of(PyObject *out) {
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_SIMPLE) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {  /* deleted or donated: the RuntimeError jaxlib's methods raise */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_Format(PyExc_RuntimeError, "%S", value != NULL ? value : Py_None);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        }
        return NULL;
    }
    void *data = view.buf;
    PyBuffer_Release(&view);
    if (data == NULL)
        PyErr_SetString(PyExc_ValueError, "a device array without memory");
    return data;
}

static PyObject *address(PyObject *module, PyObject *out) {
    void *data = address_of(out);
    return data == NULL ? NULL : PyLong_FromVoidPtr(data);
}

/* backend.DeviceArray (`set_device_array`) and where its slots buffer, aval, backend and
 * host_dtype are in an instance: a kept result is made here, as DeviceArray(out, aval,
 * backend, host_dtype) would (its __init__ sets those four and nothing else), without the
 * two Python frames of a converter and __init__ (6 DeviceArrays in and out on the CPU: 14.4
 * -> 13.6 µs a call). */
static PyTypeObject *device_array_type;
static Py_ssize_t device_array_slots[4];
static const char *const device_array_names[4] = {"buffer", "aval", "backend", "host_dtype"};

static PyObject *set_device_array(PyObject *module, PyObject *type) {
    if (!PyType_Check(type))
        return PyErr_Format(PyExc_TypeError, "set_device_array takes a type");
    Py_ssize_t slots[4];
    for (int i = 0; i < 4; i++) {
        PyObject *d = PyObject_GetAttrString(type, device_array_names[i]);
        if (d == NULL)
            return NULL;
        int member = Py_IS_TYPE(d, &PyMemberDescr_Type)
                     && ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
        slots[i] = member ? ((PyMemberDescrObject *)d)->d_member->offset : -1;
        Py_DECREF(d);
        if (!member)
            return PyErr_Format(PyExc_TypeError, "%s is not a slot", device_array_names[i]);
    }
    memcpy(device_array_slots, slots, sizeof slots);
    Py_INCREF(type);
    Py_XSETREF(device_array_type, (PyTypeObject *)type);
    Py_RETURN_NONE;
}

/* A DeviceArray of the output array `out`, per `spec` = (aval, backend, host_dtype). */
static PyObject *kept(PyObject *spec, PyObject *out) {
    if (device_array_type == NULL)
        return PyErr_Format(PyExc_RuntimeError, "set_device_array was not called");
    PyObject *self = device_array_type->tp_alloc(device_array_type, 0);
    if (self == NULL)
        return NULL;
    PyObject *values[4] = {out, PyTuple_GET_ITEM(spec, 0), PyTuple_GET_ITEM(spec, 1), PyTuple_GET_ITEM(spec, 2)};
    for (int i = 0; i < 4; i++) {
        PyObject **slot = (PyObject **)((char *)self + device_array_slots[i]);
        Py_INCREF(values[i]);
        Py_XSETREF(*slot, values[i]);
    }
    return self;
}

/* A numpy array viewing `out` (a device array) per `spec`, a DeviceArray of it (a 3-tuple:
 * `kept`), or what the converter `spec` makes. */
static PyObject *convert(PyObject *spec, PyObject *out) {
    if (!PyTuple_Check(spec))
        return PyObject_CallOneArg(spec, out);
    if (PyTuple_GET_SIZE(spec) == 3)
        return kept(spec, out);
    void *data = address_of(out);
    if (data == NULL)
        return NULL;
    Hold *hold = PyObject_New(Hold, &HoldType);
    if (hold == NULL)
        return NULL;
    Py_INCREF(out);
    hold->owner = out;
    hold->data = data;
    hold->nbytes = PyLong_AsSsize_t(PyTuple_GET_ITEM(spec, 2));
    PyObject *shape = PyTuple_GET_ITEM(spec, 0), *dtype = PyTuple_GET_ITEM(spec, 1), *array;
    Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
    if (new_from_descr != NULL && ndim <= MAX_RESULT_DIMS) {
        Py_intptr_t dims[MAX_RESULT_DIMS];
        for (Py_ssize_t i = 0; i < ndim; i++)
            dims[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, i));
        Py_INCREF(dtype);  /* the descriptor's reference is stolen */
        array = new_from_descr(array_type, dtype, (int)ndim, dims, NULL, data, ARRAY_CARRAY, NULL);
        if (array != NULL && set_base_object(array, (PyObject *)hold) < 0)  /* hold's reference is stolen */
            Py_CLEAR(array);
        else if (array == NULL)
            Py_DECREF(hold);
    } else {
        PyObject *argv[3] = {shape, dtype, (PyObject *)hold};
        array = PyObject_Vectorcall(ndarray_type, argv, 3, NULL);
        Py_DECREF(hold);
    }
    if (array == NULL || !PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3)))
        return array;
    PyObject *scalar = PyObject_GetItem(array, empty_tuple);  /* a 0-d result is a numpy scalar */
    Py_DECREF(array);
    return scalar;
}

/* The call's results from C++'s output arrays `outs`. */
static PyObject *finish(Finish *self, PyObject *const *outs, Py_ssize_t n) {
    Counts *counts = self->counts;
    counts->hits += 1;
    counts->host_to_device += self->n_in;
    counts->device_to_host += self->n_out;
    if (self->due != NULL && self->due != Py_None && --self->countdown <= 0) {  /* once: a later one is set anew */
        PyObject *due = self->due, *r;
        self->due = NULL;
        r = PyObject_CallNoArgs(due);
        if (r == NULL)
            PyErr_WriteUnraisable(due);
        Py_XDECREF(r);
        Py_DECREF(due);
    }
    PyObject *cache = counts->last == self ? Py_None : PyWeakref_GetObject(self->cache_ref);  /* borrowed */
    if (cache != Py_None) {  /* least recently used signatures are evicted first */
        PyObject *argv[2] = {cache, self->key};  /* OrderedDict's own move: Signatures' says `reordered` */
        Py_INCREF(cache);
        PyObject *r = PyObject_Vectorcall(move_to_end, argv, 2, NULL);
        Py_DECREF(cache);
        if (r == NULL) {  /* evicted meanwhile by another thread: gone */
            if (!PyErr_ExceptionMatches(PyExc_KeyError) && !PyErr_ExceptionMatches(PyExc_RuntimeError))
                return NULL;
            PyErr_Clear();
        } else
            counts->last = self;
        Py_XDECREF(r);
    }
    if (n != PyTuple_GET_SIZE(self->results))
        return PyErr_Format(PyExc_RuntimeError, "expected %zd results, got %zd", PyTuple_GET_SIZE(self->results), n);
    if (self->unflatten == Py_None)
        return n == 1 ? convert(PyTuple_GET_ITEM(self->results, 0), outs[0])
                      : PyErr_Format(PyExc_RuntimeError, "one result expected, got %zd", n);
    PyObject *list = PyList_New(n), *result = NULL;
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *one = convert(PyTuple_GET_ITEM(self->results, i), outs[i]);
        if (one == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, one);
    }
    if (list != NULL)
        result = PyObject_CallOneArg(self->unflatten, list);
    Py_XDECREF(list);
    return result;
}

/* finish(outs), outs a sequence of output arrays (how the results' tree node unflattens) */
static PyObject *finish_vectorcall(Finish *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
        PyErr_SetString(PyExc_TypeError, "finish takes the sequence of output arrays");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "the outputs are a sequence");
    if (seq == NULL)
        return NULL;
    PyObject *result = finish(self, PySequence_Fast_ITEMS(seq), PySequence_Fast_GET_SIZE(seq));
    Py_DECREF(seq);
    return result;
}

static PyObject *finish_call(Finish *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call((PyObject *)self, args, kwargs);
}

static int finish_init(Finish *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"counts", "cache_ref", "key", "results", "unflatten", "n_in", "n_out", NULL};
    PyObject *counts, *cache_ref, *key, *results, *unflatten;
    Py_ssize_t n_in, n_out;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOO!Onn", names, &CountsType, &counts, &cache_ref, &key,
                                     &PyTuple_Type, &results, &unflatten, &n_in, &n_out))
        return -1;
    if (!PyWeakref_CheckRef(cache_ref)) {
        PyErr_SetString(PyExc_TypeError, "cache_ref must be a weak reference");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(results); i++) {
        PyObject *spec = PyTuple_GET_ITEM(results, i);
        if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) != 3
            && (PyTuple_GET_SIZE(spec) != 4 || !PyLong_Check(PyTuple_GET_ITEM(spec, 2)))) {
            PyErr_SetString(PyExc_TypeError, "a result to view is (shape, dtype, nbytes, scalar); to keep, "
                                             "(aval, backend, host_dtype)");
            return -1;
        }
    }
    self->vectorcall = (vectorcallfunc)finish_vectorcall;
    if (self->counts != NULL && self->counts->last == self)
        self->counts->last = NULL;
#define SET(field) Py_INCREF(field); Py_XSETREF(self->field, field)
    SET(cache_ref); SET(key); SET(results); SET(unflatten);
#undef SET
    Py_INCREF(counts);
    Py_XSETREF(self->counts, (Counts *)counts);
    self->n_in = n_in;
    self->n_out = n_out;
    return 0;
}

static int finish_traverse(Finish *self, visitproc visit, void *arg) {
    Py_VISIT(self->counts); Py_VISIT(self->cache_ref); Py_VISIT(self->key); Py_VISIT(self->results);
    Py_VISIT(self->unflatten); Py_VISIT(self->due);
    return 0;
}

static int finish_clear(Finish *self) {
    if (self->counts != NULL && self->counts->last == self)  /* another Finish may come to this address */
        self->counts->last = NULL;
    Py_CLEAR(self->counts); Py_CLEAR(self->cache_ref); Py_CLEAR(self->key); Py_CLEAR(self->results);
    Py_CLEAR(self->unflatten); Py_CLEAR(self->due);
    return 0;
}

static void finish_dealloc(Finish *self) {
    PyObject_GC_UnTrack(self);
    finish_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef finish_members[] = {
    {"due", T_OBJECT, offsetof(Finish, due), 0, "None, or called once `countdown` more calls are finished"},
    {"countdown", T_PYSSIZET, offsetof(Finish, countdown), 0, "calls to finish before `due` is called"},
    {NULL},
};

static PyTypeObject FinishType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "autograd_xla._callpath.Finish",
    .tp_basicsize = sizeof(Finish),
    .tp_dealloc = (destructor)finish_dealloc,
    .tp_vectorcall_offset = offsetof(Finish, vectorcall),
    .tp_call = (ternaryfunc)finish_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_traverse = (traverseproc)finish_traverse,
    .tp_clear = (inquiry)finish_clear,
    .tp_init = (initproc)finish_init,
    .tp_members = finish_members,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Finish(counts, cache_ref, key, results, unflatten, n_in, n_out)(outs): a fast call's results.",
};

/* ----- Front ---------------------------------------------------------------------------- */

typedef struct {
    char format[FORMAT_CHARS];  /* the buffer protocol's format of the dtype */
    int ndim;
    Py_ssize_t shape[MAX_DIMS];
    Py_ssize_t nbytes;
    void *data;  /* the staging buffer's memory */
} Slot;

typedef struct {
    Py_ssize_t n;          /* arrays: the leaves of the call's arguments, lists and tuples flattened */
    Slot slots[MAX_ARGS];
    Py_ssize_t tree_len;
    char tree[MAX_TREE];   /* the structure around them (`Walk`) */
    PyObject *arrays;      /* a tuple of the staging device arrays, which own the slots' memory */
    Finish *finish;        /* the signature's results, from C++'s flat outputs */
} Stage;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fast;    /* the PjitFunction, or None: calls go to self._call_python */
    int busy;          /* a staged call is in C++ */
    int missed;        /* set by the miss of a staged call: C++ returns the finished results */
    int waiting;       /* no fast path to be had yet (a ladder climbs): calls go to Python, not C++'s miss */
    int ordered;       /* an accelerator's client: its executions wait for C++'s puts, none is copied apart */
    int n_stages;
    Stage *stages[MAX_STAGES];
    PyObject *captured;  /* None, or a tuple of (cell, None, value), (dict or class, key, value) and
                          * (list or tuple, index, value): what the function read besides its arguments when
                          * traced (signatures.captured_locations), an array's with (bytes, step,
                          * itemsize): its sample (signatures.content_sample) */
    PyObject *weakrefs;
} Front;

/* Whether array `value`'s memory holds `sample`'s bytes at every `step`-th element of
 * `itemsize` bytes (calls.sampled_bytes); not where it is no longer one block. */
static int sample_holds(PyObject *value, PyObject *sample, Py_ssize_t step, Py_ssize_t itemsize) {
    Py_buffer view;
    if (PyObject_GetBuffer(value, &view, PyBUF_ANY_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    const char *data = view.buf, *want = PyBytes_AS_STRING(sample);
    Py_ssize_t n = PyBytes_GET_SIZE(sample), stride = step * itemsize;
    int same = step == 1 ? view.len == n && memcmp(data, want, n) == 0 : 1;
    for (Py_ssize_t k = 0, at = 0; step != 1 && k < n && same; k += itemsize, at += stride)
        same = at + itemsize <= view.len && memcmp(data + at, want + k, itemsize) == 0;
    PyBuffer_Release(&view);
    return same;
}

/* Whether every place of `captured` holds the object it held (by identity; Python's
 * _captured_changed compares equal numbers and forgets the traces where one changed), and
 * an array its sample's bytes (changed in place, it is the same object). */
static int captured_hold(PyObject *captured) {
    Py_ssize_t n = PyTuple_GET_SIZE(captured);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *place = PyTuple_GET_ITEM(captured, i);
        PyObject *container = PyTuple_GET_ITEM(place, 0), *key = PyTuple_GET_ITEM(place, 1);
        PyObject *now = NULL;  /* borrowed: a cell's contents, a dict's item, a list's or tuple's element */
        if (key == Py_None)
            now = PyCell_Check(container) ? PyCell_GET(container) : NULL;
        else if (PyType_Check(container))  /* a class attribute, in the class's own dict */
            now = PyDict_GetItemWithError(((PyTypeObject *)container)->tp_dict, key);
        else if (PyDict_Check(container))
            now = PyDict_GetItemWithError(container, key);
        else {
            Py_ssize_t k = PyLong_AsSsize_t(key);  /* (-1 and an error for a key that is no index: none) */
            if (k >= 0 && PyList_Check(container) && k < PyList_GET_SIZE(container))
                now = PyList_GET_ITEM(container, k);
            else if (k >= 0 && PyTuple_Check(container) && k < PyTuple_GET_SIZE(container))
                now = PyTuple_GET_ITEM(container, k);
        }
        if (now != PyTuple_GET_ITEM(place, 2)) {
            PyErr_Clear();
            return 0;
        }
        if (PyTuple_GET_SIZE(place) > 3
            && !sample_holds(now, PyTuple_GET_ITEM(place, 3), PyLong_AsSsize_t(PyTuple_GET_ITEM(place, 4)),
                             PyLong_AsSsize_t(PyTuple_GET_ITEM(place, 5))))
            return 0;
    }
    return 1;
}

/* numpy's floating-point error state (its ContextVar, or NULL where numpy keeps it otherwise),
 * calls.errstate_allows (whether compiled calls may run under a state: not where it raises on
 * an error), and the last state it allowed */
static PyObject *errstate_var, *errstate_check, *errstate_ok;

/* Whether compiled calls may run under numpy's error state now (1; 0: the call goes to Python,
 * which runs it plainly; -1: an error). A state is asked about once, while it stays the last. */
static int errstate_allows(void) {
    if (errstate_var == NULL)
        return 1;
    PyObject *now;
    if (PyContextVar_Get(errstate_var, NULL, &now) < 0)
        return -1;
    if (now == NULL || now == errstate_ok) {
        Py_XDECREF(now);
        return 1;
    }
    PyObject *r = PyObject_CallOneArg(errstate_check, now);
    int ok = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    if (ok == 1)
        Py_XSETREF(errstate_ok, now);
    else
        Py_DECREF(now);
    return ok;
}

static PyObject *trace_state;  /* core.trace_state (tracing.state): while its `traces` are not empty, calls are traced */

/* Whether a trace is active in this thread (1), not (0), or an error (-1). */
static int tracing(void) {
    if (trace_state == NULL)
        return 0;
    PyObject *traces = PyObject_GetAttr(trace_state, str_traces);
    if (traces == NULL)
        return -1;
    int active = PyObject_IsTrue(traces);
    Py_DECREF(traces);
    return active;
}

/* jax's x64 state (a jaxlib Config), once jax's config module is imported: its C++ states
 * are then in effect instead of ours (dispatch._setup), x64 off by default, under which C++
 * keys and puts a float64 numpy argument as float32. NULL (no error set) while jax is not
 * imported. */
static PyObject *jax_x64_swap;  /* its swap_local */

static PyObject *jax_x64_state(void) {
    if (jax_x64_swap != NULL)
        return jax_x64_swap;
    PyObject *config = PyImport_GetModule(str_jax_config);
    if (config != NULL) {
        PyObject *state = PyObject_GetAttr(config, str_enable_x64);  /* NULL while jax's import is under way */
        Py_DECREF(config);
        if (state != NULL) {
            jax_x64_swap = PyObject_GetAttr(state, str_swap_local);
            Py_DECREF(state);
        }
    }
    PyErr_Clear();
    return jax_x64_swap;
}

/* Sets this thread's x64 state on for a call into C++ (its value is part of C++'s signature
 * and decides its puts: with it on, each dtype is its own, as with our state) and returns the
 * one to put back (`x64_restore`); NULL with no state to set, or an error set. */
static PyObject *x64_on(int *failed) {
    PyObject *swap = jax_x64_state();
    PyObject *previous = swap == NULL ? NULL : PyObject_CallOneArg(swap, Py_True);
    *failed = swap != NULL && previous == NULL;
    return previous;
}

/* Puts `previous` back as this thread's x64 state, keeping the call's error, if any. */
static void x64_restore(PyObject *previous) {
    if (previous == NULL)
        return;
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *r = PyObject_CallOneArg(jax_x64_swap, previous);
    if (r == NULL)
        PyErr_WriteUnraisable(jax_x64_swap);
    Py_XDECREF(r);
    Py_DECREF(previous);
    PyErr_Restore(type, value, traceback);
}

/* Whether `slot` describes an array of these bytes, dimensions and format. */
static int describes(const Slot *slot, Py_ssize_t nbytes, int ndim, const Py_ssize_t *shape, const char *format) {
    return nbytes == slot->nbytes && ndim == slot->ndim && strcmp(format, slot->format) == 0
           && (ndim == 0 || memcmp(shape, slot->shape, ndim * sizeof(Py_ssize_t)) == 0);  /* a 0-d one's may be NULL */
}

static int same(const Slot *slot, const Py_buffer *view) {
    return describes(slot, view->len, view->ndim, view->shape, view->format);
}

/* Whether C++ reads this C-contiguous argument where it is (ASYNC_COPY_BYTES). */
static int read_in_place(const Py_buffer *view) {
    return view->len >= ASYNC_COPY_BYTES && (uintptr_t)view->buf % ALIGNMENT == 0;
}

/* Whether an array's bytes are in the machine's order (numpy marks only a foreign order). */
static int native_order(const Py_buffer *view) {
    char order = view->format[0];
    return order != '<' && order != '>' && order != '!';
}

/* Whether PJRT would copy this array on a worker thread (ASYNC_COPY_BYTES). */
static int copied_apart(const Py_buffer *view, int contiguous) {
    return view->len >= ASYNC_COPY_BYTES && !(contiguous && read_in_place(view));
}

/* A call's arguments walked as C++ flattens them (lists and tuples, depth first, MAX_DEPTH deep):
 * whether C++ may take them as they are (`native`: no numpy array whose bytes are not in the
 * machine's order, which C++ would read as if they were (its signatures and puts ignore byte
 * order: probed, x * 2 + 1 of a '>f8' array came back as of its bytes swapped), nor a subclass of ndarray, which
 * C++ would take for an ndarray where the Python path traces it as its class, its attributes in the signature
 * (tracing.Kind: PennyLane's requires_grad), or runs it as plain autograd does (np.matrix's `*` a matrix
 * product), whether PJRT would copy one apart
 * (`apart`), and while every leaf is a C-contiguous numpy array or a Python number
 * (`stageable`), the arrays' buffers and the structure around them (`tree`: 'a' an array, 'i',
 * 'f' or 'c' an int, float or complex, 'l' or 't' and a length byte a list or tuple), which a
 * stage matches. Other containers (dicts) hold no fast path's arguments
 * (api.JittedFunction._fastpath), so C++ only looks their signature up, misses and calls back:
 * their arrays are not read. */
typedef struct {
    Py_buffer views[MAX_ARGS];  /* an array's, where viewed[i] */
    PyObject *leaves[MAX_ARGS];
    char viewed[MAX_ARGS];
    Py_ssize_t held, tree_len;
    char tree[MAX_TREE];
    int native, apart, stageable;
} Walk;

static void walk(Walk *w, PyObject *obj, int depth) {
    int list = PyList_CheckExact(obj);
    if (list || PyTuple_CheckExact(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        if (depth == MAX_DEPTH) {
            w->native = 0;
            return;
        }
        if (n > 255 || w->tree_len + 2 > MAX_TREE)
            w->stageable = 0;
        if (w->stageable) {
            w->tree[w->tree_len++] = list ? 'l' : 't';
            w->tree[w->tree_len++] = (char)n;
        }
        PyObject **items = PySequence_Fast_ITEMS(obj);
        for (Py_ssize_t i = 0; i < n && w->native; i++)
            walk(w, items[i], depth + 1);
        return;
    }
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)ndarray_type)) {
        char kind = PyLong_CheckExact(obj) ? 'i' : PyFloat_CheckExact(obj) ? 'f' : PyComplex_CheckExact(obj) ? 'c' : 0;
        if (w->stageable && kind && w->held < MAX_ARGS && w->tree_len < MAX_TREE) {  /* passed as it is */
            w->viewed[w->held] = 0;
            w->leaves[w->held++] = obj;
            w->tree[w->tree_len++] = kind;  /* (its type decides C++'s signature, so the results) */
        } else
            w->stageable = 0;  /* anything else: C++'s to judge */
        return;
    }
    int exact = (PyObject *)Py_TYPE(obj) == ndarray_type;
    if (!exact) {
        w->native = 0;
        return;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();  /* a dtype the buffer protocol cannot describe: C++'s to judge, not staged */
        w->stageable = 0;
        return;
    }
    int contiguous = PyBuffer_IsContiguous(&view, 'C');
    w->native = native_order(&view);
    w->apart |= copied_apart(&view, contiguous);
    if (w->stageable && w->native && exact && contiguous && w->held < MAX_ARGS && w->tree_len < MAX_TREE) {
        w->views[w->held] = view;
        w->viewed[w->held] = 1;
        w->leaves[w->held++] = obj;
        w->tree[w->tree_len++] = 'a';
    } else {
        w->stageable = 0;
        PyBuffer_Release(&view);
    }
}

/* Whether C++ may take a call of these arguments (`walk`): not where PJRT would copy one apart
 * (ASYNC_COPY_BYTES) unless the call is staged or the function's platform is an accelerator's
 * (`ordered`: its executions wait for the copies). Where it may, *stage is the stage the
 * arguments match (NULL if none, or if `stage` is NULL) and `pass` what C++ is given for each
 * leaf, in the call's lists and tuples (`rebuilt`): its data copied into the stage's buffer,
 * or from ASYNC_COPY_BYTES on, where it is aligned, the array itself, which C++ reads in place
 * (a copy of 600 KB cost ~20 µs; the results of a jitted function are aligned, so a loop
 * feeding them back copies none). Where every leaf is passed itself the call is not a staged
 * one: *stage is NULL, and C++ is given `args`. */
static int scan(Front *self, PyObject *const *args, Py_ssize_t n, Stage **stage, PyObject **pass) {
    Walk w;
    w.held = w.tree_len = 0;
    w.native = 1;
    w.apart = 0;
    w.stageable = stage != NULL && n <= MAX_ARGS;
    for (Py_ssize_t i = 0; i < n && w.native; i++)
        walk(&w, args[i], 0);
    Stage *found = NULL;
    for (int s = 0; w.native && w.stageable && w.held > 0 && s < self->n_stages && found == NULL; s++) {
        Stage *candidate = self->stages[s];
        int all = candidate->n == w.held && candidate->tree_len == w.tree_len
                  && memcmp(candidate->tree, w.tree, w.tree_len) == 0;
        for (Py_ssize_t i = 0; i < w.held && all; i++)
            all = !w.viewed[i] || same(&candidate->slots[i], &w.views[i]);  /* (the tree says which) */
        if (all)
            found = candidate;
    }
    Py_ssize_t itself = 0;
    for (Py_ssize_t i = 0; found != NULL && i < w.held; i++) {
        if (!w.viewed[i] || read_in_place(&w.views[i])) {
            pass[i] = w.leaves[i];
            itself++;
            continue;
        }
        memcpy(found->slots[i].data, w.views[i].buf, w.views[i].len);
        pass[i] = PyTuple_GET_ITEM(found->arrays, i);
    }
    for (Py_ssize_t i = 0; i < w.held; i++)
        if (w.viewed[i])
            PyBuffer_Release(&w.views[i]);
    if (stage != NULL)
        *stage = itself == w.held ? NULL : found;
    return w.native && (found != NULL || !w.apart || self->ordered);
}

/* A staged call's argument `obj` with its leaves (numpy arrays: `walk`) replaced by
 * pass[*at...]: C++ is given the call's lists and tuples, so that its signature of a stage's
 * calls is the structure's, as that of the arrays themselves. A new reference. */
static PyObject *rebuilt(PyObject *obj, PyObject **pass, Py_ssize_t *at) {
    int list = PyList_CheckExact(obj);
    if (!list && !PyTuple_CheckExact(obj)) {
        PyObject *leaf = pass[(*at)++];
        Py_INCREF(leaf);
        return leaf;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
    PyObject *out = list ? PyList_New(n) : PyTuple_New(n);
    PyObject **items = PySequence_Fast_ITEMS(obj);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *item = rebuilt(items[i], pass, at);
        if (item == NULL)
            Py_CLEAR(out);
        else if (list)
            PyList_SET_ITEM(out, i, item);
        else
            PyTuple_SET_ITEM(out, i, item);
    }
    return out;
}

static PyObject *call_python(Front *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *python = PyObject_GetAttr((PyObject *)self, str_call_python);
    if (python == NULL)
        return NULL;
    PyObject *r = PyObject_Vectorcall(python, args, nargsf, kwnames);
    Py_DECREF(python);
    return r;
}

/* Whether a call the fast path raised a ValueError for is the Python path's to run
 * (`self._python_takes`): a DeviceArray argument that has lost its buffer (donated; C++ passes
 * it like a live one, dispatch._setup, and its execution fails; Python's error is the one),
 * or a dict whose keys C++'s pytrees cannot sort. Else the call's error stands. */
static int python_takes(Front *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *check = PyObject_GetAttr((PyObject *)self, str_python_takes);
    PyObject *r = check == NULL ? NULL : PyObject_Vectorcall(check, args, nargsf, kwnames);
    int takes = r != NULL && PyObject_IsTrue(r) == 1;
    Py_XDECREF(check);
    Py_XDECREF(r);
    PyErr_Restore(type, value, tb);  /* (in place of the check's own error, if any) */
    if (takes)
        PyErr_Clear();
    return takes;
}

/* Whether a call's positional arguments hold a DeviceArray that stands for what its buffer
 * holds (no host_dtype): `given` then holds the arguments with each such one's buffer in its
 * place, which C++ takes as it is; under the DeviceArray's dataclass node (dispatch._setup)
 * C++ reads its two fields through Python, per argument and call. `a * b + 1.0` on 3 elements
 * kept on the device, two DeviceArrays in: on the CPU 4.53-4.64 µs a call against 4.78-4.87
 * with the node (jax.jit 4.5); on a TPU v5e 122.5-126.3 against 124.5-125.6 (jax.jit
 * 119.5-122.7: the rest of the gap is not the arguments). A miss's arguments are mapped back
 * (dispatch._kept_again). */
static int bare(PyObject *const *args, Py_ssize_t n, PyObject *kwnames, PyObject **given) {
    if (device_array_type == NULL || kwnames != NULL || n > MAX_ARGS)
        return 0;
    int any = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *a = args[i], *buffer = NULL;
        if (Py_IS_TYPE(a, device_array_type)
            && *(PyObject **)((char *)a + device_array_slots[3]) == Py_None)  /* host_dtype */
            buffer = *(PyObject **)((char *)a + device_array_slots[0]);
        given[i] = buffer != NULL ? buffer : a;
        any |= buffer != NULL;
    }
    return any;
}

/* ----- the plain tier's hot path ------------------------------------------------------- */

/* api.JittedFunction._call_python's hot paths in C, where they run plain autograd: a call of a
 * signature that runs plainly before its trace (tiering.py) is looked up by the key
 * api._simple_signature makes of its positional arguments, in the function's
 * `_simple_untraced`, and run here, timed into its tiering.Untraced, as _call_python would;
 * one that runs plainly for good (`_simple`'s entry None: tiering.PlainStep) is run here too;
 * any other call goes to Python, which looks again. A call's cost over plain autograd:
 * lifelines' arguments, arrays beside a tuple holding None, 2.5 µs in Python, 1.3 here;
 * autograd's boxes (grad(jit_ps(f)), pymanopt's decorator stack) 4.1-4.4, 1.3-2.0 here.
 * set_plain_tier hands over what the key is made of. */
static PyObject *plain_supported, *plain_boxes, *plain_numbers, *plain_tiering;  /* api's, autograd's, tiering */
static PyObject *mark_tuple, *mark_box, *mark_object;                             /* api's marks */
static PyObject *str_simple_untraced, *str_spent, *str_due, *str_replay, *str_plain_seconds, *str_stats;
static PyObject *str_plain_tier_calls, *str_fun, *str_calls, *str_least, *str_shape, *str_dtype, *str_value, *str_simple;
static PyObject *str_plain_for_good;

static PyObject *set_plain_tier(PyObject *module, PyObject *args) {
    PyObject *supported, *boxes, *numbers, *tiering, *t, *b, *o;
    if (!PyArg_ParseTuple(args, "O!O!O!O(OOO)", &PySet_Type, &supported, &PySet_Type, &boxes, &PyFrozenSet_Type,
                          &numbers, &tiering, &t, &b, &o))
        return NULL;
    PyObject *objects[] = {supported, boxes, numbers, tiering, t, b, o};
    PyObject **slots[] = {&plain_supported, &plain_boxes, &plain_numbers, &plain_tiering, &mark_tuple, &mark_box,
                          &mark_object};
    for (int i = 0; i < 7; i++) {
        Py_INCREF(objects[i]);
        Py_XSETREF(*slots[i], objects[i]);
    }
    Py_RETURN_NONE;
}

/* An array's key, (shape, dtype) or (mark, shape, dtype); NULL without an error where its
 * dtype is not one compiled code takes. */
static PyObject *array_key(PyObject *a, PyObject *mark) {
    PyObject *dtype = PyObject_GetAttr(a, str_dtype);
    if (dtype == NULL)
        return NULL;
    int supported = PySet_Contains(plain_supported, dtype);
    PyObject *shape = supported == 1 ? PyObject_GetAttr(a, str_shape) : NULL;
    PyObject *key = shape == NULL ? NULL : mark == NULL ? PyTuple_Pack(2, shape, dtype) : PyTuple_Pack(3, mark, shape, dtype);
    Py_XDECREF(shape);
    Py_DECREF(dtype);
    return key;
}

/* The key api._simple_signature makes of `n` arguments (a new reference), or NULL: with an
 * error set on one, without where it makes none (or they nest deeper than MAX_DEPTH). */
static PyObject *simple_signature(PyObject *const *args, Py_ssize_t n, int depth) {
    if (depth > MAX_DEPTH)
        return NULL;
    PyObject *sig = PyTuple_New(n);
    for (Py_ssize_t i = 0; sig != NULL && i < n; i++) {
        PyObject *a = args[i], *type = (PyObject *)Py_TYPE(a), *item = NULL;
        int member;
        if (type == ndarray_type && (item = array_key(a, NULL)) != NULL) {
        } else if (PyErr_Occurred()) {
        } else if (a == Py_None) {
            item = Py_NewRef(Py_None);
        } else if (PyTuple_CheckExact(a)) {
            PyObject *inner = simple_signature(((PyTupleObject *)a)->ob_item, PyTuple_GET_SIZE(a), depth + 1);
            item = inner == NULL ? NULL : PyTuple_Pack(2, mark_tuple, inner);
            Py_XDECREF(inner);
        } else if ((member = PySet_Contains(plain_boxes, type)) != 0) {
            PyObject *value = member < 0 ? NULL : PyObject_GetAttr(a, str_value);
            if (value != NULL && (PyObject *)Py_TYPE(value) == ndarray_type)
                item = array_key(value, mark_box);
            Py_XDECREF(value);
        } else if ((member = PySet_Contains(plain_numbers, type)) != 0) {
            item = member < 0 ? NULL : Py_NewRef(type);
        } else {
            PyObject *id = PyLong_FromVoidPtr(a);
            item = id == NULL ? NULL : PyTuple_Pack(3, mark_object, type, id);
            Py_XDECREF(id);
        }
        if (item == NULL)
            Py_CLEAR(sig);
        else
            PyTuple_SET_ITEM(sig, i, item);
    }
    return sig;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);  /* (time.perf_counter's clock) */
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* `untraced.name` as a double; -1 with an error set where it is not a number. */
static int read_seconds(PyObject *untraced, PyObject *name, double *value) {
    PyObject *v = PyObject_GetAttr(untraced, name);
    *value = v == NULL ? -1.0 : PyFloat_AsDouble(v);
    Py_XDECREF(v);
    return *value == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* `obj.name += step` (an int), or `obj.name = value` where `value` is given. */
static int update(PyObject *obj, PyObject *name, PyObject *value, long step) {
    PyObject *v = value;
    if (v == NULL) {
        PyObject *old = PyObject_GetAttr(obj, name), *inc = PyLong_FromLong(step);
        v = old == NULL || inc == NULL ? NULL : PyNumber_Add(old, inc);
        Py_XDECREF(old);
        Py_XDECREF(inc);
    } else {
        Py_INCREF(v);
    }
    int r = v == NULL ? -1 : PyObject_SetAttr(obj, name, v);
    Py_XDECREF(v);
    return r;
}

/* The dict `self.<name>` (a new reference) where it holds any signature, else NULL. */
static PyObject *simple_map(Front *self, PyObject *name) {
    PyObject *map = PyObject_GetAttr((PyObject *)self, name);
    if (map == NULL)
        PyErr_Clear();
    else if (!PyDict_CheckExact(map) || PyDict_GET_SIZE(map) == 0)
        Py_CLEAR(map);
    return map;
}

/* The value `sig` has in `map` (a new reference), or NULL: none (`map` NULL too). */
static PyObject *simple_value(PyObject *map, PyObject *sig) {
    PyObject *value = map == NULL ? NULL : PyDict_GetItemWithError(map, sig);  /* borrowed, from map */
    Py_XINCREF(value);
    return value;
}

/* The call run on the plain tier: 1 with *result set (NULL where the function raised), or 0,
 * no error set, where Python is to take it (its signature neither one of `_simple_untraced`'s
 * nor plain for good, its budget spent, a fixed plain budget set, a trace run by numpy held
 * for it, anything unforeseen). */
static int plain_tier(Front *self, PyObject *const *args, Py_ssize_t n, PyObject **result) {
    if (plain_supported == NULL)
        return 0;
    PyObject *untraced = NULL, *fun = NULL, *stats = NULL, *fixed = NULL, *replay = NULL;
    PyObject *flag = PyObject_GetAttr((PyObject *)self, str_plain_for_good);  /* (_simple's compiled ones are Python's) */
    if (flag == NULL)
        PyErr_Clear();
    PyObject *untraced_map = simple_map(self, str_simple_untraced);
    PyObject *simple = flag == Py_True ? simple_map(self, str_simple) : NULL;
    Py_XDECREF(flag);
    PyObject *sig = untraced_map == NULL && simple == NULL ? NULL : simple_signature(args, n, 0);  /* (none to find) */
    PyObject *plain = sig == NULL ? NULL : simple_value(untraced_map, sig);
    if (plain != NULL && PyTuple_CheckExact(plain) && PyTuple_GET_SIZE(plain) == 2)
        untraced = Py_NewRef(PyTuple_GET_ITEM(plain, 0));
    int taken = 0;
    double spent, due;
    if (plain == NULL && sig != NULL && !PyErr_Occurred()) {  /* plain autograd's for good (_simple: no entry) */
        PyObject *hit = simple_value(simple, sig);
        if (hit != NULL && PyTuple_CheckExact(hit) && PyTuple_GET_SIZE(hit) == 2 && PyTuple_GET_ITEM(hit, 0) == Py_None
            && (stats = PyObject_GetAttr((PyObject *)self, str_stats)) != NULL
            && (fun = PyObject_GetAttr((PyObject *)self, str_fun)) != NULL
            && update(stats, str_plain_tier_calls, NULL, 1) == 0) {
            taken = 1;
            *result = PyObject_Vectorcall(fun, args, n, NULL);
        }
        Py_XDECREF(hit);
    }
    Py_XDECREF(plain);
    Py_XDECREF(sig);
    Py_XDECREF(untraced_map);
    Py_XDECREF(simple);
    if (!taken && untraced != NULL && read_seconds(untraced, str_spent, &spent) == 0 && read_seconds(untraced, str_due, &due) == 0
        && spent < due && (fixed = PyObject_GetAttr(plain_tiering, str_plain_seconds)) == Py_None
        && (replay = PyObject_GetAttr(untraced, str_replay)) == Py_None
        && (stats = PyObject_GetAttr((PyObject *)self, str_stats)) != NULL
        && (fun = PyObject_GetAttr((PyObject *)self, str_fun)) != NULL
        && update(stats, str_plain_tier_calls, NULL, 1) == 0) {
        taken = 1;
        double t0 = seconds_now();
        PyObject *r = PyObject_Vectorcall(fun, args, n, NULL);
        double took = seconds_now() - t0;
        PyObject *type, *value, *traceback;  /* (the function's error, if any, kept through the bookkeeping) */
        PyErr_Fetch(&type, &value, &traceback);
        double least;  /* (spent read again: a call of the same signature within this one counted its own) */
        int kept = read_seconds(untraced, str_spent, &spent) == 0;
        PyObject *total = PyFloat_FromDouble(spent + took), *quickest = PyFloat_FromDouble(took);
        kept = kept && total != NULL && quickest != NULL && update(untraced, str_spent, total, 0) == 0
                   && update(untraced, str_calls, NULL, 1) == 0 && read_seconds(untraced, str_least, &least) == 0
                   && (took >= least || update(untraced, str_least, quickest, 0) == 0);
        Py_XDECREF(total);
        Py_XDECREF(quickest);
        if (!kept && r != NULL) {  /* the bookkeeping's own error, after a call that ran */
            Py_CLEAR(r);
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
        } else {
            PyErr_Restore(type, value, traceback);
        }
        *result = r;
    }
    if (!taken)
        PyErr_Clear();
    Py_XDECREF(untraced);
    Py_XDECREF(fixed);
    Py_XDECREF(replay);
    Py_XDECREF(stats);
    Py_XDECREF(fun);
    return taken;
}

static PyObject *front_vectorcall(Front *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    int traced = tracing();
    if (traced < 0)
        return NULL;
    if (traced)  /* the Python path, which inlines the function into the trace */
        return call_python(self, args, nargsf, kwnames);
    if (self->captured != NULL && self->captured != Py_None && !captured_hold(self->captured))
        return call_python(self, args, nargsf, kwnames);
    int allowed = errstate_allows();
    if (allowed < 0)
        return NULL;
    if (!allowed)
        return call_python(self, args, nargsf, kwnames);
    if (self->fast == NULL || self->fast == Py_None || self->waiting) {
        PyObject *r;
        return kwnames == NULL && plain_tier(self, args, n, &r) ? r : call_python(self, args, nargsf, kwnames);
    }
    Stage *stage = NULL;
    PyObject *pass[MAX_ARGS];
    if (!scan(self, args, n, kwnames == NULL && !self->busy && self->n_stages ? &stage : NULL, pass))
        return call_python(self, args, nargsf, kwnames);
    int failed;
    PyObject *x64 = x64_on(&failed);
    if (failed)
        return NULL;
    PyObject *fast = self->fast;  /* alive through the call if reset meanwhile */
    Py_INCREF(fast);
    PyObject *r;
    if (stage == NULL) {
        PyObject *given[MAX_ARGS];
        r = PyObject_Vectorcall(fast, bare(args, n, kwnames, given) ? given : args, nargsf, kwnames);
    } else {
        /* C++ returns the outputs flat (a leaf or a tuple of them) unless the call missed */
        PyObject *arrays = stage->arrays, *done = (PyObject *)stage->finish;  /* alive if unstaged meanwhile */
        Py_INCREF(arrays);
        Py_INCREF(done);
        self->busy = 1;
        self->missed = 0;
        if (stage->tree_len == n) {  /* positional arrays: `pass` itself */
            r = PyObject_Vectorcall(fast, pass, n, NULL);
        } else {
            PyObject *given[MAX_ARGS];  /* the call's lists and tuples around `pass` */
            Py_ssize_t at = 0, made = 0;
            while (made < n && (given[made] = rebuilt(args[made], pass, &at)) != NULL)
                made++;
            r = made == n ? PyObject_Vectorcall(fast, given, n, NULL) : NULL;
            for (Py_ssize_t i = 0; i < made; i++)
                Py_DECREF(given[i]);
        }
        self->busy = 0;
        x64_restore(x64);
        x64 = NULL;
        if (r != NULL && !self->missed) {
            PyObject *outs = r;
            PyObject *result = PyTuple_Check(r) ? finish((Finish *)done, ((PyTupleObject *)r)->ob_item,
                                                         PyTuple_GET_SIZE(r))
                                                : finish((Finish *)done, &outs, 1);
            Py_SETREF(r, result);
        }
        Py_DECREF(arrays);
        Py_DECREF(done);
    }
    x64_restore(x64);
    Py_DECREF(fast);
    if (r == NULL && PyErr_ExceptionMatches(PyExc_ValueError) && python_takes(self, args, nargsf, kwnames))
        return call_python(self, args, nargsf, kwnames);
    return r;
}

/* The stages are taken out before they are freed: a device array's deallocation may let
 * another thread run, whose call or unstage would otherwise find them half freed (seen: two
 * threads freeing one stage, malloc's lists corrupted). */
static void free_stages(Front *self) {
    Stage *stages[MAX_STAGES];
    int n = self->n_stages;
    memcpy(stages, self->stages, n * sizeof(Stage *));
    self->n_stages = 0;
    for (int s = 0; s < n; s++) {
        Py_DECREF(stages[s]->arrays);
        Py_DECREF(stages[s]->finish);
        PyMem_Free(stages[s]);
    }
}

static int same_slots(const Stage *a, const Stage *b) {
    if (a->n != b->n || a->tree_len != b->tree_len || memcmp(a->tree, b->tree, a->tree_len) != 0)
        return 0;
    for (Py_ssize_t i = 0; i < a->n; i++) {
        const Slot *y = &b->slots[i];
        if (!describes(&a->slots[i], y->nbytes, y->ndim, y->shape, y->format))
            return 0;
    }
    return 1;
}

static Py_ssize_t stage_bytes(const Stage *stage) {
    Py_ssize_t bytes = 0;
    for (Py_ssize_t i = 0; i < stage->n; i++)
        bytes += stage->slots[i].nbytes > 0 ? stage->slots[i].nbytes : 0;
    return bytes;
}

/* stage(slots, arrays, finish, tree): stage calls whose arguments' leaves match `slots`, one
 * (format, shape, nbytes, address) per leaf (None, with an array None, for a Python number:
 * passed as it is), in the structure `tree` (bytes, as `walk` writes it), into `arrays`, the
 * device arrays at those addresses, their results finished by `finish`. False when no more
 * stages are kept (MAX_STAGES, MAX_STAGED_BYTES) or the signature cannot be staged. */
static PyObject *front_stage(Front *self, PyObject *args) {
    PyObject *slots, *arrays;
    Finish *done;
    const char *tree;
    Py_ssize_t tree_len;
    if (!PyArg_ParseTuple(args, "O!O!O!y#", &PyTuple_Type, &slots, &PyTuple_Type, &arrays, &FinishType, &done,
                          &tree, &tree_len))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(slots);
    if (n != PyTuple_GET_SIZE(arrays)) {
        PyErr_SetString(PyExc_ValueError, "one array per slot");
        return NULL;
    }
    if (self->n_stages == MAX_STAGES || n == 0 || n > MAX_ARGS || tree_len > MAX_TREE)
        Py_RETURN_FALSE;
    Stage *stage = PyMem_Calloc(1, sizeof(Stage));
    if (stage == NULL)
        return PyErr_NoMemory();
    stage->n = n;
    stage->tree_len = tree_len;
    memcpy(stage->tree, tree, tree_len);
    for (Py_ssize_t i = 0; i < n; i++) {
        Slot *slot = &stage->slots[i];
        const char *format;
        PyObject *shape, *address;
        if (PyTuple_GET_ITEM(slots, i) == Py_None) {  /* a number's: never compared (`scan`) */
            slot->nbytes = -1;
            continue;
        }
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(slots, i), "sO!nO", &format, &PyTuple_Type, &shape, &slot->nbytes,
                              &address))
            goto fail;
        if (strlen(format) >= FORMAT_CHARS || PyTuple_GET_SIZE(shape) > MAX_DIMS) {
            PyMem_Free(stage);
            Py_RETURN_FALSE;
        }
        strcpy(slot->format, format);
        slot->ndim = (int)PyTuple_GET_SIZE(shape);
        for (int d = 0; d < slot->ndim; d++)
            if ((slot->shape[d] = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d))) == -1 && PyErr_Occurred())
                goto fail;
        if ((slot->data = PyLong_AsVoidPtr(address)) == NULL)
            goto fail;
    }
    for (int s = 0; s < self->n_stages; s++)
        if (same_slots(self->stages[s], stage)) {  /* staged: a new program's results */
            PyMem_Free(stage);
            Py_INCREF(done);
            Py_SETREF(self->stages[s]->finish, done);
            Py_RETURN_TRUE;
        }
    Py_ssize_t staged_bytes = stage_bytes(stage);
    for (int s = 0; s < self->n_stages; s++)
        staged_bytes += stage_bytes(self->stages[s]);
    if (staged_bytes > MAX_STAGED_BYTES) {
        PyMem_Free(stage);
        Py_RETURN_FALSE;
    }
    Py_INCREF(arrays);
    Py_INCREF(done);
    stage->arrays = arrays;
    stage->finish = done;
    self->stages[self->n_stages++] = stage;
    Py_RETURN_TRUE;
fail:
    PyMem_Free(stage);
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "a staging buffer's address is 0");
    return NULL;
}

static PyObject *front_unstage(Front *self, PyObject *unused) {
    free_stages(self);
    Py_RETURN_NONE;
}

static PyObject *front_staged(Front *self, PyObject *unused) {
    PyObject *all = PyList_New(0);
    for (int s = 0; all != NULL && s < self->n_stages; s++)
        if (PyList_Append(all, self->stages[s]->arrays) < 0)
            Py_CLEAR(all);
    return all;
}

static PyObject *front_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    Front *self = (Front *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->vectorcall = (vectorcallfunc)front_vectorcall;
        Py_INCREF(Py_None);
        self->fast = Py_None;
        Py_INCREF(Py_None);
        self->captured = Py_None;
    }
    return (PyObject *)self;
}

static PyObject *py_captured_hold(PyObject *module, PyObject *captured) {
    if (!PyTuple_Check(captured)) {
        PyErr_SetString(PyExc_TypeError, "captured_hold: a tuple of captured places");
        return NULL;
    }
    return PyBool_FromLong(captured_hold(captured));
}

static PyObject *set_errstate(PyObject *module, PyObject *args) {
    PyObject *var, *check;
    if (!PyArg_ParseTuple(args, "OO", &var, &check))
        return NULL;
    if (var != Py_None && !PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "set_errstate: a ContextVar or None");
        return NULL;
    }
    Py_XSETREF(errstate_var, var == Py_None ? NULL : Py_NewRef(var));
    Py_XSETREF(errstate_check, Py_NewRef(check));
    Py_CLEAR(errstate_ok);
    Py_RETURN_NONE;
}

static PyObject *set_trace_state(PyObject *module, PyObject *state) {
    Py_INCREF(state);
    Py_XSETREF(trace_state, state);
    Py_RETURN_NONE;
}

static int front_traverse(Front *self, visitproc visit, void *arg) {
    Py_VISIT(self->fast);
    Py_VISIT(self->captured);
    for (int s = 0; s < self->n_stages; s++) {
        Py_VISIT(self->stages[s]->arrays);
        Py_VISIT(self->stages[s]->finish);
    }
    return 0;
}

static int front_clear(Front *self) {
    Py_CLEAR(self->fast);
    Py_CLEAR(self->captured);
    free_stages(self);
    return 0;
}

static void front_dealloc(Front *self) {
    PyObject_GC_UnTrack(self);
    if (self->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)self);
    front_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *front_call(Front *self, PyObject *args, PyObject *kwargs) {
    return PyVectorcall_Call((PyObject *)self, args, kwargs);
}

static PyMethodDef front_methods[] = {
    {"stage", (PyCFunction)front_stage, METH_VARARGS, "stage(slots, arrays, finish, tree) -> whether kept"},
    {"unstage", (PyCFunction)front_unstage, METH_NOARGS, "forget every stage"},
    {"staged", (PyCFunction)front_staged, METH_NOARGS, "the stages' tuples of device arrays"},
    {NULL},
};

static PyMemberDef front_members[] = {
    {"_fast", T_OBJECT, offsetof(Front, fast), 0, "the PjitFunction calls go to; None: self._call_python"},
    {"busy", T_INT, offsetof(Front, busy), READONLY, "whether a staged call is in C++"},
    {"missed", T_INT, offsetof(Front, missed), 0, "set by a staged call's miss, whose results are finished"},
    {"_waiting", T_INT, offsetof(Front, waiting), 0, "while set, calls go to self._call_python (no fast path yet)"},
    {"_captured_c", T_OBJECT, offsetof(Front, captured), 0, "None, or ((container, key, value), ...): calls where "
     "one holds another object go to self._call_python"},
    {"_ordered", T_INT, offsetof(Front, ordered), 0, "set: C++ may be given numpy arrays PJRT copies apart (an "
     "accelerator's executions wait for them)"},
    {NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "autograd_xla._callpath.Front",
    .tp_basicsize = sizeof(Front),
    .tp_dealloc = (destructor)front_dealloc,
    .tp_vectorcall_offset = offsetof(Front, vectorcall),
    .tp_weaklistoffset = offsetof(Front, weakrefs),
    .tp_call = (ternaryfunc)front_call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_BASETYPE,
    .tp_traverse = (traverseproc)front_traverse,
    .tp_clear = (inquiry)front_clear,
    .tp_methods = front_methods,
    .tp_members = front_members,
    .tp_new = front_new,
    .tp_doc = "A jitted function's calls (JittedFunction's base): to `_fast` outside traces, numpy arguments of a "
              "staged signature in its staging buffers; else to `self._call_python`.",
};

/* ----- the module ----------------------------------------------------------------------- */

static PyMethodDef module_functions[] = {
    {"set_trace_state", set_trace_state, METH_O, "set_trace_state(tracing.state): whose `traces` mean a trace is on"},
    {"captured_hold", py_captured_hold, METH_O, "captured_hold(places) -> whether each holds what it held "
     "(the Front's check, for api._call_python: calls.captured_hold)"},
    {"set_errstate", set_errstate, METH_VARARGS, "set_errstate(numpy's error-state ContextVar or None, "
     "calls.errstate_allows): whether compiled calls may run under numpy's floating-point error state"},
    {"set_device_array", set_device_array, METH_O, "set_device_array(backend.DeviceArray): the type of kept results"},
    {"set_plain_tier", set_plain_tier, METH_VARARGS, "set_plain_tier(supported dtypes, box types, number types, "
     "tiering, (tuple, box, object marks)): what the plain tier's keys are made of (api._simple_signature)"},
    {"address", address, METH_O, "address(device_array): where its memory is, on the CPU"},
    {NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_callpath", "dispatch.py's per-call work in C", -1,
                                    module_functions};

PyMODINIT_FUNC PyInit__callpath(void) {
    PyObject *numpy = PyImport_ImportModule("numpy");
    if (numpy == NULL)
        return NULL;
    ndarray_type = PyObject_GetAttrString(numpy, "ndarray");
    Py_DECREF(numpy);
    PyObject *multiarray = PyImport_ImportModule("numpy._core._multiarray_umath");
    PyObject *capsule = multiarray == NULL ? NULL : PyObject_GetAttrString(multiarray, "_ARRAY_API");
    void **api = capsule == NULL || !PyCapsule_CheckExact(capsule) ? NULL : (void **)PyCapsule_GetPointer(capsule, NULL);
    if (api != NULL) {  /* the capsule lives as long as numpy's module, which stays imported */
        array_type = (PyTypeObject *)api[2];
        new_from_descr = (new_from_descr_fn)api[94];
        set_base_object = (set_base_object_fn)api[282];
    }
    PyErr_Clear();
    Py_XDECREF(capsule);
    Py_XDECREF(multiarray);
    PyObject *collections = PyImport_ImportModule("collections");
    if (collections == NULL)
        return NULL;
    PyObject *ordered = PyObject_GetAttrString(collections, "OrderedDict");
    Py_DECREF(collections);
    if (ordered == NULL)
        return NULL;
    move_to_end = PyObject_GetAttrString(ordered, "move_to_end");
    Py_DECREF(ordered);
    if (ndarray_type == NULL || move_to_end == NULL || PyType_Ready(&CountsType) < 0 || PyType_Ready(&HoldType) < 0
        || PyType_Ready(&FinishType) < 0 || PyType_Ready(&FrontType) < 0)
        return NULL;
    str_traces = PyUnicode_InternFromString("traces");
    str_call_python = PyUnicode_InternFromString("_call_python");
    str_python_takes = PyUnicode_InternFromString("_python_takes");
    str_jax_config = PyUnicode_InternFromString("jax._src.config");
    str_enable_x64 = PyUnicode_InternFromString("enable_x64");
    str_swap_local = PyUnicode_InternFromString("swap_local");
    str_simple_untraced = PyUnicode_InternFromString("_simple_untraced");
    str_spent = PyUnicode_InternFromString("spent");
    str_due = PyUnicode_InternFromString("due");
    str_replay = PyUnicode_InternFromString("replay");
    str_plain_seconds = PyUnicode_InternFromString("PLAIN_SECONDS");
    str_stats = PyUnicode_InternFromString("stats");
    str_plain_tier_calls = PyUnicode_InternFromString("plain_tier_calls");
    str_fun = PyUnicode_InternFromString("_fun");
    str_calls = PyUnicode_InternFromString("calls");
    str_least = PyUnicode_InternFromString("least");
    str_shape = PyUnicode_InternFromString("shape");
    str_dtype = PyUnicode_InternFromString("dtype");
    str_value = PyUnicode_InternFromString("_value");
    str_simple = PyUnicode_InternFromString("_simple");
    str_plain_for_good = PyUnicode_InternFromString("_plain_for_good");
    empty_tuple = PyTuple_New(0);
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CountsType);
    Py_INCREF(&FinishType);
    Py_INCREF(&FrontType);
    if (PyModule_AddObject(m, "Counts", (PyObject *)&CountsType) < 0
        || PyModule_AddObject(m, "Finish", (PyObject *)&FinishType) < 0
        || PyModule_AddObject(m, "Front", (PyObject *)&FrontType) < 0
        || PyModule_AddIntConstant(m, "MAX_DEPTH", MAX_DEPTH) < 0)
        return NULL;
    return m;
}
