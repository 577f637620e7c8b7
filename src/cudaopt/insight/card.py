"""The bottleneck card: what bounds a kernel, the rule that decided it, and the numbers behind it.

The rule is modelled on Nsight Compute's "GPU Speed Of Light" section: a unit running at 60% or more
of its peak bounds the kernel (the higher of SM and memory throughput decides which); when both are
lower the kernel is starved of work: occupancy-limited when fewer than half of the warp slots are
in use, latency-bound otherwise, and then the top warp stall reasons say what the warps wait on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ..wire.fields import version_field
from ..wire.protocol import WireModel
from .parse import KernelMetrics

Bound = Literal["memory", "compute", "latency", "occupancy"]

SOL_BOUND_PCT = 60.0
LOW_OCCUPANCY_PCT = 50.0

_STALL_PREFIX, _STALL_SUFFIX = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
_NOT_STALLS = {"selected", "not_selected"}  # issuing, or eligible and waiting its turn: not a stall
STALL_MEANING = {
    "long_scoreboard": "waiting for global/local memory (L1TEX) data",
    "short_scoreboard": "waiting for shared memory or special-function results",
    "mio_throttle": "the shared-memory/MIO instruction queue is full",
    "lg_throttle": "the global/local memory instruction queue is full",
    "barrier": "waiting at __syncthreads",
    "math_pipe_throttle": "a math pipe is busy",
    "wait": "fixed-latency dependencies between instructions",
    "branch_resolving": "branch targets and divergence",
    "no_instruction": "instruction cache misses",
    "dispatch_stall": "the dispatcher",
    "membar": "memory fences",
    "tex_throttle": "the texture queue is full",
    "drain": "stores draining at exit",
    "imc_miss": "constant cache misses",
    "gmma": "warpgroup MMA (wgmma) results",
    "sleeping": "__nanosleep",
}
_LIMITS = {
    "launch__occupancy_limit_registers": "registers",
    "launch__occupancy_limit_shared_mem": "shared memory",
    "launch__occupancy_limit_warps": "block size (warps)",
    "launch__occupancy_limit_blocks": "blocks per SM",
}
_MEMORY_UNITS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "L1/shared",
}
_CONFLICTS = {
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "loads",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "stores",
}
_PIPES = {
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "FMA",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor",
}


class CardError(ValueError):
    """The profile lacks the Speed-of-Light metrics a card needs."""


class BottleneckCard(WireModel):
    kernel: str
    case: str
    bound: Bound
    rule: str  # why this bound: the thresholds and the numbers that met them
    evidence: list[str]  # the two or three numbers that show it
    duration_us: float | None = None
    sm_pct: float | None = None
    memory_pct: float | None = None
    dram_pct: float | None = None
    busiest_memory: str | None = None
    achieved_occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str | None = None
    registers_per_thread: float | None = None
    shared_bytes_per_block: float | None = None
    l1_hit_pct: float | None = None
    l2_hit_pct: float | None = None
    bank_conflicts: dict[str, float] = Field(default_factory=dict)  # shared loads / stores
    stalls: dict[str, float] = Field(default_factory=dict)  # top reasons: cycles per issued instruction
    pipes: dict[str, float] = Field(default_factory=dict)  # % of peak: issue slots, FMA, tensor
    attempt: int | None = None

    def to_text(self) -> str:
        """A few lines for the model."""
        head = f"Bottleneck card: {self.kernel} on case {self.case}"
        if self.attempt is not None:
            head += f" (attempt #{self.attempt})"
        if self.duration_us is not None:
            head += f", {self.duration_us:.2f} us under the profiler"
        lines = [head, f"bound: {self.bound} — {self.rule}", "evidence: " + "; ".join(self.evidence)]
        occ = f"occupancy: achieved {_pct(self.achieved_occupancy_pct)} of the warp slots, theoretical " \
              f"{_pct(self.theoretical_occupancy_pct)}"
        if self.occupancy_limiter:
            occ += f", limited by {self.occupancy_limiter}"
        if self.registers_per_thread is not None:
            occ += f"; {self.registers_per_thread:.0f} registers/thread"
        if self.shared_bytes_per_block is not None:
            occ += f", {self.shared_bytes_per_block:.0f} B shared/block"
        lines.append(occ)
        memory = f"memory: DRAM {_pct(self.dram_pct)} of peak, L1 hit {_pct(self.l1_hit_pct)}, L2 hit {_pct(self.l2_hit_pct)}"
        if self.bank_conflicts:
            memory += ", shared bank conflicts " + ", ".join(f"{k} {v:,.0f}" for k, v in self.bank_conflicts.items())
        lines.append(memory)
        if self.stalls:
            lines.append("top stalls (cycles per issued instruction): " + ", ".join(
                f"{name} {value:.1f} ({STALL_MEANING.get(name, name)})" for name, value in self.stalls.items()))
        if self.pipes:
            lines.append("pipes (% of peak): " + ", ".join(f"{k} {v:.1f}" for k, v in self.pipes.items()))
        return "\n".join(lines)


def build_card(m: KernelMetrics, case: str = "", attempt: int | None = None) -> BottleneckCard:
    """Decide the bound of one profiled launch; raise :class:`CardError` without Speed-of-Light figures."""
    sm = m.number("sm__throughput.avg.pct_of_peak_sustained_elapsed")
    mem = m.number("gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")
    if sm is None or mem is None:
        raise CardError("the profile has no SM or memory throughput (Speed of Light) figures")
    achieved = m.number("sm__warps_active.avg.pct_of_peak_sustained_active")
    theoretical = m.number("sm__maximum_warps_per_active_cycle_pct")
    units = _pick(m, _MEMORY_UNITS)
    busiest = max(units, key=units.get) if len(units) == len(_MEMORY_UNITS) else None  # only among all three
    stalls = _top_stalls(m)
    bound, rule, evidence = _decide(sm, mem, achieved, theoretical, units, busiest, stalls)
    shared = [v for name in ("launch__shared_mem_per_block_static", "launch__shared_mem_per_block_dynamic")
              if (v := m.number(name)) is not None]
    return BottleneckCard(
        kernel=m.kernel, case=case, bound=bound, rule=rule, evidence=evidence, attempt=attempt,
        duration_us=_duration_us(m), sm_pct=sm, memory_pct=mem, dram_pct=units.get("DRAM"), busiest_memory=busiest,
        achieved_occupancy_pct=achieved, theoretical_occupancy_pct=theoretical,
        occupancy_limiter=_limiter(m, theoretical), registers_per_thread=m.number("launch__registers_per_thread"),
        shared_bytes_per_block=sum(shared) if shared else None,
        l1_hit_pct=m.number("l1tex__t_sector_hit_rate.pct"), l2_hit_pct=m.number("lts__t_sector_hit_rate.pct"),
        bank_conflicts=_pick(m, _CONFLICTS), stalls=stalls, pipes=_pick(m, _PIPES),
    )


def _decide(sm: float, mem: float, achieved: float | None, theoretical: float | None, units: dict[str, float],
            busiest: str | None, stalls: dict[str, float]) -> tuple[Bound, str, list[str]]:
    """The bound, the rule that decided it, and the (at most three) numbers that show it."""
    low = f"SM {sm:.1f}% and memory {mem:.1f}% both below {SOL_BOUND_PCT:.0f}% of peak"
    if max(sm, mem) >= SOL_BOUND_PCT and mem >= sm:
        rule = f"memory throughput {mem:.1f}% of peak >= {SOL_BOUND_PCT:.0f}% and >= SM {sm:.1f}%"
        if busiest:
            rule += f"; busiest memory unit: {busiest} at {units[busiest]:.1f}%"
        shown = busiest or next(iter(units), None)
        return "memory", rule, [f"memory {mem:.1f}%", f"SM {sm:.1f}%"] + (
            [f"{shown} {units[shown]:.1f}%"] if shown else [])
    if max(sm, mem) >= SOL_BOUND_PCT:
        rule = f"SM throughput {sm:.1f}% of peak >= {SOL_BOUND_PCT:.0f}% and above memory {mem:.1f}%"
        return "compute", rule, [f"SM {sm:.1f}%", f"memory {mem:.1f}%"]
    if achieved is not None and achieved < LOW_OCCUPANCY_PCT:
        rule = f"{low}, and only {achieved:.1f}% of the warp slots are in use (< {LOW_OCCUPANCY_PCT:.0f}%)"
        return "occupancy", rule, [f"achieved occupancy {achieved:.1f}%", f"theoretical {_pct(theoretical)}",
                                   f"SM {sm:.1f}%"]
    rule = f"{low} with {_pct(achieved)} of the warp slots in use: warps wait"
    top = next(iter(stalls), None)
    if top is None:
        return "latency", rule, [f"SM {sm:.1f}%", f"memory {mem:.1f}%"]
    rule += f", mostly on {top} ({STALL_MEANING.get(top, top)})"
    return "latency", rule, [f"SM {sm:.1f}%", f"memory {mem:.1f}%", f"{top} {stalls[top]:.1f} cycles/instruction"]


def _pick(m: KernelMetrics, names: dict[str, str]) -> dict[str, float]:
    """label: value for the metrics the profile has (the others stay absent)."""
    return {label: v for name, label in names.items() if (v := m.number(name)) is not None}


def _top_stalls(m: KernelMetrics, count: int = 3) -> dict[str, float]:
    found = {
        name[len(_STALL_PREFIX):-len(_STALL_SUFFIX)]: value
        for name, value in m.values.items()
        if name.startswith(_STALL_PREFIX) and name.endswith(_STALL_SUFFIX) and isinstance(value, float)
    }
    ranked = sorted(((k, v) for k, v in found.items() if k not in _NOT_STALLS and v > 0), key=lambda kv: -kv[1])
    return dict(ranked[:count])


def _limiter(m: KernelMetrics, theoretical: float | None) -> str | None:
    """What caps the resident blocks per SM; when the cap is high, the grid is what leaves slots empty."""
    limits = _pick(m, _LIMITS)
    if theoretical is not None and theoretical >= LOW_OCCUPANCY_PCT:
        waves = m.number("launch__waves_per_multiprocessor")
        if waves is not None and waves < 1:
            return f"the grid: {waves:.2f} waves per SM leave SMs idle"
    if not limits:
        return None
    least = min(limits.values())
    names = " and ".join(label for label, v in limits.items() if v == least)
    return f"{names} ({least:.0f} block{'' if least == 1 else 's'} per SM)"


def _duration_us(m: KernelMetrics) -> float | None:
    """gpu__time_duration in µs whatever unit ncu chose (it scales units unless told not to)."""
    value = m.number("gpu__time_duration.sum")
    if value is None:
        return None
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
    return value * scale.get(m.units.get("gpu__time_duration.sum", "ns"), 1e-3)


def _pct(value: float | None) -> str:
    return f"{value:.1f}%" if value is not None else "n/a"


class ProfileRecord(WireModel):
    """``profiles/attempt-N.json``: one attempt profiled under Nsight Compute (``--use-nsight``)."""

    schema_version: int = version_field(1)
    attempt: int
    case: str
    why: str = ""
    seconds: float = 0.0
    command: list[str] = Field(default_factory=list)
    card: BottleneckCard
    raw_csv: str = ""
