"""The log formats ttlctl reads, by ``--format`` name, and per-file detection."""

from __future__ import annotations

from pathlib import Path

from ttlctl.errors import TtlctlError
from ttlctl.ingest.formats import (
    canonical,
    claude_code,
    engine_log,
    litellm,
    mini_swe_agent,
    mooncake,
    swe_agent,
    tracelab,
    trtllm_scaffolding,
)
from ttlctl.ingest.rawfile import head_bytes
from ttlctl.ingest.reader import Reader

#: ``--format`` name -> its reader. Detection tries them in this order; the canonical
#: format goes first.
READERS: dict[str, Reader] = {
    "canonical": canonical.READER,
    "engine-log": engine_log.READER,
    "claude-code": claude_code.READER,
    "mini-swe-agent": mini_swe_agent.READER,
    "swe-agent": swe_agent.READER,
    "litellm": litellm.READER,
    "mooncake": mooncake.READER,
    "tracelab": tracelab.READER,
    "trtllm-scaffolding": trtllm_scaffolding.READER,
}

ALIASES: dict[str, str] = {"weka": "claude-code"}


class UnknownFormat(TtlctlError, ValueError):
    """An ingest format no reader has."""


def names() -> list[str]:
    return ["auto", *READERS, *ALIASES]


def get(name: str) -> Reader:
    key = ALIASES.get(name, name)
    if key not in READERS:
        raise UnknownFormat(
            f"--format: unknown format {name!r}; choose one of: {', '.join(names())}"
        )
    return READERS[key]


def detect(path: Path) -> Reader | None:
    """The reader whose ``sniff`` accepts the file's first bytes, or None."""
    head = head_bytes(path)
    for reader in READERS.values():
        if reader.sniff(path, head):
            return reader
    return None
