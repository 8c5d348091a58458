"""Reductions, scans, sorting and differences under jit_ps, against numpy/autograd."""
import re
import warnings

import autograd.numpy as np
import numpy as onp
import pytest

pytestmark = pytest.mark.filterwarnings("error:.*runs as plain autograd")

from helpers import assert_close  # noqa: E402
from numpy_checks import (C64, C128, F32, F64, FLOATS, check, check_exact, check_family, check_jvp,  # noqa: E402
                          check_value, rand)

from autograd_xla import jit_ps  # noqa: E402

X = rand((3, 4, 2), F64, -2, 2)

# (name, function of x): each family checks values, gradient and JVP of all at once
REDUCTIONS = {
    "sum": lambda x: np.sum(x),
    "sum_ax1": lambda x: np.sum(x, axis=1),
    "sum_axes_keep": lambda x: np.sum(x, axis=(0, 2), keepdims=True),
    "sum_neg": lambda x: x.sum(-1),
    "mean": lambda x: np.mean(x),
    "mean_ax": lambda x: np.mean(x, axis=(1, 2)),
    "mean_keep": lambda x: np.mean(x, axis=0, keepdims=True),
    "prod": lambda x: np.prod(x, axis=1),
    "prod_all": lambda x: np.prod(x[0]),
    "prod_keep": lambda x: np.prod(x, axis=2, keepdims=True),
    "max": lambda x: np.max(x),
    "max_ax": lambda x: np.max(x, axis=1),
    "min_keep": lambda x: np.min(x, axis=(0, 2), keepdims=True),
    "amax": lambda x: np.amax(x, axis=0),
    "amin": lambda x: np.amin(x, axis=-1),
    "var": lambda x: np.var(x),
    "var_ax": lambda x: np.var(x, axis=1),
    "var_ddof": lambda x: np.var(x, axis=0, ddof=1),
    "var_keep": lambda x: np.var(x, axis=2, keepdims=True),
    "std": lambda x: np.std(x),
    "std_ax": lambda x: np.std(x, axis=1, ddof=1),
    "std_keep": lambda x: np.std(x, axis=0, keepdims=True),
    "cumsum": lambda x: np.cumsum(x),
    "cumsum_ax": lambda x: np.cumsum(x, axis=1),
}
NO_JVP = ["cumsum"]  # autograd's JVP of cumsum with axis=None is its VJP formula: shape-only


@pytest.mark.parametrize("dtype", FLOATS)
def test_reductions_family(dtype):
    x = X.astype(dtype)
    fns = {k: f for k, f in REDUCTIONS.items()}
    inputs = {k: (x,) for k in fns}
    check_family(fns, inputs)


