"""vmap, jacfwd, jacrev and hessian against the Python loop over examples they replace.

Every case compares `vmap(f, in_axes, out_axes)(*args)` with
`onp.stack([f(*example_i) for i in range(B)], axis=out_axis)` run by plain autograd, in
value and dtype, and (for float arguments) the gradient of a weighted sum of the results
both ways: grad of the vmapped function against grad of the loop. Tests that should
compile fully turn FallbackWarning into an error, so that neither a per-example loop inside
the program nor a fallback of jit_ps to plain Python goes unnoticed; cases expected to run
an op per example say so and check the warning.
"""
import contextlib
import warnings

import autograd
import autograd.numpy as np
import autograd.scipy.linalg as aslinalg
import autograd.scipy.signal as asignal
import autograd.scipy.special as aspecial
import autograd.scipy.stats.norm as anorm
import numpy as onp
import pytest
from autograd import grad, make_jvp

from autograd_xla import (ArgumentError, FallbackWarning, cond, fori_loop, hessian, jacfwd, jacrev, jit_ps, scan,
                          switch, vmap, while_loop)
from autograd_xla import batching
from helpers import NARROW, assert_close, dtypes_of

B = 3
rng = onp.random.RandomState(0)


def rand(*shape, dtype=onp.float64):
    return rng.randn(*shape).astype(dtype)


def spd(n):
    a = rng.randn(B, n, n)
    return a @ onp.swapaxes(a, 1, 2) + n * onp.eye(n)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    """batching warns once per op name and process: forget them, so each test sees its own."""
    batching.reset_warnings()
    yield


@contextlib.contextmanager
def compiled(fallback=False, lowers=True):
    """Inside: no FallbackWarning at all (fallback=False), or per-example ones only, at
    least one where a batched program is lowered inside (`lowers`: its ops warn then)."""
    batching.reset_warnings()
    with warnings.catch_warnings(record=True) as caught:
        if fallback:
            warnings.simplefilter("always")
        else:
            warnings.simplefilter("error", FallbackWarning)
        yield
    if fallback:
        msgs = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
        assert all("once per example" in m for m in msgs), msgs
        assert msgs or not lowers


# ----- the reference: a Python loop -------------------------------------------------------------
def _axes_tuple(in_axes, n):
    return tuple(in_axes) if isinstance(in_axes, (tuple, list)) else (in_axes,) * n


def _stack(results, out_axes):
    first = autograd.tracer.getval(results[0])  # autograd boxes a list a primitive returns
    if isinstance(first, (tuple, list)):
        axes = _axes_tuple(out_axes, len(first))
        return type(first)(_stack([r[k] for r in results], axes[k]) for k in range(len(first)))
    if isinstance(first, dict):
        axes = out_axes if isinstance(out_axes, dict) else {k: out_axes for k in first}
        return {k: _stack([r[k] for r in results], axes[k]) for k in first}
    if out_axes is None:
        return results[0]
    return np.stack(results, axis=out_axes)


def _take(obj, axis, i):
    """Example i of obj, whose leaves are mapped as the in_axes prefix `axis` says."""
    v = autograd.tracer.getval(obj)  # containers being differentiated are boxes
    if isinstance(v, (tuple, list)):
        axes = axis if isinstance(axis, (tuple, list)) else [axis] * len(v)
        return type(v)(_take(obj[k], axes[k], i) for k in range(len(v)))
    if isinstance(v, dict):
        return {k: _take(obj[k], axis[k] if isinstance(axis, dict) else axis, i) for k in v}
    return obj if axis is None else obj[(slice(None),) * (axis % np.ndim(obj)) + (i,)]


def _size(obj, axis):
    if isinstance(axis, (tuple, list)):
        sizes = [_size(o, a) for o, a in zip(obj, axis)]
    elif isinstance(axis, dict):
        sizes = [_size(obj[k], axis[k]) for k in obj]
    elif isinstance(obj, (tuple, list, dict)):
        sizes = [_size(o, axis) for o in (obj.values() if isinstance(obj, dict) else obj)]
    else:
        return None if axis is None else np.shape(obj)[axis]
    return next((n for n in sizes if n is not None), None)


def looped(f, in_axes=0, out_axes=0):
    """f mapped by a Python loop: the reference every vmap is compared with."""
    def run(*args, **kwargs):
        axes = tuple(in_axes) if isinstance(in_axes, tuple) or isinstance(in_axes, list) and \
            (len(args) != 1 or len(in_axes) == 1) else (in_axes,) * len(args)
        size = _size((args, kwargs), (axes, {k: 0 for k in kwargs}))
        results = [f(*_take(args, axes, i), **_take(kwargs, 0, i)) for i in range(size)]
        return _stack(results, out_axes)
    return run


def _leaves(out):
    """The arrays of a result tree, also when autograd boxed the container (a SequenceBox)."""
    v = autograd.tracer.getval(out)
    if isinstance(v, (tuple, list)):
        return [leaf for k in range(len(v)) for leaf in _leaves(out[k])]
    if isinstance(v, dict):
        return [leaf for k in sorted(v) for leaf in _leaves(out[k])]
    return [out]


