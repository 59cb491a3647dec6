"""What every format's bad-input tests share."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ttlctl.ingest.errors import IngestError
from ttlctl.ingest.pipeline import ingest

#: name -> (bad file, expected reason text, expected record locator or None)
Cases = dict[str, tuple[Path, str, str | None]]


def assert_strict_errors(cases: Cases, fmt: str, out_dir: Path) -> None:
    """Without --skip-bad each bad file stops the run with one error naming file and record."""
    for name, (path, reason, record) in cases.items():
        with pytest.raises(IngestError) as err:
            ingest([path], out_dir / "strict.parquet", fmt=fmt)
        message = str(err.value)
        assert str(path) in message, name
        assert reason in message, (name, message)
        if record is not None:
            assert err.value.record == record, (name, message)


def read_rejects(path: str | None) -> list[dict[str, Any]]:
    assert path is not None
    with Path(path).open() as fh:
        return [json.loads(line) for line in fh]
