"""Shape and layout functions under jit_ps: reshape, transposes, joins and splits,
repeats, flips and rolls, padding, triangles and diagonals, dtype casts, creation."""
import autograd.numpy as np
import numpy as onp
import pytest

pytestmark = pytest.mark.filterwarnings("error:.*runs as plain autograd")

from numpy_checks import (C128, F32, F64, FLOATS, check, check_exact, check_family, check_jvp,  # noqa: E402
                          check_value, rand)

A = rand((2, 3, 4), F64)

LAYOUT = {
    "reshape": lambda x: np.reshape(x, (6, 4)),
    "reshape_m1": lambda x: np.reshape(x, (-1, 2)),
    "reshape_F": lambda x: np.reshape(x, (4, 6), order="F"),
    "method_reshape": lambda x: x.reshape(3, 8),
    "ravel": lambda x: np.ravel(x),
    "ravel_F": lambda x: np.ravel(x, order="F"),
    "transpose": lambda x: np.transpose(x),
    "transpose_axes": lambda x: np.transpose(x, (1, 2, 0)),
    "T": lambda x: x.T,
    "swapaxes": lambda x: np.swapaxes(x, 0, 2),
    "moveaxis": lambda x: np.moveaxis(x, 0, -1),
    "moveaxis_multi": lambda x: np.moveaxis(x, [0, 1], [2, 0]),
    "rollaxis": lambda x: np.rollaxis(x, 2),
    "expand_dims": lambda x: np.expand_dims(x, 1),
    "expand_dims_neg": lambda x: np.expand_dims(x, -1),
    "squeeze": lambda x: np.squeeze(x[:, :1]),
    "squeeze_axis": lambda x: np.squeeze(x[:1], axis=0),
    "broadcast_to": lambda x: np.broadcast_to(x[:, :1], (2, 5, 4)),
    "atleast_1d": lambda x: np.atleast_1d(x[0, 0, 0]),
    "atleast_2d": lambda x: np.atleast_2d(x[0, 0]),
    "atleast_3d": lambda x: np.atleast_3d(x[0]),
    "atleast_3d_1d": lambda x: np.atleast_3d(x[0, 0]),
    "flipud": lambda x: np.flipud(x),
    "fliplr": lambda x: np.fliplr(x),
    "rot90": lambda x: np.rot90(x),
    "rot90_k": lambda x: np.rot90(x[0], 3),
    "roll": lambda x: np.roll(x, 2),
    "roll_axis": lambda x: np.roll(x, -1, axis=1),
    "tril": lambda x: np.tril(x[0]),
    "triu_k": lambda x: np.triu(x[1], 1),
    "tril_batch": lambda x: np.tril(x, -1),
    "diag_extract": lambda x: np.diag(x[0, :, :3]),  # autograd's VJP of diag assumes a square matrix
    "diag_extract_k": lambda x: np.diag(x[0, :, 1:], 1),
    "diag_build": lambda x: np.diag(x[0, 0]),
    "diag_build_k": lambda x: np.diag(x[0, 0], -2),
    "diagonal": lambda x: np.diagonal(x[0, :, :3], 0, -1, -2),  # the only axes autograd's VJP takes
    "diagonal_batch": lambda x: np.diagonal(x[:, :, :3], 0, -1, -2),  # autograd: square only
    "trace": lambda x: np.trace(x[0]),
    "trace_k": lambda x: np.trace(x[1], 1),
    "repeat": lambda x: np.repeat(x, 2),
    "repeat_axis": lambda x: np.repeat(x, 3, axis=1),
    "repeat_axis1": lambda x: np.repeat(x[:, :1], 2, axis=1),
    "tile": lambda x: np.tile(x[0, 0], 3),
    "tile_2d": lambda x: np.tile(x[0], (2, 1)),
    "pad": lambda x: np.pad(x, 1, "constant"),
    "pad_widths": lambda x: np.pad(x, ((0, 1), (2, 0), (1, 1)), "constant"),
    "astype": lambda x: x.astype(F32) * 2.0,
    "astype_fn": lambda x: np.astype(x, F64) + 1,
    "concatenate": lambda x: np.concatenate([x, 2 * x], axis=1),
    "concatenate_neg": lambda x: np.concatenate((x[0], x[1], x[0]), axis=-1),
    "stack": lambda x: np.stack([x[0], x[1]], axis=1),
    "stack_last": lambda x: np.stack([x[0, 0], x[1, 1], x[0, 2]], axis=-1),
    "hstack": lambda x: np.hstack([x[0], x[1]]),
    "vstack": lambda x: np.vstack([x[0], x[1, 0]]),
    "column_stack": lambda x: np.column_stack([x[0, 0], x[1, 1]]),
    "append": lambda x: np.append(x[0], x[1]),
    "array": lambda x: np.array([x[0, 0], x[1, 1]]),
    "array_scalars": lambda x: np.array([x[0, 0, 0], x[1, 1, 1], 2.0]),
    "full": lambda x: np.full((2, 3), x[0, 0, 0]),
    "kron": lambda x: np.kron(x[0], x[1, :2, :2]),
    "kron_1d": lambda x: np.kron(x[0, 0], x[1, 1]),
}
NO_JVP = ["astype", "astype_fn"]  # autograd defines no JVP for astype


