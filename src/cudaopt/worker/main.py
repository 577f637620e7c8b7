"""The worker process: one GPU, JSON orders in on stdin (a request, or kernels to compile ahead),
JSON messages out on stdout.

Started as ``python -m cudaopt.worker.main`` with ``CUDA_VISIBLE_DEVICES`` pinned, by the
supervisor (pool/supervisor.py), by a Ray actor (pool/ray_cluster.py) or under compute-sanitizer.
Anything else that writes to stdout (the user's reference, a library) is redirected to stderr so
it cannot corrupt the message stream. The messages are declared in wire/messages.py. The
device's peaks are read from the cache, or measured the first time (peaks.py; not under a
profiler, ``CUDAOPT_MEASURE_PEAKS=0``), before ``ready``. A request that fails unexpectedly is an
``internal_error`` result; once the context is lost (a sticky CUDA error) the worker sends its
result and exits with ``EXIT_RETIRED``, and its lane starts a fresh one.
"""

from __future__ import annotations

import os
import sys
import traceback

EXIT_RETIRED = 3


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from ..wire.messages import Done, Fatal, Prefetch, Ready, read_order
    from ..wire.results import EvalResult
    from .gpu import Gpu
    from .peaks import identity, load, load_or_measure
    from .runner import Runner

    def send(message) -> None:
        channel.write(message.to_json() + "\n")
        channel.flush()

    try:
        gpu = Gpu(0)
    except Exception as exc:
        send(Fatal(message=f"cannot initialise the GPU: {exc}"))
        return 1
    try:
        # a profiled worker (CUDAOPT_MEASURE_PEAKS=0) only reads the cache: figures measured under a
        # profiler would be cached for every later run
        measure = os.environ.get("CUDAOPT_MEASURE_PEAKS", "1") != "0"
        gpu.measured = load_or_measure(gpu) if measure else load(identity(gpu))
    except Exception as exc:  # the roofline falls back to the spec peaks
        print(f"peaks not measured: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    runner = Runner(gpu, on_event=send)
    send(Ready(device=gpu.info()))
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            order = read_order(line)
            if isinstance(order, Prefetch):  # kernels to compile ahead; no answer
                runner.prefetch(order.prefetch)
                continue
            result = runner.evaluate(order)
        except Exception as exc:
            result = EvalResult(status="internal_error", reason=f"{exc.__class__.__name__}: {exc}")
            traceback.print_exc()
            if not gpu.context_alive():  # whatever failed, a context that no longer answers is retired
                result.status, runner.launcher.dead = "crashed", True
        send(Done(result=result))
        if runner.dead:
            return EXIT_RETIRED
    return 0


if __name__ == "__main__":
    from ..compilekit import lifeline

    lifeline.hold()
    sys.exit(main())
