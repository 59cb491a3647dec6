"""A file that is not UTF-8 text is named by the line the bad byte is on, and its reason is
a reason ("not UTF-8 text"), whichever way ingest meets it: a reader reading the file, or
detection finding no format in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ingest.badinput import read_rejects
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError

GOOD = (
    '{"program_id": "p", "turn": 0, "arrival_s": 0.0, "input_tokens": 10, '
    '"output_tokens": 2, "tool": "bash", "gap_s": 1.0}\n'
)


def test_a_bad_byte_inside_a_record_names_its_line(tmp_path: Path) -> None:
    """Regression: it read "x.jsonl: byte 138: not UTF-8 text", the byte counted from the
    start of the file and no line named."""
    src = tmp_path / "x.jsonl"
    src.write_bytes(GOOD.encode() + b'{"program_id": "caf\xe9", "turn": 1}\n')
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "t.parquet", fmt="canonical")
    assert info.value.record == "line 2"
    assert info.value.reason == "not UTF-8 text: 0xe9 at byte 20 of the line"
    assert str(info.value).count("\n") == 0


def test_an_undetected_file_that_is_not_utf8_is_counted_under_its_reason(
    tmp_path: Path,
) -> None:
    """Regression: under --skip-bad the count by reason listed it as "byte 0", a position."""
    (tmp_path / "good.jsonl").write_text(
        GOOD.replace('"tool": "bash", "gap_s": 1.0', '"is_last": true')
    )
    # (not FF FE: that is UTF-16's byte-order mark, named as such: test_wide_text.py)
    (tmp_path / "garbage.jsonl").write_bytes(b"\xff\xfd garbage\n")
    report = ingest([tmp_path], tmp_path / "out" / "t.parquet", skip_bad=True)
    assert report.rejected_by_reason == {"not UTF-8 text": 1}
    (reject,) = read_rejects(report.rejects_path)
    assert (reject["record"], reject["reason"]) == (
        "line 1",
        "not UTF-8 text: 0xff at byte 1 of the line",
    )
