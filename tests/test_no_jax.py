"""The package never imports jax: jaxlib is only the compiler and runtime."""
import ast
import importlib.util
import os
import subprocess
import sys

import pytest

PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "autograd_xla")


def test_no_jax_import_statements_in_package():
    offenders = []
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                for node in ast.walk(ast.parse(open(path).read(), path)):
                    mods = []
                    if isinstance(node, ast.Import):
                        mods = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                        mods = [node.module]
                    offenders += [f"{path}:{node.lineno}: {m}" for m in mods if m == "jax" or m.startswith("jax.")]
    assert not offenders, offenders


@pytest.mark.skipif(importlib.util.find_spec("jax") is not None,
                    reason="jax is installed here; jaxlib itself imports it when present (see README)")
def test_using_the_package_does_not_import_jax():
    code = """
import sys
import autograd.numpy as np
from autograd import grad
from autograd_xla import jit_ps
f = jit_ps(grad(lambda w: np.sum(np.tanh(w) ** 2)))
out = f(np.ones(3))
assert out.shape == (3,)
assert not any(m == "jax" or m.startswith("jax.") for m in sys.modules), [m for m in sys.modules if "jax" in m]
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
