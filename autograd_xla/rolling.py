"""Loop rolling: a traced program's repeated runs of equations become scan loops again.

A Python loop over traced values is unrolled by tracing: its body's equations appear once
per iteration, and so do those of autograd's backward pass over it (in reverse). XLA's
compile time grows much faster than the program (an LSTM's gradient over 30 steps: 2,943
equations, 17 s of compile), while a `scan` compiles its body once. `roll` finds the
repetitions in the equation list and replaces each run of them by one `scan_p` equation
(control_flow/scans.py's primitive), whose body is the first repetition's equations:

1. Each equation gets a token: its primitive, its user's line, its results' types, and its
   operands' structure with every traced operand as its type and every numeric constant
   as its type alone (a loop index baked in, `x[t]`, differs between repetitions).
2. Runs of a repeated token sequence are found from each position's next occurrences of its
   token (candidate periods) and block hashes of the token list: linear in the trace.
3. A run's dataflow is checked repetition by repetition: every operand of a body position
   must come from the same position of the same repetition, or of the previous one (a
   carry), or from before the run (a value the loop closes over, or one per step, stacked).
   Where the pattern breaks, the run is cut; a first or last repetition that differs stays
   as it was traced, unless it differs only as autograd's backward pass makes it differ
   (`_absorb_ends`): its first step lacks the body's `add(acc, g)`s (no gradient accumulated
   yet), which it gets as `add(-0.0, g)`, exactly g; its last step lacks what nothing reads,
   which it computes and drops. Both then run as steps of the loop.
4. Values of the loop that the rest of the program reads (the forward pass's values that the
   backward pass uses, the results) are the scan's stacked outputs, read back by index; a
   later loop that reads them step by step (the backward pass) takes the stacked array
   itself, in reverse where it walks it backwards. Constants that differ between steps are
   per-step inputs (their rules take a traced scalar where a constant was: `x[t]` becomes a
   dynamic slice; a rule that needs the constant rejects the run).

Each step runs the same operations in the same order as the unrolled program, on the same
values, so results are the unrolled program's. Loops inside loops roll level by level: the
inner loops first (the smallest period), then the sequence of scans they left.
"""
import hashlib
import itertools
import operator
import os

import numpy as np

from . import lowering, registry, tracing, tree
from .control_flow.common import Params
from .control_flow.scans import scan_p
from .core import Aval, DynamicSlice, Eqn, Graph, Var

#: Whether jit_ps rolls loops (its `roll_loops` option overrides); $AUTOGRAD_XLA_ROLL_LOOPS=0 turns it off.
ROLL_LOOPS = os.environ.get("AUTOGRAD_XLA_ROLL_LOOPS", "1").strip().lower() not in ("0", "false", "no", "off")
#: A run is rolled from this many repetitions ...
MIN_REPS = 4
#: ... covering this many equations (a few repeated lines compile fast unrolled, and run faster).
MIN_EQNS = 48
#: Candidate periods tried at a position: the distances to its token's next occurrences (a
#: body calling one helper from the same line k times holds each of its tokens k times).
CANDIDATES = 8
#: Levels of nesting rolled (layers x time steps: two).
MAX_LEVELS = 4
#: Whether a run's differing first and last steps are made steps of the loop (_absorb_ends).
ABSORB_ENDS = True
#: Numeric constant arrays up to this many elements may differ between steps (per-step inputs,
#: stacked: as many bytes as the unrolled program's constants). autograd's lstm and rnn
#: examples iterate over the rows of a closed-over dataset (`for input in inputs`, 60 x 128
#: one-hot rows, 30 steps): at 1024 no step matched the next and the lstm's gradient stayed
#: unrolled, its first call 28.0 s (XLA compiling 0.9 MiB of StableHLO), rolled 2.0 s.
WILD_ARRAY_ELEMENTS = 1 << 22

_INDEX = Aval((), np.int64, weak_type=True)
_counter = itertools.count(1 << 40)  # Vars made here (their counts only name them in listings)
_MOD = (1 << 31) - 1  # (block hashes: products of two fit numpy's int64)
_BASE = 1_000_003


def roll(graph):
    """`graph` with its repeated runs of equations rolled into scans (the same graph if none)."""
    for _ in range(MAX_LEVELS):
        rolled = _roll_level(graph)
        if rolled is None:
            break
        graph = rolled
    return graph


# ----- tokens --------------------------------------------------------------------------------
_PY_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64), complex: np.dtype(np.complex128)}
_INT_KEY = ((), _PY_DTYPES[int])  # _leaf_key of an int


def _leaf_key(x):
    """A leaf's part of a token: shape and dtype, for a traced value and a constant alike (a
    loop's first step may read a constant where later steps read the carry: np.zeros(n) as
    the initial state, 0.0 as a sum's start)."""
    t = type(x)
    if t is Var:
        return x.aval.shape, x.aval.dtype
    if t in _PY_DTYPES:
        return (), _PY_DTYPES[t]
    return np.shape(x), x.dtype


def _is_wild(x):
    """A constant that may differ between the steps of a loop (it becomes a per-step input)."""
    t = type(x)
    if t is int or t is float or t is complex:
        return True
    if t is np.ndarray:
        return x.dtype.kind in "iufc" and x.size <= WILD_ARRAY_ELEMENTS
    return isinstance(x, np.generic) and x.dtype.kind in "iufc"


