"""The bundle's Prometheus series: reloads, refusals, and whether a policy is in force.

The watcher (:mod:`ttlctl.engine.watch`) counts what happened to the bundle file;
:meth:`BundleSeries.observe` turns its counts into ``ttlctl:bundle_reloads_total``,
``ttlctl:bundle_refused_total`` and the gauge ``ttlctl:bundle_active`` (1: a bundle's
policy is in force; 0: the engine serves as stock vLLM), in the same registry as the pin
counters (:mod:`ttlctl.engine.counters`: multiprocess mode reaches ``/metrics``). An
operator alerts on ``ttlctl:bundle_active == 0`` (the fallback to stock) and on refusals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ttlctl.engine.prom import ProcessSeries
from ttlctl.engine.watch import BundleWatcher
from ttlctl.series import BUNDLE_ACTIVE, BUNDLE_REFUSED, BUNDLE_RELOADS


def _make(counter: Any, gauge: Any) -> dict[str, Any]:
    return {
        "reloads": counter(BUNDLE_RELOADS, "Bundle files that replaced the policy"),
        "refused": counter(BUNDLE_REFUSED, "Bundle files refused (missing, damaged or foreign)"),
        # several engine cores in one server: 0 as soon as one of them serves stock
        "active": gauge(
            BUNDLE_ACTIVE,
            "1 while a bundle's policy is in force, 0 while serving as stock vLLM",
            multiprocess_mode="livemin",
        ),
    }


_SERIES = ProcessSeries(_make)


@dataclass(slots=True)
class BundleSeries:
    """What the series last showed of one watcher (each scheduler has its own)."""

    export: bool = True
    reloads: int = 0
    refused: int = 0
    active: bool | None = None
    _series: dict[str, Any] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.export:
            self._series = _SERIES.get()

    def observe(self, watcher: BundleWatcher) -> None:
        """Bring the series up to the watcher's counts (a few comparisons when nothing
        changed: called at every step)."""
        active = watcher.policy is not None
        if (watcher.reloads, watcher.refused, active) == (self.reloads, self.refused, self.active):
            return
        if self._series is not None:
            self._series["reloads"].inc(watcher.reloads - self.reloads)
            self._series["refused"].inc(watcher.refused - self.refused)
            self._series["active"].set(1 if active else 0)
        self.reloads, self.refused, self.active = watcher.reloads, watcher.refused, active
