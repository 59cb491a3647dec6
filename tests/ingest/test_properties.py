"""Random corruptions of every sample: a valid trace, a clean error, or rejects that add up.

For each file shipped in ``samples/<format>/`` (real logs) and ``tests/data/<format>/``
(hand-made), hypothesis applies text-level corruptions (truncation, flipped bytes,
deleted or duplicated lines, numbers replaced by garbage, keys removed) and ingests
the result twice:

- strict: either a trace is written whose rows equal its records, or
  :class:`IngestError` names the file; never another exception;
- ``--skip-bad``: never fails; every record is a written row or a reject, and the
  written trace passes the canonical validation again unchanged.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ttlctl.ingest.inputs import NOT_LOG_SUFFIXES, NOT_LOGS
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

REPO = Path(__file__).resolve().parents[2]


def _corpus() -> list[Path]:
    files: list[Path] = []
    for root in (REPO / "samples", REPO / "tests" / "data"):
        if not root.is_dir():
            continue
        for fmt_dir in sorted(p for p in root.iterdir() if p.is_dir()):
            logs = [
                p
                for p in sorted(fmt_dir.iterdir())
                if p.is_file()
                and not p.name.lower().startswith(NOT_LOGS)
                and not p.name.lower().endswith(NOT_LOG_SUFFIXES)
            ]
            # the smallest file of each format keeps the search fast
            if logs:
                files.append(min(logs, key=lambda p: p.stat().st_size))
    return files


CORPUS = _corpus()
NUMBER = re.compile(rb"(?<=[:\[,] )-?\d+(?:\.\d+)?|(?<=[:\[,])-?\d+(?:\.\d+)?")
KEY_VALUE = re.compile(
    rb'"[A-Za-z_]+"\s*:\s*(?:"[^"\\]{0,40}"|-?\d+(?:\.\d+)?|null|true|false)\s*,?'
)
GARBAGE = [b"-5", b'"abc"', b"null", b"1e400", b"-0.5", b"[]", b"{}", b'""', b"99999999999"]


@st.composite
def corruption(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "flip",
                "drop_line",
                "dup_line",
                "swap_lines",
                "number",
                "drop_key",
                "insert_garbage",
            ]
        )
    )
    if kind == "truncate":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))]
    if kind == "flip":
        buf = bytearray(data)
        for _ in range(draw(st.integers(1, 4))):
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] = draw(st.integers(0, 255))
        return bytes(buf)
    if kind == "insert_garbage":
        i = draw(st.integers(0, len(data)))
        junk = draw(st.binary(min_size=1, max_size=16))
        return data[:i] + junk + data[i:]
    lines = data.split(b"\n")
    if kind in ("drop_line", "dup_line", "swap_lines") and len(lines) > 1:
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "drop_line":
            del lines[i]
        elif kind == "dup_line":
            lines.insert(i, lines[i])
        else:
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    pattern = NUMBER if kind == "number" else KEY_VALUE
    matches = list(pattern.finditer(data))
    if not matches:
        return data[: len(data) // 2]
    m = matches[draw(st.integers(0, len(matches) - 1))]
    repl = draw(st.sampled_from(GARBAGE)) if kind == "number" else b""
    return data[: m.start()] + repl + data[m.end() :]


def _check(path: Path, out_dir: Path) -> None:
    out = out_dir / "trace.parquet"
    try:
        strict = ingest([path], out)
    except IngestError as exc:
        assert str(path) in str(exc), f"error does not name the file: {exc}"
        assert "\n" not in str(exc).strip(), "error is more than one line"
    else:
        assert strict.rejected == 0
        assert strict.records == strict.rows

    lenient = ingest([path], out, skip_bad=True, allow_empty=True)
    assert lenient.records == lenient.rows + lenient.rejected
    rejects = Path(lenient.rejects_path or "")
    counted = 0
    import json

    for line in rejects.read_text().splitlines():
        counted += json.loads(line)["records"]
    assert counted == lenient.rejected
    if lenient.rows:
        again = ingest([out], out_dir / "again.parquet", fmt="canonical")
        assert again.rows == lenient.rows
        assert trace_io.read(out).equals(trace_io.read(out_dir / "again.parquet"))


@pytest.mark.parametrize("sample", CORPUS, ids=[f"{p.parent.name}/{p.name}" for p in CORPUS])
def test_corruptions(sample: Path) -> None:
    data = sample.read_bytes()

    @settings(
        max_examples=int(__import__("os").environ.get("TTLCTL_PROPERTY_EXAMPLES", "20")),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        derandomize=True,
    )
    @given(corrupted=corruption(data))
    def run(corrupted: bytes) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / sample.name
            path.write_bytes(corrupted)
            _check(path, Path(tmp))

    run()


def test_corpus_covers_the_formats() -> None:
    formats = {p.parent.name for p in CORPUS}
    assert {"canonical", "engine-log"} <= formats
