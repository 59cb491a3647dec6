"""Where a fleet's replicas run: ``--cpus-per-replica`` CPUs and ``--gpus-per-replica``
GPUs of each one's own (:mod:`ttlctl.server.cpus`, :mod:`ttlctl.server.gpus`), checked
and placed before any fleet starts.
"""

from __future__ import annotations

import os

from replay.validation.error import ValidateError
from replay.validation.servers import Sources
from ttlctl.server import command, cpus, gpus


def check_placement(cpus_per_replica: int | None, gpus_per_replica: int | None) -> None:
    """:class:`ValidateError` (one line) for a replica given fewer than one CPU or GPU.
    Checked before the machine is asked what it has, so a bad value is named as such.
    Both may be given: GPU replicas whose host threads are pinned to CPUs of their own."""
    for flag, per_replica in (
        ("--cpus-per-replica", cpus_per_replica),
        ("--gpus-per-replica", gpus_per_replica),
    ):
        if per_replica is not None and per_replica < 1:
            raise ValidateError(f"{flag} must be at least 1, not {per_replica}")


def replica_cpus(replicas: int, per_replica: int | None) -> tuple[tuple[int, ...], ...] | None:
    """Each replica's CPUs, none shared (None: unpinned)."""
    return None if per_replica is None else cpus.cpu_sets(replicas, per_replica)


def replica_gpus(
    sources: Sources, replicas: int, per_replica: int | None
) -> tuple[tuple[str, ...], ...] | None:
    """Each replica's GPUs (None: not placed), refused before any fleet starts when
    there are too few, one of them is in MIG mode but named whole, or the replicas' vLLM
    would not use them all."""
    if per_replica is None:
        return None
    assert sources.base_cmd is not None
    placed = gpus.gpu_sets(replicas, per_replica, gpus.visible_gpus(sources.env or os.environ))
    gpus.check_whole([g for gpu_set in placed for g in gpu_set])
    gpus.check_parallel(command.vllm_arguments(sources.base_cmd), per_replica)
    return placed
