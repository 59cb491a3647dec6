"""What ``ttlctl serve`` decides before vLLM starts (ttlctl.server.serving): the bundle
check, the Prometheus folder and the ``--print-command`` line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.bundles import write_bundle
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


def test_a_log_that_is_the_bundle_or_a_folder_is_refused(tmp_path: Path) -> None:
    """``--log`` is appended to by the engine: naming the bundle (its lines would damage
    it) or a folder is one line, exit 2, before anything starts."""
    bundle = write_bundle(tmp_path / "bundle.json")
    before = bundle.read_bytes()
    for log, says in ((bundle, "is an input of this command"), (tmp_path, "is a directory")):
        res = CliRunner().invoke(
            app, ["serve", "m", "--bundle", str(bundle), "--log", str(log), "--print-command"]
        )
        assert res.exit_code == 2, res.output
        assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert bundle.read_bytes() == before
