"""Tiered execution: a new signature runs as plain autograd until its calls have cost a
compile, and while XLA compiles it.

With a cold cache a short job loses to plain autograd: compiling the gradient of the
benchmarks' 784-200-100-10 MLP takes ~0.2-0.4 s, as long as ~25-50 of its plain-autograd
calls. Tiered (the default; `jit_ps(f, tiered=True)`, `set_default_tiered(True)`, or
$AUTOGRAD_XLA_TIERED=1 also compile on the compile thread where no core is free,
`spare_core`) a new signature first runs as plain autograd, untraced, until its calls have
cost what making its program is expected to (`plain_budget`: the rent-or-buy rule, so a job
never costs much more than a few times the better of the two, and a job shorter than that
costs what plain autograd does: with two cores, a compile running beside the plain calls
slowed them 2-3x). It is traced in the calling thread (milliseconds; tracing runs the
user's Python) sooner, once its calls have cost a few times what its trace is expected to
(`trace_budget`), and held until they have cost the plain budget, its calls meanwhile
running the trace by numpy where it qualifies (numpy_tier: 2.3-5.3x faster a call than
plain autograd on small arrays and legacy loops); where those calls show that Python's
overhead rules its plain ones (OVERHEAD_BOUND), its budget is what its program's size says
it costs, if less than what its calls' time says. Then it is judged again, by its
program's size (`worth_compiling`, the second stage): where the compile is not expected to
pay back within half as many calls again as it has run, its calls run on by numpy or
plainly, the trace kept, until they have cost twice as much (then it is judged again).
Else it is lowered in the calling thread, XLA's compile goes to the one background thread
here (by default only where a core is free; else it compiles in the call), and calls of
that signature run by numpy or plainly until the executable is ready. Plain autograd is the
reference the compiled program is checked against, so both tiers give its numbers; XLA's
compile releases the GIL (measured: 18 plain MLP gradient calls ran in the caller during
one 0.42 s compile), so the caller is slowed only by sharing the cores.

A compiled signature climbs too (`Ladder`): its first program is the one XLA compiles
fastest, and programs that may run faster are made on the compile thread once its calls
have cost a few times that compile, each tried against the one in use and kept only if faster.
Meanwhile jaxlib's C++ call path may take its calls (`Ladder.hand`).

This module holds the process default, the plain budget and the ladder (background.py the
compile thread); api.py decides what to hand them.
"""
import collections
import functools
import math
import os
import threading
import time

from .background import compile_thread

#: The environment variable giving the process default of jit_ps's `tiered` (1, true, yes, on).
TIERED_ENV = "AUTOGRAD_XLA_TIERED"
_ON = {"1", "true", "yes", "on"}
_default = None  # set_default_tiered's value; None follows TIERED_ENV


def set_default_tiered(enabled):
    """The process default of jit_ps's `tiered` (used by functions made with tiered=None, for
    the signatures they meet from now on): True, False, or None to follow $AUTOGRAD_XLA_TIERED
    (where unset: tiered, `default_tiered`)."""
    global _default
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_default_tiered takes True, False or None; got {enabled!r}")
    _default = enabled


