"""The log formats ttlctl reads, by ``--format`` name, and per-file detection."""

from __future__ import annotations

import importlib
from pathlib import Path

from ttlctl.errors import TtlctlError
from ttlctl.ingest.base import Reader, head_bytes

#: ``--format`` name -> module under ttlctl.ingest.formats (each defines READER).
#: Detection tries them in this order; the canonical format goes first.
MODULES: dict[str, str] = {
    "canonical": "canonical",
    "engine-log": "engine_log",
    "claude-code": "claude_code",
    "mini-swe-agent": "mini_swe_agent",
    "swe-agent": "swe_agent",
    "litellm": "litellm",
    "mooncake": "mooncake",
    "tracelab": "tracelab",
    "trtllm-scaffolding": "trtllm_scaffolding",
}

ALIASES: dict[str, str] = {"weka": "claude-code"}


class UnknownFormat(TtlctlError, ValueError):
    """An ingest format no reader has."""


def names() -> list[str]:
    return ["auto", *MODULES, *ALIASES]


def get(name: str) -> Reader:
    key = ALIASES.get(name, name)
    if key not in MODULES:
        raise UnknownFormat(f"unknown format {name!r}; choose one of: {', '.join(names())}")
    module = importlib.import_module(f"ttlctl.ingest.formats.{MODULES[key]}")
    reader: Reader = module.READER
    return reader


def detect(path: Path) -> Reader | None:
    """The reader whose ``sniff`` accepts the file's first bytes, or None."""
    head = head_bytes(path)
    for name in MODULES:
        reader = get(name)
        if reader.sniff(path, head):
            return reader
    return None
