"""A profile's reload figures: time host-to-device copies of KV-sized buffers with torch.

Reloading a context from a host (CPU) tier is a copy of its KV: ``tokens ×
kv_bytes_per_token`` bytes. :func:`measure_reload` copies buffers of
:data:`RELOAD_TOKENS` tokens' worth from pinned host memory to the device (on a
CPU, where there is no host tier, a plain memory copy; the returned notes say
so), each the median of a fixed number of runs after a warm-up, and fits
``latency + bytes / bandwidth`` (:func:`fit_reload`). Buffers are capped to a
share of the memory available. Callers time it before they build a model: on an
H200, just after a large block of device memory was freed (a model deleted, the
cache emptied) copies ran slow for a while, a 2 MiB copy 1.1 ms against 0.05 ms
and a 128 MiB one 5.6 ms against 2.4, which read as a 1 ms latency; with 16 or
116 GiB held, or a model resident after a forward pass (as in a serving engine),
they ran as in a fresh process (docs/benchmarks.md). torch is passed in by the caller (who has
imported it already), so importing this module stays cheap.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.optimize import nnls

from profiles import host
from profiles.schema import Reload

RELOAD_TOKENS = (16, 1024, 8192, 32768)
#: timed copies per size (at least; ``repeats`` when larger)
RELOAD_RUNS = 10

Progress = Callable[[str, int, int], None]


def fit_reload(nbytes: Sequence[float], seconds: Sequence[float]) -> tuple[float, float, float]:
    """``seconds ≈ latency + bytes / bandwidth`` (non-negative, relative error).

    Returns (bandwidth bytes/s, latency s, max relative error).
    """
    x = np.asarray(nbytes, dtype=np.float64)
    y = np.asarray(seconds, dtype=np.float64)
    if x.size < 2 or x.size != y.size or np.any(y <= 0):
        raise ValueError("the reload model needs at least 2 positive timings")
    scale = np.array([1.0, x.max()])
    design = np.stack([np.ones_like(x), x], axis=1) / scale
    w = 1.0 / y
    coef, _ = nnls(design * w[:, None], y * w)
    latency, per_byte = (coef / scale).tolist()
    largest = float(y[np.argmax(x)])
    if per_byte * x.max() <= 1e-9 * largest:
        # no copy took longer as it grew (times flat, the slope a rounding's, or falling):
        # bound the bandwidth by the largest copy's, not by a slope of nothing
        per_byte = largest / float(x.max())
        latency = 0.0
    pred = latency + per_byte * x
    return 1.0 / per_byte, float(latency), float(np.max(np.abs(pred - y) / y))


def _copy_s(torch: Any, dev: Any, nbytes: int, runs: int) -> float:
    """Median seconds of copying ``nbytes`` from (pinned, on CUDA) host memory to ``dev``."""
    cuda = dev.type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=cuda)
    src.fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst.copy_(src, non_blocking=cuda)  # warm-up: page faults, pinning
    times: list[float] = []
    for _ in range(runs):
        sync()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=cuda)
        sync()
        times.append(time.perf_counter() - t0)
    del src, dst
    if cuda:
        torch.cuda.empty_cache()
    return max(float(statistics.median(times)), 1e-9)


def measure_reload(
    torch: Any, dev: Any, kv_bytes: int, repeats: int = 1, progress: Progress | None = None
) -> tuple[Reload, dict[str, Any]]:
    """(reload model, notes for the profile's ``source``) of copies to ``dev``.

    The notes hold ``reload`` (what was copied), ``reload_points`` ([bytes,
    seconds]) and ``reload_max_rel_error``. ``progress("reload", done, total)``
    is called after each size.
    """
    report: Progress = progress or (lambda stage, done, total: None)
    cuda = dev.type == "cuda"
    avail = host.available_bytes()
    if cuda:
        cap = 0.1 * min(avail or 2**62, int(torch.cuda.mem_get_info(dev)[0]))
    else:
        cap = 0.05 * avail
    sizes = [t * kv_bytes for t in RELOAD_TOKENS if t * kv_bytes <= cap] or [kv_bytes]
    runs = max(repeats, RELOAD_RUNS)
    points: list[tuple[int, float]] = []
    report("reload", 0, len(sizes))
    for k, nbytes in enumerate(sizes):
        points.append((nbytes, _copy_s(torch, dev, nbytes, runs)))
        report("reload", k + 1, len(sizes))
    if len(points) == 1:
        bandwidth, latency, error = points[0][0] / points[0][1], 0.0, 0.0
    else:
        bandwidth, latency, error = fit_reload([p[0] for p in points], [p[1] for p in points])
    notes = {
        "reload": (
            "cuda: pinned host to device copy, one contiguous buffer"
            if cuda
            else "cpu: memory copy, no host tier"
        ),
        "reload_points": [[n, s] for n, s in points],
        "reload_max_rel_error": error,
    }
    return Reload(float(bandwidth), float(latency)), notes
