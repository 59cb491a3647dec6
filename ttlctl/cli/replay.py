"""``ttlctl replay``: agent programs through the simulated engine under each policy."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli import render
from ttlctl.cli.kit import (
    UserError,
    check_format,
    check_outputs,
    err,
    given,
    out,
    print_warning,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import (
    BACKEND,
    BLOCK_SIZE,
    CLIENT_TAGS_DEFAULT,
    KV_TOKENS,
    MAX_MODEL_LEN,
    MAX_NUM_BATCHED_TOKENS,
    MAX_NUM_SEQS,
    OFFLOAD_TOKENS,
    AsyncScheduling,
    Backend,
    BlockSize,
    ClientTags,
    Concurrency,
    ContinuumBundle,
    IdleGapCap,
    Jps,
    JsonTo,
    KvTokens,
    Label,
    LongPrefillAdaptive,
    LongPrefillTokenThreshold,
    MaxModelLen,
    MaxNumBatchedTokens,
    MaxNumSeqs,
    OffloadTokens,
    Profile,
    ResultDir,
    SaveResult,
    Seed,
    Trace,
    Truncate,
    Watermark,
)
from ttlctl.cli.router_options import (
    BalanceAbsThreshold,
    BalanceRelThreshold,
    CacheThreshold,
    FleetReplicas,
    KvAwareSessionAffinityTtlSecs,
    NoPrefixCredit,
    PinQueueBound,
    ProgramSchedulingCalibration,
    ProgramSchedulingConfigJson,
    RouterName,
    RouterTemperature,
    WorkerUrls,
)
from ttlctl.cli.stage_bar import StageBar


@dataclass(frozen=True, slots=True)
class ReplayBar(StageBar):
    """The replay's bar on a terminal: the policy replaying (i/n, or live) and its calls
    done."""

    def policy(self, name: str, done: int, total: int) -> None:
        if done >= total:  # every policy replayed
            return
        self.bar.update(
            self.task,
            completed=0,
            total=None,
            description=f"{name} ({done + 1}/{total})",
            refresh=True,  # drawn at once: a short replay ends before the next refresh
        )

    def calls(self, done: int, total: int) -> None:
        # drawn at once at a policy's end; between, at the bar's own refresh rate
        self.bar.update(self.task, completed=done, total=total, refresh=done == total)

    def live(self, name: str, done: int, total: int) -> None:
        self.bar.update(self.task, completed=done, total=total, description=f"{name} (live)")


Policies = Annotated[
    list[str],
    typer.Option(
        "--policy",
        help="vllm, program-fcfs, static-ttl, continuum, infercept, autellix, and the "
        "evaluation-only bounds oracle and unlimited-kv; repeat it, or give 'all'.",
    ),
]


def replay(
    ctx: typer.Context,
    trace: Trace,
    policy: Policies,
    bundle: ContinuumBundle = None,
    profile: Profile = "llama-3.1-8b-h100",
    jps: Jps = None,
    concurrency: Concurrency = None,
    kv_tokens: KvTokens = KV_TOKENS,
    offload_tokens: OffloadTokens = OFFLOAD_TOKENS,
    block_size: BlockSize = BLOCK_SIZE,
    max_num_batched_tokens: MaxNumBatchedTokens = MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: MaxNumSeqs = MAX_NUM_SEQS,
    max_model_len: MaxModelLen = MAX_MODEL_LEN,
    long_prefill_token_threshold: LongPrefillTokenThreshold = 0,
    long_prefill_token_threshold_adaptive: LongPrefillAdaptive = False,
    watermark: Watermark = 0.0,
    valve: Annotated[
        str | None,
        typer.Option(
            help="Pressure valve of the TTL policies, head or stall-only; unset: continuum "
            "takes its bundle's (stall-only without one), static-ttl head, oracle stall-only; "
            "infercept always uses head."
        ),
    ] = None,
    pin_cap: Annotated[
        float | None,
        typer.Option(
            help="Largest fraction of KV pins may hold, in (0, 1], for continuum (over its "
            "bundle's), static-ttl and oracle; unset: continuum takes its bundle's, the others "
            "none. infercept never has one."
        ),
    ] = None,
    ttl: Annotated[
        float, typer.Option("--ttl-seconds", min=0.0, help="The TTL (s) of static-ttl.")
    ] = 2.0,
    seed: Seed = 0,
    truncate: Truncate = False,
    check: Annotated[
        bool, typer.Option(help="Check the simulator's invariants every step.")
    ] = False,
    per_token: Annotated[
        bool, typer.Option(help="Step one decode token at a time (slow; for validation).")
    ] = False,
    timing: Annotated[
        bool,
        typer.Option(
            "--timing/--no-timing",
            help="Measure wall_s and sim_calls_per_s; --no-timing leaves them null "
            "(byte-identical JSON).",
        ),
    ] = True,
    json_out: JsonTo = None,
    live: Annotated[
        str | None,
        typer.Option(
            help="Drive the vLLM server at this URL instead of the simulator; one --policy "
            "names what it runs (vllm: stock; continuum: `ttlctl serve` with a bundle)."
        ),
    ] = None,
    idle_gap_cap: IdleGapCap = None,
    save_result: SaveResult = False,
    result_dir: ResultDir = None,
    label: Label = None,
    backend: Backend = BACKEND,
    async_scheduling: AsyncScheduling = False,
    client_tags: ClientTags = CLIENT_TAGS_DEFAULT,
    replicas: FleetReplicas = None,
    router: RouterName = None,
    worker_urls: WorkerUrls = None,
    cache_threshold: CacheThreshold = None,
    balance_abs_threshold: BalanceAbsThreshold = None,
    balance_rel_threshold: BalanceRelThreshold = None,
    kv_aware_session_affinity_ttl_secs: KvAwareSessionAffinityTtlSecs = None,
    router_temperature: RouterTemperature = None,
    no_prefix_credit: NoPrefixCredit = False,
    pin_queue_bound: PinQueueBound = None,
    program_scheduling_config_json: ProgramSchedulingConfigJson = None,
    program_scheduling_calibration: ProgramSchedulingCalibration = None,
) -> None:
    """Replay the trace's programs in closed loop (next call = finish + recorded pause)."""
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.fleet.asked import router_settings
    from replay.loads import one_load
    from replay.replay_run import ReplayRequest, replay_doc
    from replay.scheduler import SimSchedulerConfig

    with user_errors():
        check_outputs(
            streams=(json_out,),
            folders=(result_dir if save_result else None,),
            inputs=(trace, bundle, Path(profile)),
        )
        check_format(json_out, "JSON", "--json")
        if router is not None and len(router) > 1:
            raise UserError(
                f"--router: replay takes one router, got {len(router)} "
                f"({', '.join(router)}); `ttlctl tune` searches over several"
            )
        request = ReplayRequest(
            trace=trace,
            policies=policy,
            load=one_load(jps, concurrency, seed),
            engine=SimSchedulerConfig(
                kv_tokens=kv_tokens,
                block_size=block_size,
                max_num_batched_tokens=max_num_batched_tokens,
                max_num_seqs=max_num_seqs,
                max_model_len=max_model_len,
                long_prefill_token_threshold=long_prefill_token_threshold,
                long_prefill_token_threshold_adaptive=long_prefill_token_threshold_adaptive,
                watermark=watermark,
                fast=not per_token,
            ),
            profile=profile,
            bundle=bundle,
            offload_tokens=offload_tokens,
            truncate=truncate,
            check=check,
            per_token=per_token,
            valve=valve,
            pin_cap=pin_cap,
            ttl_s=ttl,
            timed=timing,
            live=live,
            idle_gap_cap_s=idle_gap_cap,
            save_result=save_result,
            result_dir=result_dir,
            label=label,
            backend=backend,
            async_scheduling=async_scheduling,
            client_tags=client_tags,
            replicas=replicas,
            worker_urls=tuple(worker_urls) if worker_urls else None,
            prefix_credit=not no_prefix_credit,
            router=router_settings(
                router[0] if router else None,
                replicas=replicas,
                cache_threshold=cache_threshold,
                balance_abs_threshold=balance_abs_threshold,
                balance_rel_threshold=balance_rel_threshold,
                kv_aware_session_affinity_ttl_secs=kv_aware_session_affinity_ttl_secs,
                router_temperature=router_temperature,
                pin_queue_bound=pin_queue_bound,
                program_scheduling_config_json=program_scheduling_config_json,
                program_scheduling_calibration=program_scheduling_calibration,
                trace=trace,
            ),
            policy_options=frozenset(
                flag
                for flag, value in (
                    ("--bundle", bundle),
                    ("--valve", valve),
                    ("--pin-cap", pin_cap),
                    ("--ttl-seconds", given(ctx, ttl=ttl)["ttl"]),
                )
                if value is not None
            ),
        )
        shown = ReplayBar.make("replaying")
        with shown.bar:
            doc = replay_doc(
                request,
                progress=shown.policy,
                calls_done=shown.calls,
                live_progress=shown.live,
                warn=print_warning,
            )
        if json_out is not None and write_doc(doc, json_out):
            return
    render.replay_table(out, doc["results"], doc["trace"]["calls"])
    if doc.get("fleet"):
        render.fleet_tables(out, doc["results"])
    if json_out is not None:
        err.print(f"wrote {json_out}")
