"""A canonical CSV record with fewer or more fields than the header is a bad record named by
its line, not a row padded with nulls (or the whole file refused)."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest

from tests.ingest.badinput import ingest_skipping_bad
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

HEADER = "program_id,turn,arrival_s,input_tokens,output_tokens,tool,gap_s,is_last\n"
P = "p,0,0.0,100,5,bash,1.0,false\np,1,2.0,150,5,,,true\n"


def _csv(tmp_path: Path, body: str, *, packed: bool = False) -> Path:
    data = (HEADER + P + body).encode()
    out = tmp_path / ("t.csv.gz" if packed else "t.csv")
    out.write_bytes(gzip.compress(data) if packed else data)
    return out


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_short_row_is_a_bad_record_naming_what_it_lacks(packed: bool, tmp_path: Path) -> None:
    """Regression: "q,0,0.5,100,5" (5 of 8 fields) was read with tool, gap_s and is_last
    null, exit 0."""
    src = _csv(tmp_path, "q,0,0.5,100,5\nq,1,3.0,120,5,,,true\n", packed=packed)
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "o.parquet")
    assert info.value.record == "line 4"
    assert info.value.reason == (
        "wrong number of fields: 5 where the header has 8 (tool to is_last missing)"
    )
    report, trace, _ = ingest_skipping_bad([src], tmp_path / "o.parquet", "auto")
    assert trace["program_id"].unique().to_list() == ["p"]
    assert report.rejected_by_reason == {
        "wrong number of fields": 1,
        "rejected with its program": 1,
    }


def test_a_long_row_is_a_bad_record_not_a_bad_file(tmp_path: Path) -> None:
    """Regression: a row of 9 fields stopped ingest with polars' own error, "found more
    fields than defined in 'Schema'", raised when the rows were checked: no file or line
    named."""
    src = _csv(tmp_path, "q,0,0.5,100,5,bash,1.0,false,extra\nq,1,3.0,120,5,,,true\n")
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "o.parquet")
    assert info.value.record == "line 4"
    assert info.value.reason == "wrong number of fields: 9 where the header has 8"
    report, _, _ = ingest_skipping_bad([src], tmp_path / "o.parquet", "auto")
    assert (report.rows, report.rejected) == (2, 2)


def test_quoted_separators_and_newlines_are_inside_their_field(tmp_path: Path) -> None:
    src = _csv(
        tmp_path,
        'q,0,0.5,100,5,"a,b",1.0,false\nq,1,3.0,120,5,"two\nlines, and ""quotes""",1.0,false\n'
        "q,2,5.0,140,5,,,true\n",
    )
    report = ingest([src], tmp_path / "o.parquet")
    assert (report.rows, report.rejected) == (5, 0)
    trace = trace_io.read(tmp_path / "o.parquet").filter(pl.col("program_id") == "q")
    assert trace["tool"].to_list() == ["a,b", 'two\nlines, and "quotes"', None]


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_blank_line_is_no_record(packed: bool, tmp_path: Path) -> None:
    """Regression: polars reads a blank line as a row of nulls, which was refused as "line
    N: missing program_id" (strict ingest stopped). A blank line is no record: the rows
    around it keep their lines (a bad record after it is named by its own line), and one
    inside a quoted field stays in that field."""
    src = _csv(
        tmp_path,
        '\nq,0,0.5,100,5,"a\n\nb",1.0,false\n\nq,1,3.0,120,5,,,true\n\n',
        packed=packed,
    )
    report = ingest([src], tmp_path / "o.parquet")
    assert (report.rows, report.rejected) == (4, 0)
    trace = trace_io.read(tmp_path / "o.parquet").filter(pl.col("program_id") == "q")
    assert trace["tool"].to_list() == ["a\n\nb", None]
    bad = _csv(tmp_path, "\n\nq,0,0.5,100,5\n", packed=packed)
    with pytest.raises(IngestError) as info:
        ingest([bad], tmp_path / "o.parquet")
    assert info.value.record == "line 6"  # header 1, p's two 2–3, blanks 4–5


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_quote_that_never_closes_refuses_the_file_naming_its_line(
    packed: bool, tmp_path: Path
) -> None:
    """Regression: 'q,"1,…' (a quote opened, never closed) ended ingest in polars' traceback
    ("could not parse … not properly escaped"), with or without --skip-bad. The rest of
    the file cannot be read as CSV: the file is one bad record, named by the opening line."""
    src = _csv(
        tmp_path,
        'q,0,0.5,100,5,bash,1.0,false\nq,"1,3.0,120,5,,,true\nr,0,1.0,9,1,,,true\n',
        packed=packed,
    )
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "o.parquet")
    assert info.value.record == "line 5"
    assert info.value.reason.startswith("a quote here is never closed")
    other = tmp_path / "other.csv"
    other.write_text(HEADER + P.replace("p,", "s,"))
    report, trace, _ = ingest_skipping_bad([src, other], tmp_path / "o.parquet", "auto")
    assert trace["program_id"].unique().to_list() == ["s"]
    assert report.rejected == 1
