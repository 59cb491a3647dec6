"""The report's numbers: a float is never shown as a whole number (0.9998 in three
significant digits is "1"), and the held-back gains read alike, as tune prints them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.report.runs import tune_doc
from ttlctl.report import build_report
from ttlctl.report.markup import num


def test_a_float_just_under_one_keeps_its_decimals() -> None:
    assert num(0.9997785375116875) == "1.00"
    assert num(1.0) == "1.00"
    assert num(0.9929770803024709) == "0.993"
    assert num(-0.99996) == "-1.00"
    assert num(3) == "3"  # a count stays whole


def test_the_held_back_gains_read_alike(tmp_path: Path) -> None:
    doc = tune_doc()
    # as tune.json of a fleet tune had them: a hair under 1 and exactly 1
    doc["held_back"] = {**doc["held_back"], "gain_vs_vllm": 0.99978, "gain_vs_default": 1.0}
    (tmp_path / "tune.json").write_text(json.dumps(doc), encoding="utf-8")
    page = build_report(tmp_path)
    cells = dict(re.findall(r"<tr><td>(gain_vs_\w+)</td><td[^>]*>([^<]*)</td></tr>", page))
    assert cells == {"gain_vs_vllm": "1.000x", "gain_vs_default": "1.000x"}, cells
