"""while_loop, fori_loop, cond, switch and scan: each against the plain Python loop or
branch it replaces, in value and dtype, in grad (plain, jit_ps(grad(f)), grad(jit_ps(f)))
and in make_jvp; nested, closed over, and the error cases. Reverse mode through scan saves
residuals: second and third derivatives through it, and the number of loops compiled."""
import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, hessian, hessian_tensor_product, make_jvp

from autograd_xla import (ConcretizationError, FallbackWarning, ImpureFunctionError, cond, fori_loop, jit_ps, scan, switch,
                          tracing, while_loop)
from autograd_xla.core import Aval
from autograd_xla.partial_eval import PartialEval, cse
from helpers import assert_close, check, dtypes_of, jit_strict, scalarize

rng = onp.random.RandomState(0)
W = rng.randn(3, 3) * 0.6
XS = rng.randn(4, 3)
X = onp.array([0.3, -0.8, 0.5])


def compare(f, ref, *args, argnums=(0,), jvp=True, rtol=None):
    """f (written with control-flow primitives) against ref (a Python loop/branch):
    the plain-Python path of f equals ref in value, dtype and gradient; the compiled
    versions equal the plain ones (helpers.check); and forward mode agrees."""
    dts = dtypes_of(*args)
    assert_close(f(*args), ref(*args), rtol=rtol, inputs=dts)
    for a in argnums:
        assert_close(grad(scalarize(f), a)(*args), grad(scalarize(ref), a)(*args), rtol=rtol, inputs=dts,
                     path=f"plain grad wrt arg {a}")
    check(f, *args, argnums=argnums, rtol=rtol)
    if jvp:
        for a in argnums:
            t = rng.uniform(-1, 1, size=onp.shape(args[a])).astype(onp.asarray(args[a]).dtype)
            expected = make_jvp(ref, a)(*args)(t)
            assert_close(make_jvp(f, a)(*args)(t), expected, rtol=rtol, inputs=dts, path="plain jvp")
            got = jit_ps(lambda *xs: make_jvp(f, a)(*xs)(t))(*args)
            assert_close(got, expected, rtol=rtol, inputs=dts, path=f"jit(jvp) wrt arg {a}")


# ----- scan ----------------------------------------------------------------------------------
def rnn(W, xs):
    def step(c, x):
        c = np.tanh(np.dot(W, c) + x)
        return c, np.sum(c ** 2)
    c, ys = scan(step, np.zeros(3, xs.dtype), xs)
    return c * np.sum(ys)


def rnn_ref(W, xs):
    c, ys = np.zeros(3, xs.dtype), []
    for x in xs:
        c = np.tanh(np.dot(W, c) + x)
        ys.append(np.sum(c ** 2))
    return c * np.sum(np.stack(ys))


def test_scan_matches_python_loop_and_closes_over_differentiated_weights():
    compare(rnn, rnn_ref, W, XS, argnums=(0, 1))


def test_scan_float32_stays_float32():
    W32, XS32 = W.astype(onp.float32), XS.astype(onp.float32)
    assert jit_ps(rnn)(W32, XS32).dtype == onp.float32
    compare(rnn, rnn_ref, W32, XS32, argnums=(0, 1))


def test_scan_reverse_keeps_ys_aligned_with_xs():
    def f(c0, xs):
        c, ys = scan(lambda c, x: (c * 0.5 + np.sin(x), c * x), c0, xs, reverse=True)
        return ys * c

    def ref(c0, xs):
        c, ys = c0, []
        for x in xs[::-1]:
            ys.append(c * x)
            c = c * 0.5 + np.sin(x)
        return np.stack(ys[::-1]) * c

    compare(f, ref, X, XS, argnums=(0, 1))


def test_scan_over_containers():
    def f(a, b):
        init = {"h": a, "acc": (0.0, np.zeros(3))}

        def step(c, x):
            h = np.sin(c["h"] * x[0] + x[1]["b"])
            return {"h": h, "acc": (c["acc"][0] + np.sum(h), c["acc"][1] + h)}, {"p": h * 2.0, "q": (np.sum(h),)}

        c, ys = scan(step, init, (XS, {"b": b}))
        return c["h"] + c["acc"][0] * c["acc"][1] + np.sum(ys["p"], 0) + np.sum(ys["q"][0])

    def ref(a, b):
        h, s, v, ps, qs = a, 0.0, np.zeros(3), [], []
        for k in range(len(XS)):
            h = np.sin(h * XS[k] + b[k])
            s, v = s + np.sum(h), v + h
            ps.append(h * 2.0)
            qs.append(np.sum(h))
        return h + s * v + np.sum(np.stack(ps), 0) + np.sum(np.stack(qs))

    compare(f, ref, X, XS * 0.5, argnums=(0, 1))


def test_scan_with_length_and_no_xs():
    def f(x):
        c, ys = scan(lambda c, _: (c * 0.9 + 1.0, np.cos(c)), x, None, length=5)
        return c + np.sum(ys, 0)

    def ref(x):
        c, ys = x, []
        for _ in range(5):
            ys.append(np.cos(c))
            c = c * 0.9 + 1.0
        return c + np.sum(np.stack(ys), 0)

    compare(f, ref, X)


def test_scan_of_length_zero_returns_init_and_empty_ys():
    def f(x):
        c, ys = scan(lambda c, x: (c + x, c * x), x, onp.zeros((0, 3)))
        return c, ys

    c, ys = jit_ps(f)(X)
    assert_close(c, X)
    assert ys.shape == (0, 3) and ys.dtype == onp.float64
    assert_close(f(X)[1], ys)
    check(lambda x: f(x)[0] * 2.0, X)


def test_scan_integer_carry_alongside_float():
    def f(x):
        (n, c), ks = scan(lambda s, x: ((s[0] + 1, s[1] * x + s[0]), s[0] * 2), (0, x), XS)
        return c * n + np.sum(ks)

    def ref(x):
        n, c, ks = 0, x, []
        for row in XS:
            n, c = n + 1, c * row + n
            ks.append(n * 2 - 2)
        return c * n + np.sum(ks)

    compare(f, ref, X)
    assert jit_ps(lambda x: scan(lambda s, _: (s + 1, s), 0, None, length=3))(X)[0].dtype == onp.int64


