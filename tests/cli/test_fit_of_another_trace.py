"""`ttlctl tune TRACE --fit FIT` where FIT was fitted on another trace says so, in one warning
line naming both files, and goes ahead (fitting on one split and tuning on another is
legitimate). Regression: it said nothing, where the report's Inputs table flagged it; both now
ask one question (ttlctl.jsonio.names_file), and the report still answers it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import make_trace
from ttlctl.cli import app
from ttlctl.jsonio import file_sha256, names_file


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Another trace than small_inputs' (other programs), in a folder of its own."""
    return make_trace(tmp_path_factory.mktemp("other") / "trace.parquet", programs=12, seed=1)


def warnings(trace: Path, fit: Path, out: Path) -> list[str]:
    args = ["tune", str(trace), "--fit", str(fit), "--profile", "llama-3.1-8b-h100"]
    args += ["--trials", "2", "--seeds", "1"]
    args += ["--holdout-seeds", "1", "--concurrency", "4", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return [line for line in res.stderr.splitlines() if line.startswith("warning: ")]


def test_tune_says_its_fit_was_made_from_another_trace(
    small_inputs: dict[str, Path], other: Path, tmp_path: Path
) -> None:
    fit, trace = small_inputs["fit"], small_inputs["trace"]
    said = warnings(other, fit, tmp_path / "b.json")
    assert said == [
        f"warning: --fit {fit} was fitted on {trace} (sha256 {file_sha256(trace)[:12]}…), "
        f"not on {other} (sha256 {file_sha256(other)[:12]}…): the bundle's pauses come from "
        "that trace, the replays that tune it from this one"
    ], said
    assert (tmp_path / "b.json").is_file()  # a warning, not a refusal
    assert warnings(trace, fit, tmp_path / "same.json") == []


def test_the_report_flags_it_as_before(
    small_inputs: dict[str, Path], other: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(small_inputs["fit"], run / "fit.json")
    for trace, match in ((other, "no"), (small_inputs["trace"], "yes")):
        shutil.copy(trace, run / "trace.parquet")
        res = CliRunner().invoke(app, ["report", str(run), "-o", str(tmp_path / "r.html")])
        assert res.exit_code == 0, res.output
        page = (tmp_path / "r.html").read_text()
        row = page[page.index("<td>fit.json</td><td>trace</td>") :].split("</tr>")[0]
        assert row.endswith(f"<td>{match}</td>"), row


def test_a_record_without_a_hash_names_no_file() -> None:
    # a fit made without naming its trace (fit_trace(source=None)) is not flagged
    assert names_file({"path": None, "sha256": None}, "ab") is None
    assert names_file(None, "ab") is None and names_file({"sha256": "ab"}, None) is None
    assert (
        names_file({"sha256": "ab"}, "ab") is True and names_file({"sha256": "ab"}, "cd") is False
    )
