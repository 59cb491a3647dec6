"""What a step of a size the engine has not run costs, beyond the same size again, as
:mod:`profiles.measure_server` times it (:func:`measure_new_shape`).

vLLM's engine builds its compute kernels for each new step size (scheduled tokens) once:
on its CPU engine with the 55M test model a fresh prompt of a length it had not run took
14–65 ms longer to prefill than the same length again, with another fresh prompt
(:mod:`profiles.new_shape`). A fit of prefills timed several times at each length (the
median of the repeats) prices the repeats, and never sees it; an agent's steps are of
every size, most of them new to a server just started.

Timed here: :data:`NEW_SHAPE_SIZES` prompt lengths, drawn at random (without a seed: the
engine must not have run them, and a fixed list would be run by the measurement before)
between the shortest and the longest context the profile times, none of them a context
the profile's other phases send as a context (a step of the same size from another phase
is possible, if rare: that length then reads about 0); for each, a fresh prompt of that
length (``max_tokens`` 1), then :data:`SEEN_AFTER` more fresh prompts of the same length,
one after the other; the length's
extra is the first TTFT less the median of the others (a length the engine had run reads
about 0, which is then true of that engine). :func:`profiles.engine_fit.fit_samples`
fits a Theil–Sen line through every (length, extra) and writes it at the shortest and the longest
length, never below 0 (``Profile.new_shape``).
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiles.server_stream import Sender

#: prompt lengths timed
NEW_SHAPE_SIZES = 8
#: fresh prompts of each length timed after the first
SEEN_AFTER = 2

NO_ROOM = "not measured: the contexts timed leave no room for new lengths between them"


@dataclass(frozen=True, slots=True)
class NewShape:
    """The timings: (length, its extra seconds) per length timed, or why there are none."""

    points: tuple[tuple[int, float], ...]
    #: why nothing was timed ("" when something was)
    note: str = ""


def new_lengths(ctxs: Sequence[int], avoid: Sequence[int], rng: random.Random) -> list[int]:
    """:data:`NEW_SHAPE_SIZES` distinct lengths between ``min(ctxs)`` and ``max(ctxs)``,
    none in ``avoid`` (what the measurement's other phases send), ascending (fewer where
    the span is short)."""
    lo, hi, taken = min(ctxs), max(ctxs), set(avoid)
    choices = [n for n in range(lo + 1, hi) if n not in taken]
    return sorted(rng.sample(choices, min(NEW_SHAPE_SIZES, len(choices))))


def measure_new_shape(
    sender: Sender,
    ctxs: Sequence[int],
    avoid: Sequence[int],
    report: Callable[[str, int, int], None],
) -> NewShape:
    """Each length of :func:`new_lengths` timed new, then again (the module's docstring;
    drawn with the sender's unseeded generator)."""
    lengths = new_lengths(ctxs, avoid, sender.rng)
    if not lengths:
        return NewShape((), NO_ROOM)
    points: list[tuple[int, float]] = []
    for i, n in enumerate(lengths):
        first = sender.stream(sender.body(n, 1)).ttft_s
        again = [sender.stream(sender.body(n, 1)).ttft_s for _ in range(SEEN_AFTER)]
        points.append((n, first - statistics.median(again)))
        report("new sizes", i + 1, len(lengths))
    return NewShape(tuple(points))