def test_scan_closes_over_dict_of_parameters():
    params = {"W": W, "b": X}

    def loss(params, xs):
        c, _ = scan(lambda c, x: (np.tanh(np.dot(params["W"], c) + params["b"] * x), None), np.zeros(3), xs)
        return np.sum(c ** 2)

    def ref(params, xs):
        c = np.zeros(3)
        for x in xs:
            c = np.tanh(np.dot(params["W"], c) + params["b"] * x)
        return np.sum(c ** 2)

    assert_close(loss(params, XS), ref(params, XS))
    check(loss, params, XS, argnums=(0, 1))
    assert_close(grad(loss)(params, XS), grad(ref)(params, XS))


# ----- fori_loop -----------------------------------------------------------------------------
def test_fori_loop_matches_python_loop():
    def f(x, w):
        return fori_loop(1, 5, lambda i, c: np.sin(c * w) + i * 0.1, x)

    def ref(x, w):
        c = x
        for i in range(1, 5):
            c = np.sin(c * w) + i * 0.1
        return c

    compare(f, ref, X, X[::-1] + 1.0, argnums=(0, 1))


def test_fori_loop_index_is_weak_for_python_bounds_and_typed_for_numpy_bounds():
    x32 = X.astype(onp.float32)
    f = lambda x: fori_loop(0, 3, lambda i, c: c * i + 1.0, x)  # noqa: E731
    assert f(x32).dtype == jit_ps(f)(x32).dtype == onp.float32
    g = lambda x: fori_loop(onp.int32(0), onp.int32(3), lambda i, c: (i, c[1] * 2.0), (onp.int32(0), x))  # noqa: E731
    for out in (g(X), jit_ps(g)(X)):
        assert out[0].dtype == onp.int32 and int(out[0]) == 2
    check(lambda x: g(x)[1], X)


def test_fori_loop_python_scalar_init_is_float64_in_both_paths():
    f = lambda x: fori_loop(0, 3, lambda i, c: c + np.sum(x), 0.0)  # noqa: E731
    assert onp.asarray(f(X)).dtype == jit_ps(f)(X).dtype == onp.float64
    check(f, X)


def test_fori_loop_empty_range_returns_init():
    f = lambda x: fori_loop(5, 2, lambda i, c: c * 100.0, x)  # noqa: E731
    assert_close(jit_ps(f)(X), X)
    check(f, X)


def test_fori_loop_with_traced_bounds_is_a_while_loop():
    def f(x, n):
        return fori_loop(0, n, lambda i, c: np.sin(c) + i, x)

    n = onp.int64(3)
    assert_close(jit_ps(f)(X, n), f(X, 3))
    assert "stablehlo.while" in jit_ps(f).stablehlo(X, n)
    t = onp.ones(3)
    assert_close(jit_ps(lambda x, n: make_jvp(f)(x, n)(t))(X, n), make_jvp(f)(X, 3)(t))
    # reverse mode needs the trip count: the integer argument is then made static (a scan)
    g = jit_strict(grad(scalarize(f)))
    assert_close(g(X, n), grad(scalarize(f))(X, 3))
    assert g.cache_info()["traces"] == 1


def test_fori_loop_bound_from_python_int_argument_becomes_static_for_grad():
    s = scalarize(lambda x, n: fori_loop(0, n, lambda i, c: np.sin(c) + i, x))
    for n in (3, 4):
        expected = grad(s)(X, n)
        assert_close(jit_ps(grad(s))(X, n), expected)
        assert_close(grad(jit_ps(s))(X, n), expected)


# ----- while_loop ----------------------------------------------------------------------------
def grow(x, y):
    return while_loop(lambda s: np.sum(s[1]) < 20.0, lambda s: (s[0] + 1, s[1] * 1.5 + s[2], s[2]), (0, x, y))


def grow_ref(x, y):
    n, c = 0, x
    while np.sum(c) < 20.0:
        n, c = n + 1, c * 1.5 + y
    return n, c, y


def test_while_loop_matches_python_while():
    for x in (onp.array([1.0, 2.0]), onp.array([10.0, 12.0]), onp.array([0.1, 0.0])):
        y = onp.array([0.5, 0.25])
        assert_close(grow(x, y), grow_ref(x, y))
        assert_close(jit_ps(grow)(x, y), grow_ref(x, y))


def test_while_loop_forward_mode():
    x, y = onp.array([1.0, 2.0]), onp.array([0.5, 0.25])
    f = lambda x, y: grow(x, y)[1]  # noqa: E731
    ref = lambda x, y: grow_ref(x, y)[1]  # noqa: E731
    for a in (0, 1):
        t = onp.array([0.3, -0.7])
        expected = make_jvp(ref, a)(x, y)(t)
        assert_close(make_jvp(f, a)(x, y)(t), expected)
        assert_close(jit_ps(lambda x, y: make_jvp(f, a)(x, y)(t))(x, y), expected)


def test_while_loop_reverse_mode_raises_and_suggests_fori_loop_or_scan():
    x, y = onp.array([1.0, 2.0]), onp.array([0.5, 0.25])
    s = scalarize(lambda x, y: grow(x, y)[1])
    assert_close(grad(s)(x, y), grad(scalarize(lambda x, y: grow_ref(x, y)[1]))(x, y))  # plain Python: fine
    for fn in (jit_strict(grad(s)), grad(jit_strict(s))):
        with pytest.raises(NotImplementedError, match="while_loop.*fori_loop.*scan"):
            fn(x, y)


def test_while_loop_differentiated_value_only_in_predicate_has_zero_gradient():
    def f(w):
        return while_loop(lambda c: c < np.sum(w), lambda c: c + 1.0, 0.0) * 1.0

    w = onp.array([2.5, 1.0])
    assert_close(jit_ps(grad(f))(w), onp.zeros(2))


