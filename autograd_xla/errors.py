"""Error types, and how an error finds the user's own line of code.

Every error raised while tracing names the primitive involved and points at the first
stack frame outside autograd, numpy, scipy and this package: the line the user wrote.
"""
import functools
import importlib.util
import linecache
import os
import sys
import threading

import autograd
import autograd.core
import numpy

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_STDLIB_FILES = ("contextlib.py", "functools.py", "threading.py")


class SourceInfo:
    __slots__ = ("filename", "lineno", "function")

    def __init__(self, filename, lineno, function):
        self.filename, self.lineno, self.function = filename, lineno, function

    def line(self):
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self):
        text = self.line()
        return f'File "{self.filename}", line {self.lineno}, in {self.function}' + (f"\n    {text}" if text else "")


_is_library = {}


@functools.lru_cache(maxsize=None)
def _library_dirs():
    """The directories of autograd, numpy, scipy and this package. scipy's is found without
    importing it (`import scipy`, with subprocess and shutil, took 13-30 ms of the package's
    import), and only at the first question: where scipy is not imported yet, find_spec's
    look through sys.path took 3-4 ms of `import autograd_xla` (pymanopt's process)."""
    return tuple(
        os.path.dirname(os.path.abspath(origin)) + os.sep
        for origin in (autograd.__file__, numpy.__file__, importlib.util.find_spec("scipy").origin)
    ) + (_PACKAGE_DIR + os.sep,)


def library_file(filename):
    hit = _is_library.get(filename)
    if hit is None:
        path = os.path.abspath(filename)
        hit = (path.startswith(_library_dirs()) or os.path.basename(path) in _STDLIB_FILES
               or filename.startswith("<frozen"))
        _is_library[filename] = hit
    return hit


class ForwardVJP:
    """A VJP autograd made for one forward operation (a VJPNode's `vjp`), with `source`, the
    user's line of that operation: while autograd's backward pass runs it, that line, not
    the one that started the backward pass, is the user's (see user_frame)."""

    __slots__ = ("vjp", "source")

    def __init__(self, vjp, source):
        self.vjp, self.source = vjp, source

    def __call__(self, g):
        return self.vjp(g)


_BACKWARD_PASS = autograd.core.backward_pass.__code__


def user_frame(depth=1):
    """SourceInfo of the innermost frame that is the user's code, or None.

    During autograd's backward pass the user's forward frames have returned: below
    autograd.core.backward_pass, the user's line is that of the forward operation whose
    VJP (or whose gradient's accumulation) it is running, the node in its loop (a node
    made from a traced value carries it: tracing._box_tracer). User code the VJP itself
    calls (a user-defined primitive's VJP) is found first."""
    f = sys._getframe(depth)
    known = _is_library
    while f is not None:
        code = f.f_code
        if code is _BACKWARD_PASS:
            vjp = getattr(f.f_locals.get("node"), "vjp", None)
            if type(vjp) is ForwardVJP:
                return vjp.source
        else:
            filename = code.co_filename
            library = known.get(filename)  # (library_file's table read inline: a walk visits 3-8 frames)
            if library is None:
                library = library_file(filename)
            if not library:
                return _source_info(code, f.f_lineno)
        f = f.f_back
    return None


_sources = {}


def _source_info(code, lineno):
    """The SourceInfo of line `lineno` of `code`, one object per line: equations traced from a
    loop share it, and rolling compares equal lines."""
    key = code.co_filename, lineno, code.co_name
    info = _sources.get(key)
    if info is None:
        if len(_sources) >= SOURCES_KEPT:
            _sources.clear()
        info = _sources[key] = SourceInfo(*key)
    return info


#: SourceInfos kept for reuse (_source_info), at most.
SOURCES_KEPT = 1 << 16


class JitError(Exception):
    """Base class of errors raised by autograd_xla itself."""


class FallbackWarning(UserWarning):
    """A signature that cannot be compiled runs as plain autograd (fallback="python"); the
    message names the cause, the user's line and the remedy. fallback="error" raises instead."""


class PrecisionWarning(UserWarning):
    """A jitted function's float64 program is computed in float32, on a platform whose 64-bit
    floating point is emulated (a TPU); its results still come back as float64. Said once per
    function; jit_ps(f, x64=False) returns float32 instead and says nothing, x64=True computes
    in float64 there."""


