"""`ttlctl fit` on a synthetic trace whose truth is known, and on the shipped samples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from typer.testing import CliRunner

from fitting import eta_bootstrap
from fitting.fit import FitConfig, fit_trace
from ttlctl.cli import app
from ttlctl.jsonio import OutputError
from ttlctl.trace import io as trace_io


def test_fit_counts_and_statistics(synthetic_trace: Path, fit_doc: dict[str, Any]) -> None:
    trace = trace_io.read(synthetic_trace)
    timed = trace.filter(pl.col("tool").is_not_null())
    assert fit_doc["input"]["calls"] == trace.height
    assert fit_doc["input"]["programs"] == trace["program_id"].n_unique()
    assert fit_doc["global"]["n"] == timed.height
    for name in ("grep", "pytest", "web"):
        values = timed.filter(pl.col("tool") == name)["tool_s"]
        entry = fit_doc["tools"][name]
        assert entry["n"] == values.len() == entry["measured"]
        assert entry["p50_s"] == pytest.approx(values.quantile(0.5, "linear"))
        assert entry["trusted"] == (values.len() > 100)
        assert entry["cdf"]["p"][-1] == 1.0
        assert entry["cdf"]["x"][-1] == pytest.approx(values.max())
    # pytest durations are lognormal(1.5, 0.6): mean e^(1.5+0.18) ≈ 5.37 s
    assert fit_doc["tools"]["pytest"]["exponential"]["mean_s"] == pytest.approx(5.37, rel=0.15)
    assert not fit_doc["tools"]["web"]["trusted"]
    assert fit_doc["eta"]["value"] is not None and -1 <= fit_doc["eta"]["value"] <= 1


def test_gap_used_when_tool_time_missing_and_abandoned_set_aside(tmp_path: Path) -> None:

    rows = [
        {
            "program_id": "a",
            "turn": 0,
            "arrival_s": 0.0,
            "input_tokens": 10,
            "output_tokens": 1,
            "tool": "x",
            "tool_s": None,
            "gap_s": 2.5,
        },
        {
            "program_id": "a",
            "turn": 1,
            "arrival_s": 3.0,
            "input_tokens": 10,
            "output_tokens": 1,
            "tool": "x",
            "tool_s": 1.0,
            "gap_s": 1.2,
        },
        {
            "program_id": "a",
            "turn": 2,
            "arrival_s": 5.0,
            "input_tokens": 10,
            "output_tokens": 1,
            "tool": "x",
            "tool_s": None,
            "gap_s": 7200.0,
        },
        {"program_id": "a", "turn": 3, "arrival_s": 7300.0, "input_tokens": 10, "output_tokens": 1},
    ]
    path = tmp_path / "t.parquet"
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    doc = fit_trace(trace_io.scan(path), FitConfig(bootstrap=0))
    assert doc["tools"]["x"]["cdf"]["x"] == [1.0, 2.5]
    assert doc["tools"]["x"]["measured"] == 1
    assert doc["input"]["abandoned_pauses"] == 1


def test_fit_cli_writes_json_and_plots(synthetic_trace: Path, tmp_path: Path) -> None:
    out, plots = tmp_path / "fit.json", tmp_path / "plots"
    res = CliRunner().invoke(
        app,
        ["fit", str(synthetic_trace), "-o", str(out), "--plot", str(plots), "--bootstrap", "50"],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert set(doc["tools"]) == {"grep", "pytest", "web"}
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert pngs == ["global.png", "grep.png", "pytest.png", "web.png"]
    assert json.loads((plots / "index.json").read_text()) == {
        "global": "global.png",
        "tools": {"grep": "grep.png", "pytest": "pytest.png", "web": "web.png"},
    }
    assert all((plots / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for n in pngs)


def test_fit_cli_says_when_the_bootstrap_drew_fewer_resamples(
    synthetic_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: --bootstrap beyond the draws' bound (here 150,000 programs in all: 1,000
    resamples of 150 programs) was cut without a word; the fit.json recorded the cut."""
    monkeypatch.setattr(eta_bootstrap, "MAX_DRAWS", 150_000)
    out = tmp_path / "fit.json"
    args = ["fit", str(synthetic_trace), "-o", str(out), "--bootstrap"]
    res = CliRunner().invoke(app, [*args, "1001"])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["eta"]["bootstrap"] == 1_000
    line = " ".join(res.output.split())
    assert "η's interval from 1,000 resamples, not the 1,001 asked" in line, line
    res = CliRunner().invoke(app, [*args, "1000"])
    assert res.exit_code == 0 and "resamples, not the" not in res.output, res.output


def test_fit_cli_refuses_a_non_trace(tmp_path: Path) -> None:
    bogus = tmp_path / "x.parquet"
    bogus.write_text("hello")
    res = CliRunner().invoke(app, ["fit", str(bogus), "-o", str(tmp_path / "f.json")])
    assert res.exit_code == 2 and "not a Parquet trace" in res.output
    pl.DataFrame({"a": [1]}).write_parquet(bogus)
    res = CliRunner().invoke(app, ["fit", str(bogus), "-o", str(tmp_path / "f.json")])
    assert res.exit_code == 2 and "missing column" in res.output
    res = CliRunner().invoke(app, ["fit", str(bogus), "-o", "f.json", "--min-samples", "-3"])
    assert res.exit_code == 2


