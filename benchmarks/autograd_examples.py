"""By-hand acceptance: autograd 1.9.1's own examples/ objectives under jit_ps vs plain autograd.

For each example the objective is built as the example builds it (module-level functions of the
imported example, matplotlib stubbed; `if __name__ == "__main__":` setup replicated here, small;
MNIST replaced by random data of the same shapes). Then, at the same parameters and the same
random state (np.random and the example's RandomState reseeded before every evaluation):
  (a) jit_ps(f)(x) vs f(x)   (b) jit_ps(grad(f))(x) vs grad(f)(x)   (c) grad(jit_ps(f))(x) vs grad(f)(x)
reporting the max relative difference, any FallbackWarning (first line), and one gradient call's
time, plain vs jit_ps(grad) (fastest of 5, jit_ps's once its ladder has settled). Each example
runs in its own subprocess with a time limit (--timeout, default 180 s).

    python benchmarks/autograd_examples.py [--only NAME[,NAME]] [--markdown OUT] [--timeout S]
"""
import argparse
import json
import os
import subprocess
import sys
import time
import types
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def examples_dir():
    from benchmarks.autograd_suite import DEFAULT_SRC, obtain_tests
    return os.path.join(os.path.dirname(obtain_tests(DEFAULT_SRC)), "examples")


# ----- matplotlib stub -----------------------------------------------------------------------------
class _Any(types.ModuleType):
    def __init__(self, name="stub"):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Any(name)

    def __call__(self, *a, **k):
        return _Any()

    def __iter__(self):
        return iter([_Any(), _Any()])


def stub_matplotlib():
    for name in ("matplotlib", "matplotlib.pyplot", "matplotlib.cm", "matplotlib.image"):
        sys.modules[name] = _Any(name)


def load(name):
    import importlib
    d = examples_dir()
    if d not in sys.path:
        sys.path.insert(0, d)
    stub_matplotlib()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import io
        import contextlib
        with contextlib.redirect_stdout(io.StringIO()):
            return importlib.import_module(name)


def closure_var(f, name):
    return f.__closure__[f.__code__.co_freevars.index(name)].cell_contents


# ----- the examples: each returns dict(fun, args, argnum=0, reset=callable or None, note) -------------
import numpy as onp  # noqa: E402

EX = {}


def example(fn):
    EX[fn.__name__.replace("ex_", "")] = fn
    return fn


def fake_mnist(n, rs=None):
    rs = rs or onp.random.RandomState(0)
    images = rs.rand(n, 784)
    labels = onp.eye(10)[rs.randint(0, 10, n)].astype(int)
    return images, labels


@example
def ex_gaussian_process():
    import autograd.numpy.random as npr
    m = load("gaussian_process")
    num_params, predict, lml = m.make_gp_funs(m.rbf_covariance, num_cov_params=2)
    X, y = m.build_toy_dataset(D=1)
    objective = lambda params: -lml(params, X, y)
    return dict(fun=objective, args=(0.1 * npr.RandomState(0).randn(num_params),))


@example
def ex_gmm():
    import autograd.numpy.random as npr
    from autograd.misc.flatten import flatten_func
    m = load("gmm")
    data_mod = load("data")
    init_params = m.init_gmm_params(num_components=10, D=2, scale=0.1, rs=npr.RandomState(0))
    data = data_mod.make_pinwheel(radial_std=0.3, tangential_std=0.05, num_classes=3, num_per_class=100,
                                  rate=0.4, rs=npr.RandomState(0))
    objective = lambda params: -m.gmm_log_likelihood(params, data)
    flat_obj, unflatten, flat_init = flatten_func(objective, init_params)
    return dict(fun=flat_obj, args=(flat_init,))


@example
def ex_logistic_regression():
    m = load("logistic_regression")
    return dict(fun=m.training_loss, args=(onp.array(m.weights),))


@example
def ex_negative_binomial_maxlike():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    m = load("negative_binomial_maxlike")
    npr.seed(0)
    data = m.negbin_sample(r=5, p=0.5, size=1000)
    loglike = lambda r, p: np.sum(m.negbin_loglike(r, p, data))
    return dict(fun=loglike, args=(4.0, 0.45), argnum=(0, 1), note="grad_both, argnum=(0, 1)")


