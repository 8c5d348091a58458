"""BLAS's matrix-vector products (blas.py): which dots lowering gives BLAS, that their results
are numpy's in every form a program reaches them (closed over, an argument read in place at
any offset, in derivatives, loops, vmap, threads, a second process's cached executable), and
that the handler refuses what it was not made for. Where the C handlers are built, the file
runs again with the Python ones (test_the_python_handlers_pass_this_file_too)."""
import os
import subprocess
import sys

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad, hessian_vector_product, value_and_grad
from autograd_xla import backend, blas, fori_loop, jit_ps, lowering, tiering, vmap
from helpers import assert_close, placed, run_threads, run_with_a_persistent_cache

pytestmark = pytest.mark.usefixtures("on_the_cpu")  # features of the CPU runtime (conftest)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
rs = onp.random.RandomState(0)
M, N = 48, 40  # small matrices, given BLAS here by the fixture below


@pytest.fixture(autouse=True)
def small_matrices_too(monkeypatch):
    monkeypatch.setattr(blas, "MIN_ELEMENTS", M * N)


def targets(f, *args):
    """The BLAS products in f's program for `args`, ROWS and COLUMNS counted."""
    text = f.stablehlo(*args)
    return text.count(blas.ROWS), text.count(blas.COLUMNS)


def gemms(f, *args):
    """The BLAS matrix products (blas.GEMM) in f's program for `args`."""
    return f.stablehlo(*args).count(blas.GEMM)


#: (label, function of (A, x, g), BLAS products (ROWS, COLUMNS)); A is M x N, x has N
#: elements, g M: each form numpy code writes a matrix-vector product in
FORMS = [
    ("matmul", lambda A, x, g: A @ x, (1, 0)),
    ("dot", lambda A, x, g: np.dot(A, x), (1, 0)),
    ("vector_first", lambda A, x, g: g @ A, (0, 1)),
    ("dot_vector_first", lambda A, x, g: np.dot(g, A), (0, 1)),
    ("transposed", lambda A, x, g: A.T @ g, (0, 1)),
    ("vector_first_transposed", lambda A, x, g: x @ A.T, (1, 0)),
    ("inner", lambda A, x, g: np.inner(A, x), (1, 0)),
    ("tensordot", lambda A, x, g: np.tensordot(A, x, 1), (1, 0)),
    ("einsum", lambda A, x, g: np.einsum("ij,j->i", A, x), (1, 0)),
    ("quadratic", lambda A, x, g: g @ (A @ x), (1, 0)),
    ("column", lambda A, x, g: A @ x[:, None], (1, 0)),   # a column or row is a vector too
    ("row_first", lambda A, x, g: g[None, :] @ A, (0, 1)),
    ("transposed_column", lambda A, x, g: A.T @ np.reshape(g, (M, 1)), (0, 1)),
    ("row_first_transposed", lambda A, x, g: x[None] @ A.T, (1, 0)),
    ("both_ways_and_elementwise", lambda A, x, g: np.tanh(A) @ x + A @ (g @ A) * 2.0 + np.sum(A * A), (2, 1)),
]
DTYPES = [onp.float64, onp.float32]


def operands(dtype, offset=0):
    return placed((M, N), dtype, offset), rs.randn(N).astype(dtype), rs.randn(M).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("label,form,products", FORMS, ids=[f[0] for f in FORMS])
def test_every_form_of_the_product_is_numpys(label, form, products, dtype):
    A, x, g = operands(dtype)
    f = jit_ps(form)
    assert targets(f, A, x, g) == products, label
    assert_close(f(A, x, g), form(A, x, g), path=label)
    closed = jit_ps(lambda x, g: form(A, x, g))      # a closed-over matrix: a lifted constant (A.T
    assert sum(targets(closed, x, g)) == sum(products), label  # is one too, so other targets)
    assert_close(closed(x, g), form(A, x, g), path=label)


@pytest.mark.parametrize("dtype,offset", [(onp.float64, o) for o in range(0, 64, 8)]
                         + [(onp.float32, o) for o in (0, 4, 28, 60)])
