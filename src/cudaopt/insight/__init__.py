"""The agent's instruments: Nsight Compute bottleneck cards and summaries of the compiled code.

Nothing here ever times a kernel for the score: profiles run in their own ``ncu`` process and
their durations are evidence for the model, never latencies.
"""
