"""An option given to a command that does not take it while another command does: the
usage error (one line, exit 2) names the commands that take it, where click suggested the
nearest spelling among this command's options, an unrelated flag ("Possible options:
--live-bundle" for `tune --pin-queue-bound`). An option no command takes keeps click's
answer."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app


def _error(args: list[str]) -> str:
    """The one stderr line of a usage error, which exits 2."""
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["tune", "t.parquet", "--fit", "f.json", "--pin-queue-bound", "4"],
            "error: ttlctl tune: no such option: --pin-queue-bound; --pin-queue-bound is an "
            "option of `ttlctl replay` (see `ttlctl tune --help`)",
        ),
        (
            ["validate", "t.parquet", "--worker-urls", "http://10.0.0.1:8000"],
            "error: ttlctl validate: no such option: --worker-urls; --worker-urls is an option "
            "of `ttlctl replay` and `ttlctl tune` (see `ttlctl validate --help`)",
        ),
        (  # a group's command, and the --name=value spelling
            ["bundle", "inspect", "b.json", "--replicas=2"],
            "error: ttlctl bundle inspect: no such option: --replicas; --replicas is an option "
            "of `ttlctl replay`, `ttlctl tune` and `ttlctl validate` (see `ttlctl bundle "
            "inspect --help`)",
        ),
        (  # the --no- spelling of another command's flag
            ["ingest", "logs", "-o", "t.parquet", "--no-timing"],
            "error: ttlctl ingest: no such option: --no-timing; --no-timing is an option of "
            "`ttlctl replay` (see `ttlctl ingest --help`)",
        ),
    ],
    ids=["tune-router-flag", "validate-worker-urls", "bundle-inspect", "no-spelling"],
)
def test_an_option_of_another_command_names_the_commands_that_take_it(
    args: list[str], said: str
) -> None:
    line = _error(args)
    assert line == said
    assert "Possible options" not in line


def test_a_near_spelling_of_this_commands_option_is_kept() -> None:
    """``refit --seed``: refit's own ``--seeds`` is the likelier slip, so click's near
    suggestion stays, before the commands that take ``--seed``; an unrelated one
    (``--live-bundle`` for ``--pin-queue-bound``) is dropped (above)."""
    assert _error(["refit", "log.jsonl", "--bundle", "b.json", "--seed", "3"]) == (
        "error: ttlctl refit: no such option: --seed (Possible options: --seeds); --seed is an "
        "option of `ttlctl fit`, `ttlctl replay`, `ttlctl tune`, `ttlctl validate` and "
        "`ttlctl synth` (see `ttlctl refit --help`)"
    )
    line = _error(["replay", "t.parquet", "--replica", "2"])
    assert "(Possible options: --replicas); --replica is an option of `ttlctl serve`" in line


def test_an_option_no_command_takes_keeps_clicks_answer() -> None:
    assert _error(["tune", "t.parquet", "--live-bundel", "x"]) == (
        "error: ttlctl tune: no such option: --live-bundel (Possible options: --live, "
        "--live-bundle) (see `ttlctl tune --help`)"
    )
    assert _error(["replay", "t.parquet", "--bogus", "4"]) == (
        "error: ttlctl replay: no such option: --bogus (see `ttlctl replay --help`)"
    )


def test_a_usage_error_is_clicks_message_without_its_full_stop() -> None:
    """click ends its messages with a full stop ("No such command 'nope'."): the one line
    drops it before the help's pointer, and lowers its first letter."""
    assert _error(["nope"]) == "error: ttlctl: no such command 'nope' (see `ttlctl --help`)"
    assert _error(["bundle", "build"]) == (
        "error: ttlctl bundle build: missing option '--fit' (see `ttlctl bundle build --help`)"
    )