def weighted_sum(f, seed=1):
    """A scalar function of f's (tree of) results with a non-trivial gradient."""
    def s(*args):
        leaves = _leaves(f(*args))
        total = 0.0
        for k, leaf in enumerate(leaves):
            if onp.result_type(autograd.tracer.getval(leaf)).kind not in "fc":
                continue
            w = onp.random.RandomState(seed + k).uniform(0.5, 1.5, size=np.shape(leaf))
            if np.iscomplexobj(leaf):
                leaf = np.real(leaf) + 0.3 * np.imag(leaf)
            total = total + np.sum(leaf * w)
        return total
    return s


def check_vmap(f, *args, in_axes=0, out_axes=0, argnums=None, rtol=None, grad_rtol=None, fallback=False,
               jit_grad=False):
    """vmap(f) against the loop: values, and the gradient wrt each float argument in argnums
    (default: all float arguments; () for none)."""
    ref = looped(f, in_axes, out_axes)
    vf = vmap(f, in_axes, out_axes)
    expected = ref(*args)
    dts = dtypes_of(*args)
    with compiled(fallback):
        got = vf(*args)
    assert_close(got, expected, rtol=rtol, inputs=dts)
    if argnums is None:
        argnums = [k for k, a in enumerate(args)
                   if isinstance(a, (onp.ndarray, float)) and onp.asarray(a).dtype.kind == "f"]
    for a in argnums:
        want = grad(weighted_sum(ref), a)(*args)
        with compiled(fallback, lowers=False):  # the per-example op may be the forward pass's alone, warned of
            g = grad(weighted_sum(vf), a)(*args)
        assert_close(g, want, rtol=grad_rtol or rtol, inputs=dts, path=f"grad wrt arg {a}")
        if jit_grad:
            with compiled(fallback):
                g = jit_ps(grad(weighted_sum(vf), a))(*args)
            assert_close(g, want, rtol=grad_rtol or rtol, inputs=dts, path=f"jit(grad) wrt arg {a}")
    return got


def case(label, f, *args, **kw):
    return pytest.param(f, args, kw, id=label)


# ----- 1. primitive families ---------------------------------------------------------------------
X, Y = rand(B, 4), rand(B, 4)
XP = onp.abs(X) + 0.5
I = rng.randint(-5, 6, size=(B, 4))
J = rng.randint(1, 4, size=(B, 4))
M, N = rand(B, 3, 4), rand(B, 4, 2)
V3 = rand(4)

