"""The server's gauges during a live run: ``/metrics`` read every half second in a thread.

Kept per sample: ``ttlctl:pinned_blocks`` (the TTL scheduler's pinned KV),
``vllm:kv_cache_usage_perc`` and ``vllm:num_requests_waiting``, each with the
``perf_counter`` time of the read. A read that fails is skipped.
"""

from __future__ import annotations

import threading
import time

from ttlctl.server import client, prom
from ttlctl.server.client import ServerError


class Sampler:
    """Samples ``/metrics`` gauges every ``every_s`` seconds in a thread (0: never), as a
    ``with`` block."""

    def __init__(self, url: str, every_s: float) -> None:
        self.url = url
        self.every_s = every_s
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ttlctl-metrics", daemon=True)

    def __enter__(self) -> Sampler:
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10.0)

    def _loop(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            try:
                values = prom.parse_metrics(client.text(self.url, "/metrics", timeout_s=5.0))
            except ServerError:
                values = None
            if values is not None:
                keep = {k: values[k] for k in prom.GAUGES if k in values}
                self.samples.append((t, keep))
            self._stop.wait(self.every_s)
