"""The deploy kit (deploy/): the manifests parse and hang together, every flag and
environment variable they name exists (vLLM's flags in the installed vLLM's own argument
parser, the router's in `vllm-router --help`, ttlctl's variables in the plugin's code),
every series a dashboard panel or an alert queries is one the plugin exports (read from a
real Prometheus registry), and the image's entrypoint does what it says when run."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from tests import deploy_kit as kit
from tests.router_bin import router_help, router_or_skip
from ttlctl.engine import compat
from ttlctl.server.command import SCHEDULER_CLS
from ttlctl.server.process import free_port

ENGINE = kit.REPO / "ttlctl" / "engine"
VLLM = importlib.util.find_spec("vllm") is not None
#: the installed packages that read the other environment variables the kit sets
READERS = ("prometheus_client", "huggingface_hub", "vllm")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


@cache
def plugin_variables() -> frozenset[str]:
    """Every ``TTLCTL_*`` name the plugin's code holds as a constant (what it reads)."""
    names = set()
    for path in ENGINE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"TTLCTL_[A-Z_]+", value):
                names.add(value)
    return frozenset(names)


@cache
def read_by_installed(name: str) -> bool:
    """Whether an installed package that runs in the image reads ``name``."""
    if VLLM:
        import vllm.envs

        if name in vllm.envs.environment_variables:
            return True
    quoted = (f'"{name}"', f"'{name}'")
    for package in READERS:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.origin is None:
            continue
        for path in Path(spec.origin).parent.rglob("*.py"):
            text = path.read_text(errors="replace")
            if any(q in text for q in quoted):
                return True
    return False


