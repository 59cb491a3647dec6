"""ttlctl's vLLM scheduler plugin: KV-cache time-to-live pins inside a real engine.

Load it with ``--scheduler-cls ttlctl.engine.TTLScheduler`` (in process:
``LLM(..., scheduler_cls=TTLScheduler)``) and ``TTLCTL_BUNDLE=bundle.json``;
``TTLCTL_LOG=engine.jsonl`` appends the engine log (schema
``ttlctl.engine-log/1``). The rules are those of docs/method.md and of the simulator's
``continuum`` policy (``replay/policies/continuum.py``); the maths is
:class:`fitting.policy.TTLPolicy`.

One concept per module:

- :mod:`.compat`: the vLLM versions this plugin is written against (0.32.x, 0.33.x
  and 0.34.x), and the import-time check of the hooks it uses;
- :mod:`.hooks`: those hooks, as data (which class, which name, how it is used);
- :mod:`.tags`: what a request says about itself (``vllm_xargs``, session id);
- :mod:`.programs`: bounded per-program bookkeeping (first arrival, last finish);
- :mod:`.pins`: the pins (blocks held past a finish, with an expiry);
- :mod:`.retention`: the rules (learn, decide, pin, expire, hand over, valve);
- :mod:`.orders`: the rules' two orders (which pins the valve releases first, the queue's);
- :mod:`.queue`: the waiting queue in the priority-tuple order;
- :mod:`.watch`: the bundle, reloaded when its file changes;
- :mod:`.enginelog`: the per-request log;
- :mod:`.facts`: the engine's facts the log states (size, vLLM, bundle, replica);
- :mod:`.source`: where τ comes from (the one thing the TTL policies differ in);
- :mod:`.calls`: what the rules keep about one call between its arrival and its finish;
- :mod:`.hitmemo`: a waiting request's prefix hit, remembered while nothing it read changed;
- :mod:`.counters`: the counters (attributes, and Prometheus series through :mod:`.prom`);
- :mod:`.bundle_series`: the bundle's series (reloads, refusals, a policy in force);
- :mod:`.plugin_setup`: the plugin's state on vLLM's scheduler, built at its start;
- :mod:`.scheduler`: the glue: vLLM's ``Scheduler`` hooks.

``TTLScheduler`` and ``TTLAsyncScheduler`` are imported lazily so that the
vLLM-free parts (and their tests) do not import vLLM.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TTLAsyncScheduler", "TTLScheduler"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ttlctl.engine import scheduler  # imports vLLM: only when the scheduler is used

        return getattr(scheduler, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
