"""The benchmark workloads, each written twice: as ordinary autograd code and as the same
math in jax.numpy.

The autograd half is what a user of autograd_xla writes (`import autograd.numpy as np`,
`from autograd import grad`); the runner wraps it in `jit_ps` unchanged, and also calls it
unwrapped as the plain-autograd baseline. The jax half mirrors it operation for operation,
so the two compilers are given the same program. Nothing here imports jax: the jax
builders receive the `jax` and `jax.numpy` modules from the runner.

Every `build_*` call returns a *fresh* function object, so that a first call measures
tracing and compiling (jax caches traces per function object, jit_ps per wrapper).
"""
import numpy as onp

import autograd.numpy as np
from autograd import grad, value_and_grad
from autograd.scipy.signal import convolve
from autograd.scipy.special import logsumexp

# ---------------------------------------------------------------------------------------
# The user's code (autograd). Module level, as it would be in a script.
# ---------------------------------------------------------------------------------------

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
LEARNING_RATE = 0.01
MLP_SIZES = (784, 200, 100, 10)


def logreg_loss(w, X, y):
    """Mean logistic loss with labels y in {0, 1}."""
    z = X @ w
    return np.mean(np.logaddexp(0.0, z) - y * z)


def mlp_predict(params, x):
    for W, b in params[:-1]:
        x = np.tanh(x @ W + b)
    W, b = params[-1]
    logits = x @ W + b
    return logits - logsumexp(logits, axis=1, keepdims=True)


def mlp_loss(params, x, y):
    """Softmax cross-entropy against one-hot targets y."""
    return -np.mean(np.sum(mlp_predict(params, x) * y, axis=1))


def selu(x):
    return SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * (np.exp(x) - 1.0))


def selu_layer(W, b, x):
    return selu(x @ W + b)


def selu_sum(W, b, x):
    return np.sum(selu_layer(W, b, x))


def tiny_scalar(x):
    return np.sum(np.tanh(x) * x)


def conv_layer(x, W, b):
    """x: [batch, channels_in, H, W]; W: [channels_in, channels_out, kH, kW] (autograd's convnet
    example's layout: scipy's true convolution, 'valid')."""
    return convolve(x, W, axes=([2, 3], [2, 3]), dot_axes=([1], [0]), mode="valid") + b[None, :, None, None]


