"""bench/ingest_bench.py's memory verdict: judged from the run's own figures, and only
where the in-memory path's growth shows the input's weight."""

from __future__ import annotations

from tests.bench_script import bench_script


def test_the_memory_verdict_is_read_off_the_figures() -> None:
    """Regression: the line said "the streaming path's growth stays near 1x" whatever the
    run measured (at --calls 20000 beside a streaming growth of 1.74x)."""
    verdict = bench_script("ingest_bench").growth_verdict
    assert verdict(3.41, 1.18).endswith(
        "streaming growth 1.18x, goal <= 1.5x, while the input "
        "grows 4x and the in-memory peak 3.41x: met)"
    )
    assert verdict(3.41, 1.74).endswith(": NOT met)")
    assert verdict(3.41, 1.5).endswith(": met)")  # the goal is a bound: at it, met
    small = verdict(1.6, 1.74)
    assert small.startswith("(the in-memory peak grew only 1.60x") and "met" not in small
    assert verdict(2.0, 1.2).endswith(": met)")  # the baseline's floor is judged
