from setuptools import Extension, setup

# blas.py's FFI handlers in C (autograd_xla/_blas.c). Optional: without a C compiler the
# package installs without it and blas.py's Python handlers run instead.
setup(ext_modules=[Extension("autograd_xla._blas", ["autograd_xla/_blas.c"], optional=True,
                             extra_compile_args=["-O2"])])
