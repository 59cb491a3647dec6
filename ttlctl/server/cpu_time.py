"""CPU seconds a process and its descendants have used, read from Linux's ``/proc``.

``validate --replicas`` reads it around each live run for every process of the fleet (each
replica's API server with its engine core, the router) and for itself (the client): on a
machine where the replicas have CPUs of their own but the router and the client share
them, what the unpinned processes took is CPU time the replicas did not have, and a
profile measured one request at a time did not see.

A process's ``utime`` + ``stime`` (fields 14 and 15 of ``/proc/PID/stat``, in clock
ticks) count its own threads, and its ``cutime`` + ``cstime`` (16 and 17) the children it
has waited for. A live descendant's are read from its own entry; one that ends and is
waited for meanwhile moves its whole time into its parent's child fields, so the tree's
total only grows, and a difference of two readings is what the tree used between them.
(A child that ends and is never waited for drops out: vLLM's servers wait for theirs.)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

#: clock ticks per second, as ``/proc`` counts CPU time
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (None: gone, or no /proc)."""
    try:
        text = open(f"/proc/{pid}/stat").read()  # noqa: SIM115 - read at once
    except OSError:
        return None
    # the command name is in parentheses and may hold spaces: split after its last ")"
    return text[text.rfind(")") + 2 :].split()


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid."""
    by_parent: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return by_parent
    for entry in entries:
        if not entry.isdigit():
            continue
        fields = _stat(int(entry))
        if fields is not None:
            by_parent.setdefault(int(fields[1]), []).append(int(entry))
    return by_parent


def tree_cpu_s(pids: Iterable[int]) -> dict[int, float | None]:
    """{pid: CPU seconds used by it and its live descendants} (None: not running)."""
    children = _children()
    out: dict[int, float | None] = {}
    for root in pids:
        if _stat(root) is None:
            out[root] = None
            continue
        total, todo, seen = 0, [root], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            fields = _stat(pid)
            if fields is None:
                continue
            # after the name: state is field 3, so utime, stime, cutime and cstime
            # (14 to 17) are at 11 to 14
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
            todo.extend(children.get(pid, ()))
        out[root] = total / _TICKS
    return out


def own_cpu_s() -> float:
    """CPU seconds this process has used, all its threads (``os.times``)."""
    t = os.times()
    return t.user + t.system


#: the name :func:`cpu_used` gives this process (the client)
SELF = "client"


@contextmanager
def cpu_used(procs: Mapping[str, int | None]) -> Iterator[dict[str, float | None]]:
    """CPU seconds each of ``procs`` ({name: pid}, with its descendants) and this process
    (:data:`SELF`) use while the block runs: the dict yielded is filled when it ends
    (None: a process not running at either end)."""
    pids = {name: pid for name, pid in procs.items() if pid is not None}
    before, own = tree_cpu_s(pids.values()), own_cpu_s()
    used: dict[str, float | None] = {}
    yield used
    after = tree_cpu_s(pids.values())
    for name in procs:
        pid = pids.get(name)
        a, b = (None, None) if pid is None else (after.get(pid), before.get(pid))
        used[name] = None if a is None or b is None else a - b
    used[SELF] = own_cpu_s() - own