def _describe(obj, leaves, wild, out):
    """Append a description of `obj` to `out` and its leaves (Vars, and with `wild` numeric
    constants) to `leaves`; `_rebuild` walks the same leaves in the same order."""
    t = type(obj)
    if t is Var:
        leaves.append(obj)
        out.append(_leaf_key(obj))
    elif t is not tuple and t is not list and wild and _is_wild(obj):  # (no tuple is: the common case first)
        leaves.append(obj)
        out.append(_leaf_key(obj))
    elif t is tuple or t is list:
        out.append((t, len(obj)))
        for x in obj:  # (the common leaves inline: autograd's VJPs pass tuples of shapes and flags)
            u = type(x)
            if u is Var:
                leaves.append(x)
                out.append((x.aval.shape, x.aval.dtype))
            elif u is int and wild:
                leaves.append(x)
                out.append(_INT_KEY)
            elif u is int or u is bool:
                out.append((u, x))
            elif isinstance(x, np.dtype):  # (autograd's VJPs pass their operands' dtypes)
                out.append((u, x.str))
            else:
                _describe(x, leaves, wild, out)
    elif t is dict:
        out.append((dict, tuple(obj)))
        for x in obj.values():
            _describe(x, leaves, wild, out)
    elif t is slice:
        out.append(slice)
        for x in (obj.start, obj.stop, obj.step):
            _describe(x, leaves, wild, out)
    elif t is float:
        out.append((float, obj.hex()))
    elif t is complex:
        out.append((complex, obj.real.hex(), obj.imag.hex()))
    elif t is bool or t is int or t is str or obj is None or obj is Ellipsis:
        out.append((t, obj))
    elif t is np.ndarray:
        out.append(_array_key(obj))
    elif isinstance(obj, (np.generic, np.dtype)):
        out.append((t, obj.tobytes() if isinstance(obj, np.generic) else obj.str))
    elif callable(obj) or isinstance(obj, type):
        out.append(obj)
    elif t is DynamicSlice:
        out.append((t, obj.size))
        _describe(obj.start, leaves, wild, out)
    else:  # a control-flow equation's params (its sub-graphs): by structure
        out.append(_opaque_key(obj))


def _array_key(a):
    return ("a", a.shape, a.dtype.str, hashlib.blake2b(np.ascontiguousarray(a).view(np.uint8).data,
                                                         digest_size=16).digest() if not a.dtype.hasobject else id(a))


def _opaque_key(obj):
    try:
        return hash(lowering._structure(obj))
    except Exception:  # (lowering's _Unkeyable, an unhashable part): never equal to another's
        return ("id", id(obj))


def _rebuild(obj, it, wild):
    """`obj` with each of its leaves (as `_describe` finds them) replaced by next(it)."""
    t = type(obj)
    if t is Var or (wild and _is_wild(obj)):
        return next(it)
    if t is tuple or t is list:
        return t([_rebuild(x, it, wild) for x in obj])
    if t is dict:
        return {k: _rebuild(x, it, wild) for k, x in obj.items()}
    if t is slice:
        return slice(*(_rebuild(x, it, wild) for x in (obj.start, obj.stop, obj.step)))
    if t is DynamicSlice:
        return DynamicSlice(_rebuild(obj.start, it, wild), obj.size)
    return obj


class _Site:
    """One equation of the level: its token and its leaves (args' then kwargs')."""

    __slots__ = ("eqn", "leaves", "n_args")

    def __init__(self, eqn):
        self.eqn = eqn
        self.leaves = []


def _token(eqn, site, table):
    src = eqn.source
    out = [eqn.prim, eqn.out_tree, (src.filename, src.lineno) if src is not None else None, len(eqn.args)]
    for v in eqn.outvars:
        out.append(None if v is None else v.aval)
    leaves = site.leaves
    for x in eqn.args:  # (the common operands inline: this runs once per equation traced)
        t = type(x)
        if t is Var:
            leaves.append(x)
            out.append((x.aval.shape, x.aval.dtype))
        elif t is float or t is int:
            leaves.append(x)
            out.append(((), _PY_DTYPES[t]))
        else:
            _describe(x, leaves, True, out)
    site.n_args = len(leaves)
    if eqn.kwargs:
        _describe(eqn.kwargs, leaves, False, out)
    try:
        return table.setdefault(tuple(out), len(table))
    except TypeError:  # an unhashable operand: equal to no other equation
        return table.setdefault(("unhashable", id(eqn)), len(table))


# ----- finding runs --------------------------------------------------------------------------
def find_runs(tokens):
    """Non-overlapping (start, period, repetitions) of the token list, left to right: at each
    position the smallest period (among its token's next CANDIDATES occurrences) that repeats
    at least MIN_REPS times over at least MIN_EQNS equations."""
    n = len(tokens)
    if not n:
        return []
    following, block = _next_occurrences(tokens), _block_hash(tokens)

    runs, i = [], 0
    while i < n:
        j, found = i, None
        for _ in range(CANDIDATES):
            j = following[j]
            p = j - i
            if j >= n or i + max(MIN_REPS * p, MIN_EQNS) > n:
                break
            h = block(i, p)
            if block(j, p) != h:
                continue
            k = 2
            while i + (k + 1) * p <= n and block(i + k * p, p) == h:
                k += 1
            if k >= MIN_REPS and k * p >= MIN_EQNS:
                body = tokens[i:i + p]
                k = next((r for r in range(1, k) if tokens[i + r * p:i + (r + 1) * p] != body), k)  # (hash collisions)
                if k >= MIN_REPS:
                    found = (i, p, k)
                    break
        if found is None:
            i += 1
        else:
            runs.append(found)
            i += found[1] * found[2]
    return runs


