"""The softmax example's kernels beside torch.compile, PyTorch eager and a device copy, in one process.

Each launch the example's tier table gives a shape at its winning configuration with `WB` 64, 128
and 256 (and, where it picks softmax_rows_warp4, softmax_rows_warp at the same launch) is compiled
from ``examples/softmax/tunable.cu`` (or from each ``--source``, builds of it side by side) with
CuPy's NVRTC (its registers and local memory printed), launched on a torch tensor's memory and
checked against ``torch.softmax`` (a wrong one is reported and not timed). Then every contender
is timed round-robin by CUDA events, the L2 cleared (a 512 MiB memset) before each launch, and
each round started behind four more memsets, so that the GPU is still busy when torch.compile's
launch, whose host-side cost is the largest, is queued (without them its median read 78-102 us on
the H200 where the harness measures 9-36). The medians are printed with the ratio to
torch.compile. Quicker than ``softmax_winner.py`` (seconds, not minutes) for telling kernel builds
apart; the harness's figures stay the ones that count.

``--ncu`` instead launches each contender twice between ``cudaProfilerStart``/``Stop``, for
``ncu --profile-from-start off -k regex:"softmax|triton|SoftMax" ...`` (docs/benchmarks.md, "Short
rows").

Run on a GPU machine: ``python3 benchmarks/softmax_kernels.py [--source A.cu,B.cu] [--shapes rows32,rows128]
[--rounds 40]``.
"""

from __future__ import annotations

import argparse
import pathlib

import cupy as cp
import numpy as np
import torch

from cudaopt.experiment import load_experiment
from cudaopt.wire.launch import candidate_names, resolve_launch
from cudaopt.wire.results import ResolvedLaunch

ROOT = pathlib.Path(__file__).resolve().parents[1]
SHAPES = {"rows32": (65536, 32), "rows128": (32768, 128), "rows1024": (16384, 1024), "rows4096": (8192, 4096)}
CONFIG = dict(WB=128, NB=8, CL=8, CT=512)  # the example's winner
FLUSH_BYTES = 512 << 20
LEAD = 4  # memsets queued at the start of each round (about 0.1 ms each on an H200)


def launches(rows: int, cols: int, sms: int) -> dict[str, tuple[dict, ResolvedLaunch]]:
    """Contender name -> (defines, launch): what the example's launch table gives this shape at
    `WB` 64, 128 and 256 (one contender where `WB` changes nothing), and where it picks
    softmax_rows_warp4, softmax_rows_warp at the same launch (the build it replaced)."""
    table = load_experiment(ROOT / "examples" / "softmax" / "experiment.json").tuning.launch
    out: dict[str, tuple[dict, ResolvedLaunch]] = {}
    for wb in (64, 128, 256):
        defines = {**CONFIG, "WB": wb}
        launch = resolve_launch(table, candidate_names({"rows": rows, "cols": cols}, defines, {"num_sms": sms}))
        if any(seen.grid == launch.grid and seen.block == launch.block for _, seen in out.values()):
            continue
        out[f"{launch.entry}-{launch.block[0]}"] = (defines, launch)
        if launch.entry == "softmax_rows_warp4":
            out[f"softmax_rows_warp-{launch.block[0]}"] = (defines, launch.model_copy(update={"entry": "softmax_rows_warp"}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(ROOT / "examples" / "softmax" / "tunable.cu"),
                        help="comma-separated builds of the example's tunable.cu, timed side by side")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--ncu", action="store_true", help="launch each contender twice under the profiler instead")
    args = parser.parse_args()
    unknown = set(args.shapes.split(",")) - set(SHAPES)
    if unknown:
        raise SystemExit(f"--shapes: {sorted(unknown)} not of {sorted(SHAPES)}")
    paths = [pathlib.Path(p) for p in args.source.split(",")]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise SystemExit(f"--source: no such file: {', '.join(missing)}")
    # math_constants.h gives the kernels one constant; given here, CuPy's NVRTC needs no CUDA headers
    sources = {p.stem if len(paths) > 1 else "": p.read_text().replace(
        "#include <math_constants.h>", "#define CUDART_INF_F __int_as_float(0x7f800000)") for p in paths}
    if len(sources) < len(paths):
        raise SystemExit("--source: two builds with the same file name; give them distinct names")
    modules: dict[tuple, cp.RawModule] = {}
    compiled = torch.compile(lambda x: torch.softmax(x, dim=1), dynamic=False)
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name in args.shapes.split(","):
        rows, cols = SHAPES[name]
        x = torch.randn(rows, cols, device="cuda") * 2
        y = torch.empty_like(x)
        ref = torch.softmax(x, dim=1)
        xc, yc = cp.asarray(x), cp.asarray(y)
        contenders = {"torch.compile": lambda: compiled(x), "eager": lambda: torch.softmax(x, dim=1),
                      "copy": lambda: y.copy_(x)}
        builds = [(f"{stem}:{label}" if stem else label, stem, spec) for stem in sources
                  for label, spec in launches(rows, cols, sms).items()]
        for label, stem, (defines, launch_spec) in builds:
            key = (stem, tuple(sorted(defines.items())))
            if key not in modules:
                options = ("-std=c++17",) + tuple(f"-D{k}={v}" for k, v in defines.items())
                modules[key] = cp.RawModule(code=sources[stem], options=options, backend="nvrtc")
            kernel = modules[key].get_function(launch_spec.entry)
            print(f"{name} {label}: grid {launch_spec.grid[0]} x {launch_spec.block[0]}, {kernel.num_regs} registers, "
                  f"{kernel.local_size_bytes} B local", flush=True)
            if launch_spec.shared_bytes > 48 * 1024:
                kernel.max_dynamic_shared_size_bytes = launch_spec.shared_bytes

            def launch(kernel=kernel, spec=launch_spec):
                kernel(spec.grid, spec.block, (xc, yc, np.int32(rows), np.int32(cols)), shared_mem=spec.shared_bytes)

            y.fill_(float("nan"))
            launch()
            err = (y - ref).abs().max().item()
            if not err < 1e-6:
                print(f"{name} {label}: WRONG, max |y - torch.softmax| {err}", flush=True)
                continue
            contenders[label] = launch
        for launch in contenders.values():  # torch.compile compiles and autotunes here, outside any timing
            launch()
        torch.cuda.synchronize()
        if args.ncu:
            torch.cuda.profiler.start()
            for _ in range(2):
                for launch in contenders.values():
                    flush.zero_()
                    launch()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        times: dict[str, list[float]] = {label: [] for label in contenders}
        for _ in range(args.rounds):
            for _ in range(LEAD):  # the GPU well behind the CPU, so no launch's host-side cost is timed
                flush.zero_()
            events = []
            for label, launch in contenders.items():
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                launch()
                end.record()
                events.append((label, start, end))
            torch.cuda.synchronize()
            for label, start, end in events:
                times[label].append(start.elapsed_time(end) * 1000)
        bar = float(np.median(times["torch.compile"]))
        print(f"== {name} {rows}x{cols} ({args.rounds} rounds)", flush=True)
        for label, samples in times.items():
            median = float(np.median(samples))
            print(f"  {label:30s} {median:9.2f} us  x torch.compile {bar / median:5.3f}", flush=True)


if __name__ == "__main__":
    main()
