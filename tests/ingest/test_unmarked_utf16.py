"""A log or canonical trace in UTF-16 *without* a byte-order mark (what .NET's
``Encoding.Unicode`` writes when told to leave the mark out, or a tool that converts with
``iconv -t UTF-16LE``) is named for what it is, in either byte order, with the iconv
command that converts it: one line naming the file, exit 2. Regression: an unmarked file
read "unrecognised format: not a log ttlctl can read", or with ``--format`` "binary data,
not a text log" (its NUL bytes)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path

import pytest

from tests.ingest.canonical_files import canonical_trace_file
from tests.ingest.recoded import ingest_cli, recoded_copy
from tests.ingest.test_gzip import SAMPLES
from ttlctl.filekind import unmarked_utf16

#: Python's codec (which writes no mark) -> the byte order the reason names, iconv's name
ORDERS = {"utf-16-le": ("little", "UTF-16LE"), "utf-16-be": ("big", "UTF-16BE")}


def _reason(codec: str) -> str:
    order, iconv = ORDERS[codec]
    return (
        f"UTF-16 text without a byte-order mark ({order}-endian): convert it to UTF-8, "
        f"e.g. `iconv -f {iconv} -t UTF-8`"
    )


def _unmarked(text: str, codec: str) -> bytes:
    data = text.encode(codec)
    assert not data.startswith((b"\xff\xfe", b"\xfe\xff"))  # no mark
    return data


def _unmarked_copy(src: Path, dest: Path, codec: str, *, packed: bool = False) -> Path:
    return recoded_copy(src, dest, partial(_unmarked, codec=codec), packed=packed)


@pytest.mark.parametrize("codec", sorted(ORDERS))
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_format_names_an_unmarked_utf16_file(fmt: str, codec: str, tmp_path: Path) -> None:
    """Every reader, the format detected or named; the message is one line."""
    bad = _unmarked_copy(SAMPLES[fmt], tmp_path / "logs" / SAMPLES[fmt].name, codec)
    out = tmp_path / "t.parquet"
    for named in ([], ["--format", fmt]):
        code, text = ingest_cli(bad, "-o", out, *named)
        assert code == 2, text
        assert text.strip() == f"error: {bad}: {_reason(codec)}", text
        assert not out.exists()


@pytest.mark.parametrize("codec", sorted(ORDERS))
@pytest.mark.parametrize("kind", ["jsonl", "csv"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_an_unmarked_utf16_canonical_trace_is_named(
    kind: str, packed: bool, codec: str, tmp_path: Path
) -> None:
    plain = canonical_trace_file(tmp_path, kind)
    name = plain.name + (".gz" if packed else "")
    bad = _unmarked_copy(plain, tmp_path / "wide" / name, codec, packed=packed)
    for named in ([], ["--format", "canonical"]):
        code, text = ingest_cli(bad, "-o", tmp_path / "t.parquet", *named)
        assert code == 2, text
        assert f"error: {bad}: {_reason(codec)}" in " ".join(text.split()), text


def test_what_is_not_unmarked_utf16_is_not_called_so() -> None:
    """UTF-8 text (no NUL byte), UTF-32 (NULs on both sides of each unit), binary data
    (NULs on either side), a file too short to judge: None. Text with some non-ASCII
    (a name in Greek, U+0100) is still UTF-16."""
    text = '{"program_id": "a", "turn": 0, "input_tokens": 5, "output_tokens": 3}\n'
    assert unmarked_utf16(text.encode("utf-8")) is None
    assert unmarked_utf16(text.encode("utf-32-le")) is None
    assert unmarked_utf16(text.encode("utf-32-be")) is None
    assert unmarked_utf16(os.urandom(4096)) is None
    assert unmarked_utf16(bytes(range(256)) * 8) is None
    assert unmarked_utf16(b"\x00" * 64) is None
    # the binary files the readers' tests give: NULs beside control bytes, not text
    assert unmarked_utf16(b"\x00\x01\x02\xff" * 64) is None
    assert unmarked_utf16(b"\x00\xff\x13" * 100) is None
    assert unmarked_utf16(b"\x00\x01\xffgarbage\x00" * 50) is None
    assert unmarked_utf16("{".encode("utf-16-le")) is None
    assert unmarked_utf16("{}".encode("utf-16-le")) == "little"
    mixed = '{"tool": "Ψάξε", "note": "Āb"}' + text
    assert unmarked_utf16(mixed.encode("utf-16-le")) == "little"
    assert unmarked_utf16(mixed.encode("utf-16-be")) == "big"
    # mostly another script: a quarter ASCII is enough (JSON's keys and punctuation)
    chinese = '{"prompt": "' + "请修复这个测试中的错误" * 300 + '"}'
    assert unmarked_utf16(chinese.encode("utf-16-le")) is None  # no ASCII to tell by: as before
    keyed = "".join(f'{{"turn": {i}, "p": "修复错误"}}\n' for i in range(100))
    assert unmarked_utf16(keyed.encode("utf-16-le")) == "little"
