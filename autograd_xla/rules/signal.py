"""autograd.scipy.signal.convolve: one `stablehlo.convolution`.

autograd's convolve(A, B, axes=[conv axes of A, of B], dot_axes=[summed axes of A, of B],
mode) is a full, valid or same convolution along the paired conv axes, summed over the
paired dot axes, with the output laid out as (A's other axes, B's other axes, conv axes).
Every mode is a window of the full convolution: along an axis of sizes nA, nB, full
starts at 0 (length nA+nB-1), valid at min(nA, nB)-1 (length |nA-nB|+1) and same at
(nB-1)//2 (length nA). That window is a cross-correlation of the larger operand (the
"image": XLA's lhs, its other axes the batch, its dot axes the feature) with the other
one reversed (the kernel: its other axes the output features), padded so that the
correlation starts and ends where the window does. The graph keeps one convolution
node, and its VJPs (again convolve) lower the same way.
"""
import math

import numpy as np

from ..context import result_type
from ..registry import lowers, when_imported


def _conv_size(na, nb, mode):
    if mode == "full":
        return na + nb - 1
    if mode == "same":
        return na
    return abs(na - nb) + 1


def _window_start(na, nb, mode):
    if mode == "full":
        return 0
    if mode == "same":
        return (nb - 1) // 2
    return min(na, nb) - 1


def _canonical(ctx, v, first, second, conv):
    """v as (prod(first), prod(second), *conv sizes), axes in the order given."""
    x = ctx.transpose(v, list(first) + list(second) + list(conv))
    size = lambda axes: math.prod(v.shape[a] for a in axes)  # noqa: E731
    return ctx.reshape(x, (size(first), size(second)) + tuple(v.shape[a] for a in conv))


def _convolution(ctx, lhs, rhs, padding, dtype):
    k = lhs.ndim - 2
    spatial = ", ".join(str(i) for i in range(k))
    dims = f"[b, f, {spatial}]x[o, i, {spatial}]->[b, f, {spatial}]"
    out_spatial = [lhs.shape[2 + i] + lo + hi - rhs.shape[2 + i] + 1 for i, (lo, hi) in enumerate(padding)]
    shape = (lhs.shape[0], rhs.shape[0]) + tuple(out_spatial)
    pads = ", ".join(f"[{lo}, {hi}]" for lo, hi in padding)
    ones = "array<i64: " + ", ".join(["1"] * k) + ">"
    attrs = {"batch_group_count": "1 : i64", "dimension_numbers": f"#stablehlo.conv<{dims}>",
             "feature_group_count": "1 : i64", "lhs_dilation": ones, "rhs_dilation": ones,
             "padding": f"dense<[{pads}]> : tensor<{k}x2xi64>", "window_strides": ones}  # (precision: Builder.op)
    return ctx.op1("stablehlo.convolution", [lhs, rhs], shape, dtype, attrs)


#: Most slices an unrolled convolution (one dot_general over stacked windows) may take.
UNROLL_LIMIT = 64


def _conv_by_dot(ctx, lhs, rhs, padding, dtype):
    """The same correlation as one gather and one dot_general: the gather stacks either the
    lhs windows at each kernel offset or the lhs patches under each output position,
    whichever are fewer. XLA's CPU convolution has fast paths for
    float32 only; float64, complex and integer ones run a plain loop nest, several tens
    of times slower than this."""
    k = lhs.ndim - 2
    if any(lo or hi for lo, hi in padding):
        lhs = ctx.pad(lhs, ctx.scalar(0, dtype), [0, 0] + [lo for lo, _ in padding],
                      [0, 0] + [hi for _, hi in padding])
    ksz, isz = rhs.shape[2:], lhs.shape[2:]
    osz = tuple(i - w + 1 for i, w in zip(isz, ksz))
    b, f, o = lhs.shape[0], lhs.shape[1], rhs.shape[0]
    offsets = np.array(list(np.ndindex(*ksz)), np.int64).reshape(-1, k)
    positions = np.array(list(np.ndindex(*osz)), np.int64).reshape(-1, k)
    if len(offsets) <= len(positions):
        # channels last; one gather lays the windows at every kernel offset side by side:
        # (b, *osz, K, f) -> (b, *osz, K*f) @ (K*f, o)
        x = ctx.transpose(lhs, [0] + list(range(2, k + 2)) + [1])
        shape = (b,) + osz + (len(offsets), f)
        windows = ctx.gather(x, ctx.const(offsets), list(range(k + 1)) + [k + 2], [], list(range(1, k + 1)), 1,
                             (b,) + osz + (f,), shape)
        stacked = ctx.reshape(windows, (b,) + osz + (len(offsets) * f,))
        kern = ctx.reshape(ctx.transpose(rhs, list(range(2, k + 2)) + [1, 0]), (len(offsets) * f, o))
        out = ctx.dot_general(stacked, kern, ([k + 1], [0]))                 # (b, *osz, o)
        return ctx.transpose(out, [0, k + 1] + list(range(1, k + 1)))
    # few output positions (a filter gradient): the patch under each, (P, b, f*K) @ (f*K, o)
    kp = math.prod(ksz)
    shape = (len(positions), b, f) + ksz
    patches = ctx.gather(lhs, ctx.const(positions), list(range(1, k + 3)), [], list(range(2, k + 2)), 1,
                         (b, f) + ksz, shape)
    pk = ctx.reshape(patches, (len(positions), b, f * kp))
    kern = ctx.reshape(rhs, (o, f * kp))
    out = ctx.dot_general(pk, kern, ([2], [1]))                              # (P, b, o)
    out = ctx.reshape(out, osz + (b, o))
    return ctx.transpose(out, [k, k + 1] + list(range(k)))


