"""Lowering a traced Graph to a StableHLO module, one translation rule per equation.

The interpreter: each equation's primitive is looked up in the registry and its
translation rule emits the equation into a `context.LoweringContext` (the rules, and the
numpy semantics they share, live below this module: rules/ and context.py).
"""
import collections
import hashlib
import sys
import threading

import numpy as np

from . import blas, hlo, registry
from .context import LoweringContext, ModuleState, Uses, View, view_pad
from .core import Eqn, Graph, Var, map_vars, prim_name, walk_vars
from .errors import SourceInfo, annotate


def flatten_values(out):
    """Leaves of a rule's result (a Value, or tuples/lists/namedtuples of them)."""
    if isinstance(out, (tuple, list)):
        return [v for x in out for v in flatten_values(x)]
    return [out]


# ----- graphs --------------------------------------------------------------------------------
def lower_eqns(ctx, eqns, env):
    """Emit `eqns` into `ctx`; `env` maps Vars to Values and is extended in place. Each
    equation's ops carry its primitive and user's line as their location (when the module
    has locations); one without a source keeps that of the equation around it (a loop's).
    Calls of a primitive whose registry entry says `merge` that do not depend on each other
    are emitted as one (`schedule`)."""
    locations, outer = ctx.module.locations, ctx.location
    for group in schedule(eqns) if ctx.module.merge else [[eqn] for eqn in eqns]:
        eqn = group[0]
        if locations is not None:
            source = eqn.source
            ctx.location = outer if source is None else locations.alias(prim_name(eqn.prim), source.filename,
                                                                        source.lineno)
        try:
            if len(group) == 1:
                args, kwargs = map_vars((eqn.args, eqn.kwargs), env.__getitem__)
                out = ctx.rule(registry.lookup(eqn.prim))(ctx, *args, **kwargs)
                _set_results(eqn, flatten_values(out), env)
            else:
                _lower_together(ctx, group, env)
        except Exception as e:
            where = f"\n{eqn.source}" if eqn.source else ""
            raise annotate(e, f"while lowering primitive '{prim_name(eqn.prim)}'{where}")
    ctx.location = outer


def _set_results(eqn, leaves, env):
    for var, value in zip(eqn.outvars, leaves):
        if var is not None:
            if value.shape != var.aval.shape or value.dtype != var.aval.dtype:
                raise AssertionError(
                    f"translation rule for '{prim_name(eqn.prim)}' produced {value.type}, "
                    f"but at trace time it produced {hlo.tensor_type(var.aval.shape, var.aval.dtype)}")
            if var.aval.weak_type != value.weak_type:  # the tracer's weak typing (s * 2 of a Python scalar)
                value = value.with_weak_type(var.aval.weak_type)
            env[var] = value


def schedule(eqns):
    """`eqns` as groups to emit in turn: each a list of one equation, or of calls of one
    `merge` primitive (registry.Entry) with operands of the same types that need none of
    each other's results. Each equation has a level, its depth (the longest path to it from
    the inputs); such a call may move to any later level below all its consumers', and the
    calls of one kind are grouped at the fewest levels that meet all their windows (the
    greedy that is optimal for intervals: each group at the end of the earliest-ending
    window). Every input stays at a lower level than what uses it, so emitting by level is
    an order. Measured on lifelines' GeneralizedGammaRegressionFitter, whose gammainc(c)
    derivatives in the first argument are central differences (four calls side by side):
    its Hessian's program went from 481 loops in 11 MiB of StableHLO (27-37 s of XLA
    compile) to 16 loops in 1.1 MiB (3.2 s)."""
    keys = [_merge_key(eqn) for eqn in eqns]
    if sum(k is not None for k in keys) < 2:
        return [[eqn] for eqn in eqns]
    depth, producer, levels, latest = {}, {}, [], {}
    for k, eqn in enumerate(eqns):
        inputs = []
        walk_vars((eqn.args, eqn.kwargs), inputs.append)
        level = 1 + max([depth.get(v, 0) for v in inputs], default=0)
        levels.append(level)
        for v in inputs:
            p = producer.get(v)
            if p is not None and keys[p] is not None:
                latest[p] = min(latest.get(p, level - 1), level - 1)
        for v in eqn.outvars:
            if v is not None:
                depth[v], producer[v] = level, k
    end = max(levels) + 1  # the level of calls only the graph's results use
    by_key, group_of = {}, {}
    for k, key in enumerate(keys):
        if key is not None:
            by_key.setdefault(key, []).append(k)
    for calls in by_key.values():
        calls.sort(key=lambda k: latest.get(k, end))
        group, point = None, None
        for k in calls:
            if group is None or levels[k] > point:
                group, point = [], latest.get(k, end)
            group.append(k)
            group_of[k] = (point, group)
    if all(len(group) == 1 for _, group in group_of.values()):
        return [[eqn] for eqn in eqns]
    placed, seen = [], set()
    for k, eqn in enumerate(eqns):
        level, group = group_of.get(k, (levels[k], None))
        if group is None:
            placed.append((level, [eqn]))
        elif id(group) not in seen:  # placed once, where its first member came
            seen.add(id(group))
            placed.append((level, [eqns[j] for j in sorted(group)]))
    placed.sort(key=lambda p: p[0])  # stable: within a level, the order they came in
    return [group for _, group in placed]