def _char_model(modname, predict_ll, init):
    m = load(modname)
    rnn = load("rnn")
    train_inputs = rnn.build_dataset(os.path.join(examples_dir(), modname + ".py"), sequence_length=30,
                                     alphabet_size=128, max_lines=60)
    params = init(m)

    def training_loss(params, iter):
        return -getattr(m, predict_ll)(params, train_inputs, train_inputs)
    return dict(fun=training_loss, args=(params, 0))


@example
def ex_rnn():
    import autograd.numpy.random as npr
    return _char_model("rnn", "rnn_log_likelihood", lambda m: m.create_rnn_params(
        input_size=128, output_size=128, state_size=40, param_scale=0.01, rs=npr.RandomState(0)))


@example
def ex_lstm():
    import autograd.numpy.random as npr
    return _char_model("lstm", "lstm_log_likelihood", lambda m: m.init_lstm_params(
        input_size=128, output_size=128, state_size=40, param_scale=0.01, rs=npr.RandomState(0)))


@example
def ex_neural_net():
    import autograd.numpy.random as npr
    m = load("neural_net")
    L2_reg, batch_size = 1.0, 256
    train_images, train_labels = fake_mnist(2 * batch_size)
    init_params = m.init_random_params(0.1, [784, 200, 100, 10], rs=npr.RandomState(0))
    num_batches = 2

    def batch_indices(iter):
        idx = iter % num_batches
        return slice(idx * batch_size, (idx + 1) * batch_size)

    def objective(params, iter):
        idx = batch_indices(iter)
        return -m.log_posterior(params, train_images[idx], train_labels[idx], L2_reg)
    return dict(fun=objective, args=(init_params, 1), note="random MNIST-shaped data")


@example
def ex_neural_net_regression():
    import autograd.numpy.random as npr
    m = load("neural_net_regression")
    init_params = m.init_random_params(0.1, layer_sizes=[1, 4, 4, 1], rs=npr.RandomState(0))
    inputs, targets = m.build_toy_dataset()

    def objective(weights, t):
        return -m.logprob(weights, inputs, targets) - m.log_gaussian(weights, 10.0)
    return dict(fun=objective, args=(init_params, 0))


@example
def ex_convnet():
    import autograd.numpy.random as npr
    m = load("convnet")
    layer_specs = [m.conv_layer((5, 5), 6), m.maxpool_layer((2, 2)), m.conv_layer((5, 5), 16),
                   m.maxpool_layer((2, 2)), m.tanh_layer(120), m.tanh_layer(84), m.softmax_layer(10)]
    N_weights, pred_fun, loss_fun, frac_err = m.make_nn_funs((1, 28, 28), layer_specs, 1.0)
    images, labels = fake_mnist(16)
    X = images.reshape((16, 1, 28, 28))
    W = npr.RandomState(0).randn(N_weights) * 0.1
    return dict(fun=loss_fun, args=(W, X, labels), note="batch 16, random MNIST-shaped data")


@example
def ex_ica():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    m = load("ica")
    observed_dimension, latent_dimension, true_noise_var, n_samples = 100, 2, 1.0, 200
    num_weights, sample, logprob, unpack_weights = m.make_ica_funs(observed_dimension, latent_dimension)
    num_latent_params = latent_dimension * n_samples
    total_num_params = num_weights + num_latent_params + 1

    def unpack_params(params):
        weights = unpack_weights(params[:num_weights])
        latents = np.reshape(params[num_weights:num_weights + num_latent_params], (latent_dimension, n_samples))
        return weights, latents, np.exp(params[-1])
    rs = npr.RandomState(0)
    true_weights = np.zeros((observed_dimension, latent_dimension))
    for i in range(latent_dimension):
        true_weights[:, i] = np.sin(np.linspace(0, 4 + i * 3.2, observed_dimension))
    true_latents, data = sample(true_weights, n_samples, true_noise_var, rs)

    def objective(params):
        weight_matrix, latents, noise_std = unpack_params(params)
        return -logprob(weight_matrix, latents, noise_std, data) / n_samples
    return dict(fun=objective, args=(npr.RandomState(0).randn(total_num_params),))


