"""Structured control flow: `while_loop`, `fori_loop`, `cond`, `switch` and `scan`.

Semantics follow jax.lax's. Each function runs in one of three ways:

* outside jit_ps (no trace active, no traced operand) it is an ordinary Python loop or
  branch, so plain autograd differentiates it like any other Python code;
* inside jit_ps its bodies are traced once into sub-graphs, and the call becomes one
  equation that lowers to `stablehlo.while` / `stablehlo.case` (never unrolled);
* inside jit_ps with autograd boxes among its operands (`jit_ps(grad(f))`, and
  `grad(jit_ps(f))`, which re-traces f under autograd) the call is an autograd primitive
  whose VJP and JVP are written with these same functions and autograd's own
  `make_vjp` / `make_jvp`. They are traced and compiled in turn and are differentiable
  again, which is what makes `grad(grad(.))` and nested loops work. Under reverse mode
  a scan (and so a fori_loop with static bounds) saves residuals in its forward pass
  and its VJP is one reverse loop over them, as in jax (residuals.py; partial_eval.py
  splits the traced step).

Bodies may close over values that are being differentiated
(`lambda c, x: (np.tanh(W @ c + x), None)` inside `grad` of a function of W). autograd
cannot see a value reach a primitive through a Python closure, so before such a call the
body's closure (cells, defaults, partials, bound objects, containers) is searched for
autograd boxes ("closure conversion"): they become explicit operands of the primitive,
and the body is rebuilt with them replaced wherever it runs (`_Closure` in common.py). A
box the search cannot reach (a global, an attribute behind __slots__) is reported with a
clear error instead of losing its gradient.

Types follow jax: a body returns its carry with the same structure, shapes and dtypes
(otherwise a TypeError names the leaf), and branches agree. Python scalars in an initial
carry become float64/int64/... arrays in the Python path and the traced path alike;
weakly typed results of a body (a Python scalar, `i * 0.5`) take the carry's dtype. The
index of a fori_loop with Python-int bounds is weakly typed, as the Python int it is
outside jit_ps.

Layout: one module per concern, each importing only the ones above it in this list.

* common.py: operand types and checks, closure conversion, body tracing, the graph side of
  a primitive (`ControlFlowPrimitive`, `Params`) and the helpers its derivatives share;
* replay.py: replaying a traced graph on new operands, differentiably, and the functional
  in-place primitives (`scatter_add`, `set_items`, `dyn_getitem`, `dyn_update`); the
  control-flow primitives' own replay faces are registered by their modules below and
  found through the registry;
* while_loops.py: while_loop (user function, Python path, traced path, translation rule,
  derivatives, replay);
* residuals.py: scan's reverse mode with saved residuals (the planner and the VJP / JVP
  under a plan); it reaches scan's implementation through the spec of the call;
* scans.py: scan (user function, Python path, traced path, translation rule, replay) and
  its derivatives: the recomputing scheme, or the plan residuals.py made;
* fori_loops.py: fori_loop, a scan or a while_loop;
* conditionals.py: cond and switch.

The modules are not named after the functions they define, so that `control_flow.scan`
is always the function and never a submodule.
"""
from .while_loops import while_loop
from .scans import scan
from .fori_loops import fori_loop
from .conditionals import cond, switch

__all__ = ["while_loop", "fori_loop", "cond", "switch", "scan"]