# ----- cond and switch -----------------------------------------------------------------------
def branchy(x, y):
    return cond(np.sum(x) > 0, lambda a, b: np.sin(a) * b, lambda a, b: a * 2.0 + b ** 2, x, y)


def branchy_ref(x, y):
    return np.sin(x) * y if np.sum(x) > 0 else x * 2.0 + y ** 2


@pytest.mark.parametrize("sign", [1, -1])
def test_cond_matches_python_branch(sign):
    compare(branchy, branchy_ref, sign * X, X + 1.0, argnums=(0, 1))


def test_cond_closes_over_differentiated_value():
    def f(w, x):
        return cond(x[0] > 0, lambda: np.tanh(np.dot(w, x)), lambda: w[0] * x)

    def ref(w, x):
        return np.tanh(np.dot(w, x)) if x[0] > 0 else w[0] * x

    compare(f, ref, W, X, argnums=(0, 1))
    compare(f, ref, W, -X, argnums=(0, 1))


def test_cond_with_concrete_predicate_is_specialised():
    f = lambda x: cond(True, lambda x: x * 2.0, lambda x: x ** 3, x)  # noqa: E731
    assert "case" not in str(jit_ps(f).graph(X))
    check(f, X)


def test_cond_numeric_predicate_and_weak_branch_output():
    x32 = X.astype(onp.float32)
    f = lambda p, x: cond(p, lambda x: np.sum(x), lambda x: 0.0, x)  # noqa: E731
    for p in (onp.int64(3), onp.int64(0)):
        out = jit_ps(f)(p, x32)
        assert out.dtype == onp.float32  # the Python float joins the other branch's float32
        assert_close(out, onp.sum(x32) if p else onp.float32(0))


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 5])
def test_switch_clamps_index_like_jax(index):
    branches = [lambda x, y: x * y, lambda x, y: np.sin(x) + y, lambda x, y: x ** 2 - y]
    f = lambda x, y, i: switch(i, branches, x, y)  # noqa: E731

    def ref(x, y, i):
        return branches[min(max(i, 0), 2)](x, y)

    compare(lambda x, y: f(x, y, index), lambda x, y: ref(x, y, index), X, X + 0.5, argnums=(0, 1), jvp=False)
    i = onp.int32(index)
    assert_close(jit_ps(f)(X, X + 0.5, i), ref(X, X + 0.5, index))
    s = scalarize(f)
    assert_close(jit_ps(grad(s))(X, X + 0.5, i), grad(scalarize(ref))(X, X + 0.5, index))
    assert_close(grad(jit_ps(s), 1)(X, X + 0.5, i), grad(scalarize(ref), 1)(X, X + 0.5, index))
    t = onp.array([1.0, -2.0, 0.5])
    assert_close(jit_ps(lambda x, y, i: make_jvp(f)(x, y, i)(t))(X, X + 0.5, i), make_jvp(ref)(X, X + 0.5, index)(t))


# ----- composition ---------------------------------------------------------------------------
def test_cond_inside_scan():
    def f(w, xs):
        def step(c, x):
            h = np.tanh(np.dot(w, c) + x)
            return cond(np.sum(h) > 0, lambda h: h * 2.0, lambda h: -h, h), None
        return scan(step, np.zeros(3), xs)[0]

    def ref(w, xs):
        c = np.zeros(3)
        for x in xs:
            h = np.tanh(np.dot(w, c) + x)
            c = h * 2.0 if np.sum(h) > 0 else -h
        return c

    compare(f, ref, W * 0.5, XS, argnums=(0, 1))


def test_scan_inside_scan_and_second_derivatives():
    def f(x):
        def outer(c, row):
            d, ds = scan(lambda d, y: (np.sin(d * y + c), d), c, row)
            return d + np.sum(ds), np.sum(ds)
        c, ys = scan(outer, x[0, 0], x)
        return c + np.sum(ys)

    def ref(x):
        c, ys = x[0, 0], []
        for row in x:
            d, ds = c, []
            for y in row:
                ds.append(d)
                d = np.sin(d * y + c)
            c = d + np.sum(np.stack(ds))
            ys.append(np.sum(np.stack(ds)))
        return c + np.sum(np.stack(ys))

    x = XS[:3] * 0.5
    compare(f, ref, x)
    assert_close(jit_ps(hessian(f))(x), hessian(ref)(x))
    assert_close(jit_ps(grad(lambda x: np.sum(grad(f)(x) ** 2)))(x), grad(lambda x: np.sum(grad(ref)(x) ** 2))(x))


def test_fori_loop_and_cond_inside_each_other_with_hessian():
    def f(x):
        return fori_loop(0, 3, lambda i, c: cond(i % 2 == 0, lambda c: np.sin(c) * x, lambda c: c * c, c), x)

    def ref(x):
        c = x
        for i in range(3):
            c = np.sin(c) * x if i % 2 == 0 else c * c
        return c

    compare(f, ref, X)
    assert_close(jit_ps(hessian(lambda x: np.sum(f(x))))(X), hessian(lambda x: np.sum(ref(x)))(X))


def test_body_closes_over_traced_intermediate():
    def f(x, y):
        h = np.sin(y)
        return fori_loop(0, 3, lambda i, c: c * h + x, x)

    def ref(x, y):
        c = x
        for _ in range(3):
            c = c * np.sin(y) + x
        return c

    compare(f, ref, X, X[::-1], argnums=(0, 1))


def test_body_closes_over_python_scalar_argument_which_stays_weak():
    x32 = X.astype(onp.float32)
    f = lambda x, lr: fori_loop(0, 3, lambda i, c: c - (lr * 2) * np.sin(c), x)  # noqa: E731
    assert jit_ps(f)(x32, 0.1).dtype == f(x32, 0.1).dtype == onp.float32
    check(f, x32, 0.1)


def test_jitted_function_as_loop_body():
    step = jit_ps(lambda c, x: np.tanh(c + x))
    f = lambda x: scan(lambda c, row: (step(c, row), c), x, XS)[1]  # noqa: E731

    def ref(x):
        c, ys = x, []
        for row in XS:
            ys.append(c)
            c = np.tanh(c + row)
        return np.stack(ys)

    compare(f, ref, X)


