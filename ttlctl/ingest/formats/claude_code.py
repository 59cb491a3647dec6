"""Claude Code sessions captured by the kv-cache-tester ("Weka") proxy, one JSON file each.

Format (github.com/callanjfox/kv-cache-tester ``traces/``): one document
``{"id", "block_size", "requests": [...], ...}``; each request carries ``t``
(seconds from the session start), ``type`` (``"n"`` non-streaming, ``"s"``
streaming, or ``"subagent"``), ``in``, ``out``, ``hash_ids`` (chained blocks of
``block_size`` tokens, 64 by default), ``api_time``, ``ttft``, ``think_time``
(idle time *before* this call), ``stop`` and ``input_types``/``output_types``.
Numbers may also be numeric strings.

A ``"subagent"`` entry is not a call: it holds the sub-agent's own calls in its
own ``requests`` list (nested sub-agents are handled recursively).

Canonical columns, per call:

- ``program_id``: the top-level ``id`` (else the file stem). A sub-agent is its
  own program ``<parent>/sub<k>`` (k = 1, 2, ... in the order the parent lists
  them) with ``parent_program_id`` set to the parent's id.
- ``turn``: position of the call in its program's ``requests`` (sub-agent
  entries are skipped: they are not calls of the parent).
- ``arrival_s``: ``t``, a relative clock (seconds from the session start; the
  pipeline does not rebase it). For a sub-agent's calls: the sub-agent entry's
  ``t`` plus the nested ``t`` (kv-cache-tester's own replayer reads nested ``t``
  as relative to the sub-agent's start), unless the nested times are already on
  the parent's clock (its first call's ``t`` is not earlier than the entry's
  ``t``), in which case they are used as they are.
- ``input_tokens`` / ``output_tokens``: ``in`` / ``out``.
- ``reused_tokens``: number of leading ``hash_ids`` this call shares with the
  previous call of its program, times ``block_size``, capped at ``in``; 0 on
  turn 0; null when either call has no ``hash_ids``.
- ``tool``: ``"subagent"`` when a sub-agent entry comes between this call and
  the program's next call (Claude Code's Task tool); else ``"unknown"`` when
  ``stop == "tool_use"`` (the proxy does not record tool names); else null
  (``end_turn``, ``""``: the pause is a human's). Null on the last call.
- ``tool_s``: null (the tool's own duration is not measured).
- ``gap_s``: the next call's ``think_time``: the idle time between this call's
  end and the next call's start, whatever filled it (tool, sub-agent or human).
  Null on the last call, and where the next call has no ``think_time`` (some
  real records have none).
- ``llm_s``: ``api_time`` (null when absent).
- ``is_last``: left to validation (true on each program's last call).
- ``prefix_hashes`` / ``prefix_block_tokens``: Claude Code sends its tool definitions
  first (the Messages API renders tools, then the system prompt, then the messages),
  the same for every session of one Claude Code set-up: the document's ``tool_tokens``
  (≈ 12.5k) are a prefix other sessions share. Each top-level call gets chained hashes
  of the ``tool_tokens`` // ``block_size`` full blocks (at most ``in`` // ``block_size``)
  that name the tool set by its size (``claude-code/tools/<tool_tokens>/<block>``):
  sessions with the same ``tool_tokens`` share them, others do not. The system prompt
  (``system_tokens``) is not taken as shared: it embeds the session's environment (the
  directory, the date, git status), so equal lengths do not mean equal tokens. The
  trace's own ``hash_ids`` say nothing across sessions (``hash_id_scope: local``: each
  file numbers its blocks from 1) and stay in ``reused_tokens``. Sub-agents run with a
  tool set of their own, which the trace does not size: none. Null without
  ``tool_tokens``.

This module reads the document and gives the tool definitions' prefix; the walk of its
requests into rows, sub-agents included, is :mod:`.claude_code_walker`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import RecordError, integer
from ttlctl.ingest.formats.claude_code_walker import Walker
from ttlctl.ingest.jsontext import load_json_object
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink
from ttlctl.trace.columns import TURN_MAX

DEFAULT_BLOCK_SIZE = 64

_REQUESTS_KEY = re.compile(rb'"requests"\s*:\s*\[')
_CALL_KEYS = (b'"hash_ids"', b'"block_size"', b'"think_time"', b'"api_time"')


class ClaudeCodeReader:
    name = "claude-code"
    aliases: Sequence[str] = ("weka",)

    def sniff(self, path: Path, head: bytes) -> bool:
        # The head may cut a multi-MB document: look for the keys as text only.
        if not head.lstrip().startswith(b"{"):
            return False
        if _REQUESTS_KEY.search(head) is None:
            return False
        return any(key in head for key in _CALL_KEYS)

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        doc = load_json_object(path, sink, "claude-code trace")
        if doc is None:
            return Parsed(pl.LazyFrame(), records=1)
        requests = doc.get("requests")
        if not isinstance(requests, list):
            sink.reject(path, None, 'not a claude-code trace: no "requests" list')
            return Parsed(pl.LazyFrame(), records=1)
        try:
            block_size = integer(
                doc.get("block_size", DEFAULT_BLOCK_SIZE), "block_size", most=TURN_MAX
            )
        except RecordError as exc:
            sink.reject(path, "block_size", str(exc))
            return Parsed(pl.LazyFrame(), records=1)
        if block_size is None or block_size <= 0:
            sink.reject(path, "block_size", f"invalid block_size: {block_size!r}")
            return Parsed(pl.LazyFrame(), records=1)

        program = _program_id(doc.get("id"), path)
        walker = Walker(path, sink, block_size)
        walker.program(requests, program, parent=None, offset=0.0, where="requests")
        rows = walker.rows
        try:
            tools = integer(doc.get("tool_tokens"), "tool_tokens", required=False)
        except RecordError:
            tools = None  # an optional hint: without it, nothing is known to be shared
        if tools is not None and tools >= block_size:
            _tool_prefix(rows, program, tools, block_size)
        return Parsed(frame_from_rows(rows, path), records=len(rows) + walker.rejected)


def tool_hashes(tool_tokens: int, block_size: int, most: int | None = None) -> list[int]:
    """Chained hashes of the tool definitions' full blocks, named by their size (the first
    ``most`` of them: a call holds no more than its own blocks)."""
    blocks = tool_tokens // block_size
    out = []
    for i in range(blocks if most is None else min(blocks, most)):
        text = f"claude-code/tools/{tool_tokens}/{block_size}/{i}".encode()
        digest = hashlib.blake2b(text, digest_size=8).digest()
        out.append(int.from_bytes(digest, "little", signed=True))
    return out


def _tool_prefix(rows: list[dict[str, Any]], program: str, tools: int, block_size: int) -> None:
    """The shared tool definitions on each top-level call (module docstring)."""
    calls = [
        (row, int(row.get("input_tokens") or 0) // block_size)
        for row in rows
        if row["program_id"] == program and "_reason" not in row
    ]
    # only as many blocks as the longest call holds: tool_tokens is the document's word, and
    # a huge one would hash blocks no call reaches (64e9 tokens: 1e9 of them, no end)
    hashes = tool_hashes(tools, block_size, max((n for _, n in calls), default=0))
    for row, n in calls:
        if n and hashes:
            row["prefix_hashes"] = hashes[:n]
            row["prefix_block_tokens"] = block_size


def _program_id(value: Any, path: Path) -> str:
    stem = logical(path).stem
    if isinstance(value, bool) or value is None:
        return stem
    if isinstance(value, (str, int, float)):
        text = str(value).strip()
        return text or stem
    return stem


READER = ClaudeCodeReader()
