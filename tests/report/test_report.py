"""The report page: its sections, its plots, and what it says about missing inputs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from tests.report.pages import SECTIONS, check_png, parse, png_bytes, rows, section
from tests.report.runs import tune_doc
from ttlctl.cli import report as report_cli
from ttlctl.jsonio import file_sha256
from ttlctl.report import MAX_TOOL_PLOTS, ReportError, build_report, rundir
from ttlctl.report.provenance import section as provenance_section
from ttlctl.summary_name import SUMMARY_SCHEMA


def test_all_sections_and_plots(sample_run: Path, sample_page: str) -> None:
    page = parse(sample_page)
    assert page.section_ids == list(SECTIONS)
    assert "could not be drawn" not in sample_page
    assert "not in this run" not in sample_page
    imgs = page.all("img")
    fit = json.loads((sample_run / "fit.json").read_text(encoding="utf-8"))
    tool_plots = min(len(fit["tools"]), MAX_TOOL_PLOTS)
    # per-tool CDFs, τ* vs context, JCT, pins over time, tuning history, importance
    assert len(imgs) == tool_plots + 5
    for attrs in imgs:
        check_png(png_bytes(attrs["src"]))
        assert attrs.get("alt")
    assert f"{len(fit['tools']) - MAX_TOOL_PLOTS} less frequent tool(s) not plotted" in sample_page
    for name in ("continuum", "oracle", "unlimited-kv", "gap closed", "τ* @ 128k"):
        assert name in sample_page
    # the recorded provenance matches the run's own files
    assert ">no<" not in sample_page.split('id="trace"')[0]


def test_page_is_self_contained(sample_page: str) -> None:
    lowered = sample_page.lower()
    for needle in ("http://", "https://", "<script", "<link", "url(", "@import", "<iframe"):
        assert needle not in lowered
    page = parse(sample_page)
    for attrs in page.all("a"):
        assert str(attrs.get("href")).startswith("#")
    assert all(str(a.get("src")).startswith("data:image/png;base64,") for a in page.all("img"))


def test_only_a_fit(tmp_path: Path, sample_run: Path) -> None:
    shutil.copy(sample_run / "fit.json", tmp_path / "fit.json")
    text = build_report(tmp_path)
    page = parse(text)
    assert page.section_ids == list(SECTIONS)
    for missing in ("trace.parquet", "bundle.json", "replay.json", "tune.json"):
        assert f"not in this run: no {missing}" in text
    assert "could not be drawn" not in text
    assert len(page.all("img")) == MAX_TOOL_PLOTS  # CDFs, without τ* markers


def test_the_page_names_its_run_directory_once(tmp_path: Path, sample_run: Path) -> None:
    """Whole, in the heading; the browser's tab its name. It was named three times: the
    tab, the heading and the Inputs section."""
    run = tmp_path / "run-named-once"
    run.mkdir()
    shutil.copy(sample_run / "fit.json", run / "fit.json")  # it names files elsewhere only
    head, body = build_report(run).split("</head>")
    assert head.count(run.name) == 1 and "<title>ttlctl report: run-named-once<" in head
    assert body.count(run.name) == 1, body.split('id="trace"')[0]
    assert f"<h1>ttlctl report: {run.resolve()}</h1>" in body


def test_bundle_alone_brings_its_fit(tmp_path: Path, sample_run: Path) -> None:
    shutil.copy(sample_run / "bundle.json", tmp_path / "bundle.json")
    text = build_report(tmp_path)
    assert "From bundle.json (its fit)." in text
    assert len(parse(text).all("img")) == MAX_TOOL_PLOTS + 1  # CDFs and τ* vs context
    assert "could not be drawn" not in text


def test_damaged_inputs_are_notes(tmp_path: Path, sample_run: Path) -> None:
    doc = json.loads((sample_run / "bundle.json").read_text(encoding="utf-8"))
    doc["policy"]["eta"] = 0.5
    (tmp_path / "bundle.json").write_text(json.dumps(doc), encoding="utf-8")
    (tmp_path / "replay.json").write_text('{"results": [', encoding="utf-8")
    (tmp_path / "trace.parquet").write_text("not parquet", encoding="utf-8")
    text = build_report(tmp_path)
    assert "unreadable: " in text and "checksum mismatch" in text
    assert "not a Parquet trace" in text
    assert "not in this run: no usable bundle.json" in text
    assert "could not be drawn" not in text


@pytest.mark.parametrize(
    "tune",
    [
        {},
        {"trials": [], "importance": None},
        {"trials": [{"value": "x"}, 3, {"number": 1, "value": 2.5}], "best": None},
        {"trials": [{"number": 0, "value": 1.0, "state": "PRUNED"}], "importance": {"a": "b"}},
        tune_doc(),
    ],
)
def test_tune_shapes(tmp_path: Path, tune: dict[str, object]) -> None:
    (tmp_path / "tune.json").write_text(json.dumps(tune), encoding="utf-8")
    text = build_report(tmp_path)
    assert "could not be drawn" not in text
    assert 'id="tune"' in text


def test_nothing_to_report(tmp_path: Path) -> None:
    with pytest.raises(ReportError, match="no such directory"):
        build_report(tmp_path / "absent")
    with pytest.raises(ReportError, match="nothing to report"):
        build_report(tmp_path)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command()(report_cli.report)
    return app


def test_cli_writes_the_page(tmp_path: Path, sample_run: Path) -> None:
    shutil.copy(sample_run / "replay.json", tmp_path / "replay.json")
    out = tmp_path / "out" / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "not in this run: trace.parquet" in res.output
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temp file left


def test_cli_names_an_unreadable_input(tmp_path: Path, sample_run: Path) -> None:
    """A damaged input is a note on the page, and the command says so too: the line that
    lists what the run lacks must not pass a file it could not read as used."""
    shutil.copy(sample_run / "replay.json", tmp_path / "replay.json")
    (tmp_path / "fit.json").write_text("{", encoding="utf-8")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "fit.json not used: " in warned[0], res.stderr
    assert "not valid JSON" in warned[0] and "replay.json" not in warned[0]


def test_cli_names_an_input_that_is_a_folder(tmp_path: Path, sample_run: Path) -> None:
    """Regression: a folder named tune.json was listed as "not in this run", as if the run
    had no tuning. Now it is said to be a folder (a warning, and its row on the page), and
    not listed as absent."""
    shutil.copy(sample_run / "replay.json", tmp_path / "replay.json")
    (tmp_path / "tune.json").mkdir()
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [
        f"warning: tune.json not used: {tmp_path / 'tune.json'} is a folder, not a file to read"
    ], res.stderr
    (wrote,) = [line for line in res.stderr.splitlines() if line.startswith("wrote ")]
    assert "not in this run" in wrote and "tune.json" not in wrote
    assert "is a folder, not a file to read" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("case", ["absent", "empty", "file", "output-is-dir"])
def test_cli_errors_are_one_line(tmp_path: Path, sample_run: Path, case: str) -> None:
    run, out = tmp_path / "run", tmp_path / "r.html"
    if case == "empty":
        run.mkdir()
    elif case == "file":
        run.write_text("x", encoding="utf-8")
    elif case == "output-is-dir":
        run.mkdir()
        shutil.copy(sample_run / "replay.json", run / "replay.json")
        out = tmp_path
    res = CliRunner().invoke(_app(), [str(run), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_a_tune_json_of_another_bundle_is_set_aside(tmp_path: Path, sample_run: Path) -> None:
    """Regression: a tune.json a later study wrote beside bundle.json (a summary of another
    bundle) was shown as bundle.json's tuning; the report says whose it is instead."""
    shutil.copy(sample_run / "bundle.json", tmp_path / "bundle.json")
    other = tune_doc() | {"bundle": {"path": "run/b2.json", "sha256": "f" * 64}}
    (tmp_path / "tune.json").write_text(json.dumps(other), encoding="utf-8")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "tune.json not used: the summary of another bundle" in warned[0]
    assert "run/b2.json" in warned[0]
    page = out.read_text(encoding="utf-8")
    assert "Best trial:" not in page and "tune.json not used: the summary of another" in page
    status = next(r[1] for r in rows(section(page, "inputs")) if r[0] == "tune.json")
    assert status.startswith("not used: the summary of another bundle (run/b2.json"), status
    # its own summary is shown
    sha = json.loads((tmp_path / "bundle.json").read_text(encoding="utf-8"))["sha256"]
    own = tune_doc() | {"bundle": {"path": "run/bundle.json", "sha256": sha}}
    (tmp_path / "tune.json").write_text(json.dumps(own), encoding="utf-8")
    assert "Best trial:" in build_report(tmp_path)


