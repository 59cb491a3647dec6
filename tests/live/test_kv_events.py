"""vllm-router's kv_aware reading a real replica's KV events, as validate wires them
(replay.validation.servers.policy_fleet, ttlctl.server.kv_events), and what it credits.

One replica of the tiny model running the TTL scheduler behind the real vllm-router
(``kv_aware``, its debug log on): a token prompt sent twice in a bare body is credited
with its cached blocks the second time, which the router can know only from the
replica's events (its first send stored them); a prompt in a body with ``vllm_xargs`` or
``return_token_ids`` (alone, or both, as ttlctl's live client sends them) is credited
nothing, as :mod:`replay.fleet.routers.kv_credit` says, so validate simulates kv_aware
without credit; the body of a client tagging by its ``X-Session-ID`` header alone
(``--client-tags session``) is credited as the bare one.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import time
from pathlib import Path
from typing import Any

from replay.client_tags import FULL, SESSION, vllm_xargs
from replay.fleet.routers.kv_credit import completion_credited
from replay.live.driver import live_body, request_body
from replay.validation.servers import Sources, policy_fleet
from tests.bundles import write_bundle
from tests.live.servers import FLAGS, MODEL_NAME, server_env
from tests.router_bin import router_or_skip
from tests.vllm_server import STARTUP_S
from ttlctl.server import client, router
from ttlctl.server.command import base_command

#: the router's debug line for each placement
_DECISION = re.compile(r"KV prefix decision .*?input_tokens=(\d+) .*?credited_prefix_tokens=(\d+)")


def _send(url: str, body: dict[str, Any]) -> None:
    text = client.text(url, "/v1/completions", body, method="POST", timeout_s=120.0)
    assert "error" not in text[:200], text[:500]


def test_kv_aware_reads_the_replicas_events_and_credits_only_bodies_it_models(
    tiny_model: Path, tmp_path: Path
) -> None:
    router_or_skip()
    model = shutil.copytree(tiny_model, tmp_path / "model" / tiny_model.name)
    bundle = write_bundle(tmp_path / "bundle.json", cold_start_ttl_s=30.0)
    made = policy_fleet(
        Sources(base_cmd=base_command(str(model), FLAGS), startup_timeout_s=STARTUP_S,
                env=server_env()),
        "continuum",
        bundle,
        tmp_path,
        "-kv_aware",
        replicas=1,
        router_policy="kv_aware",
        router_extra=("--log-level", "debug"),
    )  # fmt: skip
    rng = random.Random(7)
    xargs = vllm_xargs("p1", "bash", False, FULL)
    plain = {"model": MODEL_NAME, "max_tokens": 4, "ignore_eos": True}
    live = request_body(MODEL_NAME, [], 4, xargs) | {"stream": False}
    live.pop("stream_options")
    # a client tagging by its X-Session-ID header alone (--client-tags session)
    session = live_body(MODEL_NAME, [], 4, ("p1", "bash", False), SESSION) | {"stream": False}
    session.pop("stream_options")
    bodies = [  # each with a prompt of its own: 9 full blocks of 32, and 12 tokens
        plain,
        plain | {"vllm_xargs": xargs},
        plain | {"return_token_ids": True},
        live,  # what the live client sends (not streamed here)
        session,
    ]
    assert [completion_credited(b) for b in bodies] == [True, False, False, False, True]
    with made.fleet as fleet:
        for body in bodies:
            prompt = [rng.randrange(3, 1000) for _ in range(300)]
            for _ in range(2):
                _send(fleet.url, body | {"prompt": prompt})
                time.sleep(1.0)  # the step's events reach the router meanwhile
        log = router.plain(fleet.router.log_path.read_text(errors="replace"))
    decisions = [(int(n), int(c)) for n, c in _DECISION.findall(log)]
    # the bare body's second send credited 9 blocks; neither field, alone or together, any;
    # the header-tagged body as the bare one
    expected = [(300, 0), (300, 288)] + [(300, 0)] * 6 + [(300, 0), (300, 288)]
    assert decisions[:10] == expected, json.dumps(decisions)
