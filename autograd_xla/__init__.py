"""autograd_xla: compile unmodified autograd programs with XLA.

    import autograd.numpy as np
    from autograd import grad
    from autograd_xla import jit_ps

    grad_fun = jit_ps(grad(loss))   # traced once per signature, compiled, cached

The pipeline, one module per stage: api (jit_ps and its cache) -> tracing (abstract
values through autograd's primitives) -> core (the graph) -> rules (translation rules
by family) -> lowering (graph to StableHLO) -> backend (jaxlib clients, compile,
execute). autodiff makes autograd differentiate through compiled functions;
compositions traces what numpy code cannot run on abstract values (odeint, scipy.stats...)
as compositions of primitives and control flow.
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # silence jaxlib's INFO logging before it loads

from .api import JittedFunction, jit_ps  # noqa: E402
from .backend import DeviceArray, default_platform, devices, set_default_platform  # noqa: E402
from .control_flow import cond, fori_loop, scan, switch, while_loop  # noqa: E402
from .core import Graph  # noqa: E402
from .errors import (ArgumentError, CompileError, ConcretizationError, FallbackWarning,  # noqa: E402
                     ImpureFunctionError, JitError, PlatformUnavailableError, ProgramTooLargeError, TracerLeakError, UnsupportedPrimitiveError)
from .registry import register_trace_rule, register_translation_rule  # noqa: E402

__version__ = "0.1.0"

__all__ = ["jit_ps", "JittedFunction", "register_translation_rule", "register_trace_rule", "Graph",
           "JitError", "ConcretizationError", "UnsupportedPrimitiveError", "ImpureFunctionError", "TracerLeakError",
           "CompileError", "FallbackWarning", "ProgramTooLargeError",
           "ArgumentError", "PlatformUnavailableError", "DeviceArray", "devices", "default_platform",
           "set_default_platform", "while_loop", "fori_loop", "cond", "switch", "scan"]
