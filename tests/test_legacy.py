"""Legacy autograd code under jit_ps, called as plain autograd is called: arguments that are
not arrays, differentiation with respect to some arguments only, forward mode over
containers, integer inputs, data arguments that select data, and what runs plainly (one
FallbackWarning) because it cannot compile. Each case compares with plain autograd."""
import warnings

import numpy as onp
import pytest
import scipy.optimize

import autograd.numpy as np
import autograd.scipy.stats as stats
from autograd import grad, make_jvp, value_and_grad
from autograd.extend import defvjp, primitive
from autograd_xla import FallbackWarning, jit_ps, signatures
from helpers import NARROW, TPU_RTOL, assert_close, check_falls_back, check_grads

rs = onp.random.RandomState(0)
A, B = rs.randn(3, 4), rs.randn(4, 5)


def compiled(jf, *args, **kwargs):
    """jf(*args) with no FallbackWarning: the call compiled."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        return jf(*args, **kwargs)


# ----- arguments that are not arrays are static automatically ------------------------------------
STATIC = {  # label: (function, arguments as a user passes them)
    "string (einsum subscripts)": (np.einsum, ("ij,jk->ik", A, B)),
    "int axis (swapaxes)": (np.swapaxes, (A, 0, 1)),
    "int axis (moveaxis)": (np.moveaxis, (A, 0, -1)),
    "int axis (concatenate)": (lambda a, b, ax: np.concatenate([a, b], ax), (A, A, 1)),
    "int sections (split)": (lambda a, n: np.split(a, n, axis=1)[1], (A, 2)),
    "int repeats": (np.repeat, (A, 2, 1)),
    "int k (triu)": (np.triu, (A, 1)),
    "int k (diag)": (lambda a, k: np.diag(a, k), (A, 1)),
    "int ddof (var)": (lambda a, d: np.var(a, ddof=d), (A, 1)),
    "int n (diff)": (lambda a, n: np.diff(a, n), (A, 2)),
    "tensordot axes": (np.tensordot, (A, B, 1)),
    "bool keepdims": (lambda a, axis, keepdims: np.sum(a, axis, keepdims=keepdims), (A, 1, True)),
    "Ellipsis and int lists (einsum's second form)": (np.einsum, (A, [0, 1], B, [1, 2], [0, 2])),
    "None": (lambda a, axis: np.sum(a, axis=axis), (A, None)),
    "slice": (lambda a, s: a[s], (A, slice(1, 3))),
    "dtype": (lambda a, dt: a.astype(dt), (A, onp.float32)),
    "callable": (lambda f, a: f(a) * 2, (np.tanh, A)),
}


@pytest.mark.parametrize("label", sorted(STATIC))
def test_non_array_arguments_are_static(label):
    fn, args = STATIC[label]
    jf = jit_ps(fn)
    assert_close(compiled(jf, *args), fn(*args), path=label)
    assert_close(compiled(jf, *args), fn(*args), path=label)
    assert jf.cache_info()["traces"] == 1
    argnum = next(i for i, a in enumerate(args) if isinstance(a, onp.ndarray))
    try:  # differentiated as autograd's own tests do it, both modes, as far as autograd can
        check_grads(fn, argnum, modes=["fwd", "rev"], order=1)(*args)
    except (AssertionError, NotImplementedError) as e:
        with pytest.raises(type(e)):
            check_grads(jf, argnum, modes=["fwd", "rev"], order=1)(*args)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        check_grads(jf, argnum, modes=["fwd", "rev"], order=1)(*args)


def test_callable_argument_to_odeint():
    from autograd.scipy.integrate import odeint

    def dynamics(y, t, k):
        return -k * y
    f = jit_ps(lambda fun, y0, t, k: odeint(fun, y0, t, (k,)))
    t = onp.linspace(0, 1, 5)
    got = compiled(f, dynamics, onp.ones(2), t, 0.5)
    onp.testing.assert_allclose(got, odeint(dynamics, onp.ones(2), t, (0.5,)), rtol=1e-5)


def test_unhashable_object_is_static_by_identity():
    class Columns:  # a data-frame-backed slicer: unhashable, holds data
        __hash__ = None

        def __init__(self, data):
            self.data = data

        def __call__(self, name):
            return self.data[name]
    cols = Columns({"x": rs.randn(5), "y": rs.randn(5)})
    f = jit_ps(lambda w, c: np.sum((c("x") * w - c("y")) ** 2))
    w = 0.3
    assert_close(compiled(f, w, cols), f._fun(w, cols))
    compiled(f, 0.7, cols)
    assert f.cache_info()["traces"] == 1
    compiled(f, 0.7, Columns(cols.data))  # another object: another trace
    assert f.cache_info()["traces"] == 2


class _Tensor:  # quimb's Tensor: its data in a slot
    __slots__ = ("_data", "tags")

    def __init__(self, data, tags):
        self._data, self.tags = data, tags


class _Network:  # quimb's TensorNetwork: tensors in a dict, a scalar attribute beside them
    def __init__(self, arrays):
        self.tensor_map = {i: _Tensor(a, ("T", i)) for i, a in enumerate(arrays)}
        self.exponent = 0.0


def _network_value(w, tn):
    total = sum(np.sum(np.tanh(t._data * w) ** 2) for t in tn.tensor_map.values())
    return total * 10.0 ** tn.exponent


def _rebind(tn):
    tn.tensor_map[0]._data = tn.tensor_map[0]._data * 2.0


def _in_place(tn):
    tn.tensor_map[1]._data *= 3.0


def _scalar(tn):
    tn.exponent = 1.0


def _new_tensor(tn):
    tn.tensor_map[2] = _Tensor(onp.full(3, 0.5), ("T", 2))


OBJECT_CHANGES = {"an attribute bound to another array": _rebind, "an array changed in place": _in_place,
                  "a scalar attribute": _scalar, "an entry added to a dict attribute": _new_tensor}


@pytest.mark.parametrize("tiered", [False, None])
@pytest.mark.parametrize("label", sorted(OBJECT_CHANGES))
def test_an_object_argument_changed_between_calls_gives_plain_autograd_s_answer(label, tiered):
    """An object argument (quimb's TensorNetwork, a user's model) is static, and what the trace
    read from it is part of the key (signatures.state_digest): a change to its arrays or
    numbers between calls is a new signature, never the old program's numbers."""
    own = onp.random.RandomState(1)  # (not the module's `rs`: later tests' data stay theirs)
    tn = _Network([own.randn(3), own.randn(2, 2)])
    f = jit_ps(value_and_grad(_network_value), tiered=tiered)
    for _ in range(3):  # tiered: held calls run by numpy, the trace's constants with them
        assert_close(f(0.7, tn), value_and_grad(_network_value)(0.7, tn))
    traces = f.cache_info()["traces"]
    OBJECT_CHANGES[label](tn)
    for _ in range(3):
        assert_close(f(0.7, tn), value_and_grad(_network_value)(0.7, tn), path=label)
    assert f.cache_info()["traces"] <= traces + 1


