"""A bundle's router section as vllm-router's command line (``ttlctl bundle query B
--as vllm-router``).

ttlctl's router names are vllm-router 0.1.17's policy names with dashes; the settings
are its flags with underscores. ``pin-aware`` is ttlctl's own router: vllm-router has no
policy that follows a program's pin, so it is refused with the nearest policies named.
Standard library only (the bundle commands import it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ttlctl.errors import ConfigError

#: ttlctl's name -> vllm-router's ``--policy``
POLICIES = {
    "round-robin": "round_robin",
    "random": "random",
    "power-of-two": "power_of_two",
    "consistent-hash": "consistent_hash",
    "cache-aware": "cache_aware",
    "kv-aware": "kv_aware",
    "sticky-least-loaded": "sticky_least_loaded",
}
#: settings that are not vllm-router's flags
NOT_FLAGS = frozenset({"pin_queue_bound"})

PIN_AWARE = (
    "pin-aware is ttlctl's own router and vllm-router has no policy like it (one that "
    "sends a call to the replica holding its program's pin); the nearest: "
    "`--policy kv_aware --kv-aware-session-affinity-ttl-secs N` (a session stays on its "
    "replica while active, then KV cost decides) or `--policy consistent_hash` (always "
    "the same replica, blind to load); tune with --router kv-aware to get its flags"
)


def vllm_router_args(router: Mapping[str, Any]) -> list[str]:
    """vllm-router's flags for a bundle's ``router`` section (without ``--worker-urls``)."""
    name = router["name"]
    if name == "pin-aware":
        raise ConfigError(f"--as vllm-router: {PIN_AWARE}")
    policy = POLICIES.get(name)
    if policy is None:
        raise ConfigError(
            f"--as vllm-router: the bundle's router {name!r} is not a policy of vllm-router"
        )
    args = ["--policy", policy]
    for key, value in sorted(router.get("settings", {}).items()):
        if value is None or key in NOT_FLAGS:
            continue
        if isinstance(value, float) and value.is_integer() and key.endswith("_secs"):
            value = int(value)
        args += ["--" + key.replace("_", "-"), str(value)]
    return args
