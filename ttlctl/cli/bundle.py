"""``ttlctl bundle build|inspect|verify|query|rollback``: thin commands over :mod:`ttlctl.bundle`
(and :mod:`ttlctl.bundle_history` for the bundles a command replaced)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from fitting.policy_params import DEFAULT_VALVE
from profiles import profile_read
from ttlctl import bundle, bundle_history, bundle_make, hints, router_flags
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
)
from ttlctl.cli.options import EngineBudget, FitFile, Offload, Profile, QueueDelay
from ttlctl.context_limit import beyond_limit
from ttlctl.nouns import counted
from ttlctl.server import kv_events

app = typer.Typer(
    help="Build, inspect, verify, query and roll back policy bundles.", no_args_is_help=True
)

CONTEXTS = (1_000, 8_000, 32_000, 128_000)


@app.command()
def build(
    fit: FitFile,
    profile: Profile,
    output: Annotated[Path, typer.Option("-o", "--output", help="Bundle to write.")],
    eta: Annotated[
        float | None, typer.Option("--eta", help="η; default: the fit's estimate (1 if none).")
    ] = None,
    k: Annotated[
        int | None,
        typer.Option("--k", help="K: a CDF with more than K records is trusted; default: fit's."),
    ] = None,
    t_window: Annotated[int, typer.Option(help="Queueing delays averaged for T.")] = 100,
    valve: Annotated[
        str,
        typer.Option(help="Pressure valve: stall-only (chosen live) or head (the paper's rule)."),
    ] = DEFAULT_VALVE,
    pin_cap: Annotated[float, typer.Option(help="Largest fraction of KV pins may hold.")] = 1.0,
    cold_start_ttl: Annotated[
        float | None,
        typer.Option(
            "--cold-start-ttl-seconds", help="Fixed τ (s) during cold start instead of ln B."
        ),
    ] = None,
    learn_eta: Annotated[bool, typer.Option(help="Let the engine re-estimate η online.")] = False,
) -> None:
    """Combine a fit, a profile and the policy's parameters into one sealed bundle."""
    with user_errors():
        check_outputs(output, inputs=(fit, Path(profile)))
        check_format(output, "JSON")
        doc = bundle_make.from_files(
            bundle_make.BuildRequest(
                fit=fit,
                profile=profile,
                eta=eta,
                k=k,
                t_window=t_window,
                valve=valve,
                pin_cap=pin_cap,
                cold_start_ttl_s=cold_start_ttl,
                learn_eta=learn_eta,
            )
        )
        bundle_history.replace(doc, output)  # an existing file is kept in its history
    tools = counted(len(doc["fit"]["tools"]), "tool")
    err.print(f"wrote {output} (sha256 {doc['sha256'][:12]}…, {tools})")


@app.command()
def verify(path: Annotated[Path, typer.Argument(help="Bundle to check.")]) -> None:
    """Exit 0 if the bundle is intact and readable by this ttlctl, 2 on any damage."""
    with user_errors():
        doc = bundle.read(path)
    out.print(f"{path}: ok (schema {doc['schema_version']}, sha256 {doc['sha256']})")


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="Bundle to show.")],
    queue_delay: QueueDelay = 0.0,
    offload: Offload = False,
    max_num_batched_tokens: EngineBudget = None,
) -> None:
    """A readable table: tools, samples, median, p90, and τ* at 1k/8k/32k/128k tokens."""
    with user_errors():
        doc = bundle.read(path)
        policy = bundle.policy_from(doc, max_num_batched_tokens)
    render.bundle_table(out, doc, policy, CONTEXTS, queue_delay, offload)
    beyond = beyond_limit(doc["profile"], CONTEXTS)
    if beyond is not None:
        print_warning(beyond)
    _warn_no_host_tier(doc, offload)


