"""The options several commands share, declared once: name, help text and default.

A command takes ``kv_tokens: KvTokens = KV_TOKENS``; the same flag means the same thing,
with the same words, in every command that has it (tests/cli checks it). An option whose
meaning differs between commands (``--seed`` of tune's sampler, refit's ``--kv-tokens``
defaulting to the bundle's record) is declared by its command, under its own help.
The defaults are the libraries': the engine's size is read from
``replay.scheduler_config`` (one constant each, which ``SimSchedulerConfig`` and the
validations' library defaults read too; that module imports nothing heavy, so
``ttlctl --help`` stays light), the routers' settings' from ``ttlctl.router_doc``'s
table; ``replay.sim.ReplayConfig``'s offload size is written here
as a literal (``replay.sim`` is heavy), and tests/cli checks that they agree.

Spelling: flags are vLLM's, the router's or AIPerf's where those have one; a time is
in seconds and says so (``--abandon-seconds``, AIPerf's ``-seconds`` suffix). A renamed
flag keeps its old spelling for a while (:data:`RENAMED`, rewritten with a warning).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

# the simulated KV cache and engine's size, as vLLM's flags (``SimSchedulerConfig``)
from replay.scheduler_config import BLOCK_SIZE as BLOCK_SIZE
from replay.scheduler_config import KV_TOKENS as KV_TOKENS
from replay.scheduler_config import MAX_MODEL_LEN as MAX_MODEL_LEN
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS as MAX_NUM_BATCHED_TOKENS
from replay.scheduler_config import MAX_NUM_SEQS as MAX_NUM_SEQS
from ttlctl.router_doc import default_of, number_text

#: no CPU offload tier (``ReplayConfig.offload_tokens``)
OFFLOAD_TOKENS = 0
#: the fast simulator
BACKEND = "fast"

#: old spellings still accepted, per command: old flag -> new flag (a warning says so)
RENAMED: dict[str, dict[str, str]] = {
    "fit": {"--abandon-s": "--abandon-seconds"},
    "replay": {"--ttl": "--ttl-seconds"},
    "refit": {"--queue-delay": "--queue-delay-seconds"},
    "bundle build": {"--cold-start-ttl": "--cold-start-ttl-seconds"},
    "bundle inspect": {"--queue-delay": "--queue-delay-seconds"},
    "bundle query": {"--queue-delay": "--queue-delay-seconds"},
    "tune": {
        "--heartbeat": "--heartbeat-seconds",
        "--live-check-s": "--live-check-seconds",
        "--live-timeout": "--live-timeout-seconds",
        "--p95-max": "--p95-max-seconds",
        "--summary": "--json",
    },
    "validate": {
        "--timeout": "--timeout-seconds",
        "--startup-timeout": "--startup-timeout-seconds",
    },
}

# ---- how every command reads its flags ----------------------------------------------


def finite_floats(param: Any) -> None:
    """Make a parameter refuse nan and ±inf (``--jps nan`` would never end): its value,
    or any item of it, once parsed (typer's click objects, whichever click they use). A
    float option with a range says so too, not that nan is out of its range."""
    parse = param.process_value
    floats = _takes_floats(param)

    def checked(ctx: Any, value: Any) -> Any:
        try:
            parsed = parse(ctx, value)
        except typer.BadParameter:
            if floats:  # `--queue-delay-seconds nan` failed `>= 0`: it is not a number
                _refuse_non_finite(_as_floats(value), ctx, param)
            raise
        _refuse_non_finite(parsed, ctx, param)
        return parsed

    param.process_value = checked


def _takes_floats(param: Any) -> bool:
    """Whether a parameter is a float or a list of floats (typer strips ``| None``)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return annotation is float or get_args(annotation) == (float,)


def _as_floats(value: Any) -> list[Any]:
    """The words given (or an environment variable's), as floats where they read as one."""
    floats: list[Any] = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        try:
            floats.append(float(item))
        except (TypeError, ValueError):
            floats.append(item)
    return floats


def _refuse_non_finite(value: Any, ctx: Any, param: Any) -> None:
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, float) and not math.isfinite(item):
            kind = "a number" if math.isnan(item) else "a finite number"
            raise typer.BadParameter(f"{item} is not {kind}", ctx=ctx, param=param)


