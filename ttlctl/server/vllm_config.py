"""vLLM's arguments with their ``--config FILE`` read: the arguments vLLM's parser parses.

A port of vLLM 0.32's ``FlexibleArgumentParser`` (vllm/utils/argparse_utils.py):
``parse_args`` reads a config file when the argument ``--config`` itself is among its
arguments (once at most; the next argument names the file); ``_pull_args_from_config``
puts the file's options before the command line's, so the command line wins (argparse
keeps the last of a repeated option); ``load_config_file`` takes a ``.yaml`` or ``.yml``
file (``yaml.safe_load``) and writes each key as an option: true as ``--key``, false as
``--no-key`` where vLLM has that option (else nothing), a list as ``--key item …`` (an
empty one: nothing), a mapping as ``--key JSON``, anything else as ``--key str(value)``.
The options are then read as any other (:mod:`ttlctl.server.vllm_options`: underscores,
abbreviations, dotted options gathered).

Deliberate differences:

- ``--config=FILE`` is refused: vLLM 0.32 reads no file for it (it sets an option nothing
  reads), so the options the file was meant to set would be silently dropped.
- A false key writes ``--no-key`` when that is one of the names the caller reads (all of
  them vLLM options), where vLLM looks it up among all its options: a ``--no-`` option
  the caller does not read sets nothing it reads either way.
- A file vLLM would fail on (missing, unreadable, not ``.yaml``/``.yml``, not YAML, not
  a mapping, a key that is not text) is a :class:`VllmConfigError` naming it, one line,
  before any server starts.

PyYAML is imported when a file is read: vLLM depends on it, and a command line without
``--config`` needs no more than the standard library.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ttlctl.errors import TtlctlError, os_reason
from ttlctl.server.vllm_options import gathered, option_name, option_set, shown

#: vLLM's option that names a config file of options
CONFIG = "--config"
#: the file types vLLM reads a config from
SUFFIXES = ("yaml", "yml")


class VllmConfigError(TtlctlError, ValueError):
    """A ``--config`` that vLLM could not read, or would not read as written: one line."""


@dataclass(frozen=True, slots=True)
class VllmArgs:
    """vLLM's arguments as its parser gets them: the config file's options, then the
    command line's (which win)."""

    #: the arguments as given, less ``--config FILE``
    command_line: tuple[str, ...]
    #: the file ``--config`` names (None: none)
    config: str | None = None
    #: the options the file sets, as vLLM writes them
    from_config: tuple[str, ...] = ()

    @property
    def parsed(self) -> tuple[str, ...]:
        """What vLLM's parser parses: the file's options first, so the command line's
        win (the last of a repeated option counts), and the dotted options gathered
        into one JSON value each, after all the others (:func:`gathered`)."""
        return tuple(gathered(self.from_config + self.command_line))

    def origins(self) -> Iterator[tuple[str | None, tuple[str, ...]]]:
        """Where the arguments come from, each with its own (its dotted options
        gathered): ``None`` (the command line), then the config file when one is given."""
        yield None, tuple(gathered(self.command_line))
        if self.config is not None:
            yield self.config, tuple(gathered(self.from_config))

    def sets(self, name: str) -> bool:
        """Whether the arguments (the file's included) set the option ``name``."""
        return any(option_set(arg, (name,)) for arg in self.parsed)

    def value(self, name: str) -> tuple[str, str] | None:
        """The value the arguments (the file's included) give the option ``name``, the
        last one given as vLLM's parser keeps it, with the option as given
        (:func:`~ttlctl.server.vllm_options.shown`); None when they do not set it."""
        parsed = self.parsed
        found: tuple[str, str] | None = None
        for i, arg in enumerate(parsed):
            if option_set(arg, (name,)) is None:
                continue
            _, sep, inline = arg.partition("=")
            after = parsed[i + 1] if i + 1 < len(parsed) else ""
            found = (shown(arg, name), inline if sep else after)
        return found


def read(args: Sequence[str], names: Collection[str]) -> VllmArgs:
    """``args`` with the file ``--config`` names read, for a caller that reads the options
    ``names`` (a false key in the file sets ``--no-key`` when it is one of them).
    :class:`VllmConfigError` on a file vLLM could not read."""
    for arg in args:
        if option_name(arg) == CONFIG and arg != CONFIG:
            value = arg.split("=", 1)[1]
            raise VllmConfigError(
                f"{arg}: vLLM reads a config file given as `{CONFIG} FILE` only (it ignores "
                f"this form): write {CONFIG} {value}"
            )
    if CONFIG not in args:
        return VllmArgs(tuple(args))
    if args.count(CONFIG) > 1:
        raise VllmConfigError(f"{CONFIG} is given {args.count(CONFIG)} times: vLLM reads one file")
    at = list(args).index(CONFIG)
    if at == len(args) - 1:
        raise VllmConfigError(f"{CONFIG} needs a file (a YAML file of vLLM options)")
    path = args[at + 1]
    rest = (*args[:at], *args[at + 2 :])
    return VllmArgs(rest, path, tuple(config_args(load(path), names, path)))


def load(path: str) -> Any:
    """The document of the config file ``path``, as vLLM loads it (``yaml.safe_load``)."""
    where = f"{CONFIG} {path}"
    if path.split(".")[-1] not in SUFFIXES:
        raise VllmConfigError(f"{where}: vLLM reads a config file only as .yaml or .yml")
    try:
        import yaml  # vLLM's dependency: needed only where a config file is given
    except ModuleNotFoundError:
        raise VllmConfigError(
            f"{where}: reading it needs PyYAML, which vLLM installs (pip install pyyaml)"
        ) from None
    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except OSError as exc:
        raise VllmConfigError(f"{where}: cannot read it ({os_reason(exc)})") from None
    except UnicodeDecodeError as exc:
        raise VllmConfigError(f"{where}: not text ({exc.reason})") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise VllmConfigError(f"{where}: not YAML ({problem}{at})") from None


def config_args(doc: Any, negated: Collection[str], path: str = "") -> list[str]:
    """The options the config document ``doc`` sets, written as vLLM's
    ``load_config_file`` writes them; a false key's ``--no-key`` where that is one of
    ``negated``. :class:`VllmConfigError` (naming ``path``) unless ``doc`` maps option
    names to values."""
    where = f"{CONFIG} {path}"
    if not isinstance(doc, dict):
        kind = "empty" if doc is None else f"found: {type(doc).__name__}"
        raise VllmConfigError(f"{where}: not a mapping of vLLM options to values ({kind})")
    out: list[str] = []
    for key, value in doc.items():
        if not isinstance(key, str):
            raise VllmConfigError(f"{where}: the key {key!r} is not an option name")
        option = "--" + key
        if isinstance(value, bool):
            if value:
                out.append(option)
            elif f"--no-{key}" in negated:
                out.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                out += [option, *(str(item) for item in value)]
        elif isinstance(value, dict):
            try:
                out += [option, json.dumps(value)]
            except (TypeError, ValueError) as exc:
                raise VllmConfigError(f"{where}: {key} is not a JSON value ({exc})") from None
        else:
            out += [option, str(value)]
    return out
