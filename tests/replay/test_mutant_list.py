"""The planted faults of ``make mutants`` (tests/tools/mutants.py) still match the code:
every snippet occurs exactly once in its file, so a refactor breaks the list here rather
than leaving a fault silently unplanted."""

from __future__ import annotations

import subprocess
import sys

from tests.tools.mutants import MUTANTS, REPO, check_list


def test_every_snippet_occurs_exactly_once() -> None:
    assert check_list() == []


def test_the_list_covers_each_part() -> None:
    files = {m.file for m in MUTANTS}
    assert len(MUTANTS) >= 20
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert all(m.original != m.replacement for m in MUTANTS)
    assert {
        "replay/sched_fast.py",
        "replay/sched_admit.py",
        "replay/sched_leave.py",
        "replay/sched_pins.py",
        "replay/decoders.py",
        "replay/kv/run_free.py",
        "replay/kv/run_lookup.py",
        "replay/kv/block_pool.py",
        "replay/pinning.py",
        "ttlctl/engine/retention.py",
        "ttlctl/engine/pins.py",
    } <= files


def test_every_fault_is_one_the_code_can_run() -> None:
    """A planted fault must change what the code computes, not break it: a name the
    replacement uses but its scope does not define would fail every suite with a
    NameError and count as caught (ruff's undefined-name check on each mutated file)."""
    broken = []
    for m in MUTANTS:
        text = (REPO / m.file).read_text().replace(m.original, m.replacement)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ruff",
                "check",
                "--no-cache",
                "--select",
                "F821",
                "--output-format",
                "concise",
                "--stdin-filename",
                m.file,
                "-",
            ],
            input=text,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        if proc.returncode != 0:
            broken.append(f"{m.name}: {proc.stdout.strip() or proc.stderr.strip()}")
    assert broken == []
