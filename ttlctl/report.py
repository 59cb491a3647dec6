"""``ttlctl report``: a run directory → one self-contained HTML page.

The page shows the trace, the per-tool pause CDFs with their exponential fits and
the τ* the bundle's policy picks, τ* against context length, JCT per policy, the
KV held by pins over time, and the tuner's history and parameter importance.
Each input is optional: a missing or unreadable one leaves a short note.

Safety: every string in the page that comes from a run's files (tool names,
program ids, policy names, paths, parameter names) is HTML-escaped, attributes
included, and mathtext is switched off for it in the plots. The page has no
script, no link and no external URL: plots are PNG ``data:`` URIs (without
matplotlib's metadata), the CSS is inline, and a Content-Security-Policy forbids
loading anything else.
"""

from __future__ import annotations

import base64
import errno
import html
import io
import json
import math
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import polars as pl
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter

from fitting.fit_doc import CdfDoc
from ttlctl import __version__
from ttlctl import bundle as bundle_mod
from ttlctl.errors import TtlctlError
from ttlctl.jsonio import file_sha256, write_atomic
from ttlctl.plots import step
from ttlctl.trace import io as trace_io
from ttlctl.trace.summary import summarize

FILES = ("trace.parquet", "fit.json", "bundle.json", "replay.json", "tune.json")
MAX_TOOL_PLOTS = 12
MAX_ROWS = 50
MARKER_CONTEXTS = (1_000, 8_000, 32_000, 128_000)
CONTEXT_GRID = tuple(float(c) for c in np.geomspace(256, 262_144, 41))
LABEL_CHARS = 48

CSS = """
body{font:14px/1.45 "DejaVu Sans",Arial,sans-serif;color:#1a1a1a;background:#fff;
margin:0 auto;max-width:1240px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #ccc;
padding-bottom:3px;margin-top:28px}
nav a{margin-right:12px;color:#333}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all}
.note{color:#555;font-style:italic}.missing{color:#777}
.grid{display:flex;flex-wrap:wrap;gap:10px}
figure{margin:0}figcaption{font-size:12px;color:#444;max-width:520px;word-break:break-all}
img{max-width:100%;height:auto;border:1px solid #eee}
"""
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


class ReportError(TtlctlError, ValueError):
    """No report can be made (no such directory, or nothing in it); one line."""


def _e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape(str(value), quote=True)


def _label(value: Any, limit: int = LABEL_CHARS) -> str:
    """A plot label from untrusted text: one line, short, no mathtext (``$`` escaped)."""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("$", r"\$")


def _num(value: Any) -> str:
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
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3g}"
    if isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, default=str)
        return text if len(text) <= 200 else text[:199] + "…"
    return str(value)


def _pct(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, (int, float)) and math.isfinite(value) else "—"


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="n">{_e(_num(v))}</td>' if _is_num(v) else f"<td>{_e(_num(v))}</td>"
            for v in row
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _kv(mapping: Mapping[str, Any]) -> str:
    return _table(("key", "value"), ((k, v) for k, v in mapping.items()))


def _note(text: str, missing: bool = False) -> str:
    return f'<p class="note{" missing" if missing else ""}">{_e(text)}</p>'


def _absent(name: str) -> str:
    return _note(f"not in this run: no {name}", missing=True)


# ---------------------------------------------------------------- plots


def _figure(width: float, height: float) -> Any:
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _img(fig: Any, alt: str) -> str:
    """The figure as an <img> with a PNG data: URI; no metadata (no URL) in the PNG."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    width, height = (round(v * fig.dpi) for v in fig.get_size_inches())
    return (
        f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" '
        f'alt="{_e(alt)}" title="{_e(alt)}">'
    )


def _tokens(n: float) -> str:
    return f"{n / 1000:g}k" if n >= 1000 else f"{n:g}"


# ---------------------------------------------------------------- inputs


@dataclass
class _RunInputs:
    root: Path
    paths: dict[str, Path] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    trace: Any = None
    fit: dict[str, Any] | None = None
    fit_source: str = "fit.json"
    bundle: bundle_mod.Bundle | None = None
    policy: Any = None
    replay: dict[str, Any] | None = None
    tune: dict[str, Any] | None = None

    @property
    def queue_delay_s(self) -> float:
        """T for the τ* shown: continuum's mean queueing delay in the replay, else 0."""
        for r in (self.replay or {}).get("results") or []:
            if isinstance(r, dict) and r.get("policy") == "continuum":
                value: Any = r.get("queue_mean_s")
                if _is_num(value) and math.isfinite(value) and value >= 0:
                    return float(value)
        return 0.0


