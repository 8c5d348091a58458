"""Patterns met in libraries built on autograd (benchmarks/libraries/: PennyLane, pymanopt,
lifelines), each reduced to numpy and autograd alone: the jitted answer is plain autograd's."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("absent", ["None", "types.ModuleType('jax')"])
def test_a_jax_entry_that_is_not_jax(absent):
    """A None under "jax" in sys.modules is how a test makes jax unimportable (and harnesses
    stand a module in for jax, as pymanopt's examples need); neither has set jaxlib's C++
    states, which jax's config sets when jax is imported: taken for jax, every call raised
    "ValueError: disable_jit_state is not set"."""
    code = f"""
import sys, types
sys.modules["jax"] = {absent}
import autograd.numpy as np
from autograd import grad
from autograd_xla import jit_ps
f = jit_ps(grad(lambda w: np.sum(np.tanh(w) ** 2)))
x = np.linspace(-1.0, 1.0, 5)
for _ in range(3):
    out = f(x)
assert np.allclose(out, 2 * np.tanh(x) / np.cosh(x) ** 2, rtol=1e-12, atol=0), out
assert f(x).dtype == np.float64
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith("ok")
