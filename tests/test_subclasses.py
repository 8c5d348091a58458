"""ndarray subclass arguments: plain autograd and jit_ps give the same answers (or the call runs
plainly with a FallbackWarning, never a different answer). A traced stand-in answers the
subclass's isinstance checks and instance attributes (tracing.Kind); results of operations get
numpy's own class and attributes for them. No library needed: the subclasses below are
PennyLane's tensor in miniature (requires_grad, kept through numpy's wrapping) and its kin."""
import inspect
import sys
import types
import warnings

import autograd.numpy as anp
import numpy as np
import pytest
from autograd import grad
from autograd.extend import VSpace
from autograd.numpy.numpy_boxes import ArrayBox
from autograd.numpy.numpy_vspaces import ArrayVSpace
from autograd.tracer import Box

from autograd_xla import FallbackWarning, jit_ps, tracing


class Flagged(np.ndarray):
    """requires_grad kept by numpy's wrapping (__array_finalize__), as PennyLane's tensor."""

    def __array_finalize__(self, obj):
        self.requires_grad = getattr(obj, "requires_grad", None)

    def numpy(self):
        return self.view(np.ndarray)


class Plainish(np.ndarray):
    """Attributes set on the instance only: numpy's results do not have them."""


class Doubling(np.ndarray):
    """An __array_ufunc__ that changes the numbers: compiled code would not follow it."""

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [x.view(np.ndarray) if isinstance(x, Doubling) else x for x in inputs]
        return 2 * getattr(ufunc, method)(*inputs, **kwargs)


class OwnOperators(np.ndarray):
    """Python's * of its own (np.matrix-like)."""

    def __mul__(self, other):
        return np.add(self, other)


class Peaked(np.ndarray):
    """An attribute computed from the data on every wrapping: the stand-in cannot know it."""

    def __array_finalize__(self, obj):
        self.peak = float(np.max(np.asarray(self))) if self.size else None


Box.type_mappings[Flagged] = ArrayBox  # autograd differentiates it as an ndarray (PennyLane does as much)
VSpace.mappings[Flagged] = ArrayVSpace


def make(cls, data, **attrs):
    x = np.asarray(data, dtype=float).view(cls)
    for k, v in attrs.items():
        setattr(x, k, v)
    return x


def sum_if_flagged(x):
    return anp.sum(x ** 2) if isinstance(x, Flagged) and x.requires_grad else anp.sum(x)


def result_attribute(x):
    y = anp.sin(x) * 2.0
    return anp.sum(y) * (3.0 if getattr(y, "requires_grad", False) else 1.0)


def result_isinstance(x):
    y = anp.sum(x * x)
    return y + (10.0 if isinstance(y, np.ndarray) else 0.0) + (100.0 if isinstance(y, Flagged) else 0.0)


def has_attribute(x):
    return anp.sum(x) + (1.0 if hasattr(x[0], "peak") else 0.0) + (2.0 if hasattr(x, "peak") else 0.0)


def set_attribute(x):
    y = x * 1.0
    y.scale = 3.0
    return y * y.scale


def read_set_attribute(x):
    y = x + 1.0
    y.requires_grad = False
    return anp.sum(x) + (5.0 if y.requires_grad else 0.0) + (7.0 if (y * 2).requires_grad else 0.0)


def viewed_as_ndarray(x):
    y = x.view(np.ndarray)
    return anp.sum(y) + (1.0 if isinstance(y, Flagged) else 0.0) + (2.0 if isinstance(x, Flagged) else 0.0)


def own_method(x):
    y = x.numpy()
    return anp.sum(y) + (1.0 if isinstance(y, Flagged) else 0.0)


def peak(x):
    return anp.sum(x) + x.peak + (x * 2).peak


def doubled(x):
    return anp.sum(x + 1.0)


def own_operator(x):
    return anp.sum(x * 2.0)


def copy_then_update(x):
    y = x.copy()
    y[0] = 5.0
    return x + y.sum()


F = make(Flagged, [1.0, 2.0], requires_grad=True)
F_OFF = make(Flagged, [1.0, 2.0], requires_grad=False)
# (label, function, argument, compiles: True if jit_ps must compile it, False if it must fall back)
CASES = [
    ("isinstance branch, flag on", sum_if_flagged, F, True),
    ("isinstance branch, flag off", sum_if_flagged, F_OFF, True),
    ("isinstance branch, plain ndarray", sum_if_flagged, np.array([1.0, 2.0]), True),
    ("attribute of a result", result_attribute, F, True),
    ("attribute of a result, flag off", result_attribute, F_OFF, True),
    ("isinstance of a reduction", result_isinstance, F, True),
    ("attribute set on a result", set_attribute, F, True),
    ("attribute set, then numpy's propagation", read_set_attribute, F, True),
    ("view as ndarray", viewed_as_ndarray, F, True),
    ("the subclass's own method", own_method, F, True),
    ("a subclass without propagation", has_attribute, make(Plainish, [1.0, 2.0], peak=4.0), True),
    ("data-dependent attribute", peak, make(Peaked, [1.0, 3.0]), False),
    ("__array_ufunc__ changing the numbers", doubled, make(Doubling, [1.0, 2.0]), False),
    ("operators of its own", own_operator, make(OwnOperators, [1.0, 2.0]), False),
    ("copy, then update the copy", copy_then_update, np.array([1.0, 2.0]), True),
    ("copy of a subclass, then update", copy_then_update, F, True),
]