def _json(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict):
        raise ValueError("not a JSON object")
    return doc


def _load(root: Path) -> _RunInputs:
    if not root.exists():
        raise ReportError(f"{root}: no such directory")
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    run = _RunInputs(root)
    run.paths = {name: root / name for name in FILES if (root / name).is_file()}
    if not run.paths:
        raise ReportError(f"{root}: none of {', '.join(FILES)}; nothing to report")
    loaders: dict[str, Callable[[Path], None]] = {
        "trace.parquet": lambda p: setattr(run, "trace", trace_io.read(p)),
        "fit.json": lambda p: setattr(run, "fit", _json(p)),
        "bundle.json": lambda p: setattr(run, "bundle", bundle_mod.read(p)),
        "replay.json": lambda p: setattr(run, "replay", _json(p)),
        "tune.json": lambda p: setattr(run, "tune", _json(p)),
    }
    for name, path in run.paths.items():
        try:
            loaders[name](path)
        except Exception as exc:  # a damaged input is a note in the page, not a crash
            run.problems[name] = (str(exc).splitlines() or [type(exc).__name__])[0]
    if run.bundle is not None:
        try:
            run.policy = bundle_mod.policy_from(run.bundle)
        except Exception as exc:
            run.problems["bundle.json"] = f"no policy: {exc}"
        if run.fit is None and isinstance(run.bundle.get("fit"), dict):
            run.fit, run.fit_source = dict(run.bundle["fit"]), "bundle.json (its fit)"
    return run


# ---------------------------------------------------------------- sections


def _inputs(run: _RunInputs) -> str:
    hashes: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    for name in FILES:
        path = run.paths.get(name)
        if path is None:
            rows.append((name, "not in this run", None, None))
            continue
        hashes[name] = file_sha256(path)
        status = f"unreadable: {run.problems[name]}" if name in run.problems else "read"
        rows.append((name, status, path.stat().st_size, hashes[name]))
    parts = [
        f"<p>Run directory: <code>{_e(run.root.resolve())}</code> — "
        f"report by ttlctl {_e(__version__)}</p>",
        _table(("file", "status", "bytes", "sha256"), rows),
    ]
    own = {"trace": hashes.get("trace.parquet"), "fit": hashes.get("fit.json")}
    bundle_ids = {hashes.get("bundle.json"), run.bundle and run.bundle.get("sha256")} - {None}
    refs = []
    for doc_name, doc in (
        ("fit.json", run.fit if run.fit_source == "fit.json" else None),
        ("bundle.json", run.bundle),
        ("replay.json", run.replay),
        ("tune.json", run.tune),
    ):
        if not doc:
            continue
        entries = {"trace": doc.get("input")} if doc_name == "fit.json" else dict(doc)
        provenance = doc.get("provenance")
        if isinstance(provenance, dict):
            entries.update(provenance)
        for key, ref in entries.items():
            if not isinstance(ref, dict) or "sha256" not in ref:
                continue
            sha = ref.get("sha256")
            if key == "bundle":
                match = "yes" if sha in bundle_ids else ("no" if bundle_ids else "—")
            elif own.get(key):
                match = "yes" if sha == own[key] else "no"
            else:
                match = "—"
            refs.append((doc_name, key, ref.get("path"), sha, match))
    if refs:
        parts.append("<p>What each input says it was made from:</p>")
        parts.append(_table(("in", "input", "recorded path", "sha256", "this run's file"), refs))
    return "".join(parts)


