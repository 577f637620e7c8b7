"""cudaopt: turn a workload description into a fast CUDA kernel you can trust."""

__version__ = "0.1.0"
