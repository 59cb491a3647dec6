"""PNG plots of a fit: each tool's CDF with its exponential fit, beside the global CDF."""

from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np

from fitting.fit_doc import CdfDoc, FitDoc, ToolFit
from ttlctl.jsonio import write_atomic, write_json

#: The file beside the PNGs that names each one's tool (a name may not survive as a file).
INDEX = "index.json"
#: The stem of the all-tools plot.
GLOBAL = "global"


def _safe(name: str) -> str:
    """A file name from an untrusted tool name: portable characters only, 80 at most."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "tool"
    return cleaned[:80]


def file_names(tools: list[str]) -> dict[str, str]:
    """Each tool's PNG file, given the tools sorted (``global.png`` is all tools').

    A name that is a safe file name as it is keeps it (``grep.png``). One that is not
    (``git/commit``, ``ünïcode``, 200 characters), or whose file is taken already (a tool
    named ``global``; ``bash`` after ``Bash``, one file on macOS and Windows, whose file
    names ignore case), or that Windows keeps for a device (``con``, ``nul``, ``com1`` …),
    gets 8 hex digits of the name's SHA-256 after its safe form and a
    ``~`` (``git_commit~2ab6e9bb.png``), a character no safe form holds: no two names share
    a file, whatever the file system, and a name gets the same file in every fit that holds
    the same tools. :data:`INDEX` maps the files back to their tools."""
    taken = {GLOBAL}
    files: dict[str, str] = {}
    for name in tools:
        stem, digits = _safe(name), 8
        digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
        tagged = stem != name or stem.casefold() in taken or _reserved(stem)
        while tagged and f"{stem}~{digest[:digits]}".casefold() in taken:
            digits += 8  # two names' first 8 digits alike: more of the hash tells them apart
        if tagged:
            stem = f"{stem}~{digest[:digits]}"
        taken.add(stem.casefold())
        files[name] = f"{stem}.png"
    return files


#: names Windows keeps for devices, whatever the extension (``con.png`` opens the console)
_DEVICES = frozenset(
    {
        "con",
        "prn",
        "aux",
        "nul",
        *(f"com{i}" for i in range(1, 10)),
        *(f"lpt{i}" for i in range(1, 10)),
    }
)


def _reserved(stem: str) -> bool:
    return stem.split(".", 1)[0].casefold() in _DEVICES


def _is_num(value: object) -> TypeGuard[float]:
    """A number a label can show (the report draws fits read from any run folder)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def step(ax: Any, cdf: CdfDoc, **kw: Any) -> None:
    """A compressed CDF (``x``, ``p``) as a right-continuous step from (0, 0)."""
    x = np.r_[0.0, np.asarray(cdf["x"], dtype=float)]
    p = np.r_[0.0, np.asarray(cdf["p"], dtype=float)]
    ax.step(x, p, where="post", **kw)


def draw_cdf(ax: Any, entry: ToolFit, everything: ToolFit | None) -> float:
    """One tool's pause CDF on ``ax``, as the fit's PNGs and the report both draw it: the
    empirical CDF, its exponential fit (dashed) and, when given, the all-tools CDF (grey).
    Returns the x axis' end: the largest pause, at least 1 ms."""
    cdf = entry["cdf"]
    n = entry.get("n")
    step(ax, cdf, color="C0", lw=1.8, label="empirical" + (f" (n={n:,})" if _is_num(n) else ""))
    upper = max(float(cdf["x"][-1]), 1e-3)
    exp = entry.get("exponential")
    rate = exp.get("rate") if isinstance(exp, dict) else None
    if isinstance(exp, dict) and _is_num(rate):
        grid = np.linspace(0.0, upper, 400)
        mean, ks = exp.get("mean_s"), exp.get("ks")
        words = f" (mean {mean:.3g} s, KS {ks:.2f})" if _is_num(mean) and _is_num(ks) else ""
        ax.plot(grid, 1 - np.exp(-float(rate) * grid), color="C1", ls="--", label=f"Exp fit{words}")
    if everything is not None and everything["cdf"]["x"]:
        step(ax, everything["cdf"], color="0.6", lw=1.0, label="all tools")
    return upper


def plot_fit(fit: FitDoc, out_dir: Path) -> list[Path]:
    """Write ``<tool>.png`` per tool (and ``global.png``), named by :func:`file_names`, and
    :data:`INDEX` (``{"global": file, "tools": {tool: file}}``); returns the PNGs' paths.
    Each file is written whole or not at all (:func:`~ttlctl.jsonio.write_atomic`, as every
    output), and carries no software version, so that the same fit draws the same bytes."""
    # pyplot and its Agg backend only when plots are drawn (importing this module is light)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    everything = fit["global"]  # None only in a bundle's empty fit
    tools = [(name, entry) for name, entry in sorted(fit["tools"].items()) if entry["n"] != 0]
    files = file_names([name for name, _ in tools])
    # (title, entry, file, the all-tools CDF drawn beside it)
    drawn: list[tuple[str, ToolFit, str, ToolFit | None]] = [
        (name, entry, files[name], everything) for name, entry in tools
    ]
    has_global = everything is not None and everything["n"] != 0
    if everything is not None and has_global:
        drawn.insert(0, (GLOBAL, everything, f"{GLOBAL}.png", None))
    written: list[Path] = []
    for name, entry, file, beside in drawn:
        fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
        upper = draw_cdf(ax, entry, beside)
        ax.set_xscale("symlog", linthresh=max(upper / 1000, 1e-3))
        ax.set_xlim(0, upper)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("pause after the call (s)")
        ax.set_ylabel("P(pause ≤ τ)")
        trusted = "" if entry.get("trusted", True) else " — below K: the policy uses all tools"
        ax.set_title(name.replace("$", r"\$") + trusted, fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        fig.tight_layout()
        path = out_dir / file
        png = io.BytesIO()
        fig.savefig(png, format="png", metadata={"Software": None})
        plt.close(fig)
        write_atomic(png.getvalue(), path)
        written.append(path)
    before = _indexed(out_dir / INDEX)
    write_json({GLOBAL: f"{GLOBAL}.png" if has_global else None, "tools": files}, out_dir / INDEX)
    for stale in before - {path.name for path in written}:
        (out_dir / stale).unlink(missing_ok=True)  # an earlier fit's tool this one lacks
    return written


def _indexed(index: Path) -> set[str]:
    """The PNGs an earlier :func:`plot_fit` listed in its :data:`INDEX` (only those: the
    folder's other files are the user's); none when there is none, or it is unreadable."""
    try:
        doc = json.loads(index.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return set()
    if not isinstance(doc, dict):
        return set()
    tools = doc.get("tools")
    names = [doc.get(GLOBAL), *(tools.values() if isinstance(tools, dict) else ())]
    return {n for n in names if isinstance(n, str) and n.endswith(".png") and Path(n).name == n}
