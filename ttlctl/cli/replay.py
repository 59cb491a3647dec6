"""``ttlctl replay``: agent programs through the simulated engine under each policy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer
from rich.table import Table

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from ttlctl import __version__
from ttlctl import bundle as bundle_mod
from ttlctl.cli.kit import UserError, err, out, print_warning, user_errors
from ttlctl.jsonio import file_sha256, write_json

if TYPE_CHECKING:  # types only: the replay libraries are imported when the command runs
    from replay.figures import PolicyResult, ReplayDoc


def replay(
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet).")],
    policy: Annotated[
        list[str],
        typer.Option(
            "--policy",
            help="vllm, program-fcfs, static-ttl, continuum, infercept, autellix, and the "
            "evaluation-only bounds oracle and unlimited-kv; repeat it, or give 'all'.",
        ),
    ],
    bundle: Annotated[
        Path | None, typer.Option(help="Policy bundle for continuum (else: cold start).")
    ] = None,
    profile: Annotated[
        str, typer.Option(help="Profile (file or shipped name) that prices every step.")
    ] = "llama-3.1-8b-h100",
    jps: Annotated[
        float | None,
        typer.Option(help="Programs started per second (Poisson) — not vLLM's per-request rate."),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Keep this many programs live (a new one when one ends).")
    ] = None,
    kv_tokens: Annotated[int, typer.Option(help="KV cache size in tokens.")] = 600_000,
    offload_tokens: Annotated[int, typer.Option(help="CPU offload tier in tokens (0: none).")] = 0,
    block_size: Annotated[int, typer.Option(help="KV block size (vLLM's --block-size).")] = 16,
    max_num_batched_tokens: Annotated[int, typer.Option(help="Token budget per step.")] = 8192,
    max_num_seqs: Annotated[int, typer.Option(help="Most requests running at once.")] = 256,
    max_model_len: Annotated[
        int, typer.Option(help="Longest request the engine accepts.")
    ] = 131072,
    valve: Annotated[
        str | None, typer.Option(help="Pressure valve of the TTL policies: head or stall-only.")
    ] = None,
    pin_cap: Annotated[
        float | None, typer.Option(help="Largest fraction of KV pins may hold.")
    ] = None,
    ttl: Annotated[float, typer.Option(help="The TTL (s) of static-ttl.")] = 2.0,
    seed: Annotated[int, typer.Option(help="Seed of the --jps arrivals.")] = 0,
    truncate: Annotated[
        bool, typer.Option(help="Clip prompts that do not fit instead of rejecting the call.")
    ] = False,
    check: Annotated[
        bool, typer.Option(help="Check the simulator's invariants every step.")
    ] = False,
    per_token: Annotated[
        bool, typer.Option(help="Step one decode token at a time (slow; for validation).")
    ] = False,
    no_timing: Annotated[
        bool, typer.Option(help="Leave wall_s and sim_calls_per_s null (byte-identical JSON).")
    ] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the results as JSON here ('-': stdout).")
    ] = None,
    live: Annotated[
        str | None,
        typer.Option(
            help="Drive the vLLM server at this URL instead of the simulator; one --policy "
            "names what it runs (vllm: stock; continuum: `ttlctl serve` with a bundle)."
        ),
    ] = None,
    idle_gap_cap: Annotated[
        float | None,
        typer.Option(
            "--trace-idle-gap-cap-seconds", help="Cap every recorded pause (AIPerf's flag)."
        ),
    ] = None,
    save_result: Annotated[
        bool,
        typer.Option(
            "--save-result",
            help="With --live: write vLLM's benchmark result JSON, and per-call records "
            "shaped like AIPerf's profile_export.jsonl next to it.",
        ),
    ] = False,
    result_dir: Annotated[
        Path | None, typer.Option(help="Folder of --save-result (default: here).")
    ] = None,
    label: Annotated[
        str | None, typer.Option(help="Prefix of --save-result's file (default: ttlctl-POLICY).")
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            help="Simulator: fast (ttlctl's) or vllm (the installed vLLM's own scheduler and "
            "KV cache manager, in process; vllm, program-fcfs, static-ttl, continuum, "
            "unlimited-kv)."
        ),
    ] = "fast",
    async_scheduling: Annotated[
        bool,
        typer.Option(
            "--async-scheduling",
            help="With --backend vllm: vLLM's async scheduling (step N+1 is scheduled "
            "before step N's output is applied).",
        ),
    ] = False,
) -> None:
    """Replay the trace's programs in closed loop (next call = finish + recorded pause)."""
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from replay.live import cap_pauses, live_results
    from replay.policies import PolicySpec
    from replay.policy_runs import Load, expand, run_all
    from replay.scheduler import SimSchedulerConfig
    from replay.sim import ReplayConfig, SimulationError
    from replay.vllmsim.backend import UNMAPPED, check_request, runner
    from replay.workload import load

    with user_errors():
        if jps is not None and concurrency is not None:
            raise UserError("give --jps or --concurrency, not both")
        if jps is not None and jps <= 0:
            raise UserError("--jps must be positive")
        if concurrency is not None and concurrency <= 0:
            raise UserError("--concurrency must be positive")
        names = [n.strip() for p in policy for n in p.split(",") if n.strip()]
        every = names == ["all"]
        names = expand(names)
        if every and backend == "vllm":  # all: the policies vLLM's scheduler runs
            names = [n for n in names if n not in UNMAPPED]
        engine = SimSchedulerConfig(
            kv_tokens=kv_tokens,
            block_size=block_size,
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            fast=not per_token,
        )
        if valve is not None and valve not in ("head", "stall-only"):
            raise UserError(f"--valve must be head or stall-only, got {valve!r}")
        if pin_cap is not None and not 0 < pin_cap <= 1:
            raise UserError("--pin-cap must be in (0, 1]")
        vllm_version = check_request(
            backend,
            names,
            async_scheduling=async_scheduling,
            offload_tokens=offload_tokens,
            fast_only={"--live": live is not None, "--check": check, "--per-token": per_token},
        )
        bundle_doc = bundle_mod.read(bundle) if bundle is not None else None
        prof, prof_path = resolve(profile)
        workload = cap_pauses(load(trace), idle_gap_cap)
        if not workload.programs:
            raise UserError(f"{trace}: no programs to replay")
        config = ReplayConfig(
            engine=engine, offload_tokens=offload_tokens, truncate=truncate, check=check
        )
        specs = [
            PolicySpec(n, bundle=bundle_doc, ttl_s=ttl, valve=valve, pin_cap=pin_cap) for n in names
        ]
        with err.status("replaying…") as status:

            def progress(name: str, done: int, total: int) -> None:
                status.update(f"replaying: {name} ({done + 1}/{total})")

            def live_progress(done: int, total: int) -> None:
                status.update(f"replaying live: {done}/{total} calls")

            results: list[PolicyResult]
            try:
                if live is not None:
                    # the live side writes the same keys (replay/live.py), untyped for now
                    results = cast(
                        "list[PolicyResult]",
                        live_results(
                            live,
                            workload,
                            names,
                            jps=jps,
                            concurrency=concurrency,
                            seed=seed,
                            save_result=save_result,
                            result_dir=result_dir,
                            label=label,
                            progress=live_progress,
                            warn=print_warning,
                        ),
                    )
                else:
                    results = run_all(
                        workload,
                        specs,
                        ProfileCostModel(prof),
                        config,
                        Load(jps=jps, concurrency=concurrency, seed=seed),
                        timed=not no_timing,
                        progress=progress,
                        runner=runner(backend, async_scheduling=async_scheduling),
                    )
            except SimulationError as exc:  # an invariant broke: say so, in one line
                raise UserError(f"simulation failed: {exc}") from None
        doc: ReplayDoc = {
            "ttlctl_version": __version__,
            "backend": None if live is not None else backend,
            "vllm_version": vllm_version,
            "async_scheduling": async_scheduling,
            "trace": {
                "path": str(trace),
                "sha256": file_sha256(trace),
                "programs": len(workload.programs),
                "calls": workload.calls,
            },
            "profile": {
                "name": prof.name,
                "path": str(prof_path),
                "sha256": file_sha256(prof_path),
            },
            "bundle": None
            if bundle is None or bundle_doc is None
            else {"path": str(bundle), "sha256": bundle_doc["sha256"]},
            "config": {
                "engine": {k: getattr(engine, k) for k in engine.__dataclass_fields__},
                "offload_tokens": offload_tokens,
                "jps": jps,
                "concurrency": concurrency,
                "seed": seed,
                "truncate": truncate,
                "valve": valve,
                "pin_cap": pin_cap,
                "static_ttl_s": ttl,
                "live": live,
                "trace_idle_gap_cap_seconds": idle_gap_cap,
            },
            "results": results,
        }
        if json_out is not None:
            if str(json_out) == "-":
                sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
                return
            write_json(doc, json_out)
    show(results, workload.calls)
    if json_out is not None:
        err.print(f"wrote {json_out}")


