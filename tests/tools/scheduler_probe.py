"""Drive ttlctl's scheduler plugin through vLLM's own scheduler code, with no model and no worker.

    python -m tests.tools.scheduler_probe [--async]

It builds vLLM's ``Scheduler`` the way the engine core does (a ``VllmConfig``
from a folder holding only a ``config.json``, a hand-made ``KVCacheConfig`` of
64 blocks of 32 tokens, the plugin loaded through ``scheduler_cls`` and
``get_scheduler_cls``) and steps it by hand: ``schedule()``, a
``ModelRunnerOutput`` with one sampled token per request that samples, then
``update_from_output()``; with ``--async`` the next step is scheduled before
the last one's output is applied, as the engine core's batch queue does. Then
it runs three sequential probes and prints one line each:

- pin: a tagged call finishes, a flood of twice the cache passes, and the
  program's next call still finds its whole context cached;
- no pin: the same without a bundle finds nothing cached;
- valve: pins fill the cache, nothing runs, and a new program's call that
  needs the room is admitted (the valve released pins to make it).

Its use is running the plugin against vLLM sources that cannot be installed
here, e.g. the CUDA wheel's Python files on a CPU machine::

    VLLM_TARGET_DEVICE=cpu PYTHONPATH=/path/to/repo:/path/to/unpacked-wheel \\
        python -m tests.tools.scheduler_probe [--async]

(the scheduler imports nothing compiled). It runs on vLLM 0.32, 0.33 and 0.34
alike: the ``ModelRunnerOutput`` it hands back carries only the fields the
running vLLM declares, and vLLM is told Triton is present while the config is
built (0.34's CPU platform refuses an x86 CPU without it; see
:mod:`tests.tools.triton_claim`). A vLLM the plugin is not yet written for also needs
``TTLCTL_VLLM_VERSION_CHECK=warn``. Exit status 0 when every probe holds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.tools.triton_claim import claimed

BLOCK = 32
BLOCKS = 64  # one is vLLM's null block: 63 hold KV
PROMPT = 8 * BLOCK


def _bundle(folder: Path, **params: Any) -> Path:
    from fitting.policy_params import PolicyParams
    from ttlctl import bundle_make

    profile = Path(__file__).resolve().parents[2] / "profiles" / "data" / "tiny-cpu.json"
    doc = bundle_make.build(
        {"schema": "ttlctl.fit/1", "tools": {}, "global": None},
        json.loads(profile.read_text()),
        PolicyParams(**params),
        created="2026-11-29T00:00:00+00:00",
        ttlctl_version="probe",
        provenance={"probe": True},
    )
    path = folder / "bundle.json"
    bundle_make.write(doc, path)
    return path


def _model(folder: Path) -> Path:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "vocab_size": 4096,
        "max_position_embeddings": 2048,
        "torch_dtype": "bfloat16",
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


class Probe:
    """vLLM's scheduler with the plugin, stepped by hand."""

    def __init__(self, folder: Path, async_scheduling: bool) -> None:
        import torch
        from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
        from vllm.v1.structured_output import StructuredOutputManager

        model = ModelConfig(model=str(_model(folder)), skip_tokenizer_init=True, max_model_len=2048)
        cache = CacheConfig(block_size=BLOCK, enable_prefix_caching=True)
        cache.num_gpu_blocks = BLOCKS
        sched = SchedulerConfig(
            max_num_batched_tokens=2048,
            max_num_seqs=16,
            max_model_len=2048,
            is_encoder_decoder=False,
            async_scheduling=async_scheduling,
            scheduler_cls="ttlctl.engine.TTLScheduler",
        )
        with claimed():  # 0.34's CPU platform refuses x86 without Triton; no kernel runs
            config = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched)
        # the CPU platform turns async scheduling off; the scheduler itself runs it
        config.scheduler_config.async_scheduling = async_scheduling
        kv = KVCacheConfig(
            num_blocks=BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=[
                KVCacheGroupSpec(
                    ["layer"],
                    FullAttentionSpec(
                        block_size=BLOCK, num_kv_heads=2, head_size=64, dtype=torch.bfloat16
                    ),
                )
            ],
        )
        cls = config.scheduler_config.get_scheduler_cls()
        self.scheduler: Any = cls(
            vllm_config=config,
            kv_cache_config=kv,
            structured_output_manager=StructuredOutputManager(config),
            include_finished_set=False,
            log_stats=False,
            block_size=BLOCK,
            hash_block_size=BLOCK,
        )
        hash_fn = get_hash_fn_by_name(cache.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(BLOCK, hash_fn)
        self.async_scheduling = async_scheduling
        self.cached: dict[str, int] = {}
        self.step_count = 0

    def add(self, rid: str, tokens: list[int], out: int, **xargs: Any) -> None:
        from vllm import SamplingParams
        from vllm.v1.request import Request

        params = SamplingParams(max_tokens=out, ignore_eos=True, extra_args=xargs or None)
        self.scheduler.add_request(
            Request(rid, tokens, params, None, block_hasher=self.hasher, arrival_time=0.0)
        )

    def _output(self, sched_out: Any) -> Any:
        # what --backend vllm's stand-in executor returns, for whichever vLLM runs (imported
        # here as vLLM is everywhere in this tool: once the environment is set for it)
        from replay.vllmsim.executor import runner_output

        ids, sampled = [], []
        for rid in sched_out.num_scheduled_tokens:
            request = self.scheduler.requests.get(rid)
            ids.append(rid)
            done = request is not None and request.num_computed_tokens >= request.num_tokens
            sampled.append([7] if done or request is None else [])
        return runner_output(ids, sampled)

    def _note(self, sched_out: Any) -> None:
        # the first admission only: from 0.34 (and with the V2 model runner before)
        # a request resumed after a preemption is listed among the new ones too
        for new in sched_out.scheduled_new_reqs:
            self.cached.setdefault(new.req_id, int(new.num_computed_tokens))

    def run(self, limit: int = 500) -> None:
        """Step until nothing is left."""
        pending: Any = None
        while self.scheduler.has_unfinished_requests() or pending is not None:
            self.step_count += 1
            if self.step_count > limit:
                raise RuntimeError(f"no progress after {limit} steps")
            sched_out = self.scheduler.schedule()
            self._note(sched_out)
            if self.async_scheduling:
                if pending is not None:
                    self.scheduler.update_from_output(pending, self._output(pending))
                pending = sched_out if sched_out.total_num_scheduled_tokens else None
            else:
                self.scheduler.update_from_output(sched_out, self._output(sched_out))


def _tokens(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + i * 104729) % 4000 + 10 for i in range(n)]


