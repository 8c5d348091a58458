"""What the compile cache keys a call by, and the words for it.

A call's signature is its arguments' container structure plus, per leaf, `leaf_signature`:
(shape, dtype) of an array, the type of a Python number (traced weakly typed), or a
`Static` value passed by value into the trace. Here too: the names of the arguments
(`signature_of`, through autograd's wrappers), how two signatures differ
(`describe_change`, for the retrace warning and the compile log) and the argument shapes
numpy would refuse (`suspicious`). Used by api; imports nothing of it.
"""
import collections
import functools
import hashlib
import inspect
import itertools
import sys
import threading
import types

import numpy as np
from autograd.extend import VSpace
from autograd.wrap_util import unary_to_nary

from . import tree
from .calls import held, sampled_bytes
from .core import PY_SCALARS, Aval, supported
from .core import SUPPORTED_DTYPES as _SUPPORTED
from .errors import ArgumentError

# The code object of the function autograd's differential operators return (grad(f) is an
# `nary_f(*args, **kwargs)` closure over `fun`, the same code for every operator and function)
_NARY_CODE = unary_to_nary(lambda fun, x: None)(lambda: None).__code__


def _rejected(x):
    """Whether x is an ndarray subclass whose semantics a compiled program would silently drop:
    a numpy.matrix, or a masked array (none exists before numpy.ma is imported, which the
    package leaves to whoever makes one: its import took 8-13 ms)."""
    if isinstance(x, np.matrix):
        return True
    ma = sys.modules.get("numpy.ma")
    return ma is not None and isinstance(x, ma.MaskedArray)



class PlainArgument(Exception):
    """An argument that compiled code cannot take, although plain autograd can (a masked array,
    an int beyond int64, an autograd vector space of a type jit_ps cannot flatten)."""


def _native(dtype):
    """A non-native byte order is numpy's business, not XLA's: compile for the native dtype
    (the argument is converted on the way in)."""
    if dtype.byteorder not in "=|" and dtype.newbyteorder("=") in _SUPPORTED:
        return dtype.newbyteorder("=")
    return None


def is_device_array(t):
    """Whether type `t` is backend.DeviceArray, without importing backend: none exists before it
    is imported (a job whose calls all run plainly never does)."""
    backend = sys.modules.get("autograd_xla.backend")
    return backend is not None and t is backend.DeviceArray


def leaf_signature(x):
    """What the cache key holds of one argument leaf: (shape, dtype) for an array, the type for
    a Python number (traced weakly typed), else the leaf itself as a `Static` value."""
    t = type(x)
    if t is np.ndarray:
        if x.dtype not in _SUPPORTED and not supported(x.dtype):
            native = _native(x.dtype)
            return (x.shape, native) if native is not None else Static(x)
        return (x.shape, x.dtype)
    if t in PY_SCALARS:
        if t is int and not -2**63 <= x < 2**63:
            raise PlainArgument(f"the Python int {x} does not fit in int64")
        return t
    if is_device_array(t):
        return (x.shape, x.dtype)
    if isinstance(x, (np.generic, np.ndarray)):
        if _rejected(x):
            raise PlainArgument(_describe_rejected(x))
        dtype = x.dtype if supported(x.dtype) else _native(x.dtype)
        if dtype is None:
            return Static(x)
        return (x.shape, dtype, subclass_key(x)) if isinstance(x, np.ndarray) else (x.shape, dtype)
    if t in VSpace.mappings and t is not bool:
        raise PlainArgument(f"it is a {t.__name__}, a type autograd differentiates through its own vector space, "
                            "which jit_ps cannot flatten into arrays; pass its arrays (in tuples, lists or dicts) "
                            "instead")
    return Static(x)


#: Methods through which Python's operators and conversions reach an array: a Tracer answers them
#: itself (binding numpy's ufuncs), so a subclass that defines its own would not be followed.
_OPERATOR_METHODS = frozenset(
    [f"__{p}{name}__" for name in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or",
                                   "xor", "lshift", "rshift", "divmod") for p in ("", "r", "i")]
    + [f"__{name}__" for name in ("eq", "ne", "lt", "le", "gt", "ge", "neg", "pos", "abs", "invert", "len", "iter",
                                  "bool", "float", "int", "complex", "index", "contains")])


