"""The bundle's series: reloads, refusals and whether a policy is in force (the fallback to
stock vLLM), from the watcher's counts."""

from __future__ import annotations

from pathlib import Path

from tests.bundles import write_bundle
from ttlctl.engine.bundle_series import BundleSeries
from ttlctl.engine.watch import BundleWatcher


def test_the_series_follow_the_watcher(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    env = {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": "0"}
    watcher = BundleWatcher.from_env(env, lambda m: None, lambda m: None)  # no file yet
    series = BundleSeries(export=False)
    series.observe(watcher)
    assert (series.active, series.refused, series.reloads) == (False, 1, 0)
    write_bundle(path, cold_start_ttl_s=1.0)  # an engine without a bundle takes the first
    assert watcher.poll(1.0)
    series.observe(watcher)
    assert (series.active, series.refused, series.reloads) == (True, 1, 1)
    path.write_text(path.read_text()[:-20])  # damaged: refused, the policy stays in force
    assert not watcher.poll(2.0)
    series.observe(watcher)
    assert (series.active, series.refused, series.reloads) == (True, 2, 1)
    no_bundle = BundleWatcher.from_env({}, lambda m: None, lambda m: None)
    unset = BundleSeries(export=False)
    unset.observe(no_bundle)
    assert (unset.active, unset.refused) == (False, 0)  # stock, but nothing was refused


class _Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value


def test_the_exported_series_take_the_watchers_changes_once(tmp_path: Path) -> None:
    """What ``/metrics`` shows: the counters grow by each change (not by the running
    total again) and the gauge falls to 0 when no policy is in force."""
    path = tmp_path / "bundle.json"
    env = {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": "0"}
    watcher = BundleWatcher.from_env(env, lambda m: None, lambda m: None)  # no file: refused
    series = BundleSeries(export=False)
    shown = {"reloads": _Counter(), "refused": _Counter(), "active": _Counter()}
    series._series = shown
    series.observe(watcher)
    assert [shown[k].value for k in ("reloads", "refused", "active")] == [0, 1, 0]
    write_bundle(path, cold_start_ttl_s=1.0)
    assert watcher.poll(1.0)
    series.observe(watcher)
    assert [shown[k].value for k in ("reloads", "refused", "active")] == [1, 1, 1]
    path.write_text(path.read_text()[:-20])  # refused again; the policy stays in force
    assert not watcher.poll(2.0)
    series.observe(watcher)
    series.observe(watcher)  # nothing new: nothing added
    assert [shown[k].value for k in ("reloads", "refused", "active")] == [1, 2, 1]
