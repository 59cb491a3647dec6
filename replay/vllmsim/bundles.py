"""The bundle that makes ``TTLScheduler`` run a replay policy, as a server would load it.

- ``program-fcfs``: pins off (``PolicyParams.pins=False``): the plugin orders the
  queue by program and pins nothing.
- ``static-ttl``: every call but the last pinned for the same τ: cold start that
  never ends (``k`` beyond any count of records) with ``cold_start_ttl_s = τ``;
  the valve and pin cap as asked.
- ``continuum``: the given bundle's fit, profile and policy (``--valve`` and
  ``--pin-cap`` replace the policy's, as the fast backend applies them), or a
  cold-start bundle (no fit, default policy). Either way the plugin prices a miss
  in steps of its engine's ``max_num_batched_tokens`` (:func:`ttlctl.bundle.policy_from`),
  as the fast backend does with or without a bundle, so one bundle serves engines of
  any budget.
- ``vllm``, ``unlimited-kv``: no bundle (vLLM's own scheduler).

Bundles are sealed and checked by :func:`ttlctl.bundle_make.build` like any other; the
plugin reads them from a file (``TTLCTL_BUNDLE``).
"""

from __future__ import annotations

from dataclasses import replace

from fitting.fit_doc import FitDoc
from fitting.policy_params import PolicyParams
from profiles.cost import CostModel, ProfileCostModel
from profiles.schema import ProfileDoc
from replay.policies import PolicySpec
from replay.policies.simple import STATIC_TTL_VALVE
from replay.vllmsim.backend import BackendError
from ttlctl import __version__, bundle_doc, bundle_make

#: fixed, so that a replay's bundle (and everything after it) is the same every run
CREATED = "1970-01-01T00:00:00+00:00"
#: more records than any replay sees: the static TTL's cold start never ends
NEVER = 2**62


def _profile(cost: CostModel, name: str) -> ProfileDoc:
    if not isinstance(cost, ProfileCostModel):
        raise BackendError(f"--backend vllm runs {name} from a profile-priced cost model")
    return cost.profile.to_json()


def _seal(fit: FitDoc, profile: ProfileDoc, params: PolicyParams, policy: str) -> bundle_doc.Bundle:
    return bundle_make.build(
        fit,
        profile,
        params,
        created=CREATED,
        ttlctl_version=__version__,
        provenance={"made_by": f"ttlctl replay --backend vllm ({policy})"},
    )


def bundle_for(spec: PolicySpec, cost: CostModel) -> bundle_doc.Bundle | None:
    """The sealed bundle ``TTLScheduler`` runs ``spec`` with; None: vLLM's own scheduler."""
    name = spec.name
    if name in ("vllm", "unlimited-kv"):
        return None
    if name == "program-fcfs":
        return _seal(bundle_make.empty_fit(), _profile(cost, name), PolicyParams(pins=False), name)
    if name == "static-ttl":
        params = PolicyParams(
            k=NEVER,
            cold_start_ttl_s=spec.ttl_s,
            valve=spec.valve or STATIC_TTL_VALVE,
            pin_cap=spec.pin_cap if spec.pin_cap is not None else 1.0,
        )
        return _seal(bundle_make.empty_fit(), _profile(cost, name), params, name)
    if name == "continuum":
        if spec.bundle is None:
            profile = _profile(cost, name)
            fit = bundle_make.empty_fit()
            params = PolicyParams()
        else:
            fit, profile = spec.bundle["fit"], spec.bundle["profile"]
            params = PolicyParams.from_json(spec.bundle["policy"])
        if spec.valve is not None:
            params = replace(params, valve=spec.valve)
        if spec.pin_cap is not None:
            params = replace(params, pin_cap=spec.pin_cap)
        return _seal(fit, profile, params, name)
    raise BackendError(f"policy {name} does not map onto vLLM's scheduler")
