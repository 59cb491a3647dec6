"""The ``ttlctl`` command line: parse, call a library function, print. No logic here.

One module per command, each exposing its command function (the ``bundle`` group: its
typer app); the options several commands share in :mod:`ttlctl.cli.options` (vLLM's
router's and a fleet's in :mod:`ttlctl.cli.router_options`), how every flag is read
(finite floats, renamed flags) in :mod:`ttlctl.cli.parsing`; consoles, user errors and
``--json`` output in :mod:`ttlctl.cli.kit`; the tables people read in
:mod:`ttlctl.cli.render`. :data:`COMMANDS` registers them all, in pipeline order, which
is also the order of ``ttlctl --help``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from ttlctl import __version__
from ttlctl.cli import (
    bundle,
    export,
    fit,
    help_panel,
    help_prose,
    ingest,
    parsing,
    profile,
    refit,
    replay,
    report,
    serve,
    synth,
    tune,
    validate,
)
from ttlctl.cli.kit import ClickException, err, out, print_warning, usage_line

# every option name printed whole in --help, at any width (help_panel says why), and the
# help's prose flowed to the width (help_prose says why)
help_panel.install()
help_prose.install()

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


def _leaves(group: Any) -> Iterator[Any]:
    """The commands under a group (typer's click objects), its subgroups' included."""
    for command in group.commands.values():
        if hasattr(command, "commands"):
            yield from _leaves(command)
        else:
            yield command


class PipelineOrder(TyperGroup):
    """The root: lists the commands in :data:`COMMANDS`' order (typer puts groups
    last); every float option takes finite numbers only, every path option a path that
    is not empty; a renamed flag's old spelling is rewritten with a warning
    (:data:`~ttlctl.cli.parsing.RENAMED`); a usage error (a missing option, a bad value)
    is one line on stderr, exit 2, like every other."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for command in _leaves(self):
            for param in command.params:
                parsing.finite_floats(param)
                parsing.non_empty_paths(param)

    def list_commands(self, ctx: Any) -> list[str]:  # typer's own click Context
        return [name for name, _, _ in COMMANDS if name in self.commands]

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, parsing.renamed(args, print_warning))

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except ClickException as exc:
            if exc.format_message():  # (no arguments: the help is already printed)
                err.print(usage_line(exc), highlight=False, markup=False)
            sys.exit(exc.exit_code)
        except typer.Abort:
            err.print("aborted", highlight=False)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(
    name="ttlctl",
    cls=PipelineOrder,
    help="Train, tune and apply KV-cache time-to-live policies for LLM agents, from real traces.",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
for _name, _command, _settings in COMMANDS:
    if isinstance(_command, typer.Typer):
        app.add_typer(_command, name=_name)
    else:
        app.command(
            _name, context_settings=_settings, short_help=help_prose.summary(_command.__doc__)
        )(_command)


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
