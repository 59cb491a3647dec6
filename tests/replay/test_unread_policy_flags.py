"""A policy option that none of the asked policies reads is said on stderr, not dropped.

`ttlctl replay t --policy vllm --bundle b.json --ttl-seconds 3 --valve head` replayed stock
vLLM and said nothing: the bundle, the TTL and the valve changed nothing, and the reader
could believe they had. Each such option now gets one warning line; one that a policy asked
for reads (or that was not given) gets none. A run refused is not warned of: it says only its
error (the warning came first, then the refusal of the same option).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.cli.refusal import refused
from tests.conftest import make_trace
from ttlctl.cli import app


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unread")
    trace = make_trace(root / "trace.parquet", programs=6)
    fit, bundle = root / "fit.json", root / "bundle.json"
    runner = CliRunner()
    res = runner.invoke(app, ["fit", str(trace), "-o", str(fit), "--bootstrap", "5"])
    assert res.exit_code == 0, res.output
    build = ["bundle", "build", "--fit", str(fit), "--profile", "llama-3.1-8b-h100"]
    res = runner.invoke(app, [*build, "-o", str(bundle)])
    assert res.exit_code == 0, res.output
    return {"trace": trace, "bundle": bundle}


def warnings(files: dict[str, Path], *args: str) -> list[str]:
    res = CliRunner().invoke(app, ["replay", str(files["trace"]), *args])
    assert res.exit_code == 0, res.output
    return [line for line in res.stderr.splitlines() if line.startswith("warning: ")]


def test_an_option_no_asked_policy_reads_is_said(files: dict[str, Path]) -> None:
    given = ["--bundle", str(files["bundle"]), "--ttl-seconds", "3", "--valve", "head"]
    assert warnings(files, "--policy", "vllm,autellix", *given, "--pin-cap", "0.5") == [
        f"warning: {flag} is read only by {readers}, and --policy vllm, autellix runs none of "
        "them: it changes nothing here"
        for flag, readers in [
            ("--bundle", "continuum"),
            ("--valve", "continuum, static-ttl or oracle"),
            ("--pin-cap", "continuum, static-ttl or oracle"),
            ("--ttl-seconds", "static-ttl"),
        ]
    ]
    said = warnings(files, "--policy", "static-ttl", *given)
    assert len(said) == 1 and said[0].startswith("warning: --bundle is read only by continuum")


def test_an_option_a_policy_reads_or_not_given_is_not(files: dict[str, Path]) -> None:
    given = ["--bundle", str(files["bundle"]), "--ttl-seconds", "3", "--valve", "head"]
    assert warnings(files, "--policy", "all", *given) == []
    assert warnings(files, "--policy", "continuum,static-ttl", *given, "--pin-cap", "0.5") == []
    assert warnings(files, "--policy", "vllm") == []  # --ttl-seconds left at its default


@pytest.mark.parametrize(
    ("given", "error"),
    [
        (["--pin-cap", "2"], "error: --pin-cap must be in (0, 1]"),
        (["--valve", "bogus"], "error: --valve must be one of"),
        (["--ttl-seconds", "3", "--save-result"], "error: --save-result needs --live"),
    ],
    ids=["pin-cap", "valve", "save-result"],
)
def test_a_refused_run_says_only_its_error(
    files: dict[str, Path], tmp_path: Path, given: list[str], error: str
) -> None:
    out = tmp_path / "r.json"
    args = ["replay", str(files["trace"]), "--policy", "vllm", *given, "--json", str(out)]
    refused(args, out, error)