def test_a_tune_json_of_bundle_jsons_earlier_version_is_not_called_anothers(
    tmp_path: Path, sample_run: Path
) -> None:
    """`tune -o run/bundle.json` then `refit run/bundle.json` (which replaces it in place):
    tune.json names bundle.json itself, at an earlier hash. The report set it aside as 'the
    summary of another bundle (…/bundle.json …)', naming the very file it said was another."""
    bundle = tmp_path / "bundle.json"
    shutil.copy(sample_run / "bundle.json", bundle)
    earlier = tune_doc() | {"bundle": {"path": str(bundle), "sha256": "f" * 64}}
    (tmp_path / "tune.json").write_text(json.dumps(earlier), encoding="utf-8")
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(tmp_path / "report.html")])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1, res.stderr
    assert "another bundle" not in warned[0]
    assert "tune.json not used: the summary of an earlier bundle.json" in warned[0]
    # `bundle rollback` replaces it in place too (README's walk: tune, then a rollback)
    assert "replaced since (by refit, a rollback or another build)" in warned[0]


def test_a_bundle_named_tune_json_is_not_read_as_tunes_summary(
    tmp_path: Path, sample_run: Path
) -> None:
    """`tune -o run/tune.json` is taken (its summary goes to run/tune.tune.json), and so is a
    bundle copied in as tune.json: the report showed it as a study of '0 trial(s)'. A
    tune.json that is a bundle, or whose schema is not tune's, is a note, not a study."""
    shutil.copy(sample_run / "bundle.json", tmp_path / "tune.json")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and "tune.json" in warned[0], res.stderr
    assert "not tune's summary but a policy bundle" in warned[0]
    assert "(a bundle's summary is NAME.tune.json)" in warned[0]
    page = out.read_text(encoding="utf-8")
    assert "0 trial(s)" not in page
    fit = json.loads((sample_run / "bundle.json").read_text(encoding="utf-8"))["fit"]
    (tmp_path / "tune.json").write_text(json.dumps(fit), encoding="utf-8")  # ttlctl.fit/1
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "not tune's summary but a fit (what `ttlctl fit` writes)" in res.stderr


