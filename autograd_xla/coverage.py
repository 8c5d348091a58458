"""Which of autograd's differentiable primitives compile under jit_ps, and how.

    python -m autograd_xla.coverage [--only FAMILY] [--no-run] [--no-batching] [--progress | --quiet]
                                    [NAME_SUBSTRING ...]

(`--help` says what each option does; `--only stats` reports one family, see FAMILIES.)

Primitives are discovered at run time from autograd's own registries
(`autograd.core.primitive_vjps` and `primitive_jvps`) after importing every autograd module
that defines some, so the report covers whatever autograd and this package hold when it
runs, rules added by anyone included. For each primitive it says:

* rule: `lower` (a translation rule), `trace` (a trace rule), `none, traces` (no rule, but
  its raw function runs as plain Python on traced values: container and VSpace
  primitives), or `none`;
* fwd / vjp / jvp: whether a small call, its VJP and its JVP compile under
  `jit_ps(..., fallback="error")` and agree with plain autograd. Each is driven by an
  example call from `EXAMPLES` (elementwise ufuncs get a generic one); a primitive
  without an example says so rather than guess. `n/a` means autograd defines no VJP/JVP
  for the example's array arguments.
* batching: whether `vmap` of the example call over a batch of 3 examples (its float and
  complex array arguments perturbed per example; the others fixed, as in the columns
  before) compiles under `jit_ps(..., fallback="error")`, and whether its value and the
  VJP (the gradient of a weighted sum of its float results with respect to the batched
  arguments) agree with a Python loop over the examples in plain autograd: `ok`; `loop`
  when they agree but some builder op has no batching rule and ran once per example in a
  loop inside the program (the exceptions list names the ops); `differs`; `FAIL`; `n/a`
  without float arguments to batch. `--no-batching` leaves it out ("-").

The totals count each column's values by the same words the column shows. Every failure
is listed at the end with its reason. Checking all ~200 primitives takes minutes: progress
goes to stderr.
"""
import argparse
import importlib
import pkgutil
import re
import sys
import time
import traceback
import warnings

import numpy as onp
import autograd.core
import autograd.numpy as anp
import autograd.builtins as ag_builtins
from autograd import grad
from autograd.builtins import DictBox, SequenceBox
from autograd.core import make_jvp, make_vjp, primitive_jvps, primitive_vjps
from autograd.extend import vspace
from autograd.numpy import numpy_vjps
from autograd.tracer import getval

from . import backend as backend_mod, batching as builder_batching, registry
from .api import jit_ps
from .transforms import vmap

_MODULES = ["autograd.numpy", "autograd.numpy.linalg", "autograd.numpy.fft", "autograd.scipy.special",
            "autograd.scipy.stats", "autograd.scipy.linalg", "autograd.scipy.signal", "autograd.scipy.integrate",
            "autograd.builtins", "autograd.misc.fixed_points"]

#: Relative tolerance for "agrees with plain autograd": a report, not a test. RTOL_32 where the
#: default platform computes float64 in 32 bits (backend.FLOAT64_PLATFORMS: a TPU), whose
#: float32 tanh differs from numpy's float64 by ~1e-7 relative and a float32 sum by more.
RTOL = 1e-6
RTOL_32 = 1e-4


def _rtol():
    return RTOL if backend_mod.default_platform() in backend_mod.FLOAT64_PLATFORMS else RTOL_32


# ----- discovery -----------------------------------------------------------------------------
def import_autograd_modules():
    for name in _MODULES:
        importlib.import_module(name)
    import autograd.scipy.stats as stats
    for info in pkgutil.iter_modules(stats.__path__):
        importlib.import_module(f"autograd.scipy.stats.{info.name}")


class PrimitiveInfo:
    """One raw function with its autograd wrappers (aliases such as psi/digamma share one)."""

    __slots__ = ("raw", "wrappers", "name", "has_vjp", "has_jvp")

    def __init__(self, raw, wrappers, name, has_vjp, has_jvp):
        self.raw, self.wrappers, self.name, self.has_vjp, self.has_jvp = raw, wrappers, name, has_vjp, has_jvp

    @property
    def wrapper(self):
        return self.wrappers[0]

    def __repr__(self):
        return f"<primitive {self.name}>"


def discover():
    """Every primitive with a VJP or JVP, one entry per raw function, sorted by name."""
    import_autograd_modules()

    by_raw = {}
    for wrapper in list(primitive_vjps) + list(primitive_jvps):
        raw = wrapper.fun
        if (getattr(raw, "__module__", None) or "").startswith("autograd_xla"):
            continue  # this package's own primitives (jit_call, control flow) are not autograd's
        try:
            entry = by_raw.setdefault(raw, [])
        except TypeError:  # unhashable raw function: keep it on its own
            entry = by_raw.setdefault(id(raw), [])
        if wrapper not in entry:
            entry.append(wrapper)
    infos = []
    for wrappers in by_raw.values():
        raw = wrappers[0].fun
        infos.append(PrimitiveInfo(raw, wrappers, primitive_name(raw), any(w in primitive_vjps for w in wrappers),
                                   any(w in primitive_jvps for w in wrappers)))
    return sorted(infos, key=lambda p: p.name)


