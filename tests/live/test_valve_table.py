"""bench/valve_table.py: validate JSON files gathered into the live valve table."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.bench_script import bench_script


def _module() -> ModuleType:
    return bench_script("valve_table")


def _doc(policy: str, sim: float, live: list[float]) -> dict[str, Any]:
    runs = [{"jct_mean_s": j, "ttft_mean_s": j / 10, "prefix_hit_rate": 1 / j} for j in live]
    merged: dict[str, Any] = runs[0] if len(runs) == 1 else {"runs": runs, "jct_mean_s": 0.0}
    return {
        "sim": {policy: {"jct_mean_s": sim, "ttft_mean_s": sim / 10, "prefix_hit_rate": 1 / sim}},
        "live": {policy: merged},
    }


def _write(folder: Path, name: str, doc: dict[str, Any]) -> None:
    (folder / name).write_text(json.dumps(doc))


def test_table_means_ranges_and_paired_ratios(tmp_path: Path, capsys: Any) -> None:
    table = _module()
    _write(tmp_path, "a-vllm-r0.json", _doc("vllm", 200.0, [220.0]))
    _write(tmp_path, "a-head-r1.json", _doc("continuum", 140.0, [170.0]))
    _write(tmp_path, "a-head-r2.json", _doc("continuum", 140.0, [150.0, 160.0]))
    _write(tmp_path, "a-stall-only-r1.json", _doc("continuum", 84.0, [130.0]))
    _write(tmp_path, "a-stall-only-r2.json", _doc("continuum", 84.0, [120.0, 155.0]))
    _write(tmp_path, "profile.json", {"not": "a validate file"})
    assert table.main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| a | mean JCT | vllm | 200.0 s | 220.0 s | 220.0 – 220.0 s | 1 |" in text
    assert "| a | mean JCT | head | 140.0 s | 160.0 s | 150.0 – 170.0 s | 3 |" in text
    assert "| a | mean TTFT | stall-only | 8.4 s | 13.5 s | 12.0 – 15.5 s | 3 |" in text
    assert "| a | prefix hit rate | vllm | 0.5% | 0.5% | 0.5 – 0.5% | 1 |" in text
    # paired by tag: r1 130/170; r2's runs pair in order within the tag's runs
    assert "stall-only/head mean JCT live 0.84" in text
    assert "simulated 0.60" in text
    assert "live ranges overlap" in text


def test_ranges_that_do_not_overlap_and_a_simulator_that_disagrees(tmp_path: Path) -> None:
    table = _module()
    _write(tmp_path, "x-head-r1.json", _doc("continuum", 10.0, [100.0, 110.0]))
    _write(tmp_path, "x-stall-only-r1.json", _doc("continuum", 8.0, [80.0, 90.0]))
    cells = table.gather(tmp_path)
    assert "do not overlap" in table.verdicts(cells, ["x"])[0]
    _write(tmp_path, "x-head-r2.json", _doc("continuum", 11.0, [100.0]))
    with pytest.raises(SystemExit, match="simulator differs"):
        table.gather(tmp_path)
