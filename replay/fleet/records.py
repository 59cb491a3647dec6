"""The shapes a fleet replay adds to each policy's record in ``replay.json``, how a
table names one of its replicas (:func:`replica_labels`) and which of a large fleet's
replicas a table shows (:func:`shown_replicas`: the command line's and the report's) and
how its title says so (:func:`shown_phrase`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NotRequired, TypedDict


class FleetRouter(TypedDict):
    """The router: its name, its settings (defaults filled in), the replicas and, when
    given, the replicas' URLs it placed sessions by; ``as-logged``: the trace's name of
    each replica, in replica order (None: one beyond the names)."""

    name: str
    settings: dict[str, float | int | str | None]
    replicas: int
    worker_urls: NotRequired[list[str]]
    replica_names: NotRequired[list[str | None]]
    #: ``kv-aware`` credited no call with its cached prefix (only where off)
    prefix_credit: NotRequired[bool]


class ReplicaResult(TypedDict):
    replica: int
    #: the trace's name of the replica (``as-logged``, null for a replica beyond the
    #: trace's names, as in ``replica_names``; absent with any other router)
    name: NotRequired[str | None]
    llm_calls: int
    #: programs whose first call this replica served, and their mean JCT
    programs_started: int
    jct_mean_s: float | None
    ttft_mean_s: float | None
    #: the TTFT (from the send) and two of its parts: from reaching the replica's scheduler
    #: to first scheduled (vLLM's queue time; the fleet's ``queue_mean_s`` counts from the
    #: send, as one engine's does), and from there to the first token
    scheduler_queue_mean_s: float | None
    prefill_mean_s: float | None
    #: from the first token to the last (vLLM's decode time)
    decode_mean_s: float | None
    prefix_hit_rate: float | None
    preemptions: int
    engine_busy_s: float
    engine_steps: int
    pins_made: int
    pinned_token_seconds: float


class MissReasons(TypedDict):
    """Follow-up calls whose prefix hit fell short, by why (``replay.fleet.metrics``)."""

    routed_elsewhere: int
    never_pinned: int
    expired: int
    released_by_valve: int
    evicted: int


#: how the command line's and the report's tables say ``prefix_credit: false``
UNCREDITED = "no call credited with its cached prefix"


def credit_phrase(router: Mapping[str, Any]) -> str | None:
    """:data:`UNCREDITED` for a router record whose ``kv-aware`` credited no call, else None."""
    return UNCREDITED if router.get("prefix_credit") is False else None


def replica_labels(per_replica: Sequence[Mapping[str, Any]]) -> list[str]:
    """How a table names each entry of a ``per_replica`` list: by the trace's ``name``
    (as-logged), else by its index; in a fleet with names, an index is written ``#i``,
    since a name may be a number (names ``1`` and ``2`` are replicas 0 and 1, and a third,
    unnamed replica is ``#2``, whether its ``name`` is null or, in an older file, absent)."""
    index = "#{}" if any(rep.get("name") is not None for rep in per_replica) else "{}"
    return [
        index.format(rep.get("replica")) if rep.get("name") is None else str(rep["name"])
        for rep in per_replica
    ]


#: a fleet of more replicas than this is shown by the busiest and the least busy of those
#: that served calls (half of this each), the rest counted
MAX_REPLICA_ROWS = 24


def _figure(rep: Mapping[str, Any], key: str) -> float:
    """A replica's figure for ranking: 0 when it is no number (the report reads edited
    files)."""
    value = rep.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return 0.0


def _served(per_replica: Sequence[Mapping[str, Any]]) -> list[int]:
    """The replicas that served calls, busiest (engine-busy seconds) first, ties by index."""
    return sorted(
        (i for i, rep in enumerate(per_replica) if _figure(rep, "llm_calls") > 0),
        key=lambda i: (-_figure(per_replica[i], "engine_busy_s"), i),
    )


def _elides(served: int) -> bool:
    """Whether the replicas that served calls are too many to list (a line counting one
    replica would save no row)."""
    return served > MAX_REPLICA_ROWS + 1


def shown_replicas(per_replica: Sequence[Mapping[str, Any]]) -> list[int | str]:
    """The rows of one policy's replicas, in order: each replica's index in a fleet of up
    to :data:`MAX_REPLICA_ROWS`; in a larger one the replicas that served calls (the
    busiest half of that number by engine-busy seconds, a line counting those between,
    the least busy half), then a line counting those that served none. Read defensively
    (the report reads edited files): a figure that is no number counts as 0."""
    count = len(per_replica)
    if count <= MAX_REPLICA_ROWS:
        return list(range(count))
    active = _served(per_replica)
    half = MAX_REPLICA_ROWS // 2
    rows: list[int | str] = list(active)
    if _elides(len(active)):
        rows = [*active[:half], f"… {len(active) - 2 * half:,} more", *active[-half:]]
    idle = count - len(active)
    if idle:
        rows.append(f"… {idle:,} served no call")
    return rows


def shown_phrase(per_replica: Sequence[Mapping[str, Any]]) -> str:
    """What :func:`shown_replicas` shows of one policy's ``per_replica``, in words for a
    table's title or the line under it; "" when it lists every replica in order."""
    count = len(per_replica)
    if count <= MAX_REPLICA_ROWS:
        return ""
    served = len(_served(per_replica))
    half = MAX_REPLICA_ROWS // 2
    if _elides(served):
        return (
            f"of {count:,}, the {half} busiest and the {half} least busy of those that "
            "served calls, the rest counted"
        )
    if served < count:
        return f"of {count:,}, those that served calls, busiest first, the rest counted"
    return f"of {count:,}, busiest first"
