"""What the guard's verdict does not say by itself: the plain warnings ``ttlctl tune``
prints beside it (tune.json's ``guard.caveats``).

- **within noise**: the shipped policy's win over the baseline (its difference from it,
  when shipped without a win under ``--force``) is no larger than two
  standard errors of the paired per-replay difference (``paired``'s ``within_noise``), or
  there was one held-back replay, so no noise could be measured;
- **cold start only**: the shipped policy pins, but its fit holds no more than K pauses
  in all, so every τ* it gives (for every tool) is the cold-start one (ln B, or the fixed
  ``cold_start_ttl_s``) until the engine has learned more than K pauses online: the
  fitted distributions are not used yet;
- **calls rejected**: the held-back replays rejected calls (longer than the model or the KV
  cache): their programs stopped there, and the JCTs compared are of the programs that ran
  to their end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fitting.fit_doc import FitDoc
from fitting.policy import SOURCE_COLD
from fitting.policy_params import PolicyParams
from profiles.schema import ProfileDoc
from replay.rejected import held_back_line
from ttlctl import bundle

#: the context at which the cold-start check asks the policy (the source of τ* does not
#: depend on it)
PROBE_TOKENS = 32_000


def caveats(
    held: Mapping[str, Any],
    verdict: Mapping[str, Any],
    shipped: PolicyParams,
    fit: FitDoc,
    profile: ProfileDoc,
    *,
    calls: int = 0,
) -> list[str]:
    """The warnings that go with a verdict (empty when there is nothing to say);
    ``calls``: a held-back replay's."""
    out = []
    if held.get("rejected_calls"):
        out.append(held_back_line(held["rejected_calls"], calls))
    noise = _noise(held, verdict)
    if noise:
        out.append(noise)
    if shipped.pins:
        cold = _cold_start(shipped, fit, profile)
        if cold:
            out.append(cold)
    return out


def _noise(held: Mapping[str, Any], verdict: Mapping[str, Any]) -> str:
    if verdict["shipped"] != "tuned":
        return ""
    base = str(verdict["baseline"]).replace("-", "_")
    name = {"vllm": "stock vLLM", "never_pin": "the never-pin bundle"}[base]
    gain = held[f"gain_vs_{base}"]
    within, sem = held[f"within_noise_vs_{base}"], held[f"diff_sem_vs_{base}_s"]
    diff = held[f"diff_vs_{base}_s"]
    # shipped without a win (--force): a loss is not called a gain
    versus = f"the gain over {name}" if verdict["beats_baseline"] else f"the difference from {name}"
    if sem is None:
        return (
            f"{versus} ({gain:.3f}x) comes from one held-back replay: its noise is "
            "unknown; give --holdout-seeds 2 or more to measure it"
        )
    if not within:
        return ""
    return (
        f"{versus} ({gain:.3f}x, Δ {diff:+,.2f} ± {sem:,.2f} s per replay) is "
        "within the replay's noise (no more than two standard errors): it may not hold on "
        "real traffic; more --holdout-seeds measure it better, --min-gain requires a margin"
    )


def _cold_start(params: PolicyParams, fit: FitDoc, profile: ProfileDoc) -> str:
    policy = bundle.policy_from({"fit": fit, "profile": profile, "policy": params.to_json()})
    tools = sorted(fit.get("tools", {}))
    sources = {policy.decide(t, PROBE_TOKENS).source for t in [*tools, None]}
    if sources != {SOURCE_COLD}:
        return ""
    everything = fit.get("global")
    pauses = 0 if everything is None else everything["n"]
    how = (
        f"the fixed {params.cold_start_ttl_s:.1f} s"
        if params.cold_start_ttl_s is not None
        else "ln B"
    )
    return (
        f"every τ* comes from cold start: the fit holds {pauses} pause(s), not more than "
        f"K = {params.k}, so for every tool ({len(tools)}) the engine pins for {how} until "
        "it has learned more than K pauses online; the fitted distributions are not used yet"
    )