def test_an_object_s_digest_reads_a_bounded_number_of_values():
    """signatures.state_digest reads STATE_VALUES values at most, level by level: an array
    beside a list of a million numbers is seen, the list's far end is not (its cost stays
    that of 4,096 values)."""
    class Holder:
        pass
    held = Holder()
    held.numbers, held.w = [0.0] * 10 ** 6, onp.ones(3)
    digest = signatures.state_digest(held)
    held.numbers[-1] = 1.0
    assert signatures.state_digest(held) == digest
    held.w[0] = 2.0
    assert signatures.state_digest(held) != digest


def test_an_object_holding_values_being_differentiated_runs_plainly_and_says_what_to_pass():
    """quimb's TNOptimizer(loss_fn=jit_ps(loss)): autograd differentiates arrays that reach
    the jitted loss inside an object, which is static: the call runs as plain autograd, and
    the warning says to pass those arrays as arguments."""
    def loss(tn):
        return sum(np.sum(np.tanh(t._data) ** 2) for t in tn.tensor_map.values())
    jf = jit_ps(loss, tiered=False)
    x = onp.linspace(-1.0, 1.0, 3)
    with pytest.warns(FallbackWarning, match="inside an object argument.*Pass the arrays being differentiated"):
        got = grad(lambda x: jf(_Network([x, x * 2.0])))(x)
    assert_close(got, grad(lambda x: loss(_Network([x, x * 2.0])))(x))


