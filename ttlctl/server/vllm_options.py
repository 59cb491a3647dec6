"""Which vLLM option one argument sets, as vLLM's serve parser reads it.

The parser is vLLM 0.32's ``FlexibleArgumentParser`` (vllm/utils/argparse_utils.py) with
the serve options (``make_arg_parser``, vllm/entrypoints/launchers/cli_args.py), on
Python's ``argparse``:

- ``--x=1`` names ``--x``;
- a long name's underscores are dashes up to its first dot (``--scheduler_cls`` is
  ``--scheduler-cls``);
- ``--x.key value`` sets ``--x`` (vLLM gathers the dotted keys into one JSON value);
- ``allow_abbrev`` is on: a proper prefix of an option's name is that option when no other
  option starts with it (``--scheduler-c`` is ``--scheduler-cls``, ``-t`` is ``-tp``), an
  ambiguous one is refused by vLLM. A short name is abbreviated only alone: ``-t=2`` (and
  ``-t2``) is no option to argparse (Python 3.10 to 3.13), which vLLM refuses as an
  unrecognized argument, while ``-tp=2`` is ``-tp``.

Deliberate difference: a prefix of a name the caller asks about is read as that name even
where vLLM would find it ambiguous (vLLM refuses those itself, so refusing them earlier
loses nothing). This is sound only while no vLLM option is itself a proper prefix of a name
ttlctl reads (argparse takes an exact name first); tests/server/test_vllm_parser.py checks
that on vLLM's own parser.
"""

from __future__ import annotations

from collections.abc import Sequence


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