@functools.lru_cache(maxsize=256)
def _subclass_refusal(cls):
    """Why an ndarray subclass cannot be traced as its type (tracing.Kind), or None."""
    own = set()
    for klass in cls.__mro__:
        if klass is np.ndarray:
            break
        own.update(vars(klass))
        if vars(klass).get("__slots__"):
            return (f"it is a {cls.__qualname__}, an ndarray subclass keeping attributes in __slots__, which a traced "
                    "stand-in cannot read; pass np.asarray(x)")
    overridden = sorted(own & _OPERATOR_METHODS)
    if overridden:
        return (f"it is a {cls.__qualname__}, an ndarray subclass with operators of its own ({', '.join(overridden)}), "
                "which compiled code would not follow; pass np.asarray(x)")
    return None


def subclass_key(x):
    """What the cache key holds of an ndarray subclass argument beyond shape and dtype: its class
    and its instance attributes (by value, as a Static's; PennyLane's `requires_grad` decides what
    qml.grad differentiates). Raises PlainArgument for a subclass whose semantics a compiled
    program would drop."""
    cls = type(x)
    why = _subclass_refusal(cls)
    if why is not None:
        raise PlainArgument(why)
    attrs = getattr(x, "__dict__", None)
    return cls, tuple(sorted((k, _static_key(v)) for k, v in attrs.items())) if attrs else ()


class Static:
    """An argument leaf passed into the trace by value: part of the cache key, not of the
    compiled program's parameters. Strings, None-like markers, slices, dtypes, callables and
    other objects compare by value where they are hashable and by identity where they are not
    (like a closed-over array, a later mutation is not seen); arrays (boolean masks, index
    arrays that decide a shape) by a digest of their bytes, computed on every call."""

    __slots__ = ("value", "key")

    def __init__(self, value):
        self.value = value
        self.key = _static_key(value)

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        if type(other) is not Static:
            return False
        try:
            return bool(self.key == other.key)
        except Exception:  # an object whose == is not a truth value
            return False

    def __repr__(self):
        return f"Static({short(self.value)})"


def _static_key(x):
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind != "O":
        data = np.ascontiguousarray(x).reshape(-1).view(np.uint8)  # any dtype's bytes (datetimes too)
        digest = hashlib.sha1(data, usedforsecurity=False).digest()
        return ("array", type(x), x.shape, x.dtype.str, digest)
    if type(x) in (float, complex):
        return (type(x), repr(x))  # -0.0 and nan are values of their own
    state = state_digest(x) if _holds_state(type(x)) else None
    try:
        hash(x)
    except TypeError:
        return ("identity", id(x), state)
    return (type(x), x) if state is None else (type(x), x, state)


#: Objects whose attributes state_digest does not read: code, not data (a function's closed-over
#: arrays are constants, as a closure's are).
_STATELESS = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              functools.partial, np.ufunc)
#: state_digest's bounds: values read (objects, numbers, strings and arrays: an attribute holding
#: a list of a million floats costs 4,096 of them, 3 ms), levels below the argument, bytes of
#: arrays digested.
STATE_VALUES = 4096
STATE_DEPTH = 8
STATE_BYTES = 64 << 20


def state_digest(x):
    """A digest of what an object argument holds: the arrays and Python scalars reachable from
    its attributes (__dict__'s and __slots__') through objects' attributes, dicts, lists and
    tuples, level by level (STATE_VALUES values, STATE_DEPTH levels and STATE_BYTES of arrays
    at most), with their names. The trace reads them as constants, so they are part of the
    key: a later change to them (an attribute bound to another array, an array changed in
    place: quimb's TensorNetwork.multiply_) is a new signature, not the old program's stale
    numbers. What lies beyond (a C type's insides, a pandas DataFrame's blocks; past the
    bounds) is not seen, as a closed-over array's changes are not. Its cost a call: lifelines'
    DataframeSlicer 31 µs, a quimb MPS of 10 sites (tensors, tag and index maps) 0.32 ms, of
    50 sites 1.1 ms."""
    h = hashlib.sha1(usedforsecurity=False)
    level, seen, values, left = [x], set(), 0, STATE_BYTES
    for _ in range(STATE_DEPTH):
        below, level = [], level[:STATE_VALUES - values]
        values += len(level)
        for obj in level:
            t = type(obj)
            if t in _SHAPE_SCALARS:
                h.update(f"{t.__name__}:{obj!r};".encode())
            elif isinstance(obj, (np.ndarray, np.generic)) and obj.dtype.kind != "O":
                left -= obj.nbytes
                h.update(f"{t.__name__}{obj.shape}{obj.dtype.str};".encode())
                if left >= 0:
                    h.update(np.ascontiguousarray(obj).reshape(-1).view(np.uint8))
            elif id(obj) not in seen and not isinstance(obj, _STATELESS):
                seen.add(id(obj))
                h.update(f"<{t.__qualname__}>".encode())
                try:
                    items = (obj.items() if t is dict else enumerate(obj) if t is list or t is tuple
                             else _attributes(obj)) or ()
                    for k, v in itertools.islice(items, max(0, STATE_VALUES - values - len(below))):
                        h.update(f"{k!r}=".encode() if type(k) in _SHAPE_SCALARS else b"?=")
                        below.append(v)
                except Exception:  # an attribute that raises when read: the object as its type
                    pass
            else:
                h.update(t.__qualname__.encode())
        if not below:
            break
        level = below
    return h.digest()