def _public_modules():
    mods = [onp, onp.linalg, onp.fft]
    for name in ("scipy.special", "scipy.linalg", "scipy.signal", "scipy.integrate", "scipy.stats"):
        try:
            mods.append(importlib.import_module(name))
        except ImportError:
            pass
    return mods


def primitive_name(raw):
    """A stable dotted name: the public module that exports it, else module.qualname."""
    owner = getattr(raw, "__self__", None)
    if owner is not None and not isinstance(owner, type(onp)):  # a bound method: scipy.stats.norm.logpdf
        inst_name = getattr(owner, "name", None)
        if not isinstance(inst_name, str):
            import scipy.stats
            inst_name = next((k for k, v in vars(scipy.stats).items() if v is owner), type(owner).__name__)
        mod = type(owner).__module__.split("._")[0]
        return f"{mod}.{inst_name}.{raw.__name__}"
    name = getattr(raw, "__name__", None) or type(raw).__name__
    for mod in _public_modules():
        if getattr(mod, name, None) is raw:
            return f"{mod.__name__}.{name}"
    qual = getattr(raw, "__qualname__", name)
    return f"{getattr(raw, '__module__', None) or '?'}.{qual}"


#: The families `--only` selects, by prefix of the primitive's name (the first family whose
#: prefix matches; "misc" holds the rest: autograd.core's vector-space operations, autograd.misc).
FAMILIES = {
    "linalg": ("numpy.linalg.", "scipy.linalg.", "autograd.scipy.linalg."),
    "fft": ("numpy.fft.", "autograd.numpy.fft."),
    "special": ("scipy.special.", "autograd.scipy.special."),
    "stats": ("scipy.stats.", "autograd.scipy.stats."),
    "signal": ("scipy.signal.", "autograd.scipy.signal."),
    "integrate": ("scipy.integrate.", "autograd.scipy.integrate."),
    "builtins": ("autograd.builtins.",),
    "numpy": ("numpy.", "autograd.numpy."),
    "misc": (),
}


def family(name):
    """The family (a key of FAMILIES) of the primitive named `name`."""
    return next((f for f, prefixes in FAMILIES.items() if name.startswith(prefixes)), "misc")


def selects(selector, name):
    """Whether `selector` (a key of FAMILIES, or a part of a name) selects the primitive `name`."""
    return family(name) == selector if selector in FAMILIES else selector in name


# ----- examples ------------------------------------------------------------------------------
class Example:
    """A call of the primitive: `call(wrapper, *args, **kwargs)` (default: wrapper(*args, **kwargs)).

    Float and complex ndarrays among args (and tuples/lists of them) are the traced, and
    differentiated, inputs; everything else is passed as a constant."""

    __slots__ = ("args", "kwargs", "call")

    def __init__(self, *args, call=None, **kwargs):
        self.args, self.kwargs, self.call = args, kwargs, call