@pytest.mark.parametrize("dtype", FLOATS)
def test_layout_family(dtype):
    x = A.astype(dtype)
    check_family(LAYOUT, {k: (x,) for k in LAYOUT}, exclude_jvp=NO_JVP)


def test_layout_complex():
    x = rand((2, 3, 4), C128)
    names = ["reshape_F", "transpose_axes", "moveaxis", "flipud", "rot90", "roll", "tril", "diag_extract_k",
             "diag_build", "trace", "repeat", "tile_2d", "pad", "concatenate", "stack", "kron", "diagonal_batch"]
    check_family({k: LAYOUT[k] for k in names}, {k: (x,) for k in names})


SPLITS = {
    "split": lambda x: np.split(x, 2, axis=0),
    "split_idx": lambda x: np.split(x, [1, 3], axis=2),
    "array_split": lambda x: np.array_split(x, 3, axis=2),
    "hsplit": lambda x: np.hsplit(x, 3),
    "vsplit": lambda x: np.vsplit(x, 2),
    "dsplit": lambda x: np.dsplit(x, [1]),
    "split_concat": lambda x: np.concatenate(np.split(x, 4, axis=2)[::-1], axis=2),
}


@pytest.mark.parametrize("dtype", FLOATS)
def test_split_family(dtype):
    x = A.astype(dtype)
    check_family(SPLITS, {k: (x,) for k in SPLITS})


def test_shape_edge_cases():
    z, one, e = onp.array(1.5), onp.array([2.0]), onp.zeros((0, 3))
    fns = {
        "reshape0": lambda z, one, e: np.reshape(z, (1, 1)) * np.reshape(one, ()) + np.reshape(e, (3, 0)).sum(),
        "ravel": lambda z, one, e: (np.ravel(z), np.ravel(e)),
        "transpose": lambda z, one, e: (np.transpose(z), np.transpose(e)),
        "expand": lambda z, one, e: (np.expand_dims(z, 0), np.expand_dims(e, 0)),
        "squeeze": lambda z, one, e: (np.squeeze(one), np.squeeze(z)),
        "broadcast": lambda z, one, e: (np.broadcast_to(np.reshape(z, (1, 1)), (2, 2)), np.broadcast_to(one, (3,))),
        "concat": lambda z, one, e: (np.concatenate([e, e], 0), np.concatenate([one, one, one])),
        "atleast": lambda z, one, e: (np.atleast_1d(z), np.atleast_2d(one), np.atleast_3d(z)),
        "repeat": lambda z, one, e: (np.repeat(one, 2), np.repeat(e, 2, axis=1)),
        "tile": lambda z, one, e: (np.tile(z, 2), np.tile(e, (1, 2))),
        "pad": lambda z, one, e: (np.pad(one, 2, "constant"), np.pad(e, 1, "constant")),
        "roll": lambda z, one, e: (np.roll(one, 1), np.roll(e, 1, axis=1)),
        "flip": lambda z, one, e: (np.flipud(one), np.flipud(e)),
        "diag": lambda z, one, e: (np.diag(one), np.diag(np.reshape(one, (1, 1)))),
        "stack": lambda z, one, e: (np.stack([z, z]), np.stack([e, e], axis=2)),
    }
    inputs = {k: (z, one, e) for k in fns}
    check_family(fns, inputs, jvp=False)
    check_value(lambda z: (np.repeat(z, 3), np.diag(np.reshape(z, (1,)))), z)  # autograd's VJP: not 0-d
    check_family({k: fns[k] for k in ["transpose", "expand", "squeeze", "broadcast", "concat", "roll", "flip"]},
                 {k: (z, one, e) for k in ["transpose", "expand", "squeeze", "broadcast", "concat", "roll", "flip"]},
                 grad=False)


