"""The litellm reader: LiteLLM request logs (tau2-bench sessions, one JSON line per call).

Expected values are computed here from the raw JSON with plain Python, never
copied from the reader's output.
"""

from __future__ import annotations

import ast
import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from tests.ingest.badinput import assert_strict_error, ingest_skipping_bad
from ttlctl.cli import app
from ttlctl.ingest.formats.litellm_tools import response_tool_names
from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.pyrepr import as_object, parse_repr
from ttlctl.trace import io as trace_io

FORMAT = "litellm"
SAMPLE = "tau2_retail_10__2473490a.jsonl"


# ---------------------------------------------------------------- independent oracle


def _ts(rec: dict[str, Any]) -> float:
    return datetime.fromisoformat(rec["timestamp"]).timestamp()


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _expected(paths: list[Path]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "programs": 0,
        "calls": 0,
        "input": 0,
        "output": 0,
        "tools": {},
        "gaps": {},
        "arrivals": {},
    }
    for path in paths:
        recs = _lines(path)
        out["programs"] += 1
        out["calls"] += len(recs)
        tools: list[str | None] = []
        gaps: list[float | None] = []
        for i, rec in enumerate(recs):
            out["input"] += int(rec["prompt_tokens"])
            out["output"] += int(rec["completion_tokens"])
            if i + 1 == len(recs):
                tools.append(None)
                gaps.append(None)
                continue
            gaps.append(_ts(recs[i + 1]) - _ts(rec))
            a = rec["request"]["messages"]
            b = recs[i + 1]["request"]["messages"]
            if b[: len(a)] == a and b[-1]["role"] == "tool":
                answer = b[len(a)]
                assert answer["role"] == "assistant"
                tools.append(answer["tool_calls"][0]["function"]["name"])
            else:
                tools.append(None)
        out["tools"][path.stem] = tools
        out["gaps"][path.stem] = gaps
        out["arrivals"][path.stem] = [_ts(r) for r in recs]
    return out


def _check(trace: pl.DataFrame, exp: dict[str, Any]) -> None:
    assert trace["program_id"].n_unique() == exp["programs"]
    assert trace.height == exp["calls"]
    assert trace["input_tokens"].sum() == exp["input"]
    assert trace["output_tokens"].sum() == exp["output"]
    n_tools = sum(t is not None for tools in exp["tools"].values() for t in tools)
    assert trace["tool"].drop_nulls().len() == n_tools
    assert trace["tool_s"].null_count() == trace.height  # LiteLLM has no tool timing
    assert trace["llm_s"].null_count() == trace.height
    origin = min(t for arr in exp["arrivals"].values() for t in arr)
    for program, tools in exp["tools"].items():
        rows = trace.filter(pl.col("program_id") == program).sort("turn")
        assert rows["turn"].to_list() == list(range(len(tools)))
        assert rows["tool"].to_list() == tools
        gaps = rows["gap_s"].to_list()
        assert gaps[-1] is None
        assert gaps[:-1] == pytest.approx(exp["gaps"][program][:-1], abs=1e-6)
        assert rows["arrival_s"].to_list() == pytest.approx(
            [t - origin for t in exp["arrivals"][program]], abs=1e-6
        )
        # the "hi" probe is turn 0; the agent's first call shares nothing with it
        assert rows["reused_tokens"][1] == 0
        assert rows["is_last"].to_list() == [False] * (len(tools) - 1) + [True]


# ---------------------------------------------------------------- real data


def test_sample(samples: Path, tmp_path: Path) -> None:
    src = samples / FORMAT / SAMPLE
    report = ingest([src], tmp_path / "t.parquet", fmt="auto")
    assert report.files[0].format == FORMAT
    assert report.rejected == 0
    trace = trace_io.read(tmp_path / "t.parquet")
    exp = _expected([src])
    _check(trace, exp)
    # spot values from the raw file: the probe's 8-token prompt, a tool-call turn
    rows = trace.sort("turn")
    recs = _lines(src)
    assert rows["input_tokens"][0] == int(recs[0]["prompt_tokens"]) == 8
    assert rows["tool"][2] == "find_user_id_by_name_zip"
    assert rows["gap_s"][2] == pytest.approx(_ts(recs[3]) - _ts(recs[2]))


