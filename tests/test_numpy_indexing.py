"""Indexing under jit_ps: basic and advanced reads (static and traced indices), their
gradients (np.add.at scatters), item assignment on traced arrays, take and friends."""
import autograd.numpy as np
import numpy as onp
import pytest

pytestmark = pytest.mark.filterwarnings("error:.*runs as plain autograd")

from numpy_checks import (C128, F32, F64, FLOATS, check, check_exact, check_family, check_jvp,  # noqa: E402
                          check_value, jit_ps, rand)

X = rand((4, 5, 3), F64)
MASK = onp.array([True, False, True, True, False])
MASK2 = rand((4, 5), onp.bool_, seed=3)

READS = {
    "int": lambda x: x[1],
    "neg_int": lambda x: x[-1, -2],
    "scalar": lambda x: x[1, 2, 0],
    "slice": lambda x: x[1:3],
    "slice_step": lambda x: x[::2, 1::2],
    "neg_step": lambda x: x[::-1],
    "neg_step2": lambda x: x[3:0:-2, ::-3],
    "neg_step_bounds": lambda x: x[-1:-5:-1, -2::-2, :-4:-1],
    "empty_slice": lambda x: x[2:2],
    "empty_neg": lambda x: x[1:3:-1],
    "none": lambda x: x[None, 1, :, None],
    "ellipsis": lambda x: x[..., 1],
    "ellipsis_mid": lambda x: x[0, ..., None, 1:],
    "int_array": lambda x: x[onp.array([0, 2, 3])],
    "int_array_dup": lambda x: x[onp.array([1, 1, -1, 0, 1])],
    "list_index": lambda x: x[[0, 2]],
    "int_array_2d": lambda x: x[onp.array([[0, 1], [3, 3]])],
    "array_then_slice": lambda x: x[onp.array([2, 0]), 1:4],
    "slice_then_array": lambda x: x[:, onp.array([4, 0, 4])],
    "adjacent_arrays": lambda x: x[onp.array([0, 1]), onp.array([2, 4])],
    "split_arrays": lambda x: x[onp.array([0, 3]), :, onp.array([2, 0])],
    "broadcast_arrays": lambda x: x[onp.array([[0], [3]]), onp.array([1, 2, 3])],
    "array_and_int": lambda x: x[1, onp.array([0, 0, 2]), 2],
    "array_int_split": lambda x: x[onp.array([1, 2]), 0, :],
    "bool_mask": lambda x: x[:, MASK],
    "bool_mask_2d": lambda x: x[MASK2],
    "bool_mask_first": lambda x: x[onp.array([True, False, False, True])],
    "mixed": lambda x: x[None, 1:, onp.array([0, 0]), ::-1],
    "empty_list": lambda x: x[[]],
    "all_false_mask": lambda x: x[:, onp.zeros(5, bool)],
    "true": lambda x: x[True, 1],
    "out_of_range_slice": lambda x: x[-100:100, 3:-100:-1],
    "iter": lambda x: sum(row for row in x),
}


@pytest.mark.parametrize("dtype", FLOATS)
def test_read_family(dtype):
    x = X.astype(dtype)
    check_family(READS, {k: (x,) for k in READS})


def test_read_complex_and_int():
    x = rand((4, 5, 3), C128)
    names = ["neg_step2", "int_array_dup", "split_arrays", "bool_mask_2d", "ellipsis_mid"]
    check_family({k: READS[k] for k in names}, {k: (x,) for k in names})
    i = rand((4, 5, 3), onp.int32, -9, 9)
    check_exact(lambda i: tuple(READS[k](i) for k in READS if k != "iter"), i)


def test_zero_d_and_size_one():
    z, one = onp.array(2.5), onp.array([1.5])
    check(lambda z: z[()] * 2 + z[None] + z[...] + z[None, None][0], z)
    check(lambda one: one[0] + one[-1:] + one[::-1] + one[onp.array([0, 0])] + one[onp.array([True])], one)
    check_value(lambda z: (z[()], z[...], z[None], z[onp.array(True)]) if False else (z[()], z[...], z[None]), z)


def test_traced_integer_indices():
    x = X
    i = onp.array([3, 0, -1, 0])
    j = onp.array([[1, 4], [0, 2]], onp.int32)
    check(lambda x, i: x[i], x, i)
    check(lambda x, i: x[i, 2], x, i)
    check(lambda x, i: x[1:, i[:2] % 3, ::-1], x, i)
    check(lambda x, i, j: x[i[:2], j], x, i, j)
    check(lambda x, i, j: x[i[:2], :, j[0] % 3], x, i, j)
    check(lambda x, j: x[:, j], x, j)
    check(lambda x, i: x[:, :, i % 3], x, i)
    check_value(lambda x, i: np.take(x, i % 3, axis=2), x, i)
    check_jvp(lambda x, i: x[i] * 2, x, i)


