"""The bundle: sealed, verified, refused when damaged, and light enough for the engine."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fitting.policy_params import PolicyParams
from profiles.shipped import resolve
from replay.fleet.routers import ROUTERS, TAKES, RouterSettings
from ttlctl import bundle, bundle_check, bundle_doc, bundle_make, router_doc
from ttlctl.cli import app
from ttlctl.cli.bundle import CONTEXTS
from ttlctl.cli.render.cells import secs
from ttlctl.jsonio import file_sha256
from ttlctl.server import serving

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundle_file(fit_doc: dict[str, Any], tmp_path: Path) -> Path:
    profile, _ = resolve("llama-3.1-8b-h100")
    doc = bundle_make.build(
        fit_doc,
        profile.to_json(),
        PolicyParams(eta=0.5, valve="stall-only"),
        created="2026-11-29T00:00:00+00:00",
        ttlctl_version="test",
        provenance={"test": True},
    )
    path = tmp_path / "bundle.json"
    bundle_make.write(doc, path)
    return path


def test_round_trip_and_checksum(bundle_file: Path) -> None:
    doc = bundle.read(bundle_file)
    assert doc["schema_version"] == bundle_doc.SCHEMA_VERSION
    assert doc["policy"]["valve"] == "stall-only" and doc["policy"]["eta"] == 0.5
    assert doc["sha256"] == bundle_doc.seal(doc)["sha256"]
    policy = bundle.policy_from(doc)
    assert policy.decide("grep", 32_000).source == "tool"


def test_every_single_edit_is_caught(bundle_file: Path, tmp_path: Path) -> None:
    text = bundle_file.read_text()
    doc = json.loads(text)
    damaged = tmp_path / "d.json"
    # change one value anywhere: a number in a CDF, the eta, a tool name
    edits = [
        ('"eta": 0.5', '"eta": 0.6'),
        ('"valve": "stall-only"', '"valve": "head"'),
        ('"grep"', '"grap"'),
    ]
    for old, new in edits:
        assert old in text, old
        damaged.write_text(text.replace(old, new, 1))
        with pytest.raises(bundle_doc.BundleError, match="checksum mismatch"):
            bundle.read(damaged)
    for cut in (10, len(text) // 2, len(text) - 3):
        damaged.write_text(text[:cut])
        with pytest.raises(bundle_doc.BundleError, match="not valid JSON"):
            bundle.read(damaged)
    damaged.write_text(json.dumps({"hello": "world"}))
    with pytest.raises(bundle_doc.BundleError, match="not a ttlctl bundle"):
        bundle.read(damaged)
    doc2 = bundle_doc.seal({**doc, "schema_version": 99})
    damaged.write_text(json.dumps(doc2))
    with pytest.raises(bundle_doc.BundleError, match="schema_version 99 is not supported"):
        bundle.read(damaged)


def test_resealed_but_invalid_content_is_refused(bundle_file: Path) -> None:
    doc = bundle.read(bundle_file)
    bad_cdf = json.loads(json.dumps(doc))
    bad_cdf["fit"]["tools"]["grep"]["cdf"]["p"][0] = 2.0
    with pytest.raises(bundle_doc.BundleError, match="p must increase"):
        bundle_check.verify(bundle_doc.seal(bad_cdf))
    bad_policy = json.loads(json.dumps(doc))
    bad_policy["policy"]["pin_cap"] = 7
    with pytest.raises(bundle_doc.BundleError, match="pin_cap"):
        bundle_check.verify(bundle_doc.seal(bad_policy))


@pytest.mark.parametrize(
    ("cdf", "said"),
    [
        ({"x": [-1.0, 2.0], "p": [0.5, 1.0], "n": 2}, "x must be non-negative"),
        ({"x": [1.0, 1.0], "p": [0.5, 1.0], "n": 2}, "x must be non-negative and strictly"),
        ({"x": [1.0, 2.0], "p": [0.0, 1.0], "n": 2}, "p must increase strictly to 1"),
        ({"x": [1.0, 2.0], "p": [0.5, 0.9], "n": 2}, "p must increase strictly to 1"),
        ({"x": [1.0], "p": [1.0], "n": -1}, "n must be positive exactly when there are points"),
        ({"x": [], "p": [], "n": 3}, "n must be positive exactly when there are points"),
        ({"x": [1.0, 2.0], "p": [1.0], "n": 2}, "x and p must have the same length"),
        (
            {
                "x": [float(i) for i in range(1025)],
                "p": [(i + 1) / 1025 for i in range(1025)],
                "n": 9,
            },
            "at most 1024",
        ),
    ],
)
def test_a_cdf_that_breaks_a_documented_rule_is_refused(
    bundle_file: Path, cdf: dict[str, Any], said: str
) -> None:
    """docs/bundle.md: each CDF has matching x and p lists of at most 1,024 points, x
    non-negative and increasing, p increasing to 1 (n > 0 exactly when there are points)."""
    doc = json.loads(json.dumps(bundle.read(bundle_file)))
    doc["fit"]["tools"]["grep"]["cdf"] = cdf
    with pytest.raises(bundle_doc.BundleError, match=said):
        bundle_check.verify(bundle_doc.seal(doc))


def test_a_cdf_of_exactly_1024_points_is_taken(bundle_file: Path) -> None:
    doc = json.loads(json.dumps(bundle.read(bundle_file)))
    xs = [float(i) for i in range(1024)]
    doc["fit"]["tools"]["grep"]["cdf"] = {
        "x": xs,
        "p": [(i + 1) / 1024 for i in range(1024)],
        "n": 5,
    }
    bundle_check.verify(bundle_doc.seal(doc))


def test_a_router_section_needs_at_least_one_replica(bundle_file: Path) -> None:
    doc = bundle.read(bundle_file)
    router = {"name": "program-scheduling", "settings": {}, "replicas": 0}
    with pytest.raises(bundle_doc.BundleError, match="replicas"):
        bundle_check.verify(bundle_doc.seal({**doc, "router": router}), router_settings=False)


def test_the_checksum_is_of_the_documented_canonical_json() -> None:
    """docs/bundle.md: every field but sha256, keys sorted, no spaces, UTF-8 (a bundle
    sealed by one ttlctl verifies in another, and by hand): the bytes written out here, not
    the function's own output."""
    doc = {"sha256": "x", "b": 1, "created": "now", "a": {"y": "é", "x": [1, 2.5]}}
    canonical = '{"a":{"x":[1,2.5],"y":"é"},"b":1,"created":"now"}'.encode()
    assert bundle_doc.canonical_bytes(doc) == canonical
    assert bundle_doc.checksum(doc) == hashlib.sha256(canonical).hexdigest()


