"""The bar of work told in stages and counted: refit's replays, validate's live runs (with
``--resimulate``, the runs simulated again) (and, built on it, replay's calls:
:class:`ttlctl.cli.replay.ReplayBar`). On a terminal: the command's label, the count done of
all (``?`` before it is known), the time, and the stage running; elsewhere nothing is
drawn (:func:`~ttlctl.cli.kit.progress_bar`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Self

from rich.progress import Progress, TaskID

from ttlctl.cli.kit import progress_bar


@dataclass(frozen=True, slots=True)
class StageBar:
    """``with bar.bar:`` draws it; :meth:`stage` and :meth:`runs` are the libraries'
    callbacks (the stage's text; the runs done of all)."""

    bar: Progress
    task: TaskID

    @classmethod
    def make(cls, label: str) -> Self:
        bar = progress_bar(label)
        return cls(bar, bar.add_task("", total=None))

    def stage(self, text: str) -> None:
        self.bar.update(self.task, description=text, refresh=True)

    def runs(self, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total, refresh=True)
