"""A stand-in GPU worker that speaks the worker protocol, for supervisor tests without a GPU.

The kernel's entry decides what it does: ``hang`` hangs in the second case's check phase,
``die`` exits there, anything else passes every case (with the request's vendors timed on the
performance cases). Each result's ``device.pci_bus_id`` names the worker's pid (``fake:PID``);
its ``reason`` counts the kernels prefetched so far (``prefetched N``).
``--no-start`` exits at once.
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
    device = {"name": "fake", "pci_bus_id": f"fake:{os.getpid()}"}
    send({"type": "ready", "device": device})
    prefetched = 0
    for line in sys.stdin:
        request = json.loads(line)
        if "prefetch" in request:  # never answered, counted in the next result
            prefetched += len(request["prefetch"])
            continue
        entry = (request["kernel"] or {}).get("entry", "")
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
            if case["role"] == "performance":
                timing = {"median_us": 7.0, "mean_us": 7.1, "stdev_us": 0.2, "min_us": 6.8, "max_us": 7.9,
                          "p10_us": 6.9, "p90_us": 7.4, "n": 100, "method": "fake"}
                result["vendors"] = [{"label": v["label"], "status": "ok", "timing": timing}
                                     for v in request.get("vendors", [])]
            cases.append(result)
            send({"type": "case", "case": result})
        send({"type": "result", "result": {"status": "ok", "cases": cases, "device": device,
                                           "reason": f"prefetched {prefetched}"}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
