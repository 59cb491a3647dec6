"""A live run's calls that the server refuses (HTTP 4xx) or fails (HTTP 5xx) are counted
apart (``rejected_calls``, ``failed_calls``) and told as the run ends with the server's
first error, never as calls too long for the model (the live client clips those to the
server's limit before sending): `replay --live` against a stub of vLLM's API that refuses
one call and fails another. Regression: both were counted as rejected, and replay printed
"rejected (a prompt that reaches the model's length, or …) … --truncate clips them instead"."""

from __future__ import annotations

import io
import itertools
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from replay.live import run_live
from replay.policy_runs import Load
from replay.workload import AgentProgram, Call, Workload
from tests.http_stub import json_reply, serving, stream_reply
from tests.live.traces import agent_trace
from ttlctl.cli import app

#: (program, turn) -> the HTTP status the stub answers that call with
ANSWERS = {("prog-1", 1): 500, ("prog-2", 0): 400, ("prog-3", 2): 429}
PROGRAMS, CALLS = 4, 3


class _Vllm(BaseHTTPRequestHandler):
    """What `replay --live` asks of a vLLM server, each call answered at once."""

    turns: ClassVar[dict[str, int]] = {}
    lock: ClassVar[threading.Lock] = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            json_reply(self, {"data": [{"id": "stub", "max_model_len": 4096}]})
        elif self.path == "/version":
            json_reply(self, {"version": "0.32.0"})
        elif self.path == "/metrics":
            info = 'block_size="16",num_gpu_blocks="512",enable_prefix_caching="True"'
            text = f"vllm:cache_config_info{{{info}}} 1.0\n".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/reset_prefix_cache":
            json_reply(self, {})
        elif self.path == "/detokenize":  # a vocabulary of 1,000 ids
            json_reply(self, {"prompt": "x" if body["tokens"][0] < 1000 else ""})
        elif self.path == "/v1/completions":
            program = body["vllm_xargs"]["program_id"]
            with self.lock:
                turn = self.turns.get(program, 0)
                self.turns[program] = turn + 1
            status = ANSWERS.get((program, turn))
            if status is not None:
                self.send_error(status, "the stub's answer to this call")
                return
            n = body["max_tokens"]
            chunk = {
                "choices": [{"token_ids": [7] * n}],
                "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": n},
            }
            stream_reply(self, chunk)
        else:
            self.send_error(404)


@pytest.fixture()
def url() -> Iterator[str]:
    _Vllm.turns = {}
    with serving(_Vllm) as base:
        yield base


def test_refused_and_failed_calls_are_counted_apart_and_told(url: str, tmp_path: Path) -> None:
    trace = agent_trace(
        tmp_path / "t.parquet", programs=PROGRAMS, calls=CALLS, pause_s=(0.01, 0.02)
    )
    out = tmp_path / "r.json"
    res = CliRunner().invoke(
        app,
        ["replay", str(trace), "--policy", "vllm", "--live", url, "--json", str(out)],
        env={"COLUMNS": "400"},
    )
    assert res.exit_code == 0, res.output
    (r,) = json.loads(out.read_text())["results"]
    # prog-1 stops after its failed second call, prog-2 at its refused first, prog-3 at
    # its third, answered "too many requests" (a failure, not a refusal: try later)
    assert (r["rejected_calls"], r["failed_calls"]) == (1, 2)
    assert (r["llm_calls"], r["programs"], r["programs_cut_short"]) == (
        PROGRAMS * CALLS - 3 - 2 - 1, PROGRAMS - 3, 3,
    )  # fmt: skip
    told = [line for line in res.output.splitlines() if "refused by the server" in line]
    assert len(told) == 1, res.output
    line = told[0]
    assert f"1 refused by the server and 2 failed of {PROGRAMS * CALLS} calls" in line, line
    assert "HTTP 4" in line or "HTTP 5" in line, line  # the first error, as the server said
    assert "left out of JCT" in line, line
    assert line.count(url) == 1, line  # the server named once, not again in its error
    assert "--truncate" not in res.output and "longer than the model" not in res.output
    warnings = r["server"]["warnings"]
    assert any("refused by the server" in w for w in warnings), warnings
    assert len(r["server"]["errors"]) == 3, r["server"]["errors"]