#: Seconds of plain calls a new signature runs before it is traced and compiled: None for
#: RENT_FACTOR times what making its program is expected to cost (`plain_budget`; tests set 0
#: to compile at once).
PLAIN_SECONDS = None
#: What making a signature's program costs (its trace and lowering, in the calling thread, and
#: XLA's compile), in plain calls of that signature, before this process has made one: the
#: cost grows with the program's number of primitives and so, where Python's overhead and not
#: the arithmetic rules a plain call, does its time (a primitive costs autograd a few µs each
#: way). Measured, (trace + lowering + compile) / one plain call: lifelines 0.30.3's
#: value_and_grad 160-1000 (Weibull 160, LogNormal 860, GeneralizedGamma 990; its fits make
#: 57-689 calls), their Hessians 16-370, the benchmarks' MLP gradient 40-100 (0.2-0.4 s to
#: compile, 4-5.5 ms plain calls of large matrix products). Short jobs are the ones to guard (a job past the budget loses at
#: most RENT_FACTOR times its program's cost), so the prior is a high one; each program a
#: tiered signature makes then moves it towards what this process's programs cost.
COST_IN_CALLS = 200.0
#: ... but where a plain call's time is its arithmetic, not Python's overhead, calls say
#: little of the program's size: a signature not learned is expected to cost at most this
#: many seconds. Programs measured: lifelines' value_and_grad and Hessians 0.05-4 s,
#: PennyLane's tutorial gradients 0.5-4 s (first step of 30, compiled at the first call:
#: variational classifier 4.0 s, 94-130 ms plain calls; re-uploading classifier 2.9 s). With
#: 1 s, those two ran 2 s plainly, then compiled, and their 30 steps took 6.0 and 3.3 s
#: against plain autograd's 3.5 and 2.5 (2 loaded cores); pymanopt's PSD fixed-rank problem
#: (plain 7.6-10 s, 7.7x faster compiled at the first call) took 1.0-1.5x less than plain.
COST_CAP_SECONDS = 2.0
#: ... and at least this many: the least a program costs to make here (tiny_grad's compiles
#: 25-45 ms; lifelines' ExponentialFitter's value_and_grad 14 ms tracing, 16 lowering, 84
#: compiling). pymanopt's sphere example (202 iterations, its solve 47 ms plain) without it:
#: its cost function's tiny calls crossed 400 and it was traced and compiled, the solve 124 ms.
COST_FLOOR_SECONDS = 0.05
#: Rent or buy: a compiled call is not free, so a compile pays back not a plain call's time
#: but what it saves, p - c a call, and breaks even after C / (p - c) calls, which cost
#: C * p / (p - c) of plain time: this factor is p / (p - c) for compiled calls twice as
#: fast as plain ones, the middle of the benchmarks' range (the MLP gradient 4-5.5 ms a call
#: plain, with glibc's thresholds raised, memory.MALLOC_RAISING_BYTES, and 4.2-4.5 compiled;
#: tiny_grad 55-63 µs against 6).
RENT_FACTOR = 2.0
#: Where a signature's saving is known (`note_saving`: what its compiled calls cost against
#: its plain ones, learned by a function of the same shape before it, as a library's fresh
#: closures are: signatures.function_shape) the factor is p / (p - c) itself, up to this:
#: then the plain calls lose at most one compile's time to compiled ones. tiered.py, 300 MLP
#: gradient calls (c / p ~0.9 once the first job had learned it): 1.00x plain autograd, all
#: calls plain, against 1.15x with the factor 2.
MAX_RENT_FACTOR = 8.0
#: A tiered signature's saving is noted once its first program has run this many calls.
LEARN_CALLS = 10
#: The most a saving noted outside a plain trial's verdict may be (note_saving): below 1, and
#: at MAX_RENT_FACTOR's bound of plain_budget's factor already.
NOT_PLAIN = 1.0 - 0.5 / MAX_RENT_FACTOR
#: The second stage (`worth_compiling`): a traced program of n primitive calls (core.Graph.size:
#: a loop's body counted once) is expected to cost COST_PER_EQN * n ** COST_EXPONENT seconds
#: to trace, lower and compile before this process has made one, then what the programs made
#: here say (their geometric mean). Fitted to 14 first programs (trace + lowering + compile,
#: 2 loaded cores): lifelines 0.30.3's value_and_grad, 51-356 calls, 0.07-1.8 s (SplineFitter
#: 311: 1.2 s, GeneralizedGamma 356: 1.8 s), the benchmarks' MLP gradient 69: 0.2-0.34 s, a
#: rolled loop's gradient 41: 0.18-0.26 s and Hessian 2411: 1.1-1.2 s, small gradients and
#: Hessians 18 and 104: 0.04 and 0.1-0.16 s; within 2-3x of each (a power 1.5 of the size was
#: 20x off for the loop's Hessian).
COST_PER_EQN = 7e-3
COST_EXPONENT = 0.75
#: A compiled call is expected to take COMPILED_RATIO of a plain one, and CALL_OVERHEAD seconds
#: at least (jit_ps's Python path, the arguments' signature, XLA's dispatch). Measured,
#: compiled / plain: lifelines' value_and_grad 0.02-0.24 (ExponentialFitter's 0.9: 240 µs
#: against 270, its calls taking the Python path at 80-420 µs), its Hessians 0.01-0.2, the
#: MLP gradient 0.14-0.2, loops 0.01-0.02.
COMPILED_RATIO = 0.25
CALL_OVERHEAD = 150e-6
#: The future a decision counts on, as a fraction of the calls run so far: a half, so that
#: a short job whose program pays back only just does not compile (SplineFitter's gradient,
#: 689 calls of 3 ms, decided at ~400: its 1.2 s compile would save 2.8 ms a call, 0.8 s in
#: the ~290 left) and a long one compiles at most one HOLD_GROWTH later.
HORIZON = 0.5
#: The least saving assumed, as a fraction of the plain call: a held signature is decided
#: again, and so compiled at last, however wrong the estimate.
MIN_SAVING = 0.1
#: A held signature is decided again once its plain calls have cost this many times what
#: they had at the decision.
HOLD_GROWTH = 2.0
#: A held signature whose calls by numpy (numpy_tier) take at most this fraction of its plain
#: calls' time is ruled by Python's overhead, which its compiled calls shed too: its plain
#: budget is then RENT_FACTOR times program_cost of its size where that is less than what its
#: calls' time says (an LSTM's rolled gradient: 119 primitives, made in 0.6 s; 98 ms calls,
#: which say 2 s). Numpy over plain: loops 0.19-0.37, lifelines 0.24-0.44; the demo's
#: classifier 0.86 (matrix products; compiled, 13.5 ms calls against 14.2: compiled early,
#: its job took 0.84x plain's time).
OVERHEAD_BOUND = 0.5
#: The first stage's trace: a new signature is traced, its compile then judged (`hold`), once
#: its plain calls have cost TRACE_FACTOR times what its trace is expected to, if that is
#: before plain_budget (the trace is kept: a held signature's calls run it by numpy,
#: numpy_tier, 2.3-5.3x faster a call than plain autograd). A job ending just
#: after its trace loses at most 1 / TRACE_FACTOR of its time to it.
TRACE_FACTOR = 3.0
#: A trace's seconds, TRACE_IN_CALLS plain calls of its signature and a part of their own (a
#: trace runs the function's Python once, forward and backward, as a plain call does). First
#: traces measured: loops' gradients 2.0-3.5 calls past 0.03 s (an LSTM's over 100 steps 0.24 s,
#: 98 ms calls); PennyLane's variational classifier's 3 (0.27 s, 90 ms calls, 6,313 primitives
#: on its tensors). Whole jobs against plain: PennyLane's 30-step optimisations 0.89-1.37x with
#: 3, 0.98-1.05x with 10; an LSTM's and an Euler integrator's 100 steps (loop_jobs.py) 4.2-4.7x / 2.0-2.5x.
TRACE_IN_CALLS = 3.0
#: ... that part (what a trace costs besides its calls: the tracer's look-ups, loop rolling,
#: a process's first traces' imports), before this process has traced a tiered signature;
#: each such trace then moves it towards what it cost here (lifelines' LogNormalFitter's
#: value_and_grad: 0.1 s traced, three times as its arguments turned static, against 0.9 ms
#: calls; pymanopt's sphere gradient 23 ms against 0.2 ms).
TRACE_FLOOR_SECONDS = 0.03
#: ... in traces of its function, for a signature called on autograd's boxes (grad(jit_ps(f))):
#: its own, then at its first held call its VJP's, forward and backward (autodiff.HeldVJP).
#: Both took 1.3-1.8 times one trace's expected seconds in quimb's fits, 2.5-2.9 in PennyLane's
#: optimisations (docs/benchmarks.rst); counted as one, PennyLane's broadcast classifier's
#: 0.3 s job ran at 0.72-0.78x plain autograd's speed, pymanopt's Gaussian mixture at 0.85x.
#: Each such signature's two traces then move it (boxed_traces): quimb's MPS fit three times
#: in one process, 665, 560 and 428 ms against plain's 684-733 (the ratio learned 1.7, 1.25).
BOXED_TRACES = 2
_boxed = [0, 0.0]  # boxed signatures' traces noted (note_boxed), the sum of the logs of their ratios
_traced = [0, 0.0]  # tiered signatures traced, the sum of their traces' seconds beyond TRACE_IN_CALLS calls
LEARNED_KEPT = 1024  # signatures' savings and costs kept, the least recently noted forgotten first
_savings = collections.OrderedDict()  # (function shape, signature) -> a compiled call's seconds over a plain one's
_costs = collections.OrderedDict()  # (function shape, signature) -> seconds its program took to make
_learned_lock = threading.Lock()
_made = [0, 0.0]  # tiered programs made, the sum of their costs in plain calls
_sized = [0, 0.0]  # ... and the sum of log(seconds / eqns ** COST_EXPONENT) over them


