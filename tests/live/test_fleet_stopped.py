"""What ``ttlctl validate`` says when a fleet stopped it after whole repeats.

The real fleet stopped in its second repeat (its router killed mid-run) is
tests/live/test_fleet.py (it shares the live fleet test's validation); the bookkeeping in
every case is tests/fleet/test_validate_stopped.py.
"""

from __future__ import annotations

import pytest
import typer

from ttlctl.cli.validate import _stopped


def test_the_command_says_what_stopped_it_once_the_repeats_are_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    doc = {
        "repeats": 1,
        "stopped": {
            "run": "vllm behind round_robin, run 2",
            "error": "vllm-router (round_robin) exited with code -9 (log: r.log)",
            "repeats_asked": 3,
        },
    }
    with pytest.raises(typer.Exit) as raised:
        _stopped(doc, "above and in z.json")
    assert raised.value.exit_code == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: vllm behind round_robin, run 2: vllm-router (round_robin)")
    assert line.endswith("; kept 1 whole repeat of 3 (above and in z.json)")
    _stopped({"repeats": 2}, "above")  # not stopped: nothing said
    _stopped({**doc, "resimulated": {}}, "above")  # its re-simulation: the record, no error