def _f(value: Any, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def show(results: list[PolicyResult], calls: int) -> None:
    table = Table(title="replay: mean JCT and the share of the vLLM → unlimited-KV gap closed")
    for col in (
        "policy",
        "programs",
        "calls",
        "JCT mean",
        "JCT p50",
        "JCT p95",
        "TTFT mean",
        "prefix hits",
        "preempt",
        "pinned tok·s",
        "gap closed",
        "sim calls/s",
    ):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for r in results:
        name = r["policy"] + (" *" if r.get("evaluation_only") else "")
        table.add_row(
            name,
            f"{r['programs']:,}",
            f"{r['llm_calls']:,}",
            _f(r["jct_mean_s"], ".2f"),
            _f(r["jct_p50_s"], ".2f"),
            _f(r["jct_p95_s"], ".2f"),
            _f(r["ttft_mean_s"], ".3f"),
            "—" if r["prefix_hit_rate"] is None else f"{r['prefix_hit_rate']:.0%}",
            _f(r["preemptions"], ","),
            _f(r["pinned_token_seconds"], ",.0f"),
            "—" if r.get("gap_closed") is None else f"{r['gap_closed']:.0%}",
            _f(r.get("sim_calls_per_s"), ",.0f"),
        )
    out.print(table)
    out.print("* evaluation only: reads what no engine can know, or has memory no engine has")
    rejected = max((r["rejected_calls"] for r in results), default=0)
    if rejected:
        out.print(
            f"[yellow]{rejected:,} of {calls:,} calls rejected (longer than the model or "
            "the KV cache): their programs stop there; --truncate clips them instead[/]"
        )