def _next_occurrences(tokens):
    """For each position, the next position of its token (len(tokens) where none), in numpy: the
    list's passes in Python were a sixth of rolling's time."""
    t = np.asarray(tokens, np.int64)
    n = len(t)
    order = np.argsort(t, kind="stable")
    following = np.full(n, n, np.int64)
    same = t[order[1:]] == t[order[:-1]]
    following[order[:-1][same]] = order[1:][same]
    return following.tolist()


def _block_hash(tokens):
    """block(i, p): a hash of tokens[i:i + p], equal for equal blocks wherever they are (a
    polynomial hash mod _MOD, each block scaled to end at the list's end)."""
    t = np.asarray(tokens, np.int64)
    n = len(t)
    powers = np.ones(n + 1, np.int64)  # _BASE ** j % _MOD, by doubling
    k, step = 1, _BASE
    while k <= n:
        m = min(k, n + 1 - k)
        powers[k:k + m] = powers[:m] * step % _MOD
        k, step = 2 * k, step * step % _MOD
    prefix = np.zeros(n + 1, np.int64)
    np.cumsum((t + 1) % _MOD * powers[:n] % _MOD, out=prefix[1:])  # (n terms below 2**31 each)
    prefix, powers = (prefix % _MOD).tolist(), powers.tolist()

    def block(i, p):
        return (prefix[i + p] - prefix[i]) * powers[n - i] % _MOD
    return block


# ----- one level -----------------------------------------------------------------------------
def _roll_level(graph):
    eqns = graph.eqns
    if len(eqns) < MIN_EQNS:
        return None
    sites, tokens, table = _sites(eqns)
    runs = find_runs(tokens)
    if not runs:
        return None
    longer = _absorb_ends(sites, tokens, runs) if ABSORB_ENDS else None
    if longer is None:
        return _roll_runs(graph, eqns, sites, runs)[0]
    sites2, tokens2, _ = _sites(longer, table, {id(s.eqn): (s, t) for s, t in zip(sites, tokens)})
    runs2 = find_runs(tokens2)
    absorbed, steps = _roll_runs(graph, longer, sites2, runs2)
    if absorbed is not None and steps == sum(k for _, _, k in runs2) > sum(k for _, _, k in runs):
        return absorbed  # (every run found rolled whole, with more steps than before)
    plain = _roll_runs(graph, eqns, _sites(eqns)[0], runs)[0]  # (the sites above are rewritten)
    if absorbed is None or (plain is not None and len(absorbed.eqns) >= len(plain.eqns)):
        return plain  # (the steps absorbed broke the loop's pattern: the loop as found)
    return absorbed


def _sites(eqns, table=None, known=None):
    """(a _Site per equation, their tokens, the token table); `known`: id(eqn) -> (site,
    token) of equations tokenized before with `table`."""
    table = {} if table is None else table
    sites, tokens = [], []
    for eqn in eqns:
        got = known.get(id(eqn)) if known else None
        if got is None:
            site = _Site(eqn)
            got = site, _token(eqn, site, table)
        sites.append(got[0])
        tokens.append(got[1])
    return sites, tokens, table


def _roll_runs(graph, eqns, sites, runs):
    """(`graph` with `runs` of its equations `eqns` rolled, or None; repetitions rolled)."""
    last_use = {}
    for k, site in enumerate(sites):
        for x in site.leaves:
            if type(x) is Var:
                last_use[x] = k
    outs = {v for v in graph.outvars if isinstance(v, Var)}
    for v in outs:
        last_use[v] = len(eqns)
    level = _Level(last_use, len(eqns), graph.operators)
    new_eqns, done = [], 0
    for start, period, reps in runs:
        new_eqns.extend(level.renamed(sites[done:start]))
        level.roll_run(sites[start:start + period * reps], start, period, reps, new_eqns)
        done = start + period * reps
    new_eqns.extend(level.renamed(sites[done:]))
    if not level.rolled:
        return None, 0
    rolled = Graph(graph.invars, new_eqns, [level.subst.get(v, v) if isinstance(v, Var) else v for v in graph.outvars],
                   graph.in_tree, graph.out_tree, graph.captured, graph.arg_names, graph.guards, graph.operators)
    return lowering.prune(rolled), level.steps


# ----- a run's differing first and last steps ------------------------------------------------
def _absorb_ends(sites, tokens, runs):
    """The level's equations with the first and last steps of its runs rewritten into steps of
    the same shape as the body, or None where none is. autograd's backward pass over a loop
    starts each accumulation with the first gradient itself (the body's `add(acc, g)` is absent
    from its first step), and its last step leaves out what nothing reads (the gradient of an
    initial state that is a constant). The first step gets the missing `add(-0.0, g)` (exactly
    g for every g: -0.0 is the identity of IEEE addition, +0.0 is not: 0.0 + -0.0 == +0.0), and
    equations of its that make values from constants alone (autograd's zeros) move before it;
    the last step gets the missing equations, computed from the values the body would read
    and read by nothing. The run may then start at another of its equations (its rotation)."""
    out, done, changed = [], 0, False
    for r, (start, p, k) in enumerate(runs):
        hi = runs[r + 1][0] if r + 1 < len(runs) else len(sites)
        got = _front(sites, tokens, start, p, done)
        if got is None:
            j, head, lo, rep0 = 0, [], start, {}
        else:
            j, head, lo, rep0 = got
        end = start + k * p
        tail = _tail(sites, tokens, start, p, k, j, end, hi)
        if got is None and tail is None:
            continue
        changed = True
        made, after, stop = tail if tail is not None else ([], [], end)
        out += [s.eqn for s in sites[done:lo]] + made + head  # (made: constants, before the run)
        out += [rep0.get(i, sites[i].eqn) for i in range(start, end)] + after
        done = stop
    if not changed:
        return None
    return out + [s.eqn for s in sites[done:]]


