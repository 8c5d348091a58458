"""Which calls of a jitted function jaxlib's C++ call path takes (dispatch.py), and with which
program: the methods of api.JittedFunction that answer C++'s misses, which it inherits.

A call C++ has no fast path for runs in Python (`_call_python`) and then asks `_fastpath`
for its signature's: a compiled signature of numpy arrays and Python numbers (`takes_leaf`),
positional or in tuples and lists (which C++ flattens as tree.flatten does), whose executable
C++ can run (dispatch.fastpath), its own or a second program without views, recycled
results or packed arguments (`_direct`); C++ skips the leaves the function never reads. Measured on the
benchmarks' MLP step (its parameters a list of (W, b) pairs, 784-200-100-10, a batch of
256, float64; one process, blocks of 10 calls in turn): 2.73-2.77 ms a call through C++,
2.82-2.86 through Python. Its programs alone, on device buffers, in one process: ours 2.84
ms, ours with jax's tanh derivative 2.76, jax's 2.72: autograd's exact `g / cosh(x)**2`
costs two exponentials that jax's inexact `g * (1 - t*t)` does not.
"""
import functools
import weakref

import numpy as np

from . import background, tiering, tree
from .aot import COMPILED
from .core import SUPPORTED_DTYPES as _SUPPORTED
from .errors import CompileError
from .registry import LazyModule
from .signatures import PY_SCALARS, PlainArgument, is_device_array

#: The runtime and jaxlib's C++ call path, imported at a function's first fast path or
#: compile: a job whose calls all run plainly never asks for one.
backend = LazyModule("autograd_xla.backend")
dispatch = LazyModule("autograd_xla.dispatch")

#: A function whose calls C++ has handed back this many times for good (keyword, bool or dict
#: arguments, large arrays), none ever taken, keeps to the Python path: C++'s
#: signature and lookup cost such calls ~2 µs each (17.0 against 15.3 µs, measured).
FAST_REFUSALS = 8


def takes_leaf(x):
    """Whether C++ puts an argument leaf as our program takes it: a numpy array (not a
    subclass) of a dtype we compile, or a Python int, float or complex, which C++ puts as a
    weakly typed 64-bit scalar (with x64 on), as signatures.aval_of traces it; or passes it
    as it is: a DeviceArray's buffer (which of them it may be given: dispatch.takes_arguments).
    A bool, static here, is one of C++'s other signatures."""
    t = type(x)
    return (t is np.ndarray or is_device_array(t)) and x.dtype in _SUPPORTED or t in PY_SCALARS


def _ladder_due(owner, key):
    """Ladder.hand's `due` of a fast path: its owner (weakly: C++ keeps the fast path) goes on."""
    jf = owner()
    if jf is not None:
        jf._ladder_due(key)