def _attributes(obj):
    """An object's attributes as (name, value) pairs, its __slots__' (quimb's Tensor) and its
    __dict__'s, or None where it has neither."""
    slots = _slot_names(type(obj))
    has_dict = isinstance(getattr(obj, "__dict__", None), dict)
    if not slots:
        return vars(obj).items() if has_dict else None
    pairs = [(n, getattr(obj, n)) for n in slots if hasattr(obj, n)]
    return pairs + list(vars(obj).items()) if has_dict else pairs


@functools.lru_cache(maxsize=256)
def _holds_state(cls):
    """Whether instances of `cls` have attributes state_digest reads (a __dict__ or __slots__),
    asked once per class: a static string's key costs 0.23 µs, each call."""
    return not issubclass(cls, _STATELESS) and bool(cls.__dictoffset__ or _slot_names(cls))


@functools.lru_cache(maxsize=256)
def _slot_names(cls):
    names = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        names += [slots] if isinstance(slots, str) else [n for n in slots if n not in ("__dict__", "__weakref__")]
    return tuple(names)


#: Learned.shared's entries at most (a few hundred bytes each); the oldest go first.
LEARNED_KEPT = 1024
_SHAPE_SCALARS = frozenset({int, float, complex, bool, str, bytes, type(None)})
_SHAPE_BY_IDENTITY = frozenset({types.BuiltinFunctionType, np.ufunc, type, types.ModuleType})


def function_shape(fun, depth=8, _seen=None):
    """A hashable stand-in for what `fun` computes, for Learned: its code, and recursively the
    functions, bound methods and partials it closes over or binds; scalars, builtins, ufuncs
    and classes inside by value, other objects (a fitter instance, a closed-over array) by
    type only. Two closures a library builds afresh per call (`value_and_grad(self._nll)` in
    every fit) have the same shape. None inside for what is deeper than `depth` or seen."""
    seen = set() if _seen is None else _seen
    if depth < 0 or id(fun) in seen:
        return None
    seen.add(id(fun))
    t = type(fun)
    if t in _SHAPE_SCALARS:
        return t, fun
    if t is tuple or t is list:
        return t, tuple(function_shape(x, depth - 1, seen) for x in fun)
    if t is dict:
        return t, tuple(sorted(((k, function_shape(v, depth - 1, seen)) for k, v in fun.items() if type(k) is str)))
    if t is types.FunctionType:
        cells = tuple(function_shape(c.cell_contents, depth - 1, seen) if _filled(c) else None
                      for c in fun.__closure__ or ())
        return fun.__code__, cells, function_shape(fun.__defaults__, depth - 1, seen)
    if t is types.MethodType:
        return t, function_shape(fun.__func__, depth - 1, seen), type(fun.__self__)
    if t is functools.partial:
        return t, function_shape((fun.func, fun.args, fun.keywords), depth - 1, seen)
    if t in _SHAPE_BY_IDENTITY:  # np.sin's raw function inside autograd's wrapper: which one matters
        return t, fun
    inner = getattr(fun, "__wrapped__", None)  # functools.wraps, and jit_ps itself
    if inner is not None and callable(fun):
        return t, function_shape(inner, depth - 1, seen)
    return ("type", t)


def _filled(cell):
    try:
        cell.cell_contents
    except ValueError:  # a cell not yet assigned
        return False
    return True


