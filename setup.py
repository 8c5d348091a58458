from setuptools import Extension, setup

# memory.py's numpy memory handler (autograd_xla/_aligned.c), blas.py's FFI handlers
# (autograd_xla/_blas.c) and dispatch.py's per-call work (autograd_xla/_callpath.c) in C. Optional: without a C compiler the package installs
# without them and the Python code they stand in for runs instead.
setup(ext_modules=[Extension(f"autograd_xla.{name}", [f"autograd_xla/{name}.c"], optional=True,
                             extra_compile_args=["-O2"]) for name in ("_aligned", "_blas", "_callpath")])