def test_int_static_only_where_a_value_is_needed():
    """Python ints stay traced while that works (one trace for many values)."""
    f = jit_ps(lambda x, n: x * n)
    for n in range(5):
        assert_close(compiled(f, A, n), A * n)
    assert f.cache_info()["traces"] == 1
    g = jit_ps(lambda x, n: np.sum(x, axis=n))  # an axis: one trace per value
    for n in (0, 1, 0):
        assert_close(compiled(g, A, n), onp.sum(A, axis=n))
    assert g.cache_info()["traces"] == 2


def test_int_flag_is_never_silently_true():
    """A 0/1 int passed where a rule tests a flag: the rule needs its value, so it is static."""
    f = jit_ps(lambda a, lower: np.linalg.cholesky(a) if lower else np.linalg.cholesky(a).T)
    spd = A @ A.T + 3 * onp.eye(3)
    assert_close(compiled(f, spd, 1), onp.linalg.cholesky(spd))


# ----- differentiating a jitted function with respect to some of its arguments ---------------------
K, MU = onp.array([1.0, 2.0, 3.0]), onp.array([1.1, 2.2, 0.5])


@pytest.mark.parametrize("fn, argnum", [(stats.poisson.cdf, 1), (stats.poisson.logpmf, 1), (stats.chi2.cdf, 0),
                                        (stats.gamma.cdf, 0)], ids=["poisson.cdf", "poisson.logpmf", "chi2.cdf",
                                                                    "gamma.cdf"])
def test_vjp_only_with_respect_to_the_differentiated_argument(fn, argnum):
    """autograd defines these derivatives for one argument only; the compiled VJP asks for
    exactly the arguments autograd boxed, at every order."""
    args = [K + 0.5, MU + 1.0] if argnum == 0 else [K, MU]  # poisson: integer k
    if not (TPU_RTOL and fn in (stats.gamma.cdf, stats.chi2.cdf)):  # on a TPU the incomplete gamma's float32
        # values are up to 2.5e-4 off (the chip's log and lgamma in its prefactor exp(a log x - x - lgamma(a)),
        # helpers.TPU_RTOL; measured on a v5e near x = 2.5), 1-2 % of the derivative over check_grads' float32
        # step (0.379 numeric for 0.373): compared with plain autograd's derivative only
        check_grads(jit_ps(fn), argnum, modes=["rev"])(*args)
    s = lambda a: np.sum(fn(*(args[:argnum] + [a] + args[argnum + 1:])))
    assert_close(grad(jit_ps(s))(args[argnum]), grad(s)(args[argnum]), rtol=TPU_RTOL)


def test_second_derivative_of_a_partial_argument_vjp():
    f = jit_ps(lambda k, mu: np.sum(stats.poisson.logpmf(k, mu) ** 2))
    plain = lambda k, mu: np.sum(stats.poisson.logpmf(k, mu) ** 2)
    hvp = lambda f: grad(lambda m: np.sum(grad(f, 1)(K, m) * MU))(MU)
    assert_close(hvp(f), hvp(plain))


