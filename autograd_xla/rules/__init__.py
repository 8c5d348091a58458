"""Translation rules, one module per family of primitives; importing the package
registers them all (registry.py holds the table, context.py what a rule's `ctx` offers),
those of scipy's and autograd.scipy's functions once their module is imported
(`registry.when_imported`: importing those modules is slow).

A translation rule `rule(ctx, *args, **kwargs)` receives the primitive's own call
arguments, with traced arrays replaced by `hlo.Value`s, and returns Values built with
`ctx`. Adding a primitive is one `@lowers(prim)` function in its family's module. Rules
here only lower: compositions that trace into other primitives or into control flow
live above control flow, in compositions/.
"""
from . import (autograd_helpers, contractions, creation, dynamic, elementwise, fft,  # noqa: F401
               indexing, linalg, reductions, shape, signal, special)
