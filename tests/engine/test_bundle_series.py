"""The bundle's series: reloads, refusals and whether a policy is in force (the fallback to
stock vLLM), from the watcher's counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead

from tests.bundles import REPO, write_bundle
from ttlctl.engine.bundle_series import BundleSeries
from ttlctl.engine.watch import BundleWatcher
from ttlctl.series import BUNDLE_ACTIVE, BUNDLE_REFUSED, BUNDLE_RELOADS


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


def _engine_core(prom: Path, bundle: Path | None) -> int:
    """A fresh process that makes the series as an engine core's scheduler does (in
    ``prometheus_client``'s multiprocess mode, as vLLM's server runs it), with a bundle
    in force or serving stock; returns its pid (its series stay in ``prom``'s files)."""
    code = (
        "import os, sys\n"
        "from ttlctl.engine.bundle_series import BundleSeries\n"
        "from ttlctl.engine.watch import BundleWatcher\n"
        "env = {'TTLCTL_BUNDLE': sys.argv[1]} if sys.argv[1] else {}\n"
        "BundleSeries().observe(BundleWatcher.from_env(env, print, print))\n"
        "print(os.getpid())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PROMETHEUS_MULTIPROC_DIR": str(prom)}
    res = subprocess.run(
        [sys.executable, "-c", code, str(bundle or "")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    return int(res.stdout.splitlines()[-1])


def _shown(prom: Path) -> dict[str, float]:
    """What ``/metrics`` shows of the bundle series, collected from every process's files."""
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(prom))
    return {
        name: registry.get_sample_value(sample) or 0.0
        for name, sample in (
            (BUNDLE_ACTIVE, BUNDLE_ACTIVE),
            (BUNDLE_RELOADS, f"{BUNDLE_RELOADS}_total"),
            (BUNDLE_REFUSED, f"{BUNDLE_REFUSED}_total"),
        )
    }


def test_the_servers_gauge_is_0_while_any_live_engine_core_serves_stock(tmp_path: Path) -> None:
    """Several engine cores behind one ``/metrics`` (multiprocess mode): the bundle gauge
    shows the lowest of the live processes' (``livemin``), so one core that fell back to
    stock reads 0 for the server; once that process is marked dead
    (``prometheus_client``'s ``mark_process_dead``) the others' 1 shows. The counters add
    up over the processes."""
    prom = tmp_path / "prom"
    prom.mkdir()
    bundle = write_bundle(tmp_path / "bundle.json", cold_start_ttl_s=1.0)
    _engine_core(prom, bundle)
    assert _shown(prom) == {BUNDLE_ACTIVE: 1.0, BUNDLE_RELOADS: 0.0, BUNDLE_REFUSED: 0.0}
    stock = _engine_core(prom, tmp_path / "missing.json")  # refused: serves stock
    assert _shown(prom) == {BUNDLE_ACTIVE: 0.0, BUNDLE_RELOADS: 0.0, BUNDLE_REFUSED: 1.0}
    mark_process_dead(stock, path=str(prom))
    assert _shown(prom)[BUNDLE_ACTIVE] == 1.0
