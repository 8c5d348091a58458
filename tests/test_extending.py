"""User primitives: with a translation rule they compile; without one, jit_ps falls back to
plain autograd with one warning (or raises with fallback='error')."""
import warnings

import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
from autograd.extend import defvjp, primitive
from autograd_xla import UnsupportedPrimitiveError, jit_ps, register_translation_rule
from helpers import assert_close


@primitive
def softplus(x):
    return onp.log1p(onp.exp(x))


defvjp(softplus, lambda ans, x: lambda g: g / (1 + np.exp(-x)))


def softplus_rule(ctx, x):
    x = ctx.asvalue(x)
    return ctx.unary("log_plus_one", ctx.unary("exponential", x))


register_translation_rule(softplus, softplus_rule)


@primitive
def needs_data(x):
    """A primitive whose raw code needs concrete values (like much scipy code)."""
    return onp.asarray(x) * float(onp.asarray(x).sum() > 0)


defvjp(needs_data, lambda ans, x: lambda g: g * float(onp.asarray(x).sum() > 0))


def test_user_primitive_with_rule_compiles():
    x = onp.linspace(-2, 2, 5)
    f = jit_ps(lambda x: np.sum(softplus(x) ** 2))
    assert_close(f(x), onp.sum(onp.log1p(onp.exp(x)) ** 2))
    assert "softplus" in str(f.graph(x))
    expected = grad(lambda x: np.sum(softplus(x) ** 2))(x)
    assert_close(jit_ps(grad(lambda x: np.sum(softplus(x) ** 2)))(x), expected)
    assert_close(grad(f)(x), expected)


def test_user_primitive_without_rule_falls_back_once_with_a_warning():
    x = onp.linspace(-2, 2, 5)
    f = jit_ps(lambda x: np.sum(needs_data(x) * 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(x)
        out2 = f(x + 1)
    assert_close(out, onp.sum(x * 2.0) * (x.sum() > 0))
    assert_close(out2, onp.sum((x + 1) * 2.0))
    messages = [str(w.message) for w in caught if "plain autograd" in str(w.message)]
    assert len(messages) == 1 and "needs_data" in messages[0] and "test_extending.py" in messages[0]
    assert f.cache_info()["fallbacks"] == 1
    assert_close(grad(f)(x + 1), grad(lambda x: np.sum(needs_data(x) * 2))(x + 1))


def test_fallback_error_mode():
    f = jit_ps(lambda x: needs_data(x), fallback="error")
    with pytest.raises(UnsupportedPrimitiveError, match="needs_data"):
        f(onp.ones(3))
    with pytest.raises(UnsupportedPrimitiveError):  # still raises, cache intact
        f(onp.ones(3))
    assert f.cache_info()["size"] == 0
