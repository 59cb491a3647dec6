"""One policy on one workload through vLLM's own scheduler: the vLLM backend's entry point.

:func:`run` returns the :class:`~replay.vllmsim.outcome.Outcome` with every call's
record (admitted step, prefix hit, preemptions, finish); :class:`VllmRunner` is the
``run_one`` of ``ttlctl replay --backend vllm`` (the fast backend's result record,
from the same :func:`replay.figures.summarize`, plus what names the backend).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from profiles.cost import CostModel
from replay.figures import PolicyResult, summarize
from replay.policies import BOUNDS, PolicySpec
from replay.policy_runs import Load, prepare, sized_engine
from replay.progress import CallsDone
from replay.sim import ReplayConfig
from replay.vllmsim.backend import check, check_outputs, vllm_version
from replay.vllmsim.build import build, quiet_vllm
from replay.vllmsim.bundles import bundle_for
from replay.vllmsim.harness import Harness, Observer
from replay.vllmsim.outcome import Outcome
from replay.workload import Workload
from ttlctl import bundle_make


def run(
    workload: Workload,
    spec: PolicySpec,
    cost: CostModel,
    config: ReplayConfig,
    timing: Load,
    *,
    async_scheduling: bool = False,
    untagged_last: frozenset[str] = frozenset(),
    observer: Observer | None = None,
    timed_calls: bool = False,
    progress: CallsDone | None = None,
    plugin_env: Mapping[str, str] | None = None,
) -> Outcome:
    """Replay ``workload`` under ``spec`` on vLLM's scheduler (see :mod:`replay.vllmsim`).

    ``untagged_last``: programs whose last call does not say it is the last (the
    plugin may pin it, and the program never comes back); ``observer``: called after
    every ``schedule()`` and ``update_from_output()``; ``timed_calls``: measure the
    wall time of each of those calls (``Outcome.timings``); ``progress``: told the calls
    done now and then (:mod:`replay.progress`); ``plugin_env``: the plugin's server settings
    (tests: a small program book, a bundle checked at once), which a replay otherwise sets
    to their defaults whatever the shell holds (:func:`~replay.vllmsim.build.build`).
    """
    check(
        "vllm",
        [spec.name],
        async_scheduling=async_scheduling,
        offload_tokens=config.offload_tokens,
    )
    check_outputs(workload)
    work = prepare(workload, timing)
    cfg = replace(config, concurrency=timing.concurrency)
    cfg = replace(cfg, engine=sized_engine(spec, work, cfg, cfg.engine))
    doc = bundle_for(spec, cost)
    with tempfile.TemporaryDirectory(prefix="ttlctl-vllmsim-") as folder, quiet_vllm():
        path = None
        if doc is not None:
            path = Path(folder) / "bundle.json"
            bundle_make.write(doc, path)
        built = build(cfg.engine, async_scheduling=async_scheduling, bundle=path, env=plugin_env)
        harness = Harness(
            built,
            work,
            cost,
            cfg,
            async_scheduling=async_scheduling,
            plugin=doc is not None,
            untagged_last=untagged_last,
            observer=observer,
            timed=timed_calls,
            progress=progress,
        )
        start = time.perf_counter()
        outcome = harness.run()
        outcome.wall_s = time.perf_counter() - start
    outcome.vllm_version = vllm_version()
    return outcome


@dataclass(frozen=True, slots=True)
class VllmRunner:
    """``run_one`` for ``--backend vllm``: the result record of one policy."""

    async_scheduling: bool = False

    def __call__(
        self,
        workload: Workload,
        spec: PolicySpec,
        cost: CostModel,
        config: ReplayConfig,
        timing: Load,
        *,
        timed: bool = True,
        progress: CallsDone | None = None,
    ) -> PolicyResult:
        outcome = run(
            workload,
            spec,
            cost,
            config,
            timing,
            async_scheduling=self.async_scheduling,
            progress=progress,
        )
        return record(outcome, spec.name, timed=timed)


def record(outcome: Outcome, policy: str, *, timed: bool = True) -> PolicyResult:
    """The fast backend's result record for ``outcome``, plus the backend's names."""
    wall_s = outcome.wall_s if timed else None
    result = summarize(outcome, policy, evaluation_only=policy in BOUNDS, wall_s=wall_s)
    result["backend"] = "vllm"
    result["async_scheduling"] = outcome.async_scheduling
    result["scheduler"] = outcome.scheduler
    result["aborted_calls"] = outcome.aborted_calls
    result["plugin_counters"] = dict(outcome.engine.plugin_counters)
    return result