@example
def ex_ode_net():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    from autograd.scipy.integrate import odeint
    m = load("ode_net")
    true_y0 = np.array([2.0, 0.0]).T
    t = np.linspace(0.0, m.max_T, m.N)
    true_A = np.array([[-0.1, 2.0], [-2.0, -0.1]])
    true_y = odeint(m.func, true_y0, t, args=(true_A,))

    def train_loss(params, iter):
        pred = m.ode_pred(params, true_y0, t)
        return m.L1_loss(pred, true_y)
    init_params = m.init_nn_params(0.1, layer_sizes=[m.D, 150, m.D], rs=npr.RandomState(0))
    return dict(fun=train_loss, args=(init_params, 0), tol=1e-2, note="odeint rtol=0.01")


@example
def ex_deep_gaussian_process():
    import autograd.numpy.random as npr
    m = load("deep_gaussian_process")
    # build_deep_gp reads the module globals n_data, X, y that the example's __main__ sets
    m.n_data = 20
    m.X, m.y = m.build_step_function_dataset(D=1, n_data=20)
    total, lml, _, _, _ = m.build_deep_gp(1, 1, m.rbf_covariance)
    objective = lambda params: -lml(params)
    return dict(fun=objective, args=(0.1 * npr.RandomState(0).randn(total),))


@example
def ex_gplvm():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    from autograd.scipy.stats import norm
    gp = load("gaussian_process")
    data_mod = load("data")
    data_dimension, latent_dimension = 2, 2
    params_per_gp, predict, lml = gp.make_gp_funs(gp.rbf_covariance, num_cov_params=latent_dimension + 1)
    total_gp_params = data_dimension * params_per_gp
    data = data_mod.make_pinwheel(radial_std=0.3, tangential_std=0.05, num_classes=3, num_per_class=30,
                                  rate=0.4, rs=npr.RandomState(0))
    datalen = data.shape[0]
    num_latent_params = datalen * latent_dimension

    def unpack_params(params):
        gp_params = np.reshape(params[:total_gp_params], (data_dimension, params_per_gp))
        latents = np.reshape(params[total_gp_params:], (datalen, latent_dimension))
        return gp_params, latents

    def objective(params):
        gp_params, latents = unpack_params(params)
        gp_likelihood = sum([lml(gp_params[i], latents, data[:, i]) for i in range(data_dimension)])
        latent_prior_likelihood = np.sum(norm.logpdf(latents))
        return -gp_likelihood - latent_prior_likelihood
    return dict(fun=objective, args=(npr.RandomState(1).randn(total_gp_params + num_latent_params) * 0.1,))


def _bbsvi_reset(objective):
    rs = closure_var(objective, "rs")
    return lambda: rs.seed(0)


@example
def ex_black_box_svi():
    import autograd.numpy as np
    import autograd.scipy.stats.norm as norm
    m = load("black_box_svi")
    D = 2

    def log_density(x, t):
        mu, log_sigma = x[:, 0], x[:, 1]
        return norm.logpdf(log_sigma, 0, 1.35) + norm.logpdf(mu, 0, np.exp(log_sigma))
    objective, gradient, unpack_params = m.black_box_variational_inference(log_density, D, num_samples=2000)
    init = np.concatenate([-1 * np.ones(D), -5 * np.ones(D)])
    return dict(fun=objective, args=(init, 0), reset=_bbsvi_reset(objective))


@example
def ex_bayesian_neural_net():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    m = load("bayesian_neural_net")
    bb = load("black_box_svi")
    rbf = lambda x: np.exp(-(x**2))
    num_weights, predictions, logprob = m.make_nn_funs(layer_sizes=[1, 20, 20, 1], L2_reg=0.1,
                                                       noise_variance=0.01, nonlinearity=rbf)
    inputs, targets = m.build_toy_dataset()
    log_posterior = lambda weights, t: logprob(weights, inputs, targets)
    objective, gradient, unpack_params = bb.black_box_variational_inference(log_posterior, num_weights,
                                                                           num_samples=20)
    rs = npr.RandomState(0)
    init = np.concatenate([rs.randn(num_weights), -5 * np.ones(num_weights)])
    return dict(fun=objective, args=(init, 0), reset=_bbsvi_reset(objective))