def test_a_large_argument_is_multiplied_where_it_is(dtype, offset, monkeypatch):
    """A misaligned large matrix that only BLAS's products and elementwise ops read is read
    in place (a view: lowering.FUSED_USES), at any offset; its later changes are seen."""
    monkeypatch.setattr(blas, "MIN_ELEMENTS", 1)
    shape = (512, 256) if dtype == onp.float64 else (512, 512)  # 1 MiB: lowering.LARGE_ARRAY_BYTES
    X = placed(shape, dtype, offset)
    w, r = rs.randn(shape[1]).astype(dtype), rs.randn(shape[0]).astype(dtype)
    form = FORMS[-1][1]
    f = jit_ps(form)
    text = f.stablehlo(X, w, r)
    assert "%view0" in text and "%tail" not in text and targets(f, X, w, r) == (2, 1)
    for k in range(3):
        X[k] += 1.0
        assert_close(f(X, w, r), form(X, w, r))
    assert_close(f(onp.ascontiguousarray(X), w, r), form(X, w, r))    # another address, same program
    Xt = onp.asfortranarray(X)                          # not C-contiguous: copied, to offset 0
    assert_close(f(Xt, w, r), form(Xt, w, r))
    if dtype != onp.float64:  # autograd's float32 mean has a float64 gradient (docs/benchmarks.rst)
        return
    vg = jit_ps(value_and_grad(logistic_loss_matmul))  # X @ w and its gradient's X.T @ column
    y = (rs.rand(shape[0]) > 0.5).astype(dtype)
    assert "%view0" in vg.stablehlo(w, X, y) and targets(vg, w, X, y) == (1, 1)
    for got, want in zip(vg(w, X, y), value_and_grad(logistic_loss_matmul)(w, X, y)):
        assert_close(got, want)


def logistic_loss(w, X, y):
    z = np.dot(X, w)
    return np.mean(np.logaddexp(0, z) - y * z)


def logistic_loss_matmul(w, X, y):  # autograd's matmul gradient multiplies X by a column
    z = X @ w
    return np.mean(np.logaddexp(0, z) - y * z)


def test_derivatives_through_blas_are_autograds():
    """logistic regression's value and gradient (X@w and its transpose X.T@r), the
    quadratic's gradient and Hessian-vector product, and a second derivative."""
    X, w = placed((M, N), offset=16), rs.randn(N)
    y = (rs.rand(M) > 0.5) * 1.0
    for loss in (logistic_loss, logistic_loss_matmul):
        vg = jit_ps(value_and_grad(loss))
        assert targets(vg, w, X, y) == (1, 1), loss.__name__
        for got, want in zip(vg(w, X, y), value_and_grad(loss)(w, X, y)):
            assert_close(got, want, path=loss.__name__)
    B = rs.randn(2 * N, 2 * N)                          # 2N x 2N: above MIN_ELEMENTS here
    A, b, v = B @ B.T / N + onp.eye(2 * N), rs.randn(2 * N), rs.randn(2 * N)
    A[0, 1] += 1e-3  # not symmetric: gemv both ways (symv's: test_a_symmetric_constant_is_multiplied_by_symv)

    def quadratic(x):
        return 0.5 * np.dot(x, np.dot(A, x)) - np.dot(b, x)
    for f, args in ((grad(quadratic), (b,)), (hessian_vector_product(quadratic), (b, v)),
                    (grad(lambda x: np.sum(grad(quadratic)(x) ** 2)), (b,))):
        jf = jit_ps(f)
        assert sum(targets(jf, *args)) >= 2
        assert_close(jf(*args), f(*args))


#: (label, function of (A, B) with A M x N and B N x M, BLAS matrix products): each form
#: numpy code writes a matrix product in, each transpose XLA folds into BLAS's call
MATRIX_FORMS = [
    ("matmul", lambda A, B: A @ B, 1),
    ("dot", lambda A, B: np.dot(A, B), 1),
    ("left_transposed", lambda A, B: A.T @ B.T, 1),
    ("right_transposed", lambda A, B: A @ (A * B.T).T, 1),
    ("both_transposed", lambda A, B: np.transpose(B) @ A.T, 1),
    ("einsum", lambda A, B: np.einsum("ij,jk->ik", A, B), 1),
    ("tensordot", lambda A, B: np.tensordot(A, B, 1), 1),
    ("chain_and_elementwise", lambda A, B: np.tanh(A @ B) @ A + 1.0, 2),
]