def test_plot_names_from_untrusted_tools(tmp_path: Path) -> None:
    from ttlctl.plots import plot_fit

    entry = {
        "n": 3,
        "cdf": {"n": 3, "x": [1.0, 2.0], "p": [0.5, 1.0]},
        "exponential": None,
        "trusted": False,
    }
    fit = {"global": entry, "tools": {"../../etc/passwd": entry, "$\\frac{a}{b}$ <b>": entry}}
    paths = plot_fit(fit, tmp_path / "p")
    assert all(p.parent == tmp_path / "p" for p in paths)
    assert len(paths) == 3


def test_plots_are_written_whole_and_the_same_each_time(tmp_path: Path) -> None:
    """The fit's PNGs go through the atomic writer, as every output: a PNG that is a link
    is written through (the link kept), no temporary file is left, and the same fit draws
    the same bytes (no software version in the file). Regression: matplotlib wrote each
    file in place (a stopped fit left half a PNG; a folder in the way was a traceback)."""
    from ttlctl.plots import plot_fit

    entry = {"n": 3, "cdf": {"n": 3, "x": [1.0, 2.0], "p": [0.5, 1.0]}, "exponential": None}
    fit = {"global": entry, "tools": {"grep": entry}}
    folder, target = tmp_path / "p", tmp_path / "elsewhere.png"
    folder.mkdir()
    target.write_bytes(b"old")
    (folder / "grep.png").symlink_to(target)
    first = {p.name: p.read_bytes() for p in plot_fit(fit, folder)}
    assert sorted(first) == ["global.png", "grep.png"]
    assert (folder / "grep.png").is_symlink() and target.read_bytes() == first["grep.png"]
    assert first["grep.png"].startswith(b"\x89PNG")
    assert sorted(p.name for p in folder.iterdir()) == ["global.png", "grep.png", "index.json"]
    assert b"Matplotlib" not in first["grep.png"]  # no version: the bytes are the fit's
    again = {p.name: p.read_bytes() for p in plot_fit(fit, folder)}
    assert again == first
    (folder / "global.png").unlink()
    (folder / "global.png").mkdir()  # the writer's own refusal, naming the path
    with pytest.raises(OutputError, match=r"global\.png: is a directory, not a file to write"):
        plot_fit(fit, folder)


def test_the_fit_does_not_depend_on_row_order(synthetic_trace: Path) -> None:
    """The bootstrap resamples programs by index: the same seed must give the same interval
    however the trace's rows (and so polars' groups) come in; and the whole document is the
    same to the last digit. Regression: the pauses were summed in the rows' order, so a
    shuffled trace moved means and KS p-values in their last digits (and the checksum)."""

    frame = trace_io.scan(synthetic_trace).collect()
    docs = [
        fit_trace(frame.sample(fraction=1.0, shuffle=True, seed=s).lazy(), FitConfig(bootstrap=200))
        for s in range(4)
    ]
    intervals = {(d["eta"]["ci_low"], d["eta"]["ci_high"]) for d in docs}
    assert len(intervals) == 1
    assert docs[0]["eta"]["ci_low"] is not None
    assert all(d == docs[0] for d in docs[1:])


def test_the_fit_pngs_and_the_report_draw_a_cdf_one_way(
    synthetic_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool's pause CDF is drawn by one function (ttlctl.plots.draw_cdf) for the fit's PNGs
    and for the report's section: it was drawn by two copies that had drifted apart."""
    from ttlctl import plots
    from ttlctl.report import pauses
    from ttlctl.report.rundir import load

    doc = fit_trace(trace_io.scan(synthetic_trace), FitConfig(bootstrap=0))
    drawn: list[tuple[int, bool]] = []
    real = plots.draw_cdf

    def spy(ax: Any, entry: Any, everything: Any) -> float:
        drawn.append((entry["n"], everything is not None))
        return real(ax, entry, everything)

    monkeypatch.setattr(plots, "draw_cdf", spy)
    monkeypatch.setattr(pauses, "draw_cdf", spy)
    tools = sorted(doc["tools"].items())
    assert len(plots.plot_fit(doc, tmp_path / "p")) == 1 + len(tools)
    assert drawn == [(doc["global"]["n"], False), *((t["n"], True) for _, t in tools)]
    drawn.clear()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "fit.json").write_text(json.dumps(doc))
    assert "<figure>" in pauses.section(load(tmp_path / "run"))
    assert sorted(drawn) == sorted((t["n"], True) for _, t in tools)


