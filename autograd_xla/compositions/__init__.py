"""Compositions: the layer above control flow, for functions whose numpy/scipy/autograd code
cannot run on abstract values (it makes arrays of its operands, reads their data, or
assigns into concrete arrays) and that have no translation rule of their own. Importing the
package registers them all (those of scipy's functions once their module is imported:
`registry.when_imported`).

Each is given one of three ways:

* a *trace rule* (`registry.traces`) made of primitives that have rules: the nan* reductions
  (np.where, then the plain reduction), scipy.stats' densities, multigammaln, and
  scipy.linalg.cho_factor / sqrtm over primitives of their own, lowered in rules/linalg.py;
* a trace rule made of control flow: scipy.integrate.odeint (scan / while_loop / fori_loop)
  and autograd's fixed_point (while_loop);
* a *module patch* (`registry.register_module_patch`): a global of autograd or numpy that
  looks at concrete data, swapped for a traced equivalent while a trace is active
  (autograd_patches.py; autograd.numpy.linalg's in linalg.py), or autograd's derivative of
  logsumexp, swapped for one that reads the forward pass's terms (special.py).

Translation rules, which only lower, stay below in rules/; this layer imports them, the
tracer and control flow, and nothing above it (impurity, autodiff, api) imports back.
"""
from . import autograd_patches, fixed_points, integrate, linalg, nan_functions, rolled_vjps, special, stats  # noqa: F401