class Learned(dict):
    """What a jitted function's traces learned per call structure (spec -> frozenset of leaf
    indices: those found static, those found to be parameters; empty for a spec never seen),
    also kept process-wide for the functions of the same `function_shape`: a fresh wrapper
    of a fresh closure (a library's fit) starts from what the last one learned instead of
    tracing again to find it. Measured on lifelines' WeibullFitter, whose likelihood needs
    its masks E and entry static: each fresh value_and_grad traced three times, 30 ms,
    instead of once, 22 ms. Only a hint: a leaf wrongly static is still computed right (by
    value), at worst traced per value; what a function learns later overrides it. Read as
    `learned[spec]`: a plain dict lookup once the spec is known (a call's key reads it every
    call); the shared table, then `prior` (spec -> indices, where set), is asked once per spec."""

    shared = collections.OrderedDict()  # (function shape, kind, spec) -> frozenset
    _lock = threading.Lock()

    def __init__(self, shape, kind):
        super().__init__()
        self._shape, self._kind = shape, kind
        self.prior = None  # a derivative's: what its function learned (autodiff._derivative)

    def __missing__(self, spec):
        found = None
        if self._shape is not None:
            try:
                found = self.shared.get((self._shape, self._kind, spec))
            except TypeError:  # an unhashable shape or spec: nothing shared
                self._shape = None
        if found is None:
            found = frozenset() if self.prior is None else frozenset(self.prior(spec))
        dict.__setitem__(self, spec, found)
        return found

    def __setitem__(self, spec, indices):
        indices = frozenset(indices)
        dict.__setitem__(self, spec, indices)
        if self._shape is None:
            return
        key = (self._shape, self._kind, spec)
        with self._lock:
            try:
                self.shared[key] = indices
            except TypeError:  # an unhashable shape or spec: nothing shared
                self._shape = None
                return
            self.shared.move_to_end(key)
            while len(self.shared) > LEARNED_KEPT:
                self.shared.popitem(last=False)


def aval_of(x):
    t = type(x)
    if t in PY_SCALARS:
        return Aval((), PY_SCALARS[t], weak_type=True)
    shape, dtype = leaf_signature(x)[:2]
    return Aval(shape, dtype)


def hashable(v):
    try:
        hash(v)
        return True
    except TypeError:
        return False


def _describe_rejected(x):
    if not isinstance(x, np.matrix):
        return ("it is a masked array, whose mask compiled code would ignore. Pass the data with the masked entries "
                "filled (x.filled(value)) and, if needed, the mask as a separate boolean array")
    return ("it is a numpy.matrix, whose operators (* is a matrix product) compiled code would not follow; pass "
            "np.asarray(x) and use @ for matrix products")


def suspicious(name, treedef, leaves, path=()):
    """Notes for the parts of one argument that numpy would refuse as an array: None, and
    nested lists of numbers whose rows differ in length. `leaves`: this subtree's leaves."""
    if treedef is tree.LEAF:
        return []
    kind = treedef[0]
    where = name + tree.format_path(path)
    if kind is None:
        return [f"argument {where} is None (an empty container to jit_ps); if an array was meant, pass one"]
    if kind in (list, tuple) and leaves and all(type(x) in (bool, int, float, complex) for x in leaves) \
            and _ragged(treedef):
        return [f"argument {where} is a ragged nested list (its rows differ in length), which numpy cannot make "
                "an array of; pass a numpy array of the intended shape"]
    children = treedef[2] if kind is dict else treedef[1]
    keys = treedef[1] if kind is dict else range(len(children))
    notes, i = [], 0
    for k, c in zip(keys, children):
        n = tree.num_leaves(c)
        notes.extend(suspicious(name, c, leaves[i:i + n], path + (k,)))
        i += n
    return notes


def suspicious_arguments(top_level, leaves):
    """`suspicious`'s notes for each argument, `top_level` (name, treedef) pairs in order,
    `leaves` all their leaves: the usual cause of a numpy error while tracing, invisible in
    the error numpy gives."""
    notes, i = [], 0
    for name, sub in top_level:
        n = tree.num_leaves(sub)
        notes += suspicious(name, sub, list(leaves[i:i + n]))
        i += n
    return notes


def _ragged(treedef):
    """Whether nested lists/tuples of leaves alone have rows of different lengths or depths
    (False for anything holding another kind of container)."""
    def shape(t):
        if t is tree.LEAF:
            return ()
        if t[0] not in (list, tuple):
            raise TypeError
        shapes = {shape(c) for c in t[1]}
        if len(shapes) > 1 or _RAGGED in shapes:
            return _RAGGED
        return (len(t[1]),) + (shapes.pop() if shapes else ())
    try:
        return shape(treedef) is _RAGGED
    except TypeError:
        return False


_RAGGED = ("ragged",)


def distance(a, b):
    """How far cache key `a` is from `b`, for naming the closest: structure, then static
    arguments, then the number of leaves that differ, then values traced as static."""
    return (a[0][:2] != b[0][:2], a[0][2:] != b[0][2:], sum(x != y for x, y in zip(a[1], b[1])), a[2:] != b[2:])