@contextmanager
def _bundle_env(path: Path | None) -> Iterator[None]:
    """``TTLCTL_BUNDLE`` set to ``path`` (unset for None) while the scheduler is built."""
    old = os.environ.pop("TTLCTL_BUNDLE", None)
    if path is not None:
        os.environ["TTLCTL_BUNDLE"] = str(path)
    try:
        yield
    finally:
        os.environ.pop("TTLCTL_BUNDLE", None)
        if old is not None:
            os.environ["TTLCTL_BUNDLE"] = old


def pin_probe(
    folder: Path, async_scheduling: bool, pinned: bool
) -> tuple[int, dict[str, int], str]:
    """(tokens the program's next call found cached, the counters, the scheduler's class)."""
    with _bundle_env(_bundle(folder, cold_start_ttl_s=600.0) if pinned else None):
        probe = Probe(folder, async_scheduling)
    first = _tokens(1, PROMPT)
    probe.add("a1", first, 4, program_id="A", tool="bash")
    probe.run()
    for i in range(8):  # 8 x 8 blocks: twice the cache
        probe.add(f"flood{i}", _tokens(100 + i, PROMPT), 4)
        probe.run()
    probe.add("a2", [*first, *_tokens(2, BLOCK)], 4, program_id="A", is_last=1)
    probe.run()
    return probe.cached["a2"], probe.scheduler.ttl_stats(), type(probe.scheduler).__name__


def valve_probe(folder: Path, async_scheduling: bool) -> tuple[bool, dict[str, int]]:
    """(whether the big call was admitted, the counters)."""
    with _bundle_env(_bundle(folder, cold_start_ttl_s=600.0, pin_cap=1.0)):
        probe = Probe(folder, async_scheduling)
    for i in range(6):  # 6 programs pin 8-9 blocks each: most of the 63
        probe.add(f"p{i}", _tokens(200 + i, PROMPT + 4), 4, program_id=f"P{i}", tool="bash")
        probe.run()
    probe.add("big", _tokens(300, 40 * BLOCK), 4, program_id="Q", tool="bash")
    probe.run()
    return "big" in probe.cached, probe.scheduler.ttl_stats()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--async", dest="async_scheduling", action="store_true")
    args = parser.parse_args(argv)
    from ttlctl.engine import scheduler as plugin

    mode = "async" if args.async_scheduling else "sync"
    print(f"ttlctl plugin on vLLM {plugin.VLLM_VERSION} ({mode} scheduling)")
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hit, stats, name = pin_probe(folder, args.async_scheduling, pinned=True)
        ok = hit == PROMPT and stats["hit"] >= 1
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  pin ({name}): next call cached {hit}/{PROMPT}; {stats}")
        hit, stats, _ = pin_probe(folder, args.async_scheduling, pinned=False)
        ok = hit == 0
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  no pin: next call cached {hit}/{PROMPT} tokens")
        admitted, stats = valve_probe(folder, args.async_scheduling)
        ok = admitted and stats["released"] >= 1
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'}  valve: big call admitted={admitted}; {stats}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
