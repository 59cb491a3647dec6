"""The names ``--policy`` lists (replay's, validate's; validate's ``--router`` too): each
value a name or a comma list, and an empty name refused in one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.policy_flags import listed
from tests.cli.refusal import refused
from tests.conftest import make_trace
from ttlctl.errors import ConfigError


def test_names_are_split_and_trimmed() -> None:
    assert listed(["vllm", " continuum , static-ttl"]) == ["vllm", "continuum", "static-ttl"]
    assert listed([]) == []


@pytest.mark.parametrize("value", ["", ",", " ", "vllm,", "vllm,,continuum"])
def test_an_empty_name_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(ConfigError, match=rf"^--router {value!r}: an empty name; "):
        listed(["vllm", value], "--router")


@pytest.mark.parametrize("value", ["", ","])
def test_replay_and_validate_refuse_an_empty_policy(tmp_path: Path, value: str) -> None:
    """Regression: ``replay --policy ''`` (or ``','``) replayed nothing and exited 0 with an
    empty table; validate's ``--policy ''`` ran no policy the same way."""
    trace = make_trace(tmp_path / "trace.parquet", programs=3)
    out = tmp_path / "out.json"
    starts = f"error: --policy {value!r}: an empty name"
    replay = ["replay", str(trace), "--no-timing", "--policy", value, "--json", str(out)]
    refused(replay, out, starts)
    url = ["--url", "vllm=http://127.0.0.1:9"]
    refused(["validate", str(trace), *url, "--policy", value, "--json", str(out)], out, starts)