def test_a_live_run_names_no_backend_and_warns_of_no_policy_option(
    url: str, tmp_path: Path
) -> None:
    """The server runs its own policy: a policy option is not said to change nothing (the
    simulator's warning), and the document names no backend (null: ``ReplayDoc``)."""
    trace = agent_trace(tmp_path / "t.parquet", programs=1, calls=2, pause_s=(0.01, 0.02))
    out = tmp_path / "r.json"
    args = ["replay", str(trace), "--policy", "vllm", "--live", url, "--ttl-seconds", "5"]
    res = CliRunner().invoke(app, [*args, "--json", str(out)], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    assert "--ttl-seconds" not in res.output
    assert json.loads(out.read_text())["backend"] is None


def _one_call_programs(starts: list[float]) -> Workload:
    return Workload(
        tuple(
            AgentProgram(f"own-{k}", s, (Call(100, 2, 0, None, 0.0),)) for k, s in enumerate(starts)
        )
    )


def test_run_live_keeps_the_start_times_and_saves_vllms_files(url: str, tmp_path: Path) -> None:
    """Programs start at their trace offsets; `--save-result` writes vLLM's result named
    ``ttlctl-<policy>-trace-<model>-…`` with the AIPerf records beside it; a policy other
    than vllm on a server without the TTL series is told pins are not measured."""
    told: list[str] = []
    result = run_live(url, _one_call_programs([5.0, 5.3]), "continuum", save_result=True,
                      result_dir=tmp_path, warn=told.append)  # fmt: skip
    saved = Path(result["files"]["result"])
    assert saved.parent == tmp_path and saved.name.startswith("ttlctl-continuum-trace-stub-")
    assert result["files"]["records"] == str(saved.with_suffix(".profile_export.jsonl"))
    lines = [json.loads(x) for x in Path(result["files"]["records"]).read_text().splitlines()]
    starts = [x["metadata"]["request_start_ns"] for x in lines]
    assert len(starts) == 2 and starts[1] - starts[0] >= 0.25e9
    assert [w for w in told if "no ttlctl:pins_*" in w], told


def test_run_live_of_a_closed_population_runs_that_many_at_once(url: str, tmp_path: Path) -> None:
    """``concurrency=1``: each program is sent once the one before it ended, trace times
    or not."""
    path = tmp_path / "r.jsonl"
    work = _one_call_programs([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="max_live must be positive"):
        run_live(url, work, "vllm", max_live=0)
    result = run_live(
        url, work, "vllm", timing=Load(concurrency=1), records_path=path, warn=lambda m: None
    )
    assert result["config"]["concurrency"] == 1 and result["llm_calls"] == 3
    meta = [json.loads(x)["metadata"] for x in path.read_text().splitlines()]
    assert len(meta) == 3
    for before, after in itertools.pairwise(meta):
        assert after["request_start_ns"] >= before["request_end_ns"]


class _NoReset(_Vllm):
    """A server not in dev mode (no reset route) that keeps each prompt sent."""

    prompts: ClassVar[list[list[int]]] = []

    def do_POST(self) -> None:
        if self.path == "/reset_prefix_cache":
            self.send_error(404)
            return
        if self.path == "/v1/completions":
            length = int(self.headers["Content-Length"])
            raw = self.rfile.read(length)
            _NoReset.prompts.append(json.loads(raw)["prompt"])
            self.rfile = io.BytesIO(raw)
        super().do_POST()


def test_runs_on_a_server_that_cannot_reset_its_cache_send_fresh_prompts() -> None:
    """Without the reset route, each run's fresh tokens take a nonce of their own, so
    that a run cannot hit on what an earlier one left in the cache (and it is told)."""
    _NoReset.prompts, _Vllm.turns = [], {}
    told: list[str] = []
    with serving(_NoReset) as base:
        for _ in range(2):
            run_live(base, _one_call_programs([0.0]), "vllm", warn=told.append)
    first, second = _NoReset.prompts
    assert len(first) == len(second) == 100 and first != second
    assert [w for w in told if "/reset_prefix_cache is not available" in w], told
