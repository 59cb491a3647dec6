"""The live tests' servers: their flags and environment, and how to look at their processes."""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from replay.validation import server_command
from replay.validation import server_environment as validate_environment
from tests.vllm_server import STARTUP_S, vllm_cache_root
from ttlctl.server.command import base_command
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port, live_processes

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny"
FLAGS = [
    "--served-model-name", MODEL_NAME,
    "--dtype", "bfloat16",
    "--enforce-eager",
    "--block-size", "32",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--kv-cache-memory-bytes", "8M",
    "--max-model-len", "2048",
]  # fmt: skip


def server_env() -> dict[str, str]:
    """Loopback only, offline, vLLM's cache shared by the run's servers; no ttlctl
    variables inherited."""
    env = dict(os.environ)
    for key in (
        "TTLCTL_BUNDLE",
        "TTLCTL_LOG",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "PROMETHEUS_MULTIPROC_DIR",
    ):
        env.pop(key, None)
    env.update(
        VLLM_CACHE_ROOT=str(vllm_cache_root()),
        VLLM_HOST_IP="127.0.0.1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        PYTHONPATH=str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    return env


def stock_server(model: Path, work: Path) -> OwnedServer:
    """A stock vLLM on ``model`` with :data:`FLAGS`, to start: its command and environment
    as ``ttlctl validate`` makes them (:mod:`replay.validation.servers`), its log
    ``work/stock.log``, on a free port."""
    port = free_port()
    return OwnedServer(
        server_command(base_command(str(model), FLAGS), "vllm", port),
        validate_environment(server_env(), "vllm", None, work),
        work / "stock.log",
        f"http://127.0.0.1:{port}",
        startup_timeout_s=STARTUP_S,
    )


def children(pid: int) -> list[int]:
    """Live child processes of ``pid`` (Linux /proc)."""
    return [child for child, ppid, _ in live_processes() if ppid == pid]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class Served:
    """A server started by ``ttlctl serve``: its process, URL, bundle, engine log, log, the
    marker in its environment (tests/live/leftovers.py), its port and its model folder."""

    proc: subprocess.Popen[bytes]
    url: str
    bundle: Path
    engine_log: Path
    log: Path
    mark: str
    port: int
    model: Path


@dataclass
class Servers:
    stock: OwnedServer
    ttl: Served


def serving(model: Path) -> list[int]:
    """Live processes whose command line names the model (a replica's API server)."""
    found = []
    for pid, _, _ in live_processes():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(model) in cmdline:
            found.append(pid)
    return found


#: a stand-in for the vLLM server validate starts (tests/live/stub_engine.py)
STUB = Path(__file__).with_name("stub_engine.py")


def running_with(marker: str) -> list[int]:
    """Live processes (not zombies) started with ``marker`` in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            environ = (entry / "environ").read_bytes() if entry.name.isdigit() else b""
            stat = (entry / "stat").read_text() if environ else ""
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0") and stat[stat.rfind(")") + 2] not in "ZX":
            found.append(int(entry.name))
    return found
