"""ttlctl/engine/prom.py: one set of series per process, made by the first caller."""

from __future__ import annotations

from typing import Any

from prometheus_client import REGISTRY

from ttlctl.engine.bundle_series import BundleSeries
from ttlctl.engine.counters import Counters
from ttlctl.engine.prom import ProcessSeries
from ttlctl.series import BUNDLE_ACTIVE, PINNED_BLOCKS, PINNED_PROGRAMS


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


def test_the_pin_gauges_move_by_the_change_not_the_value() -> None:
    """``pinned_blocks``/``pinned_programs`` are set as deltas on the process's shared
    series: 4 blocks then 1 block held leaves the gauge 1 above where it started."""
    before = REGISTRY.get_sample_value(PINNED_BLOCKS) or 0.0
    before_p = REGISTRY.get_sample_value(PINNED_PROGRAMS) or 0.0
    c = Counters()
    c.pinned(4, 2)
    c.pinned(1, 1)
    assert REGISTRY.get_sample_value(PINNED_BLOCKS) == before + 1
    assert REGISTRY.get_sample_value(PINNED_PROGRAMS) == before_p + 1
    c.pinned(0, 0)
    assert REGISTRY.get_sample_value(PINNED_BLOCKS) == before