def _merge_key(eqn):
    """What calls must share to be emitted as one: the primitive, and each operand's dtype and
    weak type (a Python scalar's type); None for an equation that cannot be merged."""
    entry = registry.lookup(eqn.prim)
    if entry is None or not entry.merge or eqn.kwargs or len(eqn.outvars) != 1 or eqn.outvars[0] is None:
        return None
    types = []
    for a in eqn.args:
        if type(a) is Var:
            types.append((a.aval.dtype, a.aval.weak_type))
        elif type(a) in (int, float):
            types.append(type(a))
        else:
            return None
    return entry, tuple(types)


def _lower_together(ctx, group, env):
    """Calls of one elementwise primitive (schedule's group) as one call: each operand
    broadcast to its call's result shape, flattened, and concatenated with the others'; the
    result cut back into each call's."""
    ctx.module.merged += 1
    shapes = [eqn.outvars[0].aval.shape for eqn in group]
    sizes = [int(np.prod(shape)) for shape in shapes]
    operands = []
    for k in range(len(group[0].args)):
        pieces = []
        for eqn, shape, size in zip(group, shapes, sizes):
            a = eqn.args[k]
            v = env[a] if type(a) is Var else ctx.asvalue(a).with_weak_type(True)  # a Python scalar
            pieces.append(ctx.reshape(ctx.broadcast_to(v, shape), (size,)).with_weak_type(v.weak_type))
        operands.append(ctx.concatenate(pieces, 0).with_weak_type(pieces[0].weak_type))
    (out,) = flatten_values(ctx.rule(registry.lookup(group[0].prim))(ctx, *operands))
    start = 0
    for eqn, shape, size in zip(group, shapes, sizes):
        piece = ctx.reshape(ctx.slice(out, [start], [start + size]), shape)
        _set_results(eqn, [piece.with_weak_type(out.weak_type)], env)
        start += size


def lower_subgraph(ctx, graph, args, captured):
    """Emit a (sub)graph inline; returns its output Values."""
    env = {v: a for v, a in zip(graph.invars, args)}
    for (inner, _), value in zip(graph.captured, captured):  # weak as traced; the outer Value stays as it is
        weak = inner.aval.weak_type
        env[inner] = value if value.weak_type == weak else value.with_weak_type(weak)
    for v in graph.invars:
        env[v].weak_type = v.aval.weak_type
    lower_eqns(ctx, prune(graph).eqns, env)
    return [env[v] if isinstance(v, Var) else ctx.asvalue(v) for v in graph.outvars]


def prune(graph):
    """Drop equations whose results nobody uses (XLA would too, but later and slower)."""
    live = set(v for v in graph.outvars if isinstance(v, Var))
    kept = []
    for eqn in reversed(graph.eqns):
        if any(v is not None and v in live for v in eqn.outvars):
            kept.append(eqn)
            for v in eqn.invars():
                live.add(v)
    kept.reverse()
    if len(kept) == len(graph.eqns):
        return graph
    new = type(graph).__new__(type(graph))
    for slot in type(graph).__slots__:
        setattr(new, slot, getattr(graph, slot))
    new.eqns = kept
    return new


