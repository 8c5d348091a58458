"""The portable linear algebra: what every platform but CPU runs (on CPU too when
`lapack.FORCE_PORTABLE` is set), in StableHLO only, with no vendor custom call.

LU with partial pivoting (`portable_lu`), Jacobi eigendecomposition and SVD (`jacobi_eigh`,
`jacobi_svd`), XLA's own Householder QR (`xla_qr`, `xla_householder_product`), the complex
Schur form (`portable_schur`) and eigenvectors from it (`portable_eig`), each with the
results of the LAPACK routine it stands in for. lapack.py chooses between them and LAPACK;
the docstring of linalg.py says which algorithm serves each function, how accurately, and
how the loops are built (over the whole batch, with elementwise arithmetic rather than dots).
"""
import numpy as np

from .. import hlo
from .elementwise import conj
from .linalg_common import (I32, abs_squared, abs_value, adjoint, all_true, complex_dtype, counted_loop, diag, eye,
                            geqrf_results, mm, nan_unless, q_reflectors, real_dtype, tri_mask, triangle)
from .shape import diagonal, embed_diagonal


# Arithmetic helpers for builders inside loop bodies (b is a LoweringContext or a child).
def _add(b, x, y):
    return b.binary("add", x, y)


def _sub(b, x, y):
    return b.binary("subtract", x, y)


def _mul(b, x, y):
    return b.binary("multiply", x, y)


def _div(b, x, y):
    return b.binary("divide", x, y)


def _neg(b, x):
    return b.unary("negate", x)


def _like(b, v, value, dtype=None):
    return b.full(v.shape, value, dtype or v.dtype)


def _eps(dtype):
    """Unit roundoff of the precision the module really computes in (x64=False: 32 bits)."""
    return float(np.finfo(hlo.canonical_dtype(real_dtype(dtype))).eps)


def _to(b, x, dtype):
    """Real x as `dtype` (real or complex)."""
    return b.convert(x, dtype)


def _last(b, v, shape):
    """v (batch..., n) broadcast to `shape` (batch..., rows, n) along the last axis."""
    return b.broadcast_in_dim(v, shape, list(range(v.ndim - 1)) + [len(shape) - 1])


def _rows(b, v, shape):
    """v (batch..., n) broadcast to `shape` (batch..., n, cols) along the row axis."""
    return b.broadcast_in_dim(v, shape, list(range(v.ndim)))


def _abs1(b, x):
    """|re| + |im|: the magnitude LAPACK's i?amax compares."""
    if x.dtype.kind != "c":
        return b.unary("abs", x)
    return _add(b, b.unary("abs", b.real(x)), b.unary("abs", b.imag(x)))


def _argmax_first(b, mag, idx, axis):
    """(max, index of its first occurrence) along `axis`, as one variadic reduce; NaN never wins."""
    def body(c, acc_m, acc_i, m, i):
        take = c.binary("or", c.compare(m, acc_m, "GT"),
                        c.binary("and", c.compare(m, acc_m, "EQ"), c.compare(i, acc_i, "LT")))
        return [c.select(take, m, acc_m), c.select(take, i, acc_i)]
    return b.reduce([mag, idx], [b.scalar(-np.inf, mag.dtype), b.scalar(mag.shape[axis], idx.dtype)], [axis], body)


def portable_lu(ctx, a):
    """getrf's results by Gaussian elimination with partial pivoting, one column per iteration
    of a stablehlo.while over the whole batch: the pivot is the first row at or below the
    diagonal with the largest |re| + |im| (as LAPACK's i?amax), rows swapped with masks,
    then the multipliers and the rank-1 update of the trailing block, also under masks.
    A zero pivot (the column is zero from the diagonal down) is skipped, and info holds its
    1-based column as in LAPACK. The permutation travels as n extra columns (the identity)
    whose rows are swapped with the matrix's: one reduction per swap, not two."""
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    vec = batch + (n,)
    shape = batch + (n, 2 * n)
    ridx = ctx.iota(vec, I32, nb)
    rows = ctx.iota(shape, I32, nb)
    cols = ctx.iota(shape, I32, nb + 1)
    left = ctx.compare(cols, ctx.full(shape, n, I32), "LT")

    def step(b, j, x, piv, info):
        z = b.scalar(0, I32)
        jv = b.broadcast_in_dim(j, vec, [])
        col = b.reshape(b.dynamic_slice(x, [z] * nb + [z, j], batch + (n, 1)), vec)
        mag = b.select(b.compare(ridx, jv, "GE"), _abs1(b, col), _like(b, col, -1, real_dtype(a.dtype)))
        _, p = _argmax_first(b, mag, ridx, nb)
        p = b.select(b.compare(p, b.broadcast_in_dim(j, p.shape, []), "GE"),
                     b.binary("minimum", p, _like(b, p, n - 1)), b.broadcast_in_dim(j, p.shape, []))  # NaN: no swap
        # swap rows j and p
        at_p = _rows(b, b.compare(ridx, _rows(b, p, vec), "EQ"), shape)
        at_j = _rows(b, b.compare(ridx, jv, "EQ"), shape)
        row_j = b.broadcast_in_dim(b.dynamic_slice(x, [z] * nb + [j, z], batch + (1, 2 * n)), shape, range(nb + 2))
        row_p = _last(b, b.reduce_with(b.select(at_p, x, b.zeros_like(x)), [nb], "add", 0), shape)
        x = b.select(at_j, row_p, b.select(at_p, row_j, x))
        one = b.reshape(b.binary("add", p, _like(b, p, 1)), batch + (1,))
        piv = b.dynamic_update_slice(piv, one, [z] * nb + [j])
        # eliminate below the pivot
        u = b.dynamic_slice(x, [z] * nb + [j, j], batch + (1, 1))
        zero_pivot = b.compare(u, b.zeros_like(u), "EQ")
        first_zero = b.binary("and", b.reshape(zero_pivot, batch), b.compare(info, b.zeros_like(info), "EQ"))
        info = b.select(first_zero, b.broadcast_in_dim(b.binary("add", j, b.scalar(1, I32)), batch, []), info)
        u = b.broadcast_in_dim(b.select(zero_pivot, _like(b, u, 1), u), shape, range(nb + 2))
        col = b.broadcast_in_dim(b.dynamic_slice(x, [z] * nb + [z, j], batch + (n, 1)), shape, range(nb + 2))
        mult = _div(b, col, u)
        jm = b.broadcast_in_dim(j, shape, [])
        below = b.compare(rows, jm, "GT")
        trailing = b.binary("and", below, b.binary("and", b.compare(cols, jm, "GT"), left))
        x = b.select(trailing, _sub(b, x, _mul(b, mult, row_p)),
                     b.select(b.binary("and", below, b.compare(cols, jm, "EQ")), mult, x))
        return x, piv, info

    init = [ctx.concatenate([a, eye(ctx, a.shape, a.dtype)], nb + 1), ctx.full(vec, 0, I32), ctx.full(batch, 0, I32)]
    x, piv, info = counted_loop(ctx, n, init, step)
    lu = ctx.slice(x, [0] * (nb + 2), list(batch) + [n, n])
    onehot = ctx.slice(x, [0] * (nb + 1) + [n], list(batch) + [n, 2 * n])
    onehot = ctx.real(onehot) if a.dtype.kind == "c" else onehot
    perm = ctx.reduce_with(_mul(ctx, onehot, ctx.convert(ctx.iota(a.shape, I32, nb + 1), onehot.dtype)), [nb + 1],
                           "add", 0)
    return lu, piv, ctx.convert(perm, I32), info


