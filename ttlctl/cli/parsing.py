"""How every command reads its flags, wherever they are declared: a float is finite
(:func:`finite_floats`, nan and ±inf refused in one line), a path is not empty
(:func:`non_empty_paths`), and a renamed flag's old spelling is still taken for a while
(:data:`RENAMED`, rewritten by :func:`renamed` with a warning).

The root command (:class:`ttlctl.cli.PipelineOrder`) applies them to every command.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import typer

#: old spellings still accepted, per command: old flag -> new flag (a warning says so)
RENAMED: dict[str, dict[str, str]] = {
    "fit": {"--abandon-s": "--abandon-seconds"},
    "replay": {"--ttl": "--ttl-seconds"},
    "refit": {"--queue-delay": "--queue-delay-seconds"},
    "bundle build": {"--cold-start-ttl": "--cold-start-ttl-seconds"},
    "bundle inspect": {"--queue-delay": "--queue-delay-seconds"},
    "bundle query": {"--queue-delay": "--queue-delay-seconds"},
    "tune": {
        "--heartbeat": "--heartbeat-seconds",
        "--live-check-s": "--live-check-seconds",
        "--live-timeout": "--live-timeout-seconds",
        "--p95-max": "--p95-max-seconds",
        "--summary": "--json",
    },
    "validate": {
        "--timeout": "--timeout-seconds",
        "--startup-timeout": "--startup-timeout-seconds",
    },
}


def finite_floats(param: Any) -> None:
    """Make a parameter refuse nan and ±inf (``--jps nan`` would never end): its value,
    or any item of it, once parsed (typer's click objects, whichever click they use). A
    float option with a range says so too, not that nan is out of its range."""
    parse = param.process_value
    floats = _takes_floats(param)

    def checked(ctx: Any, value: Any) -> Any:
        try:
            parsed = parse(ctx, value)
        except typer.BadParameter:
            if floats:  # `--queue-delay-seconds nan` failed `>= 0`: it is not a number
                _refuse_non_finite(_as_floats(value), ctx, param)
            raise
        _refuse_non_finite(parsed, ctx, param)
        return parsed

    param.process_value = checked


#: the text options that name a file, or a name in its place: ``--profile`` (a
#: profile.json or a shipped profile), ``--model`` (a config.json, its folder, a preset or
#: a model to serve), report's ``--bundle`` (a file of RUN_DIR). Text, not a ``Path``,
#: because a name is not resolved against the current folder; empty, they are refused as
#: an empty path is.
NAMES_A_FILE = frozenset({"--profile", "--model", "--bundle"})


def non_empty_paths(param: Any) -> None:
    """Make a path parameter (or a text one that names a file: :data:`NAMES_A_FILE`)
    refuse an empty value, or an empty item of it, and one of blanks only (no file is
    meant so): ``Path('')`` is '.', so ``-o ''`` was
    taken for the current folder ('.: is a directory') and an empty input for the folder
    to read; ``--profile ''`` was read as '.' too, and report's ``--bundle ''`` said
    "--bundle : no such file"."""
    names_a_file = _takes(param, str) and not NAMES_A_FILE.isdisjoint(param.opts)
    if not (_takes(param, Path) or names_a_file):
        return
    parse = param.process_value

    def checked(ctx: Any, value: Any) -> Any:
        items = [item for item in _items(value) if isinstance(item, str)]
        if any(item == "" for item in items):
            raise typer.BadParameter("the path is empty", ctx=ctx, param=param)
        if any(not item.strip() for item in items):  # a name of only blanks: a slip too
            raise typer.BadParameter("the path is blank", ctx=ctx, param=param)
        return parse(ctx, value)

    param.process_value = checked


def _items(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _takes(param: Any, kind: type) -> bool:
    """Whether a parameter is a ``kind`` or a list of them (typer strips ``| None``)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    return annotation is kind or get_args(annotation) == (kind,)


def _takes_floats(param: Any) -> bool:
    """Whether a parameter is a float or a list of floats."""
    return _takes(param, float)


def _as_floats(value: Any) -> list[Any]:
    """The words given (or an environment variable's), as floats where they read as one."""
    floats: list[Any] = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        try:
            floats.append(float(item))
        except (TypeError, ValueError):
            floats.append(item)
    return floats


def _refuse_non_finite(value: Any, ctx: Any, param: Any) -> None:
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, float) and not math.isfinite(item):
            kind = "a number" if math.isnan(item) else "a finite number"
            raise typer.BadParameter(f"{item} is not {kind}", ctx=ctx, param=param)


def renamed(args: list[str], warn: Callable[[str], None]) -> list[str]:
    """``args`` with the old spellings of :data:`RENAMED` flags (of the command they
    name) rewritten to the new ones, each with a warning; nothing after ``--``."""
    words = [a for a in args[:2] if not a.startswith("-")]
    table = RENAMED.get(" ".join(words[:2])) or RENAMED.get(words[0] if words else "", {})
    if not table:
        return args
    result: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            return result + args[i:]
        flag, eq, value = arg.partition("=")
        if flag in table:
            warn(f"{flag} is now {table[flag]} (the old spelling goes in a later release)")
            arg = table[flag] + eq + value
        result.append(arg)
    return result
