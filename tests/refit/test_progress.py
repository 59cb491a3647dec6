"""refit tells its replays done of all of them (old, new and stock vLLM on every load ×
seed), and the CLI's bar draws the count on a terminal only; the JSON is the same with the
bar and without it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from replay.refit import refit
from replay.refit_settings import checked_settings
from tests.refit.test_refit import SAMPLE, served_from
from tests.terminal_env import cli_env

#: the policies refit replays: the served bundle, the refitted one, stock vLLM
POLICIES = 3


def test_refit_tells_every_replay_done(tmp_path: Path) -> None:
    served = served_from(SAMPLE, tmp_path / "srv")
    told: list[tuple[int, int]] = []
    report = refit(
        [SAMPLE],
        served,
        checked_settings(concurrency=[2, 4], seeds=2),
        dry_run=True,
        replays_done=lambda done, total: told.append((done, total)),
    )
    replays = POLICIES * len(report["replay"]["loads"]) * len(report["replay"]["seeds"])
    assert told == [(done, replays) for done in range(replays + 1)]


def _refit(served: Path, terminal: bool) -> subprocess.CompletedProcess[str]:
    env = cli_env(terminal=terminal, columns=200)  # wide enough for the step's description
    cmd = [sys.executable, "-m", "ttlctl.cli", "refit", str(SAMPLE), "--bundle", str(served)]
    cmd += ["--dry-run", "--json", "-"]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)


def _dated(stdout: str) -> str:
    """The document less the refitted bundle's checksum, which its creation time (to the
    second) changes from one run to the next."""
    return "\n".join(x for x in stdout.splitlines() if '"new_bundle_sha256"' not in x)


def test_the_refit_bar_counts_replays_on_a_terminal_only(tmp_path: Path) -> None:
    served = served_from(SAMPLE, tmp_path / "srv")
    piped, shown = _refit(served, terminal=False), _refit(served, terminal=True)
    assert piped.returncode == shown.returncode == 0, piped.stderr + shown.stderr
    assert "\x1b" not in piped.stderr and "refitting" not in piped.stderr  # no bar
    assert _dated(shown.stdout) == _dated(piped.stdout)
    report = json.loads(piped.stdout)
    replays = POLICIES * len(report["replay"]["loads"]) * len(report["replay"]["seeds"])
    assert "refitting" in shown.stderr and f"{replays}/{replays}" in shown.stderr, shown.stderr
    assert "replaying old, new and stock vLLM" in shown.stderr