def test_body_closing_over_an_object_attribute():
    class Cell:
        def __init__(self, w):
            self.w = w

        def step(self, c, x):
            return np.tanh(np.dot(self.w, c) + x), None

    f = lambda w: scan(Cell(w).step, X, XS)[0]  # noqa: E731
    check(f, W)


def test_forward_over_reverse_and_reverse_over_forward():
    t = onp.array([0.5, -1.0, 2.0])
    loss = lambda x: np.sum(scan(lambda c, r: (np.tanh(c * r), c), x, XS)[0])  # noqa: E731
    hvp = lambda x: make_jvp(grad(loss))(x)(t)[1]  # noqa: E731
    assert_close(jit_ps(hvp)(X), hvp(X))
    jvp = lambda x: make_jvp(loss)(x)(t)[1]  # noqa: E731
    check(jvp, X)


def test_while_loop_forward_mode_through_closed_over_value():
    f = lambda w: while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, np.sin(c[1] * w)), (0, X))[1]  # noqa: E731
    t = onp.array([0.5, -1.0, 2.0])
    assert_close(jit_ps(lambda w: make_jvp(f)(w)(t))(X + 1.0), make_jvp(f)(X + 1.0)(t))


def test_complex_carry():
    f = lambda z: np.real(fori_loop(0, 3, lambda i, c: c * z + 1j, z))  # noqa: E731
    check(f, X + 0.5j * X[::-1])


# ----- reverse mode saves residuals instead of recomputing ------------------------------------
def rnn_loss(W, xs):
    c, _ = scan(lambda c, x: (np.tanh(np.dot(W, c) + x), None), np.zeros(3), xs)
    return np.sum(c ** 2)


def rnn_loss_ref(W, xs):
    c = np.zeros(3)
    for x in xs:
        c = np.tanh(np.dot(W, c) + x)
    return np.sum(c ** 2)


def test_grad_runs_the_body_once_forward_and_its_vjp_once_backward():
    for f, args in [(grad(rnn_loss), (W, XS)), (grad(rnn_loss, 1), (W, XS)),
                    (grad(lambda w: rnn_loss(w, XS) + np.sum(fori_loop(0, 3, lambda i, c: np.sin(c * w), W))), (W,))]:
        text = jit_ps(f).stablehlo(*args)
        n_loops = 2 if len(args) == 2 else 4  # the second function has a scan and a fori_loop
        assert text.count("stablehlo.while") == n_loops
        assert text.count("stablehlo.tanh") == 1  # the backward loop reads tanh's saved result
    assert_close(jit_ps(grad(rnn_loss))(W, XS), grad(rnn_loss_ref)(W, XS))
    assert_close(grad(jit_ps(rnn_loss))(W, XS), grad(rnn_loss_ref)(W, XS))


def test_hessian_vector_product_runs_four_loops():
    # forward (saving residuals for both differentiations), backward, and the backward's
    # forward and backward passes; the old scheme re-ran the body in every one of them
    hvp = jit_ps(hessian_tensor_product(rnn_loss))
    V = W[::-1] * 0.5
    text = hvp.stablehlo(W, XS, V)
    assert text.count("stablehlo.while") == 4 and text.count("stablehlo.tanh") == 1
    assert_close(hvp(W, XS, V), hessian_tensor_product(rnn_loss_ref)(W, XS, V))
    assert_close(jit_ps(hessian(rnn_loss))(W, XS), hessian(rnn_loss_ref)(W, XS))


def _index_dependent(x):
    return fori_loop(0, 4, lambda i, c: np.sin(c) * np.take(XS, i, axis=0) + i * 0.1, x)


def _index_dependent_ref(x):
    c = x
    for i in range(4):
        c = np.sin(c) * XS[i] + i * 0.1
    return c


def _traced_slices(x):
    def body(i, c):
        w = np.concatenate([c, c])
        return np.sin(w[i:i + 3]) * c[::-1] + w[1 + i]
    return fori_loop(0, 3, body, x)


def _traced_slices_ref(x):
    c = x
    for i in range(3):
        w = np.concatenate([c, c])
        c = np.sin(w[i:i + 3]) * c[::-1] + w[1 + i]
    return c


def _reversed_with_integer_carry(x):
    (n, c), ys = scan(lambda s, r: ((s[0] + 1, np.sin(s[1] * r) + s[0] * s[1]), s[1] * r), (0, x), XS,
                      reverse=True)
    return c * n + np.sum(ys, 0)


def _reversed_with_integer_carry_ref(x):
    n, c, ys = 0, x, []
    for r in XS[::-1]:
        ys.append(c * r)
        n, c = n + 1, np.sin(c * r) + n * c
    return c * n + np.sum(np.stack(ys), 0)


def _branches_in_body(x):
    def step(c, r):
        # the loop's trip count depends on c only through its predicate (no gradient)
        n = while_loop(lambda s: s[1] < np.sum(c ** 2) + 1.0, lambda s: (s[0] + 1, s[1] + 1.0), (0, 0.0))[0]
        h = switch(n % 3, [np.sin, lambda a: a * a, lambda a: np.cos(a) * 2.0], c * r)
        return cond(np.sum(h) > 0, lambda h: h * 0.5, lambda h: -h, h) + 0.1 * n * c, n
    c, ns = scan(step, x, XS)
    return c * np.sum(ns)


def _branches_in_body_ref(x):
    c, ns = x, []
    for r in XS:
        n, s = 0, 0.0
        while s < np.sum(c ** 2) + 1.0:
            n, s = n + 1, s + 1.0
        h = [np.sin, lambda a: a * a, lambda a: np.cos(a) * 2.0][n % 3](c * r)
        c = (h * 0.5 if np.sum(h) > 0 else -h) + 0.1 * n * c
        ns.append(n)
    return c * np.sum(ns)


