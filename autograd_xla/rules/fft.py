"""numpy.fft: the transforms, their normalisations, fftshift, and autograd's truncate_pad.

`stablehlo.fft` transforms the innermost 1 to 3 dimensions. numpy's n-dimensional
transforms are sequences of 1-d ones, so distinct axes are moved innermost and done
together (in chunks of three), each axis first zero-padded or truncated to its length;
repeated axes (legal in numpy) fall back to numpy's own sequence of 1-d transforms.
XLA's inverse transforms carry 1/n; numpy's `norm` then rescales ("ortho", "forward").
"""
import math

import numpy as np
from autograd.numpy import fft as afft

from ..context import normalize_axis
from ..registry import lowers
from .shape import roll

_NORMS = (None, "backward", "ortho", "forward")
_FORWARD_SCALE = {None: lambda n: 1.0, "backward": lambda n: 1.0, "ortho": lambda n: 1 / math.sqrt(n),
                  "forward": lambda n: 1.0 / n}
# XLA's inverse transforms already divide by n, which is numpy's default ("backward")
_INVERSE_SCALE = {None: lambda n: 1.0, "backward": lambda n: 1.0, "ortho": lambda n: math.sqrt(n),
                  "forward": lambda n: float(n)}


def _complex_dtype(dtype):
    return np.result_type(dtype, 1j)


def _real_dtype(dtype):
    return np.result_type(np.empty(0, dtype).real.dtype, 1.0)


def _check_norm(norm):
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm}; should be "backward", "ortho" or "forward".')


def _check_out(out):
    if out is not None:
        raise NotImplementedError("numpy.fft's out= is not supported under jit_ps")


def resize(ctx, v, axis, n):
    """Zero-pad or truncate `v` to length n along `axis` (what numpy does with `n`)."""
    d = v.shape[axis]
    if n < d:
        return ctx.slice(v, [0] * v.ndim, [n if i == axis else s for i, s in enumerate(v.shape)])
    if n > d:
        high = [n - d if i == axis else 0 for i in range(v.ndim)]
        return ctx.pad(v, ctx.scalar(0, v.dtype), [0] * v.ndim, high)
    return v


