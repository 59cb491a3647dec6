"""The engine records of an engine log: the facts of the engine that served the calls.

A line with ``"kind": "engine"`` states the engine's facts (:data:`FACTS`; the record is
documented in :mod:`ttlctl.ingest.formats.engine_log`). :func:`parse_facts` checks one
(a bad one raises :class:`~ttlctl.ingest.fields.RecordError`); :class:`Engines` keeps the
distinct ones, each with the calls logged under it and where it was first seen, as the
trace's metadata holds them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError

#: the facts an engine record carries, with their type (bool, int or str; all nullable)
FACTS: dict[str, type] = {
    "vllm_version": str,
    "model": str,
    "block_size": int,
    "kv_blocks": int,
    "kv_tokens": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "max_model_len": int,
    "async_scheduling": bool,
    "prefix_caching": bool,
    "bundle_sha256": str,
    "replica": str,
}


@dataclass
class Engines:
    """The distinct engine records seen, per replica, with the calls logged under each."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    _by_key: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def add(
        self, facts: dict[str, Any], path: Path, lineno: int, unnamed: str | None
    ) -> dict[str, Any]:
        facts = dict(facts, replica=self.replica(facts, unnamed))
        key = tuple(sorted(facts.items()))
        entry = self._by_key.get(key)
        if entry is None:
            entry = dict(facts, file=str(path), line=lineno, calls=0)
            self._by_key[key] = entry
            self.entries.append(entry)
        return entry

    @staticmethod
    def replica(facts: dict[str, Any] | None, unnamed: str | None) -> str | None:
        """The replica the engine record names, else ``unnamed`` (the file's log)."""
        named = facts.get("replica") if facts is not None else None
        return str(named) if named else unnamed


def parse_facts(obj: dict[str, Any]) -> dict[str, Any]:
    """The facts an engine record states (each of :data:`FACTS`, null when absent;
    ``kv_tokens`` from ``kv_blocks`` × ``block_size`` when left out); RecordError when one
    is of the wrong type or out of range, or they disagree."""
    out: dict[str, Any] = {}
    for key, kind in FACTS.items():
        value = obj.get(key)
        if value is not None:
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise RecordError(f"{key} is not a whole number: {value!r}"[:120])
            if kind is int and value < 1:
                # every whole-number fact is a size: an engine of no KV block, no sequence
                # or no token budget does not start
                raise RecordError(f"{key} must be at least 1: {value!r}")
            if kind is bool and not isinstance(value, bool):
                raise RecordError(f"{key} is not true or false: {value!r}"[:120])
            if kind is str:
                value = str(value)
        out[key] = value
    blocks, size, tokens = out["kv_blocks"], out["block_size"], out["kv_tokens"]
    if blocks is not None and size is not None:
        if tokens is None:
            out["kv_tokens"] = blocks * size
        elif tokens != blocks * size:
            # the plugin writes kv_tokens = kv_blocks × block_size: the line was edited
            raise RecordError(
                f"kv_tokens {tokens} is not kv_blocks × block_size ({blocks} × {size})"
            )
    if size is not None and out["kv_tokens"] is not None and out["kv_tokens"] < size:
        raise RecordError(f"kv_tokens {out['kv_tokens']} hold no block of {size} tokens")
    return out
