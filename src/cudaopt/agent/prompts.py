"""What the model is told: the task, the rules, and compact, grounded feedback.

Only correctness and performance cases are ever described here; holdout cases never reach
the model in any form (the optimiser never passes them in).
"""

from __future__ import annotations

import json

from ..engine.scoring import medians
from ..worker.compare import shown
from ..wire.precision import allowed_math
from ..wire.protocol import MATH_CLASSES, CaseSpec, Limits
from ..wire.results import CaseResult
from ..wire.signature import parse_signature
from ..record.files import Attempt

SYSTEM = """You are a CUDA performance engineer. {task}

Rules:
- Write device code only: the complete .cu source of the kernel, with the entry point declared \
exactly as `{signature}`. No main(), no host code, no kernel launches, no cudaMalloc.
- The harness compiles the source with NVRTC (C++17) for the GPU, launches it with your launch \
configuration, checks every output against a trusted reference on several inputs (outputs are \
poisoned before every launch, writes outside the outputs and changes to inputs are caught), \
then times it (L2 flushed before each launch).
- The launch configuration is JSON: grid and block are lists of 1-3 integers or expressions \
over the case scalars ({scalars}), shared_bytes is the dynamic shared memory in bytes. \
Expressions may use + - * / // % ** and cdiv, round_up, min, max. The same expressions must \
work for every shape, including shapes you have not seen.
- The source may define more kernels with the same parameters (registers are allocated per \
kernel, so a path that needs few registers can run at a higher occupancy in a kernel of its own). \
"entry" in the launch configuration names the one a case launches: a name, or quoted names \
chosen by conditionals, e.g. "'small_tiles' if m * n < 1048576 else '{entry}'"; by default {entry}.
- When the kernels' paths differ in tile and block, write the launch as a table instead of grid and block: {{"let": {{"fills": "cdiv(m, 128) * cdiv(n, 128) >= num_sms"}}, "size": ["n", "m"], "tiers": [{{"name": "large", "when": "fills", "entry": "big_tiles", "block": [256], "tile": [128, 128]}}, {{"name": "small", "entry": "{entry}", "block": [64], "tile": [32, 32]}}]}}: lets name values over the scalars and earlier lets, the first tier whose "when" holds is taken (only the last may omit it), and its grid is cdiv(size[i], tile[i]) unless it gives "grid".
{precision}
- You may call the gpu_info tool to read the GPU's properties.

Answer with exactly two fenced blocks and nothing else required:
```cuda
<the complete kernel source>
```
```json
{{"launch": {{"grid": [...], "block": [...], "shared_bytes": 0}}, "rationale": "<one or two sentences: what you changed and why it should be faster>"}}
```"""


TUNABLES = """

You may also declare tunables in the json block: "tunables": {"NAME": [values, ...]} (at most 16 \
combinations) and optionally "restrictions": ["expression", ...]. Each combination is compiled \
with -DNAME=value, may be used in the launch expressions, and is checked and timed; you will see \
the best one."""


RESEARCH = """

Before you write code, call search_cuda_docs for the techniques you plan to use (and again \
when a result surprises you); it returns CUDA optimisation guidance with its NVIDIA sources."""


INSTRUMENTS = {
    "profile_kernel": "- profile_kernel(attempt_id): Nsight Compute on a passed attempt: what bounds it (memory, \
compute, latency or occupancy), why, and the numbers behind it.",
    "inspect_compiled": "- inspect_compiled(attempt_id): what the compiler made of an attempt (SASS or PTX): \
global load/store widths, shared-memory traffic, FMAs per global load, spills.",
}


IMPROVE = ("You improve one CUDA kernel so that it runs faster on the user's GPU while computing exactly the "
           "same function.")
WRITE = ("You write a CUDA kernel that computes exactly the function of the user's reference implementation, and "
         "then make it run faster on the user's GPU than the vendor library it is measured against.")


# what each class of the precision policy lets a kernel use, in the model's words
PRECISION_WORDS = {
    "tf32": "TF32 tensor cores (mma/wmma with tf32, 3xTF32)",
    "fp16": "FP16 (half tensor-core MMAs, half2 arithmetic, conversions to half)",
    "bf16": "BF16 (bfloat16 tensor-core MMAs, bfloat162 arithmetic, conversions to bfloat16)",
    "int8": "INT8 tensor cores (integer MMAs)",
    "fp8": "FP8 (e4m3/e5m2 MMAs and conversions)",
    "approx": "approximate units (__sinf, __cosf, tanh.approx, fast-math options)",
}


def precision_rule(limits: Limits, signature: str) -> str:
    """The experiment's precision policy as a rule of the system prompt."""
    allowed = allowed_math(limits, parse_signature(signature))
    beyond = "; ".join(PRECISION_WORDS[c] for c in MATH_CLASSES if c in allowed)
    return (f"- Precision: FP32, FP64 and integer arithmetic, and beyond them {beyond or 'nothing'}. The harness "
            "reads the compiled code (SASS) before any launch and refuses a kernel with any other tensor-core or "
            "approximate instruction, even one that would pass the tolerances.")