@pytest.fixture
def small_products(monkeypatch):
    """BLAS takes these small matrices' products too, wherever their operands come from."""
    monkeypatch.setattr(blas, "GEMM_MIN_PRODUCT", M * N * N)
    monkeypatch.setattr(blas, "GEMM_ALONE", False)


COMPLEX = [onp.complex128, onp.complex64]


def complex_placed(shape, dtype, offset):
    """placed's array with an imaginary part too, where `dtype` is complex."""
    out = placed(shape, dtype, offset)
    if onp.dtype(dtype).kind == "c":
        out += 1j * rs.rand(*shape)
    return out


@pytest.mark.parametrize("dtype", DTYPES + COMPLEX, ids=lambda d: d.__name__)
@pytest.mark.parametrize("label,form,products", MATRIX_FORMS, ids=[f[0] for f in MATRIX_FORMS])
def test_every_form_of_the_matrix_product_is_numpys(label, form, products, dtype, small_products):
    """(Complex ones by cblas_zgemm / cgemm, from blas.COMPLEX_MIN_PRODUCT whatever they read.)"""
    A, B = complex_placed((M, N), dtype, 16), complex_placed((N, M), dtype, 48)
    f = jit_ps(form)
    assert gemms(f, A, B) == products, label
    assert_close(f(A, B), form(A, B), path=label)
    closed = jit_ps(lambda B: form(A, B))
    assert gemms(closed, B) == products, label
    assert_close(closed(B), form(A, B), path=label)


@pytest.mark.parametrize("offsets", [(0, 0), (16, 48), (8, 24), (56, 0)])
def test_large_matrices_are_multiplied_where_they_are(offsets, monkeypatch):
    """Two misaligned large matrix arguments that only BLAS's products and elementwise ops
    read (SeLU's layer, its gradient) are read in place, at any offsets; changes are seen."""
    x, W, b = placed((256, 512), offset=offsets[0]), placed((512, 256), offset=offsets[1]), rs.randn(256)

    def layer(W, b, x):
        z = x @ W + b
        return 1.05 * np.where(z > 0, z, 1.67 * (np.exp(z) - 1.0))
    f = jit_ps(layer)
    text = f.stablehlo(W, b, x)
    assert text.count("%view") >= 2 and "%tail" not in text and gemms(f, W, b, x) == 1
    for k in range(2):
        W[k] -= 0.5
        x[-1 - k] += 0.25
        assert_close(f(W, b, x), layer(W, b, x))
    g = jit_ps(grad(lambda W, b, x: np.sum(layer(W, b, x)), argnum=(0, 1, 2)))  # x.T @ d, d @ W.T
    assert gemms(g, W, b, x) == 3
    assert_close(g(W, b, x), grad(lambda W, b, x: np.sum(layer(W, b, x)), argnum=(0, 1, 2))(W, b, x))


def test_blas_multiplies_matrices_only_where_each_product_reads_a_large_argument(monkeypatch):
    """blas.GEMM_ALONE: an MLP whose first layer reads a large argument but whose next ones
    do not leaves every product to XLA, as does a product of a matrix closed over; a layer
    whose products all read large arguments gets BLAS's. The results are autograd's either
    way, and with GEMM_ALONE off BLAS takes them all."""
    sizes = (512, 256, 64, 10)                      # x and the first weights are 1 MiB: large
    params = [(placed((m, n), offset=16) / m, rs.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    x, y = placed((256, 512), offset=16), onp.eye(10)[rs.randint(0, 10, 256)]
    A = rs.randn(512, 256)

    def closed(W):                                   # A is a constant: no argument read in place
        return np.sum(np.tanh(A @ W) ** 2)
    layer = (lambda W, x: np.sum(np.tanh(x @ W)), (params[0][0], x))  # both large: BLAS's
    cases = [("mlp", grad(mlp_loss), (params, x, y), 0), ("closed", grad(closed), (rs.randn(256, 64),), 0),
             ("layer", grad(layer[0], argnum=(0, 1)), layer[1], 3)]
    for alone in (True, False):
        monkeypatch.setattr(blas, "GEMM_ALONE", alone)
        for label, fun, args, products in cases:
            f = jit_ps(fun)
            assert (gemms(f, *args) == products) if alone else gemms(f, *args) >= 2, (label, alone)
            assert_close(f(*args), fun(*args), path=label)


def mlp_loss(params, x, y):
    for W, b in params[:-1]:
        x = np.tanh(x @ W + b)
    W, b = params[-1]
    logits = x @ W + b
    return -np.mean(np.sum((logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))) * y, axis=1))


