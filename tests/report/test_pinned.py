"""The "KV held by pins" section of a fleet's replay says its lines add up every replica:
the replay records the fleet's pins together, so a peak may pass one replica's cache."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest.mock import patch

from matplotlib.axes import Axes

from ttlctl.report import build_report
from ttlctl.report.pinned import section
from ttlctl.report.rundir import load


def replay(replicas: int | None) -> dict[str, Any]:
    timeline = {"t_s": [0.0, 1.0, 2.0], "pinned_tokens": [0, 1_750_000, 0]}
    result: dict[str, Any] = {"policy": "continuum", "pinned_timeline": timeline}
    if replicas is not None:
        result["router"] = {"name": "cache-aware", "settings": {}, "replicas": replicas}
    return {"config": {"engine": {"kv_tokens": 600_000}}, "results": [result]}


def pinned(tmp_path: Path, replicas: int | None) -> str:
    (tmp_path / "replay.json").write_text(json.dumps(replay(replicas)))
    page = build_report(tmp_path)
    return page[page.index('id="pinned"') : page.index('id="fleet"')]


def test_a_fleets_pins_are_said_to_be_all_its_replicas_together(tmp_path: Path) -> None:
    """Regression: a 4-replica fleet's line peaked at 1.75M tokens under "KV tokens held by
    pins", each replica holding 600k, with no word that the line sums the replicas."""
    section = pinned(tmp_path, 4)
    assert (
        "A fleet: each line is the pins of all 4 replicas together (each replica&#x27;s "
        "cache holds 600,000 tokens)."
    ) in section


def test_one_engine_and_a_fleet_of_one_say_nothing_of_replicas(tmp_path: Path) -> None:
    for replicas in (None, 1):
        section = pinned(tmp_path, replicas)
        assert "KV occupied by pins over time" in section and "replicas" not in section


def test_a_policy_without_pins_is_named_and_hours_are_hours(tmp_path: Path) -> None:
    """A replay longer than two hours reads its time axis in hours; a policy with no pin
    (stock vLLM) is named under the chart rather than drawn as a flat line."""
    doc = replay(None)
    doc["results"][0]["pinned_timeline"]["t_s"] = [0.0, 3600.0, 9000.0]
    timeline = {"t_s": [0.0, 9000.0], "pinned_tokens": [0, 0]}
    doc["results"].append({"policy": "vllm", "pinned_timeline": timeline})
    (tmp_path / "replay.json").write_text(json.dumps(doc))
    run = load(tmp_path)
    with (
        patch.object(Axes, "set_xlabel") as xlabel,
        patch.object(Axes, "step", autospec=True, side_effect=Axes.step) as step,
    ):
        text = section(run)
    xlabel.assert_called_once_with("simulated time (h)")
    (call,) = step.call_args_list  # continuum's line alone
    assert list(call.args[1]) == [0.0, 1.0, 2.5]  # (self, x, y)
    assert "No pins (or no timeline): vllm" in text
