"""What the ``validate --resimulate`` tests share (tests/fleet/test_resimulate.py for a
fleet's documents, tests/live/test_validation_resimulate.py for a single server's): a
profile every step of which costs a factor more, and a refusal read from the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from profiles import profile_read, schema
from ttlctl.cli import app


def slower(profile: schema.Profile, factor: float) -> schema.Profile:
    """``profile`` with every prefill and decode time ``factor`` times its own."""
    data: Any = profile.to_json()
    data["prefill"] |= {k: data["prefill"][k] * factor for k in ("a", "b", "q")}
    data["prefill"]["points"] = [[n, s * factor] for n, s in data["prefill"]["points"]]
    data["decode"] = {k: v * factor for k, v in data["decode"].items()}
    return profile_read.from_json(data)


def refused(args: list[str]) -> str:
    """``ttlctl validate ARGS``'s one-line refusal (exit 2, no traceback)."""
    res = CliRunner().invoke(app, ["validate", *args], catch_exceptions=False)
    assert res.exit_code == 2, res.output
    text = res.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    return text


def rewritten(recorded: Path, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    """``ttlctl validate --resimulate RECORDED EXTRA… --json OUT`` run: the document it
    wrote and what it printed."""
    args = ["validate", "--resimulate", str(recorded), *extra, "--json", str(out)]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text()), res.output
