"""Drive vLLM's offline engine in this process and time its steps (profiles.measure_vllm).

:func:`started` builds an ``LLMEngine`` with no engine-core child process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``), random weights (``load_format="dummy"``)
and no tokenizer (``skip_tokenizer_init``: prompts are token ids), and yields a
:class:`Stepper`; on the way out it shuts the engine down and releases what vLLM
set up in the process (its distributed state, its environment cache), and puts
the environment back.

A step is timed as the in-process client runs it: ``EngineCore.step_fn()``
(schedule, execute the model, sample, update the scheduler) then
``post_step()``, with ``time.perf_counter`` around that call and nothing else.
Scheduling is synchronous (``async_scheduling=False``), so each timed call is
one whole step; LLMEngine's output processing (detokenising, request outputs)
is not run at all, and requests are dropped with ``abort_request`` once
measured. Who did what in a step is read from the scheduler's requests
(``num_computed_tokens`` before and after). Nothing is timed by the wall clock
but the steps: loops are bounded by step counts.
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

#: environment of an in-process engine (set for its life, then restored)
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}
#: set only when the user has not: vLLM's INFO lines would bury the progress bar
QUIET_ENV = {"VLLM_LOGGING_LEVEL": "ERROR"}
#: extra engine steps allowed beyond those a measurement needs (then it is an error)
SPARE_STEPS = 4


class StepError(ValueError):
    """The engine cannot be started or does not step as a measurement needs."""


def _line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


@contextmanager
def _environment() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in (*ENGINE_ENV, *QUIET_ENV)}
    os.environ.update(ENGINE_ENV)
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    try:
        with warnings.catch_warnings():
            # vLLM's and torch's own deprecation notices, not the user's business
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextmanager
def started(
    engine_args: dict[str, Any],
    check: Callable[[Any], None] | None = None,
    seed: int = 0,
) -> Iterator[Stepper]:
    """An in-process engine built from ``EngineArgs(**engine_args)``, as a :class:`Stepper`.

    ``check(vllm_config)`` runs after vLLM has resolved the configuration and
    before the engine (and its model) is built: raise there to refuse a model.
    Raises :class:`StepError` (one line) when vLLM refuses the arguments or
    cannot start.
    """
    with _environment():
        # vllm is imported here, not at module level: importing it takes seconds
        from vllm.engine.arg_utils import EngineArgs
        from vllm.v1.engine.llm_engine import LLMEngine

        try:
            vllm_config = EngineArgs(**engine_args).create_engine_config()
        except Exception as exc:  # vLLM raises many kinds; the user needs one line
            raise StepError(f"vLLM refuses the configuration ({_line(exc)})") from None
        if check is not None:
            check(vllm_config)
        try:
            engine = LLMEngine.from_vllm_config(vllm_config, disable_log_stats=True)
        except Exception as exc:
            _release()
            raise StepError(f"vLLM could not start the engine ({_line(exc)})") from None
        stepper: Stepper | None = None
        try:
            stepper = Stepper(engine, seed)
            yield stepper
        finally:
            engine.engine_core.shutdown()
            if stepper is not None:
                stepper.engine = stepper.core = None  # the model goes with the last reference
            del engine
            _release()


def _release() -> None:
    """What vLLM leaves in the process after an engine: its distributed state and caches."""
    gc.collect()
    from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()


class Stepper:
    """One in-process engine: add token-id requests, time steps, read what they did."""

    def __init__(self, engine: Any, seed: int) -> None:
        from vllm import SamplingParams

        self.engine = engine
        self.core = engine.engine_core.engine_core
        if getattr(self.core, "batch_queue", None) is not None:
            raise StepError("the engine runs a batch queue (async scheduling); steps need it off")
        self.config = self.core.vllm_config
        self.vocab = int(self.config.model_config.get_vocab_size())
        self.rng = random.Random(seed)
        self._params = SamplingParams
        self._count = 0
        #: prompt tokens found in the prefix cache when a measured request arrived (0 expected)
        self.cached_tokens_seen = 0

    # -- what the engine is ----------------------------------------------------------
    def kv_bytes_per_token(self) -> int:
        """KV bytes per token from the engine's own KV cache spec (all layers)."""
        total = 0.0
        for group in self.core.scheduler.kv_cache_config.kv_cache_groups:
            spec = group.kv_cache_spec
            total += spec.page_size_bytes * len(group.layer_names) / spec.block_size
        return round(total)

    def flags(self) -> dict[str, Any]:
        """The settings vLLM resolved that change what a step costs."""
        cfg = self.config
        mode = getattr(cfg.compilation_config, "cudagraph_mode", None)
        return {
            "block_size": int(cfg.cache_config.block_size),
            "dtype": str(cfg.model_config.dtype).removeprefix("torch."),
            "kv_cache_dtype": str(cfg.cache_config.cache_dtype),
            "enforce_eager": bool(cfg.model_config.enforce_eager),
            "cudagraph_mode": str(getattr(mode, "name", mode)),
            "max_num_batched_tokens": int(cfg.scheduler_config.max_num_batched_tokens),
            "enable_chunked_prefill": bool(cfg.scheduler_config.enable_chunked_prefill),
            "enable_prefix_caching": bool(cfg.cache_config.enable_prefix_caching),
            "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
            "max_model_len": int(cfg.model_config.max_model_len),
            "kv_cache_tokens": int(self.core.scheduler.kv_cache_config.num_blocks)
            * int(cfg.cache_config.block_size),
        }

    # -- requests ----------------------------------------------------------------------
    def _add(self, tokens: int, max_tokens: int) -> Any:
        self._count += 1
        params = self._params(
            max_tokens=max_tokens, ignore_eos=True, temperature=0.0, detokenize=False
        )
        prompt = [self.rng.randrange(self.vocab) for _ in range(tokens)]
        rid = self.engine.add_request(
            f"profile-{self._count}", {"prompt_token_ids": prompt}, params
        )
        request = self.core.scheduler.requests[rid]
        _, cached, *_ = self.core.scheduler.kv_cache_manager.get_computed_blocks(request)
        self.cached_tokens_seen = max(self.cached_tokens_seen, int(cached))
        return request

    def _step(self) -> tuple[float, bool]:
        """(seconds, whether the model ran) of one engine step."""
        core = self.core
        t0 = time.perf_counter()
        _, executed = core.step_fn()
        core.post_step(executed)
        return time.perf_counter() - t0, bool(executed)

    def _settle(self, requests: list[Any]) -> None:
        """Drop ``requests``, let the scheduler forget them, and empty the prefix cache."""
        self.engine.abort_request([r.request_id for r in requests], internal=True)
        for _ in range(SPARE_STEPS):
            if not self.core.scheduler.has_requests():
                break
            self._step()
        if self.core.scheduler.has_requests() or not self.core.reset_prefix_cache():
            raise StepError("the engine still holds requests after a measurement")

    def reset(self) -> None:
        """Empty the prefix cache (nothing of an earlier measurement can hit)."""
        self._settle([])

    # -- measurements --------------------------------------------------------------------
    def prefill(self, tokens: int) -> list[tuple[int, int, float]]:
        """Steps of one prefill of ``tokens`` fresh random tokens: (context, chunk, seconds).

        The prompt asks for one output token, so the last step samples it, as a
        serving engine's does. Several steps when ``tokens`` exceeds the step's
        token budget (chunked prefill).
        """
        self.reset()
        request = self._add(tokens, max_tokens=1)
        budget = int(self.config.scheduler_config.max_num_batched_tokens)
        steps: list[tuple[int, int, float]] = []
        for _ in range(-(-tokens // budget) + SPARE_STEPS):
            before = int(request.num_computed_tokens)
            seconds, executed = self._step()
            after = int(request.num_computed_tokens)
            if executed and after > before:
                steps.append((before, after - before, seconds))
            if request.is_finished():
                break
        else:
            raise StepError(f"a prefill of {tokens} tokens did not finish in the steps expected")
        self._settle([request])
        if sum(n for _, n, _ in steps) != tokens:
            raise StepError(f"a prefill of {tokens} tokens computed {sum(n for _, n, _ in steps)}")
        return steps

    def decode(
        self, batch: int, context: int, warm: int, timed: int, max_tokens: int
    ) -> tuple[float, float]:
        """(mean KV tokens, median seconds) of ``timed`` decode steps of ``batch`` sequences.

        Each sequence starts from a fresh ``context``-token prompt and may
        generate ``max_tokens`` (enough to outlast the measurement: the first
        sequences decode while the others prefill); the batch is prefilled
        (untimed) until every sequence has its first token, then ``warm`` steps
        run untimed before the timed ones. A timed step must advance every
        sequence by exactly one token (no prefill, no preemption, no sequence
        finished). KV tokens of a step are the batch's computed tokens before it.
        """
        self.reset()
        budget = int(self.config.scheduler_config.max_num_batched_tokens)
        requests = [self._add(context, max_tokens=max_tokens) for _ in range(batch)]
        for _ in range(-(-batch * context // budget) + batch + SPARE_STEPS):
            if all(r.num_output_tokens >= 1 for r in requests):
                break
            self._step()
        else:
            raise StepError(f"{batch} prompts of {context} tokens were not prefilled in time")
        for _ in range(warm):
            self._step()
        times: list[float] = []
        kvs: list[int] = []
        for _ in range(timed):
            kv = sum(int(r.num_computed_tokens) for r in requests)
            seconds, _ = self._step()
            grew = sum(int(r.num_computed_tokens) for r in requests) - kv
            if grew != batch:
                raise StepError(
                    f"a decode step of {batch} sequences advanced {grew} tokens "
                    "(preempted, finished or still prefilling)"
                )
            times.append(seconds)
            kvs.append(kv)
        self._settle(requests)
        return sum(kvs) / len(kvs), float(statistics.median(times))