@example
def ex_mixture_variational_inference():
    import autograd.numpy as np
    import autograd.numpy.random as npr
    import autograd.scipy.stats.norm as norm
    m = load("mixture_variational_inference")

    def log_density(x, t):
        mu, log_sigma = x[:, 0], x[:, 1]
        sigma_density = norm.logpdf(log_sigma, 0, 1.35)
        mu_density = norm.logpdf(mu, -0.5, np.exp(log_sigma))
        sigma_density2 = norm.logpdf(log_sigma, 0.1, 1.35)
        mu_density2 = norm.logpdf(mu, 0.5, np.exp(log_sigma))
        return np.logaddexp(sigma_density + mu_density, sigma_density2 + mu_density2)
    init_var_params, elbo, _, _ = m.build_mog_bbsvi(log_density, num_samples=40, k=10, rs=npr.RandomState(0))

    def objective(params, t):
        return -elbo(params, t)
    rs = closure_var(elbo, "rs")
    return dict(fun=objective, args=(init_var_params(2, rs=npr.RandomState(0)), 0), reset=lambda: rs.seed(0))


@example
def ex_variational_autoencoder():
    import autograd.numpy.random as npr
    m = load("variational_autoencoder")
    latent_dim, data_dim, batch_size = 10, 784, 200
    images, _ = fake_mnist(batch_size)
    images = onp.where(images > 0.5, 1.0, -1.0)  # binarise
    gen = m.init_net_params(0.01, [latent_dim, 300, 200, data_dim], rs=npr.RandomState(0))
    rec = m.init_net_params(0.01, [data_dim, 200, 300, latent_dim * 2], rs=npr.RandomState(1))
    seed = npr.RandomState(0)

    def objective(combined_params, iter):
        data_idx = slice(iter * batch_size, (iter + 1) * batch_size)
        gen_params, rec_params = combined_params
        return -m.vae_lower_bound(gen_params, rec_params, images[data_idx], seed) / data_dim
    return dict(fun=objective, args=((gen, rec), 0), reset=lambda: seed.seed(0),
                note="batch 200, random MNIST-shaped data")


@example
def ex_generative_adversarial_net():
    import autograd.numpy.random as npr
    m = load("generative_adversarial_net")
    noise_dim, batch_size = 10, 100
    images, _ = fake_mnist(batch_size)
    gen = m.init_random_params(0.001, [noise_dim, 200, 784], rs=npr.RandomState(0))
    dsc = m.init_random_params(0.001, [784, 200, 1], rs=npr.RandomState(1))
    seed = npr.RandomState(0)

    def objective(gen_params, dsc_params, iter):
        idx = slice(iter * batch_size, (iter + 1) * batch_size)
        return m.gan_objective(gen_params, dsc_params, images[idx], batch_size, noise_dim, seed)
    return dict(fun=objective, args=(gen, dsc, 0), argnum=(0, 1), reset=lambda: seed.seed(0),
                note="argnum=(0, 1), random MNIST-shaped data")


@example
def ex_fixed_points():
    m = load("fixed_points")
    return dict(fun=m.sqrt, args=(2.0,))


@example
def ex_rosenbrock():
    m = load("rosenbrock")
    return dict(fun=m.rosenbrock, args=(onp.array([-1.2, 1.0]),))


@example
def ex_sinusoid():
    m = load("sinusoid")   # the module's final `fun`: the Taylor series with a data-dependent break
    return dict(fun=m.fun, args=(2.5,), note="Taylor-series fun (break on |term| < 0.2)")


@example
def ex_tanh():
    import autograd.numpy as np
    from autograd import elementwise_grad as egrad
    m = load("tanh")
    objective = lambda x: np.sum(egrad(m.tanh)(x))   # grad of this = egrad(egrad(tanh))
    return dict(fun=objective, args=(onp.linspace(-7, 7, 700),), note="sum(egrad(tanh)); grad = 2nd derivative")


@example
def ex_rkhs():
    import autograd.numpy as np
    from autograd import grad
    m = load("rkhs")

    def sq_exp_kernel(x1, x2):
        return np.exp(-((x1 - x2) ** 2))
    xs, ys = range(5), [1, 2, 3, 2, 1]

    def logprob(f, xs, ys):
        return -sum((f(x) - y) ** 2 for x, y in zip(xs, ys))
    f = m.RKHSFun(sq_exp_kernel)
    for i in range(5):
        f = f + grad(logprob)(f, xs, ys) * 0.01
    return dict(fun=logprob, args=(f, xs, ys), note="RKHSFun argument (custom VSpace)")


