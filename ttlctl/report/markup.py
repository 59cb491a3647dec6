"""HTML primitives of the report: escaping, numbers as text, tables and notes, the page's
CSS and Content-Security-Policy. Every string from a run's files goes through :func:`e`
(text and quoted attributes alike)."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ttlctl.percent import NONE, share

CSS = """
body{font:14px/1.45 "DejaVu Sans",Arial,sans-serif;color:#1a1a1a;background:#fff;
margin:0 auto;max-width:1240px;padding:16px 24px}
h1{font-size:22px;margin:8px 0;overflow-wrap:anywhere}
h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:28px}
nav a{margin-right:12px;color:#333}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all}
.note{color:#555;font-style:italic}.missing{color:#777}
.grid{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0}figcaption{font-size:12px;color:#444;max-width:520px;word-break:break-all}
img{max-width:100%;height:auto;border:1px solid #eee}
details{margin:6px 0}summary{font-weight:bold;cursor:pointer;margin:4px 0}
"""
#: nothing but inline styles and data: images
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def num(value: Any) -> str:
    """A value as a table shows it: thousands separated, a few significant digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        small = f"{value:.3g}"
        # 0.9996 is "1" in three significant digits: a float is never shown as a whole number
        return f"{value:.2f}" if abs(value) >= 1 or abs(float(small)) >= 1 else small
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= 200 else text[:199] + "…"
    return str(value)


def ratio(value: Any) -> Any:
    """A ratio (a gain: baseline / tuned mean JCT) as tune prints it, ``1.000x``; anything
    else as it is."""
    return f"{value:.3f}x" if is_num(value) and math.isfinite(value) else value


def pct(value: Any) -> str:
    """A share from a run's JSON as the command line writes it (:func:`ttlctl.percent.share`),
    or a dash when the value is not a number."""
    return share(value) if isinstance(value, (int, float)) else NONE


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    formats: Sequence[str | None] | None = None,
) -> str:
    """An HTML table; ``formats``: per column, a format spec for its numbers (None: as
    :func:`num` shows a value), so that a column of seconds reads at one precision."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    specs = list(formats or ())
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{e(_shown(v, specs[i] if i < len(specs) else None))}</td>'
            if is_num(v)
            else f"<td>{e(num(v))}</td>"
            for i, v in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _shown(value: float, spec: str | None) -> str:
    """A number as its column shows it (``spec``), else as :func:`num` does."""
    if spec is None or not math.isfinite(value):
        return num(value)
    return format(value, spec)


def kv(mapping: Mapping[str, Any]) -> str:
    return table(("key", "value"), ((k, v) for k, v in mapping.items()))


def note(text: str, missing: bool = False) -> str:
    return f'<p class="note{" missing" if missing else ""}">{e(text)}</p>'


def absent(name: str) -> str:
    return note(f"not in this run: no {name}", missing=True)
