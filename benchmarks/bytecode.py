"""autograd_xla's modules byte-compiled beside their sources before anything is timed, as pip
does when it installs a package: where PYTHONDONTWRITEBYTECODE is set, a process never writes
the .pyc files it would read, so every fresh process of a benchmark compiled the package's
source again, which an installed package never does (measured with this machine's
PYTHONDONTWRITEBYTECODE=1: `import autograd_xla` 34 -> 11 ms, a first compiled call of a
small gradient 0.20 -> 0.06 s, its "trace" 0.145 -> 0.025 s, most of the difference the first
trace's imports). Imported by the harnesses that time fresh processes (timing.py,
libraries/common.py, lifelines_fits.py, hmm_em_run.py)."""
import compileall
import importlib.util


def compile_package():
    spec = importlib.util.find_spec("autograd_xla")
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            compileall.compile_dir(folder, quiet=2)  # up-to-date files are only stat'ed


compile_package()
