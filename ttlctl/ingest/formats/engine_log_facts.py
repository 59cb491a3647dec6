"""The engine records of an engine log: the facts of the engine that served the calls.

A line with ``"kind": "engine"`` states the engine's facts (:data:`FACTS`; the record is
documented in :mod:`ttlctl.ingest.formats.engine_log`). :func:`parse_facts` checks one
(a bad one raises :class:`~ttlctl.ingest.fields.RecordError`); :class:`Engines` keeps the
distinct ones, each with the calls logged under it and where it was first seen, as the
trace's metadata holds them.

A replica no engine record names is named by its log, or null when the calls are all of one
log; which logs count is known only once every file is read (a log each of whose requests is
a duplicate of one read before, a copy, is none: :func:`log_names`), so the reader gives such
calls and records an :class:`Unnamed` replica until :meth:`Engines.settle`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError

#: the facts an engine record carries, with their type (bool, int, float or str; all nullable)
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
    # the scheduler's other settings (null: vLLM's default, or a release without it)
    "scheduling_policy": str,
    "max_num_active_seqs": int,
    "max_num_queued_reqs": int,
    "long_prefill_token_threshold": int,
    "long_prefill_token_threshold_adaptive": bool,
    "prefill_schedule_interval": int,
    "cache_aware_admission_window": int,
    "cache_aware_admission_threshold": float,
    "max_num_inflight_kv_loads": int,
    "kv_connector": str,
    "scheduler_reserve_full_isl": bool,
    "enable_chunked_prefill": bool,
    "max_num_scheduled_tokens": int,
    "watermark": float,
    "max_num_queued_tokens": int,
}
#: the whole-number facts that may be 0 (a setting that is off), where every other one is a
#: size of at least 1 (an engine of no KV block, no sequence or no token budget does not start)
MAY_BE_ZERO = frozenset(
    {
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "long_prefill_token_threshold",
        "cache_aware_admission_window",
    }
)


@dataclass(frozen=True, slots=True)
class Unnamed:
    """The replica of a call or engine record of ``log`` that no engine record names, until
    :meth:`Engines.settle` names it (its log, or null)."""

    log: str


def log_names(logs: Sequence[str], copies: Collection[str]) -> dict[str, str | None]:
    """What an unnamed replica of each log is called: the log (its path as given) when the
    calls are of several logs, else null (one file, or one log's rotated parts). A copy (a log
    each of whose requests was read before in another) is not one of them, and is left out."""
    replicas = [log for log in dict.fromkeys(logs) if log not in copies]
    several = len(replicas) > 1
    # without the blanks around it, as a trace's replica names are (its column is read so)
    return {log: log.strip() if several else None for log in replicas}


@dataclass
class Engines:
    """The distinct engine records seen, per replica, with the calls logged under each.
    While files are read, a replica no record names is :class:`Unnamed`; after
    :meth:`settle`, each entry's ``replica`` is a name or None."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    _by_key: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def add(
        self, facts: dict[str, Any], path: Path, lineno: int, unnamed: Unnamed
    ) -> dict[str, Any]:
        facts = dict(facts, replica=self.replica(facts, unnamed))
        key = tuple(sorted(facts.items(), key=_by_name))
        entry = self._by_key.get(key)
        if entry is None:
            entry = dict(facts, file=str(path), line=lineno, calls=0)
            self._by_key[key] = entry
            self.entries.append(entry)
        return entry

    @staticmethod
    def replica(facts: dict[str, Any] | None, unnamed: Unnamed) -> str | Unnamed:
        """The replica the engine record (its facts, or its entry) names, else ``unnamed``
        (the file's log); an entry's own :class:`Unnamed` is kept."""
        named = facts.get("replica") if facts is not None else None
        if isinstance(named, Unnamed):
            return named
        return str(named) if named else unnamed

    def settle(self, names: Mapping[str, str | None]) -> None:
        """Name each :class:`Unnamed` replica by ``names`` (:func:`log_names`), merging the
        entries that are then alike (their calls summed, the first's file and line kept).
        A copy's own entry (its log not in ``names``), under which no call was logged, is
        left out: its requests, and so its engine, were read in another file."""
        kept: dict[tuple[Any, ...], dict[str, Any]] = {}
        for entry in self.entries:
            replica = entry["replica"]
            if isinstance(replica, Unnamed):
                if replica.log not in names and not entry["calls"]:
                    continue
                entry["replica"] = names.get(replica.log)
            key = tuple(sorted(((k, v) for k, v in entry.items() if k in FACTS), key=_by_name))
            first = kept.setdefault(key, entry)
            if first is not entry:
                first["calls"] += entry["calls"]
        self.entries = list(kept.values())
        self._by_key = {}


def _by_name(item: tuple[str, Any]) -> str:
    """A fact's sort key: its name (its value may be an :class:`Unnamed`, not comparable)."""
    return item[0]


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
            least = 0 if key in MAY_BE_ZERO else 1
            if kind is int and value < least:
                raise RecordError(f"{key} must be at least {least}: {value!r}")
            if kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise RecordError(f"{key} is not a number: {value!r}"[:120])
                if not 0.0 <= value <= 1.0:  # each such fact is a share of the KV cache
                    raise RecordError(f"{key} must be from 0 to 1: {value!r}")
                value = float(value)
            if kind is bool and not isinstance(value, bool):
                raise RecordError(f"{key} is not true or false: {value!r}"[:120])
            if kind is str:
                if not isinstance(value, str):
                    raise RecordError(f"{key} is not text: {value!r}"[:120])
                if key == "replica":
                    # as the plugin reads TTLCTL_REPLICA (ttlctl.engine.facts.replica_name):
                    # the name without the blanks around it; a blank one names none
                    value = value.strip() or None
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
