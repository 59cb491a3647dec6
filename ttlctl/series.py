"""The Prometheus series the TTL scheduler exports, by name.

One list for the side that writes them (the engine plugin,
:mod:`ttlctl.engine.counters`) and the side that reads them from a server's
``/metrics`` (:mod:`ttlctl.server.prom`). Standard library only.
"""

from __future__ import annotations

#: the pin counters, ``ttlctl:pins_<name>_total``: made, then how each made pin ended (hit,
#: expired, released by the valve, dropped), then the pins the policy chose but that were
#: not made (refused by the pin cap; deferred: vLLM defers freeing the blocks, a KV
#: connector under async scheduling)
PIN_COUNTERS = ("made", "hit", "expired", "released", "dropped", "refused", "deferred")
#: gauges: KV blocks held by pins now, and the programs holding them
PINNED_BLOCKS = "ttlctl:pinned_blocks"
PINNED_PROGRAMS = "ttlctl:pinned_programs"


def pin_counter(name: str) -> str:
    """The counter's name as created (``prometheus_client`` adds ``_total``)."""
    return f"ttlctl:pins_{name}"


def pin_counter_total(name: str) -> str:
    """The counter's series as ``/metrics`` shows it."""
    return f"{pin_counter(name)}_total"


#: the bundle: reloads (a changed file whose bundle replaced the policy) and refusals (a
#: bundle file missing, damaged or foreign, at start or on a change), counters
#: (``..._total`` on ``/metrics``); and a gauge, 1 while a bundle's policy is in force and
#: 0 while the engine serves as stock vLLM (no bundle, or none it could use)
BUNDLE_RELOADS = "ttlctl:bundle_reloads"
BUNDLE_REFUSED = "ttlctl:bundle_refused"
BUNDLE_ACTIVE = "ttlctl:bundle_active"