def plain_budget(learned=None, call=None):
    """Seconds of plain-autograd calls a new signature of a tiered function runs before it is
    traced and compiled (PLAIN_SECONDS): RENT_FACTOR (or its learned saving's factor) times
    its program's cost, where a function of its shape made that program before (`learned`:
    its (function shape, signature)), else its plain call's seconds (`call`, their mean so
    far; None before the first: no budget spent yet) times the cost in calls this process's
    programs have had (COST_IN_CALLS before the first, counted as one of them), within
    COST_FLOOR_SECONDS and COST_CAP_SECONDS. Infinite where its learned saving is 1 or more:
    a plain trial (Ladder) found its compiled calls slower than its plain ones, so it runs
    plainly for good."""
    if PLAIN_SECONDS is not None:
        return PLAIN_SECONDS
    ratio, cost = _learned(learned)
    if ratio is not None and ratio >= 1.0:  # a plain trial kept plain autograd (note_saving)
        return math.inf
    factor = RENT_FACTOR if ratio is None else 1.0 / max(1.0 - ratio, 1.0 / MAX_RENT_FACTOR)
    if cost is None:
        if call is None:
            return math.inf
        n, total = _made
        cost = min(max(call * (COST_IN_CALLS + total) / (n + 1), COST_FLOOR_SECONDS), COST_CAP_SECONDS)
    return factor * cost


def trace_budget(call, traces=1):
    """Seconds of plain calls (`call`: their mean) a new signature runs before its first-stage
    trace: TRACE_FACTOR times its `traces`' expected seconds, each TRACE_IN_CALLS calls and
    what this process's traces took besides theirs (TRACE_FLOOR_SECONDS before its first,
    counted as one of them)."""
    return TRACE_FACTOR * traces * _one_trace(call)


def _one_trace(call):
    n, total = _traced
    return (TRACE_FLOOR_SECONDS + total) / (n + 1) + TRACE_IN_CALLS * call


def boxed_traces():
    """BOXED_TRACES moved towards what this process's boxed signatures' two traces cost
    (note_boxed): the geometric mean of their ratios and the prior, counted as one of them."""
    n, logs = _boxed
    return math.exp((math.log(BOXED_TRACES) + logs) / (n + 1))


def note_boxed(untraced, seconds):
    """Note, for boxed_traces, that the VJP of held signature `untraced` (called on autograd's
    boxes) traced in `seconds`, after its own trace (`untraced.traced`)."""
    if untraced.traced and untraced.calls:
        one = _one_trace(untraced.spent / untraced.calls)
        with _learned_lock:
            _boxed[0] += 1
            _boxed[1] += math.log((untraced.traced + seconds) / one)


def note_trace(seconds, plain):
    """Note, for trace_budget, that a tiered signature's trace took `seconds` where its plain
    calls took `plain` (their mean) each."""
    with _learned_lock:
        _traced[0] += 1
        _traced[1] += max(seconds - TRACE_IN_CALLS * plain, 0.0)


def _learned(learned):
    """(saving, cost) noted for `learned` (a (function shape, signature)), None where not."""
    try:
        return _savings.get(learned), _costs.get(learned)
    except TypeError:  # an unhashable shape: nothing learned
        return None, None


def _remember(table, learned, value):
    with _learned_lock:
        try:
            table[learned] = value
            table.move_to_end(learned)
        except TypeError:  # an unhashable shape: nothing learned
            return
        while len(table) > LEARNED_KEPT:
            table.popitem(last=False)


def note_saving(learned, plain, compiled, plain_kept=False):
    """Note, for plain_budget(learned), that a signature's compiled calls took `compiled`
    seconds where its plain calls took `plain` (means over calls), and return compiled / plain.
    What is noted is 1 or more only where a plain trial kept plain autograd (`plain_kept`),
    which sends the signature of the functions of its shape made afresh to plain for good;
    below 1 else (NOT_PLAIN at most): calls not paired in a trial (the first program's first
    calls against the plain calls before it) or a trial that kept the compiled program."""
    ratio = compiled / plain
    _remember(_savings, learned, max(ratio, 1.0) if plain_kept else min(ratio, NOT_PLAIN))
    return ratio


def learned(key, plain, plain_least, compiled, compiled_least):
    """A Ladder's first compiled calls, their mean `compiled` and quickest `compiled_least`
    seconds, against the plain calls before (`plain`, `plain_least`): the means' ratio noted
    (note_saving), and the quickest calls' returned (what Ladder.consider_plain weighs: a
    burst of other work moves a mean, `x + 1.0` on 10^6 float32 under load 10 on 2 cores:
    plain calls of median 92 µs and mean 333 against compiled ones of mean 157)."""
    note_saving(key, plain, compiled)
    return compiled_least / plain_least


def note_cost(learned, seconds, plain, eqns=None):
    """Note, for plain_budget, that making the program of signature `learned` (of `eqns`
    primitive calls) took `seconds` (trace, lowering and compile), where its plain calls took
    `plain` (their mean) each."""
    _remember(_costs, learned, seconds)
    with _learned_lock:
        _made[0] += 1
        _made[1] += seconds / plain
        if eqns:
            _sized[0] += 1
            _sized[1] += math.log(seconds / eqns ** COST_EXPONENT)


def program_cost(eqns):
    """Seconds a traced program of `eqns` primitive calls is expected to take to make (trace,
    lowering and compile, as note_cost is told): COST_PER_EQN's prior, counted as one program, and
    the programs this process made, by the geometric mean of their seconds / eqns**COST_EXPONENT."""
    n, logs = _sized
    return math.exp((math.log(COST_PER_EQN) + logs) / (n + 1)) * eqns ** COST_EXPONENT


def worth_compiling(learned, eqns, untraced, vjps=()):
    """The second stage of rent or buy, once a signature's plain budget is spent and it is
    traced: whether its program (its cost learned, else program_cost(eqns)), and those of the
    VJPs its calls on autograd's boxes run (`vjps`: their sizes; compiling it compiles them
    at their next call, autodiff.HeldVJP), pay back within HORIZON times as many calls as it
    has run plainly (`untraced`), each saving its plain call's time less the compiled call's
    (the saving learned, else COMPILED_RATIO and CALL_OVERHEAD; MIN_SAVING at least).
    pymanopt's Gaussian mixture under grad(jit_ps(cost)) (its forward's program of 17
    primitive calls, expected 59 ms, made in ~0.28 s; its value and VJP's of 58, ~0.2 s),
    weighed at its 400th call of ~600 by its forward's alone: compiled, or held where the
    first stage's trace came before its plain budget was spent, its solve 0.85x or 0.96x
    plain's speed from run to run; with its VJP's, held: 0.96-0.98x (over 1,500 steps 1.1x,
    compiled later, against 1.4x)."""
    plain = untraced.spent / untraced.calls
    ratio, cost = _learned(learned)
    if cost is None:
        cost = program_cost(eqns)
    cost += sum(map(program_cost, vjps))
    compiled = max(COMPILED_RATIO * plain, CALL_OVERHEAD) if ratio is None else ratio * plain
    return cost <= HORIZON * untraced.calls * max(plain - compiled, MIN_SAVING * plain)