ELEMENTWISE = [
    case("sin", np.sin, X, jit_grad=True),
    case("exp_log", lambda x: np.log(np.exp(x) + 1.0), X),
    case("tanh_sqrt", lambda x: np.tanh(x) * np.sqrt(x ** 2 + 1), X),
    case("power", lambda x: x ** 3 - x ** 2.5 * 0 + np.abs(x) ** 1.5, X),
    case("abs_sign", lambda x: np.abs(x) + np.sign(x) * x, X),
    case("binary", lambda x, y: x * y - x / (y ** 2 + 1) + np.maximum(x, y) - np.minimum(x, y), X, Y),
    case("arctan2_hypot", lambda x, y: np.arctan2(x, y) + np.hypot(x, y), X, Y),
    case("one_unmapped", lambda x, y: x * y + y, X, V3, in_axes=(0, None)),
    case("mapped_axis1", lambda x, y: x * y, X.T.copy(), Y, in_axes=(1, 0)),
    case("where_compare", lambda x, y: np.where(x > y, x, y * 2), X, Y),
    case("int_ops", lambda i, j: i * 3 + i // j - i % j + np.abs(i), I, J),
    case("int_float_mix", lambda i, x: i * x + i, I, X),
    case("bool_ops", lambda x, y: np.logical_and(x > 0, y < 0) | (x > y), X, Y),
    case("weak_scalar_f32", lambda x: x * 2.5 + 1 - 3.0 / (x ** 2 + 1), X.astype(onp.float32)),
    case("weak_scalar_int", lambda i: i * 2 + 1, I.astype(onp.int32)),
    case("clip_round", lambda x: np.clip(x, -0.5, 0.5) + np.round(x * 0) + np.floor(x) * 0, X),
    case("complex", lambda x, y: np.abs(np.exp(1j * x) * (y + 2j) + x), X, Y),
]

REDUCTIONS = [
    case("sum_all", np.sum, M),
    case("sum_axis", lambda x: np.sum(x, axis=1), M, jit_grad=True),
    case("sum_keepdims", lambda x: np.sum(x, axis=(0, 1), keepdims=True), M),
    case("mean", lambda x: np.mean(x, axis=0), M),
    case("max", lambda x: np.max(x, axis=-1), M),
    case("min_keepdims", lambda x: np.min(x, axis=0, keepdims=True), M),
    case("argmax", lambda x: np.argmax(x, axis=1), M),
    case("argmin_all", np.argmin, M),
    case("cumsum", lambda x: np.cumsum(x, axis=0), M),
    case("cumsum_flat", np.cumsum, M),
    case("prod", lambda x: np.prod(x, axis=1), M),
    case("var", lambda x: np.var(x, axis=1), M),
    case("std_ddof", lambda x: np.std(x, axis=0, ddof=1), M),
    case("any_all", lambda x: (np.any(x > 1, axis=0), np.all(x > -1)), M),
    case("sum_int", lambda i: np.sum(i, axis=0), I),
    case("mapped_axis_1", lambda x: np.sum(x ** 2, axis=0), M, in_axes=1),
]

SHAPES = [
    case("reshape", lambda x: np.reshape(x, (2, 6)), M),
    case("reshape_flat", lambda x: x.ravel() * 2, M),
    case("transpose", lambda x: x.T, M),
    case("swapaxes", lambda x: np.swapaxes(x[None], 0, 2), M),
    case("concatenate", lambda x, y: np.concatenate([x, y, x], axis=0), X, Y),
    case("concat_unmapped", lambda x, y: np.concatenate([x, y]), X, V3, in_axes=(0, None)),
    case("stack", lambda x, y: np.stack([x, y], axis=1), X, Y),
    case("split", lambda x: np.split(x, 2, axis=1), M),
    case("squeeze_expand", lambda x: np.squeeze(np.expand_dims(x, 1), axis=1) + np.expand_dims(x, -1)[..., 0], M),
    case("broadcast_to", lambda x: np.broadcast_to(x, (2, 4)), X, argnums=()),  # autograd: no VJP to new axes
    case("broadcast_to_1", lambda x: np.broadcast_to(x[:, :1], (3, 4)), M),
    case("tile", lambda x: np.tile(x, (2, 1)), X),
    case("repeat", lambda x: np.repeat(x, 2, axis=0), X),
    case("pad", lambda x: np.pad(x, ((1, 0), (2, 1)), mode="constant"), M),
    case("flip", lambda x: np.flip(x, axis=1) + x[::-1], M, argnums=()),  # autograd: flip has no VJP
    case("reverse_slices", lambda x: x[:, ::-1] + x[::-1, ::-2].sum(), M),
    case("roll", lambda x: np.roll(x, 2, axis=1), M),
    case("tril_triu", lambda x: np.tril(x) + 2 * np.triu(x, 1), M),
    case("diag", lambda x: np.diag(x) * 2, X),
    case("diag2", lambda x: np.diag(x[:, :3]), M),
    case("atleast_outer", lambda x: np.atleast_2d(x) * x[:, None], X),
]


def setitem(x, v):
    y = x * 1.0
    y[1] = v
    return y


def setitem_functional(x, v):
    return np.concatenate([x[:1], v[None], x[2:]], axis=0)


def dyn_slice(x, i):
    return x[i:i + 2] * 2


def add_at(x, v):
    y = x * 1.0
    onp.add.at(y, onp.array([0, 2, 0]), v)
    return y


IDX = rng.randint(0, 4, size=(B, 2))
MASK = onp.array([True, False, True, True])
INDEXING = [
    case("static_slices", lambda x: x[1:, ::2] + x[:2, 1:3], M),
    case("int_index", lambda x: x[1] + x[:, -1].sum(), M),
    case("int_array", lambda x: x[onp.array([2, 0, 2])], X),
    case("bool_mask_const", lambda x: x[MASK] * 2, X),
    case("unmapped_traced_int", lambda x, i: x[i] * 2, M, onp.int64(1), in_axes=(0, None)),
    case("mapped_index_gather", lambda x, i: x[i] * 2, X, IDX, jit_grad=True),
    case("mapped_index_2d", lambda x, i: x[:, i], M, IDX),
    case("mapped_scalar_index", lambda x, i: x[i], M, onp.array([0, 2, 1])),
    case("mapped_index_unmapped_x", lambda x, i: x[i], V3, IDX, in_axes=(None, 0)),
    case("take", lambda x, i: np.take(x, i, axis=1), M, IDX, argnums=()),  # autograd: take has no VJP
    case("take_const", lambda x: np.take(x, onp.array([3, 0]), axis=1), M, argnums=()),
    case("where", lambda x: np.where(x > 0, x ** 2, -x), X),
    case("setitem_functional", setitem_functional, M, X),
    case("dyn_slice_mapped_start", dyn_slice, X, onp.array([0, 2, 1])),
    case("dyn_slice_unmapped_start", dyn_slice, X, onp.int64(1), in_axes=(0, None)),
    case("add_at", add_at, X, rand(B, 3), argnums=()),
    case("take_along_axis", lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0), M, argnums=()),
]

