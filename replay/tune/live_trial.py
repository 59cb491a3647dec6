"""Live replays: write a candidate bundle over the server's, wait until the server must
serve it (:func:`swap`), then one live run of the trial's programs
(:func:`replay.live.run_live`)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from fitting.policy_params import PolicyParams
from replay.live import run_live
from replay.policy_runs import Load
from replay.tune.context import (
    IncompleteRun,
    LiveTarget,
    TuneContext,
    TuneError,
    load_json,
    shuffled,
)
from ttlctl import bundle_doc, bundle_make
from ttlctl.server import client
from ttlctl.server.client import ServerError
from ttlctl.server.vocab import LOW_IDS


def candidate_bundle(ctx: TuneContext, params: PolicyParams, label: str) -> bundle_doc.Bundle:
    """The sealed bundle a live run serves ``params`` with."""
    return bundle_make.assemble(ctx.fit, ctx.profile, params, {"tuning": {"live_candidate": label}})


def probe_request(live: LiveTarget, timeout_s: float = 300.0) -> None:
    """One short untagged completion (never pinned): its arrival polls the bundle file."""
    body = {
        "model": live.model,
        "prompt": list(range(LOW_IDS, LOW_IDS + 8)),
        "max_tokens": 1,
        "temperature": 0.0,
    }
    url = live.url  # normalised by tune() (from probe())
    try:
        client.text(url, "/v1/completions", body, method="POST", timeout_s=timeout_s)
    except ServerError as exc:
        raise TuneError(f"the request after a bundle swap failed: {exc}") from None


def swap(ctx: TuneContext, params: PolicyParams, label: str) -> dict[str, Any]:
    """Write the candidate bundle over the server's and return once the server serves it.

    The observable: none on the wire. ``ttlctl/engine/counters.py`` exports only the pin
    series; the watcher's reload count (``BundleWatcher.reloads``) stays inside the
    engine process and the server only logs the reload. So this relies on the plugin's
    rule instead (``ttlctl/engine/watch.py``, ``scheduler.py``): it looks at the file's
    mtime/size/inode at most every TTLCTL_BUNDLE_CHECK_S seconds, and only when a request
    arrives or a step runs. The write is atomic (a new inode), so after waiting
    ``max(2 x check_s, 2 s)`` the arrival of one more request must look at the file and
    load it, before that request and everything after it is scheduled. A server started
    with a larger TTLCTL_BUNDLE_CHECK_S than ``check_s`` breaks this: give it.
    """
    live = ctx.live
    assert live is not None
    doc = candidate_bundle(ctx, params, label)
    bundle_make.write(doc, live.bundle)
    written = time.monotonic()
    time.sleep(live.wait_s)
    probe_request(live)
    return {
        "label": label,
        "sha256": doc["sha256"],
        "policy": doc["policy"],
        "waited_s": round(time.monotonic() - written, 3),
    }


def live_replay(ctx: TuneContext, params: PolicyParams, timing: Load, label: str) -> dict[str, Any]:
    """Swap ``params``'s bundle in, then one live run of ``ctx``'s programs (in ``timing``'s
    seeded order); the simulator's result keys, and ``bundle_loaded`` (what :func:`swap` saw)."""
    live = ctx.live
    assert live is not None
    loaded = swap(ctx, params, label)
    try:
        result = run_live(
            live.url,
            shuffled(ctx.replayed(), timing.seed),
            "continuum",
            timing=timing,
            seed=timing.seed,
            timeout_s=live.timeout_s,
            warn=live.warn,
            client_tags=ctx.config.client_tags,
        )
    except ServerError as exc:
        raise TuneError(str(exc)) from None
    where = f"live run of {label} ({load_json(timing)}, seed {timing.seed})"
    failed = result["rejected_calls"] + result["failed_calls"]
    if failed or result["programs_cut_short"]:
        errors = "; ".join(result["server"]["errors"][:2]) or "the run's time limit"
        raise IncompleteRun(
            f"{where}: {failed} call(s) failed, "
            f"{result['programs_cut_short']} program(s) cut short ({errors})"
        )
    if result["jct_mean_s"] is None:
        raise IncompleteRun(f"{where}: no program finished")
    result["bundle_loaded"] = loaded
    return result


def live_brief(result: Mapping[str, Any]) -> dict[str, Any]:
    """What a trial keeps of each live run."""
    keep = ("programs", "llm_calls", "jct_p95_s", "prefix_hit_rate", "preemptions", "pins")
    return {k: result.get(k) for k in keep} | {
        "wall_s": round(float(result["wall_s"]), 3),
        "bundle_sha256": result["bundle_loaded"]["sha256"],
        "waited_s": result["bundle_loaded"]["waited_s"],
    }
