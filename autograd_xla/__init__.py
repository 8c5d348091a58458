"""autograd_xla: compile unmodified autograd programs with XLA.

    import autograd.numpy as np
    from autograd import grad
    from autograd_xla import jit_ps

    grad_fun = jit_ps(grad(loss))   # traced once per signature, compiled, cached

A call goes down the pipeline: api (jit_ps, its cache, fallback) -> tracing (the function
on abstract values, through autograd's primitives, into a core.Graph) -> lowering (each
equation by its primitive's translation rule, to StableHLO) -> backend (jaxlib: compile,
transfer, execute). autodiff makes autograd differentiate through compiled calls.

The modules stand on floors; each imports only its own floor and those below
(tests/test_layering.py checks it, with no import circle, function-local imports included):

 0. core (abstract values, the graph), errors, tree (argument containers)
 1. registry: one entry per primitive with each of its faces (translation rule, trace
    rule, metadata, replay under autograd boxes, interceptor, batching rule)
 2. hlo: StableHLO text, one builder method per op; op names checked; hlo_picture: a
    Graphviz picture of XLA's optimised HLO text (fusions as clusters)
 3. blas: BLAS's matrix products as XLA custom calls on the CPU; clients: jaxlib's clients
    per platform (CPU, the CUDA and TPU plugins) and the runtime calls that moved between
    jaxlib versions; memory: glibc's malloc thresholds and numpy's arrays at 64-byte
    boundaries (XLA reads those in place); context: what a translation rule gets as ctx
    (numpy promotion, broadcasting, constants)
 4. rules/: translation rules only, one module per family (adding a primitive is one
    @lowers function in one of them)
 5. tracing, lowering, partial_eval: the interpreters of a graph; numpy_tier: a graph run by
    numpy (tiered execution's calls while a signature is held or compiling); batching: lowering for
    a batch of examples (vmap), op by op; backend: the runtime on one device; replicated:
    programs over several devices (pmap's); dispatch: jaxlib's C++ call path driving our
    executables; persistent_cache: compiled executables kept on disk (opt-in); distributed:
    several processes as one job (initialize); placement: device_put, block_until_ready
 6. control_flow/: while_loop, fori_loop, scan, cond, switch and their derivatives
 7. compositions/: trace rules (odeint, fixed_point, scipy.stats, nan*) and the patches of
    autograd's globals that look at data
 8. autodiff, impurity (random draws replayed), batched (vmap as one equation, its
    derivatives, the Jacobians; autograd's jacobian batched while tracing), collectives
    (psum, all_gather, ... over a pmap's devices or a vmap's batch), parallel (pmap,
    iterated_map_reduce)
 9. api (jit_ps and its cache), signatures (cache keys, argument names), aot (lower /
    compile objects, eval_shape), transforms (vmap, jacfwd, jacrev, hessian), tiering (the
    background compile thread of tiered execution)
10. this package, coverage (the primitive report)
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # jaxlib's INFO lines; before any module here imports jaxlib
del os  # not part of the package's namespace

from . import memory, registry  # noqa: E402
from .api import JittedFunction, eval_shape, jit_ps  # noqa: E402
from .core import Graph  # noqa: E402
from .errors import (ArgumentError, CompileError, ConcretizationError, FallbackWarning, UnsupportedDtypeError,  # noqa: E402,E501
                     ImpureFunctionError, JitError, PlatformUnavailableError, PrecisionWarning, ProcessLostError,
                     ProgramTooLargeError, TooManyProgramsError, TracerLeakError, UnsupportedPrimitiveError)
from .registry import register_batching_rule, register_trace_rule, register_translation_rule  # noqa: E402
from .tiering import set_default_tiered  # noqa: E402

#: The modules whose import registers the package's own faces, in the order they register:
#: imported at the first registration, look-up or trace (registry.load_builtin), so that a job
#: that only runs plainly (tiered execution's first calls) does not import them (batched: its
#: patch of autograd's jacobian, which a trace of hessian or jacobian calls). Collectives,
#: pmap and vmap's transforms register only what their own public names make, at their first
#: use (_LAZY): a trace of a function that calls none does not import them (with the runtime
#: modules pmap's import brings, ~3-10 ms of a process's first trace)
registry.builtin_rules(*(f"{__name__}.{m}" for m in ("compositions", "rules", "control_flow", "batched")))

#: Public names whose modules are imported at their first use (module __getattr__, PEP 562)
_LAZY = {"all_gather": "collectives", "axis_index": "collectives", "axis_size": "collectives",
         "pmax": "collectives", "pmean": "collectives", "pmin": "collectives", "ppermute": "collectives",
         "psum": "collectives", "cond": "control_flow", "fori_loop": "control_flow", "scan": "control_flow",
         "switch": "control_flow", "while_loop": "control_flow", "iterated_map_reduce": "parallel",
         "pmap": "parallel", "ShardedArray": "replicated", "hessian": "transforms", "jacfwd": "transforms",
         "jacrev": "transforms", "vmap": "transforms"}
#: ... and those that need no rules: the runtime, several processes as one job, device
#: placement, the compiled executables kept on disk
_DEFERRED = {"DeviceArray": "backend", "default_platform": "backend", "devices": "backend",
             "set_cpu_device_count": "backend", "set_default_platform": "backend",
             "local_devices": "distributed", "process_count": "distributed", "process_index": "distributed",
             "block_until_ready": "placement", "device_put": "placement", "set_cache_dir": "persistent_cache"}


def __getattr__(name):
    """A public name of _LAZY, imported now after the package's own rules (registry.load_builtin),
    as a trace would have them, or of _DEFERRED; or a submodule not imported yet
    (`autograd_xla.rolling`, `autograd_xla.distributed`)."""
    import importlib.util
    module = _LAZY.get(name) or _DEFERRED.get(name)
    if module is None:  # `from . import x` of a module of the package asks here too, while importing it
        if name.startswith("__") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    if name in _LAZY:
        registry.load_builtin()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_DEFERRED))


memory.raise_malloc_thresholds()  # glibc: results and temporaries not faulted in afresh at every call
memory.align_numpy_unless_told_not()  # numpy's large arrays where XLA reads them in place

__version__ = "0.1.0"

__all__ = ["jit_ps", "JittedFunction", "register_translation_rule", "register_trace_rule", "Graph",
           "JitError", "ConcretizationError", "UnsupportedPrimitiveError", "ImpureFunctionError", "TracerLeakError",
           "CompileError", "FallbackWarning", "PrecisionWarning", "ProgramTooLargeError", "UnsupportedDtypeError",
           "TooManyProgramsError", "ArgumentError", "PlatformUnavailableError", "DeviceArray", "devices", "default_platform",
           "set_default_platform", "while_loop", "fori_loop", "cond", "switch", "scan", "eval_shape",
           "set_cache_dir", "vmap", "jacfwd", "jacrev", "hessian",
           "register_batching_rule", "pmap", "iterated_map_reduce", "psum", "pmean", "pmax", "pmin", "all_gather",
           "ppermute", "axis_index", "axis_size", "ShardedArray", "set_cpu_device_count", "distributed",
           "ProcessLostError", "set_default_tiered", "device_put", "block_until_ready", "process_index",
           "process_count", "local_devices"]