def test_shared_traces(shared_traces: Path, tmp_path: Path) -> None:
    folder = shared_traces / "litellm"
    files = sorted(folder.glob("*.jsonl"))
    assert files
    report = ingest([folder], tmp_path / "t.parquet", fmt=FORMAT)
    assert report.rejected == 0
    assert report.records == report.rows == sum(len(_lines(f)) for f in files)
    _check(trace_io.read(tmp_path / "t.parquet"), _expected(files))


# ---------------------------------------------------------------- repr-string requests


class _Function:
    def __init__(self, arguments: str, name: str) -> None:
        self.arguments, self.name = arguments, name

    def __repr__(self) -> str:
        return f"Function(arguments={self.arguments!r}, name={self.name!r})"


class _ToolCall:
    def __init__(self, call: dict[str, Any]) -> None:
        self.id = call["id"]
        self.function = _Function(call["function"]["arguments"], call["function"]["name"])

    def __repr__(self) -> str:
        return (
            f"ChatCompletionMessageToolCall(function={self.function!r}, id={self.id!r}, "
            "type='function')"
        )


def _as_repr_log(src: Path, dst: Path) -> Path:
    """The same log with request/response as Python repr text, object reprs inside."""
    out = []
    for rec in _lines(src):
        request = dict(rec["request"])
        messages = []
        for msg in request["messages"]:
            msg = dict(msg)
            if msg.get("tool_calls"):
                msg["tool_calls"] = [_ToolCall(c) for c in msg["tool_calls"]]
            messages.append(msg)
        request["messages"] = messages
        rec = dict(rec)
        rec["request"] = repr(request)
        rec["response"] = repr(rec["response"])
        rec["prompt_tokens"] = str(rec["prompt_tokens"])
        rec["completion_tokens"] = str(rec["completion_tokens"])
        out.append(json.dumps(rec))
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_repr_strings_read_like_json(samples: Path, tmp_path: Path) -> None:
    src = samples / FORMAT / SAMPLE
    text = _as_repr_log(src, tmp_path / SAMPLE)
    line = json.loads(text.read_text().splitlines()[3])
    assert "ChatCompletionMessageToolCall(" in line["request"]
    with pytest.raises((ValueError, SyntaxError)):
        ast.literal_eval(line["request"])  # object reprs: literal_eval cannot read it
    ingest([text], tmp_path / "repr.parquet", fmt=FORMAT)
    plain_dir = tmp_path / "plain"
    plain_dir.mkdir()
    shutil.copy(src, plain_dir / SAMPLE)
    ingest([plain_dir / SAMPLE], tmp_path / "plain.parquet", fmt=FORMAT)
    got = trace_io.read(tmp_path / "repr.parquet")
    want = trace_io.read(tmp_path / "plain.parquet")
    assert got.equals(want)
    _check(got, _expected([src]))


