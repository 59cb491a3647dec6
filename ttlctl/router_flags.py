"""A bundle's router section as vllm-router's command line (``ttlctl bundle query B
--as vllm-router``).

ttlctl's router names are vllm-router 0.1.17's policy names with dashes; the settings
are its flags with underscores. ``pin-aware`` is ttlctl's own router: vllm-router has no
policy that follows a program's pin, so it is refused with the nearest policies named.
``program-scheduling`` is vllm-router's Program scheduling: ``--enable-program-scheduling
--program-scheduling-config-json '…'``, the tuned fields with the calibration from the
bundle's profile (:mod:`profiles.router_calibration`; none when the study ran on the
router's reference coefficients). Standard library only, with the profile's pure
modules (the bundle commands import it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from profiles.router_calibration import RouterCalibrationError, calibrate
from profiles.schema import Profile
from ttlctl.errors import FlagError
from ttlctl.router_doc import (
    CALIBRATIONS,
    ENABLE_KEY,
    SETTINGS,
    flag_name,
    program_scheduling_fields,
    ttlctl_name,
)
from ttlctl.router_doc import POLICIES as VLLM_POLICIES

#: ttlctl's name -> vllm-router's ``--policy``
POLICIES = {ttlctl_name(policy): policy for policy in VLLM_POLICIES}
#: settings that are not vllm-router's flags (ttlctl's own router's)
NOT_FLAGS = frozenset(
    key for flags in SETTINGS.values() for key, flag in flags.items() if not flag.vllm_router
)

#: the flag of `ttlctl bundle query` whose output these are (its refusals name it)
AS_FLAG = "--as vllm-router"

PIN_AWARE = (
    "pin-aware is ttlctl's own router and vllm-router has no policy like it (one that "
    "sends a call to the replica holding its program's pin); the nearest: "
    "`--policy kv_aware --kv-aware-session-affinity-ttl-secs N` (a session stays on its "
    "replica while active, then KV cost decides) or `--policy consistent_hash` (always "
    "the same replica, blind to load); tune with --router kv-aware to get its flags"
)


def program_scheduling_json(settings: Mapping[str, Any], profile: Profile | None) -> str:
    """``--program-scheduling-config-json``'s value for a ``program-scheduling`` router's
    settings: its config fields, the profile's calibration (when the settings say
    ``calibration: profile``), and the calibration fields the settings gave, which win."""
    doc, given = program_scheduling_fields(settings)
    # the replayed model's key (every call with an X-Session-ID opts in), where the router's
    # own default would opt in none of them; a tuned section always names it
    doc.setdefault("program_scheduling_enable_key", ENABLE_KEY)
    calibration = settings.get("calibration") or "profile"  # null: the default, as replay's
    if calibration not in CALIBRATIONS:
        raise FlagError(
            AS_FLAG,
            f"the router's calibration takes {' or '.join(CALIBRATIONS)}, not {calibration!r}",
        )
    if calibration == "profile":
        if profile is None:
            raise FlagError(AS_FLAG, "Program scheduling's calibration needs the profile")
        try:
            doc |= calibrate(profile).to_json()
        except RouterCalibrationError as exc:  # "profile NAME: …": the bundle's, say so
            raise FlagError(AS_FLAG, f"the bundle's {exc}") from None
    for obj, fields in given.items():
        doc[obj] = {**doc.get(obj, {}), **fields}
    return json.dumps(doc, separators=(",", ":"))


def vllm_router_args(router: Mapping[str, Any], profile: Profile | None = None) -> list[str]:
    """vllm-router's flags for a bundle's ``router`` section (without ``--worker-urls``);
    ``profile``: the bundle's, Program scheduling's calibration. The section is a read
    bundle's (:func:`ttlctl.bundle.read` checked its settings by type); its name in either
    spelling (``cache-aware``, vllm-router's ``cache_aware``)."""
    name = ttlctl_name(router["name"])
    if name == "program-scheduling":
        config = program_scheduling_json(router.get("settings", {}), profile)
        return ["--enable-program-scheduling", "--program-scheduling-config-json", config]
    if name == "pin-aware":
        raise FlagError(AS_FLAG, PIN_AWARE)
    if name == "as-logged":
        raise FlagError(
            AS_FLAG,
            "the bundle was tuned on the placement its trace recorded "
            "(as-logged), not behind a router: it names no flags; keep the routing that "
            "placed those calls",
        )
    policy = POLICIES.get(name)
    if policy is None:
        raise FlagError(AS_FLAG, f"the bundle's router {name!r} is not a policy of vllm-router")
    args = ["--policy", policy]
    flags = SETTINGS.get(name, {})
    for key, value in sorted(router.get("settings", {}).items()):
        if value is None or key in NOT_FLAGS:
            continue  # null: the router's own default (no session affinity)
        flag = flags.get(key)
        if flag is not None and flag.integer:
            value = int(value)  # 30.0 in the JSON: vllm-router's int flag wants 30
        args += [flag_name(key), str(value)]
    return args