#: On CPU, arguments this small travel together: per dtype, one buffer that the program
#: slices apart, so a parameter list of biases and small weights (typical autograd code)
#: costs one host-to-device transfer (~6 µs each) instead of one per array.
PACK_MAX_BYTES = 1 << 12
#: On CPU, arrays this large are handled so that no call copies them into, or writes them to,
#: fresh memory: glibc serves large allocations with fresh pages (above its mmap threshold, 128
#: KiB to 32 MiB as it adapts), which are then faulted in one by one (10000x10000 float32:
#: 97,657 minor faults, half of a 90 ms call; numpy's own arrays avoid most of them by advising
#: huge pages). A result (from RECYCLE_MIN_BYTES) is written into a buffer the caller passes
#: in, aliased to it (`Lowered.recycled`): a dead earlier result of the same type
#: (backend.Backend.take). An argument only elementwise ops read (and, with lower's dot_views,
#: matrix products: a hot signature's second program, context.View) is a view
#: (`Lowered.views`): its data is read where it is, from the 64-byte boundary below it (numpy
#: aligns to 16 bytes, XLA needs 64).
LARGE_ARRAY_BYTES = 1 << 20
#: A result this large comes from glibc's mmap (memory.MALLOC_RAISING_BYTES) as fresh pages
#: wherever it is made, so a recycling program's call with no dead result to reuse pays for
#: the buffer it writes into more than a fresh result would cost: PJRT makes the buffer by
#: copying uninitialised memory on one thread, faulting its pages in (x * x * x on 10000x10000
#: float32: 180 ms, 98,000 faults), where XLA's program faults a fresh result's on its pool
#: threads as it writes them (88-99 ms). A program with such a result is emitted a second
#: time without recycled results (`Lowered.fresh_text`), which such a call runs instead,
#: where its text is at most FRESH_TEXT_BYTES: a signature compiles both (api), which pays
#: where compiles are short (1-2 kB of elementwise work: 20-30 ms, dispatch.DIRECT_TEXT_BYTES)
#: and a copy's 0.45 ms a MB is not small beside them; not where they take seconds.
FRESH_RESULT_BYTES = 32 << 20
FRESH_TEXT_BYTES = 16 << 10
#: Results are recycled from this size on: below it glibc serves XLA's fresh results from its
#: heap (memory.MALLOC_RAISING_BYTES), where a dead one's memory is reused without faults, so
#: a recycled result saves nothing there and costs where no dead result is at hand: x + 1.0 on
#: 1e6 float64 (8 MB), its first call 36-51 ms of which Backend.take's copy took 4.6-6.7 and
#: the aliasing ~4 ms of the compile, and every call whose earlier results were still alive
#: 5.5-7.2 ms against 0.4; calls that let their results go took as long either way (it, the
#: SeLU layer, its gradient, the MLP step, alternating blocks of calls). Where the user fixed
#: glibc's thresholds lower, results from there to here are fresh pages at every call.
RECYCLE_MIN_BYTES = FRESH_RESULT_BYTES


class Lowered:
    """A module's text plus what executing it needs besides the user's arguments.

    `in_avals` are the module's parameters; `sources[k]` says what parameter k is made of:
    an argument index, or a list of them packed end to end (see PACK_MAX_BYTES).
    The executable takes `consts` (device copies of them) before those parameters.
    `views` lists the parameters that are views (their data from the 64-byte boundary below
    it, `view_pad` elements more, or as many as the argument's when its last ones are in a
    parameter of `tails`, those a context.View multiplies), whose offsets from there come in
    one int32 parameter after them; `recycled` the results written into buffers passed as
    the last parameters, one each (LARGE_ARRAY_BYTES). `fresh_text`: the module without
    those parameters, writing every result afresh, where a recycled one is of
    FRESH_RESULT_BYTES or more and the module's text is at most FRESH_TEXT_BYTES (else None)."""

    def __init__(self, text, consts, in_avals, out_avals, sources=None, recycled=(), views=(), tails=(),
                 fresh_text=None):
        self.text, self.consts, self.in_avals, self.out_avals = text, consts, in_avals, out_avals
        self.fresh_text = fresh_text
        self.sources = list(range(len(in_avals))) if sources is None else sources
        self.recycled, self.views, self.tails = list(recycled), list(views), list(tails)
        self.dot_views = False  # lower(dot_views=True) would read more arguments in place
        self.blas = False  # BLAS multiplies some of its matrices by vectors (lower(use_blas=False): XLA)
        self.merged = False  # some calls were emitted as one (lowering.schedule; lower(merge=False): apart)
        self.work = 0  # elements its ops compute in a run, as estimated (context.ModuleState.work)
        self.variant = {}  # lower's keywords that chose among these: dot_views, use_blas, merge
        self.host_dtypes = [d for _, d in out_avals]  # the results' numpy dtypes (x64 off narrows out_avals')


#: Other lowerings of a graph a signature's ladder tries after its first program
#: (tiering.Ladder, api), each lower's keywords changed from those of the program in use
#: (Lowered.variant): VIEWS also reads in place the misaligned matrices XLA's dots multiply
#: (context.View); XLA_DOTS leaves matrix-vector products to XLA, whose one thread beats
#: BLAS's two when another process holds a core (measured, 2 cores, one busy: logistic
#: regression's value and gradient 279-296 µs against 468-543; idle: 294-329 against
#: 216-258); APART emits the calls `schedule` merged one by one, each loop running only as
#: long as its own elements need (lifelines' generalized-gamma regression's gradient: 644 µs
#: a call apart, 786 merged, whose compile took 0.78 s against 3.5).
VIEWS, XLA_DOTS, APART = {"dot_views": True}, {"use_blas": False}, {"merge": False}


