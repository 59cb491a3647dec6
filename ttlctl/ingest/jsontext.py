"""A log file's text and the JSON in it: a whole document or JSON lines.

The helpers reject, with a reason naming where it broke, what cannot be read: an empty,
binary, UTF-16 or UTF-32 (named by its byte-order mark: :func:`ttlctl.filekind.wide_text`),
otherwise non-UTF-8 (named by the line: :func:`ttlctl.jsonfile.not_utf8`) or damaged gzip file
(:func:`read_text`), a document or line that does
not parse as JSON (truncated when it is cut short, else malformed), a line that is not an
object. The bytes come through :mod:`ttlctl.ingest.rawfile`, so gzip data reads as its text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ttlctl.filekind import not_utf8, wide_text
from ttlctl.ingest.rawfile import SNIFF_BYTES, read_bytes
from ttlctl.ingest.rejects import RejectSink
from ttlctl.ingest.spool import GzipDamage

#: a whole number longer than Python's int() reads (its digit limit: 4,300 by default)
_LONG_NUMBER = re.compile(r"\d{4301,}")


def loads(text: str) -> Any:
    """``json.loads``, but a whole number too long for Python's int() (a ValueError of its
    own, not a :class:`json.JSONDecodeError`) is a JSONDecodeError naming where it starts,
    so that every reader rejects it as malformed JSON as it does any other bad number."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:
        found = _LONG_NUMBER.search(text)
        if found is None:
            raise
        raise json.JSONDecodeError(
            f"a whole number of {len(found.group()):,} digits, too long to read",
            text,
            found.start(),
        ) from None


def read_text(path: Path, sink: RejectSink) -> str | None:
    """The file's text, or None after rejecting an empty, binary, UTF-16/UTF-32 (its NUL
    bytes are not binary data: the byte-order mark says what it is), non-UTF-8 or damaged
    gzip file."""
    try:
        data = read_bytes(path)
    except GzipDamage as exc:
        sink.reject(path, None, str(exc), records=1)
        return None
    # an ingest passes over a blank file first (rawfile.is_blank); this guards a reader alone
    if not data.strip():
        sink.reject(path, None, "empty file", records=1)
        return None
    wide = wide_text(data)
    if wide is not None:
        sink.reject(path, None, wide, records=1)
        return None
    if b"\x00" in data[:SNIFF_BYTES]:
        sink.reject(path, None, "binary data, not a text log", records=1, raw=data[:200])
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        sink.reject(path, *not_utf8(data, exc.start), records=1)
        return None


def load_json(path: Path, sink: RejectSink) -> Any | None:
    """Parse a whole-file JSON document, or reject the file with where it broke."""
    text = read_text(path, sink)
    if text is None:
        return None
    try:
        return loads(text)
    except json.JSONDecodeError as exc:
        # a complete document ends with its closing bracket; one cut short does not
        tail = text.rstrip()[-1:]
        what = "malformed JSON" if tail in ("}", "]") else "truncated JSON"
        sink.reject(path, f"line {exc.lineno} column {exc.colno}", f"{what}: {exc.msg}")
        return None
    except RecursionError:
        sink.reject(path, None, "malformed JSON: nesting too deep")
        return None


def load_json_object(path: Path, sink: RejectSink, what: str) -> dict[str, Any] | None:
    """Like :func:`load_json` for a document that must be an object; a file holding
    anything else is rejected as "not a ``what``"."""
    doc = load_json(path, sink)
    if doc is None:
        return None
    if not isinstance(doc, dict):
        sink.reject(path, None, f"not a {what}: top level is a {type(doc).__name__}, not an object")
        return None
    return doc


def cut_line(text: str) -> int | None:
    """The number of the text's last line when the text does not end with a newline (a
    JSONL file cut short mid-record ends so), else None."""
    if not text or text.endswith(("\n", "\r")):
        return None
    return len(text.splitlines())


def bad_json_line(exc: json.JSONDecodeError, *, cut: bool) -> str:
    """Why a JSONL line did not parse: truncated when it is the line a file ends in
    without a newline (``cut``), else malformed."""
    if cut:
        return f"truncated JSON: the last line looks cut short (no newline ends it): {exc.msg}"
    return f"malformed JSON: {exc.msg}"


def iter_jsonl(
    path: Path, sink: RejectSink, broken: Callable[[int, str, str], bool] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each JSON-object line; reject the others.

    Blank lines are not records and are passed over. ``broken``, given, is first told
    (line number, line, reason) of each line that does not parse: when it returns True
    the caller has taken the line (a reader that can still tell its program rejects that
    program whole: :func:`salvaged`), and it is not rejected here.
    """
    text = read_text(path, sink)
    if text is None:
        return
    cut = cut_line(text)
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = loads(line)
        except json.JSONDecodeError as exc:
            reason = bad_json_line(exc, cut=lineno == cut)
            if broken is None or not broken(lineno, line, reason):
                sink.reject(path, f"line {lineno}", reason, raw=line)
            continue
        except RecursionError:
            sink.reject(path, f"line {lineno}", "malformed JSON: nesting too deep")
            continue
        if not isinstance(obj, dict):
            sink.reject(path, f"line {lineno}", "not a JSON object", raw=line)
            continue
        yield lineno, obj


def salvaged(line: str, key: str) -> str | int | float | bool | None:
    """The value of the top-level ``key`` of a line that does not parse as JSON, when the
    line still holds it whole (a line cut short after it, or broken elsewhere): a string,
    ``true``/``false``, or a number that a comma, a brace or blanks then one of them
    follow (a number cut short may read as a smaller one: ``17640`` of ``1764000000.0``,
    so one that ends the text is not taken); else None (a null, a value cut short, no such
    key at the top level: the same key inside a nested object is not the line's). The
    first top-level occurrence counts."""
    pattern = (
        r'"' + re.escape(key) + r'"\s*:\s*("(?:[^"\\]|\\.)*"|true|false'
        r"|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?=\s*[,}]))"
    )
    for found in re.finditer(pattern, line):
        if _depth(line, found.start()) != 1:
            continue
        try:
            value = loads(found.group(1))
        except json.JSONDecodeError:  # a bad escape, a number too long
            return None
        return value if isinstance(value, (str, int, float, bool)) else None
    return None


def _depth(text: str, end: int) -> int:
    """How many objects and arrays are open at ``end`` of ``text`` (strings skipped; 0 at
    the start, 1 inside a line's top-level object), or -1 where ``end`` is inside a
    string."""
    depth, in_string, escaped = 0, False, False
    for ch in text[:end]:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return -1 if in_string else depth


def salvaged_id(line: str, key: str) -> str | None:
    """:func:`salvaged`'s value of an id (a program's, a request's, a session's): text,
    or a number read as its text, as a good line's is (``7``, ``7.0``); None for anything
    else (``true``, an empty text)."""
    value = salvaged(line, key)
    if value is None or isinstance(value, bool) or value == "":
        return None
    return str(value)


def first_object_line(head: bytes) -> bytes | None:
    """The first line of a file's head when it opens a JSON object (JSONL sniffing),
    else None."""
    text = head.lstrip()
    if not text.startswith(b"{"):
        return None
    return text.split(b"\n", 1)[0]
