"""Every JSON document a command reads from a file goes through one reader
(``ttlctl.jsonfile``): the same damage reads the same, whichever command meets it.
Regression: six readers had drifted apart ('line 1: not UTF-8 text (byte 7); damaged?',
'byte 7: not UTF-8 text', "not a readable JSON document ('utf-8' codec can't …)", a
config.json that is a list taken as no config at all)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from profiles import models, profile_read
from replay.validation import recorded, server_sources
from tests.cli.refusal import refused
from ttlctl import bundle
from ttlctl.errors import TtlctlError
from ttlctl.filekind import not_utf8
from ttlctl.jsonfile import JsonFileError, read_json, read_json_object
from ttlctl.report import rundir

#: what each reader calls the document it wants, and how it is called on a file
READERS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "bundle": ("a bundle", bundle.read),
    "fit": ("a fit", bundle.read_fit),
    "profile": ("a profile's JSON", profile_read.load),
    "validate document": ("a validate document", recorded.read_document),
    "model config": ("a model's config.json", models.load_config),
    "model folder": ("a model's config.json", lambda p: server_sources.local_config(str(p.parent))),
}


def _write(path: Path, case: str) -> str:
    """Write the damaged file ``case`` at ``path``; what the reader must say after the path."""
    if case == "parquet":
        pl.DataFrame({"a": [1]}).write_parquet(path)
        return "a Parquet file (a trace?), not {what}"
    if case == "utf-16":
        path.write_bytes('{"a": 1}'.encode("utf-16"))
        return (
            "UTF-16 text (byte-order mark FF FE): convert it to UTF-8, "
            "e.g. `iconv -f UTF-16 -t UTF-8`"
        )
    if case == "bad byte":
        path.write_bytes(b'{\n  "a": "\xe9t\xe9"\n}')
        return "line 2: not UTF-8 text: 0xe9 at byte 9 of the line"
    if case == "cut short":
        path.write_text('{"a": [1, 2')
        return "line 1 column 12: not valid JSON (Expecting ',' delimiter)"
    if case == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
        return "not valid JSON (nesting too deep)"
    if case == "long number":  # Python's int() limit: a ValueError, not a JSONDecodeError
        path.write_text('{"a": ' + "9" * 5000 + "}")
        return (
            "not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: "
            "value has 5000 digits; use sys.set_int_max_str_digits() to increase the limit)"
        )
    if case == "empty":
        path.write_bytes(b"")
        return "empty file"
    if case == "blank":  # a byte-order mark and blank lines: as ingest says of a log
        path.write_bytes(b"\xef\xbb\xbf \n\t\n")
        return "empty file"
    if case == "duplicate key":  # JSON's parser keeps the last silently: an edit unseen
        path.write_text('{"a": 1, "b": [0, {"c": 1, "web.search": 2, "web.search": 3}]}')
        return 'duplicate key "web.search" in b[1]'
    assert case == "a list"
    path.write_text("[1, 2]")
    return "not {what}: the top level is a list, not an object"


DAMAGED = {"parquet", "utf-16", "bad byte", "cut short", "deep", "long number", "a list"}
DAMAGED |= {"duplicate key"}  # regression: the last of the two was taken, silently
DAMAGED |= {"empty", "blank"}  # regression: "line 1 column 1: not valid JSON (Expecting value)"
#: the bundle's reader adds what a bundle's damage most likely is (it is sealed)
HINTS = {
    (r, c)
    for r in ("bundle",)
    for c in ("bad byte", "cut short", "deep", "long number", "duplicate key")
}


@pytest.mark.parametrize("case", sorted(DAMAGED))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_names_the_same_damage_the_same_way(
    tmp_path: Path, reader: str, case: str
) -> None:
    what, read = READERS[reader]
    path = tmp_path / "config.json"  # the name the model readers look for
    said = f"{path}: " + _write(path, case).format(what=what)
    if (reader, case) in HINTS:
        said += "; truncated or edited?"
    with pytest.raises(TtlctlError) as caught:
        read(path)
    assert str(caught.value) == said


@pytest.mark.parametrize("command", [["bundle", "verify"], ["bundle", "inspect"]])
def test_a_command_given_an_empty_file_says_so(tmp_path: Path, command: list[str]) -> None:
    """As ingest does of an empty log: one line, exit 2. Regression: bundle verify said
    'line 1 column 1: not valid JSON (Expecting value); truncated or edited?'."""
    empty = tmp_path / "bundle.json"
    empty.write_bytes(b"")
    line = refused([*command, str(empty)], tmp_path / "none", "error:")
    assert line == f"error: {empty}: empty file"


def test_the_report_notes_a_damaged_input_as_the_reader_says(tmp_path: Path) -> None:
    """The report keeps a damaged input as a note on the page: the reader's line."""
    said = f"{tmp_path / 'replay.json'}: " + _write(tmp_path / "replay.json", "bad byte")
    assert rundir.load(tmp_path).problems["replay.json"] == said