def _packs(avals, platform, pack):
    """[(dtype, [argument index])]: the small arguments (of `avals`; None: one not passed)
    sent as one buffer per dtype. Not off the CPU, nor for functions that keep results on the
    device (`pack=False`): there small arguments may be device arrays, which must not go
    through the host."""
    if platform != "cpu" or not pack:
        return []
    groups = {}
    for i, a in enumerate(avals):
        if a is not None and a.size * a.dtype.itemsize <= PACK_MAX_BYTES:
            groups.setdefault(a.dtype, []).append(i)
    return [(dtype, members) for dtype, members in groups.items() if len(members) > 1]


def lower(graph, name="jit_fn", platform="cpu", x64=True, pack=True, donate=(), locations=True, recycle=False,
          dot_views=False, use_blas=True, merge=True):
    """`emit`'s module of `graph`, or the one it emitted for a graph of the same structure
    and the same settings before (LOWERED_KEPT, `_structure`): a fresh closure's retrace (a
    library's fit() building value_and_grad(nll) anew) gives the graph the previous closure
    gave. The module is shared: nothing changes a Lowered once made."""
    arguments = (name, platform, x64, pack, tuple(sorted(donate)), locations, recycle, dot_views, use_blas, merge)
    key = None
    if LOWERED_KEPT:
        try:
            key = (_structure(graph), arguments, _settings())
            with _lowered_lock:
                found = _lowered.get(key)  # TypeError: something in it hashes by neither value nor identity
                if found is not None:
                    _lowered.move_to_end(key)
                    return found[0]
        except (_Unkeyable, TypeError, RecursionError):
            key = None
    lowered = emit(graph, *arguments)
    if key is not None:
        _keep(key, lowered)
    return lowered


#: Modules `lower` keeps for graphs of the same structure, at most this many and
#: LOWERED_KEPT_BYTES of text and constants, the least recently used going first. Measured
#: on a Weibull regression's value_and_grad and Hessian built afresh per fit (a 500x5
#: design): a fit's first calls took 38 ms, 15 of them lowering, and 20 ms with the
#: modules kept. None or 0: none kept.
LOWERED_KEPT = 64
LOWERED_KEPT_BYTES = 64 << 20
#: A graph whose constants hold more bytes is lowered every time: their digest would cost
#: more than the lowering it saves (blake2b: ~1 ms a MiB; the Table 1 quadratic's 8 MiB
#: matrix, in a module lowered in 1 ms).
KEY_ARRAY_BYTES = 1 << 20
_lowered = collections.OrderedDict()  # key -> (Lowered, bytes)
_lowered_bytes = [0]
_lowered_lock = threading.Lock()


def _keep(key, lowered):
    """Keep `lowered` under `key`, within LOWERED_KEPT and LOWERED_KEPT_BYTES."""
    size = len(lowered.text) + sum(getattr(c, "nbytes", 0) for c in lowered.consts)
    with _lowered_lock:
        if key not in _lowered:
            _lowered[key] = lowered, size
            _lowered_bytes[0] += size
        while _lowered and (len(_lowered) > LOWERED_KEPT or _lowered_bytes[0] > LOWERED_KEPT_BYTES):
            _lowered_bytes[0] -= _lowered.popitem(last=False)[1][1]


_ATOMS = (bool, int, str, type(None), bytes)  # described as themselves (a bool with its type: True == 1)
_SINGLETONS = (type(Ellipsis), type(NotImplemented))
_SETTING_TYPES = (bool, int, float, str, type(None), frozenset, tuple)  # _settings' values


class _Unkeyable(Exception):
    """A graph holds something `_structure` cannot describe by value: its module is not kept."""


