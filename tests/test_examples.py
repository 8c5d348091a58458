"""The README demo runs, and its three trainings (plain, jit_ps tiered and compiled at once) agree."""
import os
import re
import subprocess
import sys

DEMO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "demo.py")


def test_demo_runs_and_its_trainings_agree():
    out = subprocess.run([sys.executable, DEMO, "--iters", "10", "--samples", "50"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    gaps = re.findall(r"gradient at the start ([0-9.e+-]+), loss curves ([0-9.e+-]+)", out)
    assert len(gaps) == 2 and out.count("speed-up") == 2 and out.count("compiled at the first call") == 2, out
    for start, curves in gaps:
        assert float(start) < 1e-12 and float(curves) < 1e-6, out
