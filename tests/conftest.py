import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# Four CPU devices for the whole test run (pmap, collectives); single-device programs run on the
# first and cost the same. Set before the CPU client starts; a run may choose another count.
os.environ.setdefault("AUTOGRAD_XLA_CPU_DEVICES", "4")

import autograd_xla  # noqa: E402 (after the device count: the CPU client starts on first use, not here)


@pytest.fixture
def on_the_cpu():
    """The CPU as the default platform for one test, whatever the run's default: for the
    features of the CPU runtime (BLAS's custom calls, arguments read in place, C++'s call path,
    the ladder's CPU programs, pmap over the CPU devices). benchmarks/gpu_check.sh runs the
    suite with a GPU as the default, where these tests failed for want of the feature."""
    autograd_xla.set_default_platform("cpu")
    yield
    autograd_xla.set_default_platform(None)