@pytest.mark.parametrize("dtype", COMPLEX, ids=lambda d: d.__name__)
def test_complex_matrix_products_go_to_blas_whatever_they_read(dtype):
    """XLA:CPU's complex dot is slower than OpenBLAS's (blas.COMPLEX): a product of matrices
    computed in the program, and the derivatives through it, are BLAS's too, with autograd's
    results; below COMPLEX_MIN_PRODUCT multiply-adds XLA keeps them."""
    n = 40  # 64,000 multiply-adds
    A, B = complex_placed((n, n), dtype, 0), complex_placed((n, n), dtype, 0)

    def loss(A, B):
        C = np.tanh(A) @ (B * 2.0)
        return np.sum(np.abs(C @ np.conj(C).T) ** 2)
    assert gemms(jit_ps(loss), A, B) == 2
    assert gemms(jit_ps(loss), A[:8, :8], B[:8, :8]) == 0
    rtol = 1e-12 if dtype == onp.complex128 else 2e-5
    assert_close(jit_ps(loss)(A, B), loss(A, B), rtol=rtol)
    g = jit_ps(grad(loss, argnum=(0, 1)))
    assert gemms(g, A, B) >= 4
    assert_close(g(A, B), grad(loss, argnum=(0, 1))(A, B), rtol=rtol)


def test_derivatives_through_matrix_products_are_autograds(small_products):
    """An MLP's gradient (products transposed both ways) and a Hessian-vector product."""
    sizes = (N, 2 * N, M, 10)
    params = [(rs.randn(m, n) / m, rs.randn(n)) for m, n in zip(sizes[:-1], sizes[1:])]
    x, y = rs.randn(64, N), onp.eye(10)[rs.randint(0, 10, 64)]
    g = jit_ps(grad(mlp_loss))
    assert gemms(g, params, x, y) >= 5
    assert_close(g(params, x, y), grad(mlp_loss)(params, x, y))
    A = rs.randn(M, M)
    hvp = jit_ps(hessian_vector_product(lambda X: np.sum(np.tanh(X @ A) ** 2)))
    X, V = rs.randn(M, M), rs.randn(M, M)
    assert gemms(hvp, X, V) >= 2
    assert_close(hvp(X, V), hessian_vector_product(lambda X: np.sum(np.tanh(X @ A) ** 2))(X, V))


def test_in_a_loop_and_under_vmap():
    A, x, g = operands(onp.float64)

    square = rs.randn(N, N) / N                         # N x N: made BLAS's by the bound below
    blas.MIN_ELEMENTS = N * N
    f = jit_ps(lambda x: fori_loop(0, 5, lambda i, v: np.tanh(square @ v), x))
    assert targets(f, x) == (1, 0)
    v = x
    for _ in range(5):
        v = onp.tanh(square @ v)
    assert_close(f(x), v)
    xs = rs.randn(3, N)
    batched = jit_ps(vmap(lambda x: A @ x * 2.0))      # a batch of vectors: a matrix product, XLA's
    assert targets(batched, xs) == (0, 0)
    assert_close(batched(xs), xs @ A.T * 2.0)
    shared = jit_ps(vmap(lambda s, x: s * (A @ x), in_axes=(0, None)))  # the product unbatched: BLAS's
    assert targets(shared, onp.arange(3.0), x) == (1, 0)
    assert_close(shared(onp.arange(3.0), x), onp.arange(3.0)[:, None] * (A @ x))