def test_parse_repr_objects_and_strings() -> None:
    text = (
        "Choices(finish_reason='tool_calls', index=0, message=Message(content=None, "
        "role='assistant', tool_calls=[ChatCompletionMessageToolCall(index=0, "
        'function=Function(arguments=\'{"name": "Noah", "q": "it\\\'s"}\', '
        "name='find_user'), id='t1', type='function')], extra={'a': (1, -2.5), 'b': True}, "
        "obj=<litellm.Foo object at 0x7f00>))"
    )
    value = parse_repr(text)
    call = value["message"]["tool_calls"][0]
    assert call["function"]["name"] == "find_user"
    assert json.loads(call["function"]["arguments"]) == {"name": "Noah", "q": "it's"}
    assert value["message"]["extra"] == {"a": [1, -2.5], "b": True}
    assert "0x7f00" in value["message"]["obj"]
    # the "name" key inside the JSON arguments is not mistaken for the tool name
    assert response_tool_names({"choices": [text]}, None) == ["find_user"]
    assert response_tool_names(repr({"choices": [text]}), None) == ["find_user"]
    assert as_object("{'x': [1, 2]}") == {"x": [1, 2]}
    assert as_object("not ( a repr") is None
    with pytest.raises(ValueError):
        parse_repr("Foo(a=1")
    with pytest.raises(ValueError, match="trailing text"):  # one value, not its head
        parse_repr("Foo(a=1) Bar(b=2)")
    # adjacent literals are one string, as Python reads them; positional arguments are kept
    assert parse_repr("Foo('ab' 'cd', 3, k=4)") == {
        "__type__": "Foo",
        "k": 4,
        "__args__": ["abcd", 3],
    }


def _session(n_calls: int = 4) -> list[dict[str, Any]]:
    """A small synthetic log: user, tool round, user pause, answer."""
    sys_msg = {"role": "user", "content": "policy"}
    history: list[dict[str, Any]] = [sys_msg, {"role": "user", "content": "hello"}]
    recs: list[dict[str, Any]] = []
    answers: list[dict[str, Any]] = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}},
                {"id": "c2", "type": "function", "function": {"name": "fetch", "arguments": "{}"}},
            ],
        },
        {"role": "assistant", "content": "which one?"},
        {"role": "assistant", "content": "done"},
    ]
    follow: list[list[dict[str, Any]]] = [
        [
            {"role": "tool", "tool_call_id": "c1", "content": "1"},
            {"role": "tool", "tool_call_id": "c2", "content": "2"},
        ],
        [{"role": "user", "content": "the first"}],
        [{"role": "user", "content": "thanks"}],
    ]
    for i in range(n_calls):
        recs.append(
            {
                "timestamp": f"2026-04-23T17:42:{10 + 3 * i:02d}.000000+00:00",
                "status": "success",
                "model": "m",
                "prompt_tokens": 100 + 10 * i,
                "completion_tokens": 5,
                "request": {"messages": [dict(m) for m in history]},
                "response": {"choices": []},
                "trace_id": f"t{i}",
            }
        )
        if i < len(answers):
            history += [answers[i], *follow[i]]
    return recs


