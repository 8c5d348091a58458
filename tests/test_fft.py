"""autograd.numpy.fft under jit_ps: every transform against numpy (n/s/axes/norm, float64,
float32, complex, int, empty batches), gradients both ways round against plain autograd,
fftshift/ifftshift and autograd's truncate_pad helper."""
import numpy as onp
import pytest

import autograd.numpy as np
import autograd.numpy.fft as fft
from autograd_xla import jit_ps
from helpers import check, check_falls_back, check_value

rs = onp.random.RandomState(0)
X = rs.randn(4, 6, 5)
XC = X + 1j * rs.randn(4, 6, 5)

VALUE_CASES = {
    "fft": (lambda a: fft.fft(a), XC),
    "fft_n_pad": (lambda a: fft.fft(a, n=8, axis=1), XC),
    "fft_n_trunc_ortho": (lambda a: fft.fft(a, n=3, axis=0, norm="ortho"), X),
    "ifft_forward": (lambda a: fft.ifft(a, norm="forward"), XC),
    "ifft_n": (lambda a: fft.ifft(a, n=7, axis=0), XC),
    "rfft": (lambda a: fft.rfft(a), X),
    "rfft_n_odd": (lambda a: fft.rfft(a, n=7, axis=1, norm="forward"), X),
    "irfft": (lambda a: fft.irfft(a), XC),
    "irfft_n_odd": (lambda a: fft.irfft(a, n=7, axis=1), XC),
    "irfft_ortho": (lambda a: fft.irfft(a, n=10, norm="ortho"), XC),
    "fft2": (lambda a: fft.fft2(a), XC),
    "ifft2_s_axes": (lambda a: fft.ifft2(a, s=(3, 8), axes=(0, 2)), XC),
    "fftn": (lambda a: fft.fftn(a), XC),
    "fftn_repeated_axes": (lambda a: fft.fftn(a, axes=(0, 0, 1)), XC),
    "ifftn_s": (lambda a: fft.ifftn(a, s=(2, 7), axes=(2, 1), norm="ortho"), XC),
    "rfftn": (lambda a: fft.rfftn(a), X),
    "rfft2_axes": (lambda a: fft.rfft2(a, axes=(0, 1)), X),
    "irfftn": (lambda a: fft.irfftn(a), XC),
    "irfft2_s": (lambda a: fft.irfft2(a, s=(5, 6)), XC),
    "irfftn_s_axes": (lambda a: fft.irfftn(a, s=(3, 4, 9), axes=(1, 0, 2), norm="forward"), XC),
    "hfft": (lambda a: fft.hfft(a), XC),
    "ihfft": (lambda a: fft.ihfft(a, norm="ortho"), X),
    "fftshift": (lambda a: fft.fftshift(a), X),
    "ifftshift_axes": (lambda a: fft.ifftshift(a, axes=(0, 2)), XC),
    "fftshift_int_axis": (lambda a: fft.fftshift(a, axes=1), X),
    "fftn_4d": (lambda a: fft.fftn(a), rs.randn(2, 3, 2, 4)),
    "rfftn_4d": (lambda a: fft.rfftn(a), rs.randn(2, 3, 2, 4)),
    "irfftn_4d": (lambda a: fft.irfftn(a), rs.randn(2, 3, 2, 4) + 1j * rs.randn(2, 3, 2, 4)),
    "fft_int": (lambda a: fft.fft(a), onp.arange(6)),
    "fft_empty_batch": (lambda a: fft.fft(a), onp.zeros((0, 4))),
    "rfft_size1": (lambda a: fft.rfft(a), onp.ones(1)),
}


@pytest.mark.parametrize("name", VALUE_CASES)
def test_values(name):
    f, a = VALUE_CASES[name]
    check_value(f, a)


@pytest.mark.parametrize("dtype", [onp.float32, onp.complex64])
def test_single_precision(dtype):
    """float32 -> complex64 and complex64 -> float32 (numpy 2 keeps the precision)."""
    a = (X + 1j * X[::-1] if dtype == onp.complex64 else X).astype(dtype)
    check_value(lambda a: (fft.fft(a), fft.ifft2(a), fft.fftn(a, axes=(0, 2))), a)
    if dtype == onp.float32:
        check_value(lambda a: (fft.rfft(a), fft.rfftn(a), fft.ihfft(a)), a)
    else:
        check_value(lambda a: (fft.irfft(a), fft.irfftn(a), fft.hfft(a)), a)


XE = rs.randn(4, 6)            # autograd's real-FFT gradients need an even last length

GRAD_CASES = {
    "fft": (lambda a: fft.fft(a, axis=1), XC),
    "fft_real_input": (lambda a: fft.fft(a, n=8), X),
    "ifft_ortho": (lambda a: fft.ifft(a, norm="ortho"), XC),
    "fft2": (lambda a: fft.fft2(a), X),
    "ifftn": (lambda a: fft.ifftn(a, axes=(0, 2)), XC),
    "rfft": (lambda a: fft.rfft(a, 8), XE),           # n positional: autograd reads it so
    "irfft": (lambda a: fft.irfft(a, n=8), XC),
    "rfft2": (lambda a: fft.rfft2(a), XE),
    "rfftn_ortho": (lambda a: fft.rfftn(a, norm="ortho"), XE),
    "irfftn": (lambda a: fft.irfftn(a, axes=(0, 1)), XC),
    "fftshift": (lambda a: fft.fftshift(a), X),
    "ifftshift": (lambda a: fft.ifftshift(a, axes=1), XC),
}


@pytest.mark.parametrize("name", GRAD_CASES)
def test_gradients(name):
    f, a = GRAD_CASES[name]
    check(f, a)


def test_gradient_float32():
    a = XE.astype(onp.float32)
    check(lambda a: np.abs(fft.rfft2(a)) ** 2, a)


def test_power_spectrum_model():
    """A typical use: a loss on the power spectrum of a filtered signal."""
    def loss(w, x):
        spec = fft.rfft(x * w, axis=-1)
        return np.sum(np.abs(spec) ** 2) / x.shape[-1] + np.sum(fft.irfft(spec * np.conj(spec)))
    check(loss, rs.randn(8), rs.randn(3, 8), argnums=(0, 1))


def test_truncate_pad():
    a = rs.randn(3, 4)
    check(lambda a: fft.truncate_pad(a, (5, 2)), a)
    check_value(lambda a: fft.truncate_pad(a, (3, 4)), a)


def test_errors():
    with pytest.raises(ValueError, match="Invalid number of FFT data points"):
        jit_ps(lambda a: fft.fft(a, n=0))(X)
    with pytest.raises(ValueError, match="Invalid norm"):
        jit_ps(lambda a: fft.fft(a, norm="sideways"))(X)
    with pytest.raises(TypeError):
        jit_ps(fft.rfft)(XC)
    check_falls_back(lambda a: fft.fftn(a, s=(2, 2)), X, error=NotImplementedError, match="axes")