def _trace(run: _RunInputs) -> str:
    if run.trace is None:
        return _absent("trace.parquet")
    frame = run.trace
    s = summarize(frame.lazy())
    tok = s["tokens"]
    rows = [
        (label, st["count"], st["p50"], st["p90"], st["p99"], st["mean"])
        for label, st in (
            ("calls per program", s["calls_per_program"]),
            ("input tokens per call", tok["input_per_call"]),
            ("output tokens per call", tok["output_per_call"]),
            ("tool_s (measured tool time)", s["tool_s"]),
            ("gap_s (idle before next call)", s["gap_s"]),
            ("llm_s (call latency)", s["llm_s"]),
        )
    ]
    parts = [
        f"<p>{s['programs']:,} programs, {s['calls']:,} calls; tokens: input "
        f"{tok['input']:,}, output {tok['output']:,}, reused {tok['reused']:,}.</p>",
        _table(("quantity", "count", "p50", "p90", "p99", "mean"), rows),
    ]
    tools = s["tools"]
    if tools["distinct"]:
        parts.append(
            f"<p>Tools: {tools['distinct']:,} distinct, {tools['calls_with_tool']:,} calls "
            f"(the {len(tools['top'])} most called):</p>"
        )
        parts.append(
            _table(
                ("tool", "calls", "timed", "tool_s p50", "gap_s p50"),
                (
                    (t["tool"], t["calls"], t["timed"], t["tool_s_p50"], t["gap_s_p50"])
                    for t in tools["top"]
                ),
            )
        )
    else:
        parts.append(_note("No tool named in this trace."))
    top = (
        frame.group_by("program_id")
        .agg(pl.len().alias("calls"), pl.col("input_tokens").max().alias("context"))
        .sort(["calls", "program_id"], descending=[True, False])
        .head(5)
    )
    parts.append("<p>Programs with the most calls:</p>")
    parts.append(
        _table(
            ("program", "calls", "largest input (tokens)"),
            ((r["program_id"], r["calls"], r["context"]) for r in top.iter_rows(named=True)),
        )
    )
    return "".join(parts)


def _ranked_tools(fit: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    tools = fit.get("tools") or {}
    entries = [(str(k), v) for k, v in tools.items() if isinstance(v, dict)]
    return sorted(entries, key=lambda kv: (-int(kv[1].get("n") or 0), kv[0]))


def _decide(run: _RunInputs, tool: str | None, context: float, t: float) -> Any:
    return run.policy.decide(tool, context, queue_delay_s=t)


def _cdfs(run: _RunInputs) -> str:
    if run.fit is None:
        return _absent("fit.json (nor a bundle.json with its fit)")
    fit, t_ref = run.fit, run.queue_delay_s
    parts = [f"<p>From {_e(run.fit_source)}.</p>"]
    eta = fit.get("eta") or {}
    if isinstance(eta, dict) and eta:
        parts.append(
            f"<p>η = {_e(_num(eta.get('value')))} (95% interval {_e(_num(eta.get('ci_low')))} "
            f"… {_e(_num(eta.get('ci_high')))}); K = {_e(_num(fit.get('k')))}: a tool needs "
            "more than K pauses before the policy uses its own CDF.</p>"
        )
    if run.policy is None:
        parts.append(_absent("bundle.json: τ* markers not drawn"))
    else:
        parts.append(
            f"<p>Vertical lines: the bundle's τ* at {', '.join(map(_tokens, MARKER_CONTEXTS))} "
            f"tokens of context, with T (queueing delay) = {t_ref:.3g} s, no offload.</p>"
        )
    ranked = _ranked_tools(fit)
    everything = fit.get("global") if isinstance(fit.get("global"), dict) else None
    figures = []
    colours = ("#2ca02c", "#d62728", "#9467bd", "#8c564b")
    for name, entry in ranked[:MAX_TOOL_PLOTS]:
        cdf = entry.get("cdf") or {}
        if not cdf.get("x"):
            continue
        fig = _figure(3.8, 2.9)
        ax = fig.subplots()
        label = f"empirical (n={_num(entry.get('n'))})"
        step(ax, cast(CdfDoc, cdf), color="C0", lw=1.8, label=label)
        upper = max(float(cdf["x"][-1]), 1e-3)
        exp = entry.get("exponential")
        if isinstance(exp, dict) and _is_num(exp.get("rate")):
            grid = np.linspace(0.0, upper, 300)
            ax.plot(
                grid,
                1 - np.exp(-float(exp["rate"]) * grid),
                color="C1",
                ls="--",
                label=f"Exp fit (mean {_num(exp.get('mean_s'))} s, KS {_num(exp.get('ks'))})",
            )
        if everything and (everything.get("cdf") or {}).get("x"):
            step(ax, everything["cdf"], color="0.65", lw=1.0, label="all tools")
        if run.policy is not None:
            for colour, context in zip(colours, MARKER_CONTEXTS, strict=True):
                d = _decide(run, name, context, t_ref)
                upper = max(upper, d.ttl_s)
                ax.axvline(
                    d.ttl_s,
                    color=colour,
                    ls=":",
                    lw=1.6,
                    label=f"τ* @ {_tokens(context)} = {d.ttl_s:.3g} s ({d.source})",
                )
        positive = [float(v) for v in cdf["x"] if v > 0]
        low = min(positive) if positive else upper
        ax.set_xscale("symlog", linthresh=max(low, upper / 1e4, 1e-3))
        ax.set_xlim(0, upper * 1.02)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("pause after the call (s)")
        ax.set_ylabel("P(pause ≤ τ)")
        below = "" if entry.get("trusted", True) else "\n(≤ K pauses: τ* from all tools)"
        ax.set_title(_label(name, 40) + below, fontsize=8.5)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=5.5, loc="lower right")
        alt = f"pause CDF of tool {name}"
        figures.append(f"<figure>{_img(fig, alt)}<figcaption>{_e(name)}</figcaption></figure>")
    parts.append(f'<div class="grid">{"".join(figures)}</div>')
    if len(ranked) > MAX_TOOL_PLOTS:
        parts.append(
            _note(
                f"{len(ranked) - MAX_TOOL_PLOTS} less frequent tool(s) not plotted; see the table."
            )
        )
    rows = []
    for name, entry in ranked[:MAX_ROWS]:
        exp = entry.get("exponential") if isinstance(entry.get("exponential"), dict) else {}
        taus = (
            [_decide(run, name, c, t_ref).ttl_s for c in MARKER_CONTEXTS]
            if run.policy is not None
            else [None] * len(MARKER_CONTEXTS)
        )
        rows.append(
            (
                name,
                entry.get("n"),
                entry.get("p50_s"),
                entry.get("p90_s"),
                (exp or {}).get("mean_s"),
                (exp or {}).get("ks"),
                entry.get("trusted"),
                *taus,
            )
        )
    headers = ("tool", "n", "p50 s", "p90 s", "exp mean s", "KS", "trusted")
    parts.append(_table((*headers, *(f"τ* @ {_tokens(c)}" for c in MARKER_CONTEXTS)), rows))
    if len(ranked) > MAX_ROWS:
        parts.append(_note(f"{len(ranked) - MAX_ROWS} more tool(s) not listed."))
    return "".join(parts)


