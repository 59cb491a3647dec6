"""One live run, start to end: :func:`run_live` (and :func:`live_results`, ``replay --live``).

The server is probed (:func:`ttlctl.server.facts.probe`) and its flags checked (each
one that is off is one warning); its prefix cache is reset (``POST
/reset_prefix_cache``, dev mode only; without it fresh prompt tokens get a per-run
nonce); its counters are read before and after the run and its gauges sampled
during it; the programs are driven by :mod:`replay.live.driver`; the figures are
:func:`replay.live.result.summarize`'s; the files, if asked, vLLM's benchmark
result (:mod:`replay.live.vllm_bench`) and AIPerf's records (:mod:`replay.live.aiperf`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from replay.client_tags import FULL
from replay.client_tags import check as check_tags
from replay.live.aiperf import write_records
from replay.live.driver import LiveRun, Progress, drain, emit
from replay.live.records import ProgramRecord
from replay.live.result import failures_warning, summarize
from replay.live.sampler import Sampler
from replay.live.trimming import cap_pauses, first_programs
from replay.live.vllm_bench import benchmark_result, result_name
from replay.policy_runs import Load, prepare
from replay.workload import AgentProgram, Workload
from ttlctl.errors import TtlctlError
from ttlctl.jsonio import write_json
from ttlctl.server import client, prom
from ttlctl.server.cache import reset_prefix_cache
from ttlctl.server.facts import ServerInfo, probe
from ttlctl.server.vocab import token_pool

Warn = Callable[[str], None]
#: told (the policy, calls done, calls) of a live replay
PolicyProgress = Callable[[str, int, int], None]


class LiveError(TtlctlError, ValueError):
    """A live replay that cannot run as asked: one line."""


def run_live(
    url: str,
    workload: Workload,
    policy_label: str,
    *,
    timing: Load | None = None,
    seed: int = 0,
    max_programs: int | None = None,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 3600.0,
    request_timeout_s: float = 600.0,
    max_live: int = 128,
    reset_cache: bool = True,
    vocab_size: int | None = None,
    sample_every_s: float = 0.5,
    progress: Progress | None = None,
    save_result: bool = False,
    result_dir: Path | None = None,
    result_filename: str | None = None,
    label: str | None = None,
    records_path: Path | None = None,
    warn: Warn | None = None,
    client_tags: str = FULL,
) -> dict[str, Any]:
    """Replay ``workload`` against the vLLM server at ``url``; the simulator's result keys.

    ``timing``: the trace's start times (default), Poisson ``jps`` or a closed
    population of ``concurrency`` programs (:class:`replay.policy_runs.Load`).
    ``policy_label`` names the result (the policy lives in the server: stock vLLM,
    or the TTLScheduler with a bundle). ``max_programs`` keeps the first programs;
    ``idle_gap_cap_s`` caps every pause. At most ``max_live`` programs run at
    once (more wait: their late start is reported); the run stops by itself after
    ``timeout_s`` (programs still running are cut short), or on Ctrl-C.
    ``progress(done_calls, total_calls)`` is called after each call, and for the calls a
    program cut short never sends as it stops (the count ends at the calls). ``vocab_size``
    (the model's config) gives the fresh prompt tokens' ids; without it they come
    from the server (:func:`ttlctl.server.vocab.token_pool`).

    ``save_result`` writes vLLM's benchmark result JSON into ``result_dir``
    (``label``, default ``ttlctl-<policy>``, prefixes its name as in ``vllm bench
    serve``) with per-call records next to it (``<name>.profile_export.jsonl``,
    AIPerf's shape); ``records_path`` writes those records alone. The paths
    written are under ``"files"``. Each warning (a server flag that is off, …) is
    given once to ``warn`` (default: :func:`warnings.warn`) and kept under
    ``server.warnings``. ``client_tags``: what each call is tagged with
    (:mod:`replay.client_tags`). Raises :class:`~ttlctl.server.client.ServerError` when the
    server cannot be used.
    """
    timing = timing or Load()
    check_tags(client_tags)
    if timeout_s <= 0 or request_timeout_s <= 0 or max_live < 1:
        raise ValueError("timeout_s, request_timeout_s and max_live must be positive")
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValueError("no programs to replay")
    work = prepare(work, timing)
    info = probe(url)
    url = info.url
    run_warnings: list[str] = []

    def note(message: str) -> None:
        run_warnings.append(message)
        emit(warn, message)

    _check_server(info, policy_label, note)
    reset, nonce = _reset(url, reset_cache, note)
    pool = token_pool(url, info.model, vocab_size)
    before = prom.counters(prom.parse_metrics(client.text(url, "/metrics")))
    t0 = time.perf_counter()
    state = LiveRun(
        url=url,
        info=info,
        pool=pool,
        seed=seed,
        nonce=nonce,
        timeout_request_s=request_timeout_s,
        deadline=t0 + timeout_s,
        stop=threading.Event(),
        progress=progress,
        total_calls=work.calls,
        say=warn,
        client_tags=client_tags,
    )
    programs = [ProgramRecord(p.program_id, len(p.calls)) for p in work.programs]
    with Sampler(url, sample_every_s) as sampler:
        _drive(state, work, programs, timing, max_live, t0)
    wall = time.perf_counter() - t0
    after = prom.counters(prom.parse_metrics(client.text(url, "/metrics")))
    failures = failures_warning(url, state.records, work.calls)
    if failures is not None:
        note(failures)
    state.warnings[:0] = run_warnings

    result = summarize(
        policy_label,
        state.records,
        programs,
        info,
        before,
        after,
        sampler.samples,
        wall_s=wall,
        reset=reset,
        warnings_=state.warnings,
    )
    result["server"]["token_limit"] = info.token_limit()
    result["config"] = {
        "jps": timing.jps,
        "concurrency": timing.concurrency,
        "seed": seed,
        "max_programs": max_programs,
        "idle_gap_cap_s": idle_gap_cap_s,
        "timeout_s": timeout_s,
        "max_live": max_live,
    }
    result["files"] = {}
    if save_result:
        doc = benchmark_result(result, state.records, info, label or f"ttlctl-{policy_label}")
        path = Path(result_dir or ".") / (result_filename or result_name(doc, timing))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(doc, path)
        result["files"]["result"] = str(path)
        records_path = records_path or path.with_suffix(".profile_export.jsonl")
    if records_path is not None:
        write_records(records_path, state.records, policy_label)
        result["files"]["records"] = str(records_path)
    return result


def _check_server(info: ServerInfo, policy_label: str, note: Warn) -> None:
    """One warning per server setting that makes the run measure less than it could."""
    url = info.url
    if info.prefix_caching is False:
        note(f"{url}: prefix caching is off on the server (--enable-prefix-caching): no hits")
    if policy_label == "vllm" and info.ttl_metrics:
        note(f"{url}: this server runs ttlctl's TTLScheduler, but the run is labelled 'vllm'")
    elif policy_label != "vllm" and not info.ttl_metrics:
        note(
            f"{url}: no ttlctl:pins_* on /metrics: is the server running the TTLScheduler "
            "(`ttlctl serve`, or PROMETHEUS_MULTIPROC_DIR set)? Pins are not measured"
        )


def _reset(url: str, reset_cache: bool, note: Warn) -> tuple[bool, str]:
    """Empty the server's prefix cache: (whether it was, the fresh tokens' nonce)."""
    if not reset_cache:
        return False, ""
    if reset_prefix_cache(url):
        return True, ""
    note(
        f"{url}: POST /reset_prefix_cache is not available (start the server with "
        "VLLM_SERVER_DEV_MODE=1): the run starts from whatever the cache holds "
        "(fresh prompt tokens get a per-run nonce so earlier runs cannot hit)"
    )
    return False, f"{time.time_ns()}"


def _drive(
    state: LiveRun,
    work: Workload,
    programs: list[ProgramRecord],
    timing: Load,
    max_live: int,
    t0: float,
) -> None:
    """Run the programs: a closed population of ``timing.concurrency``, or each at its
    start time (at most ``max_live`` at once)."""
    if timing.concurrency is not None:
        closed = [(p, None, r) for p, r in zip(work.programs, programs, strict=True)]
        drain(state, closed, min(timing.concurrency, len(closed)))
        return
    base = min(p.start_s for p in work.programs)
    timed = sorted(
        ((p, t0 + (p.start_s - base), r) for p, r in zip(work.programs, programs, strict=True)),
        key=lambda j: j[1],
    )
    jobs: list[tuple[AgentProgram, float | None, ProgramRecord]] = list(timed)
    drain(state, jobs, min(max_live, len(jobs)))


def live_results(
    url: str,
    workload: Workload,
    policies: Sequence[str],
    *,
    jps: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 3600.0,
    save_result: bool = False,
    result_dir: Path | None = None,
    label: str | None = None,
    progress: PolicyProgress | None = None,
    warn: Warn | None = None,
    client_tags: str = FULL,
) -> list[dict[str, Any]]:
    """``ttlctl replay --live URL``: the one policy the server runs, as a list of results.

    The policy lives in the server (stock vLLM, or ``ttlctl serve`` with a bundle),
    so exactly one ``--policy`` names it. Raises :class:`LiveError` otherwise.
    ``progress``: told (the policy, calls done, calls) as :func:`run_live` tells them;
    ``client_tags``: what each call is tagged with (:mod:`replay.client_tags`).
    """
    names = list(dict.fromkeys(policies))
    if len(names) != 1:
        raise LiveError(
            "--live measures the one policy the server runs: give one --policy "
            "(vllm for stock vLLM, continuum for `ttlctl serve` with a bundle)"
        )
    return [
        run_live(
            url,
            workload,
            names[0],
            timing=Load(jps=jps, concurrency=concurrency, seed=seed),
            seed=seed,
            idle_gap_cap_s=idle_gap_cap_s,
            timeout_s=timeout_s,
            save_result=save_result,
            result_dir=result_dir,
            label=label,
            progress=None if progress is None else partial(progress, names[0]),
            warn=warn,
            client_tags=client_tags,
        )
    ]
