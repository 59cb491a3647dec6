"""The planted faults of ``make mutants`` (tests/tools/mutants.py) still match the code:
every snippet occurs exactly once in its file, so a refactor breaks the list here rather
than leaving a fault silently unplanted."""

from __future__ import annotations

from tests.tools.mutants import MUTANTS, check_list


def test_every_snippet_occurs_exactly_once() -> None:
    assert check_list() == []


def test_the_list_covers_each_part() -> None:
    files = {m.file for m in MUTANTS}
    assert len(MUTANTS) >= 20
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert all(m.original != m.replacement for m in MUTANTS)
    assert {
        "replay/scheduler.py",
        "replay/decoders.py",
        "replay/kv/run_pool.py",
        "replay/kv/block_pool.py",
        "replay/pinning.py",
        "ttlctl/engine/retention.py",
        "ttlctl/engine/pins.py",
    } <= files
