"""By hand: PennyLane's tutorial workloads under the recipes a new user of jit_ps would try.

Eight workloads, written as PennyLane's tutorials write them (`pennylane.numpy` tensors with
`requires_grad`, `default.qubit`, its optimisers), each under six recipes:

    1 jit_ps(cost)                 4 qml.grad(jit_ps(cost))
    2 jit_ps(qml.grad(cost))       5 opt.step(jit_ps(cost), *args)
    3 jit_ps(autograd.grad(cost))  6 opt.step(cost, *args, grad_fn=jit_ps(autograd.grad(cost)))

(`qml.jacobian` / `autograd.jacobian` for the vector-valued `jacobian_probs`, which has no
optimiser: 4 recipes; 46 combinations in all). Each is judged against the same call without
jit_ps: compiled, fell back (the FallbackWarning's cause), failed (the exception) or WRONG (a
result plain PennyLane does not give). Then each workload's plain calls and each compiled
recipe are timed, each contender in a process of its own, the processes interleaved over
--rounds: a whole short optimisation (--steps optimiser steps from a fresh process, so the
first call's trace and compile are included; jit_ps's default: tiered) and the steady per-call time (compiled).

    PYTHONPATH=<worktree> <pennylane venv>/bin/python benchmarks/libraries/pennylane_recipes.py \
        [--only vqe_sel,...] [--recipes 1,2,...] [--no-timing] [--no-calls] [--rounds 2] [--steps 30] [--json out.json]
"""
import argparse
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

RECIPES = {
    1: "jit_ps(cost)",
    2: "jit_ps(qml.grad(cost))",
    3: "jit_ps(autograd.grad(cost))",
    4: "qml.grad(jit_ps(cost))",
    5: "opt.step(jit_ps(cost))",
    6: "opt.step(cost, grad_fn=jit_ps(autograd.grad(cost)))",
}


class Workload:
    """cost(*args); `argnum`: the trainable positions (requires_grad=True); `opt`: a fresh
    optimiser, None for a vector-valued cost (no optimiser step, recipes 5 and 6 n/a)."""

    def __init__(self, cost, args, argnum, opt, kwargs=None):
        self.cost, self.args, self.argnum, self.opt = cost, tuple(args), tuple(argnum), opt
        self.kwargs = kwargs or {}  # data passed by keyword, as opt.step(cost, w, b, X=X, Y=Y)

    @property
    def vector(self):
        return self.opt is None


def vqe_doubles():
    """H2 in a minimal basis: Hartree-Fock state, one DoubleExcitation (the VQE tutorial)."""
    import pennylane as qml
    from pennylane import numpy as np
    X, Y, Z, I = qml.PauliX, qml.PauliY, qml.PauliZ, qml.Identity
    coeffs = [-0.0996, 0.1711, 0.1711, -0.2225, -0.2225, 0.1686, 0.1205, 0.1658, 0.1658, 0.1205, 0.1743,
              0.0453, -0.0453, -0.0453, 0.0453]
    ops = [I(0), Z(0), Z(1), Z(2), Z(3), Z(0) @ Z(1), Z(0) @ Z(2), Z(0) @ Z(3), Z(1) @ Z(2), Z(1) @ Z(3), Z(2) @ Z(3),
           Y(0) @ Y(1) @ X(2) @ X(3), Y(0) @ X(1) @ X(2) @ Y(3), X(0) @ Y(1) @ Y(2) @ X(3), X(0) @ X(1) @ Y(2) @ Y(3)]
    H = qml.Hamiltonian(coeffs, ops)
    hf = np.array([1, 1, 0, 0], requires_grad=False)
    dev = qml.device("default.qubit", wires=4)

    @qml.qnode(dev, diff_method="backprop")
    def circuit(param):
        qml.BasisState(hf, wires=range(4))
        qml.DoubleExcitation(param, wires=[0, 1, 2, 3])
        return qml.expval(H)

    return Workload(circuit, [np.array(0.0, requires_grad=True)], [0],
                    lambda: qml.GradientDescentOptimizer(stepsize=0.4))


