"""vLLM's own scheduler code, stepped by hand with the plugin loaded (no model, no worker).

``tests/tools/scheduler_probe.py`` builds the scheduler as the engine core does and
runs three sequential probes; here against the installed vLLM, sync and async
(the next step scheduled before the last one's output is applied). The same
script runs against an unpacked vLLM wheel's sources (see its docstring).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tools import scheduler_probe as probe

pytest.importorskip("vllm")


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_pin_survives_a_flood_only_when_pinned(tmp_path: Path, async_scheduling: bool) -> None:
    hit, stats, name = probe.pin_probe(tmp_path, async_scheduling, pinned=True)
    assert name == ("TTLAsyncScheduler" if async_scheduling else "TTLScheduler")
    assert hit == probe.PROMPT and stats["made"] == 1 and stats["hit"] == 1
    assert stats["pinned_blocks"] == 0  # handed over at admission
    hit, stats, _ = probe.pin_probe(tmp_path, async_scheduling, pinned=False)
    assert hit == 0 and stats["made"] == 0


@pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])
def test_valve_releases_pins_for_a_call_that_needs_the_room(
    tmp_path: Path, async_scheduling: bool
) -> None:
    admitted, stats = probe.valve_probe(tmp_path, async_scheduling)
    assert admitted and stats["released"] >= 1
    assert stats["pinned_blocks"] <= probe.BLOCKS - 1
