"""What a file that should be UTF-8 text (JSON, a log) is, when its first bytes say it is
something else: a binary file (a trace in Parquet given as a fit, a compressed file), or text
in another encoding (UTF-16 or UTF-32, known by its byte-order mark: what Windows PowerShell's
``>`` writes; UTF-16 without one, known by its NUL bytes: what a converter told the byte order
writes, ``iconv -t UTF-16LE``, Python's ``utf-16-le``, Java's ``UTF-16LE``). So the error
names the mix-up instead of calling the file damaged, binary or of an unknown format.
Imports nothing (the engine's bundle reader uses it).
"""

from __future__ import annotations

#: The UTF-8 byte-order mark some tools (Windows' among them) write first: not text. UTF-8
#: text that opens with it is read without it, by ingest and by every JSON reader alike.
UTF8_BOM = b"\xef\xbb\xbf"

#: leading bytes -> what a file starting with them is
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "a Parquet file (a trace?)"),
    (b"\x1f\x8b", "a gzip-compressed file"),
    (b"(\xb5/\xfd", "a zstd-compressed file"),
    (b"BZh", "a bzip2-compressed file"),
    (b"PK\x03\x04", "a zip archive"),
    (b"SQLite format 3\x00", "an SQLite database (an Optuna study?)"),
    (b"\x89PNG", "a PNG image"),
)

#: byte-order mark -> the encoding of the text it opens (iconv's name, which reads the
#: mark for the byte order). UTF-32 LE's mark (FF FE 00 00) starts with UTF-16 LE's (FF FE):
#: it is tried first. (Text in UTF-16 LE that opens with a NUL character would read as
#: UTF-32 LE: a log does not.)
WIDE_MARKS: tuple[tuple[bytes, str], ...] = (
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe", "UTF-16"),
    (b"\xfe\xff", "UTF-16"),
)


def binary_kind(head: bytes) -> str | None:
    """What a file starting with ``head`` is, if its leading bytes say (None: they do not)."""
    for magic, kind in MAGIC:
        if head.startswith(magic):
            return kind
    return None


def wide_text(head: bytes) -> str | None:
    """Why a file starting with ``head`` is not read as UTF-8 text when a UTF-16 or UTF-32
    byte-order mark opens it, or when it is UTF-16 without one (:func:`unmarked_utf16`):
    the encoding (and the mark), and how to convert it (None: neither). ttlctl reads UTF-8
    only and does not transcode: the file is named instead, wherever it is given (an
    ingest's log, a fit, a profile, a bundle)."""
    for mark, encoding in WIDE_MARKS:
        if head.startswith(mark):
            shown = " ".join(f"{byte:02X}" for byte in mark)
            return (
                f"{encoding} text (byte-order mark {shown}): convert it to UTF-8, "
                f"e.g. `iconv -f {encoding} -t UTF-8`"
            )
    order = unmarked_utf16(head) if binary_kind(head) is None else None
    if order is None:
        return None
    # iconv's plain UTF-16 takes an unmarked text as big-endian: the order is named
    code = "UTF-16LE" if order == "little" else "UTF-16BE"
    return (
        f"UTF-16 text without a byte-order mark ({order}-endian): convert it to UTF-8, "
        f"e.g. `iconv -f {code} -t UTF-8`"
    )


#: the leading bytes :func:`unmarked_utf16` judges by (a few KB: cheap on any file)
UTF16_SNIFF_BYTES = 4096
#: the bytes no text is made of: the ASCII control characters but tab, newline and return
_CONTROLS = bytes(b for b in range(32) if b not in b"\t\n\r") + b"\x7f"


