"""A fit document's K and η are the document's values: checked as its fields (naming the
file and the field), never as the ``--k``/``--eta`` they stand in for, nor clamped."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tests.cli.refusal import refused
from ttlctl import bundle_check, bundle_doc


def _build(fit: Path, out: Path) -> list[str]:
    return ["bundle", "build", "--fit", str(fit), "--profile", "llama-3.1-8b-h100", "-o", str(out)]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"k": -3}, "fit.k is -3; K counts samples: a whole number >= 0"),
        ({"k": -1}, "fit.k is -1; "),
        ({"k": 2.5}, "fit.k is 2.5; "),
        ({"k": True}, "fit.k is true; "),
        ({"eta": {"value": 5.0}}, "fit.eta.value is 5.0; η is a correlation, in [-1, 1]"),
        ({"eta": {"value": -1.5}}, "fit.eta.value is -1.5; "),
        ({"eta": {"value": "high"}}, 'fit.eta.value is "high"; '),
        ({"eta": 3}, "fit.eta is 3, not an object"),
    ],
)
def test_bundle_build_refuses_a_fits_bad_k_or_eta_naming_file_and_field(
    fit_doc: dict[str, Any], tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    """Regression: a fit whose k was -3 read "--k must be >= 0, got -3" (no --k was given,
    and the file went unnamed); an eta.value of 5.0 was clamped to 1.0 without a word."""
    fit, out = tmp_path / "fit.json", tmp_path / "b.json"
    doc = {**fit_doc, **change}
    if isinstance(change.get("eta"), dict):
        doc["eta"] = {**fit_doc["eta"], **change["eta"]}
    fit.write_text(json.dumps(doc))
    refused(_build(fit, out), out, f"error: {fit}: {said}")


def test_a_fits_eta_is_a_correlation_give_or_take_rounding(fit_doc: dict[str, Any]) -> None:
    """An η at ±1 past the last bits (a correlation computed from sums) is kept; NaN, and
    anything further out, refused; null (no estimate) and no ``eta`` at all are fine."""
    for value in (1.0 + 1e-12, -1.0, 0.25, None):
        bundle_check.check_fit({**fit_doc, "eta": {**fit_doc["eta"], "value": value}})
    bundle_check.check_fit({k: v for k, v in fit_doc.items() if k not in ("eta", "k")})
    for value in (1.001, math.nan, math.inf):
        with pytest.raises(bundle_doc.BundleError, match=r"^fit\.eta\.value is "):
            bundle_check.check_fit({**fit_doc, "eta": {**fit_doc["eta"], "value": value}})
