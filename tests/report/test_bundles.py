"""Which bundle a report shows: bundle.json, or one that `tune -o run/NAME.json` wrote
under another name with its summary NAME.tune.json; --bundle chooses, and a folder of
several but no bundle.json asks for it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import typer
from typer.testing import CliRunner

from tests.report.runs import tune_doc
from ttlctl.cli import report as report_cli


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(report_cli.report)
    return app


def _tuned(run: Path, sample_run: Path, name: str, best: float) -> None:
    """A bundle ``run/name`` and its summary as tune names it, told apart by its best value."""
    bundle = run / name
    shutil.copy(sample_run / "bundle.json", bundle)
    sha = json.loads(bundle.read_text(encoding="utf-8"))["sha256"]
    summary = tune_doc() | {"bundle": {"path": str(bundle), "sha256": sha}}
    summary["best"] = summary["best"] | {"value": best}
    stem = "tune" if name == "bundle.json" else name.removesuffix(".json") + ".tune"
    (run / f"{stem}.json").write_text(json.dumps(summary), encoding="utf-8")


def _report(run: Path, *args: str) -> tuple[int, str, str]:
    out = run.parent / f"{run.name}.html"
    res = CliRunner().invoke(_app(), [str(run), "-o", str(out), *args])
    page = out.read_text(encoding="utf-8") if res.exit_code == 0 else ""
    return res.exit_code, res.output, page


def test_a_bundle_tune_named_b2_is_reported_with_its_summary(
    tmp_path: Path, sample_run: Path
) -> None:
    """Regression: `tune -o run/b2.json` writes b2.json and b2.tune.json; the report read
    only bundle.json and tune.json, and called such a folder one with nothing to report."""
    run = tmp_path / "run"
    run.mkdir()
    _tuned(run, sample_run, "b2.json", 123.25)
    code, output, page = _report(run)
    assert code == 0, output
    assert "123.25" in page and "Best trial:" in page
    # the Inputs table reads both files, under their own names
    assert "<td>b2.json</td><td>read</td>" in page and "<td>b2.tune.json</td><td>read</td>" in page
    assert "could not be drawn" not in page
    assert "not in this run: trace.parquet, fit.json, replay.json" in output


def test_bundle_json_is_still_reported_beside_another(tmp_path: Path, sample_run: Path) -> None:
    """bundle.json and b2.json tuned into one folder (tune's naming keeps a summary each):
    the report shows bundle.json, as it did before it knew of b2.json, and names b2.json in
    a warning. Regression: such a folder, reported until then, was refused (exit 2)."""
    run = tmp_path / "run"
    run.mkdir()
    _tuned(run, sample_run, "bundle.json", 111.5)
    _tuned(run, sample_run, "b2.json", 222.75)
    code, output, page = _report(run)
    assert code == 0, output
    assert "111.5" in page and "222.75" not in page
    (warning,) = [line for line in output.splitlines() if line.startswith("warning: ")]
    assert "b2.json" in warning and "--bundle b2.json" in warning, warning
    for name, shown, hidden in (("b2.json", "222.75", "111.5"), ("bundle.json", "111.5", "222.75")):
        code, output, page = _report(run, "--bundle", name)
        assert code == 0, output
        assert shown in page and hidden not in page
        assert "warning" not in output and "not used" not in output, output


def test_several_bundles_without_bundle_json_ask_which(tmp_path: Path, sample_run: Path) -> None:
    """b2.json and b3.json: the page does not pick one silently; it asks, in one line, and
    --bundle shows the one named."""
    run = tmp_path / "run"
    run.mkdir()
    _tuned(run, sample_run, "b2.json", 222.75)
    _tuned(run, sample_run, "b3.json", 333.25)
    code, output, _ = _report(run)
    assert code == 2 and output.count("\n") == 1, output
    assert output.startswith("error: ") and "b2.json, b3.json" in output
    assert "--bundle" in output
    for name, shown, hidden in (("b2.json", "222.75", "333.25"), ("b3.json", "333.25", "222.75")):
        code, output, page = _report(run, "--bundle", name)
        assert code == 0, output
        assert shown in page and hidden not in page
        assert "not used" not in output
    code, output, _ = _report(run, "--bundle", "b4.json")
    assert code == 2 and "--bundle b4.json: no such file" in output


def test_a_named_bundle_that_is_not_one_is_refused(tmp_path: Path, sample_run: Path) -> None:
    """Regression: `--bundle fit.json` (or a truncated bundle) wrote the page, exit 0, with
    a warning that the file was not used; the one input named on the command line is now
    refused in one line, and no page is written. A damaged bundle the folder merely holds
    stays a note on the page."""
    run = tmp_path / "run"
    shutil.copytree(sample_run, run)
    out = run.parent / f"{run.name}.html"
    code, output, _ = _report(run, "--bundle", "fit.json")
    assert code == 2 and output.count("\n") == 1, output
    assert output.startswith(f"error: --bundle: {run / 'fit.json'}: not a ttlctl bundle"), output
    assert not out.exists()
    (run / "bundle.json").write_text('{"schema_version": 1, "poli', encoding="utf-8")
    code, output, _ = _report(run, "--bundle", "bundle.json")
    assert code == 2 and output.startswith(f"error: --bundle: {run / 'bundle.json'}: "), output
    code, output, page = _report(run)
    assert code == 0, output
    assert "warning: bundle.json not used: " in output, output
    assert "<td>bundle.json</td><td>unreadable: " in page


def test_a_folder_of_bundles_without_summaries_points_at_bundle(
    tmp_path: Path, sample_run: Path
) -> None:
    """Bundles copied into a folder under other names, with no summary beside them: the
    refusal names them and --bundle (the report reads one when named). Regression: it said
    only "nothing to report", though `--bundle a.json` reports it."""
    run = tmp_path / "run"
    run.mkdir()
    for name in ("a.json", "b.json"):
        shutil.copy(sample_run / "bundle.json", run / name)
    code, output, _ = _report(run)
    assert code == 2
    (line,) = output.strip().splitlines()
    assert "nothing to report" in line and "--bundle NAME: a.json, b.json" in line, line
    code, output, page = _report(run, "--bundle", "a.json")
    assert code == 0 and "<td>a.json</td><td>read</td>" in page, output
    empty = tmp_path / "empty"
    empty.mkdir()
    code, output, _ = _report(empty)
    assert code == 2 and "--bundle" not in output, output