def test_the_reader_names_what_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(JsonFileError, match=r": no such file$"):
        read_json(tmp_path / "absent.json", "a fit")
    with pytest.raises(JsonFileError, match=r": is a directory, not a fit$"):
        read_json(tmp_path, "a fit")


@pytest.mark.parametrize(
    ("text", "kind"),
    [("null", "null"), ("true", "a boolean"), ("3", "a number"), ('"x"', "a string")],
)
def test_an_object_is_asked_for_by_name(tmp_path: Path, text: str, kind: str) -> None:
    path = tmp_path / "doc.json"
    path.write_text(text)
    assert read_json(path, "a fit") == json.loads(text)
    with pytest.raises(JsonFileError) as caught:
        read_json_object(path, "a fit")
    assert str(caught.value) == f"{path}: not a fit: the top level is {kind}, not an object"
    assert not caught.value.damaged


def test_a_bad_byte_is_named_by_its_line_and_its_place_in_it() -> None:
    data = b"first\nsecond \xff line\n"
    assert not_utf8(data, data.index(b"\xff")) == (
        "line 2",
        "not UTF-8 text: 0xff at byte 8 of the line",
    )
    assert not_utf8(b"\x80", 0) == ("line 1", "not UTF-8 text: 0x80 at byte 1 of the line")


def test_a_utf8_byte_order_mark_is_read_as_ingest_reads_it(tmp_path: Path) -> None:
    """A document saved with a UTF-8 mark (Windows PowerShell 5.1's ``-Encoding utf8``)
    reads as without it, as a log does at ingest. Regression: 'line 1 column 1: not valid
    JSON (Unexpected UTF-8 BOM …)', and for a bundle '; truncated or edited?'."""
    path = tmp_path / "doc.json"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert read_json_object(path, "a fit") == {"a": 1}
    path.write_bytes(b'\xef\xbb\xbf{\n "a": "\xff"}')  # a bad byte is found past the mark
    with pytest.raises(JsonFileError, match=r": line 2: not UTF-8 text: 0xff at byte 8 "):
        read_json(path, "a fit")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"a": 1, "a": 1}', 'duplicate key "a" at the top level'),
        ('{"p": {"t": {"g": {"x": 1, "y": 2, "x": 3}}}}', 'duplicate key "x" in p.t.g'),
        ('[{"a": 1}, {"b": [{"é": 0, "é": 1}]}]', 'duplicate key "é" in [1].b[0]'),
        ('{"a": {"k": 1, "k": 1}, "b": {"z": 1, "z": 1}}', 'duplicate key "k" in a'),
    ],
)
def test_a_duplicate_key_is_named_with_its_place(tmp_path: Path, text: str, said: str) -> None:
    """Any object at any depth; the first in the document named, with the path to it."""
    path = tmp_path / "doc.json"
    path.write_text(text)
    with pytest.raises(JsonFileError) as caught:
        read_json(path, "a fit")
    assert str(caught.value) == f"{path}: {said}"
    assert caught.value.damaged


def test_the_same_key_in_different_objects_is_no_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    path.write_text('{"a": {"k": 1}, "b": {"k": 2}, "k": [{"k": 3}, {"k": 4}]}')
    assert read_json(path, "a fit") == json.loads(path.read_text())
