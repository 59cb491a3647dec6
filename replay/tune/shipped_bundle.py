"""The bundle a study ships: the fit, the profile, the policy the guard chose (from the
study's summary), where they came from, and the shipped fleet's ``router`` section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fitting.eta import fitted as eta_fitted
from fitting.fit_doc import FitDoc
from fitting.policy_params import PolicyParams
from profiles.schema import ProfileDoc
from replay.tune.summary import provenance_of
from ttlctl import bundle_doc, bundle_make


def tuned_bundle(
    fit: FitDoc, profile: ProfileDoc, result: dict[str, Any], sources: bundle_doc.Provenance
) -> bundle_doc.Bundle:
    """The bundle a study ships: the fit, the profile, the policy the guard chose, and
    where they came from (the inputs, the fit's trace, η fitted, the tuning)."""
    return bundle_make.assemble(
        fit,
        profile,
        PolicyParams.from_json(result["shipped"]["policy"]),
        {
            **sources,
            "trace_fitted": fit.get("input", {}),
            "eta_fitted": eta_fitted(fit),
            "tuning": provenance_of(result),
        },
        router=router_section(result["shipped"].get("router")),
    )


#: the fleet record's keys kept in the tuning's record only, not the bundle's router section
TUNING_ONLY = frozenset(("worker_urls", "prefix_credit"))


def router_section(router: Mapping[str, Any] | None) -> bundle_doc.RouterDoc | None:
    """The bundle's ``router`` section from the shipped fleet's record: the router and
    its settings, what ``bundle query --as vllm-router`` prints as the router's flags,
    and the replicas. The replicas' URLs (``--worker-urls``) and the clients' prefix credit
    (``--no-prefix-credit``) stay in the tuning's record (tune.json, the bundle's
    ``provenance.tuning``): vllm-router is given the URLs apart from those flags, by whoever
    starts the fleet, the credit is the clients' (no flag of the router's), and a refit
    carries this section on."""
    if router is None:
        return None
    kept = {k: v for k, v in router.items() if k not in TUNING_ONLY}
    return kept  # type: ignore[return-value]
