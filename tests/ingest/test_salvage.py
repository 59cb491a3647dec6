"""What a line that does not parse still says (jsontext.salvaged): the top-level value of a
key, whole, as a good line's would read; nothing for a value cut short or nested."""

from __future__ import annotations

import pytest

from ttlctl.ingest.jsontext import salvaged, salvaged_id


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ('{"a": "x\\"y", "b": ', "a", 'x"y'),  # an escape, decoded
        ('{"a": 1764000000.5, "b": 1', "a", 1764000000.5),
        ('{"a": 17640', "a", None),  # a number that ends the text may be cut short
        ('{"a": 7 }', "a", 7),
        ('{"a": "ab', "a", None),  # a string cut short
        ('{"a": true, "b"', "a", True),
        ('{"a": null, "b"', "a", None),
        ('{"r": {"a": "in"}, "a": "out", ', "a", "out"),  # the nested one is not the line's
        ('{"r": {"a": "in"', "a", None),
        ('{"t": "say \\"a\\": 1", "a": 2, ', "a", 2),  # the key inside a string is text
        ('{"b": 1}', "a", None),
    ],
)
def test_salvaged(line: str, key: str, value: object) -> None:
    assert salvaged(line, key) == value
    assert type(salvaged(line, key)) is type(value)


@pytest.mark.parametrize(
    ("line", "value"),
    [('{"p": "s1", ', "s1"), ('{"p": 7, ', "7"), ('{"p": 7.0, ', "7.0"),
     ('{"p": "", ', None), ('{"p": true, ', None), ('{"p": null, ', None)],
)  # fmt: skip
def test_an_id_reads_as_a_good_lines_does(line: str, value: str | None) -> None:
    assert salvaged_id(line, "p") == value
