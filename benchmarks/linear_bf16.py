"""The BF16 linear example's kernel beside PyTorch eager, torch.compile, a device copy of W and the
initial kernel, shape by shape, in one process; prints a table and writes JSON.

The kernel is ``examples/linear_bf16/tunable.cu`` at one configuration (``--defines``, default the
space's first), a run's winner (``--run RUN``: its best.cu and best-launch.json), or the winner of
the README's no-key job run first (``--optimize``: ``cudaopt optimize --config
examples/linear_bf16/experiment.json`` in a fresh process, its wall time recorded). It and the
initial kernel are exported with ``cudaopt export --to torch`` (the operator a user would ship) and
called with ``out=``. For each shape (decode: m = 1, 8, 16, 64 by k x n = 4096 x 4096, 4096 x 14336,
14336 x 4096, 8192 x 28672; prefill: 512 x 4096 x 4096 and 2048 x 4096 x 14336) every contender is
first checked against the reference (FP32 from the BF16 inputs, rounded once) with the example's
tolerances (rtol 2^-6, atol 0.02: inputs drawn as the example's standard cases) and left out if
wrong; then all are timed round-robin with CUDA events, the L2 cleared (a 512 MiB memset) before
each launch and each round started behind four more memsets (the GPU stays busy while the host
queues torch.compile's launch, so no host cost is timed). ``copy`` is ``torch.Tensor.copy_`` of W's
bytes into another buffer; its rate counts bytes read plus written (as ``cudaopt doctor --measure``
counts copy bandwidth), and the kernel's ``W share`` is W's bytes per second of the kernel over
that rate. The targets are checked at the end: decode shapes (m <= 16) at least 85% of the copy
rate each and 1.2x torch.compile in geometric mean, m = 64 at least 1.0x torch.compile, prefill at
least 0.8x eager, and no shape slower than the initial kernel.

``--ncu`` instead launches every contender of each shape twice between cudaProfilerStart/Stop, for
``ncu --profile-from-start off --set full -o linear python3 benchmarks/linear_bf16.py --ncu --shapes ...``.

Run on a GPU machine: ``python3 benchmarks/linear_bf16.py [--optimize | --run RUN | --defines KW=8,U=4,MS=4]
[--shapes decode|prefill|all|m1-k4096-n4096,...] [--rounds 30] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from cudaopt.experiment import load_experiment  # noqa: E402
from cudaopt.exporter import from_flags, write  # noqa: E402
from cudaopt.record.bake import bake, bake_launch  # noqa: E402

CONFIG = ROOT / "examples" / "linear_bf16" / "experiment.json"
DECODE = [(m, k, n) for m in (1, 8, 16, 64) for k, n in ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 28672))]
PREFILL = [(512, 4096, 4096), (2048, 4096, 14336)]
RTOL, ATOL = 2.0 ** -6, 0.02
FLUSH_BYTES = 512 << 20
LEAD = 4


def shape_name(m: int, k: int, n: int) -> str:
    return f"m{m}-k{k}-n{n}"


def pick_shapes(spec: str) -> list[tuple[int, int, int]]:
    every = {shape_name(*s): s for s in DECODE + PREFILL}
    if spec in ("all", "decode", "prefill"):
        return {"all": DECODE + PREFILL, "decode": DECODE, "prefill": PREFILL}[spec]
    unknown = [s for s in spec.split(",") if s not in every]
    if unknown:
        raise SystemExit(f"--shapes: {unknown} not of all, decode, prefill, {', '.join(every)}")
    return [every[s] for s in spec.split(",")]


def exported(experiment, source: str, launch: dict | None, work: Path, label: str):
    """The torch operator ``cudaopt export`` makes of ``source`` (with ``launch``, or the cases')."""
    folder = work / label
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text(source)
    launch_arg = None
    if launch is not None:
        (folder / "launch.json").write_text(json.dumps(launch))
        launch_arg = str(folder / "launch.json")
    src = from_flags(experiment, kernel=folder / "kernel.cu", entry=None, launch=launch_arg, unverified=True)
    (path,) = write(src, "torch", folder / "ops")
    spec = importlib.util.spec_from_file_location(f"linear_{label}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def winner(args, experiment, out: Path) -> tuple[str, dict | None, dict]:
    """The kernel to time: its source, its launch and what it is (for the record)."""
    run = args.run
    record: dict = {}
    if args.optimize:
        from cli_run import cudaopt

        results = Path(tempfile.mkdtemp(prefix="linear-bench-"))
        code, wall = cudaopt("optimize", "--config", str(CONFIG), "--results-dir", str(results),
                             log=out / "linear-optimize.txt")
        print((out / "linear-optimize.txt").read_text())
        if code != 0:
            raise SystemExit(f"optimize failed (exit {code}): see {out / 'linear-optimize.txt'}")
        run = results / "run-001"
        record["optimize_wall_s"] = wall
    if run is not None:
        if not (run / "best.cu").is_file():
            raise SystemExit(f"{run}: no best.cu (not a finished run directory)")
        summary = json.loads((run / "summary.json").read_text())
        launch_file = run / "best-launch.json"
        launch = json.loads(launch_file.read_text()) if launch_file.is_file() else None
        record.update(run=str(run), best_defines=summary.get("best_defines"))
        return (run / "best.cu").read_text(), launch, record
    configs = experiment.tuning.space.configurations()
    defines = dict(configs[0])
    if args.defines:
        for item in args.defines.split(","):
            name, _, value = item.partition("=")
            if name not in defines or not value.lstrip("-").isdigit():
                raise SystemExit(f"--defines: {item!r}: give NAME=INT for a tunable of {sorted(defines)}")
            defines[name] = int(value)
    record["defines"] = defines
    return bake(experiment.tuning.source, defines), bake_launch(experiment.tuning.launch.to_data(), defines), record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    choice = parser.add_mutually_exclusive_group()
    choice.add_argument("--optimize", action="store_true", help="run the no-key job first and time its winner")
    choice.add_argument("--run", type=Path, help="a run directory of the example: time its winner")
    choice.add_argument("--defines", help="tunable values NAME=INT,... (default: the space's first configuration)")
    parser.add_argument("--shapes", default="all")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path("out"))
    parser.add_argument("--ncu", action="store_true", help="launch each contender twice under the profiler instead")
    args = parser.parse_args()
    shapes = pick_shapes(args.shapes)
    args.out.mkdir(parents=True, exist_ok=True)

    import torch
    import torch.nn.functional as F

    experiment = load_experiment(CONFIG)
    source, launch, record = winner(args, experiment, args.out)
    work = Path(tempfile.mkdtemp(prefix="linear-ops-"))
    ops = exported(experiment, source, launch, work, "kernel")
    kernel = ops.linear_gelu_bf16
    initial = exported(experiment, experiment.initial_kernel_path.read_text(), None, work, "initial").linear_gelu_bf16

    def linear_gelu(x, W, b):
        return F.gelu(F.linear(x, W, b), approximate="tanh")

    compiled = torch.compile(linear_gelu, dynamic=False)
    import torch._dynamo.config as dynamo_config

    limit = "recompile_limit" if hasattr(dynamo_config, "recompile_limit") else "cache_size_limit"
    setattr(dynamo_config, limit, max(64, getattr(dynamo_config, limit)))
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(1)
    device = torch.cuda.get_device_properties(0)
    rows = []
    for m, k, n in shapes:
        name = shape_name(m, k, n)
        x = torch.randn(m, k, device="cuda", generator=gen).bfloat16()
        W = (torch.randn(n, k, device="cuda", generator=gen) / math.sqrt(k)).bfloat16()
        b = torch.randn(n, device="cuda", generator=gen).bfloat16()
        y, y_initial, W_copy = torch.empty(m, n, device="cuda", dtype=torch.bfloat16), \
            torch.empty(m, n, device="cuda", dtype=torch.bfloat16), torch.empty_like(W)
        reference = F.gelu(F.linear(x.float(), W.float(), b.float()), approximate="tanh").bfloat16().double()
        contenders = {
            "kernel": lambda: kernel(x, W, b, out=y),
            "eager": lambda: linear_gelu(x, W, b),
            "torch.compile": lambda: compiled(x, W, b),
            "copy": lambda: W_copy.copy_(W),
            "initial": lambda: initial(x, W, b, out=y_initial),
        }
        errors = {}
        for label in ("kernel", "eager", "torch.compile", "initial"):
            out = contenders[label]()
            got = (y if label == "kernel" else y_initial if label == "initial" else out).double()
            excess = ((got - reference).abs() - RTOL * reference.abs() - ATOL).max().item()
            errors[label] = excess
            if not excess <= 0:
                print(f"{name} {label}: WRONG, exceeds the tolerance by {excess}", flush=True)
                del contenders[label]
        torch.cuda.synchronize()
        if args.ncu:
            torch.cuda.profiler.start()
            for _ in range(2):
                for launch_one in contenders.values():
                    flush.zero_()
                    launch_one()
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        times: dict[str, list[float]] = {label: [] for label in contenders}
        for _ in range(args.rounds):
            for _ in range(LEAD):
                flush.zero_()
            events = []
            for label, launch_one in contenders.items():
                flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                launch_one()
                end.record()
                events.append((label, start, end))
            torch.cuda.synchronize()
            for label, start, end in events:
                times[label].append(start.elapsed_time(end) * 1000)
        med = {label: sorted(v)[len(v) // 2] for label, v in times.items()}
        w_bytes = 2 * n * k
        mine = med.get("kernel")
        entry = ops.launch_config(m, n, k, device.multi_processor_count)[0]
        row = {"shape": name, "m": m, "k": k, "n": n, "entry": entry, "median_us": med,
               "errors": errors,
               "w_gbps": round(w_bytes / mine / 1e3, 1) if mine else None,
               "copy_gbps": round(2 * w_bytes / med["copy"] / 1e3, 1),
               "w_share_of_copy": round(w_bytes / mine / (2 * w_bytes / med["copy"]), 3) if mine else None}
        for label in ("eager", "torch.compile", "initial"):
            row[f"vs_{label}"] = round(med[label] / mine, 3) if mine and label in med else None
        rows.append(row)
        nan = float("nan")
        print(f"{name:22} {entry:26} kernel {mine or nan:9.2f} us  eager {med.get('eager', nan):9.2f}  "
              f"compile {med.get('torch.compile', nan):9.2f}  copy {med['copy']:9.2f}  "
              f"initial {med.get('initial', nan):10.2f}  x eager {row['vs_eager']}  "
              f"x compile {row['vs_torch.compile']}  W {row['w_gbps']} GB/s = {row['w_share_of_copy']} of copy "
              f"{row['copy_gbps']} GB/s", flush=True)
    if args.ncu:
        return
    targets = judge(rows)
    for target, met in targets.items():
        print(f"{'met ' if met else 'MISS'} {target}")
    record.update(gpu=device.name, sms=device.multi_processor_count, torch=torch.__version__, rounds=args.rounds,
                  shapes=rows, targets=targets)
    (args.out / "bench_linear_bf16.json").write_text(json.dumps(record, indent=2))
    print(f"wrote {args.out / 'bench_linear_bf16.json'}")


def judge(rows: list[dict]) -> dict[str, bool]:
    """The example's targets over the shapes measured (a target with no shape measured is not met)."""
    def geomean(values):
        values = [v for v in values if v]
        return math.exp(sum(map(math.log, values)) / len(values)) if values else 0.0

    decode = [r for r in rows if r["m"] <= 16]
    m64 = [r for r in rows if r["m"] == 64]
    prefill = [r for r in rows if r["m"] >= 512]
    return {
        "decode (m <= 16): W at >= 85% of the copy rate on every shape":
            bool(decode) and all((r["w_share_of_copy"] or 0) >= 0.85 for r in decode),
        "decode (m <= 16): >= 1.2x torch.compile in geometric mean":
            bool(decode) and geomean(r["vs_torch.compile"] for r in decode) >= 1.2,
        "m = 64: >= 1.0x torch.compile on every shape":
            bool(m64) and all((r["vs_torch.compile"] or 0) >= 1.0 for r in m64),
        "prefill (m >= 512): >= 0.8x eager on every shape":
            bool(prefill) and all((r["vs_eager"] or 0) >= 0.8 for r in prefill),
        "never slower than the initial kernel": bool(rows) and all((r["vs_initial"] or 0) >= 1.0 for r in rows),
    }


if __name__ == "__main__":
    main()