class FastPaths:
    """The fast-path methods of api.JittedFunction: they read its cache (`_cache`, `_simple`,
    under `_lock`), its signatures (`_split`, `_key`) and make programs through its
    `_lowering`, `_compile_program` and `_backend`."""

    def _fastpath(self, args, kwargs):
        """C++'s fast path for a call like this one (just run by _call_python), False, or None
        (none yet: asked again at the signature's next call, dispatch.function): for numpy
        arrays, positional (a signature on the simple path), or arrays and Python numbers,
        positional or in tuples and lists (`_sequences_hit`), of a signature whose executable
        qualifies (dispatch.fastpath) and takes them as they are (x64=False narrows them).
        Calls of other arguments, and of executables that do not qualify, are refusals for
        good; after FAST_REFUSALS of them with no fast path given, the function keeps to the
        Python path. While the signature's ladder climbs, a fast path is given once it has
        timed HANDOFF_CALLS calls, for the calls that pay its rent (tiering.Ladder.hand),
        where C++ can run the program in use itself."""
        hit = None
        if not kwargs:
            flat = all(type(a) is np.ndarray for a in args)
            hit, leaves = ((self._simple.get(tuple([(a.shape, a.dtype) for a in args]), (None, None)), args) if flat
                           else self._sequences_hit(args))
        if hit is not None:
            entry, key = hit
            if entry is None:  # not compiled yet (tiered), or not on the simple path: not counted;
                return False if key is tiering.PLAIN else None  # or plain autograd's for good: never
            ladder = entry.ladder
            if ladder is not None and entry.fastpath is None:  # timed while it may move to a faster program
                if not (ladder.renting() and not dispatch.needs_python(entry.executable)):
                    self._waiting = not self._fast_calls[1]  # none given yet: calls skip C++'s misses meanwhile
                    return None  # not counted
                if ladder.calls < tiering.HANDOFF_CALLS:
                    return None  # timed in Python first (asked again at the next call); not counted
            if entry.fastpath is None:
                executable = self._direct(entry, leaves)
                if executable is None:
                    return None  # not counted: a call of aligned arguments makes it, or it is compiling
                sources = executable.sources  # the leaves it takes (not those the function never reads)
                takes = (all(type(i) is int and i < len(leaves) for i in sources)
                         and dispatch.puts_as_taken(executable, leaves))
                # staged: numpy arrays and Python numbers, positional or in lists and tuples
                # (_callpath's scan matches a stage against their leaves and structure)
                stage = not entry.donated
                # while the ladder rents, C++ takes the calls till they have paid it (Ladder.hand)
                arm = None if ladder is None else functools.partial(
                    ladder.hand, due=functools.partial(_ladder_due, weakref.ref(self), key))
                fast = takes and dispatch.fastpath(executable, entry.out_tree, self.stats, self._cache, key,
                                                   self if stage else None, (tree.flatten(args)[1], leaves), arm,
                                                   self.keep_on_device)
                if ladder is not None and not fast:  # none (or the ladder moved on): asked again after this step
                    ladder.refused = True
                    self._waiting = not self._fast_calls[1]
                    return None
                entry.fastpath = fast or False  # not self in it: C++ keeps it
        fast = hit[0].fastpath if hit is not None else False
        if fast and not self._takes(hit[0], leaves):
            fast = False  # (this call's C++ signature only: another's arguments may be taken)
        elif fast and any(type(x) is backend.DeviceArray for x in leaves):
            fast = self._moving(hit, leaves)
            if fast is None:
                return None  # not counted
        self._fast_calls[bool(fast)] += 1
        if self._fast_calls == [FAST_REFUSALS, 0]:
            self._fast = None
        return fast

    def _takes(self, entry, leaves):
        """Whether the fast path of `entry` may be given this call's leaves: C++ may be given
        them (dispatch.takes_arguments) and puts them as its executable takes them (a float64
        one computed in 32 bits is not: dispatch.puts_as_taken)."""
        executable = entry.executable
        if dispatch.needs_python(executable):
            executable = entry.direct  # (_direct's program, made before the fast path was given)
        return (isinstance(executable, backend.Executable) and dispatch.puts_as_taken(executable, leaves)
                and dispatch.takes_arguments(entry.executable, leaves, self.keep_on_device))

    def _moving(self, hit, leaves):
        """The fast path of a call whose leaves include DeviceArrays, which C++ passes as they
        are: the entry's own but for its count of the arrays a call moves to the device (made
        once per count, anew once the entry's own changes); None while a ladder climbs (whose
        countdown the entry's own keeps)."""
        entry, key = hit
        if entry.ladder is not None:
            return None
        executable = self._direct(entry, leaves)
        if executable is None:
            return None
        moved = sum(type(leaves[i]) is not backend.DeviceArray for i in executable.sources)
        if moved == len(executable.sources):
            return entry.fastpath
        own, made = entry.on_device
        if own is not entry.fastpath:
            own, made = entry.on_device = entry.fastpath, {}
        if moved not in made:
            made[moved] = dispatch.fastpath(executable, entry.out_tree, self.stats, self._cache, key,
                                            call=(None, leaves), keep=self.keep_on_device, moved=moved)
        return made[moved]

    def _sequences_hit(self, args):
        """For positional arguments of numpy arrays and Python numbers (`takes_leaf`), alone or
        in tuples and lists (C++'s pytrees flatten those as we do: tree.sequences_only):
        ((entry, key) of their signature, leaves), entry None where it is not compiled or C++
        may not take its calls (Entry.flat); (None, None) for other arguments."""
        if self._static_argnums:
            return None, None
        spec, leaves = self._split(args, {})
        if not tree.sequences_only(spec[0]) or not all(map(takes_leaf, leaves)):
            return None, None
        try:
            key = self._key(spec, leaves)
        except PlainArgument:  # an int beyond int64, which runs as plain autograd
            return None, None
        entry = self._cache.get(key)
        usable = (entry is not None and entry.stage == COMPILED and entry.flat
                  and not (entry.draws or entry.guards))
        return (entry if usable else None, key), leaves

    def _direct(self, entry, leaves):
        """The executable of an entry C++'s fast path runs: its own, or where that needs Python
        at each call (dispatch.needs_python: views, recycled results, small arguments packed
        where large ones make the Python path likely, api.JittedFunction._lowering), the graph
        lowered without them (`entry.direct`; within dispatch.DIRECT_BYTES), made once a
        call's large arguments are where C++ reads them in place (`leaves`; None till then):
        compiled in that call, or where its text is longer than dispatch.DIRECT_TEXT_BYTES on
        the compile thread (None till it is done, a background.Job in `entry.direct` meanwhile).
        The entry's own runs the calls of misaligned arguments, in Python."""
        executable = entry.executable
        if not dispatch.needs_python(executable) or self.x64 is False or not dispatch.direct(
                [v.aval for v in entry.graph.invars], executable.out_avals):
            return executable  # (x64=False: C++ would not take the arguments' float64 anyway)
        if entry.direct is None:
            if not dispatch.in_place(leaves):
                return None
            try:
                lowered = self._lowering(entry, (), direct=True, **entry.lowered.variant)
            except Exception as e:  # the graph lowered once already: the call's result stands, the Python path stays
                tiering.log.warning("the program for C++'s calls failed to lower; calls stay on the Python path: %s", e)
                entry.direct = executable
                return executable
            if len(lowered.text) <= dispatch.DIRECT_TEXT_BYTES:
                self._compile_direct(entry, lowered)
            else:
                entry.direct = background.Job.start(functools.partial(self._compile_direct, entry, lowered))
        if type(entry.direct) is background.Job:  # done and still here: it failed, the Python path stays
            if entry.direct.running():
                return None
            tiering.log.warning("the program for C++'s calls failed to compile; calls stay on the Python path: %s",
                                entry.direct.error)
            entry.direct = executable
        return entry.direct

    def _compile_direct(self, entry, lowered, job=None):
        """_direct's program, in the call or on the compile thread (`job`: its program is let
        go if the function's cache was cleared meanwhile, as api's background compiles)."""
        options = self._backend().optimized(entry.options) or entry.options  # (it stays: not a quick program)
        try:
            direct, seconds, compiled = self._compile_program(entry, lowered, options, entry.executable)
        except CompileError:  # not expected of a program whose graph compiled: the Python path stays
            direct, seconds, compiled = entry.executable, 0.0, False
        self.stats.upgrades += compiled
        self.stats.upgrade_seconds += seconds
        with self._lock:  # clear_cache marks its pending jobs under the lock
            forget = job is not None and job.forgotten
        if forget and direct is not entry.executable:
            self._backend().forget(direct.programs())
        entry.direct = direct

    def _ladder_due(self, key):
        """A renting signature's fast path counted its calls down (tiering.Ladder.hand): its
        ladder goes on."""
        entry = self._cache.get(key)
        ladder = None if entry is None else entry.ladder  # (None once settled, on another thread too)
        if ladder is not None:
            ladder.reached(entry)

    def _forget_fast_paths(self):
        """Let C++ ask again for every signature's fast path (a ladder settled, the cache cleared)."""
        self._simple.clear()
        self._plain_for_good = False
        self._waiting = 0
        if self._fast is not None:
            dispatch.forget(self)
