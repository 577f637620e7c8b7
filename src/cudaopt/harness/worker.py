"""The worker process: one GPU, JSON requests in on stdin, JSON messages out on stdout.

Started by the supervisor as ``python -m cudaopt.harness.worker`` with ``CUDA_VISIBLE_DEVICES``
pinned. Anything else that writes to stdout (the user's reference, a library) is redirected to
stderr so it cannot corrupt the message stream. Messages, one JSON object per line:

- ``{"type": "ready", "device": {...}}`` once the GPU is initialised and its peaks are known
  (read from the cache, or measured the first time: harness/peaks.py);
- ``{"type": "phase", "phase": "compile" | "check" | "timing", "case": NAME}`` as a request
  progresses (the supervisor applies that phase's timeout);
- ``{"type": "compiled", ...}`` and ``{"type": "case", ...}`` as partial results, so that what
  finished survives a hang or a crash later in the request;
- ``{"type": "result", "result": {...}}`` when a request is done.

A line ``{"prefetch": [KernelSpec, ...]}`` instead of a request asks the worker to start
compiling those kernels in the background (a sweep sends its configurations up front); it gets
no answer.

After a sticky CUDA error the worker sends its result and exits; the supervisor replaces it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

EXIT_RETIRED = 3


def main() -> int:
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def send(message: dict) -> None:
        channel.write(json.dumps(message, allow_nan=True) + "\n")
        channel.flush()

    from .gpu import Gpu
    from .peaks import identity, load, load_or_measure
    from .protocol import EvalRequest, EvalResult, KernelSpec, from_dict, to_dict
    from .runner import Runner

    try:
        gpu = Gpu(0)
    except Exception as exc:
        send({"type": "fatal", "message": f"cannot initialise the GPU: {exc}"})
        return 1
    try:
        # a profiled worker (CUDAOPT_MEASURE_PEAKS=0) only reads the cache: figures measured under a
        # profiler would be cached for every later run
        measure = os.environ.get("CUDAOPT_MEASURE_PEAKS", "1") != "0"
        gpu.measured = load_or_measure(gpu) if measure else load(identity(gpu))
    except Exception as exc:  # the roofline falls back to the spec peaks
        print(f"peaks not measured: {exc.__class__.__name__}: {exc}", file=sys.stderr)
    runner = Runner(gpu, on_event=send)
    send({"type": "ready", "device": gpu.info()})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
            if "prefetch" in message:  # kernels to compile ahead; no answer
                runner.prefetch([from_dict(KernelSpec, k) for k in message["prefetch"]])
                continue
            request = from_dict(EvalRequest, message)
            result = runner.evaluate(request)
        except Exception as exc:
            result = EvalResult(status="internal_error", reason=f"{exc.__class__.__name__}: {exc}")
            traceback.print_exc()
            if not gpu.context_alive():  # whatever failed, a context that no longer answers is retired
                result.status, runner.launcher.dead = "crashed", True
        send({"type": "result", "result": to_dict(result)})
        if runner.dead:
            return EXIT_RETIRED
    return 0


if __name__ == "__main__":
    sys.exit(main())
