"""Live replay: a trace's agent programs against a running vLLM server.

What ``ttlctl replay --live URL`` and ``ttlctl validate`` run. Each program is
replayed in closed loop, as the simulator does (``replay/sim.py``): its next call
is sent when the previous one has finished plus the recorded pause (capped by
``idle_gap_cap_s``, AIPerf's ``--trace-idle-gap-cap-seconds``).

Prompts are token ids, built so that the server's prefix cache sees what the
trace recorded: call ``k`` repeats the first ``reused_tokens`` of call ``k-1``'s
prompt followed by the token ids the server generated for it (streamed back
with ``return_token_ids``), then fresh token ids (seeded per program and turn)
up to the recorded input length. ``max_tokens`` is the recorded output with
``ignore_eos``. Requests carry ``vllm_xargs`` (``program_id``, ``tool``,
``is_last``) and the ``X-Session-ID: <program_id>`` header. A call longer than
the server's ``max_model_len`` (or KV cache) is clipped and counted.

Measured per call (client clock): send, first token, each streamed chunk,
finish, and the server's ``usage.prompt_tokens_details.cached_tokens`` (needs
``--enable-prompt-tokens-details``). ``/metrics`` is read before and after the
run (prefix-cache queries and hits, preemptions, ``ttlctl:pins_*``) and sampled
during it (KV usage, waiting requests, ``ttlctl:pinned_blocks``). The prefix
cache is reset first (``POST /reset_prefix_cache``, which needs
``VLLM_SERVER_DEV_MODE=1``; one warning when absent).

:func:`run_live` returns the simulator's result keys (``replay/figures.py``),
``prefix_hit_rate`` and ``preemptions`` from the server's own counters, with the
server-side extras under ``"server"``; it can also write vLLM's benchmark
result JSON (``vllm bench serve --save-result``) and per-call records shaped
like AIPerf's ``profile_export.jsonl``. Standard library HTTP (``urllib``) and
threads: bounded in number (``max_live``) and in time (``timeout_s``).
"""

from __future__ import annotations

import http.client
import itertools
import json
import math
import random
import re
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from fitting.percentile import percentile
from replay.policy_runs import Load, prepare
from replay.workload import AgentProgram, Call, Workload
from ttlctl.errors import TtlctlError
from ttlctl.jsonio import write_atomic, write_json
from ttlctl.server import sse
from ttlctl.server.prom import int_label
from ttlctl.server.prom import metric_labels as metric_labels
from ttlctl.server.prom import normalise_url as normalise_url

#: the server's counters read before and after a run
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"
PIN_COUNTERS = ("made", "hit", "expired", "released", "dropped", "refused")
#: gauges sampled during a run
PINNED_BLOCKS = "ttlctl:pinned_blocks"
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
#: token ids never used for fresh prompt tokens (BOS/EOS/PAD of most small vocabularies)
LOW_IDS = 3

Progress = Callable[[int, int], None]


class LiveError(TtlctlError, ValueError):
    """The server cannot be used (unreachable, no model, bad answer): one line, naming the URL."""


# --------------------------------------------------------------------------- HTTP


def _http_detail(exc: urllib.error.HTTPError) -> str:
    try:
        data = json.loads(exc.read().decode("utf-8", "replace"))
        err = data.get("error", data) if isinstance(data, dict) else data
        text = str(err.get("message", err) if isinstance(err, dict) else err)
    except Exception:
        text = exc.reason if isinstance(exc.reason, str) else ""
    return " ".join(text.split())[:300]


def _describe(url: str, path: str, exc: BaseException, timeout_s: float) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        detail = _http_detail(exc)
        return f"{url}: HTTP {exc.code} from {path}" + (f": {detail}" if detail else "")
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return f"{url}: connection refused (is a vLLM server running there?)"
    if isinstance(reason, TimeoutError | socket.timeout):
        return f"{url}: no answer from {path} within {timeout_s:g} s"
    text = " ".join(str(reason).split()) or type(reason).__name__
    return f"{url}: cannot talk to the server ({text})"