@pytest.mark.parametrize(
    ("copied", "kind"),
    [
        ("fit.json", "a fit (what `ttlctl fit` writes)"),
        ("bundle.json", "a policy bundle"),
        ("tune.json", "a tuning summary"),
    ],
)
def test_another_document_copied_in_as_replay_json_is_named(
    tmp_path: Path, sample_run: Path, copied: str, kind: str
) -> None:
    """Regression: a fit (or a bundle, or tune's summary) copied in as replay.json was listed
    as 'read' and its section said 'replay.json holds no results', exit 0 without a word; it
    is a note naming what the file is, and a warning, as tune.json's mix-ups are."""
    if copied == "tune.json":  # as tune writes it, with its schema
        doc = tune_doc() | {"schema": SUMMARY_SCHEMA}
        (tmp_path / "replay.json").write_text(json.dumps(doc), encoding="utf-8")
    else:
        shutil.copy(sample_run / copied, tmp_path / "replay.json")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1, res.stderr
    assert warned[0].startswith(f"warning: replay.json not used: not a replay's results but {kind}")
    page = out.read_text(encoding="utf-8")
    assert "holds no results" not in page and "not a replay&#x27;s results but" in page


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (lambda d: d["results"][1].update(jct_mean_s="abc"), 'results[1].jct_mean_s is "abc"'),
        (lambda d: d["results"][0].update(jct_p95_s=-1.0), "results[0].jct_p95_s is -1.0"),
        (lambda d: d["results"][0].update(prefix_hit_rate=1.5), "prefix_hit_rate is 1.5"),
        (lambda d: d.update(results={}), "results is dict, not a list"),
    ],
    ids=["text", "negative", "share past 1", "not a list"],
)
def test_an_edited_figure_in_replay_json_is_a_note_and_a_warning(
    tmp_path: Path, sample_run: Path, edit: Any, said: str
) -> None:
    """Regression: a replay.json whose jct_mean_s read "abc" or -1.0 was drawn as it was
    ("continuum abc", "-1.00"), exit 0 without a word; `results: {}` passed alike."""
    run = tmp_path / "run"
    shutil.copytree(sample_run, run)
    doc = json.loads((run / "replay.json").read_text(encoding="utf-8"))
    edit(doc)
    (run / "replay.json").write_text(json.dumps(doc), encoding="utf-8")
    res = CliRunner().invoke(_app(), [str(run), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warned) == 1 and warned[0].startswith("warning: replay.json not used: "), res.stderr
    assert said in warned[0], warned[0]


def test_a_replay_json_of_another_trace_or_bundle_is_said(tmp_path: Path, sample_run: Path) -> None:
    """Regression: a replay.json made from another trace or bundle (README's walk: tune
    replaces bundle.json after the first replay; or one copied from another run) was shown
    as the run's JCTs with only a 'no' in the Inputs table, exit 0 without a word. It is
    still shown (stock vLLM's row does not depend on the bundle), under a note, and a
    warning names what it was made from."""
    for name in ("trace.parquet", "bundle.json"):
        shutil.copy(sample_run / name, tmp_path / name)
    replay = json.loads((sample_run / "replay.json").read_text(encoding="utf-8"))
    replay["bundle"] = {"path": "other/bundle.json", "sha256": "e" * 64}
    (tmp_path / "replay.json").write_text(json.dumps(replay), encoding="utf-8")
    out = tmp_path / "report.html"
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0, res.output
    warned = [line for line in res.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [
        "warning: replay.json made from another bundle (other/bundle.json, sha256 eeeeeeeeeeee…) "
        "than bundle.json: its figures are not this run's (`ttlctl replay … --json` again "
        "writes this run's)"
    ], res.stderr
    jct = section(out.read_text(encoding="utf-8"), "jct")
    assert "made from another bundle" in jct and "continuum" in jct
    replay["trace"] = {"path": "other/trace.parquet", "sha256": "d" * 64}
    (tmp_path / "replay.json").write_text(json.dumps(replay), encoding="utf-8")
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert "made from another trace (other/trace.parquet, sha256 dddddddddddd…) and another " in (
        res.stderr
    )
    # the run's own replay: no word
    shutil.copy(sample_run / "replay.json", tmp_path / "replay.json")
    res = CliRunner().invoke(_app(), [str(tmp_path), "-o", str(out)])
    assert res.exit_code == 0 and "warning" not in res.stderr, res.stderr


def test_a_bundles_trace_fitted_is_checked_against_the_runs_trace(sample_run: Path) -> None:
    """A tuned bundle records the trace its fit was made from (``trace_fitted``, beside
    ``trace``): the Inputs table compares it with the run's trace, where it showed "—"."""
    run = rundir.load(sample_run)
    assert run.bundle is not None
    trace_sha = file_sha256(sample_run / "trace.parquet")
    provenance = dict(run.bundle.get("provenance") or {})
    provenance["trace_fitted"] = {"path": "trace.parquet", "sha256": trace_sha, "calls": 1}
    run.bundle = {**run.bundle, "provenance": provenance}
    row = provenance_section(run).split("trace_fitted", 1)[1].split("</tr>", 1)[0]
    assert row.rstrip().endswith("<td>yes</td>"), row
    provenance["trace_fitted"] = {"path": "other.parquet", "sha256": "0" * 64}
    row = provenance_section(run).split("trace_fitted", 1)[1].split("</tr>", 1)[0]
    assert row.rstrip().endswith("<td>no</td>"), row
    # replay.json's record of its bundle: this run's bundle.json, or another
    assert run.replay is not None
    for sha, match in ((run.bundle["sha256"], "yes"), ("e" * 64, "no")):
        run.replay = {**run.replay, "bundle": {"path": "bundle.json", "sha256": sha}}
        got = [r for r in rows(provenance_section(run)) if r[:2] == ["replay.json", "bundle"]]
        assert got == [["replay.json", "bundle", "bundle.json", sha, match]]


def test_the_inputs_table_reads_each_files_size_and_hash(
    sample_run: Path, sample_page: str
) -> None:
    got = rows(section(sample_page, "inputs").split("What each input says")[0])
    want = [
        [name, "read", f"{(sample_run / name).stat().st_size:,}", file_sha256(sample_run / name)]
        for name in ("trace.parquet", "fit.json", "bundle.json", "replay.json", "tune.json")
    ]
    assert got == want
