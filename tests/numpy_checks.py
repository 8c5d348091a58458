"""Shared pieces of the test_numpy_* files: random inputs of a dtype, checks over several
shapes in one compile, forward-mode (make_jvp) comparison, and exact checks for integer
and boolean results."""
import numpy as onp
from autograd import make_jvp
from autograd.builtins import SequenceBox
from autograd.builtins import tuple as ag_tuple

from autograd_xla import jit_ps
from helpers import assert_close, check, check_grad, check_value, dtypes_of

F64, F32, C128, C64 = onp.float64, onp.float32, onp.complex128, onp.complex64
FLOATS = [F64, F32]
COMPLEX = [C128, C64]

#: The shape cases every elementwise primitive must handle: a matrix, 0-d, size 1, empty.
SHAPES = [(2, 3), (), (1,), (0, 3)]
#: float32 reruns fewer of them: shape handling does not depend on the dtype, and each
#: extra case is extra XLA compile time.
SHAPES_F32 = [(2, 3), ()]


def shapes_for(dtype):
    return SHAPES if onp.dtype(dtype) in (onp.dtype(F64), onp.dtype(C128)) else SHAPES_F32


def rand(shape, dtype=F64, lo=-2.0, hi=2.0, seed=0):
    rng = onp.random.RandomState(seed + 7 * len(shape) + sum(shape))
    dtype = onp.dtype(dtype)
    if dtype.kind == "c":
        re = rng.uniform(lo, hi, size=shape)
        im = rng.uniform(lo, hi, size=shape)
        return onp.asarray(re + 1j * im).astype(dtype)
    if dtype.kind == "b":
        return rng.uniform(size=shape) > 0.5
    if dtype.kind in "iu":
        return onp.asarray(rng.randint(int(lo), int(hi) + 1, size=shape)).astype(dtype)
    return onp.asarray(rng.uniform(lo, hi, size=shape)).astype(dtype)


def rands(dtype=F64, lo=-2.0, hi=2.0, shapes=None, seed=0):
    shapes = shapes_for(dtype) if shapes is None else shapes
    return tuple(rand(s, dtype, lo, hi, seed + i) for i, s in enumerate(shapes))


def _leaves(out):
    if isinstance(out, SequenceBox):  # a list/tuple result being differentiated
        return [v for i in range(len(out)) for v in _leaves(out[i])]
    if isinstance(out, (tuple, list)):
        return [v for o in out for v in _leaves(o)]
    if isinstance(out, dict):
        return [v for k in sorted(out) for v in _leaves(out[k])]
    return [out]


def ravel_all(out):
    """All array leaves of a (nested) result as one vector: a single output to differentiate."""
    import autograd.numpy as anp
    leaves = _leaves(out)
    if not leaves:
        return anp.zeros(0)
    return anp.concatenate([anp.ravel(o) for o in leaves])


def check_family(fns, inputs, rtol=None, atol=None, grad=True, jvp=True, grad_rtol=None, exclude_jvp=(),
                 both_ways=False):
    """Many primitives in one program: `fns[name](*inputs[name])` for every name.

    Values are compared per name (and per leaf); the gradient of all results together is
    taken with respect to the dict of inputs, so a wrong gradient is reported under its
    name; so is the JVP's input tangent. Costs a handful of compiles for the whole family.
    The derivatives are compared as jit_ps(grad(f)) and jit_ps(jvp of f); `both_ways` adds
    grad(jit_ps(f)) and make_jvp(jit_ps(f)), which exercise autodiff.py rather than the rules.
    """
    names = sorted(fns)
    value = lambda inp: {n: fns[n](*inp[n]) for n in names}  # noqa: E731
    check_value(value, inputs, rtol=rtol, atol=atol)
    flat = lambda inp: ravel_all([fns[n](*inp[n]) for n in names])  # noqa: E731
    if grad:
        check_grad(flat, inputs, rtol=grad_rtol or rtol, atol=atol, both_ways=both_ways)
    if jvp:
        jnames = [n for n in names if n not in exclude_jvp]
        # a tuple, not one concatenated vector: autograd's JVP of concatenate is quadratic in
        # the number of pieces
        jflat = lambda inp: ag_tuple(_leaves([fns[n](*inp[n]) for n in jnames]))  # noqa: E731
        check_jvp(jflat, {n: inputs[n] for n in jnames}, rtol=grad_rtol or rtol, atol=atol, both_ways=both_ways)


def sweep(f):
    """f applied to each argument: how one function meets all the shape cases at once."""
    return lambda *xs: tuple(f(x) for x in xs)


def check_each(f, xs, rtol=None, atol=None, grad=True, jvp=False, grad_rtol=None, both_ways=True):
    """f applied to every array of the tuple xs (the shape cases) in one program."""
    check_family({"f": sweep(f)}, {"f": tuple(xs)}, rtol, atol, grad, jvp, grad_rtol, both_ways=both_ways)


def tangent_like(x, seed=1):
    if isinstance(x, (tuple, list)):
        return type(x)(tangent_like(v, seed + i) for i, v in enumerate(x))
    if isinstance(x, dict):
        return {k: tangent_like(x[k], seed + i) for i, k in enumerate(sorted(x))}
    x = onp.asarray(x)
    return rand(x.shape, x.dtype, -1.0, 1.0, seed + 11)


def check_jvp(f, *args, argnum=0, rtol=None, atol=None, both_ways=True):
    """Forward mode: autograd's make_jvp plain, traced whole, and around jit_ps(f)."""
    v = tangent_like(args[argnum])

    def fwd(*a):
        rest = list(a[:-1])
        x = rest[argnum]
        g = lambda x: f(*rest[:argnum], x, *rest[argnum + 1:])  # noqa: E731
        return make_jvp(g)(x)(a[-1])[1]  # the tangent: values are compared elsewhere

    expected = fwd(*args, v)
    dts = dtypes_of(*args)
    assert_close(jit_ps(fwd)(*args, v), expected, rtol, atol, path="jit(jvp)", inputs=dts)
    if both_ways:
        jf = jit_ps(f)
        g = lambda x: jf(*args[:argnum], x, *args[argnum + 1:])  # noqa: E731
        assert_close(make_jvp(g)(args[argnum])(v)[1], expected, rtol, atol, path="jvp(jit)", inputs=dts)


def check_exact(f, *args):
    """Integer/boolean results: exact equality and dtype."""
    return check_value(f, *args)


__all__ = ["F64", "F32", "C128", "C64", "FLOATS", "COMPLEX", "SHAPES", "shapes_for", "rand", "rands", "check_each",
           "check_family", "sweep", "ravel_all",
           "check_jvp", "check_exact", "check", "check_value", "check_grad", "assert_close", "jit_ps"]