def renamed(args: list[str], warn: Callable[[str], None]) -> list[str]:
    """``args`` with the old spellings of :data:`RENAMED` flags (of the command they
    name) rewritten to the new ones, each with a warning; nothing after ``--``."""
    words = [a for a in args[:2] if not a.startswith("-")]
    table = RENAMED.get(" ".join(words[:2])) or RENAMED.get(words[0] if words else "", {})
    if not table:
        return args
    result: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return result + args[i:]
        flag, eq, value = arg.partition("=")
        if flag in table:
            warn(f"{flag} is now {table[flag]} (the old spelling goes in a later release)")
            arg = table[flag] + eq + value
        result.append(arg)
    return result


# ---- the inputs ----------------------------------------------------------------------

Trace = Annotated[
    Path, typer.Argument(help="Canonical trace (Parquet) from `ttlctl ingest` or `ttlctl synth`.")
]
#: ``validate``'s TRACE: optional with ``--resimulate`` (the document names its trace)
ValidateTrace = Annotated[
    Path | None,
    typer.Argument(
        help="Canonical trace (Parquet) from `ttlctl ingest` or `ttlctl synth`; with "
        "--resimulate, the recorded one unless given."
    ),
]
Resimulate = Annotated[
    Path | None,
    typer.Option(
        "--resimulate",
        help="A validation's --json document (one server per policy, or validate "
        "--replicas N): re-simulate its recorded live runs with this ttlctl's simulator, "
        "nothing started live, priced as it was (or by --profile); everything else is read "
        "from the document.",
    ),
]
FitFile = Annotated[Path, typer.Option("--fit", help="fit.json from `ttlctl fit`.")]
#: ``--profile``'s help, the same wherever it is taken
PROFILE_HELP = "Profile: a profile.json, or a shipped profile name."
Profile = Annotated[str, typer.Option("--profile", help=PROFILE_HELP)]
ContinuumBundle = Annotated[
    Path | None,
    typer.Option("--bundle", help="Policy bundle of continuum (default: a cold start, no fit)."),
]
InputFormat = Annotated[
    str,
    typer.Option(
        "--format",
        help="Input format: auto (detect per file), canonical, engine-log, claude-code "
        "(alias weka), mini-swe-agent, swe-agent, litellm, mooncake, tracelab, "
        "trtllm-scaffolding.",
    ),
]

AllowEmpty = Annotated[
    bool,
    typer.Option(
        "--allow-empty",
        help="Accept a result with no calls (no log file, an empty file, or every record "
        "rejected) instead of stopping with an error.",
    ),
]

# ---- the load: how programs start ----------------------------------------------------

Jps = Annotated[
    float | None,
    typer.Option(
        "--jps", help="Programs started per second (Poisson) — not vLLM's per-request rate."
    ),
]
Concurrency = Annotated[
    int | None,
    typer.Option("--concurrency", help="Keep this many programs live (a new one when one ends)."),
]
Seed = Annotated[
    int, typer.Option("--seed", help="Seed of the --jps arrivals and of drawn prompt tokens.")
]
JpsLoads = Annotated[
    list[float] | None,
    typer.Option(
        "--jps",
        help="A load: programs started per second (Poisson; not vLLM's per-request rate). "
        "Repeat for several.",
    ),
]
ConcurrencyLoads = Annotated[
    list[int] | None,
    typer.Option(
        "--concurrency",
        help="A load: programs kept live. Repeat for several. Without any --jps or "
        "--concurrency: the command's default loads (its description says which).",
    ),
]
IdleGapCap = Annotated[
    float | None,
    typer.Option(
        "--trace-idle-gap-cap-seconds", min=0.0, help="Cap every recorded pause (AIPerf's flag)."
    ),
]

# ---- the simulated engine ------------------------------------------------------------

