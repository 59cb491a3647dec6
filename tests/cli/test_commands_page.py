"""docs/commands.md names every option of every command, and no option a command lacks.

Its `ttlctl replay` form listed 6 of replay's options (--check, --valve, --seed, the engine's
size … were on replay.md only) and `ttlctl tune`'s left out --heartbeat-seconds,
--trace-idle-gap-cap-seconds and --live-timeout-seconds, though the page is where a reader
looks a command up. Each command's options are read from the command itself; a section is
the text under its `## \\`ttlctl NAME\\`` heading (the bundle commands share one).
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.cli.test_commands import _commands

PAGE = Path(__file__).resolve().parents[2] / "docs" / "commands.md"


def sections() -> dict[str, str]:
    """Each `## \\`ttlctl NAME\\`` heading's text, by NAME."""
    found: dict[str, str] = {}
    for part in re.split(r"^## ", PAGE.read_text(), flags=re.M)[1:]:
        head, _, body = part.partition("\n")
        match = re.fullmatch(r"`ttlctl (\w+)`", head.strip())
        if match:
            found[match.group(1)] = body
    return found


def options(command: object) -> set[str]:
    """The long options a command takes (a switch's --no- side too), less --help."""
    names = set()
    for param in getattr(command, "params", []):
        spelt = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
        names.update(o for o in spelt if o.startswith("--"))
    return names - {"--help"}


def spellings(command: object) -> list[list[str]]:
    """Each option's spellings (`-o`, `--output`; `--timing`, `--no-timing`), less --help."""
    return [
        [*param.opts, *param.secondary_opts]
        for param in getattr(command, "params", [])
        if getattr(param, "param_type_name", "") == "option" and "--help" not in param.opts
    ]


def test_every_option_of_every_command_is_on_its_section() -> None:
    page = sections()
    missing = []
    for name, command in _commands().items():
        text = page[name.split()[0]]
        missing += [
            f"{name} {next(n for n in names if n.startswith('--'))}"
            for names in spellings(command)
            if not any(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text) for n in names)
        ]
    assert not missing, missing


def test_every_option_in_a_sections_forms_is_the_commands() -> None:
    page = sections()
    commands = _commands()
    unknown = []
    for name, text in page.items():
        taken = set().union(*(options(c) for n, c in commands.items() if n.split()[0] == name))
        for block in re.findall(r"^```\n(.*?)^```", text, flags=re.M | re.S):
            for line in block.splitlines():
                if not line.lstrip().startswith(("ttlctl", "[", "(", "--")) or "vllm args" in line:
                    continue
                unknown += [f"{name} {o}" for o in re.findall(r"--[a-z][a-z0-9-]*", line)
                            if o not in taken]  # fmt: skip
    assert not unknown, unknown