class Const:
    """An array argument of an example passed as a constant, not traced or differentiated."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _r(shape, lo=0.2, hi=0.8, seed=0, dtype=onp.float64):
    rng = onp.random.RandomState(seed + 17 * len(shape) + sum(shape))
    out = rng.uniform(lo, hi, size=shape)
    if onp.dtype(dtype).kind == "c":
        out = out + 1j * rng.uniform(lo, hi, size=shape)
    return onp.asarray(out).astype(dtype)


def _spd(n, seed=0):
    a = _r((n, n), -1, 1, seed)
    return a @ a.T + n * onp.eye(n)


def _vs(x):
    return vspace(x)


def _examples():
    """name -> Example. Built on first use (scipy and the stats modules import lazily)."""
    A, B, M, V = _r((2, 3)), _r((3, 4), seed=1), _r((3, 3), seed=2), _r((4,), seed=3)
    T3 = _r((2, 3, 4), seed=4)
    E = Example
    ex = {
        # elementwise with domains the generic example misses
        "numpy.arccosh": E(_r((3,), 1.2, 3.0)),
        "numpy.sinc": E(_r((3,), 0.2, 2.0)),
        "numpy.nan_to_num": E(A),
        "numpy.real_if_close": E(A),
        "numpy.angle": E(_r((3,), dtype=onp.complex128)),
        "numpy.real": E(_r((3,), dtype=onp.complex128)),
        "numpy.imag": E(_r((3,), dtype=onp.complex128)),
        "numpy.clip": E(_r((6,), -1, 1), -0.5, 0.5),
        "numpy.where": E(A > 0.5, A, _r((2, 3), seed=5)),
        "numpy.astype": E(A, onp.float32),
        # reductions
        "numpy.sum": E(T3, axis=1),
        "numpy.mean": E(T3, axis=(0, 2)),
        "numpy.prod": E(A, axis=0),
        "numpy.max": E(A, axis=1),
        "numpy.min": E(A),
        "numpy.amax": E(A, axis=0),
        "numpy.amin": E(A, axis=1),
        "numpy.var": E(T3, axis=1, ddof=1),
        "numpy.std": E(T3, axis=0),
        "numpy.cumsum": E(A, axis=1),
        "numpy.diff": E(A, axis=1),
        "numpy.gradient": E(B, axis=1),
        "numpy.sort": E(V),
        "numpy.partition": E(V, 2),
        # shapes
        "numpy.reshape": E(A, (3, 2)),
        "numpy.ravel": E(A),
        "numpy.transpose": E(T3, (2, 0, 1)),
        "numpy.swapaxes": E(T3, 0, 2),
        "numpy.moveaxis": E(T3, 0, -1),
        "numpy.rollaxis": E(T3, 2),
        "numpy.expand_dims": E(A, 1),
        "numpy.squeeze": E(_r((2, 1, 3))),
        "numpy.broadcast_to": E(_r((1, 3)), (4, 3)),
        "numpy.atleast_1d": E(onp.array(0.5)),
        "numpy.atleast_2d": E(V),
        "numpy.atleast_3d": E(A),
        "numpy.repeat": E(A, 2, axis=1),
        "numpy.tile": E(A, (2, 1)),
        "numpy.roll": E(A, 1, axis=1),
        "numpy.rot90": E(A),
        "numpy.flipud": E(A),
        "numpy.fliplr": E(A),
        "numpy.tril": E(M),
        "numpy.triu": E(M, 1),
        "numpy.diag": E(M),
        "numpy.diagonal": E(T3[:, :3, :3], 0, -1, -2),
        "numpy.trace": E(M),
        "numpy.pad": E(A, 1, "constant"),
        "numpy.split": E(B, 2, axis=1),
        "numpy.array_split": E(B, 3, axis=1),
        "numpy.hsplit": E(B, 2),
        "numpy.vsplit": E(_r((4, 3)), 2),
        "numpy.dsplit": E(T3, 2),
        "numpy.full": E((2, 3), onp.array(0.7)),
        "numpy.linspace": E(onp.array(0.1), onp.array(0.9), 5),
        # contractions
        "numpy.dot": E(A, B),
        "numpy.matmul": E(T3, _r((4, 2), seed=6)),
        "numpy.tensordot": E(T3, _r((3, 4, 2), seed=7), 2),
        "numpy.einsum": E("ijk,jk->i", T3, _r((3, 4), seed=8)),
        "numpy.inner": E(A, _r((4, 3), seed=9)),
        "numpy.outer": E(V, _r((3,), seed=10)),
        "numpy.kron": E(A, _r((2, 2), seed=11)),
        "numpy.cross": E(_r((4, 3), seed=12), _r((4, 3), seed=13)),
        # autograd's helper primitives
        "autograd.numpy.numpy_boxes.ArrayBox.__getitem__": E(A, (slice(None), onp.array([2, 0, 2]))),
        # untake's result is sparse: densify it into zeros of the (traced) array's vector space
        "autograd.numpy.numpy_vjps.untake": E(
            V[:3], onp.array([1, 1, 3]), V,
            call=lambda w, x, idx, a: autograd.core.sparse_add(_vs(a), None, w(x, idx, _vs(a)))),
        "autograd.numpy.numpy_vjps.dot_adjoint_0": E(B, _r((2, 4), seed=14), _meta(A), _meta(B)),
        "autograd.numpy.numpy_vjps.dot_adjoint_1": E(A, _r((2, 4), seed=14), _meta(A), _meta(B)),
        "autograd.numpy.numpy_vjps.tensordot_adjoint_0": E(B, _r((2, 4), seed=14), 1, 2, 2),
        "autograd.numpy.numpy_vjps.tensordot_adjoint_1": E(A, _r((2, 4), seed=14), 1, 2, 2),
        "autograd.numpy.numpy_wrapper._array_from_scalar_or_array": E((), {}, A),
        "autograd.numpy.numpy_wrapper.array_from_args": E((), {}, V, _r((4,), seed=15)),
        "autograd.numpy.numpy_wrapper.concatenate_args": E(1, A, _r((2, 2), seed=16)),
        "autograd.numpy.numpy_wrapper.make_diagonal": E(A, 0, -1, -2),
        "autograd.numpy.fft.truncate_pad": E(A, (3, 2)),
        # autograd.builtins and the VSpace operations
        "autograd.builtins.container_take": E((A, V), 1),
        "autograd.builtins.container_untake": E(
            V, 1, (A, V), call=lambda w, x, idx, tup: autograd.core.sparse_add(_vs(tup), None, w(x, idx, _vs(tup)))),
        "autograd.builtins.make_sequence": E(tuple, A, V),
        "autograd.builtins.sequence_extend_right": E((A,), V),
        "autograd.builtins.sequence_extend_left": E((A,), V),
        "autograd.builtins._make_dict": E(["a", "b"], [A, V]),
        "autograd.core.VSpace.add": E(A, A * 2, call=lambda w, x, y: w(_vs(A), x, y)),
        "autograd.core.VSpace.mut_add": E(A, A * 2, call=lambda w, x, y: w(_vs(A), x * 1.0, y)),
        "autograd.core.VSpace.scalar_mul": E(A, call=lambda w, x: w(_vs(A), x, 3.0)),
        "autograd.core.VSpace.inner_prod": E(A, A * 2, call=lambda w, x, y: w(_vs(A), x, y)),
        "autograd.core.VSpace.covector": E(_r((3,), dtype=onp.complex128),
                                           call=lambda w, x: w(_vs(onp.zeros(3, complex)), x)),
        "autograd.core.sparse_add": E(V, onp.array([0, 2]), call=lambda w, x, idx: w(
            _vs(x), None, numpy_vjps.untake(x[:2], idx, _vs(x)))),
        # numpy.linalg and numpy.fft
        "numpy.linalg.cholesky": E(_spd(3)),
        "numpy.linalg.det": E(M),
        "numpy.linalg.slogdet": E(M),
        "numpy.linalg.inv": E(M),
        "numpy.linalg.pinv": E(_r((3, 2), seed=17)),
        "numpy.linalg.solve": E(M, _r((3, 2), seed=18)),
        "numpy.linalg.eigh": E(_spd(3, 1)),
        "numpy.linalg.eig": E(_spd(3, 2), call=lambda w, a: _real_eig(w(a))),
        "numpy.linalg.svd": E(_r((3, 2), seed=19), full_matrices=False),
        "numpy.linalg.norm": E(A),
        "numpy.fft.fftshift": E(A),
        "numpy.fft.ifftshift": E(A),
        # scipy
        "scipy.special.logsumexp": E(A, axis=1),
        "scipy.special.polygamma": E(1, _r((3,), 0.5, 2.0)),
        "scipy.special.multigammaln": E(_r((3,), 2.0, 3.0), 2),
        "scipy.special.yn": E(2, _r((3,), 0.5, 2.0)),
        "scipy.special.jv": E(1.5, _r((3,), 0.5, 2.0)),
        "scipy.special.iv": E(1.5, _r((3,), 0.5, 2.0)),
        "scipy.special.ive": E(1.5, _r((3,), 0.5, 2.0)),
        "scipy.special.gammainc": E(_r((3,), 1.0, 2.0), _r((3,), 0.5, 2.0, seed=1)),
        "scipy.special.gammaincc": E(_r((3,), 1.0, 2.0), _r((3,), 0.5, 2.0, seed=1)),
        "scipy.special.betainc": E(_r((3,), 1.0, 2.0), _r((3,), 1.0, 2.0, seed=1), _r((3,), seed=2)),
        "scipy.special.erfcinv": E(_r((3,), 0.3, 1.7)),
        "scipy.linalg.solve_triangular": E(onp.tril(M) + 2 * onp.eye(3), _r((3, 2), seed=20), lower=True),
        "scipy.linalg.sqrtm": E(_spd(3, 3)),
        "scipy.linalg.solve_sylvester": E(_spd(3, 4), _spd(2, 5), _r((3, 2), seed=21)),
        "scipy.linalg.solve_banded": E((1, 1), _r((3, 4), 1.0, 2.0, seed=22), _r((4,), seed=23)),
        "autograd.scipy.signal.convolve": E(_r((5,), seed=24), _r((3,), seed=25)),
        # differentiated with respect to y0 here; t and args work when passed as autograd tuples
        "scipy.integrate.odeint": E(_r((2,), seed=26), Const(onp.linspace(0.0, 0.5, 3)),
                                    call=lambda w, y0, t: w(_ode_rhs, y0, t, (0.7,))),
        "autograd.misc.fixed_points.fixed_point": E(_r((3,), 1.0, 3.0, seed=27),
                                                    call=lambda w, a: w(_newton_sqrt, a, onp.ones(3), _gap, 1e-12)),
        "scipy.stats.multivariate_normal.logpdf": E(_r((3,), seed=28), _r((3,), seed=29), _spd(3, 6)),
        "scipy.stats.multivariate_normal.pdf": E(_r((3,), seed=28), _r((3,), seed=29), _spd(3, 6)),
        "scipy.stats.multivariate_normal.entropy": E(_r((3,), seed=29), _spd(3, 6)),
        "scipy.stats.dirichlet.logpdf": E(onp.array([0.2, 0.3, 0.5]), _r((3,), 1.0, 3.0, seed=30)),
        "scipy.stats.dirichlet.pdf": E(onp.array([0.2, 0.3, 0.5]), _r((3,), 1.0, 3.0, seed=30)),
    }
    for fft in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn"):
        ex[f"numpy.fft.{fft}"] = E(_r((2, 4), dtype=onp.complex128, seed=31))
    for fft in ("rfft", "rfft2", "rfftn"):
        ex[f"numpy.fft.{fft}"] = E(_r((2, 4), seed=32))
    for fft in ("irfft", "irfft2", "irfftn"):
        ex[f"numpy.fft.{fft}"] = E(_r((2, 3), dtype=onp.complex128, seed=33))
    x = _r((3,), 0.5, 2.0, seed=34)
    for method in ("pdf", "cdf", "sf", "logpdf", "logcdf", "logsf"):
        ex[f"scipy.stats.norm.{method}"] = E(x, onp.array(0.3), onp.array(1.5))
    for method in ("pdf", "cdf", "logpdf", "logcdf"):
        ex[f"scipy.stats.t.{method}"] = E(x, onp.array(3.5), onp.array(0.2), onp.array(1.3))
    for method in ("pdf", "cdf", "logpdf"):
        ex[f"scipy.stats.gamma.{method}"] = E(x, onp.array(2.0))
        ex[f"scipy.stats.chi2.{method}"] = E(x, onp.array(3.0))
        ex[f"scipy.stats.beta.{method}"] = E(_r((3,), seed=35), onp.array(2.0), onp.array(3.0))
    for method in ("pmf", "cdf", "logpmf"):
        ex[f"scipy.stats.poisson.{method}"] = E(onp.array([0, 2, 5]), _r((3,), 1.0, 3.0, seed=36))
    return ex


def _meta(x):
    return onp.shape(x), onp.ndim(x), onp.result_type(x), onp.iscomplexobj(x)


def _real_eig(result):
    """eig's eigenvectors have an arbitrary phase: differentiate its eigenvalues only."""
    return anp.real(result[0])


