"""The live side of a single-server validation: :class:`LiveSession` runs each policy live,
one server at a time (given with ``--url``, or started for each run and stopped after it:
:mod:`replay.validation.servers`), warms a fresh server first, writes continuum's
cold-start bundle when none is given, and measures the profile after the runs it is due
(:func:`~replay.validation.crosscheck.measured_after`), pooled after the last of them."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.client_tags import FULL, in_body
from replay.live import run_live
from replay.policy_runs import Load
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured, measurable, measure_policy_server, pooled
from replay.validation.server_doc import measured_on
from replay.validation.servers import Sources, policy_server
from replay.validation.sizing import kv_tokens_of
from replay.validation.warmup import Warmed, warmed
from replay.validation.work_dir import cold_start_bundle
from replay.workload import Workload
from ttlctl.bundle_doc import Bundle
from ttlctl.nouns import counted
from ttlctl.server.facts import ServerInfo, probe
from ttlctl.server.owned import OwnedServer

Progress = Callable[[str], None]


@dataclass
class LiveSession:
    """What one validation holds while it runs the policies live, one server at a time."""

    work: Workload
    sources: Sources
    work_dir: Path
    timing: Load
    seed: int
    timeout_s: float
    repeats: int
    bundle_path: Path | None
    profile: Profile | None
    model_config: dict[str, Any] | None
    profile_repeats: int
    save_result: bool
    result_dir: Path | None
    label: str | None
    say: Progress
    warn: Callable[[str], None] | None
    bundle_doc: Bundle | None = None
    #: ``--kv-tokens`` (None: each server's own)
    kv_tokens: int | None = None
    profile_source: str | None = None
    #: the live runs a profile is measured after, True where they are pooled (empty: a
    #: profile was given)
    measure: dict[tuple[str, int], bool] = field(default_factory=dict)
    measured: list[Measured] = field(default_factory=list)
    runs: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    infos: dict[str, ServerInfo] = field(default_factory=dict)
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: what the live client tags each call with (``--client-tags``)
    client_tags: str = FULL

    def run(self, name: str, rep: int) -> None:
        """Run ``name`` live once (run ``rep``), in a server started for it if needs be."""
        tag = f"-{rep + 1}" if self.repeats > 1 else ""
        which = f"{name} (run {rep + 1} of {self.repeats})" if self.repeats > 1 else name
        server: OwnedServer | None = None
        try:
            if name in self.sources.urls:
                url = self._given(name, rep)
            else:
                server = self._start(name, rep, tag, which)
                url = server.url
            info = probe(url)
            kv_tokens_of(info, self.kv_tokens)  # a KV that holds no block: refused now
            self.infos[name] = info
            if server is not None:  # fresh: warmed first (replay.validation.warmup)
                self.say(f"{which}: warming the server up")
                started = self.servers[name]
                doc = started if rep == 0 else started["more_runs"][-1]
                #: what it served before its live run, so that it starts warm
                doc["warmup"] = self._warm(info).to_json()
            if rep == 0 and (name, rep) in self.measure:
                # what the measurement after the run needs, asked before it
                measurable(info.url, f"{name}'s server", self.model_config)
            self.say(
                f"{which}: live replay of {counted(len(self.work.programs), 'program')} "
                f"({counted(self.work.calls, 'call')})"
            )
            self.runs.setdefault(name, []).append(self._live(name, tag, info))
            self._measure_profile(name, rep, which, info)
        finally:
            if server is not None:
                self.say(f"{which}: stopping the server")
                server.stop()

    def _vocab(self) -> int | None:
        vocab = (self.model_config or {}).get("vocab_size")
        return int(vocab) if isinstance(vocab, int) and vocab > 0 else None

    def _warm(self, info: ServerInfo) -> Warmed:
        return warmed(
            [info.url],
            info.model,
            max_model_len=info.max_model_len,
            vocab_size=self._vocab(),
            seed=self.seed,
            logprobs=not in_body(self.client_tags),
        )

    def _given(self, name: str, rep: int) -> str:
        url = self.sources.urls[name]
        self.servers[name] = {"url": url, "started_by_validate": False}
        if rep == 1 and name == "continuum" and self.warn is not None:
            self.warn(
                "continuum: repeated runs on a server validate did not start: its "
                "TTL scheduler keeps what it learned in the earlier runs"
            )
        return url

    def _start(self, name: str, rep: int, tag: str, which: str) -> OwnedServer:
        if name == "continuum" and self.bundle_path is None:
            self._cold_start_bundle()
        server = policy_server(self.sources, name, self.bundle_path, self.work_dir, tag)
        self.say(f"{which}: starting a server ({shlex.join(server.command[:6])} …)")
        server.start()
        started = {
            "url": server.url,
            "started_by_validate": True,
            "command": server.command,
            "log": str(server.log_path),
            "ready_s": server.ready_s,
        }
        if rep == 0:
            self.servers[name] = started
        else:
            self.servers[name].setdefault("more_runs", []).append(started)
        return server

    def _cold_start_bundle(self) -> None:
        if self.profile is None:
            raise ValidateError(
                "continuum alone needs --bundle or --profile (the cold-start "
                "bundle carries a profile, measured on the vllm server otherwise)"
            )
        self.bundle_path, self.bundle_doc = cold_start_bundle(self.work_dir, self.profile.to_json())

    def _measure_profile(self, name: str, rep: int, which: str, info: ServerInfo) -> None:
        """After run ``rep`` of ``name``, on its server: a measurement if one is due, and
        the profile pooled over them after the last."""
        if (name, rep) not in self.measure:
            return
        self.say(f"{which}: measuring the server's profile")
        self.measured.append(
            measure_policy_server(
                info.url,
                policy=name,
                repeat=rep + 1,
                model_config=self.model_config,
                repeats=self.profile_repeats,
            )
        )
        if self.measure[(name, rep)]:
            self.profile, self.profile_source = pooled(self.measured, measured_on(name))

    def _live(self, name: str, tag: str, info: ServerInfo) -> dict[str, Any]:
        return run_live(
            info.url,
            self.work,
            name,
            timing=self.timing,
            seed=self.seed,
            timeout_s=self.timeout_s,
            save_result=self.save_result,
            result_dir=self.result_dir or self.work_dir,
            label=f"{self.label}-{name}{tag}" if self.label else None,
            vocab_size=self._vocab(),
            warn=self.warn,
            client_tags=self.client_tags,
        )
