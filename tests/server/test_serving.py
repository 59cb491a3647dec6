"""What ``ttlctl serve`` decides before vLLM starts (ttlctl.server.serving): the bundle
check, the Prometheus folder and the ``--print-command`` line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.bundles import write_bundle
from tests.conftest import make_trace
from ttlctl.cli import app
from ttlctl.errors import TtlctlError
from ttlctl.server import serving


def test_a_missing_bundle_is_refused_unless_stock_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(TtlctlError, match=r"^no --bundle given \(pass --allow-stock"):
        serving.check_bundle(None, allow_stock=False)
    missing = tmp_path / "b.json"
    warning = serving.check_bundle(missing, allow_stock=True)
    assert warning is not None and warning.startswith(f"bundle refused: {missing}: no such file")


def test_the_metrics_folder_given_is_made_and_kept(tmp_path: Path) -> None:
    given = tmp_path / "prom"
    with serving.metrics_dir(given, {}) as folder:
        assert folder == given and folder.is_dir()
    assert given.is_dir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "env")}
    assert serving.chosen_metrics_dir(None, env) == tmp_path / "env"
    assert serving.chosen_metrics_dir(given, env) == given


def test_an_own_metrics_folder_is_removed_at_the_end() -> None:
    assert serving.chosen_metrics_dir(None, {}) is None
    with serving.metrics_dir(None, {}) as folder:
        assert folder.is_dir() and folder.name.startswith("ttlctl-prom-")
    assert not folder.exists()


def test_print_command_shows_ttlctls_environment_then_the_command() -> None:
    env = {"HOME": "/h", "TTLCTL_LOG": "a b.jsonl", "TTLCTL_BUNDLE": "b.json"}
    line = serving.shown_command(["python", "-m", "x y"], env)
    assert line == "TTLCTL_BUNDLE=b.json TTLCTL_LOG='a b.jsonl' python -m 'x y'"
    assert serving.shown_command(["vllm"], {}) == "vllm"


def test_a_metrics_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "prom"
    afile.write_text("")
    with pytest.raises(TtlctlError, match=rf"^--metrics-dir {afile}: cannot make the folder "
                       r"\(not a folder\)$"), serving.metrics_dir(afile, {}):  # fmt: skip
        pass
    under = afile / "sub"
    env = {"PROMETHEUS_MULTIPROC_DIR": str(under)}
    refused = pytest.raises(TtlctlError, match=rf"^PROMETHEUS_MULTIPROC_DIR {under}: cannot make")
    with refused, serving.metrics_dir(None, env):
        pass


def test_print_command_checks_and_shows_the_metrics_folder_as_a_start_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `serve --print-command --metrics-dir prom` printed
    PROMETHEUS_MULTIPROC_DIR=prom (relative) beside an absolute TTLCTL_BUNDLE and
    TTLCTL_LOG, and took a --metrics-dir that is a file (the bundle itself) that a start
    refuses. The line now names the folder absolute; a file in its way is refused, in the
    words a start uses, and nothing is made."""
    bundle = write_bundle(tmp_path / "bundle.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    head = ["serve", "m", "--bundle", "bundle.json", "--log", "e.jsonl"]
    res = CliRunner().invoke(app, [*head, "--metrics-dir", "prom", "--print-command"])
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(
        f"TTLCTL_BUNDLE={bundle} TTLCTL_LOG={tmp_path / 'e.jsonl'} "
        f"PROMETHEUS_MULTIPROC_DIR={tmp_path / 'prom'} "
    ), res.stdout
    for given, why in [
        ("bundle.json", "not a folder"),
        ("bundle.json/p", "bundle.json is not a folder"),
    ]:
        for mode in (["--print-command"], []):
            res = CliRunner().invoke(app, [*head, "--metrics-dir", given, *mode])
            assert res.exit_code == 2, res.output
            assert res.stdout == ""
            said = f"error: --metrics-dir {given}: cannot make the folder ({why})"
            assert res.stderr.strip() == said, (mode, res.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.json"]


def test_an_engine_log_without_its_folder_or_on_the_bundle_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    serving.check_log(None, None, starting=True)
    serving.check_log(tmp_path / "engine.jsonl", None, starting=True)
    missing = tmp_path / "no" / "engine.jsonl"
    serving.check_log(missing, None, starting=False)  # --print-command: not looked for
    with pytest.raises(TtlctlError, match=rf"^--log {missing}: no folder {missing.parent} to"):
        serving.check_log(missing, None, starting=True)
    with pytest.raises(TtlctlError, match=rf"^--log {tmp_path}: is a folder"):
        serving.check_log(tmp_path, None, starting=False)
    bundle = tmp_path / "bundle.json"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TtlctlError, match=r"^--log bundle.json: is the bundle; the engine log"):
        serving.check_log(Path("bundle.json"), tmp_path / ".." / tmp_path.name / "bundle.json",
                          starting=False)  # fmt: skip
    serving.check_log(tmp_path / "engine.jsonl", bundle, starting=True)


def test_an_engine_log_is_checked_for_appending_not_its_folder_for_new_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plugin appends to the log: one made beforehand in a folder the server cannot
    write to (/var/log/…) is taken; a new one there, or a log that is not writable, is
    refused. (The folder's permission is what os.access reports: as root every path is
    writable, so the folder's answer is given here.)"""
    locked = tmp_path / "locked"
    locked.mkdir()
    made = locked / "engine.jsonl"
    made.write_text("")
    real = os.access
    unwritable = {locked}
    monkeypatch.setattr(serving.os, "access", lambda p, m: Path(p) not in unwritable and real(p, m))
    serving.check_log(made, None, starting=True)
    fresh = locked / "new.jsonl"
    with pytest.raises(TtlctlError, match=rf"^--log {fresh}: cannot be appended to \(its folder"):
        serving.check_log(fresh, None, starting=True)
    unwritable.add(made)
    with pytest.raises(TtlctlError, match=rf"^--log {made}: cannot be appended to \(the file is"):
        serving.check_log(made, None, starting=True)


def test_serve_refuses_what_it_cannot_start_with_in_one_line(tmp_path: Path) -> None:
    """Through the command: exit 2, one line, no traceback, nothing started."""
    bundle = tmp_path / "b.json"  # missing: --allow-stock serves as stock vLLM
    afile = tmp_path / "prom"
    afile.write_text("")
    head = ["serve", "m", "--bundle", str(bundle), "--allow-stock"]
    for args, line in [
        (["--metrics-dir", str(afile)], f"--metrics-dir {afile}: cannot make the folder"),
        (["--log", str(afile / "e.jsonl")], f"--log {afile / 'e.jsonl'}: no folder"),
        (["--log", str(tmp_path / "no" / "e.jsonl")], f"--log {tmp_path / 'no' / 'e.jsonl'}: no"),
        (["--port", "70000", "--print-command"], "ttlctl serve: invalid value for '--port'"),
        (["--port", "-5", "--print-command"], "ttlctl serve: invalid value for '--port'"),
        # an empty name was dropped without a word: the server ran unnamed
        (["--replica", "", "--print-command"], "--replica '': give this server's name"),
        (["--replica", "  ", "--print-command"], "--replica '  ': give this server's name"),
        # '-' is no stdout here: a file or folder named '-' was made in the current folder
        (["--log", "-", "--print-command"], "--log -: the engine log is a file"),
        (["--metrics-dir", "-", "--print-command"], "--metrics-dir -: this is a folder"),
    ]:
        res = CliRunner().invoke(app, [*head, *args])
        assert res.exit_code == 2, res.output
        assert "Traceback" not in res.output
        got = [x for x in res.stderr.strip().splitlines() if x.startswith("error:")]
        assert len(got) == 1 and got[0].startswith(f"error: {line}"), res.stderr


def test_an_empty_model_is_refused(tmp_path: Path) -> None:
    """Regression: `ttlctl serve '' …` printed `--model ''` with --print-command (and would
    have started vLLM so, to fail in the server's output)."""
    bundle = write_bundle(tmp_path / "bundle.json")
    for model in ("", "  "):
        res = CliRunner().invoke(app, ["serve", model, "--bundle", str(bundle), "--print-command"])
        assert res.exit_code == 2, res.output
        assert res.stdout == ""
        (line,) = res.stderr.strip().splitlines()
        assert line == f"error: MODEL {model!r}: give the model's name or folder"


def test_a_metrics_folder_holding_an_earlier_servers_files_is_warned_of(tmp_path: Path) -> None:
    assert serving.stale_metrics(tmp_path) is None
    assert serving.stale_metrics(tmp_path / "none") is None
    (tmp_path / "gauge_livesum_4242.db").write_bytes(b"\0")
    warning = serving.stale_metrics(tmp_path)
    assert warning is not None
    assert warning.startswith(f"PROMETHEUS_MULTIPROC_DIR {tmp_path} is not empty (1 file(s)")


def test_a_log_that_is_the_bundle_or_a_folder_is_refused(tmp_path: Path) -> None:
    """``--log`` is appended to by the engine: naming the bundle (its lines would damage
    it) or a folder is one line, exit 2, before anything starts."""
    bundle = write_bundle(tmp_path / "bundle.json")
    before = bundle.read_bytes()
    for log, says in ((bundle, "is the bundle"), (tmp_path, "is a folder")):
        res = CliRunner().invoke(
            app, ["serve", "m", "--bundle", str(bundle), "--log", str(log), "--print-command"]
        )
        assert res.exit_code == 2, res.output
        assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert bundle.read_bytes() == before


def test_a_log_that_is_another_file_is_refused_an_engine_log_is_taken(tmp_path: Path) -> None:
    """Regression: `--log trace.parquet` (or a fit, a Mooncake export, notes) was taken,
    and the engine would have appended its JSON lines to the file, damaging it; with
    --print-command the line was printed. An existing engine log, or an empty file, is
    taken as before."""
    bundle = write_bundle(tmp_path / "bundle.json")
    trace = make_trace(tmp_path / "trace.parquet", programs=2)
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"schema": "ttlctl.fit/1", "tools": {}}, indent=1))
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text('{"session_id": "a", "input_length": 3, "hash_ids": [0]}\n')
    wide = tmp_path / "wide.jsonl"
    wide.write_bytes(ENGINE_LINE.encode("utf-16"))
    for log, says in (
        (trace, "a Parquet file (a trace?), not an engine log; the engine appends"),
        (fit, "a fit (what `ttlctl fit` writes), not an engine log; the engine appends"),
        (mooncake, 'not an engine log (its first line has no "schema": "ttlctl.engine-log/1")'),
        (wide, "not an engine log as the engine writes it (UTF-8) but UTF-16 text"),
    ):
        before = log.read_bytes()
        res = CliRunner().invoke(
            app, ["serve", "m", "--bundle", str(bundle), "--log", str(log), "--print-command"]
        )
        assert res.exit_code == 2, res.output
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"error: --log {log}: {says}"), line
        assert log.read_bytes() == before
    engine_log = tmp_path / "engine.jsonl"
    engine_log.write_text(ENGINE_LINE)
    (tmp_path / "empty.jsonl").write_text("")
    for log in (engine_log, tmp_path / "empty.jsonl", tmp_path / "new.jsonl"):
        serving.check_log(log, bundle, starting=True)


