"""The coverage report tool (autograd_xla.coverage): discovery and classification."""
import autograd.numpy as np
import numpy as onp
from autograd.builtins import container_take
from autograd.extend import defjvp, defvjp, primitive

from autograd_xla import coverage


def test_discovers_autograd_registries():
    infos = coverage.discover()
    names = [i.name for i in infos]
    assert len(names) == len(set(names))
    for expected in ("numpy.tanh", "numpy.sum", "numpy.linalg.inv", "scipy.special.gammaln",
                     "autograd.builtins.container_take", "autograd.numpy.numpy_vjps.dot_adjoint_0",
                     "scipy.stats.norm.logpdf", "autograd.core.VSpace.mut_add"):
        assert expected in names, expected
    psi = next(i for i in infos if i.raw is __import__("scipy.special").special.psi)
    assert len(psi.wrappers) == 2  # psi and digamma wrap the same ufunc: one entry


def test_rule_and_derivatives_compile():
    row = coverage.check_primitive(np.tanh)
    assert (row.name, row.rule, row.fwd, row.vjp, row.jvp, row.errors) == ("numpy.tanh", "lower", "ok", "ok", "ok", [])
    row = coverage.check_primitive(np.sum)  # from the example table: axis=1 of a 3-d array
    assert (row.rule, row.fwd, row.vjp, row.jvp) == ("lower", "ok", "ok", "ok")
    row = coverage.check_primitive(np.hypot)  # autograd defines no JVP for hypot
    assert (row.vjp, row.jvp) == ("ok", "no JVP")


def test_structural_primitive_traces_without_rule():
    row = coverage.check_primitive(container_take)
    assert (row.rule, row.fwd, row.vjp, row.jvp) == ("none, traces", "ok", "ok", "ok")


def test_missing_rule_no_example_and_failures_are_reported():
    @primitive
    def concrete_only(x):
        return onp.asarray(x) * 2.0

    defvjp(concrete_only, lambda ans, x: lambda g: 2.0 * g)
    defjvp(concrete_only, lambda g, ans, x: 2.0 * g)
    row = coverage.check_primitive(concrete_only)
    assert row.rule == "none" and row.fwd == row.vjp == row.jvp == "no example"
    row = coverage.check_primitive(concrete_only, example=coverage.Example(onp.ones(3)))
    assert (row.rule, row.fwd, row.vjp, row.jvp) == ("none", "FAIL", "FAIL", "FAIL")
    assert any("fwd:" in e and "Concretization" in e or "no translation rule" in e for e in row.errors), row.errors

    @primitive
    def no_derivative_for_arg(x, y):
        return x * y

    defvjp(no_derivative_for_arg, None, lambda ans, x, y: lambda g: g * x)
    from autograd_xla import register_translation_rule
    register_translation_rule(no_derivative_for_arg, lambda ctx, x, y: ctx.binary("multiply", x, y))
    row = coverage.check_primitive(no_derivative_for_arg, example=coverage.Example(onp.ones(3), 2 * onp.ones(3)))
    assert (row.rule, row.fwd, row.vjp, row.jvp) == ("lower", "ok", "ok", "no JVP")


def test_report_format():
    rows = coverage.report(select=["numpy.tanh", "autograd.builtins.container_take"], run=False)
    text = coverage.format_report(rows)
    assert "Totals:" in text and "numpy.tanh" in text
    assert coverage.totals(rows)["primitives"] == len(rows) >= 2