def vqe_layers(diff_method="backprop"):
    """A hardware-efficient VQE: StronglyEntanglingLayers against a transverse-field Ising
    Hamiltonian."""
    import pennylane as qml
    from pennylane import numpy as np
    wires = 4 if diff_method == "backprop" else 2
    terms = [qml.PauliZ(i) @ qml.PauliZ(i + 1) for i in range(wires - 1)] + [qml.PauliX(i) for i in range(wires)]
    H = qml.Hamiltonian([1.0] * (wires - 1) + [0.5] * wires, terms)
    dev = qml.device("default.qubit", wires=wires)

    @qml.qnode(dev, diff_method=diff_method)
    def cost(weights):
        qml.StronglyEntanglingLayers(weights, wires=range(wires))
        return qml.expval(H)

    shape = qml.StronglyEntanglingLayers.shape(n_layers=2, n_wires=wires)
    np.random.seed(0)
    return Workload(cost, [np.random.uniform(0, 2 * np.pi, size=shape, requires_grad=True)], [0],
                    lambda: qml.GradientDescentOptimizer(stepsize=0.1))


def vqe_param_shift():
    """The same VQE, differentiated by the parameter-shift rule (hardware-compatible)."""
    return vqe_layers("parameter-shift")


def qaoa_maxcut():
    """QAOA for MaxCut on a 4-node graph, p=2, trained with Adagrad (the QAOA tutorial)."""
    import pennylane as qml
    from pennylane import numpy as np
    graph = [(0, 1), (0, 3), (1, 2), (2, 3)]
    n_wires, p = 4, 2
    dev = qml.device("default.qubit", wires=n_wires)
    C = qml.Hamiltonian([0.5] * len(graph), [qml.PauliZ(i) @ qml.PauliZ(j) for i, j in graph])

    def U_B(beta):
        for wire in range(n_wires):
            qml.RX(2 * beta, wires=wire)

    def U_C(gamma):
        for edge in graph:
            qml.CNOT(wires=edge)
            qml.RZ(gamma, wires=edge[1])
            qml.CNOT(wires=edge)

    @qml.qnode(dev, diff_method="backprop")
    def circuit(params):
        for wire in range(n_wires):
            qml.Hadamard(wires=wire)
        for i in range(p):
            U_C(params[0][i])
            U_B(params[1][i])
        return qml.expval(C)

    def objective(params):
        return circuit(params) - len(graph) / 2  # minus the expected cut size

    return Workload(objective, [0.01 * np.array([[0.5, 1.0], [0.8, 0.3]], requires_grad=True)], [0],
                    lambda: qml.AdagradOptimizer(stepsize=0.5))


def reuploading_adam():
    """A one-qubit data re-uploading classifier (Pérez-Salinas et al.), trained with Adam."""
    import pennylane as qml
    from pennylane import numpy as np
    dev = qml.device("default.qubit", wires=1)
    np.random.seed(1)
    X = np.random.uniform(-1, 1, size=(8, 3), requires_grad=False)
    Y = np.array([1, -1, 1, 1, -1, -1, 1, -1], requires_grad=False)

    @qml.qnode(dev, diff_method="backprop")
    def qcircuit(params, x):
        for p in params:
            qml.Rot(*x, wires=0)
            qml.Rot(*p, wires=0)
        return qml.expval(qml.PauliZ(0))

    def cost(params, x, y):
        loss = 0.0
        for i in range(len(x)):
            loss = loss + (qcircuit(params, x[i]) - y[i]) ** 2
        return loss / len(x)

    return Workload(cost, [np.random.uniform(size=(3, 3), requires_grad=True), X, Y], [0],
                    lambda: qml.AdamOptimizer(stepsize=0.6))


