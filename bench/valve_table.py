"""The live valve table: ``ttlctl validate --json`` files gathered into one Markdown table.

Files are named ``<trace>-<arm>-<tag>.json`` where ``arm`` is ``vllm``, ``head`` or
``stall-only`` (the bundle's valve; continuum's runs) and ``tag`` tells the
invocations apart; one file may hold several runs (``--repeats``). For every trace and
arm the table gives the simulator's mean JCT, mean TTFT and prefix-hit rate (the same
in every file of a cell: the simulator is deterministic) and the live runs' mean and
range; then, per trace, the live stall-only/head ratios of the runs made side by side
(the same tag, in order), and whether the two valves' live ranges overlap.

    python3 bench/valve_table.py DIR [--traces a,b,c]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ARMS = ("vllm", "head", "stall-only")
NAME = re.compile(r"^(?P<trace>[^-]+)-(?P<arm>vllm|head|stall-only)-(?P<tag>[^.]+)\.json$")
METRICS = (
    ("jct_mean_s", "mean JCT"),
    ("ttft_mean_s", "mean TTFT"),
    ("prefix_hit_rate", "prefix hit rate"),
)


@dataclass
class Cell:
    """One trace and arm: the simulator's figures and every live run (tag, metrics)."""

    sim: dict[str, float] = field(default_factory=dict)
    runs: list[tuple[str, dict[str, float]]] = field(default_factory=list)


def runs_of(live: dict[str, Any]) -> list[dict[str, Any]]:
    """The live runs of one policy in a validate document (merged or single)."""
    return list(live["runs"]) if "runs" in live else [live]


def gather(folder: Path) -> dict[tuple[str, str], Cell]:
    cells: dict[tuple[str, str], Cell] = {}
    for path in sorted(folder.glob("*.json")):
        match = NAME.match(path.name)
        if match is None:
            continue
        doc = json.loads(path.read_text())
        policy = "vllm" if match["arm"] == "vllm" else "continuum"
        if policy not in doc["live"]:
            raise SystemExit(f"{path}: no live {policy} run")
        cell = cells.setdefault((match["trace"], match["arm"]), Cell())
        sim = {k: float(doc["sim"][policy][k]) for k, _ in METRICS}
        if cell.sim and any(abs(cell.sim[k] - v) > 1e-9 for k, v in sim.items()):
            raise SystemExit(f"{path}: the simulator differs from another file of this cell")
        cell.sim = sim
        for run in runs_of(doc["live"][policy]):
            cell.runs.append((match["tag"], {k: float(run[k]) for k, _ in METRICS}))
    return cells


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _fmt(key: str, value: float, unit: bool = True) -> str:
    if key == "prefix_hit_rate":
        return f"{100 * value:.1f}" + ("%" if unit else "")
    return f"{value:.1f}" + (" s" if unit else "")


def table(cells: dict[tuple[str, str], Cell], traces: list[str]) -> list[str]:
    lines = [
        "| trace | metric | arm | simulated | live mean | live range | runs |",
        "|---|---|---|---|---|---|---|",
    ]
    for trace in traces:
        for key, label in METRICS:
            for arm in ARMS:
                cell = cells.get((trace, arm))
                if cell is None:
                    continue
                values = [r[key] for _, r in cell.runs]
                low, high = _fmt(key, min(values), unit=False), _fmt(key, max(values))
                lines.append(
                    f"| {trace} | {label} | {arm} | {_fmt(key, cell.sim[key])} | "
                    f"{_fmt(key, _mean(values))} | {low} – {high} | {len(values)} |"
                )
    return lines


def verdicts(cells: dict[tuple[str, str], Cell], traces: list[str]) -> list[str]:
    """Per trace: the paired stall-only/head JCT ratios and whether the ranges overlap."""
    lines = []
    for trace in traces:
        head, stall = cells.get((trace, "head")), cells.get((trace, "stall-only"))
        if head is None or stall is None:
            continue
        key = "jct_mean_s"
        ratios = []
        for tag in dict.fromkeys(tag for tag, _ in head.runs):
            h_runs = [r[key] for t, r in head.runs if t == tag]
            s_runs = [r[key] for t, r in stall.runs if t == tag]
            ratios += [s / h for h, s in zip(h_runs, s_runs, strict=False)]
        h = [r[key] for _, r in head.runs]
        s = [r[key] for _, r in stall.runs]
        overlap = max(min(h), min(s)) <= min(max(h), max(s))
        sim = stall.sim[key] / head.sim[key]
        paired = ", ".join(f"{x:.2f}" for x in ratios) or "none"
        lines.append(
            f"- {trace}: stall-only/head mean JCT live {_mean(s) / _mean(h):.2f} "
            f"(paired runs: {paired}), simulated {sim:.2f}; live ranges "
            f"{'overlap' if overlap else 'do not overlap'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--traces", default=None, help="comma-separated, in this order")
    args = parser.parse_args(argv)
    cells = gather(args.folder)
    if not cells:
        print(f"{args.folder}: no <trace>-<arm>-<tag>.json files", file=sys.stderr)
        return 2
    traces = args.traces.split(",") if args.traces else sorted({t for t, _ in cells})
    print("\n".join([*table(cells, traces), "", *verdicts(cells, traces)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