def test_the_manifests_parse_and_hang_together() -> None:
    docs = kit.documents()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert {
        ("Deployment", "vllm-ttl"),
        ("Service", "vllm-ttl"),
        ("Deployment", "vllm-router"),
    } <= kinds
    assert ("Service", "vllm-router") in kinds and ("PodMonitor", "vllm-ttl") in kinds
    for d in docs:
        assert d["apiVersion"] and d["metadata"]["name"], d
        if d["kind"] == "Deployment":
            spec = d["spec"]
            labels = spec["template"]["metadata"]["labels"]
            assert spec["selector"]["matchLabels"].items() <= labels.items()
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    (vllm,) = kit.containers("vllm-ttl")
    env = env_of(vllm)
    mounts = {m["name"]: m for m in vllm["volumeMounts"]}
    pod = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "vllm-ttl")
    volumes = {v["name"]: v for v in pod["spec"]["template"]["spec"]["volumes"]}
    # the bundle: a ConfigMap mounted as a folder (a subPath mount is never updated)
    bundle = Path(env["TTLCTL_BUNDLE"]["value"])
    (mount,) = [m for m in mounts.values() if Path(m["mountPath"]) == bundle.parent]
    assert "subPath" not in mount and mount.get("readOnly") is True
    assert "configMap" in volumes[mount["name"]]
    # the Prometheus folder on a writable emptyDir; the engine log too
    for variable in ("PROMETHEUS_MULTIPROC_DIR", "TTLCTL_LOG"):
        where = Path(env[variable]["value"])
        (m,) = [m for m in mounts.values() if Path(m["mountPath"]) in (where, *where.parents)]
        assert "emptyDir" in volumes[m["name"]] and not m.get("readOnly")
    # the metrics port is the API's; the headless Service and the PodMonitor reach it
    (port,) = vllm["ports"]
    assert services["vllm-ttl"]["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert services["vllm-ttl"]["spec"]["ports"][0]["targetPort"] == port["name"]
    monitor = next(d for d in docs if d["kind"] == "PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == port["name"]
    assert monitor["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"
    # the router finds the replicas by their label, on their port
    (router,) = kit.containers("vllm-router")
    args = router["args"]
    key, _, value = args[args.index("--selector") + 1].partition("=")
    assert pod["spec"]["template"]["metadata"]["labels"][key] == value
    assert int(args[args.index("--service-discovery-port") + 1]) == port["containerPort"]
    # $(VAR) in the router's args: a variable its container defines
    for used in re.findall(r"\$\((\w+)\)", " ".join(args)):
        assert used in env_of(router)


def test_every_environment_variable_exists() -> None:
    """ttlctl's against the plugin's code; the others against what reads them."""
    named: dict[str, str] = {}
    for app in ("vllm-ttl", "vllm-router"):
        for c in kit.containers(app):
            named |= {n: f"deploy/k8s ({app})" for n in env_of(c)}
    for keyword, rest in kit.instructions():
        if keyword == "ENV":
            named |= {w.split("=", 1)[0]: "deploy/Dockerfile" for w in rest.split() if "=" in w}
    script = kit.ENTRYPOINT.read_text()
    named |= {n: "deploy/ttlctl-vllm.sh" for n in re.findall(r"\$\{(\w+)", script)}
    assert {"TTLCTL_BUNDLE", "TTLCTL_LOG", "PROMETHEUS_MULTIPROC_DIR"} <= set(named)
    assert plugin_variables() >= {"TTLCTL_BUNDLE", "TTLCTL_BUNDLE_CHECK_S", "TTLCTL_LOG"}
    downward = {n for c in kit.containers("vllm-router") for n, e in env_of(c).items()
                if "fieldRef" in e.get("valueFrom", {})}  # fmt: skip
    for name, where in named.items():
        if name.startswith("TTLCTL_"):
            assert name in plugin_variables(), f"{where}: {name} is not read by the plugin"
        elif name not in downward and VLLM:  # what the image holds: vLLM and its packages
            assert read_by_installed(name), f"{where}: nothing installed reads {name}"


@pytest.mark.skipif(not VLLM, reason="vLLM is not installed (the engine extra)")
def test_the_vllm_command_parses_with_the_installed_vllm() -> None:
    """The container's arguments and the entrypoint's, as `vllm serve` parses them."""
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = ServeSubcommand().subparser_init(FlexibleArgumentParser(prog="vllm").add_subparsers())
    (vllm,) = kit.containers("vllm-ttl")
    args = [*vllm["args"], *kit.entrypoint_tail()]
    ns = parser.parse_args(args)  # an unknown flag or a bad value: SystemExit
    assert ns.model_tag == vllm["args"][0]
    assert ns.scheduler_cls == SCHEDULER_CLS
    assert ns.enable_prefix_caching is True and ns.enable_prompt_tokens_details is True
    assert ns.port == vllm["ports"][0]["containerPort"]


def test_the_image_is_the_newest_supported_vllm() -> None:
    (arg,) = [r for k, r in kit.instructions() if k == "ARG" and r.startswith("VLLM_VERSION=")]
    version = arg.split("=", 1)[1]
    assert compat.release(version) == compat.SUPPORTED[-1], version  # the newest supported
    froms = [r for k, r in kit.instructions() if k == "FROM"]
    assert froms[-1] == "vllm/vllm-openai:v${VLLM_VERSION}"  # the official OpenAI image
    # the wheel stage copies what the wheel is made of (pyproject's packages)
    copied = {r.split()[0] for k, r in kit.instructions() if k == "COPY" and "--from" not in r}
    assert {"ttlctl", "fitting", "replay", "profiles", "pyproject.toml"} <= copied


def test_the_install_line_is_the_light_install() -> None:
    """The image installs the bare wheel, no extra, no dependency, no index: the line
    tests/install runs to build the serving venv it checks."""
    args = kit.serving_install()
    assert args[0] == "install" and "--no-deps" in args and "--no-index" in args
    wheel = kit.wheel_glob(args)
    assert Path(wheel).name == "ttlctl-*.whl" and "[" not in wheel
    assert [a for a in args[1:] if not a.startswith("-")] == [wheel]  # nothing else installed
    copied = [r for k, r in kit.instructions() if k == "COPY" and r.startswith("--from=wheel")]
    assert copied == [f"--from=wheel /wheels {Path(wheel).parent}"]


def test_the_router_flags_exist() -> None:
    # found beside this Python too: `make test` runs it unactivated
    help_text = router_help()
    (router,) = kit.containers("vllm-router")
    args = router["args"]
    for flag in (a for a in args if a.startswith("--")):
        assert re.search(rf"\[{re.escape(flag)}[\] ]", help_text), flag
    policies = re.search(r"--policy \{([a-z_,]+)\}", help_text)
    assert policies is not None and args[args.index("--policy") + 1] in policies[1].split(",")


@cache
def exported_series() -> frozenset[str]:
    """The names a real registry shows for the plugin's series (a fresh process: the pin
    counters and the bundle series, made as the scheduler makes them)."""
    code = (
        "from prometheus_client import REGISTRY\n"
        "from ttlctl.engine.bundle_series import BundleSeries\n"
        "from ttlctl.engine.counters import Counters\n"
        "from ttlctl.engine.watch import BundleWatcher\n"
        "Counters()\n"
        "BundleSeries().observe(BundleWatcher(None, print, print))\n"
        "print(sorted({s.name for m in REGISTRY.collect() for s in m.samples}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(kit.REPO)}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert res.returncode == 0, res.stderr
    names = json.loads(res.stdout.splitlines()[-1].replace("'", '"'))
    return frozenset(n for n in names if n.startswith("ttlctl:") and not n.endswith("_created"))


@pytest.mark.skipif(importlib.util.find_spec("prometheus_client") is None, reason="no vLLM")
def test_every_queried_series_is_exported() -> None:
    exported = exported_series()
    alerts = kit.queried_series(kit.alert_expressions())
    panels = kit.queried_series(kit.dashboard_expressions())
    for where, queried in (("alert rules", alerts), ("dashboard", panels)):
        missing = {s for s in queried if s.startswith("ttlctl:")} - exported
        assert not missing, f"{where} query series the plugin does not export: {missing}"
    # the dashboard shows every series the plugin exports
    assert exported <= panels, exported - panels
    # the alerts watch the fallback to stock, refusals, the valve and pins that do not pay
    assert {"ttlctl:bundle_active", "ttlctl:bundle_refused_total"} <= alerts
    assert {"ttlctl:pins_released_total", "ttlctl:pins_hit_total"} <= alerts


@pytest.mark.skipif(not VLLM, reason="vLLM is not installed (the engine extra)")
def test_the_vllm_series_are_vllms() -> None:
    """vllm:* names beside ours are ones the installed vLLM defines."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    source = "".join(
        p.read_text(errors="replace")
        for p in (Path(spec.origin).parent / "v1" / "metrics").glob("*.py")
    )
    queried = kit.queried_series(kit.alert_expressions() + kit.dashboard_expressions())
    for name in (s for s in queried if s.startswith("vllm:")):
        assert f'"{name.removesuffix("_total")}"' in source, name


def test_the_entrypoint_runs_vllm_with_the_scheduler(tmp_path: Path) -> None:
    """The script, run for real with a stand-in `vllm` that prints what it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"
    fake.write_text(
        "#!/bin/sh\n"
        'printf "%s\\n" "$@" > "$OUT/argv"\n'
        'echo "$TTLCTL_BUNDLE" > "$OUT/bundle"\n'
        'ls "$PROMETHEUS_MULTIPROC_DIR" > "$OUT/listed"\n'
    )
    fake.chmod(0o755)
    prom = tmp_path / "metrics"
    prom.mkdir()
    (prom / "counter_12.db").write_bytes(b"stale")  # a restarted container's leftovers
    (prom / "keep.txt").write_text("not ours")
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "OUT": str(tmp_path),
        "PROMETHEUS_MULTIPROC_DIR": str(prom),
    }
    model_args = ["my-model", "--port", "8000"]
    res = subprocess.run(
        ["/bin/sh", str(kit.ENTRYPOINT), *model_args], env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["serve", *model_args, *kit.entrypoint_tail()]
    assert kit.entrypoint_tail() == ["--scheduler-cls", SCHEDULER_CLS]
    assert (tmp_path / "bundle").read_text().strip() == "/etc/ttlctl/bundle.json"
    assert (tmp_path / "listed").read_text().split() == ["keep.txt"]
    # the script's defaults are the image's
    dockerfile_env = dict(
        w.split("=", 1) for k, r in kit.instructions() if k == "ENV" for w in r.split()
    )
    script = kit.ENTRYPOINT.read_text()
    for name in ("PROMETHEUS_MULTIPROC_DIR", "TTLCTL_BUNDLE"):
        assert f"${{{name}:={dockerfile_env[name]}}}" in script


def test_the_router_answers_its_readiness_probe(tmp_path: Path) -> None:
    """The probe's path on a real router (no replicas, no service discovery: a cluster's)."""
    command = router_or_skip()
    import time
    import urllib.request

    (router,) = kit.containers("vllm-router")
    path = router["readinessProbe"]["httpGet"]["path"]
    port, metrics = free_port(), free_port()
    log = (tmp_path / "router.log").open("w")
    proc = subprocess.Popen(
        # metrics on a port of their own: a router elsewhere on the host may hold 29000
        [command, "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics)],
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, log.name
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
