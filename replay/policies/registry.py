"""Policies by name, built fresh for each replay (no state survives between runs)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fitting.policy import TTLPolicy
from fitting.policy_params import DEFAULT_VALVE, PolicyParams
from replay.policies.baselines import Autellix, InferCept, Oracle
from replay.policies.continuum import Continuum
from replay.policies.simple import STATIC_TTL_VALVE, VLLM, ProgramFCFS, StaticTTL
from replay.scheduler import Policy
from ttlctl import bundle as bundle_mod
from ttlctl import bundle_doc
from ttlctl.errors import ConfigError

#: the comparison table's order: ablation ladder, baselines, bounds
NAMES = (
    "vllm",
    "program-fcfs",
    "static-ttl",
    "continuum",
    "infercept",
    "autellix",
    "oracle",
    "unlimited-kv",
)
#: evaluation only: they read what no engine can know, or have memory no engine has
BOUNDS = ("oracle", "unlimited-kv")


@dataclass(frozen=True, slots=True)
class PolicySpec:
    name: str
    #: the bundle (for continuum); None: a cold-start policy with default parameters
    bundle: bundle_doc.BundleParts | None = None
    ttl_s: float = 2.0
    valve: str | None = None
    pin_cap: float | None = None


def make(
    spec: PolicySpec,
    pauses: dict[tuple[str, int], float],
    rebuild_s: Callable[[float, bool], float],
    chunk: int | None = None,
) -> Policy:
    """A fresh policy object. ``pauses`` (true pauses) reach only the oracle;
    ``rebuild_s`` prices a miss for a continuum policy that has no bundle; one with a
    bundle prices it with the bundle's profile in steps of ``chunk``, the engine's
    ``max_num_batched_tokens``, as the plugin does (:func:`ttlctl.bundle.policy_from`)."""
    name = spec.name
    if name in ("vllm", "unlimited-kv"):
        return VLLM(name=name)
    if name == "program-fcfs":
        return ProgramFCFS()
    if name == "static-ttl":
        return StaticTTL(
            ttl_s=spec.ttl_s,
            valve_name=spec.valve or STATIC_TTL_VALVE,
            pin_cap=spec.pin_cap if spec.pin_cap is not None else 1.0,
        )
    if name == "continuum":
        ttl = _ttl_policy(spec.bundle, rebuild_s, chunk)
        return Continuum(
            ttl,
            valve_name=spec.valve or ttl.params.valve,
            pin_cap=spec.pin_cap if spec.pin_cap is not None else ttl.params.pin_cap,
        )
    if name == "infercept":
        return InferCept()
    if name == "autellix":
        return Autellix()
    if name == "oracle":
        return Oracle(
            pauses=pauses,
            valve_name=spec.valve or DEFAULT_VALVE,
            pin_cap=spec.pin_cap if spec.pin_cap is not None else 1.0,
        )
    raise ConfigError(f"unknown policy {name!r}; choose from {', '.join(NAMES)} or all")


def _ttl_policy(
    bundle: bundle_doc.BundleParts | None,
    rebuild_s: Callable[[float, bool], float],
    chunk: int | None,
) -> TTLPolicy:
    if bundle is None:  # no fit: the cold-start policy, learning online
        return TTLPolicy.create(PolicyParams(), rebuild_s)
    return bundle_mod.policy_from(bundle, chunk)