def test_the_router_sections_refusal_names_what_it_takes(bundle_file: Path) -> None:
    """A router section's settings may be numbers, text, booleans or null (Program
    scheduling's config has all four), and the refusal of a bad one says so. Regression:
    booleans were taken but the message left them out."""
    doc = bundle.read(bundle_file)
    settings = {"token_capacity": True, "resume_order": "mru", "x": None, "n": 1.5}
    good = {**doc, "router": {"name": "program-scheduling", "settings": settings, "replicas": 2}}
    bundle_check.verify(bundle_doc.seal(good))
    bad = {**doc, "router": {"name": "cache-aware", "settings": {"a": [1]}, "replicas": 2}}
    with pytest.raises(bundle_doc.BundleError) as caught:
        bundle_check.verify(bundle_doc.seal(bad))
    assert str(caught.value) == (
        "router must be an object with name (text), settings (numbers, text, booleans or "
        "null) and replicas (an integer >= 1)"
    )


def _with_router(bundle_file: Path, tmp_path: Path, name: str, **settings: Any) -> Path:
    """The bundle with a hand-edited router section, sealed again."""
    doc = dict(bundle.read(bundle_file))
    doc["router"] = {"name": name, "settings": settings, "replicas": 2}
    path = tmp_path / f"{name}.json"
    bundle_make.write(bundle_doc.seal(doc), path)
    return path


