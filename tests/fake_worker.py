"""A stand-in GPU worker that speaks the worker protocol, for supervisor tests without a GPU.

The kernel's entry decides what it does: ``hang`` hangs in the second case's check phase,
``die`` exits there, anything else passes every case. ``--no-start`` exits at once.
"""

import json
import os
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main():
    if "--no-start" in sys.argv:
        print("no GPU here", file=sys.stderr)
        return 1
    send({"type": "ready", "device": {"name": "fake", "pid": os.getpid()}})
    for line in sys.stdin:
        request = json.loads(line)
        entry = request["kernel"]["entry"]
        send({"type": "phase", "phase": "compile", "case": ""})
        send({"type": "compiled", "compile": {"ok": True, "log": ""}})
        cases = []
        for index, case in enumerate(request["cases"]):
            send({"type": "phase", "phase": "check", "case": case["name"]})
            if index == 1 and entry == "hang":
                time.sleep(3600)
            if index == 1 and entry == "die":
                print("simulated fatal error", file=sys.stderr)
                os._exit(1)
            result = {"name": case["name"], "role": case["role"], "status": "ok"}
            cases.append(result)
            send({"type": "case", "case": result})
        send({"type": "result", "result": {"status": "ok", "cases": cases, "device": {"pid": os.getpid()}}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