def _xla_fft(ctx, v, kind, lengths, out_dtype):
    """stablehlo.fft over the innermost len(lengths) dimensions (at most 3)."""
    if kind == "RFFT":
        shape = v.shape[:-1] + (lengths[-1] // 2 + 1,)
    elif kind == "IRFFT":
        shape = v.shape[:-1] + (lengths[-1],)
    else:
        shape = v.shape
    if 0 in shape or 0 in v.shape:
        return ctx.full(shape, 0, out_dtype)
    attrs = {"fft_type": f"#stablehlo<fft_type {kind}>",
             "fft_length": "array<i64: " + ", ".join(str(int(n)) for n in lengths) + ">"}
    return ctx.op1("stablehlo.fft", [v], shape, out_dtype, attrs)


def _transform(ctx, v, axes, lengths, kind, cdt):
    """XLA transforms of `kind` over distinct `axes`, three dimensions at a time. The
    chunk holding the last axis is the real one (RFFT first, IRFFT last); the others
    are complex FFT/IFFT."""
    rest = [i for i in range(v.ndim) if i not in axes]
    perm = rest + list(axes)
    x = ctx.transpose(v, perm)
    nd, k = x.ndim, len(axes)
    chunks, stop = [], k
    while stop > 0:                                   # innermost chunk first
        chunks.append((max(0, stop - 3), stop))
        stop = max(0, stop - 3)
    if kind == "IRFFT":
        chunks.reverse()
    for lo, hi in chunks:
        chunk_kind = kind if hi == k else {"RFFT": "FFT", "IRFFT": "IFFT"}.get(kind, kind)
        dims = [nd - k + i for i in range(lo, hi)]
        p = [d for d in range(nd) if d not in dims] + dims
        out_dtype = _real_dtype(cdt) if chunk_kind == "IRFFT" else cdt
        y = _xla_fft(ctx, ctx.transpose(x, p), chunk_kind, lengths[lo:hi], out_dtype)
        x = ctx.transpose(y, list(np.argsort(p)))
    return ctx.transpose(x, list(np.argsort(perm)))


def _scale(ctx, v, factor):
    if factor == 1.0:
        return v
    return ctx.binary("multiply", v, ctx.full(v.shape, factor, v.dtype))


def _axes_and_lengths(v, s, axes, invreal=False):
    """numpy's _cook_nd_args: per-axis lengths, and the axes (normalised, in order)."""
    if s is None:
        axes_ = list(range(v.ndim)) if axes is None else list(axes)
        lengths = [v.shape[normalize_axis(a, v.ndim)] for a in axes_]
        if invreal and lengths:
            lengths[-1] = (lengths[-1] - 1) * 2
    else:
        lengths = list(s)
        if axes is None:
            raise NotImplementedError("numpy.fft with s= but axes=None is deprecated in NumPy 2.0; "
                                      "pass axes explicitly under jit_ps")
        axes_ = list(axes)
        if None in lengths:
            raise NotImplementedError("numpy.fft with None in s= is deprecated in NumPy 2.0; pass the lengths")
    if len(lengths) != len(axes_):
        raise ValueError("Shape and axes have different lengths.")
    axes_ = [normalize_axis(a, v.ndim) for a in axes_]
    lengths = [v.shape[a] if n == -1 else int(n) for n, a in zip(lengths, axes_)]
    for n in lengths:
        if n < 1:
            raise ValueError(f"Invalid number of FFT data points ({n}) specified.")
    return axes_, lengths


def c2c(ctx, a, axes, lengths, norm, inverse):
    """Complex transforms along axes (numpy's order: last axis first, which for a linear
    separable transform only matters when an axis repeats)."""
    _check_norm(norm)
    v = ctx.asvalue(a)
    cdt = _complex_dtype(v.dtype)
    v = ctx.astype(v, cdt)
    if len(set(axes)) != len(axes):
        for ax, n in reversed(list(zip(axes, lengths))):
            v = c2c(ctx, v, [ax], [n], norm, inverse)
        return v
    for ax, n in zip(axes, lengths):
        v = resize(ctx, v, ax, n)
    if not axes:
        return v
    out = _transform(ctx, v, axes, lengths, "IFFT" if inverse else "FFT", cdt)
    total = math.prod(lengths)
    return _scale(ctx, out, (_INVERSE_SCALE if inverse else _FORWARD_SCALE)[norm](total))


def r2c(ctx, a, axes, lengths, norm):
    """rfft along axes[-1], then complex transforms along the others (numpy's rfftn)."""
    _check_norm(norm)
    v = ctx.asvalue(a)
    if v.dtype.kind == "c":
        raise TypeError("ufunc 'rfft' did not contain a loop with signature matching types: numpy's rfft "
                        "does not accept complex input")
    rdt = _real_dtype(v.dtype)
    cdt = _complex_dtype(rdt)
    v = ctx.astype(v, rdt)
    last_ax, last_n = axes[-1], lengths[-1]
    if len(set(axes)) != len(axes):
        out = r2c(ctx, v, [last_ax], [last_n], norm)
        return c2c(ctx, out, axes[:-1], lengths[:-1], norm, False)
    for ax, n in zip(axes, lengths):
        v = resize(ctx, v, ax, n)
    out = _transform(ctx, v, axes, lengths, "RFFT", cdt)
    return _scale(ctx, out, _FORWARD_SCALE[norm](math.prod(lengths)))


def c2r(ctx, a, axes, lengths, norm):
    """Complex inverse transforms along axes[:-1], then irfft along axes[-1] (numpy's irfftn).
    As numpy's, irfft reads the first n//2 + 1 inputs and ignores the imaginary parts of
    the zero (and, for even n, the Nyquist) frequency."""
    _check_norm(norm)
    v = ctx.asvalue(a)
    cdt = _complex_dtype(v.dtype)
    v = ctx.astype(v, cdt)
    last_ax, last_n = axes[-1], lengths[-1]
    # the other axes first, as their own transform: numpy's irfft then drops the imaginary
    # parts their result has at the zero and Nyquist frequencies of the last axis
    v = c2c(ctx, v, axes[:-1], lengths[:-1], norm, True)
    v = resize(ctx, v, last_ax, last_n // 2 + 1)
    v = _hermitian_edges(ctx, v, last_ax, last_n)
    out = _transform(ctx, v, [last_ax], [last_n], "IRFFT", cdt)
    return _scale(ctx, out, _INVERSE_SCALE[norm](last_n))


def _hermitian_edges(ctx, v, axis, n):
    """Zero the imaginary part of the first (and, for even n, the last) entry along axis."""
    if v.shape[axis] == 0:
        return v
    idx = ctx.iota(v.shape, np.int64, axis)
    edge = ctx.compare(idx, ctx.full(v.shape, 0, np.int64), "EQ")
    if n % 2 == 0:
        edge = ctx.binary("or", edge, ctx.compare(idx, ctx.full(v.shape, n // 2, np.int64), "EQ"))
    real_only = ctx.complex(ctx.real(v), ctx.zeros_like(ctx.real(v)))
    return ctx.select(edge, real_only, v)


def _n_axis(v, n, axis, default):
    ax = normalize_axis(axis, v.ndim)
    return [ax], [default(v.shape[ax]) if n is None else int(n)]


def _check_1d_length(lengths):
    if lengths[0] < 1:
        raise ValueError(f"Invalid number of FFT data points ({lengths[0]}) specified.")


_TRANSFORMS = ("fft", "ifft", "rfft", "irfft")


def _numpy_transform(ctx, kind, v, axes, lengths, norm):
    """One of _TRANSFORMS of v along axes, the 1-d and n-d entry points alike."""
    if kind in ("fft", "ifft"):
        return c2c(ctx, v, axes, lengths, norm, kind == "ifft")
    return (r2c if kind == "rfft" else c2r)(ctx, v, axes, lengths, norm)


def _one_d(kind):
    default = (lambda d: (d - 1) * 2) if kind in ("irfft", "hfft") else (lambda d: d)

    def rule(ctx, a, n=None, axis=-1, norm=None, out=None):
        _check_out(out)
        v = ctx.asvalue(a)
        axes, lengths = _n_axis(v, n, axis, default)
        _check_1d_length(lengths)
        if kind in _TRANSFORMS:
            return _numpy_transform(ctx, kind, v, axes, lengths, norm)
        _check_norm(norm)
        swapped = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}[norm]
        if kind == "hfft":
            vc = ctx.astype(v, _complex_dtype(v.dtype))
            conj = ctx.complex(ctx.real(vc), ctx.unary("negate", ctx.imag(vc)))
            return c2r(ctx, conj, axes, lengths, swapped)
        res = r2c(ctx, v, axes, lengths, swapped)                       # ihfft
        return ctx.complex(ctx.real(res), ctx.unary("negate", ctx.imag(res)))
    rule.__name__ = f"{kind}_rule"
    return rule


for _kind in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    lowers(getattr(np.fft, _kind))(_one_d(_kind))


def _n_d(kind, default_axes):
    def rule(ctx, a, s=None, axes=default_axes, norm=None, out=None):
        _check_out(out)
        v = ctx.asvalue(a)
        ax, lengths = _axes_and_lengths(v, s, axes, invreal=kind == "irfft")
        if not ax:
            if kind in ("rfft", "irfft"):
                raise IndexError("list index out of range")   # what numpy raises for axes=()
            return ctx.astype(v, _complex_dtype(v.dtype))
        return _numpy_transform(ctx, kind, v, ax, lengths, norm)
    rule.__name__ = f"{kind}n_rule"
    return rule


for _kind in ("fft", "ifft", "rfft", "irfft"):
    lowers(getattr(np.fft, _kind + "n"))(_n_d(_kind, None))
    lowers(getattr(np.fft, _kind + "2"))(_n_d(_kind, (-2, -1)))


def _shift(sign):
    def rule(ctx, x, axes=None):
        v = ctx.asvalue(x)
        if axes is None:
            axes_ = list(range(v.ndim))
        elif isinstance(axes, (int, np.integer)):
            axes_ = [axes]
        else:
            axes_ = list(axes)
        for ax in axes_:
            ax = normalize_axis(ax, v.ndim)
            v = roll(ctx, v, sign * (v.shape[ax] // 2), ax)
        return v
    return rule


lowers(np.fft.fftshift)(_shift(1))
lowers(np.fft.ifftshift)(_shift(-1))


@lowers(afft.truncate_pad)
def _truncate_pad(ctx, x, shape):
    """autograd's helper: zero-pad at the end or truncate x to `shape`."""
    v = ctx.asvalue(x)
    shape = tuple(int(n) for n in shape)
    if len(shape) != v.ndim:
        raise ValueError(f"truncate_pad: shape {shape} does not match the array's {v.ndim} dimensions")
    for ax, n in enumerate(shape):
        v = resize(ctx, v, ax, n)
    return v
