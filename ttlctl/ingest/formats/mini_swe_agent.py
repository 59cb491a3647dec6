"""mini-swe-agent trajectories (``<instance>.traj.json``) -> canonical rows.

A trajectory is one JSON object with ``messages`` (the whole chat: system, user,
assistant), ``info`` (exit status, model stats, config), ``trajectory_format``
(``mini-swe-agent-1`` for v1.x, ``mini-swe-agent-1.1`` for v2) and ``instance_id``.
Each file is one program; each assistant message is one LLM call, in message order.

Column mapping (one row per assistant message; ``_record`` is ``messages[i]``):

- ``program_id``: ``instance_id`` when it is a non-empty string, else the file name
  without ``.traj.json`` (``.json``).
- ``turn``: 0-based index of the assistant message among the assistant messages.
- ``arrival_s``: ``extra.response.created`` (Unix seconds, 1 s resolution), an
  absolute clock (``absolute_time=True``: the pipeline rebases it to the ingest's
  earliest arrival).
- ``input_tokens`` / ``output_tokens``: ``extra.response.usage.prompt_tokens`` /
  ``completion_tokens`` (completion includes the model's reasoning tokens).
- ``reused_tokens``: null (the canonical default: previous input + output, capped at
  this input). The chat is append-only, so the previous prompt and answer are a
  prefix of this prompt; ``usage.prompt_tokens_details.cached_tokens`` is the
  provider's own cache hit, a different quantity, and is not used.
- ``tool``: the first program of the command the agent ran after this call. The
  command is the single ```` ```bash ```` block of the assistant text (v2:
  ```` ```mswea_bash_command ````, ``extra.actions[0].command``, or the ``command``
  argument of the first tool call; a custom ``action_regex`` in ``info.config`` is
  honoured). First program (:mod:`.shell_program`): the command's first word after
  skipping leading environment assignments (``FOO=1``), the wrappers ``sudo``, ``env``,
  ``time``, ``nohup`` (with their ``-options``) and ``timeout [-options] N``, any number
  of leading ``cd DIR &&`` / ``cd DIR;`` prefixes, ``# comment`` lines and a leading
  ``(`` or ``{``; a command that is only ``cd DIR`` gives ``cd``. The word is kept as written
  (``./tests/runtests.py``, ``/usr/bin/python3``). ``"unknown"`` when the message
  holds no block or several (mini-swe-agent then runs nothing and answers with a
  format error, so no tool name applies); null on the program's last call.
- ``tool_s``: null for v1 (tool time is not recorded). For v2 files, whose
  messages carry ``extra.timestamp`` (client clock after the answer and after each
  observation), the last observation's timestamp minus the assistant message's,
  when both exist.
- ``gap_s``, ``llm_s``: null. The time between two ``created`` includes the LLM's
  own latency, so it is neither an idle gap nor a tool time.
- ``is_last``: left null (validation derives it).

Bad records: an assistant message without ``extra.response``, ``created`` or
``usage``, or with missing/non-numeric/negative token counts, gives a row with
``_reason`` (its program is then rejected whole). So does a message that is not an
object or whose ``role`` is missing, not a string or none of :data:`ROLES` (it takes a
call's place: it may have been one). A role-less OpenAI Responses API item (v2's
response models) is such a record too: that layout is not read. A file that is not JSON, not an
object, has no ``messages`` list or no assistant message is rejected as one record.
v2 format errors, which mini-swe-agent stores only as a user message (no assistant
message, no usage), are not seen as calls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, label, number, tokens
from ttlctl.ingest.formats.shell_program import first_program
from ttlctl.ingest.jsontext import load_json_object, loads
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

#: The roles a trajectory's messages have: the chat's, and v2's closing ``exit`` message
#: (exit status and submission). Any other role (or none) is a bad record.
ROLES = ("system", "user", "assistant", "tool", "exit")

#: Blocks mini-swe-agent executes: v1 ```bash, v2 text mode ```mswea_bash_command.
DEFAULT_ACTION_RE = re.compile(r"```(?:bash|mswea_bash_command)\s*\n(.*?)\n```", re.DOTALL)

_TRAJ_FORMAT = re.compile(rb'"trajectory_format"\s*:\s*"mini-swe-agent')
_MINI_VERSION = re.compile(rb'"mini_version"\s*:')
_OTHER_FIRST_KEY = re.compile(rb'^\s*\{\s*"(?:trajectory|history|environment|requests|events)"')


class MiniSweAgentReader:
    name = "mini-swe-agent"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        if not head.lstrip().startswith(b"{") or _OTHER_FIRST_KEY.match(head):
            return False
        if _TRAJ_FORMAT.search(head) or _MINI_VERSION.search(head):
            return True
        # ``info`` (with a large patch in ``submission``) may fill the first 64 KiB.
        return logical(path).name.endswith(".traj.json") and (
            b'"messages"' in head or b'"info"' in head
        )

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        doc = load_json_object(path, sink, "mini-swe-agent trajectory")
        if doc is None:
            return Parsed(pl.LazyFrame(), records=1)
        messages = doc.get("messages")
        if not isinstance(messages, list):
            sink.reject(path, None, "not a mini-swe-agent trajectory: no messages list")
            return Parsed(pl.LazyFrame(), records=1)
        # an assistant message is a call; a message the reader cannot place (not an object,
        # its role missing or unknown) takes a call's place too, as a bad record
        calls = [
            i
            for i, m in enumerate(messages)
            if not isinstance(m, dict) or m.get("role") == "assistant" or _bad_role(m)
        ]
        if not calls:
            sink.reject(path, None, "no LLM calls: no assistant message in messages")
            return Parsed(pl.LazyFrame(), records=1)
        program_id = _program_id(doc, path)
        action_re = _action_regex(doc)
        rows = []
        for turn, index in enumerate(calls):
            last = turn == len(calls) - 1
            next_index = calls[turn + 1] if not last else len(messages)
            row: dict[str, Any] = {
                "program_id": program_id,
                "turn": turn,
                "_record": f"messages[{index}]",
            }
            try:
                row.update(_call(messages, index, next_index, last, action_re))
            except RecordError as exc:
                row["_reason"] = str(exc)
            rows.append(row)
        return Parsed(frame_from_rows(rows, path), records=len(rows), absolute_time=True)


def _program_id(doc: dict[str, Any], path: Path) -> str:
    instance = doc.get("instance_id")
    if isinstance(instance, str) and instance.strip():
        return instance.strip()
    name = logical(path).name
    for suffix in (".traj.json", ".json"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)]
    return name


def _action_regex(doc: dict[str, Any]) -> re.Pattern[str]:
    """A custom ``action_regex`` from the run's config, else the default blocks."""
    info = doc.get("info")
    config = info.get("config") if isinstance(info, dict) else None
    if isinstance(config, dict):
        for part in ("agent", "model"):
            section = config.get(part)
            pattern = section.get("action_regex") if isinstance(section, dict) else None
            if isinstance(pattern, str) and pattern:
                try:
                    return re.compile(pattern, re.DOTALL)
                except re.error:
                    break
    return DEFAULT_ACTION_RE


