"""`ttlctl replay --replicas N` behind a router that hashes the workers' URLs, without
`--worker-urls`: one warning line says the placement hashes the default URLs and that
`--worker-urls` gives the real fleet's; none with the URLs, with one replica, or behind a
router that does not hash them."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.fleet.asked import default_urls_note
from replay.fleet.routers import ROUTERS, RouterSettings
from replay.synth import synth
from ttlctl.cli import app

#: what the line says, whichever router and fleet size
SAID = "the placement hashes the default worker URLs"
#: Program scheduling binding programs by something else than the URLs' hash ring
ROUND_ROBIN_BINDING = '{"binding_strategy": "program_round_robin"}'


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("urls") / "swe.parquet"
    synth("swe-bench", 6, 2).write_parquet(path)
    return path


def _replay(trace: Path, *args: str) -> list[str]:
    """The warning lines of a replay of ``trace`` on a fleet (``args``), which must run."""
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "vllm", "--concurrency", "4",
            "--kv-tokens", "200000", "--no-timing", *args,
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return [line for line in res.stderr.splitlines() if line.startswith("warning:")]


@pytest.mark.parametrize("router", ["consistent-hash", "sticky-least-loaded", "program-scheduling"])
def test_a_hashing_router_without_urls_says_so_once(trace: Path, router: str) -> None:
    warned = _replay(trace, "--replicas", "2", "--router", router)
    assert [w for w in warned if SAID in w] == [
        f"warning: --router {router}: {SAID} http://replica-0, http://replica-1; "
        "--worker-urls (the replicas' URLs as vllm-router is given them) places programs as "
        "the real fleet's router does"
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["--replicas", "2", "--router", "consistent-hash",
         "--worker-urls", "http://10.0.0.1:8000", "--worker-urls", "http://10.0.0.2:8000"],
        ["--replicas", "1", "--router", "consistent-hash"],
        ["--replicas", "2", "--router", "kv-aware"],
        ["--replicas", "2", "--router", "cache-aware"],
        ["--replicas", "2", "--router", "program-scheduling",
         "--program-scheduling-config-json", ROUND_ROBIN_BINDING],
    ],
    ids=["urls-given", "one-replica", "kv-aware", "cache-aware", "bound-round-robin"],
)  # fmt: skip
def test_no_line_where_the_urls_do_not_decide(trace: Path, args: list[str]) -> None:
    assert not any(SAID in w for w in _replay(trace, *args))


def test_which_routers_hash_the_urls() -> None:
    """The routers whose model reads ``worker_urls``: consistent-hash's ring,
    sticky-least-loaded's rendezvous hash, Program scheduling's consistent_hash binding
    (its default); the rest place programs without them."""
    hashing = {name for name in ROUTERS if RouterSettings(name).hashes_urls()}
    assert hashing == {"consistent-hash", "sticky-least-loaded", "program-scheduling"}
    bound = RouterSettings("program-scheduling", program_scheduling_config_json=ROUND_ROBIN_BINDING)
    assert not bound.hashes_urls()


def test_a_larger_fleet_and_several_routers_in_one_line() -> None:
    """A fleet of more than two: the first and last default URL; several routers (tune's
    search): the hashing ones named in one line."""
    routers = [RouterSettings(n) for n in ("cache-aware", "consistent-hash", "sticky-least-loaded")]
    note = default_urls_note(routers, 8, None)
    assert note is not None and note.startswith(
        f"--router consistent-hash, sticky-least-loaded: {SAID} http://replica-0 … "
        "http://replica-7;"
    )