def _producers(sites, start, p, reps):
    """Var -> (repetition, position, output) for the first `reps` repetitions of a run."""
    made = {}
    for idx in range(reps * p):
        for o, v in enumerate(sites[start + idx].eqn.outvars):
            if v is not None:
                made[v] = divmod(idx, p) + (o,)
    return made


def _kinds(sites, start, p, r, made):
    """Per position of repetition r of the run: its leaves as ("l", q, o) (this repetition's),
    ("c", q, o) (the previous one's) or the leaf itself (a value from before, a constant)."""
    kinds = []
    for q in range(p):
        row = []
        for x in sites[start + r * p + q].leaves:
            src = made.get(x) if type(x) is Var else None
            if src is None or src[0] < r - 1:
                row.append(x)
            else:
                row.append(("l" if src[0] == r else "c", src[1], src[2]))
        kinds.append(row)
    return kinds


def _front(sites, tokens, start, p, lo):
    """The run's step before `start` with the body's missing `add`s put in: (rotation j, its
    equations, where they begin, {index: equation of the run's first repetition rewritten}),
    or None. The step is matched backwards against body positions p-1, p-2, ..., j (where
    it matches without a missing add, the run only starts earlier: at body position j)."""
    body = [sites[start + q] for q in range(p)]
    matched, missing, extra = {}, [], []
    i, q = start - 1, p - 1
    while q >= 0 and i >= lo:
        if tokens[i] == tokens[start + q]:
            matched[q] = i
            i, q = i - 1, q - 1
        elif _accumulates(body[q].eqn):
            missing.append(q)
            q -= 1
        elif not any(type(x) is Var for x in sites[i].leaves):
            extra.append(i)
            i -= 1
        else:
            break
    if not matched:
        return None
    j = q + 1
    missing = [q for q in missing if q >= j]
    first = min(matched.values())
    extra = [i for i in extra if i > first]
    made = _producers(sites, start, p, 2)
    kinds = _kinds(sites, start, p, 1, made)
    step = {q: sites[i] for q, i in matched.items()}
    leaves = {q: list(s.leaves) for q, s in step.items()}
    inside = {v for s in step.values() for v in s.eqn.outvars if v is not None}
    rep0 = {}  # index of an equation of the run's first repetition -> its leaves rewritten
    adds, before, zeros, changed = {}, [], [], set()
    for q in sorted(missing, reverse=True):
        eqn = body[q].eqn
        # what the step reads where the body reads the add's result: z
        reads = []
        for q2 in range(q + 1, p):
            for s, kind in enumerate(kinds[q2]):
                if type(kind) is tuple and kind == ("l", q, 0) and q2 in leaves:
                    reads.append((q2, s, leaves[q2][s]))
        for q2 in range(p):
            for s, kind in enumerate(kinds[q2]):
                if type(kind) is tuple and kind == ("c", q, 0):
                    reads.append((-1 - q2, s, sites[start + q2].leaves[s]))
        z = reads[0][2] if reads else None
        if type(z) is not Var or z.aval != eqn.outvars[0].aval or any(x is not z for _, _, x in reads):
            if q < min(matched):  # (an add before the step's first equation: the step starts after it)
                j = q + 1
                break
            return None
        ops = kinds[q]

        def carried(kind):  # (a value of the previous step once the run starts at the step)
            return type(kind) is tuple and (kind[0] == "c" or (kind[0] == "l" and kind[1] not in step))

        zero_slot = None
        for s in sorted((0, 1), key=lambda s: not (type(ops[s]) is tuple and ops[s] == ("c", q, 0))):  # (its own sum first)
            other = ops[1 - s]
            if not carried(ops[s]):
                continue
            if type(other) is tuple and other[0] == "l" and other[1] in step:  # a value of the step
                ok = step[other[1]].eqn.outvars[other[2]] is z
            else:
                ok = carried(other) and z not in inside  # z is where that carry starts
            if ok:
                zero_slot = s
                before.extend(kind[1] for kind in ops if kind[0] == "l" and kind[1] not in step)
                break
        if zero_slot is None:
            if q < min(matched):
                j = q + 1
                break
            return None
        aval = eqn.outvars[0].aval  # (a Var, not a constant: a constant's token is its value)
        zero = _bind(np.full, (aval.shape, complex(-0.0, -0.0) if aval.dtype.kind == "c" else -0.0),
                     {"dtype": aval.dtype}, eqn.source)
        zeros.append(zero)
        args = [None, None]
        args[zero_slot], args[1 - zero_slot] = zero.outvars[0], z
        new = Eqn(eqn.prim, tuple(args), {}, [_new_var(aval)], eqn.out_tree, eqn.source)
        adds[q] = new
        got = new.outvars[0]
        for q2, s, _ in reads:
            if q2 >= 0:
                leaves[q2][s] = got
                changed.add(q2)
            else:
                idx = start - 1 - q2
                rep0.setdefault(idx, list(sites[idx].leaves))[s] = got
        inside.add(got)
    if any(t >= j for t in before):
        return None
    eqns = []
    for q in range(j, p):
        if q in adds:
            eqns.append(adds[q])
        else:
            site = step[q]
            eqns.append(_with_leaves(site.eqn, leaves[q], site.n_args) if q in changed else site.eqn)
    moved = [sites[i].eqn for i in sorted(extra)] + zeros
    return j, moved + eqns, first, {i: _with_leaves(sites[i].eqn, ls, sites[i].n_args) for i, ls in rep0.items()}


