"""cudaopt: turn a workload description into a fast CUDA kernel you can trust.

The one door is :mod:`cudaopt.api` (docs/api.md): ``from cudaopt import api``, or ``cudaopt.api``
after ``import cudaopt``; the command line is a shell over it. It is loaded on first use, so
``import cudaopt`` stays fast and needs no GPU. The other modules are the core the API calls.
"""

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "api":
        import importlib

        return importlib.import_module(".api", __name__)
    raise AttributeError(f"module 'cudaopt' has no attribute {name!r}")
