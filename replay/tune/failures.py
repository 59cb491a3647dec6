"""What stopped a study, as one line: a trial's error (:class:`TrialError`), or the worker
processes that failed (:func:`workers_error`: how many, the first to exit, and whether the
others failed alike).

Where each failure's own words are kept: a worker's crash (a bug's traceback, a kill) is on
the tune command's stderr (the workers share it; no file keeps it); a trial's error is in
the study, as that trial's ``error`` attribute (and nowhere else: a worker stopped by its
trial prints nothing), for as long as the study's storage is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from replay.tune.context import TuneError


class TrialError(TuneError):
    """A trial's error that stops the study: ``trial N: <its one line>``."""

    def __init__(self, number: int, cause: str) -> None:
        super().__init__(f"trial {number}: {cause}")
        self.number = number


@dataclass(frozen=True, slots=True)
class WorkerFailure:
    """One worker process that exited badly: by its trial's error (``trial`` its number,
    ``cause`` the error) or otherwise (``trial`` None, ``cause`` its exit code)."""

    index: int
    cause: str
    trial: int | None = None

    @classmethod
    def exited(cls, index: int, code: int | None) -> WorkerFailure:
        return cls(index, f"exited with code {code} (its error is printed above)")

    @property
    def line(self) -> str:
        if self.trial is not None:
            return f"trial {self.trial}: {self.cause}"
        return f"worker {self.index} {self.cause}"

    def error(self) -> TuneError:
        """This failure alone, as the study's error."""
        if self.trial is not None:
            return TrialError(self.trial, self.cause)
        return TuneError(self.line)


class WorkersFailed(TuneError):
    """Several of a study's worker processes failed (:func:`workers_error`): how many, the
    first to exit, then "alike" when every other was stopped by the same trial error, else
    where the others' errors are."""

    def __init__(self, failures: Sequence[WorkerFailure], workers: int) -> None:
        first, others = failures[0], failures[1:]
        if first.trial is not None and all(
            f.trial is not None and f.cause == first.cause for f in others
        ):
            rest = "the other alike" if len(others) == 1 else f"the other {len(others)} alike"
        else:
            where = []
            if any(f.trial is None for f in others):
                where.append("on stderr above")
            if any(f.trial is not None for f in others):
                where.append("in the study (each trial's `error` attribute)")
            rest = ("the other's error: " if len(others) == 1 else "the others' errors: ") + (
                ", ".join(where)
            )
        super().__init__(
            f"{len(failures)} of {workers} tune workers failed; the first: {first.line}; {rest}"
        )
        self.failures = tuple(failures)
        self.workers = workers


def workers_error(failures: Sequence[WorkerFailure], workers: int) -> TuneError:
    """The one-line error for the ``failures`` (in the order the workers exited, at least
    one) of ``workers`` processes: one failure is told as itself (``trial N: …``, ``worker
    I exited with code C …``); several as :class:`WorkersFailed`."""
    if not failures:
        raise ValueError("workers_error needs at least one failure")
    if len(failures) == 1:
        return failures[0].error()
    return WorkersFailed(failures, workers)