class Untraced:
    """A new signature of a tiered function, run as plain autograd without being traced until
    its calls have taken plain_budget() seconds (`spent`, over `calls`), or `held` seconds
    where its trace said its compile would not pay back yet (`worth_compiling`). It stands in
    for a cache entry that is not compiled yet (`stage`)."""

    __slots__ = ("spent", "calls", "least", "held", "due", "replay", "budget", "eqns", "by_numpy", "vjps", "traces",
                 "traced")
    stage, python_fallback, impure = 0, False, False

    def __init__(self):
        self.spent, self.calls, self.held, self.due = 0.0, 0, 0.0, 0.0
        self.eqns = 0  # its program's size, once traced (hold)
        self.by_numpy = [0.0, 0]  # seconds and count of its calls run by numpy
        self.budget = 0.0  # its plain budget when it was traced (NewSignatures.plain)
        self.least = math.inf  # its quickest call's seconds
        self.replay = None  # while held, its trace run by numpy (numpy_tier.Replay), where it has one
        self.vjps = None  # while held, its calls on autograd's boxes by numpy (autodiff.HeldVJP per boxed leaves)
        self.traces = 1  # what its first stage's traces cost, in traces of its function (boxed_traces)
        self.traced = 0.0  # its trace's seconds (hold), for note_boxed

    def for_good(self):
        """Whether it runs plainly for good (a plain trial kept plain autograd: plain_budget)."""
        return self.due == math.inf

    def run(self, call, leaves=None):
        """call(), its seconds counted; where the call's `leaves` are given and it is held with a
        replay, that runs them instead."""
        t0 = time.perf_counter()
        replay = self.replay
        ran = replay.ran if replay is not None else 0
        try:
            return call() if replay is None or leaves is None else replay(leaves, call)
        finally:
            seconds = time.perf_counter() - t0
            self.spent += seconds
            self.calls += 1
            if seconds < self.least:
                self.least = seconds
            if replay is not None and replay.ran > ran:
                self.by_numpy[0] += seconds
                self.by_numpy[1] += 1

    def overhead_bound(self):
        """Whether its calls by numpy take at most OVERHEAD_BOUND of its plain calls' time."""
        numpy_seconds, numpy_calls = self.by_numpy
        plain_calls = self.calls - numpy_calls
        return (numpy_calls > 0 and plain_calls > 0
                and numpy_seconds / numpy_calls <= OVERHEAD_BOUND * (self.spent - numpy_seconds) / plain_calls)


class NewSignatures:
    """The new signatures a tiered function (of `shape`, signatures.function_shape) runs
    plainly, `limit` at most (the oldest are forgotten first), and what their plain calls
    cost once they are compiled, for `learner`."""

    def __init__(self, limit, shape):
        self.limit, self.shape, self._untraced, self._paid = limit, shape, {}, {}

    def plain(self, key):
        """The Untraced to run this call of signature `key` with, or None once its calls have
        cost plain_budget (then it is compiled)."""
        untraced = self._untraced.get(key)
        if untraced is None:
            untraced = self._untraced.setdefault(key, Untraced())
            if len(self._untraced) > self.limit:
                self._untraced.pop(next(iter(self._untraced)), None)
        spent = untraced.spent
        if spent < untraced.due and PLAIN_SECONDS is None:  # (a fixed budget may be set at any time: tests do)
            return untraced
        mean = spent / untraced.calls if untraced.calls else None
        budget = plain_budget((self.shape, key), mean)
        if untraced.eqns and untraced.overhead_bound():  # held: what its program's size says, if less
            budget = min(budget, RENT_FACTOR * program_cost(untraced.eqns))
        else:
            budget = max(untraced.held, budget)
        traced_at = trace_budget(mean, untraced.traces) if mean is not None else math.inf
        early = not untraced.held and budget < math.inf and spent >= traced_at
        if spent < budget and not early:
            # asked again halfway there (the budget moves with the calls' mean): a tiny call's
            # plain tier cost 7 µs more than plain autograd with the budget computed at each;
            # never where it is infinite after a call (plain for good: plain_budget)
            due = budget if untraced.held or mean is None or budget == math.inf else min(budget, traced_at)
            untraced.due = ((spent + due) / 2 if 1e-3 < due - spent < math.inf
                            else math.inf if due == math.inf and untraced.calls else 0.0)
            return untraced
        untraced.budget = budget
        if self._untraced.pop(key, None) is not None and untraced.calls:
            self._paid[key] = untraced
            while len(self._paid) > self.limit:
                self._paid.pop(next(iter(self._paid)))
        return None

    def hold(self, key, traced, eqns, seconds=None, vjps=()):
        """After the trace of signature `key` (`traced`: its key from now on, which holds the
        values the trace made static), of `eqns` primitive calls (`vjps`: worth_compiling's),
        before its lowering and compile (`seconds`: the trace's, where it was just made;
        noted, note_trace): None to compile it now, else the Untraced to run its calls plainly
        with again, until they have cost HOLD_GROWTH times what they had, and plain_budget at
        least (its trace is kept: the next decision starts from it). Holds where
        `worth_compiling` says no, where it was traced early (trace_budget) and its plain
        budget is not spent yet, or where it is called on boxes and not held before."""
        untraced = self._paid.pop(key, None)
        if untraced is None:
            return None
        if seconds is not None and untraced.calls:
            note_trace(seconds, untraced.spent / untraced.calls)
            untraced.traced = seconds
        # (a signature called on boxes is held once, at its trace, so that its next decision
        # weighs its VJP's program too where its held calls trace one: worth_compiling's vjps)
        early = untraced.spent < untraced.budget or (untraced.traces > 1 and not vjps and not untraced.held)
        if PLAIN_SECONDS is not None or (not early and worth_compiling((self.shape, traced), eqns, untraced, vjps)):
            self._paid[traced] = untraced  # for learner
            return None
        untraced.held, untraced.eqns = HOLD_GROWTH * untraced.spent, eqns
        # (an early trace is judged again soon, once its calls by numpy say how they compare: OVERHEAD_BOUND)
        untraced.due = min(untraced.held, untraced.budget, (1 + 1 / TRACE_FACTOR) * untraced.spent) if early \
            else untraced.held
        self._untraced[traced] = untraced
        return untraced

    def __contains__(self, key):
        return key in self._untraced

    def pending(self):
        """How many of these signatures are still to be traced and compiled (not plain for good)."""
        return sum(not untraced.for_good() for untraced in list(self._untraced.values()))

    def decided(self, key, plain, compiled, plain_kept):
        """A plain trial of compiled signature `key` (Ladder) found its calls taking `compiled`
        seconds against `plain` (medians): noted (note_saving); where plain autograd was
        kept, the signature runs plainly from now on, for good."""
        note_saving((self.shape, key), plain, compiled, plain_kept)
        if plain_kept:
            untraced = Untraced()
            untraced.held = untraced.due = math.inf
            self._untraced[key] = untraced
            while len(self._untraced) > self.limit:
                self._untraced.pop(next(iter(self._untraced)), None)

    def learner(self, key, seconds, eqns):
        """For the Ladder of signature `key`, compiled after plain calls, its program (of
        `eqns` primitive calls) made in `seconds`: notes that cost (note_cost) and returns
        `learned` with the key and its plain calls, for its compiled calls' mean and quickest
        seconds (None if it ran no plain calls)."""
        untraced = self._paid.pop(key, None)
        if untraced is None:
            return None
        paid = untraced.spent / untraced.calls
        note_cost((self.shape, key), seconds, paid, eqns)
        return functools.partial(learned, (self.shape, key), paid, untraced.least)

    def clear(self):
        self._untraced.clear()
        self._paid.clear()


