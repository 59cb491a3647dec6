"""A UTF-8 byte-order mark at the start of a file (Windows tools write one) is not text:
every format detects and reads ``NAME`` with one as it does without, plain or gzipped,
in memory or spooled out of core."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from tests.ingest.canonical_files import canonical_trace_file
from tests.ingest.test_gzip import SAMPLES
from ttlctl.filekind import UTF8_BOM
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rawfile import head_bytes, is_blank, read_bytes
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io


def _marked(src: Path, dest_dir: Path, *, packed: bool = False) -> Path:
    """A copy of ``src`` that a byte-order mark opens (gzipped when ``packed``)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    data = UTF8_BOM + src.read_bytes()
    out = dest_dir / (src.name + (".gz" if packed else ""))
    out.write_bytes(gzip.compress(data, mtime=0) if packed else data)
    return out


def _same_trace(plain: Path, marked: Path, tmp_path: Path, fmt: str | None = None) -> None:
    a = ingest([plain], tmp_path / "plain.parquet")
    b = ingest([marked], tmp_path / "marked.parquet")
    assert [f.format for f in b.files] == [fmt or a.files[0].format]
    assert (a.records, a.rows, a.rejected) == (b.records, b.rows, b.rejected)
    assert_frame_equal(
        trace_io.read(tmp_path / "plain.parquet"), trace_io.read(tmp_path / "marked.parquet")
    )


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_a_sample_with_a_byte_order_mark_reads_as_without(fmt: str, tmp_path: Path) -> None:
    """Regression: each format's file with a mark was "unrecognised format" (detection saw
    the mark, not the text)."""
    plain = SAMPLES[fmt]
    _same_trace(plain, _marked(plain, tmp_path / "bom"), tmp_path, fmt)


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("spooled", [False, True], ids=["in-memory", "out-of-core"])
def test_a_canonical_trace_with_a_byte_order_mark_reads_as_without(
    kind: str, packed: bool, spooled: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: canonical JSONL with a mark was "unrecognised format", and with
    ``--format canonical`` "missing column(s) program_id, turn, input_tokens, output_tokens"
    (its first key read as "\\ufeffprogram_id"); CSV with one was "unrecognised format"."""
    if spooled:  # the mark is left out of the data polars scans from a temporary file too
        monkeypatch.setenv("TTLCTL_STREAMING_BYTES", "100")
    plain = canonical_trace_file(tmp_path, kind)
    marked = _marked(plain, tmp_path / "bom", packed=packed)
    _same_trace(plain, marked, tmp_path, "canonical")
    explicit = ingest([marked], tmp_path / "explicit.parquet", fmt="canonical")
    assert explicit.rows == explicit.records > 0


def test_the_mark_is_left_out_of_every_read(tmp_path: Path) -> None:
    src = tmp_path / "x.jsonl"
    src.write_bytes(UTF8_BOM + b'{"a": 1}\n')
    assert read_bytes(src) == head_bytes(src) == b'{"a": 1}\n'
    only = tmp_path / "only.jsonl"
    only.write_bytes(UTF8_BOM + b"\n\n")
    assert is_blank(only)  # a mark and blank lines: an empty file, not a bad one
    with pytest.raises(IngestError, match="empty file"):
        ingest([only], tmp_path / "t.parquet")
