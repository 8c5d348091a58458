"""The traced program: abstract values, variables, equations and graphs.

A Graph is what tracing produces and lowering consumes. Each equation is one call of a
primitive (numpy's or scipy's raw function that autograd wraps, or one of autograd's own
helpers), stored with its call arguments exactly as the program passed them, except that
every traced value is replaced by its Var. Translation rules therefore receive the same
arguments numpy would have, and a Graph prints as a readable list of numpy calls.
"""
import math
import sys
import threading

import numpy as np


class Aval:
    """Shape, dtype and weak type of an abstract array: everything but the data.

    `weak_type` marks values that came from a Python scalar: like Python numbers under
    numpy 2 (NEP 50) they take the dtype of whatever array they meet. The attribute names
    are also the protocol jaxlib's runtime reads (`shape`, `dtype`, `weak_type`).
    """

    __slots__ = ("shape", "dtype", "weak_type", "_hash")

    def __init__(self, shape, dtype, weak_type=False):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.weak_type = weak_type
        self._hash = None

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return math.prod(self.shape)

    def strong(self):
        return Aval(self.shape, self.dtype) if self.weak_type else self

    def __eq__(self, other):
        return other is self or (isinstance(other, Aval) and self.shape == other.shape and self.dtype == other.dtype
                                 and self.weak_type == other.weak_type)

    def __hash__(self):  # kept: an Aval is in every abstract-evaluation key and rolling token (a dtype hashes slowly)
        h = self._hash
        if h is None:
            h = self._hash = hash((self.shape, self.dtype, self.weak_type))
        return h

    def __str__(self):
        return f"{short_dtype(self.dtype)}[{','.join(map(str, self.shape))}]" + ("~" if self.weak_type else "")

    __repr__ = __str__


#: numpy's dtypes -> XLA's element types (hlo.element_type)
ELEMENT_TYPES = {
    np.dtype(np.bool_): "i1",
    np.dtype(np.int8): "i8",
    np.dtype(np.int16): "i16",
    np.dtype(np.int32): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.uint8): "ui8",
    np.dtype(np.uint16): "ui16",
    np.dtype(np.uint32): "ui32",
    np.dtype(np.uint64): "ui64",
    np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.complex64): "complex<f32>",
    np.dtype(np.complex128): "complex<f64>",
}
#: The dtypes XLA has a type for (`supported` says it of the others: ml_dtypes' join at their first sight).
SUPPORTED_DTYPES = set(ELEMENT_TYPES)
_ML_DTYPES = {"bfloat16": "bf16"}  # ml_dtypes' types XLA has, by name


def supported(dtype):
    """Whether XLA has a type for numpy's `dtype`. ml_dtypes' (bfloat16) join the tables at their
    first sight: an array of one exists only once ml_dtypes is imported, which a job that
    never meets one need not do (jaxlib imports it at the first compiled call; 0.7.0's
    extension took 0.55-0.85 s, which setup.cfg's constraint excludes, 0.6.0's 5 ms)."""
    if dtype in SUPPORTED_DTYPES:
        return True
    ml_dtypes = sys.modules.get("ml_dtypes")
    if ml_dtypes is None:
        return False
    for name, element in _ML_DTYPES.items():
        d = np.dtype(getattr(ml_dtypes, name))
        ELEMENT_TYPES[d] = element
        SUPPORTED_DTYPES.add(d)
    return dtype in SUPPORTED_DTYPES


class _TraceState(threading.local):
    def __init__(self):
        self.traces = []
        self.axes = {}  # named axes bound by the pmaps and vmaps being traced: name -> size
        # calls recorded as equations other than their primitive's own (a trace rule's, a primitive's
        # Python run through): autograd's VJP of such a call is not its equations' (compositions/rolled_vjps.py)
        self.opaque = 0
        # whether the jit_ps being traced takes autograd's VJPs from rolled forward passes: it rolls
        # loops and is compiled only (a tiered signature's trace also runs by numpy, which promises
        # plain autograd's bits: compositions/rolled_vjps.py)
        self.roll = False
        self.source = None  # the line of the equation being replayed (control_flow/replay.py), where set
        self.rolled_vjps = 0  # VJPs made from rolled forward passes in this thread (their forward passes' equations
        #                       are left to be pruned)