# Jacobi methods. Pairs (i, i + k) of a 2k-long axis are rotated together, k pairs at once;
# between rounds the positions are shuffled so that in 2k - 1 rounds (a sweep) every pair
# has met once (the round-robin tournament of Brent and Luk's parallel Jacobi). An odd size
# is padded with a zero row/column that rotations leave untouched (its partner's rotation is
# the identity); `label` tracks where each original index went.
def _round_robin(n2):
    """Static order of positions for the next round: position 0 stays, the others rotate
    through the top row (0..k-1) and the bottom row (k..2k-1)."""
    k = n2 // 2
    if k < 2:
        return list(range(n2))
    return [0, k] + list(range(1, k - 1)) + list(range(k + 1, n2)) + [k - 1]


def _permute_axis(b, x, order, axis):
    """x's entries along `axis` in a static order: slices of contiguous runs, concatenated."""
    runs = []
    for i in order:
        if runs and runs[-1][1] == i:
            runs[-1][1] += 1
        else:
            runs.append([i, i + 1])
    if len(runs) == 1:
        return x
    pieces = []
    for lo, hi in runs:
        starts, limits = [0] * x.ndim, list(x.shape)
        starts[axis], limits[axis] = lo, hi
        pieces.append(b.slice(x, starts, limits))
    return b.concatenate(pieces, axis)


