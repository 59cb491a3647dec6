"""Simulator against a real server: the same trace, the same policies, the errors per metric.

``ttlctl validate`` replays one small trace twice per policy: in the simulator
(``replay.policy_runs.run_one``) and live against a vLLM server (:func:`replay.live.run_live`),
then compares mean and p95 JCT, mean TTFT, the prefix-hit rate and preemptions,
and whether the policies rank the same. The policy lives in the server process,
so each policy needs its own server:

- ``vllm``: stock vLLM (its own scheduler);
- ``continuum``: vLLM with ``--scheduler-cls ttlctl.engine.TTLScheduler`` and
  ``TTLCTL_BUNDLE`` (the bundle given, else a cold-start bundle: no fit, the
  default policy and the measured profile).

Either give a URL per policy (servers already running) or a base command that
starts one (``--engine-cmd``, or ``--model`` and vLLM arguments): validate then
starts the servers itself, one after the other (vllm, then continuum), each on
127.0.0.1 and a free port, with ``VLLM_SERVER_DEV_MODE=1`` (so the prefix cache
can be reset), ``--enable-prompt-tokens-details`` and a fresh
``PROMETHEUS_MULTIPROC_DIR``, and stops each one's whole process group after
its run.

The simulator is sized like the server: KV tokens from ``vllm:cache_config_info``
(the null block left out, as the scheduler plugin counts), the server's block
size and ``max_model_len``; ``max_num_seqs`` and ``max_num_batched_tokens`` come
from the caller (vLLM's CPU server defaults: 128 and 2,048). The profile that
prices each step is measured from the first server with
:func:`profiles.measure_server.measure_engine` unless one is given.

A live run is one draw of a noisy system: when calls arrive a few milliseconds
apart the cache evicts differently, and under contention the prefix-hit rate of
the same trace ranged from 25% to 36% across seven runs here. ``repeats`` runs
each policy that many times, each in a fresh server (so the TTL scheduler starts from
the bundle again, as the simulator does), and compares the simulator with the
mean of the runs; the rows also carry the runs' range.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fitting.policy import PolicyParams
from profiles.cost import ProfileCostModel
from profiles.measure_server import measure_engine
from profiles.schema import Profile, ProfileDoc
from replay.figures import PolicyResult
from replay.live import LiveError, ServerInfo, cap_pauses, first_programs, probe, run_live
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.vllmsim.backend import runner
from replay.workload import Workload
from ttlctl import bundle as bundle_mod
from ttlctl.errors import TtlctlError
from ttlctl.server.process import free_port, stop_group, wait_healthy

SCHEDULER_CLS = "ttlctl.engine.TTLScheduler"
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: the policies a server can run (the policy lives in the server process)
LIVE_POLICIES = ("vllm", "continuum")
#: vLLM 0.32's defaults for the OpenAI server on CPU (GPU: 256 and 8,192 or more)
CPU_MAX_NUM_SEQS = 128
CPU_MAX_NUM_BATCHED_TOKENS = 2048
#: goals of a validation (reported, not enforced)
JCT_GOAL = 0.10
HIT_GOAL_POINTS = 5.0
#: mean JCTs within 2% of each other rank as a tie
TIE = 0.02
#: (key, label, how the error is expressed)
COMPARED = (
    ("jct_mean_s", "mean JCT", "relative"),
    ("jct_p95_s", "p95 JCT", "relative"),
    ("ttft_mean_s", "mean TTFT", "relative"),
    ("prefix_hit_rate", "prefix hit rate", "points"),
    ("preemptions", "preemptions", "absolute"),
)

Progress = Callable[[str], None]


class ValidateError(TtlctlError, ValueError):
    """Bad arguments, or a server that would not start: one line."""


# --------------------------------------------------------------------------- servers


def base_command(model: str, extra: Sequence[str] = (), python: str | None = None) -> list[str]:
    """``python -m vllm.entrypoints.openai.api_server --model MODEL <extra>``."""
    return [python or sys.executable, "-m", SERVER_MODULE, "--model", model, *extra]


def server_command(base: Sequence[str], policy: str, port: int) -> list[str]:
    """The command of ``policy``'s server: ``base`` plus host, port, and the TTL scheduler."""
    flags = {a.split("=", 1)[0] for a in base}
    if "--scheduler-cls" in flags:
        raise ValidateError(
            "--scheduler-cls is set by validate (stock for vllm, the TTL scheduler for "
            "continuum); remove it from the engine command"
        )
    cmd = list(base)
    if "--enable-prompt-tokens-details" not in flags:
        cmd.append("--enable-prompt-tokens-details")
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    if policy == "continuum":
        cmd += ["--scheduler-cls", SCHEDULER_CLS]
    return cmd


