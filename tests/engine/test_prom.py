"""ttlctl/engine/prom.py: one set of series per process, made by the first caller."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from ttlctl.engine.bundle_series import BundleSeries
from ttlctl.engine.counters import Counters
from ttlctl.engine.prom import ProcessSeries
from ttlctl.series import BUNDLE_ACTIVE, PINNED_BLOCKS


def test_the_plugins_series_are_made_once_and_shared() -> None:
    assert Counters()._series is Counters()._series is not None
    assert BundleSeries()._series is BundleSeries()._series is not None
    assert REGISTRY.get_sample_value(PINNED_BLOCKS) is not None
    assert REGISTRY.get_sample_value(BUNDLE_ACTIVE) is not None


def test_names_taken_by_another_owner_give_none() -> None:
    made: list[int] = []

    def make(counter: Any, gauge: Any) -> dict[str, Any]:
        made.append(1)
        return {"g": gauge(PINNED_BLOCKS, "a second owner of the name")}

    Counters()  # the plugin's own series hold the name first
    assert ProcessSeries(make).get() is None and made == [1]
