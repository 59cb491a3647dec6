"""How big the replayed engine is: the flags given, else what the engine log states, else
what the served bundle recorded, else the simulator's defaults.

The plugin writes its engine's facts into the engine log (``kind: engine`` lines,
:mod:`ttlctl.engine.facts`); ingest keeps them in the trace's metadata
(:func:`ttlctl.trace.io.engines`, one entry per replica and distinct set of facts).
A refit judged on an engine of another size judges another server: with ~4k tokens
of KV on the server and the simulator's default 600k in the replay, every policy ties
for lack of contention. So the replay takes the log's size by default and says so in
one line; a flag given wins, and one that disagrees with the log is reported; a log
without the facts (an older plugin) gets one line naming the flags to give.

What is sized (:data:`SIZE_FLAGS`): the KV cache in tokens (the usable blocks × the block
size), the block size, ``max_num_seqs``, ``max_num_batched_tokens`` and ``max_model_len``;
the running batch's cap is ``max_num_active_seqs`` where the engine set it below
``max_num_seqs``, and the prefill chunk cap (``--long-prefill-token-threshold``, adaptive
or not) and the watermark are the flag's, else the log's, and the whole-prompt reservation
the log's (:mod:`replay.logged_settings`). The log also says whether the
engine ran vLLM's async scheduling (the fast simulator schedules synchronously) and the
scheduler settings no replay models (:mod:`replay.engine_settings`): a note says each that
is not vLLM's default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from replay.engine_settings import notes as unmodelled_notes
from replay.logged_settings import PREFILL_FLAGS, admitted, as_logged, scheduling_key
from replay.scheduler import SimSchedulerConfig
from ttlctl.errors import ConfigError

#: the engine's sizes a log states, and the flag that sets each
SIZE_FLAGS: dict[str, str] = {
    "kv_tokens": "--kv-tokens",
    "block_size": "--block-size",
    "max_num_seqs": "--max-num-seqs",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "max_model_len": "--max-model-len",
}


@dataclass(frozen=True, slots=True)
class Sized:
    """One engine of the replay: its configuration and what to tell the user about it."""

    engine: SimSchedulerConfig
    #: the one line: where the size came from, and the size
    line: str
    #: the replica it stands for (None: the log names none)
    replica: str | None = None
    #: lines worth a warning: flags that disagree with the log, no facts in the log, …
    notes: tuple[str, ...] = ()
    #: whether the size is the log's (at least one value was taken from it)
    from_log: bool = False
    #: where its block size came from: ``--block-size``, its log, or the base's source
    block_source: str = "defaults"


def replicas(engines: Sequence[Mapping[str, Any]]) -> dict[str | None, list[Mapping[str, Any]]]:
    """The engines' facts by replica (in the order first seen)."""
    out: dict[str | None, list[Mapping[str, Any]]] = {}
    for entry in engines:
        name = entry.get("replica")
        out.setdefault(None if name is None else str(name), []).append(entry)
    return out


def stated(
    entries: Sequence[Mapping[str, Any]], replica: str | None = None
) -> tuple[dict[str, int], str | None]:
    """The sizes one replica's facts state (those of the entry that served most calls), and
    a note naming the replica when its entries disagree on them or on the modelled scheduler
    settings (the engine was restarted with another size, or only with another prefill cap,
    reservation or watermark: said so; entries that differ only in other facts, a new bundle,
    are one engine)."""
    if not entries:
        return {}, None
    best = _busiest(entries)
    sizes = _sizes(best)
    distinct = {(tuple(sorted(_sizes(e).items())), scheduling_key(e)) for e in entries}
    note = None
    if len(distinct) > 1:
        shapes = len({shape for shape, _ in distinct})
        changed = (
            f"changed size ({shapes} sizes)"
            if shapes > 1
            else f"changed its prefill cap, reservation or watermark ({len(distinct)} settings)"
        )
        note = (
            f"the log's engine{_of(replica)} {changed}: sized as the one that served most "
            f"calls ({int(best.get('calls') or 0):,})"
        )
    return sizes, note