def max_pool_2x2(x):
    n, c, h, w = x.shape
    return np.max(np.max(np.reshape(x, (n, c, h // 2, 2, w // 2, 2)), axis=5), axis=3)


def convnet_loss(params, x, y):
    (W1, b1), (W2, b2), (W3, b3) = params
    h = max_pool_2x2(np.tanh(conv_layer(x, W1, b1)))      # 3x32x32 -> 16x14x14
    h = max_pool_2x2(np.tanh(conv_layer(h, W2, b2)))      # -> 32x5x5
    logits = np.dot(np.reshape(h, (h.shape[0], -1)), W3) + b3
    m = np.max(logits, axis=1, keepdims=True)
    log_probs = logits - (m + np.log(np.sum(np.exp(logits - m), axis=1, keepdims=True)))
    return -np.mean(np.sum(log_probs * y, axis=1))


def _patch_conv(x, W, np):
    """A 'valid' correlation of NHWC `x` with a (kh, kw, ci, co) kernel as one matrix product
    of its patches, `np` autograd's numpy or jax's: slices, a concatenation, a dot."""
    kh, kw, ci, co = W.shape
    B, H, Wd, _ = x.shape
    Ho, Wo = H - kh + 1, Wd - kw + 1
    cols = [x[:, i:i + Ho, j:j + Wo, :] for i in range(kh) for j in range(kw)]
    patches = np.concatenate(cols, axis=3) if len(cols) > 1 else cols[0]
    out = np.dot(np.reshape(patches, (B * Ho * Wo, kh * kw * ci)), np.reshape(W, (kh * kw * ci, co)))
    return np.reshape(out, (B, Ho, Wo, co))


def patch_convnet_loss(params, x, y, np=np):
    """Three 3x3 convolutions (64, 128, 128 channels; ReLU, 2x2 mean pooling after the second)
    and a 1x1 one to 10 classes averaged over positions; softmax cross-entropy."""
    (W1, b1), (W2, b2), (W3, b3), (W4, b4) = params
    x = np.maximum(_patch_conv(x, W1, np) + b1, 0.0)
    x = np.maximum(_patch_conv(x, W2, np) + b2, 0.0)
    B, H, Wd, C = x.shape
    x = np.mean(np.reshape(x, (B, H // 2, 2, Wd // 2, 2, C)), axis=(2, 4))
    x = np.maximum(_patch_conv(x, W3, np) + b3, 0.0)
    logits = np.mean(_patch_conv(x, W4, np) + b4, axis=(1, 2))
    m = np.max(logits, axis=1, keepdims=True)
    log_probs = logits - m - np.log(np.sum(np.exp(logits - m), axis=1, keepdims=True))
    return -np.mean(np.sum(log_probs * y, axis=1))


def _build_patch_convnet_step():
    def sgd_step(params, x, y):
        grads = grad(patch_convnet_loss)(params, x, y)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def _build_convnet_step():
    def sgd_step(params, x, y):
        grads = grad(convnet_loss)(params, x, y)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def _build_logreg():
    return value_and_grad(logreg_loss)


def _build_mlp_step():
    def sgd_step(params, x, y):
        grads = grad(mlp_loss)(params, x, y)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def _build_selu_fwd():
    def layer(W, b, x):
        return selu_layer(W, b, x)
    return layer


def _build_selu_grad():
    return grad(selu_sum, argnum=(0, 1))


def phased_products(theta, M, B, np=np):
    """|U B U^H|^2 summed, U = M with its columns' phases turned by theta (real): a complex
    matrix chain as transfer-matrix and quantum-circuit code writes it, differentiated with
    respect to real parameters (the same gradient under autograd's and jax's conventions)."""
    U = M * np.exp(1j * theta)[None, :]
    return np.sum(np.abs(U @ B @ np.conj(U).T) ** 2)


def _build_complex_products():
    return value_and_grad(phased_products)


def _build_tiny():
    return lambda x: x + 1.0


def _build_tiny_grad():
    return grad(tiny_scalar)


# ---------------------------------------------------------------------------------------
# The same math in jax (built on demand; `jax`, `jnp` come from the runner).
# ---------------------------------------------------------------------------------------

def _jax_logreg(jax, jnp):
    def loss(w, X, y):
        z = X @ w
        return jnp.mean(jnp.logaddexp(0.0, z) - y * z)
    return jax.value_and_grad(loss)


def _jax_mlp_step(jax, jnp):
    def lse(z, axis):
        m = jnp.max(z, axis=axis, keepdims=True)
        return m + jnp.log(jnp.sum(jnp.exp(z - m), axis=axis, keepdims=True))

    def predict(params, x):
        for W, b in params[:-1]:
            x = jnp.tanh(x @ W + b)
        W, b = params[-1]
        logits = x @ W + b
        return logits - lse(logits, axis=1)

    def loss(params, x, y):
        return -jnp.mean(jnp.sum(predict(params, x) * y, axis=1))

    def sgd_step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def _jax_selu(jnp):
    def selu_j(x):
        return SELU_SCALE * jnp.where(x > 0, x, SELU_ALPHA * (jnp.exp(x) - 1.0))
    return selu_j


def _jax_selu_fwd(jax, jnp):
    selu_j = _jax_selu(jnp)

    def layer(W, b, x):
        return selu_j(x @ W + b)
    return layer


def _jax_selu_grad(jax, jnp):
    selu_j = _jax_selu(jnp)

    def total(W, b, x):
        return jnp.sum(selu_j(x @ W + b))
    return jax.grad(total, argnums=(0, 1))


def _jax_convnet_step(jax, jnp):
    def conv(x, W, b):  # a true convolution (flipped kernel), NCHW x OIHW, as scipy's convolve
        kernel = jnp.transpose(W, (1, 0, 2, 3))[:, :, ::-1, ::-1]
        out = jax.lax.conv_general_dilated(x, kernel, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                           precision=jax.lax.Precision.HIGHEST)
        return out + b[None, :, None, None]

    def pool(x):
        n, c, h, w = x.shape
        return jnp.max(jnp.reshape(x, (n, c, h // 2, 2, w // 2, 2)), axis=(3, 5))

    def loss(params, x, y):
        (W1, b1), (W2, b2), (W3, b3) = params
        h = pool(jnp.tanh(conv(x, W1, b1)))
        h = pool(jnp.tanh(conv(h, W2, b2)))
        logits = jnp.reshape(h, (h.shape[0], -1)) @ W3 + b3
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits, axis=1) * y, axis=1))

    def sgd_step(params, x, y):
        grads = jax.grad(loss)(params, x, y)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def _jax_patch_convnet_step(jax, jnp):
    def sgd_step(params, x, y):
        grads = jax.grad(patch_convnet_loss)(params, x, y, jnp)
        return [(W - LEARNING_RATE * dW, b - LEARNING_RATE * db) for (W, b), (dW, db) in zip(params, grads)]
    return sgd_step


def poly(x):
    return x + x * x + x * x * x


def cube(x):
    return x * x * x


def add_one(x):
    return x + 1.0


def _build_poly():
    return poly


def _build_cube():
    return cube


def _build_add_one():
    return add_one


def _jax_poly(jax, jnp):
    return poly   # the same Python function: jnp arrays have the operators


def _jax_cube(jax, jnp):
    return cube


def _jax_add_one(jax, jnp):
    return add_one


def _jax_complex_products(jax, jnp):
    return jax.value_and_grad(lambda theta, M, B: phased_products(theta, M, B, np=jnp))


def _jax_tiny(jax, jnp):
    return lambda x: x + 1.0


def _jax_tiny_grad(jax, jnp):
    return jax.grad(lambda x: jnp.sum(jnp.tanh(x) * x))


# ---------------------------------------------------------------------------------------
# Inputs: numpy arrays of the requested floating dtype, from a seeded generator.
# ---------------------------------------------------------------------------------------

def _logreg_inputs(dtype, rng, N=5000, D=100):
    X = rng.standard_normal((N, D))
    w_true = rng.standard_normal(D)
    y = (rng.random(N) < 1.0 / (1.0 + onp.exp(-X @ w_true))).astype(dtype)
    w = 0.1 * rng.standard_normal(D)
    return w.astype(dtype), X.astype(dtype), y


def _mlp_inputs(dtype, rng, batch=256):
    params = [((rng.standard_normal((m, n)) / onp.sqrt(m)).astype(dtype), (0.1 * rng.standard_normal(n)).astype(dtype))
              for m, n in zip(MLP_SIZES[:-1], MLP_SIZES[1:])]
    x = rng.standard_normal((batch, MLP_SIZES[0])).astype(dtype)
    y = onp.eye(MLP_SIZES[-1], dtype=dtype)[rng.integers(0, MLP_SIZES[-1], batch)]
    return params, x, y


def _selu_inputs(dtype, rng, batch=256, width=1024):
    W = (rng.standard_normal((width, width)) / onp.sqrt(width)).astype(dtype)
    b = (0.1 * rng.standard_normal(width)).astype(dtype)
    x = rng.standard_normal((batch, width)).astype(dtype)
    return W, b, x


def _convnet_inputs(dtype, rng, batch=128):
    shapes = [((3, 16, 5, 5), 16), ((16, 32, 5, 5), 32), ((32 * 5 * 5, 10), 10)]
    params = [((rng.standard_normal(s) / onp.sqrt(onp.prod(s) / s[1])).astype(dtype), onp.zeros(n, dtype))
              for s, n in shapes]
    x = rng.standard_normal((batch, 3, 32, 32)).astype(dtype)
    y = onp.eye(10, dtype=dtype)[rng.integers(0, 10, batch)]
    return params, x, y


def _patch_convnet_inputs(dtype, rng, batch=128):
    shapes = [(3, 3, 3, 64), (3, 3, 64, 128), (3, 3, 128, 128), (1, 1, 128, 10)]
    params = [((rng.standard_normal(s) / onp.sqrt(onp.prod(s[:3]))).astype(dtype), onp.zeros(s[3], dtype))
              for s in shapes]
    x = rng.standard_normal((batch, 32, 32, 3)).astype(dtype)
    y = onp.eye(10, dtype=dtype)[rng.integers(0, 10, batch)]
    return params, x, y


def _big_inputs(shape, fixed_dtype=None):
    def make(dtype, rng):
        return (rng.random(shape).astype(fixed_dtype or dtype),)
    return make


def _complex_inputs(dtype, rng, n=192):
    """theta (real, of --dtype) and M, B complex of its precision (complex64 for float32)."""
    cdtype = onp.result_type(dtype, onp.complex64)
    M, B = [(rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))).astype(cdtype) / onp.sqrt(n)
            for _ in range(2)]
    return rng.standard_normal(n).astype(dtype), M, B


def _tiny_inputs(dtype, rng):
    return (onp.array([0.5, -1.0, 2.0], dtype=dtype),)


class Workload:
    """name: the CLI name. times: exactly what one timed call does.
    overhead_bound: the acceptance bound on jit_ps time / jax.jit time. speedup_target: issue 14's
    target for autograd time / jit_ps time (None for a function of a few elements, whose floor is
    the call's fixed cost)."""

    def __init__(self, name, times, build_autograd, build_jax, make_inputs, overhead_bound=1.25, default=True,
                 speedup_target=1.0, dtypes=None):
        self.name, self.times = name, times
        self.dtypes = dtypes  # the only dtypes its inputs come in (None: any)
        self.build_autograd, self.build_jax, self.make_inputs = build_autograd, build_jax, make_inputs
        self.overhead_bound, self.speedup_target = overhead_bound, speedup_target
        self.default = default  # part of a run without --only

    def row_dtypes(self, wanted):
        """The dtypes to run it in, of those `wanted`: its own if it has fixed ones."""
        if self.dtypes is None:
            return list(wanted)
        return [d for d in wanted if d in self.dtypes] or list(self.dtypes[:1])


WORKLOADS = [
    Workload("logreg",
             "value_and_grad(loss)(w, X, y): mean logistic loss and its gradient w.r.t. w; "
             "X: 5000x100, y: 5000, w: 100 (X and y passed on every call)",
             _build_logreg, _jax_logreg, _logreg_inputs),
    Workload("mlp_step",
             "one SGD step: grad of softmax cross-entropy w.r.t. params [(W, b)] of a tanh MLP "
             "784-200-100-10 on a batch of 256, then params - 0.01 * grads; returns the new params list",
             _build_mlp_step, _jax_mlp_step, _mlp_inputs),
    Workload("selu_fwd",
             "selu(x @ W + b), x: 256x1024, W: 1024x1024, b: 1024; returns the 256x1024 activations",
             _build_selu_fwd, _jax_selu_fwd, _selu_inputs),
    Workload("selu_grad",
             "grad(sum(selu(x @ W + b)), argnum=(0, 1)) -> (dW, db), same shapes as selu_fwd",
             _build_selu_grad, _jax_selu_grad, _selu_inputs),
    Workload("convnet_step",
             "one SGD step of a convnet on CIFAR-shaped input (batch 128, 3x32x32): two 5x5 'valid' "
             "convolutions (autograd.scipy.signal.convolve, 16 and 32 channels) with tanh and 2x2 max "
             "pooling, a dense softmax layer; grad of cross-entropy, then params - 0.01 * grads. Plain "
             "autograd takes about a second per step on CPU, so it runs only when named with --only",
             _build_convnet_step, _jax_convnet_step, _convnet_inputs, default=False),
    Workload("patch_convnet_step",
             "one SGD step of a convnet whose convolutions are matrix products of patches (slices, a "
             "concatenation, a dot: patch_convnet_loss), batch 128, 32x32x3 NHWC, 3x3 convolutions of 64, 128, "
             "128 channels and a 1x1 one to 10 classes; the TPU's convnet (benchmarks/tpu.py): XLA:TPU compiled "
             "convnet_step's convolutions for over 140 s, this in ~30 s, on either side",
             _build_patch_convnet_step, _jax_patch_convnet_step, _patch_convnet_inputs, default=False),
    Workload("poly_big",
             "x + x*x + x*x*x on a 5000x5000 float32 array (float32 whatever --dtype says): memory speed, one fused "
             "loop against numpy's five passes",
             _build_poly, _jax_poly, _big_inputs((5000, 5000), onp.float32), speedup_target=1.5, dtypes=("float32",)),
    Workload("cube_big",
             "x * x * x on a 10000x10000 float32 array (400 MB; float32 whatever --dtype says)",
             _build_cube, _jax_cube, _big_inputs((10000, 10000), onp.float32), speedup_target=1.5, dtypes=("float32",)),
    Workload("add_one_1e6",
             "x + 1.0 on 1e6 elements of --dtype",
             _build_add_one, _jax_add_one, _big_inputs((1000000,))),
    Workload("complex_products",
             "value_and_grad w.r.t. theta (192) of sum |U B U^H|^2, U = M * exp(1j theta): complex 192x192 "
             "matrix products (complex64 with --dtype float32, complex128 with float64); run when named with --only",
             _build_complex_products, _jax_complex_products, _complex_inputs, default=False),
    Workload("tiny",
             "per-call overhead: lambda x: x + 1.0 on a 3-element array",
             _build_tiny, _jax_tiny, _tiny_inputs, overhead_bound=2.0, speedup_target=None),
    Workload("tiny_grad",
             "per-call overhead of a gradient: grad(lambda x: sum(tanh(x) * x)) on a 3-element array",
             _build_tiny_grad, _jax_tiny_grad, _tiny_inputs, overhead_bound=2.0),
]

BY_NAME = {w.name: w for w in WORKLOADS}
