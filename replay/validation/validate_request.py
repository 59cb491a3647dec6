"""What ``ttlctl validate`` was asked (:class:`ValidateRequest`) and the flag each setting
comes from.

A plain frozen record: checked where it is used (:func:`~replay.validation.setup.validation_doc`,
:func:`~replay.validation.server_sources.server_base`), not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from replay.client_tags import FULL
from replay.scheduler import SimSchedulerConfig

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
    #: the simulator's and the started servers' prefill chunk cap (vLLM's
    #: ``--long-prefill-token-threshold``; 0: none) and its adaptive floor
    long_prefill_token_threshold: int = 0
    long_prefill_token_threshold_adaptive: bool = False
    #: the simulator's and the started servers' watermark (vLLM's ``--watermark``; 0: none)
    watermark: float = 0.0
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
    #: what the live client and the simulated clients tag each call with
    #: (``--client-tags``: :mod:`replay.client_tags`)
    client_tags: str = FULL
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