def _accumulates(eqn):
    """Whether `eqn` may be a sum's step that a first step leaves out: `add` of two values of
    its result's type (floating or complex: -0.0 is their additive identity)."""
    if eqn.prim is not np.add or eqn.kwargs or len(eqn.args) != 2 or len(eqn.outvars) != 1:
        return False
    aval = eqn.outvars[0] and eqn.outvars[0].aval
    return (aval is not None and not aval.weak_type and aval.dtype.kind in "fc"
            and all(type(x) is Var and x.aval == aval for x in eqn.args))


def _tail(sites, tokens, start, p, k, j, end, hi):
    """The step after the run (body positions 0 .. j-1, or a whole step where j is 0), with
    the equations it lacks computed and read by nothing: (equations of constants to put before
    the run, its equations, the index after it), or None. Equations among its that read
    nothing of it and that it does not read move after it."""
    n = j or p
    last = start + (k - 1) * p
    made = _producers(sites, start + (k - 2) * p, p, 2)
    kinds = _kinds(sites, start + (k - 2) * p, p, 1, made)
    step, extra, synth, made_here = {}, [], 0, []
    outs = {}  # body position -> the tail step's outvars
    latest = {t: q for q, t in enumerate(tokens[start:start + n])}  # token -> its last body position
    i, q, stop = end, 0, end
    while q < n:
        if i < hi and tokens[i] == tokens[start + q]:
            step[q] = _as_body_reads(sites[i], kinds[q], made_here)
            outs[q] = sites[i].eqn.outvars
            i, q, stop = i + 1, q + 1, i + 1
            continue
        if i < hi and latest.get(tokens[i], -1) <= q and len(extra) < n:  # (not the step's: an extra?)
            mine = {v for o in outs.values() for v in o if v is not None}
            if not any(type(x) is Var and x in mine for x in sites[i].leaves):
                extra.append(i)
                i += 1
                continue
        site = sites[last + q]  # (the missing equation: computed from what the body would read)
        leaves = []
        for kind in kinds[q]:
            if type(kind) is not tuple:  # a value from before the run or a constant: the run's
                leaves.append(kind)      # last step's (what it would be in this step matters
                continue                 # not: nothing reads what it makes)
            got = outs.get(kind[1]) if kind[0] == "l" else sites[last + kind[1]].eqn.outvars
            if got is None or got[kind[2]] is None:
                return None
            leaves.append(got[kind[2]])
        new = _with_leaves(site.eqn, leaves, site.n_args)
        outvars = [None if v is None else _new_var(v.aval) for v in site.eqn.outvars]
        step[q] = Eqn(new.prim, new.args, new.kwargs, outvars, new.out_tree, new.source)
        outs[q] = outvars
        synth += 1
        q += 1
    extra = [i for i in extra if i < stop]  # (those after the step's last equation stay)
    if not synth or synth * 2 > p:  # (most of the step is there)
        return None
    read = {x for q in step for x in step[q].invars()}
    if any(v in read for i in extra for v in sites[i].eqn.outvars if v is not None):
        return None
    return made_here, [step[q] for q in range(n)] + [sites[i].eqn for i in extra], stop


def _as_body_reads(site, kinds, made):
    """`site`'s equation reading, where the body reads a value from before the run and this
    step a constant array of its type (autograd's backward pass over a loop's first step
    reads the initial state np.zeros(n) where later steps read the forward pass's values), a
    Var holding that constant (a reshape to its own shape, appended to `made`)."""
    leaves, before = list(site.leaves), len(made)
    for s, (kind, x) in enumerate(zip(kinds, leaves)):
        if (type(kind) is Var and type(x) is np.ndarray and not kind.aval.weak_type
                and x.shape == kind.aval.shape and x.dtype == kind.aval.dtype):
            eqn = _bind(np.reshape, (x, x.shape), {}, site.eqn.source)
            made.append(eqn)
            leaves[s] = eqn.outvars[0]
    if len(made) == before:
        return site.eqn
    return _with_leaves(site.eqn, leaves, site.n_args)


