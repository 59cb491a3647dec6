"""Which vLLM option one argument sets, as vLLM's serve parser reads it.

The parser is vLLM's ``FlexibleArgumentParser`` (vllm/utils/argparse_utils.py) with the
serve options (``make_arg_parser``: vllm/entrypoints/launchers/cli_args.py in 0.32,
vllm/entrypoints/common/cli_args.py from 0.33; tests/server/test_vllm_parser.py reads each
through vLLM's own), on Python's ``argparse``:

- ``--x=1`` names ``--x``;
- a long name's underscores are dashes up to its first dot (``--scheduler_cls`` is
  ``--scheduler-cls``);
- ``--x.key value`` sets ``--x``: vLLM takes each dotted option out with its value (the next
  argument, whatever it is: ``--hf-overrides.a -tp`` gives ``a`` the text ``-tp``) and
  gathers the keys of each option into one JSON object, given after all the other
  arguments (:func:`gathered`);
- ``allow_abbrev`` is on: a proper prefix of an option's name is that option when no other
  option starts with it (``--scheduler-c`` is ``--scheduler-cls``, ``-t`` is ``-tp``), an
  ambiguous one is refused by vLLM. A short name is abbreviated only alone: ``-t=2`` (and
  ``-t2``) is no option to argparse (Python 3.10 to 3.13), which vLLM refuses as an
  unrecognized argument, while ``-tp=2`` is ``-tp``.

Deliberate differences:

- A prefix of a name the caller asks about is read as that name even where vLLM would
  find it ambiguous (vLLM refuses those itself, so refusing them earlier loses nothing).
  This is sound only while no vLLM option is itself a proper prefix of a name ttlctl
  reads (argparse takes an exact name first); tests/server/test_vllm_parser.py checks
  that on vLLM's own parser.
- A dotted value that is not JSON is kept as text where vLLM reads a size such as ``80g``
  as a number: the option the dotted keys set gets a JSON object either way, and no
  option ttlctl reads takes one.
- ``-O3`` (vLLM's ``--optimization-level 3``) is not rewritten: it sets nothing ttlctl
  reads.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def option_name(arg: str) -> str:
    """The option ``arg`` names as vLLM reads it: ``--x=1`` is ``--x``, and a long name's
    underscores are dashes up to its first dot (``--scheduler_cls`` is
    ``--scheduler-cls``)."""
    name = arg.split("=", 1)[0]
    if not name.startswith("--"):
        return name
    head, dot, tail = name[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail


def written(arg: str) -> str:
    """The option name ``arg`` gives before any dotted key: ``--x.key=1`` gives ``--x``."""
    return option_name(arg).partition(".")[0]


def option_set(arg: str, names: Sequence[str]) -> str | None:
    """The option among ``names`` that ``arg`` sets as vLLM's parser reads it: its name
    (:func:`written`) is one of them, or a proper prefix of one (argparse's
    abbreviation, of a short name only without ``=``; the first of ``names`` it
    abbreviates). None when it sets none of them (a value, or another option)."""
    name = written(arg)
    if not name.startswith("-") or name in ("-", "--"):
        return None  # a value, a lone dash, or the end of the options
    if name in names:
        return name
    if not name.startswith("--") and "=" in arg:
        return None  # `-t=2`: argparse abbreviates a short name given alone only
    return next((full for full in names if full.startswith(name)), None)


def shown(arg: str, name: str) -> str:
    """How a message names the option ``name`` that ``arg`` sets: ``--scheduler-cls``, or
    ``--scheduler-c (abbreviates --scheduler-cls)``."""
    given = written(arg)
    return name if given == name else f"{given} (abbreviates {name})"


def gathered(args: Sequence[str]) -> list[str]:
    """``args`` as vLLM's parser hands them to argparse (``FlexibleArgumentParser.parse_args``):
    long names' underscores made dashes up to the first dot, and each dotted option
    (``--x.key value``, ``--x.key=value``, ``--x.key+ a,b`` for a list) taken out with its
    value, the next argument whatever it is, the keys of each option gathered into one JSON
    object given after all the others (``--x {"key": value}``)."""
    rest: list[str] = []
    objects: dict[str, dict[str, Any]] = {}
    taken = False  # the argument is the value of the dotted option before it
    for i, arg in enumerate(args):
        if taken:
            taken = False
            continue
        name, eq, value = _dashed(arg).partition("=")
        if not arg.startswith("-") or "." not in (name if eq else arg):
            rest.append(_dashed(arg))  # not dotted (a dot in the value of `--x=1.5` only)
            continue
        if not eq:
            if i + 1 == len(args):
                rest.append(_dashed(arg))  # no value: vLLM fails on it (its own error)
                continue
            value, taken = _dashed(args[i + 1]), True
        item: Any = _value(value)
        if name.endswith("+"):
            name, item = name[:-1], value.split(",")
        key, *keys = name.split(".")
        for part in reversed(keys):
            item = {part: item}
        _merge(objects.setdefault(key, {}), item)
    return rest + [word for key, obj in objects.items() for word in (key, json.dumps(obj))]


def _dashed(arg: str) -> str:
    """``arg`` with its long name's underscores made dashes up to the first dot, as vLLM
    writes every argument before reading the dotted ones."""
    if not arg.startswith("--"):
        return arg
    name, eq, value = arg.partition("=")
    head, dot, tail = name[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _merge(into: dict[str, Any], update: dict[str, Any]) -> None:
    """vLLM's ``recursive_dict_update``: objects merged, lists joined, else the later wins."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif isinstance(value, list) and isinstance(into.get(key), list):
            into[key] += value
        else:
            into[key] = value
