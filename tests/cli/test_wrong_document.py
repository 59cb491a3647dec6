"""One of ttlctl's own JSON documents given where another belongs (the fit as the trace, a
bundle as the profile, the profile as the bundle) is named for what it is.

Regression: `ttlctl replay fit.json` said 'not a Parquet trace (make one with `ttlctl
ingest fit.json -o trace.parquet`)', a hint that ends in 'unrecognised format'; `--profile
bundle.json` said "schema is None, expected 'ttlctl.profile/1'" (Python's word for a
missing key); `bundle verify fit.json` listed the bundle's eight fields as missing; `ingest
bundle.json` called it an "unrecognised format".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiles.shipped import DATA
from ttlctl.cli import app
from ttlctl.filekind import BUNDLE, FIT, PROFILE, REPLAY_RESULTS, document_kind


@pytest.fixture(scope="module")
def documents(small_inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("documents")
    bundle, replay = root / "bundle.json", root / "replay.json"
    for args in (
        ["bundle", "build", "--fit", small_inputs["fit"], "--profile", "tiny-cpu", "-o", bundle],
        ["replay", small_inputs["trace"], "--policy", "vllm", "--json", replay],
    ):
        res = CliRunner().invoke(app, [str(a) for a in args])
        assert res.exit_code == 0, res.output
    return {
        "TRACE": small_inputs["trace"],
        "FIT": small_inputs["fit"],
        "BUNDLE": bundle,
        "PROFILE": DATA / "tiny-cpu.json",
        "REPLAY": replay,
        "OUT": root / "out.json",
        "OUTPUT_TRACE": root / "out.parquet",
    }


def test_each_document_is_known_by_its_fields(documents: dict[str, Path]) -> None:
    def kind(name: str) -> str | None:
        return document_kind(json.loads(documents[name].read_text(encoding="utf-8")))

    assert (kind("FIT"), kind("BUNDLE"), kind("PROFILE")) == (FIT, BUNDLE, PROFILE)
    assert kind("REPLAY") == REPLAY_RESULTS
    assert document_kind({"hello": "world"}) is None and document_kind([1]) is None


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "FIT", "--policy", "vllm"], "FIT: not a Parquet trace but a fit"),
        (["fit", "BUNDLE", "-o", "OUT"], "BUNDLE: not a Parquet trace but a policy bundle"),
        (["tune", "PROFILE", "--fit", "FIT", "--profile", "PROFILE", "-o", "OUT"],
         "PROFILE: not a Parquet trace but a device profile"),
        (["bundle", "build", "--fit", "BUNDLE", "--profile", "tiny-cpu", "-o", "OUT"],
         "BUNDLE: not a fit but a policy bundle"),
        (["bundle", "build", "--fit", "REPLAY", "--profile", "tiny-cpu", "-o", "OUT"],
         "REPLAY: not a fit but a replay's results"),
        (["bundle", "build", "--fit", "FIT", "--profile", "BUNDLE", "-o", "OUT"],
         "BUNDLE: not a device profile but a policy bundle"),
        (["replay", "TRACE", "--policy", "vllm", "--profile", "FIT"],
         "FIT: not a device profile but a fit"),
        (["bundle", "verify", "FIT"], "FIT: not a ttlctl bundle but a fit"),
        (["ingest", "BUNDLE", "-o", "OUTPUT_TRACE"],
         "BUNDLE: not agent or engine logs but a policy bundle"),
        (["ingest", "REPLAY", "-o", "OUTPUT_TRACE"],
         "REPLAY: not agent or engine logs but a replay's results"),
        (["bundle", "inspect", "PROFILE"], "PROFILE: not a ttlctl bundle but a device profile"),
        (["replay", "TRACE", "--policy", "continuum", "--bundle", "FIT"],
         "FIT: not a ttlctl bundle but a fit"),
    ],
)  # fmt: skip
def test_a_document_given_as_another_is_named(
    documents: dict[str, Path], args: list[str], said: str
) -> None:
    res = CliRunner().invoke(app, [str(documents.get(a, a)) for a in args])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    for name, path in documents.items():
        said = said.replace(name, str(path))
    assert lines[0].startswith(f"error: {said}"), lines[0]
    assert "ingest" not in lines[0] or "`ttlctl ingest` or `ttlctl synth`" in lines[0]


def test_a_log_given_as_the_trace_still_gets_the_ingest_hint(tmp_path: Path) -> None:
    log = tmp_path / "calls.jsonl"
    log.write_text('{"timestamp": 1}\n', encoding="utf-8")
    res = CliRunner().invoke(app, ["replay", str(log), "--policy", "vllm"])
    assert res.exit_code == 2
    assert f"make one with `ttlctl ingest {log} -o trace.parquet`" in " ".join(res.output.split())


def test_a_json_object_without_a_schema_as_the_profile_says_so(
    documents: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}', encoding="utf-8")
    res = CliRunner().invoke(
        app, ["replay", str(documents["TRACE"]), "--policy", "vllm", "--profile", str(other)]
    )
    assert res.exit_code == 2
    assert "None" not in res.output and "no schema field" in res.output, res.output


def test_deeply_nested_json_given_to_ingest_is_unrecognised(tmp_path: Path) -> None:
    """Nesting past Python's recursion limit is no ttlctl document: ingest calls the file
    unrecognised (as before it looked for its own documents), not a RecursionError."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000, encoding="utf-8")
    res = CliRunner().invoke(app, ["ingest", str(deep), "-o", str(tmp_path / "out.parquet")])
    assert not isinstance(res.exception, RecursionError), res.exception
    assert res.exit_code != 0
    assert "unrecognised format" in " ".join(res.output.split())