def test_traced_scalar_indices():
    x = X
    check(lambda x, k: x[k], x, onp.int64(2))
    check(lambda x, k: x[k, -1], x, onp.int32(-3))
    check(lambda x, k: x[1, k] + x[-k], x, 1)  # a Python int argument
    check(lambda x, k: x[k, 1:, k], x, onp.int64(1))
    check(lambda x, k: x[k] * 2, x.astype(F32), onp.int64(3))


def test_out_of_range_static_index_raises():
    from autograd_xla import JitError
    for f in (lambda x: x[4], lambda x: x[:, onp.array([5])], lambda x: x[1, 2, 3, 4]):
        with pytest.raises((IndexError, JitError)):
            jit_ps(f, fallback="error")(X)


def test_scatter_add_duplicates():
    """The gradient of a gather with repeated indices sums the repeated cotangents."""
    x = rand((6,), F64)
    idx = onp.array([0, 1, 1, 1, 5, -1, 2])
    check(lambda x: x[idx] * onp.arange(7.0), x)
    check(lambda x, i: x[i] * onp.arange(7.0), x, idx)

    def add_at(i):
        def f(a, v):
            b = a * 1.0
            onp.add.at(b, i, v)
            return b
        return f
    check_value(lambda a, v, i: add_at(i)(a, v), x, onp.arange(7.0), idx)  # traced indices
    check_value(add_at(idx), x, onp.arange(7.0))
    check_value(add_at((onp.array([0, 0, 3]), onp.array([1, 1, 2]))), rand((4, 3)), onp.ones(3))
    check_value(add_at((slice(None), onp.array([2, 2]))), rand((4, 3)), onp.ones((4, 2)))
    check_value(add_at(onp.array([1, 1])), rand((4, 3)), 2.0)
    check_value(add_at((slice(1, None, 2), 1)), rand((4, 3)), onp.array([5.0, 7.0]))
    check_value(add_at((slice(None, None, -1), onp.array([0, 0]))), rand((4, 3)), onp.ones((4, 2)))

    def other_at(a, i, v):
        b = a * 1.0
        onp.maximum.at(b, i, v)
        onp.multiply.at(b, i, 2.0)
        return b
    check_value(other_at, x, idx, onp.arange(7.0) - 3)


def test_setitem():
    x = rand((4, 5), F64)

    def assign(x, v, idx):
        y = x * 1.0
        y[idx] = v
        return y
    cases = [
        (1, 7.0), (-1, onp.arange(5.0)), ((slice(1, 3), slice(None, None, 2)), onp.ones((2, 3))),
        ((slice(None, None, -2), 0), onp.array([1.0, 2.0])), ((slice(3, 0, -1), slice(-1, 1, -2)), 3.0),
        (onp.array([3, 0]), onp.zeros(5)), ((onp.array([0, 2]), onp.array([4, 1])), onp.array([8.0, 9.0])),
        (MASK2, 5.0), ((slice(None), MASK), onp.arange(3.0)), ((None, 2, Ellipsis), onp.arange(5.0)),
        ((Ellipsis, -2), onp.arange(4.0)), ((slice(None), onp.array([-1, 0])), onp.ones((4, 1))),
    ]
    for idx, v in cases:
        check_value(lambda x, v: assign(x, v, idx), x, v)
    check_value(lambda x, v, i: assign(x, v, i), x, 3.0, onp.array([3, 1]))
    check_value(lambda x, v, i: assign(x, v, (1, i)), x, onp.array([1.0, 2.0]), onp.array([4, -5]))
    check_value(lambda x, v, k: assign(x, v, k), x, onp.arange(5.0), onp.int64(-2))
    check_value(lambda x: assign(x, x[0] * 2, 3), x)
    check_value(lambda x: assign(x.astype(F32), 2.5, (slice(1, 3), 0)), x)
    check_exact(lambda i: assign(i, 7, (0, slice(None, None, 2))), rand((3, 4), onp.int32, -5, 5))

    def aug(x):
        y = x * 1.0
        y[1:3] += 1.0
        y[:, 0] *= 2.0
        return y
    check_value(aug, x)


def test_take_along_axis_and_friends():
    x = rand((3, 4), F64)
    i = onp.array([[0, 3], [1, 1], [2, 0]])
    check_value(lambda x: (np.take_along_axis(x, i, axis=1), np.take(x, onp.array([[0, 1], [2, 2]]), axis=0),
                           np.take(x, onp.array([7, -1, 13]), mode="wrap"),
                           np.take(x, onp.array([7, -1, 2]), axis=1, mode="clip"),
                           np.take(x, 2), np.take(x, 1, axis=1)), x)
    check_value(lambda x, i: np.take_along_axis(x, i, axis=1), x, i)
    check_value(lambda x: np.take_along_axis(x, np.argsort(x, axis=0), axis=0), x)
