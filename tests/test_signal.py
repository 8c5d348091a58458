"""autograd.scipy.signal.convolve under jit_ps: every mode, axes/dot_axes layouts (the
convnet one included), dtypes, gradients both ways round against plain autograd, and a
convnet layer's training step compiled whole."""
import numpy as onp
import pytest

import autograd.numpy as np
from autograd import grad
from autograd.scipy.signal import convolve
from autograd_xla import jit_ps
from helpers import check, check_value

rs = onp.random.RandomState(0)
CONVNET = dict(axes=([2, 3], [2, 3]), dot_axes=([1], [0]))

CASES = {
    "1d_full": (rs.randn(7), rs.randn(3), {}),
    "1d_valid": (rs.randn(7), rs.randn(3), dict(mode="valid")),
    "1d_valid_b_larger": (rs.randn(3), rs.randn(7), dict(mode="valid")),
    "1d_same": (rs.randn(7), rs.randn(4), dict(mode="same")),
    "1d_same_a_smaller": (rs.randn(3), rs.randn(8), dict(mode="same")),
    "2d_full": (rs.randn(5, 6), rs.randn(3, 2), {}),
    "2d_full_mixed_sizes": (rs.randn(3, 6), rs.randn(5, 2), {}),
    "2d_same": (rs.randn(5, 6), rs.randn(3, 4), dict(mode="same")),
    "2d_valid": (rs.randn(5, 6), rs.randn(3, 4), dict(mode="valid")),
    "convnet_valid": (rs.randn(2, 3, 8, 7), rs.randn(3, 4, 3, 3), dict(CONVNET, mode="valid")),
    "convnet_same": (rs.randn(2, 3, 8, 7), rs.randn(3, 4, 3, 2), dict(CONVNET, mode="same")),
    "convnet_full": (rs.randn(2, 3, 5, 4), rs.randn(3, 2, 2, 3), dict(CONVNET, mode="full")),
    "batched_both": (rs.randn(2, 6), rs.randn(3, 4), dict(axes=([1], [1]))),
    "conv_axis_order": (rs.randn(4, 5, 2), rs.randn(3, 2, 2), dict(axes=([1, 0], [0, 1]), dot_axes=([2], [2]))),
    "no_conv_axes": (rs.randn(2, 3), rs.randn(3, 4), dict(axes=([], []), dot_axes=([1], [0]))),
}


@pytest.mark.parametrize("name", CASES)
def test_values_and_gradients(name):
    A, B, kw = CASES[name]
    check(lambda A, B: convolve(A, B, **kw), A, B, argnums=(0, 1))


@pytest.mark.parametrize("A,B", [(onp.arange(5), onp.arange(3)),
                                 (rs.randn(6).astype(onp.float32), rs.randn(3).astype(onp.float32)),
                                 (rs.randn(6).astype(onp.float32), rs.randn(3)),
                                 (rs.randn(6) + 1j * rs.randn(6), rs.randn(3)),
                                 (onp.ones(1), onp.ones(1)),
                                 (onp.zeros((0, 4)), rs.randn(3))], ids=["int", "f32", "f32_f64", "complex", "size1",
                                                                         "empty"])
def test_dtypes_and_sizes(A, B):
    axes = ([A.ndim - 1], [0])
    for mode in ("full", "same", "valid"):
        if mode == "valid" and A.shape[-1] < B.shape[0] and A.shape[-1] != 0:
            continue
        check_value(lambda A, B: convolve(A, B, axes=axes, mode=mode), A, B)


def test_float32_gradient():
    A, B = rs.randn(2, 3, 6, 6).astype(onp.float32), rs.randn(3, 2, 3, 3).astype(onp.float32)
    check(lambda A, B: convolve(A, B, mode="valid", **CONVNET), A, B, argnums=(0, 1))


def test_errors():
    with pytest.raises(Exception, match="larger than the other"):
        jit_ps(lambda A, B: convolve(A, B, mode="valid"))(rs.randn(3, 6), rs.randn(5, 2))
    with pytest.raises(AssertionError, match="Mode"):
        jit_ps(lambda A, B: convolve(A, B, mode="circular"))(rs.randn(3), rs.randn(2))


def test_convnet_layer_training_step_is_one_compiled_program():
    """The layer of autograd's convnet example: convolution, bias, relu, pooling-free loss."""
    x = rs.randn(4, 1, 12, 12)

    def loss(w, b, x):
        h = convolve(x, w, mode="valid", **CONVNET) + b[None, :, None, None]
        return np.sum(np.maximum(h, 0.0) ** 2)

    w, b = rs.randn(1, 5, 3, 3), rs.randn(5)
    step = jit_ps(grad(loss, (0, 1)))
    got = step(w, b, x)
    expected = grad(loss, (0, 1))(w, b, x)
    for g, e in zip(got, expected):
        onp.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
    graph = step.graph(w, b, x)
    assert "convolve" in str(graph)


def test_float32_products_are_asked_for_at_full_precision():
    """numpy multiplies float32 in float32: every convolution and dot of a float32 convnet
    step says HIGHEST, or a GPU computes them in TF32 (an H200: a 2 % error in the gradient)."""
    x = rs.randn(4, 3, 12, 12).astype(onp.float32)
    w = rs.randn(3, 5, 3, 3).astype(onp.float32)

    def loss(w, x):  # float64 on the CPU runs the convolution as a dot; float32 keeps it
        return np.sum(np.tanh(convolve(x, w, mode="valid", **CONVNET)) ** 2)

    text = jit_ps(grad(loss)).stablehlo(w, x)
    products = [line for line in text.splitlines() if "stablehlo.convolution" in line or "stablehlo.dot_general" in line]
    assert any("stablehlo.convolution" in line for line in products)
    assert all("precision HIGHEST>, #stablehlo<precision HIGHEST" in line for line in products), products
