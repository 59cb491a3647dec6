"""`ttlctl tune --replicas N --worker-urls URL …`: the study's replays place each program
where `ttlctl replay` with the same URLs does (in worker processes too), tune.json and the
bundle's provenance record the URLs, a study refuses other URLs, and bad URLs are one
line, exit 2, naming the flag (the checks `replay` makes, from the one option)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from replay.tune.storage import differing
from tests.tune.inputs import KV_TOKENS, PROFILE, fleet_study
from ttlctl import bundle
from ttlctl.cli import app as ttlctl_app
from ttlctl.cli import tune as tune_cli

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)

#: two fleets of two replicas whose URLs place the trace's programs differently
FLEET_A = ("http://10.0.0.1:8000", "http://10.0.0.2:8000")
FLEET_B = ("http://127.0.0.1:8101", "http://127.0.0.1:8102")


def _urls(urls: tuple[str, ...] | list[str]) -> list[str]:
    return [arg for url in urls for arg in ("--worker-urls", url)]


def _tune(inputs: dict[str, Any], out: Path, *extra: str) -> Any:
    return CliRunner().invoke(
        app, fleet_study(inputs, out, "--router", "consistent-hash", "--force", *extra)
    )


def _replay(trace: Path, bundle_file: Path, urls: tuple[str, ...], out: Path) -> dict[str, Any]:
    """`ttlctl replay` of the tuned bundle on the fleet behind consistent-hash at ``urls``."""
    res = CliRunner().invoke(
        ttlctl_app,
        [
            "replay", str(trace), "--policy", "continuum", "--bundle", str(bundle_file),
            "--profile", PROFILE, "--concurrency", "8", "--kv-tokens", str(KV_TOKENS),
            "--replicas", "2", "--router", "consistent-hash", *_urls(urls),
            "--no-timing", "--json", str(out),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    result: dict[str, Any] = json.loads(out.read_text())["results"][0]
    return result


@pytest.mark.parametrize(
    ("urls", "workers"),
    [(FLEET_A, "1"), (FLEET_B, "2")],
    ids=["fleet-a-here", "fleet-b-in-workers"],
)
def test_tune_places_programs_as_replay_does_with_the_same_urls(
    tune_inputs: dict[str, Any],
    in_tune_order: Path,
    tmp_path: Path,
    urls: tuple[str, ...],
    workers: str,
) -> None:
    out = tmp_path / "bundle.json"
    trials = workers  # one trial per worker: with 2, each runs in a worker process
    res = _tune(tune_inputs, out, *_urls(urls), "--trials", trials, "--workers", workers)
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "tune.json").read_text())
    if workers != "1":  # every trial ran in a worker process, none here
        ran = {t["worker"] for t in summary["trials"]}
        assert len(ran) == int(workers) and not any(f":{os.getpid()}:" in w for w in ran), ran
    # the best trial's replay (one load, one seed: its value is that replay's mean JCT)
    # is `ttlctl replay` of the bundle it shipped (forced: the best trial's policy) on the
    # same URLs, to the last digit; on the other fleet's URLs the placement differs
    other = FLEET_B if urls == FLEET_A else FLEET_A
    same = _replay(in_tune_order, out, urls, tmp_path / "same.json")
    moved = _replay(in_tune_order, out, other, tmp_path / "other.json")
    assert summary["best"]["value"] == same["jct_mean_s"]
    calls = [r["llm_calls"] for r in same["per_replica"]]
    assert calls != [r["llm_calls"] for r in moved["per_replica"]]
    assert summary["best"]["value"] != moved["jct_mean_s"]
    # recorded where tune records the fleet: the objective, the best and shipped routers,
    # each held-back policy's router; the bundle's provenance carries them
    listed = list(urls)
    assert summary["objective"]["fleet"]["worker_urls"] == listed
    assert summary["best"]["router"]["worker_urls"] == listed
    assert summary["shipped"]["router"]["worker_urls"] == listed
    assert all(r["worker_urls"] == listed for r in summary["held_back"]["routers"].values())
    assert same["router"] == summary["best"]["router"]
    doc = bundle.read(out)
    assert doc["provenance"]["tuning"]["shipped"]["router"]["worker_urls"] == listed
    # the router section is the router's flags: vllm-router is given the URLs apart
    assert doc["router"] == {"name": "consistent-hash", "settings": {}, "replicas": 2}
    q = CliRunner().invoke(ttlctl_app, ["bundle", "query", str(out), "--as", "vllm-router"])
    assert q.exit_code == 0 and q.stdout.split() == ["--policy", "consistent_hash"], q.output


def test_a_study_refuses_other_urls(tune_inputs: dict[str, Any], tmp_path: Path) -> None:
    """Other URLs are another study by default (the name comes from the settings), and
    a study named with --study refuses them, naming the setting."""
    names = []
    for urls in (FLEET_A, FLEET_B):
        res = _tune(tune_inputs, tmp_path / "bundle.json", *_urls(urls), "--trials", "1")
        assert res.exit_code == 0, res.output
        names.append(json.loads((tmp_path / "tune.json").read_text())["study"]["name"])
        assert "default worker URLs" not in res.stderr  # the URLs given: nothing to say
    assert names[0] != names[1]
    res = _tune(
        tune_inputs,
        tmp_path / "bundle.json",
        *_urls(FLEET_B),
        "--trials",
        "1",
        "--study",
        names[0],
    )
    assert res.exit_code == 2, res.output
    # the refusal, one line, before any line announcing the study
    errors = res.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("error: study "), res.stderr
    assert "here: fleet.worker_urls)" in errors[0] and "pick another --study" in errors[0]


def test_without_urls_tune_says_once_which_urls_place_the_programs(
    tune_inputs: dict[str, Any], tmp_path: Path
) -> None:
    """Behind consistent-hash without --worker-urls, the study places programs by the
    default URLs: one warning line says so and names the flag, once per run however many
    trials replay (and with several routers searched, beside ones that do not hash)."""
    res = _tune(tune_inputs, tmp_path / "bundle.json", "--trials", "3", "--router", "cache-aware")
    assert res.exit_code == 0, res.output
    said = [line for line in res.stderr.splitlines() if "default worker URLs" in line]
    assert said == [
        "warning: --router consistent-hash: the placement hashes the default worker URLs "
        "http://replica-0, http://replica-1; --worker-urls (the replicas' URLs as vllm-router "
        "is given them) places programs as the real fleet's router does"
    ], res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--replicas", "2", *_urls(FLEET_A[:1])],
            "error: --worker-urls: 1 URL given for 2 replicas",
        ),
        (
            ["--replicas", "2", "--worker-urls", "notaurl", "--worker-urls", FLEET_A[1]],
            "error: --worker-urls: 'notaurl' is not a worker URL (its scheme is not http, "
            "https or grpc); give each as vllm-router is given it, http://HOST:PORT (or "
            "https://, grpc://)",
        ),
        (
            ["--replicas", "2", *_urls((FLEET_A[0], FLEET_A[0]))],
            "error: --worker-urls: a URL is given twice",
        ),
        (_urls(FLEET_A), "error: --worker-urls needs --replicas N"),
    ],
    ids=["count", "not-a-url", "twice", "no-replicas"],
)
def test_bad_worker_urls(
    tune_inputs: dict[str, Any], tmp_path: Path, args: list[str], message: str
) -> None:
    """Refused before any study, as `ttlctl replay` refuses them: one line, exit 2."""
    out = tmp_path / "run" / "bundle.json"
    res = CliRunner().invoke(
        app,
        [
            "tune", str(tune_inputs["trace"]), "--fit", str(tune_inputs["fit"]),
            "--profile", PROFILE, "--trials", "1", "-o", str(out), *args,
        ],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [message]
    assert not out.parent.exists()  # no study file left behind
    # replay says the same, word for word
    res = CliRunner().invoke(
        ttlctl_app, ["replay", str(tune_inputs["trace"]), "--policy", "vllm", *args]
    )
    assert res.exit_code == 2 and res.stderr.strip().splitlines() == [message]


def test_differing_names_the_settings() -> None:
    stored = {"inputs": {"trace": "a", "fit": "b"}, "fleet": {"replicas": 2}, "seeds": [0]}
    now = {"inputs": {"trace": "a", "fit": "c"}, "fleet": {"replicas": 2, "worker_urls": ["x"]}}
    assert differing(stored, now) == ["fleet.worker_urls", "inputs.fit", "seeds"]
    assert differing(stored, stored) == []