def _swap_halves(b, x, axis):
    n2 = x.shape[axis]
    return _permute_axis(b, x, list(range(n2 // 2, n2)) + list(range(n2 // 2)), axis)


def _rotate(b, x, c, s_top, s_bottom, axis):
    """x with every pair (i, i + k) along `axis` combined: x_i <- c x_i + s_top x_(i+k),
    x_(i+k) <- c x_(i+k) + s_bottom x_i; c, s_top, s_bottom are (batch..., k)."""
    nb = c.ndim - 1
    dims = list(range(nb)) + [axis]
    c2 = b.broadcast_in_dim(_to(b, b.concatenate([c, c], nb), x.dtype), x.shape, dims)
    s2 = b.broadcast_in_dim(b.concatenate([s_top, s_bottom], nb), x.shape, dims)
    return _add(b, _mul(b, c2, x), _mul(b, s2, _swap_halves(b, x, axis)))


def _jacobi_rotation(b, a, d, off, skip=None):
    """The rotation G = [[c, s], [-conj(s), c]] with G^H [[a, off], [conj(off), d]] G
    diagonal, for k such 2x2 Hermitian blocks at once (a, d real; GVL's sym.schur2 with the
    phase of off split out). Returns (c, s, t): t = tan of the angle, c real, s like off."""
    rdt = a.dtype
    mag = abs_value(b, off)
    theta = _div(b, _sub(b, d, a), _mul(b, _like(b, mag, 2), mag))
    abs_theta = b.unary("abs", theta)
    big = b.compare(abs_theta, _like(b, theta, 1 / np.sqrt(_eps(rdt))), "GT")  # 1 + theta^2 == theta^2
    root = b.select(big, abs_theta, b.unary("sqrt", _add(b, _like(b, theta, 1), _mul(b, theta, theta))))
    sign = b.select(b.compare(theta, b.zeros_like(theta), "GE"), _like(b, theta, 1), _like(b, theta, -1))
    t = _div(b, sign, _add(b, abs_theta, root))
    none = b.compare(mag, b.zeros_like(mag), "EQ")
    if skip is not None:
        none = b.binary("or", none, skip)
    t = b.select(none, b.zeros_like(t), t)
    c = b.unary("rsqrt", _add(b, _like(b, t, 1), _mul(b, t, t)))
    safe = b.select(none, _like(b, mag, 1), mag)
    phase = b.select(none, _like(b, off, 1), _div(b, off, _to(b, safe, off.dtype)))  # off / |off|
    return c, _mul(b, _to(b, _mul(b, t, c), off.dtype), phase), t


def _shuffle(b, x, axes):
    for axis in axes:
        x = _permute_axis(b, x, _round_robin(x.shape[axis]), axis)
    return x


def _pad_to_even(ctx, x, axes):
    n = x.shape[axes[0]]
    if n % 2 == 0:
        return x
    high = [0] * x.ndim
    for axis in axes:
        high[axis] = 1
    return ctx.pad(x, ctx.scalar(0, x.dtype), [0] * x.ndim, high)


def _sweeps(ctx, init, sweep, converged, max_sweeps):
    """carry = sweep(builder, *carry) until converged, at least once, at most max_sweeps
    times. (No test before the first sweep: every reduction costs compile time, ~30 ms on
    CPU, and a sweep of an already diagonal matrix is cheap.)"""
    def cond(b, i, done, *carry):
        return b.binary("and", b.unary("not", done), b.compare(i, b.scalar(max_sweeps, I32), "LT"))

    def body(b, i, done, *carry):
        carry = sweep(b, *carry)
        return [b.binary("add", i, b.scalar(1, I32)), converged(b, *carry)] + list(carry)

    return ctx.while_loop([ctx.scalar(0, I32), ctx.scalar(False, np.bool_)] + list(init), cond, body)[2:]


def _sums(b, xs, axes):
    """Several sums over the same axes of same-shaped real arrays, as one variadic reduce."""
    axes = sorted(axes)
    inits = [b.scalar(0, x.dtype) for x in xs]
    return b.reduce(list(xs), inits, axes, lambda c, *acc_x: [c.binary("add", p, q) for p, q in
                                                               zip(acc_x[:len(xs)], acc_x[len(xs):])])


def _any_batch(b, pred):
    """pred (batch...) reduced to one bool: any."""
    return b.reduce_with(pred, list(range(pred.ndim)), "or", False) if pred.ndim else pred


# Cyclic Jacobi converges quadratically: measured 7-8 sweeps for random 50 x 50 matrices in
# float64. The limit only guards against a criterion that rounding keeps out of reach.
_MAX_SWEEPS = 40


def hermitian_part(ctx, a, lower):
    """The Hermitian matrix that LAPACK's ?syevd/?heevd read from a's `lower`/upper triangle
    (of a complex diagonal, the real part only)."""
    h = ctx.select(tri_mask(ctx, a.shape, lower, -1 if lower else 1), a, adjoint(ctx, a))
    if a.dtype.kind == "c":
        on_diag = ctx.compare(ctx.iota(a.shape, I32, a.ndim - 2), ctx.iota(a.shape, I32, a.ndim - 1), "EQ")
        h = ctx.select(on_diag, embed_diagonal(ctx, _to(ctx, ctx.real(diag(ctx, a)), a.dtype)), h)
    return h


def _scaled(ctx, a):
    """(a / max |a_ij|, that max) per matrix (max 1 for zero or non-finite matrices), so that
    the squared norms Jacobi compares neither underflow nor overflow."""
    nb = a.ndim - 2
    top = ctx.reduce_with(abs_value(ctx, a), [nb, nb + 1], "maximum", 0)
    usable = ctx.binary("and", ctx.compare(top, ctx.zeros_like(top), "GT"), ctx.unary("is_finite", top, np.bool_))
    top = ctx.select(usable, top, _like(ctx, top, 1))
    return _div(ctx, a, ctx.broadcast_in_dim(_to(ctx, top, a.dtype), a.shape, range(nb))), top


def _unscaled(ctx, x, top):
    return _mul(ctx, x, ctx.broadcast_in_dim(top, x.shape, range(top.ndim)))


def _finite(ctx, x):
    """Per matrix of a batch: whether every entry of x (batch..., n) is finite."""
    fin = ctx.unary("is_finite", ctx.real(x) if x.dtype.kind == "c" else x, np.bool_)
    return all_true(ctx, fin, [x.ndim - 1])


def jacobi_eigh(ctx, h, vectors=True):
    """(w ascending, v) of a Hermitian h (both triangles set) by the cyclic two-sided Jacobi
    method: sweeps of rounds of k simultaneous rotations G^H W G, each zeroing the k paired
    off-diagonal entries, until the off-diagonal part is below eps * ||h||_F (each matrix
    of a batch: the loop runs until all are)."""
    batch, n = h.shape[:-2], h.shape[-1]
    nb = len(batch)
    h, top = _scaled(ctx, h)
    w = _pad_to_even(ctx, h, [nb, nb + 1])
    n2 = w.shape[-1]
    k = n2 // 2
    rdt = real_dtype(h.dtype)
    tol2 = _eps(rdt) ** 2
    r_idx, c_idx = np.indices((n2, n2))
    diag_mask = ctx.broadcast_in_dim(ctx.const(r_idx == c_idx), w.shape, [nb, nb + 1])
    pair_mask = ctx.broadcast_in_dim(ctx.const(np.abs(r_idx - c_idx) == k), w.shape, [nb, nb + 1])
    off_mask = ctx.broadcast_in_dim(ctx.const(r_idx != c_idx), w.shape, [nb, nb + 1])

    def rnd(b, r, w, v, label):
        d = b.real(diag(b, w)) if w.dtype.kind == "c" else diag(b, w)
        da = b.slice(d, [0] * (nb + 1), list(batch) + [k])
        dd = b.slice(d, [0] * nb + [k], list(batch) + [n2])
        off = diag(b, b.slice(w, [0] * nb + [0, k], list(batch) + [k, n2]))  # entries (i, i + k)
        c, s, t = _jacobi_rotation(b, da, dd, off)
        cs = conj(b, s)
        w = _rotate(b, w, c, _neg(b, s), cs, nb)          # G^H W: rows
        w = _rotate(b, w, c, _neg(b, cs), s, nb + 1)      # (G^H W) G: columns
        mag = abs_value(b, off)
        tm = _mul(b, t, mag)
        exact = b.concatenate([_sub(b, da, tm), _add(b, dd, tm)], nb)
        w = b.select(pair_mask, b.zeros_like(w), b.select(diag_mask, embed_diagonal(b, _to(b, exact, w.dtype)), w))
        if vectors:
            v = _shuffle(b, _rotate(b, v, c, _neg(b, cs), s, nb + 1), [nb + 1])
        return _shuffle(b, w, [nb, nb + 1]), v, _shuffle(b, label, [0])

    def sweep(b, w, v, label):
        return counted_loop(b, n2 - 1, [w, v, label], rnd)

    def converged(b, w, v, label):
        sq = abs_squared(b, w)
        off2, all2 = _sums(b, [b.select(off_mask, sq, b.zeros_like(sq)), sq], [nb, nb + 1])
        return b.unary("not", _any_batch(b, b.compare(off2, _mul(b, all2, _like(b, all2, tol2)), "GT")))  # NaN: stop

    v0 = eye(ctx, w.shape, w.dtype) if vectors else ctx.scalar(0, w.dtype)
    w, v, label = _sweeps(ctx, [w, v0, ctx.iota((n2,), I32, 0)], sweep, converged, _MAX_SWEEPS)
    d = ctx.real(diag(ctx, w)) if w.dtype.kind == "c" else diag(ctx, w)
    key = ctx.select(_last(ctx, ctx.compare(label, ctx.full((n2,), n, I32), "EQ"), d.shape),
                     _like(ctx, d, np.inf), d)  # the padding goes last
    less = lambda b, x, y, *rest: b.compare(x, y, "LT")
    if not vectors:
        return _unscaled(ctx, ctx.slice(ctx.sort([key], nb, less)[0], [0] * (nb + 1), list(batch) + [n]), top), None
    key_m = _last(ctx, key, w.shape)
    key_m, v = ctx.sort([key_m, v], nb + 1, less)
    evals = ctx.reshape(ctx.slice(key_m, [0] * (nb + 2), list(batch) + [1, n]), batch + (n,))
    return _unscaled(ctx, evals, top), ctx.slice(v, [0] * (nb + 2), list(batch) + [n, n])


def xla_qr(ctx, a):
    """(reflectors and R, taus) as LAPACK geqrf stores them, by the `Qr` custom call, which
    XLA's QrExpander pass (run by the CPU, GPU and TPU compilers) turns into blocked
    Householder HLO before code generation; it follows geqrf's conventions (same signs)."""
    return ctx.custom_call("Qr", [a], geqrf_results(a), api_version=1)


def xla_householder_product(ctx, reflectors, taus):
    """Q = H_1 ... H_k from geqrf's reflectors (orgqr/ungqr), by the
    `ProductOfElementaryHouseholderReflectors` custom call, expanded by QrExpander too."""
    return ctx.custom_call("ProductOfElementaryHouseholderReflectors", [reflectors, taus],
                           [(reflectors.shape, reflectors.dtype)], api_version=1)[0]


def jacobi_svd(ctx, a, full_matrices, compute_uv):
    """(s descending, u, vh) by one-sided (Hestenes) Jacobi: rounds of k simultaneous
    rotations of column pairs of B = A V, each making the pair orthogonal (the rotation
    that diagonalises their 2x2 Gram matrix), until every pair met in a sweep had
    |b_i^H b_j| <= tol ||b_i|| ||b_j||. Then s = column norms, V the accumulated rotations,
    and U the Householder Q of the normalised columns (completed to an orthonormal basis
    where s = 0 or for full_matrices), its column phases set so that A V = U S. A wide A
    is handled through A^H."""
    batch, (m, n) = a.shape[:-2], a.shape[-2:]
    nb = len(batch)
    if m < n:
        s, u, vh = jacobi_svd(ctx, adjoint(ctx, a), full_matrices, compute_uv)
        return s, (adjoint(ctx, vh) if compute_uv else None), (adjoint(ctx, u) if compute_uv else None)
    a, top = _scaled(ctx, a)
    x = _pad_to_even(ctx, a, [nb + 1])
    n2 = x.shape[-1]
    k = n2 // 2
    rdt = real_dtype(a.dtype)
    tol = _eps(rdt) * np.sqrt(m)

    def rnd(b, r, x, v, label, worst):
        left = b.slice(x, [0] * (nb + 2), list(batch) + [m, k])
        right = b.slice(x, [0] * (nb + 1) + [k], list(batch) + [m, n2])
        cross = _mul(b, conj(b, left), right)
        if a.dtype.kind == "c":
            alpha, beta, g_re, g_im = _sums(b, [abs_squared(b, left), abs_squared(b, right), b.real(cross),
                                                 b.imag(cross)], [nb])
            gamma = b.complex(g_re, g_im)
        else:
            alpha, beta, gamma = _sums(b, [abs_squared(b, left), abs_squared(b, right), cross], [nb])
        scale = _mul(b, b.unary("sqrt", alpha), b.unary("sqrt", beta))
        mag = abs_value(b, gamma)
        positive = b.compare(scale, b.zeros_like(scale), "GT")
        rel = b.select(positive, _div(b, mag, b.select(positive, scale, _like(b, scale, 1))), b.zeros_like(scale))
        worst = b.binary("maximum", worst, rel)  # per position; reduced once per sweep
        c, s, _ = _jacobi_rotation(b, alpha, beta, gamma, skip=b.compare(rel, _like(b, rel, tol), "LE"))
        cs = conj(b, s)
        x = _shuffle(b, _rotate(b, x, c, _neg(b, cs), s, nb + 1), [nb + 1])
        if compute_uv:
            v = _shuffle(b, _rotate(b, v, c, _neg(b, cs), s, nb + 1), [nb + 1])
        return x, v, _shuffle(b, label, [0]), worst

    def sweep(b, x, v, label, worst):
        return counted_loop(b, n2 - 1, [x, v, label, b.zeros_like(worst)], rnd)

    def converged(b, x, v, label, worst):
        return b.unary("not", _any_batch(b, b.compare(worst, _like(b, worst, tol), "GT")))  # NaN: stop

    v0 = eye(ctx, batch + (n2, n2), a.dtype) if compute_uv else ctx.scalar(0, a.dtype)
    worst0 = ctx.full(batch + (k,), np.inf, rdt)
    x, v, label, _ = _sweeps(ctx, [x, v0, ctx.iota((n2,), I32, 0), worst0], sweep, converged, _MAX_SWEEPS)
    norms = ctx.unary("sqrt", ctx.reduce_with(abs_squared(ctx, x), [nb], "add", 0))  # (batch, n2)
    key = ctx.select(_last(ctx, ctx.compare(label, ctx.full((n2,), n, I32), "EQ"), norms.shape),
                     _like(ctx, norms, -1), norms)  # the padding goes last
    greater = lambda b, p, q, *rest: b.compare(p, q, "GT")
    if not compute_uv:
        s = ctx.slice(ctx.sort([key], nb, greater)[0], [0] * (nb + 1), list(batch) + [n])
        return nan_unless(ctx, _finite(ctx, s), _unscaled(ctx, s, top)), None, None
    key_x, x = ctx.sort([_last(ctx, key, x.shape), x], nb + 1, greater)
    _, v = ctx.sort([_last(ctx, key, v.shape), v], nb + 1, greater)
    s = ctx.reshape(ctx.slice(key_x, [0] * (nb + 2), list(batch) + [1, n]), batch + (n,))
    v = ctx.slice(v, [0] * (nb + 2), list(batch) + [n, n])
    x = ctx.slice(x, [0] * (nb + 2), list(batch) + [m, n])
    positive = ctx.compare(s, ctx.zeros_like(s), "GT")
    inv = ctx.select(positive, _div(ctx, _like(ctx, s, 1), ctx.select(positive, s, _like(ctx, s, 1))),
                     ctx.zeros_like(s))
    unit = _mul(ctx, x, _last(ctx, _to(ctx, inv, a.dtype), x.shape))
    raw, taus = xla_qr(ctx, unit)
    q = xla_householder_product(ctx, q_reflectors(ctx, raw, m if full_matrices else n), taus)
    r = diag(ctx, ctx.slice(raw, [0] * (nb + 2), list(batch) + [n, n]))
    r_mag = abs_value(ctx, r)
    clear = ctx.compare(r_mag, _like(ctx, r_mag, 0.5), "GT")
    phase = ctx.select(clear, _div(ctx, r, _to(ctx, ctx.select(clear, r_mag, _like(ctx, r_mag, 1)), r.dtype)),
                       _like(ctx, r, 1))
    if q.shape[-1] > n:
        phase = ctx.concatenate([phase, ctx.full(batch + (q.shape[-1] - n,), 1, r.dtype)], nb)
    u = _mul(ctx, q, _last(ctx, phase, q.shape))
    return nan_unless(ctx, _finite(ctx, s), _unscaled(ctx, s, top), u, adjoint(ctx, v))


# Complex Schur form: Householder reduction to Hessenberg form, then the single-shift QR
# algorithm (implicit, bulge chasing with Givens rotations; Wilkinson shifts, an exceptional
# shift after 10 steps without deflation, splitting at negligible subdiagonal entries),
# as in LAPACK's zgehrd + zlahqr, written as stablehlo.while loops over the whole batch.
def _pick_many(b, pairs):
    """[v[..., index[...]] for (v, index) in pairs]: per-matrix entries (index < len(v)) of
    vectors (batch..., len), as masked sums in one variadic reduce."""
    size = max(v.shape[-1] for v, _ in pairs)
    nb = pairs[0][0].ndim - 1
    parts, complex_at = [], []
    for v, index in pairs:
        if v.shape[-1] < size:
            v = b.pad(v, b.scalar(0, v.dtype), [0] * v.ndim, [0] * nb + [size - v.shape[-1]])
        at = b.compare(b.iota(v.shape, I32, nb), _rows(b, index, v.shape), "EQ")
        v = b.select(at, v, b.zeros_like(v))
        complex_at.append(v.dtype.kind == "c")
        parts += [b.real(v), b.imag(v)] if v.dtype.kind == "c" else [v]
    sums = iter(_sums(b, parts, [nb]))
    return [b.complex(next(sums), next(sums)) if c else next(sums) for c in complex_at]


def _phase(b, x):
    """x / |x|, 1 where x = 0."""
    mag = abs_value(b, x)
    zero = b.compare(mag, b.zeros_like(mag), "EQ")
    return b.select(zero, _like(b, x, 1), _div(b, x, _to(b, b.select(zero, _like(b, mag, 1), mag), x.dtype)))


def _givens(b, x, y):
    """(c, s): R = [[c, s], [-conj(s), c]] unitary with R [x, y] = [r, 0] (c real)."""
    ax, ay = abs_value(b, x), abs_value(b, y)
    big = b.binary("maximum", ax, ay)
    zero = b.compare(big, b.zeros_like(big), "EQ")
    big = b.select(zero, _like(b, big, 1), big)
    sx, sy = _div(b, ax, big), _div(b, ay, big)
    r = _mul(b, big, b.unary("sqrt", _add(b, _mul(b, sx, sx), _mul(b, sy, sy))))
    c = b.select(zero, _like(b, r, 1), _div(b, ax, r))
    s = _mul(b, _phase(b, x), _div(b, conj(b, y), _to(b, r, x.dtype)))
    return c, b.select(zero, b.zeros_like(s), s)


def _vec_mat(b, x, m):
    """x (batch..., n) times m (batch..., n, k), as multiply and reduce: matrix-vector
    products are O(n^2) either way, and elementwise arithmetic has no reduced-precision
    mode (dots in float32 may use TF32 on some GPUs)."""
    return b.reduce_with(_mul(b, _rows(b, x, m.shape), m), [x.ndim - 1], "add", 0)


def _mat_vec(b, m, x):
    """m (batch..., k, n) times x (batch..., n)."""
    return b.reduce_with(_mul(b, m, _last(b, x, m.shape)), [m.ndim - 1], "add", 0)


def _hessenberg(ctx, a):
    """(h, q) with a = q h q^H, h upper Hessenberg: one Householder reflector P = I - f u u^H
    per column j < n - 2, applied as P h P and q P."""
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    vec = batch + (n,)
    ridx = ctx.iota(vec, I32, nb)

    def step(b, j, h, q):
        z = b.scalar(0, I32)
        jv = b.broadcast_in_dim(j, vec, [])
        col = b.reshape(b.dynamic_slice(h, [z] * nb + [z, j], batch + (n, 1)), vec)
        x = b.select(b.compare(ridx, jv, "GT"), col, b.zeros_like(col))
        first = b.compare(ridx, b.broadcast_in_dim(b.binary("add", j, b.scalar(1, I32)), vec, []), "EQ")
        alpha = b.select(first, x, b.zeros_like(x))
        if x.dtype.kind == "c":
            a_re, a_im, x2 = _sums(b, [b.real(alpha), b.imag(alpha), abs_squared(b, x)], [nb])
            alpha = b.complex(a_re, a_im)
        else:
            alpha, x2 = _sums(b, [alpha, abs_squared(b, x)], [nb])
        xnorm = b.unary("sqrt", x2)
        beta = _mul(b, _neg(b, _phase(b, alpha)), _to(b, xnorm, h.dtype))
        u = _sub(b, x, b.select(first, _rows(b, beta, vec), b.zeros_like(x)))
        # |u|^2 = 2 |x| (|x| + |alpha|), so P = I - f u u^H with f = 1 / (|x| (|x| + |alpha|))
        unorm2 = _mul(b, xnorm, _add(b, xnorm, abs_value(b, alpha)))
        skip = b.compare(unorm2, b.zeros_like(unorm2), "EQ")
        f = b.select(skip, b.zeros_like(unorm2),
                     _div(b, _like(b, unorm2, 1), b.select(skip, _like(b, unorm2, 1), unorm2)))
        f = _to(b, f, h.dtype)
        uc = conj(b, u)
        fu = _mul(b, _rows(b, f, vec), u)
        uh_h = _vec_mat(b, uc, h)                                       # u^H h
        h = _sub(b, h, _mul(b, _rows(b, fu, h.shape), _last(b, uh_h, h.shape)))
        h = _sub(b, h, _mul(b, _rows(b, _mat_vec(b, h, fu), h.shape), _last(b, uc, h.shape)))  # - (h f u) u^H
        q = _sub(b, q, _mul(b, _rows(b, _mat_vec(b, q, fu), q.shape), _last(b, uc, q.shape)))
        # column j is now beta e_(j+1): store it exactly
        newcol = b.select(b.compare(ridx, jv, "LE"), col, b.select(first, _rows(b, beta, vec), b.zeros_like(col)))
        newcol = b.select(_rows(b, skip, vec), col, newcol)
        h = b.dynamic_update_slice(h, b.reshape(newcol, vec + (1,)), [z] * nb + [z, j])
        return h, q

    if n < 3:
        return a, eye(ctx, a.shape, a.dtype)
    return tuple(counted_loop(ctx, n - 2, [a, eye(ctx, a.shape, a.dtype)], step))


def portable_schur(ctx, a):
    """(t, z, ok): a = z t z^H with t upper triangular (complex), ok where the QR iteration
    converged within 30 max(10, n) steps (LAPACK's limit; else NaN, like gees' info > 0)."""
    a = ctx.astype(a, complex_dtype(a.dtype))
    batch, n = a.shape[:-2], a.shape[-1]
    nb = len(batch)
    if n == 1:
        return a, eye(ctx, a.shape, a.dtype), ctx.full(batch, True, np.bool_)
    a, top = _scaled(ctx, a)  # as geev does, so that tiny and huge matrices neither under- nor overflow
    h, z = _hessenberg(ctx, a)
    rdt = real_dtype(a.dtype)
    eps = _eps(rdt)
    smlnum = float(np.finfo(hlo.canonical_dtype(rdt)).tiny) * n / eps
    sub_shape = batch + (n - 1,)
    lidx = ctx.binary("add", ctx.iota(sub_shape, I32, nb), ctx.full(sub_shape, 1, I32))  # row of each subdiagonal
    sub_pos = ctx.compare(ctx.iota(a.shape, I32, nb),
                          _add(ctx, ctx.iota(a.shape, I32, nb + 1), ctx.full(a.shape, 1, I32)), "EQ")
    max_iter = 30 * max(10, n)

    def cond(b, it, h, z, hi, stuck):
        running = b.compare(hi, b.zeros_like(hi), "GT")  # some matrix still has an active block
        if nb:
            running = b.reduce_with(running, list(range(nb)), "or", False)
        return b.binary("and", b.compare(it, b.scalar(max_iter, I32), "LT"), running)

    def body(b, it, h, z, hi, stuck):
        d = diagonal(b, h, 0, nb, nb + 1)
        sd = diagonal(b, h, -1, nb, nb + 1)
        sup = diagonal(b, h, 1, nb, nb + 1)
        d_abs = abs_value(b, d)
        near = _add(b, b.slice(d_abs, [0] * (nb + 1), list(batch) + [n - 1]),
                    b.slice(d_abs, [0] * nb + [1], list(batch) + [n]))
        sd_abs = abs_value(b, sd)
        # as zlahqr: with both diagonal neighbours zero, compare with the neighbouring
        # subdiagonal entries instead; anything below smlnum is negligible too
        zero = b.scalar(0, rdt)
        before = b.slice(b.pad(sd_abs, zero, [0] * nb + [1], [0] * (nb + 1)), [0] * (nb + 1),
                         list(batch) + [n - 1])
        after = b.slice(b.pad(sd_abs, zero, [0] * (nb + 1), [0] * nb + [1]), [0] * nb + [1], list(batch) + [n])
        beside = _add(b, before, after)
        near = b.select(b.compare(near, b.zeros_like(near), "EQ"), beside, near)
        negligible = b.binary("or", b.compare(sd_abs, _mul(b, _like(b, near, eps), near), "LE"),
                              b.compare(sd_abs, _like(b, sd_abs, smlnum), "LE"))
        # zero the negligible subdiagonal entries
        neg_full = b.compare(embed_diagonal(b, b.convert(negligible, I32), -1), b.full(h.shape, 0, I32), "NE")
        h = b.select(b.binary("and", neg_full, sub_pos), b.zeros_like(h), h)
        # deflate at the bottom: the last row at or above hi whose subdiagonal is not negligible
        hiv = _rows(b, hi, sub_shape)
        live = b.binary("and", b.compare(lidx, hiv, "LE"), b.unary("not", negligible))
        new_hi = b.reduce_with(b.select(live, lidx, b.zeros_like(lidx)), [nb], "maximum", 0)
        stuck = b.select(b.compare(new_hi, hi, "LT"), b.zeros_like(stuck), _add(b, stuck, _like(b, stuck, 1)))
        hi = new_hi
        hiv = _rows(b, hi, sub_shape)
        # the active block starts below the last negligible subdiagonal above hi
        split = b.binary("and", b.compare(lidx, hiv, "LE"), negligible)
        lo = b.reduce_with(b.select(split, lidx, b.zeros_like(lidx)), [nb], "maximum", 0)
        # Wilkinson shift from the trailing 2x2 block of the active block
        hm1 = b.binary("maximum", _sub(b, hi, _like(b, hi, 1)), b.zeros_like(hi))
        ta, td, tb, tc = _pick_many(b, [(d, hm1), (d, hi), (sup, hm1), (sd, hm1)])
        p = _mul(b, _sub(b, ta, td), _like(b, ta, 0.5))
        bc = _mul(b, tb, tc)
        disc = b.unary("sqrt", _add(b, _mul(b, p, p), bc))
        flip = b.compare(b.real(_mul(b, conj(b, p), disc)), b.zeros_like(b.real(p)), "LT")
        disc = b.select(flip, _neg(b, disc), disc)
        den = _add(b, p, disc)
        den_zero = b.compare(abs_value(b, den), b.zeros_like(abs_value(b, den)), "EQ")
        shift = _sub(b, td, b.select(den_zero, b.zeros_like(bc),
                                     _div(b, bc, b.select(den_zero, _like(b, den, 1), den))))
        exceptional = b.compare(b.binary("remainder", stuck, _like(b, stuck, 11)), _like(b, stuck, 10), "EQ")
        tc_abs = abs_value(b, tc)
        shift = b.select(exceptional, _add(b, td, _to(b, _mul(b, _like(b, tc_abs, 0.75), tc_abs), td.dtype)), shift)
        # one implicit QR step on rows/columns lo..hi: bulge chasing with Givens rotations
        start = b.reduce_with(lo, list(range(nb)), "minimum", n) if nb else lo
        stop = b.reduce_with(hi, list(range(nb)), "maximum", 0) if nb else hi

        def chase_cond(c, k, h, z):
            return c.compare(k, stop, "LT")

        def chase(c, k, h, z):
            zr = c.scalar(0, I32)
            kv = c.broadcast_in_dim(k, batch, [])
            first = c.compare(kv, lo, "EQ")
            active = c.binary("and", c.compare(kv, lo, "GE"), c.compare(kv, hi, "LT"))
            km1 = c.binary("maximum", c.binary("subtract", k, c.scalar(1, I32)), zr)
            col_k = c.reshape(c.dynamic_slice(h, [zr] * nb + [k, k], batch + (2, 1)), batch + (2,))
            col_b = c.reshape(c.dynamic_slice(h, [zr] * nb + [k, km1], batch + (2, 1)), batch + (2,))
            x = c.select(first, _sub(c, c.reshape(c.slice(col_k, [0] * (nb + 1), list(batch) + [1]), batch), shift),
                         c.reshape(c.slice(col_b, [0] * (nb + 1), list(batch) + [1]), batch))
            y = c.select(first, c.reshape(c.slice(col_k, [0] * nb + [1], list(batch) + [2]), batch),
                         c.reshape(c.slice(col_b, [0] * nb + [1], list(batch) + [2]), batch))
            cs, sn = _givens(c, x, y)
            cs = c.select(active, cs, _like(c, cs, 1))
            sn = c.select(active, sn, c.zeros_like(sn))
            cc, sc = _to(c, cs, h.dtype), sn
            # rows k, k+1: R [r1; r2]
            rows = c.dynamic_slice(h, [zr] * nb + [k, zr], batch + (2, n))
            r1 = c.slice(rows, [0] * (nb + 2), list(batch) + [1, n])
            r2 = c.slice(rows, [0] * nb + [1, 0], list(batch) + [2, n])
            bs = lambda v: c.broadcast_in_dim(v, batch + (1, n), range(nb))
            n1 = _add(c, _mul(c, bs(cc), r1), _mul(c, bs(sc), r2))
            n2_ = _sub(c, _mul(c, bs(cc), r2), _mul(c, bs(conj(c, sc)), r1))
            h = c.dynamic_update_slice(h, c.concatenate([n1, n2_], nb), [zr] * nb + [k, zr])
            # columns k, k+1: [c1 c2] R^H

            def cols(m):
                pair = c.dynamic_slice(m, [zr] * nb + [zr, k], batch + (n, 2))
                c1 = c.slice(pair, [0] * (nb + 2), list(batch) + [n, 1])
                c2 = c.slice(pair, [0] * (nb + 1) + [1], list(batch) + [n, 2])
                bc_ = lambda v: c.broadcast_in_dim(v, batch + (n, 1), range(nb))
                m1 = _add(c, _mul(c, bc_(cc), c1), _mul(c, bc_(conj(c, sc)), c2))
                m2 = _sub(c, _mul(c, bc_(cc), c2), _mul(c, bc_(sc), c1))
                return c.dynamic_update_slice(m, c.concatenate([m1, m2], nb + 1), [zr] * nb + [zr, k])

            h, z = cols(h), cols(z)
            # the bulge below the subdiagonal (row k + 1, column k - 1) is gone: store the zero
            bulge = c.reshape(c.dynamic_slice(h, [zr] * nb + [c.binary("add", k, c.scalar(1, I32)), km1],
                                              batch + (1, 1)), batch)
            kill = c.binary("and", active, c.unary("not", first))
            bulge = c.select(kill, c.zeros_like(bulge), bulge)
            h = c.dynamic_update_slice(h, c.reshape(bulge, batch + (1, 1)),
                                       [zr] * nb + [c.binary("add", k, c.scalar(1, I32)), km1])
            return c.binary("add", k, c.scalar(1, I32)), h, z

        _, h, z = b.while_loop([start, h, z], chase_cond, chase)
        return b.binary("add", it, b.scalar(1, I32)), h, z, hi, stuck

    finite = _finite(ctx, ctx.reshape(a, batch + (n * n,)))  # NaN or inf: no iterations, NaN results
    start_hi = ctx.select(finite, ctx.full(batch, n - 1, I32), ctx.full(batch, 0, I32))
    init = [ctx.scalar(0, I32), h, z, start_hi, ctx.full(batch, 0, I32)]
    _, h, z, hi, _ = ctx.while_loop(init, cond, body)
    t = _mul(ctx, triangle(ctx, h, lower=False), ctx.broadcast_in_dim(_to(ctx, top, h.dtype), h.shape, range(nb)))
    return t, z, ctx.binary("and", finite, ctx.compare(hi, ctx.zeros_like(hi), "EQ"))


def triangular_eigenvectors(ctx, t):
    """x upper triangular with t x = x diag(t): back substitution, one row per iteration
    (bottom up) for all columns at once; as LAPACK's ztrevc, a divisor t_ii - t_jj smaller
    than eps |t_jj| (repeated eigenvalues) is replaced by that bound, and the columns are
    rescaled as they grow: a Jordan block's column grows by 1 / eps per row (in float32 a
    4 x 4 block's reached 7e19, whose square overflowed its norm), so each column is divided
    by its largest modulus whenever that exceeds 1, on t / max |t_ij| (the quotients then stay
    below n^2 / tiny)."""
    batch, n = t.shape[:-2], t.shape[-1]
    nb = len(batch)
    t, _ = _scaled(ctx, t)
    rdt = real_dtype(t.dtype)
    lam = diagonal(ctx, t, 0, nb, nb + 1)
    eps = _eps(rdt)
    tiny = float(np.finfo(hlo.canonical_dtype(rdt)).tiny) / eps
    cols = ctx.iota(batch + (n,), I32, nb)

    def step(b, r, x):
        z = b.scalar(0, I32)
        i = b.binary("subtract", b.scalar(n - 2, I32), r)
        iv = b.broadcast_in_dim(i, batch + (n,), [])
        row = b.reshape(b.dynamic_slice(t, [z] * nb + [i, z], batch + (1, n)), batch + (n,))
        row = b.select(b.compare(cols, iv, "GT"), row, b.zeros_like(row))
        acc = _vec_mat(b, row, x)  # sum_k>i t_ik x_kj: (batch, n)
        tii = b.reshape(b.dynamic_slice(lam, [z] * nb + [i], batch + (1,)), batch + (1,))
        den = _sub(b, b.broadcast_in_dim(tii, batch + (n,), range(nb + 1)), lam)
        floor = b.binary("maximum", _mul(b, _like(b, abs_value(b, lam), eps), abs_value(b, lam)),
                         _like(b, abs_value(b, lam), tiny))
        small = b.compare(abs_value(b, den), floor, "LT")
        den = b.select(small, _to(b, floor, t.dtype), den)
        val = _neg(b, _div(b, acc, den))
        old = b.reshape(b.dynamic_slice(x, [z] * nb + [i, z], batch + (1, n)), batch + (n,))
        new = b.select(b.compare(cols, iv, "GT"), val, old)
        x = b.dynamic_update_slice(x, b.reshape(new, batch + (1, n)), [z] * nb + [i, z])
        return (_bounded_columns(b, x),)

    return counted_loop(ctx, n - 1, [eye(ctx, t.shape, t.dtype)], step)[0]


def _bounded_columns(b, x):
    """x (batch..., n, n) with each column whose largest modulus m exceeds 1 divided by m."""
    nb = x.ndim - 2
    m = b.reduce_with(abs_value(b, x), [nb], "maximum", 0)
    big = b.compare(m, _like(b, m, 1), "GT")
    inv = _div(b, _like(b, m, 1), b.select(big, m, _like(b, m, 1)))
    return _mul(b, x, _last(b, _to(b, inv, x.dtype), x.shape))


def portable_eig(ctx, a, vectors=True):
    """Eigenvalues diag(t) of the complex Schur form; eigenvectors z x (x from
    triangular_eigenvectors), normalised as LAPACK's geev: unit 2-norm, the entry of largest
    modulus real and positive."""
    t, z, ok = portable_schur(ctx, a)
    nb = a.ndim - 2
    w = diagonal(ctx, t, 0, nb, nb + 1)
    if not vectors:
        return nan_unless(ctx, ok, w), None
    v = mm(ctx, z, triangular_eigenvectors(ctx, t))
    sq = abs_squared(ctx, v)
    norm = ctx.unary("sqrt", ctx.reduce_with(sq, [nb], "add", 0))
    top = ctx.reduce_with(sq, [nb], "maximum", 0)
    rows = ctx.iota(v.shape, I32, nb)
    first_top = ctx.reduce_with(ctx.select(ctx.compare(sq, _last(ctx, top, v.shape), "EQ"), rows,
                                           _like(ctx, rows, v.shape[-2])), [nb], "minimum", v.shape[-2])
    lead = ctx.reduce_with(ctx.select(ctx.compare(rows, _last(ctx, first_top, v.shape), "EQ"), v, ctx.zeros_like(v)),
                           [nb], "add", 0)
    scale = _div(ctx, conj(ctx, _phase(ctx, lead)), _to(ctx, norm, v.dtype))
    v = _mul(ctx, v, _last(ctx, scale, v.shape))
    return nan_unless(ctx, ok, w, v)


# ----- sqrtm of a real matrix ---------------------------------------------------------------
def is_real_root(ctx, x):
    """Whether the principal square root x (complex) of a real matrix is real: it is unless
    the matrix has a negative real eigenvalue, and then its imaginary part is as large as
    sqrt(|eigenvalue|). Without the real Schur form (which tells real eigenvalues exactly)
    the portable path asks for |Im x| <= sqrt(eps) max |x| instead."""
    nb = x.ndim - 2
    imag = ctx.reduce_with(abs_value(ctx, ctx.imag(x)), [nb, nb + 1], "maximum", 0)
    size = ctx.reduce_with(abs_value(ctx, x), [nb, nb + 1], "maximum", 0)
    return ctx.compare(imag, _mul(ctx, _like(ctx, size, np.sqrt(_eps(size.dtype))), size), "LE")
