"""A fleet ``validate`` starts names each replica in its engine log (``TTLCTL_REPLICA``: r1,
r2 …, as ``ttlctl serve --replica`` sets it), so the logs of one fleet, read together, say
which replica served each call (``replica`` column), not only which file held it."""

from __future__ import annotations

from pathlib import Path

from replay.validation.servers import Sources, policy_fleet
from tests.router_bin import router_or_skip
from ttlctl.engine.facts import ENV_REPLICA


def test_each_replica_of_a_validate_fleet_names_itself_in_its_engine_log(
    tmp_path: Path,
) -> None:
    router_or_skip()
    bundle = tmp_path / "bundle.json"
    made = policy_fleet(
        Sources(base_cmd=["python", "-m", "vllm.entrypoints.openai.api_server"], env={}),
        "continuum",
        bundle,
        tmp_path,
        "-cache_aware",
        replicas=2,
        router_policy="cache_aware",
    )
    names = [r.env[ENV_REPLICA] for r in made.fleet.replicas]
    assert names == ["r1", "r2"]
    logs = [Path(r.env["TTLCTL_LOG"]).name for r in made.fleet.replicas]
    assert logs == [f"continuum-cache_aware-r{i}-engine.jsonl" for i in (1, 2)]
    assert ENV_REPLICA not in made.fleet.router.env  # the router is no engine
