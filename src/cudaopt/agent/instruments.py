"""The model's instruments (``--use-nsight``): bottleneck cards from Nsight Compute, compiled-code summaries.

``profile_kernel(attempt_id)`` profiles an attempt that passed every check; ``inspect_compiled
(attempt_id)`` summarises its SASS or PTX and needs no GPU. The loop also profiles the best kernel
itself once progress stalls (``stall_after`` proposals in a row that did not beat it: half the
patience budget, or 2 without one) and puts the card into the next prompt, so a model that does not
ask still sees what bounds the kernel. Cards are cached per attempt in ``profiles/attempt-N.json``
with ncu's raw CSV. When ncu cannot profile here at all (absent, or the counters are not permitted)
that is said once, and the run goes on without profiles.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from ..engine.recorder import ROLES, Recorder
from ..compilekit.compiler import CompileError
from ..compilekit.target import DEFAULT_ARCH
from ..insight import ncu
from ..insight.card import BottleneckCard, CardError, ProfileRecord, build_card
from ..insight.compiled import summarize
from ..record.files import Attempt
from ..record.rundir import RunDir
from ..wire.launch import device_defines, device_facts
from ..wire.protocol import KernelSpec

STALL_AFTER = 2


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


class Instruments:
    def __init__(self, recorder: Recorder, *, ncu_path: str | None, device: int = 0, arch: str = DEFAULT_ARCH,
                 patience: int | None = None, notice: Callable[[str], None] = _stderr):
        self.rec = recorder
        self.ncu_path = ncu_path
        self.device = device
        self.arch = arch
        self.stall_after = max(1, patience // 2) if patience else STALL_AFTER
        self.notice = notice
        self.unavailable: str | None = None
        self.cards: dict[int, BottleneckCard] = {}
        self.failures: dict[int, str] = {}  # attempts whose profile failed: not tried again
        if ncu_path is None:
            self._disable("ncu (Nsight Compute) is not on PATH, in /usr/local/cuda/bin or in $CUDA_HOME/bin; "
                          "install Nsight Compute to profile")
        self.offered = ("profile_kernel", "inspect_compiled") if self.unavailable is None else ("inspect_compiled",)

    def tools(self) -> dict[str, Callable[..., dict]]:
        return {name: getattr(self, name) for name in self.offered}

    # --- the tools -----------------------------------------------------------------------

    def profile_kernel(self, attempt_id: int) -> dict:
        """Profile one of your attempts that passed every check with Nsight Compute (one checked launch on the
        largest performance case). Returns its bottleneck card: whether memory, compute, latency or occupancy
        bounds it, the rule that decided, and the numbers behind it (throughput as % of peak, occupancy and
        what limits it, cache hit rates, shared-memory bank conflicts, the top warp stall reasons)."""
        attempt = self._attempt(attempt_id)
        if attempt.source_file is None:
            return {"error": f"attempt #{attempt.id} has no kernel (the vendor baseline, or rejected)"}
        if attempt.status != "ok":
            return {"error": f"attempt #{attempt.id} did not pass its checks ({attempt.status}); "
                             "only passed attempts are profiled"}
        card, error = self.card(attempt)
        if card is None:
            return {"error": error}
        return {"attempt": attempt.id, "case": card.case, "bound": card.bound, "card": card.to_text()}

    def inspect_compiled(self, attempt_id: int) -> dict:
        """Summarise what the compiler made of one of your attempts: its SASS when a disassembler is available,
        its PTX otherwise (the answer says which). Instruction mix, global load/store widths (128-bit means
        vectorised), shared-memory loads and stores, FMAs and FMAs per global load, local-memory (spill)
        traffic, and the registers, spills and shared memory ptxas reported. Counts are static, not executed."""
        attempt = self._attempt(attempt_id)
        source = self.rec.source(attempt)
        if source is None:
            return {"error": f"attempt #{attempt.id} has no source: it was rejected before compiling"}
        spec = KernelSpec(source=source, entry=self.rec.exp.signature.name, defines=dict(attempt.defines))
        spec = device_defines(spec, device_facts(self.rec.evaluator.device_info()))
        try:
            summary = summarize(spec, (attempt.compile.arch if attempt.compile else "") or self.arch)
        except CompileError as exc:
            return {"error": f"attempt #{attempt.id} does not compile: {exc.log[:1500]}"}
        return {"attempt": attempt.id, **summary.model_dump(mode="json")}

    # --- cards ---------------------------------------------------------------------------

    def card(self, attempt: Attempt, why: str = "asked by the model") -> tuple[BottleneckCard | None, str]:
        """The attempt's card (cached, or profiled now), or None and why not."""
        if attempt.id in self.cards:
            return self.cards[attempt.id], ""
        if self.unavailable or attempt.id in self.failures:
            return None, self.unavailable or self.failures[attempt.id]
        name = RunDir.profile(attempt.id)
        if self.rec.run.file(name).is_file():  # a resumed run
            self.cards[attempt.id] = ProfileRecord.model_validate(self.rec.run.read_json(name)).card
            return self.cards[attempt.id], ""
        try:
            profile = ncu.profile(self._request(attempt), self.ncu_path, device=self.device)
            card = build_card(profile.metrics, case=profile.case, attempt=attempt.id)
        except ncu.NsightUnavailable as exc:
            self._disable(str(exc))
            return None, str(exc)
        except (ncu.ProfileError, CardError) as exc:
            self.failures[attempt.id] = f"attempt #{attempt.id} could not be profiled: {exc}"
            self.rec.run.log(self.failures[attempt.id])
            return None, self.failures[attempt.id]
        self.rec.run.write_model(name, ProfileRecord(attempt=attempt.id, case=profile.case, why=why,
                                                     seconds=profile.seconds, command=profile.command, card=card,
                                                     raw_csv=profile.raw_csv))
        self.rec.run.log(f"profiled attempt {attempt.id} on {profile.case} ({why}, {profile.seconds} s): "
                         f"{card.bound}-bound")
        self.cards[attempt.id] = card
        return card, ""

    def stalled_card(self) -> str | None:
        """The best kernel's card once ``stall_after`` proposals in a row have not beaten it, else None."""
        best = self.rec.best
        if self.unavailable or best is None or self.rec.since_best("proposal") < self.stall_after:
            return None
        card, _ = self.card(best, why=f"no new best for {self.stall_after} proposals")
        return card.to_text() if card else None

    def _request(self, attempt: Attempt):
        request = self.rec.exp.request(self.rec.source(attempt), launch=attempt.launch, defines=attempt.defines,
                                       roles=ROLES, request_id=f"profile-{attempt.id}")
        return ncu.profile_request(request)

    def _attempt(self, attempt_id: int) -> Attempt:
        index = int(attempt_id)
        if not 0 <= index < len(self.rec.attempts):
            raise ValueError(f"no attempt #{index}; the attempts are #0 to #{len(self.rec.attempts) - 1}")
        return self.rec.attempts[index]

    def _disable(self, reason: str) -> None:
        self.unavailable = reason
        self.rec.run.log(f"--use-nsight: {reason}; no profiles in this run")
        self.notice(f"--use-nsight: {reason}; continuing without profiling")