@pytest.mark.parametrize("f, ref", [(_index_dependent, _index_dependent_ref), (_traced_slices, _traced_slices_ref),
                                    (_reversed_with_integer_carry, _reversed_with_integer_carry_ref),
                                    (_branches_in_body, _branches_in_body_ref)],
                         ids=["index", "traced-slices", "reverse-int-carry", "branches"])
def test_derivatives_through_saved_residuals_match_plain_autograd(f, ref):
    """Loop index arithmetic (recomputed backward), traced slices and the scatter-adds of
    their VJPs, integer carries, and control flow inside the body, replayed under a second
    differentiation: grad both ways, Hessian-vector products reverse-over-reverse and
    forward-over-reverse, reverse-over-forward (except through while_loop, whose forward-mode
    tangent would need reverse mode of a while_loop)."""
    s, sr = scalarize(f), scalarize(ref)
    v = onp.array([0.7, -0.4, 1.1])
    assert_close(jit_ps(grad(s))(X), grad(sr)(X), path="jit(grad)")
    assert_close(grad(jit_ps(s))(X), grad(sr)(X), path="grad(jit)")
    expected = hessian_tensor_product(sr)(X, v)
    assert_close(jit_ps(hessian_tensor_product(s))(X, v), expected, path="jit(hvp)")
    assert_close(grad(lambda x: np.sum(grad(jit_ps(s))(x) * v))(X), expected, path="hvp of grad(jit)")
    assert_close(jit_ps(lambda x: make_jvp(grad(s))(x)(v)[1])(X), expected, path="forward over reverse")
    if f is not _branches_in_body:
        assert_close(jit_ps(grad(lambda x: make_jvp(s)(x)(v)[1]))(X), grad(lambda x: make_jvp(sr)(x)(v)[1])(X),
                     path="reverse over forward")


def test_third_derivative_recomputes_and_matches():
    # a third grad differentiates residuals the forward pass saved for the second: that
    # cotangent takes the recomputing path
    v = onp.array([0.7, -0.4, 1.1])
    s, sr = scalarize(_index_dependent), scalarize(_index_dependent_ref)
    third = grad(lambda x: np.sum(hessian_tensor_product(s)(x, v) ** 2))
    expected = grad(lambda x: np.sum(hessian_tensor_product(sr)(x, v) ** 2))(X)
    assert_close(jit_ps(third, fallback="error")(X), expected)


def test_float32_loop_with_float64_cotangent_keeps_autograd_dtypes():
    x32 = X.astype(onp.float32)
    f = lambda x: fori_loop(0, 3, lambda i, c: c - 0.2 * np.sin(c) * x, x)  # noqa: E731

    def ref(x):
        c = x
        for _ in range(3):
            c = c - 0.2 * np.sin(c) * x
        return c

    s, sr = scalarize(f), scalarize(ref)  # sum(w * f) with float64 w: float64 cotangents
    for got, expected in [(jit_ps(grad(s))(x32), grad(sr)(x32)),
                          (jit_ps(hessian_tensor_product(s))(x32, x32), hessian_tensor_product(sr)(x32, x32))]:
        assert got.dtype == expected.dtype == onp.float64
        assert_close(got, expected, rtol=1e-5)


def test_float32_loop_with_constant_float64_outputs_keeps_float32_gradients():
    """A step's constant output (a Python 0.0, stacked as float64 ys) gets a float64 zero
    cotangent that reaches nothing: the gradients stay float32, as through the Python loop."""
    a32, x32 = X.astype(onp.float32), (0.5 * X).astype(onp.float32)

    def f(a, c0):
        return np.sum(scan(lambda c, _: (np.tanh(c * a), 0.0), c0, onp.zeros(3, onp.float32))[0])
    for argnum in (0, 1):
        expected = grad(f, argnum)(a32, x32)
        got = jit_ps(grad(f, argnum), fallback="error")(a32, x32)
        assert got.dtype == expected.dtype == onp.float32, argnum
        assert_close(got, expected, rtol=1e-6)


def test_functional_updates_replayed_under_autograd_have_numpy_derivatives():
    """The autograd primitives that replay in-place updates and traced slices (x[idx] = v,
    np.add.at, their traced-start forms) against their derivatives written out by hand."""
    from autograd_xla.control_flow import replay
    from autograd_xla.core import DynamicSlice

    x, v, w = onp.array([1.0, -2.0, 0.5, 3.0]), onp.array([0.7, -0.2, 1.5]), onp.array([0.3, -1.1, 2.0, 0.9])
    dup = onp.array([0, 2, 0])
    cases = [  # f(x, v, i), gradient wrt x, gradient wrt v (of sum(w * f))
        (lambda x, v, i: replay.set_items(x, slice(1, 3), v[:1]), w * onp.array([1, 0, 0, 1]),
         onp.array([w[1] + w[2], 0, 0])),
        (lambda x, v, i: replay.scatter_add(x, dup, v), w, w[dup]),
        (lambda x, v, i: replay.dyn_update(x, (DynamicSlice(i, 2),), v[1:], True), w, onp.array([0, w[1], w[2]])),
        (lambda x, v, i: replay.dyn_update(x, (DynamicSlice(i, 2),), v[1:], False), w * onp.array([1, 0, 0, 1]),
         onp.array([0, w[1], w[2]])),
    ]
    i = onp.int64(1)
    for k, (f, gx, gv) in enumerate(cases):
        s = lambda x, v, i: np.sum(w * f(x, v, i))  # noqa: E731
        assert_close(jit_ps(grad(s, 0))(x, v, i), gx, path=f"case {k} grad x")
        assert_close(jit_ps(grad(s, 1))(x, v, i), gv, path=f"case {k} grad v")
        assert_close(jit_ps(lambda x, v, i: make_jvp(s, 1)(x, v, i)(v)[1])(x, v, i), onp.dot(gv, v),
                     path=f"case {k} jvp v")
        assert_close(jit_ps(lambda x, v, i: make_jvp(s, 0)(x, v, i)(x)[1])(x, v, i), onp.dot(gx, x),
                     path=f"case {k} jvp x")
    g = lambda x, v, i: np.sum(w[:3] * replay.dyn_getitem(x, (DynamicSlice(i, 3),)) ** 2 * v)  # noqa: E731
    assert_close(jit_ps(grad(g))(x, v, i), onp.concatenate([[0], 2 * w[:3] * x[1:] * v]))
    assert_close(jit_ps(hessian(g))(x, v, i), onp.diag(onp.concatenate([[0], 2 * w[:3] * v])))