CACHE_AWARE = {"cache_threshold": 0.3, "balance_abs_threshold": 64, "balance_rel_threshold": 1.5}


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        (
            "cache-aware",
            {**CACHE_AWARE, "balance_abs_threshold": 12.5},
            "router.settings.balance_abs_threshold: 12.5 is not an integer, "
            "for vllm-router's --balance-abs-threshold",
        ),
        (
            "cache-aware",
            {**CACHE_AWARE, "cache_threshold": "x"},
            "router.settings.cache_threshold: 'x' is not a number, "
            "for vllm-router's --cache-threshold",
        ),
        (
            "cache-aware",
            {**CACHE_AWARE, "cache_threshold": 1.5},
            "router.settings.cache_threshold: 1.5 is out of range (0..1)",
        ),
        (
            "cache-aware",
            {**CACHE_AWARE, "router_temperature": 0.5},
            "router.settings.router_temperature: the cache-aware router does not take it "
            "(it takes: cache_threshold, balance_abs_threshold, balance_rel_threshold)",
        ),
        (
            "cache-aware",
            {"cache-threshold": 0.3},
            "router.settings.cache-threshold: write it cache_threshold (vllm-router's flag "
            "name with underscores, as ttlctl tune writes it)",
        ),
        (
            "kv-aware",
            {"kv_aware_session_affinity_ttl_secs": True, "router_temperature": 0.0},
            "router.settings.kv_aware_session_affinity_ttl_secs: true is not an integer",
        ),
        (
            "kv-aware",
            {"kv_aware_session_affinity_ttl_secs": 30, "router_temperature": None},
            "router.settings.router_temperature: null is not a value of it",
        ),
        (
            "kv-aware",
            {"kv_aware_session_affinity_ttl_secs": 31_536_001},
            "router.settings.kv_aware_session_affinity_ttl_secs: 31536001 is out of range "
            "(1..31536000), for vllm-router's --kv-aware-session-affinity-ttl-secs",
        ),
        (
            "pin-aware",
            {"pin_queue_bound": -1},
            "router.settings.pin_queue_bound: -1 is out of range (0 or more), "
            "for ttlctl's pin-aware --pin-queue-bound",
        ),
        ("least-busy", {}, "router.name: 'least-busy' is not a router ttlctl knows"),
    ],
)
def test_a_router_setting_vllm_router_would_refuse_is_refused_naming_file_and_key(
    bundle_file: Path, tmp_path: Path, name: str, settings: dict[str, Any], message: str
) -> None:
    """A hand-edited, sealed-again router section: read, each setting is typed as its
    router's flag takes it; `bundle query --as vllm-router` says so in one line naming the
    file and the key, exit 2, instead of printing a flag the router refuses."""
    path = _with_router(bundle_file, tmp_path, name, **settings)
    with pytest.raises(bundle_doc.BundleError) as caught:
        bundle.read(path)
    assert str(caught.value).startswith(f"{path}: {message}"), caught.value
    res = CliRunner().invoke(app, ["bundle", "query", str(path), "--as", "vllm-router"])
    assert res.exit_code == 2 and res.stdout == ""
    assert res.stderr.strip().splitlines() == [f"error: {caught.value}"]


def test_the_engine_serves_a_bundle_whose_router_settings_the_router_would_refuse(
    bundle_file: Path, tmp_path: Path
) -> None:
    """The router section is the router's: the engine (and serve's start check, which
    reads as the engine does) serves the policy of a bundle whose settings vllm-router
    would refuse, where `bundle query --as vllm-router` refuses them."""
    path = _with_router(bundle_file, tmp_path, "cache-aware", **{"cache-threshold": 0.3})
    with pytest.raises(bundle_doc.BundleError):
        bundle.read(path)
    warned: list[str] = []
    policy, doc = bundle.load_policy(path, warned.append)
    assert policy is not None and doc is not None and warned == []
    assert doc["router"]["settings"] == {"cache-threshold": 0.3}
    assert serving.check_bundle(path, allow_stock=False) is None


