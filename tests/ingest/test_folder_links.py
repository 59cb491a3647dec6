"""An entry of a folder walked that is not a file (a broken link, a link to a folder, a named
pipe) is listed as not read, with what it is, never dropped unsaid. Regression: `ttlctl ingest
logs` passed over `logs/run.jsonl -> gone.jsonl` and `logs/more -> /srv/logs` without a word
(the run read fewer logs than the folder shows and said nothing of the others), and a folder of
nothing but links said only "no log files to ingest"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest


def logs_with_links(samples: Path, root: Path) -> Path:
    """A folder holding one log, a broken link, a link to a folder of logs and a pipe."""
    logs = root / "logs"
    logs.mkdir()
    shutil.copy(samples / "mooncake" / "synthetic_trace_head.jsonl", logs / "head.jsonl")
    (logs / "gone.jsonl").symlink_to(root / "nowhere.jsonl")
    (logs / "more").symlink_to(samples / "litellm", target_is_directory=True)
    os.mkfifo(logs / "pipe.jsonl")
    return logs


def test_entries_not_read_are_listed_with_what_they_are(samples: Path, tmp_path: Path) -> None:
    logs = logs_with_links(samples, tmp_path)
    report = ingest([logs], tmp_path / "t.parquet")
    assert [Path(f.path).name for f in report.files] == ["head.jsonl"]
    assert report.others_skipped == [
        f"{logs / 'gone.jsonl'} (a broken link)",
        f"{logs / 'more'} (a link to a folder, not followed)",
        f"{logs / 'pipe.jsonl'} (not a regular file)",
    ]


def test_the_command_says_so_and_its_json_holds_them(samples: Path, tmp_path: Path) -> None:
    logs = logs_with_links(samples, tmp_path)
    out, doc = tmp_path / "t.parquet", tmp_path / "ingest.json"
    res = CliRunner().invoke(app, ["ingest", str(logs), "-o", str(out), "--json", str(doc)])
    assert res.exit_code == 0, res.output
    line = next(x for x in res.output.splitlines() if "not files" in x)
    assert line.startswith("skipped 3 entries that are not files (not read): "), line
    assert f"{logs / 'more'} (a link to a folder, not followed)" in line
    assert len(json.loads(doc.read_text())["ingest"]["others_skipped"]) == 3


def test_a_folder_of_only_links_names_them(samples: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "more").symlink_to(samples / "litellm", target_is_directory=True)
    out = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["ingest", str(logs), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        f"error: {logs}: no log files to ingest; not files, not read: "
        f"{logs / 'more'} (a link to a folder, not followed)"
    )
    assert not out.exists()
