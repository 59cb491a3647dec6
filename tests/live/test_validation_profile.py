"""The profile the single-server ``validate --repeats K`` measures when none is given
(replay/validation/crosscheck.py, no server here): one measurement after each live run of
the first policy, pooled after its last, before any other policy's server starts; said so
in words, each kept with its own fit and shown beside the pooled one."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from profiles.engine_fit import fit_samples
from replay.validation.crosscheck import live_runs, measured_after
from replay.validation.fleet_profile import Measured, pooled
from tests.profiles.engine_samples import samples
from ttlctl.cli import render


def _measured(k: int) -> Measured:
    url = f"http://127.0.0.1:80{k}0"
    one = samples(k, f"2026-12-02T05:{10 + 3 * k}:00+00:00", url=url, scale=1 + 0.1 * k)
    return Measured(k, f"measured from vllm at {url}", 0, one, fit_samples([one]))


def test_measured_after_each_run_of_the_first_policy_and_pooled_before_the_next() -> None:
    names = ["vllm", "continuum"]
    plan = measured_after(names, 3)
    assert plan == {("vllm", 0): False, ("vllm", 1): False, ("vllm", 2): True}
    order = live_runs(names, 3)
    assert order[:3] == [("vllm", 0), ("vllm", 1), ("vllm", 2)]
    pooled_at = next(i for i, run in enumerate(order) if plan.get(run))
    first_other = next(i for i, (name, _) in enumerate(order) if name != "vllm")
    # pooled after the last measurement, before continuum's server starts (its cold-start
    # bundle carries the profile)
    assert pooled_at == max(order.index(run) for run in plan) and pooled_at < first_other
    assert measured_after(["continuum"], 2) == {("continuum", 0): False, ("continuum", 1): True}
    assert measured_after(["vllm"], 1) == {("vllm", 0): True}


def test_one_measurement_is_the_profile_and_k_are_pooled_said_so() -> None:
    only = _measured(1)
    assert pooled([only], "on vllm's server") == (
        fit_samples([only.samples]),
        "measured from vllm at http://127.0.0.1:8010",
    )
    taken = [_measured(k) for k in (1, 2)]
    profile, source = pooled(taken, "on vllm's server")
    assert profile == fit_samples([m.samples for m in taken]) != taken[0].fitted
    assert source == (
        "pooled over 2 measurements, one in each repeat on vllm's server after its live run: "
        "every timing put together, then fitted once; first measured from vllm at "
        "http://127.0.0.1:8010"
    )


def test_the_table_shows_each_measurement_beside_the_pooled_profile() -> None:
    taken = [_measured(k) for k in (1, 2)]
    profile, source = pooled(taken, "on vllm's server")
    row = {"metric": "jct_mean_s", "sim": 1.0, "live": 1.0, "error": 0.0, "live_range": None}
    doc: dict[str, Any] = {
        "programs": 2, "calls": 4, "policies": ["vllm"],
        "rows": {"vllm": [{**row, "metric": m} for m in
                          ("jct_mean_s", "jct_p95_s", "ttft_mean_s", "prefix_hit_rate",
                           "preemptions")]},
        "ranking": {"same": True, "sim": [["vllm"]], "live": [["vllm"]], "tie_within": 0.02},
        "goals": {"vllm": {"jct_within_10pct": True, "hit_rate_within_5_points": True}},
        "profile": {"source": source, "doc": profile.to_json(),
                    "measurements": [m.to_json() for m in taken]},
        "config": {"repeats": 2},
    }  # fmt: skip
    console = Console(record=True, width=200)
    render.validate_table(console, doc)
    shown = console.export_text()
    assert "the 2 measurements, each fitted alone: prefill of 1,024 tokens" in shown
    one = {**doc, "profile": {**doc["profile"], "measurements": [taken[0].to_json()]}}
    console = Console(record=True, width=200)
    render.validate_table(console, one)
    assert "measurements" not in console.export_text()
