"""The engine log: what ttlctl's vLLM scheduler plugin writes to ``TTLCTL_LOG``.

One JSON object per line, one line per finished request (schema
``ttlctl.engine-log/1``), so production traffic can be refitted:

====================  ======================================================
key                   meaning
====================  ======================================================
``schema``            ``"ttlctl.engine-log/1"`` (required: it identifies the format)
``request_id``        the engine's request id (required)
``program_id``        from the client's ``vllm_xargs``/``X-Session-ID``; null for
                      untagged traffic, which becomes a one-call program
                      ``request:<request_id>``
``tool``              the tool the agent said it is about to call, or null (a
                      blank one: null)
``is_last``           the client's ``is_last`` tag, or null
``arrival_unix_s``    when the engine received the request (epoch seconds)
``first_token_unix_s`` when its first token was produced, or null
``finish_unix_s``     when it finished (epoch seconds)
``prompt_tokens``     prompt length in tokens
``output_tokens``     generated tokens
``cached_tokens``     prompt tokens served from the prefix cache, or null
``finish_reason``     ``stop``, ``length``, ``abort`` …
``ttl_s``             the pin the policy chose at finish (0: not pinned), or null
``pin_skipped``       a pin chosen but not made: ``refused`` (pin cap),
                      ``deferred`` (vLLM freed the blocks late), or null
====================  ======================================================

The engine's facts: a line with ``"kind": "engine"`` (same ``schema``), written by
the plugin when it starts, when the facts change (a new bundle) and atop a file it
found empty: ``at_unix_s``, ``vllm_version``, ``model``, ``block_size``,
``kv_blocks`` (usable blocks), ``kv_tokens`` (their tokens), ``max_num_seqs``,
``max_num_batched_tokens``, ``max_model_len``, ``async_scheduling``,
``prefix_caching``, ``bundle_sha256``, ``replica`` (``TTLCTL_REPLICA``, or
null), and the scheduler's other settings with the KV connector's name
(:data:`.engine_log_facts.FACTS`; null: vLLM's default). It is not a call: it
applies to the request lines after it, up to the next one, in its file and on
into the newer parts of its log (:mod:`.rotated`). Ingest keeps each distinct one
in the trace's metadata (:func:`ttlctl.trace.io.engines`), with ``calls``, the
calls logged under it, and ``file``/``line``, where it was first seen;
``replica`` there is the same name as in the trace's ``replica`` column. A bad
one is a bad record (``bad engine record: …``).

Mapping to the canonical trace: a program's requests sorted by arrival are its
turns; ``arrival_s`` is ``arrival_unix_s`` (absolute clock, rebased by ingest);
``llm_s`` = finish − arrival; ``gap_s`` = next arrival − this finish, clamped at 0
when a client overlaps its calls; ``tool_s`` is null (an engine cannot see tool
time, only the gap); ``reused_tokens`` is null (the cache hit is not the shared
prefix: a hit depends on what survived in memory).

Several files (the logs of several replicas behind a router, or one replica's
rotated logs) are read together: a program whose calls ran on several replicas is
one program, its calls merged by arrival. Each call's ``replica`` column is the
``replica`` named by the engine record in force in its log (in its file, else at the
end of the log's older parts: :mod:`.rotated`); when none is named,
the path as given of the log the file is part of: its name less logrotate's
suffixes ``.N`` and ``.gz`` (``engine.jsonl``, ``engine.jsonl.1`` and
``engine.jsonl.2.gz`` are one log, one replica). When all the files are parts of
one log (a copy of it aside: below), null (as for one file).

Program ids used again: agent frameworks reuse session ids (a resumed session, a
retried task). A call that arrives after its program's last call (one tagged
``is_last``) starts a new program, ``<id>#2`` (then ``#3`` …, skipping names the
log uses), counted (:attr:`Parsed.reused`, the ingest report's ``reused_ids``).
Untagged requests whose ids repeat across files are told apart the same way.

A request logged twice (its ``request_id`` and ``arrival_unix_s`` on a line before, in
any of the files: its log's, a copy of the log, another replica's) is a bad record,
``duplicate request: …``, naming the line it repeats (:mod:`.engine_log_repeats`); the first
line read stands. An id alone may repeat (a client's own ids, on one replica or two): those
arrive at other times, and are calls each. A log each of whose requests is a duplicate (a
copy) is no replica: the others are named as without it (:func:`.engine_log_facts.log_names`),
and its engine records, under which no call was kept, are left out.

A bad request line (a value out of range, a field missing, ``request_id`` included) is a
row with a reason: it is
placed among its program's calls by its arrival (last, before the call tagged ``is_last``,
when its arrival is unknown: :mod:`.engine_log_programs`), and validation rejects its
program whole, naming it as the cause. So is a line that does not parse as JSON (cut
short, malformed) when it still names its ``program_id``, unless it is a copy of a request
read elsewhere (a duplicate, rejected alone); one that does not name it (cut before it) is
rejected alone, its program, if it had one, read without it
(:meth:`.engine_log_lines.Group.settle_broken` has the rules).

Aborted calls (``finish_reason`` ``abort``: the client went away, or cancelled) are
kept as calls with the tokens they produced (``output_tokens`` 0 when aborted before
the first token; their prefill was spent) and counted (:attr:`Parsed.aborted`, the
report's ``aborted``); a program whose client died ends in flight at its last call.

Programs in flight: a log read while the engine serves holds programs that have not
ended. A tagged program whose last logged call is not tagged ``is_last`` (the tag is
false, or absent) is taken as in flight when the log was read: its last logged call
becomes the last row of the program in the trace (``is_last`` true) and its trailing
``tool`` and pause are dropped, being unknown. Such programs are counted
(:attr:`Parsed.in_flight`, the ingest report's ``in_flight``), not rejected; their calls
so far count as a whole program (the fit's η sees them shorter than they will be). A
client that never sends ``is_last: 1`` makes every tagged program count here. Untagged
one-call programs (``request:<request_id>``) are not counted.

This module reads a group of files; their lines are read by
:mod:`ttlctl.ingest.formats.engine_log_lines`, the engine records kept by
:mod:`ttlctl.ingest.formats.engine_log_facts`, requests logged twice found by
:mod:`ttlctl.ingest.formats.engine_log_repeats`, the calls made programs by
:mod:`ttlctl.ingest.formats.engine_log_programs`, a rotated log's parts joined by
:mod:`.rotated`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ttlctl.ingest.formats.engine_log_facts import Unnamed, log_names
from ttlctl.ingest.formats.engine_log_lines import SCHEMA, Group, LogFile
from ttlctl.ingest.formats.engine_log_programs import as_programs
from ttlctl.ingest.formats.rotated import carry_over
from ttlctl.ingest.jsontext import first_object_line
from ttlctl.ingest.reader import GroupParsed, Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

__all__ = ["READER", "SCHEMA", "EngineLogReader"]


class EngineLogReader:
    name = "engine-log"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        return first is not None and SCHEMA.encode() in first

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        return self.read_group([path], sink).parsed

    def read_group(self, paths: Sequence[Path], sink: RejectSink) -> GroupParsed:
        """All the files' calls as one log: programs merged across files by arrival."""
        group = Group(paths)
        files = [LogFile(group, index, path) for index, path in enumerate(paths)]
        for file in files:
            file.read(sink)
        group.settle_broken(sink)
        records = [file.records for file in files]
        carry_over(group.parts)
        copies = {log for log, n in group.repeated.items() if n and not group.kept[log]}
        names = log_names(group.logs, copies=copies)
        group.engines.settle(names)
        for _, _, row in group.calls:
            if isinstance(row["replica"], Unnamed):
                row["replica"] = names.get(row["replica"].log)
        rows, in_flight, reused = as_programs(group.calls)
        parsed = Parsed(
            frame_from_rows(rows, None),
            records=sum(records),
            absolute_time=True,
            in_flight=sum(in_flight.values()),
            engines=tuple(group.engines.entries),
            reused=reused,
            aborted=group.aborted,
        )
        return GroupParsed(
            parsed, records=records, in_flight=[in_flight.get(str(p), 0) for p in paths]
        )


READER = EngineLogReader()
