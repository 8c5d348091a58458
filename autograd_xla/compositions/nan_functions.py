"""numpy's NaN-ignoring reductions (nansum, nanprod, nancumsum, nancumprod, nanmean,
nanvar, nanstd, nanmax, nanmin, nanargmax, nanargmin) as compositions: np.where masks the
NaNs with the reduction's identity (or counts the valid entries), then the plain
reduction, whose translation rule is in rules/reductions.py. numpy's own implementations
cannot run on traced values: they make an array of the operand (`np.asanyarray` in
`_replace_nan`) and write the fill into it by mask.
"""
import numpy as np

from ..registry import traces


def _nan_masked(fill):
    def masked(a):
        return np.where(np.isnan(a), fill, a) if a.dtype.kind in "fc" else a
    return masked


def _nan_reduction(reduce_fn, fill):
    def impl(a, axis=None, *args, **kwargs):
        return reduce_fn(_nan_masked(fill)(a), axis, *args, **kwargs)
    return impl


traces(np.nansum)(_nan_reduction(np.sum, 0))
traces(np.nanprod)(_nan_reduction(np.prod, 1))
traces(np.nancumsum)(_nan_reduction(np.cumsum, 0))
traces(np.nancumprod)(_nan_reduction(np.cumprod, 1))


@traces(np.nanmean)
def _nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=np._NoValue):
    if out is not None or where is not np._NoValue:
        raise NotImplementedError("nanmean out=/where= are not supported under jit_ps")
    if a.dtype.kind not in "fc":
        return np.mean(a, axis=axis, dtype=dtype, keepdims=keepdims)
    valid = ~np.isnan(a)
    total = np.sum(np.where(valid, a, 0), axis=axis, dtype=dtype, keepdims=keepdims)
    count = np.sum(valid, axis=axis, keepdims=keepdims)
    return total / count.astype(total.dtype if total.dtype.kind != "c" else total.real.dtype)


def _nan_variance(is_std):
    def impl(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=np._NoValue,
             mean=np._NoValue, correction=np._NoValue):
        if out is not None or where is not np._NoValue or mean is not np._NoValue:
            raise NotImplementedError("nanvar/nanstd out=/where=/mean= are not supported under jit_ps")
        ddof = ddof if correction is np._NoValue else correction
        if a.dtype.kind not in "fc":
            return (np.std if is_std else np.var)(a, axis=axis, dtype=dtype, ddof=ddof, keepdims=keepdims)
        valid = ~np.isnan(a)
        centered = np.where(valid, a - _nanmean(a, axis=axis, dtype=dtype, keepdims=True), 0)
        sq = np.real(centered * np.conj(centered)) if a.dtype.kind == "c" else centered * centered
        total = np.sum(sq, axis=axis, keepdims=keepdims)
        dof = np.sum(valid, axis=axis, keepdims=keepdims) - ddof
        var = np.where(dof > 0, total / np.maximum(dof, 0).astype(total.dtype), np.nan)
        return np.sqrt(var) if is_std else var
    return impl


traces(np.nanvar)(_nan_variance(False))
traces(np.nanstd)(_nan_variance(True))


def _nan_extremum(fn, fill):
    def impl(a, axis=None, out=None, keepdims=False, initial=np._NoValue, where=np._NoValue):
        if a.dtype.kind not in "f":
            return fn(a, axis=axis, keepdims=keepdims)
        red = fn(np.where(np.isnan(a), fill, a), axis=axis, keepdims=keepdims)
        all_nan = np.all(np.isnan(a), axis=axis, keepdims=keepdims)
        return np.where(all_nan, np.nan, red)
    return impl


traces(np.nanmax)(_nan_extremum(np.max, -np.inf))
traces(np.nanmin)(_nan_extremum(np.min, np.inf))


def _nan_arg(fn, fill):
    def impl(a, axis=None, out=None, *, keepdims=False):
        if a.dtype.kind not in "f":
            return fn(a, axis=axis, keepdims=keepdims)
        return fn(np.where(np.isnan(a), fill, a), axis=axis, keepdims=keepdims)
    return impl


traces(np.nanargmax)(_nan_arg(np.argmax, -np.inf))
traces(np.nanargmin)(_nan_arg(np.argmin, np.inf))
