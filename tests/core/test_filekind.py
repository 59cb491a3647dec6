"""A binary file given where JSON belongs is named for what it is (a trace in Parquet as a
fit, a profile or a validate document), not called damaged."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.filekind import binary_kind, unmarked_utf16, wide_text


def test_binary_kind_by_leading_bytes() -> None:
    assert binary_kind(b"PAR1\x15\x04") == "a Parquet file (a trace?)"
    assert binary_kind(gzip.compress(b"{}")[:16]) == "a gzip-compressed file"
    assert binary_kind(b"SQLite format 3\x00") == "an SQLite database (an Optuna study?)"
    assert binary_kind(b'{"schema": 1}') is None
    assert binary_kind(b"") is None


@pytest.fixture
def parquet(tmp_path: Path) -> Path:
    path = tmp_path / "trace.parquet"
    pl.DataFrame({"program_id": ["a"], "turn": [0]}).write_parquet(path)
    return path


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["bundle", "build", "--fit", "P", "--profile", "tiny-cpu", "-o", "OUT"], "not a fit"),
        (["replay", "P", "--profile", "P", "--policy", "vllm"], "not a profile's JSON"),
        (["validate", "--resimulate", "P"], "not a validate document"),
    ],
)
def test_a_parquet_file_given_as_json_is_named(
    parquet: Path, tmp_path: Path, args: list[str], what: str
) -> None:
    """Regression: `--fit trace.parquet` read 'line 1: not UTF-8 text (byte 7); damaged?'."""
    args = [{"P": str(parquet), "OUT": str(tmp_path / "b.json")}.get(a, a) for a in args]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    assert f"{parquet}: a Parquet file (a trace?), {what}" in line, line
    assert "damaged" not in line and "Traceback" not in res.output


def test_wide_text_by_byte_order_mark() -> None:
    """UTF-32 LE's mark (FF FE 00 00) begins with UTF-16 LE's (FF FE): it is told first."""
    text = '{"schema": 1}'
    assert wide_text(text.encode("utf-32-le")) is None  # no mark: nothing said
    assert wide_text(text.encode("utf-8")) is None
    assert wide_text(b"\xef\xbb\xbf" + text.encode()) is None  # UTF-8's mark: UTF-8 text
    for codec, mark in [
        ("utf-16-le", "FF FE"),
        ("utf-16-be", "FE FF"),
        ("utf-32-le", "FF FE 00 00"),
        ("utf-32-be", "00 00 FE FF"),
    ]:
        family = codec[:6].upper()
        assert wide_text(("\ufeff" + text).encode(codec)) == (
            f"{family} text (byte-order mark {mark}): convert it to UTF-8, "
            f"e.g. `iconv -f {family} -t UTF-8`"
        )


@pytest.mark.parametrize(
    "args",
    [
        ["bundle", "build", "--fit", "P", "--profile", "tiny-cpu", "-o", "OUT"],
        ["bundle", "verify", "P"],
        ["replay", "T", "--profile", "P", "--policy", "vllm"],
        ["validate", "--resimulate", "P"],
    ],
    ids=["fit", "bundle", "profile", "validate-document"],
)
@pytest.mark.parametrize("codec", ["utf-16", "utf-32"])
def test_a_json_file_in_utf16_or_utf32_is_named_with_its_encoding(
    parquet: Path, tmp_path: Path, args: list[str], codec: str
) -> None:
    """A fit, bundle, profile or validate document saved by Windows PowerShell (``>``:
    UTF-16 LE with its mark). Regression: 'line 1: not UTF-8 text (byte 0); damaged?',
    'byte 0: not UTF-8 text', 'not a readable JSON document ('utf-8' codec can't …)'."""
    doc = tmp_path / "doc.json"
    doc.write_bytes('{"schema": "whatever"}\n'.encode(codec))  # Python writes the mark
    out = tmp_path / "b.json"
    args = [{"P": str(doc), "T": str(parquet), "OUT": str(out)}.get(a, a) for a in args]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    line = " ".join(res.output.split())
    family = codec.upper()
    assert f"{doc}: {family} text (byte-order mark " in line, line
    assert f"convert it to UTF-8, e.g. `iconv -f {family} -t UTF-8`" in line, line
    assert "Traceback" not in res.output and not out.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["bundle", "build", "--fit", "P", "--profile", "tiny-cpu", "-o", "OUT"],
        ["bundle", "verify", "P"],
        ["replay", "T", "--profile", "P", "--policy", "vllm"],
    ],
    ids=["fit", "bundle", "profile"],
)
@pytest.mark.parametrize(
    ("codec", "order", "iconv"),
    [("utf-16-le", "little", "UTF-16LE"), ("utf-16-be", "big", "UTF-16BE")],
)
def test_a_json_file_in_utf16_without_a_mark_is_named_with_its_byte_order(
    parquet: Path, tmp_path: Path, args: list[str], codec: str, order: str, iconv: str
) -> None:
    """A document in UTF-16 with no byte-order mark (Python's ``utf-16-le`` and ``-be``
    write none), told by its NUL bytes. Regression: 'line 1 column 1: not valid JSON
    (Expecting value); truncated or edited?' (a big-endian file's NULs are valid UTF-8)."""
    doc = tmp_path / "doc.json"
    doc.write_bytes('{"schema": "whatever"}\n'.encode(codec))
    out = tmp_path / "b.json"
    args = [{"P": str(doc), "T": str(parquet), "OUT": str(out)}.get(a, a) for a in args]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == (
        f"error: {doc}: UTF-16 text without a byte-order mark ({order}-endian): convert it "
        f"to UTF-8, e.g. `iconv -f {iconv} -t UTF-8`"
    ), res.output
    assert not out.exists()


def test_utf16_without_a_mark_may_have_one_nul_character_byte_in_16() -> None:
    """Characters such as U+0100 put a NUL in the character's byte: one in 16 of them is
    still text in that byte order, one more is not."""
    for codec, order in (("utf-16-le", "little"), ("utf-16-be", "big")):
        assert unmarked_utf16(("a" * 30 + "ĀĀ").encode(codec)) == order
        assert unmarked_utf16(("a" * 29 + "ĀĀĀ").encode(codec)) is None
