"""What the tests of text in another encoding share (test_wide_text: UTF-16 or UTF-32 with
a byte-order mark; test_unmarked_utf16: UTF-16 without one): a sample re-encoded into a
file, and ingest run as the command line runs it."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app


def recoded_copy(
    src: Path, dest: Path, encode: Callable[[str], bytes], *, packed: bool = False
) -> Path:
    """``src``'s UTF-8 text written to ``dest`` as ``encode`` makes it (gzipped when
    ``packed``)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    data = encode(src.read_text(encoding="utf-8"))
    dest.write_bytes(gzip.compress(data, mtime=0) if packed else data)
    return dest


def ingest_cli(*args: object) -> tuple[int, str]:
    """``ttlctl ingest ARGS``: its exit code and output (never a traceback)."""
    res = CliRunner().invoke(app, ["ingest", *(str(a) for a in args)])
    assert "Traceback" not in res.output
    return res.exit_code, res.output
