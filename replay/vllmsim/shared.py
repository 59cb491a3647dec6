"""What the vLLM backend takes from the fast simulator, in one place.

The workload, the replay settings, the per-call and per-program records, the
metrics and the frontend's length rule are the fast backend's own, so that the
two backends differ only in the scheduler and the KV cache manager. Every import
of another ``replay`` module by this package goes through here (one file to
follow when those modules move).
"""

from __future__ import annotations

from replay.engine import EngineConfig, Stats
from replay.metrics import gap_closed, summarize
from replay.policies import BOUNDS, PolicySpec
from replay.run import Timing, prepare, run_one, unlimited_kv_tokens
from replay.sim import CallRecord, ProgramRun, ReplayConfig, SimulationError
from replay.sim import _fits as fits_engine
from replay.workload import Call, Program, Workload

__all__ = [
    "BOUNDS",
    "Call",
    "CallRecord",
    "EngineConfig",
    "PolicySpec",
    "Program",
    "ProgramRun",
    "ReplayConfig",
    "SimulationError",
    "Stats",
    "Timing",
    "Workload",
    "fits_engine",
    "gap_closed",
    "prepare",
    "run_one",
    "summarize",
    "unlimited_kv_tokens",
]
