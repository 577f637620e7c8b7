"""The worker process: one GPU, JSON requests in on stdin, JSON messages out on stdout.

Started by the supervisor as ``python -m cudaopt.harness.worker`` with ``CUDA_VISIBLE_DEVICES``
pinned. Anything else that writes to stdout (the user's reference, a library) is redirected to
stderr so it cannot corrupt the message stream. Messages, one JSON object per line:

- ``{"type": "ready", "device": {...}}`` once the GPU is initialised;
- ``{"type": "phase", "phase": "compile" | "check" | "timing", "case": NAME}`` as a request
  progresses (the supervisor applies that phase's timeout);
- ``{"type": "compiled", ...}`` and ``{"type": "case", ...}`` as partial results, so that what
  finished survives a hang or a crash later in the request;
- ``{"type": "result", "result": {...}}`` when a request is done.

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
    from .protocol import EvalResult, request_from_json, to_dict
    from .runner import Runner

    try:
        gpu = Gpu(0)
    except Exception as exc:
        send({"type": "fatal", "message": f"cannot initialise the GPU: {exc}"})
        return 1
    runner = Runner(gpu, on_event=send)
    send({"type": "ready", "device": gpu.info()})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = request_from_json(line)
            result = runner.evaluate(request)
        except Exception as exc:
            result = EvalResult(status="internal_error", reason=f"{exc.__class__.__name__}: {exc}")
            traceback.print_exc()
        send({"type": "result", "result": to_dict(result)})
        if runner.dead:
            return EXIT_RETIRED
    return 0


if __name__ == "__main__":
    sys.exit(main())