def default_tiered():
    """The process default of a function made with tiered=None: set_default_tiered's value,
    else $AUTOGRAD_XLA_TIERED's where set (1, true, yes, on; anything else: off), else None:
    tiered, its compile on the compile thread where a core is free (`spare_core`) and in the
    call otherwise. Read at each new signature (so it can change at run time)."""
    if _default is not None:
        return _default
    env = os.environ.get(TIERED_ENV, "").strip().lower()
    return (env in _ON) if env else None


def spare_core():
    """Whether a core is free for XLA's compile beside the calling thread's plain calls: the
    process may run on more than one (its CPU affinity, which taskset, cgroups' cpusets and
    container limits narrow) and the machine's load over the last minute leaves one idle.
    Where none is, a compile on the compile thread slows the plain calls more than it runs
    beside them: the demo's classifier (200 Adam steps, ~15-100 ms plain gradient calls of
    OpenBLAS's products on 2 threads; 2 cores, load 4), tiered, compiled on the compile
    thread in 0.70-0.80 s and its job took 8.3 and 10.4 s; compiled in the call, in 0.22 s,
    7.6 and 7.4 s (compiled at its first call: 6.7 and 8.3 s; plain autograd 20 and 24 s)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity here (macOS, Windows)
        cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]  # this process's running threads included
    except (AttributeError, OSError):
        load = 0.0
    return cores > 1 and load < min(cores, os.cpu_count() or cores) - 0.5


#: A compiled signature's next program (Ladder) is made once its calls have taken UPGRADE_RENT
#: times as long as its first program took to compile: rent before buying again. The next
#: program is not free: on 2 cores its compile slowed the calls beside it, and what it gains
#: is unknown until tried (0.8 of the time to 1.5x). Measured with cold jobs of the MLP
#: gradient (benchmarks' 784-200-100-10; first compile ~0.2 s, calls 4-5 ms), against one
#: program only: at 1.0, 100 calls took 786 ms against 631 and 300 calls 1652 against 1590; at
#: 4.0, 100 calls made no second program, 300 took 1588 against 1502 and 1000 took 3649
#: against 4450. None: never (one program per signature).
UPGRADE_RENT = 4.0
#: ... but a quickly compiled first program (backend.QUICK_COMPILE_OVERRIDES), whose calls
#: take 1.1-5x as long as its optimised program's, makes that one (its first step) after
#: QUICK_RENT of that rent: the HMM's gradient compiled quickly (0.1 s, 0.32 s optimised;
#: calls 1.7 ms against 0.33) would else run ~400 calls at 1.4 ms more each before its
#: optimised program is in use, losing more than its compile saved.
QUICK_RENT = 0.25
#: A signature whose program runs in under CHEAP_CALL_SECONDS a call makes its next one after
#: CHEAP_CALLS calls instead: until its ladder settles its calls take the Python path, which
#: costs more than such a program can gain or lose (tiny_grad: 16.5 µs a call there, 6.6
#: through C++ once settled, its two programs 7.2 and 10.2 µs), and its compiles are short
#: (25-45 ms, on the compile thread). 20,000 calls of tiny_grad from a fresh function, XLA's
#: compiles included: 0.17 s, against 0.24 with the rent (jax.jit: 0.18-0.20).
CHEAP_CALLS = 100
CHEAP_CALL_SECONDS = 50e-6
#: Timed calls each of the two programs of a trial runs, in turns; the new program stays if
#: the calls it paired with the other's (the i-th timed call of each, neighbours in time) took
#: less by their differences' interquartile mean (`faster`). Pairs, not each program's own
#: statistic: a burst of other work slows the calls of both programs that run during it (a
#: burst slowed the first 4 of 6 calls of the MLP step's program in use, 12-21 ms against
#: 3.7, and its median lost to a program 1.4x slower), while what one program's own calls
#: cost, its stalls included, shows in each pair (the fastest call ignored them: a BLAS
#: matrix-vector product of logistic regression's gradient whose calls took 20-33 ms under
#: load, OpenBLAS's two threads waiting for each other, was kept for three calls of 0.31 ms
#: against XLA's product's 0.37-0.41, and then ran at 24 ms a call). The interquartile mean
#: drops the quarter of pairs at each end, those a burst beginning or ending between a
#: pair's calls puts there. 0: the new program replaces the one in use untried (tests use it).
TRIAL_CALLS = 8
#: ... and where the programs alternate call by call, more pairs, until each program's timed
#: calls have taken TRIAL_SECONDS or it has run TRIAL_MAX_CALLS of them: eight pairs cannot
#: tell programs a few percent apart on busy cores. The float32 MLP step's ladder (calls of
#: ~2.2 ms, load average 4 on 2 cores) dropped XLA's default options for the legacy emitters'
#: in 1 of 3 fresh functions (medians 2443 against 3578 µs), and with 40 pairs kept XLA's own
#: scheduler (backend.XLA_SCHEDULER) in 2 of 4, which runs 0.92-0.96 of the memory-optimised
#: one's time in blocks of calls: the program settled on ran up to 1.15x the best's. With
#: these and TURN_WARM_CALLS, 4 of 4 fresh functions kept both (trials of ~0.6 s, ~125 pairs).
#: A cheaper program's trial is cut at TRIAL_MAX_CALLS pairs: its calls take the Python path
#: meanwhile (Ladder.hand), twice as many with the untimed ones, ~10 µs a call more than
#: C++'s (tiny_grad), which costs more than such a program can gain.
TRIAL_SECONDS = 0.25
TRIAL_MAX_CALLS = 128
#: Timed calls of a turn where one program calls BLAS and the other leaves its products to
#: XLA (lowering.Lowered.blas): there a turn's calls are timed once it has lasted
#: TURN_SETTLE_SECONDS: beside a program of BLAS's products, whose OpenBLAS threads spin on
#: after their work, the SeLU layer's program of XLA's products took 6.2 ms a call where alone
#: it takes 4.2, so that with turns of 3 calls the BLAS program (6.2-6.7 ms) was kept in 7 of
#: 8 trials (and the MLP step's new program's first runs took 15-40 ms against 4). Two
#: programs that both call BLAS are slowed alike: waiting made the demo classifier's trial of
#: XLA's options (12-15 ms calls) last 1.07 s of a 200-step job, 0.2 s without. Otherwise the
#: programs alternate call by call, every call timed, so that a pair's calls are neighbours
#: (waiting kept a 6 µs function's calls on the 22 µs Python path for ~0.9 s, four turns,
#: where C++ takes them once the ladder is done).
TURN_CALLS = 4
TURN_SETTLE_SECONDS = 0.2
#: Untimed calls that begin each turn of a trial whose programs alternate call by call: the
#: call after the other program's finds that program's state on the cores and in memory, and
#: a program gaining from running after itself shows only after its own. The float32 MLP
#: step's programs with XLA's own scheduler and with the memory-optimised one (backend.
#: XLA_SCHEDULER), 125 pairs in turns of one call, each order three times: interquartile
#: means of the differences +34, +46, +70 and -65, +270, +51 µs (XLA's own the slower or
#: even); in turns of five calls, the first untimed: XLA's own faster in all six (-164, -65,
#: -130; +120, +151, +728), as in blocks of 50 calls of each (1908-2052 µs against 2053-2277,
#: 10 of 12 blocks; 2.5-3.9 voluntary context switches a call against 5.1). Turns of one
#: untimed call and one timed kept it in 7 of 7 fresh functions.
TURN_WARM_CALLS = 1
#: Calls a ladder times on the Python path before C++'s call path may take them while it
#: rents (Ladder.hand), their mean what it reckons C++'s calls by. The demo's regression
#: gradient (adam, 1000 steps; its parameters a list of pairs): the calls stayed on the
#: Python path for all 1000 (160 µs a call) before, where C++ runs them in 107.
HANDOFF_CALLS = LEARN_CALLS
#: A tiered signature whose compiled calls took PLAIN_TRIAL_RATIO of its plain calls or more
#: (compiled / plain, the quickest of its first LEARN_CALLS compiled calls against the quickest
#: plain call before: `learned`) tries plain autograd against the program its ladder settles on (`PlainStep`,
#: the last step), where a plain call returns what a compiled one does
#: (api.JittedFunction._plain_is_alike). Measured on the CPU: `x + 1.0` on 10^6 float32, 402
#: µs a call compiled against numpy's 282 (XLA splits a 4 MB elementwise loop over two
#: threads), float64 593 against 576; the benchmarks' MLP gradient 0.9 (tiered.py), tried;
#: lifelines' value_and_grad 0.02-0.24, its Hessians 0.01-0.2, loops 0.01-0.02: not tried,
#: where a trial's plain calls would cost more than it could find.
PLAIN_TRIAL_RATIO = 0.7
#: ... and plain autograd is kept only where its calls took less than the compiled program's
#: by PLAIN_MARGIN of a compiled call (their median) and PLAIN_MARGIN_SECONDS more, by the
#: interquartile mean of the paired differences (`faster`): the trial times the compiled
#: program on the Python path (backend.Executable's call, 12.5 µs on a 3-element array against
#: 5.0-5.3 through C++'s, which takes the calls once the ladder settles: dispatch.py) and
#: the plain calls without jit_ps's own work (`x + 1.0` on 3 elements, plain for good,
#: api.JittedFunction._call_python's simple path: 4.2-5.3 µs a call against numpy's 2.0-2.3,
#: load 8 on 2 cores).
PLAIN_MARGIN = 0.05
PLAIN_MARGIN_SECONDS = 10e-6
#: The step of a ladder that tries plain autograd (api.JittedFunction's PlainStep).
PLAIN = "plain autograd"


class _Log:
    """This module's logger, made at its first message: a job that logs nothing does not
    import logging (2.7 ms with traceback and string, where nothing else has)."""

    def __getattr__(self, name):
        import logging
        return getattr(logging.getLogger(__name__), name)


log = _Log()


class Ladder:
    """The programs a compiled signature may still move to. Its calls run through `run`,
    timed; once they have cost UPGRADE_RENT times `cost` (the seconds its first program took
    to compile), or CHEAP_CALLS of them have each cost under CHEAP_CALL_SECONDS on average,
    the next of its `steps` is made on the compile thread, `make()(entry, step)`
    returning (executable, lowered, options): a program of the same graph that may run
    faster (api.JittedFunction._faster_program; None: the entry is no longer used). The two
    then run in turn, TRIAL_CALLS calls each or more (a `Trial`); the faster stays in the entry
    (`executable`, `lowered`, `options`), the other is let go, and the ladder goes on to the
    next step. When it is done the entry's `ladder` is None and `settled()()` is called (the owner's
    _forget_fast_paths: C++'s fast path may take its calls now). `make` and `settled` are
    weakref.WeakMethods: the entry is the owner's, and a cycle back to it would keep its
    executables alive until the garbage collector runs. A step that fails leaves the
    program in use, with a warning. `learn` (NewSignatures.learner) is given the first
    program's mean and quickest call after LEARN_CALLS calls. `quick`: the first program was compiled
    quickly, and its first step rents QUICK_RENT of the rent.

    While it rents (`renting`), C++'s call path may take the signature's calls (`hand`):
    its fast path counts them down to those that pay the rent, reckoned at the mean of the
    calls timed before, and then calls `due` (the owner's, on the calling thread), which
    starts the next step (`reached`). The program made, the next C++ call hands the calls
    back to the Python path for its trial (`_try`: `settled()()` drops C++'s fast paths
    and the entry's; a C++ call holds its cache entry while it runs, jaxlib's pjit.cc's
    shared_ptr, so they may go from within its finish).

    The last step of a tiered signature's ladder may be plain autograd (`plain`, a PlainStep;
    `consider_plain`): tried against the program in use as a program is, at once (nothing to
    make), and kept only if faster by PLAIN_MARGIN; then the owner runs the signature plainly
    (PlainStep.decide), and C++, which takes a signature's calls only once its ladder is done,
    never had them after the trial began. A ladder whose plain step is yet to be considered
    stays, its calls on the Python path (not `renting`), until `learn` has had its calls."""

    __slots__ = ("steps", "cost", "make", "settled", "spent", "calls", "least", "trial", "learn", "handed", "due",
                 "ready", "refused", "rent", "plain", "_started", "_lock")

    def __init__(self, steps, cost, make, settled, learn=None, quick=False, plain=None):
        self.steps, self.cost, self.make, self.settled, self.spent = list(steps), cost, make, settled, 0.0
        self.plain = plain  # the PlainStep tried last (`consider_plain`), or None
        self.rent = QUICK_RENT if quick else 1.0  # the next step's share of the rent
        self.calls, self.trial, self.learn, self._started, self._lock = 0, None, learn, False, threading.Lock()
        self.least = math.inf  # the quickest of `calls`
        self.handed = self.due = self.ready = None
        self.refused = False  # C++ has no fast path for the program in use (api.JittedFunction._fastpath)

    def run(self, entry, args, keep_on_device):
        """One call of the signature: its executable's outputs."""
        if self.ready is not None:  # made while C++ took the calls: they are back here
            self._try(entry)
        trial = self.trial
        if trial is not None:
            return trial.run(self, entry, args, keep_on_device)
        t0 = time.perf_counter()
        outs = entry.executable(args, keep_on_device)
        seconds = time.perf_counter() - t0
        self.spent += seconds
        self.calls += 1
        if seconds < self.least:
            self.least = seconds
        if not self._started and UPGRADE_RENT is not None and (
                self.spent >= self.cost * UPGRADE_RENT * self.rent
                or self.calls >= CHEAP_CALLS and self.spent < self.calls * CHEAP_CALL_SECONDS):
            self.start(entry)
        if self.learn is not None and self.calls >= LEARN_CALLS:  # against the plain calls before
            learn, self.learn = self.learn, None
            self.consider_plain(entry, learn(self.spent / self.calls, self.least))
        return outs

    def consider_plain(self, entry, ratio):
        """After LEARN_CALLS compiled calls, the quickest of which took `ratio` of the quickest
        plain call before them (`learned`): plain autograd (`plain`) is the last step where that
        is PLAIN_TRIAL_RATIO or more. A ladder with no program left to make goes on to it, or
        settles."""
        if self.plain is None:
            return
        if ratio < PLAIN_TRIAL_RATIO:
            self.plain = None
        else:
            self.steps.append(PLAIN)
        if not self._started and self.trial is None and (not self.steps or self.steps[0] is PLAIN):
            self._next(entry)

    def start(self, entry):
        """Make the next step's program on the compile thread (once a step)."""
        with self._lock:
            start = not self._started and bool(self.steps) and self.steps[0] is not PLAIN
            self._started = self._started or start
        if start:
            compile_thread.submit(functools.partial(self._make, entry))

    def renting(self):
        """Whether C++ may be handed the calls (`hand`, once HANDOFF_CALLS of them are timed):
        no program being made or tried, none handed yet."""
        return (not self._started and self.trial is None and self.handed is None and not self.refused
                and UPGRADE_RENT is not None and bool(self.steps))

    def hand(self, finish, due):
        """C++'s fast path takes the calls from now on: `finish` (its _callpath.Finish, or
        dispatch's) calls `due` after as many as `run` would have taken to pay the rent, or
        to make CHEAP_CALLS. False (and nothing handed) where the ladder moved on meanwhile."""
        with self._lock:
            if not self.renting() or self.calls < HANDOFF_CALLS:
                return False
            mean = self.spent / self.calls
            left = (CHEAP_CALLS - self.calls if mean < CHEAP_CALL_SECONDS
                    else math.ceil((self.cost * UPGRADE_RENT * self.rent - self.spent) / mean))
            finish.countdown, finish.due = max(1, left), due
            self.handed, self.due = finish, due
            return True

    def reached(self, entry):
        """`due`'s work: start the next step, or where its program is made, try it (not where
        C++ gave the calls back meanwhile: a call of another thread may finish after that)."""
        if self.handed is None:
            return
        if not self._started:
            self.start(entry)
        elif self.ready is not None:
            self._try(entry)

    def _make(self, entry):
        """On the compile thread: the next step's program, then tried (or, with TRIAL_CALLS
        0, put in use); where C++ takes the calls, once the next of them gives them back
        (`ready`: that call's finish calls `due` again)."""
        make = self.make()
        try:
            made = None if make is None else make(entry, self.steps.pop(0))  # None: its function is gone
        except Exception as e:  # the program in use stays
            log.warning("a faster program of a compiled signature failed to compile; keeping the one in use: %s", e)
            if self.handed is not None:  # the next step rents on the Python path
                self._give_back(entry)
            self._next(entry)
            return
        if made is None:
            return
        with self._lock:
            handed = self.handed
            if handed is not None:
                self.ready = made
                handed.countdown, handed.due = 1, self.due
        if handed is None:
            self._begin(entry, made)

    def _try(self, entry):
        """On a calling thread: C++ gives the calls back (the owner's fast paths dropped,
        the entry's too: its program may change), and the program made is tried."""
        with self._lock:
            made, self.ready = self.ready, None
        if made is None:  # another thread's call took it
            return
        self._give_back(entry)
        self._begin(entry, made)

    def _give_back(self, entry):
        """C++ gives the calls back: the owner's fast paths are dropped, the entry's too."""
        with self._lock:
            handed, self.handed, self.due = self.handed, None, None
        if handed is not None:
            handed.due = None
        entry.fastpath = None
        forget = self.settled()
        if forget is not None:
            forget()

    def _begin(self, entry, made):
        if TRIAL_CALLS:
            mixed = entry.lowered.blas != made[1].blas  # one calls BLAS, the other leaves products to XLA
            self.trial = Trial(made, TURN_SETTLE_SECONDS if mixed else 0.0)
        else:
            self.settle(entry, made, keep_new=True)

    def settle(self, entry, made, keep_new):
        """End a step: `made` (executable, lowered, options) replaces the entry's program, or
        is let go; then the next step, if any."""
        if made[0] is self.plain:
            self._settle_plain(entry, keep_new)
            return
        executable, lowered, options = made
        loser = entry.executable if keep_new else executable
        if keep_new:
            entry.executable, entry.lowered, entry.options = executable, lowered, options
            entry.fastpath = None  # made anew for the program kept (a refusal may not hold for it)
        loser.backend.forget(loser.programs())  # a call running it keeps it alive until it returns
        self._next(entry)

    def _settle_plain(self, entry, keep_plain):
        """End the plain step: its owner is told (PlainStep.decide); where plain autograd was
        kept, the owner runs the signature plainly from now on and the ladder is done, else it
        settles on the program in use."""
        plain, times = self.plain, self.trial.times
        self.plain = None
        decide = plain.decide()
        if decide is not None:
            decide(plain.key, entry, keep_plain, times)
        if keep_plain:
            self.steps.clear()
            entry.ladder = None
        else:
            self._next(entry)

    def _next(self, entry):
        with self._lock:
            self.trial, self.spent, self.calls, self._started, self.least = None, 0.0, 0, False, math.inf
            self.rent = 1.0
            self.handed = self.due = self.ready = None
            self.refused = False
        if self.steps and self.steps[0] is PLAIN:  # nothing to make: tried at once, call by call
            self.steps.pop(0)
            mixed = self.plain.products and not entry.lowered.blas  # plain autograd's products are OpenBLAS's
            self.trial = Trial((self.plain, None, None), TURN_SETTLE_SECONDS if mixed else 0.0,
                               (PLAIN_MARGIN, PLAIN_MARGIN_SECONDS))
            return
        if not self.steps and (self.plain is None or self.learn is None):  # (else settled by consider_plain)
            entry.ladder = None
            settled = self.settled()
            if settled is not None:
                settled()


