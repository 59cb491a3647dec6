"""``--help`` at 80 columns prints every option name whole (ttlctl.cli.help_panel): typer's
own table cut ``--kv-aware-session-affinity-ttl-secs`` to ``--kv-aware-ses…`` and both
``--program-scheduling-*`` flags to ``--program-sche…``. The names are read from the
names column of the printed panels, not anywhere in the text (help texts quote flags)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer import rich_utils
from typer.core import TyperArgument
from typer.testing import CliRunner

from ttlctl.cli import app, help_panel

#: a panel's row: the border, the required mark (or a space), then the names cell, which
#: ends at the first run of two spaces (the column's padding)
ROW = re.compile(r"^│ (?:[* ] {2})?(\S(?:.*?\S)?)(?: {2,}|\s*│$)")


def _leaves(group: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The commands' paths (``("bundle", "build")``), typer's click objects."""
    out = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            out += _leaves(command, (*path, name))
        else:
            out.append((*path, name))
    return out


ROOT = typer.main.get_command(app)
COMMANDS = _leaves(ROOT)


def _command(path: tuple[str, ...]) -> Any:
    command: Any = ROOT
    for name in path:
        command = command.commands[name]
    return command


def names_printed(help_text: str) -> set[str]:
    """Every name in the names column of the help's panels."""
    names: set[str] = set()
    for line in help_text.splitlines():
        match = ROW.match(line)
        if match:
            # a pair of names too long for one line ends its first with " /"
            names.update(n for n in re.split(r",\s*|\s*/\s*", match.group(1)) if n)
    return names


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_every_option_name_prints_whole_at_80_columns(path: tuple[str, ...]) -> None:
    res = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    assert max(len(line) for line in res.output.splitlines()) <= 80
    printed = names_printed(res.output)
    declared = {"--help", "-h"} | {
        name
        for param in _command(path).params
        if param.param_type_name == "option"
        for name in (*param.opts, *param.secondary_opts)
    }
    assert declared <= printed, sorted(declared - printed)


def test_the_long_names_that_were_cut() -> None:
    for command, names in {
        "replay": ["--kv-aware-session-affinity-ttl-secs", "--program-scheduling-config-json",
                   "--program-scheduling-calibration", "--balance-abs-threshold",
                   "--cache-threshold", "--pin-queue-bound", "--max-num-batched-tokens"],
        "tune": ["--max-num-batched-tokens", "--worker-urls",
                 "--long-prefill-token-threshold-adaptive",
                 "--no-long-prefill-token-threshold-adaptive"],
    }.items():  # fmt: skip
        res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "80"})
        printed = names_printed(res.output)
        assert set(names) <= printed, sorted(set(names) - printed)


def test_a_typer_without_what_the_panel_reads_keeps_its_own_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """typer 0.27 (allowed: typer>=0.12) has ``_print_options_panel`` but its parameters no
    ``display_name_raw`` or ``display_type_rich``: replaced anyway, every --help failed
    with an AttributeError."""
    typers_own = object()
    monkeypatch.setattr(rich_utils, help_panel.TYPER_PANEL, typers_own)
    owner = next(c for c in TyperArgument.__mro__ if "display_name_raw" in vars(c))
    monkeypatch.delattr(owner, "display_name_raw")  # as typer 0.27's parameters lack it
    assert help_panel.install() is False
    assert getattr(rich_utils, help_panel.TYPER_PANEL) is typers_own
