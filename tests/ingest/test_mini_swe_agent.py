"""The mini-swe-agent reader: ``<instance>.traj.json`` trajectories.

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import (
    assert_cli_error_line,
    assert_strict_errors,
    ingest_skipping_bad,
)
from ttlctl.cli import app
from ttlctl.ingest.formats.mini_swe_agent import READER
from ttlctl.ingest.formats.shell_program import first_program
from ttlctl.ingest.formats.swe_agent import READER as SWE_READER
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rawfile import head_bytes
from ttlctl.ingest.rejects import IngestError
from ttlctl.trace import io as trace_io

FORMAT = "mini-swe-agent"
SAMPLE_FILES = ("matplotlib__matplotlib-23314.traj.json", "django__django-16485.traj.json")


# ---------------------------------------------------------------- independent oracle


def _oracle_tool(content: str) -> str:
    """Plain-string reading of the rule, enough for the commands in these runs."""
    blocks = re.findall(r"```bash\s*\n(.*?)\n```", content, re.DOTALL)
    if len(blocks) != 1:
        return "unknown"
    lines = [ln for ln in blocks[0].splitlines() if not ln.strip().startswith("#")]
    command = "\n".join(lines).strip()
    while (m := re.match(r"cd\s+\S+\s*(?:&&|;)\s*", command)) is not None:
        command = command[m.end() :]
    words = command.split()
    while words and (
        re.match(r"[A-Za-z_]\w*=", words[0]) or words[0] in ("sudo", "env", "time", "nohup")
    ):
        words.pop(0)
    if words and words[0] == "timeout":
        words = words[2:]
    return words[0]


def _expected(paths: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "programs": 0,
        "calls": 0,
        "input": 0,
        "output": 0,
        "tools": Counter(),
        "created": {},
    }
    for path in paths:
        doc = json.loads(path.read_text())
        calls = [m for m in doc["messages"] if m["role"] == "assistant"]
        out["programs"] += 1
        out["calls"] += len(calls)
        out["created"][doc["instance_id"]] = [m["extra"]["response"]["created"] for m in calls]
        for i, m in enumerate(calls):
            usage = m["extra"]["response"]["usage"]
            out["input"] += usage["prompt_tokens"]
            out["output"] += usage["completion_tokens"]
            if i + 1 < len(calls):
                out["tools"][_oracle_tool(m["content"])] += 1
    return out


def _check(paths: list[Path], tmp_path: Path, fmt: str = FORMAT) -> None:
    exp = _expected(paths)
    out = tmp_path / "trace.parquet"
    report = ingest(paths, out, fmt=fmt)
    assert report.rejected == 0
    assert report.records == report.rows == exp["calls"]
    trace = trace_io.read(out)
    assert trace["program_id"].n_unique() == exp["programs"]
    assert trace.height == exp["calls"]
    assert trace["input_tokens"].sum() == exp["input"]
    assert trace["output_tokens"].sum() == exp["output"]
    tools = Counter(t for t in trace["tool"].to_list() if t is not None)
    assert tools == exp["tools"]
    # one null tool per program: on its last call
    assert trace["tool"].null_count() == exp["programs"]
    assert trace.filter(trace["is_last"])["tool"].null_count() == exp["programs"]
    # absolute clock rebased to the earliest `created` of the whole ingest
    origin = min(min(c) for c in exp["created"].values())
    for program, created in exp["created"].items():
        got = trace.filter(trace["program_id"] == program).sort("turn")["arrival_s"].to_list()
        assert got == [float(c - origin) for c in created]
    for column in ("tool_s", "gap_s", "llm_s", "reused_tokens"):
        assert trace[column].null_count() == trace.height


# ---------------------------------------------------------------- samples and real traces


def test_samples(samples: Path, tmp_path: Path) -> None:
    paths = [samples / FORMAT / name for name in SAMPLE_FILES]
    _check(paths, tmp_path)
    # the django sample has one answer with two bash blocks: a format error, "unknown"
    doc = json.loads(paths[1].read_text())
    asst = [m for m in doc["messages"] if m["role"] == "assistant"]
    bad = [
        i
        for i, m in enumerate(asst)
        if len(re.findall(r"```bash\s*\n(.*?)\n```", m["content"], re.DOTALL)) != 1
    ]
    assert bad
    trace = trace_io.read(tmp_path / "trace.parquet")
    rows = trace.filter(trace["program_id"] == doc["instance_id"]).sort("turn")
    assert [rows["tool"][i] for i in bad] == ["unknown"] * len(bad)


def test_samples_auto_detected(samples: Path, tmp_path: Path) -> None:
    report = ingest([samples / FORMAT], tmp_path / "auto.parquet")
    assert report.formats() == {FORMAT: len(SAMPLE_FILES)}
    assert report.skipped and all("LICENSE" in s for s in report.skipped)


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    paths = sorted((shared_traces / "mini-swe-agent").glob("*.traj.json"))
    assert paths
    _check(paths, tmp_path, fmt="auto")


# ---------------------------------------------------------------- tool rule and sniffing


@pytest.mark.parametrize(
    ("command", "tool"),
    [
        ("ls -la", "ls"),
        ("cd /testbed && python reproduce.py", "python"),
        ("cd /a; cd b && ./tests/runtests.py x", "./tests/runtests.py"),
        ("FOO=1 BAR='x y' pytest -q", "pytest"),
        ("sudo -E env A=1 timeout 30 nohup python3 -m pytest", "python3"),
        ("time -p make", "make"),
        ("timeout --signal=KILL 10s grep -r x .", "grep"),
        ("cat <<'EOF' > a.py\nprint('it's')\nEOF", "cat"),
        ("(cd src && make)", "make"),
        ("cd /testbed", "cd"),
        ("  \n", None),
        ("grep -n foo a.py | head", "grep"),
        ("# revert first\ngit checkout a.py  # undo", "git"),
        ("ls a#b", "ls"),
        ("python -c \"print('a && b')\" && ls", "python"),
    ],
)
def test_first_program(command: str, tool: str | None) -> None:
    assert first_program(command) == tool


def test_sniff_is_specific(samples: Path, tmp_path: Path) -> None:
    for name in SAMPLE_FILES:
        path = samples / FORMAT / name
        assert READER.sniff(path, head_bytes(path))
        assert not SWE_READER.sniff(path, head_bytes(path))
    for path in sorted((samples / "swe-agent").glob("*.traj")):
        assert not READER.sniff(path, head_bytes(path))
    for path in sorted(samples.glob("*/*")):
        if path.parent.name != FORMAT and path.name != "LICENSE":
            assert not READER.sniff(path, head_bytes(path)), path
    # a huge `info` pushes `messages` and `trajectory_format` past the sniffed head
    doc = {
        "info": {"submission": "x" * 100_000},
        "messages": _messages([(100, 10, "ls")]),
        "trajectory_format": "mini-swe-agent-1",
    }
    path = _write(tmp_path / "big.traj.json", doc)
    assert READER.sniff(path, head_bytes(path))
    assert not READER.sniff(tmp_path / "big.json", head_bytes(path))


# ---------------------------------------------------------------- synthetic files


def _assistant(created: Any, prompt: Any, completion: Any, command: str | None) -> dict[str, Any]:
    text = "THOUGHT: x" if command is None else f"THOUGHT: x\n\n```bash\n{command}\n```"
    return {
        "role": "assistant",
        "content": text,
        "extra": {
            "response": {
                "created": created,
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            }
        },
    }


def _messages(
    calls: list[tuple[Any, Any, str | None]], start: int = 1_700_000_000
) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
    ]
    for i, (prompt, completion, command) in enumerate(calls):
        msgs.append(_assistant(start + 3 * i, prompt, completion, command))
        msgs.append({"role": "user", "content": "<returncode>0</returncode>"})
    return msgs


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _traj(path: Path, messages: list[Any], **extra: Any) -> Path:
    doc = {
        "info": {"exit_status": "Submitted", "model_stats": {"api_calls": 3}},
        "messages": messages,
        "trajectory_format": "mini-swe-agent-1",
        **extra,
    }
    return _write(path, doc)


def test_program_id_and_tools(tmp_path: Path) -> None:
    msgs = _messages(
        [(100, 10, "cd /r && FOO=1 python x.py"), (150, 12, None), (200, 8, "echo done")]
    )
    with_id = _traj(tmp_path / "a.traj.json", msgs, instance_id="repo__x-1")
    no_id = _traj(tmp_path / "b__y-2.traj.json", msgs)
    out = tmp_path / "out.parquet"
    ingest([with_id, no_id], out, fmt=FORMAT)
    trace = trace_io.read(out).sort(["program_id", "turn"])
    assert trace["program_id"].unique().sort().to_list() == ["b__y-2", "repo__x-1"]
    assert trace["tool"].to_list() == ["python", "unknown", None] * 2
    assert trace["input_tokens"].to_list() == [100, 150, 200] * 2
    assert trace["arrival_s"].to_list() == [0.0, 3.0, 6.0] * 2


def test_v2_tool_calls_and_timestamps(tmp_path: Path) -> None:
    msgs = _messages([(100, 10, None), (150, 12, None)])
    msgs[2]["tool_calls"] = [
        {"function": {"name": "bash", "arguments": json.dumps({"command": "rg foo"})}}
    ]
    msgs[2]["extra"]["timestamp"] = 1000.5
    msgs[3]["extra"] = {"timestamp": 1002.75}
    path = _traj(tmp_path / "v2.traj.json", msgs, trajectory_format="mini-swe-agent-1.1")
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["tool"].to_list() == ["rg", None]
    assert trace["tool_s"].to_list() == [2.25, None]


# ---------------------------------------------------------------- bad input


def _good(tmp_path: Path) -> Path:
    return _traj(
        tmp_path / "good.traj.json",
        _messages([(100, 10, "ls"), (120, 5, "echo")]),
        instance_id="good",
    )


def _broken(tmp_path: Path, name: str, change: Any) -> Path:
    msgs = _messages([(100, 10, "ls"), (120, 5, "cat a"), (130, 7, "echo")])
    change(msgs[4])  # the second assistant message
    return _traj(tmp_path / name, msgs, instance_id=name.split(".")[0])


def _bad_cases(tmp_path: Path, samples: Path) -> dict[str, tuple[Path, str, str | None]]:
    """name -> (file, reason expected in the error, record expected in the error)."""
    text = (samples / FORMAT / SAMPLE_FILES[0]).read_text()
    cases: dict[str, tuple[Path, str, str | None]] = {}
    trunc = tmp_path / "trunc.traj.json"
    # cut between two keys, as a writer killed mid-file leaves it
    trunc.write_text(text[: text.index('"role"', len(text) // 2)])
    cases["truncated"] = (trunc, "truncated JSON", None)
    swe = tmp_path / "swe.traj.json"
    shutil.copy(next((samples / "swe-agent").glob("*.traj")), swe)
    cases["other format (swe-agent)"] = (swe, "not a mini-swe-agent trajectory", None)
    mooncake = tmp_path / "mooncake.json"
    shutil.copy(samples / "mooncake" / "synthetic_trace_head.jsonl", mooncake)
    cases["other format (JSONL)"] = (mooncake, "malformed JSON", None)
    toplist = tmp_path / "list.traj.json"
    toplist.write_text("[1, 2]")
    cases["top-level list"] = (toplist, "not a mini-swe-agent trajectory", None)
    empty = tmp_path / "empty.traj.json"
    empty.write_text("\n")
    cases["empty"] = (empty, "empty file", None)
    binary = tmp_path / "garbage.traj.json"
    binary.write_bytes(b"\x00\xff\x13" * 100)
    cases["binary"] = (binary, "binary data", None)
    no_calls = _traj(tmp_path / "nocalls.traj.json", [{"role": "system", "content": "s"}])
    cases["no assistant message"] = (no_calls, "no LLM calls", None)
    rec = "messages[4]"
    cases["missing response"] = (
        _broken(tmp_path, "noresp.traj.json", lambda m: m["extra"].pop("response")),
        "missing extra.response",
        rec,
    )
    cases["missing usage"] = (
        _broken(tmp_path, "nousage.traj.json", lambda m: m["extra"]["response"].pop("usage")),
        "missing usage",
        rec,
    )
    cases["missing prompt_tokens"] = (
        _broken(
            tmp_path,
            "noprompt.traj.json",
            lambda m: m["extra"]["response"]["usage"].pop("prompt_tokens"),
        ),
        "missing prompt_tokens",
        rec,
    )
    cases["non-numeric completion_tokens"] = (
        _broken(
            tmp_path,
            "nncomp.traj.json",
            lambda m: m["extra"]["response"]["usage"].update(completion_tokens="lots"),
        ),
        "non-numeric completion_tokens",
        rec,
    )
    cases["negative prompt_tokens"] = (
        _broken(
            tmp_path,
            "negprompt.traj.json",
            lambda m: m["extra"]["response"]["usage"].update(prompt_tokens=-3),
        ),
        "negative prompt_tokens",
        rec,
    )
    cases["non-numeric created"] = (
        _broken(
            tmp_path, "nncreated.traj.json", lambda m: m["extra"]["response"].update(created="noon")
        ),
        "non-numeric created",
        rec,
    )
    cases["negative created"] = (
        _broken(
            tmp_path, "negcreated.traj.json", lambda m: m["extra"]["response"].update(created=-5)
        ),
        "negative created",
        rec,
    )
    cases["out of order"] = (
        _broken(
            tmp_path,
            "order.traj.json",
            lambda m: m["extra"]["response"].update(created=1_600_000_000),
        ),
        "out-of-order turns",
        rec,
    )
    msgs = _messages([(100, 10, "ls"), (120, 5, "cat a")])
    msgs[4] = "oops"  # type: ignore[call-overload]
    cases["message not an object"] = (
        _traj(tmp_path / "notobj.traj.json", msgs, instance_id="notobj"),
        "malformed message",
        rec,
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
            calls = [
                m for m in doc["messages"] if not isinstance(m, dict) or m["role"] == "assistant"
            ]
            assert report.rejected == len(calls), name


def test_sample_with_one_bad_call(samples: Path, tmp_path: Path) -> None:
    doc = json.loads((samples / FORMAT / SAMPLE_FILES[0]).read_text())
    broken = copy.deepcopy(doc)
    index = [i for i, m in enumerate(broken["messages"]) if m["role"] == "assistant"][5]
    del broken["messages"][index]["extra"]["response"]["usage"]["completion_tokens"]
    path = _write(tmp_path / "broken.traj.json", broken)
    with pytest.raises(IngestError) as err:
        ingest([path], tmp_path / "o.parquet", fmt=FORMAT)
    assert err.value.record == f"messages[{index}]"
    assert "missing completion_tokens" in str(err.value)


# ---------------------------------------------------------------- CLI


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "cli.parquet"
    src = samples / FORMAT / SAMPLE_FILES[0]
    result = runner.invoke(app, ["ingest", str(src), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 0, result.output
    doc = json.loads(src.read_text())
    assert trace_io.read(out).height == sum(m["role"] == "assistant" for m in doc["messages"])

    bad = tmp_path / "broken_run.traj.json"
    bad.write_text(src.read_text()[:700])
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert "broken_run.traj.json" in result.output


# ---------------------------------------------------------------- roles


def _nth(messages: list[dict[str, Any]], role: str, n: int) -> int:
    return [i for i, m in enumerate(messages) if m["role"] == role][n]


def _role_cases() -> dict[str, tuple[str, Any, str]]:
    """name -> (role of the message changed, its change, reason expected)."""
    responses_item = {"type": "function_call_output", "call_id": "c1", "output": "x"}
    return {
        "missing role": ("assistant", lambda m: m.pop("role"), "missing role"),
        "misspelt role": (
            "assistant",
            lambda m: m.update(role="asistant"),
            "unknown role: 'asistant' (expected system, user, assistant, tool, exit)",
        ),
        "non-string role": ("assistant", lambda m: m.update(role=3), "non-string role: 3"),
        "user message without a role": ("user", lambda m: m.pop("role"), "missing role"),
        "Responses API item": (
            "user",
            lambda m: (m.clear(), m.update(responses_item)),
            "missing role: an OpenAI Responses API item",
        ),
    }


@pytest.mark.parametrize("case", sorted(_role_cases()))
def test_bad_role_is_a_bad_record(case: str, samples: Path, tmp_path: Path) -> None:
    """A message with no role, or one the format has not, is never passed over: its call
    would vanish unseen. Its program is rejected whole, every message counted."""
    role, change, reason = _role_cases()[case]
    doc = json.loads((samples / FORMAT / SAMPLE_FILES[1]).read_text())
    calls = sum(m["role"] == "assistant" for m in doc["messages"])
    index = _nth(doc["messages"], role, 3)
    change(doc["messages"][index])
    bad = _write(tmp_path / "bad.traj.json", doc)
    record = f"messages[{index}]"
    assert_cli_error_line(bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    good = samples / FORMAT / SAMPLE_FILES[0]
    good_doc = json.loads(good.read_text())
    report, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == [good_doc["instance_id"]]
    assert report.rows == sum(m["role"] == "assistant" for m in good_doc["messages"])
    # every call of the bad program, and the bad message in a call's place when it was none
    assert report.rejected == calls + (role != "assistant")
    own = [r for r in rejects if r["record"] == record]
    assert len(own) == 1 and own[0]["reason"].startswith(reason), own
    others = [r for r in rejects if r["record"] != record]
    assert all(r["reason"].startswith("rejected with its program") for r in others)


def test_every_role_of_the_format_is_read(tmp_path: Path) -> None:
    """v2's tool results (role ``tool``) and closing ``exit`` message are not calls and
    not bad records."""
    msgs = _messages([(100, 10, "ls"), (120, 5, "echo")])
    msgs.insert(3, {"role": "tool", "content": "out", "tool_call_id": "c1"})
    msgs.append({"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}})
    path = _traj(tmp_path / "v2.traj.json", msgs, trajectory_format="mini-swe-agent-1.1")
    report = ingest([path], tmp_path / "o.parquet", fmt=FORMAT)
    assert report.rejected == 0
    assert report.rows == 2


def test_v2_actions_name_the_tool_and_a_skewed_clock_pauses_0_s(tmp_path: Path) -> None:
    """v2's ``extra.actions[0].command`` is the command run (the text holds no block); an
    observation stamped before its answer (the clock stepped back) pauses 0 s, not a
    negative time. An ``instance_id`` with blanks around it names the program without them."""
    msgs = _messages([(100, 10, None), (150, 12, None)])
    msgs[2]["extra"] |= {"actions": [{"command": "pytest -q"}], "timestamp": 1000.5}
    msgs[3]["extra"] = {"timestamp": 1000.25}
    path = _traj(tmp_path / "v2.traj.json", msgs, instance_id=" repo__x-1 ")
    out = tmp_path / "out.parquet"
    ingest([path], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["program_id"].to_list() == ["repo__x-1"] * 2
    assert trace["tool"].to_list() == ["pytest", None]
    assert trace["tool_s"].to_list() == [0.0, None]


def test_the_models_action_regex_is_honoured(tmp_path: Path) -> None:
    """A custom ``action_regex`` under ``info.config.model`` (where the model's settings
    keep it) reads the command, as one under ``agent`` does."""
    msgs = _messages([(100, 10, None), (150, 12, None)])
    msgs[2]["content"] = "THOUGHT: x\n<cmd>grep -r foo</cmd>"
    info = {"config": {"model": {"action_regex": "<cmd>(.*?)</cmd>"}}}
    out = tmp_path / "out.parquet"
    ingest([_traj(tmp_path / "r.traj.json", msgs, info=info)], out, fmt=FORMAT)
    assert trace_io.read(out).sort("turn")["tool"].to_list() == ["grep", None]


def test_created_0_is_a_time_and_a_name_of_only_a_suffix_is_kept(tmp_path: Path) -> None:
    """``created`` 0 (a server that leaves the clock unset) is a time, not a negative one; a
    file named ``.traj.json`` with no instance_id is the program ``.traj``, not a blank id."""
    msgs = _messages([(100, 10, "ls"), (150, 12, None)], start=0)
    out = tmp_path / "out.parquet"
    ingest([_traj(tmp_path / ".traj.json", msgs)], out, fmt=FORMAT)
    trace = trace_io.read(out).sort("turn")
    assert trace["program_id"].to_list() == [".traj"] * 2
    assert trace["arrival_s"].to_list() == [0.0, 3.0]