def _request(
    url: str,
    path: str,
    body: Any | None = None,
    *,
    method: str = "GET",
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """Open ``url + path``; the response object (raises urllib errors)."""
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(url + path, data=data, method=method, headers=hdrs)
    return urllib.request.urlopen(req, timeout=timeout_s)


def _get_text(url: str, path: str, timeout_s: float = 30.0) -> str:
    try:
        with _request(url, path, timeout_s=timeout_s) as resp:
            raw: bytes = resp.read()
    except (urllib.error.URLError, OSError) as exc:
        raise LiveError(_describe(url, path, exc, timeout_s)) from None
    return raw.decode("utf-8", "replace")


def _get_json(url: str, path: str, timeout_s: float = 30.0) -> Any:
    text = _get_text(url, path, timeout_s)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise LiveError(f"{url}: {path} did not answer JSON") from None


# --------------------------------------------------------------------------- /metrics

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: each series name → the sum of its samples over all label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def counters(values: dict[str, float]) -> dict[str, float | None]:
    """The counters a run reports deltas of (None: the server does not have it)."""
    out: dict[str, float | None] = {
        "prefix_cache_queries": values.get(QUERIES),
        "prefix_cache_hits": values.get(HITS),
        "preemptions": values.get(PREEMPTIONS),
    }
    for name in PIN_COUNTERS:
        out[f"pins_{name}"] = values.get(f"ttlctl:pins_{name}_total")
    return out


def _delta(before: dict[str, float | None], after: dict[str, float | None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, b in before.items():
        a = after.get(key)
        out[key] = None if a is None or b is None else a - b
    return out


# --------------------------------------------------------------------------- the server


@dataclass(slots=True)
class ServerInfo:
    """What a running server says about itself."""

    url: str
    model: str
    max_model_len: int | None
    block_size: int | None
    #: KV cache capacity in tokens (``vllm:cache_config_info``)
    kv_tokens: int | None
    num_gpu_blocks: int | None
    version: str | None
    prefix_caching: bool | None
    #: whether ``ttlctl:pins_*`` series are on ``/metrics`` (a TTLScheduler server)
    ttl_metrics: bool

    def token_limit(self) -> int | None:
        """Longest request (prompt + output) the server will take."""
        limits = [x for x in (self.max_model_len, self.kv_tokens) if x]
        return min(limits) if limits else None

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}  # type: ignore[attr-defined]


def probe(url: str, timeout_s: float = 30.0) -> ServerInfo:
    """What ``/v1/models``, ``/version`` and ``/metrics`` say (:class:`LiveError`: unusable)."""
    url = normalise_url(url)
    models = _get_json(url, "/v1/models", timeout_s)
    entries = models.get("data") if isinstance(models, dict) else None
    if not entries or not isinstance(entries[0], dict) or "id" not in entries[0]:
        raise LiveError(f"{url}: /v1/models lists no model")
    entry = entries[0]
    mml = entry.get("max_model_len")
    try:
        version_doc = _get_json(url, "/version", timeout_s)
        version = str(version_doc.get("version")) if isinstance(version_doc, dict) else None
    except LiveError:
        version = None
    try:
        text = _get_text(url, "/metrics", timeout_s)
    except LiveError:
        text = ""
    info = metric_labels(text, "vllm:cache_config_info")
    blocks = int_label(info, "num_gpu_blocks")
    block_size = int_label(info, "block_size")
    kv = int_label(info, "kv_cache_size_tokens")
    if kv is None and blocks and block_size:
        kv = blocks * block_size
    caching = info.get("enable_prefix_caching")
    return ServerInfo(
        url=url,
        model=str(entry["id"]),
        max_model_len=int(mml) if isinstance(mml, int) and mml > 0 else None,
        block_size=block_size,
        kv_tokens=kv,
        num_gpu_blocks=blocks,
        version=version,
        prefix_caching=None if caching is None else caching == "True",
        ttl_metrics="ttlctl:pins_made_total" in text,
    )


def reset_prefix_cache(url: str, timeout_s: float = 60.0) -> bool:
    """``POST /reset_prefix_cache``; False when the server has no such route (not dev mode)."""
    path = "/reset_prefix_cache"
    try:
        with _request(url, path, method="POST", timeout_s=timeout_s) as resp:
            resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405):
            return False
        raise LiveError(_describe(url, path, exc, timeout_s)) from None
    except (urllib.error.URLError, OSError) as exc:
        raise LiveError(_describe(url, path, exc, timeout_s)) from None
    return True


def token_pool(url: str, model: str, vocab_size: int | None = None) -> list[int]:
    """Token ids for fresh prompt tokens: ``[3, vocab_size)`` or what ``/tokenize`` yields."""
    if vocab_size:
        return list(range(LOW_IDS, vocab_size))
    text = (__doc__ or "") + " 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    path = "/tokenize"
    try:
        with _request(url, path, {"model": model, "prompt": text}, method="POST") as resp:
            data = json.loads(resp.read())
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise LiveError(
            f"{url}: cannot find token ids for prompts via /tokenize ({exc}); give vocab_size"
        ) from None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    pool = sorted({int(t) for t in tokens or () if int(t) >= LOW_IDS})
    if len(pool) < 32:
        raise LiveError(f"{url}: /tokenize gave too few distinct token ids; give vocab_size")
    return pool


# --------------------------------------------------------------------------- workload helpers


def cap_pauses(workload: Workload, cap_s: float | None) -> Workload:
    """Every recorded pause capped at ``cap_s`` (AIPerf's --trace-idle-gap-cap-seconds)."""
    if cap_s is None:
        return workload
    return Workload(
        tuple(
            replace(p, calls=tuple(replace(c, pause_s=min(c.pause_s, cap_s)) for c in p.calls))
            for p in workload.programs
        )
    )


def first_programs(workload: Workload, n: int | None) -> Workload:
    """The first ``n`` programs (in the workload's start order)."""
    if n is None or n >= len(workload.programs):
        return workload
    return Workload(workload.programs[: max(0, n)])


def clip(call: Call, limit: int | None) -> tuple[int, int, bool]:
    """(input, output) tokens of a call as sent to a server that takes ``limit`` tokens."""
    inp, out = call.input_tokens, max(1, call.output_tokens)
    if limit is None or inp + out <= limit:
        return inp, out, False
    if out >= limit:
        out = max(1, limit // 2)
    return max(1, min(inp, limit - out)), out, True


# --------------------------------------------------------------------------- records


@dataclass(slots=True)
class LiveCallRecord:
    program_id: str
    turn: int
    tool: str | None
    is_last: bool
    #: wall clock of the send (ns since the epoch), for AIPerf-shaped records
    start_ns: int
    #: perf_counter seconds
    start_s: float
    end_s: float | None = None
    first_token_s: float | None = None
    #: perf_counter time of each streamed chunk that carried tokens
    chunk_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    requested_output: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = None
    clipped: bool = False
    error: str | None = None
    http_status: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def e2el_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def tpot_s(self) -> float | None:
        """vLLM's TPOT: (latency − TTFT) / (output − 1)."""
        if not self.ok or self.output_tokens < 2 or self.ttft_s is None or self.e2el_s is None:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> list[float]:
        """vLLM's ITL: the gaps between streamed chunks."""
        return [b - a for a, b in itertools.pairwise(self.chunk_s)]


@dataclass(slots=True)
class ProgramRecord:
    program_id: str
    calls: int
    first_send_s: float | None = None
    last_finish_s: float | None = None
    done: bool = False
    cut_short: bool = False
    late_start_s: float = 0.0


# --------------------------------------------------------------------------- the run


@dataclass
class _LiveRun:
    url: str
    info: ServerInfo
    pool: list[int]
    seed: int
    nonce: str
    timeout_request_s: float
    deadline: float
    stop: threading.Event
    progress: Progress | None
    total_calls: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    records: list[LiveCallRecord] = field(default_factory=list)
    done_calls: int = 0
    warned: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    say: Callable[[str], None] | None = None

    def warn(self, key: str, message: str) -> None:
        with self.lock:
            if key in self.warned:
                return
            self.warned.add(key)
            self.warnings.append(message)
        _emit(self.say, message)

    def fresh(self, program: str, turn: int, n: int) -> list[int]:
        rng = random.Random(f"{self.seed}:{self.nonce}:{program}:{turn}")
        return [self.pool[rng.randrange(len(self.pool))] for _ in range(n)]

    def finished(self, record: LiveCallRecord) -> None:
        with self.lock:
            self.records.append(record)
            self.done_calls += 1
            done = self.done_calls
        if self.progress is not None:
            self.progress(done, self.total_calls)

    # -- one call ------------------------------------------------------------

    def send(
        self, program: AgentProgram, turn: int, stream: list[int]
    ) -> tuple[LiveCallRecord, list[int]]:
        """Send call ``turn`` of ``program``; (its record, the token ids it generated)."""
        call = program.calls[turn]
        inp, out, clipped = clip(call, self.info.token_limit())
        reused = min(call.reused_tokens, len(stream), inp)
        prompt = stream[:reused] + self.fresh(program.program_id, turn, inp - reused)
        is_last = turn == len(program.calls) - 1
        xargs: dict[str, Any] = {"program_id": program.program_id, "is_last": int(is_last)}
        if call.tool and not is_last:
            xargs["tool"] = call.tool
        body = {
            "model": self.info.model,
            "prompt": prompt,
            "max_tokens": out,
            "min_tokens": out,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
            "vllm_xargs": xargs,
        }
        record = LiveCallRecord(
            program_id=program.program_id,
            turn=turn,
            tool=call.tool,
            is_last=is_last,
            start_ns=time.time_ns(),
            start_s=time.perf_counter(),
            prompt_tokens=len(prompt),
            reused_tokens=reused,
            requested_output=out,
            clipped=clipped,
        )
        generated: list[int] = []
        remaining = self.deadline - time.perf_counter()
        timeout = max(1.0, min(self.timeout_request_s, remaining + 1.0))
        path = "/v1/completions"
        try:
            resp = _request(
                self.url,
                path,
                body,
                method="POST",
                timeout_s=timeout,
                headers={"X-Session-ID": program.program_id},
            )
            with resp:
                self._read_stream(resp, record, generated)
        except urllib.error.HTTPError as exc:
            record.http_status = exc.code
            record.error = _describe(self.url, path, exc, timeout)
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            record.error = _describe(self.url, path, exc, timeout)
        except _Stopped:
            record.error = "stopped: the run's time limit was reached or it was interrupted"
        except ValueError as exc:
            record.error = f"{self.url}: {path}: {exc}"
        if record.error is None:
            record.end_s = time.perf_counter()
            if not generated and record.output_tokens:
                self.warn(
                    "token_ids",
                    f"{self.url}: the server does not return token ids (return_token_ids); "
                    "later prompts repeat only the previous prompt, not its output",
                )
                generated = self.fresh(program.program_id, -turn - 1, record.output_tokens)
            if record.cached_tokens is None:
                self.warn(
                    "cached",
                    f"{self.url}: responses carry no usage.prompt_tokens_details.cached_tokens: "
                    "start the server with --enable-prompt-tokens-details to see per-call hits",
                )
        self.finished(record)
        return record, prompt + generated

    def _read_stream(self, resp: Any, record: LiveCallRecord, generated: list[int]) -> None:
        for now, chunk in sse.chunks(resp, error_chars=300):
            if self.stop.is_set() or now > self.deadline:
                raise _Stopped
            usage = chunk.get("usage") or {}
            if usage:
                details = usage.get("prompt_tokens_details") or {}
                if details.get("cached_tokens") is not None:
                    record.cached_tokens = int(details["cached_tokens"])
                if isinstance(usage.get("completion_tokens"), int):
                    record.output_tokens = max(record.output_tokens, usage["completion_tokens"])
                if isinstance(usage.get("prompt_tokens"), int):
                    record.prompt_tokens = usage["prompt_tokens"]
            for choice in chunk.get("choices") or ():
                ids = choice.get("token_ids")
                n = len(ids) if isinstance(ids, list) else (1 if choice.get("text") else 0)
                if isinstance(ids, list):
                    generated.extend(int(t) for t in ids)
                if n:
                    if record.first_token_s is None:
                        record.first_token_s = now
                    record.chunk_s.append(now)
        record.output_tokens = max(record.output_tokens, len(generated))

    # -- one program -----------------------------------------------------------

    def program(self, program: AgentProgram, start_at: float, result: ProgramRecord) -> None:
        delay = start_at - time.perf_counter()
        if delay > 0 and self.stop.wait(delay):
            result.cut_short = True
            return
        result.late_start_s = max(0.0, -delay)
        stream: list[int] = []
        for turn, call in enumerate(program.calls):
            if self.stop.is_set() or time.perf_counter() > self.deadline:
                result.cut_short = True
                return
            record, stream = self.send(program, turn, stream)
            if result.first_send_s is None:
                result.first_send_s = record.start_s
            if not record.ok:
                result.cut_short = True
                return
            result.last_finish_s = record.end_s
            if turn < len(program.calls) - 1 and call.pause_s > 0:
                remaining = self.deadline - time.perf_counter()
                if self.stop.wait(min(call.pause_s, max(0.0, remaining))):
                    result.cut_short = True
                    return
        result.done = True


class _Stopped(Exception):
    pass


def _emit(warn: Callable[[str], None] | None, message: str) -> None:
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class _Sampler:
    """Samples ``/metrics`` gauges every ``every_s`` seconds in a thread."""

    def __init__(self, url: str, every_s: float) -> None:
        self.url = url
        self.every_s = every_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ttlctl-metrics", daemon=True)

    def __enter__(self) -> _Sampler:
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                values = parse_metrics(_get_text(self.url, "/metrics", timeout_s=5.0))
            except LiveError:
                values = None
            if values is not None:
                keep = {k: values[k] for k in (PINNED_BLOCKS, KV_USAGE, WAITING) if k in values}
                self.samples.append((t, keep))
            self._stop.wait(self.every_s)


def run_live(
    url: str,
    workload: Workload,
    policy_label: str,
    *,
    timing: Load | None = None,
    seed: int = 0,
    max_programs: int | None = None,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 3600.0,
    request_timeout_s: float = 600.0,
    max_live: int = 128,
    reset_cache: bool = True,
    vocab_size: int | None = None,
    sample_every_s: float = 0.5,
    progress: Progress | None = None,
    save_result: bool = False,
    result_dir: Path | None = None,
    result_filename: str | None = None,
    label: str | None = None,
    records_path: Path | None = None,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``workload`` against the vLLM server at ``url``; the simulator's result keys.

    ``timing``: the trace's start times (default), Poisson ``jps`` or a closed
    population of ``concurrency`` programs (:class:`replay.policy_runs.Load`).
    ``policy_label`` names the result (the policy lives in the server: stock vLLM,
    or the TTLScheduler with a bundle). ``max_programs`` keeps the first programs;
    ``idle_gap_cap_s`` caps every pause. At most ``max_live`` programs run at
    once (more wait: their late start is reported); the run stops by itself after
    ``timeout_s`` (programs still running are cut short), or on Ctrl-C.
    ``progress(done_calls, total_calls)`` is called after each call.

    ``save_result`` writes vLLM's benchmark result JSON into ``result_dir``
    (``label``, default ``ttlctl-<policy>``, prefixes its name as in ``vllm bench
    serve``) with per-call records next to it (``<name>.profile_export.jsonl``,
    AIPerf's shape); ``records_path`` writes those records alone. The paths
    written are under ``"files"``. Each warning (a server flag that is off, …) is
    given once to ``warn`` (default: :func:`warnings.warn`) and kept under
    ``server.warnings``. Raises :class:`LiveError` when the server cannot be used.
    """
    timing = timing or Load()
    if timeout_s <= 0 or request_timeout_s <= 0 or max_live < 1:
        raise ValueError("timeout_s, request_timeout_s and max_live must be positive")
    work = cap_pauses(first_programs(workload, max_programs), idle_gap_cap_s)
    if not work.programs:
        raise ValueError("no programs to replay")
    work = prepare(work, timing)
    info = probe(url)
    url = info.url
    run_warnings: list[str] = []

    def note(message: str) -> None:
        run_warnings.append(message)
        _emit(warn, message)

    if info.prefix_caching is False:
        note(f"{url}: prefix caching is off on the server (--enable-prefix-caching): no hits")
    if policy_label == "vllm" and info.ttl_metrics:
        note(f"{url}: this server runs ttlctl's TTLScheduler, but the run is labelled 'vllm'")
    elif policy_label != "vllm" and not info.ttl_metrics:
        note(
            f"{url}: no ttlctl:pins_* on /metrics: is the server running the TTLScheduler "
            "(`ttlctl serve`, or PROMETHEUS_MULTIPROC_DIR set)? Pins are not measured"
        )
    nonce = ""
    reset = False
    if reset_cache:
        reset = reset_prefix_cache(url)
        if not reset:
            nonce = f"{time.time_ns()}"
            note(
                f"{url}: POST /reset_prefix_cache is not available (start the server with "
                "VLLM_SERVER_DEV_MODE=1): the run starts from whatever the cache holds "
                "(fresh prompt tokens get a per-run nonce so earlier runs cannot hit)"
            )
    pool = token_pool(url, info.model, vocab_size)
    limit = info.token_limit()

    before_text = _get_text(url, "/metrics")
    before = counters(parse_metrics(before_text))
    stop = threading.Event()
    t0 = time.perf_counter()
    state = _LiveRun(
        url=url,
        info=info,
        pool=pool,
        seed=seed,
        nonce=nonce,
        timeout_request_s=request_timeout_s,
        deadline=t0 + timeout_s,
        stop=stop,
        progress=progress,
        total_calls=work.calls,
        say=warn,
    )
    programs = [ProgramRecord(p.program_id, len(p.calls)) for p in work.programs]
    base = min(p.start_s for p in work.programs)
    with _Sampler(url, sample_every_s) as sampler:
        if timing.concurrency is not None:
            closed = [(p, None, r) for p, r in zip(work.programs, programs, strict=True)]
            _drain(state, closed, min(timing.concurrency, len(closed)))
        else:
            jobs = [
                (p, t0 + (p.start_s - base), r)
                for p, r in zip(work.programs, programs, strict=True)
            ]
            jobs.sort(key=lambda j: j[1])
            _drain(state, jobs, min(max_live, len(jobs)))
    wall = time.perf_counter() - t0
    after = counters(parse_metrics(_get_text(url, "/metrics")))
    state.warnings[:0] = run_warnings

    result = summarize(
        policy_label,
        state.records,
        programs,
        info,
        before,
        after,
        sampler.samples,
        wall_s=wall,
        reset=reset,
        warnings_=state.warnings,
    )
    result["server"]["token_limit"] = limit
    result["config"] = {
        "jps": timing.jps,
        "concurrency": timing.concurrency,
        "seed": seed,
        "max_programs": max_programs,
        "idle_gap_cap_s": idle_gap_cap_s,
        "timeout_s": timeout_s,
        "max_live": max_live,
    }
    files: dict[str, str] = {}
    if save_result:
        doc = benchmark_result(result, state.records, info, label or f"ttlctl-{policy_label}")
        name = result_filename or _result_name(doc, timing)
        path = Path(result_dir or ".") / name
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(doc, path)
        files["result"] = str(path)
        if records_path is None:
            records_path = path.with_suffix(".profile_export.jsonl")
    if records_path is not None:
        write_records(records_path, state.records, policy_label)
        files["records"] = str(records_path)
    result["files"] = files
    return result


def _drain(
    state: _LiveRun, jobs: Sequence[tuple[AgentProgram, float | None, ProgramRecord]], workers: int
) -> None:
    """Run the programs in order, at most ``workers`` at once; each starts at its time,
    or as soon as a worker is free (None: a closed population, a new program when one
    ends)."""
    it = iter(jobs)
    lock = threading.Lock()

    def worker() -> None:
        while not state.stop.is_set():
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            program, start, record = nxt
            state.program(program, time.perf_counter() if start is None else start, record)

    _join(state, [worker] * workers)
    for _, _, r in jobs:  # never started: the run was stopped
        if not r.done and r.first_send_s is None:
            r.cut_short = True


def _join(state: _LiveRun, targets: list[Callable[[], None]]) -> None:
    """Run the workers; stop them at the deadline or on Ctrl-C (re-raised)."""
    pool = ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="ttlctl-live")
    futures = [pool.submit(t) for t in targets]
    try:
        while not all(f.done() for f in futures):
            if time.perf_counter() > state.deadline + 5.0:
                state.stop.set()
            time.sleep(0.05)
        for f in futures:
            f.result()
    except BaseException:
        state.stop.set()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


# --------------------------------------------------------------------------- figures


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(
    policy: str,
    records: Sequence[LiveCallRecord],
    programs: Sequence[ProgramRecord],
    info: ServerInfo,
    before: dict[str, float | None],
    after: dict[str, float | None],
    samples: Sequence[tuple[float, dict[str, float]]],
    *,
    wall_s: float,
    reset: bool,
    warnings_: Sequence[str] = (),
) -> dict[str, Any]:
    """The simulator's result keys (``replay.figures.summarize``) from a live run."""
    finished = [
        p
        for p in programs
        if p.done and not p.cut_short and p.first_send_s is not None and p.last_finish_s
    ]
    jct = [p.last_finish_s - p.first_send_s for p in finished]  # type: ignore[operator]
    ok = [r for r in records if r.ok]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    starts = [p.first_send_s for p in programs if p.first_send_s is not None]
    ends = [p.last_finish_s for p in programs if p.last_finish_s is not None]
    makespan = (max(ends) - min(starts)) if starts and ends else 0.0
    delta = _delta(before, after)
    queries, hits = delta["prefix_cache_queries"], delta["prefix_cache_hits"]
    prompt_tokens = sum(r.prompt_tokens for r in ok)
    cached = [r.cached_tokens for r in ok if r.cached_tokens is not None]
    pinned = _pinned_token_seconds(samples, info.block_size)
    pins = None
    if info.ttl_metrics and delta["pins_made"] is not None:
        pins = {
            "made": int(delta["pins_made"]),
            "hit": int(delta["pins_hit"] or 0),
            "expired": int(delta["pins_expired"] or 0),
            "released_under_pressure": int(delta["pins_released"] or 0),
            "dropped": int(delta["pins_dropped"] or 0),
            "refused": int(delta["pins_refused"] or 0),
        }
    usage = [s[KV_USAGE] for _, s in samples if KV_USAGE in s]
    waiting = [s[WAITING] for _, s in samples if WAITING in s]
    return {
        "policy": policy,
        "live": True,
        "programs": len(finished),
        "programs_cut_short": sum(1 for p in programs if p.cut_short or not p.done),
        "llm_calls": len(ok),
        "rejected_calls": sum(1 for r in records if not r.ok),
        "truncated_calls": sum(1 for r in records if r.clipped),
        "jct_mean_s": _mean(jct),
        "jct_p50_s": percentile(jct, 50),
        "jct_p95_s": percentile(jct, 95),
        "jct_p99_s": percentile(jct, 99),
        "makespan_s": makespan,
        "throughput_programs_per_s": len(finished) / makespan if makespan > 0 else None,
        "ttft_mean_s": _mean(ttft),
        "ttft_p95_s": percentile(ttft, 95),
        "queue_mean_s": None,
        "prefix_hit_rate": hits / queries if queries and hits is not None else None,
        "offload_loaded_tokens": None,
        "preemptions": None if delta["preemptions"] is None else int(delta["preemptions"]),
        "pinned_token_seconds": pinned,
        "pins": pins,
        "engine_steps": None,
        "engine_busy_s": None,
        "pinned_timeline": _timeline(samples, info.block_size),
        "evaluation_only": False,
        "wall_s": wall_s,
        "sim_calls_per_s": None,
        "server": {
            "url": info.url,
            "model": info.model,
            "version": info.version,
            "info": info.to_json(),
            "prefix_cache_reset": reset,
            "counters_before": before,
            "counters_after": after,
            "deltas": delta,
            "client_prompt_tokens": prompt_tokens,
            "client_cached_tokens": sum(cached) if cached else None,
            "client_hit_rate": sum(cached) / prompt_tokens if cached and prompt_tokens else None,
            "calls_with_cached_tokens": len(cached),
            "kv_cache_usage_max": max(usage) if usage else None,
            "kv_cache_usage_mean": _mean(usage),
            "num_requests_waiting_max": max(waiting) if waiting else None,
            "metrics_samples": len(samples),
            "late_starts": sum(1 for p in programs if p.late_start_s > 0.25),
            "errors": sorted({r.error for r in records if r.error})[:10],
            "warnings": list(warnings_),
        },
    }


def _pinned_token_seconds(
    samples: Sequence[tuple[float, dict[str, float]]], block_size: int | None
) -> float | None:
    """∫ pinned tokens dt from the sampled ``ttlctl:pinned_blocks`` gauge (None: no gauge)."""
    points = [(t, s[PINNED_BLOCKS]) for t, s in samples if PINNED_BLOCKS in s]
    if not points or not block_size:
        return None
    total = 0.0
    for (t0, b0), (t1, _) in itertools.pairwise(points):
        total += b0 * block_size * (t1 - t0)
    return total


def _timeline(
    samples: Sequence[tuple[float, dict[str, float]]], block_size: int | None
) -> dict[str, list[float]]:
    points = [(t, s[PINNED_BLOCKS]) for t, s in samples if PINNED_BLOCKS in s]
    if not points or not block_size:
        return {"t_s": [], "pinned_tokens": []}
    t0 = points[0][0]
    return {
        "t_s": [t - t0 for t, _ in points],
        "pinned_tokens": [b * block_size for _, b in points],
    }


# --------------------------------------------------------------------------- files


def _stats_ms(values: Sequence[float], name: str) -> dict[str, float | None]:
    """vLLM's ``{mean,median,std,p50,p90,p95,p99}_<name>_ms`` (0 when empty, as vLLM does)."""
    arr = np.asarray(values if values else [0.0], dtype=float) * 1000.0
    out: dict[str, float | None] = {
        f"mean_{name}_ms": float(arr.mean()),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(arr.std()),
    }
    for p in (50, 90, 95, 99):
        out[f"p{p}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def benchmark_result(
    result: dict[str, Any], records: Sequence[LiveCallRecord], info: ServerInfo, label: str
) -> dict[str, Any]:
    """vLLM's benchmark result JSON (``vllm bench serve --save-result``); ours under ``ttlctl``."""
    ok = [r for r in records if r.ok]
    starts = [r.start_s for r in records]
    ends = [r.end_s for r in ok if r.end_s is not None]
    duration = (max(ends) - min(starts)) if starts and ends else 0.0
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    itls = [g for r in ok for g in r.itl_s]
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": label,
        "model_id": info.model,
        "tokenizer_id": info.model,
        "num_prompts": len(records),
        "request_rate": result.get("config", {}).get("jps") or "inf",
        "burstiness": 1.0,
        "max_concurrency": result.get("config", {}).get("concurrency"),
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "request_goodput": None,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
    }
    doc.update(_stats_ms([r.ttft_s for r in ok if r.ttft_s is not None], "ttft"))
    doc.update(_stats_ms([r.tpot_s for r in ok if r.tpot_s is not None], "tpot"))
    doc.update(_stats_ms(itls, "itl"))
    doc.update(_stats_ms([r.e2el_s for r in ok if r.e2el_s is not None], "e2el"))
    doc["input_lens"] = [r.prompt_tokens for r in records]
    doc["output_lens"] = [r.output_tokens for r in records]
    doc["ttfts"] = [r.ttft_s for r in records]
    doc["latencies"] = [r.e2el_s for r in records]
    doc["errors"] = [r.error or "" for r in records]
    doc["ttlctl"] = {k: v for k, v in result.items() if k not in ("files", "pinned_timeline")}
    return doc


def _result_name(doc: dict[str, Any], timing: Load) -> str:
    """vLLM's file name: ``{label}-{rate}qps[-concurrencyN]-{model}-{date}.json``."""
    rate = f"{timing.jps:g}jps" if timing.jps is not None else "trace"
    conc = f"-concurrency{timing.concurrency}" if timing.concurrency is not None else ""
    model = str(doc["model_id"]).rstrip("/").split("/")[-1]
    return f"{doc['label']}-{rate}{conc}-{model}-{doc['date']}.json"


def aiperf_record(record: LiveCallRecord, session_num: int, policy: str) -> dict[str, Any]:
    """One call as a line of AIPerf's ``profile_export.jsonl``."""

    def ms(seconds: float | None) -> float | None:
        return None if seconds is None else seconds * 1000.0

    end_ns = (
        None
        if record.end_s is None
        else record.start_ns + round((record.end_s - record.start_s) * 1e9)
    )
    ack_ns = (
        None
        if record.first_token_s is None
        else record.start_ns + round((record.first_token_s - record.start_s) * 1e9)
    )
    metadata = {
        "session_num": session_num,
        "x_request_id": f"{record.program_id}:{record.turn}",
        "x_correlation_id": record.program_id,
        "conversation_id": record.program_id,
        "turn_index": record.turn,
        "request_start_ns": record.start_ns,
        "request_ack_ns": ack_ns,
        "request_end_ns": end_ns,
        "worker_id": "ttlctl",
        "record_processor_id": "ttlctl",
        "benchmark_phase": "profiling",
        "was_cancelled": False,
        "cancellation_time_ns": None,
    }
    extra = {
        "policy": policy,
        "tool": record.tool,
        "is_last": record.is_last,
        "reused_tokens": record.reused_tokens,
        "cached_tokens": record.cached_tokens,
        "clipped": record.clipped,
    }
    if not record.ok:
        return {
            "metadata": metadata,
            "metrics": {"error_isl": {"value": record.prompt_tokens, "unit": "tokens"}},
            "error": {
                "code": record.http_status,
                "type": "LiveReplayError",
                "message": record.error,
            },
            "ttlctl": extra,
        }
    e2el = record.e2el_s or 0.0
    ttft = record.ttft_s
    tpot = record.tpot_s
    metrics: dict[str, Any] = {
        "input_sequence_length": {"value": record.prompt_tokens, "unit": "tokens"},
        "time_to_first_token": {"value": ms(ttft), "unit": "ms"},
        "request_latency": {"value": ms(e2el), "unit": "ms"},
        "output_token_count": {"value": record.output_tokens, "unit": "tokens"},
        "output_sequence_length": {"value": record.output_tokens, "unit": "tokens"},
        "inter_chunk_latency": {"value": [g * 1000.0 for g in record.itl_s], "unit": "ms"},
        "inter_token_latency": {"value": ms(tpot), "unit": "ms"},
        "output_token_throughput_per_user": {
            "value": (1.0 / tpot) if tpot else None,
            "unit": "tokens/sec/user",
        },
    }
    if record.cached_tokens is not None:
        metrics["cached_tokens"] = {"value": record.cached_tokens, "unit": "tokens"}
    return {"metadata": metadata, "metrics": metrics, "error": None, "ttlctl": extra}


def write_records(path: Path, records: Sequence[LiveCallRecord], policy: str) -> None:
    """Per-call records (AIPerf's ``profile_export.jsonl`` shape), in send order."""
    ordered = sorted(records, key=lambda r: r.start_ns)
    sessions: dict[str, int] = {}
    lines = []
    for r in ordered:
        num = sessions.setdefault(r.program_id, len(sessions))
        lines.append(json.dumps(aiperf_record(r, num, policy)) + "\n")
    write_atomic("".join(lines), path)


def live_results(
    url: str,
    workload: Workload,
    policies: Sequence[str],
    *,
    jps: float | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    idle_gap_cap_s: float | None = None,
    timeout_s: float = 3600.0,
    save_result: bool = False,
    result_dir: Path | None = None,
    label: str | None = None,
    progress: Progress | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """``ttlctl replay --live URL``: the one policy the server runs, as a list of results.

    The policy lives in the server (stock vLLM, or ``ttlctl serve`` with a bundle),
    so exactly one ``--policy`` names it. Raises :class:`LiveError` otherwise.
    """
    names = list(dict.fromkeys(policies))
    if len(names) != 1:
        raise LiveError(
            "--live measures the one policy the server runs: give one --policy "
            "(vllm for stock vLLM, continuum for `ttlctl serve` with a bundle)"
        )
    return [
        run_live(
            url,
            workload,
            names[0],
            timing=Load(jps=jps, concurrency=concurrency, seed=seed),
            seed=seed,
            idle_gap_cap_s=idle_gap_cap_s,
            timeout_s=timeout_s,
            save_result=save_result,
            result_dir=result_dir,
            label=label,
            progress=progress,
            warn=warn,
        )
    ]