@app.command()
def query(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="Bundle.")],
    tool: Annotated[
        str | None, typer.Option("--tool", help="Tool the agent is about to call.")
    ] = None,
    context_tokens: Annotated[
        int | None, typer.Option("--context-tokens", help="KV tokens held.")
    ] = None,
    queue_delay: QueueDelay = 0.0,
    offload: Offload = False,
    as_engine: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Print the answer as another engine's per-request retention hint: dynamo "
            "(nvext.cache_control), sglang (retention_seconds) or trtllm "
            "(kv_cache_retention_config); {} when τ* is 0. Where the engine clamps the "
            "duration (Dynamo: 300–3600 s) a warning gives the TTL it will apply. "
            "vllm-router: the router flags the bundle was tuned with (tune --replicas), "
            "no --tool needed.",
        ),
    ] = None,
    refuse_clamped: Annotated[
        bool,
        typer.Option(
            "--refuse-clamped",
            help="With --as dynamo (the engine that clamps the TTL): exit 2 instead of "
            "warning when the clamp changes τ*.",
        ),
    ] = False,
    max_num_batched_tokens: EngineBudget = None,
) -> None:
    """Print {"ttl_s", "source", "benefit_s"}: how long to keep this request's KV."""
    with user_errors():
        _check_as(as_engine)
    if as_engine == "vllm-router":
        delay_given = given(ctx, queue_delay=queue_delay)["queue_delay"] is not None
        with user_errors():
            per_request = {
                "--tool": tool is not None,
                "--context-tokens": context_tokens is not None,
                "--queue-delay-seconds": delay_given,
                "--offload": offload,
                "--refuse-clamped": refuse_clamped,
                "--max-num-batched-tokens": max_num_batched_tokens is not None,
            }
            extra = [flag for flag, on in per_request.items() if on]
            if extra:
                raise UserError(
                    "--as vllm-router prints the bundle's router flags, not a request's τ*: "
                    f"drop {', '.join(extra)}"
                )
            doc = bundle.read(path)
            args = router_flags.vllm_router_args(
                bundle.router_of(doc, path), profile_read.from_json(doc["profile"])
            )
        # unquoted: the JSON has no spaces, and `$(ttlctl bundle query …)` passes each
        # word as it is (quotes would reach the router)
        sys.stdout.write(" ".join(args) + "\n")
        if "--policy" in args and kv_events.needs_events(args[args.index("--policy") + 1]):
            print_warning(kv_events.deploy_note(bundle.tuned_prefix_credit(doc)))
        return
    with user_errors():
        if tool is None or context_tokens is None:
            raise typer.BadParameter(
                "--tool and --context-tokens are needed (but with --as vllm-router)"
            )
        if context_tokens < 0:
            raise typer.BadParameter("--context-tokens must be >= 0")
        if refuse_clamped and as_engine is None:  # refused rather than ignored
            raise UserError(
                "--refuse-clamped goes with --as ENGINE (an engine's hint, which it may "
                "clamp); the plain answer is τ* itself"
            )
        if refuse_clamped and as_engine is not None and not hints.clamps(as_engine):
            clamping = " or ".join(e for e in hints.SHAPES if hints.clamps(e))
            raise UserError(
                f"--refuse-clamped goes with --as {clamping} (an engine that clamps the TTL); "
                f"--as {as_engine} takes τ* as it is, so nothing would be refused"
            )
        doc = bundle.read(path)
        policy = bundle.policy_from(doc, max_num_batched_tokens)
        decision = policy.decide(tool, context_tokens, offload=offload, queue_delay_s=queue_delay)
        answer = decision.to_json() if as_engine is None else hints.shape(as_engine, decision.ttl_s)
        note = None if as_engine is None else hints.clamped(as_engine, decision.ttl_s)
        if note is not None and refuse_clamped:
            raise UserError(f"--as {as_engine}: {note}")
    beyond = beyond_limit(doc["profile"], (context_tokens,))
    if beyond is not None:
        print_warning(f"--context-tokens {beyond}")
    if note is not None:
        print_warning(note)
    _warn_no_host_tier(doc, offload)
    sys.stdout.write(json.dumps(answer) + "\n")


def _warn_no_host_tier(doc: Mapping[str, Any], offload: bool) -> None:
    """``--offload`` on a bundle whose profile was measured on a CPU: there is no host tier
    there, and the profile's reload is a plain memory copy (``ttlctl profile`` says so)."""
    source = doc["profile"].get("source") if isinstance(doc.get("profile"), Mapping) else None
    if offload and isinstance(source, Mapping) and source.get("cpu_profile") is True:
        print_warning(
            "--offload: the bundle's profile was measured on a CPU, which has no host tier: "
            "a reload is priced at its memory copy, not at a host-to-device copy"
        )


def _check_as(as_engine: str | None) -> None:
    """``--as`` names an engine hint or vllm-router; checked before what the hint needs."""
    if as_engine is None or as_engine == "vllm-router":
        return
    if as_engine not in hints.SHAPES and as_engine not in hints.NOT_BUILT:
        raise UserError(f"--as takes {', '.join(hints.SHAPES)} or vllm-router, not {as_engine!r}")
    hints.shape(as_engine, 0.0)  # an engine without a hint shape: refused, saying why


@app.command()
def rollback(
    path: Annotated[Path, typer.Argument(help="The bundle in service (TTLCTL_BUNDLE).")],
) -> None:
    """Put back the bundle that tune, refit or build last replaced at PATH (atomically).

    The bundles a command replaced are kept in PATH.history/ (the newest five); the newest
    one is restored and leaves the history, so a second rollback goes one further back.
    The bundle taken out of service is kept as PATH.history/rolled-back.json. A server
    watching PATH reloads it. Exit 2 when there is nothing to roll back to.
    """
    with user_errors():
        done = bundle_history.rollback(path)
    doc = done.bundle
    err.print(
        f"rolled {path} back to the bundle created {doc['created']} (sha256 "
        f"{doc['sha256'][:12]}…); {done.left} earlier one(s) left in "
        f"{bundle_history.folder(path)}; a server watching it reloads it",
        highlight=False,
        markup=False,
    )
