"""The scheduler settings of a logged engine that the simulators model, beside its sizes.

An engine log states them (:class:`ttlctl.engine.facts.EngineFacts`) and a replay sized from
the log takes them (:func:`replay.refit_sizing.size`):

- the running batch's cap (:func:`admitted`): vLLM admits into the running batch up to
  ``max_num_active_seqs`` where that is set below ``max_num_seqs``, which then only sizes the
  model runner; the simulators' ``max_num_seqs`` is that cap;
- the prefill chunk cap (:func:`logged_prefill_cap`: ``--long-prefill-token-threshold`` and
  its adaptive floor), where a flag given wins, reported when it disagrees;
- the whole-prompt reservation (``--scheduler-reserve-full-isl``, on by default): whether
  admission asks room for the whole prompt or only its first chunk;
- the watermark (``--watermark``, 0 by default): the share of the blocks admission keeps
  free while another request runs.

Those the simulators do not model are said instead (:mod:`replay.engine_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from replay.scheduler_config import SimSchedulerConfig, watermark_problem

#: the prefill cap's flags, by the key of a ``given`` mapping (None: not given)
PREFILL_FLAGS = {
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
    "long_prefill_token_threshold_adaptive": "--long-prefill-token-threshold-adaptive",
}


def admitted(entry: Mapping[str, Any]) -> int | None:
    """The running batch's cap an engine's facts state: ``max_num_active_seqs`` where it is
    set below ``max_num_seqs`` (vLLM then admits at most that many), else ``max_num_seqs``;
    None when neither is a whole number."""
    seqs, active = _whole(entry.get("max_num_seqs")), _whole(entry.get("max_num_active_seqs"))
    if seqs is None:
        return None
    return active if active is not None and active < seqs else seqs


def logged_prefill_cap(entry: Mapping[str, Any]) -> tuple[int, bool] | None:
    """The prefill chunk cap an engine's facts state (the threshold, whether adaptive); None
    when they state none (an older plugin: the default, no cap)."""
    threshold = entry.get("long_prefill_token_threshold")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        return None
    return threshold, entry.get("long_prefill_token_threshold_adaptive") is True


def logged_reserve(entry: Mapping[str, Any]) -> bool | None:
    """Whether the engine reserved room for a whole prompt at admission; None: not stated."""
    value = entry.get("scheduler_reserve_full_isl")
    return value if isinstance(value, bool) else None


def logged_watermark(entry: Mapping[str, Any]) -> float | None:
    """The share of blocks the engine kept free at admission; None: not stated (or not a
    share vLLM takes)."""
    value = _stated_watermark(entry)
    return value if value is not None and watermark_problem(value) is None else None


def _stated_watermark(entry: Mapping[str, Any]) -> float | None:
    """The watermark the facts state as a number, in vLLM's range or not (None: none)."""
    value = entry.get("watermark")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def scheduling_key(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """What tells one engine's modelled scheduler settings from another's (an engine
    restarted with another prefill cap, reservation or watermark is another engine to
    replay)."""
    return logged_prefill_cap(entry), logged_reserve(entry), logged_watermark(entry)


def as_logged(
    engine: SimSchedulerConfig,
    given: Mapping[str, float | None],
    entry: Mapping[str, Any] | None,
    of: str,
) -> tuple[SimSchedulerConfig, list[str], bool]:
    """``engine`` with the modelled settings of the engine record ``entry`` (None: no log):
    the prefill cap and the watermark as the flags give them (``given``), else as logged (the
    cap no longer than ``max_model_len``: a longer cap caps no prompt), else ``engine``'s
    own; the reservation as logged. Returns the engine, a note per flag that disagrees with the
    log (``of`` names the log's engine), and whether the log changed anything."""
    notes: list[str] = []
    changes: dict[str, Any] = {}
    from_log = False
    logged = logged_prefill_cap(entry) if entry is not None else None
    for i, (key, flag) in enumerate(PREFILL_FLAGS.items()):
        mine = given.get(key)
        theirs = None if logged is None else logged[i]
        if mine is not None:
            changes[key] = mine if i == 0 else bool(mine)
            if theirs is not None and theirs != mine:
                shown = f"{mine:,}" if i == 0 else ("on" if mine else "off")
                was = f"{theirs:,}" if i == 0 else ("on" if theirs else "off")
                notes.append(f"{flag} {shown} disagrees with {of} ({was}): the flag wins")
        elif theirs is not None:
            value = min(theirs, engine.max_model_len) if i == 0 else theirs
            if value != theirs:
                notes.append(
                    f"{of} capped prefills at {theirs:,} tokens, past the replay's "
                    f"max_model_len: replayed at {value:,} (no prompt is longer)"
                )
            from_log = from_log or value != getattr(engine, key)
            changes[key] = value
    reserve = logged_reserve(entry) if entry is not None else None
    if reserve is not None:
        from_log = from_log or reserve != engine.reserve_full_prompt
        changes["reserve_full_prompt"] = reserve
    watermark = logged_watermark(entry) if entry is not None else None
    mine = given.get("watermark")
    stated = _stated_watermark(entry) if entry is not None and mine is None else None
    if stated is not None and watermark_problem(stated) is not None:  # an edited log
        notes.append(f"{of} states watermark {stated:g}, which vLLM refuses: replayed without one")
    if mine is not None:
        changes["watermark"] = mine
        if watermark is not None and watermark != mine:
            notes.append(f"--watermark {mine:g} disagrees with {of} ({watermark:g}): the flag wins")
    elif watermark is not None:
        from_log = from_log or watermark != engine.watermark
        changes["watermark"] = watermark
    return (replace(engine, **changes) if changes else engine), notes, from_log


def _whole(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return int(value) if ok else None
