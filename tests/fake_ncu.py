"""A stand-in for Nsight Compute's ``ncu``, for profiling tests without a GPU.

Called as ``ncu [options] python -m cudaopt.worker.main``: it reads the request from stdin,
writes the CSV named by ``$FAKE_NCU_CSV`` to the ``--log-file`` and answers like a worker whose
check passed. ``$FAKE_NCU_MODE``: ``denied`` writes ncu's ERR_NVGPUCTRPERM error instead,
``mismatch`` answers with a failed check, ``hang`` sleeps. Every call's arguments are appended to
``$FAKE_NCU_CALLS`` (one JSON list a line).
"""

import json
import os
import sys
import time
from pathlib import Path

DENIED = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
          "on the target device 0. For instructions on enabling permissions and to get more information see "
          "https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")


def main():
    args = sys.argv[1:]
    with open(os.environ["FAKE_NCU_CALLS"], "a") as fh:
        fh.write(json.dumps(args) + "\n")
    request = json.loads(sys.stdin.readline())
    mode = os.environ.get("FAKE_NCU_MODE", "")
    if mode == "hang":
        time.sleep(3600)
    log = args[args.index("--log-file") + 1]
    Path(log).write_text(DENIED if mode == "denied" else Path(os.environ["FAKE_NCU_CSV"]).read_text())
    status = "mismatch" if mode == "mismatch" else "ok"
    cases = [{"name": c["name"], "role": c["role"], "status": status} for c in request["cases"]]
    print(json.dumps({"type": "ready", "device": {"name": "fake"}}))
    print(json.dumps({"type": "result", "result": {"status": status, "reason": "c: 3 wrong" if status != "ok" else "",
                                                   "cases": cases}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
