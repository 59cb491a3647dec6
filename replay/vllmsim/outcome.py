"""What a vLLM-backend replay leaves: per-call records, per-program runs, engine figures.

:class:`Outcome` has the attributes :func:`replay.figures.summarize` reads from the
fast backend's outcome, so both give the same figures under the same names. Each
call also keeps what a differential comparison with the fast backend needs: the
step it was admitted in, its prefix hit (vLLM's ``num_cached_tokens``), its
preemptions and its finish time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from replay.scheduler import SimSchedulerConfig, Stats
from replay.sim_outcome import ProgramRun, SimCallRecord


@dataclass(slots=True)
class VllmCall(SimCallRecord):
    """A finished call (times in virtual seconds; ``arrival`` is when it was sent).

    ``hit_tokens`` is vLLM's ``num_cached_tokens`` of the call's first admission;
    ``admitted_step`` and ``finish_step`` count the steps that computed something
    (0-based, in the order vLLM scheduled them)."""

    request_id: str = ""
    #: when the scheduler first saw it (the step boundary after it was sent)
    reached: float = 0.0


@dataclass(slots=True)
class EngineFigures:
    """The engine-wide figures, in the fast backend's ``SimScheduler`` shape."""

    config: SimSchedulerConfig
    stats: Stats = field(default_factory=Stats)
    #: (time, pinned blocks) at each change
    timeline: list[tuple[float, int]] = field(default_factory=list)
    #: the plugin's counters at the end (empty for vLLM's own scheduler)
    plugin_counters: dict[str, int] = field(default_factory=dict)

    def take_plugin_counters(self, counters: dict[str, int]) -> None:
        """The plugin's counters at the end (``ttl_stats()``), kept and put into
        :attr:`stats` (its pins made, hit, expired, released, dropped, held, refused)."""
        self.plugin_counters = counters
        put_plugin_counters(self.stats, counters)


def put_plugin_counters(stats: Stats, counters: dict[str, int]) -> None:
    """The plugin's end-of-run counters (``ttl_stats()``) into ``stats``: its pins made,
    hit, expired, released, dropped, held and refused."""
    stats.pins_made = counters["made"]
    stats.pins_hit = counters["hit"]
    stats.pins_expired = counters["expired"]
    stats.pins_released = counters["released"]
    stats.pins_dropped = counters["dropped"]
    stats.pins_held = counters["pinned_programs"]
    stats.pins_refused = counters["refused"]


@dataclass(slots=True)
class Timings:
    """Per step (when asked): wall and CPU seconds of ``schedule()`` and of
    ``update_from_output()``, the wall seconds ``schedule()`` spent in vLLM's prefix-cache
    lookup of waiting requests (``KVCacheManager.get_computed_blocks``), and the step's
    virtual price (0: an empty step)."""

    schedule_s: list[float] = field(default_factory=list)
    update_s: list[float] = field(default_factory=list)
    schedule_cpu_s: list[float] = field(default_factory=list)
    update_cpu_s: list[float] = field(default_factory=list)
    lookup_s: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)


@dataclass(slots=True)
class Outcome:
    calls: list[VllmCall]
    programs: list[ProgramRun]
    rejected_calls: int
    truncated_calls: int
    engine: EngineFigures
    end: float
    #: calls aborted by the caller (their programs stop there)
    aborted_calls: int = 0
    async_scheduling: bool = False
    vllm_version: str = ""
    scheduler: str = ""
    timings: Timings | None = None
    #: wall seconds of the closed loop (vLLM's setup excluded)
    wall_s: float = 0.0
