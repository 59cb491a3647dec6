"""`ttlctl synth --programs N` with N too large for the machine's memory is refused up front,
in one line naming --programs (exit 2), instead of being killed by the kernel for memory with
no message. The memory is injected (the library takes it; the command reads the machine's
through profiles.host): nothing large is allocated here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.synth import synth
from replay.synth_memory import (
    GIB,
    PEAK_BYTES_PER_CALL,
    SCALED_PEAK_BYTES_PER_CALL,
    check_fits,
    peak_bytes,
)
from replay.synth_workloads import WORKLOADS
from ttlctl.cli import app
from ttlctl.errors import ConfigError


@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_the_estimate_is_the_calls_times_the_bytes_a_call_takes(workload: str) -> None:
    """The calls expected (programs × the workload's mean turns, what a draw comes to) × the
    measured bytes per call; more with --max-context (the scaled copy)."""
    drawn = synth(workload, 4_000, 0)
    expected = 4_000 * WORKLOADS[workload].turns_mean
    assert abs(drawn.height / expected - 1) < 0.02
    assert peak_bytes(workload, 4_000) == round(expected * PEAK_BYTES_PER_CALL)
    assert peak_bytes(workload, 4_000, scaled=True) == round(expected * SCALED_PEAK_BYTES_PER_CALL)
    # the frame alone is less than the peak measured for it (its arrays and the writer too)
    assert drawn.estimated_size() / drawn.height < PEAK_BYTES_PER_CALL


def test_a_trace_beyond_the_memory_is_refused_naming_programs() -> None:
    with pytest.raises(ConfigError) as info:
        check_fits("swe-bench", 100_000_000, 16 * GIB)
    message = str(info.value)
    assert message.startswith("--programs 100,000,000: a swe-bench trace of about ")
    assert "1,090,000,000 calls" in message and "more than the 16.0 GiB available" in message
    assert "\n" not in message
    # the programs it says fit, fit; one more does not
    fit = int(message.rsplit("at most about ", 1)[1].split()[0].replace(",", ""))
    check_fits("swe-bench", fit, 16 * GIB)
    with pytest.raises(ConfigError):
        check_fits("swe-bench", fit + 1, 16 * GIB)


def test_the_programs_said_to_fit_are_rounded_down() -> None:
    """5.8 programs' memory: 5 fit, and the message says 5 (a swe-bench program takes
    10.9 calls of PEAK_BYTES_PER_CALL bytes)."""
    program = round(10.9 * PEAK_BYTES_PER_CALL)
    available = 5 * program + program * 4 // 5
    with pytest.raises(ConfigError, match="at most about 5 programs fit"):
        check_fits("swe-bench", 100, available)
    check_fits("swe-bench", 5, available)
    with pytest.raises(ConfigError):
        check_fits("swe-bench", 6, available)


def test_unknown_memory_checks_nothing_and_a_bad_workload_is_named() -> None:
    check_fits("bfcl", 10**12, 0)  # the machine's figure not known: not refused here
    with pytest.raises(ConfigError, match="--workload: unknown workload 'swe'"):
        check_fits("swe", 10, GIB)


def test_the_command_refuses_before_drawing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: `--programs 100000000` was killed by the kernel (exit 137), no message."""
    monkeypatch.setattr("profiles.host.available_bytes", lambda: 2 * GIB)
    out = tmp_path / "t.parquet"
    args = ["synth", "--workload", "swe-bench", "--programs", "100000000", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --programs 100,000,000: "), lines
    assert "more than the 2.0 GiB available" in lines[0]
    assert not out.exists() and "Traceback" not in res.output


def test_a_size_that_fits_runs_and_max_context_counts_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory for 2,000 bfcl programs drawn, not for them drawn and scaled: the first runs,
    the second (--max-context builds a scaled copy) is refused."""
    monkeypatch.setattr("profiles.host.available_bytes", lambda: peak_bytes("bfcl", 2_000))
    out = tmp_path / "t.parquet"
    args = ["synth", "--workload", "bfcl", "--programs", "2000", "-o", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert out.exists() and "of 2,000 bfcl programs" in res.stdout
    out.unlink()
    res = CliRunner().invoke(app, [*args, "--max-context", "1900"])
    assert res.exit_code == 2 and "error: --programs 2,000: " in res.stderr, res.output
    assert not out.exists()
