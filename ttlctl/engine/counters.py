"""The plugin's counters: attributes for tests, Prometheus series for ``/metrics``.

vLLM's own scheduler statistics (``SchedulerStats`` from ``Scheduler.make_stats``)
are a fixed dataclass the front end turns into ``vllm:*`` series; a plugin cannot
add fields to it. So the counters go to ``prometheus_client``'s default registry
in the process that runs the scheduler:

- in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) that is the registry vLLM's
  ``/metrics`` serves (``vllm.v1.metrics.prometheus.get_prometheus_registry``);
- with a separate engine-core process (the default server) they reach
  ``/metrics`` only in Prometheus multiprocess mode: start the server with
  ``PROMETHEUS_MULTIPROC_DIR`` set (an empty directory) so both processes write
  and read it.

Series (all ``ttlctl:`` prefixed): ``pins_made_total``, ``pins_hit_total``
(handed over to the program's next call), ``pins_expired_total``,
``pins_released_total`` (by the valve, under memory pressure),
``pins_dropped_total`` (abort, last call, replaced, prefix-cache reset),
``pins_refused_total`` (the pin cap), ``pins_deferred_total`` (not made: vLLM defers
freeing the request's blocks, as with a KV connector under async scheduling), and the
gauges ``pinned_blocks`` and ``pinned_programs``. The bundle's series (reloads, refusals,
in force or stock) are :mod:`ttlctl.engine.bundle_series`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttlctl.engine.prom import ProcessSeries
from ttlctl.series import PIN_COUNTERS, PINNED_BLOCKS, PINNED_PROGRAMS, pin_counter

COUNTERS = PIN_COUNTERS
_DOC = {
    "made": "Pins made: finished requests whose KV blocks were kept",
    "hit": "Pins handed over to the program's next call",
    "expired": "Pins released at their expiry",
    "released": "Pins released by the valve under memory pressure",
    "dropped": "Pins released on abort, last call, replacement or cache reset",
    "refused": "Pins not made because of the pin cap",
    "deferred": "Pins not made because vLLM defers freeing the blocks (KV connector)",
}


def _make(counter: Any, gauge: Any) -> dict[str, Any]:
    series: dict[str, Any] = {name: counter(pin_counter(name), _DOC[name]) for name in COUNTERS}
    series["blocks"] = gauge(
        PINNED_BLOCKS, "KV blocks held by pins now", multiprocess_mode="livesum"
    )
    series["programs"] = gauge(
        PINNED_PROGRAMS, "Programs holding a pin now", multiprocess_mode="livesum"
    )
    return series


_SERIES = ProcessSeries(_make)


@dataclass(slots=True)
class Counters:
    made: int = 0
    hit: int = 0
    expired: int = 0
    released: int = 0
    dropped: int = 0
    refused: int = 0
    deferred: int = 0
    pinned_blocks: int = 0
    pinned_programs: int = 0
    export: bool = True
    _series: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.export:
            self._series = _SERIES.get()

    def bump(self, name: str, n: int = 1) -> None:
        setattr(self, name, getattr(self, name) + n)
        if self._series is not None:
            self._series[name].inc(n)

    def pinned(self, blocks: int, programs: int) -> None:
        """Set the gauges (a delta on the shared series: several engines may share it)."""
        if self._series is not None:
            self._series["blocks"].inc(blocks - self.pinned_blocks)
            self._series["programs"].inc(programs - self.pinned_programs)
        self.pinned_blocks = blocks
        self.pinned_programs = programs

    def snapshot(self) -> dict[str, int]:
        out = {name: int(getattr(self, name)) for name in COUNTERS}
        out["pinned_blocks"] = self.pinned_blocks
        out["pinned_programs"] = self.pinned_programs
        return out
