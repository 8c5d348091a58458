"""The primitive registry (registry.py): one entry per primitive, every face in it."""
import importlib

import autograd.numpy as anp
import numpy as onp
import pytest
from autograd import grad
from autograd.extend import defvjp, primitive

import autograd_xla
from autograd_xla import jit_ps, registry, tracing
from autograd_xla.control_flow.common import ControlFlowPrimitive
from autograd_xla.core import Aval, UfuncMethod, setitem


@pytest.fixture
def scratch():
    """Register into the real registry and remove what the test added afterwards (the package's
    own registrations made first: impurity's, imported at a process's first trace)."""
    importlib.import_module("autograd_xla.impurity")
    before = set(registry.entries())
    yield
    for key in set(registry.entries()) - before:
        del registry._ENTRIES[key]


def test_wrapper_and_raw_function_share_one_entry():
    assert registry.lookup(anp.tanh) is registry.lookup(onp.tanh)
    assert registry.lookup(anp.tanh).lowering is not None
    assert registry.key_of(anp.tanh) is onp.tanh


def test_translation_and_trace_rules_replace_each_other(scratch):
    def raw(x):
        return x * 2.0

    def lower(ctx, x):
        return ctx.binary("multiply", x, ctx.full(x.shape, 2.0, x.dtype))

    def trace(x):
        return x + x

    registry.register_translation_rule(raw, lower)
    entry = registry.lookup(raw)
    assert (entry.lowering, entry.trace) == (lower, None)
    registry.register_trace_rule(raw, trace)
    assert (entry.lowering, entry.trace) == (None, trace)
    assert registry.has_rule(raw)
    registry.register_translation_rule(raw, lower)
    assert (entry.lowering, entry.trace) == (lower, None)


def test_public_registration_compiles_a_new_primitive(scratch):
    @primitive
    def cube(x):
        return x ** 3

    defvjp(cube, lambda ans, x: lambda g: 3 * g * x ** 2)
    autograd_xla.register_translation_rule(
        cube, lambda ctx, x: ctx.binary("multiply", x, ctx.binary("multiply", x, x)))
    f = jit_ps(lambda x: anp.sum(cube(x)), fallback="error")
    x = onp.linspace(-1.0, 2.0, 5)
    assert f(x) == pytest.approx(onp.sum(x ** 3), rel=1e-14)
    onp.testing.assert_allclose(jit_ps(grad(lambda x: anp.sum(cube(x))), fallback="error")(x), 3 * x ** 2,
                                rtol=1e-14)
    assert registry.lookup(cube).lowering is not None


def test_ufunc_methods_get_an_entry_from_their_factory():
    add_at = registry.lookup(UfuncMethod(onp.add, "at"))
    assert add_at is not None and add_at.lowering is not None
    assert registry.lookup(UfuncMethod(onp.add, "at")) is add_at  # made once, then found
    assert registry.lookup(UfuncMethod(onp.add, "no_such_method")) is None


def test_metadata_rules_record_no_equation():
    assert registry.lookup(onp.shape).metadata is not None
    assert not registry.has_rule(onp.shape)

    def f(x):
        return x * onp.shape(x)[0] + onp.ndim(x)

    graph, _ = tracing.trace_function(f, [Aval((3, 4), onp.float64)])
    assert [getattr(e.prim, "__name__", None) for e in graph.eqns] == ["multiply", "add"]


def test_replay_faces_of_structural_and_control_flow_primitives():
    for prim in (setitem, UfuncMethod(onp.add, "at")):
        assert registry.lookup(prim).replay is not None
    prims = [e.prim for e in registry.entries().values() if isinstance(e.prim, ControlFlowPrimitive)]
    assert len(prims) >= 3  # while, scan, cond/switch
    for p in prims:
        entry = registry.lookup(p)
        assert entry.lowering is not None and entry.replay is not None


def test_numpy_random_draws_have_interceptors():
    entry = registry.lookup(onp.random.normal)
    assert entry is not None and entry.interceptor is not None
    assert any(owner is onp.random and name == "normal" for owner, name, _ in registry.MODULE_PATCHES)


def test_every_entry_has_one_way_of_recording_and_no_batching_yet():
    for key, entry in registry.entries().items():
        assert not (entry.lowering is not None and entry.trace is not None), key
        ours = not getattr(key, "__module__", "").startswith("test_")  # other tests' user primitives have their own
        assert entry.batching is None or not ours, key
        assert entry.prim is key


def test_unhashable_primitives_have_no_entry():
    assert registry.lookup([1, 2]) is None
    assert not registry.has_rule({})
