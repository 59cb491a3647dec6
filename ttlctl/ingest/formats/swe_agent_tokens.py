"""SWE-agent's token counts, estimated: the trajectory records none per call.

The raw estimate is characters / :data:`CHARS_PER_TOKEN` of the text the model saw and
wrote (a history message's content plus its tool calls' names and arguments; a step's
response when the history lacks it). A reader puts the raw character counts of each call
under ``_in_chars`` / ``_out_chars``; :func:`scale_tokens` turns them into
``input_tokens`` / ``output_tokens``, scaled to the run's totals
(``info.model_stats.tokens_sent`` / ``tokens_received``) when it has them, by largest
remainder. :mod:`ttlctl.ingest.formats.swe_agent` documents the estimate.
"""

from __future__ import annotations

import json
from typing import Any

from ttlctl.ingest.fields import RecordError, tokens

#: Characters per token of the raw estimate.
CHARS_PER_TOKEN = 4


def text_len(value: Any) -> int:
    """Characters of a message field: strings, content parts, or JSON of the rest."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(text_len(part.get("text") if _is_text_part(part) else part) for part in value)
    return len(json.dumps(value, default=str))


def _is_text_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str)


def tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``function`` objects of a history message's tool calls."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            out.append(function)
    return out


def message_len(message: Any) -> int:
    """What the model reads of a history message: its content and tool calls."""
    if not isinstance(message, dict):
        return text_len(message)
    size = text_len(message.get("content"))
    for function in tool_calls(message):
        size += text_len(function.get("name")) + text_len(function.get("arguments"))
    return size


def step_output_len(step: dict[str, Any]) -> int:
    """A step's answer when the history lacks it: the response, plus the action if apart."""
    response = step.get("response")
    if not isinstance(response, str) or not response:
        thought = step.get("thought")
        response = thought if isinstance(thought, str) else ""
    action = step.get("action")
    size = len(response)
    if isinstance(action, str) and action.strip() and action.strip() not in response:
        size += len(action)
    return size


def scale_tokens(rows: list[dict[str, Any]], info: Any) -> None:
    """Token estimates: chars / 4, scaled to the run's totals when it has them."""
    stats = info.get("model_stats") if isinstance(info, dict) else None
    stats = stats if isinstance(stats, dict) else {}
    for column, chars, total_key in (
        ("input_tokens", "_in_chars", "tokens_sent"),
        ("output_tokens", "_out_chars", "tokens_received"),
    ):
        try:
            total = tokens(stats.get(total_key), total_key, required=False)
        except RecordError as exc:
            rows[0].setdefault("_reason", f"{exc} in info.model_stats")
            total = None
        raw = [row[chars] / CHARS_PER_TOKEN for row in rows]
        values = _apportion(raw, total) if total else [round(x) for x in raw]
        if column == "input_tokens":
            values = _at_least_one(values, keep_sum=bool(total))
        for row, value in zip(rows, values, strict=True):
            row[column] = value


def _at_least_one(values: list[int], *, keep_sum: bool) -> list[int]:
    """Every prompt at least 1 token: the model read one, and an empty prompt is a bad
    record (vLLM refuses it). An estimate of 0 (a call whose history the file does not
    hold) becomes 1, taken from the largest estimate when ``keep_sum`` (the run's total)."""
    out = list(values)
    for i, value in enumerate(out):
        if value >= 1:
            continue
        out[i] = 1
        largest = max(range(len(out)), key=out.__getitem__)
        if keep_sum and out[largest] > 1:
            out[largest] -= 1
    return out


def _apportion(weights: list[float], total: int) -> list[int]:
    """Integers proportional to ``weights`` summing to ``total`` (largest remainder)."""
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights = [1.0] * len(weights)
        weight_sum = float(len(weights))
    exact = [w * total / weight_sum for w in weights]
    out = [int(x) for x in exact]
    short = total - sum(out)
    order = sorted(range(len(exact)), key=lambda i: (exact[i] - out[i], -i), reverse=True)
    for i in order[:short]:
        out[i] += 1
    return out