def _use_dot(ctx, dtype, rhs, lhs, padding):
    if dtype == np.float32 or ctx.platform != "cpu":
        return False
    osz = [i + lo + hi - w + 1 for i, w, (lo, hi) in zip(lhs.shape[2:], rhs.shape[2:], padding)]
    return min(math.prod(rhs.shape[2:]), math.prod(osz)) <= UNROLL_LIMIT


def convolve(ctx, A, B, axes=None, dot_axes=[(), ()], mode="full"):  # noqa: B006 (autograd's signature)
    assert mode in ["valid", "full", "same"], f"Mode {mode} undefined, it can be one of 'valid', 'full', and 'same'"
    a, b = ctx.asvalue(A), ctx.asvalue(B)
    dtype = result_type(a, b)
    if dtype.kind == "b":
        raise NotImplementedError("autograd.scipy.signal.convolve of boolean arrays is not supported under jit_ps")
    a, b = ctx.astype(a, dtype), ctx.astype(b, dtype)
    if axes is None:
        axes = [list(range(a.ndim)), list(range(a.ndim))]
    conv_a, conv_b = [list(x) for x in axes]
    dot_a, dot_b = [list(x) for x in dot_axes]
    if len(conv_a) != len(conv_b) or len(dot_a) != len(dot_b):
        raise ValueError("convolve: axes and dot_axes must pair up axes of A and B")
    for i, j in zip(dot_a, dot_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError(f"convolve: dot axes of sizes {a.shape[i]} and {b.shape[j]} do not match")
    ign_a = [i for i in range(a.ndim) if i not in conv_a and i not in dot_a]
    ign_b = [i for i in range(b.ndim) if i not in conv_b and i not in dot_b]
    na, nb = [a.shape[i] for i in conv_a], [b.shape[i] for i in conv_b]
    if mode == "valid" and any(y < x for x, y in zip(na, nb)) and not all(y <= x for x, y in zip(na, nb)):
        raise Exception("One array must be larger than the other along all convolved dimensions")
    out_conv = [_conv_size(x, y, mode) for x, y in zip(na, nb)]
    out_shape = tuple(a.shape[i] for i in ign_a) + tuple(b.shape[i] for i in ign_b) + tuple(out_conv)
    if 0 in out_shape or 0 in a.shape or 0 in b.shape:
        return ctx.full(out_shape, 0, dtype)
    if not conv_a:
        # no convolution at all: a tensordot over the dot axes
        out = ctx.dot_general(a, b, (dot_a, dot_b))
        return out

    # the larger operand is the image (XLA's lhs); the other, reversed, is the kernel
    a_is_image = math.prod(na) >= math.prod(nb)
    img, ker = (a, b) if a_is_image else (b, a)
    img_conv, ker_conv = (conv_a, conv_b) if a_is_image else (conv_b, conv_a)
    img_dot, ker_dot = (dot_a, dot_b) if a_is_image else (dot_b, dot_a)
    img_ign, ker_ign = (ign_a, ign_b) if a_is_image else (ign_b, ign_a)

    padding, crop_lo, crop_hi = [], [], []
    for x, y, length in zip(na, nb, out_conv):
        n, m = (x, y) if a_is_image else (y, x)
        start = _window_start(x, y, mode)
        lo, hi = m - 1 - start, length + start - n
        crop_lo.append(max(0, -lo))
        crop_hi.append(max(0, -hi))
        padding.append((max(0, lo), max(0, hi)))
    lhs = _canonical(ctx, img, img_ign, img_dot, img_conv)
    if any(crop_lo) or any(crop_hi):
        lhs = ctx.slice(lhs, [0, 0] + crop_lo, [lhs.shape[0], lhs.shape[1]] +
                        [d - c for d, c in zip(lhs.shape[2:], crop_hi)])
    rhs = _canonical(ctx, ker, ker_ign, ker_dot, ker_conv)
    rhs = ctx.reverse(rhs, list(range(2, rhs.ndim)))
    if _use_dot(ctx, dtype, rhs, lhs, padding):
        out = _conv_by_dot(ctx, lhs, rhs, padding, dtype)
    else:
        out = _convolution(ctx, lhs, rhs, padding, dtype)
    img_ign_shape = tuple(img.shape[i] for i in img_ign)
    ker_ign_shape = tuple(ker.shape[i] for i in ker_ign)
    out = ctx.reshape(out, img_ign_shape + ker_ign_shape + tuple(out_conv))
    if not a_is_image:
        ni, nk = len(img_ign_shape), len(ker_ign_shape)
        out = ctx.transpose(out, list(range(ni, ni + nk)) + list(range(ni)) + list(range(ni + nk, out.ndim)))
    return out


@when_imported("autograd.scipy.signal")
def _register(signal):
    """Once autograd.scipy.signal is imported (which imports all of autograd.scipy and with it
    scipy.stats and scipy.integrate: slow)."""
    lowers(signal.convolve)(convolve)
