"""``ttlctl profile``: measure through vLLM (in process, or a live server) or list the shipped
profiles; ``--torch`` keeps the old eager-torch timing, labelled as not vLLM."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated

import typer

from profiles import shipped
from profiles.fit_quality import misfits
from profiles.models import load_config
from profiles.router_calibration import calibrate
from profiles.schema import Profile
from profiles.vllm_plan import parse_contexts
from ttlctl.cli import render
from ttlctl.cli.kit import (
    UserError,
    check_format,
    check_outputs,
    err,
    given,
    out,
    print_warning,
    progress_bar,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import MAX_NUM_BATCHED_TOKENS, JsonTo, MaxNumBatchedTokens
from ttlctl.cli.router_options import AsRouter, DecodeThroughputAlpha, ProfileToShow
from ttlctl.jsonio import write_atomic, write_json

#: the one target of ``--as``
ROUTER = "vllm-router"


def profile(
    ctx: typer.Context,
    output: Annotated[
        Path | None,
        typer.Option(
            "-o",
            "--output",
            help=f"profile.json to write (with --profile and --as {ROUTER}: the router's value).",
        ),
    ] = None,
    device: Annotated[
        str, typer.Option(help="auto (what the installed vLLM runs on), cpu or cuda.")
    ] = "auto",
    model: Annotated[
        str,
        typer.Option(
            help="A HF config.json (or its folder) or a preset: "
            "tiny, tiny-55m, llama-3.1-8b, llama-3.1-70b, qwen3-8b."
        ),
    ] = "tiny",
    engine: Annotated[
        str | None, typer.Option(help="Profile a running vLLM server at this URL instead.")
    ] = None,
    contexts: Annotated[
        str | None,
        typer.Option(help="Comma-separated context lengths (default: 1k, 2k, 4k … limit)."),
    ] = None,
    max_context: Annotated[int | None, typer.Option(min=2, help="Largest context to time.")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Timed runs per point (median kept).")] = 3,
    max_num_batched_tokens: MaxNumBatchedTokens = MAX_NUM_BATCHED_TOKENS,
    block_size: Annotated[
        int | None,
        typer.Option(min=1, help="vLLM KV block size (default: vLLM's for the device)."),
    ] = None,
    enforce_eager: Annotated[
        bool | None,
        typer.Option(
            "--enforce-eager/--cuda-graphs",
            help="vLLM without or with CUDA graphs / torch.compile (default: eager on a CPU, "
            "graphs on a GPU).",
        ),
    ] = None,
    dtype: Annotated[
        str | None, typer.Option(help="bfloat16, float16 or float32 (default: the config's).")
    ] = None,
    torch_eager: Annotated[
        bool,
        typer.Option(
            "--torch",
            help="Time Hugging Face transformers in eager torch instead (NOT the vLLM engine "
            "the replay prices; the profile says so).",
        ),
    ] = False,
    list_: Annotated[
        bool, typer.Option("--list", help="Show the shipped profiles and exit.")
    ] = False,
    json_out: JsonTo = None,
    profile_ref: ProfileToShow = None,
    as_target: AsRouter = None,
    decode_throughput_alpha: DecodeThroughputAlpha = None,
) -> None:
    """Measure what prefill, reload and a decode step cost through vLLM on this device (or a
    live vLLM server)."""
    if list_:
        with user_errors():
            # what --list would otherwise drop: a table on stdout where JSON was asked for
            extra = {
                "-o": output,
                "--json": json_out,
                "--engine": engine,
                "--torch": torch_eager or None,
                "--profile": profile_ref,
                "--as": as_target,
                "--decode-throughput-alpha": decode_throughput_alpha,
            }
            _refuse_given(extra, "--list shows the shipped profiles' table and writes nothing")
            render.shipped_table(out)
        return
    with user_errors():
        if as_target is not None and as_target != ROUTER:
            raise UserError(f"--as takes {ROUTER}, not {as_target!r}")
        if decode_throughput_alpha is not None and as_target is None:
            raise UserError(f"--decode-throughput-alpha goes with --as {ROUTER}")
        if profile_ref is not None:
            if as_target is None:
                raise UserError(
                    f"--profile is read with --as {ROUTER} (or replay it: ttlctl replay)"
                )
            if json_out is not None:
                raise UserError(
                    f"--json goes with a measurement; with --profile and --as {ROUTER}, "
                    "-o FILE writes the router's value"
                )
            shown, read = shipped.resolve(profile_ref)
            # -o - is stdout here; -o the profile itself: refused
            check_outputs(streams=(output,), inputs=(read,))
            check_format(output, "JSON")  # the router's value is a JSON object
            _as_router(shown, decode_throughput_alpha, output, read, ref=profile_ref)
            return
    if output is None:
        raise typer.BadParameter("-o/--output is required (or use --list, or --profile with --as)")
    with user_errors():
        if torch_eager:  # vLLM's engine flags, which eager torch would drop without a word
            budget = given(ctx, max_num_batched_tokens=max_num_batched_tokens)
            vllm_only = {
                "--engine": engine,
                "--block-size": block_size,
                ("--enforce-eager" if enforce_eager else "--cuda-graphs"): enforce_eager,
                "--max-num-batched-tokens": budget["max_num_batched_tokens"],
            }
            _refuse_given(
                vllm_only,
                "--torch times Hugging Face transformers in eager torch, not vLLM's engine",
            )
        if engine is not None and not torch_eager:  # settings of an engine it does not start
            set_here = given(ctx, device=device, max_num_batched_tokens=max_num_batched_tokens)
            engine_own = {
                "--device": set_here["device"],
                "--dtype": dtype,
                "--block-size": block_size,
                ("--enforce-eager" if enforce_eager else "--cuda-graphs"): enforce_eager,
                "--max-num-batched-tokens": set_here["max_num_batched_tokens"],
            }
            _refuse_given(
                engine_own,
                "--engine measures the server as it was started (give vLLM's settings to "
                "the server)",
            )
        check_outputs(output, streams=(json_out,))
        if as_target is not None and json_out is not None and str(json_out) == "-":
            raise UserError(
                f"--json - and --as {ROUTER} both write stdout (the profile, the router's "
                "value); give --json a file"
            )
        check_format(output, "JSON")
        check_format(json_out, "JSON", "--json")
        grid = parse_contexts(contexts)
        name, config = load_config(model)
        bar = progress_bar("profiling")
        task = bar.add_task("", total=None)
        with bar:

            def progress(stage: str, done: int, total: int) -> None:
                bar.update(task, description=stage, completed=done, total=total)

            if engine is not None:
                from profiles.measure_server import measure_engine  # numpy, scipy: on use

                result = measure_engine(
                    engine,
                    model_config=config,
                    contexts=grid,
                    max_context=max_context,
                    repeats=repeats,
                    progress=progress,
                )
            elif torch_eager:
                from profiles.measure_torch import measure  # numpy, scipy, torch: on use

                result = measure(
                    name,
                    config,
                    device=device,
                    contexts=grid,
                    max_context=max_context,
                    repeats=repeats,
                    dtype=dtype,
                    where=model,
                    progress=progress,
                )
            else:
                from profiles.measure_vllm import measure_vllm  # vLLM, torch: on use

                result = measure_vllm(
                    name,
                    config,
                    device=device,
                    contexts=grid,
                    max_context=max_context,
                    repeats=repeats,
                    dtype=dtype,
                    block_size=block_size,
                    max_num_batched_tokens=max_num_batched_tokens,
                    enforce_eager=enforce_eager,
                    where=model,
                    progress=progress,
                )
        write_json(result.to_json(), output)
        for model, miss in misfits(result.source):
            print_warning(
                f"the {model} model misses one of its own timings by {miss:.0%}: the timings "
                "look stretched by other work on this machine, and a replay priced on this "
                "profile would misprice its steps; measure again on a quiet machine (or with "
                "more --repeats)"
            )
        if json_out is not None and write_doc(result.to_json(), json_out):
            return
    err.print(f"wrote {output}")
    if as_target is not None:
        with user_errors():
            _as_router(result, decode_throughput_alpha, None, ref=str(output))
        return
    render.profile_table(out, result.to_json())


def _refuse_given(flags: Mapping[str, object], why: str) -> None:
    """One line naming each of ``flags`` given (not None), after ``why`` the command
    mode takes none of them, where they would be dropped without a word."""
    named = [flag for flag, value in flags.items() if value is not None]
    if named:
        raise UserError(f"{why}; it takes no {', '.join(named)}")


def _as_router(
    profile: Profile,
    alpha: float | None,
    to: Path | None,
    source: Path | None = None,
    *,
    ref: str,
) -> None:
    """The flag's value on stdout (one line, for a shell's ``$(…)``) or in the file ``to``
    ('-': stdout), its meaning on stderr; a refusal names ``source`` (the profile's file).
    ``ref`` is the profile as ``--profile`` reads it back (the argument given, or the file
    just written), which the router's command line on stderr names."""
    cal = calibrate(profile, decode_throughput_alpha=alpha, source=source)
    render.router_calibration(err, cal, ref)
    if to is None or str(to) == "-":
        sys.stdout.write(cal.flag_value() + "\n")
        return
    write_atomic(cal.flag_value() + "\n", to)
    err.print(f"wrote {to}")