@dataclass
class ManagedServer:
    """One server validate starts and stops (its own session: the group is stopped at once)."""

    command: list[str]
    env: dict[str, str]
    log_path: Path
    startup_timeout_s: float = 600.0
    stop_grace_s: float = 15.0
    url: str = ""
    ready_s: float | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, port: int) -> str:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self._proc = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        try:
            self._wait(t0 + self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - t0
        return self.url

    def _wait(self, deadline: float) -> None:
        assert self._proc is not None
        problem = wait_healthy(self._proc, self.url, deadline)
        if problem is not None:
            raise ValidateError(f"the server {problem} (log: {self.log_path}): {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return lines[-1][:300] if lines else "(empty log)"

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            stop_group(proc, self.stop_grace_s)

    def __enter__(self) -> ManagedServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server_environment(
    base: Mapping[str, str],
    policy: str,
    bundle: Path | None,
    work_dir: Path,
    tag: str = "",
) -> dict[str, str]:
    """Environment of ``policy``'s server: dev mode, its own metrics folder, the bundle
    (``tag`` names one of several runs' files)."""
    env = dict(base)
    prom = work_dir / f"{policy}{tag}-prometheus"
    prom.mkdir(parents=True, exist_ok=True)
    for stale in prom.glob("*.db"):
        stale.unlink()
    env.update(
        VLLM_SERVER_DEV_MODE="1",
        PROMETHEUS_MULTIPROC_DIR=str(prom),
        VLLM_NO_USAGE_STATS=env.get("VLLM_NO_USAGE_STATS", "1"),
        VLLM_HOST_IP=env.get("VLLM_HOST_IP", "127.0.0.1"),  # the engine's own sockets too
        PYTHONUNBUFFERED="1",
    )
    env.pop("TTLCTL_BUNDLE", None)
    if policy == "continuum" and bundle is not None:
        env["TTLCTL_BUNDLE"] = str(bundle.resolve())
        env["TTLCTL_LOG"] = str((work_dir / f"continuum{tag}-engine.jsonl").resolve())
    return env


# --------------------------------------------------------------------------- the comparison


def sim_engine_config(
    info: ServerInfo,
    *,
    kv_tokens: int | None,
    max_num_seqs: int,
    max_num_batched_tokens: int,
) -> Any:
    """The simulator's :class:`~replay.scheduler.SimSchedulerConfig` sized like the server."""
    block = info.block_size or 16
    if kv_tokens is None:
        if info.num_gpu_blocks:
            kv_tokens = (info.num_gpu_blocks - 1) * block  # the null block holds no KV
        elif info.kv_tokens:
            kv_tokens = info.kv_tokens
        else:
            raise ValidateError(
                f"{info.url}: /metrics has no vllm:cache_config_info; give the KV size (kv_tokens)"
            )
    return SimSchedulerConfig(
        kv_tokens=kv_tokens,
        block_size=block,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=info.max_model_len or 131_072,
    )


def compare(sim: Mapping[str, Any], live: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per compared metric: simulated, live (the mean of the live runs), the
    error, and the live runs' range (``live_range``: [min, max], None for one run)."""
    rows = []
    spread = live.get("live_range") or {}
    for key, label, kind in COMPARED:
        s, v = sim.get(key), live.get(key)
        error: float | None = None
        if s is not None and v is not None:
            if kind == "relative":
                error = (s - v) / v if v else None
            elif kind == "points":
                error = (s - v) * 100.0
            else:
                error = float(s - v)
        rows.append(
            {
                "metric": key,
                "label": label,
                "kind": kind,
                "sim": s,
                "live": v,
                "error": error,
                "live_range": spread.get(key),
            }
        )
    return rows


def merge_runs(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several live runs of one policy as one result: the compared metrics are the
    runs' means (None if any run lacks one), ``live_range`` their [min, max], and
    ``runs`` the runs themselves; of the other keys only those equal in every run
    (the policy, the programs, …) are kept at the top. One run is returned as it is."""
    if len(runs) == 1:
        return dict(runs[0])
    merged = {k: v for k, v in runs[0].items() if all(r.get(k) == v for r in runs[1:])}
    spread: dict[str, list[float] | None] = {}
    for key, _, _ in COMPARED:
        values = [r.get(key) for r in runs]
        if any(v is None for v in values):
            merged[key], spread[key] = None, None
            continue
        nums = [float(v) for v in values]  # type: ignore[arg-type]
        merged[key] = sum(nums) / len(nums)
        spread[key] = [min(nums), max(nums)]
    merged["live_range"] = spread
    merged["runs"] = [dict(r) for r in runs]
    merged["repeats"] = len(runs)
    return merged


def ranking(
    results: Mapping[str, Mapping[str, Any]], key: str = "jct_mean_s", tie: float = TIE
) -> list[list[str]] | None:
    """Policies from best (lowest ``key``) to worst, in groups that tie within ``tie``.

    None when a value is missing.
    """
    values = {p: r.get(key) for p, r in results.items()}
    if any(v is None for v in values.values()):
        return None
    groups: list[list[str]] = []
    low = 0.0
    for p in sorted(values, key=lambda p: (values[p], p)):
        v = float(values[p])  # type: ignore[arg-type]
        if groups and v <= low * (1.0 + tie) + 1e-12:
            groups[-1].append(p)
        else:
            groups.append([p])
            low = v
    return groups


def same_ranking(a: list[list[str]] | None, b: list[list[str]] | None) -> bool | None:
    """Whether two rankings agree on every pair both of them order (ties agree with anything)."""
    if a is None or b is None:
        return None
    pos_a = {p: i for i, g in enumerate(a) for p in g}
    pos_b = {p: i for i, g in enumerate(b) for p in g}
    names = sorted(pos_a)
    for i, x in enumerate(names):
        for y in names[i + 1 :]:
            da = (pos_a[x] > pos_a[y]) - (pos_a[x] < pos_a[y])
            db = (pos_b[x] > pos_b[y]) - (pos_b[x] < pos_b[y])
            if da and db and da != db:
                return False
    return True


def cold_start_bundle(profile_doc: ProfileDoc, path: Path) -> bundle_mod.Bundle:
    """A bundle with no fit (cold start), the default policy and ``profile_doc``."""
    doc = bundle_mod.assemble(
        bundle_mod.empty_fit(),
        profile_doc,
        PolicyParams(),
        {"made_by": "ttlctl validate (cold start: no fit)"},
    )
    bundle_mod.write(doc, path)
    return doc


@dataclass
class Sources:
    """Where each policy's server comes from: a URL, or a base command to start."""

    urls: dict[str, str] = field(default_factory=dict)
    base_cmd: list[str] | None = None
    startup_timeout_s: float = 600.0
    env: Mapping[str, str] | None = None


def validate(
    workload: Workload,
    sources: Sources,
    *,
    policies: Sequence[str] = LIVE_POLICIES,
    bundle: Path | None = None,
    profile: Profile | None = None,
    kv_tokens: int | None = None,
    max_num_seqs: int = CPU_MAX_NUM_SEQS,
    max_num_batched_tokens: int = CPU_MAX_NUM_BATCHED_TOKENS,
    timing: Load | None = None,
    seed: int = 0,
    max_programs: int | None = 8,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 1800.0,
    work_dir: Path | None = None,
    repeats: int = 1,
    model_config: dict[str, Any] | None = None,
    profile_repeats: int = 2,
    save_result: bool = False,
    result_dir: Path | None = None,
    label: str | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
    backend: str = "fast",
    async_scheduling: bool = False,
) -> dict[str, Any]:
    """Run ``workload`` (its first ``max_programs``) in the simulator and live, per policy.

    ``backend``: the simulator (``fast``, or ``vllm``: vLLM's own scheduler in
    process, see :mod:`replay.vllmsim`), with ``async_scheduling`` on the latter.

    Returns ``{"rows": {policy: [...]}, "sim": {...}, "live": {...}, "ranking":
    {...}, "goals": {...}, "profile": ..., "engine": ..., "servers": ...}``.
    ``model_config`` (the served model's config.json, when known) gives the profile
    its KV bytes per token and the profile and the live runs the vocabulary of their
    random prompts. Raises
    :class:`ValidateError` (bad arguments, a server that does not start or cannot
    be profiled) or :class:`replay.live.LiveError` (a server that cannot be used).
    """
    say: Progress = progress or (lambda message: None)
    timing = timing or Load()
    names = list(dict.fromkeys(policies))
    unknown = [p for p in names if p not in LIVE_POLICIES]
    if unknown or not names:
        raise ValidateError(
            f"validate compares {' and '.join(LIVE_POLICIES)} (the policies a server runs); "
            f"got {', '.join(unknown) or 'none'}"
        )
    names.sort(key=LIVE_POLICIES.index)
    if repeats < 1:
        raise ValidateError(f"repeats must be at least 1, not {repeats}")
    missing = [p for p in names if p not in sources.urls]
    if missing and sources.base_cmd is None:
        raise ValidateError(
            f"no server for {', '.join(missing)}: give --url {missing[0]}=URL, "
            "or --engine-cmd/--model so validate starts it"
        )
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValidateError("no programs to validate with")
    work_dir = Path(work_dir or tempfile.mkdtemp(prefix="ttlctl-validate-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    bundle_doc = bundle_mod.read(bundle) if bundle is not None else None
    bundle_path = bundle
    profile_source = "given" if profile is not None else None

    vocab = (model_config or {}).get("vocab_size")
    vocab_size = int(vocab) if isinstance(vocab, int) and vocab > 0 else None
    runs: dict[str, list[dict[str, Any]]] = {}
    infos: dict[str, ServerInfo] = {}
    servers: dict[str, dict[str, Any]] = {}
    for name, rep in [(n, r) for n in names for r in range(repeats)]:
        server: ManagedServer | None = None
        tag = f"-{rep + 1}" if repeats > 1 else ""
        which = f"{name} (run {rep + 1} of {repeats})" if repeats > 1 else name
        try:
            if name in sources.urls:
                url = sources.urls[name]
                servers[name] = {"url": url, "started_by_validate": False}
                if rep == 1 and name == "continuum" and warn is not None:
                    warn(
                        "continuum: repeated runs on a server validate did not start: its "
                        "TTL scheduler keeps what it learned in the earlier runs"
                    )
            else:
                if name == "continuum" and bundle_path is None:
                    if profile is None:
                        raise ValidateError(
                            "continuum alone needs --bundle or --profile (the cold-start "
                            "bundle carries a profile, measured on the vllm server otherwise)"
                        )
                    bundle_path = work_dir / "cold-start-bundle.json"
                    bundle_doc = cold_start_bundle(profile.to_json(), bundle_path)
                port = free_port()
                assert sources.base_cmd is not None
                cmd = server_command(sources.base_cmd, name, port)
                server = ManagedServer(
                    cmd,
                    server_environment(
                        sources.env or os.environ, name, bundle_path, work_dir, tag
                    ),
                    work_dir / f"{name}{tag}-server.log",
                    startup_timeout_s=sources.startup_timeout_s,
                )
                say(f"{which}: starting a server ({shlex.join(cmd[:6])} …)")
                url = server.start(port)
                started = {
                    "url": url,
                    "started_by_validate": True,
                    "command": cmd,
                    "log": str(server.log_path),
                    "ready_s": server.ready_s,
                }
                if rep == 0:
                    servers[name] = started
                else:
                    servers[name].setdefault("more_runs", []).append(started)
            info = probe(url)
            infos[name] = info
            if profile is None:
                say(f"{name}: measuring the server's profile")
                try:
                    profile = measure_engine(
                        info.url,
                        model_config=model_config,
                        repeats=profile_repeats,
                        output_tokens=16,
                        timeout_s=120.0,
                    )
                except ValueError as exc:
                    raise ValidateError(f"profiling {name}'s server: {exc}") from None
                profile_source = f"measured from {name} at {info.url}"
            say(f"{which}: live replay of {len(work.programs)} programs ({work.calls} calls)")
            runs.setdefault(name, []).append(
                run_live(
                    info.url,
                    work,
                    name,
                    timing=timing,
                    seed=seed,
                    timeout_s=timeout_s,
                    save_result=save_result,
                    result_dir=result_dir or work_dir,
                    label=f"{label}-{name}{tag}" if label else None,
                    vocab_size=vocab_size,
                    warn=warn,
                )
            )
        finally:
            if server is not None:
                say(f"{which}: stopping the server")
                server.stop()
    live = {name: merge_runs(runs[name]) for name in names}

    first = infos[names[0]]
    for name, info in infos.items():
        if (info.kv_tokens, info.block_size, info.max_model_len) != (
            first.kv_tokens,
            first.block_size,
            first.max_model_len,
        ):
            raise ValidateError(
                f"the servers differ: {names[0]} has KV {first.kv_tokens} tokens, block "
                f"{first.block_size}, max_model_len {first.max_model_len}; {name} has "
                f"{info.kv_tokens}, {info.block_size}, {info.max_model_len}"
            )
    engine = sim_engine_config(
        first,
        kv_tokens=kv_tokens,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    config = ReplayConfig(engine=engine, truncate=True)
    assert profile is not None  # measured on the first server at the latest
    cost = ProfileCostModel(profile)
    sim: dict[str, PolicyResult] = {}
    run_one = runner(backend, async_scheduling=async_scheduling)
    for name in names:
        say(f"{name}: simulating")
        spec = PolicySpec(name, bundle=bundle_doc if name == "continuum" else None)
        sim[name] = run_one(work, spec, cost, config, timing)

    rows = {name: compare(sim[name], live[name]) for name in names}
    rank_sim, rank_live = ranking(sim), ranking(live)
    goals = {}
    for name in names:
        by = {r["metric"]: r for r in rows[name]}
        jct_err, hit_err = by["jct_mean_s"]["error"], by["prefix_hit_rate"]["error"]
        goals[name] = {
            "jct_within_10pct": None if jct_err is None else abs(jct_err) <= JCT_GOAL,
            "hit_rate_within_5_points": None
            if hit_err is None
            else abs(hit_err) <= HIT_GOAL_POINTS,
        }
    return {
        "programs": len(work.programs),
        "calls": work.calls,
        "policies": names,
        "rows": rows,
        "sim": sim,
        "live": live,
        "ranking": {
            "by": "jct_mean_s",
            "sim": rank_sim,
            "live": rank_live,
            "tie_within": TIE,
            "same": same_ranking(rank_sim, rank_live),
        },
        "goals": goals,
        "profile": {"source": profile_source, "doc": profile.to_json() if profile else None},
        "bundle": None if bundle_path is None else str(bundle_path),
        "engine": {k: getattr(engine, k) for k in engine.__dataclass_fields__},
        "servers": servers,
        "server_info": {n: i.to_json() for n, i in infos.items()},
        "work_dir": str(work_dir),
        "config": {
            "jps": timing.jps,
            "concurrency": timing.concurrency,
            "seed": seed,
            "max_programs": max_programs,
            "idle_gap_cap_s": idle_gap_cap_s,
            "repeats": repeats,
            "backend": backend,
            "async_scheduling": async_scheduling,
        },
    }


__all__ = [
    "LIVE_POLICIES",
    "LiveError",
    "ManagedServer",
    "Sources",
    "ValidateError",
    "base_command",
    "compare",
    "merge_runs",
    "ranking",
    "same_ranking",
    "server_command",
    "sim_engine_config",
    "validate",
]
