"""pmap over the test run's CPU devices (conftest: four), the collectives over a pmap's devices
and over a vmap's batch, their derivatives, and iterated_map_reduce; each against numpy or
plain autograd on the whole batch."""
import warnings

import autograd.numpy as np
import numpy as onp
import pytest
from autograd import grad, make_jvp

import autograd_xla as ax
from autograd_xla import FallbackWarning

from helpers import assert_close

N = len(ax.devices("cpu"))
pytestmark = [pytest.mark.skipif(N < 2, reason="needs several CPU devices (AUTOGRAD_XLA_CPU_DEVICES)"),
              pytest.mark.usefixtures("on_the_cpu")]
RNG = onp.random.RandomState(0)
X = RNG.randn(N, 3)
RING = [(d, (d + 1) % N) for d in range(N)]

# name -> (collective applied to one member's x over axis "i", numpy over the stacked members)
COLLECTIVES = {
    "psum": (lambda x: ax.psum(x, "i"), lambda xs: onp.broadcast_to(xs.sum(0), xs.shape)),
    "pmean": (lambda x: ax.pmean(x, "i"), lambda xs: onp.broadcast_to(xs.mean(0), xs.shape)),
    "pmax": (lambda x: ax.pmax(x, "i"), lambda xs: onp.broadcast_to(xs.max(0), xs.shape)),
    "pmin": (lambda x: ax.pmin(x, "i"), lambda xs: onp.broadcast_to(xs.min(0), xs.shape)),
    "all_gather": (lambda x: ax.all_gather(x, "i"), lambda xs: onp.broadcast_to(xs, (len(xs),) + xs.shape)),
    "all_gather axis=1": (lambda x: ax.all_gather(x, "i", axis=1), lambda xs: onp.broadcast_to(xs.T, (len(xs),) + xs.T.shape)),
    "all_gather tiled": (lambda x: ax.all_gather(x, "i", tiled=True),
                         lambda xs: onp.broadcast_to(xs.reshape(-1), (len(xs), xs.size))),
    "ppermute": (lambda x: ax.ppermute(x, "i", RING), lambda xs: onp.roll(xs, 1, axis=0)),
    "ppermute partial": (lambda x: ax.ppermute(x, "i", [(0, 1)]),
                         lambda xs: onp.concatenate([onp.zeros_like(xs[:1]), xs[:1], onp.zeros_like(xs[2:])])),
    "axis_index": (lambda x: ax.axis_index("i") + 0 * x[0], lambda xs: onp.arange(len(xs), dtype=float)),
}


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("mapping", ["pmap", "vmap"])
def test_collective(name, mapping):
    fn, expected = COLLECTIVES[name]
    mapper = ax.pmap if mapping == "pmap" else (lambda f, axis_name: ax.vmap(f, axis_name=axis_name))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FallbackWarning)
        got = mapper(fn, axis_name="i")(X)
    assert_close(got, expected(X), check_dtype=False, path=f"{mapping} {name}")


DIFFERENTIABLE = ["psum", "pmean", "pmax", "all_gather", "all_gather axis=1", "all_gather tiled", "ppermute"]


@pytest.mark.parametrize("name", DIFFERENTIABLE)
@pytest.mark.parametrize("mapping", ["pmap", "vmap"])
def test_collective_gradient(name, mapping):
    """grad of sum(w * f(x_d)) over the members, against numpy's f over the stacked x."""
    fn, expected = COLLECTIVES[name]
    W = RNG.randn(*expected(X).shape)
    mapper = ax.pmap if mapping == "pmap" else (lambda f, axis_name: ax.vmap(f, axis_name=axis_name))
    mapped = mapper(lambda x: np.tanh(fn(x)), axis_name="i")
    reference = {"psum": lambda xs: np.sum(xs, 0) + 0 * xs, "pmean": lambda xs: np.mean(xs, 0) + 0 * xs,
                 "pmax": lambda xs: np.max(xs, 0) + 0 * xs, "all_gather": lambda xs: np.stack([xs] * N),
                 "all_gather axis=1": lambda xs: np.stack([xs.T] * N),
                 "all_gather tiled": lambda xs: np.stack([np.reshape(xs, (-1,))] * N),
                 "ppermute": lambda xs: np.concatenate([xs[-1:], xs[:-1]])}[name]
    got = grad(lambda xs: np.sum(W * mapped(xs)))(X)
    want = grad(lambda xs: np.sum(W * np.tanh(reference(xs))))(X)
    assert_close(got, want, path=f"{mapping} {name} VJP")
    t = RNG.randn(*X.shape)
    got_t = make_jvp(lambda xs: mapped(xs))(X)(t)[1]
    want_t = make_jvp(lambda xs: np.tanh(reference(xs)))(X)(t)[1]
    assert_close(got_t, want_t, path=f"{mapping} {name} JVP")


