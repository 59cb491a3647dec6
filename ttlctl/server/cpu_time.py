"""CPU seconds a process group has used, read from Linux's ``/proc``.

``validate --replicas`` reads it around each live run for every process group of the fleet
(each replica's API server with its engine core, the router: each is started as the
leader of a group of its own, :func:`~ttlctl.server.process.launch`) and for itself (the
client): on a machine where the replicas have CPUs of their own but the router and the
client share them, what the unpinned processes took is CPU time the replicas did not
have, and a profile measured one request at a time did not see.

A process's ``utime`` + ``stime`` (fields 14 and 15 of ``/proc/PID/stat``, in clock
ticks) count its own threads, and its ``cutime`` + ``cstime`` (16 and 17) the children it
has waited for. A group's figure sums them over its members, zombies included: a member
that ends keeps its time in its own entry until its parent waits for it, which moves it
into the parent's child fields, so the group's total only grows and a difference of two
readings is what the group used between them. (A member whose parent is outside the
group, or that is never waited for, drops out when it goes: vLLM's servers wait for
theirs.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from ttlctl.server.process import process_stats

#: clock ticks per second, as ``/proc`` counts CPU time
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
#: utime, stime, cutime and cstime (fields 14 to 17), as :func:`process_stats` gives them
_CPU_FIELDS = (11, 12, 13, 14)


def group_cpu_s(pgids: Iterable[int]) -> dict[int, float | None]:
    """{process group: CPU seconds its members have used} (None: no live member)."""
    wanted = set(pgids)
    ticks = dict.fromkeys(wanted, 0)
    live: set[int] = set()
    for _, fields in process_stats():
        pgrp = int(fields[2])
        if pgrp in wanted:
            ticks[pgrp] += sum(int(fields[i]) for i in _CPU_FIELDS)
            if fields[0] not in ("Z", "X"):
                live.add(pgrp)
    return {g: ticks[g] / _TICKS if g in live else None for g in wanted}


def own_cpu_s() -> float:
    """CPU seconds this process has used, all its threads (``os.times``)."""
    t = os.times()
    return t.user + t.system


#: the name :func:`cpu_used` gives this process (the client)
SELF = "client"


@contextmanager
def cpu_used(groups: Mapping[str, int | None]) -> Iterator[dict[str, float | None]]:
    """CPU seconds each of ``groups`` ({name: process group id}: a group leader's pid)
    and this process (:data:`SELF`) use while the block runs: the dict yielded is filled
    when it ends (None: a group with no live member at either end)."""
    pgids = {name: g for name, g in groups.items() if g is not None}
    before, own = group_cpu_s(pgids.values()), own_cpu_s()
    used: dict[str, float | None] = {}
    yield used
    after = group_cpu_s(pgids.values())
    for name in groups:
        g = pgids.get(name)
        a, b = (None, None) if g is None else (after[g], before[g])
        used[name] = None if a is None or b is None else a - b
    used[SELF] = own_cpu_s() - own
