"""What a call costs after the engine has been idle, beyond the same call on a busy engine,
as :mod:`profiles.measure_server` times it (:func:`measure_wake`).

An agent's follow-up call often reaches a server that had nothing to run while the tool
ran. On vLLM's engine such a call runs slower than the same call right after another
(measured on vLLM's CPU engine with the 55M test model: after 0.1–3 s idle, a cached
1,024-token prefix + 128 new tokens, 8 tokens out, took 10–18 ms longer end to end, its
prefill step 5–7 ms longer and its first ~6 decode steps 5, 3, 2, 1, 0.5 ms longer; after
0.01–0.03 s idle, nothing). A fit of calls timed back to back never sees it.

Timed here, per pair: a prefix (:func:`wake_prefix`: half the longest prompt the profile
times) is sent alone (``max_tokens`` 1: its whole blocks are then cached); then one call
of the pair's shape, untimed (the "warm" call: that prefix and :data:`WAKE_NEW` fresh
tokens generating :data:`WAKE_OUTPUT`); at once the "busy" call, the same shape; then
:func:`time.sleep` of an idle gap (the real clock: the engine must really be idle); then the
"idle" call, the same shape with fresh new tokens again. The warm call is there because a
call right after a long prefill runs slow too (its first steps, as after an idle spell):
timed at once after the prefix's prefill, the busy call read several milliseconds long and
the extras that much short (on vLLM's CPU engine with the test model, median extras after
0.1 s and 1 s idle of −4 and 11 ms against 6 and 19 ms with the warm call: docs/results-log.md).
Each call is timed end to end on the client (sent to the stream's end:
:attr:`~profiles.decode_pace.Stream.total_s`) and the pair's extra is the idle call's time
less the busy call's. Each gap of :data:`IDLE_GAPS` gets ``max(repeats, WAKE_MIN_PAIRS)``
pairs, the gaps taken round robin so that drift hits both alike.
:func:`profiles.engine_fit.fit_samples` takes the median extra of each gap
(``Profile.wake``); the simulator charges it to the first step after each idle spell. The
measurement sleeps ``sum(IDLE_GAPS) × pairs`` seconds in all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from profiles.server_stream import Sender

#: fresh tokens each timed call adds to its cached prefix
WAKE_NEW = 64
#: tokens each timed call generates (the first decode steps after an idle spell are slow too)
WAKE_OUTPUT = 8
#: the idle gaps timed (seconds): read when :func:`measure_wake` runs. The wake grows
#: from 0.1 s to 1 s idle and no further (measured to 5 s: docs/results-log.md)
IDLE_GAPS: tuple[float, ...] = (0.1, 0.3, 1.0)
#: the fewest pairs a gap gets, whatever the profile's repeats: read when it runs
WAKE_MIN_PAIRS = 5
#: the shortest prefix timed (a few blocks of any block size)
MIN_PREFIX = 64

NO_ROOM = (
    f"not measured: the longest prompt timed leaves no room for a cached prefix of "
    f"{MIN_PREFIX} tokens beside {WAKE_NEW} new ones"
)


@dataclass(frozen=True, slots=True)
class Wake:
    """The timings: (idle seconds, each pair's extra seconds) per gap, or why there are
    none."""

    points: tuple[tuple[float, tuple[float, ...]], ...]
    #: why nothing was timed ("" when something was)
    note: str = ""


def wake_prefix(ctxs: Sequence[int]) -> int:
    """The cached prefix of every timed call: half the longest prompt the profile times
    (0: under :data:`MIN_PREFIX`, or no room beside :data:`WAKE_NEW` new tokens)."""
    longest = max(ctxs)
    prefix = longest // 2
    return prefix if prefix >= MIN_PREFIX and prefix + WAKE_NEW <= longest else 0


def measure_wake(
    sender: Sender,
    ctxs: Sequence[int],
    repeats: int,
    report: Callable[[str, int, int], None],
) -> Wake:
    """Each gap of :data:`IDLE_GAPS` timed ``max(repeats, WAKE_MIN_PAIRS)`` times, round
    robin (see the module's docstring)."""
    prefix_len = wake_prefix(ctxs)
    if not prefix_len:
        return Wake((), NO_ROOM)
    gaps = IDLE_GAPS
    pairs = max(repeats, WAKE_MIN_PAIRS)
    extras: dict[float, list[float]] = {gap: [] for gap in gaps}
    total = pairs * len(gaps)
    done = 0
    for _ in range(pairs):
        for gap in gaps:
            prefix = sender.tokens(prefix_len)
            sender.stream(sender.body(0, 1, prefix))
            _total_s(sender, prefix)  # the warm call: the engine's steps after a long prefill
            busy = _total_s(sender, prefix)
            time.sleep(gap)
            idle = _total_s(sender, prefix)
            extras[gap].append(idle - busy)
            done += 1
            report("wake", done, total)
    return Wake(tuple((gap, tuple(extras[gap])) for gap in sorted(gaps)))


def _total_s(sender: Sender, prefix: Sequence[int]) -> float:
    """One timed call (``prefix``, fresh new tokens): seconds from sent to the stream's end."""
    return sender.stream(sender.body(WAKE_NEW, WAKE_OUTPUT, prefix)).total_s