def test_a_later_program_leaves_the_products_to_xla(monkeypatch):
    """A signature with BLAS products climbs to a program leaving them to XLA
    (lowering.XLA_DOTS), tried against the one in use (here: put in use untried); same results."""
    monkeypatch.setattr(tiering, "UPGRADE_RENT", 0.0)
    monkeypatch.setattr(tiering, "TRIAL_CALLS", 0)
    A, x, g = operands(onp.float64, offset=16)
    label, form, products = FORMS[-1]
    f = jit_ps(form)
    assert targets(f, A, x, g) == products
    for _ in range(4):
        assert_close(f(A, x, g), form(A, x, g))
        assert tiering.compile_thread.wait(60)
    (entry,) = f._cache.values()
    assert entry.ladder is None and f.cache_info()["upgrades"] == 4 and not entry.lowered.blas
    assert targets(f, A, x, g) == (0, 0)
    assert_close(f(A, x, g), form(A, x, g))
    monkeypatch.setattr(blas, "GEMM_MIN_PRODUCT", 1)           # a matrix product, the same way
    monkeypatch.setattr(blas, "GEMM_ALONE", False)
    B = placed((N, M), offset=8)
    f = jit_ps(lambda A, B: np.tanh(A @ B))
    assert gemms(f, A, B) == 1
    for _ in range(4):
        assert_close(f(A, B), onp.tanh(A @ B))
        assert tiering.compile_thread.wait(60)
    (entry,) = f._cache.values()
    assert entry.ladder is None and not entry.lowered.blas and gemms(f, A, B) == 0
    assert_close(f(A, B), onp.tanh(A @ B))


def test_non_finite_values_reach_what_numpys_reach():
    A, x, g = operands(onp.float64, offset=8)
    A[3, 0], A[7, -1], A[0, 5] = onp.inf, onp.nan, -onp.inf
    f = jit_ps(lambda A, x, g: (A @ x, g @ A))
    for got, want in zip(f(A, x, g), (A @ x, g @ A)):
        onp.testing.assert_array_equal(onp.isnan(got), onp.isnan(want))
        assert_close(got, want)


def test_threads_multiply_at_once():
    """The handler runs under the GIL XLA released: four threads, the C++ call path (a matrix
    closed over) and the Python one (an argument), every result right."""
    A, _, _ = operands(onp.float64)
    closed = jit_ps(lambda x: np.tanh(A @ x))
    argument = jit_ps(lambda A, x: A @ x)
    errors = []

    def work(seed):
        x = onp.random.RandomState(seed).randn(N)
        for _ in range(200):
            if not (onp.allclose(closed(x), onp.tanh(A @ x), rtol=1e-12)
                    and onp.allclose(argument(A, x), A @ x, rtol=1e-12)):
                errors.append(seed)
    run_threads(work, [(s,) for s in range(4)])
    assert not errors


def test_what_stays_xlas(monkeypatch):
    """Below MIN_ELEMENTS and GEMM_MIN_PRODUCT, complex and integer operands, batched dots,
    and with MIN_ELEMENTS and GEMM_MIN_PRODUCT None: XLA's dot_general."""
    A, x, g = operands(onp.float64)
    cases = [(lambda A, x: A[:4, :4] @ x[:4], (A, x)),                  # too small
             (lambda A, x: A @ A.T, (A, x)),                            # a small matrix product
             (lambda A, x: (A * 1j) @ x, (A, x)),                       # complex
             (lambda A, x: A.astype(int) @ x.astype(int), (A, x)),      # integers
             (lambda A, x: np.matmul(A[None], x[None, :, None]), (A, x))]  # batched
    for f, args in cases:
        jf = jit_ps(f)
        assert targets(jf, *args) == (0, 0) and gemms(jf, *args) == 0
        assert_close(jf(*args), f(*args))
    monkeypatch.setattr(blas, "MIN_ELEMENTS", None)
    monkeypatch.setattr(blas, "GEMM_MIN_PRODUCT", None)
    jf = jit_ps(lambda A, x: (A @ x, A @ rs.randn(N, 1000)))
    assert targets(jf, A, x) == (0, 0) and gemms(jf, A, x) == 0 and "dot_general" in jf.stablehlo(A, x)


def with_pair(S, i, j, upper, lower):
    """S with S[i, j] = upper and S[j, i] = lower."""
    S = S.copy()
    S[i, j], S[j, i] = upper, lower
    return S