KvTokens = Annotated[int, typer.Option("--kv-tokens", min=1, help="KV cache size in tokens.")]
BlockSize = Annotated[
    int,
    typer.Option("--block-size", min=1, help="KV block size in tokens (vLLM's --block-size)."),
]
MaxNumBatchedTokens = Annotated[
    int,
    typer.Option(
        "--max-num-batched-tokens",
        min=1,
        help="Token budget per step (vLLM's --max-num-batched-tokens).",
    ),
]
EngineBudget = Annotated[
    int | None,
    typer.Option(
        "--max-num-batched-tokens",
        min=1,
        help="The serving engine's token budget per step (vLLM's --max-num-batched-tokens): "
        "a miss is priced in steps of it, as the engine plugin prices it; default: the "
        "budget the bundle's profile was measured with.",
    ),
]
MaxNumSeqs = Annotated[
    int,
    typer.Option(
        "--max-num-seqs", min=1, help="Most requests running at once (vLLM's --max-num-seqs)."
    ),
]
MaxModelLen = Annotated[
    int,
    typer.Option(
        "--max-model-len",
        min=1,
        help="Longest request the engine accepts (vLLM's --max-model-len).",
    ),
]
OffloadTokens = Annotated[
    int, typer.Option("--offload-tokens", min=0, help="CPU offload tier in tokens (0: none).")
]
Truncate = Annotated[
    bool,
    typer.Option("--truncate", help="Clip prompts that do not fit instead of rejecting the call."),
]
Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="Simulator: fast (ttlctl's) or vllm (the installed vLLM's own scheduler and "
        "KV cache manager, in process; vllm, program-fcfs, static-ttl, continuum, "
        "unlimited-kv).",
    ),
]
AsyncScheduling = Annotated[
    bool,
    typer.Option(
        "--async-scheduling",
        help="vLLM's async scheduling (step N+1 is scheduled before step N's output is "
        "applied; vLLM's default on GPUs): the vLLM backend runs vLLM's AsyncScheduler, "
        "the fast one models it (with --replicas: on every replica).",
    ),
]

# ---- live runs' result files ---------------------------------------------------------

SaveResult = Annotated[
    bool,
    typer.Option(
        "--save-result",
        help="Live runs (replay: needs --live): write vLLM's benchmark result JSON per run, "
        "and per-call records shaped like AIPerf's profile_export.jsonl next to it.",
    ),
]
ResultDir = Annotated[
    Path | None,
    typer.Option(
        "--result-dir",
        help="Folder of --save-result (default: validate's work dir, else here); needs "
        "--save-result (vLLM's pair: alone, it is refused rather than ignored).",
    ),
]
Label = Annotated[
    str | None,
    typer.Option(
        "--label",
        help="Prefix of --save-result's files (default: ttlctl-POLICY); needs --save-result.",
    ),
]

# ---- outputs ------------------------------------------------------------------------

JsonTo = Annotated[
    Path | None,
    typer.Option("--json", help="Write the results as JSON here ('-': stdout)."),
]
QueueDelay = Annotated[
    float,
    typer.Option(
        "--queue-delay-seconds",
        min=0.0,
        help="T (s) assumed for the τ* columns (0: a fresh engine's).",
    ),
]

# ---- vLLM's router (vllm-router) ------------------------------------------------------

ProfileToShow = Annotated[str | None, typer.Option("--profile", help=PROFILE_HELP)]
AsRouter = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="vllm-router: print the profile as the router's --program-scheduling-config-json "
        "value (its Program scheduling calibrated; each coefficient explained on stderr).",
    ),
]
DecodeThroughputAlpha = Annotated[
    float | None,
    typer.Option(
        "--decode-throughput-alpha",
        help="With --as vllm-router: the router's prefill_cost_model.decode_throughput_alpha "
        "(share of decode throughput kept during a prefill; default 0, ttlctl's additive step).",
    ),
]
Replicas = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="A fleet: this many vLLM replicas with vllm-router in front (see --router).",
    ),
]
Routers = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="vllm-router's --policy for the fleet: cache_aware (its default), round_robin, "
        "random, power_of_two, consistent_hash, sticky_least_loaded, kv_aware; or "
        "program_scheduling (its Program scheduling over consistent_hash, calibrated by "
        "--profile when given). Repeat for several.",
    ),
]

