"""The tool calls a LiteLLM log line names, whatever form its objects take.

LiteLLM logs a request's messages and a response as JSON objects, as JSON text, or as the
Python ``repr`` of its objects (``ModelResponse(...)``, ``Function(arguments=..., name=...)``:
read by :mod:`ttlctl.ingest.pyrepr`). :func:`tool_calls` reads one ``tool_calls`` list in
any of these forms; :func:`response_tool_names` finds the calls a response asked for,
falling back to the ``Function(... name='…')`` pattern in its text when it does not parse.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ttlctl.ingest.fields import tool_name
from ttlctl.ingest.pyrepr import as_object


def tool_calls(value: Any) -> list[tuple[str | None, str | None]]:
    """(id, function name) of each entry of a ``tool_calls`` list in any form (a blank
    name: None)."""
    if isinstance(value, str):
        value = as_object(value)
    if not isinstance(value, list):
        return []
    out: list[tuple[str | None, str | None]] = []
    for item in value:
        if isinstance(item, str):
            item = as_object(item)
        if not isinstance(item, dict):
            continue
        fn = item.get("function")
        if isinstance(fn, str):
            fn = as_object(fn)
        name = fn.get("name") if isinstance(fn, dict) else None
        if name is None:
            name = item.get("name")
        call_id = item.get("id")
        out.append((None if call_id is None else str(call_id), tool_name(name)))
    return out


_FUNCTION_NAME = re.compile(
    r"Function\(arguments=(?:'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|None),\s*name='([^'\\]+)'"
)


def response_tool_names(response: Any, raw: Any) -> list[str]:
    """Names of the tool calls a response asked for, in order."""
    names: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if depth > 12:
            return
        if isinstance(node, str) and _LOOKS_LIKE_REPR.match(node):
            node = as_object(node)
        if isinstance(node, dict):
            if "tool_calls" in node:
                names.extend(n for _, n in tool_calls(node["tool_calls"]) if n)
                return
            for value in node.values():
                walk(value, depth + 1)
        elif isinstance(node, list):
            for value in node:
                walk(value, depth + 1)

    if response is not None:
        walk(response, 0)
    if not names and raw is not None:
        text = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        names = [n for n in map(tool_name, _FUNCTION_NAME.findall(text)) if n]
    return names


_LOOKS_LIKE_REPR = re.compile(r"\s*(?:[A-Za-z_][\w.]*\(|\{|\[)")