def _ode_rhs(y, t, a):
    return -a * y + anp.sin(t)


def _newton_sqrt(a):
    return lambda x: 0.5 * (x + a / x)


def _gap(x, y):
    return anp.max(anp.abs(x - y))


def generic_example(raw):
    """Elementwise functions (numpy and scipy ufuncs): arguments in (0.2, 0.8)."""
    if isinstance(raw, onp.ufunc):
        return Example(*[_r((3,), seed=i) for i in range(raw.nin)])
    return None


_EXAMPLE_TABLE = None


def example_for(info):
    global _EXAMPLE_TABLE
    if _EXAMPLE_TABLE is None:
        _EXAMPLE_TABLE = _examples()
    ex = _EXAMPLE_TABLE.get(info.name)
    return ex if ex is not None else generic_example(info.raw)


# ----- checking one primitive ----------------------------------------------------------------
class Row:
    """The report line of one primitive."""

    __slots__ = ("name", "rule", "fwd", "vjp", "jvp", "batching", "errors", "aliases", "seconds")

    def __init__(self, name):
        self.name, self.rule, self.fwd, self.vjp, self.jvp, self.batching = name, "-", "-", "-", "-", "-"
        self.errors, self.aliases, self.seconds = [], [], 0.0

    def as_dict(self):
        return {k: getattr(self, k) for k in self.__slots__}


