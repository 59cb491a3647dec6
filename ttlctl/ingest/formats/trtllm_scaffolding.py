"""TensorRT-LLM scaffolding execution traces (``*.trace.json``, compact or full).

One JSON document per agent job: ``trace_id`` and ``events[]`` in execution
order. ``message`` events carry ``branch_path``, ``conversation_id``, ``role``
and token counts (assistant messages: ``prompt_tokens``, ``completion_tokens``,
``reasoning_tokens``); ``tool_call`` events carry ``branch_path``,
``tool_name`` and ``duration_ms``; ``parallel_start`` (``num_branches``, or
``children``: events dispatched together) and ``parallel_end`` delimit parallel
regions. As in TensorRT-LLM's own replay (``tensorrt_llm/scaffolding``
``trace_replay``), each ``branch_path`` is a sequential stream with its own
conversations, and a non-empty path is a sub-agent forked by its parent branch.

Mapping (one row per assistant message):

- ``program_id``: one program per (``branch_path``, ``conversation_id``):
  ``<trace_id>`` for the first conversation of the root branch, else
  ``<trace_id>/c<conversation>`` (root branch) or
  ``<trace_id>/b<i.j…>/c<conversation>`` (sub-branch). ``trace_id`` missing:
  the file name without ``.trace.json``.
- ``parent_program_id``: for a program on a sub-branch, the program of the last
  assistant call on the nearest ancestor branch before the sub-program's first
  call (the call whose answer forked it); null for root-branch programs.
- ``turn``: order of the assistant messages within the program.
- ``input_tokens`` / ``output_tokens``: ``prompt_tokens`` / ``completion_tokens``
  (the latter includes ``reasoning_tokens``).
- ``reused_tokens``: from turn 1 on, previous ``prompt_tokens`` + previous
  ``completion_tokens`` − previous ``reasoning_tokens`` (the replay drops
  reasoning from the context), capped at ``input_tokens``; null on turn 0.
- ``tool``: the ``tool_call`` events on the same branch after this assistant
  message and before the branch's next assistant message belong to this call;
  the row names the LONGEST-RUNNING one (largest ``duration_ms``; ties and
  unknown durations: the first), the rule shared with the tracelab reader.
  Without ``tool_call`` events, the first name of the message's own
  ``tool_calls`` list when another call follows. A blank name is ``"unknown"``.
  Null on the program's last call (the trailing ``complete_task``-style call ends
  the job and is followed by no call) and when no tool ran.
- ``tool_s``: the sum of those tools' ``duration_ms`` (they run one after the
  other), except that tool calls dispatched together as the ``children`` of one
  ``parallel_start`` count as their longest. Null when any duration is missing.
- ``arrival_s``: the trace has no timestamps: 0.0 on turn 0 (relative time,
  each program starting at 0), null after.
- ``gap_s``: ``tool_s`` when a tool ran: the idle time before the next call is
  at least the tool time, and nothing else is recorded (for a call that forked
  sub-agents the pause also holds their work, which is not known, so gap_s is
  then a lower bound). Null otherwise.
- ``llm_s``: ``llm_duration_ms`` / 1000 where the message has it (full traces,
  ``*.full.trace.json``); null in compact traces.
- ``is_last``: left to validation.

Tool calls on a branch before its first assistant message are not part of any
call's pause on that branch and are left out of the rows (they are not LLM
calls). Bad records (a row with a reason, the program rejected whole): missing
or non-numeric tokens, negative or non-numeric ``duration_ms``; an event whose
``event_type`` is missing, not a string or none of :data:`EVENT_TYPES`, or a message
whose ``role`` is none of :data:`ROLES` (it may have been a call, or a tool in a call's
pause: it takes a call's place in the program of its branch and conversation, and the
branch's last call, when in another program, is rejected with it). An event that is not
an object has no branch: the trace is rejected whole, as one reject standing for all its
records. A document that is not an object with an ``events`` list is rejected whole.
The compact and the full trace of one run share their ``trace_id``: ingest one of
them, not both (the second would repeat every turn and be rejected as duplicates).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, duration, label, tokens, tool_name
from ttlctl.ingest.jsontext import load_json
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

#: The event types of a trace (TensorRT-LLM ``execution_trace.TraceEvent``) and the roles of
#: its messages; any other (or none) is a bad record.
EVENT_TYPES = ("message", "tool_call", "parallel_start", "parallel_end", "drop_kv_cache")
ROLES = ("system", "user", "assistant", "tool")

_EVENTS_KEY = re.compile(rb'"events"\s*:\s*\[')


class TrtllmScaffoldingReader:
    name = "trtllm-scaffolding"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        text = head.lstrip()
        if not text.startswith(b"{"):
            return False
        if b'"round_index"' in head or b'"program_id"' in head or b'"requests"' in head:
            return False
        return _EVENTS_KEY.search(head) is not None and b'"event_type"' in head

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        doc = load_json(path, sink)
        if doc is None:
            return Parsed(pl.LazyFrame(), records=1)
        if not isinstance(doc, dict) or not isinstance(doc.get("events"), list):
            sink.reject(
                path,
                None,
                "not a TensorRT-LLM scaffolding trace: expected an object with an events list",
            )
            return Parsed(pl.LazyFrame(), records=1)
        trace_id = doc.get("trace_id")
        if not isinstance(trace_id, (str, int)) or isinstance(trace_id, bool) or trace_id == "":
            trace_id = (
                logical(path)
                .name.removesuffix(".json")
                .removesuffix(".trace")
                .removesuffix(".full")
            )
        builder = _Builder(str(trace_id))
        builder.walk(doc["events"], "events")
        if builder.unplaced:
            # which branch, program and call the event was of is not known: none of the
            # trace's programs can be trusted whole, so the trace is rejected whole
            loc, reason = builder.unplaced[0]
            records = builder.records + len(builder.unplaced)
            sink.reject(
                path,
                loc,
                f"{reason} (its program is not known: the trace is rejected)",
                records=records,
            )
            return Parsed(pl.LazyFrame(), records=records)
        if builder.records == 0:
            sink.reject(path, None, "no assistant messages: not an LLM call trace")
            return Parsed(pl.LazyFrame(), records=1)
        builder.finish()
        return Parsed(frame_from_rows(builder.rows, path), records=builder.records)


class _Pending:
    """Tool calls seen after one assistant message, grouped into sequential steps."""

    def __init__(self, row: dict[str, Any], tool_calls: list[str]) -> None:
        self.row = row
        self.declared = tool_calls
        # each step: list of (name, seconds or None); a step's tools ran together
        self.steps: list[list[tuple[str, float | None]]] = []


class _Builder:
    def __init__(self, trace_id: str) -> None:
        self.trace_id = trace_id
        self.rows: list[dict[str, Any]] = []
        self.records = 0
        self.turns: dict[str, int] = {}
        self.prev: dict[str, dict[str, Any]] = {}
        self.parents: dict[str, str | None] = {}
        self.first_conv: dict[tuple[str, ...], int | str] = {}
        #: per branch: the last assistant call's pending tools
        self.pending: dict[tuple[str, ...], _Pending] = {}
        self.all_pending: list[_Pending] = []
        #: (record, reason) of events that are not objects: no branch, no program
        self.unplaced: list[tuple[str, str]] = []

    def program(self, path: tuple[str, ...], conv: int | str) -> str:
        if not path and conv == self.first_conv.setdefault(path, conv):
            return self.trace_id  # the job's main conversation
        branch = f"/b{'.'.join(path)}" if path else ""
        return f"{self.trace_id}{branch}/c{conv}"

    def walk(self, events: list[Any], where: str) -> None:
        for index, event in enumerate(events):
            self._event(event, f"{where}[{index}]", together=None)

    def _children(self, children: list[Any], where: str) -> None:
        """Events dispatched together: their tool calls form one parallel step."""
        group: dict[tuple[str, ...], list[tuple[str, float | None]]] = {}
        for index, child in enumerate(children):
            self._event(child, f"{where}[{index}]", together=group)
        for path, step in group.items():
            pending = self.pending.get(path)
            if pending is not None:
                pending.steps.append(step)

    def _event(
        self,
        event: Any,
        loc: str,
        together: dict[tuple[str, ...], list[tuple[str, float | None]]] | None,
    ) -> None:
        if not isinstance(event, dict):
            self.unplaced.append((loc, "malformed event: not a JSON object"))
            return
        try:
            kind = label(event.get("event_type"), "event_type", EVENT_TYPES)
            role = label(event.get("role"), "role", ROLES) if kind == "message" else None
        except RecordError as exc:
            self._bad(event, loc, str(exc))
            return
        if kind == "parallel_start" and isinstance(event.get("children"), list):
            self._children(event["children"], f"{loc}.children")
        elif role == "assistant":
            self._assistant(event, loc)
        elif kind == "tool_call":
            self._tool(event, loc, together)

    def _bad(self, event: dict[str, Any], loc: str, reason: str) -> None:
        """An event of unknown kind or role: it may have been a call, or a tool in the
        pause of the branch's last call. It takes a call's place in the program of its
        branch and conversation, as a bad record; that last call, when in another
        program (another conversation), gets the reason too. Both programs are rejected."""
        path = self._branch(event)
        before = self.pending.get(path)
        row = self._assistant(event, loc, reason=reason)
        if (
            before is not None
            and before.row["program_id"] != row["program_id"]
            and "_reason" not in before.row
        ):
            before.row["_reason"] = f"{reason} ({loc})"

    def _branch(self, event: dict[str, Any]) -> tuple[str, ...]:
        path = event.get("branch_path") or []
        if not isinstance(path, list):
            return (str(path),)
        return tuple(str(p) for p in path)

    def _assistant(
        self, event: dict[str, Any], loc: str, reason: str | None = None
    ) -> dict[str, Any]:
        """The row of an assistant message (of a bad event, with its ``reason``)."""
        self.records += 1
        path = self._branch(event)
        conv = event.get("conversation_id")
        conv = conv if isinstance(conv, (int, str)) and not isinstance(conv, bool) else 0
        program = self.program(path, conv)
        if program not in self.parents:
            self.parents[program] = self._parent(path)
        turn = self.turns.get(program, 0)
        self.turns[program] = turn + 1
        row: dict[str, Any] = {
            "program_id": program,
            "turn": turn,
            "parent_program_id": self.parents[program],
            "_record": loc,
        }
        if turn == 0:
            row["arrival_s"] = 0.0
        try:
            if reason is not None:
                raise RecordError(reason)
            row["input_tokens"] = tokens(event.get("prompt_tokens"), "prompt_tokens")
            row["output_tokens"] = tokens(event.get("completion_tokens"), "completion_tokens")
            reasoning = tokens(event.get("reasoning_tokens"), "reasoning_tokens", required=False)
            row["_context_out"] = row["output_tokens"] - min(reasoning or 0, row["output_tokens"])
            llm_ms = duration(event.get("llm_duration_ms"), "llm_duration_ms")
            row["llm_s"] = None if llm_ms is None else llm_ms / 1000.0
            prev = self.prev.get(program)
            if prev is not None and "_reason" not in prev:
                row["reused_tokens"] = min(
                    row["input_tokens"], prev["input_tokens"] + prev["_context_out"]
                )
        except RecordError as exc:
            row["_reason"] = str(exc)
        self.prev[program] = row
        self.rows.append(row)
        declared = event.get("tool_calls")
        listed = declared if isinstance(declared, list) else []
        names = [tool_name(n) or "unknown" for n in listed if isinstance(n, str)]
        pending = _Pending(row, names)
        self.pending[path] = pending
        self.all_pending.append(pending)
        return row

    def _parent(self, path: tuple[str, ...]) -> str | None:
        for cut in range(len(path) - 1, -1, -1) if path else ():
            pending = self.pending.get(path[:cut])
            if pending is not None:
                return str(pending.row["program_id"])
        return None

    def _tool(
        self,
        event: dict[str, Any],
        loc: str,
        together: dict[tuple[str, ...], list[tuple[str, float | None]]] | None,
    ) -> None:
        path = self._branch(event)
        pending = self.pending.get(path)
        if pending is None:
            return  # a tool before any call on its branch: not in any call's pause
        name = tool_name(event.get("tool_name")) or "unknown"
        try:
            ms = duration(event.get("duration_ms"), "duration_ms")
        except RecordError as exc:
            if "_reason" not in pending.row:
                pending.row["_reason"] = f"{exc} ({loc})"
            ms = None
        item = (name, None if ms is None else ms / 1000.0)
        if together is None:
            pending.steps.append([item])
        else:
            together.setdefault(path, []).append(item)

    def finish(self) -> None:
        last_turn = {program: turns - 1 for program, turns in self.turns.items()}
        for pending in self.all_pending:
            row = pending.row
            if row.get("turn") == last_turn.get(row["program_id"]):
                continue  # nothing follows the last call: no tool after it
            tools = [item for step in pending.steps for item in step]
            if tools:
                known = [(s, -i) for i, (_, s) in enumerate(tools) if s is not None]
                pick = -max(known)[1] if known else 0
                row["tool"] = tools[pick][0]
                if all(s is not None for _, s in tools):
                    row["tool_s"] = sum(
                        max(s for _, s in step if s is not None) for step in pending.steps if step
                    )
                    row["gap_s"] = row["tool_s"]
            elif pending.declared:
                row["tool"] = pending.declared[0]
        for row in self.rows:
            row.pop("_context_out", None)


READER = TrtllmScaffoldingReader()