def variational_classifier():
    """The parity classifier of the variational-classifier tutorial: BasisState encoding, Rot
    layers with a CNOT ring, a bias; square loss; Nesterov momentum."""
    import pennylane as qml
    from pennylane import numpy as np
    dev = qml.device("default.qubit", wires=4)
    X = np.array([[0, 0, 0, 1], [0, 1, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 1, 0, 1]],
                 requires_grad=False)
    Y = np.array([1, -1, 1, -1, 1, 1], requires_grad=False)  # (-1)**parity

    def layer(layer_weights):
        for wire in range(4):
            qml.Rot(*layer_weights[wire], wires=wire)
        for wires in ([0, 1], [1, 2], [2, 3], [3, 0]):
            qml.CNOT(wires)

    @qml.qnode(dev, diff_method="backprop")
    def circuit(weights, x):
        qml.BasisState(x, wires=[0, 1, 2, 3])
        for layer_weights in weights:
            layer(layer_weights)
        return qml.expval(qml.PauliZ(0))

    def variational_classifier(weights, bias, x):
        return circuit(weights, x) + bias

    def square_loss(labels, predictions):
        # The tutorial's `labels - qml.math.stack(predictions)` raises under plain autograd
        # with numpy 2.4 (pennylane's tensor answers an ArrayBox with NotImplemented): the box first.
        return np.mean((qml.math.stack(predictions) - labels) ** 2)

    def cost(weights, bias, X, Y):
        predictions = [variational_classifier(weights, bias, x) for x in X]
        return square_loss(Y, predictions)

    np.random.seed(0)
    weights = 0.01 * np.random.randn(2, 4, 3, requires_grad=True)
    bias = np.array(0.0, requires_grad=True)
    return Workload(cost, [weights, bias], [0, 1], lambda: qml.NesterovMomentumOptimizer(0.5), dict(X=X, Y=Y))


def jacobian_probs():
    """qml.jacobian of a QNode returning qml.probs (vector-valued: no optimiser)."""
    import pennylane as qml
    from pennylane import numpy as np
    dev = qml.device("default.qubit", wires=2)

    @qml.qnode(dev, diff_method="backprop")
    def circuit(params):
        qml.RX(params[0], wires=0)
        qml.RY(params[1], wires=1)
        qml.CNOT(wires=[0, 1])
        qml.RX(params[2], wires=1)
        return qml.probs(wires=[0, 1])

    return Workload(circuit, [np.array([0.1, 0.2, 0.3], requires_grad=True)], [0], None)


def broadcast_classifier():
    """A classifier run on the whole batch at once by parameter broadcasting: AngleEmbedding of
    a (batch, features) array, StronglyEntanglingLayers, square loss."""
    import pennylane as qml
    from pennylane import numpy as np
    dev = qml.device("default.qubit", wires=2)
    np.random.seed(2)
    X = np.random.uniform(-np.pi, np.pi, size=(16, 2), requires_grad=False)
    Y = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    Y.requires_grad = False

    @qml.qnode(dev, diff_method="backprop")
    def circuit(weights, x):
        qml.AngleEmbedding(x, wires=[0, 1])
        qml.StronglyEntanglingLayers(weights, wires=[0, 1])
        return qml.expval(qml.PauliZ(0))

    def cost(weights, X, Y):
        return np.mean((circuit(weights, X) - Y) ** 2)

    shape = qml.StronglyEntanglingLayers.shape(n_layers=2, n_wires=2)
    return Workload(cost, [np.random.uniform(0, np.pi, size=shape, requires_grad=True), X, Y], [0],
                    lambda: qml.GradientDescentOptimizer(stepsize=0.2))


WORKLOADS = {f.__name__: f for f in (vqe_doubles, vqe_layers, qaoa_maxcut, reuploading_adam, variational_classifier,
                                      jacobian_probs, vqe_param_shift, broadcast_classifier)}


def applicable(w):
    return [1, 2, 3, 4] if w.vector else [1, 2, 3, 4, 5, 6]


