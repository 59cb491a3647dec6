"""``--backend fast|vllm``: which simulator a replay runs, and what the vLLM one accepts.

Light on purpose: it names the backends and checks a request for one without
importing vLLM (``import vllm`` pulls in torch: seconds). The vLLM backend itself
(:mod:`replay.vllmsim.run`) is imported only when it runs.

Policies on the vLLM backend: ``vllm`` and ``unlimited-kv`` run vLLM's stock
scheduler; ``program-fcfs``, ``static-ttl`` and ``continuum`` run ttlctl's
``TTLScheduler`` with a bundle that says the policy (pins off; a fixed τ; the
given or a cold-start bundle). ``infercept``, ``autellix`` and ``oracle`` have no
such mapping (:data:`UNMAPPED` says why) and are refused.

``--async-scheduling`` runs vLLM's ``AsyncScheduler`` on the vLLM backend and the
fast backend's model of it (:mod:`replay.async_sched`) on the fast one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from profiles.cost import CostModel
from replay.figures import PolicyResult
from replay.policies import PolicySpec
from replay.policy_runs import Load, run_one
from replay.progress import CallsDone
from replay.sim import ReplayConfig
from replay.workload import Workload
from ttlctl.errors import TtlctlError

BACKENDS = ("fast", "vllm")
#: policy -> the scheduler class the vLLM backend runs it on
MAPPED = {
    "vllm": "vLLM's Scheduler",
    "program-fcfs": "TTLScheduler, bundle with pins off",
    "static-ttl": "TTLScheduler, bundle with a fixed TTL",
    "continuum": "TTLScheduler, the bundle (or a cold-start one)",
    "unlimited-kv": "vLLM's Scheduler with memory for every context",
}
#: policy -> why no vLLM scheduler runs it
UNMAPPED = {
    "infercept": "its TTL reads the running batch's contexts at each pause; no bundle says that",
    "autellix": "its queue is least-attained-service per program; vLLM's and the plugin's "
    "orders are FCFS",
    "oracle": "it reads the true pauses, which no engine sees",
}


class BackendError(TtlctlError, ValueError):
    """A backend that cannot run what was asked (one line, for the user)."""


class RunOne(Protocol):
    """One policy on one workload: the result record of ``ttlctl replay --json``
    (``progress``: told the calls done now and then, :mod:`replay.progress`)."""

    def __call__(
        self,
        workload: Workload,
        spec: PolicySpec,
        cost: CostModel,
        config: ReplayConfig,
        timing: Load,
        *,
        timed: bool = True,
        progress: CallsDone | None = None,
    ) -> PolicyResult: ...


def vllm_version() -> str:
    """The installed vLLM's version; :class:`BackendError` in one line when it is missing
    (the profilers record its distribution too: :func:`profiles.vllm_checks.installed_vllm`)."""
    try:
        import vllm  # lazy: torch and vLLM take seconds to import, the fast path never needs them
    except ImportError as exc:
        raise BackendError(
            f"--backend vllm needs vLLM installed (make install, or pip install "
            f"'ttlctl[engine-cpu]'): {exc}"
        ) from None
    return str(getattr(vllm, "__version__", "unknown"))


def check(
    backend: str,
    policies: Iterable[str],
    *,
    async_scheduling: bool = False,
    offload_tokens: int = 0,
) -> None:
    """Raise :class:`BackendError` unless ``backend`` can run every policy as asked."""
    if backend not in BACKENDS:
        raise BackendError(f"--backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if backend == "fast":
        return
    for name in policies:
        if name in UNMAPPED:
            raise BackendError(
                f"policy {name} does not map onto vLLM's scheduler ({UNMAPPED[name]}); "
                f"--backend vllm runs {', '.join(MAPPED)}"
            )
    if offload_tokens > 0:
        raise BackendError("--backend vllm has no offload tier: leave --offload-tokens at 0")
    vllm_version()


def check_outputs(workload: Workload) -> None:
    """:class:`BackendError` naming the first call of no output tokens: vLLM serves at least
    one (``SamplingParams`` refuses ``max_tokens`` 0). The trace readers raise such a call
    to one token; only a workload built in code has one, which the fast backend runs."""
    for program in workload.programs:
        for turn, call in enumerate(program.calls):
            if call.output_tokens < 1:
                raise BackendError(
                    f"program {program.program_id} turn {turn} asks for "
                    f"{call.output_tokens} output tokens: --backend vllm serves at least one"
                )


def check_request(
    backend: str,
    policies: Iterable[str],
    *,
    async_scheduling: bool = False,
    offload_tokens: int = 0,
    fast_only: Mapping[str, bool] | None = None,
) -> str | None:
    """:func:`check`, and no option that only the fast backend has (``fast_only``: option
    name -> given); returns the vLLM version for ``--backend vllm``, else None."""
    check(backend, policies, async_scheduling=async_scheduling, offload_tokens=offload_tokens)
    if backend == "fast":
        return None
    given = [name for name, on in (fast_only or {}).items() if on]
    if given:
        raise BackendError(f"{given[0]} is the fast backend's: leave it out with --backend vllm")
    return vllm_version()


@dataclass(frozen=True, slots=True)
class AsyncRunOne:
    """:func:`run_one` with the fast backend's async scheduling on."""

    def __call__(
        self,
        workload: Workload,
        spec: PolicySpec,
        cost: CostModel,
        config: ReplayConfig,
        timing: Load,
        *,
        timed: bool = True,
        progress: CallsDone | None = None,
    ) -> PolicyResult:
        config = replace(config, async_scheduling=True)
        return run_one(workload, spec, cost, config, timing, timed=timed, progress=progress)


def runner(backend: str, *, async_scheduling: bool = False) -> RunOne:
    """The function that replays one policy on ``backend``."""
    if backend == "fast":
        return AsyncRunOne() if async_scheduling else run_one
    check(backend, (), async_scheduling=async_scheduling)
    # lazy: the vLLM backend imports vLLM (and torch); the fast path must not
    from replay.vllmsim.run import VllmRunner

    return VllmRunner(async_scheduling=async_scheduling)
