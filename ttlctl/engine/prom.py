"""Process-wide Prometheus series, made once: the plugin's pin counters and bundle series.

``prometheus_client``'s default registry refuses a second series of one name, and every
scheduler in a process shares it, so each set of series is made by the first scheduler
that asks (:class:`ProcessSeries`) and handed to the others. ``prometheus_client`` is
vLLM's dependency: it is imported only when series are made, so the plugin's import
stays light where no metrics are wanted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

#: makes the series from ``prometheus_client``'s ``Counter`` and ``Gauge`` classes
Make = Callable[[Any, Any], dict[str, Any]]


class ProcessSeries:
    """One set of series for the whole process, made by ``make`` on first use."""

    def __init__(self, make: Make) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._series: dict[str, Any] | None = None

    def get(self) -> dict[str, Any] | None:
        """The series (made once); None without ``prometheus_client``, or when another
        owner in this process registered the names first."""
        with self._lock:
            if self._series is not None:
                return self._series
            try:
                # lazy: keeps the plugin's import light (vLLM's dependency, for /metrics only)
                from prometheus_client import Counter, Gauge
            except ImportError:  # pragma: no cover - vLLM depends on it
                return None
            try:
                series = self._make(Counter, Gauge)
            except ValueError:  # already registered by someone else in this process
                return None
            self._series = series
            return series