def _call(
    messages: list[Any], index: int, next_index: int, last: bool, action_re: re.Pattern[str]
) -> dict[str, Any]:
    message = messages[index]
    if not isinstance(message, dict):
        raise RecordError("malformed message: not a JSON object")
    _role(message)
    extra = message.get("extra")
    response = extra.get("response") if isinstance(extra, dict) else None
    if not isinstance(response, dict):
        raise RecordError("missing extra.response")
    created = number(response.get("created"), "created")
    assert created is not None
    if created < 0:
        raise RecordError(f"negative created: {response.get('created')!r}")
    usage = response.get("usage")
    if not isinstance(usage, dict):
        raise RecordError("missing usage")
    row: dict[str, Any] = {
        "arrival_s": created,
        "input_tokens": tokens(usage.get("prompt_tokens"), "prompt_tokens"),
        "output_tokens": tokens(usage.get("completion_tokens"), "completion_tokens"),
    }
    if not last:
        row["tool"] = _tool(message, action_re)
        row["tool_s"] = _v2_tool_s(messages, index, next_index)
    return row


def _role(message: dict[str, Any]) -> str:
    """The message's role, one of :data:`ROLES`; RecordError otherwise."""
    role = message.get("role")
    if role is None and (message.get("object") == "response" or "type" in message):
        # mini-swe-agent's Responses API models store the response object and its
        # function_call_output items, which have no role: another format, not read here
        raise RecordError(
            "missing role: an OpenAI Responses API item, not a chat message (not read)"
        )
    return label(role, "role", ROLES)


def _bad_role(message: dict[str, Any]) -> bool:
    try:
        _role(message)
    except RecordError:
        return True
    return False


def _tool(message: dict[str, Any], action_re: re.Pattern[str]) -> str:
    command = _command(message, action_re)
    if command is None:
        return "unknown"
    return first_program(command) or "unknown"


def _command(message: dict[str, Any], action_re: re.Pattern[str]) -> str | None:
    """The command mini-swe-agent ran after this message, or None."""
    extra = message.get("extra")
    actions = extra.get("actions") if isinstance(extra, dict) else None
    if isinstance(actions, list) and actions:
        first = actions[0]
        command = first.get("command") if isinstance(first, dict) else first
        if isinstance(command, str):
            return command
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        return _tool_call_command(tool_calls[0])
    blocks = action_re.findall(_text(message.get("content")))
    if len(blocks) != 1:
        return None
    block = blocks[0]
    return block if isinstance(block, str) else None


def _tool_call_command(call: Any) -> str | None:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return None
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = loads(arguments)
        except json.JSONDecodeError:
            arguments = None
    if isinstance(arguments, dict) and isinstance(arguments.get("command"), str):
        return str(arguments["command"])
    name = function.get("name")
    return name if isinstance(name, str) and name else None


def _text(content: Any) -> str:
    """Message text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def _v2_tool_s(messages: list[Any], index: int, next_index: int) -> float | None:
    """v2 only: last observation's ``extra.timestamp`` minus the answer's."""
    start = _timestamp(messages[index])
    if start is None:
        return None
    end = None
    for message in messages[index + 1 : next_index]:
        stamp = _timestamp(message)
        if stamp is not None and isinstance(message, dict) and message.get("role") != "assistant":
            end = stamp
    if end is None:
        return None
    # the two stamps come from one clock; a negative difference cannot be a duration
    return max(0.0, end - start)


def _timestamp(message: Any) -> float | None:
    extra = message.get("extra") if isinstance(message, dict) else None
    if not isinstance(extra, dict):
        return None
    try:
        return number(extra.get("timestamp"), "timestamp", required=False)
    except RecordError:
        return None


READER = MiniSweAgentReader()