def step(opt, f, args, kwargs, grad_fn=None):
    """One optimiser step; the new arguments as a tuple (opt.step returns one array for one)."""
    new = opt.step(f, *args, grad_fn=grad_fn, **kwargs)
    return tuple(new) if len(args) > 1 else (new,)


def made(w, recipe, tiered=False):
    """The callable a user writes for `recipe`, its plain counterpart, and the JittedFunctions
    made (for their cache_info). Each call makes them afresh. `tiered`: jit_ps's (False:
    compiled at the first call, as the verdicts and per-call times need; None: its default,
    as a user's whole optimisation gets)."""
    import functools

    import autograd
    import pennylane as qml

    from autograd_xla import jit_ps
    jit_ps = functools.partial(jit_ps, tiered=tiered)
    qgrad = qml.jacobian if w.vector else qml.grad
    agrad = autograd.jacobian if w.vector else autograd.grad
    argnum = w.argnum[0] if len(w.argnum) == 1 else w.argnum
    cost = w.cost
    if recipe == 1:
        j = jit_ps(cost)
        return j, cost, [j]
    if recipe == 2:
        j = jit_ps(qgrad(cost))
        return j, qgrad(cost), [j]
    if recipe == 3:
        j = jit_ps(agrad(cost, argnum))
        return j, agrad(cost, argnum), [j]
    if recipe == 4:
        j = jit_ps(cost)
        return qgrad(j), qgrad(cost), [j]
    if recipe == 5:
        j = jit_ps(cost)
        opt, plain_opt = w.opt(), w.opt()
        return (lambda *a, **k: step(opt, j, a, k)), (lambda *a, **k: step(plain_opt, cost, a, k)), [j]
    if recipe == 6:
        j = jit_ps(agrad(cost, argnum))
        opt, plain_opt = w.opt(), w.opt()
        return (lambda *a, **k: step(opt, cost, a, k, grad_fn=j)), (lambda *a, **k: step(plain_opt, cost, a, k)), [j]
    raise ValueError(recipe)


def judge_workload(name, recipes):
    w = WORKLOADS[name]()
    rows = []
    for r in recipes:
        if r not in applicable(w):
            continue
        jitted_call, plain_call, jitted = made(w, r)
        verdict = common.judge(lambda: plain_call(*w.args, **w.kwargs), lambda: jitted_call(*w.args, **w.kwargs), jitted)
        verdict.update(workload=name, recipe=r)
        rows.append(verdict)
    return rows


def time_contender(name, recipe, steps, calls=True):
    """In this fresh process: recipe 0 is plain PennyLane (its optimisation, and each plain
    counterpart per call); otherwise the recipe. The optimisation runs first so that its first
    step carries the trace and compile; `calls`: then the per-call times (compiled at the first
    call)."""
    import time
    w = WORKLOADS[name]()
    out = {}
    if not w.vector and recipe != 1:
        grad_fn = None
        f = w.cost
        if recipe in (2, 3, 4, 6):
            jitted_call, _, _ = made(w, recipe if recipe != 6 else 3, tiered=None)
            grad_fn = jitted_call
        elif recipe == 5:
            from autograd_xla import jit_ps
            f = jit_ps(w.cost)  # jit_ps's default: tiered
        opt, args, times = w.opt(), w.args, []
        for _ in range(steps):
            t0 = time.perf_counter()
            args = step(opt, f, args, w.kwargs, grad_fn=grad_fn)
            times.append(time.perf_counter() - t0)
        out.update(optimisation=sum(times), first_step=times[0])
    for r in ([1, 2, 3, 5] if recipe == 0 else [recipe]) if calls else ():
        if r not in applicable(w):
            continue
        jitted_call, plain_call, _ = made(w, r)
        call = plain_call if recipe == 0 else jitted_call
        t0 = time.perf_counter()
        call(*w.args, **w.kwargs)
        out[f"first_{r}"] = time.perf_counter() - t0
        out[f"call_{r}"] = common.per_call(lambda: call(*w.args, **w.kwargs))
    return out