# ---- a fleet behind a router, simulated (replay --replicas, tune --replicas) -----------

FleetReplicas = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="Replay N engines behind a router, in one event loop (each engine sized by "
        "the engine flags, as vLLM's flags size each server; --concurrency is the fleet's; "
        "with --backend vllm each engine is vLLM's own scheduler).",
    ),
]
WorkerUrls = Annotated[
    list[str] | None,
    typer.Option(
        "--worker-urls",
        help="With --replicas: each replica's URL as vllm-router is given it (repeat it, one "
        "per replica, in order); consistent-hash, sticky-least-loaded and Program "
        "scheduling then place each program where that router would (default: "
        "http://replica-0, http://replica-1, …).",
    ),
]
RouterName = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="With --replicas (once): round-robin, random, power-of-two, consistent-hash, "
        "cache-aware (the default with --replicas, as vllm-router's), kv-aware, "
        "sticky-least-loaded (vllm-router's policies; its spellings with underscores too), "
        "program-scheduling (vllm-router's --enable-program-scheduling), pin-aware "
        "(ttlctl's), as-logged (the trace's replica column).",
    ),
]


def _router_default(router: str, key: str) -> str:
    """A router setting's default as its help says it (``ttlctl.router_doc``'s table)."""
    return number_text(default_of(router, key))


CacheThreshold = Annotated[
    float | None,
    typer.Option(
        "--cache-threshold",
        help="cache-aware: prefix match rate above which a request follows its match "
        f"(vllm-router's flag; {_router_default('cache-aware', 'cache_threshold')}).",
    ),
]
BalanceAbsThreshold = Annotated[
    int | None,
    typer.Option(
        "--balance-abs-threshold",
        help="cache-aware: balance load when max − min in-flight requests exceeds this "
        "and --balance-rel-threshold holds (vllm-router's flag; "
        f"{_router_default('cache-aware', 'balance_abs_threshold')}).",
    ),
]
BalanceRelThreshold = Annotated[
    float | None,
    typer.Option(
        "--balance-rel-threshold",
        help="cache-aware: ... and max > min × this (vllm-router's flag; "
        f"{_router_default('cache-aware', 'balance_rel_threshold')}).",
    ),
]
KvAwareSessionAffinityTtlSecs = Annotated[
    int | None,
    typer.Option(
        "--kv-aware-session-affinity-ttl-secs",
        help="kv-aware: keep a session on its replica while idle at most this long "
        "(vllm-router's flag; off by default).",
    ),
]
RouterTemperature = Annotated[
    float | None,
    typer.Option(
        "--router-temperature",
        help="kv-aware: softmax temperature over the costs; 0 takes the lowest "
        f"(vllm-router's flag; {_router_default('kv-aware', 'router_temperature')}).",
    ),
]
PinQueueBound = Annotated[
    int | None,
    typer.Option(
        "--pin-queue-bound",
        help="pin-aware: leave the pin's replica when it has more than this many requests "
        "in flight beyond the least loaded one's (ttlctl's router; "
        f"{_router_default('pin-aware', 'pin_queue_bound')}).",
    ),
]
ProgramSchedulingConfigJson = Annotated[
    str | None,
    typer.Option(
        "--program-scheduling-config-json",
        help="program-scheduling: vllm-router's Program-scheduling config, as its flag of "
        "that name takes it (JSON; unset fields take the router's defaults).",
    ),
]
ProgramSchedulingCalibration = Annotated[
    str | None,
    typer.Option(
        "--program-scheduling-calibration",
        help="program-scheduling: the router's cost coefficients: profile (the replay's "
        "--profile, as `ttlctl profile --as vllm-router` prints them; the default) or "
        "reference (the router's built-in ones).",
    ),
]
RouterNames = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="With --replicas: the router the fleet runs behind (default cache-aware, "
        "vllm-router's default); repeat it to search the router too. Its settings that "
        "matter for retention are searched with η, K and the valve.",
    ),
]
