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
bundle's fit as a prior and keeps a bounded history per tool and for all tools
(:class:`fitting.durations.Durations`); its knobs are
:class:`fitting.policy_params.PolicyParams`.

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

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from fitting import hull as hull_mod
from fitting.durations import Durations, Prior
from fitting.eta import EtaSums, clamp
from fitting.policy_params import PolicyParams

SOURCE_TOOL = "tool"
SOURCE_GLOBAL = "global"
SOURCE_COLD = "cold-start"
SOURCE_OFF = "disabled"


class DecisionDoc(TypedDict):
    """A :class:`Decision` as ``ttlctl bundle query`` prints it."""

    ttl_s: float
    source: str
    benefit_s: float


@dataclass(frozen=True, slots=True)
class Decision:
    ttl_s: float
    source: str
    benefit_s: float

    def to_json(self) -> DecisionDoc:
        return {"ttl_s": self.ttl_s, "source": self.source, "benefit_s": self.benefit_s}


_new_object = object.__new__
_set_ttl = vars(Decision)["ttl_s"].__set__
_set_source = vars(Decision)["source"].__set__
_set_benefit = vars(Decision)["benefit_s"].__set__


def _decision(ttl_s: float, source: str, benefit_s: float) -> Decision:
    """``Decision(ttl_s, source, benefit_s)``, the same object made faster: each decision
    makes one, and a frozen dataclass's ``__init__`` sets each field through
    ``object.__setattr__`` (about 380 ns for the three on CPython 3.11, a third of a
    decision); the slots' own setters cost about 220."""
    d = _new_object(Decision)
    _set_ttl(d, ttl_s)
    _set_source(d, source)
    _set_benefit(d, benefit_s)
    return d


@dataclass(slots=True)
class TTLPolicy:
    """The online TTL policy (see the module docstring)."""

    params: PolicyParams
    #: PrefillReload(context tokens, offload?) in seconds, from the profile
    rebuild_s: Callable[[float, bool], float]
    tools: dict[str, Durations] = field(default_factory=dict)
    everything: Durations | None = None
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

    def _new(self, prior: Prior | None) -> Durations:
        weight = 0.0
        if prior is not None and prior.n > 0:
            weight = float(min(prior.n, self.params.prior_weight_cap))
        d = Durations(prior, weight, deque(maxlen=self.params.history_cap))
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
        # the engine asks this for every finished call: attributes read once, η and the
        # record count read directly where the properties would only add calls
        params = self.params
        t = self.queue_delay_s if queue_delay_s is None else queue_delay_s
        if not params.pins:
            benefit = t * self.eta + self.rebuild_s(context_tokens, offload)
            return _decision(0.0, SOURCE_OFF, benefit)
        everything = self.everything
        k = params.k
        if everything is None or everything.records <= k:
            benefit = t * 1.0 + self.rebuild_s(context_tokens, offload)  # η = 1 in cold start
            if params.cold_start_ttl_s is not None:
                return _decision(params.cold_start_ttl_s, SOURCE_COLD, benefit)
            return _decision(hull_mod.cold_start(benefit), SOURCE_COLD, benefit)
        eta = self.eta if params.learn_eta else params.eta
        benefit = t * eta + self.rebuild_s(context_tokens, offload)
        durations = self.tools.get(tool) if tool is not None else None
        if durations is not None and durations.records > k:
            tau, _ = hull_mod.best(durations.hull, benefit)
            return _decision(tau, SOURCE_TOOL, benefit)
        tau, _ = hull_mod.best(everything.hull, benefit)
        return _decision(tau, SOURCE_GLOBAL, benefit)

    def refresh_all(self) -> None:
        """Rebuild every trusted hull that misses samples (for tests and between replays)."""
        assert self.everything is not None
        for d in (*self.tools.values(), self.everything):
            if d.records > self.params.k and d.built != d.records:
                d.rebuild()
