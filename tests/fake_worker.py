"""A stand-in GPU worker that speaks the worker protocol, for supervisor tests without a GPU.

The kernel's entry decides what it does: ``hang`` hangs in the second case's check phase,
``die`` exits there, ``environ`` names the variables it sees in its reason, ``sleep`` sleeps
``MS`` milliseconds (a define) in its first case; anything else passes every case (with the
request's vendors timed on the performance cases). Every timed case gets a median of
``10 * (1 + T)`` µs (``T`` a define, default 0), and as many checked launches as its protocol says.

Each result's ``device.pci_bus_id`` names the worker's pid (``fake:PID``); its ``reason``
counts the kernels prefetched so far (``prefetched N``). The device's name is ``fake``, or
what ``CUDAOPT_FAKE_GPU_NAMES`` (``0=fake-a,1=fake-b``) gives for the worker's
``CUDA_VISIBLE_DEVICES``. With ``CUDAOPT_FAKE_TRACE`` set, every request appends
``GPU start|end MONOTONIC_S`` lines to that file. ``--no-start`` exits at once, and so does a
worker whose ``CUDA_VISIBLE_DEVICES`` is a line of the file ``CUDAOPT_FAKE_BROKEN`` names.
"""

import json
import os
import sys
import time


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def trace(what):
    path = os.environ.get("CUDAOPT_FAKE_TRACE")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES', '?')} {what} {time.monotonic():.6f}\n")


def gpu_name():
    names = dict(p.split("=", 1) for p in os.environ.get("CUDAOPT_FAKE_GPU_NAMES", "").split(",") if "=" in p)
    return names.get(os.environ.get("CUDA_VISIBLE_DEVICES", ""), "fake")


def stats(median):
    return {"median_us": median, "mean_us": median, "stdev_us": 0.1, "min_us": median * 0.9, "max_us": median * 1.1,
            "p10_us": median * 0.95, "p90_us": median * 1.05, "n": 100, "method": "fake"}


def broken():
    path = os.environ.get("CUDAOPT_FAKE_BROKEN")
    if not path or not os.path.isfile(path):
        return False
    with open(path) as fh:
        return os.environ.get("CUDA_VISIBLE_DEVICES") in fh.read().split()


def main():
    if "--no-start" in sys.argv or broken():
        print("no GPU here", file=sys.stderr)
        return 1
    device = {"name": gpu_name(), "pci_bus_id": f"fake:{os.getpid()}"}
    send({"type": "ready", "device": device})
    prefetched = 0
    for line in sys.stdin:
        request = json.loads(line)
        if "prefetch" in request:  # never answered, counted in the next result
            prefetched += len(request["prefetch"])
            continue
        trace("start")
        entry = (request["kernel"] or {}).get("entry", "")
        defines = (request["kernel"] or {}).get("defines", {})
        send({"type": "phase", "phase": "compile", "case": ""})
        send({"type": "compiled", "compile": {"ok": True, "log": ""}})
        cases = []
        for index, case in enumerate(request["cases"]):
            send({"type": "phase", "phase": "check", "case": case["name"]})
            if index == 0 and entry == "sleep":
                time.sleep(defines.get("MS", 100) / 1000)
            if index == 1 and entry == "hang":
                time.sleep(3600)
            if index == 1 and entry == "die":
                print("simulated fatal error", file=sys.stderr)
                os._exit(1)
            result = {"name": case["name"], "role": case["role"], "status": "ok"}
            if case["role"] in request.get("time_roles", ["performance"]):
                protocol = {"iterations": 100, "checked_launches": 3, **request.get("protocol", {})}
                result["timing"] = {**stats(10.0 * (1 + defines.get("T", 0))), "n": protocol["iterations"]}
                result["scan"] = {"checked_launches": list(range(protocol["checked_launches"]))}
                result["vendors"] = [{"label": v["label"], "status": "ok", "timing": stats(7.0)}
                                     for v in request.get("vendors", [])]
            cases.append(result)
            send({"type": "case", "case": result})
        reason = ",".join(sorted(os.environ)) if entry == "environ" else f"prefetched {prefetched}"
        trace("end")
        send({"type": "result", "result": {"status": "ok", "cases": cases, "device": device, "reason": reason,
                                           "request_id": request.get("id", "")}})
    return 0


if __name__ == "__main__":
    from cudaopt.compilekit import lifeline

    lifeline.hold()  # as the real worker does: it ends with the process that started it
    sys.exit(main())