def test_reduction_shapes():
    """0-d, size-1 and empty inputs."""
    fns = {"sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min, "var": np.var,
           "std": np.std, "cumsum": np.cumsum}
    for x in (onp.array(1.5), onp.array([2.5]), rand((1, 1, 3), F64, 0.5, 2)):
        check_family({k: f for k, f in fns.items()}, {k: (x,) for k in fns}, jvp=False)
    e = onp.zeros((0, 3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_value(lambda e: (np.sum(e), np.sum(e, axis=0), np.prod(e, axis=1), np.mean(e, axis=0), np.mean(e),
                               np.var(e, axis=0), np.cumsum(e), np.any(e), np.all(e, axis=0),
                               np.max(e, axis=1), np.min(e, axis=0, initial=3.0), np.cumprod(e, axis=1)), e)
        check(lambda e: np.sum(e, axis=0) + np.sum(np.max(e, axis=1)) + np.mean(e, axis=0), e)


def test_reduction_options():
    x = rand((3, 4), F64, -2, 2)
    i = rand((3, 4), onp.int32, -5, 5)
    b = rand((3, 4), onp.bool_)
    check_value(lambda x: (np.sum(x, dtype=F32), np.mean(x, dtype=F32), np.sum(x, initial=2.0),
                           np.max(x, initial=5.0), np.min(x, axis=0, initial=-5.0), np.prod(x, dtype=F32),
                           np.var(x, ddof=2, axis=1), np.std(x, correction=1), np.ptp(x, axis=0),
                           np.cumsum(x, axis=0, dtype=F32)), x)
    check_exact(lambda i, b: (np.sum(i), np.sum(i, axis=0), np.prod(i, axis=1), np.max(i), np.min(i, axis=1),
                              np.sum(b), np.sum(b, axis=1), np.any(i), np.all(i, axis=0), np.any(b, axis=1),
                              np.all(b), np.cumsum(i, axis=1), np.cumprod(i, axis=0), np.cumsum(b),
                              np.max(b), np.argmax(i, axis=0), np.argmin(b, axis=1), np.count_nonzero(i, axis=0),
                              np.ptp(i), onp.add.reduce(i, axis=1), onp.maximum.reduce(i), onp.add.accumulate(i),
                              onp.logical_or.reduce(b, axis=0), onp.multiply.accumulate(i, axis=1)), i, b)
    check_value(lambda i, b: (np.mean(i), np.var(i, axis=0), np.std(b), np.mean(b, axis=1)), i, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_value(lambda x: (np.var(x[:2], ddof=2, axis=0), np.std(x[:1], ddof=1, axis=0),
                               np.var(onp.ones(3) + 0 * x[0, :3], ddof=3)), x)


@pytest.mark.parametrize("dtype", [C128, C64])
def test_complex_reductions(dtype):
    x = rand((3, 4), dtype, -2, 2)
    fns = {"sum": lambda x: np.sum(x, axis=0), "mean": np.mean, "prod": lambda x: np.prod(x, axis=1),
           "var": lambda x: np.var(x, axis=1), "std": np.std, "cumsum": lambda x: np.cumsum(x, axis=1)}
    check_family(fns, {k: (x,) for k in fns}, grad_rtol=1e-10 if dtype == C128 else 1e-4)
    x[0, 0] = x[1, 1]
    x[2, 2] = complex(x[2, 2].real, onp.nan)
    check_value(lambda x: (np.max(x), np.min(x, axis=0), np.max(x[:2], axis=1), np.argmax(x, axis=1),
                           np.argmin(x[:2]), np.argmax(x, axis=0), np.ptp(x[:2], axis=1)), x)


def test_nan_propagation():
    x = onp.array([[1.0, onp.nan, 3.0], [onp.inf, -1.0, 2.0], [-onp.inf, onp.nan, onp.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        check_value(lambda x: (np.max(x), np.max(x, axis=0), np.min(x, axis=1), np.argmax(x, axis=0),
                               np.argmin(x, axis=1), np.argmax(x), np.argmin(x), np.sum(x, axis=1),
                               np.cumsum(x, axis=1), np.prod(x, axis=0), np.mean(x, axis=1), np.ptp(x, axis=1),
                               np.nansum(x, axis=0), np.nanmax(x, axis=1), np.nanmin(x), np.nanmean(x, axis=0),
                               np.nanargmax(x, axis=1), np.nanargmin(x, axis=0), np.nanprod(x), np.nancumsum(x),
                               np.nanvar(x, axis=1), np.nanstd(x, ddof=1), np.sort(x, axis=1),
                               np.argsort(x, axis=0)), x)
    check_value(lambda x: (np.argmax(x), np.argmin(x), np.max(x)), onp.array([2.0, 5.0, 5.0, 1.0, 1.0]))
    check_value(lambda x: (np.argmax(x, axis=1, keepdims=True), np.argmin(x, keepdims=True)), X[:, :, 0])


def test_argmax_ties_and_ints():
    x = onp.array([[1, 3, 3], [2, 2, 0], [-1, -1, -1]], onp.int64)
    check_exact(lambda x: (np.argmax(x, axis=1), np.argmin(x, axis=1), np.argmax(x), x.argmin(axis=0)), x)


def test_cumsum_long_axis():
    x = rand((3, 5000), F64, -1, 1)
    check(lambda x: np.cumsum(x, axis=1), x, rtol=1e-10)  # tree summation order differs from numpy's
    check_value(lambda x: np.cumsum(x[0].astype(F32)), x, rtol=1e-4)
    check_value(lambda x: (np.cumprod(1 + x[:, :40] * 1e-3, axis=1), np.cumsum(x > 0, axis=1)), x)


def test_cumsum_cumprod():
    x = rand((3, 4), F64, 0.5, 1.5)
    check(lambda x: np.cumsum(x, axis=0) + np.cumsum(x, axis=-1), x)
    check(lambda x: np.cumsum(x[0]), x)
    check_jvp(lambda x: np.cumsum(x, axis=1), x)
    check_value(lambda x: (np.cumprod(x), np.cumprod(x, axis=1), np.cumulative_sum(x, axis=0),
                           np.cumulative_prod(x[0], include_initial=True),
                           np.cumulative_sum(x, axis=1, include_initial=True)), x)
    check(lambda x: np.cumsum(x.astype(F32), axis=1), x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_sort_family(dtype):
    x = rand((7,), dtype, -3, 3)
    fns = {"sort": np.sort, "sort_rev": lambda x: np.sort(x)[::-1] * x,
           "partition": lambda x: np.sum(np.partition(x, 3)[:3] ** 2),
           "partition_k": lambda x: np.partition(x, 4)[4]}
    check_family(fns, {k: (x,) for k in fns})


def test_sort_values():
    x = onp.array([[3.0, onp.nan, -onp.inf, 1.0], [onp.nan, -0.0, 0.0, 2.0], [5.0, 4.0, 4.0, -1.0]])
    i = rand((4, 5), onp.int32, -3, 3)
    check_value(lambda x: (np.sort(x), np.sort(x, axis=0), np.sort(x, axis=None), np.argsort(x, axis=1),
                           np.argsort(x, axis=None), x.argsort(axis=0), np.partition(x, 2, axis=1)[:, 2],
                           np.sort(x.astype(F32), axis=1)), x)
    check_exact(lambda i: (np.sort(i), np.argsort(i, axis=0), np.sort(i > 0), np.argsort(i, kind="stable"),
                           np.argpartition(i[0], 2)[2:3] * 0 + np.sort(i[0])[2]), i)
    c = onp.array([1 + 2j, 1 - 1j, onp.nan + 0j, 0 + 5j, 1 + 0j])
    check_value(lambda c: (np.sort(c), np.argsort(c)), c)
    e = onp.zeros((0, 3))
    check_value(lambda e: (np.sort(e), np.argsort(e, axis=0), np.sort(e[:, :1], axis=0)), e)


def test_sort_keywords_as_this_numpy_takes_them():
    """numpy 2.5's descending sorts (NaN last; argsort's ties in their order, as with
    stable=True) compile; where numpy has no such keyword (before 2.5) the call raises its
    TypeError, and a kind beside stable or descending numpy's ValueError, compiled or not."""
    x = onp.array([[3.0, onp.nan, -onp.inf, 1.0, 3.0], [onp.nan, -0.0, 0.0, 2.0, 2.0], [5.0, 4.0, 4.0, -1.0, 4.0]])
    i = onp.array([5, 3, 5, 1, 3, 5, 1], onp.int16)
    cases = [(lambda x: (np.sort(x, descending=True), np.sort(x, axis=0, descending=True),
                         np.argsort(x, descending=True, stable=True), np.argsort(x, axis=None, descending=True,
                                                                                 stable=True),
                         np.sort(x, descending=False)), x),
             (lambda i: (np.sort(i, descending=True), np.argsort(i, descending=True, stable=True),
                         np.sort(i > 2, descending=True)), i),
             (lambda x: np.sort(x, kind="stable", stable=True), x)]
    for f, a in cases:
        try:
            expected = f(a)
        except (TypeError, ValueError) as e:
            with pytest.raises(type(e), match=re.escape(str(e))):
                jit_ps(f, fallback="error")(a)
        else:
            assert_close(jit_ps(f, fallback="error")(a), expected, check_dtype=True)


def test_sort_2d_value_and_jvp():
    x = rand((3, 4), F64, -2, 2)
    check_value(lambda x: (np.sort(x, axis=0), np.sort(x)), x)
    check_jvp(lambda x: np.sort(x), x[0])


@pytest.mark.parametrize("dtype", FLOATS)
def test_diff_gradient_family(dtype):
    x = rand((4, 5), dtype, -2, 2)
    fns = {"diff": np.diff, "diff_ax0": lambda x: np.diff(x, axis=0), "diff2": lambda x: np.diff(x, n=2),
           "diff3_ax0": lambda x: np.diff(x, 3, axis=0), "gradient": lambda x: np.gradient(x[0]),
           "gradient_ax": lambda x: np.gradient(x, axis=1), "gradient_ax0": lambda x: np.gradient(x, axis=0)}
    check_family(fns, {k: (x,) for k in fns})


def test_diff_gradient_values():
    x = rand((4, 5), F64, -2, 2)
    i = rand((6,), onp.int64, -5, 5)
    check_value(lambda x: (np.diff(x, prepend=0.0), np.diff(x, axis=0, append=x[:1]), np.diff(x, n=0),
                           np.diff(x[0] > 0), np.gradient(x), np.gradient(x, 2.0), np.gradient(x, 0.5, 2.0),
                           np.gradient(x, edge_order=2), np.gradient(x[:, 0], 0.3, edge_order=2),
                           np.diff(x, n=6, axis=0)), x)
    check_exact(lambda i: np.diff(i, 2), i)
    check_value(lambda i: np.gradient(i), i)


def test_nan_functions():
    x = rand((3, 4), F64, -2, 2)
    x[0, 1] = x[2, 3] = onp.nan
    check_value(lambda x: (np.nansum(x), np.nansum(x, axis=0), np.nanmean(x, axis=1), np.nanmax(x, axis=0),
                           np.nanmin(x, axis=1, keepdims=True), np.nanprod(x, axis=1), np.nancumsum(x, axis=1),
                           np.nancumprod(x, axis=0), np.nanvar(x, axis=0), np.nanstd(x, axis=1, ddof=1),
                           np.nanargmax(x, axis=0), np.nanargmin(x)), x)
