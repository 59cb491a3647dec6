"""SWE-agent trajectories (``.traj``) -> canonical rows.

A ``.traj`` file is one JSON object: ``trajectory[]`` (one step per agent turn, with
``action``, ``observation``, ``response``, ``thought``, ``state`` and, in newer
versions, ``execution_time`` in seconds), ``history[]`` (the chat: role ``system``,
``user``, ``assistant``, ``tool``; assistant messages may carry ``action`` and
``tool_calls``) and ``info.model_stats`` (``tokens_sent``, ``tokens_received``,
``api_calls`` totals for the run). Each file is one program.

Calls: each trajectory step is one LLM call, in step order (``_record``
``trajectory[k]``). A file without a trajectory (or an empty one) is read from its
history: each assistant message is one call (``_record`` ``history[i]``).

Column mapping:

- ``program_id``: the file name without ``.traj`` (SWE-agent names it after the
  instance).
- ``turn``: the step's index (history-only files: the assistant message's index
  among assistant messages).
- ``arrival_s``: the files hold no timestamps, so 0.0 on turn 0 and null after
  (relative clock, ``absolute_time=False``); replay paces the later calls by
  ``tool_s``.
- ``input_tokens`` / ``output_tokens``: ESTIMATES (:mod:`.swe_agent_tokens`), not
  recorded per call. The raw estimate is characters / 4 of the text the model saw and
  wrote: the input of a call is every history message before the call's assistant
  message (content plus tool-call names and arguments), its output that assistant
  message. Steps are
  matched to the history's assistant messages by ``action`` (in order, allowing a
  history message with no step); a step missing from the history (a truncated or
  edited history) is estimated as the previous call's input + its output + its
  observation. When ``info.model_stats.tokens_sent`` is a positive number the
  program's input estimates are then scaled so that they sum to it exactly
  (largest-remainder rounding); likewise the outputs with ``tokens_received``.
  Without totals (or with 0, as in demonstrations) the raw chars / 4 is kept. The
  full history overstates what a windowed prompt held; the scaling corrects the
  total, not the per-call shape. An input estimate of 0 (a file without the history
  before the call) is raised to 1 token, taken from the largest when scaled: the model
  read a prompt, and an empty one is a bad record.
- ``reused_tokens``: null (canonical default: previous input + output, capped).
- ``tool``: the first program of ``action`` (SWE-agent commands such as ``edit``,
  ``open``, ``find_file``, ``submit``, or a shell command, read with the same rule
  as the mini-swe-agent reader: leading ``FOO=1`` assignments, ``sudo``/``env``/
  ``time``/``nohup``/``timeout N`` wrappers and ``cd DIR &&`` prefixes are skipped).
  For a function-calling step this equals the function name except for the
  ``bash`` function, where the program run is kept (it is more specific and
  matches non-function-calling trajectories). When the action is empty the first
  tool call's function name is used, else ``"unknown"``; null on the last call.
- ``tool_s``: the step's ``execution_time`` when present (null otherwise and on
  the last call, whose tool ends the program).
- ``gap_s``, ``llm_s``: null (no clock in the file).
- ``is_last``: left null (validation derives it).

Bad records: a step that is not an object, or whose ``execution_time`` is
non-numeric or negative, gives a row with ``_reason`` (the program is rejected
whole); so does a non-numeric or negative ``tokens_sent``/``tokens_received``, and a
history message that is not an object or whose ``role`` is missing, not a string or none
of :data:`ROLES` (``_record`` ``history[i]``: a row of its own, with no turn, when the
calls are steps; in a history-only file it takes a call's place, as it may have been
one). A
file that is not JSON, not an object, whose ``trajectory``/``history`` is not a
list, or that has no step and no assistant message is rejected as one record.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, duration, label
from ttlctl.ingest.formats.shell_program import first_program
from ttlctl.ingest.formats.swe_agent_tokens import (
    message_len,
    scale_tokens,
    step_output_len,
    text_len,
    tool_calls,
)
from ttlctl.ingest.jsontext import load_json_object
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

#: The roles of SWE-agent's history messages; any other (or none) is a bad record.
ROLES = ("system", "user", "assistant", "tool")

#: How many history assistant messages a step may skip when matched by action.
_LOOKAHEAD = 2

_LIST_KEY = re.compile(rb'"(?:trajectory|history)"\s*:\s*\[')
_SWE_MARKERS = (b'"action"', b'"observation"', b'"role"', b'"message_type"')
_MINI = re.compile(rb'"trajectory_format"\s*:\s*"mini-swe-agent|"mini_version"\s*:')


class SweAgentReader:
    name = "swe-agent"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        if not head.lstrip().startswith(b"{") or _MINI.search(head):
            return False
        if not _LIST_KEY.search(head):
            return False
        return logical(path).suffix == ".traj" or any(marker in head for marker in _SWE_MARKERS)

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        doc = load_json_object(path, sink, "swe-agent trajectory")
        if doc is None:
            return Parsed(pl.LazyFrame(), records=1)
        steps = doc.get("trajectory")
        history = doc.get("history")
        if steps is not None and not isinstance(steps, list):
            return _reject(path, sink, "not a swe-agent trajectory: trajectory is not a list")
        if history is not None and not isinstance(history, list):
            return _reject(path, sink, "not a swe-agent trajectory: history is not a list")
        if steps is None and history is None:
            return _reject(path, sink, "not a swe-agent trajectory: no trajectory or history")
        history = history or []
        rows = _from_steps(steps, history) if steps else _from_history(history)
        if not rows:
            return _reject(path, sink, "no LLM calls: no trajectory step or assistant message")
        name = logical(path)
        program_id = name.name.removesuffix(".traj") if name.suffix == ".traj" else name.stem
        for row in rows:
            row["program_id"] = program_id
        scale_tokens(rows, doc.get("info"))
        for row in rows:
            row.pop("_in_chars", None)
            row.pop("_out_chars", None)
        rows[0]["arrival_s"] = 0.0
        return Parsed(frame_from_rows(rows, path), records=len(rows), absolute_time=False)


def _reject(path: Path, sink: RejectSink, reason: str) -> Parsed:
    sink.reject(path, None, reason)
    return Parsed(pl.LazyFrame(), records=1)


# ---------------------------------------------------------------- tools


def _function_name(message: Any) -> str | None:
    if not isinstance(message, dict):
        return None
    for function in tool_calls(message):
        name = function.get("name")
        if isinstance(name, str) and name.strip():
            return name.strip()
    return None


def _tool_name(action: Any, message: Any) -> str:
    if isinstance(action, str) and action.strip():
        program = first_program(action)
        if program:
            return program
    return _function_name(message) or "unknown"


# ---------------------------------------------------------------- calls


def _from_steps(steps: list[Any], history: list[Any]) -> list[dict[str, Any]]:
    """One row per step, with raw character counts under ``_in_chars``/``_out_chars``."""
    prefix = [0]
    for message in history:
        prefix.append(prefix[-1] + message_len(message))
    assistants = [
        i for i, m in enumerate(history) if isinstance(m, dict) and m.get("role") == "assistant"
    ]
    bad = _bad_messages(history)
    before_first = prefix[assistants[0]] if assistants else prefix[-1]

    rows: list[dict[str, Any]] = []
    cursor = 0  # next unmatched position in ``assistants``
    last_turn = len(steps) - 1
    previous_obs = 0
    for turn, step in enumerate(steps):
        row: dict[str, Any] = {"turn": turn, "_record": f"trajectory[{turn}]"}
        rows.append(row)
        if not isinstance(step, dict):
            row["_reason"] = "malformed step: not a JSON object"
            row["_in_chars"] = row["_out_chars"] = 0
            continue
        action = step.get("action")
        match = _match(action, history, assistants, cursor)
        message = history[assistants[match]] if match is not None else None
        if match is not None:
            cursor = match + 1
            row["_in_chars"] = prefix[assistants[match]]
            row["_out_chars"] = message_len(message)
        else:
            row["_in_chars"] = (
                before_first
                if turn == 0
                else rows[-2]["_in_chars"] + rows[-2]["_out_chars"] + previous_obs
            )
            row["_out_chars"] = step_output_len(step)
        previous_obs = text_len(step.get("observation"))
        try:
            tool_s = duration(step.get("execution_time"), "execution_time")
        except RecordError as exc:
            row["_reason"] = str(exc)
            continue
        if turn != last_turn:
            row["tool"] = _tool_name(action, message)
            row["tool_s"] = tool_s
    # a history message the reader cannot read may be a call's answer or the prompt of one:
    # a bad record of its own (no turn: it is no step), which rejects the program
    for index, reason in bad:
        record = f"history[{index}]"
        rows.append({"_record": record, "_reason": reason, "_in_chars": 0, "_out_chars": 0})
    return rows


def _bad_messages(history: list[Any]) -> list[tuple[int, str]]:
    """(index, reason) of each history message that is not an object with a known role."""
    bad = []
    for index, message in enumerate(history):
        try:
            _role(message)
        except RecordError as exc:
            bad.append((index, str(exc)))
    return bad


def _role(message: Any) -> str:
    """A history message's role, one of :data:`ROLES`; RecordError otherwise."""
    if not isinstance(message, dict):
        raise RecordError("malformed message: not a JSON object")
    return label(message.get("role"), "role", ROLES)