@example
def ex_natural_gradient_black_box_svi():
    import autograd.numpy as np
    import autograd.scipy.stats.norm as norm
    bb = load("black_box_svi")
    np.random.seed(42)
    obs_dim = 20
    Y = np.random.randn(obs_dim, obs_dim).dot(np.random.randn(obs_dim))

    def log_density(x, t):
        mu, log_sigma = x[:, :obs_dim], x[:, obs_dim:]
        sigma_density = np.sum(norm.logpdf(log_sigma, 0, 1.35), axis=1)
        mu_density = np.sum(norm.logpdf(Y, mu, np.exp(log_sigma)), axis=1)
        return sigma_density + mu_density
    D = obs_dim * 2
    objective, gradient, unpack_params = bb.black_box_variational_inference(log_density, D, num_samples=2000)
    init = np.concatenate([-1 * np.ones(D), -5 * np.ones(D)])
    return dict(fun=objective, args=(init, 0), reset=_bbsvi_reset(objective))


@example
def ex_bayesian_optimization():
    import autograd.numpy as np
    m = load("bayesian_optimization")
    gp = load("gaussian_process")
    example_function = lambda x: np.sum(x * np.sin(10.0 * x) + x) - 1
    D = 1
    num_params, predict, lml = gp.make_gp_funs(gp.rbf_covariance, num_cov_params=D + 1)
    model_params = m.init_covariance_params(num_params) + 0.1
    X = np.array([[0.55], [0.1], [0.9], [0.3]])
    y = np.array([example_function(x) for x in X])

    def predict_func(xstar):
        mean, cov = predict(model_params, X, y, xstar)
        return mean, np.sqrt(np.diag(cov))

    def acquisition_function(xstar):
        xstar = np.atleast_2d(xstar)
        mean, std = predict_func(xstar)
        return m.expected_new_max(mean, std, m.defaultmax(y))
    objective = lambda x: -acquisition_function(x)
    return dict(fun=objective, args=(np.array([0.42]),), note="-acquisition_function, 4 observed points")


@example
def ex_hmm_em():
    import autograd.numpy as np
    m = load("hmm_em")
    np.random.seed(0)
    train_inputs, num_outputs = m.build_dataset(os.path.join(examples_dir(), "lstm.py"), max_lines=3)
    init_params = m.initialize_hmm_parameters(20, num_outputs)
    natural_params = list(map(np.log, init_params))
    n = sum(len(s) for s in train_inputs)
    return dict(fun=m.log_partition_function, args=(natural_params, train_inputs),
                note=f"3 lines ({n} chars), 20 states")


# ----- measuring --------------------------------------------------------------------------------------
def to_flat(x):
    from autograd.misc.flatten import flatten
    if hasattr(x, "alphas"):    # rkhs.RKHSFun
        return onp.array([x.alphas[k] for k in sorted(x.alphas)], dtype=float)
    return onp.asarray(flatten(x)[0], dtype=float)


def rel(a, b):
    a, b = to_flat(a), to_flat(b)
    if a.shape != b.shape:
        return float("inf")
    scale = max(onp.max(onp.abs(b)) if b.size else 0.0, 1e-300)
    return float(onp.max(onp.abs(a - b)) / scale) if a.size else 0.0


def run_one(name):
    from autograd import grad
    import autograd_xla
    from autograd_xla import jit_ps
    import timing
    timing.load_jit_ps()  # (its first calls time the example's trace and compile alone)
    spec = EX[name]()
    fun, args, argnum = spec["fun"], spec["args"], spec.get("argnum", 0)
    reset_ex = spec.get("reset")

    def reset():
        onp.random.seed(0)
        if reset_ex:
            reset_ex()
    out = dict(name=name, note=spec.get("note", ""), tol=spec.get("tol", 1e-6), fallback=[], errors={})

    def call(label, f):
        reset()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            t0 = time.perf_counter()
            try:
                r = f(*args)
            except Exception as e:   # noqa: BLE001
                out["errors"][label] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                r = None
            dt = time.perf_counter() - t0
        for w in rec:
            if issubclass(w.category, autograd_xla.FallbackWarning):
                msg = str(w.message).strip().splitlines()
                first = f"[{label}] " + (msg[0] if msg else "")
                if first not in out["fallback"]:
                    out["fallback"].append(first)
        return r, dt

    gfun = grad(fun, argnum)
    v0, _ = call("plain f", fun)
    g0, _ = call("plain grad", gfun)
    jf = jit_ps(fun)
    v1, out["compile_f_s"] = call("jit_ps(f)", jf)
    jg = jit_ps(grad(fun, argnum))
    g1, out["compile_grad_s"] = call("jit_ps(grad)", jg)
    g2, _ = call("grad(jit_ps)", grad(jf, argnum))
    out["rel_value"] = rel(v1, v0) if v1 is not None else None
    out["rel_jit_grad"] = rel(g1, g0) if g1 is not None else None
    out["rel_grad_jit"] = rel(g2, g0) if g2 is not None else None

    def best(f, label):
        return min(call(label, f)[1] for _ in range(5))
    out["t_plain"] = best(gfun, "plain grad")
    if g1 is not None:
        # the program its ladder keeps, with no compile beside the timed calls (fastest of 3
        # right after the first call read neural_net at 0.7x where settled calls give 1.2-1.3x)
        timing.settle(jg, args, limit=20.0)
    out["t_jit"] = best(jg, "jit_ps(grad)") if g1 is not None else None
    return out


