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
    # cap and the prefill cap, and says which others it does not model:
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
