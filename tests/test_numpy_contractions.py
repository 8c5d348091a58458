"""Contractions under jit_ps: dot, matmul, tensordot, einsum, inner, outer, vdot, kron,
cross, vecdot/matvec/vecmat; with autograd's own adjoint helpers in the gradients."""
import re

import autograd.numpy as np
import numpy as onp
import pytest

pytestmark = pytest.mark.filterwarnings("error:.*runs as plain autograd")

from numpy_checks import (C64, C128, F32, F64, FLOATS, check, check_exact, check_family, check_jvp,  # noqa: E402
                          check_value, rand)

from autograd_xla import jit_ps  # noqa: E402
from autograd_xla.rules.contractions import cross_of_2_vectors  # noqa: E402

# name -> (function, shapes of its arguments); every argument is differentiated
PRODUCTS = {
    "dot_mm": (np.dot, [(3, 4), (4, 2)]),
    "dot_mv": (np.dot, [(3, 4), (4,)]),
    "dot_vm": (np.dot, [(4,), (4, 2)]),
    "dot_vv": (np.dot, [(4,), (4,)]),
    "dot_scalar": (np.dot, [(), (3, 2)]),
    "dot_nd": (np.dot, [(2, 3, 4), (5, 4, 2)]),
    "dot_1d_nd": (np.dot, [(4,), (2, 4, 3)]),
    "matmul_mm": (np.matmul, [(3, 4), (4, 2)]),
    "matmul_batch": (np.matmul, [(2, 3, 4), (2, 4, 5)]),
    "matmul_bcast": (np.matmul, [(2, 1, 3, 4), (5, 4, 2)]),
    "matmul_vec": (np.matmul, [(4,), (2, 4, 3)]),
    "matmul_mat_vec": (np.matmul, [(2, 3, 4), (4,)]),
    "matmul_vv": (np.matmul, [(4,), (4,)]),
    "matmul_op": (lambda a, b: a @ b, [(3, 4), (4, 2)]),
    "tensordot_2": (np.tensordot, [(2, 3, 4), (3, 4, 5)]),
    "tensordot_0": (lambda a, b: np.tensordot(a, b, 0), [(2, 3), (4,)]),
    "tensordot_axes": (lambda a, b: np.tensordot(a, b, axes=([0, 2], [2, 0])), [(2, 3, 4), (4, 5, 2)]),
    "tensordot_int": (lambda a, b: np.tensordot(a, b, axes=(1, 0)), [(2, 3), (3, 4)]),
    "tensordot_neg": (lambda a, b: np.tensordot(a, b, axes=([-1], [-2])), [(2, 3), (4, 3, 2)]),
    "inner": (np.inner, [(3, 4), (2, 4)]),
    "inner_vv": (np.inner, [(4,), (4,)]),
    "inner_scalar": (np.inner, [(), (2, 3)]),
    "outer": (np.outer, [(3,), (4,)]),
    "kron": (np.kron, [(2, 3), (3, 2)]),
    "kron_1d": (np.kron, [(3,), (2,)]),
    "cross": (np.cross, [(4, 3), (4, 3)]),
    "einsum_mm": (lambda a, b: np.einsum("ij,jk->ik", a, b), [(3, 4), (4, 2)]),
    "einsum_sum": (lambda a: np.einsum("ijk->j", a), [(2, 3, 4)]),
    "einsum_transpose": (lambda a: np.einsum("ijk->kij", a), [(2, 3, 4)]),
    "einsum_implicit": (lambda a, b: np.einsum("ij,jk", a, b), [(3, 4), (4, 2)]),
    "einsum_batch": (lambda a, b: np.einsum("bij,bjk->bik", a, b), [(2, 3, 4), (2, 4, 5)]),
    "einsum_ellipsis": (lambda a, b: np.einsum("...ij,...jk->...ik", a, b), [(2, 3, 4), (2, 4, 5)]),
    "einsum_ellipsis_bcast": (lambda a, b: np.einsum("...j,j->...", a, b), [(2, 3, 4), (4,)]),
    "einsum_three": (lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c), [(2, 3), (3, 4), (4, 2)]),
    "einsum_four": (lambda a, b, c, d: np.einsum("i,ij,jk,k->", a, b, c, d), [(2,), (2, 3), (3, 4), (4,)]),
    "einsum_outer": (lambda a, b: np.einsum("i,j->ij", a, b), [(3,), (4,)]),
    "einsum_sublist": (lambda a, b: np.einsum(a, [0, 1], b, [1, 2], [0, 2]), [(3, 4), (4, 2)]),
    "einsum_sublist_ell": (lambda a, b: np.einsum(a, [Ellipsis, 0], onp.linspace(0, 1, 4), [0], [Ellipsis]) * b,
                           [(2, 3, 4), ()]),  # autograd's VJP wrt a 1-D operand without '...' fails
    "einsum_repeat_out": (lambda a, b: np.einsum("ij,ij->i", a, b), [(3, 4), (3, 4)]),
}


