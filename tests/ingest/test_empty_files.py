"""An empty log file (nothing but whitespace, compressed or not): a log with no calls, which
--allow-empty accepts as it accepts any input with no calls; without it, a bad file named
"empty file". Garbage stays garbage under --allow-empty."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.lookup import READERS
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

#: name -> the bytes of a file that holds no record
EMPTY = {
    "zero bytes": b"",
    "blank lines": b"\n  \n\t\n",
    "empty gzip": gzip.compress(b""),
    "gzip of blanks": gzip.compress(b" \n" * 50_000),  # more than the sniffed head
    "blanks past the head": b" \n" * 50_000,
}
#: --format values: detection, and every reader named
FORMATS = ["auto", *READERS]


def _empty(tmp_path: Path, case: str) -> Path:
    path = tmp_path / ("run.jsonl.gz" if "gzip" in case else "run.jsonl")
    path.write_bytes(EMPTY[case])
    return path


def _good(tmp_path: Path) -> Path:
    path = tmp_path / "good.jsonl"
    rows = [
        {"program_id": "a", "turn": 0, "arrival_s": 0.0, "input_tokens": 100, "output_tokens": 10},
        {"program_id": "a", "turn": 1, "input_tokens": 200, "output_tokens": 10},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(EMPTY))
def test_allow_empty_reads_an_empty_file_as_no_calls(tmp_path: Path, case: str, fmt: str) -> None:
    src = _empty(tmp_path, case)
    out = tmp_path / "o.parquet"
    for skip_bad in (False, True):
        report = ingest([src], out, fmt=fmt, skip_bad=skip_bad, allow_empty=True)
        assert trace_io.read(out).height == 0
        assert (report.records, report.rows, report.rejected) == (0, 0, 0)
        assert [(f.path, f.format, f.records) for f in report.files] == [(str(src), "empty", 0)]
    assert (tmp_path / "o.parquet.rejects.jsonl").read_text() == ""  # none, with --skip-bad


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(EMPTY))
def test_without_allow_empty_an_empty_file_is_a_bad_file(
    tmp_path: Path, case: str, fmt: str
) -> None:
    """Named "empty file" whether detected or named (not "unrecognised format … name one
    with --format", which would not help); nothing written."""
    src = _empty(tmp_path, case)
    out = tmp_path / "o.parquet"
    with pytest.raises(IngestError) as info:
        ingest([src], out, fmt=fmt)
    assert info.value.file == str(src) and info.value.record is None
    assert info.value.reason == "empty file"
    # --skip-bad rejects it as one bad record, and the run has nothing to write
    with pytest.raises(
        IngestError, match=r"every record was rejected \(1; the first: .*empty file"
    ):
        ingest([src], out, fmt=fmt, skip_bad=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [src.name]


def test_an_empty_file_beside_a_log(tmp_path: Path) -> None:
    """Among other logs an empty file adds no record under --allow-empty; under --skip-bad
    alone it is one rejected record, as before."""
    empty, good = _empty(tmp_path, "zero bytes"), _good(tmp_path)
    allowed = ingest([empty, good], tmp_path / "a.parquet", allow_empty=True)
    assert (allowed.records, allowed.rows, allowed.rejected) == (2, 2, 0)
    assert allowed.formats() == {"empty": 1, "canonical": 1}
    skipped = ingest([empty, good], tmp_path / "s.parquet", skip_bad=True)
    assert (skipped.records, skipped.rows, skipped.rejected) == (3, 2, 1)
    assert skipped.rejected_by_reason == {"empty file": 1}
    # the empty file's own entry counts its one rejected record (--json shows it)
    assert [(f.format, f.records) for f in skipped.files] == [("empty", 1), ("canonical", None)]


@pytest.mark.parametrize(
    "content", [b"not a trace\n", b"\x00\x01\x02garbage\xff" * 20, b"{}\n", b"\x1f\x8b\x08\x00cut"]
)
def test_allow_empty_does_not_accept_garbage(tmp_path: Path, content: bytes) -> None:
    """Detection still refuses what is not a log, and damaged gzip data is not empty."""
    src = tmp_path / "junk.jsonl"
    src.write_bytes(content)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "o.parquet", allow_empty=True)
    assert info.value.file == str(src) and "empty file" not in info.value.reason


def test_cli_exit_codes_and_the_fit_after(tmp_path: Path) -> None:
    """The user's view: exit 2 with one line naming the file, else an empty trace that
    `fit --allow-empty` takes."""
    src = _empty(tmp_path, "blank lines")
    out = tmp_path / "t.parquet"
    runner = CliRunner()
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out)])
    assert res.exit_code == 2 and not out.exists()
    assert res.output.strip().splitlines() == [f"error: {src}: empty file"]
    res = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--allow-empty"])
    assert res.exit_code == 0, res.output
    assert "read 1 file: empty ×1" in res.output
    assert "0 records → 0 calls written" in res.output
    fit = tmp_path / "fit.json"
    res = runner.invoke(app, ["fit", str(out), "-o", str(fit), "--allow-empty"])
    assert res.exit_code == 0 and fit.exists(), res.output