def test_partial_eval_splits_a_graph_by_binding_time_and_cse_merges_repeats():
    def fn(a, b, c):
        u = a * 2.0 + b                    # times 1, 2
        return u * c + np.sin(b) + np.sin(b)  # 3, 2 (twice: cse keeps one), 3, 3

    f64 = Aval((), onp.float64)
    graph, _ = tracing.trace_function(fn, [f64, f64, f64])
    a, b, c = graph.invars
    merged = cse(graph)
    assert len(merged.eqns) == len(graph.eqns) - 1
    pe = PartialEval(merged, [1, 2, 3])
    assert pe.eqn_times == [1, 2, 3, 2, 3, 3]
    late, inputs = pe.slice(merged.outvars, {3})  # what runs once c is known, and what it reads
    assert len(late) == 3 and inputs[0] is c and [pe.time_of(v) for v in inputs] == [3, 2, 2]
    early, inputs = pe.slice(inputs[1:], {1, 2})  # the residuals: computed before c is known
    assert len(early) == 3 and inputs == [a, b]


# ----- what the compiled program looks like --------------------------------------------------
def test_loops_lower_to_one_while_op_with_the_body_once():
    f = lambda x: fori_loop(0, 100, lambda i, c: np.tanh(c) * 1.01, x)  # noqa: E731
    text = jit_ps(f).stablehlo(X)
    assert text.count("stablehlo.while") == 1 and text.count("stablehlo.tanh") == 1
    graph = str(jit_ps(f).graph(X))
    assert "scan(length=100" in graph and "    " in graph
    text = jit_ps(branchy).stablehlo(X, X)
    assert text.count("stablehlo.case") == 1


def test_scan_output_returned_as_a_constant_is_filled_outside_the_loop():
    f = lambda x: scan(lambda c, r: (np.sin(c * r), 0.0), x, XS)  # noqa: E731
    c, ys = jit_ps(f)(X)
    assert_close(c, f(X)[0])
    assert ys.shape == (len(XS),) and ys.dtype == onp.float64 and not ys.any()
    assert "dynamic_update_slice" not in jit_ps(f).stablehlo(X)
    check(lambda x: f(x)[0], X)


def test_python_loop_over_traced_values_still_unrolls():
    def f(x):
        for _ in range(4):
            x = np.tanh(x)
        return x

    assert jit_ps(f).stablehlo(X).count("stablehlo.tanh") == 4
    check(f, X)


# ----- errors --------------------------------------------------------------------------------
@pytest.mark.parametrize("jit", [False, True])
def test_carry_that_changes_dtype_shape_or_structure_raises(jit):
    wrap = jit_ps if jit else (lambda f: f)
    with pytest.raises(TypeError, match=r"carry\[1\] has dtype float32 but the carry's is float64"):
        wrap(lambda x: fori_loop(0, 2, lambda i, c: (c[0], c[1].astype(onp.float32)), (x, x)))(X)
    with pytest.raises(TypeError, match="has shape"):
        wrap(lambda x: scan(lambda c, y: (c[:2], y), x, XS))(X)
    with pytest.raises(TypeError, match="structure"):
        wrap(lambda x: while_loop(lambda c: c[0][0] > 0, lambda c: [c[0]], (x,)))(X)
    with pytest.raises(TypeError, match="boolean scalar"):
        wrap(lambda x: while_loop(lambda c: c, lambda c: c, x))(X)


def test_branches_must_agree_and_pred_must_be_scalar():
    p = onp.array(True)
    with pytest.raises(TypeError, match="different shapes"):
        jit_strict(lambda p, x: cond(p, lambda x: x, lambda x: x[:2], x))(p, X)
    with pytest.raises(TypeError, match="different dtypes"):
        jit_strict(lambda p, x: cond(p, lambda x: x, lambda x: x.astype(onp.float32), x))(p, X)
    with pytest.raises(TypeError, match="scalar"):
        cond(X > 0, lambda: 1.0, lambda: 2.0)
    with pytest.raises(ValueError, match="disagree"):
        scan(lambda c, x: (c, x), 0.0, (XS, XS[:2]))


def test_python_if_on_traced_value_in_a_body_explains_what_to_use():
    f = lambda x: fori_loop(0, 3, lambda i, c: c * 2.0 if np.sum(c) > 0 else c, x)  # noqa: E731
    with pytest.raises(ConcretizationError) as info:
        jit_strict(f)(X)
    assert any("cond/switch/while_loop" in note for note in info.value.__notes__)
    g = lambda x: fori_loop(0, 3, lambda i, c: c + XS[i], x)  # noqa: E731
    with pytest.raises(ConcretizationError) as info:
        jit_strict(g)(X)
    assert any("np.take(a, i, axis=0)" in note for note in info.value.__notes__)
    h = lambda x: fori_loop(0, 3, lambda i, c: c + np.take(XS, i, axis=0), x)  # noqa: E731
    check(h, X)


_HIDDEN = []


def test_differentiated_value_hidden_from_the_body_raises():
    def f(w):
        _HIDDEN[:] = [w]  # reached through a global, not the closure
        return fori_loop(0, 2, lambda i, c: c * _HIDDEN[0], onp.ones(3))

    s = scalarize(f)
    assert_close(grad(s)(X), grad(scalarize(lambda w: w * w))(X))  # plain Python sees it
    with pytest.raises(TypeError, match="neither through its arguments nor through its closure"):
        jit_strict(grad(s))(X)


# ----- autograd.misc.fixed_points.fixed_point: a while_loop, differentiated by autograd's VJP ----
def _newton_sqrt(a):
    return lambda x: 0.5 * (x + a / x)


def _descent_sqrt(a):                  # autograd's examples/fixed_points.py
    return lambda x: x - 0.05 * (x ** 2 - a)


