"""The timings of :mod:`profiles.measure_vllm` fitted into a profile
(:func:`fitted_profile`): decode as ``step + per_seq·seqs + per_kv_token·kv``
(:func:`profiles.fitmath.fit_decode`), prefill on its steps
(:func:`profiles.fitmath.fit_prefill_steps`), each context's measured total compared with
what the replay charges for the same steps, and ``source``: how it was measured (the engine,
its version and flags, the timing, every point and fit error).
"""

from __future__ import annotations

import math
from typing import Any

from profiles import fitmath, models, vllm_plan
from profiles.schema import Decode, Prefill, Profile, Reload
from profiles.vllm_checks import installed_vllm
from profiles.vllm_plan import Plan, VllmMeasureError


def fitted_profile(
    name: str,
    config: dict[str, Any],
    plan: Plan,
    measured: dict[str, Any],
    reload: Reload,
    reload_notes: dict[str, Any],
    repeats: int,
    seed: int,
) -> Profile:
    """Fit the timings and assemble the profile."""
    dpoints = measured["decode"]
    dfit = fitmath.fit_decode(
        [p[0] for p in dpoints], [p[1] for p in dpoints], [p[2] for p in dpoints]
    )
    decode = Decode(dfit.step_s, dfit.per_seq_s, dfit.per_kv_token_s)
    steps = measured["steps"]
    qfit = fitmath.fit_prefill_steps(
        [s[0] for s in steps], [s[1] for s in steps], [s[2] for s in steps], decode.step_s
    )
    for v in (qfit.a, qfit.b, qfit.q, decode.step_s, decode.per_seq_s, decode.per_kv_token_s):
        if not math.isfinite(v):
            raise VllmMeasureError(f"{name}: the fit gave a non-finite coefficient ({v})")
    flags = measured["flags"]
    points = measured["points"]
    fitted = Profile(
        name=f"{name}-{plan.kind}",
        device=measured["device"],
        model=name,
        kv_bytes_per_token=int(measured["kv_bytes"]),
        max_context=models.max_context(config),
        prefill=Prefill(qfit.a, qfit.b, qfit.q, tuple(points), includes_step=False),
        reload=reload,
        decode=decode,
    )
    priced = [fitted.rebuild_prefill_s(c, flags["max_num_batched_tokens"]) for c, _ in points]
    errors = [p - s for p, (_, s) in zip(priced, points, strict=True)]
    version, dist = installed_vllm()
    source: dict[str, Any] = {
        "kind": "measured",
        "engine": "vllm",
        "vllm": version,
        "vllm_distribution": dist,
        "device_kind": plan.kind,
        "cpu_profile": plan.kind == "cpu",
        "how": "profiles/measure_vllm.py",
        "flags": flags,
        "torch": measured["torch"],
        "threads": measured["threads"],
        "repeats": repeats,
        "seed": seed,
        "weights": "random (vLLM load_format=dummy, from config.json)",
        "parameters": plan.parameters,
        "timing": "engine steps in process (EngineCore.step_fn + post_step, synchronous "
        "scheduling), perf_counter around each step only; prefill: one request of fresh "
        "random token ids per context, prefix cache emptied before each, median per step "
        "over repeats; decode: median of steady decode steps",
        "prefill_model": "a prefill-only step of chunk tokens at context ctx costs "
        "a + b·chunk + q·((ctx+chunk)² − ctx²) + decode.step_s (profiles/cost.py); fitted on "
        "the steps; prefill.points are the measured totals per context",
        "prefill_steps": [[ctx, n, s] for ctx, n, s in steps],
        "prefill_priced": [[c, p] for (c, _), p in zip(points, priced, strict=True)],
        "prefix_cache_hit_tokens": measured["cached_tokens_seen"],
        "decode_points": [[b, kv, s] for b, kv, s in dpoints],
        "decode_timing": f"{vllm_plan.DECODE_STEPS} steps after "
        f"{vllm_plan.DECODE_WARM_STEPS} warm-up steps; kv_tokens = the batch's computed "
        "tokens before each step (mean)",
        "kv_bytes_per_token_from": "vLLM's KV cache spec (page bytes × layers / block size)",
        "kv_bytes_per_token_config": plan.kv_bytes_config,
        "reload": reload_notes["reload"],
        "reload_points": reload_notes["reload_points"],
        "fit": {
            "prefill_max_rel_error": max(
                abs(e) / s for e, (_, s) in zip(errors, points, strict=True)
            ),
            "prefill_step_max_rel_error": qfit.max_rel_error,
            "decode_max_rel_error": dfit.max_rel_error,
            "reload_max_rel_error": reload_notes["reload_max_rel_error"],
        },
    }
    rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
    return Profile(
        name=fitted.name,
        device=fitted.device,
        model=name,
        kv_bytes_per_token=fitted.kv_bytes_per_token,
        max_context=fitted.max_context,
        prefill=Prefill(qfit.a, qfit.b, qfit.q, tuple(points), rmse, includes_step=False),
        reload=reload,
        decode=decode,
        source=source,
    )
