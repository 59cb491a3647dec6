"""Small helpers: a TTL scheduler built as the vLLM backend builds it, driven by hand."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

from fitting.policy_params import PolicyParams
from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.scheduler import SimSchedulerConfig
from replay.vllmsim.build import Built, build, quiet_vllm
from replay.vllmsim.bundles import CREATED, NEVER
from replay.vllmsim.executor import Step, execute
from ttlctl import bundle_make

PROFILE = resolve("tiny-cpu")[0]
COST = ProfileCostModel(PROFILE)


def static_params(ttl_s: float, **more: Any) -> PolicyParams:
    """A policy that pins every call but the last for ``ttl_s`` (the static-ttl bundle)."""
    return PolicyParams(k=NEVER, cold_start_ttl_s=ttl_s, **more)


def write_bundle(path: Path, params: PolicyParams) -> Path:
    doc = bundle_make.build(
        bundle_make.empty_fit(),
        PROFILE.to_json(),
        params,
        created=CREATED,
        ttlctl_version="test",
        provenance={"test": True},
    )
    bundle_make.write(doc, path)
    return path


@dataclass
class _Outputs:
    outputs: list[int]


@dataclass
class Driver:
    """A scheduler on a clock the test moves; requests tagged as the harness tags them."""

    built: Built
    now: float = 0.0
    calls: dict[str, _Outputs] = field(default_factory=dict)
    _next_id: int = 10_000

    @property
    def sched(self) -> Any:
        return self.built.scheduler

    def add(self, rid: str, program: str, prompt: int, output: int, *, last: bool = False) -> None:
        ids = list(range(self._next_id, self._next_id + prompt))
        self._next_id += prompt
        self.add_ids(rid, program, ids, output, last=last)

    def add_ids(
        self, rid: str, program: str, ids: list[int], output: int, *, last: bool = False
    ) -> None:
        """A call whose prompt is ``ids`` (prompts that share a prefix share its blocks)."""
        self.calls[rid] = _Outputs(list(range(self._next_id, self._next_id + output)))
        self._next_id += output
        xargs: dict[str, Any] = {"program_id": program, "is_last": int(last)}
        if not last:
            xargs["tool"] = "bash"
        request = Request(
            rid,
            ids,
            SamplingParams(max_tokens=output, ignore_eos=True, extra_args=xargs),
            None,
            arrival_time=self.now,
            block_hasher=self.built.hasher,
        )
        self.sched.add_request(request)

    def schedule(self) -> tuple[Any, Step]:
        out = self.sched.schedule()
        return out, execute(out, self.sched.requests, self.calls, 999)

    def update(self, scheduled: tuple[Any, Step]) -> None:
        out, step = scheduled
        self.sched.update_from_output(out, step.output)


def driver(
    tmp_path: Path,
    params: PolicyParams,
    *,
    blocks: int,
    async_scheduling: bool = True,
    block_size: int = 16,
    env: dict[str, str] | None = None,
) -> Driver:
    """``TTLScheduler`` (``TTLAsyncScheduler`` under async) over ``blocks`` usable blocks."""
    path = write_bundle(tmp_path / "bundle.json", params)
    engine = SimSchedulerConfig(
        kv_tokens=blocks * block_size,
        block_size=block_size,
        max_num_batched_tokens=512,
        max_num_seqs=8,
        max_model_len=512,
    )
    with quiet_vllm():
        built = build(engine, async_scheduling=async_scheduling, bundle=path, env=env)
    d = Driver(built)
    built.scheduler.ttl_clock = lambda: d.now
    return d


@dataclass
class AbortFirst:
    """A harness observer that aborts program p0's first call as soon as it is in flight."""

    done: bool = False

    def scheduled(self, harness: Any, output: Any) -> None:
        pass

    def updated(self, harness: Any) -> None:
        for rid, call in list(harness.calls.items()):
            if not self.done and (call.run.program.program_id, call.turn) == ("p0", 0):
                self.done = True
                harness.abort(rid)