def _structure(graph):
    """A flat tuple describing `graph` and all it holds, equal for graphs of equal structure:
    each container as its type and length then its items; Vars numbered in order of
    appearance (their counts differ between traces) with their types; arrays by shape, dtype
    and a digest of their bytes; floats exactly (-0.0 and nan apart); callables (primitives,
    their functions) as themselves, held by the key; this package's objects (sub-graphs,
    equations, control flow's params, source lines: a module names its users' lines) by type
    and attributes; another library's objects not at all (a pandas index keeps its values
    where its attributes do not show them): such a graph is lowered every time. One flat
    tuple hashes and compares in C: a nested one cost as much as the lowering it saved (a
    Hessian's: 5 of 9 ms)."""
    out, numbers, digests, hashed = [], {}, {}, [0]  # digests: id(array) -> (array, its description)
    append = out.append

    def visit(x, depth):
        t = type(x)
        if t in _ATOMS:
            append(x if t is not bool else (bool, x))  # True == 1
        elif t is Var:
            number = numbers.get(x)
            if number is None:
                number = numbers[x] = len(numbers)
                aval = x.aval
                append((Var, number, aval.shape, aval.dtype.str, aval.weak_type))
            else:
                append((Var, number))
        elif t is tuple or t is list:
            append(t)
            append(len(x))
            for item in x:
                visit(item, depth)
        elif t is Graph:  # a captured value's outer half is the enclosing trace's Tracer: lowering reads its inner Var
            append(Graph)
            for part in (x.invars, [inner for inner, _ in x.captured], x.eqns, x.outvars, x.in_tree, x.out_tree,
                         x.arg_names, x.guards):
                visit(part, depth + 1)
        elif t is Eqn:
            append(Eqn)
            append(x.prim)
            visit(x.args, depth)
            visit(x.kwargs, depth)
            visit(x.outvars, depth)
            visit(x.out_tree, depth)
            source = x.source
            if type(source) is SourceInfo:
                append((SourceInfo, source.filename, source.lineno, source.function))
            else:
                visit(source, depth + 1)
        elif t is dict:
            append(dict)
            append(len(x))
            for k, v in x.items():
                visit(k, depth)
                visit(v, depth)
        elif t is float:
            append((float, x.hex()))
        elif depth > 60:
            raise _Unkeyable("nested too deep")
        elif t is np.ndarray and x.dtype.hasobject:  # (names of a table's columns): by its items
            if x.size > 4096:
                raise _Unkeyable(f"an object array of {x.size} items")
            append((np.ndarray, x.shape))
            visit(x.tolist(), depth + 1)
        elif t is np.ndarray:
            known = digests.get(id(x))
            if known is None:  # an array many equations read is digested once
                hashed[0] += x.nbytes
                if hashed[0] > KEY_ARRAY_BYTES:
                    raise _Unkeyable(f"arrays of {hashed[0]} bytes: more than digesting them would save")
                known = digests[id(x)] = x, (np.ndarray, x.shape, x.dtype.str, hashlib.blake2b(
                    np.ascontiguousarray(x).data, digest_size=16).digest())
            append(known[1])
        elif t is complex:
            append((complex, x.real.hex(), x.imag.hex()))
        elif t is slice:
            append(slice)
            visit((x.start, x.stop, x.step), depth)
        elif isinstance(x, np.generic):
            append((np.generic, x.dtype.str, x.tobytes()))
        elif isinstance(x, np.dtype):
            append((np.dtype, x.str))
        elif callable(x) or isinstance(x, type) or t in _SINGLETONS:
            append(x)  # hashable by identity, or the key's hash fails: nothing kept
        elif isinstance(x, (tuple, list, dict)):  # a namedtuple, an OrderedDict: its type and items
            append(t)
            visit(tuple(x.items()) if isinstance(x, dict) else tuple(x), depth + 1)
            visit(getattr(x, "__dict__", None), depth + 1)
        elif t.__module__.partition(".")[0] == __name__.partition(".")[0]:  # ours: what it holds is all it is
            append(t)
            fields = getattr(x, "__dict__", None)
            if fields is not None:
                visit(fields, depth + 1)
                return
            slots = _SLOTS.get(t)
            if slots is None:
                slots = _SLOTS[t] = [n for k in t.__mro__ for n in getattr(k, "__slots__", ())]
            for n in slots:
                visit(getattr(x, n, None), depth + 1)
        else:  # another library's object may keep its value where its attributes do not show it
            raise _Unkeyable(f"a {t.__module__}.{t.__qualname__}")
    visit(graph, 0)
    return tuple(out)


_SLOTS = {}  # type -> its slots, for _structure


def _settings():
    """What lowering reads besides its arguments, that users and tests change: every
    upper-case number, string, tuple or frozen set in this package's modules (blas.MIN_ELEMENTS,
    context.LIFT_BYTES, ...), and the registry's generation (its rules)."""
    found = [registry.generation]
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith("autograd_xla"):
            found.extend((name, k, v) for k, v in vars(module).items() if k.isupper() and type(v) in _SETTING_TYPES)
    return tuple(found)


