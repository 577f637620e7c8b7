"""What a command shows on standard error while the API works: one status line, moved on by the
API's progress events, and each notice printed above it."""

from __future__ import annotations

from .. import api
from .app import console, say


class Status:
    """A spinner whose text follows :class:`StepProgress` (``what (done/total)``) and
    :class:`PhaseProgress` (the worker's phase and case); a :class:`Notice` is a line above it."""

    def __init__(self, text: str):
        self.err = console(stderr=True)
        self.step = text
        self.spinner = self.err.status(f"{text}…")

    def __enter__(self) -> Status:
        self.spinner.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.spinner.__exit__(*exc)

    def __call__(self, event) -> None:
        if isinstance(event, api.Notice):
            say(self.err, event.text)
        elif isinstance(event, api.StepProgress):
            self.step = event.what
            counted = f" ({event.done}/{event.total})" if event.total else ""
            self.spinner.update(f"{event.what}{counted}…")
        elif isinstance(event, api.PhaseProgress):
            self.spinner.update(f"{self.step}: {event.phase} {event.case}".rstrip() + "…")
