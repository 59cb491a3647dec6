"""Fixtures of the live tests: a bundle, and two real vLLM servers.

``test_servers.py`` uses two servers, started together (a start takes 20–35 s on two
cores): the session's stock vLLM (``stock_server`` of tests/conftest.py, started the way
``ttlctl validate`` starts one, :mod:`replay.validation.servers`, an
:class:`ttlctl.server.owned.OwnedServer`; the profile tests measure it too), and a
TTLScheduler server for the module started through ``ttlctl serve`` (``python -m
ttlctl.cli serve``), which the module's last test stops with SIGTERM and then looks
for anything left of it as tests/live/test_strays.py does (tests/live/leftovers.py: it
carries a marker in its environment, as the processes under it do, and serves a copy
of the tiny model in a folder of its own; its child gets the signals' defaults, as a
terminal's command does). Both have
8 MiB of KV (8,192 tokens of the tiny model: ample for the traces here),
``max_model_len`` 2,048 and blocks of 32. Without vLLM installed the server tests
are not collected; ``test_units.py`` needs none.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bundles import write_bundle
from tests.child_signals import terminal_defaults
from tests.live.leftovers import MARK
from tests.live.servers import FLAGS, Served, Servers, children, healthy, server_env
from tests.vllm_server import STARTUP_S
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port

if importlib.util.find_spec("vllm") is None:  # an install without the engine extra
    collect_ignore = ["test_servers.py", "test_strays.py", "test_fleet.py", "test_kv_events.py"]


@pytest.fixture(scope="module")
def servers(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Servers]:
    work = tmp_path_factory.mktemp("live-servers")
    model = shutil.copytree(tiny_model, work / "model" / tiny_model.name)
    mark = uuid.uuid4().hex
    env = {**server_env(), MARK: mark}
    bundle = write_bundle(work / "bundle.json", cold_start_ttl_s=30.0)
    port = free_port()
    serve_log = work / "serve.log"
    engine_log = work / "engine.jsonl"
    cmd = [
        sys.executable, "-m", "ttlctl.cli", "serve", str(model),
        "--bundle", str(bundle),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dev-mode",
        "--log", str(engine_log),
        "--", *FLAGS,
    ]  # fmt: skip
    with open(serve_log, "wb") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=work,
            start_new_session=True,
            preexec_fn=terminal_defaults,
        )
    url = f"http://127.0.0.1:{port}"
    served = Served(proc, url, bundle, engine_log, serve_log, mark, port, model)
    try:
        stock: OwnedServer = request.getfixturevalue("stock_server")  # meanwhile: the TTL one
        deadline = time.monotonic() + STARTUP_S
        while not healthy(served.url):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = serve_log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"ttlctl serve did not become healthy:\n{tail}")
            time.sleep(0.5)
        yield Servers(stock, served)
    finally:
        if proc.poll() is None:  # the last test normally stopped it
            groups = children(proc.pid)  # the vLLM server leads its own process group
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                for pgid in [proc.pid, *groups]:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pgid, signal.SIGKILL)
                proc.wait(timeout=10)