def _write(path: Path, recs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def test_synthetic_tools_pauses_and_failures(tmp_path: Path) -> None:
    recs = _session()
    recs[2]["status"] = "failure"  # still a call: kept
    src = _write(tmp_path / "s.jsonl", recs)
    ingest([src], tmp_path / "t.parquet", fmt=FORMAT)
    trace = trace_io.read(tmp_path / "t.parquet").sort("turn")
    assert trace["tool"].to_list() == ["lookup", None, None, None]
    assert trace["gap_s"].to_list()[:3] == pytest.approx([3.0, 3.0, 3.0])
    assert trace["gap_s"][3] is None
    assert trace["arrival_s"].to_list() == pytest.approx([0.0, 3.0, 6.0, 9.0])
    assert trace["reused_tokens"].null_count() == 4  # history always continued


def test_unknown_tool_name(tmp_path: Path) -> None:
    recs = _session()
    # the tool result answers a call id no assistant message names: "unknown"
    for rec in recs[1:]:
        msgs = rec["request"]["messages"]
        msgs[2]["tool_calls"] = []
        msgs[3]["tool_call_id"] = "zz"
        msgs[4]["tool_call_id"] = "zz"
    src = _write(tmp_path / "s.jsonl", recs)
    ingest([src], tmp_path / "t.parquet", fmt=FORMAT)
    trace = trace_io.read(tmp_path / "t.parquet").sort("turn")
    assert trace["tool"][0] == "unknown"


# ---------------------------------------------------------------- bad input


def _bad_file(tmp_path: Path, case: str, samples: Path) -> Path:
    recs = _session()
    path = tmp_path / f"{case}.jsonl"
    if case == "truncated":
        text = "".join(json.dumps(r) + "\n" for r in recs)
        path.write_text(text[: len(text) - 40])
    elif case == "wrong-format":
        shutil.copy(samples / "tracelab" / "round_trace.jsonl", path)
    elif case == "missing-tokens":
        del recs[1]["prompt_tokens"]
        _write(path, recs)
    elif case == "non-numeric":
        recs[2]["completion_tokens"] = "abc"
        _write(path, recs)
    elif case == "negative":
        recs[1]["prompt_tokens"] = -3
        _write(path, recs)
    elif case == "empty":
        path.write_text("")
    elif case == "binary":
        path.write_bytes(b"\x00\x01\xffgarbage\x00" * 50)
    elif case == "out-of-order":
        recs[2]["timestamp"] = "2026-04-23T17:40:00.000000+00:00"
        _write(path, recs)
    elif case == "bad-timestamp":
        recs[1]["timestamp"] = "yesterday"
        _write(path, recs)
    else:
        raise AssertionError(case)
    return path


BAD = {
    "truncated": ("line 4", "truncated JSON: the last line looks cut short"),
    "wrong-format": (None, "not a LiteLLM log"),
    "missing-tokens": ("line 2", "missing prompt_tokens"),
    "non-numeric": ("line 3", "non-numeric completion_tokens"),
    "negative": ("line 2", "negative prompt_tokens"),
    "empty": (None, "empty file"),
    "binary": (None, "binary data"),
    "out-of-order": ("line 3", "out-of-order"),
    "bad-timestamp": ("line 2", "bad timestamp"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input(case: str, tmp_path: Path, samples: Path) -> None:
    bad = _bad_file(tmp_path, case, samples)
    good = _write(tmp_path / "good.jsonl", _session())
    record, reason = BAD[case]
    assert_strict_error([bad, good], bad, FORMAT, tmp_path / "strict.parquet", record, reason)

    _, trace, rejects = ingest_skipping_bad([bad, good], tmp_path / "t.parquet", FORMAT)
    assert trace["program_id"].unique().to_list() == ["good"]
    assert trace.height == 4
    assert all(r["file"] == str(bad) for r in rejects)


def test_cli(samples: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.parquet"
    result = runner.invoke(
        app, ["ingest", str(samples / FORMAT / SAMPLE), "-o", str(out), "--format", FORMAT]
    )
    assert result.exit_code == 0, result.output
    assert trace_io.read(out).height == len(_lines(samples / FORMAT / SAMPLE))
    bad = _bad_file(tmp_path, "non-numeric", samples)
    result = runner.invoke(app, ["ingest", str(bad), "-o", str(out), "--format", FORMAT])
    assert result.exit_code == 2
    assert bad.name in result.output


def test_a_line_that_does_not_parse_is_its_named_sessions(tmp_path: Path) -> None:
    """Two sessions interleaved in one log; session A's third line cut short after its
    ``session_id``: A is rejected whole, B kept whole. Regression (a second reader's find):
    the broken line was filed under the file's program, and A kept a hole."""
    a, b = _session(4), _session(4)
    records = [x for pair in zip(a, b, strict=True) for x in pair]
    sessions = ["A", "B"] * 4
    lines = [json.dumps({"session_id": s, **r}) for s, r in zip(sessions, records, strict=True)]
    lines[4] = lines[4][: lines[4].index('"request"')]
    src = tmp_path / "log.jsonl"
    src.write_text("\n".join(lines) + "\n")
    _, trace, rejects = ingest_skipping_bad([src], tmp_path / "l.parquet", "litellm")
    assert trace["program_id"].unique().to_list() == ["B"] and trace.height == 4
    reasons = {r["record"]: r["reason"] for r in rejects}
    assert reasons["line 5"].startswith("malformed JSON")
    assert {reasons[f"line {n}"] for n in (1, 3, 7)} == {
        "rejected with its program: A has a bad record (line 5)"
    }


def test_a_broken_lines_session_is_its_top_level_key(tmp_path: Path) -> None:
    """A line's session is its top-level ``session_id``/``litellm_session_id``, as a good
    line's is: the same key inside the request body names nothing. Regression (a second
    reader's find): a broken line whose body carried a nested id was filed under that id,
    and the file's program kept a hole."""
    recs = _session(4)
    for r in recs:
        r["request"] = {**r.get("request", {}), "litellm_session_id": "nested"}
    lines = [json.dumps(r) for r in recs]
    cut = lines[2].index("nested") + len("nested") + 2
    lines[2] = lines[2][:cut]
    src = tmp_path / "log.jsonl"
    src.write_text("\n".join(lines) + "\n")
    report = ingest([src], tmp_path / "l.parquet", skip_bad=True, fmt="litellm", allow_empty=True)
    assert report.rows == 0 and report.rejected == 4  # the file's one program, whole
    assert report.rejected_by_reason["rejected with its program"] == 3


def test_a_naive_timestamp_is_utc_and_a_token_count_is_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`arrival_s`: `timestamp` (UTC when naive), whatever the machine's time zone (a log
    mixing naive and zoned stamps must not shift by the local offset); prompt_tokens and
    completion_tokens are whole numbers (1.5 is a bad record, not a count of 1)."""
    import time

    from ttlctl.ingest.fields import RecordError, epoch, tokens

    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert epoch("2024-01-01T00:00:00", "timestamp") == 1704067200.0
        assert epoch("2024-01-01T09:00:00+09:00", "timestamp") == 1704067200.0
    finally:
        monkeypatch.undo()
        time.tzset()
    assert tokens(12.0, "prompt_tokens") == 12
    with pytest.raises(RecordError, match=r"non-integer prompt_tokens: 1\.5"):
        tokens(1.5, "prompt_tokens")


def test_a_tool_result_of_an_unnamed_call_is_named_by_the_answer_then_the_response(
    tmp_path: Path,
) -> None:
    """Tool results whose call ids no call names: the tool is the first the added assistant
    message called; without one, the first this call's response asked for."""
    recs = _session()
    for rec in recs[1:]:
        msgs = rec["request"]["messages"]
        msgs[3]["tool_call_id"] = msgs[4]["tool_call_id"] = "zz"
    ingest([_write(tmp_path / "s.jsonl", recs)], tmp_path / "t.parquet", fmt=FORMAT)
    assert trace_io.read(tmp_path / "t.parquet").sort("turn")["tool"][0] == "lookup"
    for rec in recs[1:]:
        rec["request"]["messages"][2]["tool_calls"] = []
    asked = {"id": "c9", "type": "function", "function": {"name": "search", "arguments": "{}"}}
    recs[0]["response"] = {"choices": [{"message": {"tool_calls": [asked]}}]}
    ingest([_write(tmp_path / "s.jsonl", recs)], tmp_path / "t.parquet", fmt=FORMAT)
    assert trace_io.read(tmp_path / "t.parquet").sort("turn")["tool"][0] == "search"


def test_calls_of_one_timestamp_pause_0_s_and_a_blank_session_is_the_files(
    tmp_path: Path,
) -> None:
    """Two calls logged in the same microsecond: a gap of 0 s, not an unknown one. A blank
    session_id names no session: the line is the file's program, as one without it."""
    recs = _session()
    recs[1]["timestamp"] = recs[0]["timestamp"]
    recs[2]["session_id"] = ""
    ingest([_write(tmp_path / "s.jsonl", recs)], tmp_path / "t.parquet", fmt=FORMAT)
    trace = trace_io.read(tmp_path / "t.parquet").sort("turn")
    assert trace["program_id"].unique().to_list() == ["s"]
    assert trace["gap_s"].to_list()[:2] == pytest.approx([0.0, 6.0])