class _Level:
    """The rewriting of one level's runs, in order: `subst` maps a Var of a rolled repetition
    that later equations read to the scan's value for it. `operators`: the graph's (core.Graph.operators)."""

    def __init__(self, last_use, n, operators):
        self.last_use, self.n, self.operators = last_use, n, operators
        self.subst = {}
        self.sliced = {}  # Var of Y[i] made here -> (Y, i): a later loop may read Y itself
        self.rolled = 0
        self.steps = 0  # repetitions rolled

    def renamed(self, sites):
        out = []
        for site in sites:
            if self.subst and any(type(x) is Var and x in self.subst for x in site.leaves):
                site.leaves = [self.subst.get(x, x) if type(x) is Var else x for x in site.leaves]
                site.eqn = _with_leaves(site.eqn, site.leaves, site.n_args)
            out.append(site.eqn)
        return out

    def roll_run(self, sites, start, p, k, out):
        """Roll the consistent stretches of one run (k repetitions of period p from `start`),
        appending the resulting equations to `out`."""
        produced = {}  # Var -> (repetition, its kind where read in it, where read in the next)
        # (q, o) -> (("l", q, o), ("c", q, o)), one pair per run (descriptions share them), for
        # the results of a repetition in order (the repetitions' tokens are equal: so are their
        # numbers of results); a None result maps None, which no leaf is
        pairs = [(("l", q, o), ("c", q, o)) for q in range(p) for o in range(len(sites[q].eqn.outvars))]
        for r in range(k):
            outs = [v for site in sites[r * p:(r + 1) * p] for v in site.eqn.outvars]
            produced.update(zip(outs, [(r,) + pair for pair in pairs]))
        produced.pop(None, None)
        descs = {}

        def desc(r, first=False):
            key = (r, first)
            if key not in descs:
                out_ = []
                append, source = out_.append, produced.get
                for site in sites[r * p:(r + 1) * p]:
                    for x in site.leaves:
                        t = type(x)
                        if t is not Var:
                            append(("k", t) if t in _PY_DTYPES else ("k", t, x.dtype, np.shape(x)))
                            continue
                        src = source(x)
                        if src is None:
                            append("e")
                        elif src[0] == r:
                            append(src[1])
                        elif first:  # from before the stretch rolled: an outside value
                            append("e")
                        elif src[0] == r - 1:
                            append(src[2])
                        else:
                            append("far")
                descs[key] = tuple(out_)
            return descs[key]

        a, emitted = 0, 0
        while k - a >= MIN_REPS:
            ref = desc(a + 1)
            if "far" in ref:
                a += 1
                continue
            b = a + 2
            while b < k and desc(b) == ref:
                b += 1
            if (b - a) < MIN_REPS or (b - a) * p < MIN_EQNS:
                a += 1
                continue
            made = _Loop(self, sites, start, p, a, b, ref, desc(a, first=True)).build()
            if made is None:
                a += 1
                continue
            out.extend(self.renamed(sites[emitted * p:a * p]))
            out.extend(made)
            self.rolled += 1
            self.steps += b - a
            emitted = a = b
        out.extend(self.renamed(sites[emitted * p:]))


def _with_leaves(eqn, leaves, n_args):
    args = _rebuild(eqn.args, iter(leaves[:n_args]), True)
    kwargs = _rebuild(eqn.kwargs, iter(leaves[n_args:]), False)
    return Eqn(eqn.prim, args, kwargs, eqn.outvars, eqn.out_tree, eqn.source)


def _new_var(aval):
    return Var(aval, next(_counter))


def _same(x, y):
    if x is y:
        return True
    t = type(x)
    if t is not type(y) or t is Var:
        return False
    if t is float:
        return x.hex() == y.hex()
    if t is complex:
        return x.real.hex() == y.real.hex() and x.imag.hex() == y.imag.hex()
    if t is int:
        return x == y
    return x.dtype == y.dtype and np.shape(x) == np.shape(y) and np.asarray(x).tobytes() == np.asarray(y).tobytes()


def _starts(init, aval):
    """Whether the carry of type `aval` may start from `init`: a Var of that type, an array
    constant of its shape and dtype, or a Python number it holds exactly (0.0 as a sum's start:
    the first step then computes in the carry's dtype what it computed with a weak scalar, on
    the same number)."""
    if type(init) is Var:
        return init.aval == aval
    if aval.weak_type:
        return False
    if type(init) in _PY_DTYPES:
        if aval.shape or aval.dtype.kind not in "iufc":
            return False
        with np.errstate(all="ignore"):
            held = np.asarray(init, aval.dtype)
        return held == init if init == init else bool(np.isnan(held))
    return np.shape(init) == aval.shape and init.dtype == aval.dtype


def _const_key(x):
    t = type(x)
    if t is float:
        return t, x.hex()
    if t is int or t is complex:
        return t, x
    return t, np.shape(x), x.dtype.str, np.asarray(x).tobytes()


def _const_input(values):
    """(per-step constants stacked, the body's aval for one): Python numbers stay weakly typed."""
    x = values[0]
    if type(x) in (int, float, complex):
        dtype = {int: np.int64, float: np.float64, complex: np.complex128}[type(x)]
        return np.asarray(values, dtype), Aval((), dtype, weak_type=True)
    stacked = np.stack([np.asarray(v) for v in values])
    return stacked, Aval(stacked.shape[1:], stacked.dtype)


def _bind(prim, args, kwargs, source):
    """One equation of `prim` on these operands (Vars and constants), its types from its rule."""
    entry = registry.lookup(prim)
    avals, out_tree, through = tracing.abstract_eval(entry.lowering, args, kwargs)
    if any(t is not None for t in through):
        raise ValueError("passes an operand through")
    outvars = [_new_var(a) for a in avals]
    return Eqn(prim, args, kwargs, outvars, out_tree, source)


