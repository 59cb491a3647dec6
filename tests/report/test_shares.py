"""The report writes a share as the command line does (:func:`ttlctl.percent.share`): 2 pins
wasted of 3,600 never read 0%, nor 3,599 calls of 3,600 returned 100%."""

from __future__ import annotations

import json
from pathlib import Path

from ttlctl.report import build_report


def test_the_fleet_section_writes_small_and_near_full_shares_as_the_cli_does(
    tmp_path: Path,
) -> None:
    router = {"name": "pin-aware", "settings": {}, "replicas": 2}
    result = {
        "policy": "continuum",
        "router": router,
        "returned_share": 3599 / 3600,
        "pins": {"made": 3600},
        "pins_wasted": 2,
        "pins_wasted_share": 2 / 3600,
        "per_replica": [{"replica": 0, "prefix_hit_rate": 0.0004}, {"replica": 1}],
    }
    (tmp_path / "replay.json").write_text(json.dumps({"results": [result]}))
    page = build_report(tmp_path)
    assert "<td>0.1%</td>" in page  # pins wasted: 2 of 3,600
    assert "<td>&gt;99.9%</td>" in page  # returned: one short of all
    assert "<td>&lt;0.1%</td>" in page  # replica 0's prefix hits
    assert "<td>0%</td>" not in page and "<td>100%</td>" not in page