def _family(dtype, names=None):
    names = names or list(PRODUCTS)
    fns = {k: PRODUCTS[k][0] for k in names}
    inputs = {k: tuple(rand(s, dtype, -1.5, 1.5, seed=i + 3 * j) for j, s in enumerate(PRODUCTS[k][1]))
              for i, k in enumerate(names)}
    return fns, inputs


@pytest.mark.parametrize("dtype", FLOATS)
def test_products_family(dtype):
    fns, inputs = _family(dtype)
    check_family(fns, inputs)


@pytest.mark.parametrize("dtype", [C128, C64])
def test_products_complex(dtype):
    names = ["dot_mm", "dot_mv", "dot_nd", "matmul_batch", "matmul_vec", "tensordot_axes", "inner", "outer",
             "kron", "cross", "einsum_three", "einsum_ellipsis"]
    fns, inputs = _family(dtype, names)
    check_family(fns, inputs, grad_rtol=1e-11 if dtype == C128 else 1e-4)


#: Products whose left operand contracts the first of its matrix dimensions (autograd's
#: weight gradient `x.T @ g`), large enough that XLA:CPU would give them to YNNPACK were it
#: the last: lowered as such a product (context._left_canonical), by the way that copies fewer
#: elements (the label), which takes that many optimization barriers.
LEFT_TRANSPOSED = {
    "g transposed, then the result": (lambda x, g: x.T @ g, [(32, 48), (32, 20)], 2),
    "x transposed": (lambda x, g: x.T @ g, [(32, 10), (32, 60)], 1),
    "the result transposed": (lambda x, h: x.T @ h.T, [(32, 48), (20, 32)], 1),
    "batched, b transposed, then the result": (lambda a, b: np.swapaxes(a, 1, 2) @ b, [(3, 16, 24), (3, 16, 4)], 2),
    "batched, a transposed": (lambda a, b: np.swapaxes(a, 1, 2) @ b, [(3, 16, 12), (3, 16, 10)], 1),
    "tensordot, b transposed, then the result": (lambda a, b: np.tensordot(a, b, axes=([0], [0])),
                                                 [(24, 16), (24, 9)], 2),
    # XLA would fold the transpose into the product, swapped: h.T @ g.T
    "a transpose of such a product, read through a barrier": (lambda g, h: (g.T @ h).T, [(32, 10), (32, 60)], 2),
}


def _left_contracting_first(optimized_hlo):
    """The dots of XLA's optimised HLO whose left operand contracts the first of its matrix
    dimensions (the dimension after its batch dimensions)."""
    dots = re.findall(r"dot\(.*?lhs_batch_dims=\{([\d,]*)\}.*?lhs_contracting_dims=\{(\d+)\}|"
                      r"dot\((?!.*lhs_batch_dims).*?lhs_contracting_dims=\{(\d+)\}", optimized_hlo)
    return [d for d in dots if int(d[1] or d[2]) == (len(d[0].split(",")) if d[0] else 0)]


@pytest.mark.parametrize("dtype", FLOATS)
def test_products_reading_the_left_operand_transposed(dtype):
    fns = {k: f for k, (f, _, _) in LEFT_TRANSPOSED.items()}
    inputs = {k: tuple(rand(s, dtype, -1.5, 1.5, seed=i + 3 * j) for j, s in enumerate(shapes))
              for i, (k, (_, shapes, _)) in enumerate(LEFT_TRANSPOSED.items())}
    check_family(fns, inputs)
    for name, (f, _, barriers) in LEFT_TRANSPOSED.items():
        lowered, hlo = jit_ps(f).lower(*inputs[name]).as_text(), jit_ps(f).optimized_hlo(*inputs[name])
        assert lowered.count("stablehlo.optimization_barrier") == barriers, (name, lowered)
        assert "dot(" in hlo and not _left_contracting_first(hlo), (name, hlo)