# ----- forward mode over containers ---------------------------------------------------------------
@pytest.mark.parametrize("fn, arg", [
    (np.vstack, (A, A)), (np.hstack, [A, A]), (np.stack, (A, A)),
    (lambda d: d["a"] * np.sin(d["b"]), {"a": A, "b": A + 1}),
    (lambda t: t[0] * np.sum(t[1][1] ** 2), (A, [A, A])),
    (lambda t: t[0]["a"] * t[1] + t[2][0], ({"a": A}, A, [A])),  # a dict beside arrays in a tuple
], ids=["vstack tuple", "hstack list", "stack", "dict", "nested", "dict in tuple"])
def test_forward_and_reverse_mode_over_containers(fn, arg):
    check_grads(jit_ps(fn), modes=["fwd", "rev"], order=2)(arg)
    assert_close(make_jvp(jit_ps(fn))(arg)(arg)[1], make_jvp(fn)(arg)(arg)[1])


# ----- integer inputs are not differentiated ------------------------------------------------------
@pytest.mark.parametrize("x", [onp.arange(3), 3], ids=["int array", "Python int"])
def test_integer_input_raises_autograds_own_error(x):
    loss = lambda x: np.sum(x ** 2)
    with pytest.raises(TypeError, match="Can't differentiate w.r.t. type") as plain:
        grad(loss)(x)
    with pytest.raises(TypeError, match="Can't differentiate w.r.t. type") as ours:
        jit_ps(grad(loss))(x)
    assert str(ours.value) == str(plain.value)
    with pytest.raises(TypeError, match="Can't differentiate w.r.t. type"):
        grad(jit_ps(loss))(x)


# ----- data arguments that select data ------------------------------------------------------------
def survival_nll(params, T, E, entry, weights):
    """A Weibull likelihood with right censoring and left truncation, written the usual way:
    rows selected by boolean masks that are arguments, or computed from one."""
    log_lam, log_rho = params
    lam, rho = np.exp(log_lam), np.exp(log_rho)
    cum_hazard = lambda t: (t / lam) ** rho
    log_hazard = lambda t: log_rho - log_lam + (rho - 1) * (np.log(T[E]) - log_lam)
    ll = np.sum(weights[E] * log_hazard(T[E])) - np.sum(weights * cum_hazard(T))
    ll = ll + np.sum(weights[entry > 0] * cum_hazard(entry[entry > 0]))
    return -ll / np.sum(weights)


def survival_data(n, seed):
    r = onp.random.RandomState(seed)
    T = r.weibull(1.5, n) * 2.0 + 0.1
    E = r.rand(n) < 0.7
    entry = onp.where(r.rand(n) < 0.3, T * r.rand(n) * 0.5, 0.0)
    return T, E, entry, onp.ones(n)


def test_boolean_mask_arguments_are_static_by_content():
    data = survival_data(200, 0)
    vg = jit_ps(value_and_grad(survival_nll))
    x0 = onp.array([0.1, 0.2])
    # on a 32-bit platform (NARROW) the gradients are float32's: BFGS's default gtol of 1e-5 is
    # below their rounding (it stopped on "precision loss" after 175 calls), and its path differs
    opts = {"gtol": 1e-3} if NARROW else {}
    ours = scipy.optimize.minimize(vg, x0, jac=True, args=data, method="BFGS", options=opts)
    plain = scipy.optimize.minimize(value_and_grad(survival_nll), x0, jac=True, args=data, method="BFGS",
                                    options=opts)
    assert NARROW or (ours.nit == plain.nit and ours.nfev == plain.nfev)
    onp.testing.assert_allclose(ours.x, plain.x, rtol=1e-2 if NARROW else 1e-10)
    info = vg.cache_info()
    assert info["traces"] == 1 and info["fallbacks"] == 0 and info["hits"] == ours.nfev - 1
    other = survival_data(200, 1)  # another dataset of the same shapes: another trace
    assert_close(compiled(vg, x0, *other), value_and_grad(survival_nll)(x0, *other))
    assert vg.cache_info()["traces"] == 2
    mutated = tuple(a.copy() for a in data)
    mutated[1][:5] = ~mutated[1][:5]  # changed in place: the digest sees it
    assert_close(compiled(vg, x0, *mutated), value_and_grad(survival_nll)(x0, *mutated))
    assert vg.cache_info()["traces"] == 3


