"""``kv-aware``: vllm-router 0.1.17's ``kv_aware`` policy, ported from its source
distribution on PyPI (``vllm_router-0.1.17.tar.gz``: ``src/policies/kv_aware.rs``, the
session key from ``src/routers/http/router.rs`` and ``src/request_identity.rs``), fed by
the engines' KV events (``BlockStored`` / ``BlockRemoved``).

The rule, as 0.1.17 has it (``MultiplicativeScorer``, ``TemperaturePicker``,
``pick_among``, ``KvAffinityTable``):

- **Cost** of each worker: ``ptoken × (batch + 1)``. ``ptoken`` is the prompt tokens the
  worker would have to prefill (the prompt less its longest prefix of full blocks the
  worker's KV events show cached, that credit capped at ``(prompt − 1) // block`` blocks
  and at ``prompt − 1`` tokens: the last token is always computed) plus the prefill
  tokens of the requests the router sent there that have not yet begun their output;
  ``batch`` is the requests it sent there that have not finished (the router's own
  count), the ``+ 1`` the request being placed.
- **Pick**: with ``--router-temperature`` 0 (the default) the first lowest cost; above 0 a
  worker drawn with probability ∝ ``exp(−(cost − min cost) / T)`` (seeded here). A cost
  of 0 (no prompt tokens: never here, a call has a prompt) picks by (``ptoken``, batch).
- **Session affinity** (only with ``--kv-aware-session-affinity-ttl-secs S``): the
  session (``X-Session-ID``: the program) is bound to the worker its first request was
  placed on, and every later request goes there while the binding lives. A binding counts
  its requests in flight; when the last one ends, an idle deadline of ``S`` seconds
  starts, and a request arriving after it finds the binding expired, drops it and is
  placed by cost (and bound anew). No affinity without the flag.

A request's prefill tokens leave its worker's ``ptoken`` when its response streams its
first output through the router: ``KvRequestSlot::begin_decode`` (``kv_aware.rs``) takes
them off (``SlotManager::begin_decode``), and the HTTP router calls it on the first
chunk of a streamed response (``src/routers/http/router.rs``, the stream forwarder; the
live replay streams) or, at the latest, at the response's end (``release`` calls it
first). Here that is the end of the step that made the call's first token
(:meth:`~replay.fleet.routers.base.FleetView.output_started`), looked at whenever the
router places a call.

A request whose body carries a field the real router does not allow (``vllm_xargs``,
``return_token_ids``: ttlctl's live client sends both) is credited with no cached prefix
anywhere (:mod:`replay.fleet.routers.kv_credit`): with ``prefix_credit`` off the model
prices every call so.

Deliberate differences: KV events reach the router at once (the real ones cross a ZMQ
socket, milliseconds late), and so does the first chunk; the affinity table's bound
(10,000 sessions, idle ones evicted LRU at capacity) is not modelled; the offloaded tiers'
credits (``--kv-penalty-host`` …) do not apply (the simulated engines cache on the device
only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from replay.fleet.routers.base import FleetView, RoutedCall
from ttlctl.router_doc import KV_AWARE, default_of


@dataclass(slots=True)
class _Binding:
    """A session's worker, its requests in flight, and when it expires once idle."""

    worker: int
    in_flight: int = 1
    idle_deadline: float | None = None

    def expired(self, now: float) -> bool:
        """Idle (nothing in flight) past its deadline."""
        deadline = self.idle_deadline
        return self.in_flight == 0 and deadline is not None and deadline <= now


