"""The options several commands share, declared once: name, help text and default.

A command takes ``kv_tokens: KvTokens = KV_TOKENS``; the same flag means the same thing,
with the same words, in every command that has it (tests/cli checks it). An option whose
meaning differs between commands (``--seed`` of tune's sampler, refit's ``--kv-tokens``
defaulting to the bundle's record) is declared by its command, under its own help.
The defaults are the libraries': the engine's size is read from
``replay.scheduler_config`` (one constant each, which ``SimSchedulerConfig`` and the
validations' library defaults read too; that module imports nothing heavy, so
``ttlctl --help`` stays light); ``replay.sim.ReplayConfig``'s offload size is written here
as a literal (``replay.sim`` is heavy), and tests/cli checks that they agree. The options
of vLLM's router and of a fleet behind one: :mod:`ttlctl.cli.router_options` (the
routers' settings' defaults from ``ttlctl.router_doc``'s table).

Spelling: flags are vLLM's, the router's or AIPerf's where those have one; a time is
in seconds and says so (``--abandon-seconds``, AIPerf's ``-seconds`` suffix). A renamed
flag keeps its old spelling for a while (:data:`ttlctl.cli.parsing.RENAMED`, rewritten
with a warning).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replay.client_tags import CLIENT_TAGS, FULL

# the simulated KV cache and engine's size, as vLLM's flags (``SimSchedulerConfig``)
from replay.scheduler_config import BLOCK_SIZE as BLOCK_SIZE
from replay.scheduler_config import KV_TOKENS as KV_TOKENS
from replay.scheduler_config import MAX_MODEL_LEN as MAX_MODEL_LEN
from replay.scheduler_config import MAX_NUM_BATCHED_TOKENS as MAX_NUM_BATCHED_TOKENS
from replay.scheduler_config import MAX_NUM_SEQS as MAX_NUM_SEQS

#: no CPU offload tier (``ReplayConfig.offload_tokens``)
OFFLOAD_TOKENS = 0
#: the fast simulator
BACKEND = "fast"
#: the clients tag every call as the trace says (``ReplayConfig.client_tags``)
CLIENT_TAGS_DEFAULT = FULL


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

#: the engine's sizes: each flag's help, by its parameter's flag
_KV_HELP = "KV cache size in tokens (each replica's, with --replicas)."
_BLOCK_HELP = "KV block size in tokens (vLLM's --block-size)."
_BUDGET_HELP = "Token budget per step (vLLM's --max-num-batched-tokens)."
_SEQS_HELP = "Most requests running at once (vLLM's --max-num-seqs)."
_LEN_HELP = "Longest request the engine accepts (vLLM's --max-model-len)."
_PREFILL_CAP_HELP = (
    "A prefill's tokens per step at most while another request runs or waits "
    "(vLLM's --long-prefill-token-threshold; 0: no cap)."
)


def _logged(default: int | str) -> str:
    """The default shown for a size that a trace's engine log states (``tune``,
    ``refit``): the flag's default applies only where the log does not state it."""
    return f"{default} unless the engine log (in refit, or the served bundle) states it"


KvTokens = Annotated[int, typer.Option("--kv-tokens", min=1, help=_KV_HELP)]
BlockSize = Annotated[int, typer.Option("--block-size", min=1, help=_BLOCK_HELP)]
MaxNumBatchedTokens = Annotated[
    int, typer.Option("--max-num-batched-tokens", min=1, help=_BUDGET_HELP)
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
MaxNumSeqs = Annotated[int, typer.Option("--max-num-seqs", min=1, help=_SEQS_HELP)]
MaxModelLen = Annotated[int, typer.Option("--max-model-len", min=1, help=_LEN_HELP)]
LongPrefillTokenThreshold = Annotated[
    int,
    typer.Option(
        "--long-prefill-token-threshold",
        min=0,
        help=_PREFILL_CAP_HELP,
    ),
]
LoggedLongPrefillTokenThreshold = Annotated[
    int,
    typer.Option(
        "--long-prefill-token-threshold",
        min=0,
        help=_PREFILL_CAP_HELP,
        show_default=_logged(0),
    ),
]
_WATERMARK_HELP = (
    "The share of the KV blocks that admitting a waiting request keeps free while another "
    "request runs (vLLM's --watermark; 0: none)."
)
Watermark = Annotated[float, typer.Option("--watermark", help=_WATERMARK_HELP)]
LoggedWatermark = Annotated[
    float, typer.Option("--watermark", help=_WATERMARK_HELP, show_default=_logged(0))
]
_ADAPTIVE_HELP = (
    "Never cap a prefill below the token budget's fair share (vLLM's flag: the budget over "
    "the requests running and waiting)."
)
LongPrefillAdaptive = Annotated[
    bool,
    typer.Option(
        "--long-prefill-token-threshold-adaptive/--no-long-prefill-token-threshold-adaptive",
        help=_ADAPTIVE_HELP,
    ),
]
LoggedLongPrefillAdaptive = Annotated[
    bool,
    typer.Option(
        "--long-prefill-token-threshold-adaptive/--no-long-prefill-token-threshold-adaptive",
        help=_ADAPTIVE_HELP,
        show_default=_logged("off"),
    ),
]
#: the same sizes where a trace's engine log sets them unless given (tune, refit)
LoggedKvTokens = Annotated[
    int,
    typer.Option(
        "--kv-tokens",
        min=1,
        help=_KV_HELP,
        show_default=f"{KV_TOKENS} unless the engine log states it",
    ),
]
LoggedBlockSize = Annotated[
    int, typer.Option("--block-size", min=1, help=_BLOCK_HELP, show_default=_logged(BLOCK_SIZE))
]
LoggedMaxNumBatchedTokens = Annotated[
    int,
    typer.Option(
        "--max-num-batched-tokens",
        min=1,
        help=_BUDGET_HELP,
        show_default=_logged(MAX_NUM_BATCHED_TOKENS),
    ),
]
LoggedMaxNumSeqs = Annotated[
    int,
    typer.Option("--max-num-seqs", min=1, help=_SEQS_HELP, show_default=_logged(MAX_NUM_SEQS)),
]
LoggedMaxModelLen = Annotated[
    int,
    typer.Option("--max-model-len", min=1, help=_LEN_HELP, show_default=_logged(MAX_MODEL_LEN)),
]
OffloadTokens = Annotated[
    int, typer.Option("--offload-tokens", min=0, help="CPU offload tier in tokens (0: none).")
]
Truncate = Annotated[
    bool,
    typer.Option(
        "--truncate",
        help="Clip a call that does not fit, as a live run's client does (the prompt "
        "shortened, an output that alone does not fit halved); without: as vLLM, a prompt "
        "that reaches --max-model-len is refused and an output past it cut.",
    ),
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
ClientTags = Annotated[
    str,
    typer.Option(
        "--client-tags",
        help=f"What the replayed clients tag each call with ({'|'.join(CLIENT_TAGS)}): full, "
        "the tool the trace says follows it and is_last on a program's last call; tool, "
        "the tool but never is_last; none, the program alone (a client that knows neither "
        "before the model answers); session, the program by the X-Session-ID header alone "
        "(live: no vllm_xargs in the body, which vllm-router's kv_aware then credits; the "
        "answer's token ids read from logprobs, which needs the server's "
        "--return-tokens-as-token-ids).",
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
        help="T, the queueing delay (s) τ* is priced with (0: a fresh engine's, no history "
        "of queueing).",
    ),
]
Offload = Annotated[
    bool,
    typer.Option("--offload", help="Price a miss as a reload from a host tier, not a prefill."),
]