def system_prompt(signature: str, cases: list[CaseSpec], tunables: bool = False, research: bool = False,
                  instruments: tuple[str, ...] = (), from_scratch: bool = False, limits: Limits | None = None) -> str:
    """``from_scratch``: there is no initial kernel; the model writes the first one. ``limits``: the
    experiment's, whose precision policy the model is told."""
    scalars = sorted({name for case in cases for name in case.scalars})
    text = SYSTEM.format(task=WRITE if from_scratch else IMPROVE, signature=signature,
                         scalars=", ".join(scalars) or "none", entry=parse_signature(signature).name,
                         precision=precision_rule(limits or Limits(), signature))
    text += (TUNABLES if tunables else "") + (RESEARCH if research else "")
    if instruments:
        text += ("\n\nInstruments: find out what limits a kernel before you change it (attempt ids as in the "
                 "digest):\n" + "\n".join(INSTRUMENTS[name] for name in instruments))
    return text


def _cases_text(cases: list[CaseSpec]) -> str:
    lines = []
    for case in cases:
        shapes = ", ".join(f"{n}{list(s.shape)}" for n, s in {**case.inputs, **case.outputs}.items())
        tol = ", ".join(f"{n}: rtol {o.rtol:g} atol {o.atol:g}" for n, o in case.outputs.items())
        lines.append(f"- {case.name} ({case.role}): {json.dumps(case.scalars)}; {shapes}; tolerance {tol}")
    return "\n".join(lines)


def _case_line(case: CaseResult, baseline: dict[str, float], best: dict[str, float]) -> str:
    name, status = case.name, case.status
    if status != "ok":
        return f"  - {name}: {status}: {_clip(case.reason, 600)}"
    timing = case.timing
    if not timing:
        return f"  - {name}: ok (checked, not timed)"
    median = timing.median_us
    text = f"  - {name}: ok, median {median:.2f} us (p10-p90 {timing.p10_us:.2f}-{timing.p90_us:.2f})"
    if name in baseline:
        text += f", {baseline[name] / median:.2f}x vs baseline"
    if name in best:
        text += f", {best[name] / median:.2f}x vs best so far"
    if case.launch and case.launch.entry:
        text += f", kernel {case.launch.entry}"
    if case.occupancy and case.occupancy.occupancy is not None:
        text += f", occupancy {case.occupancy.occupancy:.0%}"
    if case.roofline and case.roofline.achieved_tflops is not None:
        text += f", {case.roofline.achieved_tflops} TFLOP/s"
    return text


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + " …"


def vendor_baseline_text(baseline: Attempt, label: str) -> str:
    """The baseline of a run without an initial kernel: the vendor's medians, which speed-ups are over."""
    lines = [f"{label} (no initial kernel: the speed-ups are over it)"]
    for case in baseline.cases:
        vendor = case.vendors[0] if case.vendors else None
        if vendor is None:
            continue
        timing = vendor.timing
        lines.append(f"  - {case.name}: median {timing.median_us:.2f} us (p10-p90 {timing.p10_us:.2f}-"
                     f"{timing.p90_us:.2f})" if vendor.status == "ok" and timing else
                     f"  - {case.name}: {vendor.status}: {_clip(vendor.reason, 300)}")
    return "\n".join(lines)


def attempt_text(attempt: Attempt, baseline: Attempt | None, best: Attempt | None) -> str:
    """The evidence for one attempt: outcome per case, resources, failures."""
    head = f"Attempt #{attempt.id} ({attempt.kind}): {attempt.status}"
    if attempt.defines:
        head += f" with {attempt.defines}"
    if attempt.status == "rejected":
        return f"{head}: {attempt.reason}"
    lines = [head]
    comp = attempt.compile
    if comp:
        lines.append(
            f"  registers {comp.registers}, spill stores/loads {comp.spill_stores}/{comp.spill_loads}, "
            f"static shared {comp.static_shared_bytes} B, local {comp.local_bytes} B"
        )
        for name, other in comp.entries.items():
            lines.append(f"  kernel {name}: registers {other.registers}, spill stores/loads {other.spill_stores}/"
                         f"{other.spill_loads}, static shared {other.static_shared_bytes} B, local {other.local_bytes} B")
    if attempt.status == "compile_error":
        lines.append("  compiler output:\n" + _clip(attempt.reason, 2500))
    elif attempt.status == "precision":
        lines.append(f"  {_clip(attempt.reason, 800)}\n  Nothing was launched: compute in the precision the "
                     "experiment allows (see the rules); a faster kernel in another precision is not an answer.")
    elif not attempt.cases and attempt.reason:
        lines.append(f"  {_clip(attempt.reason, 800)}")
    for case in attempt.cases:
        lines.append(_case_line(case, medians(baseline), medians(best) if best is not attempt else {}))
        for check in case.checks:
            if not check.ok and check.first_bad_index is not None:
                lines.append(
                    f"    first wrong element of {check.output} at {tuple(check.first_bad_index)}: expected "
                    f"{shown(check.expected)}, got {shown(check.actual)}; {check.mismatches} of "
                    f"{check.elements} wrong, {check.unwritten} unwritten, max abs error {check.max_abs_error:.3g}"
                )
    return "\n".join(lines)