@dataclass(slots=True)
class KvAware:
    rng: np.random.Generator
    block_size: int = 16
    # vllm-router's defaults (ttlctl.router_doc's table; the TTL's is None, no affinity)
    router_temperature: float = default_of(KV_AWARE, "router_temperature")
    kv_aware_session_affinity_ttl_secs: float | None = None
    #: whether the calls are credited with their cached prefix (False: the clients'
    #: requests carry fields the real router does not allow: :mod:`~.kv_credit`)
    prefix_credit: bool = True
    name: str = KV_AWARE
    _bindings: dict[str, _Binding] = field(default_factory=dict)
    #: worker -> prefill tokens of its requests whose output has not begun
    _prefilling: dict[int, int] = field(default_factory=dict)
    #: (session, turn) -> (worker, prefill tokens, the call) of a request whose output
    #: has not begun
    _placed: dict[tuple[str, int], tuple[int, int, RoutedCall]] = field(default_factory=dict)

    def new_prefill_tokens(self, call: RoutedCall, view: FleetView, replica: int) -> int:
        """The prompt tokens ``replica`` would compute: the prompt less the credited
        prefix (full cached blocks, never the block holding the last token; none without
        :attr:`prefix_credit`)."""
        bs = self.block_size
        prompt = call.prompt_tokens
        if not self.prefix_credit:
            return prompt
        blocks = min(view.cached_tokens(replica, call) // bs, (prompt - 1) // bs)
        credited = min(blocks * bs, prompt - 1)
        return prompt - max(0, credited)

    def costs(self, call: RoutedCall, view: FleetView) -> tuple[list[float], list[int]]:
        """Each worker's cost and its ``ptoken``."""
        ptokens = [
            self.new_prefill_tokens(call, view, r) + self._prefilling.get(r, 0)
            for r in range(view.replicas)
        ]
        return [float(p * (view.load(r) + 1)) for r, p in enumerate(ptokens)], ptokens

    def pick(self, costs: list[float], ptokens: list[int], view: FleetView) -> int:
        zero = [r for r, c in enumerate(costs) if c == 0.0]
        if zero and (len(zero) == len(costs) or self.router_temperature <= 0):
            return min(zero, key=lambda r: (ptokens[r], view.load(r)))
        if self.router_temperature <= 0:
            return costs.index(min(costs))
        low = min(costs)
        weights = np.array([math.exp(-(c - low) / self.router_temperature) for c in costs])
        return int(self.rng.choice(len(costs), p=weights / weights.sum()))

    def settle(self, view: FleetView, now: float) -> None:
        """Take off each pending prefill whose response has begun its output by ``now``
        (the real router does so at that first chunk; only a placement reads them)."""
        for key, (worker, tokens, placed) in list(self._placed.items()):
            if view.output_started(placed, now):
                self._prefilling[worker] -= tokens
                del self._placed[key]

    def route(self, call: RoutedCall, view: FleetView, now: float) -> int:
        self.settle(view, now)
        affinity = self.kv_aware_session_affinity_ttl_secs is not None
        bound = self._bindings.get(call.session) if affinity else None
        if bound is not None and bound.expired(now):
            del self._bindings[call.session]  # placed by cost, and bound anew
            bound = None
        if bound is not None:
            bound.in_flight += 1
            worker = bound.worker
        else:
            costs, ptokens = self.costs(call, view)
            worker = self.pick(costs, ptokens, view)
            if affinity:
                self._bindings[call.session] = _Binding(worker)
        tokens = self.new_prefill_tokens(call, view, worker)
        self._prefilling[worker] = self._prefilling.get(worker, 0) + tokens
        self._placed[(call.session, call.turn)] = (worker, tokens, call)
        return worker

    def completed(self, replica: int, call: RoutedCall, now: float) -> None:
        # a response that ends before any output (none here: a call has output) takes
        # its prefill off at its end, as ``release`` does
        placed = self._placed.pop((call.session, call.turn), None)
        if placed is not None:
            self._prefilling[placed[0]] -= placed[1]
        bound = self._bindings.get(call.session)
        if bound is not None and bound.worker == replica and bound.in_flight > 0:
            bound.in_flight -= 1
            if bound.in_flight == 0 and self.kv_aware_session_affinity_ttl_secs is not None:
                bound.idle_deadline = now + self.kv_aware_session_affinity_ttl_secs