def emit(graph, name="jit_fn", platform="cpu", x64=True, pack=True, donate=(), locations=True, recycle=False,
         dot_views=False, use_blas=True, merge=True):
    """Emit `graph` as a module. With x64=False every 64-bit value is computed in 32 bits;
    `Lowered.in_avals` / `out_avals` then give the dtypes the executable really takes and
    returns. `pack` allows sending small arguments together (PACK_MAX_BYTES). `donate`: indices
    of graph inputs whose buffers XLA may reuse for outputs (`jax.buffer_donor`, which XLA's
    StableHLO import turns into input-output aliasing); packed ones are not marked.
    `locations`: each op carries its equation's primitive and user's line, which XLA keeps as
    the op's metadata (op_name, source_file, source_line) and names in its own error messages.
    `recycle` (CPU): large results are written into buffers passed in, and large arguments
    that only elementwise ops read are taken as views (LARGE_ARRAY_BYTES), and with
    `dot_views` those matrix products read too (context.View); not with `donate`, whose donors
    XLA may alias to the same results. `Lowered.dot_views` says whether lowering again with
    dot_views would read an argument in place that this program copies. `use_blas`: on the CPU,
    BLAS multiplies large matrices by vectors, and by matrices where each such product reads a
    large argument (blas.GEMM_ALONE; `Lowered.blas` says whether it does either).
    `merge`: independent calls of a looping primitive are emitted as one (`schedule`;
    `Lowered.merged` says whether some were)."""
    with hlo.narrow_64_bit(not x64):
        recycle = recycle and platform == "cpu" and not donate
        use_blas = use_blas and platform == "cpu"
        read = _read(graph)
        # XLA's matrix products first: a program with one that reads no large argument (a
        # hidden layer's) keeps them, emitted once (the MLP gradient's emit: 3.4 ms, 5.7 when
        # BLAS's went first and were then replaced)
        gemm = not blas.GEMM_ALONE
        main = _Main(graph, read, platform, locations, pack, recycle, use_blas=use_blas, merge=merge, gemm=gemm)
        module = main.ctx.module
        if not gemm and module.gemm_products and not module.gemm_apart:  # each reads a large argument: BLAS's
            gemm = True
            main = _Main(graph, read, platform, locations, pack, recycle, use_blas=use_blas, merge=merge, gemm=gemm)
        worth = any(main.viewable.values())
        views = main.viewable if dot_views else {i: d for i, d in main.viewable.items() if not d}
        if views:  # emit again, with those arguments read through views
            main = _Main(graph, read, platform, locations, pack, recycle, views, use_blas=use_blas, merge=merge,
                         gemm=gemm)
        donors = {k: "{jax.buffer_donor = true}" for k, s in enumerate(main.sources) if type(s) is int and s in donate}
        lowered = _assemble(name, main.ctx, main.params, main.outs, main.sources, recycle, main.views, main.tails,
                            arg_attrs=donors)
        lowered.dot_views = worth and not dot_views
        lowered.blas = main.ctx.module.blas_products > 0
        lowered.merged = main.ctx.module.merged > 0
        lowered.work = main.ctx.module.work
        lowered.variant = {"dot_views": dot_views, "use_blas": use_blas, "merge": merge}
        return lowered


#: The ops an argument read through a view may feed for XLA to fuse the view's dynamic_slice
#: into their loops (measured: x + x*x + x*x*x on a 5000x5000 float32 view, 19 ms against
#: 23 ms aligned in place and 68 ms copied), and BLAS's products, which read it where it is
#: (blas.py; logistic regression's X@w and X.T@r, 5000x100 float64 at 16 mod 64, then cost
#: no copy of X: 346 µs a value and gradient against 707 copied). Any other use (an XLA
#: dot, a reduction, a loop, a result) would make XLA copy the slice out first, so such
#: arguments are not viewed; but a matrix's dot reads the view where it is (context.View).
FUSED_USES = frozenset({f"stablehlo.{n}" for n in hlo.UNARY_OPS | hlo.BINARY_OPS
                        | {"compare", "select", "convert", "clamp", "real", "imag", "complex"}}
                       | {f"chlo.{n}" for n in hlo.CHLO_OPS - {"top_k"}} | {blas.ROWS, blas.COLUMNS, blas.GEMM})


#: A matrix argument is viewed for the dots a context.View does when its rows have this many
#: bytes per such dot: each dot then reads the column or two at the rows' starts, which costs
#: per row. Measured on a 5000x100 float64 matrix, 16 mod 64 (µs): its product with a vector
#: 108 viewed against 129 copied, but a logistic-regression gradient, two such dots, 295
#: against 209 (one copy serves both).
VIEW_DOT_ROW_BYTES = 1024
#: ... and when those dots' extra traffic (View.traffic) is at most this many times its size.
#: Measured, a 1000x1000 float64 matrix (16 mod 64) times a 1000 x n matrix, then tanh (µs;
#: viewed / copied / aligned): n = 1 158 / 630 / 128, 16 260 / 419 / 213, 64 838 / 1008 /
#: 672 (traffic 0.26); SeLU's 256x1024 input times its 1024x1024 weights, the input viewed
#: (traffic 10), 11% slower than copied.
VIEW_DOT_TRAFFIC = 0.5