def _match(action: Any, history: list[Any], assistants: list[int], cursor: int) -> int | None:
    """Position in ``assistants`` of the history message for a step with ``action``."""
    if cursor >= len(assistants):
        return None
    wanted = action.strip() if isinstance(action, str) else None
    for offset in range(_LOOKAHEAD + 1):
        pos = cursor + offset
        if pos >= len(assistants):
            break
        have = history[assistants[pos]].get("action")
        if have is None and offset == 0:
            return pos  # older histories name no action: match in order
        if isinstance(have, str) and wanted is not None and have.strip() == wanted:
            return pos
    return None


def _from_history(history: list[Any]) -> list[dict[str, Any]]:
    """History-only file: one row per assistant message (non-objects are bad records)."""
    rows: list[dict[str, Any]] = []
    size = 0
    # an assistant message is a call; one the reader cannot read (not an object, its role
    # missing or unknown) takes a call's place as a bad record: it may have been one
    bad = dict(_bad_messages(history))
    calls = [
        i
        for i, m in enumerate(history)
        if i in bad or (isinstance(m, dict) and m.get("role") == "assistant")
    ]
    last = calls[-1] if calls else -1
    call_set = set(calls)
    for index, message in enumerate(history):
        if index not in call_set:
            size += message_len(message)
            continue
        row: dict[str, Any] = {
            "turn": len(rows),
            "_record": f"history[{index}]",
            "_in_chars": size,
            "_out_chars": message_len(message),
        }
        rows.append(row)
        size += row["_out_chars"]
        if index in bad:
            row["_reason"] = bad[index]
        elif index != last:
            row["tool"] = _tool_name(message.get("action"), message)
    return rows


READER = SweAgentReader()