@pytest.mark.parametrize("iteration, tol", [(_newton_sqrt, 1e-12), (_descent_sqrt, 1e-4)])
def test_fixed_point_compiles_with_first_and_second_derivatives(iteration, tol):
    from autograd.misc.fixed_points import fixed_point

    def sqrt(a):
        return fixed_point(iteration, a, 10.0, lambda x, y: np.abs(x - y), tol)

    def sqrts(a):
        return np.sum(fixed_point(iteration, a, np.ones(3), lambda x, y: np.max(np.abs(x - y)), tol) ** 2)
    a, v = 2.0, onp.array([2.0, 3.0, 5.0])
    f = jit_ps(sqrt, fallback="error")
    assert_close(f(a), sqrt(a), rtol=1e-14)     # same iterations, same stopping point
    assert "stablehlo.while" in f.stablehlo(a)
    assert_close(jit_ps(grad(sqrt), fallback="error")(a), grad(sqrt)(a), rtol=1e-13)
    assert_close(grad(jit_ps(sqrt, fallback="error"))(a), grad(sqrt)(a), rtol=1e-13)
    assert_close(jit_ps(grad(grad(sqrt)), fallback="error")(a), grad(grad(sqrt))(a), rtol=1e-12)
    assert_close(jit_ps(grad(sqrts), fallback="error")(v), grad(sqrts)(v), rtol=1e-13)


# ----- Python branches on traced floats: decided per trace, guarded per call ------------------
def hazard(p, t):
    """lifelines' generalized gamma model branches on a parameter's sign like this."""
    lam = p[2]
    if lam > 0:
        return np.sum(np.exp(p[0] * t) * lam + p[1] ** 2)
    return np.sum(np.log1p(t ** 2) * p[1] - lam)


T = onp.linspace(0.1, 1.0, 5)
POSITIVE, NEGATIVE = onp.array([0.3, 0.2, 0.5]), onp.array([0.3, 0.2, -0.5])


@pytest.mark.parametrize("wrap", [lambda f: f, grad, hessian, lambda f: grad(lambda p, t: fori_loop(
    0, 2, lambda i, c: c + f(p, t), 0.0))], ids=["value", "grad", "hessian", "in_a_loop_body"])
def test_python_if_on_a_float_parameter_compiles_the_branch_taken_with_a_guard(wrap):
    """`if lam > 0:` is decided from the call being traced (a Hessian's batched rows and a
    loop body closing over p decide it outside their bodies); a call taking the other branch
    gets a second program of the signature, traced for it, and later calls of either branch
    run one of the two; nothing runs plainly."""
    fun = wrap(hazard)
    jf = jit_ps(fun, fallback="error")
    assert_close(jf(POSITIVE, T), fun(POSITIVE, T))
    assert_close(jf(POSITIVE * 1.5, T), fun(POSITIVE * 1.5, T))
    assert_close(jf(NEGATIVE, T), fun(NEGATIVE, T))
    for p in (POSITIVE * 0.5, NEGATIVE * 2.0, POSITIVE):
        assert_close(jf(p, T), fun(p, T))
    info = jf.cache_info()
    assert (info["traces"], info["compiles"], info["fallbacks"]) == (2, 2, 0)


def test_the_program_a_call_took_is_tried_first_next_time():
    """A signature's guarded programs form a ring (Entry.variant); the one that took the
    latest refused call becomes the cached entry, so a run of calls on one side of the
    branch costs one program's run each, whichever side it is."""
    jf = jit_strict(hazard)
    assert_close(jf(POSITIVE, T), hazard(POSITIVE, T))
    (first,) = jf._cache.values()
    assert first.variant is None
    assert_close(jf(NEGATIVE, T), hazard(NEGATIVE, T))
    (second,) = jf._cache.values()
    assert second is not first and second.variant is first and first.variant is second
    runs = []
    real_run = jf._run
    jf._run = lambda entry, leaves: runs.append(entry) or real_run(entry, leaves)
    for p in (NEGATIVE * 2.0, NEGATIVE * 0.5):
        assert_close(jf(p, T), hazard(p, T))
    assert runs == [second, second]
    assert_close(jf(POSITIVE * 2.0, T), hazard(POSITIVE * 2.0, T))
    assert runs[2:] == [second, first] and next(iter(jf._cache.values())) is first
    assert jf.cache_info()["traces"] == 2 and jf.cache_info()["fallbacks"] == 0


@pytest.mark.parametrize("pattern", ["PN", "PPNN", "PNN"])
def test_calls_that_switch_branches_in_a_pattern_soon_run_one_program_each(pattern):
    """The ring tries first the program that followed the same two calls' programs before
    (api._took): alternating signs, or any short repeating pattern, settle to one run a call,
    where trying the cached entry first would run two programs at every switch."""
    jf = jit_strict(hazard)
    sides = {"P": POSITIVE, "N": NEGATIVE}
    runs = [0]
    real_run = jf._run

    def counted(entry, leaves):
        runs[-1] += 1
        return real_run(entry, leaves)
    jf._run = counted
    per_call = []
    for i, side in enumerate(pattern * 6):
        p = sides[side] * (1.0 + 0.01 * i)
        assert_close(jf(p, T), hazard(p, T))
        per_call.append(runs[-1])
        runs[-1] = 0
    assert sum(per_call[-2 * len(pattern):]) == 2 * len(pattern), per_call  # the last two periods: one run a call
    assert jf.cache_info()["traces"] == 2 and jf.cache_info()["fallbacks"] == 0