# ----- driver & report ----------------------------------------------------------------------------
def fmt_t(t):
    if t is None:
        return "-"
    return f"{t * 1e3:.3g} ms" if t < 1 else f"{t:.3g} s"


def row(r):
    if "skipped" in r:
        return f"| {r['name']} | skipped: {r['skipped']} | | | | |"
    rels = [r.get(k) for k in ("rel_value", "rel_jit_grad", "rel_grad_jit")]
    worst = max((x for x in rels if x is not None), default=None)
    ok = worst is not None and worst <= r["tol"] and not r["errors"]
    agree = ("ok" if ok else "**DIFF**") + " " + "/".join("err" if x is None else f"{x:.1e}" for x in rels)
    if r["errors"]:
        agree += " (" + "; ".join(f"{k}: {v}" for k, v in r["errors"].items())[:160] + ")"
    fb = "no" if not r["fallback"] else "yes: " + r["fallback"][0][:150].replace("|", "\\|")
    sp = f"{r['t_plain'] / r['t_jit']:.1f}x" if r.get("t_jit") else "-"
    name = r["name"] + (f" ({r['note']})" if r["note"] else "")
    return f"| {name} | {agree} | {fb} | {fmt_t(r['t_plain'])} | {fmt_t(r.get('t_jit'))} (1st call {fmt_t(r.get('compile_grad_s'))}) | {sp} |"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated example names")
    p.add_argument("--markdown", help="write the markdown table here")
    p.add_argument("--timeout", type=float, default=180.0, help="per-example limit in seconds")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print("\n@@RESULT@@" + json.dumps(run_one(a.child)), flush=True)
        return
    names = a.only.split(",") if a.only else list(EX)
    for n in names:
        if n not in EX:
            sys.exit(f"unknown example {n!r}; known: {', '.join(EX)}")
    rows, details = [], []
    for n in names:
        t0 = time.time()
        try:
            cp = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", n], capture_output=True,
                                text=True, timeout=a.timeout)
            lines = [ln for ln in cp.stdout.splitlines() if ln.startswith("@@RESULT@@")]
            if lines:
                r = json.loads(lines[-1][len("@@RESULT@@"):])
            else:
                tail = (cp.stderr.strip().splitlines() or ["?"])[-1]
                r = dict(name=n, skipped=f"setup failed: {tail[:200]}")
        except subprocess.TimeoutExpired:
            r = dict(name=n, skipped=f"over the {a.timeout:.0f} s limit")
        r["wall_s"] = time.time() - t0
        rows.append(r)
        print(row(r), f"  [{r['wall_s']:.0f} s]", file=sys.stderr, flush=True)
        for fb in r.get("fallback", []):
            details.append(f"- {n}: {fb}")
        for k, v in r.get("errors", {}).items():
            details.append(f"- {n}: error in {k}: {v}")
    head = ["| example | agreement (rel. diff value / jit_ps(grad) / grad(jit_ps)) | fell back? (cause first line) "
            "| grad plain | jit_ps(grad) (first call, incl. trace+compile) | speedup |", "|---|---|---|---|---|---|"]
    text = "\n".join(head + [row(r) for r in rows])
    if details:
        text += "\n\nFallbacks and errors:\n" + "\n".join(details)
    text += "\n"
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
