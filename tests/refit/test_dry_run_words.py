"""`ttlctl refit --dry-run` says what a dry run does.

Regression: `refit --dry-run --force -o NEW` said "writing it to NEW anyway, as asked" (and
without -o "replacing it anyway") above its own line "dry run: would write NEW; nothing
written". The verdict now says what the run would have done, and that a dry run writes nothing.

Regression: `refit --dry-run` whose bundle is kept said "pass --force to replace it anyway",
as if the dry run had refused something; it says what a real run would do instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "engine-log" / "engine.jsonl"
PROFILE = "llama-3.1-8b-h100"


def run(*args: str | Path) -> list[str]:
    """The lines ``ttlctl args`` printed on stdout (it must succeed)."""
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle fitted on the sample log: refitted on the same log, the two tie."""
    root = tmp_path_factory.mktemp("dry")
    trace, fit, bundle = root / "trace.parquet", root / "fit.json", root / "bundle.json"
    run("ingest", SAMPLE, "-o", trace)
    run("fit", trace, "-o", fit)
    run("bundle", "build", "--fit", fit, "--profile", PROFILE, "-o", bundle)
    return bundle


def verdict(served: Path, *extra: str | Path, force: bool = True) -> str:
    """The refit's verdict line (the one before its outcome line)."""
    lines = run("refit", SAMPLE, "--bundle", served, *(["--force"] if force else []), *extra)
    (at,) = [i for i, line in enumerate(lines) if "does NOT beat" in line]
    return lines[at]


def test_a_forced_dry_run_says_it_writes_nothing(served: Path, tmp_path: Path) -> None:
    before = served.read_bytes()
    elsewhere = tmp_path / "next.json"
    staged = verdict(served, "--dry-run", "-o", elsewhere)
    assert "writing it" not in staged, staged
    assert staged.endswith(
        f"it would be written to {elsewhere} anyway, as asked (--force), but a dry run writes "
        "nothing; the bundle in service is left as it is"
    ), staged
    in_place = verdict(served, "--dry-run")
    assert "replacing it" not in in_place, in_place
    assert in_place.endswith(
        "it would replace the bundle in service anyway, as asked (--force), but a dry run "
        "writes nothing"
    ), in_place
    assert not elsewhere.exists() and served.read_bytes() == before
    # without --dry-run the words stay those of a write
    assert verdict(served, "-o", elsewhere).endswith(
        f"writing it to {elsewhere} anyway, as asked (--force); the bundle in service is left "
        "as it is"
    )
    assert elsewhere.is_file()


def test_a_dry_run_that_keeps_the_bundle_does_not_ask_for_force(
    served: Path, tmp_path: Path
) -> None:
    before = served.read_bytes()
    elsewhere = tmp_path / "next.json"
    in_place = verdict(served, "--dry-run", force=False)
    assert "--force" not in in_place, in_place
    assert in_place.endswith("a real run would keep the bundle in service"), in_place
    staged = verdict(served, "--dry-run", "-o", elsewhere, force=False)
    assert "--force" not in staged, staged
    assert staged.endswith(
        f"a real run would keep the bundle in service and write nothing to {elsewhere}"
    ), staged
    assert not elsewhere.exists() and served.read_bytes() == before
    # a real run's words are unchanged: it kept the bundle, and --force would replace it
    assert verdict(served, force=False).endswith(
        "the bundle in service is kept; pass --force to replace it anyway"
    )
    assert verdict(served, "-o", elsewhere, force=False).endswith(
        f"kept and nothing is written; pass --force to write it to {elsewhere} anyway"
    )
    assert not elsewhere.exists() and served.read_bytes() == before