class _Loop:
    """Repetitions [a, b) of a run as one scan equation (and the equations around it that
    stack its per-step inputs and read its stacked outputs)."""

    def __init__(self, level, sites, start, p, a, b, ref, first):
        self.level, self.sites, self.start, self.p, self.a, self.b = level, sites, start, p, a, b
        self.ref, self.first = ref, first

    def _operators(self, inner):
        """The body's core.Graph.operators (its Vars `inner` by (position, result)): those that are
        operators' results in every repetition; None where repetitions differ, or the graph's are unknown."""
        known, sites, p = self.level.operators, self.sites, self.p
        marks = None if known is None else {v: {sites[r * p + q].eqn.outvars[o] in known for r in range(self.a, self.b)}
                                            for (q, o), v in inner.items()}
        if marks is None or any(len(m) > 1 for m in marks.values()):
            return None
        return {v for v, m in marks.items() if True in m}

    def build(self):
        level, p, a, b, ref = self.level, self.p, self.a, self.b, self.ref
        n = b - a
        subst = level.subst  # (values of a stretch of this run rolled before)
        if subst:
            flat = {r: [subst.get(x, x) if type(x) is Var else x for site in self.sites[r * p:(r + 1) * p]
                        for x in site.leaves] for r in range(a, b)}
        else:
            flat = {r: [x for site in self.sites[r * p:(r + 1) * p] for x in site.leaves] for r in range(a, b)}
        # compatibility of the first repetition: locals where the others have locals; carries
        # all started from one value each
        inits = {}
        for slot, (kind, k0) in enumerate(zip(ref, self.first)):
            if type(kind) is tuple and kind[0] == "l":
                if k0 != kind:
                    return None
            elif kind[0] == "c":  # a carry: what the first step reads there is its initial value
                if k0 != "e" and k0[0] != "k":
                    return None
                v = flat[a][slot]
                if not _same(inits.setdefault(kind[1:], v), v):
                    return None
            elif kind != k0:
                return None
        end = self.start + b * p  # the level's first equation after the loop
        rep_vars = {}  # (q, o) -> Vars per repetition (the repetitions' tokens are equal: so are their Nones)
        for q in range(p):
            column = [site.eqn.outvars for site in self.sites[a * p + q:b * p:p]]
            for o, v in enumerate(column[0]):
                if v is not None:
                    rep_vars[q, o] = list(map(operator.itemgetter(o), column))
        used = level.last_use.get

        def outside(v):
            return used(v, -1) >= end

        carries = list(inits)  # (q, o) in order of first use
        for qo in carries:
            if not _starts(inits[qo], rep_vars[qo][0].aval):
                return None
        ys, lasts = [], []
        for qo, vs in rep_vars.items():
            if max(map(used, vs[:-1], itertools.repeat(-1)), default=-1) >= end:  # (read after the loop: stacked)
                ys.append(qo)
            elif qo not in inits and outside(vs[-1]):
                lasts.append(qo)
        # per-step and invariant operands
        captured, per_step, const_steps = {}, {}, {}  # outer Var -> inner; sequence -> slots
        slot_input = {}
        columns = list(zip(*flat.values()))  # slot -> its leaves, a repetition each
        for slot, kind in enumerate(ref):
            if kind == "e":
                seq = columns[slot]
                if all(v is seq[0] for v in seq):
                    if seq[0] not in captured:
                        captured[seq[0]] = _new_var(seq[0].aval)
                    slot_input[slot] = ("captured", seq[0])
                else:
                    per_step.setdefault(seq, []).append(slot)
                    slot_input[slot] = ("x", seq)
            elif kind[0] == "k":
                seq = columns[slot]
                if not all(_same(x, seq[0]) for x in seq[1:]):
                    key = tuple(map(_const_key, seq))
                    const_steps.setdefault(key, (seq, []))[1].append(slot)
                    slot_input[slot] = ("k", key)
        # direction: a loop reading a scan's stacked outputs backwards runs backwards
        ahead = 0
        for seq in per_step:
            for v, w in zip(seq, seq[1:]):
                h, g = level.sliced.get(v), level.sliced.get(w)
                if h is not None and g is not None and h[0] is g[0]:
                    ahead += (g[1] - h[1] == 1) - (g[1] - h[1] == -1)
        reverse = ahead < 0

        def pos(m):
            return n - 1 - m if reverse else m

        source = self.sites[a * p].eqn.source
        before = []
        xs_outer, xs_inner, x_of = [], [], {}
        for seq, slots in per_step.items():
            aval = seq[0].aval
            if any(v.aval != aval for v in seq):
                return None
            ordered = [None] * n
            for m, v in enumerate(seq):
                ordered[pos(m)] = v
            operand = _stacked(ordered, level.sliced, source, before)
            if operand.aval.dtype != aval.dtype or operand.aval.shape != (n,) + aval.shape:
                return None
            x_of[seq] = _new_var(aval)
            xs_outer.append(operand)
            xs_inner.append(x_of[seq])
        for key, (seq, slots) in const_steps.items():
            ordered = [None] * n
            for m, x in enumerate(seq):
                ordered[pos(m)] = x
            try:
                stacked, aval = _const_input(ordered)
            except (ValueError, TypeError, OverflowError):
                return None
            x_of[key] = _new_var(aval)
            xs_outer.append(stacked)
            xs_inner.append(x_of[key])
        # the body: repetition a's equations on the loop's inputs
        inner = {qo: _new_var(vs[0].aval) for qo, vs in rep_vars.items()}
        carry_in = {qo: _new_var(rep_vars[qo][0].aval) for qo in carries + lasts}
        body = []
        slot = 0
        operators = self._operators(inner)
        for q in range(p):
            site = self.sites[a * p + q]
            leaves, varied = [], False
            for x in site.leaves:
                kind = ref[slot]
                if kind[0] == "l" or kind[0] == "c":
                    leaves.append(inner[kind[1:]] if kind[0] == "l" else carry_in[kind[1:]])
                elif kind == "e":
                    how, what = slot_input[slot]
                    leaves.append(captured[what] if how == "captured" else x_of[what])
                elif slot in slot_input:
                    leaves.append(x_of[slot_input[slot][1]])
                    varied = True
                else:
                    leaves.append(x)
                slot += 1
            eqn = site.eqn
            outvars = [None if v is None else inner[(q, o)] for o, v in enumerate(eqn.outvars)]
            new = _with_leaves(eqn, leaves, site.n_args)
            new = Eqn(new.prim, new.args, new.kwargs, outvars, eqn.out_tree, eqn.source)
            if varied and not _same_types(new, eqn):
                return None
            body.append(new)
        carry_order = carries + lasts
        y_inner = [inner[qo] for qo in ys]
        index = _new_var(_INDEX)
        graph = Graph([index] + [carry_in[qo] for qo in carry_order] + xs_inner, body,
                      [inner[qo] for qo in carry_order] + y_inner,
                      captured=[(v_in, v_out) for v_out, v_in in captured.items()], operators=operators)
        carry_avals = [carry_in[qo].aval.strong() for qo in carry_order]
        xs_avals = [Aval(np.shape(x) if not isinstance(x, Var) else x.aval.shape,
                         x.aval.dtype if isinstance(x, Var) else x.dtype) for x in xs_outer]
        y_avals = [inner[qo].aval.strong() for qo in ys]
        where = f"{source.filename.rsplit('/', 1)[-1]}:{source.lineno}" if source is not None else "?"
        params = Params(f"scan(length={n}{', reverse' if reverse else ''}, rolled from {where}, body: {p} eqns)",
                        [graph], n_carry=len(carry_order), n_xs=len(xs_outer), length=n, reverse=reverse,
                        index_aval=_INDEX, carry_avals=carry_avals, xs_avals=xs_avals, y_avals=y_avals,
                        rolled=True)
        inits_outer = [inits[qo] for qo in carries] + [np.zeros(rep_vars[qo][0].aval.shape, rep_vars[qo][0].aval.dtype)
                                                       for qo in lasts]
        finals = [_new_var(rep_vars[qo][-1].aval) for qo in carry_order]
        stacked = [_new_var(Aval((n,) + a_.shape, a_.dtype)) for a_ in y_avals]
        operands = (params, *inits_outer, *xs_outer, *captured)
        outvars = finals + stacked
        scan = Eqn(scan_p, operands, {}, outvars, tree.flatten(tuple(range(len(outvars))))[1], source)
        after = []
        subst = {}
        for qo, v in zip(carry_order, finals):
            subst[rep_vars[qo][-1]] = v
        for qo, Y in zip(ys, stacked):
            for m, v in enumerate(rep_vars[qo]):
                if v in subst or not outside(v):
                    continue
                got = _new_var(v.aval)  # (a weak type kept: getitem's rule gives Y's element type)
                eqn = Eqn(operator.getitem, (Y, pos(m)), {}, [got], tree.LEAF, source)
                level.sliced[got] = (Y, pos(m))
                subst[v] = got
                after.append(eqn)
        level.subst.update(subst)
        return before + [scan] + after


