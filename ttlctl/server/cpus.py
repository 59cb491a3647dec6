"""Replicas on CPUs of their own (``--cpus-per-replica K``): which CPUs, and how a server
is held to them.

On a CPU, vLLM's model runs in OpenMP threads, and by default (``VLLM_CPU_OMP_THREADS_BIND
=auto``) every server binds them to all the CPUs its process may use: two replicas on
one machine then split the same cores, and each runs slower whenever the other computes.
A simulated replica does not share anything (as on a GPU fleet, one device each), so
``validate --replicas N`` can only be fair on a CPU when each replica has cores of its
own. :func:`cpu_sets` gives replica ``i`` the ``i``-th run of ``K`` CPUs among those this
process may use (``os.sched_getaffinity``); :func:`pinned_command` starts a server under
``taskset -c`` on its set (the API server, its EngineCore and every thread inherit it),
and :func:`pinned_environment` sets vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` to the same list,
so the model's threads bind there (``OMP_NUM_THREADS`` = ``K``), not to every CPU.
Whatever runs unpinned (the router, ttlctl's own client) shares all CPUs.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

from ttlctl.nouns import counted
from ttlctl.server.command import CommandError

#: vLLM's CPU backend: the CPUs its OpenMP threads bind to (``auto``: all it may use)
OMP_BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"
#: util-linux's command that runs a program on a CPU set
TASKSET = "taskset"


def available_cpus() -> tuple[int, ...]:
    """The CPUs this process may run on, in order."""
    return tuple(sorted(os.sched_getaffinity(0)))


def cpu_sets(
    replicas: int, per_replica: int, available: Sequence[int] | None = None
) -> tuple[tuple[int, ...], ...]:
    """``per_replica`` CPUs for each of ``replicas`` servers, none shared: replica ``i``
    gets ``available[i·K : (i+1)·K]``. :class:`CommandError` (one line) when there are
    too few."""
    if per_replica < 1:
        raise CommandError(f"--cpus-per-replica must be at least 1, not {per_replica}")
    cpus = tuple(available if available is not None else available_cpus())
    need = replicas * per_replica
    if need > len(cpus):
        raise CommandError(
            f"--cpus-per-replica {per_replica} with {counted(replicas, 'replica')} needs "
            f"{counted(need, 'CPU')}; "
            f"this process may use {len(cpus)} ({cpu_list(cpus)})"
        )
    return tuple(cpus[i * per_replica : (i + 1) * per_replica] for i in range(replicas))


def cpu_list(cpus: Sequence[int]) -> str:
    """``0,1,2``: the list form ``taskset -c`` and ``VLLM_CPU_OMP_THREADS_BIND`` take."""
    return ",".join(str(c) for c in cpus)


def pinned_command(command: Sequence[str], cpus: Sequence[int]) -> list[str]:
    """``command`` run on ``cpus`` only (``taskset -c LIST command…``; it execs the
    command, so the process id and group are the command's). :class:`CommandError` when
    ``taskset`` is not installed."""
    taskset = shutil.which(TASKSET)
    if taskset is None:
        raise CommandError(
            f"--cpus-per-replica needs {TASKSET} (util-linux) on PATH to pin each replica"
        )
    return [taskset, "-c", cpu_list(cpus), *command]


def pinned_environment(env: Mapping[str, str], cpus: Sequence[int]) -> dict[str, str]:
    """``env`` with vLLM's OpenMP threads bound to ``cpus`` (one thread per CPU)."""
    return {**env, OMP_BIND_ENV: cpu_list(cpus)}
