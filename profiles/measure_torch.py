"""Eager-torch profiles: time Hugging Face transformers on this machine (NOT vLLM).

``ttlctl profile --torch`` calls :func:`measure`. This is not the engine the
replay prices (transformers in eager mode: each decode step concatenates the
whole KV cache, no CUDA graphs, per-layer Python launches); the profile's
``source.engine`` says so. ``ttlctl profile`` measures through vLLM
(:mod:`profiles.measure_vllm`). The model is built locally from the Hugging Face
config with random weights (there is no model hub; profiling times the shapes,
not the values), then:

- **prefill**: one forward pass over ``c`` random tokens (``use_cache=True``,
  logits for the last token only, as a serving engine computes them) at each
  context of a grid (powers of two from 1k up to the model's limit, smaller ones
  added for short models), fitted by :func:`profiles.fitmath.fit_quadratic`;
- **decode**: single-token steps on top of the KV cache a batched prefill left,
  for a few (batch, KV length) pairs, fitted by :func:`profiles.fitmath.fit_decode`;
- **reload**: host-to-device copies of KV-sized buffers
  (:func:`profiles.reload_copy.measure_reload`), timed first, before the model is built
  (that module says why).

Every timing is the median of at least ``repeats`` runs after a warm-up; quick
ones are repeated until they fill :data:`~profiles.torch_bench.MIN_TIMING_S`, so that
other processes on a shared machine move the median little (the timing:
:mod:`profiles.torch_bench`; the device, the dtype, the contexts and the model's config,
checked before anything is timed: :mod:`profiles.torch_setup`, whose
:class:`~profiles.torch_setup.MeasureError` is every refusal). ``progress(stage, done,
total)`` is called with the stages ``reload``, ``build``, ``prefill`` and ``decode``.

The profile's ``max_context`` is the model's limit (``max_position_embeddings``);
``max_context=`` only bounds the measured grid, which ``prefill.points`` keeps.
The result is a :class:`~profiles.schema.Profile` whose ``source`` records how
it was measured (``kind: measured``, ``cpu_profile`` on a CPU, the points and
fit errors). torch and transformers are imported inside :func:`measure` so
importing this module stays cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from profiles import fitmath, models
from profiles.host import cpu_name as _cpu_name
from profiles.reload_copy import measure_reload
from profiles.schema import Decode, Prefill, Profile
from profiles.torch_bench import DECODE_MAX_STEPS, Bench
from profiles.torch_setup import (
    MeasureError,
    free_bytes,
    hf_config,
    resolve_contexts,
    resolve_device,
    resolve_dtype,
)

#: share of the available memory the weights may take before we refuse
WEIGHTS_MEMORY_SHARE = 0.5
#: share of what is left after the weights that one measurement may use
WORK_MEMORY_SHARE = 0.5
DECODE_BATCHES_CUDA = (1, 4, 16)
DECODE_BATCHES_CPU = (1, 4, 16)
#: on a CPU, batch × KV length of one decode measurement is capped (prefilling it takes time)
DECODE_CPU_TOKENS = 8192

__all__ = ["MeasureError", "decode_pairs", "decode_room", "measure"]

Progress = Callable[[str, int, int], None]


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def decode_room(model_limit: int, repeats: int) -> int:
    """The longest prompt a decode point may take: the model's length less its steps (a
    warm-up, then :data:`~profiles.torch_bench.DECODE_MAX_STEPS` or ``repeats``, whichever
    is more) and one spare (past the model's length a learned position fails)."""
    return model_limit - max(DECODE_MAX_STEPS, repeats) - 2


def decode_pairs(
    kv_small: int, kv_last: int, model_limit: int, cuda: bool, repeats: int = 1
) -> list[tuple[int, int]]:
    """The (batch, KV length) decode points of a measurement whose prefill points run
    from ``kv_small`` to ``kv_last`` tokens: each batch at the smallest context and at a
    longer one (at most 8× it), each leaving room in the model's length for the decode
    steps (a warm-up, then :data:`~profiles.torch_bench.DECODE_MAX_STEPS` or ``repeats``,
    whichever is more), on a CPU only those of at most :data:`DECODE_CPU_TOKENS` tokens
    (before memory rules out more)."""
    room = decode_room(model_limit, repeats)  # decode steps append tokens
    kv_small = max(1, min(kv_small, room))
    kv_mid = max(kv_small, min(kv_last, 8 * kv_small, room))
    return [
        (b, kv)
        for b in (DECODE_BATCHES_CUDA if cuda else DECODE_BATCHES_CPU)
        for kv in sorted({kv_small, kv_mid})
        if cuda or b * kv <= DECODE_CPU_TOKENS
    ]


def measure(
    name: str,
    config: dict[str, Any],
    *,
    device: str = "auto",
    contexts: Sequence[int] | None = None,
    max_context: int | None = None,
    repeats: int = 3,
    dtype: str | None = None,
    seed: int = 0,
    where: str | None = None,
    progress: Progress | None = None,
) -> Profile:
    """Measure prefill, decode and reload of ``config``'s model on ``device``.

    ``device`` is ``auto`` (CUDA when torch sees a GPU, else the CPU), ``cpu``,
    ``cuda`` or ``cuda:N``. Each timing is the median of at least ``repeats``
    runs after a warm-up. Raises :class:`MeasureError` (a ``ValueError``) when
    the device is missing, the weights would not fit in half its memory, or the
    arguments cannot give a fit (or the model is no causal LM with a KV cache). ``where``
    names the model in errors (default ``name``).
    """
    where = where or name
    import torch  # heavy and optional: importing this module stays cheap

    report: Progress = progress or (lambda stage, done, total: None)
    if repeats < 1:
        raise MeasureError(f"repeats must be at least 1, got {repeats}")

    # -- device and dtype -------------------------------------------------------------
    dev = resolve_device(torch, device)
    cuda = dev.type == "cuda"
    kind = "cuda" if cuda else "cpu"
    dtype_name = resolve_dtype(torch, config, dtype, cuda, where)
    elem = models.DTYPE_BYTES[dtype_name]

    model_limit = models.max_context(config)
    grid = resolve_contexts(contexts, model_limit, max_context)
    if decode_room(model_limit, repeats) < 1:  # a decode point would run past the model's length
        raise MeasureError(
            f"{where}: its {model_limit} positions leave no room to time a decode step (a "
            f"prompt, a warm-up and up to {max(DECODE_MAX_STEPS, repeats)} timed steps)"
            + (
                f"; give --repeats {model_limit - 3} at most"
                if decode_room(model_limit, 1) >= 1
                else ""
            )
        )
    planned = decode_pairs(grid[0], grid[-1], model_limit, cuda, repeats)
    if len(planned) < 3:  # refused now, not after every prefill is timed
        raise MeasureError(
            f"--contexts from {grid[0]} tokens leave {len(planned)} decode point(s), 3 needed "
            f"(a CPU decodes at most {DECODE_CPU_TOKENS} tokens a batch); give a smaller "
            "first context"
        )
    kv_bytes = models.kv_bytes_per_token(config, dtype_name)

    # -- will the weights fit? ----------------------------------------------------------
    n_params = models.parameters(config)
    weight_bytes = n_params * elem
    available = free_bytes(torch, dev)
    if available > 0 and weight_bytes > WEIGHTS_MEMORY_SHARE * available:
        on = torch.cuda.get_device_name(dev) if cuda else "host memory"
        raise MeasureError(
            f"{where}: about {_gb(weight_bytes)} of {dtype_name} weights "
            f"({n_params / 1e9:.2f} B parameters) exceeds {WEIGHTS_MEMORY_SHARE:.0%} of the "
            f"{_gb(available)} available on {kind} ({on}); measure it on a bigger device "
            "or use a shipped roofline profile"
        )

    import transformers  # heavy (2 s): only when a model is built

    transformers_config = hf_config(config, where)  # a config it cannot build: refused first

    # -- reload: before the model, away from the slow copies that follow a large free --------
    reload, reload_notes = measure_reload(torch, dev, kv_bytes, repeats, report)

    # -- build the model (random weights, seeded) ---------------------------------------
    torch.manual_seed(seed)
    if cuda:
        torch.cuda.manual_seed_all(seed)
    report("build", 0, 1)
    # quiet while building: its advice on a model refused just below would be a second line
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    try:
        with torch.device(dev):
            model = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                transformers_config, dtype=getattr(torch, dtype_name)
            )
    finally:
        transformers.logging.set_verbosity(verbosity)
    model.eval()
    with torch.inference_mode():  # a model that keeps no KV cache cannot be timed decoding
        probe = model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=dev), use_cache=True)
    if getattr(probe, "past_key_values", None) is None:
        del model, probe
        raise MeasureError(
            f"{where}: transformers builds model_type {transformers_config.model_type!r} "
            "without a KV cache (not a causal decoder); nothing to time decoding"
        )
    del probe
    report("build", 1, 1)
    attention = str(getattr(model.config, "_attn_implementation", None) or "default")
    bench = Bench(torch, model, dev, repeats, seed)
    del model
    work_budget = WORK_MEMORY_SHARE * (free_bytes(torch, dev) or available)
    hidden = int(config["hidden_size"])
    inter = int(config.get("intermediate_size") or 4 * hidden)
    heads = int(config["num_attention_heads"])

    def prefill_bytes(tokens: int, longest: int) -> float:
        """A generous estimate of one prefill's peak memory (KV, activations, CPU scores)."""
        act = tokens * (kv_bytes + (8 * hidden + 3 * inter) * elem)
        scores = 0 if cuda else 4 * heads * longest * tokens  # CPU SDPA may materialise them
        return float(act + scores)

    oom: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, MemoryError)
    notes: dict[str, Any] = {}
    try:
        with torch.inference_mode():
            # -- prefill ------------------------------------------------------------------
            points: list[tuple[int, float]] = []
            report("prefill", 0, len(grid))
            for i, c in enumerate(grid):
                if prefill_bytes(c, c) > work_budget:
                    notes["prefill_stopped"] = f"{c} tokens would not fit in memory"
                    break
                try:
                    points.append((c, bench.prefill(c)))
                except oom:
                    notes["prefill_stopped"] = f"out of memory at {c} tokens"
                    break
                finally:
                    bench.release()
                report("prefill", i + 1, len(grid))
            if len(points) < 3:
                raise MeasureError(
                    f"{where}: only {len(points)} prefill point(s) measured "
                    f"({notes.get('prefill_stopped', '')}); give smaller contexts"
                )
            quad = fitmath.fit_quadratic([p[0] for p in points], [p[1] for p in points])

            # -- decode -------------------------------------------------------------------
            pairs = [
                (b, kv)
                for b, kv in decode_pairs(points[0][0], points[-1][0], model_limit, cuda, repeats)
                if prefill_bytes(b * kv, kv) <= work_budget
            ]
            dpoints: list[tuple[int, float, float]] = []
            report("decode", 0, len(pairs))
            for j, (b, kv) in enumerate(pairs):
                try:
                    mean_kv, seconds = bench.decode(b, kv)
                    # the batch's KV tokens, as the vLLM path records them (and the fit reads)
                    dpoints.append((b, b * mean_kv, seconds))
                except oom:
                    notes.setdefault("decode_skipped", []).append([b, kv])
                finally:
                    bench.release()
                report("decode", j + 1, len(pairs))
            if len(dpoints) < 3:
                raise MeasureError(f"{where}: only {len(dpoints)} decode point(s) measured")
            dfit = fitmath.fit_decode(
                [p[0] for p in dpoints], [p[1] for p in dpoints], [p[2] for p in dpoints]
            )
    finally:
        bench.model = None  # free the weights
        bench.release()

    source: dict[str, Any] = {
        "kind": "measured",
        "engine": "torch-eager",
        "not_vllm": "Hugging Face transformers in eager torch, not the vLLM engine the "
        "replay prices (ttlctl profile without --torch measures through vLLM)",
        "device_kind": kind,
        "cpu_profile": not cuda,
        "how": "profiles/measure_torch.py",
        "torch": torch.__version__,
        "transformers": str(transformers.__version__),
        "dtype": dtype_name,
        "repeats": repeats,
        "threads": torch.get_num_threads(),
        "seed": seed,
        "weights": "random (built locally from config.json)",
        "parameters": n_params,
        "attention": attention,
        "reload": reload_notes["reload"],
        "decode_points": [[b, kv, s] for b, kv, s in dpoints],
        "reload_points": reload_notes["reload_points"],
        "fit": {
            "prefill_max_rel_error": quad.max_rel_error,
            "decode_max_rel_error": dfit.max_rel_error,
            "reload_max_rel_error": reload_notes["reload_max_rel_error"],
        },
        **notes,
    }
    for v in (quad.a, quad.b, quad.q, reload.bandwidth_bytes_per_s, reload.latency_s):
        if not math.isfinite(v):
            raise MeasureError(f"{where}: the fit gave a non-finite coefficient ({v})")
    return Profile(
        name=f"{name}-{kind}",
        device=torch.cuda.get_device_name(dev) if cuda else _cpu_name(),
        model=name,
        kv_bytes_per_token=kv_bytes,
        max_context=model_limit,
        prefill=Prefill(quad.a, quad.b, quad.q, tuple(points), quad.rmse_s, includes_step=True),
        reload=reload,
        decode=Decode(dfit.step_s, dfit.per_seq_s, dfit.per_kv_token_s),
        source=source,
    )