def _stacked(values, sliced, source, before):
    """One array of `values` (Vars) stacked along a new first axis, appending the equations
    that make it to `before`: stretches of them that are consecutive elements of one scan's
    stacked output (`sliced`: Var -> (that output, index)) are read from it by one slice."""
    pieces, i, n = [], 0, len(values)

    def starts_run(j):
        h, g = sliced.get(values[j]), sliced.get(values[j + 1]) if j + 1 < n else None
        return h is not None and g is not None and g[0] is h[0] and g[1] - h[1] in (1, -1)

    while i < n:
        h = sliced.get(values[i])
        j, step = i + 1, None
        while h is not None and j < n:
            g, f = sliced.get(values[j]), sliced[values[j - 1]]
            if g is None or g[0] is not h[0] or g[1] - f[1] not in (1, -1) or step not in (None, g[1] - f[1]):
                break
            step, j = g[1] - f[1], j + 1
        if j - i > 1:
            first, last = h[1], sliced[values[j - 1]][1]
            whole = step == 1 and first == 0 and last == h[0].aval.shape[0] - 1
            index = (slice(first, last + 1) if step == 1 else slice(first, last - 1 if last else None, -1))
            pieces.append(h[0] if whole else _emit(operator.getitem, (h[0], index), source, before))
            i = j
            continue
        while j < n and not starts_run(j):
            j += 1  # a stretch of values not read from a stacked output: one stack
        pieces.append(_emit(np.stack, (list(values[i:j]),), source, before))
        i = j
    return pieces[0] if len(pieces) == 1 else _emit(np.concatenate, (pieces,), source, before)


def _emit(prim, args, source, before):
    eqn = _bind(prim, args, {}, source)
    before.append(eqn)
    return eqn.outvars[0]


def _same_types(new, old):
    """Whether `new` (an equation with per-step inputs where `old` had constants) gives `old`'s
    result types by its rule (a rule may need the constant: then the run is not rolled)."""
    entry = registry.lookup(new.prim)
    if entry is None or entry.lowering is None:
        return False
    try:
        if entry.shape is None:
            avals, out_tree, through = tracing.abstract_eval(entry.lowering, new.args, new.kwargs)
        else:
            avals, out_tree = tree.flatten(tuple(entry.shape(*new.args, **new.kwargs)))
            through = [None] * len(avals)
    except Exception:
        return False
    if out_tree != old.out_tree or len(avals) != len(old.outvars):
        return False
    for a, t, v in zip(avals, through, old.outvars):
        if (v is None) != (t is not None) or (v is not None and a != v.aval):
            return False
    return True