def _is_traced(x):
    if isinstance(x, onp.ndarray):
        return x.dtype.kind in "fc"
    if isinstance(x, (tuple, list)) and x and not isinstance(x, str):
        return all(_is_traced(v) for v in x)
    return False


def _like(x, seed, scale=1.0):
    """A deterministic cotangent/tangent with the structure, shapes and dtypes of x."""
    if isinstance(x, SequenceBox):
        return tuple(_like(x[i], seed + i, scale) for i in range(len(x)))
    if isinstance(x, (tuple, list)):
        items = [_like(v, seed + i, scale) for i, v in enumerate(x)]
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)  # namedtuples: eigh, svd
    if isinstance(x, dict):
        return {k: _like(x[k], seed + i, scale) for i, k in enumerate(sorted(x))}
    a = onp.asarray(x)
    return (_r(a.shape, 0.5, 1.5, seed, a.dtype if a.dtype.kind in "fc" else onp.float64) * scale).astype(
        a.dtype if a.dtype.kind in "fc" else onp.float64)


def _close(got, expected, path="value"):
    """None if got matches expected (structure, shapes, dtypes, values), else a reason."""
    if isinstance(expected, dict):
        if not isinstance(got, dict) or set(got) != set(expected):
            return f"{path}: structure differs"
        for k in expected:
            r = _close(got[k], expected[k], f"{path}[{k!r}]")
            if r:
                return r
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            return f"{path}: structure differs ({type(got).__name__} vs {type(expected).__name__})"
        for i, (g, e) in enumerate(zip(got, expected)):
            r = _close(g, e, f"{path}[{i}]")
            if r:
                return r
        return None
    g, e = onp.asarray(got), onp.asarray(expected)
    if g.shape != e.shape:
        return f"{path}: shape {g.shape} vs {e.shape}"
    if g.dtype != e.dtype:
        return f"{path}: dtype {g.dtype} vs {e.dtype}"
    if e.dtype.kind in "fc":
        finite = onp.isfinite(e)
        scale = float(onp.max(onp.abs(e[finite]))) if finite.any() else 1.0
        rtol = _rtol()
        if not onp.allclose(g, e, rtol=rtol, atol=rtol * max(scale, 1e-300), equal_nan=True):
            err = onp.max(onp.abs(g - e)) / max(scale, 1e-300)
            return f"{path}: values differ from plain autograd (max error {err:.2e} of the largest value)"
    elif not onp.array_equal(g, e):
        return f"{path}: values differ from plain autograd"
    return None


def _reason(e):
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first[:200]}"


