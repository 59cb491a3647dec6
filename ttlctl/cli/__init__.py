"""The ``ttlctl`` command line: parse, call a library function, print. No logic here.

One module per command (``ingest``, ``fit``, ``profile``, ...; the ``bundle`` group in
:mod:`ttlctl.cli.bundle`), the shared kit (consoles, user errors) in
:mod:`ttlctl.cli.kit` and the rich tables in :mod:`ttlctl.cli.render`.
"""

from __future__ import annotations

from typing import Annotated

import typer

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

app = typer.Typer(
    name="ttlctl",
    help="Train, tune and apply KV-cache time-to-live policies for LLM agents, from real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(bundle.app, name="bundle")
app.command("profile")(profile.profile)
app.command("replay")(replay.replay)
app.command("report")(report.report)
app.command("synth")(synth.synth)
app.command("tune")(tune.tune)
app.command("serve", context_settings=serve.CONTEXT_SETTINGS)(serve.serve)
app.command("validate", context_settings=validate.CONTEXT_SETTINGS)(validate.validate)
app.command("refit")(refit.refit)
app.command("ingest")(ingest.ingest)
app.command("fit")(fit.fit)
app.command("export")(export.export)


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
