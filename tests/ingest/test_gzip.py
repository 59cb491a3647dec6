"""Gzip-compressed logs: every format reads ``NAME.gz`` as it reads ``NAME``.

A gzipped copy of each shipped sample (and of the engine-log fixture, a canonical
trace as Parquet, JSONL and CSV) ingests to exactly the trace the plain file gives; a
truncated or corrupt one is one error naming the file (exit 2), or a reject with
``--skip-bad``.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tests.ingest.canonical_files import canonical_trace_file
from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rawfile import head_bytes, logical, read_bytes
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

REPO = Path(__file__).resolve().parents[2]
ENGINE_LOG = REPO / "tests" / "data" / "engine-log" / "engine.jsonl"
#: one shipped sample of each format under samples/, and the engine-log fixture
SAMPLES = {
    "claude-code": REPO / "samples" / "claude-code" / "trace_0052.json",
    "litellm": REPO / "samples" / "litellm" / "tau2_retail_10__2473490a.jsonl",
    "mini-swe-agent": REPO / "samples" / "mini-swe-agent" / "django__django-16485.traj.json",
    "mooncake": REPO / "samples" / "mooncake" / "synthetic_trace_head.jsonl",
    "swe-agent": REPO
    / "samples"
    / "swe-agent"
    / "trajectories__demonstrations__ctf__crypto__BabyEncryption.traj",
    "tracelab": REPO / "samples" / "tracelab" / "round_trace.jsonl",
    "trtllm-scaffolding": REPO
    / "samples"
    / "trtllm-scaffolding"
    / "django__django-16801.trace.json",
    "engine-log": ENGINE_LOG,
}


def _gzip(src: Path, dest_dir: Path, name: str | None = None) -> Path:
    """A gzipped copy of ``src`` named ``<name>.gz`` (its own name by default)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / f"{name or src.name}.gz"
    out.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    return out


def _same_trace(plain: Path, packed: Path, tmp_path: Path, fmt: str) -> None:
    a = ingest([plain], tmp_path / "plain.parquet")
    b = ingest([packed], tmp_path / "packed.parquet")
    assert [f.format for f in a.files] == [f.format for f in b.files] == [fmt]
    assert (a.records, a.rows, a.rejected) == (b.records, b.rows, b.rejected)
    assert a.rows > 0
    assert_frame_equal(
        trace_io.read(tmp_path / "plain.parquet"), trace_io.read(tmp_path / "packed.parquet")
    )


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_gzipped_sample_ingests_to_the_same_trace(fmt: str, tmp_path: Path) -> None:
    plain = SAMPLES[fmt]
    _same_trace(plain, _gzip(plain, tmp_path / "gz"), tmp_path, fmt)


def test_gzip_is_known_by_its_bytes_and_its_name_by_the_inner_one(tmp_path: Path) -> None:
    plain = SAMPLES["swe-agent"]
    packed = _gzip(plain, tmp_path)
    assert logical(packed) == tmp_path / plain.name  # ".traj" read from the inner name
    assert read_bytes(packed) == plain.read_bytes()
    assert head_bytes(packed) == plain.read_bytes()[: len(head_bytes(packed))]
    # no .gz suffix: still read decompressed, detected from the contents
    bare = tmp_path / "bare" / "trace_0052.json"
    bare.parent.mkdir()
    bare.write_bytes(gzip.compress(SAMPLES["claude-code"].read_bytes()))
    assert logical(bare) == bare
    _same_trace(SAMPLES["claude-code"], bare, tmp_path, "claude-code")
    # named .gz but plain text: read as it is
    fake = tmp_path / "fake" / "synthetic_trace_head.jsonl.gz"
    fake.parent.mkdir()
    shutil.copy(SAMPLES["mooncake"], fake)
    assert logical(fake) == fake


@pytest.mark.parametrize("kind", ["parquet", "jsonl", "csv"])
def test_a_gzipped_canonical_trace_reads_as_the_plain_one(kind: str, tmp_path: Path) -> None:
    plain = canonical_trace_file(tmp_path, kind)
    _same_trace(plain, _gzip(plain, tmp_path / "gz"), tmp_path, "canonical")


