"""Outputs are checked before the work starts: an output that is a folder, or lies under a
file, stops every command at once with one line naming the user's path (never the
temporary file), exit 2, and nothing is written or left behind."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiles.shipped import DATA
from ttlctl.cli import app
from ttlctl.cli.kit import FOLDER_REFUSED, STDOUT_REFUSED
from ttlctl.jsonio import OutputError, check_folder, check_writable, write_json


def _commands(i: dict[str, Path], to: str, ok: Path) -> dict[str, list[str]]:
    """Each command writing ``to`` (the bad output), its other outputs in ``ok``."""
    trace, fit = str(i["trace"]), str(i["fit"])
    return {
        "ingest": ["ingest", trace, "-o", to],
        "ingest --skip-bad": ["ingest", trace, "-o", to, "--skip-bad"],
        "ingest --json": ["ingest", trace, "-o", str(ok / "t.parquet"), "--json", to],
        "fit": ["fit", trace, "-o", to],
        "fit --json": ["fit", trace, "-o", str(ok / "f.json"), "--json", to],
        "replay --json": ["replay", trace, "--policy", "vllm", "--json", to],
        "tune": ["tune", trace, "--fit", fit, "--profile", "llama-3.1-8b-h100", "-o", to],
        "bundle build": ["bundle", "build", "--fit", fit, "--profile", "llama-3.1-8b-h100",
                         "-o", to],
        "synth": ["synth", "--workload", "bfcl", "--programs", "2", "-o", to],
        "export": ["export", trace, "--to", "mooncake", "-o", to],
        "report": ["report", str(i["trace"].parent), "-o", to],
        "profile": ["profile", "-o", to],
    }  # fmt: skip


@pytest.mark.parametrize("where", ["a folder", "under a file", "a named pipe"])
def test_an_output_that_cannot_be_written_stops_every_command_first(
    small_inputs: dict[str, Path], tmp_path: Path, where: str
) -> None:
    """Regression (a named pipe): every command exited 0 having renamed a plain file over
    the pipe (as root, ``-o /dev/full`` replaced the device node the same way)."""
    folder = tmp_path / "existdir"
    folder.mkdir()
    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "pipe")
    target = {
        "a folder": folder,
        "under a file": tmp_path / "afile" / "out.json",
        "a named pipe": tmp_path / "pipe",
    }[where]
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for name, args in _commands(small_inputs, str(target), tmp_path).items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"error: {target}: "), (name, line)
        assert ".tmp" not in line and "Traceback" not in res.output, name
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, name
        assert stat.S_ISFIFO((tmp_path / "pipe").stat().st_mode), name
        if where == "a named pipe":
            assert line == (
                f"error: {target}: is a named pipe, not a regular file; outputs are written "
                "whole and renamed into place, which would replace it (give a file's path; "
                "for standard output give -, where the flag takes it)"
            ), name


def test_an_output_that_is_a_link_replaces_the_file_it_names(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Regression: `ingest --json LINK` renamed a plain file over the link, leaving the
    file it named as it was; now the file is written (atomically) and the link kept. A
    link that loops is refused in one line, before the trace is written."""
    trace = str(small_inputs["trace"])
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    (tmp_path / "dangling.json").symlink_to("made/new.json")
    for link in ("link.json", "dangling.json"):
        out = tmp_path / f"{link}.parquet"
        res = CliRunner().invoke(
            app, ["ingest", trace, "-o", str(out), "--json", str(tmp_path / link)]
        )
        assert res.exit_code == 0, res.output
        assert (tmp_path / link).is_symlink()
        assert json.loads((tmp_path / link).read_text())["summary"]["calls"] > 0
    (tmp_path / "loop.json").symlink_to("loop.json")
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(
        app, ["ingest", trace, "-o", str(out), "--json", str(out.parent / "loop.json")]
    )
    assert res.exit_code == 2 and not out.exists()
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'loop.json'}: cannot follow this link (")


def test_fit_checks_the_plot_folder_before_writing_the_fit(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "plots").write_text("a file, not a folder")
    out = tmp_path / "f.json"
    res = CliRunner().invoke(
        app, ["fit", str(small_inputs["trace"]), "-o", str(out), "--plot", str(tmp_path / "plots")]
    )
    assert res.exit_code == 2 and f"{tmp_path / 'plots'}: not a directory" in res.stderr
    assert not out.exists()


def test_dash_is_stdout_only_where_the_flag_takes_it(
    small_inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `-o -` (stdout, as `--json -` is) wrote a file named '-' in the current
    folder and said "wrote ... to -" (every command's -o, refit's --trace, tune's
    --live-bundle). Now each is refused first, one line, nothing written; --json - and
    `profile --profile P --as vllm-router -o -` still print to stdout."""
    monkeypatch.chdir(tmp_path)
    trace, fit = str(small_inputs["trace"]), str(small_inputs["fit"])
    served = str(tmp_path / "served.json")
    build = ["bundle", "build", "--fit", fit, "--profile", "llama-3.1-8b-h100", "-o", served]
    assert CliRunner().invoke(app, build).exit_code == 0
    tune = ["tune", trace, "--fit", fit, "--profile", "llama-3.1-8b-h100", "--trials", "1"]
    cases = {
        **{name: args for name, args in _commands(small_inputs, "-", tmp_path).items()
           if "--json" not in args},
        "refit -o": ["refit", trace, "--bundle", served, "-o", "-"],
        "refit --trace": ["refit", trace, "--bundle", served, "--trace", "-"],
        "tune --live-bundle": [*tune, "-o", str(tmp_path / "b.json"), "--live",
                               "http://127.0.0.1:9", "--live-bundle", "-"],
    }  # fmt: skip
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, args in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line == f"error: {STDOUT_REFUSED}", (name, line)
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name
    # where '-' is stdout, it still is
    res = CliRunner().invoke(app, ["fit", trace, "-o", str(tmp_path / "f.json"), "--json", "-"])
    assert res.exit_code == 0 and json.loads(res.stdout)["schema"] == "ttlctl.fit/1"
    shown = ["profile", "--profile", "llama-3.1-8b-h100", "--as", "vllm-router", "-o", "-"]
    res = CliRunner().invoke(app, shown)
    assert res.exit_code == 0 and res.stdout.strip(), res.output
    assert not (tmp_path / "-").exists()


def test_dash_is_no_output_folder(
    small_inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `fit --plot -` drew its PNGs into a folder named '-' and said "17
    plot(s) in -"; a folder an output is written in (fit's --plot, validate's --work-dir
    and --result-dir) is refused as '-' first, as every output file is."""
    monkeypatch.chdir(tmp_path)
    trace = str(small_inputs["trace"])
    cases = {
        "fit --plot": ["fit", trace, "-o", str(tmp_path / "f.json"), "--plot", "-"],
        "validate --work-dir": ["validate", trace, "--engine-cmd", "false", "--work-dir", "-"],
        "validate --result-dir": ["validate", trace, "--engine-cmd", "false", "--save-result",
                                  "--result-dir", "-"],
    }  # fmt: skip
    for name, args in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line == f"error: {FOLDER_REFUSED}", (name, line)
        assert list(tmp_path.iterdir()) == [], name


def test_one_path_named_for_two_outputs_is_refused_first(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """The second write would replace the first: tune's bundle overwritten by its summary
    (given as --json) or its study file (--storage), fit's -o taken as
    its --plot folder. Regression: tune wrote both, leaving a summary where the bundle
    was; fit plotted into a folder named as its -o, then failed to write the fit."""
    trace, fit = str(small_inputs["trace"]), str(small_inputs["fit"])
    same = tmp_path / "same.json"
    tune = ["tune", trace, "--fit", fit, "--profile", "llama-3.1-8b-h100", "--trials", "1"]
    cases = {
        "tune --json": ([*tune, "-o", str(same), "--json", str(same)], same),
        "tune --storage": ([*tune, "-o", str(same), "--storage", f"sqlite:///{same}"], same),
        "fit --plot": (["fit", trace, "-o", str(same), "--plot", str(same)], same),
        "ingest --json": (["ingest", trace, "-o", str(same), "--json", str(same)], same),
        # the summary written over the bundle the server serves
        "tune --live-bundle --json": (
            [*tune, "-o", str(tmp_path / "b.json"), "--live", "http://127.0.0.1:9",
             "--live-bundle", str(same), "--json", str(same)],
            same,
        ),
    }  # fmt: skip
    for name, (args, path) in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line == f"error: {path}: named for two outputs; give each its own path", name
        assert list(tmp_path.iterdir()) == [], name


def test_the_checks_and_the_writer_name_the_users_path(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match=rf"^{tmp_path}: is a directory"):
        check_writable(tmp_path)
    with pytest.raises(OutputError, match=rf"^{tmp_path}: is a directory"):
        write_json({}, tmp_path)  # the atomic writer too, not only the check
    (tmp_path / "f").write_text("")
    with pytest.raises(OutputError, match="is not a directory"):
        check_writable(tmp_path / "f" / "g" / "h.json")
    with pytest.raises(OutputError, match="not a directory"):
        check_folder(tmp_path / "f")
    check_writable(tmp_path / "new" / "deeper" / "x.json")  # folders to be made: fine
    check_folder(tmp_path / "new-folder")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]  # the probes left nothing


def test_an_output_that_is_an_input_is_refused(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """`fit trace.parquet -o trace.parquet` (a slip of the keyboard) replaced the trace with
    its fit: an output that is one of the command's inputs stops it first, one line, and
    the input is left as it was. Regression: replay's --json and tune's -o, --json,
    --live-bundle and --storage file were not checked against the trace, fit, bundle or
    profile read."""
    run = tmp_path / "run"
    run.mkdir()
    trace, fit = run / "trace.parquet", run / "fit.json"
    trace.write_bytes(small_inputs["trace"].read_bytes())
    fit.write_bytes(small_inputs["fit"].read_bytes())
    profile = str(run / "profile.json")
    shutil.copyfile(DATA / "llama-3.1-8b-h100.json", profile)
    t, f = str(trace), str(fit)
    served = str(tmp_path / "served.json")
    build = ["bundle", "build", "--fit", f, "--profile", "llama-3.1-8b-h100", "-o", served]
    tune = ["tune", t, "--fit", f, "--profile", "llama-3.1-8b-h100", "--trials", "1"]
    assert CliRunner().invoke(app, build).exit_code == 0
    cases = {
        "ingest": ["ingest", t, "-o", t],
        "ingest --json": ["ingest", t, "-o", str(tmp_path / "t.parquet"), "--json", t],
        "fit": ["fit", t, "-o", t],
        "fit --json": ["fit", t, "-o", str(tmp_path / "f.json"), "--json", t],
        "bundle build": ["bundle", "build", "--fit", f, "--profile", "llama-3.1-8b-h100",
                         "-o", f],
        "export": ["export", t, "--to", "mooncake", "-o", t],
        "report": ["report", str(run), "-o", f],
        "refit --trace": ["refit", t, "--bundle", served, "--trace", t],
        "refit -o": ["refit", t, "--bundle", served, "-o", t],
        "replay --json": ["replay", t, "--policy", "vllm", "--json", t],
        "replay --json bundle": ["replay", t, "--policy", "continuum", "--bundle", served,
                                 "--json", served],
        "tune -o": [*tune, "-o", f],
        "tune -o trace": [*tune, "-o", t],
        "tune --json": [*tune, "-o", str(tmp_path / "b.json"), "--json", t],
        "tune --live-bundle": [*tune, "-o", str(tmp_path / "b.json"), "--live",
                               "http://127.0.0.1:9", "--live-bundle", f],
        "tune -o profile": ["tune", t, "--fit", f, "--profile", profile, "-o", profile],
        "tune --storage": [*tune, "-o", str(tmp_path / "b.json"), "--storage", t],
        "tune --storage sqlite": [*tune, "-o", str(tmp_path / "b.json"), "--storage",
                                  f"sqlite:///{fit}"],
        "replay --json profile": ["replay", t, "--policy", "vllm", "--profile", profile,
                                  "--json", profile],
        "replay --replicas --json": ["replay", t, "--policy", "vllm", "--replicas", "2",
                                     "--json", t],
        "tune --replicas -o": [*tune, "-o", f, "--replicas", "2"],
        "validate --json": ["validate", t, "--engine-cmd", "false", "--json", t],
        "refit --dry-run --json": ["refit", t, "--bundle", served, "--dry-run", "--json", served],
        "refit --trace bundle": ["refit", t, "--bundle", served, "--dry-run", "--trace", served],
    }  # fmt: skip
    before = {p: p.read_bytes() for p in (trace, fit, Path(served), Path(profile))}
    for name, args in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith("error: ") and "is an input of this command" in line, (name, line)
        assert {p: p.read_bytes() for p in before} == before, name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "served.json"]


#: each command's -o format, and a name that says another
_MISNAMED = {"Parquet": "out.jsonl", "JSON": "out.parquet", "JSONL": "out.json", "HTML": "out.csv"}
_WRITES = {
    "ingest": "Parquet",
    "ingest --skip-bad": "Parquet",
    "fit": "JSON",
    "tune": "JSON",
    "bundle build": "JSON",
    "synth": "Parquet",
    "export": "JSONL",
    "report": "HTML",
    "profile": "JSON",
}


def test_an_output_named_for_another_format_is_refused_first(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Regression: `synth -o trace.jsonl` wrote Parquet into a file named .jsonl (and the
    next command that reads it by its name, `ingest trace.jsonl`, failed on it). A suffix
    that names another format ttlctl knows is refused first, one line naming the flag and
    the path, exit 2, nothing written; refit's --trace alike."""
    trace, fit = str(small_inputs["trace"]), str(small_inputs["fit"])
    served = str(tmp_path / "served.json")
    build = ["bundle", "build", "--fit", fit, "--profile", "llama-3.1-8b-h100", "-o", served]
    assert CliRunner().invoke(app, build).exit_code == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    cases = {
        name: (args, _WRITES[name])
        for fmt in _MISNAMED
        for name, args in _commands(small_inputs, str(tmp_path / _MISNAMED[fmt]), tmp_path).items()
        if _WRITES.get(name) == fmt
    }
    cases["refit -o"] = (
        ["refit", trace, "--bundle", served, "-o", str(tmp_path / "b.yaml")],
        "JSON",
    )
    cases["refit --trace"] = (
        ["refit", trace, "--bundle", served, "--dry-run", "--trace", str(tmp_path / "t.csv")],
        "Parquet",
    )
    assert len(cases) == len(_WRITES) + 2
    for name, (args, fmt) in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert f": this is written as {fmt}, but its name says " in line, (name, line)
        assert line.startswith("error: -o " if "--trace" not in name else "error: --trace "), line
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name


def test_a_json_output_named_for_another_format_is_refused_first(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """Regression: `fit … --json fit.parquet` wrote the JSON document into a file named
    .parquet (only -o and refit's --trace were checked). Every command's --json, and the
    router's value of `profile --as vllm-router -o`, is refused first by its name, one line
    naming the flag, exit 2, nothing written."""
    trace, fit = str(small_inputs["trace"]), str(small_inputs["fit"])
    served = str(tmp_path / "served.json")
    build = ["bundle", "build", "--fit", fit, "--profile", "llama-3.1-8b-h100", "-o", served]
    assert CliRunner().invoke(app, build).exit_code == 0
    bad = str(tmp_path / "out.parquet")
    cases = {
        **{name: args for name, args in _commands(small_inputs, bad, tmp_path).items()
           if "--json" in args},
        "tune --json": ["tune", trace, "--fit", fit, "--profile", "llama-3.1-8b-h100",
                        "-o", str(tmp_path / "b.json"), "--json", bad],
        "refit --json": ["refit", trace, "--bundle", served, "--json", bad],
        "validate --json": ["validate", trace, "--engine-cmd", "false", "--json", bad],
        "profile --json": ["profile", "-o", str(tmp_path / "p.json"), "--json", bad],
        "profile --as -o": ["profile", "--profile", "llama-3.1-8b-h100", "--as", "vllm-router",
                            "-o", bad],
    }  # fmt: skip
    assert len(cases) == 8
    before = sorted(p.name for p in tmp_path.iterdir())
    for name, args in cases.items():
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (name, res.output)
        (line,) = res.stderr.strip().splitlines()
        flag = "-o" if name.endswith("-o") else "--json"
        assert line == (
            f"error: {flag} {bad}: this is written as JSON, but its name says Parquet "
            "(name it out.json)"
        ), (name, line)
        assert sorted(p.name for p in tmp_path.iterdir()) == before, name


def test_a_name_of_the_format_or_of_none_is_taken(tmp_path: Path) -> None:
    """`.pq` is Parquet too; a name without a suffix, or one no format claims, is the
    user's choice."""
    for name in ("t.pq", "t.PARQUET", "trace", "t.v2"):
        args = ["synth", "--workload", "bfcl", "--programs", "2", "-o", str(tmp_path / name)]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, (name, res.output)
        assert (tmp_path / name).stat().st_size > 0


def test_a_suffix_in_capitals_names_its_format_too(tmp_path: Path) -> None:
    """`-o T.JSONL` is as much JSON lines as `t.jsonl`: refused for Parquet, nothing written."""
    out = tmp_path / "T.JSONL"
    args = ["synth", "--workload", "bfcl", "--programs", "2", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        f"error: -o {out}: this is written as Parquet, but its name says JSONL (name it T.parquet)"
    )
    assert list(tmp_path.iterdir()) == []


def test_json_to_stdout_is_sorted_and_indented_as_the_file_is(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """`--json -` prints the document the file would hold: keys sorted, one-space indent."""
    args = ["fit", str(small_inputs["trace"]), "--bootstrap", "5", "-o", str(tmp_path / "f.json")]
    res = CliRunner().invoke(app, [*args, "--json", "-"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert list(doc) == sorted(doc) and len(doc) > 1
    assert res.stdout == json.dumps(doc, indent=1, sort_keys=True) + "\n"


def test_a_link_and_the_file_it_names_are_one_output(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """`fit -o f.json --json link.json` where link.json names f.json: both writes would
    land in one file, the second replacing the first; refused first, nothing written."""
    fit = tmp_path / "f.json"
    link = tmp_path / "link.json"
    link.symlink_to(fit)
    res = CliRunner().invoke(
        app, ["fit", str(small_inputs["trace"]), "-o", str(fit), "--json", str(link)]
    )
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: {link}: named for two outputs; give each its own path"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json"] and not fit.exists()


def test_an_output_that_is_a_link_to_an_input_is_refused(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    """`ingest trace.parquet -o link.parquet`, the link naming the trace: writing through
    it would replace the trace; refused first, the trace left as it was."""
    trace = tmp_path / "trace.parquet"
    trace.write_bytes(small_inputs["trace"].read_bytes())
    link = tmp_path / "link.parquet"
    link.symlink_to(trace)
    before = trace.read_bytes()
    res = CliRunner().invoke(app, ["ingest", str(trace), "-o", str(link)])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        f"error: {link}: is an input of this command; writing it would destroy it "
        "(give another path)"
    )
    assert trace.read_bytes() == before