def outcome(fun, *args):
    try:
        return "value", fun(*args)
    except Exception as e:  # the jitted call must raise as plain autograd does
        return "error", type(e)


def assert_same(plain, jitted, label):
    assert plain[0] == jitted[0], (label, plain, jitted)
    if plain[0] == "error":
        assert plain[1] is jitted[1], (label, plain, jitted)
    else:
        np.testing.assert_allclose(np.asarray(jitted[1], dtype=float), np.asarray(plain[1], dtype=float),
                                   rtol=1e-12, err_msg=label)


@pytest.mark.parametrize("label,fun,x,compiles", CASES, ids=[c[0] for c in CASES])
def test_subclass_arguments_answer_as_plain(label, fun, x, compiles):
    plain = outcome(fun, x)
    jitted_fun = jit_ps(fun)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = outcome(jitted_fun, x)
        again = outcome(jitted_fun, x)  # the cached signature
    assert_same(plain, jitted, label)
    assert_same(plain, again, label)
    fell_back = [w for w in caught if issubclass(w.category, FallbackWarning)]
    assert len(fell_back) <= 1, [str(w.message) for w in fell_back]
    if compiles is not None:
        assert (not fell_back) == compiles, (label, [str(w.message) for w in fell_back])


GRAD_CASES = [
    ("sum of squares", lambda x: anp.sum(x ** 2)),
    ("branch on the flag", sum_if_flagged),
    ("attribute of a result", result_attribute),
]


