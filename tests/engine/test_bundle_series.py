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