def _busiest(entries: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The entry that served most calls (the first of those that tie)."""
    return max(entries, key=lambda e: int(e.get("calls") or 0))


def _sizes(entry: Mapping[str, Any]) -> dict[str, int]:
    """The sizes one engine record states; its ``max_num_seqs`` is the running batch's cap
    (:func:`replay.logged_settings.admitted`: ``max_num_active_seqs`` where set below it)."""
    out = {k: int(entry[k]) for k in SIZE_FLAGS if isinstance(entry.get(k), int) and entry[k] > 0}
    cap = admitted(entry)
    if cap is not None:
        out["max_num_seqs"] = cap
    return out


def size(
    given: Mapping[str, float | None],
    entries: Sequence[Mapping[str, Any]],
    base: SimSchedulerConfig,
    base_source: str,
    replica: str | None = None,
) -> Sized:
    """The replay's engine for one replica: ``given`` (the flags; None: not given) wins,
    then the sizes its log ``entries`` state, then ``base`` (the bundle's record or the
    defaults, ``base_source`` saying which)."""
    logged, changed = stated(entries, replica)
    values: dict[str, Any] = {}
    notes: list[str] = [changed] if changed else []
    for key, flag in SIZE_FLAGS.items():
        mine = given.get(key)
        theirs = logged.get(key)
        if mine is not None:
            values[key] = mine
            if theirs is not None and theirs != mine:
                notes.append(
                    f"{flag} {mine:,} disagrees with the log's engine{_of(replica)} "
                    f"({theirs:,}): the flag wins"
                )
        elif theirs is not None:
            values[key] = theirs
    if given.get("block_size") is not None:
        block_source = "--block-size"
    elif "block_size" in logged:
        block_source = f"the log's engine{_of(replica)}"
    else:
        block_source = f"its log states none: {base_source}"
    kv, block = values.get("kv_tokens"), values.get("block_size", base.block_size)
    if given.get("kv_tokens") is not None and kv is not None and kv < block:
        # said here, where the block size is known and where it came from
        raise ConfigError(
            f"--kv-tokens must hold at least one block: --kv-tokens {kv:,} with a block size "
            f"of {block} ({block_source})"
        )
    engine, disagree, scheduled = as_logged(
        base.resized(**values),
        given,
        _busiest(entries) if entries else None,
        f"the log's engine{_of(replica)}",
    )
    notes.extend(disagree)
    shown = _shape(engine)
    from_log = scheduled or any(given.get(k) is None and k in logged for k in SIZE_FLAGS)
    # what neither a flag nor the log gives: the base's
    missing = [f for k, f in SIZE_FLAGS.items() if given.get(k) is None and k not in logged]
    if missing:
        notes.append(
            (
                f"the log{_of(replica)} does not state its engine's size (not an engine "
                "log, or one written by an older plugin)"
                if not logged
                else f"the log's engine{_of(replica)} does not state every size"
            )
            + f": the replay uses {base_source} for {', '.join(missing)}; give them as the "
            "server had them"
        )
    if from_log:
        line = f"replay sized from the engine log{_of(replica)}: {shown}"
        # a prefill cap flag wins too (the line shows its value, not the log's)
        if any(given.get(k) is not None for k in (*SIZE_FLAGS, *PREFILL_FLAGS, "watermark")):
            line += " (flags given win)"
    elif not missing:
        line = f"replay engine{_of(replica)} as the flags give it: {shown}"
    elif len(missing) < len(SIZE_FLAGS):
        line = f"replay engine{_of(replica)} (the flags given, else {base_source}): {shown}"
    else:
        line = f"replay engine{_of(replica)} ({base_source}): {shown}"
    capped = sorted(
        {a for e in entries if (a := admitted(e)) is not None and a != e.get("max_num_seqs")}
    )
    if capped and given.get("max_num_seqs") is None:
        notes.append(
            f"the log's engine{_of(replica)} admitted at most "
            f"{', '.join(f'{a:,}' for a in capped)} requests into its running batch "
            "(--max-num-active-seqs; its --max-num-seqs sized only the model runner): the "
            "replay's max_num_seqs"
        )
    notes.extend(unmodelled_notes(entries, f"the log's engine{_of(replica)}"))
    if any(e.get("async_scheduling") for e in entries):
        notes.append(
            f"the log's engine{_of(replica)} ran vLLM's async scheduling; the fast simulator "
            "replays it scheduling synchronously"
        )
    return Sized(engine, line, replica, tuple(notes), from_log, block_source)


def by_replica(
    names: Sequence[str],
    engines: Sequence[Mapping[str, Any]],
    given: Mapping[str, float | None],
    base: SimSchedulerConfig,
    base_source: str,
) -> list[Sized]:
    """One engine per replica named (the trace's ``replica`` column, in the order given:
    a fleet replay's replica index), each sized by :func:`size` from its own facts."""
    facts = replicas(engines)
    return [size(given, facts.get(name, []), base, base_source, name) for name in names]


def _of(replica: str | None) -> str:
    return f" (replica {replica})" if replica is not None else ""


def _shape(engine: SimSchedulerConfig) -> str:
    shown = (
        f"{engine.kv_tokens:,} KV tokens in blocks of {engine.block_size}, "
        f"max_num_seqs {engine.max_num_seqs}, max_num_batched_tokens "
        f"{engine.max_num_batched_tokens:,}, max_model_len {engine.max_model_len:,}"
    )
    if engine.long_prefill_token_threshold:
        adaptive = " (adaptive)" if engine.long_prefill_token_threshold_adaptive else ""
        shown += f", long_prefill_token_threshold {engine.long_prefill_token_threshold:,}{adaptive}"
    if not engine.reserve_full_prompt:
        shown += ", admitting on a prompt's first chunk (no whole-prompt reservation)"
    if engine.watermark:
        shown += f", watermark {engine.watermark:g} ({engine.watermark_blocks:,} blocks kept free)"
    return shown


def as_json(sized: Sized) -> dict[str, Any]:
    """The replay document's record of one engine."""
    engine = sized.engine.to_json()
    return {
        "replica": sized.replica,
        "engine": engine,
        "sized_from_log": sized.from_log,
        "line": sized.line,
        "notes": list(sized.notes),
    }
