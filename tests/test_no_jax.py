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


def test_using_the_package_does_not_import_jax():
    """Not even through jaxlib, whose ArrayImpl.unsafe_buffer_pointer() and
    _single_device_array_to_np_array_did_copy() import jax where it is installed: every
    attempt to import it is recorded (and refused), installed or not, over calls of the
    Python path, of C++'s fast path and of its staged arguments."""
    code = """
import importlib.abc, sys
attempts = []
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "jax" or name.startswith("jax."):
            attempts.append(name)
            raise ImportError("refused: " + name)
sys.meta_path.insert(0, Refuse())
import autograd.numpy as np
from autograd import grad
from autograd_xla import jit_ps, tiering
tiering.UPGRADE_RENT = None  # one program: C++ takes the calls from the second on
f = jit_ps(grad(lambda w: np.sum(np.tanh(w) ** 2)))
for k in range(6):
    out = f(np.ones(3) * k)
assert out.shape == (3,) and f.cache_info()["hits"] == 5
big = jit_ps(lambda x: x * 2.0)(np.ones(100000))
assert not attempts, attempts
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("ok")