def check_primitive(info, run=True, example=None, batching=True):
    """The report Row of one primitive (a PrimitiveInfo, or an autograd primitive wrapper),
    driven by `example` if given, else by the table's example for it; `batching=False`
    leaves the batching column out ("-")."""
    if not isinstance(info, PrimitiveInfo):
        info = PrimitiveInfo(info.fun, [info], primitive_name(info.fun), info in primitive_vjps,
                             info in primitive_jvps)
    row = Row(info.name)
    row.aliases = [w.__name__ for w in info.wrappers[1:]]
    registry.load_builtin()  # the package's own rules, which its look-ups do not import (registry._builtin_first)
    entry = registry.lookup(info.raw)
    row.rule = "none" if entry is None else "lower" if entry.lowering else "trace" if entry.trace else "none"
    if not run:
        return row
    example = example or example_for(info)
    if example is None:
        row.fwd = row.vjp = row.jvp = "no example"
        if batching:
            row.batching = "no example"
        return row
    t0 = time.perf_counter()
    wrapper = info.wrapper
    args, kwargs = list(example.args), dict(example.kwargs)
    pos = [i for i, a in enumerate(args) if _is_traced(a)]

    def apply(*traced):
        full = [a.value if isinstance(a, Const) else a for a in args]
        for i, t in zip(pos, traced):
            full[i] = t
        return example.call(wrapper, *full, **kwargs) if example.call else wrapper(*full, **kwargs)

    inputs = [args[i] for i in pos]

    def record(kind, e):
        row.errors.append(f"{kind}: {_reason(e)}")
        return "FAIL"

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # forward
        try:
            expected = apply(*inputs)
        except Exception as e:  # the example itself is wrong: say so
            row.fwd = record("example", e)
            row.vjp = row.jvp = row.batching = "-"
            return row
        try:
            got = jit_ps(apply, fallback="error")(*inputs)
            bad = _close(got, expected)
            if bad is None:
                row.fwd = "ok"
            else:
                record("fwd", AssertionError(bad))
                row.fwd = "differs"
            if row.rule == "none":  # compiled although the primitive itself has no rule
                row.rule = "none, traces"
        except Exception as e:
            row.fwd = record("fwd", e)

        # reverse mode: every traced argument autograd can differentiate
        def one_vjp(k, ins, g):
            def f(x):
                return apply(*ins[:k], x, *ins[k + 1:])
            return make_vjp(f, ins[k])[0](g)

        row.vjp = _derivative_status(
            "vjp", info.has_vjp, inputs, lambda k, ins: one_vjp(k, ins, _like(expected, 50)),
            lambda ks: jit_ps(lambda ins, g: tuple(one_vjp(k, ins, g) for k in ks), fallback="error")(
                tuple(inputs), _like(expected, 50)), record)

        def one_jvp(k, ins, v):
            def f(x):
                return apply(*ins[:k], x, *ins[k + 1:])
            return make_jvp(f, ins[k])(v)[1]  # autograd.core.make_jvp(fun, x)(g) -> (ans, tangent)

        row.jvp = _derivative_status(
            "jvp", info.has_jvp, inputs, lambda k, ins: one_jvp(k, ins, _like(ins[k], 70 + k, 0.5)),
            lambda ks: jit_ps(lambda ins, vs: tuple(one_jvp(k, ins, v) for k, v in zip(ks, vs)), fallback="error")(
                tuple(inputs), tuple(_like(inputs[k], 70 + k, 0.5) for k in ks)), record)
    if batching:
        row.batching = _batching_status(apply, inputs, info.has_vjp, record, row)
    row.seconds = time.perf_counter() - t0
    return row


def _derivative_status(kind, defined, inputs, plain_one, jitted_all, record):
    if not defined:
        return "no " + kind.upper()
    ks, expected = [], []
    for k in range(len(inputs)):
        try:
            expected.append(plain_one(k, inputs))
            ks.append(k)
        except Exception as e:
            # autograd cannot differentiate with respect to this argument: it raises
            # NotImplementedError for an argnum without a VJP/JVP, TypeError or KeyError for a
            # type it has no vector space for (an integer array, a string)
            if isinstance(e, (NotImplementedError, KeyError, TypeError)):
                continue
            return record(f"{kind} (plain autograd on the example)", e)
    if not ks:
        return "n/a"
    try:
        got = jitted_all(ks)
    except Exception as e:
        return record(kind, e)
    bad = _close(list(got), expected, kind)
    if bad is None:
        return "ok"
    record(kind, AssertionError(bad))
    return "differs"


# ----- the batching column -------------------------------------------------------------------
#: How many examples the batching column maps over
BATCH = 3

_NO_RULE = re.compile(r"vmap: '([^']+)' has no batching rule")


