"""The options of ``ttlctl tune`` alone, declared once: the study (trials, storage, name,
workers, the sampler's seed), the replays of a trial and of the held-back comparison, the
constraint and the guard, the heartbeat of URL storages, and live tuning (``--live URL
--live-bundle PATH``, in their own help panel). The options tune shares with other commands:
:mod:`ttlctl.cli.options` and :mod:`ttlctl.cli.router_options`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

LIVE = "Live tuning"
Output = Annotated[Path, typer.Option("-o", "--output", help="Bundle to write.")]
Trials = Annotated[
    int,
    typer.Option(
        help="Finished trials the study should have (a resumed study runs only the rest)."
    ),
]
StorageUrl = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Optuna storage: any URL (sqlite:///f.db, postgresql+psycopg2://u:p@host/db) "
        "or a journal-file path (created if new). Default: a SQLite file next to -o.",
    ),
]
#: ``--study-name`` too: the optuna CLI's name for it, which the closing `optuna best-trial`
#: line prints, so the flag users copy from there is taken here as well
Study = Annotated[
    str | None,
    typer.Option(
        "--study",
        "--study-name",
        help="Study name (resumed if it exists; Optuna's --study-name). Default: derived from "
        "the inputs' hashes and the settings, so rerunning the same command resumes the same "
        "study.",
    ),
]
Workers = Annotated[int, typer.Option(help="Worker processes on this machine, all on one study.")]
SamplerSeed = Annotated[
    int,
    typer.Option(
        help="Seed of the TPE sampler (each worker derives its own from it; give each "
        "machine sharing a study a different one). Reproducible with one worker only: "
        "with several, the order trials finish in steers the samplers."
    ),
]
Seeds = Annotated[
    int, typer.Option(help="Seeds (program order, arrivals) each trial replays per load.")
]
HoldoutSeeds = Annotated[
    int, typer.Option(help="Held-back seeds (never tuned on) for the final comparison and guard.")
]
P95Max = Annotated[
    float | None,
    typer.Option(
        "--p95-max-seconds",
        help="Constraint: the replays' mean p95 JCT (s) must stay at or under this.",
    ),
]
Force = Annotated[
    bool,
    typer.Option(
        help="Ship the tuned policy even if it does not beat stock vLLM on the held-back "
        "seeds (default: ship a bundle that never pins)."
    ),
]
MinGain = Annotated[
    float,
    typer.Option(
        help="Ship the tuned policy only if it beats the baseline (stock vLLM; live: the "
        "never-pin bundle) by at least this ratio of mean JCT on the held-back seeds "
        "(1.05: 5% faster). Default 1: any win.",
    ),
]
Heartbeat = Annotated[
    int,
    typer.Option(
        "--heartbeat-seconds",
        help="Seconds between a running trial's heartbeats (URL storages); a trial whose "
        "worker died is failed after twice that and retried.",
    ),
]
Live = Annotated[
    str | None,
    typer.Option(
        help="Run each trial as a short live replay against the vLLM server at this URL "
        "(`ttlctl serve`: the TTL scheduler) instead of the simulator. Needs --live-bundle.",
        rich_help_panel=LIVE,
    ),
]
LiveBundle = Annotated[
    Path | None,
    typer.Option(
        help="With --live: the bundle file the server was started with (TTLCTL_BUNDLE, "
        "`ttlctl serve --bundle`). Each trial's bundle is written over it (the plugin "
        "reloads it); at the end it holds the bundle written to -o.",
        rich_help_panel=LIVE,
    ),
]
LivePrograms = Annotated[
    int,
    typer.Option(
        help="With --live: programs of each live run (the trace's first N); the held-back "
        "comparison replays the next N.",
        rich_help_panel=LIVE,
    ),
]
LiveCheck = Annotated[
    float,
    typer.Option(
        "--live-check-seconds",
        help="With --live: the server's TTLCTL_BUNDLE_CHECK_S. After writing a bundle the "
        "tuner waits max(2 × this, 2 s) and sends one request, whose arrival makes the "
        "plugin load it.",
        rich_help_panel=LIVE,
    ),
]
LiveTimeout = Annotated[
    float,
    typer.Option(
        "--live-timeout-seconds",
        help="With --live: seconds one live run may take (then it counts as failed).",
        rich_help_panel=LIVE,
    ),
]