def test_vllm_routers_spelling_of_a_router_is_the_same_router(
    bundle_file: Path, tmp_path: Path
) -> None:
    """`cache_aware` (vllm-router's) names the router `cache-aware` (ttlctl's); an int flag
    written 30.0 in the JSON is printed as vllm-router's int parser takes it."""
    path = _with_router(bundle_file, tmp_path, "cache_aware", **CACHE_AWARE)
    res = CliRunner().invoke(app, ["bundle", "query", str(path), "--as", "vllm-router"])
    assert res.exit_code == 0, res.output
    assert res.stdout.split() == [
        "--policy",
        "cache_aware",
        "--balance-abs-threshold",
        "64",
        "--balance-rel-threshold",
        "1.5",
        "--cache-threshold",
        "0.3",
    ]
    ttl = {"kv_aware_session_affinity_ttl_secs": 30.0, "router_temperature": 0.0}
    path = _with_router(bundle_file, tmp_path, "kv_aware", **ttl)
    res = CliRunner().invoke(app, ["bundle", "query", str(path), "--as", "vllm-router"])
    assert res.exit_code == 0, res.output
    assert "--kv-aware-session-affinity-ttl-secs 30 " in res.stdout
    # the flags a policy's settings do not give: said beside them
    assert res.stderr.startswith("warning: kv_aware sees no cached block without each replica's")
    assert "--kv-event-source URL=tcp://HOST:PORT per replica" in " ".join(res.stderr.split())
    assert "this bundle was tuned" not in res.stderr  # no study recorded: nothing said of one
    path = _with_router(bundle_file, tmp_path, "cache_aware", **CACHE_AWARE)
    res = CliRunner().invoke(app, ["bundle", "query", str(path), "--as", "vllm-router"])
    assert res.exit_code == 0 and res.stderr == ""


def test_the_bundles_router_settings_are_the_simulators() -> None:
    """ttlctl.router_doc types the settings that the simulator's router models take
    (replay.fleet.routers): the same routers, the same keys, and each model's defaults pass
    (types and ranges: tests/fleet/test_router_table.py)."""
    assert set(router_doc.SETTINGS) | {router_doc.PROGRAM_SCHEDULING} == set(ROUTERS)
    for name, flags in router_doc.SETTINGS.items():
        assert tuple(flags) == TAKES[name], name
        router_doc.check_settings(name, RouterSettings(name).resolved())


def test_engine_reader_falls_back_to_no_pin(bundle_file: Path, tmp_path: Path) -> None:
    warnings: list[str] = []
    policy, doc = bundle.load_policy(bundle_file, warnings.append)
    assert policy is not None and doc is not None and warnings == []
    broken = tmp_path / "broken.json"
    broken.write_text(bundle_file.read_text()[:-40])
    for path in (broken, tmp_path / "missing.json", None):
        warnings.clear()
        policy, doc = bundle.load_policy(path, warnings.append)
        assert policy is None and doc is None
        assert len(warnings) == 1 and "stock vLLM" in warnings[0]