def _perturbed(x, k):
    """Example k of a batch built from the float/complex array x (k = 0 is x itself): each
    element scaled by its own factor within 5% * k of 1 (complex factors for complex x, so
    that a phase changes too), symmetric matrices kept symmetric and probability vectors
    summing to 1, so that the examples' domains (positive definite, simplex) hold."""
    if isinstance(x, (tuple, list)):
        return type(x)(_perturbed(v, k) for v in x)
    if k == 0:
        return x
    rng = onp.random.RandomState(1000 + k)
    u = rng.uniform(-1, 1, x.shape)
    if x.dtype.kind == "c":
        u = u + 1j * rng.uniform(-1, 1, x.shape)
    if x.ndim >= 2 and x.shape[-1] == x.shape[-2] and onp.allclose(x, onp.swapaxes(x, -1, -2)):
        u = (u + onp.swapaxes(u, -1, -2)) / 2
    out = x * (1 + 0.05 * k * u)
    if x.ndim >= 1 and x.dtype.kind == "f" and (x >= 0).all() and onp.allclose(x.sum(-1), 1):
        out = out / out.sum(-1, keepdims=True)
    return out.astype(x.dtype)


def _stacked(xs):
    """The batch of examples xs (a list of one argument's examples), batch axis first."""
    if isinstance(xs[0], (tuple, list)):
        return type(xs[0])(_stacked([x[i] for x in xs]) for i in range(len(xs[0])))
    return onp.stack(xs)


def _example_of(b, k):
    """Example k of the batched argument b (an array, a tuple/list of them, or their boxes)."""
    if isinstance(b, (tuple, list, SequenceBox)):
        items = [_example_of(b[i], k) for i in range(len(b))]
        kind = list if isinstance(b, list) or isinstance(getval(b), list) else tuple
        return ag_builtins.list(items) if kind is list else ag_builtins.tuple(items)
    return b[k]


def _stack_results(outs):
    """The examples' results of a plain loop, stacked as vmap stacks them (structure kept)."""
    first = outs[0]
    if isinstance(first, dict):
        return {key: _stack_results([o[key] for o in outs]) for key in first}
    if isinstance(first, (tuple, list)):
        return [_stack_results([o[i] for o in outs]) for i in range(len(first))]
    return onp.stack([onp.asarray(o) for o in outs])


def _float_leaves(x):
    """The float and complex array leaves of a result (boxed by autograd or not), in order."""
    if isinstance(x, (tuple, list, SequenceBox)):
        return [leaf for i in range(len(x)) for leaf in _float_leaves(x[i])]
    if isinstance(x, (dict, DictBox)):
        return [leaf for key in sorted(getval(x)) for leaf in _float_leaves(x[key])]
    value = getval(x)
    dtype = value.dtype if hasattr(value, "dtype") else onp.asarray(value).dtype  # traced values have one
    return [x] if onp.dtype(dtype).kind in "fc" else []


def _loss(weights, leaves):
    """A weighted sum (real part) of the result's float leaves: the scalar the VJP check
    differentiates (weights, not ones, so that a gradient cannot hide behind a sum)."""
    total = 0.0
    for w, leaf in zip(weights, leaves):
        total = total + anp.real(anp.sum(w * leaf))
    return total


def _batching_status(apply, inputs, has_vjp, record, row):
    """The batching column: `vmap(apply)` over a batch of BATCH perturbed copies of the
    example's float arguments (the others fixed, as in the other columns) compiled with
    fallback="error", its value and the gradient of a weighted sum of its float results
    with respect to the batched arguments compared with a Python loop over the examples in
    plain autograd. "loop" when that agrees but some builder op had no batching rule."""
    if not inputs:
        return "n/a"
    batched = [_stacked([_perturbed(x, k) for k in range(BATCH)]) for x in inputs]

    def loop(*bx):
        return [apply(*[_example_of(b, k) for b in bx]) for k in range(BATCH)]

    try:
        expected = _stack_results(loop(*batched))
    except Exception as e:
        return record("batching (plain autograd on the batch)", e)
    weights = [_like(leaf, 90 + i) for i, leaf in enumerate(_float_leaves(expected))]

    def loop_loss(*bx):
        return sum(_loss([w[k] for w in weights], _float_leaves(out)) for k, out in enumerate(loop(*bx)))

    def vmap_loss(*bx):
        return _loss(weights, _float_leaves(vmap(apply)(*bx)))

    ks, grads = [], []
    if has_vjp and weights:
        for k in range(len(batched)):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # "Output seems independent of input": zeros are right
                    grads.append(grad(loop_loss, k)(*batched))
                ks.append(k)
            except Exception as e:  # an argument autograd cannot differentiate: see _derivative_status
                if isinstance(e, (NotImplementedError, KeyError, TypeError)):
                    continue
                return record("batching vjp (plain autograd on the batch)", e)

    builder_batching.reset_warnings()  # it warns once per op and process: once per primitive here
    looped = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            got = jit_ps(lambda *bx: vmap(apply)(*bx), fallback="error")(*batched)
            bad = _close(got, expected, "batching")
            if bad is None and ks:
                got_grads = jit_ps(lambda *bx: tuple(grad(vmap_loss, k)(*bx) for k in ks), fallback="error")(
                    *batched)
                bad = _close(list(got_grads), grads, "batching vjp")
        except Exception as e:
            return record("batching", e)
        finally:
            for w in caught:
                m = _NO_RULE.search(str(w.message))
                if m and m.group(1) not in looped:
                    looped.append(m.group(1))
    if bad is not None:
        record("batching", AssertionError(bad))
        return "differs"
    if looped:
        row.errors.append(f"batching: loop: no batching rule for {', '.join(looped)} (runs once per example)")
        return "loop"
    return "ok"