CONTRACTIONS = [
    case("dot_vv", np.dot, X, Y, jit_grad=True),
    case("dot_mv", np.dot, M, X),
    case("dot_unmapped_left", lambda w, x: np.dot(w, x), M[0], X, in_axes=(None, 0)),
    case("matmul_both", np.matmul, M, N),
    case("matmul_left_mapped", lambda a, b: a @ b, M, N[0], in_axes=(0, None)),
    case("matmul_right_mapped", lambda a, b: a @ b, M[0], N, in_axes=(None, 0)),
    case("matmul_axis1", lambda a, b: a @ b, onp.swapaxes(M, 0, 1).copy(), N, in_axes=(1, 0)),
    case("einsum", lambda a, b: np.einsum("ij,jk->ki", a, b), M, N),
    case("einsum_rowdot", lambda a: np.trace(a[:, :3]) + np.einsum("ij,ij->i", a, a), M),
    case("einsum_diag", lambda a: np.einsum("ii->i", a[:, :3]) + np.einsum("ii", a[:, 1:]), M,
         argnums=()),  # autograd's einsum VJP cannot repeat an output subscript
    case("tensordot", lambda a, b: np.tensordot(a, b, axes=([1], [0])), M, N),
    case("tensordot_0", lambda a, b: np.tensordot(a, b, axes=0), X, Y[:, :2]),
    case("outer", np.outer, X, Y),
    case("inner", np.inner, M, X),
    case("batched_matmul_3d", lambda a, b: a @ b, rand(B, 2, 3, 4), rand(B, 2, 4, 2)),
    case("batched_matmul_3d_one", lambda a, b: a @ b, rand(B, 2, 3, 4), rand(2, 4, 2), in_axes=(0, None)),
]

SORTING = [
    case("sort", np.sort, X),  # autograd's sort VJP is 1-D only
    case("sort_2d", lambda x: np.sort(x, axis=-1), M, argnums=()),
    case("sort_axis0", lambda x: np.sort(x, axis=0), M, argnums=()),
    case("argsort", lambda x: np.argsort(x, axis=1), M),
]

A3 = spd(3)
LINALG = [
    case("inv", np.linalg.inv, A3, jit_grad=True),
    case("solve", np.linalg.solve, A3, rand(B, 3)),
    case("solve_unmapped_a", np.linalg.solve, A3[0], rand(B, 3), in_axes=(None, 0)),
    case("det", np.linalg.det, A3),
    case("slogdet", lambda a: np.linalg.slogdet(a)[1], A3),
    case("cholesky", np.linalg.cholesky, A3),
    case("eigh", lambda a: np.linalg.eigh(a)[0], A3),
    case("eigh_vectors", lambda a: np.abs(np.linalg.eigh(a)[1]), A3),
    case("svd_s", lambda a: np.linalg.svd(a, compute_uv=False), M),
    case("svd_uv", lambda a: np.abs(np.linalg.svd(a, full_matrices=False)[0]), M),
    case("qr", lambda a: np.abs(np.linalg.qr(a)[1]), M[:, :, :3], argnums=()),  # autograd: qr has no VJP
    case("norm", lambda a: np.linalg.norm(a) + np.linalg.norm(a, axis=1).sum(), M),
    case("solve_triangular", lambda a, b: aslinalg.solve_triangular(a, b, lower=True), onp.tril(A3),
         rand(B, 3, 2)),
]

FFT = [
    case("fft", np.fft.fft, X),
    case("ifft", lambda x: np.fft.ifft(x * 1j + 1), X),
    case("rfft", np.fft.rfft, X),
    case("fft2", np.fft.fft2, M),
    case("fft_axis0", lambda x: np.fft.fft(x, axis=0), M),
]

