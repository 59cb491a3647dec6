"""Where the options of ``docker run`` end and its image begins, as docker reads them.

A port of the command line of ``docker run [OPTIONS] IMAGE [COMMAND] [ARG...]`` (Docker
28.2's ``docker run --help``), read as its flag parser (spf13/pflag, flags not
interspersed) reads it:

- the options end at the first argument that is not one (the image), or after ``--``;
- one-letter options combine (``-dp 8000:8000`` is ``-d -p 8000:8000``, ``-it`` is
  ``-i -t``); the first that takes a value takes the rest of the argument
  (``-p8000:8000``, ``-p=8000``), or the next argument when it ends the argument;
- a long option takes ``--name=value``, or the next argument unless it is a switch.

So a wrapper's combined flags (``-dp``, ``-tp``) are never read as vLLM's ``-dp`` or
``-tp``: what vLLM reads of such a command starts after the image.

Deliberate difference: only ``docker run`` and ``docker container run`` (docker's own
options may come before ``run``); ``podman``, whose switches differ, is not read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

#: the programs read as docker's command line
PROGRAMS = ("docker", "nvidia-docker")
#: the one-letter options of ``docker run`` that take no value
SHORT_SWITCHES = frozenset("dPiqt")
#: docker's own options (before ``run``, ``docker --help``) that take no value
GLOBAL_SHORT_SWITCHES = frozenset("Dv")
GLOBAL_LONG_SWITCHES = frozenset({"debug", "help", "tls", "tlsverify", "version"})
#: the long options of ``docker run`` that take no value (all the others take one)
LONG_SWITCHES = frozenset(
    {
        "detach",
        "disable-content-trust",
        "help",
        "init",
        "interactive",
        "no-healthcheck",
        "oom-kill-disable",
        "privileged",
        "publish-all",
        "quiet",
        "read-only",
        "rm",
        "sig-proxy",
        "tty",
        "use-api-socket",
    }
)


def image_end(cmd: Sequence[str]) -> int | None:
    """The index just past the image of the ``docker run`` that ``cmd`` runs (what follows
    is the container's command, or its entrypoint's arguments); None when ``cmd`` runs
    no ``docker run``, or names no image."""
    start = _after_run(cmd)
    if start is None:
        return None
    image = _options_end(cmd, start, SHORT_SWITCHES, LONG_SWITCHES)
    return image + 1 if image < len(cmd) else None


def _after_run(cmd: Sequence[str]) -> int | None:
    """The index after ``run`` of the first docker program in ``cmd`` (``sudo docker run``
    too; docker's own options may come between), None unless ``run`` or ``container
    run`` follows the program."""
    for k, arg in enumerate(cmd):
        if Path(arg).name in PROGRAMS:
            j = _options_end(cmd, k + 1, GLOBAL_SHORT_SWITCHES, GLOBAL_LONG_SWITCHES)
            if cmd[j : j + 1] == ["run"]:
                return j + 1
            if cmd[j : j + 2] == ["container", "run"]:
                return j + 2
            return None
    return None


def _options_end(
    cmd: Sequence[str], i: int, short_switches: frozenset[str], long_switches: frozenset[str]
) -> int:
    """The index of the first argument from ``i`` on that is not an option or an option's
    value, as pflag reads them (``len(cmd)`` when there is none)."""
    while i < len(cmd):
        arg = cmd[i]
        if arg == "--":
            return i + 1
        if not arg.startswith("-") or arg == "-":
            return i
        if arg.startswith("--"):
            name, eq, _ = arg[2:].partition("=")
            i += 1 if eq or name in long_switches else 2
            continue
        letters = arg[1:]
        valued = next((j for j, c in enumerate(letters) if c not in short_switches), None)
        i += 2 if valued == len(letters) - 1 else 1
    return len(cmd)
