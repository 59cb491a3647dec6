"""The fit document and the policy's parameters have the shape their types declare."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from fitting.fit_doc import CdfDoc, FitDoc
from fitting.policy_params import PolicyDoc, PolicyParams
from tests.documents import conforms, problems
from ttlctl import bundle_make
from ttlctl.cli import app


def test_the_checker_finds_what_differs() -> None:
    assert problems({"n": 1, "x": [0.5], "p": [1.0]}, CdfDoc) == []
    found = problems({"n": True, "x": [0.5, "a"], "q": 1}, CdfDoc)
    assert "$.n: True is not an int" in found
    assert "$.x[1]: 'a' is not a number" in found
    assert "$: CdfDoc has no key 'q'" in found and "$: missing 'p' (CdfDoc)" in found


def test_ttlctl_fit_writes_a_fit_doc(synthetic_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    res = CliRunner().invoke(
        app, ["fit", str(synthetic_trace), "-o", str(out), "--bootstrap", "20"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    conforms(doc, FitDoc)
    # every key a fit made by `ttlctl fit` has, including those an empty fit lacks
    assert set(doc) == set(FitDoc.__annotations__)
    assert doc["tools"] and all(entry["cdf"]["x"] for entry in doc["tools"].values())


def test_an_empty_fit_is_a_fit_doc() -> None:
    empty = bundle_make.empty_fit()
    conforms(empty, FitDoc)
    assert problems({k: v for k, v in empty.items() if k != "global"}, FitDoc) == [
        "$: missing 'global' (FitDoc)"
    ]


def test_policy_doc_is_every_parameter(fit_doc: dict[str, Any]) -> None:
    params = PolicyParams(eta=0.25, valve="stall-only", cold_start_ttl_s=2.0, pins=False)
    assert list(PolicyDoc.__annotations__) == [f.name for f in fields(PolicyParams)]
    assert params.to_json() == asdict(params)  # the same keys in the same order as before
    conforms(json.loads(json.dumps(params.to_json())), PolicyDoc)
    assert PolicyParams.from_json(params.to_json()) == params
