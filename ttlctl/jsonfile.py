"""Reading a JSON document from a file (a fit, a profile, a bundle, a validate or replay
document, a model's ``config.json``): one reader, so that every command names a file it
cannot read the same way, in one line that starts with the file's path:

- ``no such file``, ``is a directory``, ``cannot read (<why>)``;
- ``empty file``: nothing in it but blanks (as ingest names an empty log);
- what the file is when its first bytes say it is no UTF-8 text at all
  (:func:`ttlctl.filekind.not_json_text`: a Parquet trace, a compressed file, UTF-16 text);
- ``line N: not UTF-8 text: 0xNN at byte B of the line``
  (:func:`ttlctl.filekind.not_utf8`, which ingest's readers use for a log's bad byte too);
- ``line N column C: not valid JSON (<the parser's reason>)``;
- ``duplicate key "K" at the top level`` or ``… in a.b[2]``: a key given twice in one object,
  of which JSON's parser would silently keep the last (an edit: a bundle's ``policy``
  written again above the sealed one would pass its checks);
- ``not <what>: the top level is a list, not an object`` (:func:`read_json_object`).

The callers raise their own error class with this message (a bundle's
:class:`~ttlctl.bundle_doc.BundleError`, a profile's, validate's), so that each command's
errors stay what its callers catch. Imports only the bottom of the package (the engine's
bundle reader uses it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ttlctl.errors import TtlctlError, os_reason
from ttlctl.filekind import UTF16_SNIFF_BYTES, not_json_text, not_utf8, unmarked

#: the leading bytes that say what a file is: its mark (the longest: SQLite's 16), or for
#: UTF-16 without one, its NUL bytes (a few KB)
HEAD_BYTES = UTF16_SNIFF_BYTES


class JsonFileError(TtlctlError, ValueError):
    """A file that is not a readable JSON document; the message names it and where.
    ``damaged``: the file is there and is text, but its bytes are not UTF-8 or not JSON
    (cut short or edited, where a caller can say more)."""

    def __init__(self, message: str, *, damaged: bool = False) -> None:
        super().__init__(message)
        self.damaged = damaged


def read_json(path: Path, what: str) -> Any:
    """The JSON value in the file at ``path``, which should be ``what`` (e.g. ``a fit``,
    said where the file turns out to be something else); :class:`JsonFileError` names the
    file and the problem."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise JsonFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise JsonFileError(f"{path}: is a directory, not {what}") from None
    except OSError as exc:
        raise JsonFileError(f"{path}: cannot read ({os_reason(exc)})") from None
    problem = not_json_text(raw[:HEAD_BYTES], what)
    if problem is not None:
        raise JsonFileError(f"{path}: {problem}")
    raw = unmarked(raw)  # a UTF-8 byte-order mark, as ingest reads one
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        where, why = not_utf8(raw, exc.start)
        raise JsonFileError(f"{path}: {where}: {why}", damaged=True) from None
    if not text.strip():  # JSON's parser would say "line 1 column 1: Expecting value"
        raise JsonFileError(f"{path}: empty file")
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except _Duplicate:
        raise JsonFileError(f"{path}: {_duplicate(text)}", damaged=True) from None
    except json.JSONDecodeError as exc:
        raise JsonFileError(
            f"{path}: line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg})",
            damaged=True,
        ) from None
    except RecursionError:
        raise JsonFileError(f"{path}: not valid JSON (nesting too deep)", damaged=True) from None
    except ValueError as exc:  # a number too long for int(), …: the parser's own words
        raise JsonFileError(f"{path}: not valid JSON ({exc})", damaged=True) from None


class _Duplicate(Exception):
    """A key given twice in one object (:func:`_unique`)."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; :class:`_Duplicate` when a key comes twice."""
    doc = dict(pairs)
    if len(doc) != len(pairs):
        raise _Duplicate
    return doc


class _Marked(dict[str, Any]):
    """An object read with a duplicate key: the first such key (:func:`_duplicate`)."""

    twice: str = ""


def _marking(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked = _Marked(pairs)
            marked.twice = key
            return marked
        seen.add(key)
    return dict(pairs)


def _duplicate(text: str) -> str:
    """Where ``text`` (a JSON document with a duplicate key) has one, in words: the key,
    and the path to its object (``policy.tools.grep``, ``results[3]``) or the top level.
    Read again, marking the objects (only on this error: the usual read does not pay)."""
    todo: list[tuple[str, Any]] = [("", json.loads(text, object_pairs_hook=_marking))]
    while todo:  # depth first, in document order, without recursion (any nesting depth)
        where, value = todo.pop()
        if isinstance(value, _Marked):
            at = f"in {where}" if where else "at the top level"
            return f"duplicate key {json.dumps(value.twice, ensure_ascii=False)} {at}"
        if isinstance(value, dict):
            items = [(_member(where, k), v) for k, v in value.items()]
        elif isinstance(value, list):
            items = [(f"{where}[{i}]", v) for i, v in enumerate(value)]
        else:
            continue
        todo.extend(reversed(items))
    return "duplicate key"  # not reached: the first read found one


def _member(where: str, key: str) -> str:
    """The path to ``key`` of the object at ``where``: ``where.key``, or ``where["a key"]``
    for a key that is no plain name (a tool called ``web.search``)."""
    if key.isidentifier():
        return f"{where}.{key}" if where else key
    return f"{where}[{json.dumps(key, ensure_ascii=False)}]"


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """Like :func:`read_json`, for a document that must be a JSON object."""
    doc = read_json(path, what)
    if not isinstance(doc, dict):
        raise JsonFileError(
            f"{path}: not {what}: the top level is {_a(type(doc).__name__)}, not an object"
        )
    return doc


#: a JSON value's Python type, in words
_JSON_NAMES = {
    "list": "a list",
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
}


def _a(name: str) -> str:
    return _JSON_NAMES.get(name, "null" if name == "NoneType" else f"a {name}")
