"""`ttlctl bundle inspect`'s header shows every policy setting that changes τ*: the cold
start's τ (a fixed one, or ln B) and a bundle that never pins. Regression: a bundle built with
--cold-start-ttl-seconds 5 and one with pins: false (tune's never-pin fallback) had the
header of any other bundle."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.bundles import write_bundle
from ttlctl.cli import app


def header(path: Path) -> list[str]:
    """The lines printed above the τ* table."""
    res = CliRunner().invoke(app, ["bundle", "inspect", str(path)], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    return lines[: next(i for i, line in enumerate(lines) if line.startswith("τ* by context"))]


@pytest.mark.parametrize(("cold", "shown"), [(5.0, "5.00 s"), (0.0, "0"), (None, "ln B")])
def test_the_cold_start_tau_is_shown(tmp_path: Path, cold: float | None, shown: str) -> None:
    lines = header(write_bundle(tmp_path / "b.json", cold_start_ttl_s=cold))
    assert lines[1].endswith(f"  cold start τ {shown}"), lines
    assert not any("pins off" in line for line in lines), lines


def test_a_bundle_that_never_pins_says_so(tmp_path: Path) -> None:
    lines = header(write_bundle(tmp_path / "b.json", pins=False))
    assert lines[2:] == [
        "pins off: this bundle never pins (τ* 0 for every tool and context: program FCFS only)"
    ], lines
