"""The GPU workers an API function measures on: chosen from ``device``/``devices``/``ray`` as the
commands' ``--device``/``--devices``/``--ray`` choose them (bad input before any work), started
only once everything else has been read and checked, and what left the pool said as notices.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..pool import pools
from ..pool.devices import choose
from ..pool.dispatch import Evaluator
from ..record.events import Notice, OnProgress, ignore
from .arguments import check as check_arguments

Devices = int | str | Sequence[int] | None  # an ordinal, "all" or "0,1", or a list of ordinals


@dataclass(frozen=True)
class Choice:
    """The GPUs asked for: ordinals of this machine (None: every one it may use), or a Ray cluster."""

    ordinals: list[int] | None
    ray: str | None


def chosen(device: int | None = None, devices: Devices = None, ray: str | None = None) -> Choice:
    """The GPUs ``device`` (one ordinal), ``devices`` (``all``, ``"0,1"`` or a list) and ``ray`` ask
    for; the default is GPU 0, as for a command given none of its GPU flags."""
    if isinstance(devices, (list, tuple, range)):
        devices = ",".join(str(d) for d in devices)
    elif devices is not None:
        devices = str(devices)  # an ordinal; anything else is refused as the flag's text would be
    return Choice(choose(device, devices, ray), ray)


@contextlib.contextmanager
def workers(choice: Choice, evaluator: Evaluator | None = None, on_progress: OnProgress = ignore) -> Iterator[Evaluator]:
    """``evaluator`` when one is given (an open pool, a scripted one), else a pool on ``choice``,
    closed on leaving; each GPU that left the pool is a :class:`Notice`."""
    if evaluator is not None:
        yield evaluator
        return
    pool = pools.open_pool(choice.ordinals, choice.ray)
    try:
        with pool:
            yield pool
    finally:
        for line in pool.notices:
            on_progress(Notice(f"notice: {line}"))


@contextlib.contextmanager
def gpus(devices: Devices = None, ray: str | None = None) -> Iterator[Evaluator]:
    """A pool of GPU workers kept open for several calls in a row (``evaluator=`` of each), one per
    GPU of ``devices`` (default GPU 0; ``"all"``: every visible one) or of a Ray cluster at ``ray``;
    closed on leaving the ``with`` block."""
    check_arguments({"ray": ray})
    with workers(chosen(None, devices, ray)) as pool:
        yield pool
