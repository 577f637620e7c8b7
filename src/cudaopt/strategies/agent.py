"""The ``agent`` and ``agent+tune`` strategies: the LangGraph loop (agent/graph.py) with a model."""

from __future__ import annotations

from ..agent.graph import Optimizer
from ..agent.instruments import Instruments
from ..agent.model import ModelClient, make_chat_model
from ..agent.research import search_cuda_docs
from ..errors import ExperimentError
from ..compilekit.locate import find_tool
from ..compilekit.target import DEFAULT_ARCH
from ..engine.recorder import Candidate
from .base import Context, register


class _Agent:
    needs_model = True
    needs_initial_kernel = False  # the model writes the first kernel from the description and the reference
    tune = False

    def check(self, experiment, origin: str) -> None:
        """Without an initial kernel the speed-ups are over the first vendor, so one is needed."""
        if experiment.initial_kernel_path is None and not experiment.vendors:
            raise ExperimentError(origin, "initial_kernel", "missing, and no vendor to measure the model's kernels "
                                                            "against: give --initial-kernel, or a 'vendor' section "
                                                            "(PyTorch eager, say)")

    def ahead(self, ctx: Context) -> list[Candidate]:
        return []  # the model's kernels are not known before it is asked

    def run(self, ctx: Context) -> str:
        rec = ctx.recorder
        device = rec.evaluator.device_info()

        def gpu_info() -> dict:
            """The GPU the kernels run on: name, architecture, SM count, L2 size, shared memory limit, peak bandwidth."""
            return device.model_dump(mode="json")

        tools = {"gpu_info": gpu_info}
        if ctx.research:
            tools["search_cuda_docs"] = search_cuda_docs
        instruments = None
        if ctx.use_nsight:
            instruments = Instruments(rec, ncu_path=find_tool("ncu"), device=ctx.device_index,
                                      arch=device.arch or DEFAULT_ARCH, patience=ctx.budget.patience)
            tools.update(instruments.tools())
        chat = ctx.chat_model if ctx.chat_model is not None else make_chat_model(ctx.model)
        client = ModelClient(chat, ctx.model, tools)
        return Optimizer(rec, client, ctx.budget, tune=self.tune, research=ctx.research,
                         instruments=instruments, proposals=ctx.proposals).execute()


@register("agent")
class AgentStrategy(_Agent):
    """A model proposes complete kernels; each is checked, timed and fed back."""


@register("agent+tune")
class AgentTuneStrategy(_Agent):
    """As ``agent``, and a proposal may declare tunables: every configuration is swept."""

    tune = True