# ----- the report ----------------------------------------------------------------------------
def report(select=(), run=True, progress=None, only=(), batching=True):
    """The Rows of the primitives whose name contains one of `select`, or that one of `only`
    selects (families or name substrings: see `selects`); all when both are empty.
    `progress(row, done, total)` is called after each; `batching=False` leaves the batching
    column out."""
    infos = [i for i in discover() if not (select or only) or any(s in i.name for s in select)
             or any(selects(o, i.name) for o in only)]
    rows = []
    for info in infos:
        try:
            row = check_primitive(info, run=run, batching=batching)
        except Exception as e:  # a bug in this tool must not hide the other primitives
            row = Row(info.name)
            row.errors.append(f"coverage tool: {_reason(e)}\n{traceback.format_exc(limit=3)}")
        rows.append(row)
        if progress:
            progress(row, len(rows), len(infos))
    return rows


#: The values each column takes, in the order the totals list them (the same words)
COLUMN_VALUES = {
    "rule": ("lower", "trace", "none, traces", "none"),
    "fwd": ("ok", "differs", "FAIL", "no example"),
    "vjp": ("ok", "differs", "FAIL", "n/a", "no VJP", "no example"),
    "jvp": ("ok", "differs", "FAIL", "n/a", "no JVP", "no example"),
    "batching": ("ok", "loop", "differs", "FAIL", "n/a", "no example"),
}


def totals(rows):
    """"primitives" and "<column>: <value>" -> count, for every value of COLUMN_VALUES and any
    other one a row shows ("-": not reached after an earlier failure)."""
    out = {"primitives": len(rows)}
    for column, known in COLUMN_VALUES.items():
        seen = [getattr(r, column) for r in rows]
        for value in known + tuple(sorted(set(seen) - set(known))):
            out[f"{column}: {value}"] = seen.count(value)
    return out


def format_report(rows):
    width = max([len(r.name) for r in rows] + [9])
    lines = [f"{'primitive':<{width}}  {'rule':<13} {'fwd':<10} {'vjp':<10} {'jvp':<10} {'batching':<10}",
             "-" * (width + 58)]
    for r in rows:
        alias = f"  (also {', '.join(r.aliases)})" if r.aliases else ""
        lines.append(f"{r.name:<{width}}  {r.rule:<13} {r.fwd:<10} {r.vjp:<10} {r.jvp:<10} {r.batching:<10}{alias}")
    lines.append("")
    lines.append("Totals:")
    t = totals(rows)
    groups = {}
    for k, v in t.items():
        head, _, tail = k.partition(": ")
        groups.setdefault(head, []).append((tail, v))
    for head, items in groups.items():
        if head == "primitives":
            lines.append(f"  primitives: {items[0][1]}")
        else:
            lines.append(f"  {head}: " + " | ".join(f"{tail} {v}" for tail, v in items))
    failures = [r for r in rows if r.errors]
    lines.append("")
    lines.append(f"Exceptions ({len(failures)} primitives):" if failures else "Exceptions: none")
    for r in failures:
        for e in r.errors:
            lines.append(f"  {r.name}: {e}")
    return "\n".join(lines)


#: Without --progress or --quiet, a progress line goes to stderr after this many primitives
PROGRESS_EVERY = 10


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m autograd_xla.coverage",
        description="Which of autograd's differentiable primitives compile under jit_ps (fallback='error'), "
                    "and whether their values, VJPs and JVPs agree with plain autograd; the batching column "
                    "says whether vmap over a batch of examples does (value and VJP; 'loop': some builder "
                    "op has no batching rule and runs once per example). The report goes to stdout, "
                    "progress to stderr.")
    parser.add_argument("names", nargs="*", metavar="NAME_SUBSTRING",
                        help="report only the primitives whose name contains one of these")
    parser.add_argument("--only", action="append", default=[], metavar="FAMILY",
                        help=f"report only this family ({', '.join(FAMILIES)}) or the names containing this "
                             "text; may be repeated")
    parser.add_argument("--no-run", action="store_true", help="only say which rule each primitive has (fast)")
    parser.add_argument("--no-batching", action="store_true",
                        help="leave out the batching column (vmap over a batch of %d examples: two more "
                             "compilations per primitive)" % BATCH)
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--progress", action="store_true", help="a progress line per primitive, with its result")
    shown.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    t0 = time.perf_counter()

    def progress(row, done, total):
        if args.progress:
            print(f"  [{done}/{total}] {row.name}: {row.rule} fwd={row.fwd} vjp={row.vjp} jvp={row.jvp} "
                  f"batching={row.batching} "
                  f"({row.seconds:.1f}s)", file=sys.stderr, flush=True)
        elif done % PROGRESS_EVERY == 0 or done == total:
            print(f"coverage: {done}/{total} primitives checked, {time.perf_counter() - t0:.0f} s elapsed",
                  file=sys.stderr, flush=True)

    rows = report(args.names, run=not args.no_run, progress=None if args.quiet else progress, only=args.only,
                  batching=not args.no_batching)
    print(format_report(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
