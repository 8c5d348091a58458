"""vmap and user primitives: a translation rule batches op by op with no rule of its own (a
convolution too, its per-example kernels as feature groups); an op the batching context
cannot batch runs once per example (with one FallbackWarning); a
batching rule registered for the primitive replaces that. And autograd's own jacobian and
hessian, traced, compile to one batched program whose size does not grow with n."""
import warnings

import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, hessian, jacobian
from autograd.extend import defvjp, primitive

import autograd_xla as ax
from autograd_xla import FallbackWarning, register_batching_rule, register_translation_rule

from helpers import assert_close


@primitive
def correlate_valid(x, k):
    """1-D valid cross-correlation: out[i] = sum_j x[i + j] k[j]."""
    n, m = len(x), len(k)
    return onp.array([onp.dot(x[i:i + m], k) for i in range(n - m + 1)])


def _conv_attrs(groups):
    return {"batch_group_count": "1 : i64", "dimension_numbers": "#stablehlo.conv<[b, f, 0]x[o, i, 0]->[b, f, 0]>",
            "feature_group_count": f"{groups} : i64", "lhs_dilation": "array<i64: 1>",
            "rhs_dilation": "array<i64: 1>", "padding": "dense<[[0, 0]]> : tensor<1x2xi64>",
            "window_strides": "array<i64: 1>"}


def _correlate_rule(ctx, x, k):
    n, m = x.shape[0], k.shape[0]
    out = ctx.op1("stablehlo.convolution", [ctx.reshape(x, (1, 1, n)), ctx.reshape(k, (1, 1, m))],
                  (1, 1, n - m + 1), x.dtype, _conv_attrs(1))
    return ctx.reshape(out, (n - m + 1,))


def _correlate_batched(ctx, x, k):
    """The batch as the convolution's feature groups: one group per example."""
    b, n, m = ctx.size, x.shape[0], k.shape[0]
    p = ctx.parent
    out = p.op1("stablehlo.convolution", [p.reshape(ctx.physical(x), (1, b, n)), p.reshape(ctx.physical(k), (b, 1, m))],
                (1, b, n - m + 1), x.dtype, _conv_attrs(b))
    return ctx.wrap(p.reshape(out, (b, n - m + 1)))


defvjp(correlate_valid, lambda ans, x, k: lambda g: onp.convolve(g, k[::-1], mode="full"),
       lambda ans, x, k: lambda g: correlate_valid(x, g))
register_translation_rule(correlate_valid, _correlate_rule)

X = onp.random.RandomState(0).randn(3, 8)
K = onp.random.RandomState(1).randn(3, 3)
LOOP = onp.stack([correlate_valid(x, k) for x, k in zip(X, K)])


def test_user_rule_batches_op_by_op():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = ax.vmap(correlate_valid, in_axes=(0, None))(X, K[0])  # the input alone batched: merged
    assert_close(got, onp.stack([correlate_valid(x, K[0]) for x in X]))


@primitive
def correlate_channels(x, k):
    """Each row of x correlated with the same row of k: a convolution of feature groups."""
    return onp.stack([correlate_valid(a, b) for a, b in zip(x, k)])


def _channels_rule(ctx, x, k):
    (c, n), m = x.shape, k.shape[1]
    out = ctx.op1("stablehlo.convolution", [ctx.reshape(x, (1, c, n)), ctx.reshape(k, (c, 1, m))],
                  (1, c, n - m + 1), x.dtype, _conv_attrs(c))
    return ctx.reshape(out, (c, n - m + 1))


register_translation_rule(correlate_channels, _channels_rule)


def test_op_without_batching_runs_per_example_with_a_warning():
    """The context batches convolutions of one feature group (per-example kernels become
    groups of their own); these already have several."""
    xs, ks = onp.random.RandomState(2).randn(3, 2, 8), onp.random.RandomState(3).randn(3, 2, 3)
    with pytest.warns(FallbackWarning, match="stablehlo.convolution' has no batching rule"):
        got = ax.vmap(correlate_channels)(xs, ks)
    assert_close(got, onp.stack([correlate_channels(x, k) for x, k in zip(xs, ks)]))


def test_a_convolution_with_per_example_kernels_is_one_grouped_convolution():
    f = ax.vmap(correlate_valid)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = f(X, K)
    assert_close(got, LOOP)
    assert "feature_group_count = 3" in f.stablehlo(X, K) and "stablehlo.while" not in f.stablehlo(X, K)


def test_batching_rule_replaces_the_per_example_loop():
    @primitive
    def correlate2(x, k):
        return correlate_valid(x, k)

    register_translation_rule(correlate2, _correlate_rule)
    register_batching_rule(correlate2, _correlate_batched)
    f = ax.vmap(correlate2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = f(X, K)
    assert_close(got, LOOP)
    assert "feature_group_count = 3" in f.stablehlo(X, K) and "stablehlo.while" not in f.stablehlo(X, K)


def _h(x):
    return np.sum(np.tanh(x)) ** 2


def test_traced_autograd_hessian_program_does_not_grow():
    sizes = {}
    for n in (4, 40):
        x = onp.random.RandomState(n).randn(n)
        jf = ax.jit_ps(hessian(_h), fallback="error")
        assert_close(jf(x), hessian(_h)(x))
        text = jf.stablehlo(x)
        sizes[n] = (text.count("\n"), text.count("stablehlo.while"))
    assert sizes[4] == sizes[40], sizes


def test_traced_autograd_jacobian_matches():
    x = onp.random.RandomState(2).randn(5)
    f = lambda x: np.sin(x)[:3] * np.sum(x ** 2)  # noqa: E731
    assert_close(ax.jit_ps(jacobian(f), fallback="error")(x), jacobian(f)(x))
    assert "stablehlo.iota" in ax.jit_ps(jacobian(f)).stablehlo(x)  # the basis is built, not stored


def test_jacobian_of_a_closure_over_a_differentiated_value():
    """The rows' function closes over w, which an enclosing grad differentiates: closure
    conversion makes it an operand of the batch call."""
    x = onp.random.RandomState(3).randn(4)
    w0 = onp.random.RandomState(4).randn(4)

    def loss(w):
        return np.sum(jacobian(lambda x: np.tanh(w * x))(x) ** 2)

    assert_close(ax.jit_ps(grad(loss), fallback="error")(w0), grad(loss)(w0))


def test_jit_ps_options_apply_to_a_vmapped_function():
    """jit_ps(vmap(f), fallback="error") raises what would otherwise fall back to plain autograd."""
    f = ax.vmap(lambda x: onp.random.randn(2) + x)  # draws random numbers: runs plainly
    with pytest.warns(FallbackWarning):
        f(onp.ones((3, 2)))
    with pytest.raises(Exception, match="random"):
        ax.jit_ps(ax.vmap(lambda x: onp.random.randn(2) + x), fallback="error")(onp.ones((3, 2)))



def test_a_user_rules_products_are_computed_at_the_highest_precision():
    """A rule that leaves a convolution's precision_config out gets HIGHEST, as the built-in
    rules ask (on a TPU, DEFAULT multiplies float32 in one bfloat16 pass: 0.8 % off)."""
    text = ax.jit_ps(correlate_valid).lower(X[0], K[0]).as_text()
    assert text.count("stablehlo.convolution") == 1
    assert "precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]" in text