class _Main:
    """The main function's body: parameters for the graph's inputs that it `read`s (small ones
    packed, `views` read through views), the body, and which large arguments it only reads
    elementwise or multiplies as a context.View can (`viewable`, where it `recycle`s), found by
    watching their uses; BLAS's matrix products only with `gemm` (blas.GEMM_ALONE)."""

    def __init__(self, graph, read, platform, locations, pack, recycle, views=(), use_blas=False, merge=True,
                 gemm=True):
        self.ctx = ctx = LoweringContext(ModuleState(platform, hlo.Locations() if locations else None,
                                                     use_blas=use_blas, merge=merge, gemm=gemm))
        avals = [v.aval for v in graph.invars]
        packs = _packs([a if v in read else None for v, a in zip(graph.invars, avals)], platform, pack)
        packed = {i for _, members in packs for i in members}
        self.params, self.sources, self.views, self.tails, inputs = [], [], [], [], [None] * len(avals)
        watched = {}  # first pass: the large arguments whose uses decide whether they are viewable
        for i, a in enumerate(avals):
            if graph.invars[i] not in read:  # not passed at all (a Value no op names)
                inputs[i] = hlo.Value(f"%unread{i}", a.shape, a.dtype, a.weak_type)
                continue
            if i in packed:
                continue
            self.sources.append(i)
            if i in views:
                self.views.append(len(self.params))
                inputs[i] = self._view(i, a, list(views).index(i), len(views), views[i])
            else:
                inputs[i] = hlo.Value(f"%arg{len(self.params)}", a.shape, a.dtype, a.weak_type)
                self.params.append(inputs[i])
                if not views and _large(a):
                    watched[inputs[i].name] = i
        for dtype, members in packs:
            buffer = hlo.Value(f"%arg{len(self.params)}", (sum(avals[i].size for i in members),), dtype)
            self.params.append(buffer)
            self.sources.append(members)
            start = 0
            for i in members:
                a = avals[i]
                piece = ctx.reshape(ctx.slice(buffer, [start], [start + a.size]), a.shape)
                inputs[i] = hlo.Value(piece.name, a.shape, a.dtype, a.weak_type)
                start += a.size
        ctx.module.uses = {name: Uses() for name in watched}
        self.outs = lower_subgraph(ctx, graph, inputs, [])
        results = {o.name for o in self.outs}
        self.viewable = {}  # graph input index -> whether a dot reads its view
        for name, i in watched.items() if recycle else ():
            u, a = ctx.module.uses[name], avals[i]
            if name in results or not (u.ops or u.dots) or not u.ops.keys() <= FUSED_USES:
                continue
            if not u.dots or (a.shape[1] * hlo.canonical_dtype(a.dtype).itemsize >= VIEW_DOT_ROW_BYTES * u.dots
                              and u.traffic <= VIEW_DOT_TRAFFIC * a.size):
                self.viewable[i] = u.dots > 0

    def _view(self, i, a, k, count, dot):
        """Graph input i, `a`, read out of a flat parameter from the k-th of `count` offsets passed
        in the offsets parameter (backend.Executable fills them). The parameter has view_pad
        elements more, or (`dot`: a context.View) none, and a second one holds those."""
        ctx, pad = self.ctx, view_pad(hlo.canonical_dtype(a.dtype))
        flat = hlo.Value(f"%view{len(self.params)}", (a.size + (0 if dot else pad),), a.dtype)
        self.params.append(flat)
        offsets = hlo.Value("%offsets", (count,), np.int32)
        start = ctx.reshape(ctx.slice(offsets, [k], [k + 1]), ())
        if not dot:
            value = ctx.reshape(ctx.dynamic_slice(flat, [start], [a.size]), a.shape).with_weak_type(a.weak_type)
            ctx.module.in_place[value.name] = (flat, start)  # BLAS's products read it there
            return value
        self.tails.append(len(self.params))
        self.sources.append(i)
        tail = hlo.Value(f"%tail{len(self.params)}", (pad,), a.dtype)  # the argument's last elements
        self.params.append(tail)
        back = ctx.binary("subtract", ctx.scalar(pad, np.int32), start)
        rest = ctx.dynamic_slice(ctx.pad(tail, ctx.scalar(0, a.dtype), [0], [pad]), [back], [pad])
        view = View(flat, rest, start, a.shape)
        value = view.copied(ctx)
        ctx.module.views[value.name] = view
        return value.with_weak_type(a.weak_type)