def test_speculation_stops_where_a_value_cannot_be_known_at_trace_time():
    """A branch on a loop's carry, on a random draw, or past SPECULATED_BRANCHES (a Python
    `while` unrolled) still raises the concretization error (an impure-function one for the
    draw); under the bound a `while` compiles unrolled, guarded at each step, one program
    per step count up to GUARDED_PROGRAMS; a call past them raises under fallback="error"
    (saying how many programs a signature keeps, and that while_loop compiles one for all
    step counts) and runs as plain autograd with a FallbackWarning saying the same otherwise."""
    from autograd_xla.api import GUARDED_PROGRAMS
    carry = lambda x: fori_loop(0, 3, lambda i, c: c * 2.0 if np.sum(c) > 0 else c, x)  # noqa: E731
    drawn = lambda x: x * 2 if onp.random.randn() + np.sum(x) > 0 else x  # noqa: E731

    def halve(x):
        while np.max(np.abs(x)) > 1e-3:
            x = x / 2
        return x
    for f, x in ((carry, X), (drawn, X), (halve, X * 2 ** 10)):  # the last: 20 steps
        with pytest.raises((ConcretizationError, ImpureFunctionError)):
            jit_strict(f)(x)
    with pytest.raises(ConcretizationError, match="decided 16 branches.*SPECULATED_BRANCHES"):
        jit_strict(halve)(X * 2 ** 10)  # the message says which bound it met
    jf = jit_strict(halve)
    assert_close(jf(X), halve(X))  # 10 steps, 11 guards
    assert_close(jf(X * 1.1), halve(X * 1.1))
    scales = [2.0 ** k for k in range(2, 2 + GUARDED_PROGRAMS)]  # 12, 13, ... steps
    for scale in scales[:-1]:
        assert_close(jf(X * scale), halve(X * scale))
    assert jf.cache_info()["compiles"] == GUARDED_PROGRAMS and jf.cache_info()["fallbacks"] == 0
    advice = rf"(?s)went the other way.*in each of the {GUARDED_PROGRAMS} compiled program.*autograd_xla\.while_loop"
    with pytest.raises(ConcretizationError, match=advice) as info:
        jf(X * scales[-1])  # one step count too many
    assert info.value.source.function == "halve"
    for scale in (1.0, scales[0], scales[-2]):  # the programs made still run theirs
        assert_close(jf(X * scale), halve(X * scale))
    assert jf.cache_info()["fallbacks"] == 0
    plain = jit_ps(halve)
    for scale in [1.0] + scales[:-1]:
        assert_close(plain(X * scale), halve(X * scale))
    with pytest.warns(FallbackWarning, match=advice.replace(".*while", ".*so this call ran as plain autograd.*while")):
        assert_close(plain(X * scales[-1]), halve(X * scales[-1]))  # plainly
    assert plain.cache_info()["fallbacks"] == 1


@pytest.mark.parametrize("wrap", [lambda f: f, grad, hessian], ids=["value", "grad", "hessian"])
def test_a_branch_on_a_value_already_decided_is_decided_once(wrap):
    """A library validating its argument at each use (`if (x < lb).any(): raise`, paragami's
    patterns) branches on one computation many times, here twice SPECULATED_BRANCHES; a
    Hessian's trace runs the function once per level and row besides. Each computation is
    decided once, with one guard, and compiles; a call that fails the check raises as plain
    autograd's does."""
    from autograd_xla.tracing import SPECULATED_BRANCHES

    def f(x):
        for _ in range(2 * SPECULATED_BRANCHES):
            if (x < -1.0).any():
                raise ValueError("below the lower bound")
        return np.sum(x ** 3)
    fun = wrap(f)
    jf = jit_ps(fun, tiered=False)
    for x in (X, X * 1.2):
        assert_close(jf(x), fun(x))
    (entry,) = jf._cache.values()
    assert len(entry.guards) == 1 and jf.cache_info()["compiles"] == 1
    with pytest.warns(FallbackWarning, match="went the other way"), pytest.raises(ValueError, match="lower bound"):
        jf(X - 1.0)


def test_branches_on_values_computed_differently_are_decided_apart():
    """Two branches are one only where the same primitives compute them from the same inputs
    and constants: sum(x) > 1.0 and sum(x) > 1.001 differ between the two bounds (apart in
    float32 too, as a TPU computes)."""
    def f(x):
        a = bool(np.sum(x) > 1.0)
        b = bool(np.sum(x) > 1.001)
        return x * (2.0 if a else 3.0) + (5.0 if b else 7.0)
    jf = jit_ps(f, fallback="error")
    for x in (onp.array([1.0005, 0.0]), onp.array([0.5, 0.6]), onp.array([0.5, 0.4]), onp.array([1.0, 5e-4])):
        assert_close(jf(x), f(x))
    assert jf.cache_info()["fallbacks"] == 0


def test_fallback_error_raises_for_a_python_while_no_guarded_program_covers():
    """The issue's case: a `while` whose step count grows with the data, under fallback="error",
    raises once the signature's programs are used up, and never runs a call plainly."""
    def halve(x):
        while np.sum(x ** 2) > 1e-3:
            x = x * 0.5
        return x
    jf = jit_ps(halve, fallback="error")
    with pytest.raises(ConcretizationError, match="while_loop"):
        for s in range(1, 33):
            assert_close(jf(onp.ones(3) * s), halve(onp.ones(3) * s))
    assert jf.cache_info()["fallbacks"] == 0


def test_python_float_branch_speculates_once_it_is_a_parameter():
    """A Python float deciding a branch is static for its first STATIC_FLOAT_VALUES values
    (one program each); then it is a parameter, and the branch is decided per trace with a
    guard instead of the signature running plainly (autograd's test_falseyness)."""
    from autograd_xla.api import STATIC_FLOAT_VALUES

    def f(x):
        return x * 2.0 if x > 0.5 else x ** 3
    jf, gf = jit_strict(f), jit_strict(grad(f))
    values = [0.9 + 0.2 * k for k in range(STATIC_FLOAT_VALUES + 3)]
    for v in values:
        assert_close(jf(v), f(v))
        assert_close(gf(v), grad(f)(v))
    assert jf.cache_info()["traces"] == STATIC_FLOAT_VALUES + 1 and jf.cache_info()["fallbacks"] == 0
    assert_close(jf(0.1), f(0.1))  # the other branch: the parameter's signature's second program
    assert_close(gf(0.2), grad(f)(0.2))
    assert jf.cache_info()["traces"] == STATIC_FLOAT_VALUES + 2 and jf.cache_info()["fallbacks"] == 0