def test_float_that_decides_a_shape_but_changes_every_call_runs_plainly():
    """x[x > 0] with x the differentiated parameter cannot be static; a float argument that
    changes on every call is static for a few values, then runs plainly."""
    f = lambda x: np.sum(x[x > 0] ** 2)
    check_falls_back(grad(f), rs.randn(5), error=TypeError, match="boolean mask")  # x: a parameter
    jf = jit_ps(f)
    for i in range(8):
        x = rs.randn(5)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_close(jf(x), f(x))
    assert jf.cache_info()["traces"] <= 5


# ----- what cannot compile runs plainly, with one warning that names the cause --------------------
def python_while(x):
    while np.sum(x) > 0:  # 75 steps: each decided per trace and guarded, up to tracing.SPECULATED_BRANCHES
        x = x - 0.01
    return x


def data_dependent_shape(x):  # (x being differentiated cannot be made static)
    return grad(lambda x: np.sum(x[np.nonzero(x > 0)] ** 2))(x)


def concrete_value(x):
    return x * float(np.max(x))


@primitive
def opaque(x):  # no translation rule, and its implementation needs data
    return onp.asarray(x) * 3.0


@primitive
def checked(x):  # no translation rule, and its implementation checks its array's type (scipy's eigsh)
    if not isinstance(x, onp.ndarray):
        raise TypeError("type not understood")
    return x * 3.0


CAUSES = {  # label: (function, error under fallback="error", what the warning says)
    "Python while on a traced value": (python_while, TypeError,
                                       r"(?s)`if x:`.*line \d+, in python_while.*while np.sum\(x\) > 0"),
    "data-dependent shape": (data_dependent_shape, Exception, r"(?s)nonzero.*np.nonzero\(x > 0\)"),
    "concrete value": (concrete_value, TypeError, r"(?s)float\(x\).*float\(np.max\(x\)\)"),
    "primitive without a rule": (lambda x: opaque(x) + 1, NotImplementedError,
                                 "(?s)no translation rule for 'opaque'.*register_translation_rule"),
    "primitive without a rule whose code checks its array's type": (
        lambda x: checked(x) + 1, NotImplementedError,
        "(?s)no translation rule for 'checked' \\(its own code, run on traced values, raised TypeError: type not "
        "understood\\).*register_translation_rule"),
    "complex numbers needing data": (lambda x: np.real_if_close(x + 0j), Exception, ""),
}


@pytest.mark.parametrize("label", sorted(CAUSES))
def test_each_fallback_cause_runs_as_plain_autograd(label):
    fn, error, match = CAUSES[label]
    x = onp.array([0.5, -0.25, 2.0])
    msg = check_falls_back(fn, x, error=error, match=match or None)
    assert "runs as plain autograd" in msg and "fallback='error'" in msg
    assert __file__ in msg or label == "complex numbers needing data"


def test_fallback_differentiates_as_plain_autograd_both_ways():
    f = lambda x: np.sum(python_while(x) ** 2)
    x = onp.array([0.5, -0.25, 2.0])
    with pytest.warns(FallbackWarning):
        assert_close(grad(jit_ps(f))(x), grad(f)(x))
    with pytest.warns(FallbackWarning):
        assert_close(jit_ps(grad(f))(x), grad(f)(x))


