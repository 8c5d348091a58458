"""Collectives over a named axis: psum, pmean, pmax, pmin, all_gather, ppermute, axis_index.

Inside `pmap(f, axis_name="i")` the axis is the devices: `psum(x, "i")` is an all-reduce
(context.LoweringContext.collective). Inside `vmap(f, axis_name="b")` it is the batch: the
same call reduces over the examples (batching.BatchingContext.collective). Each is one
primitive whose translation rule asks the context, so one rule serves both, nested in
either order. Outside any such axis a call is an error naming the axis.

autograd differentiates them: psum's VJP is a psum of the cotangents (every device's copy
of the sum depends on every device's value), all_gather's is that psum sliced back to the
device's own block, ppermute's is the inverse permutation, pmax/pmin's routes the summed
cotangent to the devices that hold the extreme; their JVPs apply the collective to the
tangent (pmax/pmin: the extreme's). Arguments may be containers of arrays.
"""
import autograd.numpy as anp
import numpy as np
from autograd.extend import defjvp, defvjp, primitive
from autograd.tracer import getval, isbox

from . import registry, tracing, tree


def _unbound(name, axis_name):
    return NameError(f"unbound axis name {axis_name!r}: {name} runs inside pmap(..., axis_name={axis_name!r}) or "
                     f"vmap(..., axis_name={axis_name!r}), on a traced value")


def _raw(kind):
    def raw(x, axis_name, **params):
        raise _unbound(kind, axis_name)
    raw.__name__ = raw.__qualname__ = kind
    registry.register_translation_rule(
        raw, lambda ctx, x, axis_name, **params: ctx.collective(kind, ctx.asvalue(x), axis_name, **params))
    return raw


_psum_raw, _pmax_raw, _pmin_raw = _raw("psum"), _raw("pmax"), _raw("pmin")
_all_gather_raw, _ppermute_raw = _raw("all_gather"), _raw("ppermute")


def _axis_index_raw(axis_name):
    raise _unbound("axis_index", axis_name)


registry.register_translation_rule(_axis_index_raw,
                                   lambda ctx, axis_name: ctx.collective("axis_index", None, axis_name))

_psum, _pmax, _pmin = primitive(_psum_raw), primitive(_pmax_raw), primitive(_pmin_raw)
_all_gather, _ppermute = primitive(_all_gather_raw), primitive(_ppermute_raw)


def _apply(prim, raw, x, axis_name, **params):
    """One leaf: through autograd's wrapper when boxed (so it is differentiated); bound in the
    trace when tracing, even for a constant (psum(1, "i") counts the devices)."""
    if isbox(x):
        return prim(x, axis_name, **params)
    if tracing.is_tracing():
        if axis_name not in tracing.state.axes:
            raise _unbound(raw.__name__, axis_name)
        return tracing.bind(raw, (x, axis_name), params)
    raise _unbound(raw.__name__, axis_name)


def _each_leaf(prim, raw, x, axis_name, **params):
    return _mapped(lambda leaf: _apply(prim, raw, leaf, axis_name, **params), x)


def axis_size(axis_name):
    """The number of devices (pmap) or examples (vmap) along `axis_name`, while tracing."""
    size = tracing.state.axes.get(axis_name)
    if size is None:
        raise _unbound("axis_size", axis_name)
    return size


def psum(x, axis_name):
    """The sum over `axis_name` of x (an array or a container of them), on every member."""
    return _each_leaf(_psum, _psum_raw, x, axis_name)


def pmean(x, axis_name):
    """The mean over `axis_name` of x."""
    n = axis_size(axis_name)
    return _mapped(lambda leaf: leaf / n, psum(x, axis_name))


def pmax(x, axis_name):
    return _each_leaf(_pmax, _pmax_raw, x, axis_name)


def pmin(x, axis_name):
    return _each_leaf(_pmin, _pmin_raw, x, axis_name)


def all_gather(x, axis_name, axis=0, tiled=False):
    """Every member's x, stacked along a new axis `axis` in member order (`tiled`: concatenated
    along the existing axis `axis` instead)."""
    def one(leaf):
        ndim = np.ndim(getval(leaf)) + (0 if tiled else 1)  # the axes `axis` may name
        if not -ndim <= axis < ndim:
            raise ValueError(f"all_gather axis {axis} is out of range for a value of rank {np.ndim(getval(leaf))}"
                             + (" (tiled)" if tiled else ""))
        return _apply(_all_gather, _all_gather_raw, leaf, axis_name, axis=int(axis) % ndim, tiled=bool(tiled))
    return _mapped(one, x)


def ppermute(x, axis_name, perm):
    """Member `target` gets member `source`'s x for each (source, target) in `perm`; members
    that are no pair's target get zeros."""
    perm = tuple((int(s), int(t)) for s, t in perm)
    sources, targets = [s for s, _ in perm], [t for _, t in perm]
    if len(set(sources)) != len(sources) or len(set(targets)) != len(targets):
        raise ValueError(f"ppermute's perm must not repeat a source or a target: {perm}")
    return _each_leaf(_ppermute, _ppermute_raw, x, axis_name, perm=perm)


def axis_index(axis_name):
    """This member's position along `axis_name` (an int32 scalar)."""
    if not tracing.is_tracing() or axis_name not in tracing.state.axes:
        raise _unbound("axis_index", axis_name)
    return tracing.bind(_axis_index_raw, (axis_name,), {})


def _mapped(fn, x):
    """`fn` applied to every leaf of `x`, in its structure."""
    leaves, treedef = tree.flatten(x)
    return tree.unflatten(treedef, [fn(leaf) for leaf in leaves])


# ----- derivatives (written with the public functions: a cotangent may be a constant) -------
def _extreme_vjp(ans, x, axis_name, **params):
    return lambda g: psum(g, axis_name) * (x == ans)


def _extreme_jvp(g, ans, x, axis_name):
    return psum(anp.where(x == ans, g, 0.0), axis_name)


def _gather_vjp(ans, x, axis_name, axis, tiled):
    def vjp(g):
        total = psum(g, axis_name)
        shape = np.shape(getval(total))
        if tiled:  # the devices' blocks along `axis`, as their own axis
            total = anp.reshape(total, shape[:axis] + (-1, np.shape(getval(x))[axis]) + shape[axis + 1:])
        return anp.take(total, axis_index(axis_name), axis=axis)
    return vjp


defvjp(_psum, lambda ans, x, axis_name: lambda g: psum(g, axis_name))
defjvp(_psum, lambda g, ans, x, axis_name: psum(g, axis_name))
defvjp(_pmax, _extreme_vjp)
defvjp(_pmin, _extreme_vjp)
defjvp(_pmax, _extreme_jvp)
defjvp(_pmin, _extreme_jvp)
defvjp(_all_gather, _gather_vjp)
defjvp(_all_gather, lambda g, ans, x, axis_name, axis, tiled: all_gather(g, axis_name, axis=axis, tiled=tiled))
defvjp(_ppermute, lambda ans, x, axis_name, perm: lambda g: ppermute(g, axis_name, [(t, s) for s, t in perm]))
defjvp(_ppermute, lambda g, ans, x, axis_name, perm: ppermute(g, axis_name, perm))