@pytest.mark.parametrize("label,fun", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
@pytest.mark.parametrize("x", [F, F_OFF], ids=["flag on", "flag off"])
def test_gradients_through_subclass_arguments(label, fun, x):
    expected = grad(fun)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        np.testing.assert_allclose(jit_ps(grad(fun))(x), expected, rtol=1e-12, err_msg=label)
    np.testing.assert_allclose(grad(jit_ps(fun))(x), expected, rtol=1e-12, err_msg=label)


def test_the_attributes_are_part_of_the_signature():
    f = jit_ps(sum_if_flagged)
    assert f(F) == 5.0 and f(F_OFF) == 3.0 and f(F) == 5.0
    assert f.stats.traces == 2


def test_numpy_s_result_classes_are_probed_once_per_signature(monkeypatch):
    """tracing.kinds_of runs a primitive on probes of its operands' classes (three runs each);
    a loop repeats the same signatures, which are probed once (PennyLane's traces were
    four-fifths probing)."""
    probed = []
    real = tracing._probed_kinds
    monkeypatch.setattr(tracing, "_probed_kinds", lambda prim, given, n: probed.append(prim) or real(prim, given, n))
    monkeypatch.setattr(tracing, "_kinds_known", {})

    def f(x):
        for _ in range(10):
            x = anp.sin(x) * 2.0
        return anp.sum(x)
    np.testing.assert_allclose(jit_ps(f)(F), f(F), rtol=1e-12)
    np.testing.assert_allclose(jit_ps(grad(f))(F), grad(f)(F), rtol=1e-12)
    assert len(probed) < 10  # (each of the 10 steps binds sin and multiply, forward and backward)


def test_calls_of_plain_arrays_first_do_not_serve_the_subclass():
    """C++'s fast path of a plain-ndarray signature (dispatch, _callpath's walk) would take a
    subclass argument for an ndarray: the subclass's calls are the Python path's."""
    f = jit_ps(sum_if_flagged)
    x = np.array([1.0, 2.0])
    for _ in range(40):  # enough calls for the signature's fast path to be handed to C++
        assert f(x) == 3.0
    assert f(F) == 5.0 and f(F_OFF) == 3.0 and f(F) == 5.0
    assert f.stats.traces == 3


def test_a_grad_that_reads_the_flag_differentiates_what_plain_does():
    """PennyLane's qml.grad in miniature: the arguments it differentiates are those whose
    requires_grad is set; a stand-in without the attribute made it differentiate none."""
    def flag_grad(fun):
        def g(*args):
            which = tuple(i for i, a in enumerate(args) if getattr(a, "requires_grad", False))
            return tuple(grad(fun, i)(*args) for i in which)
        return g
    f = flag_grad(lambda a, b: anp.sum(a ** 2 * b))
    for a, b in [(F, F_OFF), (F_OFF, F), (F, F)]:
        plain = f(a, b)
        jitted = jit_ps(f)(a, b)
        assert len(plain) == len(jitted) > 0
        for p, j in zip(plain, jitted):
            np.testing.assert_allclose(j, p, rtol=1e-12)


def test_a_subclass_that_autograd_cannot_box_raises_as_plain():
    x = make(Plainish, [1.0, 2.0])
    fun = lambda x: anp.sum(x ** 2)
    with pytest.raises(TypeError, match="Can't differentiate"):
        grad(fun)(x)
    with pytest.raises(TypeError, match="Can't differentiate"):
        jit_ps(grad(fun), fallback="error")(x)


def test_plain_ndarray_arguments_keep_the_stand_in_of_old():
    """Without subclass arguments a Tracer is a Tracer, not an ndarray, as before."""
    seen = []
    jit_ps(lambda x: seen.append((isinstance(x, np.ndarray), x.__class__ is tracing.Tracer)) or x)(np.ones(2))
    assert seen == [(False, True)]


def test_numpy_of_an_argument_not_differentiated_is_made_static():
    f = jit_ps(lambda x, y: anp.array(x.numpy()) * y if hasattr(x, "numpy") else anp.array(x.tolist()) * y)
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        np.testing.assert_allclose(f(x, y), x * y)
        np.testing.assert_allclose(jit_ps(lambda x, y: anp.array(x.tolist()) * y)(x, y), x * y)
    with pytest.raises(tracing.ConcretizationError, match=r"x\.numpy\(\)"):
        tracing.trace_function(lambda x: x.numpy(), [tracing.Aval((2,), np.dtype(float))])


def test_asarray_of_a_float_argument_not_differentiated_is_made_static():
    """np.asarray of a float argument (a library that wants the data: scipy, PennyLane's
    conversions) retraces with it static, one program per value, as x.tolist() does; of the
    argument being differentiated, plain autograd's answer (here its error)."""
    g = lambda x, n: anp.sum(x) * float(np.asarray(n).sum())
    f = jit_ps(g, tiered=False)
    x = np.ones(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        for n in (np.array([1.0, 2.0]), np.array([1.0, 3.0]), np.array([1.0, 2.0])):
            assert f(x, n) == g(x, n)
    assert f.stats.traces == 2 and f.stats.fallbacks == 0
    h = lambda n: anp.sum(n) * float(np.asarray(n).sum())
    with pytest.raises(TypeError, match="ArrayBox"):
        grad(h)(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="ArrayBox"):
        jit_ps(grad(h), tiered=False)(np.array([1.0, 2.0]))


def test_traced_values_register_with_autoray_once_it_is_imported():
    """autoray names a backend after the class's module; a Tracer is registered as autograd's
    array (when autoray is imported: never by us), and its lru caches are cleared."""
    fake = types.ModuleType("autoray")
    registered = []
    fake.register_backend = lambda cls, name: registered.append((cls, name))
    cleared = []
    fake._infer_class_backend_cached = types.SimpleNamespace(cache_clear=lambda: cleared.append(1))
    saved = sys.modules.get("autoray")
    sys.modules["autoray"] = fake
    try:
        jit_ps(lambda x: x + 1.0)(np.ones(3))
        jit_ps(lambda x: x * 2.0)(np.ones(3))
    finally:
        if saved is None:
            del sys.modules["autoray"]
        else:
            sys.modules["autoray"] = saved
        tracing._autoray_seen = None
    assert registered == [(tracing.Tracer, "autograd")] and cleared == [1]


def test_getfullargspec_of_jitted_functions():
    """pymanopt reads a cost's parameters with inspect.getfullargspec, which does not follow
    __wrapped__: a jitted function answers with its function's."""
    import functools

    def cost(x, y=2.0, *, z=1):
        return x

    class Model:
        @jit_ps
        def loss(self, w, b):
            return w

    expect = inspect.getfullargspec(cost)
    assert inspect.getfullargspec(jit_ps(cost)) == expect
    assert inspect.getfullargspec(jit_ps(lambda x: x @ x)).args == ["x"]
    assert inspect.getfullargspec(Model().loss).args == ["w", "b"]
    assert inspect.getfullargspec(jit_ps(functools.partial(cost, 1.0))).args == ["y"]
    assert inspect.getfullargspec(jit_ps(grad(cost))) == inspect.getfullargspec(grad(cost))


def test_a_result_of_unknown_class_is_not_asked_its_class_by_the_tracer_itself():
    """Results of an operation on an operand too large to probe are of an unknown class
    (tracing.PROBE_MAX_SIZE): asking their class raises. The interceptor once asked every
    primitive's result whether it was a container with isinstance, which asks the class, so
    PennyLane's qml.jacobian of its probabilities ran plainly; it reads the type."""
    x = np.linspace(0.0, 1.0, tracing.PROBE_MAX_SIZE + 10).view(Flagged)

    def f(x):
        return anp.sum(anp.sin(x) * 2.0)
    jf = jit_ps(f, fallback="error", tiered=False)
    np.testing.assert_allclose(jf(x), f(x), rtol=1e-12)
    assert jf.cache_info()["compiles"] == 1
