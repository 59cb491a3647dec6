"""Small helpers for talking to a vLLM server: its URL, and its Prometheus text."""

from __future__ import annotations

import re

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def normalise_url(url: str) -> str:
    """``host:port``, ``http://host:port/`` or ``…/v1`` → ``http://host:port``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def metric_labels(text: str, name: str) -> dict[str, str]:
    """The labels of the first sample of ``name`` (e.g. ``vllm:cache_config_info``)."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body = line[len(name) + 1 : line.rfind("}")]
            return dict(_LABEL.findall(body))
    return {}


def int_label(labels: dict[str, str], key: str) -> int | None:
    """A positive integer label, or None."""
    try:
        value = int(float(labels[key]))
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None