def digest(attempts: list[Attempt]) -> str:
    """One line per earlier attempt, so the model does not repeat itself."""
    lines = []
    for a in attempts:
        score = f"{a.score_us:.2f} us geomean" if a.score_us else a.status
        if a.defines:
            score += f" with {a.defines}"
        if a.kind == "baseline" and a.source_file is None:
            lines.append(f"- #{a.id}: the vendor baseline (no kernel)")
            continue
        why = _clip(a.rationale, 160) if a.rationale else ("initial kernel" if a.kind == "baseline" else "")
        if a.status != "ok" and a.reason:
            why = f"{why}; " * bool(why) + "why: " + _clip(a.reason.strip().splitlines()[0], 200)
        lines.append(f"- #{a.id} (from #{a.parent}): {score}; {why or 'no rationale given'}")
    return "\n".join(lines)


def launch_text(attempt: Attempt, cases: list[CaseSpec]) -> str:
    """The launch an attempt ran with: its own, or the input cases' (the baseline's usual case)."""
    if attempt.launch is not None:
        return json.dumps(attempt.launch.to_data())
    per_case = {c.name: json.dumps(c.launch.to_data()) for c in cases if c.launch is not None}
    if len(set(per_case.values())) == 1:
        return f"{next(iter(per_case.values()))} (the input cases' launch)"
    return "per case, from the input cases: " + "; ".join(f"{name}: {text}" for name, text in per_case.items())


def task_message(description: str, cases: list[CaseSpec], attempts: list[Attempt], best: Attempt | None,
                 baseline: Attempt, best_source: str | None, last: Attempt | None, last_source: str | None,
                 iterations_left: int, profile: str | None = None, reference: tuple[str, str] | None = None,
                 vendor: str = "") -> str:
    """``reference`` (file name, source) and ``vendor`` (its label): a run without an initial kernel,
    where the model writes the kernel from the reference and is measured against the vendor."""
    from_scratch = baseline.source_file is None
    parts = [
        f"Task: {description}" if description else "Task: make this kernel faster.",
        "Cases (score = geometric mean of the median latency over the performance cases; every case must pass):\n"
        + _cases_text(cases),
        "Attempts so far:\n" + digest(attempts),
        "Baseline: " + vendor_baseline_text(baseline, vendor) if from_scratch
        else "Baseline:\n" + attempt_text(baseline, baseline, None),
    ]
    if reference is not None:
        name, source = reference
        fence = "cuda" if name.endswith(".cu") else "python"
        parts.insert(1, f"Reference implementation ({name}, the user's trusted code: the kernel must compute the "
                        f"same outputs from the same inputs, within the tolerances):\n```{fence}\n{source}\n```")
    if best is not None and best_source is not None:
        parts.append(
            f"Best so far (#{best.id}):\n" + attempt_text(best, baseline, best)
            + f"\nIts launch configuration: {launch_text(best, cases)}\nIts source:\n```cuda\n{best_source}\n```"
        )
    if last is not None and last is not best and last.status != "ok":
        text = f"Your last attempt failed; repair it or try another idea.\n{attempt_text(last, baseline, best)}"
        if last_source is not None:
            text += f"\nIts source:\n```cuda\n{last_source}\n```"
        parts.append(text)
    elif last is not None and last is not best:
        parts.append("Your last attempt passed but was not faster than the best:\n" + attempt_text(last, baseline, best))
    if profile:
        parts.append("Progress has stalled, so the best kernel was profiled with Nsight Compute:\n" + profile)
    parts.append("Write the first kernel" + f" ({iterations_left} attempt(s) left)." if from_scratch and best is None
                 else f"Propose the next version ({iterations_left} attempt(s) left).")
    return "\n\n".join(parts)


def round_note(turn: int, size: int) -> str:
    """What a turn of a round of several proposals is told (nothing when the round has one)."""
    if size == 1:
        return ""
    if turn == 0:
        return (f"\n\nThis round asks for {size} proposals, written at the same time without seeing each other; "
                "this is the first: propose the idea you think most promising.")
    return (f"\n\nThis round asks for {size} proposals, written at the same time without seeing each other; "
            f"this is proposal {turn + 1}: propose a different idea from the most obvious one, so that the "
            "round explores more than one direction.")