def test_a_program_too_large_runs_plainly():
    """(Its loop's steps repeat, so rolling would make it small: roll_loops=False keeps it
    unrolled, as a loop whose steps differ stays.)"""
    def unrolled(x):
        for _ in range(60):
            x = np.sin(x) + 0.5 * x
        return x
    x = onp.linspace(0, 1, 4)
    from autograd_xla import ProgramTooLargeError
    with pytest.raises(ProgramTooLargeError, match="too large to compile"):
        jit_ps(unrolled, max_program=(100, 1 << 30), fallback="error", roll_loops=False)(x)
    small = jit_ps(unrolled, max_program=(100, 1 << 30), roll_loops=False)
    with pytest.warns(FallbackWarning, match=r"(?s)bound 100\b.*from .*test_legacy.py.*scan or fori_loop") as w:
        assert_close(small(x), unrolled(x))
    assert len(w) == 1
    tight_text = jit_ps(unrolled, max_program=(10 ** 6, 2000), roll_loops=False)
    with pytest.warns(FallbackWarning, match="MiB of StableHLO"):
        tight_text(x)
    assert_close(compiled(jit_ps(unrolled), x), unrolled(x))  # the default bound compiles it


def test_user_error_is_plain_autograds_error():
    """A function that fails as plain autograd fails the same way under jit_ps."""
    f = jit_ps(lambda a, b: a @ b)
    with pytest.raises(ValueError, match="matmul"):
        f(A, A)
    assert_close(compiled(f, A, B), A @ B)


# ----- numpy constructs that look at data in numpy, compiled --------------------------------------
C = rs.randn(3, 2)
CONCATENATORS = {
    "r_ one": lambda x: np.r_[x],
    "r_ mixed": lambda x: np.r_[x, C, x],
    "r_ scalars and rows": lambda x: np.r_[x[0], 1.0, x[1]],
    "r_ directive": lambda x: np.r_["1", x, C],
    "c_ columns": lambda x: np.c_[x[:, 0], x[:, 1]],
    "c_ blocks": lambda x: np.c_[x, C],
}


@pytest.mark.parametrize("label", sorted(CONCATENATORS))
def test_r_and_c_compile_and_differentiate(label):
    f = CONCATENATORS[label]
    x = rs.randn(3, 2)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "(r_|c_) is slow")  # autograd's own warning
        assert_close(compiled(jit_ps(f), x), f(x))
        loss = lambda x: np.sum(f(x) ** 2)
        assert_close(compiled(jit_ps(grad(loss)), x), grad(loss)(x))
        assert_close(grad(jit_ps(loss))(x), grad(loss)(x))


def test_integer_scalar_type_of_a_traced_array_is_a_cast():
    """np.int64(x) of an array is x.astype(np.int64) (autograd's own test_cast_to_int)."""
    def f(W):
        return W[:, :-1][np.int64(W[:, -1])].sum()
    W = onp.abs(rs.randn(5, 10))
    W[:, -1] = [0, 3, 1, 4, 2.5]
    assert_close(compiled(jit_ps(f), W), f(W))
    assert_close(compiled(jit_ps(grad(f)), W), grad(f)(W))
    assert type(np.int64(3)) is not onp.ndarray and np.int64(2.7) == 2  # untouched outside traces


def test_gradient_along_several_axes():
    """autograd's VJP of np.gradient asks np.ndim of a list of cotangents."""
    x = rs.randn(4, 4, 4)
    for axis in (None, (0, -1), 1):
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)
            check_grads(jit_ps(np.gradient), 0, modes=["rev"], order=1)(x, axis=axis)


@primitive
def scaled_by(x, n):  # no translation rule; its code needs n's value
    return x * float(n)


defvjp(scaled_by, lambda ans, x, n: lambda g: g * float(n))


def test_a_primitive_without_a_rule_needing_an_integers_value_compiles_with_it_static():
    """The primitive's own code runs on traced values; float(n) of an integer argument asks
    for it static, and the retry compiles (one program per value, as a static argument)."""
    f = lambda x, n: np.sum(scaled_by(x, n) ** 2)
    jf = jit_ps(f, tiered=False, fallback="error")
    x = onp.array([1.0, 2.0])
    for n in (3, 3, 4):
        assert_close(jf(x, n), f(x, n))
        assert_close(grad(jit_ps(f, tiered=False, fallback="error"))(x, n), grad(f)(x, n))
    assert jf.cache_info()["compiles"] == 2