class ConcretizationError(JitError, TypeError):
    """A traced (abstract) value was asked for a concrete Python value.

    static_candidates: indices of the jitted function's inputs the value was computed
    from, when each may be retried as a static value (tracing.concretization_error says
    which may); empty otherwise. random_draws: names of the host-drawn random inputs it
    was computed from. source: the user's line."""

    def __init__(self, message, static_candidates=(), random_draws=(), source=None):
        super().__init__(message)
        self.static_candidates = tuple(static_candidates)
        self.random_draws = tuple(random_draws)
        self.source = source


class ConcreteValueRequired(Exception):
    """Raised inside a translation rule that needs an operand's value, not only its type
    (an axis, a repeat count, a boolean mask that decides a shape). Tracing turns it into a
    ConcretizationError naming the argument the operand came from. `value`: the operand
    (an hlo.Value); `what`: what needed it, for the message."""

    def __init__(self, value, what):
        super().__init__(what)
        self.value, self.what = value, what


class UnsupportedDtypeError(TypeError):
    """A value whose dtype XLA has no type for (`dtype`: object arrays, strings, datetimes)
    reached a translation rule: most often a rule making an array of a list that holds
    traced values, which tracing then retries with the list made an array first."""

    def __init__(self, message, dtype):
        if numpy.dtype(dtype) == object:
            message += (" (an array of Python objects: np.array([...], dtype=object), or of a ragged list; XLA has "
                        "no such type: make it an array of numbers, np.array([...]) or np.stack)")
        super().__init__(message)
        self.dtype = dtype


class UnsupportedPrimitiveError(JitError, NotImplementedError):
    """A primitive without a translation rule was reached while tracing."""

    def __init__(self, message, primitive=None, source=None):
        super().__init__(message)
        self.primitive, self.source = primitive, source


class ImpureFunctionError(UnsupportedPrimitiveError):
    """The function has an effect a compiled program would freeze: it draws random numbers in
    a way that cannot be replayed (a RandomState/Generator method, a draw used as a concrete
    value...), or shows a traced value as text (printed, formatted: `shown_as_text`). jit_ps
    runs such a function as plain autograd (fallback="python") or raises this (fallback="error")."""


def shown_as_text(how, source):
    """The ImpureFunctionError of a traced value made text (`how`: 'print shows', 'a format
    makes text of') at `source`: compiled, the text would be its placeholder's, made once
    while tracing, where plain autograd makes the value's at every call."""
    where = f" at\n{source}\n" if source else " "
    return ImpureFunctionError(
        f"{how} a traced value{where}Compiled, that text would be a placeholder (Traced<...>) made once, while "
        "tracing, where plain autograd shows the value at every call, so this function runs as plain autograd. "
        "To compile it, print or format what the function returns, outside it.", primitive=how, source=source)


class SubclassError(JitError):
    """A traced stand-in of an ndarray subclass was asked what it cannot answer as the array it
    stands for would (its class or an attribute after an operation whose result's class could
    not be found, numerics the subclass changes): the call runs plainly instead. Not an
    AttributeError or TypeError, so that getattr's default or an `except` cannot hide it."""


class TracerLeakError(JitError):
    """A traced value escaped the function being compiled."""


class CompileError(JitError):
    """XLA rejected the program; names the primitive and the user's line.

    xla_message: XLA's own words; module_text: the StableHLO module it rejected;
    primitive and source: the equation that emitted the rejected operation, if found."""

    def __init__(self, message, xla_message=None, module_text=None, primitive=None, source=None):
        super().__init__(message)
        self.xla_message, self.module_text = xla_message, module_text
        self.primitive, self.source = primitive, source


class ProgramTooLargeError(CompileError):
    """The traced program is beyond jit_ps's `max_program` bound, so it is not given to XLA."""


class TooManyProgramsError(CompileError):
    """The process cannot load another program: its memory maps are near the system's bound
    (backend.MAPS_FRACTION of vm.max_map_count), past which XLA's next load crashes it."""


class PlatformUnavailableError(JitError, RuntimeError):
    """A requested platform (gpu, tpu) has no installed plugin or no usable device."""


class ArgumentError(JitError, TypeError):
    """An argument of a jitted function cannot be passed to XLA."""


class ProcessLostError(JitError, RuntimeError):
    """A collective across processes failed because another process of the distributed job
    stopped (distributed.initialize); the job is fail-stop."""


class _PrimitiveStack(threading.local):
    """Names of the autograd primitives whose raw numpy code is running on traced values."""

    def __init__(self):
        self.names = []


primitive_stack = _PrimitiveStack()


def annotate(exc, message):
    """Attach context to an exception without changing its type (callers may catch it)."""
    if message not in getattr(exc, "__notes__", ()):
        exc.add_note(message)
    return exc