def faster(old, new, margin=(0.0, 0.0)):
    """Whether the calls `new` (seconds) took less than those of `old` they pair with (the
    i-th of each), by the interquartile mean of their differences (TRIAL_CALLS), and by
    `margin` more: (a fraction of old's median call, seconds)."""
    differences = sorted(n - o for o, n in zip(old, new))
    cut = len(differences) // 4
    middle = differences[cut:len(differences) - cut]
    fraction, seconds = margin
    least = fraction * sorted(old)[len(old) // 2] + seconds if fraction or seconds else 0.0
    return sum(middle) < -least * len(middle)


class PlainStep:
    """A ladder's last contender: the signature's calls run as plain autograd. `call()` and
    `decide()` are the owner's (weakly: the ladder is its entry's): `call()(key, args)` runs
    a call of signature `key` plainly, its results flat as the signature's executables give
    them; `decide()(key, entry, plain_kept, times)` is told the trial's outcome (`times`: the
    compiled and the plain calls' seconds, paired). `products`: the signature's plain calls
    multiply matrices (OpenBLAS's threads then spin on after them: TURN_SETTLE_SECONDS)."""

    __slots__ = ("call", "decide", "key", "products")

    def __init__(self, call, decide, key, products):
        self.call, self.decide, self.key, self.products = call, decide, key, products

    def __call__(self, args, keep_on_device):
        return self.call()(self.key, args)


class Trial:
    """Two programs of one signature run in turns, each turn one timed call after
    TURN_WARM_CALLS untimed ones, or, with `settle` seconds, TURN_CALLS timed calls after the
    untimed ones of its first `settle` seconds; once the timed calls decide (`complete`), the
    new program stays if `faster` (Ladder.settle). Both compute the signature's results, so
    any call may run either."""

    __slots__ = ("made", "settle", "margin", "times", "over", "_turn", "_turn_start", "_turn_begun", "_turn_timed",
                 "_lock")

    def __init__(self, made, settle, margin=(0.0, 0.0)):
        self.made, self.settle, self.times, self._lock = made, settle, ([], []), threading.Lock()
        self.margin = margin  # what the new program must gain (`faster`)
        self._turn, self._turn_start, self._turn_begun, self._turn_timed = 0, None, 0, 0
        self.over = False

    def complete(self):
        """Whether the timed calls so far decide: as many of each program, TRIAL_CALLS at
        least, and where the programs alternate call by call (no `settle`: its waits would
        make a long trial last seconds) TRIAL_SECONDS of each or TRIAL_MAX_CALLS; or, for a
        contender that must win by a `margin`, as soon as it is not even ahead (plain
        autograd's calls, which may each cost many compiled ones: the MLP gradient's 65 ms
        against 0.67 under load)."""
        old, new = self.times
        n = len(new)
        if n != len(old) or n < TRIAL_CALLS:
            return False
        return (bool(self.settle or n >= TRIAL_MAX_CALLS or min(sum(old), sum(new)) >= TRIAL_SECONDS)
                or (self.margin != (0.0, 0.0) and not faster(old, new)))

    def run(self, ladder, entry, args, keep_on_device):
        with self._lock:
            now = time.perf_counter()
            if self._turn_start is None:
                self._turn_start = now
            turn = self._turn
            self._turn_begun += 1
            timed = now - self._turn_start >= self.settle if self.settle else self._turn_begun > TURN_WARM_CALLS
        trying = turn % 2 == 1  # the new program's turn
        executable = self.made[0] if trying else entry.executable
        t0 = time.perf_counter()
        outs = executable(args, keep_on_device)
        seconds = time.perf_counter() - t0
        if not timed:
            return outs
        with self._lock:
            if self._turn != turn:  # another thread's call ended the turn meanwhile
                return outs
            times = self.times[trying]
            times.append(seconds)
            self._turn_timed += 1
            if self._turn_timed == (TURN_CALLS if self.settle else 1):
                self._turn, self._turn_start, self._turn_begun, self._turn_timed = turn + 1, None, 0, 0
            done = not self.over and self.complete()
            self.over |= done
        if done:  # exactly one call sees this
            ladder.settle(entry, self.made, keep_new=faster(*self.times, self.margin))
        return outs
