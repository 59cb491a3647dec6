"""``--client-tags full|tool|none|session``: what the replayed clients tag each call with.

The rule's table (:mod:`replay.client_tags`), a fast replay in which clients that tag
nothing change continuum's pins and mean JCT while ``full`` is the default's replay byte
for byte, the evaluation-only oracle unmoved by the tags (it reads the trace's pauses),
and a bad value refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.client_tags import CLIENT_TAGS, check, tagged, vllm_xargs
from replay.sim import ReplayConfig
from tests.conftest import make_trace
from ttlctl.cli import app
from ttlctl.errors import ConfigError


@pytest.mark.parametrize(
    ("tool", "is_last", "mode", "expected"),
    [
        ("grep", False, "full", ("grep", False)),
        (None, True, "full", (None, True)),
        ("grep", True, "full", ("grep", True)),
        ("grep", False, "tool", ("grep", False)),
        (None, True, "tool", (None, False)),  # the last call looks like one more call
        ("grep", True, "tool", ("grep", False)),
        ("grep", False, "none", (None, False)),
        (None, True, "none", (None, False)),
        ("grep", True, "none", (None, False)),
    ],
)
def test_the_tags_each_client_sends(
    tool: str | None, is_last: bool, mode: str, expected: tuple[str | None, bool]
) -> None:
    assert tagged(tool, is_last, mode) == expected


def test_the_xargs_each_client_sends() -> None:
    assert vllm_xargs("p", "grep", False, "full") == {
        "program_id": "p",
        "is_last": 0,
        "tool": "grep",
    }
    assert vllm_xargs("p", None, True, "full") == {"program_id": "p", "is_last": 1}
    assert vllm_xargs("p", "grep", True, "full") == {"program_id": "p", "is_last": 1}
    assert vllm_xargs("p", "grep", False, "tool") == {"program_id": "p", "tool": "grep"}
    assert vllm_xargs("p", None, True, "tool") == {"program_id": "p"}
    assert vllm_xargs("p", "grep", True, "tool") == {"program_id": "p", "tool": "grep"}
    for tool, last in (("grep", False), (None, True)):
        assert vllm_xargs("p", tool, last, "none") == {"program_id": "p"}
        # the header's session: what the engine's plugin reads, the program alone
        assert vllm_xargs("p", tool, last, "session") == {"program_id": "p"}
        assert tagged(tool, last, "session") == tagged(tool, last, "none") == (None, False)


def test_an_unknown_mode_is_refused() -> None:
    assert CLIENT_TAGS == ("full", "tool", "none", "session")
    assert ReplayConfig().client_tags == "full"
    with pytest.raises(
        ConfigError, match=r"--client-tags must be one of full, tool, none, session"
    ):
        check("partial")
    with pytest.raises(ConfigError):
        tagged("grep", False, "Full")
    with pytest.raises(ConfigError):
        ReplayConfig(client_tags="partial")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_trace(tmp_path_factory.mktemp("tags") / "t.parquet", programs=24)


def _replay(trace: Path, out: Path, *extra: str, kv_tokens: int = 30_000) -> dict[str, object]:
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--policy", "continuum,oracle", "--concurrency", "12",
            "--kv-tokens", str(kv_tokens), "--no-timing", "--json", str(out), *extra,
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    doc: dict[str, object] = json.loads(out.read_text())
    return doc


def test_clients_that_tag_nothing_change_continuums_replay(trace: Path, tmp_path: Path) -> None:
    default = _replay(trace, tmp_path / "default.json")
    full = _replay(trace, tmp_path / "full.json", "--client-tags", "full")
    none = _replay(trace, tmp_path / "none.json", "--client-tags", "none")
    assert (tmp_path / "full.json").read_bytes() == (tmp_path / "default.json").read_bytes()
    assert default["config"]["client_tags"] == "full"  # type: ignore[index]
    assert none["config"]["client_tags"] == "none"  # type: ignore[index]
    by_full = {r["policy"]: r for r in full["results"]}  # type: ignore[attr-defined]
    by_none = {r["policy"]: r for r in none["results"]}  # type: ignore[attr-defined]
    # continuum learns nothing of the tools and never hears a program end (it may pin a
    # last call): other pins, and the programs run slower
    assert by_none["continuum"]["pins"] != by_full["continuum"]["pins"]
    assert by_none["continuum"]["jct_mean_s"] > by_full["continuum"]["jct_mean_s"]
    # the oracle reads the trace's pauses, not the tags: the same replay
    assert by_none["oracle"] == by_full["oracle"]


def test_a_fleets_clients_tag_as_told(trace: Path, tmp_path: Path) -> None:
    """The fleet's replicas take the calls as the clients tag them too."""
    fleet = ("--replicas", "2", "--router", "round-robin")
    full = _replay(trace, tmp_path / "full.json", *fleet, kv_tokens=20_000)
    none = _replay(trace, tmp_path / "none.json", *fleet, "--client-tags", "none", kv_tokens=20_000)
    by_full = {r["policy"]: r for r in full["results"]}  # type: ignore[attr-defined]
    by_none = {r["policy"]: r for r in none["results"]}  # type: ignore[attr-defined]
    assert by_none["continuum"]["pins"] != by_full["continuum"]["pins"]
    assert by_none["oracle"] == by_full["oracle"]


def test_a_bad_value_is_one_line_and_exit_2(trace: Path) -> None:
    res = CliRunner().invoke(
        app, ["replay", str(trace), "--policy", "vllm", "--client-tags", "partial"]
    )
    assert res.exit_code == 2
    assert res.stderr.strip() == (
        "error: --client-tags must be one of full, tool, none, session, got 'partial'"
    ), res.stderr
