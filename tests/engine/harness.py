"""In-process vLLM engines with the TTL scheduler, for the engine plugin's tests.

The engines run in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the fast
tier of ../shared/docs/VLLM_CPU.md), one per test module, with a KV cache of
2 MiB: 64 blocks of 32 tokens (63 usable), 2,048 tokens of the tiny model.
Prompts are token ids; ``ignore_eos`` and a fixed ``max_tokens`` make lengths
exact.
"""

from __future__ import annotations

import gc
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.vllm_server import vllm_cache_root

REPO = Path(__file__).resolve().parents[2]
KV_BYTES = 2 * 1024 * 1024
BLOCK = 32
CAPACITY_TOKENS = 2048
VOCAB = 4096


class TTLClock:
    """The TTL scheduler's clock (its ``ttl_clock``) in a test: monotonic seconds that a
    test may hold still (:meth:`held`) and move on by hand (:meth:`advance`), so whether a
    pin has expired follows the test's steps, not how fast a loaded machine runs them.
    It never goes back (the bundle watcher's next check is a time on it)."""

    def __init__(self) -> None:
        self._offset = 0.0
        self._at: float | None = None

    def __call__(self) -> float:
        return self._at if self._at is not None else time.monotonic() + self._offset

    @contextmanager
    def held(self) -> Iterator[None]:
        """No time passes inside the block but what :meth:`advance` adds."""
        self._at = self()
        try:
            yield
        finally:
            self._offset = self() - time.monotonic()
            self._at = None

    def advance(self, seconds: float) -> None:
        assert self._at is not None and seconds >= 0, "advance a held clock, forward"
        self._at += seconds


class Engine:
    """An in-process vLLM with the TTL scheduler, and helpers to drive it."""

    def __init__(self, llm: Any, seed: int = 0) -> None:
        self.llm = llm
        self.engine = llm.llm_engine
        self.sched = llm.llm_engine.engine_core.engine_core.scheduler
        self.rng = random.Random(seed)
        self._ids = 0
        #: the TTL scheduler's clock (a stock scheduler has none)
        self.clock = TTLClock()
        if hasattr(self.sched, "ttl_clock"):
            self.sched.ttl_clock = self.clock

    def prompt(self, n: int) -> list[int]:
        return [self.rng.randrange(3, VOCAB) for _ in range(n)]

    @staticmethod
    def params(max_tokens: int = 4, **xargs: Any) -> Any:
        from vllm import SamplingParams

        return SamplingParams(
            max_tokens=max_tokens, ignore_eos=True, temperature=0.0, extra_args=xargs or None
        )

    def run(
        self,
        prompts: Sequence[list[int]],
        xargs: Sequence[dict[str, Any]] | None = None,
        max_tokens: int = 4,
    ) -> list[Any]:
        """Generate for all prompts together; outputs in order."""
        xs = list(xargs) if xargs is not None else [{} for _ in prompts]
        params = [self.params(max_tokens, **x) for x in xs]
        return list(
            self.llm.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        )

    def one(self, prompt: list[int], max_tokens: int = 4, **xargs: Any) -> Any:
        return self.run([prompt], [xargs], max_tokens)[0]

    def flood(self, tokens: int, size: int = 350, batch: int = 3) -> None:
        """Untagged prompts of ``size`` tokens, ``batch`` at a time, ``tokens`` in all."""
        n = -(-tokens // size)
        for i in range(0, n, batch):
            self.run([self.prompt(size) for _ in range(min(batch, n - i))])

    def add(self, prompt: list[int], max_tokens: int = 4, **xargs: Any) -> str:
        """Queue a request without stepping; returns its external id."""
        self._ids += 1
        rid = f"manual-{self._ids}"
        self.engine.add_request(rid, {"prompt_token_ids": prompt}, self.params(max_tokens, **xargs))
        return rid

    def drain(self, timeout_s: float = 60.0) -> dict[str, Any]:
        """Step until nothing is left; finished outputs by external id."""
        done: dict[str, Any] = {}
        deadline = time.monotonic() + timeout_s
        while self.engine.has_unfinished_requests():
            if time.monotonic() > deadline:
                raise TimeoutError("engine did not drain")
            for out in self.engine.step():
                if out.finished:
                    done[out.request_id] = out
        return done

    def reset(self) -> None:
        """Release every pin and forget every cached block (between tests)."""
        assert self.llm.reset_prefix_cache()


def make_engine(
    model: Path,
    env: dict[str, str | None],
    *,
    scheduler_cls: Any = "ttlctl.engine.TTLScheduler",
    **kwargs: Any,
) -> Iterator[Engine]:
    """Start an in-process vLLM with ``env`` set; yields an :class:`Engine`; shuts it down."""
    mp = pytest.MonkeyPatch()
    try:
        mp.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        mp.setenv("VLLM_NO_USAGE_STATS", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        mp.setenv("VLLM_CACHE_ROOT", str(vllm_cache_root()))
        for key, value in env.items():
            if value is None:
                mp.delenv(key, raising=False)
            else:
                mp.setenv(key, value)
        from vllm import LLM

        options: dict[str, Any] = dict(
            model=str(model),
            scheduler_cls=scheduler_cls,
            enforce_eager=True,
            block_size=BLOCK,
            enable_prefix_caching=True,
            kv_cache_memory_bytes=KV_BYTES,
            max_model_len=1024,
            dtype="bfloat16",
            seed=0,
        )
        options.update(kwargs)
        llm = LLM(**options)
        try:
            yield Engine(llm)
        finally:
            llm.llm_engine.engine_core.shutdown()
            del llm
            gc.collect()
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
    finally:
        import vllm.envs

        vllm.envs.disable_envs_cache()
        mp.undo()