def _read(graph):
    """The graph's inputs its results need: an argument nothing reads is not passed (measured:
    an unused 8 MiB argument at 16 mod 64 cost a 400-600 µs copy a call)."""
    read = {v for v in graph.outvars if isinstance(v, Var)}
    for eqn in prune(graph).eqns:
        read.update(eqn.invars())
    return read


def _large(aval):
    """Whether lowering treats an argument or result of `aval` as large (LARGE_ARRAY_BYTES)."""
    return _bytes(aval) >= LARGE_ARRAY_BYTES


def _bytes(aval):
    """The bytes of `aval` in the dtype it really has in the module (x64 off narrows it)."""
    return aval.size * hlo.canonical_dtype(aval.dtype).itemsize


def _assemble(name, ctx, params, outs, sources=None, recycle=False, views=(), tails=(), arg_attrs=None,
              **module_options):
    """The Lowered module of a finished main function: the constants lifted into parameters
    (first, where jaxlib's C++ dispatch passes them: dispatch.py), then its parameters (whose
    `arg_attrs` are keyed by their index among them), then the views' offsets, then
    (`recycle`) one buffer per large result, aliased to it; all in the dtypes the executable
    really has (x64 off narrows them)."""
    lifted = list(ctx.module.lifted.values())
    entry = [v for _, v in lifted] + params
    if views:
        entry.append(hlo.Value("%offsets", (len(views),), np.int32))
    attrs = {len(lifted) + k: a for k, a in (arg_attrs or {}).items()}
    recycled = [k for k, o in enumerate(outs) if recycle and _bytes(o) >= RECYCLE_MIN_BYTES]
    fresh = any(_bytes(outs[k]) >= FRESH_RESULT_BYTES for k in recycled)
    fresh_entry, fresh_attrs = (list(entry), dict(attrs)) if fresh else (None, None)
    for k in recycled:
        attrs[len(entry)] = f"{{tf.aliasing_output = {k} : i32}}"
        entry.append(hlo.Value(f"%out{k}", outs[k].shape, outs[k].dtype))
    text = hlo.module_text(_identifier(name), entry, ctx.lines, outs, locations=ctx.module.locations,
                           arg_attrs=attrs, **module_options)
    fresh_text = None
    if fresh and len(text) <= FRESH_TEXT_BYTES:  # (emitted only then: the fresh text is a few lines shorter)
        fresh_text = hlo.module_text(_identifier(name), fresh_entry, ctx.lines, outs, locations=ctx.module.locations,
                                     arg_attrs=fresh_attrs, **module_options)
    consts = [a.astype(hlo.canonical_dtype(a.dtype), copy=False) for a, _ in lifted]
    in_avals = [(p.shape, hlo.canonical_dtype(p.dtype)) for p in params]
    out_avals = [(o.shape, hlo.canonical_dtype(o.dtype)) for o in outs]
    lowered = Lowered(text, consts, in_avals, out_avals, sources, recycled, views, tails, fresh_text)
    lowered.host_dtypes = [np.dtype(o.dtype) for o in outs]
    return lowered


def _identifier(name):
    cleaned = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return cleaned if cleaned and not cleaned[0].isdigit() else "jit_" + cleaned


def lower_replicated(graph, mapped, axes, replicas, name="pmap_fn", platform="cpu", x64=True):
    """`graph` as the program each of `replicas` devices runs (replica mode): each input and
    result has its own shape (a scalar becomes shape (1,), the least a shard can have); the
    devices' shards of a mapped one lie end to end along axis 0 of the array over all of them
    (replicated.ReplicatedExecutable). Reshaping results to a leading axis of 1 instead made
    XLA copy every result: 2.6 against 1.1 ms for an MLP step, measured. `axes`: the named
    axes its collectives reduce over (name -> size)."""
    with hlo.narrow_64_bit(not x64):
        module = ModuleState(platform, hlo.Locations(), axes)
        ctx = LoweringContext(module)
        params, inputs = [], []
        for k, (v, m) in enumerate(zip(graph.invars, mapped)):
            a = v.aval
            param = hlo.Value(f"%arg{k}", shard_shape(a.shape) if m else a.shape, a.dtype)
            params.append(param)
            inputs.append(ctx.reshape(param, a.shape).with_weak_type(a.weak_type))
        outs = [ctx.reshape(o, shard_shape(o.shape)) for o in lower_subgraph(ctx, graph, inputs, [])]
        return _assemble(name, ctx, params, outs, replicas=replicas)


def shard_shape(shape):
    """The shape a device's shard of a value of `shape` has in a replica program."""
    return tuple(shape) or (1,)