def test_mixed_dtypes_and_empty():
    a32, b64 = rand((3, 4), F32), rand((4, 2), F64)
    check(np.dot, a32, b64, argnums=(0, 1))
    check(np.matmul, a32, b64.astype(C128), argnums=(0, 1))
    check(lambda a, b: np.einsum("ij,jk->ik", a, b), a32, rand((4, 2), F32), argnums=(0, 1))
    check(lambda a: np.dot(a, 2.0) + a @ onp.eye(4, dtype=F32) * 3, a32)
    e = onp.zeros((3, 0))
    check(lambda a, e: np.dot(e, onp.zeros((0, 2))) + np.dot(a[:, :1], onp.ones((1, 2))) + np.sum(e @ e.T), a32.astype(F64),
          e, argnums=(0, 1))
    check_value(lambda a: (np.einsum("ij->", a[:0]), np.tensordot(a[:0], a[:0], axes=([0], [0])),
                           np.outer(a[:0, 0], a[0]), np.kron(a[:0], a)), a32)


def test_integer_and_bool_products():
    i, j = rand((3, 4), onp.int32, -5, 5), rand((4, 2), onp.int64, -5, 5)
    b, c = rand((3, 4), onp.bool_), rand((4, 2), onp.bool_, seed=1)
    check_exact(lambda i, j: (np.dot(i, j), i @ j, np.tensordot(i, j, 1), np.einsum("ij,jk", i, j),
                              np.outer(i[0], j[:, 0]), np.inner(i, i), np.kron(i[:2, :2], j[:2]),
                              np.cross(i[:, :3], i[:, 1:]), np.vdot(i, i), np.matmul(i, j.astype(onp.int32))), i, j)
    check_exact(lambda b, c: (np.dot(b, c), b @ c, np.einsum("ij,jk->ik", b, c), np.outer(b[0], c[0])), b, c)
    check_value(lambda i, x: np.dot(i, x), i, rand((4,), F32))


def test_vdot_vecdot_matvec():
    a, b = rand((3, 4), C128), rand((3, 4), C128, seed=1)
    check_value(lambda a, b: (np.vdot(a, b), np.vecdot(a, b), np.vecdot(a, b, axis=0), np.matvec(a, b[0]),
                              np.vecmat(b[0], a.T), np.vdot(a.real, b.real)), a, b)
    check_value(lambda a, b: np.cross(a[:, :3].T, b[:, :3].T, axisa=0, axisb=0), a, b)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 2-vectors in cross (numpy 2.0-2.4; 2.5 raises)
        for cross in (lambda a, b: np.cross(a[:, :2].real, b[:, :2].real),
                      lambda a, b: np.cross(a[:, :3], b[:, :2], axisc=0)):
            if cross_of_2_vectors():
                check_value(cross, a, b)
            else:
                with pytest.raises(ValueError) as plain:
                    cross(a, b)
                with pytest.raises(ValueError) as jitted:
                    jit_ps(cross, fallback="error")(a, b)
                assert str(plain.value) in str(jitted.value)
    x, y = rand((2, 3, 4), F64), rand((4,), F64)
    check_value(lambda x, y: (np.vecdot(x, y), np.matvec(x, y), np.vecmat(y[:3], x)), x, y)


def test_einsum_optimize_and_jvp():
    a, b, c = rand((3, 4)), rand((4, 5)), rand((5, 2))
    check(lambda a, b, c: np.einsum("ij,jk,kl->il", a, b, c, optimize=True), a, b, c, argnums=(0, 1, 2))
    check_jvp(lambda a: np.einsum("ij,jk,kl->il", a, b, c), a)
    check_jvp(lambda b: np.dot(a, b) + np.tensordot(a, b, 1), b)
    check_value(lambda a: np.einsum("ij,ij->", a, a, dtype=F32, casting="unsafe"), a)
    # autograd's einsum VJP cannot express these (it would need "i->ii"): values only
    check_value(lambda a, b: (np.einsum("ii->i", a[:, :3]), np.einsum("ii", a[:, :3]), np.einsum("ii,i->i", a[:, :3], b[:3, 0]),
                              np.outer(a, b[0]), np.cross(a[:2, None, :3], b[:3, :3].T), np.einsum("iij->j", a[:3, :3, None] * b[None, :3, :3])), a, b)
    check_value(lambda a: (np.einsum("i...->...", a), np.einsum("...i->i...", a), np.einsum("ij->ji", a)), a)


def test_higher_order_through_adjoints():
    """grad of grad goes through autograd's dot/tensordot adjoint helpers and their VJPs."""
    from autograd import grad
    a, b = rand((3, 4)), rand((4, 2))
    check(lambda a: grad(lambda a: np.sum(np.tanh(np.dot(a, b))))(a), a)
    check(lambda a: grad(lambda a: np.sum(np.tanh(np.tensordot(a, b, 1)) ** 2))(a), a)
    check(lambda b: grad(lambda b: np.sum(np.sin(np.inner(a, b.T))))(b), b)
