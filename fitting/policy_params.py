"""The policy's knobs: :class:`PolicyParams` (η, K, T window, valve, pin cap, cold start,
history and refresh sizes, abandonment, pins on or off), validated at construction, and
:class:`PolicyDoc`, the same as a bundle's ``policy`` holds it (every field, by name).

Standard library only: the engine process imports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from fitting.eta import DEFAULT_ETA

VALVES = ("head", "stall-only")
#: the valve a bundle gets unless told otherwise: stall-only won every trace of the live
#: comparison in docs/results.md (the paper's rule is ``head``)
DEFAULT_VALVE = "stall-only"
#: the longest T window and per-tool history a policy keeps (a window is a deque of that
#: many samples: ten million is far past any trace, and far below what Python can size)
WINDOW_MAX = 10_000_000


class PolicyDoc(TypedDict):
    """:class:`PolicyParams` as a bundle's ``policy`` holds it (every field, by name)."""

    eta: float
    learn_eta: bool
    k: int
    t_window: int
    valve: str
    pin_cap: float
    cold_start_ttl_s: float | None
    history_cap: int
    prior_weight_cap: int
    refresh_every: int
    abandon_s: float
    pins: bool


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """The knobs of the policy; written verbatim into every bundle."""

    #: η, the weight of the out-of-order cost (tuned by replay)
    eta: float = DEFAULT_ETA
    #: learn η online from finished programs (else keep ``eta``)
    learn_eta: bool = False
    #: K: a CDF is trusted once it has more than K records; at most K in all is cold start
    k: int = 100
    #: queueing delays averaged for T
    t_window: int = 100
    #: how pins yield to waiting work: ``stall-only`` (default) or ``head`` (the paper's)
    valve: str = DEFAULT_VALVE
    #: largest fraction of the KV cache pins may hold
    pin_cap: float = 1.0
    #: a fixed τ during cold start instead of ln B (None: ln B)
    cold_start_ttl_s: float | None = None
    #: online samples kept per tool (and for the global CDF)
    history_cap: int = 1024
    #: the prior counts as at most this many samples, so new data can move it
    prior_weight_cap: int = 1024
    #: a trusted hull is rebuilt once it misses this many samples (or as many as it has)
    refresh_every: int = 64
    #: a pause longer than this is an abandoned program, not a tool duration
    abandon_s: float = 3600.0
    #: False: never pin (program-level scheduling only) — the tuner's safe fallback
    pins: bool = True

    def __post_init__(self) -> None:
        if not math.isfinite(self.eta) or not -1.0 <= self.eta <= 1.0:
            raise ValueError(f"eta must be in [-1, 1], got {self.eta}")
        if self.k < 0:
            raise ValueError(f"k must be >= 0, got {self.k}")
        if self.t_window < 1:
            raise ValueError(f"t_window must be >= 1, got {self.t_window}")
        for name, window in (("t_window", self.t_window), ("history_cap", self.history_cap)):
            if window > WINDOW_MAX:
                raise ValueError(f"{name} must be at most {WINDOW_MAX:,}, got {window}")
        if self.history_cap < 1 or self.refresh_every < 1:
            raise ValueError(
                "history_cap and refresh_every must be >= 1, got "
                f"{self.history_cap} and {self.refresh_every}"
            )
        if self.valve not in VALVES:
            raise ValueError(f"valve must be one of {', '.join(VALVES)}, got {self.valve!r}")
        if not 0.0 < self.pin_cap <= 1.0:
            raise ValueError(f"pin_cap must be in (0, 1], got {self.pin_cap}")
        if self.cold_start_ttl_s is not None and not self.cold_start_ttl_s >= 0:
            raise ValueError(f"cold_start_ttl_s must be >= 0, got {self.cold_start_ttl_s}")
        if self.prior_weight_cap < 0 or self.abandon_s <= 0:
            raise ValueError(
                "prior_weight_cap must be >= 0 and abandon_s > 0, got "
                f"{self.prior_weight_cap} and {self.abandon_s}"
            )

    def to_json(self) -> PolicyDoc:
        return {
            "eta": self.eta,
            "learn_eta": self.learn_eta,
            "k": self.k,
            "t_window": self.t_window,
            "valve": self.valve,
            "pin_cap": self.pin_cap,
            "cold_start_ttl_s": self.cold_start_ttl_s,
            "history_cap": self.history_cap,
            "prior_weight_cap": self.prior_weight_cap,
            "refresh_every": self.refresh_every,
            "abandon_s": self.abandon_s,
            "pins": self.pins,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> PolicyParams:
        known = {f for f in PolicyParams.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown policy parameter(s): {', '.join(sorted(unknown))}")
        return PolicyParams(**dict(data))
