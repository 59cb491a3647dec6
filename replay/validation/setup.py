"""One ``ttlctl validate`` run: its settings
(:class:`~replay.validation.validate_request.ValidateRequest`) → its document.

:func:`validation_doc` checks the settings (a load, a server per policy from URLs or a
command: :mod:`~replay.validation.server_sources`, the policies the backend runs), reads
the trace and the profile and runs :func:`~replay.validation.crosscheck.validate` (one
server per policy), :func:`~replay.validation.fleet.validate_fleet` (``--replicas``) or
:func:`~replay.validation.resimulate.resimulate` (``--resimulate``). Every refusal is a
:class:`~replay.validation.error.ValidateError` (or another
:class:`~ttlctl.errors.TtlctlError`) with a one-line message.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from profiles.router_calibration import calibrate
from profiles.shipped import resolve
from replay.client_tags import check as check_tags
from replay.fleet.run import MAX_REPLICAS
from replay.live import check_result_flags
from replay.loads import one_load
from replay.policy_flags import listed
from replay.policy_runs import Load
from replay.progress import RunsDone
from replay.scheduler_config import watermark_problem
from replay.validation.crosscheck import validate
from replay.validation.error import ValidateError
from replay.validation.fleet import TIMING_DRAWS, validate_fleet
from replay.validation.fleet_placement import check_placement
from replay.validation.resimulate import resimulate
from replay.validation.server_sources import server_base, sources
from replay.validation.validate_request import FLAGS, PLURAL_FLAGS, ValidateRequest
from replay.vllmsim.backend import check_request
from replay.workload import Workload, load


def validation_doc(
    req: ValidateRequest,
    *,
    progress: Callable[[str], None] | None = None,
    runs_done: RunsDone | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Check ``req``, run the validation and return its document (with ``trace``); with
    ``resimulate``, the recorded validation re-simulated instead. ``progress`` is told
    each step as it starts, ``runs_done`` the live runs done of all (with ``resimulate``,
    the runs re-simulated of all)."""
    if req.resimulate is not None:
        return _resimulated(req, progress, runs_done)
    if req.trace is None:
        raise ValidateError("give TRACE, the trace to validate with (or --resimulate RECORDED)")
    timing = one_load(req.jps, req.concurrency, req.seed)
    check_tags(req.client_tags)
    check_result_flags(req.save_result, req.result_dir, req.label)
    if req.programs < 1:
        raise ValidateError("--programs must be at least 1")
    if req.repeats < 1:
        raise ValidateError("--repeats must be at least 1")
    problem = watermark_problem(req.watermark)  # the servers would refuse it at start
    if problem is not None:
        raise ValidateError(problem)
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
        doc = _fleet_doc(req, req.trace, timing, base, model_config, progress, runs_done, warn)
    else:
        doc = _server_doc(req, req.trace, timing, base, model_config, progress, runs_done, warn)
    doc["trace"] = str(req.trace.resolve())
    return doc


def _server_doc(
    req: ValidateRequest,
    trace: Path,
    timing: Load,
    base: list[str] | None,
    model_config: dict[str, Any] | None,
    progress: Callable[[str], None] | None,
    runs_done: RunsDone | None,
    warn: Callable[[str], None] | None,
) -> dict[str, Any]:
    """One server per policy: each policy live, then simulated and compared."""
    names = _names(req.policies, "vllm,continuum", "--policy")
    check_request(req.backend, names, async_scheduling=req.async_scheduling)
    prof = resolve(req.profile)[0] if req.profile is not None else None
    workload = _workload(trace)
    return validate(
        workload,
        sources(req, base),
        policies=names,
        bundle=req.bundle,
        profile=prof,
        kv_tokens=req.kv_tokens,
        max_num_seqs=req.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens,
        prefill_cap=(req.long_prefill_token_threshold, req.long_prefill_token_threshold_adaptive),
        watermark=req.watermark,
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
        runs_done=runs_done,
        warn=warn,
        backend=req.backend,
        async_scheduling=req.async_scheduling,
        client_tags=req.client_tags,
    )


#: what ``--resimulate`` takes beside the recorded document (everything else the
#: recorded run had is read from it)
RESIMULATE_TAKES = ("trace", "profile", "resimulate")


def _resimulated(
    req: ValidateRequest, progress: Callable[[str], None] | None, runs_done: RunsDone | None
) -> dict[str, Any]:
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
        req.resimulate,
        trace=req.trace,
        profile=prof,
        profile_name=req.profile,
        progress=progress,
        runs_done=runs_done,
    )


def _plain(value: Any) -> Any:
    """A setting as compared with its default (a list and a tuple alike)."""
    return list(value) if isinstance(value, (list, tuple)) else value


def _names(given: Sequence[str], default: str, flag: str) -> list[str]:
    """The names ``flag`` lists (:func:`~replay.policy_flags.listed`), ``default`` when
    it was not given."""
    return listed(given, flag) if given else default.split(",")


def _fleet_doc(
    req: ValidateRequest,
    trace: Path,
    timing: Load,
    base: list[str] | None,
    model_config: dict[str, Any] | None,
    progress: Callable[[str], None] | None,
    runs_done: RunsDone | None,
    warn: Callable[[str], None] | None,
) -> dict[str, Any]:
    """``--replicas N --router R``: each policy live through a fleet per router."""
    if req.replicas is None:
        raise ValidateError("--router needs --replicas N (the fleet's size)")
    if req.replicas < 1:
        raise ValidateError(f"--replicas must be at least 1, not {req.replicas}")
    if req.replicas > MAX_REPLICAS:  # a live fleet starts a server per replica
        raise ValidateError(
            f"--replicas must be at most {MAX_REPLICAS:,} (a server per replica), "
            f"not {req.replicas:,}"
        )
    if req.backend != "fast":
        raise ValidateError(
            "--replicas simulates each replica with the fast backend: --backend does not apply"
        )
    workload = _workload(trace)
    vocab = (model_config or {}).get("vocab_size")
    prof, prof_path = resolve(req.profile) if req.profile is not None else (None, None)
    return validate_fleet(
        workload,
        sources(req, base),
        replicas=req.replicas,
        routers=_names(req.routers, "cache_aware", "--router"),
        policies=_names(req.policies, "vllm", "--policy"),
        bundle=req.bundle,
        calibration=calibrate(prof, source=prof_path) if prof is not None else None,
        profile=prof,
        model_config=model_config,
        kv_tokens=req.kv_tokens,
        max_num_seqs=req.max_num_seqs,
        max_num_batched_tokens=req.max_num_batched_tokens,
        prefill_cap=(req.long_prefill_token_threshold, req.long_prefill_token_threshold_adaptive),
        watermark=req.watermark,
        cpus_per_replica=req.cpus_per_replica,
        gpus_per_replica=req.gpus_per_replica,
        async_scheduling=req.async_scheduling,
        client_tags=req.client_tags,
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
        runs_done=runs_done,
        warn=warn,
    )


def _workload(trace: Path) -> Workload:
    """The trace's programs, refused when there are none."""
    workload = load(trace)
    if not workload.programs:
        raise ValidateError(f"{trace}: no programs to replay")
    return workload
