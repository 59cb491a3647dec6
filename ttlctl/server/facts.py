"""What a running vLLM server says about itself: :func:`probe` → :class:`ServerInfo`.

``/v1/models`` names the served model and its ``max_model_len``; ``/version`` the
vLLM version; the labels of ``vllm:cache_config_info`` on ``/metrics`` the KV cache
(block size, blocks, bytes, tokens) and whether prefix caching is on; a
``ttlctl:pins_*`` series that the server runs the TTL scheduler. Only the model is
required: the rest is None when the server does not say. :func:`step_budget`: the
server's ``max_num_batched_tokens``, which only a server in development mode
(``VLLM_SERVER_DEV_MODE=1``: ``/server_info``) tells.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ttlctl.server import client, prom
from ttlctl.server.client import ServerError


@dataclass(slots=True)
class ServerInfo:
    """What a running server says about itself."""

    url: str
    model: str
    max_model_len: int | None
    block_size: int | None
    #: KV cache capacity in tokens (``vllm:cache_config_info``)
    kv_tokens: int | None
    num_gpu_blocks: int | None
    version: str | None
    prefix_caching: bool | None
    #: whether ``ttlctl:pins_*`` series are on ``/metrics`` (a TTLScheduler server)
    ttl_metrics: bool
    #: bytes of the whole KV cache (``kv_cache_memory_bytes``), when the server says
    kv_cache_memory_bytes: int | None = None

    def token_limit(self) -> int | None:
        """Longest request (prompt + output) the server will take."""
        limits = [x for x in (self.max_model_len, self.kv_tokens) if x]
        return min(limits) if limits else None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def probe(url: str, timeout_s: float = 30.0) -> ServerInfo:
    """Ask the server at ``url`` what it is (:class:`ServerError`: it cannot be used)."""
    url = client.normalise_url(url)
    models = client.json_answer(url, "/v1/models", timeout_s=timeout_s)
    entries = models.get("data") if isinstance(models, dict) else None
    if not entries or not isinstance(entries[0], dict) or "id" not in entries[0]:
        raise ServerError(f"{url}: /v1/models lists no model")
    entry = entries[0]
    mml = entry.get("max_model_len")
    try:
        version_doc = client.json_answer(url, "/version", timeout_s=timeout_s)
        version = str(version_doc.get("version")) if isinstance(version_doc, dict) else None
    except ServerError:
        version = None
    try:
        text = client.text(url, "/metrics", timeout_s=timeout_s)
    except ServerError:
        text = ""
    info = prom.metric_labels(text, prom.CACHE_INFO)
    blocks = prom.int_label(info, "num_gpu_blocks")
    block_size = prom.int_label(info, "block_size")
    kv = prom.int_label(info, "kv_cache_size_tokens")
    if kv is None and blocks and block_size:
        kv = blocks * block_size
    caching = info.get("enable_prefix_caching")
    return ServerInfo(
        url=url,
        model=str(entry["id"]),
        max_model_len=int(mml) if isinstance(mml, int) and mml > 0 else None,
        block_size=block_size,
        kv_tokens=kv,
        num_gpu_blocks=blocks,
        version=version,
        prefix_caching=None if caching is None else caching == "True",
        ttl_metrics=prom.TTL_SERIES in text,
        kv_cache_memory_bytes=prom.int_label(info, "kv_cache_memory_bytes"),
    )


def step_budget(url: str, timeout_s: float = 30.0) -> int | None:
    """The most tokens one engine step of the server at ``url`` computes
    (``scheduler_config.max_num_batched_tokens`` of ``/server_info?config_format=json``,
    served in development mode only; None: the server does not say)."""
    try:
        doc = client.json_answer(
            client.normalise_url(url), "/server_info?config_format=json", timeout_s=timeout_s
        )
    except ServerError:
        return None
    config = doc.get("vllm_config") if isinstance(doc, dict) else None
    scheduler = config.get("scheduler_config") if isinstance(config, dict) else None
    budget = scheduler.get("max_num_batched_tokens") if isinstance(scheduler, dict) else None
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        return None
    return budget
