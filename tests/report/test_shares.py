"""The report writes a share as the command line does (:func:`ttlctl.percent.share`): 2 pins
wasted of 3,600 never read 0%, nor 3,599 calls of 3,600 returned 100%."""

from __future__ import annotations

import json
from pathlib import Path

from tests.report.pages import rows, section
from ttlctl.report import build_report


def test_the_fleet_section_writes_small_and_near_full_shares_as_the_cli_does(
    tmp_path: Path,
) -> None:
    router = {"name": "pin-aware", "settings": {}, "replicas": 2}
    result = {
        "policy": "continuum",
        "router": router,
        "load_balance": 1.25,
        "returned_share": 3599 / 3600,
        "pins": {"made": 3600},
        "pins_wasted": 2,
        "pins_wasted_share": 2 / 3600,
        "miss_reasons": {
            "routed_elsewhere": 1,
            "never_pinned": 2,
            "expired": 3,
            "released_by_valve": 4,
            "evicted": 5,
        },
        "per_replica": [{"replica": 0, "prefix_hit_rate": 0.0004}, {"replica": 1}],
    }
    (tmp_path / "replay.json").write_text(json.dumps({"results": [result]}))
    page = build_report(tmp_path)
    assert "<td>0.1%</td>" in page  # pins wasted: 2 of 3,600
    assert "<td>&gt;99.9%</td>" in page  # returned: one short of all
    assert "<td>&lt;0.1%</td>" in page  # replica 0's prefix hits
    assert "<td>0%</td>" not in page and "<td>100%</td>" not in page
    fleet = section(page, "fleet")
    assert "<p>2 replicas behind <code>pin-aware</code></p>" in fleet
    # each figure in its column: load, returned, pins made, pins wasted, wasted share
    assert rows(fleet)[0] == ["continuum", "1.25", ">99.9%", "3,600", "2", "0.1%"]
    # why follow-up calls missed, each reason under its own heading
    misses = fleet.split("<h3>Why follow-up calls missed the cache</h3>")[1]
    assert misses.startswith(
        "<table><tr><th>policy</th><th>routed elsewhere</th><th>never pinned</th>"
        "<th>expired</th><th>released by the valve</th><th>evicted</th></tr>"
    )
    assert rows(misses)[0] == ["continuum", "1", "2", "3", "4", "5"]