def test_runtime_reader_imports_nothing_heavy(bundle_file: Path) -> None:
    code = (
        "import sys\n"
        "from ttlctl import bundle\n"
        f"p, _ = bundle.load_policy({str(bundle_file)!r}, print)\n"
        "assert p is not None\n"
        "p.decide('grep', 8000)\n"
        "heavy = [m for m in ('numpy', 'polars', 'scipy', 'torch', 'matplotlib', 'typer', 'rich')"
        " if m in sys.modules]\n"
        "print(heavy)\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_cli_build_default_valve_is_stall_only(fit_doc: dict[str, Any], tmp_path: Path) -> None:
    """The default valve is stall-only (it won every trace of the live comparison in
    docs/results.md); --valve head gives the paper's rule."""
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    base = ["bundle", "build", "--fit", str(fit_path), "--profile", "llama-3.1-8b-h100"]
    valves = {}
    for name, extra in (("default", []), ("head", ["--valve", "head"])):
        out = tmp_path / f"{name}.json"
        res = CliRunner().invoke(app, [*base, "-o", str(out), *extra])
        assert res.exit_code == 0, res.output
        valves[name] = json.loads(out.read_text())["policy"]["valve"]
    assert valves == {"default": "stall-only", "head": "head"}
    assert PolicyParams().valve == "stall-only"


def test_cli_build_inspect_verify_query(fit_doc: dict[str, Any], tmp_path: Path) -> None:
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    out = tmp_path / "b.json"
    runner = CliRunner()
    res = runner.invoke(
        app,
        [
            "bundle",
            "build",
            "--fit",
            str(fit_path),
            "--profile",
            "llama-3.1-8b-h100",
            "-o",
            str(out),
            "--valve",
            "stall-only",
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    assert doc["policy"]["eta"] == pytest.approx(max(-1, min(1, fit_doc["eta"]["value"])))
    assert doc["provenance"]["trace"]["sha256"] == fit_doc["input"]["sha256"]

    res = runner.invoke(app, ["bundle", "verify", str(out)])
    assert res.exit_code == 0 and "ok" in res.output
    res = runner.invoke(app, ["bundle", "inspect", str(out)])
    assert res.exit_code == 0 and "grep" in res.output and "τ* @128k" in res.output

    res = runner.invoke(
        app, ["bundle", "query", str(out), "--tool", "grep", "--context-tokens", "32000"]
    )
    assert res.exit_code == 0, res.output
    answer = json.loads(res.stdout)
    assert set(answer) == {"ttl_s", "source", "benefit_s"}
    assert answer["source"] == "tool" and 0.05 <= answer["ttl_s"] <= 0.4

    # the same answer as other engines' retention hints
    query = ["bundle", "query", str(out), "--tool", "grep", "--context-tokens", "32000"]
    hinted = {}
    for engine in ("dynamo", "sglang", "trtllm"):
        res = runner.invoke(app, [*query, "--as", engine])
        assert res.exit_code == 0, res.output
        hinted[engine] = json.loads(res.stdout)
        # Dynamo clamps a sub-second τ* to a 300 s pin: said on stderr, or refused
        clamp = "dynamo clamps nvext.cache_control.ttl to [300, 3600] s"
        assert (clamp in res.stderr) == (engine == "dynamo")
    res = runner.invoke(app, [*query, "--as", "dynamo", "--refuse-clamped"])
    assert res.exit_code == 2 and "pinned for 300 s (longer than τ*)" in res.stderr
    assert res.stdout == ""
    # without --as there is no hint to clamp: refused, not ignored (it printed τ*, exit 0)
    res = runner.invoke(app, [*query, "--refuse-clamped"])
    assert res.exit_code == 2 and res.stdout == "", res.output
    assert res.stderr.strip() == (
        "error: --refuse-clamped goes with --as ENGINE (an engine's hint, which it may clamp); "
        "the plain answer is τ* itself"
    )
    # nor with an engine that never clamps (it was taken without a word, exit 0)
    for engine in ("sglang", "trtllm"):
        res = runner.invoke(app, [*query, "--as", engine, "--refuse-clamped"])
        assert res.exit_code == 2 and res.stdout == "", res.output
        assert res.stderr.strip() == (
            "error: --refuse-clamped goes with --as dynamo (an engine that clamps the TTL); "
            f"--as {engine} takes τ* as it is, so nothing would be refused"
        )
    assert hinted["dynamo"] == {"nvext": {"cache_control": {"type": "ephemeral", "ttl": "1"}}}
    assert hinted["sglang"] == {"retention_seconds": round(answer["ttl_s"], 3)}
    trt = hinted["trtllm"]["kv_cache_retention_config"]
    assert trt["decode_duration_ms"] == math.ceil(answer["ttl_s"] * 1000)
    assert trt["token_range_retention_configs"][0]["token_start"] == 0
    res = runner.invoke(app, [*query, "--as", "lmcache"])
    assert res.exit_code == 2 and "--as lmcache: no per-request retention field" in res.stderr
    res = runner.invoke(app, [*query, "--as", "nginx"])
    assert res.exit_code == 2 and "--as takes dynamo, sglang, trtllm" in res.stderr
    # a name --as does not take is refused as such without --tool too (it was refused for the
    # missing --tool), and the choices name vllm-router
    res = runner.invoke(app, ["bundle", "query", str(out), "--as", "vllm_router"])
    assert res.exit_code == 2
    assert "--as takes dynamo, sglang, trtllm or vllm-router, not 'vllm_router'" in res.stderr
    # --as vllm-router prints the router's flags: a request's flags are refused, not ignored
    res = runner.invoke(app, [*query, "--as", "vllm-router"])
    assert res.exit_code == 2 and "drop --tool, --context-tokens" in res.stderr
    assert res.stdout == ""
    # a T given at its default value is given all the same
    res = runner.invoke(
        app, ["bundle", "query", str(out), "--as", "vllm-router", "--queue-delay-seconds", "0"]
    )
    assert res.exit_code == 2 and res.stderr.strip().endswith("drop --queue-delay-seconds")

    out.write_text(out.read_text().replace('"stall-only"', '"head"'))
    res = runner.invoke(app, ["bundle", "verify", str(out)])
    assert res.exit_code == 2 and "checksum mismatch" in res.output
    res = runner.invoke(
        app, ["bundle", "build", "--fit", str(fit_path), "--profile", "nope", "-o", str(out)]
    )
    assert res.exit_code == 2 and "no such profile" in res.output
    res = runner.invoke(
        app,
        [
            "bundle",
            "build",
            "--fit",
            str(fit_path),
            "--profile",
            "llama-3.1-8b-h100",
            "-o",
            str(out),
            "--valve",
            "sometimes",
        ],
    )
    assert res.exit_code == 2 and "valve" in res.output


def test_ttl_grows_with_context(bundle_file: Path) -> None:
    policy = bundle.policy_from(bundle.read(bundle_file))
    for tool in ("grep", "pytest", None):
        ttls = [policy.decide(tool, c).ttl_s for c in (1_000, 8_000, 32_000, 128_000, 512_000)]
        assert ttls == sorted(ttls)


def test_assemble_stamps_now_and_this_version(fit_doc: dict[str, Any]) -> None:
    import ttlctl

    prof, _ = resolve("llama-3.1-8b-h100")
    doc = bundle_make.assemble(fit_doc, prof.to_json(), PolicyParams(k=7), {"by": "test"})
    bundle_check.verify(doc)
    assert doc["ttlctl_version"] == ttlctl.__version__
    assert doc["policy"]["k"] == 7 and doc["provenance"] == {"by": "test"}
    created = datetime.fromisoformat(doc["created"])
    assert abs((datetime.now(UTC) - created).total_seconds()) < 60
    cold = bundle_make.assemble(bundle_make.empty_fit(), prof.to_json(), PolicyParams(), {})
    assert cold["fit"]["tools"] == {} and bundle.policy_from(cold) is not None


def test_bundle_build_writes_a_bundle_doc(fit_doc: dict[str, Any], tmp_path: Path) -> None:
    from tests.documents import conforms

    fit_path, out = tmp_path / "fit.json", tmp_path / "b.json"
    fit_path.write_text(json.dumps(fit_doc))
    build = ["bundle", "build", "--fit", str(fit_path), "--profile", "llama-3.1-8b-h100"]
    res = CliRunner().invoke(app, [*build, "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    conforms(doc, bundle_doc.Bundle)
    # every field but the optional router section (tune --replicas writes it)
    assert (
        set(doc) == set(bundle_doc.REQUIRED) == set(bundle_doc.Bundle.__annotations__) - {"router"}
    )
    assert set(doc["provenance"]) == {"fit", "profile", "trace", "eta_fitted"}
    assert doc["sha256"] == bundle_doc.checksum(doc)


def test_bundle_build_refuses_a_fit_that_is_not_one(
    fit_doc: dict[str, Any], tmp_path: Path
) -> None:
    bad = tmp_path / "fit.json"
    bad.write_text(json.dumps({"schema": "ttlctl.fit/1", "tools": {"grep": {"n": 3}}}))
    build = ["bundle", "build", "--fit", str(bad), "--profile", "llama-3.1-8b-h100"]
    res = CliRunner().invoke(app, [*build, "-o", str(tmp_path / "b.json")])
    assert res.exit_code == 2
    assert f"{bad}: fit.tools['grep']: missing cdf" in res.stderr
    # a fit without its all-tools entry: refused (it was taken, and every tool, trusted or
    # not, read its τ from the cold start)
    doc = {key: value for key, value in fit_doc.items() if key != "global"}
    bad.write_text(json.dumps(doc))
    res = CliRunner().invoke(app, [*build, "-o", str(tmp_path / "b.json")])
    assert res.exit_code == 2
    assert f"{bad}: fit: missing global (the all-tools fit" in res.stderr
    bad.write_text(json.dumps(fit_doc | {"global": None}))  # null beside tools: the same
    res = CliRunner().invoke(app, [*build, "-o", str(tmp_path / "b.json")])
    assert res.exit_code == 2 and f"{bad}: fit: missing global" in res.stderr
    bad.write_text("[1, 2]")
    res = CliRunner().invoke(app, [*build, "-o", str(tmp_path / "b.json")])
    assert (
        res.exit_code == 2
        and f"{bad}: not a fit: the top level is a list, not an object" in res.stderr
    )
    assert not (tmp_path / "b.json").exists()


def test_from_files_refuses_a_knob_out_of_range_as_a_bundle_error(
    fit_doc: dict[str, Any], tmp_path: Path
) -> None:
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    req = bundle_make.BuildRequest(fit=fit_path, profile="llama-3.1-8b-h100", pin_cap=1.5)
    with pytest.raises(bundle_doc.BundleError, match=r"^--pin-cap must be in \(0, 1\], got 1.5$"):
        bundle_make.from_files(req)
    doc = bundle_make.from_files(
        bundle_make.BuildRequest(fit=fit_path, profile="llama-3.1-8b-h100")
    )
    assert doc["policy"]["k"] == fit_doc.get("k", 100)
    assert doc["policy"]["valve"] == "stall-only"  # the default valve, as `bundle build`'s
    assert doc["provenance"]["fit"] == {"path": str(fit_path), "sha256": file_sha256(fit_path)}


def test_bundle_build_says_a_bad_knob_in_one_line(fit_doc: dict[str, Any], tmp_path: Path) -> None:
    fit_path, out = tmp_path / "fit.json", tmp_path / "b.json"
    fit_path.write_text(json.dumps(fit_doc))
    build = ["bundle", "build", "--fit", str(fit_path), "--profile", "llama-3.1-8b-h100"]
    res = CliRunner().invoke(app, [*build, "-o", str(out), "--valve", "sideways"])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("error: --valve must be one of ") and line.endswith("got 'sideways'")
    assert not out.exists()


def test_query_and_inspect_price_a_miss_in_the_serving_engines_budget(bundle_file: Path) -> None:
    """``--max-num-batched-tokens`` answers as an engine of that budget decides (the
    plugin's policy at that budget); without it, the profile's measured budget."""
    doc = bundle.read(bundle_file)
    runner = CliRunner()
    query = ["bundle", "query", str(bundle_file), "--tool", "grep", "--context-tokens", "32000"]
    answers = {}
    for budget in (None, 256, 8192):
        extra = [] if budget is None else ["--max-num-batched-tokens", str(budget)]
        res = runner.invoke(app, [*query, *extra])
        assert res.exit_code == 0, res.output
        answers[budget] = json.loads(res.stdout)
        want = bundle.policy_from(doc, budget).decide("grep", 32000).to_json()
        assert answers[budget] == pytest.approx(want)
    # a smaller budget takes more steps (each with its fixed cost): a dearer miss
    assert answers[256]["benefit_s"] > answers[8192]["benefit_s"]
    assert answers[None] != answers[256]
    res = runner.invoke(app, [*query, "--max-num-batched-tokens", "0"])
    assert res.exit_code == 2 and "--max-num-batched-tokens" in res.output
    shown = {}
    for budget in ("256", "8192"):
        res = runner.invoke(
            app, ["bundle", "inspect", str(bundle_file), "--max-num-batched-tokens", budget]
        )
        assert res.exit_code == 0, res.output
        shown[budget] = res.output
    assert shown["256"] != shown["8192"]


def test_inspect_prices_b_with_the_queue_delay_it_is_given(bundle_file: Path) -> None:
    """Regression: inspect's "benefit B" line ignored --queue-delay-seconds (it priced B
    with the policy's own T, 0 in a bundle), where the τ* columns beside it and `bundle
    query` take it: the line is B as query answers it for a tool the fit has not seen."""
    runner = CliRunner()
    lines = {}
    for delay in ("0", "2", "100"):
        res = runner.invoke(
            app,
            ["bundle", "inspect", str(bundle_file), "--queue-delay-seconds", delay],
            env={"COLUMNS": "400"},
        )
        assert res.exit_code == 0, res.output
        (line,) = [x for x in res.stdout.splitlines() if x.startswith("benefit B of a kept")]
        lines[delay] = line
        want = []
        for context in CONTEXTS:
            query = ["bundle", "query", str(bundle_file), "--tool", "never-seen-tool"]
            res = runner.invoke(
                app,
                [*query, "--context-tokens", str(context), "--queue-delay-seconds", delay],
            )
            assert res.exit_code == 0, res.output
            want.append(f"{context // 1000}k: {secs(json.loads(res.stdout)['benefit_s'])}")
        assert line.endswith(": " + ", ".join(want)), (line, want)
    assert len(set(lines.values())) == 3, lines


def test_query_and_inspect_say_a_context_beyond_the_profiles_limit(
    fit_doc: dict[str, Any], bundle_file: Path, tmp_path: Path
) -> None:
    """Regression: a bundle built on tiny-cpu (max_context 2,048) priced 128k tokens and
    said nothing; one warning line names the context and the limit, the answer stands."""
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    tiny = tmp_path / "tiny.json"
    build = ["bundle", "build", "--fit", str(fit_path), "--profile", "tiny-cpu", "-o", str(tiny)]
    assert CliRunner().invoke(app, build).exit_code == 0
    query = ["bundle", "query", str(tiny), "--tool", "grep", "--context-tokens"]
    res = CliRunner().invoke(app, [*query, "128000"])
    assert res.exit_code == 0, res.output
    assert set(json.loads(res.stdout)) == {"ttl_s", "source", "benefit_s"}
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("warning: --context-tokens 128,000 tokens is beyond profile tiny-cpu")
    assert "max_context (2,048 tokens)" in line
    within = CliRunner().invoke(app, [*query, "2048"])
    assert within.exit_code == 0 and within.stderr == ""
    res = CliRunner().invoke(app, ["bundle", "inspect", str(tiny)])
    assert res.exit_code == 0, res.output
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("warning: ")]
    assert "8,000, 32,000, 128,000 tokens are beyond" in line and "(2,048 tokens)" in line
    res = CliRunner().invoke(app, ["bundle", "inspect", str(bundle_file)])  # 131,072: all within
    assert res.exit_code == 0 and "warning" not in res.stderr


def test_offload_on_a_cpu_profiles_bundle_says_there_is_no_host_tier(
    fit_doc: dict[str, Any], tmp_path: Path
) -> None:
    """A CPU profile's reload is a memory copy (no host tier): `--offload` prices a reload at
    it, which inspect and query now say; a GPU profile's bundle says nothing of it."""
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    said = "--offload: the bundle's profile was measured on a CPU, which has no host tier"
    tool = next(iter(fit_doc["tools"]))
    for profile, warned in (("tiny-cpu", True), ("llama-3.1-8b-h100", False)):
        out = tmp_path / f"{profile}.json"
        build = ["bundle", "build", "--fit", str(fit_path), "--profile", profile, "-o", str(out)]
        assert CliRunner().invoke(app, build).exit_code == 0
        query = ["bundle", "query", str(out), "--tool", tool, "--context-tokens", "1000"]
        for args in (["bundle", "inspect", str(out), "--offload"], [*query, "--offload"]):
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, res.output
            assert (said in res.stderr) is warned, (args, res.stderr)
        assert said not in CliRunner().invoke(app, query).stderr  # no --offload: nothing


def test_build_takes_k_from_the_fit_and_forwards_every_knob(
    fit_doc: dict[str, Any], tmp_path: Path
) -> None:
    """K is the fit's (``--min-samples``) unless ``--k`` is given; ``--learn-eta`` reaches
    the policy; T averages the last 100 delays by default (docs/method.md)."""
    fit_path = tmp_path / "fit.json"
    fit_path.write_text(json.dumps({**fit_doc, "k": 7}))
    req = bundle_make.BuildRequest(fit=fit_path, profile="llama-3.1-8b-h100")
    assert bundle_make.from_files(req)["policy"]["k"] == 7
    doc = bundle_make.from_files(
        bundle_make.BuildRequest(
            fit=fit_path, profile="llama-3.1-8b-h100", k=3, learn_eta=True, t_window=5
        )
    )
    assert (doc["policy"]["k"], doc["policy"]["learn_eta"], doc["policy"]["t_window"]) == (
        3,
        True,
        5,
    )
    out = tmp_path / "b.json"
    base = ["bundle", "build", "--fit", str(fit_path), "--profile", "llama-3.1-8b-h100"]
    res = CliRunner().invoke(app, [*base, "-o", str(out)])
    assert res.exit_code == 0, res.output
    policy = json.loads(out.read_text())["policy"]
    assert (policy["k"], policy["t_window"], policy["learn_eta"]) == (7, 100, False)