def unmarked_utf16(head: bytes) -> str | None:
    """``little`` or ``big`` when ``head`` (a file's first bytes, of which the first
    :data:`UTF16_SNIFF_BYTES` are judged) is UTF-16 text without a byte-order mark; None
    when it is not. JSON, JSON lines and CSV are mostly ASCII (keys, punctuation, digits),
    which UTF-16 writes as the character's byte and a NUL, in that order (little-endian)
    or the other. So in the one byte order: the characters' bytes are almost never NUL
    (1 in 16 allowed: U+0100 and the like) and at least a quarter of the characters read
    are printable ASCII (or tab, newline, return; the rest may be any script). UTF-8 text
    has no NUL byte and reads as no ASCII in UTF-16; UTF-32's ASCII has NULs on both
    sides; binary data's NULs pair with control bytes or none: none of them pass."""
    units = min(len(head), UTF16_SNIFF_BYTES) // 2
    if units < 2:
        return None
    sample = head[: 2 * units]
    for codec, order, chars in (("utf-16-le", "little", 0), ("utf-16-be", "big", 1)):
        if 16 * sample[chars::2].count(0) > units:
            continue
        text = sample.decode(codec, errors="replace").encode("ascii", errors="ignore")
        if 4 * len(text.translate(None, _CONTROLS)) >= units:
            return order
    return None


def not_json_text(head: bytes, expected: str) -> str | None:
    """Why a file starting with ``head`` cannot be the ``expected`` (e.g. ``JSON``) it was
    given as, when its first bytes say: text in UTF-16 or UTF-32 (:func:`wide_text`), or
    ``<a binary kind>, not <expected>`` (:func:`binary_kind`); None when they say nothing."""
    wide = wide_text(head)
    if wide is not None:
        return wide
    kind = binary_kind(head)
    return None if kind is None else f"{kind}, not {expected}"


#: what each of ttlctl's own JSON documents is, as :func:`document_kind` names it
FIT = "a fit (what `ttlctl fit` writes)"
PROFILE = "a device profile (what `ttlctl profile` writes)"
TUNE_SUMMARY = "a tuning summary (what `ttlctl tune` writes beside its bundle)"
REFIT_REPORT = "a refit report (what `ttlctl refit --json` writes)"
BUNDLE = "a policy bundle (what `ttlctl bundle build` and `ttlctl tune` write)"
REPLAY_RESULTS = "a replay's results (what `ttlctl replay --json` writes)"

#: a ttlctl document's ``schema`` (its prefix, any version) -> what the document is
SCHEMAS: tuple[tuple[str, str], ...] = (
    ("ttlctl.fit/", FIT),
    ("ttlctl.profile/", PROFILE),
    ("ttlctl.tune/", TUNE_SUMMARY),
    ("ttlctl.refit/", REFIT_REPORT),
)


def document_kind(doc: object) -> str | None:
    """Which of ttlctl's own JSON documents ``doc`` (a parsed JSON value) is, one of the
    kinds above, said to a user who gave it where another belongs (a fit as the trace, a
    bundle as the profile); None when it is none of them (or not an object)."""
    if not isinstance(doc, dict):
        return None
    schema = doc.get("schema")
    if isinstance(schema, str):
        for prefix, kind in SCHEMAS:
            if schema.startswith(prefix):
                return kind
    if "schema_version" in doc and "sha256" in doc and "policy" in doc:
        return BUNDLE
    if isinstance(doc.get("results"), list) and isinstance(doc.get("config"), dict):
        return REPLAY_RESULTS
    return None


def mistaken(doc: object, expected: str, said: str) -> str | None:
    """``not <said> but <what doc is>`` when ``doc`` is another of ttlctl's documents than
    ``expected`` (one of the kinds above: a bundle given as the fit, a fit as the profile);
    None when it is ``expected`` or none of them. One phrase for every reader."""
    kind = document_kind(doc)
    return None if kind is None or kind == expected else f"not {said} but {kind}"


def unmarked(data: bytes) -> bytes:
    """``data`` less the UTF-8 byte-order mark that opens it, if one does."""
    return data[len(UTF8_BOM) :] if data.startswith(UTF8_BOM) else data


def not_utf8(data: bytes, at: int) -> tuple[str, str]:
    """Where text stops being UTF-8 at byte ``at`` of ``data``, and why, as an error or a
    rejected record names them: (``line N``, ``not UTF-8 text: 0xNN at byte B of the
    line``). One rule for a log's bad byte (ingest) and a JSON document's."""
    start = data.rfind(b"\n", 0, at) + 1
    line = data.count(b"\n", 0, start) + 1
    return f"line {line}", f"not UTF-8 text: 0x{data[at]:02x} at byte {at - start + 1} of the line"
