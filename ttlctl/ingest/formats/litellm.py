"""LiteLLM request logs (JSONL, one line per LLM call), e.g. tau2-bench sessions.

Each line is one call with ``timestamp`` (ISO 8601, µs, absolute clock),
``status``, ``model``, ``prompt_tokens``, ``completion_tokens`` (numbers or
numeric strings), ``request`` and ``response``. ``request`` and ``response`` may
be JSON objects or Python ``repr`` strings holding object reprs such as
``ChatCompletionMessageToolCall(function=Function(arguments='…', name='x'))``
that neither JSON nor :func:`ast.literal_eval` can read; a small tolerant parser
(``ttlctl.ingest.pyrepr``: Python's tokenizer plus a recursive-descent reader that
turns ``Name(k=v, …)`` into ``{"__type__": "Name", "k": v}``) reads them, and a
regex over the raw text is the last resort for tool names (the tool calls in any of
these forms: :mod:`.litellm_tools`).

Mapping (one row per line, in file order):

- ``program_id``: the file stem (one session per file); a line carrying a
  top-level ``session_id`` / ``litellm_session_id`` is grouped under that id
  instead. ``trace_id`` differs on every line, so it is not a session.
- ``turn``: position of the line within its program (0-based).
- ``arrival_s``: ``timestamp`` as epoch seconds (``absolute_time``; naive
  timestamps are taken as UTC). The log does not say whether it is stamped when
  the call is sent or when it returns (``response.created``, 1 s resolution,
  always falls in the same second), so it is used as the call's arrival.
- ``input_tokens`` / ``output_tokens``: ``prompt_tokens`` / ``completion_tokens``
  (falling back to ``response.usage``); missing or non-numeric makes the line bad.
- ``reused_tokens``: 0 when this call's message history does not continue the
  previous call's (the history was reset, e.g. after the probe below); else null
  (the canonical default: previous prompt + output, capped at this input).
- ``tool``: what happened between this call and the next, read from the NEXT
  request's messages. When the next history extends this one and the messages
  added end with ``tool`` results, the tool is the name of the first
  ``tool_calls`` entry of the assistant message added (this call's own answer),
  matched by ``tool_call_id``, falling back to the tool calls in this call's
  ``response`` (a blank name is none), else ``"unknown"``. Several parallel tool
  calls: the log has no per-tool duration, so the first one is named (the rule shared with the
  tracelab and trtllm-scaffolding readers is "the longest-running tool, the
  first one when durations are unknown"). Null when the next call follows a
  user message (a user pause), when the history was reset, when the next
  request could not be read and this response asked for no tool, and on the
  last call.
- ``tool_s``: null (LiteLLM records no tool duration); ``llm_s``: null (no
  latency field).
- ``gap_s``: next ``timestamp`` − this ``timestamp``, an UPPER BOUND on the idle
  time: it also contains one call's LLM latency (this call's if timestamps are
  taken at send time, the next call's if at completion). Null on the last call,
  and where a timestamp is missing or the clock goes backwards (validation then
  rejects the program for out-of-order arrivals).
- ``is_last``: left to validation.

The first line of each tau2 file is a tiny ``"hi"`` probe (one user message,
no tools, ``max_tokens`` 1, ``finish_reason='length'``) that the harness sends
to check the model before the agent starts. It is not part of the agent's
conversation (the next call's history does not start with it), but it is real
traffic of the same session, sent about 2 s before the agent's first call. It
is kept as turn 0 of the program so that no record is dropped and replay sends
what the server saw; the call after it gets ``reused_tokens = 0`` (no shared
prefix) and the probe's ``tool`` is null (the next call follows a user message).

``status`` other than ``"success"``: the line is still an LLM call that reached
the server, so it is kept as a row with the tokens it reports (a retry that
resends the same history then gets ``tool`` null).

Bad input: a line that is not JSON makes a row with a reason (its program is known: the
session it still names, else the file), so the whole program is rejected rather than left
with a hole;
a file whose lines carry none of ``request`` / ``prompt_tokens`` is rejected as
not a LiteLLM log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, epoch, tokens, tool_name
from ttlctl.ingest.formats.litellm_tools import response_tool_names, tool_calls
from ttlctl.ingest.jsontext import (
    bad_json_line,
    cut_line,
    first_object_line,
    loads,
    read_text,
    salvaged,
)
from ttlctl.ingest.pyrepr import as_object
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

_SESSION_KEYS = ("session_id", "litellm_session_id")
_TOOL_ROLES = ("tool", "function")


class LiteLLMReader:
    name = "litellm"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        if first is None:
            return False
        if b'"program_id"' in first or b'"round_index"' in first or b'"hash_ids"' in first:
            return False
        return b'"request"' in first and b'"prompt_tokens"' in first

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        text = read_text(path, sink)
        if text is None:
            return Parsed(pl.LazyFrame(), records=1)
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        objs: list[tuple[int, dict[str, Any] | None, str | None]] = []
        # the session a line that does not parse still names (its program), by line
        named: dict[int, str] = {}
        cut = cut_line(text)
        for lineno, line in lines:
            try:
                obj = loads(line)
            except json.JSONDecodeError as exc:
                objs.append((lineno, None, bad_json_line(exc, cut=lineno == cut)))
                session = _salvaged_session(line)
                if session is not None:
                    named[lineno] = session
                continue
            if not isinstance(obj, dict):
                objs.append((lineno, None, "not a JSON object"))
                continue
            objs.append((lineno, obj, None))
        if not any(o is not None and ("request" in o or "prompt_tokens" in o) for _, o, _ in objs):
            sink.reject(
                path,
                None,
                "not a LiteLLM log: no line has request or prompt_tokens",
                records=max(1, len(objs)),
            )
            return Parsed(pl.LazyFrame(), records=max(1, len(objs)))

        programs: dict[str, list[_Call]] = {}
        stem = logical(path).stem
        for lineno, obj, reason in objs:
            program = named.get(lineno, stem)
            if obj is not None:
                for key in _SESSION_KEYS:
                    if isinstance(obj.get(key), str) and obj[key]:
                        program = obj[key]
                        break
            calls = programs.setdefault(program, [])
            calls.append(_Call.parse(program, len(calls), lineno, obj, reason))

        rows: list[dict[str, Any]] = []
        for calls in programs.values():
            _link(calls)
            rows.extend(call.row for call in calls)
        return Parsed(frame_from_rows(rows, path), records=len(objs), absolute_time=True)


# ---------------------------------------------------------------- one call


class _Call:
    """One line: its row plus what the next line needs to know about it."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.messages: list[Any] | None = None
        self.response_tools: list[str] = []

    @classmethod
    def parse(
        cls, program: str, turn: int, lineno: int, obj: dict[str, Any] | None, reason: str | None
    ) -> _Call:
        call = cls({"program_id": program, "turn": turn, "_record": f"line {lineno}"})
        if obj is None:
            call.row["_reason"] = reason
            return call
        try:
            call._fill(obj)
        except RecordError as exc:
            call.row["_reason"] = str(exc)
        return call

    def _fill(self, obj: dict[str, Any]) -> None:
        response = as_object(obj.get("response"))
        usage = response.get("usage") if isinstance(response, dict) else None
        usage = as_object(usage) if usage is not None else None
        usage = usage if isinstance(usage, dict) else {}
        prompt = obj.get("prompt_tokens", usage.get("prompt_tokens"))
        completion = obj.get("completion_tokens", usage.get("completion_tokens"))
        self.row["input_tokens"] = tokens(prompt, "prompt_tokens")
        self.row["output_tokens"] = tokens(completion, "completion_tokens")
        stamp = obj.get("timestamp")
        self.row["arrival_s"] = None if stamp in (None, "") else epoch(stamp, "timestamp")
        request = as_object(obj.get("request"))
        if isinstance(request, dict):
            messages = request.get("messages")
            if isinstance(messages, str):
                messages = as_object(messages)
            if isinstance(messages, list):
                self.messages = [as_object(m) if isinstance(m, str) else m for m in messages]
        self.response_tools = response_tool_names(response, obj.get("response"))