def signature_of(fun):
    """The signature naming fun's arguments in messages and graphs. inspect.signature follows
    __wrapped__ (functools.wraps); autograd's differential operators (grad, value_and_grad,
    jacobian, hessian, elementwise_grad...) use a `wraps` of their own that sets none, and
    return an `nary_f(*args, **kwargs)` closure that passes the arguments on, in place, to
    its closure variable `fun` (one replaced by the point differentiated at): follow that."""
    while True:
        try:
            signature = inspect.signature(fun)
        except (TypeError, ValueError):
            return None
        code = getattr(fun, "__code__", None)
        if code is not _NARY_CODE:
            return signature
        fun = fun.__closure__[code.co_freevars.index("fun")].cell_contents


def positional_names(signature):
    """The names of a signature's positional parameters (none where it is None)."""
    if signature is None:
        return []
    return [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def static_arguments(signature, argnums, argnames):
    """jit_ps's static_argnums and static_argnames as (sorted indices, names), each completed
    by the other where the signature names positional parameters, as in jax."""
    nums = {int(i) for i in ((argnums,) if isinstance(argnums, int) else argnums)}
    names = (argnames,) if isinstance(argnames, str) else tuple(argnames)
    if signature is None:
        return tuple(sorted(nums)), names
    positional = positional_names(signature)
    nums |= {positional.index(n) for n in names if n in positional}
    names = set(names) | {positional[i] for i in nums if i < len(positional)}
    return tuple(sorted(nums)), tuple(sorted(names))


def donated_arguments(signature, donate_argnums, static_argnums):
    """Positional indices whose array buffers calls may donate (jit_ps's donate_argnums)."""
    nums = tuple(donate_argnums) if isinstance(donate_argnums, (tuple, list, range)) else (donate_argnums,)
    params = signature.parameters.values() if signature is not None else ()
    bound = None if signature is None or any(p.kind is p.VAR_POSITIONAL for p in params) \
        else len(positional_names(signature))
    for i in nums:
        if not isinstance(i, (int, np.integer)) or isinstance(i, bool) or i < 0 or bound is not None and i >= bound:
            within = f" below {bound}, the number of positional parameters" if bound is not None else ""
            raise ArgumentError(f"donate_argnums must hold non-negative ints{within}; got {i!r}")
        if i in static_argnums:
            raise ArgumentError(f"argument {i} cannot be both static and donated (a static value has no buffer)")
    return frozenset(int(i) for i in nums)


def describe_change(old, new, arguments, static_names=()):
    """What differs first between cache keys `old` and `new`, in words. `arguments`: the
    jitted function's naming of a spec's arguments (api's `_arguments`); `static_names`: of the
    leaves whose values `new` holds as static values (its third part)."""
    (spec0, sig0, *st0), (spec1, sig1, *st1) = old, new
    if spec0 != spec1:
        return _argument_change(arguments(spec0), arguments(spec1), sig0, sig1)
    names = arguments(spec1)[2]
    for k, (a, b) in enumerate(zip(sig0, sig1)):
        if a != b:
            who = f"argument {names[k]}" if k < len(names) else "an argument"
            if isinstance(a, tuple) and isinstance(b, tuple):
                what = ("class or attributes" if a[:2] == b[:2] else "dtype" if a[0] == b[0] else
                        "shape" if a[1] == b[1] else "shape and dtype")
                return f"the {what} of {who} ({sig_str(a)} -> {sig_str(b)})"
            if type(a) is Static and type(b) is Static:
                if a.value is b.value:  # the same object: what it holds changed (state_digest)
                    return f"what {who} holds (an array or number reachable from its attributes: {sig_str(b)})"
                return f"the value of {who} ({sig_str(a)} -> {sig_str(b)})"
            return f"the type of {who} ({sig_str(a)} -> {sig_str(b)})"
    if st0 != st1:
        if static_names and st0 and st1 and len(st0[0]) == len(st1[0]) == len(static_names):
            for name, a, b in zip(static_names, st0[0], st1[0]):
                if a != b:
                    return (f"the value of {name} ({short(a.value)} -> {short(b.value)}), an argument used as a "
                            "static value")
        return "the value of an argument used as a static value"
    return "its signature"


def _argument_change(arguments0, arguments1, sig0, sig1):
    """The first argument whose static value or structure differs between two specs, in words
    (else they differ in how the arguments are passed). Each `arguments` is ((name, treedef) of
    each traced top-level argument, {name: value} of the static ones, the leaves' names), as
    api's `_arguments` gives them."""
    (tops0, static0, leaves0), (tops1, static1, leaves1) = arguments0, arguments1
    for name in dict.fromkeys([*static0, *static1]):
        a, b = static0.get(name, _NOT_GIVEN), static1.get(name, _NOT_GIVEN)
        if a is not b and not _equal(a, b):
            return f"the value of static argument {name} ({short(a)} -> {short(b)})"
    trees0, trees1 = dict(tops0), dict(tops1)
    for name in dict.fromkeys([*trees0, *trees1]):
        if name not in trees0 or name not in trees1:
            return f"the arguments given ({name} {'given' if name in trees1 else 'not given'} now)"
        found = tree.first_difference(trees0[name], trees1[name])
        if found is not None:
            path, a, b = found
            where = name + tree.format_path(path)
            text0, text1 = (_part(x, where, dict(zip(leaves, sig))) for x, leaves, sig in ((a, leaves0, sig0),
                                                                                              (b, leaves1, sig1)))
            what = "value" if (None,) in (a, b) else "structure"
            return f"the {what} of argument {where} ({text0} -> {text1})"
    return "how the arguments are passed (by position or by keyword)"


class _NotGiven:
    def __repr__(self):
        return "not given"


_NOT_GIVEN = _NotGiven()


def _equal(a, b):
    try:
        return bool(a == b)
    except Exception:  # an object whose == is not a truth value
        return False


def _part(treedef, where, signatures):
    """One side of a structure's difference: None, a leaf's signature, or a container's shape."""
    if treedef is tree.LEAF:
        return sig_str(signatures[where]) if where in signatures else "a value"
    return "None" if treedef == (None,) else tree.describe(treedef)


def retrace_advice(static_names, traces, compiles):
    """What to do about a function traced for many signatures (api's retrace warning), when
    the leaves `static_names` are static because the trace needed their values (or none)."""
    if not static_names:
        return ("Each distinct signature is traced and compiled anew: keep shapes and dtypes fixed, pass "
                "changing values as arrays rather than static arguments, or pad inputs to a few sizes.")
    which = ", ".join(f"'{name}'" for name in static_names)
    return (f"The value of {which} is used where a concrete value is needed (a loop count such as "
            "range(n), a size, an axis, a slice bound, a mask), so each distinct value costs a trace and "
            f"a compile (so far {traces} traces, {compiles} compiles: a compile is skipped only when "
            "the program comes out identical, as when the value merely selects data); static_argnums "
            "would not change that. To compile once for all values: write a loop over range(n) as "
            "autograd_xla.fori_loop(0, n, body, init) or while_loop, whose bound then stays traced "
            "(forward-mode differentiable only), or as a scan over a fixed maximum length with the steps "
            "past n masked (both modes); compute with the value as data (np.where instead of a mask, "
            "slices of fixed length with a traced start); or pass the arrays it slices as arguments.")


def short(v):
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def sig_str(s):
    if isinstance(s, tuple):
        cls = f" {s[2][0].__qualname__}{dict(s[2][1])}" if len(s) > 2 else ""
        return f"{s[1]}{list(s[0])}{cls}"
    if type(s) is Static:
        return f"static {short(s.value)}"
    return f"Python {s.__name__}"


# ----- what a function reads besides its arguments ---------------------------------------------
#: A jitted function's programs hold what it read besides its arguments when it was traced:
#: its closure cells, the globals its code names, and the attributes its code names of the
#: objects it closes over or is bound to (`jit_ps(grad(model.energy))` reads model.scale).
#: Plain autograd reads them at every call: a value assigned there later (`model.scale = 3.0`)
#: must not meet the old program (geomstats' metrics keep their parameters as attributes: the
#: old answer came back, silently). captured_locations finds those places; a jitted function
#: compares what they hold with what they held at its traces at every call (by identity, in
#: C: _callpath's `captured`), and forgets its traces where one changed. An array changed in
#: place keeps its identity: its bytes are compared too (content_sample), all of them up to
#: SAMPLE_ALL_BYTES, else SAMPLED elements spread over it (a change of every element, `W[:] =
#: new` or `W *= 2`, is seen; of a few, perhaps not).
CAPTURED_MAX = 256  # locations at most (the first found); deeper or further ones are not watched
ITEMS = 64  # items watched of a dict, list or tuple the function's code reaches (the first ones)
SAME_ARRAY_SIZE = 4096  # an array assigned anew up to this size is compared by value (same_capture)
#: An array's bytes compared at every call in full up to this size (memcmp: ~1 µs), else at
#: SAMPLED elements
SAMPLE_ALL_BYTES = 16384
SAMPLED = 64
_CAPTURED_DEPTH = 4  # objects reached through attributes, at most this many levels down
_UNWATCHED = (types.ModuleType, type, types.BuiltinFunctionType, np.ufunc)
#: Packages whose functions' closures are walked (autograd's grad closes over the function it
#: differentiates) but whose code's names are not: their globals and objects are their own
#: machinery (autograd's trace stack counts the traces it is in)
_LIBRARIES = frozenset({"autograd", "autograd_xla", "numpy", "scipy", "functools"})
MISSING = object()  # an empty cell's or an absent attribute's value
_FUNCTIONS = (types.FunctionType, types.MethodType, functools.partial)


def captured_locations(fun):
    """The places `fun` reads besides its arguments, as (container, key, what it is):
    - (cell, None, ...): each closure cell of the functions it is made of (through closures,
      bound methods, partials, wrappers);
    - (dict, name, ...): each global their code names;
    - (vars(obj), name, ...): each attribute their code names of an object they close over or
      are bound to (and of objects those attributes hold, and the methods their code names),
      and (class, name, ...) where the attribute is the object's class's;
    - (dict, key, ...), (list, index, ...), (tuple, index, ...): the first ITEMS items of a
      dict, list or tuple one of those holds, of a partial's bound arguments and keywords, and
      of a function's default values (not of a library's closures: their containers are its
      machinery).
    Modules, classes and builtins held there are not watched."""
    names, objects, found, seen = set(), [], [], set()
    functions = [fun]

    def add(container, key, label):
        if len(found) < CAPTURED_MAX and (id(container), key) not in seen:
            seen.add((id(container), key))
            found.append((container, key, label))

    def reach(value, depth, label="", items=True):
        if depth > _CAPTURED_DEPTH or len(found) >= CAPTURED_MAX or id(value) in seen or isinstance(value, _UNWATCHED):
            return
        if type(value) in (dict, list, tuple):
            seen.add(id(value))
            if items:
                for key in itertools.islice(value if type(value) is dict else range(len(value)), ITEMS):
                    item = f"the item {short(key)} of {label}"
                    add(value, key, item)
                    reach(value[key], depth + 1, item)
            return
        if type(value) in _FUNCTIONS:
            functions.append(value)
            return
        inner = getattr(value, "__wrapped__", None) if callable(value) else None  # jit_ps, functools.wraps
        if inner is not None:
            functions.append(inner)
        if hasattr(value, "__dict__") and not isinstance(value, (np.ndarray, np.generic)):
            seen.add(id(value))
            objects.append((value, depth))
            call = getattr(type(value), "__call__", None)  # a model called as net(x)
            if type(call) is types.FunctionType:
                functions.append(call)

    def scan(obj, depth):
        attrs = vars(obj)
        for name in sorted(names):
            if name in attrs:
                label = f"the attribute {name!r} of a {type(obj).__name__}"
                add(attrs, name, label)
                reach(attrs[name], depth + 1, label)
            else:
                method = getattr(type(obj), name, None)
                if type(method) is types.FunctionType:
                    functions.append(method)
                    continue
                owner = next((c for c in type(obj).__mro__ if name in vars(c)), None)  # a class attribute
                if owner is not None and owner.__module__ != "builtins" and not isinstance(
                        vars(owner)[name], (property, staticmethod, classmethod, types.MemberDescriptorType)):
                    label = f"the class attribute {name!r} of {owner.__name__}"
                    add(owner, name, label)
                    reach(vars(owner)[name], depth + 1, label)

    scanned, named = [], 0
    while functions or objects:
        while functions:
            f = functions.pop()
            if id(f) in seen or len(found) >= CAPTURED_MAX:
                continue
            if type(f) not in _FUNCTIONS:  # the function given: a callable object
                reach(f, 0)
                continue
            seen.add(id(f))
            if type(f) is types.MethodType:
                functions.append(f.__func__)
                reach(f.__self__, 1)
            elif type(f) is functools.partial:  # its bound arguments are constants of the trace too
                functions.append(f.func)
                name = getattr(f.func, "__qualname__", "a function")
                reach(f.args, 1, f"the arguments a partial of {name} binds")
                reach(f.keywords, 1, f"the keywords a partial of {name} binds")
            else:
                library = str(f.__globals__.get("__name__")).partition(".")[0] in _LIBRARIES
                if not library:  # its default values: constants of the trace where a call leaves them
                    reach(f.__defaults__, 1, f"the default values of {f.__qualname__}")
                    reach(f.__kwdefaults__, 1, f"the default values of {f.__qualname__}")
                for name, cell in zip(f.__code__.co_freevars, f.__closure__ or ()):
                    label = f"the variable {name!r} that {f.__qualname__} closes over"
                    add(cell, None, label)
                    if _filled(cell):
                        reach(cell.cell_contents, 1, label, items=not library)
                if library:
                    continue
                stack = [f.__code__]
                while stack:
                    code = stack.pop()
                    names.update(n for n in code.co_names if not n.startswith("__"))
                    stack += [c for c in code.co_consts if type(c) is types.CodeType]
                g = f.__globals__
                for name in sorted(names):
                    if name in g and not isinstance(g[name], _UNWATCHED):
                        label = f"the global {name!r} of {g.get('__name__')}"
                        add(g, name, label)
                        reach(g[name], 1, label)
        while objects and not functions:
            obj, depth = objects.pop()
            scanned.append((obj, depth))
            scan(obj, depth)
        if not functions and not objects and len(names) > named:  # names the methods found since: scanned again
            named = len(names)
            for obj, depth in scanned:
                scan(obj, depth)
    return found


def _numbers(graph):
    """(kind, value) of the numbers `graph`'s equations (and their sub-graphs') take as
    constants: what a trace read of the numbers it captured."""
    numbers, stack = set(), [graph]
    seen = set()
    while stack:
        g = stack.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        items = [x for eqn in g.eqns for x in (eqn.args, eqn.kwargs)] + [g.captured]
        while items:
            x = items.pop()
            t = type(x)
            if t is tuple or t is list:
                items.extend(x)
            elif t is dict:
                items.extend(x.values())
            elif t in (int, float, complex) or isinstance(x, np.number):
                numbers.add((_number_kind(x), x))
            elif hasattr(x, "eqns") and hasattr(x, "captured"):
                stack.append(x)
    return numbers


def _number_kind(x):
    return "f" if isinstance(x, (float, np.floating)) else "c" if isinstance(x, (complex, np.complexfloating)) else "i"


def traced_reads(locations, values, graph):
    """Which of `locations` (with their `values`) a trace that made `graph` may have read (not
    an empty cell or an absent name, which it could not read): a number equal to one the
    graph takes as a constant, of its kind (a counter the function
    bumps, `self.n += 1`, is not watched, nor a timer its plain calls advance), and every other
    value (an array, which numpy may have turned into others before the graph took them, a
    bool, a string or None a branch may have read, a function, an object)."""
    numbers = _numbers(graph)
    return [loc for loc, v in zip(locations, values) if v is not MISSING and (
        not (type(v) in (int, float, complex) or isinstance(v, np.number)) or (_number_kind(v), v) in numbers)]


def captured_values(locations):
    """What each of `locations` (captured_locations) holds now."""
    return [c.get(k, MISSING) if type(c) is dict else held(c, k, MISSING) for c, k, _ in locations]


def content_sample(value):
    """What content_same compares of an array changed in place, as _callpath's Front takes it:
    (bytes, step, itemsize): every `step`-th element's bytes of its memory (all of them up to
    SAMPLE_ALL_BYTES, else SAMPLED elements spread over it); None for other values and arrays
    whose memory is not one block, or that hold objects (whose identities it would compare)."""
    if not isinstance(value, np.ndarray) or value.dtype.hasobject or value.size == 0 or not (
            value.flags.c_contiguous or value.flags.f_contiguous):
        return None
    itemsize = value.dtype.itemsize
    step = 1 if value.nbytes <= SAMPLE_ALL_BYTES else -(-value.size // SAMPLED)
    return sampled_bytes(value, step, itemsize), step, itemsize


def content_same(value, sample):
    """Whether array `value` still holds what content_sample found there (`sample`)."""
    data, step, itemsize = sample
    return sampled_bytes(value, step, itemsize) == data


def same_capture(now, then):
    """Whether a captured place's value `now` is the one it had, `then`: the same object, an
    equal number, string or tuple of them (a float assigned again, 1.0 * k), or an equal small
    array."""
    if now is then:
        return True
    t = type(now)
    if t is np.ndarray and type(then) is np.ndarray:  # a small array made again (np.asarray of a list)
        return (now.size <= SAME_ARRAY_SIZE and now.shape == then.shape and now.dtype == then.dtype
                and bool(np.array_equal(now, then)))
    if t is not type(then) or not (t in _SHAPE_SCALARS or t is tuple or isinstance(now, np.generic)):
        return False
    try:
        return bool(now == then) if t is not tuple else now == then and all(same_capture(a, b) for a, b in zip(now, then))
    except Exception:  # an element whose comparison raises: not known to be equal
        return False
