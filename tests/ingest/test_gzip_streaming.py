"""Large gzip input takes the out-of-core path, with memory bounded: during an ingest, gzip
data that decompresses to more than TTLCTL_STREAMING_BYTES goes to a temporary file next
to the output, which polars scans like a plain file; the file is removed when the ingest
ends, whether it succeeds, fails or is interrupted."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from tests.ingest.canonical_files import MOONCAKE, canonical_trace_file
from ttlctl.cli import app
from ttlctl.ingest import pipeline, spool
from ttlctl.ingest.formats import canonical
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rawfile import size, source
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

#: decompressed bytes per read in these tests: a file spans many chunks, so it is held in
#: memory first and spilled once it passes the threshold
SMALL_CHUNK = 4096


@pytest.fixture
def spills(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    """The temporary files the spool makes (in small chunks), recorded as made."""
    made: list[Path] = []
    new_file = spool.Spool._new_file

    def recording(self: spool.Spool) -> tuple[Path, IO[bytes]]:
        target, out = new_file(self)
        made.append(target)
        return target, out

    monkeypatch.setattr(spool, "CHUNK_BYTES", SMALL_CHUNK)
    monkeypatch.setattr(spool.Spool, "_new_file", recording)
    yield made


def _gzip(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(gzip.compress(src.read_bytes(), mtime=0))
    return dest


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(spool.FOLDER_PREFIX))


def test_the_spool_holds_small_data_and_spills_large(tmp_path: Path, spills: list[Path]) -> None:
    data = MOONCAKE.read_bytes()
    # two members, the last one short: the size gzip records is the last member's only
    packed = tmp_path / "two.jsonl.gz"
    packed.write_bytes(gzip.compress(data[:-100]) + gzip.compress(data[-100:]))
    assert size(packed) < len(data)
    with spool.spooled(tmp_path) as sp:
        held = sp.source(packed, limit=len(data))
        assert isinstance(held, io.BytesIO) and held.getvalue() == data and not spills
        assert size(packed) == len(data)  # counted as it decompressed: exact
        spilled = sp.source(packed, limit=3 * SMALL_CHUNK)
        assert isinstance(spilled, Path) and spilled.read_bytes() == data
        assert spills == [spilled] and spilled.parent.parent == tmp_path
        assert spilled.parent.name.startswith(spool.FOLDER_PREFIX)
        assert sp.source(packed, limit=3 * SMALL_CHUNK) == spilled  # decompressed once
    assert not spilled.exists() and not _leftovers(tmp_path)
    # outside an ingest nothing owns a temporary file: in memory, as before
    outside = source(packed)
    assert isinstance(outside, io.BytesIO) and outside.getvalue() == data


@pytest.mark.parametrize("kind", ["parquet", "jsonl", "csv"])
def test_a_large_gzipped_trace_streams_to_the_plain_files_trace(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spills: list[Path]
) -> None:
    plain = canonical_trace_file(tmp_path, kind)
    packed = _gzip(plain, tmp_path / "gz" / f"{plain.name}.gz")
    unpacked = plain.stat().st_size
    assert packed.stat().st_size < unpacked
    # above the threshold decompressed, and several chunks in, so it spills part-way
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", str(unpacked // 2))
    given: list[object] = []

    def spying(path: Path) -> object:
        given.append(src := source(path))
        return src

    monkeypatch.setattr(canonical, "source", spying)
    out = tmp_path / "out"
    a = ingest([plain], out / "plain.parquet")
    b = ingest([packed], out / "packed.parquet")
    assert a.streamed and b.streamed
    assert [f.format for f in b.files] == ["canonical"]
    assert (a.records, a.rows, a.rejected) == (b.records, b.rows, b.rejected) and a.rows > 0
    assert_frame_equal(trace_io.read(out / "plain.parquet"), trace_io.read(out / "packed.parquet"))
    # polars scanned the decompressed data from a file next to the output, now removed
    spilled = [g for g in given if isinstance(g, Path) and g != plain]
    assert spilled and set(spilled) <= set(spills)
    assert all(p.parent.parent == out for p in spills)
    assert not any(p.exists() for p in spills) and not _leftovers(out)
    # under the threshold the same file is read in memory: nothing spilled
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", str(2 * unpacked))
    spills.clear()
    c = ingest([packed], out / "memory.parquet")
    assert not c.streamed and not spills
    assert_frame_equal(trace_io.read(out / "plain.parquet"), trace_io.read(out / "memory.parquet"))


def test_a_large_truncated_gzip_is_one_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spills: list[Path]
) -> None:
    plain = canonical_trace_file(tmp_path, "jsonl")
    packed = _gzip(plain, tmp_path / "gz" / "trace.jsonl.gz")
    packed.write_bytes(packed.read_bytes()[:-20])  # the stream's end and the trailer cut
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", str(2 * SMALL_CHUNK))
    out = tmp_path / "out" / "o.parquet"
    res = CliRunner().invoke(app, ["ingest", str(packed), "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and str(packed) in res.output.replace("\n", ""), res.output
    assert "truncated gzip data" in res.output and "Traceback" not in res.output
    assert spills  # it had begun spilling when the data ran out
    assert not any(p.exists() for p in spills)
    assert sorted(p.name for p in out.parent.iterdir()) == []  # no output, no temporary file
    with pytest.raises(IngestError) as err:
        ingest([packed], out)
    assert err.value.file == str(packed)


def test_an_interrupted_ingest_removes_its_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spills: list[Path]
) -> None:
    plain = canonical_trace_file(tmp_path, "jsonl")
    packed = _gzip(plain, tmp_path / "gz" / "trace.jsonl.gz")
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", str(2 * SMALL_CHUNK))
    alive: list[bool] = []

    def interrupted(*args: object, **kwargs: object) -> tuple[int, int]:
        alive.extend(p.exists() for p in spills)  # read, not yet written
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "validate_and_write", interrupted)
    out = tmp_path / "out" / "o.parquet"
    with pytest.raises(KeyboardInterrupt):
        ingest([packed], out)
    assert alive and all(alive)
    assert not any(p.exists() for p in spills)
    assert sorted(p.name for p in out.parent.iterdir()) == []


def test_the_limit_bounds_every_gzip_file_of_an_ingest_together(
    tmp_path: Path, spills: list[Path]
) -> None:
    data = MOONCAKE.read_bytes()
    first = _gzip(MOONCAKE, tmp_path / "a.jsonl.gz")
    second = _gzip(MOONCAKE, tmp_path / "b.jsonl.gz")
    limit = len(data) + len(data) // 2  # each file fits alone, the two do not
    with spool.spooled(tmp_path) as sp:
        held = sp.source(first, limit)
        assert isinstance(held, io.BytesIO) and not spills
        spilled = sp.source(second, limit)
        assert isinstance(spilled, Path) and spilled.read_bytes() == data
        assert spills == [spilled] and sp.in_memory == len(data)
    assert not _leftovers(tmp_path)


def test_a_temporary_file_that_cannot_be_written_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spills: list[Path]
) -> None:
    plain = canonical_trace_file(tmp_path, "jsonl")
    packed = _gzip(plain, tmp_path / "gz" / "trace.jsonl.gz")
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", str(2 * SMALL_CHUNK))

    class Full(io.BytesIO):
        def write(self, data: object) -> int:
            raise OSError(28, "No space left on device")

    def full_disk(self: spool.Spool) -> tuple[Path, IO[bytes]]:
        target = tmp_path / "out" / "spilled"
        target.touch()
        spills.append(target)
        return target, Full()

    monkeypatch.setattr(spool.Spool, "_new_file", full_disk)
    out = tmp_path / "out" / "o.parquet"
    out.parent.mkdir()
    res = CliRunner().invoke(app, ["ingest", str(packed), "-o", str(out)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "no space left on device" in res.output, res.output
    assert str(packed) in res.output.replace("\n", "") and "Traceback" not in res.output
    assert spills and not any(p.exists() for p in spills)


@pytest.mark.parametrize("name", ["TTLCTL_STREAMING_BYTES", "TTLCTL_BUCKET_BYTES"])
def test_a_size_variable_that_is_not_a_number_is_one_error(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(name, "2GB")
    if name == "TTLCTL_BUCKET_BYTES":  # read only on the out-of-core path
        monkeypatch.setenv("TTLCTL_STREAMING_BYTES", "1")
    res = CliRunner().invoke(app, ["ingest", str(MOONCAKE), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 2, res.output
    assert f"{name}='2GB'" in res.output and "Traceback" not in res.output, res.output


@pytest.mark.parametrize("value", ["2GB", "-1"])
@pytest.mark.parametrize("name", ["TTLCTL_STREAMING_BYTES", "TTLCTL_BUCKET_BYTES"])
def test_a_bad_size_variable_is_its_own_error_before_any_file(
    name: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Named as the variable's error, whatever the input's format (the canonical reader
    passed it off as its file's: `t.jsonl: unreadable as canonical: …`), and a negative
    size is no whole number of bytes either."""
    monkeypatch.setenv(name, value)
    src = tmp_path / "t.jsonl"
    src.write_text(
        '{"program_id": "a", "turn": 0, "arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n'
    )
    res = CliRunner().invoke(app, ["ingest", str(src), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 2, res.output
    line = res.stderr.strip()
    assert "\n" not in line, res.stderr
    assert line.startswith(f"error: {name}={value!r}: expected a whole number of bytes"), line
    assert not (tmp_path / "o.parquet").exists()


def test_a_bucket_of_no_bytes_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TTLCTL_BUCKET_BYTES=0 was a ZeroDivisionError traceback on the out-of-core path."""
    monkeypatch.setenv("TTLCTL_BUCKET_BYTES", "0")
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", "0")
    res = CliRunner().invoke(app, ["ingest", str(MOONCAKE), "-o", str(tmp_path / "o.parquet")])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == (
        "error: TTLCTL_BUCKET_BYTES='0': expected a whole number of bytes, at least 1"
    ), res.stderr


def test_only_an_input_larger_than_the_threshold_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/trace-format.md: "When the input is larger than 2 GiB (TTLCTL_STREAMING_BYTES)":
    an input of exactly the threshold stays in memory."""
    from ttlctl.ingest.limits import DEFAULT_STREAMING_BYTES, streaming

    assert not streaming(DEFAULT_STREAMING_BYTES) and streaming(DEFAULT_STREAMING_BYTES + 1)
    monkeypatch.setenv("TTLCTL_STREAMING_BYTES", "1000")
    assert not streaming(1000) and streaming(1001)