def _link(calls: list[_Call]) -> None:
    """Fill tool, gap_s and reused_tokens of each call from the one after it."""
    for this, nxt in pairwise(calls):
        if "_reason" in this.row or "_reason" in nxt.row:
            continue
        t0, t1 = this.row.get("arrival_s"), nxt.row.get("arrival_s")
        if t0 is not None and t1 is not None and t1 >= t0:
            this.row["gap_s"] = t1 - t0
        before, after = this.messages, nxt.messages
        if before is None or after is None:
            # History unreadable: fall back to what this call's response asked for.
            this.row["tool"] = this.response_tools[0] if this.response_tools else None
            continue
        if [_fingerprint(m) for m in after[: len(before)]] != [_fingerprint(m) for m in before]:
            nxt.row["reused_tokens"] = 0  # a new conversation: nothing shared
            continue
        added = after[len(before) :]
        if not added or _role(added[-1]) not in _TOOL_ROLES:
            continue  # a user message (or a retry) comes before the next call
        this.row["tool"] = _tool_after(added, this.response_tools)


def _tool_after(added: list[Any], response_tools: list[str]) -> str:
    ids: dict[str, str] = {}
    ordered: list[str] = []
    for msg in added:
        if _role(msg) == "assistant" and isinstance(msg, dict):
            for call_id, name in tool_calls(msg.get("tool_calls")):
                if name:
                    ordered.append(name)
                    if call_id:
                        ids[call_id] = name
    for msg in added:
        if _role(msg) in _TOOL_ROLES and isinstance(msg, dict):
            name = ids.get(str(msg.get("tool_call_id")))
            if name is None:
                name = tool_name(msg.get("name"))
            if name:
                return name
    if ordered:
        return ordered[0]
    return response_tools[0] if response_tools else "unknown"


def _role(msg: Any) -> str | None:
    if isinstance(msg, dict):
        role = msg.get("role")
        return role if isinstance(role, str) else None
    return None


def _fingerprint(msg: Any) -> tuple[str | None, str, str | None]:
    """What identifies a message across requests, whatever form its objects take."""
    if not isinstance(msg, dict):
        return (None, str(msg), None)
    content = msg.get("content")
    call_id = msg.get("tool_call_id")
    return (
        _role(msg),
        content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str),
        None if call_id is None else str(call_id),
    )


READER = LiteLLMReader()


def _salvaged_session(line: str) -> str | None:
    """The session a line that does not parse still names (as a good line's: text, not
    empty), else None."""
    for key in _SESSION_KEYS:
        value = salvaged(line, key)
        if isinstance(value, str) and value:
            return value
    return None