#: The traces active in this thread, innermost last (tracing.state): here, below tracing, so
#: that a jitted function's call asks whether it is traced without importing tracing (a job
#: whose calls all run plainly never does).
trace_state = _TraceState()

# Python numbers traced as weakly typed scalars; a bool is static (it is a flag: keepdims=True)
PY_SCALARS = {int: np.dtype(np.int64), float: np.dtype(np.float64), complex: np.dtype(np.complex128)}

def short_dtype(dtype):
    """f64, i32, c128 (complex128, as jax and numpy's name count its bits), bool."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return "bool"
    if dtype.kind == "V" or dtype.name == "bfloat16":
        return dtype.name
    return dtype.kind + str(dtype.itemsize * 8)


class UfuncMethod:
    """A ufunc method (`numpy.add.at`, `numpy.multiply.outer`) as a primitive: hashable,
    one object per (ufunc, method), so rules can be keyed by it."""

    __slots__ = ("ufunc", "method")
    _interned = {}

    def __new__(cls, ufunc, method):
        key = (ufunc, method)
        self = cls._interned.get(key)
        if self is None:
            self = object.__new__(cls)
            self.ufunc, self.method = ufunc, method
            cls._interned[key] = self
        return self

    @property
    def primitive_name(self):
        return f"{self.ufunc.__name__}.{self.method}"

    def __call__(self, *args, **kwargs):
        return getattr(self.ufunc, self.method)(*args, **kwargs)


def setitem(x, idx, value):
    """`x[idx] = value` as a pure function: the primitive behind item assignment on traced
    arrays, which rebinds the assigned name to the result."""
    out = np.array(x, copy=True)
    out[idx] = value
    return out


class Var:
    __slots__ = ("aval", "count")

    def __init__(self, aval, count):
        self.aval, self.count = aval, count

    def __repr__(self):
        return f"v{self.count}"


class Eqn:
    """One primitive call. `outvars` line up with the leaves of the rule's result; a None
    there means the rule returned one of its inputs unchanged for that leaf."""

    __slots__ = ("prim", "args", "kwargs", "outvars", "out_tree", "source")

    def __init__(self, prim, args, kwargs, outvars, out_tree, source):
        self.prim, self.args, self.kwargs = prim, args, kwargs
        self.outvars, self.out_tree, self.source = outvars, out_tree, source

    def invars(self):
        found = []
        walk_vars((self.args, self.kwargs), found.append)
        return found


class Graph:
    """A traced function: inputs, captured outer values, equations and outputs.

    `outvars` holds Vars or concrete constants (a function may return a constant).
    `captured` lists values of enclosing traces that a sub-graph (a loop body, a branch)
    closes over; lowering passes them in after `invars`.
    """

    __slots__ = ("invars", "captured", "eqns", "outvars", "in_tree", "out_tree", "arg_names", "guards", "operators")

    def __init__(self, invars, eqns, outvars, in_tree=None, out_tree=None, captured=(), arg_names=None, guards=(),
                 operators=None):
        self.invars, self.eqns, self.outvars = invars, eqns, outvars
        self.in_tree, self.out_tree = in_tree, out_tree
        self.captured = list(captured)
        self.arg_names = arg_names
        # (SourceInfo, why, decided) of each trailing boolean output that must hold; decided: a
        # branch decided by the traced call's values, which a trace of other values may decide otherwise
        self.guards = list(guards)
        # the Vars of Python's operators on values autograd did not box (`g * y` in a VJP) that
        # plain autograd computes otherwise than the ufunc's loop: 0-d ones (numpy's scalar math:
        # a complex product's bits differ from np.multiply's loop) and `**` (ndarray's square and
        # sqrt for ** 2 and ** 0.5): a set where the trace made the graph
        # (tracing.Trace.to_graph), None where not known
        self.operators = operators

    @property
    def in_avals(self):
        return [v.aval for v in self.invars]

    @property
    def out_avals(self):
        return [v.aval if isinstance(v, Var) else Aval(np.shape(v), np.result_type(v)) for v in self.outvars]

    def size(self):
        """Its primitive calls, those of its sub-graphs (the `graphs` of a control-flow
        equation's parameters: loop bodies, branches) included once each: what making its
        program costs grows with it (tiering.program_cost)."""
        def inner(value):
            graphs = getattr(value, "graphs", None)  # (control_flow's Params: a floor above this one)
            return sum(g.size() for g in graphs if isinstance(g, Graph)) if isinstance(graphs, list) else 0
        return sum(1 + sum(map(inner, eqn.args)) for eqn in self.eqns)

    def __str__(self):
        return format_graph(self)


class DynamicSlice:
    """`start:start+size` along one axis with a traced start and a length fixed when tracing
    (x[i:i + k], or x[b*n:(b+1)*n] whose bounds differ by a constant)."""

    __slots__ = ("start", "size")

    def __init__(self, start, size):
        self.start, self.size = start, size

    def __repr__(self):
        return f"dslice({self.start!r}, {self.size})"


def dynamic_getitem(x, idx):
    """x[idx] where idx contains DynamicSlice components (the primitive's meaning)."""
    return np.asarray(x)[static_index(idx, lambda d: slice(int(d.start), int(d.start) + d.size))]


def dynamic_update(x, idx, value, accumulate):
    """Copy of x with x[idx] += value (accumulate) or x[idx] = value."""
    out = np.array(x, copy=True)
    static = static_index(idx, lambda d: slice(int(d.start), int(d.start) + d.size))
    if accumulate:
        np.add.at(out, static, value)
    else:
        out[static] = value
    return out


def index_components(idx):
    """The components of an index (a tuple, or one component)."""
    return idx if isinstance(idx, tuple) else (idx,)


def static_index(idx, replace):
    """idx with each DynamicSlice component c replaced by replace(c)."""
    comps = tuple(replace(c) if isinstance(c, DynamicSlice) else c for c in index_components(idx))
    return comps if isinstance(idx, tuple) else comps[0]


def index_axes(comps, ndim):
    """The array axis each component indexes (None for None and Ellipsis)."""
    consuming = [c for c in comps if c is not None and c is not Ellipsis]
    if len(consuming) > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, but {len(consuming)} were indexed")
    axes, axis = [], 0
    for c in comps:
        if c is None:
            axes.append(None)
        elif c is Ellipsis:
            axes.append(None)
            axis += ndim - len(consuming)
        else:
            axes.append(axis)
            axis += 1
    return axes


_ATOMS = frozenset({int, float, complex, bool, str, type(None), np.ndarray})


def map_structure(obj, leaf_type, f):
    """Copy of `obj` with every `leaf_type` inside nested tuples/lists/dicts/slices replaced
    by f(leaf); containers are rebuilt only when something inside changed."""
    t = type(obj)
    if t is leaf_type:
        return f(obj)
    if t is tuple or t is list:  # leaves and atoms inline: a call per element was a tenth of a retrace
        new = [f(x) if type(x) is leaf_type else x if type(x) in _ATOMS else map_structure(x, leaf_type, f)
               for x in obj]
        return obj if all(a is b for a, b in zip(new, obj)) else t(new)
    if t is dict:
        return {k: map_structure(x, leaf_type, f) for k, x in obj.items()}
    if t is slice:
        parts = (obj.start, obj.stop, obj.step)
        new = map_structure(parts, leaf_type, f)
        return obj if new is parts else slice(*new)
    if t is DynamicSlice:
        start = map_structure(obj.start, leaf_type, f)
        return obj if start is obj.start else DynamicSlice(start, obj.size)
    if issubclass(t, tuple) and hasattr(obj, "_fields"):  # (type(): a Tracer answers isinstance as an array)
        return t(*[map_structure(x, leaf_type, f) for x in obj])
    return obj


def map_vars(obj, f):
    return map_structure(obj, Var, f)


def walk_vars(obj, visit):
    """Call `visit` on every Var inside `obj`."""
    def see(v):
        visit(v)
        return v
    map_structure(obj, Var, see)


def prim_name(prim):
    name = getattr(prim, "primitive_name", None)
    if name:
        return name
    name = getattr(prim, "__name__", None) or type(prim).__name__
    owner = getattr(prim, "__self__", None)
    if owner is not None and not isinstance(owner, type(np)):
        owner_name = getattr(owner, "__name__", None) or getattr(owner, "name", None) or type(owner).__name__
        return f"{owner_name}.{name}"
    module = getattr(prim, "__module__", None) or ""
    for prefix, short in (("numpy.linalg", "linalg."), ("numpy.fft", "fft."), ("scipy.special", "special."),
                          ("scipy.linalg", "scipy.linalg."), ("scipy.stats", "stats.")):
        if module.startswith(prefix):
            return short + name
    return name


def _format_arg(x, names):
    if isinstance(x, Var):
        return names(x)
    if isinstance(x, np.ndarray):
        if x.size <= 6:
            return f"{short_dtype(x.dtype)}{np.array2string(x, separator=',')}".replace("\n", "")
        return f"const {short_dtype(x.dtype)}[{','.join(map(str, x.shape))}]"
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        inner = ", ".join(_format_arg(i, names) for i in x)
        return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
    if isinstance(x, slice):
        parts = [("" if p is None else _format_arg(p, names)) for p in (x.start, x.stop, x.step)]
        return ":".join(parts[:2]) + (f":{parts[2]}" if x.step is not None else "")
    if isinstance(x, np.dtype):
        return x.name
    if isinstance(x, type):
        return x.__name__
    if x is Ellipsis:
        return "..."
    if isinstance(x, DynamicSlice):
        return f"{_format_arg(x.start, names)}:+{x.size}"
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def format_graph(graph, indent=""):
    """Readable listing: one line per equation, with the user's source line."""
    table = {}

    def names(v):
        if v not in table:
            table[v] = f"v{len(table)}"
        return table[v]

    def typed(v):
        return f"{names(v)}:{v.aval}"

    lines = []
    arg_names = graph.arg_names or [None] * len(graph.invars)
    ins = [typed(v) + (f" ({n})" if n else "") for v, n in zip(graph.invars, arg_names)]
    lines.append(f"{indent}inputs: {', '.join(ins) or '-'}")
    if graph.captured:
        lines.append(f"{indent}captured: {', '.join(typed(v) for v, _ in graph.captured)}")
    for eqn in graph.eqns:
        outs = ", ".join(typed(v) for v in eqn.outvars if v is not None) or "_"
        args = [_format_arg(a, names) for a in eqn.args]
        args += [f"{k}={_format_arg(v, names)}" for k, v in eqn.kwargs.items()]
        where = ""
        if eqn.source is not None:
            where = f"  # {eqn.source.filename.rsplit('/', 1)[-1]}:{eqn.source.lineno}"
        lines.append(f"{indent}{outs} = {prim_name(eqn.prim)}({', '.join(args)}){where}")
        for sub in getattr(eqn.prim, "subgraphs", lambda e: ())(eqn):
            lines.append(format_graph(sub, indent + "    "))
    outs = [names(v) if isinstance(v, Var) else _format_arg(np.asarray(v), names) for v in graph.outvars]
    lines.append(f"{indent}outputs: {', '.join(outs) or '-'}")
    return "\n".join(lines)
