"""A log in UTF-16 or UTF-32 (Windows PowerShell's ``>`` writes UTF-16 LE with a byte-order
mark) is named for what it is, with how to convert it, wherever ingest meets it: detection,
each reader given ``--format``, a canonical CSV or JSONL, a file of an engine log, gzipped or
not. It is not transcoded: one bad file (exit 2), or one reject under ``--skip-bad``, counted
under its encoding and written with the rejects. It read "binary data, not a text log"
(its NUL bytes), "not UTF-8 text" or "unreadable as canonical"."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import pytest

from tests.ingest.badinput import read_rejects
from tests.ingest.canonical_files import canonical_trace_file
from tests.ingest.recoded import ingest_cli, recoded_copy
from tests.ingest.test_gzip import SAMPLES

#: Python's codec -> the byte-order mark the file starts with, as the reason shows it
ENCODINGS = {
    "utf-16": "FF FE",  # Python writes its machine's order, little-endian here, as Windows
    "utf-16-be": "FE FF",
    "utf-32": "FF FE 00 00",  # starts with UTF-16 LE's mark: must not be read as UTF-16
    "utf-32-be": "00 00 FE FF",
}


def _encoded(text: str, codec: str) -> bytes:
    """``text`` as a file in ``codec`` with its byte-order mark (Python's ``utf-16`` and
    ``utf-32`` write one; the ``-be`` codecs need it written)."""
    data = text.encode(codec) if not codec.endswith("-be") else ("\ufeff" + text).encode(codec)
    assert data.startswith(bytes.fromhex(ENCODINGS[codec].replace(" ", "")))
    return data


def _reason(codec: str) -> str:
    family = codec.upper().removesuffix("-BE")
    return (
        f"{family} text (byte-order mark {ENCODINGS[codec]}): convert it to UTF-8, "
        f"e.g. `iconv -f {family} -t UTF-8`"
    )


def _wide_copy(src: Path, dest: Path, codec: str, *, packed: bool = False) -> Path:
    """``src``'s text written to ``dest`` in ``codec`` (gzipped when ``packed``)."""
    return recoded_copy(src, dest, partial(_encoded, codec=codec), packed=packed)


def _ingest(*args: object) -> tuple[int, str]:
    """:func:`ingest_cli`, its output on one line (a reason wraps at the console's width)."""
    code, output = ingest_cli(*args)
    return code, " ".join(output.split())


@pytest.mark.parametrize("codec", sorted(ENCODINGS))
@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_each_format_names_a_wide_text_file(fmt: str, codec: str, tmp_path: Path) -> None:
    """Every reader (engine-log included), detected or named with --format."""
    bad = _wide_copy(SAMPLES[fmt], tmp_path / "logs" / SAMPLES[fmt].name, codec)
    out = tmp_path / "t.parquet"
    for named in ([], ["--format", fmt]):
        code, text = _ingest(bad, "-o", out, *named)
        assert code == 2, text
        assert f"error: {bad}: {_reason(codec)}" in text, text
        assert not out.exists()


@pytest.mark.parametrize("codec", ["utf-16", "utf-32"])
@pytest.mark.parametrize("kind", ["jsonl", "csv"])
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_wide_text_canonical_trace_is_named(
    kind: str, packed: bool, codec: str, tmp_path: Path
) -> None:
    """A canonical trace's CSV or JSONL (polars read its NUL bytes as damage: "unreadable as
    canonical"), gzipped or not, detected or named."""
    plain = canonical_trace_file(tmp_path, kind)
    name = plain.name + (".gz" if packed else "")
    bad = _wide_copy(plain, tmp_path / "wide" / name, codec, packed=packed)
    for named in ([], ["--format", "canonical"]):
        code, text = _ingest(bad, "-o", tmp_path / "t.parquet", *named)
        assert code == 2, text
        assert f"error: {bad}: {_reason(codec)}" in text, text


def test_with_skip_bad_it_is_one_reject_counted_under_its_encoding(tmp_path: Path) -> None:
    """Beside good logs (a folder walked): the good ones are read, each wide file is one
    reject, written to the rejects file and counted by encoding; the report says so."""
    logs = tmp_path / "logs"
    logs.mkdir()
    good = Path(shutil.copy(SAMPLES["mooncake"], logs / "good.jsonl"))
    wide16 = _wide_copy(SAMPLES["engine-log"], logs / "engine.jsonl", "utf-16")
    wide16gz = _wide_copy(SAMPLES["litellm"], logs / "litellm.jsonl.gz", "utf-16", packed=True)
    wide32 = _wide_copy(SAMPLES["claude-code"], logs / "trace.json", "utf-32")
    out = tmp_path / "out" / "t.parquet"
    code, text = _ingest(logs, "-o", out, "--skip-bad")
    assert code == 0, text
    assert out.exists()
    assert "read 4 files" in text and str(good) not in text
    rejects = read_rejects(str(out) + ".rejects.jsonl")
    assert sorted((r["file"], r["record"], r["reason"]) for r in rejects) == sorted(
        [
            (str(wide16), None, _reason("utf-16")),
            (str(wide16gz), None, _reason("utf-16")),
            (str(wide32), None, _reason("utf-32")),
        ]
    )
    assert "3 record(s) rejected" in text
    assert "2 UTF-16 text (byte-order mark FF FE)" in text
    assert "1 UTF-32 text (byte-order mark FF FE 00 00)" in text


def test_a_file_of_an_engine_log_in_utf16_is_named_the_others_read(tmp_path: Path) -> None:
    """The engine-log files are read together: a rotated part in UTF-16 is one reject, the
    log's other part is read."""
    lines = SAMPLES["engine-log"].read_text(encoding="utf-8").splitlines(keepends=True)
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "engine.jsonl").write_text("".join(lines[1:]), encoding="utf-8")
    older = logs / "engine.jsonl.1"
    older.write_bytes(_encoded(lines[0], "utf-16"))
    out = tmp_path / "t.parquet"
    code, text = _ingest(logs, "-o", out, "--skip-bad", "--format", "engine-log")
    assert code == 0, text
    (reject,) = read_rejects(str(out) + ".rejects.jsonl")
    assert (reject["file"], reject["reason"]) == (str(older), _reason("utf-16"))
    assert f"{len(lines) - 1} calls written" in text