IMAGES = rand(2, 3, 6, 5, dtype=onp.float32)
SPECIAL = [
    case("gammaln", aspecial.gammaln, XP),
    case("erf", aspecial.erf, X),
    case("logsumexp", lambda x: aspecial.logsumexp(x, axis=1), M),
    case("norm_logpdf", lambda x, m: anorm.logpdf(x, m, 2.0), X, Y),
    case("norm_logpdf_scale", lambda x, s: anorm.logpdf(x, 0.5, s), X, XP),
    case("convolve", lambda x, k: asignal.convolve(x, k), X, rand(B, 3)),
    # float32 lowers to stablehlo.convolution (float64, on the CPU, to a dot): its input, its
    # kernel or both batched, 1-d and a convnet layer's 2-d
    case("convolve_f32", lambda x, k: asignal.convolve(x, k), X.astype(onp.float32), rand(B, 3, dtype=onp.float32)),
    case("convolve_f32_kernel", lambda k: asignal.convolve(V3.astype(onp.float32), k), rand(B, 3, dtype=onp.float32)),
    case("convolve_f32_layer", lambda x, w: asignal.convolve(x, w, axes=([1, 2], [2, 3]), dot_axes=([0], [0]),
                                                             mode="valid"),
         rand(B, 3, 6, 5, dtype=onp.float32), rand(B, 3, 4, 3, 2, dtype=onp.float32)),
    case("convolve_f32_layer_kernel", lambda w: asignal.convolve(IMAGES, w,
                                                                 axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid"),
         rand(B, 3, 4, 3, 2, dtype=onp.float32)),
    case("convolve_valid_2d", lambda x, k: asignal.convolve(x, k, mode="valid"), M, rand(B, 2, 2)),
]

FAMILIES = ELEMENTWISE + REDUCTIONS + SHAPES + INDEXING + CONTRACTIONS + SORTING + LINALG + FFT + SPECIAL


@pytest.mark.parametrize("f,args,kw", FAMILIES)
def test_primitive_families(f, args, kw):
    check_vmap(f, *args, **kw)


def test_setitem_values():
    """`y[i] = v` on a traced copy, against the loop in plain numpy (autograd cannot
    differentiate item assignment; the functional form it writes is a case above)."""
    x, v = M, X
    with compiled():
        got = vmap(setitem)(x, v)
    assert_close(got, onp.stack([setitem(x[i], v[i]) for i in range(B)]))


# ----- 2. control flow -------------------------------------------------------------------------
def newton_sqrt(a, tol):
    """sqrt(a) by Newton's method until |x^2 - a| <= tol: a trip count per example."""
    def going(c):
        x, k = c
        return np.abs(x * x - a) > tol
    def step(c):
        x, k = c
        return 0.5 * (x + a / x), k + 1
    return while_loop(going, step, (a + 1.0, 0))


A_POS = onp.array([2.0, 9.0, 0.3])
#: newton_sqrt's tolerances, each example's and one shared; where float64 is computed in 32 bits
#: (NARROW) ones float32 meets at the step float64 does: |x^2 - 9| <= 1e-13 was met a step early
#: there (x rounded to 3 exactly), and 1e-9 is below float32's spacing near 2 (never met).
TOLS = onp.array([1e-2, 1e-4 if NARROW else 1e-13, 1e-6])
SHARED_TOL = 1e-5 if NARROW else 1e-9


def test_while_loop_per_example_trip_count():
    """Each example iterates as often as it would alone; finished ones stay fixed."""
    got = check_vmap(newton_sqrt, A_POS, TOLS, argnums=())
    counts = [newton_sqrt(a, t)[1] for a, t in zip(A_POS, TOLS)]
    assert len(set(counts)) == 3 and list(got[1]) == counts, (got, counts)
    check_vmap(newton_sqrt, A_POS, SHARED_TOL, in_axes=(0, None), argnums=())  # the tolerance shared
    # forward mode through the batched while: d sqrt(a) / da
    t = onp.array([1.0, -0.5, 2.0])
    want = make_jvp(lambda a: looped(newton_sqrt)(a, TOLS)[0])(A_POS)(t)
    with compiled():
        got = make_jvp(lambda a: vmap(newton_sqrt)(a, TOLS)[0])(A_POS)(t)
        assert_close(got, want)
        assert_close(jit_ps(lambda a, t: make_jvp(lambda a: vmap(newton_sqrt)(a, TOLS)[0])(a)(t))(A_POS, t), want)


def test_while_loop_unbatched_predicate_batched_carry():
    def f(x, n):
        return while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 0.9 + np.sin(c[1])), (0, x))[1]
    check_vmap(f, X, 4, in_axes=(0, None), argnums=())


def test_fori_loop():
    def f(x, w):
        return fori_loop(0, 3, lambda i, c: np.tanh(c * w + i), x)
    check_vmap(f, X, Y, jit_grad=True)
    check_vmap(f, X, 0.7, in_axes=(0, None))

    def traced_bound(x, n):  # a per-example upper bound: a batched predicate
        return fori_loop(0, n, lambda i, c: c * 0.5 + i, x)
    check_vmap(traced_bound, X, onp.array([1, 4, 2]), argnums=())


def rnn(W, xs):
    def step(c, x):
        c = np.tanh(np.dot(W, c) + x)
        return c, np.sum(c ** 2)
    c, ys = scan(step, np.zeros(3), xs)
    return c * np.sum(ys)


def test_scan():
    W = rand(3, 3) * 0.6
    check_vmap(rnn, W, rand(B, 4, 3), in_axes=(None, 0), jit_grad=True)
    check_vmap(rnn, rand(B, 3, 3) * 0.6, rand(4, 3), in_axes=(0, None))
    check_vmap(rnn, rand(B, 3, 3) * 0.6, rand(4, B, 3), in_axes=(0, 1))


def branchy(x, p):
    return cond(p > 0, lambda x: np.sin(x) * 2, lambda x: x ** 2 - 1, x)


def switchy(x, k):
    return switch(k, [lambda x: np.sin(x), lambda x: x * 3.0, lambda x: np.exp(-x ** 2)], x)


def test_cond_and_switch():
    check_vmap(branchy, X, onp.array([1.0, -1.0, 2.0]), argnums=(0,))   # a batched predicate
    check_vmap(branchy, X, -1.0, in_axes=(0, None), jit_grad=True)      # an unbatched one
    check_vmap(lambda x: cond(np.sum(x) > 0, lambda x: x * 2, lambda x: -x, x), X)  # computed per example
    check_vmap(switchy, X, onp.array([2, 0, 1]), argnums=(0,), jit_grad=True)
    check_vmap(switchy, X, 1, in_axes=(0, None))
    check_vmap(switchy, X, onp.array([5, -1, 1]), argnums=(0,))  # out of range: clamped, as lax.switch


