"""What the deploy kit (deploy/) states, read from its files for the tests that check it:
the serving image's pip line (which tests/install runs as the serving install), the
entrypoint's vLLM command, the manifests' containers, and the series a dashboard or an
alert queries."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
ENTRYPOINT = DEPLOY / "ttlctl-vllm.sh"
MANIFESTS = sorted((DEPLOY / "k8s").glob("*.yaml"))
ALERTS = DEPLOY / "monitoring" / "ttlctl-alerts.yaml"
DASHBOARD = DEPLOY / "monitoring" / "ttlctl-dashboard.json"
#: a series name in PromQL (vLLM's and ttlctl's use a colon)
SERIES = re.compile(r"\b((?:ttlctl|vllm):[a-z_]+)")


def instructions(dockerfile: Path = DOCKERFILE) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, (KEYWORD, rest), continuation lines joined."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


def serving_install(dockerfile: Path = DOCKERFILE) -> list[str]:
    """The arguments of pip in the final image's ``RUN … pip install … ttlctl-*.whl``: the
    serving install (``install``, its options, the wheel last)."""
    found = []
    for keyword, rest in instructions(dockerfile):
        if keyword != "RUN":
            continue
        for command in rest.split("&&"):
            words = shlex.split(command)
            if "pip" in words and words[words.index("pip") + 1 : words.index("pip") + 2] == [
                "install"
            ]:
                found.append(words[words.index("pip") + 1 :])
    (only,) = found  # one install line in the Dockerfile
    return only


def wheel_glob(args: list[str]) -> str:
    """The install line's wheel (a glob of the built ttlctl wheel)."""
    (wheel,) = [a for a in args if a.endswith(".whl")]
    return wheel


def entrypoint_tail() -> list[str]:
    """The vLLM options the entrypoint adds after the container's arguments
    (``exec vllm serve "$@" <these>``)."""
    for line in ENTRYPOINT.read_text().splitlines():
        words = shlex.split(line, comments=True)
        if words[:3] == ["exec", "vllm", "serve"]:
            assert words[3] == "$@", line
            return words[4:]
    raise AssertionError(f"{ENTRYPOINT}: no `exec vllm serve` line")


def documents() -> list[dict[str, Any]]:
    """Every Kubernetes document of deploy/k8s."""
    docs: list[dict[str, Any]] = []
    for path in MANIFESTS:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def containers(app: str) -> list[dict[str, Any]]:
    """The containers of the Deployment named ``app``."""
    (deployment,) = [
        d for d in documents() if d["kind"] == "Deployment" and d["metadata"]["name"] == app
    ]
    return list(deployment["spec"]["template"]["spec"]["containers"])


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def dashboard_expressions() -> list[str]:
    """The PromQL of every panel, and of the dashboard's variables."""
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    variables = dash.get("templating", {}).get("list", [])
    return exprs + [v["query"] for v in variables if v.get("type") == "query"]


def queried_series(expressions: list[str]) -> set[str]:
    return {m for e in expressions for m in SERIES.findall(e)}
