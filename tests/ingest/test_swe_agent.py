"""The swe-agent reader: SWE-agent ``.traj`` trajectories.

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output. Token counts are estimates (the format has no
per-call counts): the tests check that they add up to the run's totals where the
file has them, and the plain characters / 4 rule where it has not.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import (
    assert_cli_error_line,
    assert_strict_errors,
    ingest_skipping_bad,
)
from ttlctl.cli import app
from ttlctl.ingest.formats.mini_swe_agent import READER as MINI_READER
from ttlctl.ingest.formats.swe_agent import READER
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rawfile import head_bytes
from ttlctl.trace import io as trace_io

FORMAT = "swe-agent"
TESTREPO = (
    "tests__test_data__trajectories__gpt4__swe-agent-test-repo__default_from_url__"
    "t-0.00__p-0.95__c-3.00__install-1__6e44b9__sweagenttestrepo-1c2844.traj"
)
HISTORY_ONLY = "trajectories__demonstrations__function_calling_simple.traj"
EDITED = "trajectories__demonstrations__ctf__crypto__BabyEncryption.traj"
SAMPLE_FILES = (TESTREPO, HISTORY_ONLY, EDITED)


# ---------------------------------------------------------------- independent oracle


def _program(path: Path) -> str:
    return path.name.removesuffix(".traj")


def _first_word(action: str) -> str:
    words = action.split()
    return words[0] if words else "unknown"


def _chars(message: dict[str, Any]) -> int:
    size = len(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        size += len(call["function"]["name"]) + len(call["function"]["arguments"])
    return size


def _expected(paths: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "programs": 0,
        "calls": {},
        "tools": Counter(),
        "tool_s": {},
        "sent": {},
        "received": {},
    }
    for path in paths:
        doc = json.loads(path.read_text())
        program = _program(path)
        out["programs"] += 1
        steps = doc.get("trajectory") or []
        if steps:
            actions = [s["action"] for s in steps]
            out["tool_s"][program] = [s.get("execution_time") for s in steps[:-1]] + [None]
        else:
            actions = [m["action"] for m in doc["history"] if m["role"] == "assistant"]
            out["tool_s"][program] = [None] * len(actions)
        out["calls"][program] = len(actions)
        out["tools"].update(_first_word(a) for a in actions[:-1])
        stats = (doc.get("info") or {}).get("model_stats") or {}
        if stats.get("tokens_sent"):
            out["sent"][program] = stats["tokens_sent"]
        if stats.get("tokens_received"):
            out["received"][program] = stats["tokens_received"]
    return out


def _check(paths: list[Path], tmp_path: Path, fmt: str = FORMAT) -> pl.DataFrame:
    exp = _expected(paths)
    out = tmp_path / "trace.parquet"
    report = ingest(paths, out, fmt=fmt)
    assert report.rejected == 0
    assert report.records == report.rows == sum(exp["calls"].values())
    trace = trace_io.read(out).sort(["program_id", "turn"])
    assert trace["program_id"].n_unique() == exp["programs"]
    per = {k: g for (k,), g in trace.group_by("program_id")}
    assert {k: g.height for k, g in per.items()} == exp["calls"]
    tools = Counter(t for t in trace["tool"].to_list() if t is not None)
    assert tools == exp["tools"]
    assert trace["tool"].null_count() == exp["programs"]
    for program, rows in per.items():
        rows = rows.sort("turn")
        assert rows["tool_s"].to_list() == exp["tool_s"][program]
        assert rows["arrival_s"].to_list() == [0.0] + [None] * (rows.height - 1)
        if program in exp["sent"]:
            assert rows["input_tokens"].sum() == exp["sent"][program]
        if program in exp["received"]:
            assert rows["output_tokens"].sum() == exp["received"][program]
        # a prompt only grows along a run
        inputs = rows["input_tokens"].to_list()
        assert inputs == sorted(inputs), program
    for column in ("gap_s", "llm_s", "reused_tokens"):
        assert trace[column].null_count() == trace.height
    return trace


# ---------------------------------------------------------------- samples and real traces


def test_samples(samples: Path, tmp_path: Path) -> None:
    paths = [samples / FORMAT / name for name in SAMPLE_FILES]
    trace = _check(paths, tmp_path)
    # history only: chars / 4 of the history before each assistant message, unscaled
    history = json.loads((samples / FORMAT / HISTORY_ONLY).read_text())["history"]
    expected_in, expected_out, seen = [], [], 0
    for message in history:
        if message["role"] == "assistant":
            expected_in.append(round(seen / 4))
            expected_out.append(round(_chars(message) / 4))
        seen += _chars(message)
    rows = trace.filter(pl.col("program_id") == _program(Path(HISTORY_ONLY))).sort("turn")
    assert rows["input_tokens"].to_list() == expected_in
    assert rows["output_tokens"].to_list() == expected_out
    assert rows["tool"].to_list() == ["find_file", "open", "edit", "python", None]
    # demonstration with totals of 0: turn 0 sees the system prompt and the task
    doc = json.loads((samples / FORMAT / EDITED).read_text())
    rows = trace.filter(pl.col("program_id") == _program(Path(EDITED))).sort("turn")
    assert rows.height == len(doc["trajectory"]) == 16  # the history lacks one step
    head = sum(len(m["content"]) for m in doc["history"][:2])
    assert rows["input_tokens"][0] == round(head / 4)


def test_samples_auto_detected(samples: Path, tmp_path: Path) -> None:
    report = ingest([samples / FORMAT], tmp_path / "auto.parquet")
    assert report.formats() == {FORMAT: len(SAMPLE_FILES)}


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    paths = sorted((shared_traces / "swe-agent").glob("*.traj"))
    assert paths
    _check(paths, tmp_path, fmt="auto")


def test_sniff_is_specific(samples: Path) -> None:
    for name in SAMPLE_FILES:
        path = samples / FORMAT / name
        assert READER.sniff(path, head_bytes(path))
        assert not MINI_READER.sniff(path, head_bytes(path))
    for path in sorted(samples.glob("*/*")):
        if path.parent.name != FORMAT and path.name != "LICENSE":
            assert not READER.sniff(path, head_bytes(path)), path


# ---------------------------------------------------------------- synthetic files


def _doc(
    steps: list[tuple[str, Any]], stats: dict[str, Any] | None = None, with_history: bool = True
) -> dict[str, Any]:
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "s" * 400},
        {"role": "user", "content": "u" * 400},
    ]
    trajectory = []
    for action, seconds in steps:
        history.append(
            {
                "role": "assistant",
                "content": f"I run it.\n```\n{action}\n```",
                "thought": "I run it.",
                "action": action,
            }
        )
        history.append({"role": "user", "content": "o" * 200})
        step: dict[str, Any] = {
            "action": action,
            "observation": "o" * 200,
            "response": f"I run it.\n```\n{action}\n```",
            "thought": "I run it.",
            "state": "{}",
        }
        if seconds is not None:
            step["execution_time"] = seconds
        trajectory.append(step)
    doc: dict[str, Any] = {
        "environment": "swe_main",
        "trajectory": trajectory,
        "history": history if with_history else [],
    }
    doc["info"] = {"model_stats": stats or {}}
    return doc


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_scaled_to_totals(tmp_path: Path) -> None:
    steps = [("ls", 0.5), ("sudo -E python x.py", 2.0), ("cd a && pytest", "1.25"), ("submit", 0.1)]
    stats = {"tokens_sent": 1001, "tokens_received": 97, "api_calls": 4}
    path = _write(tmp_path / "run.traj", _doc(steps, stats))
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["program_id"].to_list() == ["run"] * 4
    assert trace["tool"].to_list() == ["ls", "python", "pytest", None]
    assert trace["tool_s"].to_list() == [0.5, 2.0, 1.25, None]
    assert trace["input_tokens"].sum() == 1001
    assert trace["output_tokens"].sum() == 97
    inputs = trace["input_tokens"].to_list()
    assert inputs == sorted(inputs) and inputs[0] > 0


def test_history_missing_or_short(tmp_path: Path) -> None:
    steps = [("ls", None), ("cat a", None), ("submit", None)]
    doc = _doc(steps)
    doc["history"] = doc["history"][:-2]  # saved before the last step
    short = _write(tmp_path / "short.traj", doc)
    bare = _write(tmp_path / "bare.traj", _doc(steps, with_history=False))
    out = tmp_path / "out.parquet"
    ingest([short, bare], out, fmt=FORMAT)
    trace = trace_io.read(out).sort(["program_id", "turn"])
    for (program,), rows in trace.group_by("program_id"):
        inputs = rows.sort("turn")["input_tokens"].to_list()
        assert len(inputs) == 3 and inputs == sorted(inputs), program
    full = trace.filter(pl.col("program_id") == "short")["input_tokens"].to_list()
    assert full[0] == 200  # system + task: 800 chars
    # without a history the first prompt is unseen: 1 token, not an empty prompt (a bad record)
    assert trace.filter(pl.col("program_id") == "bare")["input_tokens"][0] == 1


def test_an_unseen_prompt_keeps_the_runs_total(tmp_path: Path) -> None:
    stats = {"tokens_sent": 1001, "tokens_received": 97, "api_calls": 3}
    bare = _write(
        tmp_path / "bare.traj",
        _doc([("ls", 0.1), ("cat a", 0.1), ("submit", None)], stats, with_history=False),
    )
    out = tmp_path / "out.parquet"
    ingest([bare], out, fmt=FORMAT)
    inputs = trace_io.read(out).sort("turn")["input_tokens"].to_list()
    assert inputs[0] == 1 and sum(inputs) == 1001


# ---------------------------------------------------------------- bad input


def _good(tmp_path: Path) -> Path:
    return _write(tmp_path / "good.traj", _doc([("ls", 0.2), ("submit", 0.1)]))


def _bad_cases(tmp_path: Path, samples: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (file, reason expected in the error, record expected in the error).

    The format has no timestamps, so there is no out-of-order case to test.
    """
    text = (samples / FORMAT / TESTREPO).read_text()
    cases: dict[str, tuple[Path, str, str | None]] = {}
    trunc = tmp_path / "trunc.traj"
    # cut between two keys, as a writer killed mid-file leaves it
    trunc.write_text(text[: text.index('"observation"', len(text) // 2)])
    cases["truncated"] = (trunc, "truncated JSON", None)
    mini = tmp_path / "mini.traj"
    shutil.copy(next((samples / "mini-swe-agent").glob("*.traj.json")), mini)
    cases["other format (mini-swe-agent)"] = (mini, "not a swe-agent trajectory", None)
    mooncake = tmp_path / "mooncake.traj"
    shutil.copy(samples / "mooncake" / "synthetic_trace_head.jsonl", mooncake)
    cases["other format (JSONL)"] = (mooncake, "malformed JSON", None)
    toplist = tmp_path / "list.traj"
    toplist.write_text("[]")
    cases["top-level list"] = (toplist, "not a swe-agent trajectory", None)
    empty = tmp_path / "empty.traj"
    empty.write_text("")
    cases["empty"] = (empty, "empty file", None)
    binary = tmp_path / "garbage.traj"
    binary.write_bytes(bytes(range(256)))
    cases["binary"] = (binary, "binary data", None)
    notlist = _write(tmp_path / "notlist.traj", {"trajectory": {"action": "ls"}})
    cases["trajectory not a list"] = (notlist, "trajectory is not a list", None)
    nocalls = _write(
        tmp_path / "nocalls.traj",
        {"trajectory": [], "history": [{"role": "system", "content": "s"}]},
    )
    cases["no calls"] = (nocalls, "no LLM calls", None)
    steps: list[tuple[str, Any]] = [("ls", 0.2), ("cat a", -1.5), ("submit", 0.1)]
    cases["negative execution_time"] = (
        _write(tmp_path / "neg.traj", _doc(steps)),
        "negative execution_time",
        "trajectory[1]",
    )
    steps = [("ls", 0.2), ("cat a", "slow"), ("submit", 0.1)]
    cases["non-numeric execution_time"] = (
        _write(tmp_path / "nn.traj", _doc(steps)),
        "non-numeric execution_time",
        "trajectory[1]",
    )
    doc = _doc([("ls", 0.2), ("cat a", 0.3), ("submit", 0.1)])
    doc["trajectory"][1] = "oops"
    cases["step not an object"] = (
        _write(tmp_path / "notobj.traj", doc),
        "malformed step",
        "trajectory[1]",
    )
    doc = _doc([("ls", 0.2), ("submit", 0.1)], {"tokens_sent": "many"})
    cases["non-numeric tokens_sent"] = (
        _write(tmp_path / "sent.traj", doc),
        "non-numeric tokens_sent",
        "trajectory[0]",
    )
    doc = _doc([("ls", 0.2), ("submit", 0.1)], {"tokens_received": -7})
    cases["negative tokens_received"] = (
        _write(tmp_path / "recv.traj", doc),
        "negative tokens_received",
        "trajectory[0]",
    )
    doc = {
        "history": [
            {"role": "system", "content": "s"},
            {"role": "assistant", "content": "a", "action": "ls"},
            "oops",
        ]
    }
    cases["history message not an object"] = (
        _write(tmp_path / "hist.traj", doc),
        "malformed message",
        "history[2]",
    )
    return cases


def test_bad_input_strict(tmp_path: Path, samples: Path) -> None:
    assert_strict_errors(_bad_cases(tmp_path, samples), FORMAT, tmp_path)


def test_bad_input_skip_bad(tmp_path: Path, samples: Path) -> None:
    good = _good(tmp_path)
    for name, (path, reason, record) in _bad_cases(tmp_path, samples).items():
        report, trace, rejects = ingest_skipping_bad(
            [good, path], tmp_path / "skip.parquet", FORMAT, name
        )
        assert trace["program_id"].unique().to_list() == ["good"], name
        assert report.rows == trace.height == 2, name
        assert any(reason in r["reason"] for r in rejects), (name, rejects)
        if record is not None:
            # a bad record rejects its whole program, every call accounted for
            doc = json.loads(path.read_text())
            calls = doc.get("trajectory") or [
                m for m in doc["history"] if not isinstance(m, dict) or m["role"] == "assistant"
            ]
            assert report.rejected == len(calls), name


# ---------------------------------------------------------------- CLI


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.parquet"
    src = samples / FORMAT / TESTREPO
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == len(json.loads(src.read_text())["trajectory"])

    bad = tmp_path / "broken_run.traj"
    bad.write_text(src.read_text()[:600])
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert "broken_run.traj" in result.output


# ---------------------------------------------------------------- roles

#: name -> (sample, role of the history message changed, its change, reason expected)
ROLE_CASES: dict[str, tuple[str, str, Any, str]] = {
    "steps, missing role": (TESTREPO, "assistant", lambda m: m.pop("role"), "missing role"),
    "steps, misspelt role": (
        TESTREPO,
        "assistant",
        lambda m: m.update(role="assitant"),
        "unknown role: 'assitant' (expected system, user, assistant, tool)",
    ),
    "steps, non-string role": (
        TESTREPO,
        "assistant",
        lambda m: m.update(role=["assistant"]),
        "non-string role: ['assistant']",
    ),
    "steps, tool message without a role": (
        TESTREPO,
        "tool",
        lambda m: m.pop("role"),
        "missing role",
    ),
    "history, missing role": (
        HISTORY_ONLY,
        "assistant",
        lambda m: m.pop("role"),
        "missing role",
    ),
    "history, misspelt role": (
        HISTORY_ONLY,
        "assistant",
        lambda m: m.update(role="Assistant"),
        "unknown role: 'Assistant'",
    ),
    "history, non-string role": (
        HISTORY_ONLY,
        "assistant",
        lambda m: m.update(role=3),
        "non-string role: 3",
    ),
    "history, tool message without a role": (
        HISTORY_ONLY,
        "tool",
        lambda m: m.pop("role"),
        "missing role",
    ),
}


@pytest.mark.parametrize("case", sorted(ROLE_CASES))
def test_bad_role_is_a_bad_record(case: str, samples: Path, tmp_path: Path) -> None:
    """A history message with no role, or one SWE-agent has not, is never passed over
    (in a history-only file its call would vanish unseen, in a stepped one the matching
    and the estimates would go wrong unseen). Its program is rejected whole, every record
    counted."""
    sample, role, change, reason = ROLE_CASES[case]
    doc = json.loads((samples / FORMAT / sample).read_text())
    history = doc["history"]
    index = [i for i, m in enumerate(history) if m["role"] == role][1]
    calls = len(doc.get("trajectory") or [m for m in history if m["role"] == "assistant"])
    change(history[index])
    bad = _write(tmp_path / "bad.traj", doc)
    record = f"history[{index}]"
    assert_cli_error_line(bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    good = samples / FORMAT / EDITED
    report, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == [_program(good)]
    assert report.rows == len(json.loads(good.read_text())["trajectory"])
    # every call of the bad program, and the bad message when it took no call's place
    took_a_call = "trajectory" not in doc and role == "assistant"
    assert report.rejected == calls + (not took_a_call)
    own = [r for r in rejects if r["record"] == record]
    assert len(own) == 1 and own[0]["reason"].startswith(reason), own
    others = [r for r in rejects if r["record"] != record]
    assert all(r["reason"].startswith("rejected with its program") for r in others)


def test_history_message_not_an_object_with_steps(samples: Path, tmp_path: Path) -> None:
    doc = json.loads((samples / FORMAT / TESTREPO).read_text())
    doc["history"][3] = "oops"
    bad = _write(tmp_path / "bad.traj", doc)
    assert_cli_error_line(
        bad, FORMAT, tmp_path / "o.parquet", "history[3]", "malformed message: not a JSON object"
    )
    good = samples / FORMAT / EDITED
    report, trace, _ = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == [_program(good)]
    assert report.rejected == len(doc["trajectory"]) + 1


def test_a_step_missing_from_the_history_grows_by_the_observation(tmp_path: Path) -> None:
    """A step the history lacks is estimated as the previous call's prompt + its answer +
    its observation; its answer is its response, the action counted once when the response
    holds it."""
    doc = _doc([("ls", None), ("cat a", None), ("submit", None)])
    doc["history"] = doc["history"][:-2]  # saved before the last step
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "short.traj", doc)], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    # 800 (system + task), + 20 ("ls" answer) + 200; + 23 ("cat a" answer) + 200, by 4
    assert trace["input_tokens"].to_list() == [200, 255, 311]
    assert trace["output_tokens"][2] == 6  # its response, 24 characters, holds "submit"


def test_a_step_matches_an_answer_two_past_its_place(tmp_path: Path) -> None:
    """The history holds two answers no step has (one of another action, one naming none)
    before the second step's: the step is matched to its own, two past the next, not to
    the one naming no action."""
    doc = _doc([("ls", None), ("cat a", None)])
    extra = [
        {"role": "assistant", "content": "n" * 400, "action": "x1"},
        {"role": "user", "content": "o" * 200},
        {"role": "assistant", "content": "m" * 400},
        {"role": "user", "content": "o" * 200},
    ]
    doc["history"][4:4] = extra
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "extra.traj", doc)], out, fmt=FORMAT)
    # 800 + 20 + 200, then the two answers and their observations: 2220 characters
    assert trace_io.read(out).sort("turn")["input_tokens"].to_list() == [200, 555]


def test_totals_split_by_largest_remainder_the_first_on_ties(tmp_path: Path) -> None:
    """Scaled to totals of 4 tokens: the prompts (800, 1020, 1240 characters) take 1, 1, 2
    (the total kept); three equal answers take 2, 1, 1 (a tie: the first)."""
    stats = {"tokens_sent": 4, "tokens_received": 4}
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "r.traj", _doc([("ls", 1.0)] * 3, stats))], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["input_tokens"].to_list() == [1, 1, 2]
    assert trace["output_tokens"].to_list() == [2, 1, 1]


def test_a_total_too_small_for_every_prompt_gives_each_one_token(tmp_path: Path) -> None:
    """tokens_sent 1 over three calls: each prompt is at least 1 token (an empty one is a bad
    record), so the total cannot be kept; none is taken below 1 to keep it."""
    bare = _doc([("ls", 0.1), ("cat a", 0.1), ("submit", None)], {"tokens_sent": 1}, False)
    out = tmp_path / "out.parquet"
    ingest([_write(tmp_path / "bare.traj", bare)], out, fmt=FORMAT)
    assert trace_io.read(out).sort("turn")["input_tokens"].to_list() == [1, 1, 1]
