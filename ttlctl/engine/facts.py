"""The engine's facts: what a replay needs to be sized like the server that wrote a log.

The plugin writes them into its engine log (:mod:`ttlctl.engine.enginelog`) as a line
of kind ``engine`` when it starts, whenever they change (a new bundle), and at the top
of a file that was emptied under it (a log rotated with ``copytruncate``). ``ttlctl
ingest`` keeps them in the trace's metadata and ``ttlctl refit`` sizes its replay
from them (:mod:`ttlctl.ingest.formats.engine_log` documents the record).

``TTLCTL_REPLICA`` names the replica (one name per server behind a router); the name
goes into every engine record, and ingest gives each call the replica that logged it.
vLLM-free: the plugin (:mod:`ttlctl.engine.plugin_setup`) reads the values from its
configuration.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: names the replica in the engine log (free text; unset: none)
ENV_REPLICA = "TTLCTL_REPLICA"
#: the ``kind`` of an engine-facts line (a request line has no ``kind``)
KIND = "engine"


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """The engine as configured; None where vLLM did not say."""

    vllm_version: str | None
    model: str | None
    block_size: int | None
    #: usable KV blocks (vLLM's ``num_gpu_blocks`` less its null block)
    kv_blocks: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    async_scheduling: bool | None
    prefix_caching: bool | None
    #: the sha256 of the bundle in force (None: no bundle, stock behaviour)
    bundle_sha256: str | None
    replica: str | None
    # the scheduler's other settings (a replay sized from the log takes the running batch's
    # cap, the prefill cap, the whole-prompt reservation and the watermark:
    # :mod:`replay.logged_settings`, and says which others it does not model:
    # :mod:`replay.engine_settings`); None: the default, the release lacks the setting, or
    # an older plugin wrote the line
    #: ``fcfs`` or ``priority``
    scheduling_policy: str | None = None
    #: admission into the running batch (None: ``max_num_seqs``)
    max_num_active_seqs: int | None = None
    #: waiting and running requests the engine takes before it refuses (None: no limit)
    max_num_queued_reqs: int | None = None
    #: a prefill chunk's cap per request and step (0: none)
    long_prefill_token_threshold: int | None = None
    #: the cap floored at the token budget's fair share
    long_prefill_token_threshold_adaptive: bool | None = None
    #: prefill admitted once every N steps (1: every step)
    prefill_schedule_interval: int | None = None
    #: vLLM 0.34's cache-aware admission: the waiting requests looked at (0: off) and the
    #: KV usage from which it applies
    cache_aware_admission_window: int | None = None
    cache_aware_admission_threshold: float | None = None
    #: vLLM 0.34's cap on asynchronous KV loads (None: loads start only for a free slot)
    max_num_inflight_kv_loads: int | None = None
    #: the KV connector's name (None: none)
    kv_connector: str | None = None
    #: admission checks that the whole prompt fits, not just its first chunk
    scheduler_reserve_full_isl: bool | None = None
    #: prompts longer than the token budget are split into chunks across steps
    enable_chunked_prefill: bool | None = None
    #: the tokens a step may schedule, where below ``max_num_batched_tokens`` (None: those)
    max_num_scheduled_tokens: int | None = None
    #: the share of KV blocks admission keeps free (0: none)
    watermark: float | None = None
    #: prompt tokens in prefill past which the server refuses requests (None: no limit)
    max_num_queued_tokens: int | None = None

    @property
    def kv_tokens(self) -> int | None:
        if self.kv_blocks is None or self.block_size is None:
            return None
        return self.kv_blocks * self.block_size

    def to_json(self, schema: str, at_unix_s: float) -> dict[str, Any]:
        """The engine-log line (``schema``: the log's)."""
        return {
            "schema": schema,
            "kind": KIND,
            "at_unix_s": at_unix_s,
            **asdict(self),
            "kv_tokens": self.kv_tokens,
        }


def replica_name(env: Any) -> str | None:
    """The replica named by ``TTLCTL_REPLICA`` (stripped; empty: none)."""
    name = str(env.get(ENV_REPLICA) or "").strip()
    return name or None


def configured(
    config: Any,
    cache_config: Any,
    *,
    num_gpu_blocks: int,
    connector: Any,
    vllm_version: str,
    bundle_sha256: str | None,
    replica: str | None,
) -> EngineFacts:
    """The facts of an engine configured by vLLM's ``VllmConfig`` ``config`` (read by name:
    a setting its release lacks, or of an unexpected type, is None) and ``cache_config``, with
    ``num_gpu_blocks`` KV blocks (the null block among them) and the scheduler's KV
    ``connector`` (None: none; named by the config's ``kv_transfer_config``, else its class)."""
    sched = getattr(config, "scheduler_config", None)
    model = getattr(config, "model_config", None)
    served = getattr(model, "served_model_name", None)
    if isinstance(served, (list, tuple)):
        served = served[0] if served else None
    transfer = getattr(config, "kv_transfer_config", None)
    named = getattr(transfer, "kv_connector", None) if transfer is not None else None
    if named is None and connector is not None:
        named = type(connector).__name__

    def setting(name: str) -> int | None:
        return _whole(getattr(sched, name, None))

    def switch(name: str) -> bool | None:
        value = getattr(sched, name, None)
        return value if isinstance(value, bool) else None

    def share(name: str) -> float | None:
        value = getattr(sched, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None

    return EngineFacts(
        vllm_version=vllm_version,
        model=str(served or getattr(model, "model", "") or "") or None,
        block_size=_whole(getattr(cache_config, "block_size", None)),
        kv_blocks=num_gpu_blocks - 1,  # the null block never holds KV
        max_num_seqs=setting("max_num_seqs"),
        max_num_batched_tokens=setting("max_num_batched_tokens"),
        max_model_len=_whole(getattr(model, "max_model_len", None)),
        async_scheduling=bool(getattr(sched, "async_scheduling", False)),
        prefix_caching=bool(getattr(cache_config, "enable_prefix_caching", False)),
        bundle_sha256=bundle_sha256,
        replica=replica,
        scheduling_policy=str(getattr(sched, "policy", "") or "") or None,
        max_num_active_seqs=setting("max_num_active_seqs"),
        max_num_queued_reqs=setting("max_num_queued_reqs"),
        long_prefill_token_threshold=setting("long_prefill_token_threshold"),
        long_prefill_token_threshold_adaptive=switch("long_prefill_token_threshold_adaptive"),
        prefill_schedule_interval=setting("prefill_schedule_interval"),
        cache_aware_admission_window=setting("cache_aware_admission_window"),
        cache_aware_admission_threshold=share("cache_aware_admission_threshold"),
        max_num_inflight_kv_loads=setting("max_num_inflight_kv_loads"),
        kv_connector=str(named) if named else None,
        scheduler_reserve_full_isl=switch("scheduler_reserve_full_isl"),
        enable_chunked_prefill=switch("enable_chunked_prefill"),
        max_num_scheduled_tokens=setting("max_num_scheduled_tokens"),
        watermark=share("watermark"),
        max_num_queued_tokens=setting("max_num_queued_tokens"),
    )


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None
