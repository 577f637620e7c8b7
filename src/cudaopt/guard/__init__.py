"""The kernel regression guard (``cudaopt guard``): a kernel's figures recorded once in a guard
file, then every change checked against them or, better, against the old kernel measured
interleaved in the same worker (docs/guard.md)."""
