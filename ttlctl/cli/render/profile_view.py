"""Profiles: the shipped ones, and one just measured."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from profiles import shipped
from profiles.profile_read import from_json, load
from profiles.router_calibration import RouterCalibration
from profiles.schema import ProfileDoc
from ttlctl.cli.render.cells import show


def shipped_table(console: Console) -> None:

    table = Table(title=f"shipped profiles ({shipped.DATA})")
    for col in (
        "name",
        "model",
        "GPUs",
        "device",
        "source",
        "KV B/token",
        "prefill 8k",
        "prefill 32k",
    ):
        right = col.startswith(("KV", "prefill", "GPUs"))
        table.add_column(col, justify="right" if right else "left")
    for name in shipped.names():
        p = load(shipped.DATA / f"{name}.json")
        table.add_row(
            name,
            p.model,
            _gpus(p.device, p.source),
            p.device,
            str(p.source.get("kind", "?")) + ("*" if "prefill_mfu_measured" in p.source else ""),
            f"{p.kv_bytes_per_token:,}",
            f"{p.prefill_s(8192):.3f} s",
            f"{p.prefill_s(32768):.3f} s",
        )
    show(console, table)
    console.print(
        "a name says the model and the GPU kind; GPUs: how many the model is served on "
        "(tensor parallel); roofline*: its prefill utilisation measured on that GPU "
        "(source.prefill_mfu_measured). Use one with --profile NAME; measure your own with "
        "`ttlctl profile -o profile.json`",
        highlight=False,
    )


def _gpus(device: str, source: Mapping[str, Any]) -> str:
    """How many GPUs a profile is served on: its tensor parallelism, else the count its
    device names ("4x H100": 4, "H100": 1); a CPU's: —."""
    if source.get("device_kind") == "cpu":
        return "—"
    tp = (source.get("assumptions") or {}).get("tensor_parallel")
    if isinstance(tp, int):
        return str(tp)
    count, sep, _ = device.partition("x ")
    return count if sep and count.isdigit() else "1"


def profile_table(console: Console, doc: ProfileDoc) -> None:
    p = from_json(doc)
    src = p.source
    how = " ".join(str(src[k]) for k in ("engine", "vllm") if k in src)
    how = f"{src.get('kind')}, {how}" if how else str(src.get("kind"))
    table = Table(title=f"{p.name}: {p.model} on {p.device} ({how})")
    table.add_column("context", justify="right")
    table.add_column("measured", justify="right")
    chunk = p.chunk_tokens
    table.add_column("priced by replay" if chunk else "fit", justify="right")
    for tokens, seconds in p.prefill.points:
        fit = p.rebuild_prefill_s(tokens, chunk)
        table.add_row(f"{tokens:,}", f"{seconds * 1000:,.2f} ms", f"{fit * 1000:,.2f} ms")
    show(console, table)
    cached, pair = p.prefill.per_cached_token_s, p.prefill.per_context_pair_s
    console.print(
        (f"a prompt token found cached {cached * 1e6:,.2f} µs; " if cached else "")
        + (
            f"a new token's attention over one in KV {pair * 1e9:,.2f} ns; "
            if pair is not None
            else ""
        )
        + f"KV {p.kv_bytes_per_token:,} B/token; "
        f"reload {p.reload.bandwidth_bytes_per_s / 1e9:,.1f} GB/s "
        f"+ {p.reload.latency_s * 1e6:,.0f} µs; decode step {p.decode.step_s * 1000:,.2f} ms "
        f"+ {p.decode.per_seq_s * 1e6:,.1f} µs/seq "
        f"+ {p.decode.per_kv_token_s * 1e9:,.2f} ns/KV token"
    )
    if p.wake:
        console.print(f"after idle: {wake_text(p.wake)}", highlight=False)
    if p.new_shape:
        sizes = ", ".join(f"{n:,.0f} tokens +{extra * 1000:,.1f} ms" for n, extra in p.new_shape)
        console.print(f"a step size new to the engine: {sizes}", highlight=False)


def wake_text(points: Sequence[tuple[float, float]]) -> str:
    """A call's extra after each idle spell measured: ``0.1 s +10.5 ms, 1 s +15.7 ms``."""
    return ", ".join(f"{idle:g} s +{extra * 1000:,.1f} ms" for idle, extra in points)


def router_calibration(console: Console, cal: RouterCalibration, ref: str) -> None:
    """Each of the router's coefficients: its value and unit, and the profile term it is;
    then the router's command line, whose ``ttlctl profile --profile REF --as vllm-router``
    prints the same value: ``ref`` is the profile as given (a file, or a shipped name),
    with the ``--decode-throughput-alpha`` given."""
    table = Table(
        title=f"vllm-router Program scheduling from profile {cal.profile} "
        "(--program-scheduling-config-json)"
    )
    for col in ("router field", "value", "unit", "from the profile"):
        table.add_column(
            col, justify="right" if col == "value" else "left", no_wrap=col == "router field"
        )
    for row in cal.rows():
        table.add_row(row.field, f"{row.value:.6g}", row.unit, row.source)
    show(console, table)
    alpha = cal.prefill.decode_throughput_alpha
    given = f" --decode-throughput-alpha {alpha!r}" if cal.alpha_measured else ""
    console.print(
        "start the router with: vllm-router --enable-program-scheduling "
        '--program-scheduling-config-json "$(ttlctl profile --profile '
        f'{shlex.quote(ref)} --as vllm-router{given})" …',
        markup=False,  # a path's [brackets] are text
    )
