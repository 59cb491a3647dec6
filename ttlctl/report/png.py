"""Plots as the report embeds them: a matplotlib figure (no pyplot, no global state) that
becomes an ``<img>`` with a PNG ``data:`` URI, and labels made safe from untrusted text."""

from __future__ import annotations

import base64
import io
import re

from matplotlib.figure import Figure

from ttlctl.report.markup import e

#: plot labels longer than this are cut (with …)
LABEL_CHARS = 48
#: the page's column (``max-width:1240px`` in :data:`~ttlctl.report.markup.CSS`) at the
#: figures' 100 dpi: a wider figure is shrunk to it, its text with it
PAGE_INCHES = 12.4


def figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def img(fig: Figure, alt: str) -> str:
    """The figure as an <img> with a PNG data: URI; no metadata (no URL) in the PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    width, height = (round(v * fig.dpi) for v in fig.get_size_inches())
    return (
        f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
        f'alt="{e(alt)}" title="{e(alt)}">'
    )


def label(value: object, limit: int = LABEL_CHARS) -> str:
    """A plot label from untrusted text: one line, short, no mathtext (``$`` escaped)."""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def tokens(n: float) -> str:
    """A token count as an axis or a legend shows it: 8k, 128k, 512."""
    return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"
