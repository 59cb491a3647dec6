"""The ``ttlctl`` command line: parse, call a library function, print. No logic here.

One module per command, each exposing its command function (the ``bundle`` group: its
typer app); the options several commands share in :mod:`ttlctl.cli.options`; consoles,
user errors and ``--json`` output in :mod:`ttlctl.cli.kit`; the tables people read in
:mod:`ttlctl.cli.render`. :data:`COMMANDS` registers them all, in pipeline order, which
is also the order of ``ttlctl --help``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ttlctl import __version__
from ttlctl.cli import (
    bundle,
    export,
    fit,
    ingest,
    profile,
    refit,
    replay,
    report,
    serve,
    synth,
    tune,
    validate,
)
from ttlctl.cli.kit import out

#: (name, command function or group, click context settings), in pipeline order
COMMANDS: tuple[tuple[str, Callable[..., Any] | typer.Typer, dict[str, Any] | None], ...] = (
    ("ingest", ingest.ingest, None),
    ("fit", fit.fit, None),
    ("profile", profile.profile, None),
    ("replay", replay.replay, None),
    ("tune", tune.tune, None),
    ("bundle", bundle.app, None),
    ("serve", serve.serve, serve.CONTEXT_SETTINGS),
    ("validate", validate.validate, validate.CONTEXT_SETTINGS),
    ("refit", refit.refit, None),
    ("report", report.report, None),
    ("synth", synth.synth, None),
    ("export", export.export, None),
)


class PipelineOrder(TyperGroup):
    """Lists the commands in :data:`COMMANDS`' order (typer puts groups last)."""

    def list_commands(self, ctx: Any) -> list[str]:  # typer's own click Context
        return [name for name, _, _ in COMMANDS if name in self.commands]


app = typer.Typer(
    name="ttlctl",
    cls=PipelineOrder,
    help="Train, tune and apply KV-cache time-to-live policies for LLM agents, from real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _name, _command, _settings in COMMANDS:
    if isinstance(_command, typer.Typer):
        app.add_typer(_command, name=_name)
    else:
        app.command(_name, context_settings=_settings)(_command)


def _version(value: bool) -> None:
    if value:
        out.print(f"ttlctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """ttlctl: keep an agent's KV cache across its tool calls, for as long as it pays."""


def main() -> None:
    app()
