"""``as-logged``: the routing that happened, from the trace's ``replica`` column (engine
logs from a fleet). Replica names are given indices in sorted order; a call without one
goes where its program's previous call went (replica 0 for a first call)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from replay.fleet.routers.base import FleetView, RoutedCall, Stateless
from ttlctl.errors import ConfigError


def replica_order(names: Iterable[str]) -> list[str]:
    """The logged replica names in replica order: replica ``i`` is the ``i``-th name."""
    return sorted(set(names))


def fitted_order(names: Iterable[str], replicas: int) -> list[str]:
    """:func:`replica_order`, refused (one line) when it names more than ``replicas``."""
    order = replica_order(names)
    if len(order) > replicas:
        raise ConfigError(
            f"--replicas {replicas}: the trace's replica column names {len(order)} replicas; "
            f"give --replicas {len(order)} (more leave the extra replicas idle)"
        )
    return order


@dataclass(slots=True)
class AsLogged(Stateless):
    names: Sequence[str]
    replicas: int
    name: str = "as-logged"
    _index: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._index = {n: i for i, n in enumerate(fitted_order(self.names, self.replicas))}

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        if call.logged_replica is not None:
            return self._index[call.logged_replica]
        previous = view.previous_replica(call.program)
        return 0 if previous is None else previous
