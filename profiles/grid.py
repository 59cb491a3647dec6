"""The context lengths a profiler measures prefill at: by default, and the rule a grid given
must meet.

Standard library only: the light paths (``ttlctl --help``, planning a vLLM profile)
import it without numpy or scipy.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

#: the smallest context a default grid reaches down to
MIN_CONTEXT = 16


def default_contexts(limit: int) -> list[int]:
    """The contexts a profiler measures prefill at when none are given, up to ``limit``.

    Powers of two from 1,024 up to ``limit``; for short models, smaller powers of two
    (down to :data:`MIN_CONTEXT`) until there are four points. Why this grid, for the
    torch profiler and the server profiler alike: the quadratic fit weighs each point
    by its relative error, so a geometric grid weighs every scale alike; four points
    leave one degree of freedom over the three coefficients; and below 1,024 tokens a
    prefill is mostly fixed cost (kernel launches, or a server's HTTP round trip), which
    the smallest points already pin down. The largest point is the largest power of
    two under ``limit``, not ``limit`` itself: the longest prefill is the one most
    likely to run out of memory, and it costs the most time.
    """
    grid = [c for c in (1024 << i for i in range(32)) if c <= limit]
    low = 512
    while len(grid) < 4 and low >= MIN_CONTEXT:
        if low <= limit:
            grid.insert(0, low)
        low //= 2
    return grid


def engine_contexts(limit: int) -> list[int]:
    """:func:`default_contexts`, plus ``limit`` itself when it is well above the grid's
    last point (by a quarter or more): the profilers of a serving engine (vLLM in process,
    a running server) also time the longest prompt it takes, so that a replay of prompts
    longer than the last power of two prices them from a measured point rather than from
    the quadratic carried past its data."""
    grid = default_contexts(limit)
    if grid and limit >= grid[-1] * 5 // 4:
        grid.append(limit)
    return grid


def limit_bound(limit: int, model_bound: str, max_context: int | None) -> str:
    """What sets a profiler's context ``limit``, as the user knows it: ``--max-context``
    where it is the lower, else ``model_bound`` (the model's length, in its words)."""
    if max_context is not None and int(max_context) == limit:
        return f"--max-context {max_context}"
    return model_bound


def contexts_fault(
    grid: Sequence[int], limit: int, model_bound: str, max_context: int | None
) -> str | None:
    """What is wrong with ``grid`` (sorted, each once), the ``--contexts`` given, as the
    prefill contexts to time within ``limit`` tokens, in one line (``model_bound`` and
    ``max_context``: see :func:`limit_bound`); None when nothing is. The rule of both
    in-process profilers (eager torch, vLLM's engine): positive lengths, none over the
    limit, and at least three (the prefill's quadratic has three coefficients)."""
    if any(c < 1 for c in grid):
        return f"--contexts must be positive token counts, got {list(grid)}"
    over = [c for c in grid if c > limit]
    if over:
        bound = limit_bound(limit, model_bound, max_context)
        return f"--contexts {over} exceed the limit of {limit} tokens ({bound})"
    if len(grid) < 3:
        return f"--contexts {list(grid)}: the prefill quadratic needs at least 3 distinct contexts"
    return None


def default_grid_fault(
    grid: Sequence[int], limit: int, model_bound: str, max_context: int | None
) -> str | None:
    """What is wrong with the default ``grid`` up to ``limit`` (fewer than three contexts),
    naming what set the limit and what to give instead; None when nothing is."""
    if len(grid) >= 3:
        return None
    bound = limit_bound(limit, model_bound, max_context)
    by_flag = bound.startswith("--max-context")
    return (
        f"{bound} leaves the default grid {list(grid)}: the prefill quadratic needs at "
        "least 3 distinct contexts; give "
        + ("a larger --max-context or --contexts" if by_flag else "--contexts")
    )


def grid_to_time(
    contexts: Sequence[int] | None,
    limit: int,
    model_bound: str,
    max_context: int | None,
    default: Callable[[int], list[int]],
) -> tuple[list[int], str | None]:
    """(the prefill contexts to time, what is wrong with them or None): the ``--contexts``
    given (sorted, each once) or, with none, the profiler's ``default`` grid up to
    ``limit``; judged by :func:`contexts_fault` or :func:`default_grid_fault`."""
    if contexts is None:
        grid = default(limit)
        return grid, default_grid_fault(grid, limit, model_bound, max_context)
    grid = sorted({int(c) for c in contexts})
    return grid, contexts_fault(grid, limit, model_bound, max_context)