def plain_key(r):
    """Recipe 4's plain counterpart is qml.grad(cost) (recipe 2's), recipe 6's an opt.step (5's)."""
    return {4: 2, 6: 5}.get(r, r)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(WORKLOADS))
    parser.add_argument("--recipes", default="1,2,3,4,5,6")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--time-all", action="store_true", help="time fallen-back recipes too")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--no-calls", action="store_true", help="time the optimisations alone, not the calls")
    parser.add_argument("--json")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        warnings.simplefilter("ignore")
        kind, name, *rest = args.worker
        if kind == "judge":
            print(json.dumps(judge_workload(name, [int(r) for r in rest[0].split(",")])))
        else:
            print(json.dumps(time_contender(name, int(rest[0]), int(rest[1]), calls=rest[2:] != ["nocalls"])))
        return
    import pennylane as qml
    names, recipes = args.only.split(","), [int(r) for r in args.recipes.split(",")]
    print(f"PennyLane {qml.__version__}; {common.under_test()}; {common.load()}\n")
    verdicts = []
    for name in names:
        rows = common.worker(__file__, "judge", name, args.recipes)
        if "error" in rows:
            rows = [{"workload": name, "recipe": r, "status": "failed", "cause": "harness: " + rows["error"]}
                    for r in recipes]
        verdicts += rows
    print("| workload | " + " | ".join(f"{r} {RECIPES[r]}" for r in recipes) + " |")
    print("|---|" + "---|" * len(recipes))
    for name in names:
        cells = {v["recipe"]: v for v in verdicts if v["workload"] == name}
        print(f"| {name} | " + " | ".join(
            (cells[r]["status"] if r in cells else "n/a") for r in recipes) + " |")
    counts = common.tally(verdicts)
    print(f"\n{len(verdicts)} combinations: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    print("\ncauses:")
    for cause, n in common.causes(verdicts).items():
        print(f"  {n:3d}  {cause}")
    timings = {}
    if not args.no_timing:
        print(f"\nspeed (median over {args.rounds} interleaved rounds, each contender a fresh process; "
              f"optimisation = {args.steps} optimiser steps, first call included; {common.load()})\n")
        print("| workload | recipe | plain call | jitted call | speed-up | plain optimisation | jitted optimisation"
              " (first step) | speed-up |")
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for name in names:
            chosen = [v["recipe"] for v in verdicts if v["workload"] == name and
                      (v["status"] == "compiled" or args.time_all and v["status"] == "fell back")]
            if not chosen:
                continue
            tail = ["nocalls"] if args.no_calls else []
            contenders = {0: ["time", name, "0", str(args.steps)] + tail}
            contenders.update({r: ["time", name, str(r), str(args.steps)] + tail for r in chosen})
            samples = common.interleaved(__file__, contenders, args.rounds)
            timings[name] = samples
            plain = samples[0]
            for r in chosen:
                s = samples[r]
                errors = [x["error"] for x in s + plain if "error" in x]
                if errors:
                    print(f"| {name} | {r} | error: {errors[0]} | | | | | |")
                    continue
                pc, jc = common.median_of(plain, f"call_{plain_key(r)}"), common.median_of(s, f"call_{r}")
                po, jo = common.median_of(plain, "optimisation"), common.median_of(s, "optimisation")
                first = common.median_of(s, "first_step")
                opt_cells = (f"{common.fmt(po)} | {common.fmt(jo)} ({common.fmt(first)}) | {common.ratio(po, jo)}"
                             if jo is not None else "– | – | –")
                print(f"| {name} | {r} | {common.fmt(pc)} | {common.fmt(jc)} | {common.ratio(pc, jc)} | {opt_cells} |",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"verdicts": verdicts, "timings": timings}, f, indent=1)


if __name__ == "__main__":
    main()