def _tau(run: _RunInputs) -> str:
    if run.policy is None:
        return _absent("bundle.json" if "bundle.json" not in run.problems else "usable bundle.json")
    t_ref = run.queue_delay_s
    tvals = [0.0] if t_ref == 0 else [0.0, t_ref]
    ranked = [name for name, _ in _ranked_tools(run.fit or {})]
    own = [n for n in ranked if _decide(run, n, 1000.0, 0.0).source == "tool"][:MAX_TOOL_PLOTS]
    fig = _figure(5.6 * len(tvals) + 0.6, 4.2)
    axes = fig.subplots(1, len(tvals), squeeze=False)[0]
    for ax, t in zip(axes, tvals, strict=True):
        glob = [_decide(run, None, c, t) for c in CONTEXT_GRID]
        ax.plot(CONTEXT_GRID, [d.benefit_s for d in glob], color="0.6", ls=":", label="B (s)")
        ax.plot(
            CONTEXT_GRID,
            [d.ttl_s for d in glob],
            color="k",
            ls="--",
            lw=1.6,
            label=f"all tools ({glob[0].source})",
        )
        for i, name in enumerate(own):
            ax.plot(
                CONTEXT_GRID,
                [_decide(run, name, c, t).ttl_s for c in CONTEXT_GRID],
                color=f"C{i % 10}",
                lw=1.4,
                label=_label(name, 32),
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("symlog", linthresh=0.01)
        ticks = [256, 1024, 4096, 16384, 65536, 262144]
        ax.set_xticks(ticks, ["256", "1k", "4k", "16k", "64k", "256k"])
        ax.set_ylim(bottom=0)
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("τ* (s)")
        ax.set_title(f"T = {t:.3g} s", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    params = run.policy.params
    parts = [
        f"<p>τ* = argmax P(τ)·B − τ with B = T·η + reload(context); η = {params.eta:.3g}, "
        f"K = {params.k}. Tools with at most K pauses use the all-tools curve "
        f"({len(ranked) - len(own)} of {len(ranked)}).</p>",
        _img(fig, "tau* against context length"),
        "<p>The bundle's policy parameters:</p>",
        _kv(params.to_json()),
    ]
    return "".join(parts)


def _results(run: _RunInputs) -> list[dict[str, Any]]:
    results = (run.replay or {}).get("results") or []
    return [r for r in results if isinstance(r, dict)]


def _jct(run: _RunInputs) -> str:
    if run.replay is None:
        return _absent("replay.json")
    results = _results(run)
    if not results:
        return _note("replay.json holds no results.")
    names = [str(r.get("policy", "?")) for r in results]
    fig = _figure(max(6.0, 0.9 * len(results) + 2), 4.0)
    ax = fig.subplots()
    xs = np.arange(len(results))
    means = [float(r["jct_mean_s"]) if _is_num(r.get("jct_mean_s")) else 0.0 for r in results]
    bound = [bool(r.get("evaluation_only")) for r in results]
    ax.bar(xs, means, color=["#cfcfcf" if b else "C0" for b in bound], label="mean")
    hatched = [(x, m) for x, m, b in zip(xs, means, bound, strict=True) if b]
    if hatched:
        ax.bar(*zip(*hatched, strict=True), color="none", hatch="//", edgecolor="0.3")
    for key, marker, colour in (("jct_p95_s", "v", "C1"), ("jct_p99_s", "^", "C3")):
        pts = [(x, r[key]) for x, r in zip(xs, results, strict=True) if _is_num(r.get(key))]
        if pts:
            ax.scatter(
                *zip(*pts, strict=True), marker=marker, color=colour, zorder=3, label=key[4:7]
            )
    handles, _ = ax.get_legend_handles_labels()
    if hatched:
        handles.append(
            Patch(facecolor="#cfcfcf", hatch="//", edgecolor="0.3", label="evaluation-only")
        )
    ax.set_xticks(xs, [_label(n, 20) for n in names], rotation=30, ha="right")
    ax.set_ylabel("job completion time (s)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    rows = [
        (
            r.get("policy"),
            "bound" if r.get("evaluation_only") else "",
            r.get("jct_mean_s"),
            r.get("jct_p50_s"),
            r.get("jct_p95_s"),
            r.get("jct_p99_s"),
            _pct(r.get("prefix_hit_rate")),
            r.get("preemptions"),
            r.get("pinned_token_seconds"),
            _pct(r.get("gap_closed")),
        )
        for r in results
    ]
    headers = ("policy", "eval-only", "JCT mean", "p50", "p95", "p99")
    parts = [
        "<p>Mean JCT per policy (bars) with p95 and p99 (markers); hatched grey bars are "
        "evaluation-only bounds (they read what no engine can know). Gap closed: share of "
        "the vLLM → unlimited-KV mean-JCT gap.</p>",
        _img(fig, "JCT per policy"),
        _table(
            (*headers, "prefix hits", "preemptions", "pinned tok·s", "gap closed"),
            rows,
        ),
    ]
    config = run.replay.get("config")
    if isinstance(config, dict):
        parts.append("<p>Replay configuration:</p>" + _kv(config))
    return "".join(parts)


def _pinned(run: _RunInputs) -> str:
    if run.replay is None:
        return _absent("replay.json")
    lines, idle = [], []
    for r in _results(run):
        tl = r.get("pinned_timeline") if isinstance(r.get("pinned_timeline"), dict) else {}
        t, v = (tl or {}).get("t_s") or [], (tl or {}).get("pinned_tokens") or []
        name = str(r.get("policy", "?"))
        if t and len(t) == len(v) and any(v):
            lines.append((name, np.asarray(t, dtype=float), np.asarray(v, dtype=float)))
        else:
            idle.append(name)
    parts = []
    if lines:
        span = max(float(t.max()) for _, t, _ in lines)
        unit, div = ("h", 3600.0) if span > 7200 else ("s", 1.0)
        fig = _figure(9.0, 3.8)
        ax = fig.subplots()
        for i, (name, t, v) in enumerate(lines):
            ax.step(
                t / div,
                v,
                where="post",
                color=f"C{i % 10}",
                lw=1.2,
                alpha=0.85,
                label=_label(name, 24),
            )
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel(f"simulated time ({unit})")
        ax.set_ylabel("KV tokens held by pins")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper right")
        parts.append(_img(fig, "KV occupied by pins over time"))
        parts.append(_note("Each point is the peak over its slice of the replay."))
    else:
        parts.append(_note("No policy held any pin in this replay."))
    if idle:
        parts.append(_note("No pins (or no timeline): " + ", ".join(idle)))
    return "".join(parts)


def _tune(run: _RunInputs) -> str:
    if run.tune is None:
        return _absent("tune.json")
    tune = run.tune
    trials = [t for t in tune.get("trials") or [] if isinstance(t, dict)]
    maximize = str(tune.get("direction", "minimize")).lower().startswith("max")
    done = [
        (int(t["number"]) if _is_num(t.get("number")) else i, float(t["value"]))
        for i, t in enumerate(trials)
        if _is_num(t.get("value"))
        and math.isfinite(t["value"])
        and str(t.get("state", "COMPLETE")).upper() == "COMPLETE"
    ]
    states: dict[str, int] = {}
    for t in trials:
        states[str(t.get("state", "?"))] = states.get(str(t.get("state", "?")), 0) + 1
    parts = [
        f"<p>{len(trials)} trial(s) ({_e(', '.join(f'{k}: {v}' for k, v in states.items()))}); "
        f"objective {'maximised' if maximize else 'minimised'}.</p>"
    ]
    if done:
        done.sort()
        nums = [n for n, _ in done]
        vals = [v for _, v in done]
        best = np.maximum.accumulate(vals) if maximize else np.minimum.accumulate(vals)
        fig = _figure(6.5, 3.6)
        ax = fig.subplots()
        ax.scatter(nums, vals, s=14, color="C0", label="trial value")
        ax.step(nums, best, where="post", color="C3", lw=1.6, label="best so far")
        ax.set_xlabel("trial")
        ax.set_ylabel("objective (mean JCT, s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        parts.append(_img(fig, "Optuna optimisation history"))
    else:
        parts.append(_note("No completed trial with a value."))
    importance = tune.get("importance")
    pairs = (
        sorted(
            ((str(k), float(v)) for k, v in importance.items() if _is_num(v)),
            key=lambda kv: kv[1],
        )
        if isinstance(importance, dict)
        else []
    )
    if pairs:
        fig = _figure(6.5, 0.8 + 0.35 * len(pairs))
        ax = fig.subplots()
        ax.barh([_label(k, 32) for k, _ in pairs], [v for _, v in pairs], color="C2")
        ax.set_xlabel("importance")
        ax.grid(axis="x", alpha=0.3)
        parts.append(_img(fig, "parameter importance"))
    else:
        parts.append(_note("Parameter importance: not in this run (not computed)."))
    best_doc = tune.get("best")
    if isinstance(best_doc, dict):
        flat = {k: v for k, v in best_doc.items() if k != "params"}
        if isinstance(best_doc.get("params"), dict):
            flat.update({f"params.{k}": v for k, v in best_doc["params"].items()})
        parts.append("<p>Best trial:</p>" + _kv(flat))
    held = tune.get("held_back")
    if isinstance(held, dict):
        parts.append("<p>Held-back evaluation:</p>" + _kv(held))
    return "".join(parts)


SECTIONS: tuple[tuple[str, str, Callable[[_RunInputs], str]], ...] = (
    ("inputs", "Inputs", _inputs),
    ("trace", "Trace", _trace),
    ("cdfs", "Pause CDFs per tool", _cdfs),
    ("tau", "τ* against context length", _tau),
    ("jct", "JCT per policy", _jct),
    ("pinned", "KV held by pins over time", _pinned),
    ("tune", "Tuning history and parameter importance", _tune),
)


def build_report(run_dir: Path) -> str:
    """The HTML page of a run directory; :class:`ReportError` if there is nothing to show."""
    run = _load(Path(run_dir))
    body = []
    with warnings.catch_warnings():
        # tool names may use glyphs the plot font lacks: a box is drawn, no need to warn
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        for sid, title, build in SECTIONS:
            try:
                content = build(run)
            except Exception as exc:  # one odd input must not cost the whole page
                content = _note(f"this section could not be drawn: {type(exc).__name__}: {exc}")
            body.append(f'<section id="{sid}"><h2>{_e(title)}</h2>{content}</section>')
    nav = "".join(f'<a href="#{sid}">{_e(title)}</a>' for sid, title, _ in SECTIONS)
    name = run.root.resolve().name or str(run.root)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>ttlctl report: {_e(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>ttlctl report: {_e(name)}</h1><nav>{nav}</nav>" + "".join(body) + "</body></html>\n"
    )


def write_html(text: str, path: Path) -> None:
    """Write the page atomically: the file is whole or absent, never half-written."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    write_atomic(text, path)