# ----- 3. in_axes / out_axes / kwargs ---------------------------------------------------------------
def test_in_axes_ints():
    f = lambda x, y: np.dot(x, y)[:, None] * x
    check_vmap(f, M, X, in_axes=(0, 0))
    check_vmap(f, onp.moveaxis(M, 0, 1).copy(), X, in_axes=(1, 0))
    check_vmap(f, onp.moveaxis(M, 0, -1).copy(), X.T.copy(), in_axes=(-1, 1))
    check_vmap(f, M, X[0], in_axes=(0, None))
    check_vmap(f, M, X, in_axes=[0, 0])  # a list for the positional arguments, as jax reads one


def test_in_axes_containers():
    f = lambda d: d["a"] * np.sum(d["b"]) + d["c"][0] - d["c"][1]
    d = {"a": rand(B, 2), "b": rand(2, 3), "c": (rand(2, B), rand(B, 2))}
    check_vmap(f, d, in_axes=({"a": 0, "b": None, "c": (1, 0)},), argnums=(0,))
    check_vmap(f, {"a": rand(B, 2), "b": rand(B, 2, 3), "c": (rand(B, 2), rand(B, 2))})  # an int for all leaves

    g = lambda pair, z: pair[0] * z + pair[1][0] @ pair[1][1]
    args = ((rand(2, B), [rand(B, 2, 2), rand(2)]), rand(B, 2))
    check_vmap(g, *args, in_axes=((1, [0, None]), 0), argnums=(0, 1))
    check_vmap(g, (rand(2), [rand(2, 2), rand(2)]), rand(B, 2), in_axes=(None, 0))
    check_vmap(lambda xs: xs[0] * xs[1], [X, Y], in_axes=[[0, 0]], argnums=(0,))  # jax: a list is a tuple
    check_vmap(lambda xs: xs[0] * xs[1], [X, Y.T.copy()], in_axes=[0, 1], argnums=(0,))  # the one arg's prefix
    check_vmap(np.sin, X, in_axes=[0])


def test_out_axes():
    f = lambda x, w: (x * w, np.outer(x, w))
    check_vmap(f, X, Y, out_axes=1)
    check_vmap(f, X, Y, out_axes=-1)
    check_vmap(f, X, Y, out_axes=(0, 2))
    check_vmap(lambda x, w: (x * w, w * 2), X, V3, in_axes=(0, None), out_axes=(1, None))
    d = lambda x, w: {"p": np.sum(x * w), "q": np.outer(x, w), "r": w + 1}
    check_vmap(d, X, V3, in_axes=(0, None), out_axes={"p": 0, "q": -1, "r": None})
    with compiled():
        got = vmap(lambda x, w: w * 2, in_axes=(0, None), out_axes=None)(X, V3)
    assert_close(got, V3 * 2)


def test_kwargs_mapped_over_axis_0():
    f = lambda x, scale=1.0, shift=None: x * scale + shift
    s, t = rand(B), rand(B, 4)
    want = looped(f, in_axes=(0,))(X, scale=s, shift=t)
    with compiled():
        assert_close(vmap(f)(X, scale=s, shift=t), want)
        assert_close(vmap(f, in_axes=(1,))(X.T.copy(), scale=s, shift=t), want)
    g = grad(lambda s: np.sum(vmap(f)(X, scale=s, shift=t) ** 2))(s)
    assert_close(g, grad(lambda s: np.sum(looped(f, in_axes=(0,))(X, scale=s, shift=t) ** 2))(s))


# ----- 4. nesting -------------------------------------------------------------------------------
def test_vmap_of_vmap():
    f = lambda x, y: np.sin(x) * np.sum(y)
    XX, YY = rand(B, 2, 4), rand(B, 2, 3)
    want = onp.stack([looped(f)(XX[i], YY[i]) for i in range(B)])
    with compiled():
        assert_close(vmap(vmap(f))(XX, YY), want)
    # an outer product of batches: the inner maps x, the outer y
    pair = vmap(vmap(lambda x, y: np.dot(x, y), in_axes=(0, None)), in_axes=(None, 0))
    want = onp.array([[onp.dot(x, y) for x in X] for y in Y])
    with compiled():
        assert_close(pair(X, Y), want)
    w = grad(lambda xx: np.sum(vmap(vmap(f))(xx, YY) ** 2))(XX)
    assert_close(w, grad(lambda xx: np.sum(np.stack([looped(f)(xx[i], YY[i]) for i in range(B)]) ** 2))(XX))
    # different axes at the two levels
    XT = onp.transpose(XX, (1, 2, 0)).copy()  # (2, 4, B)
    with compiled():
        got = vmap(vmap(np.sin, in_axes=0, out_axes=1), in_axes=2, out_axes=0)(XT)
    assert_close(got, onp.transpose(onp.sin(XX), (0, 2, 1)))


