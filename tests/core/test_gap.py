"""The gap closed (:mod:`ttlctl.gap`): a share of the vLLM → unlimited-KV gap only where
there is a gap; the replay's table and the HTML report say why there is none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ttlctl import gap
from ttlctl.report import build_report


def test_a_share_of_the_gap() -> None:
    assert gap.closed(10.0, 6.0, 10.0) == 0.0
    assert gap.closed(10.0, 6.0, 6.0) == 1.0
    assert gap.closed(10.0, 6.0, 8.0) == pytest.approx(0.5)
    assert gap.closed(10.0, 6.0, 12.0) == pytest.approx(-0.5)  # worse than vLLM
    assert gap.closed(10.0, 6.0, 5.0) == pytest.approx(1.25)  # better than the bound


def test_no_share_where_unlimited_kv_is_not_faster() -> None:
    """Regression: a 4-replica fleet replay had unlimited KV 0.16 s slower than vLLM, and
    a policy faster than vLLM read -125%, one slower +100%."""
    assert gap.closed(109.37, 109.53, 109.17) is None
    assert gap.closed(10.0, 10.0, 9.0) is None


def test_no_share_of_a_gap_under_the_least() -> None:
    just_under = 100.0 * (1 - gap.MIN_GAP) + 1e-6
    assert gap.closed(100.0, just_under, 100.0) is None
    assert gap.closed(100.0, 100.0 * (1 - gap.MIN_GAP) - 1e-6, 100.0) == 0.0


def test_no_share_of_no_time_nor_of_nan() -> None:
    assert gap.closed(0.0, 0.0, 0.0) is None  # was a ZeroDivisionError
    assert gap.closed(float("nan"), 6.0, 8.0) is None
    assert gap.closed(10.0, float("nan"), 8.0) is None


def test_a_missing_figure_has_no_share() -> None:
    assert gap.closed(None, 6.0, 8.0) is None
    assert gap.closed(10.0, None, 8.0) is None
    assert gap.closed(10.0, 6.0, None) is None


def test_no_gap_only_when_both_bounds_ran_and_none_has_a_share() -> None:
    assert gap.no_gap([{"gap_closed": None}, {"gap_closed": None}])
    assert not gap.no_gap([{"gap_closed": None}, {"gap_closed": 0.4}])
    assert not gap.no_gap([{"policy": "vllm"}])  # the bounds did not both run
    assert not gap.no_gap([])


def test_the_report_says_why_there_is_no_share(tmp_path: Path) -> None:
    results = [
        {"policy": p, "jct_mean_s": s, "gap_closed": None}
        for p, s in (("vllm", 109.37), ("continuum", 109.2), ("unlimited-kv", 109.53))
    ]
    (tmp_path / "replay.json").write_text(json.dumps({"results": results}))
    assert "No gap closed: unlimited KV is not 1% faster than vLLM" in build_report(tmp_path)
    results[1]["gap_closed"] = 0.5
    (tmp_path / "replay.json").write_text(json.dumps({"results": results}))
    assert "No gap closed" not in build_report(tmp_path)