def test_in_axes_none_one_and_containers():
    W = RNG.randn(3, 2)
    Xt = RNG.randn(3, N)  # mapped over axis 1
    f = ax.pmap(lambda w, p, x: (np.dot(x, w) + p["b"], ax.psum(p["a"], "i")), "i", in_axes=(None, {"a": 0, "b": None}, 1))
    params = {"a": RNG.randn(N, 2), "b": RNG.randn(2)}
    out, total = f(W, params, Xt)
    assert_close(out, onp.dot(Xt.T, W) + params["b"])
    assert_close(total, onp.broadcast_to(params["a"].sum(0), (N, 2)))


def test_out_axes_and_fewer_shards_than_devices():
    f = ax.pmap(lambda x: (x * 2, ax.psum(x, "i")), "i", out_axes=(1, None))
    xs = RNG.randn(2, 3)
    doubled, total = f(xs)
    assert_close(doubled, (xs * 2).T)
    assert_close(total, xs.sum(0))


def test_one_shard_runs_on_the_single_device_path():
    xs = RNG.randn(1, 3)
    f = ax.pmap(lambda x: (ax.psum(x, "i"), ax.all_gather(x, "i"), ax.axis_index("i"), np.sum(x)), "i",
                out_axes=(0, 0, 0, None))
    total, gathered, index, whole = f(xs)
    assert_close(total, xs)
    assert_close(gathered, xs[:, None])
    assert_close(index, onp.zeros(1, onp.int32))
    assert_close(whole, xs.sum())


def test_too_many_shards_is_a_clear_error():
    with pytest.raises(ValueError, match=f"size {N + 1}, but only {N} device"):
        ax.pmap(lambda x: x)(onp.ones((N + 1, 2)))


def test_unbound_axis_names_the_axis():
    with pytest.raises(NameError, match="'j'"):
        ax.pmap(lambda x: ax.psum(x, "j"), "i")(X)
    with pytest.raises(NameError, match="'i'"):
        ax.psum(X, "i")


def _loss(w, X, y):
    return np.mean((np.tanh(np.dot(X, w)) - y) ** 2)


def test_data_parallel_gradient_equals_full_batch():
    w = RNG.randn(3)
    Xs, ys = RNG.randn(N, 5, 3), RNG.randn(N, 5)
    step = ax.pmap(lambda w, X, y: ax.pmean(grad(_loss)(w, X, y), "batch"), "batch", in_axes=(None, 0, 0))
    got = step(w, Xs, ys)
    full = grad(_loss)(w, Xs.reshape(-1, 3), ys.reshape(-1))
    assert_close(got, onp.broadcast_to(full, (N, 3)))


def test_grad_of_a_function_calling_pmap():
    w = RNG.randn(3)
    Xs, ys = RNG.randn(N, 5, 3), RNG.randn(N, 5)
    total = lambda w: np.mean(ax.pmap(_loss, in_axes=(None, 0, 0))(w, Xs, ys))  # noqa: E731
    assert_close(grad(total)(w), grad(_loss)(w, Xs.reshape(-1, 3), ys.reshape(-1)))


def test_keep_on_device_chains_without_transfer():
    step = ax.pmap(lambda x: ax.ppermute(x, "i", RING), "i", keep_on_device=True)
    x = X
    for _ in range(40):  # beyond MAX_IN_FLIGHT outstanding calls: bounded, no deadlock
        x = step(x)
    assert type(x) is ax.ShardedArray
    both = [x, ax.device_put(X)]  # waited for in one call into jaxlib
    assert ax.block_until_ready(both) is both and ax.block_until_ready(x) is x
    assert_close(onp.asarray(x), onp.roll(X, 40, axis=0))


def test_vmap_inside_pmap_both_axes():
    xs = RNG.randn(N, 3, 2)
    f = ax.pmap(ax.vmap(lambda x: ax.psum(x, "dev") - ax.pmean(x, "ex"), axis_name="ex"), "dev")
    assert_close(f(xs), xs.sum(0, keepdims=True) - xs.mean(1, keepdims=True))


def test_iterated_map_reduce_against_the_loop():
    Xs = RNG.randn(N, 10, 3)
    ys = (RNG.rand(N, 10) > 0.5).astype(float)

    def grad_shard(w, shard):
        X, y = shard
        return np.dot(X.T, 1 / (1 + np.exp(-np.dot(X, w))) - y)

    def update(w, g):
        return w - 0.1 * g / (10 * N)

    got = ax.iterated_map_reduce(grad_shard, update, onp.zeros(3), (Xs, ys), 30)
    w = onp.zeros(3)
    for _ in range(30):
        w = update(w, sum(grad_shard(w, (Xs[d], ys[d])) for d in range(N)))
    assert_close(got, w)
    assert_close(ax.iterated_map_reduce(lambda s, x: np.max(x), lambda s, m: s + m, 0.0, Xs, 3, reduce="max"),
                 3 * Xs.max())