def test_vmap_and_jit_nest():
    f = lambda x, w: np.tanh(np.dot(w, x))
    W = rand(3, 4)
    with compiled():
        got = jit_ps(lambda X, W: np.sum(vmap(f, (0, None))(X, W) ** 2))(X, W)
    assert_close(got, onp.sum(looped(f, (0, None))(X, W) ** 2))
    with compiled():
        got = vmap(jit_ps(f), (0, None))(X, W)
    assert_close(got, looped(f, (0, None))(X, W))

    def outer(w):  # a function that itself calls vmap, closing over its argument
        return np.sum(vmap(lambda x: np.dot(w, x) ** 2)(X))
    Ws = rand(B, 4)
    check_vmap(outer, Ws, jit_grad=True)


# ----- 5. autograd through vmap, both directions ---------------------------------------------------
def loss(w, x, y):
    return (np.tanh(np.dot(x, w)) - y) ** 2 + 0.1 * np.sum(w ** 2)


XB, YB, W4 = rand(B, 4), rand(B), rand(4)


def test_per_example_gradients():
    per_example = looped(grad(loss), (None, 0, 0))(W4, XB, YB)
    with compiled():
        assert_close(vmap(grad(loss), in_axes=(None, 0, 0))(W4, XB, YB), per_example)
        assert_close(jit_ps(vmap(grad(loss), in_axes=(None, 0, 0)))(W4, XB, YB), per_example)
        assert_close(vmap(grad(loss, 1), in_axes=(None, 0, 0))(W4, XB, YB), looped(grad(loss, 1), (None, 0, 0))(
            W4, XB, YB))


def test_gradient_of_vmapped_sum():
    total = lambda w: np.sum(vmap(loss, (None, 0, 0))(w, XB, YB))
    want = grad(lambda w: np.sum(looped(loss, (None, 0, 0))(w, XB, YB)))(W4)
    with compiled():
        assert_close(grad(total)(W4), want)
        assert_close(jit_ps(grad(total))(W4), want)

    def closing(w):  # the mapped function closes over the differentiated value
        return np.sum(vmap(lambda x, y: loss(w, x, y))(XB, YB))
    with compiled():
        assert_close(grad(closing)(W4), want)
        assert_close(jit_ps(grad(closing))(W4), want)
        assert_close(grad(jit_ps(closing))(W4), want)


def test_forward_mode_over_vmap():
    f = lambda w, x: np.sin(np.dot(x, w)) * x
    t = rand(4)
    want = make_jvp(lambda w: looped(f, (None, 0))(w, XB))(W4)(t)
    with compiled():
        assert_close(make_jvp(lambda w: vmap(f, (None, 0))(w, XB))(W4)(t), want)
        assert_close(jit_ps(lambda w, t: make_jvp(lambda w: vmap(f, (None, 0))(w, XB))(w)(t))(W4, t), want)
        tx = rand(B, 4)
        want_x = make_jvp(lambda x: looped(f, (None, 0))(W4, x))(XB)(tx)
        assert_close(make_jvp(lambda x: vmap(f, (None, 0))(W4, x))(XB)(tx), want_x)
        assert_close(jacfwd(lambda w: vmap(f, (None, 0))(w, XB))(W4),
                     autograd.jacobian(lambda w: looped(f, (None, 0))(w, XB))(W4))


def test_second_order_through_vmap():
    total = lambda w: np.sum(vmap(loss, (None, 0, 0))(w, XB, YB))
    ref = lambda w: np.sum(looped(loss, (None, 0, 0))(w, XB, YB))
    want = autograd.hessian(ref)(W4)
    with compiled():
        assert_close(autograd.hessian(total)(W4), want)
        assert_close(jit_ps(autograd.hessian(total))(W4), want)
        assert_close(hessian(total)(W4), want)
        scalar = lambda a: np.sum(vmap(lambda x: np.sin(a * x) * a)(XB))
        want2 = grad(grad(lambda a: np.sum(looped(lambda x: np.sin(a * x) * a)(XB))))(0.7)
        assert_close(grad(grad(scalar))(0.7), want2)
        assert_close(jit_ps(grad(grad(scalar)))(0.7), want2)
        # per-example Hessians
        hs = vmap(hessian(loss), (None, 0, 0))(W4, XB, YB)
    assert_close(hs, looped(autograd.hessian(loss), (None, 0, 0))(W4, XB, YB))


# ----- 6. jacfwd / jacrev / hessian ------------------------------------------------------------------
def vec_fn(x, y):
    return np.tanh(np.outer(x, y[:2]) + x[:2].sum()) * np.sum(y ** 2)


def scalar_fn(x, y):
    return np.sum(np.sin(x) * y[:3]) ** 2 + np.prod(x[:3]) * np.dot(y, y)


