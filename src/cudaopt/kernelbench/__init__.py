"""KernelBench problems as cudaopt experiments (importer.py), and KernelBench's metrics over runs (metrics.py)."""