@pytest.mark.parametrize(
    ("flag", "value", "args"),
    [
        ("--min-samples", "-1", ["--min-samples", "-1"]),
        ("--abandon-seconds", "0", ["--abandon-seconds", "0"]),
        ("--bootstrap", "-5", ["--bootstrap", "-5"]),
    ],
)
def test_an_out_of_range_setting_names_its_flag_alone(
    tmp_path: Path, flag: str, value: str, args: list[str]
) -> None:
    """One line naming the flag that is wrong and its value, not every flag fit checks."""
    res = CliRunner().invoke(app, ["fit", "t.parquet", "-o", str(tmp_path / "f.json"), *args])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    others = {"--min-samples", "--abandon-seconds", "--bootstrap"} - {flag}
    assert line.startswith("error: ") and "\n" not in line, line
    assert f"{flag} must" in line and line.endswith(f"not {value}"), line
    assert not any(other in line for other in others), line


def test_the_fit_s_boundaries_counts_and_statistics_are_the_documented_ones() -> None:
    """docs/commands.md (`ttlctl fit`): pauses *longer* than --abandon-seconds are set aside
    (one of exactly that length is kept), a tool is trusted with *more* than K samples, the
    `measured` count is of the pauses kept, `input.pauses` counts every pause (the abandoned
    too), p50/p90/p99 are numpy's linear percentiles, and the exponential's `ks` and
    `ks_pvalue` are scipy's KS statistic and p-value, in that order. All-zero pauses have
    no exponential fit (None, not a rate of inf)."""
    from scipy import stats

    rows: list[dict[str, Any]] = []

    def pause(tool: str, tool_s: float | None, gap_s: float) -> None:
        rows.append({"program_id": "p", "tool": tool, "tool_s": tool_s, "gap_s": gap_s})

    for s in (1.0, 2.0, 10.0):  # 10.0 is exactly --abandon-seconds: kept
        pause("a", s, s)
    pause("a", 11.0, 11.0)  # abandoned, and measured: in no `measured` count
    for s in (1.0, 2.0, 3.0, 4.0):
        pause("b", None, s)
    hundred = [0.001 * i * i for i in range(100)]  # 0 … 9.8 s
    for s in hundred:
        pause("c", None, s)
    pause("z", 0.0, 0.0)
    pause("z", 0.0, 0.0)
    rows.append({"program_id": "p", "tool": None, "tool_s": None, "gap_s": None})
    doc = fit_trace(pl.DataFrame(rows), FitConfig(min_samples=3, abandon_s=10.0, bootstrap=0))

    tools = doc["tools"]
    assert (tools["a"]["n"], tools["a"]["measured"], tools["a"]["trusted"]) == (3, 3, False)
    assert tools["a"]["max_s"] == 10.0
    assert (tools["b"]["n"], tools["b"]["measured"], tools["b"]["trusted"]) == (4, 0, True)
    assert doc["global"]["n"] == 3 + 4 + 100 + 2 and doc["global"]["measured"] == 3 + 2
    assert doc["input"]["pauses"] == 3 + 1 + 4 + 100 + 2 and doc["input"]["abandoned_pauses"] == 1

    c = tools["c"]
    values = np.asarray(hundred)
    for key, p in (("p50_s", 50), ("p90_s", 90), ("p99_s", 99)):
        assert c[key] == pytest.approx(float(np.percentile(values, p)), rel=1e-12), key
    test = stats.kstest(values, "expon", args=(0.0, values.mean()))
    exp = c["exponential"]
    assert exp is not None and exp["mean_s"] == pytest.approx(values.mean())
    assert exp["ks"] == pytest.approx(test.statistic) and exp["ks_pvalue"] == pytest.approx(
        test.pvalue
    )
    assert exp["ks"] != pytest.approx(exp["ks_pvalue"])  # the two are told apart here
    assert tools["z"]["exponential"] is None
    assert tools["b"]["p99_s"] is None  # a p99 of 4 samples says little: None


def test_a_percentile_needs_its_documented_number_of_samples() -> None:
    """fitting.percentile: a p99 needs 100 samples, a p90 10, a median 2: at that count it
    is a number, one fewer is None."""
    from fitting.percentile import percentile

    for p, need in ((99, 100), (90, 10), (50, 2)):
        assert percentile(np.arange(float(need)), p) == pytest.approx(
            float(np.percentile(np.arange(float(need)), p))
        ), p
        assert percentile(np.arange(float(need - 1)), p) is None, p


def test_up_to_max_points_distinct_durations_are_kept_exactly() -> None:
    """fitting.cdf: "Up to 1,024 distinct durations are kept exactly", whatever the steps
    between them: here exactly MAX_POINTS durations with uneven heights (most of the mass on
    the first), which the greedy compression would thin if it ran."""
    from fitting import cdf as cdf_mod

    samples = np.r_[np.zeros(3000), np.arange(1.0, float(cdf_mod.MAX_POINTS))]
    full = cdf_mod.empirical(samples)
    assert len(full.x) == cdf_mod.MAX_POINTS
    assert cdf_mod.compress(full) == full
    more = cdf_mod.empirical(np.r_[samples, float(cdf_mod.MAX_POINTS)])
    assert len(cdf_mod.compress(more).x) <= cdf_mod.MAX_POINTS < len(more.x)
