"""Stderr written to a pipe or a log holds the command's lines and no blank one.

The progress bar (ingest, profile, tune) drew nothing off a terminal but ended with an empty
line, so `ttlctl ingest missing -o t.parquet 2>err.log` wrote "\\nerror: …": the one-line
error was the second line, and every ingest report began with a blank one. Through real
pipes (the consoles are made at import, so CliRunner cannot show it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "ttlctl.cli", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)


def test_an_error_under_the_progress_bar_is_the_only_line(tmp_path: Path) -> None:
    res = run("ingest", "missing.jsonl", "-o", "t.parquet", cwd=tmp_path)
    assert res.returncode == 2
    assert res.stderr == "error: missing.jsonl: no such file or directory\n"


def test_an_ingest_report_starts_on_its_first_line(tmp_path: Path) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text(
        '{"program_id": "a", "turn": 0, "arrival_s": 0, "input_tokens": 10, "output_tokens": 2}\n'
    )
    res = run("ingest", "run.jsonl", "-o", "t.parquet", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = res.stderr.splitlines()
    assert lines[0] == "read 1 file: canonical ×1", res.stderr
    assert "" not in lines, res.stderr