#: an engine log's first line, as the plugin writes it
ENGINE_LINE = (
    '{"schema": "ttlctl.engine-log/1", "kind": "engine", "at_unix_s": 1796437241.6, '
    '"block_size": 32, "kv_blocks": 255}\n'
)


def test_an_engine_log_whose_first_line_outruns_the_bytes_judged_is_taken(
    tmp_path: Path,
) -> None:
    """A first line longer than the bytes read (a long prompt's record) is not judged: its
    start does not parse as JSON, yet the file may well be an engine log."""
    log = tmp_path / "engine.jsonl"
    line = ENGINE_LINE.rstrip("}\n") + ', "note": "' + "x" * serving.LOG_SNIFF_BYTES + '"}\n'
    log.write_text(line)
    assert serving.not_an_engine_log(log) is None
    serving.check_log(log, None, starting=True)


def test_the_options_serve_sets_are_refused_after_the_double_dash() -> None:
    """MODEL and the TTL scheduler are serve's: given again to vLLM (abbreviated too),
    one line naming the flag, exit 2, nothing printed."""
    for extra, flag in (
        (["--model", "x"], "--model"),
        (["--scheduler-cls", "a.B"], "--scheduler-cls"),
        (["--scheduler-c=a.B"], "--scheduler-c (abbreviates --scheduler-cls)"),
    ):
        res = CliRunner().invoke(
            app, ["serve", "m", "--allow-stock", "--print-command", "--", *extra]
        )
        assert res.exit_code == 2, res.output
        assert res.stdout == ""
        assert res.stderr.strip() == (
            f"error: {flag} is set by ttlctl serve (MODEL and the TTL scheduler); remove it "
            "from the vLLM arguments"
        )


def test_print_command_shows_the_replicas_name(tmp_path: Path) -> None:
    """`--replica r1 --print-command`: the line carries TTLCTL_REPLICA, or the server it
    starts would log unnamed."""
    bundle = write_bundle(tmp_path / "bundle.json")
    res = CliRunner().invoke(
        app, ["serve", "m", "--bundle", str(bundle), "--replica", "r1", "--print-command"]
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith(f"TTLCTL_BUNDLE={bundle} TTLCTL_REPLICA=r1 "), res.stdout