def test_pad_modes():
    x = rand((3, 4), F64)
    modes = ["edge", "wrap", "reflect", "symmetric"]
    check_value(lambda x: tuple(np.pad(x, ((1, 2), (3, 1)), m) for m in modes) + (
        np.pad(x, 2, "constant", constant_values=((1.0, 2.0), (3.0, 4.0))),
        np.pad(x, (1, 2), "constant", constant_values=-1.0), np.pad(x, 5, "reflect"), np.pad(x, 9, "wrap"),
        np.pad(x, 6, "symmetric"), np.pad(x[:1], ((2, 2), (0, 0)), "reflect"), np.pad(x.astype(F32), 1, "edge"),
        np.pad(x, ((0, 0), (1, 0)))), x)
    check_jvp(lambda x: np.pad(x, ((1, 2), (0, 1)), "edge"), x)  # autograd's pad JVP passes the mode on
    check(lambda x: np.pad(x, ((1, 2), (3, 1)), "constant", constant_values=2.0), x)
    check_exact(lambda i: (np.pad(i, 1, "constant", constant_values=7), np.pad(i, 2, "reflect")),
                rand((2, 3), onp.int32, -5, 5))


def test_flips_rolls_rotations():
    x = rand((3, 4, 2), F64)
    check_value(lambda x: (np.flip(x), np.flip(x, 1), np.flip(x, (0, 2)), np.roll(x, (1, -2), axis=(0, 1)),
                           np.roll(x, 7, axis=2), np.roll(x, -13), np.rot90(x, 2), np.rot90(x, -1, axes=(1, 2)),
                           np.rot90(x, 5), x[::-1, ::2]), x)
    check(lambda x: np.flipud(x) * np.fliplr(x) + np.roll(np.roll(x, 1, axis=0), 2, axis=1), x)


def test_transposes_and_reshape_methods():
    x = rand((2, 3, 4), F64)
    check(lambda x: x.transpose((2, 0, 1)) + np.transpose(x, (2, 0, 1)), x)
    check_value(lambda x: x.transpose(2, 0, 1) + np.permute_dims(x, (2, 0, 1)), x)
    check(lambda x: x.reshape((4, 6)) + x.reshape(4, -1) + x.flatten().reshape(4, 6) + x.ravel().reshape(4, 6),
          x)
    check_value(lambda x: (np.matrix_transpose(x), x.mT, np.diag(x[0]), np.diag(x[1], -1)), x)
    check_value(lambda x: (np.reshape(x, (3, 8), order="A"), np.ravel(x, order="K"), x.swapaxes(0, 1),
                           np.rollaxis(x, 2, 1), np.rollaxis(x, 0, 3), np.squeeze(x[None, :, None])), x)
    with pytest.raises(ValueError):
        from autograd_xla import jit_ps
        jit_ps(lambda x: np.reshape(x, (5, 5)), fallback="error")(x)


def test_dtype_casts():
    x = rand((3, 4), F64, 0, 300)  # float to unsigned of a negative number is undefined in C
    fns = (lambda x: (x.astype(F32), x.astype(onp.int32), x.astype(onp.int8), x.astype(onp.uint8),
                      x.astype(bool), x.astype(onp.complex64), x.astype(onp.float16), (x > 0).astype(F64),
                      (x > 0).astype(onp.int32), np.astype(x, onp.int64), x.astype(int), x.astype(float),
                      x.astype("float32"), (x + 1j * x).astype(F64)))
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_value(fns, onp.trunc(x / 3))  # in range for every target type
    check(lambda x: np.sin(x.astype(F32)).astype(F64), x, rtol=1e-6)  # float32 sine, compared in float64
    check(lambda x: x.astype(C128) * (1 + 2j), x)


def test_creation_inside_traced_code():
    x = rand((3, 3), F64)
    fns = (lambda x: (np.zeros(3) + x[0], np.ones((3, 3)) * x, np.eye(3) @ x, np.arange(3) * x[0],
                      np.linspace(0, 1, 3) * x[1], np.zeros_like(x), np.ones_like(x, dtype=F32),
                      np.full_like(x, 2.5), np.full((2, 3), 4) + x[:2], np.identity(3) * x, np.eye(3, k=1) * x,
                      np.tri(3) * x, np.empty_like(x) * 0, np.full_like(x, 7, dtype=onp.int32),
                      np.zeros((2, 3), dtype=onp.int32), np.arange(1.0, 4.0, 0.5)))
    check_value(fns, x)
    check(lambda x: np.sum(np.eye(3) * x) + np.sum(np.tri(3, 3, -1) * x), x)
    check(lambda x: np.full((2, 3), x[0, 0]) * x[1, 0], x)  # grad through full's fill value
    check(lambda x: np.linspace(x[0, 0], x[0, 1], 5), x)
    check_value(lambda x: (np.linspace(x[0], x[1], 4), np.linspace(x[0, 0], 3.0, 5, endpoint=False),
                           np.linspace(0.0, x[0], 3, axis=1), np.linspace(x[0, 0], x[1, 1], 4, retstep=True),
                           np.linspace(x[0, 0], x[0, 1], 1)), x)
    check_jvp(lambda x: np.linspace(x[0, 0], x[0, 1], 5), x)
