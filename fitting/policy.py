"""The TTL policy: "how long do I keep this finished request's KV?", offline and online.

τ* = argmax over τ of P(τ, f)·B − τ with B = T·η + PrefillReload(context) (the
method). A CDF is trusted when it has more than K records (prior plus observed),
and the ladder is:

- at most K records in all: cold start, durations ~ Exp(1) and η = 1, so τ = ln B
  (or ``cold_start_ttl_s``);
- otherwise, tool f with more than K records: f's CDF;
- otherwise the CDF of all tools.

:class:`TTLPolicy` is one object for both sides: the simulator and the vLLM
scheduler plugin feed it the same events (a pause observed, a queueing delay
observed, a program finished) and ask it the same question. It starts from the
bundle's fit as a prior and keeps a bounded history per tool and for all tools.

Each CDF's hull is built when the CDF becomes trusted (at creation when its prior
has more than K records, else the moment an observation takes it past K), so the
first decision it makes uses every record it holds. After that it is rebuilt
whenever the samples it has not seen reach ``min(refresh_every, the records it was
built from)``: a trusted hull misses fewer than ``refresh_every`` samples and fewer
than half of its records. An untrusted CDF is never built (no decision reads it). A
pause touches two CDFs (its tool's and all tools'), so an event rebuilds at most two
hulls, each in O(prior points + ``history_cap``) work; amortised, a CDF is rebuilt
once per ``refresh_every`` samples, plus at most log2(``refresh_every``) times while
it has fewer records than that. A rebuild keeps a copy of the samples it is due to
use and builds the hull from them when a decision first reads it: the same hull at
the same moments, but a CDF no decision reads between two rebuilds (often the CDF of
all tools, when every tool's own is trusted) costs only the copy. It reads no clock
and sees only what an engine sees.
Standard library only: the engine process imports it.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import truediv
from typing import Any, TypedDict

from fitting import hull as hull_mod
from fitting.eta import DEFAULT_ETA, EtaSums, clamp
from fitting.fit_doc import CdfDoc, FitDoc

VALVES = ("head", "stall-only")
#: the valve a bundle gets unless told otherwise: stall-only won every trace of the live
#: comparison in docs/results.md (the paper's rule is ``head``)
DEFAULT_VALVE = "stall-only"

SOURCE_TOOL = "tool"
SOURCE_GLOBAL = "global"
SOURCE_COLD = "cold-start"
SOURCE_OFF = "disabled"


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


class DecisionDoc(TypedDict):
    """A :class:`Decision` as ``ttlctl bundle query`` prints it."""

    ttl_s: float
    source: str
    benefit_s: float


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
        if self.history_cap < 1 or self.refresh_every < 1:
            raise ValueError("history_cap and refresh_every must be >= 1")
        if self.valve not in VALVES:
            raise ValueError(f"valve must be one of {', '.join(VALVES)}, got {self.valve!r}")
        if not 0.0 < self.pin_cap <= 1.0:
            raise ValueError(f"pin_cap must be in (0, 1], got {self.pin_cap}")
        if self.cold_start_ttl_s is not None and not self.cold_start_ttl_s >= 0:
            raise ValueError("cold_start_ttl_s must be >= 0")
        if self.prior_weight_cap < 0 or self.abandon_s <= 0:
            raise ValueError("prior_weight_cap >= 0 and abandon_s > 0")

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


@dataclass(frozen=True, slots=True)
class Decision:
    ttl_s: float
    source: str
    benefit_s: float

    def to_json(self) -> DecisionDoc:
        return {"ttl_s": self.ttl_s, "source": self.source, "benefit_s": self.benefit_s}


@dataclass(frozen=True, slots=True)
class Prior:
    """A step CDF from the fit: points (x, p) standing for ``n`` samples."""

    x: tuple[float, ...]
    p: tuple[float, ...]
    n: int

    @staticmethod
    def from_json(data: CdfDoc) -> Prior:
        return Prior(tuple(map(float, data["x"])), tuple(map(float, data["p"])), int(data["n"]))


@dataclass(slots=True)
class _Durations:
    """One tool's (or all tools') prior plus recent observations, and its cached hull."""

    prior: Prior | None
    prior_weight: float
    recent: deque[float]
    _hull: hull_mod.Hull = hull_mod.EMPTY
    observed: int = 0
    #: the records the hull was built from (0: never built)
    built: int = 0
    prior_points: list[tuple[float, float]] | None = None
    #: the recent samples the hull is due to be built from (None: built)
    _due: tuple[float, ...] | None = None

    @property
    def records(self) -> int:
        return (self.prior.n if self.prior else 0) + self.observed

    @property
    def hull(self) -> hull_mod.Hull:
        """The hull of the last rebuild (built now from its samples if not yet)."""
        if self._due is not None:
            self._hull = self._build(self._due)
            self._due = None
        return self._hull

    def add(self, seconds: float, k: int, refresh_every: int) -> None:
        """Record one sample; rebuild the hull when the CDF becomes trusted or has
        missed ``min(refresh_every, built)`` samples since its last build."""
        self.recent.append(seconds)
        self.observed += 1
        records = self.records
        if records > k and records - self.built >= min(refresh_every, self.built):
            self.rebuild()

    def rebuild(self) -> None:
        """Rebuild the hull from the prior and the recent samples held now (built when
        :attr:`hull` is first read)."""
        self._due = tuple(self.recent)
        self.built = self.records

    def _build(self, recent: tuple[float, ...]) -> hull_mod.Hull:
        """Merge the prior (as weighted points) with ``recent``; the hull of the result."""
        if self.prior_points is None:
            self.prior_points = self._prior_points()
        if not self.prior_points:
            # samples of weight 1 each: the sums below are the integers, exactly
            if not recent:
                return hull_mod.EMPTY
            if len(set(recent)) == len(recent):  # distinct
                return hull_mod.build_equal_weights(sorted(recent))
            counts = Counter(recent)
            values = sorted(counts)
            cum = list(accumulate(map(counts.__getitem__, values)))
            return hull_mod.build(values, list(map(truediv, cum, repeat(float(cum[-1])))))
        samples = sorted(recent)
        merged = heapq.merge(self.prior_points, ((x, 1.0) for x in samples))
        xs: list[float] = []
        ws: list[float] = []
        for x, w in merged:
            if xs and xs[-1] == x:
                ws[-1] += w
            else:
                xs.append(x)
                ws.append(w)
        total = sum(ws)
        if total <= 0:
            return hull_mod.EMPTY
        acc = 0.0
        ps: list[float] = []
        for w in ws:
            acc += w
            ps.append(acc / total)
        ps[-1] = 1.0
        return hull_mod.build(xs, ps)

    def _prior_points(self) -> list[tuple[float, float]]:
        if self.prior is None or self.prior.n <= 0 or self.prior_weight <= 0:
            return []
        points: list[tuple[float, float]] = []
        last = 0.0
        for x, p in zip(self.prior.x, self.prior.p, strict=True):
            points.append((x, (p - last) * self.prior_weight))
            last = p
        return points


@dataclass(slots=True)
class TTLPolicy:
    """The online TTL policy (see the module docstring)."""

    params: PolicyParams
    #: PrefillReload(context tokens, offload?) in seconds, from the profile
    rebuild_s: Callable[[float, bool], float]
    tools: dict[str, _Durations] = field(default_factory=dict)
    everything: _Durations | None = None
    delays: deque[float] = field(default_factory=deque)
    delay_sum: float = 0.0
    eta_sums: EtaSums = field(default_factory=EtaSums)

    @staticmethod
    def create(
        params: PolicyParams,
        rebuild_s: Callable[[float, bool], float],
        tool_priors: Mapping[str, Prior] | None = None,
        global_prior: Prior | None = None,
    ) -> TTLPolicy:
        policy = TTLPolicy(params=params, rebuild_s=rebuild_s)
        policy.delays = deque(maxlen=params.t_window)
        policy.everything = policy._new(global_prior)
        for name, prior in (tool_priors or {}).items():
            policy.tools[name] = policy._new(prior)
        return policy

    def _new(self, prior: Prior | None) -> _Durations:
        weight = 0.0
        if prior is not None and prior.n > 0:
            weight = float(min(prior.n, self.params.prior_weight_cap))
        d = _Durations(prior, weight, deque(maxlen=self.params.history_cap))
        if d.records > self.params.k:  # trusted from the start: built now
            d.rebuild()
        return d

    # ------------------------------------------------------------ what it learns

    def observe_pause(self, tool: str | None, seconds: float) -> bool:
        """A program came back ``seconds`` after its call finished, having run ``tool``.

        Returns False (and learns nothing) for an unknown tool, a non-finite or
        negative pause, or one longer than ``abandon_s`` (an abandoned program).
        """
        if tool is None or not math.isfinite(seconds) or seconds < 0:
            return False
        if seconds > self.params.abandon_s:
            return False
        assert self.everything is not None
        durations = self.tools.get(tool)
        if durations is None:
            durations = self.tools[tool] = self._new(None)
        k, every = self.params.k, self.params.refresh_every
        durations.add(seconds, k, every)  # at most one rebuild each: two per event
        self.everything.add(seconds, k, every)
        return True

    def observe_queue_delay(self, seconds: float) -> None:
        """The queueing delay an evicted program suffered when it came back (feeds T)."""
        if not math.isfinite(seconds) or seconds < 0:
            return
        if len(self.delays) == self.delays.maxlen:
            self.delay_sum -= self.delays[0]
        self.delays.append(seconds)
        self.delay_sum += seconds

    def observe_program_end(self, n_calls: int) -> None:
        self.eta_sums.add(n_calls)

    # ------------------------------------------------------------ what it answers

    @property
    def queue_delay_s(self) -> float:
        """T: the mean of the recent queueing delays (0 before any)."""
        return max(0.0, self.delay_sum / len(self.delays)) if self.delays else 0.0

    @property
    def eta(self) -> float:
        if self.params.learn_eta:
            learned = self.eta_sums.eta()
            if learned is not None:
                return clamp(learned)
        return self.params.eta

    @property
    def records(self) -> int:
        return self.everything.records if self.everything else 0

    def benefit(
        self, context_tokens: float, offload: bool = False, eta: float | None = None
    ) -> float:
        """B = T·η + PrefillReload(context), in seconds."""
        e = self.eta if eta is None else eta
        return self.queue_delay_s * e + self.rebuild_s(context_tokens, offload)

    def decide(
        self,
        tool: str | None,
        context_tokens: float,
        offload: bool = False,
        queue_delay_s: float | None = None,
    ) -> Decision:
        """τ* for a request that just finished with ``context_tokens`` of KV.

        ``queue_delay_s`` overrides T (for what-if queries); by default the
        policy's own running mean is used.
        """
        t = self.queue_delay_s if queue_delay_s is None else queue_delay_s
        if not self.params.pins:
            return Decision(0.0, SOURCE_OFF, t * self.eta + self.rebuild_s(context_tokens, offload))
        if self.records <= self.params.k:
            benefit = t * 1.0 + self.rebuild_s(context_tokens, offload)  # η = 1 in cold start
            if self.params.cold_start_ttl_s is not None:
                return Decision(self.params.cold_start_ttl_s, SOURCE_COLD, benefit)
            return Decision(hull_mod.cold_start(benefit), SOURCE_COLD, benefit)
        benefit = t * self.eta + self.rebuild_s(context_tokens, offload)
        durations = self.tools.get(tool) if tool is not None else None
        if durations is not None and durations.records > self.params.k:
            tau, _ = hull_mod.best(durations.hull, benefit)
            return Decision(tau, SOURCE_TOOL, benefit)
        assert self.everything is not None
        tau, _ = hull_mod.best(self.everything.hull, benefit)
        return Decision(tau, SOURCE_GLOBAL, benefit)

    def refresh_all(self) -> None:
        """Rebuild every trusted hull that misses samples (for tests and between replays)."""
        assert self.everything is not None
        for d in (*self.tools.values(), self.everything):
            if d.records > self.params.k and d.built != d.records:
                d.rebuild()


def priors_from_fit(fit: FitDoc) -> tuple[dict[str, Prior], Prior | None]:
    """The per-tool and global priors stored in a fit document."""
    tools = {name: Prior.from_json(t["cdf"]) for name, t in fit.get("tools", {}).items()}
    g = fit.get("global")
    return tools, (Prior.from_json(g["cdf"]) if g else None)