def test_rotated_gzipped_engine_log_parts_are_one_replica(tmp_path: Path) -> None:
    """logrotate's ``engine.jsonl.1.gz`` is the same part of the same log as
    ``engine.jsonl.1``: the same calls, the same replica naming."""
    lines = ENGINE_LOG.read_text().splitlines(keepends=True)
    half = len(lines) // 2
    for where, packed in (("plain", False), ("gz", True)):
        d = tmp_path / where
        d.mkdir()
        (d / "engine.jsonl").write_text("".join(lines[half:]))
        older = d / "engine.jsonl.1"
        older.write_text("".join(lines[:half]))
        if packed:
            older.write_bytes(gzip.compress(older.read_bytes()))
            older.rename(d / "engine.jsonl.1.gz")
    a = ingest([tmp_path / "plain"], tmp_path / "a.parquet")
    b = ingest([tmp_path / "gz"], tmp_path / "b.parquet")
    assert [f.format for f in b.files] == ["engine-log", "engine-log"]
    assert a.rows == b.rows == len(lines)
    assert_frame_equal(trace_io.read(tmp_path / "a.parquet"), trace_io.read(tmp_path / "b.parquet"))
    assert trace_io.read(tmp_path / "b.parquet")["replica"].null_count() == len(lines)


def _damaged(tmp_path: Path, fmt: str, how: str) -> Path:
    packed = _gzip(SAMPLES[fmt], tmp_path / how)
    data = packed.read_bytes()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "cut-in-header":
        data = data[:12]
    else:  # corrupt: a byte of the compressed stream changed (or the CRC no longer holds)
        middle = len(data) // 2
        data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
    packed.write_bytes(data)
    return packed


@pytest.mark.parametrize("how", ["truncated", "corrupt", "cut-in-header"])
@pytest.mark.parametrize("fmt", ["mini-swe-agent", "mooncake", "engine-log"])
def test_a_damaged_gzip_is_one_error_naming_the_file(fmt: str, how: str, tmp_path: Path) -> None:
    bad = _damaged(tmp_path, fmt, how)
    out = tmp_path / "o.parquet"
    res = CliRunner().invoke(app, ["ingest", str(bad), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(bad) in res.output.replace("\n", ""), res.output
    assert "gzip data" in res.output
    assert not out.exists()
    with pytest.raises(IngestError) as err:
        ingest([bad], out)
    assert err.value.file == str(bad)


def test_a_damaged_gzip_is_a_reject_with_skip_bad(tmp_path: Path) -> None:
    bad = _damaged(tmp_path, "mooncake", "truncated")
    good = _gzip(SAMPLES["claude-code"], tmp_path / "good")
    report = ingest([bad, good], tmp_path / "o.parquet", skip_bad=True)
    assert report.rejected == 1 and report.rows > 0
    assert report.rejected_by_reason == {"truncated gzip data": 1}


def test_a_damaged_gzip_canonical_trace_is_one_error(tmp_path: Path) -> None:
    ingest([SAMPLES["mooncake"]], tmp_path / "src.parquet")
    packed = _gzip(tmp_path / "src.parquet", tmp_path / "gz")
    packed.write_bytes(packed.read_bytes()[:-20])
    with pytest.raises(IngestError) as err:
        ingest([packed], tmp_path / "o.parquet", fmt="canonical")
    assert err.value.file == str(packed) and "gzip data" in err.value.reason


def test_gzipped_documentation_in_a_directory_is_skipped(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    _gzip(SAMPLES["mooncake"], logs)
    (logs / "NOTES.md.gz").write_bytes(gzip.compress(b"# how these logs were taken\n"))
    report = ingest([logs], tmp_path / "o.parquet")
    assert report.skipped == [str(logs / "NOTES.md.gz")]
    assert [f.format for f in report.files] == ["mooncake"]