def test_jacobians_match_autograd():
    x, y = rand(3), rand(4)
    with compiled():
        for jac in (jacfwd, jacrev):
            assert_close(jac(vec_fn)(x, y), autograd.jacobian(vec_fn)(x, y))
            assert_close(jac(vec_fn, 1)(x, y), autograd.jacobian(vec_fn, 1)(x, y))
            assert_close(jac(vec_fn, (0, 1))(x, y), tuple(autograd.jacobian(vec_fn, k)(x, y) for k in (0, 1)))
        x2 = rand(2, 3)
        assert_close(jacrev(np.sin)(x2), autograd.jacobian(np.sin)(x2))
        assert_close(jacfwd(lambda m: m @ m.T)(x2), autograd.jacobian(lambda m: m @ m.T)(x2))
        assert_close(hessian(scalar_fn)(x, y), autograd.hessian(scalar_fn)(x, y))
        assert_close(hessian(scalar_fn, 1)(x, y), autograd.hessian(scalar_fn, 1)(x, y))
        got = hessian(scalar_fn, (0, 1))(x, y)  # blocks [i][j] = d2f / dx_i dx_j, as jax's
        want = tuple(tuple(autograd.jacobian(grad(scalar_fn, i), j)(x, y) for j in (0, 1)) for i in (0, 1))
        assert_close(got, want)
        assert_close(got[1][1], autograd.hessian(scalar_fn, 1)(x, y))
        assert_close(jit_ps(jacrev(vec_fn))(x, y), autograd.jacobian(vec_fn)(x, y))
        assert_close(jit_ps(grad(lambda x: np.sum(jacrev(vec_fn)(x, y) ** 2)))(x),
                     grad(lambda x: np.sum(autograd.jacobian(vec_fn)(x, y) ** 2))(x))


def test_autograd_jacobian_and_hessian_under_jit():
    x, y = rand(3), rand(4)
    with compiled():
        assert_close(jit_ps(autograd.jacobian(vec_fn))(x, y), autograd.jacobian(vec_fn)(x, y))
        assert_close(jit_ps(autograd.hessian(scalar_fn))(x, y), autograd.hessian(scalar_fn)(x, y))
        assert_close(jit_ps(autograd.hessian(scalar_fn, 1))(x, y), autograd.hessian(scalar_fn, 1)(x, y))


def test_hessian_program_size_does_not_grow():
    f = lambda x: np.sum(np.tanh(x) ** 2) + np.dot(x, x) ** 2 + np.sum(x[1:] * x[:-1])
    lines = {}
    for n in (20, 500):
        x = rand(n)
        for name, h in (("autograd_xla.hessian", hessian(f)),
                        ("jit_ps(autograd.hessian)", jit_ps(autograd.hessian(f)))):
            with compiled():
                text = h.stablehlo(x)
            lines.setdefault(name, []).append(len(text.splitlines()))
            if n == 20:
                with compiled():
                    assert_close(h(x), autograd.hessian(f)(x))
    for name, counts in lines.items():
        assert counts[0] == counts[1], (name, counts)


# ----- 7. errors ------------------------------------------------------------------------------------
def test_errors():
    f = lambda x, y: x * y
    with pytest.raises(ValueError, match=r"'x' has size 3, 'y' has size 4"):
        vmap(f)(rand(3, 2), rand(4, 2))
    with pytest.raises(ValueError, match=r"'x' has size 3.*'y' has size 2"):
        vmap(f, in_axes=(0, 1))(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="out of range for 'x', of rank 2"):
        vmap(f, in_axes=2)(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="out of range"):
        vmap(f, in_axes=(0, -3))(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="in_axes has 1 entries but the function was called with 2"):
        vmap(f, in_axes=(0,))(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="at least one mapped argument"):
        vmap(f, in_axes=None)(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="at least one mapped argument"):
        vmap(f, in_axes=(None, None))(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="out_axes is None for result 0, but it varies"):
        vmap(f, out_axes=None)(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="does not match the structure"):
        vmap(lambda d: d["a"], in_axes=({"b": 0},))({"a": rand(3)})
    with pytest.raises(ValueError, match="out_axes .* does not match"):
        vmap(f, out_axes=(0, 1))(rand(3, 2), rand(3, 2))
    with pytest.raises(ValueError, match="out_axes 3 is out of range"):
        vmap(f, out_axes=3)(rand(3, 2), rand(3, 2))
    for bad in ("0", 1.5, True, {0}, (0, "x")):
        with pytest.raises(ArgumentError, match="in_axes must be an int, None"):
            vmap(f, in_axes=bad)
    with pytest.raises(ArgumentError, match="out_axes must be"):
        vmap(f, out_axes=[0, 1.0])
    with pytest.raises(ArgumentError, match="argnum"):
        jacfwd(f, argnum="x")
    with pytest.raises(ArgumentError, match="argnum"):
        hessian(f, argnum=())


def test_jacfwd_of_a_function_returning_a_tuple():
    """Forward mode over several results (a plain tuple of boxes gave make_jvp no tangent)."""
    f = lambda x: (np.sin(x) * x[0], np.sum(x ** 2), {"m": np.outer(x, x)})
    x = rand(3)
    with compiled():
        got = jacfwd(f)(x)
    assert_close(got[0], autograd.jacobian(lambda x: f(x)[0])(x))
    assert_close(got[1], autograd.jacobian(lambda x: f(x)[1])(x))
    assert_close(got[2]["m"], autograd.jacobian(lambda x: f(x)[2]["m"])(x))