#: (label, the closed-over matrix made of a symmetric one S, whether blas.SYMMETRIC multiplies
#: it): equal to its transpose bit for bit, or not
SYMMETRY = [
    ("symmetric", lambda S: S, True),
    ("one_element_off", lambda S: with_pair(S, 0, 1, S[0, 1], onp.nextafter(S[0, 1], onp.inf, dtype=S.dtype)), False),
    ("signed_zeros", lambda S: with_pair(S, 2, 5, 0.0, -0.0), False),
    ("nans_on_both_sides", lambda S: with_pair(S, 3, 4, onp.nan, onp.nan), True),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
@pytest.mark.parametrize("label,make,symmetric", SYMMETRY, ids=[s[0] for s in SYMMETRY])
def test_a_symmetric_constant_is_multiplied_by_symv(label, make, symmetric, dtype):
    """A closed-over matrix equal to its transpose bit for bit is multiplied by BLAS's symv
    from either side, in derivatives too; one element off, or +0 against -0, and it is gemv."""
    S = rs.randn(M, M)
    S = make((S + S.T).astype(dtype))
    x = rs.randn(M).astype(dtype)
    forms = {"matrix_first": lambda x: S @ x, "vector_first": lambda x: x @ S, "transposed": lambda x: S.T @ x,
             "quadratic": lambda x: x @ (S @ x) - np.sum(x)}
    if dtype == onp.float64:  # autograd's float32 dot has float64 gradients (docs/benchmarks.rst)
        forms["gradient"] = grad(forms["quadratic"])
    for name, form in forms.items():
        f = jit_ps(form)
        symv, gemv = f.stablehlo(x).count(blas.SYMMETRIC), sum(targets(f, x))
        assert (symv > 0, gemv > 0) == (symmetric, not symmetric), f"{label}/{name}"
        assert_close(f(x), form(x), path=f"{label}/{name}")
    argument = jit_ps(lambda S, x: S @ x)  # an argument's values are not known to the program
    assert targets(argument, S, x) == (1, 0) and blas.SYMMETRIC not in argument.stablehlo(S, x)
    assert_close(argument(S, x), S @ x)


def test_off_the_cpu_xlas_dot_is_emitted():
    A, x, _ = operands(onp.float64)
    graph = jit_ps(lambda A, x: A @ x).graph(A, x)
    assert blas.ROWS in lowering.lower(graph, platform="cpu").text
    assert blas.ROWS not in lowering.lower(graph, platform="cuda").text


def test_the_handler_refuses_operands_it_was_not_made_for():
    """An integer product reaching the handler is refused with XLA's error, not computed."""
    cpu = backend.get_backend("cpu")
    text = f"""module @m {{
  func.func public @main(%a: tensor<4x3xi32>, %x: tensor<3xi32>) -> tensor<4xi32> {{
    %r = stablehlo.custom_call @{blas.ROWS}(%a, %x) {{api_version = 4 : i32}} : (tensor<4x3xi32>, tensor<3xi32>) -> tensor<4xi32>
    return %r : tensor<4xi32>
  }}
}}"""
    program, _ = cpu.compile(text)
    exe = backend.Executable(cpu, program, [((4, 3), onp.int32), ((3,), onp.int32)], [((4,), onp.int32)], [], text)
    with pytest.raises(Exception, match="float32 or float64"):
        exe([onp.ones((4, 3), onp.int32), onp.ones(3, onp.int32)])


def test_the_symmetric_handler_refuses_a_matrix_that_is_not_square():
    cpu = backend.get_backend("cpu")
    text = f"""module @m {{
  func.func public @main(%a: tensor<4x3xf64>, %x: tensor<3xf64>) -> tensor<4xf64> {{
    %r = stablehlo.custom_call @{blas.SYMMETRIC}(%a, %x) {{api_version = 4 : i32}} : (tensor<4x3xf64>, tensor<3xf64>) -> tensor<4xf64>
    return %r : tensor<4xf64>
  }}
}}"""
    program, _ = cpu.compile(text)
    exe = backend.Executable(cpu, program, [((4, 3), onp.float64), ((3,), onp.float64)], [((4,), onp.float64)], [], text)
    with pytest.raises(Exception, match="a square matrix expected, got one of 4 x 3"):
        exe([onp.ones((4, 3)), onp.ones(3)])


@pytest.mark.parametrize("layout,operands,message", [
    ([4, 3, 2, 0], "%l, %a, %b", None),                       # right: A @ B
    ([4, 3, 2, 0], "%l, %a", "got 2 operands"),               # B missing
    ([4, 3, 5, 0], "%l, %a, %b", "does not fit"),             # n is not the result's
    ([4, 3, 2, blas.OFFSET_A], "%l, %a, %b", "does not fit"),  # an offset announced, not passed
])
def test_the_matrix_handler_checks_its_layout(layout, operands, message):
    """GEMM's handler computes op(A) @ op(B) as its layout says, and refuses a layout that does
    not fit its operands with XLA's error."""
    cpu = backend.get_backend("cpu")
    types = {"%l": "tensor<4xi32>", "%a": "tensor<4x3xf64>", "%b": "tensor<3x2xf64>"}
    text = f"""module @m {{
  func.func public @main(%a: tensor<4x3xf64>, %b: tensor<3x2xf64>) -> tensor<4x2xf64> {{
    %l = stablehlo.constant dense<{layout}> : tensor<4xi32>
    %r = stablehlo.custom_call @{blas.GEMM}({operands}) {{api_version = 4 : i32}} : ({", ".join(types[o] for o in operands.split(", "))}) -> tensor<4x2xf64>
    return %r : tensor<4x2xf64>
  }}
}}"""
    program, _ = cpu.compile(text)
    exe = backend.Executable(cpu, program, [((4, 3), onp.float64), ((3, 2), onp.float64)], [((4, 2), onp.float64)], [],
                             text)
    a, b = rs.randn(4, 3), rs.randn(3, 2)
    if message is None:
        assert_close(exe([a, b])[0], a @ b)
    else:
        with pytest.raises(Exception, match=message):
            exe([a, b])


def test_the_handlers_in_use_are_the_c_ones_where_built_unless_turned_off():
    """setup.py builds _blas.c where a compiler is; its handlers then run, unless
    AUTOGRAD_XLA_NATIVE_BLAS=0 asks for the Python ones (the run of this file below)."""
    backend.get_backend("cpu")  # registers the handlers
    off = os.environ.get(blas.NATIVE_ENV) == "0"
    assert blas.implementation == ("python" if blas.native is None or off else "c")


@pytest.mark.skipif(blas.native is None or os.environ.get(blas.NATIVE_ENV) == "0",
                    reason="the Python handlers are the ones this run tests")
def test_the_python_handlers_pass_this_file_too():
    """Where the C handlers run, this file's tests run again in a process with the Python ones."""
    env = dict(os.environ, PYTHONPATH=ROOT, **{blas.NATIVE_ENV: "0"})
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                        "not python_handlers_pass"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout


def test_an_error_inside_the_product_is_raised_not_ignored(monkeypatch):
    """An exception in the Python handler becomes XLA's error (the call raises), never a result."""
    backend.get_backend("cpu")
    if blas.implementation != "python":
        pytest.skip("the C handlers call cblas, which does not raise; the Python handlers' run tests this")
    def broken(*args, **kwargs):
        raise MemoryError("no memory here")
    A, x, g = operands(onp.float64)
    f = jit_ps(lambda x: A @ x)
    f(x)
    monkeypatch.setattr(blas.np, "dot", broken)
    with pytest.raises(Exception, match="MemoryError: no memory here"):
        f(x + 1.0)


CHILD = """
import json
import numpy as np
import autograd.numpy as anp
from autograd_xla import jit_ps
A = np.random.RandomState(1).randn(600, 600)
f = jit_ps(lambda x: anp.tanh(A @ x))
x = np.linspace(-1.0, 1.0, 600)
out = f(x)
info = f.cache_info()
print(json.dumps({"blas": "autograd_xla_gemv_rows" in f.stablehlo(x), "error": float(np.max(abs(out - np.tanh(A @ x)))),
                  "compiles": info["compiles"], "hits": info["persistent_hits"]}))
"""


def test_a_second_process_loads_the_cached_program_and_multiplies(tmp_path):
    """The cached executable names the targets; a new process registers them before it loads."""
    runs = run_with_a_persistent_cache(tmp_path, CHILD, CHILD)
    assert all(r["blas"] and r["error"] < 1e-12 for r in runs)
    assert (runs[0]["compiles"], runs[0]["hits"]) == (1, 0) and (runs[1]["compiles"], runs[1]["hits"]) == (0, 1)


def _thread_functions(addresses):
    """(set_num_threads, get_num_threads) callable, from their addresses."""
    import ctypes
    set_address, get_address = addresses
    return ctypes.CFUNCTYPE(None, ctypes.c_int)(set_address), ctypes.CFUNCTYPE(ctypes.c_int)(get_address)


@pytest.mark.skipif(blas.native is None or os.environ.get(blas.NATIVE_ENV) == "0" or blas._lapack_threads() is None,
                    reason="no C handlers or no OpenBLAS")
def test_small_lapack_calls_run_on_one_blas_thread_and_large_ones_on_its_threads(monkeypatch):
    """A LAPACK kernel of fewer multiply-adds than SERIAL_BELOW is called through blas.SERIAL's
    wrapper, which leaves the library with the threads it had (two here, whatever it was
    given); a larger one by its own name; vmap batches either; the results are numpy's."""
    set_threads, get_threads = _thread_functions(blas._lapack_threads())
    S, y = rs.randn(4, 6, 6) + 6 * onp.eye(6), rs.randn(1, 6, 50)
    f = lambda S: np.linalg.solve(S, y)
    before = get_threads()
    set_threads(2)
    try:
        small = jit_ps(f)
        text = small.stablehlo(S)
        assert blas.serial_registered  # (registered when the first program calling LAPACK was lowered)
        assert blas.SERIAL + "lapack_dgetrf_ffi" in text and blas.SERIAL + "lapack_dtrsm_ffi" in text
        assert_close(small(S), f(S))
        assert get_threads() == 2
        results = []
        run_threads(lambda: results.append(small(S)), [()] * 4)  # wrapped calls on several threads at once
        for r in results:
            assert_close(r, f(S))
        assert get_threads() == 2
        assert_close(vmap(jit_ps(lambda s: np.linalg.solve(s, y[0])))(S), np.linalg.solve(S, y[0]))
        monkeypatch.setattr(blas, "SERIAL_BELOW", 6 * 6 * 6)  # getrf's 6^3 keeps the threads, trsm's 6^2 50 too
        large = jit_ps(f)
        text = large.stablehlo(S)
        assert blas.SERIAL not in text and "lapack_dgetrf_ffi" in text
        assert_close(large(S), f(S))
    finally:
        set_threads(before)


@pytest.mark.skipif(blas.native is None or os.environ.get(blas.NATIVE_ENV) == "0" or blas._cblas()[2] is None,
                    reason="no C handlers or no OpenBLAS")
def test_after_a_stall_the_products_run_on_one_thread_for_a_while():
    """A product slower than the stall rule allows (here: any at all, STALL_SECONDS and
    STALL_FACTOR 0) puts numpy's BLAS on one thread for SERIAL_SECONDS; the products stay
    numpy's, on several threads at once too, and the library keeps the threads it had."""
    backend.get_backend("cpu")
    functions, wide, threads = blas._cblas()
    set_threads, get_threads = _thread_functions(threads)
    before = get_threads()
    A, x, _ = operands(onp.float64)
    argument = jit_ps(lambda A, x: A @ x)
    try:
        set_threads(2)
        blas.native.stalls(*threads, 0.0, 0.0, 60.0, 60.0)
        assert blas.native.serial_for() == 0.0
        for _ in range(100):  # the first product is on one thread; then one no faster than the fastest
            assert_close(argument(A, x), A @ x)
            if blas.native.serial_for() > 0:
                break
        assert 50 < blas.native.serial_for() <= 60 and get_threads() == 2
        results = []
        run_threads(lambda: results.append(argument(A, x)), [()] * 4)
        for r in results:
            assert_close(r, A @ x)
        assert get_threads() == 2
    finally:
        blas.native.stalls(*threads, blas.STALL_SECONDS, blas.STALL_FACTOR, blas.SERIAL_SECONDS, blas.SERIAL_MOST_SECONDS)
        set_threads(before)
    assert blas.native.serial_for() == 0.0
