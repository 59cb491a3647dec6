"""The profiles shipped in ``profiles/data`` and how a ``--profile`` argument finds one."""

from __future__ import annotations

from pathlib import Path

from profiles.profile_read import ProfileError, load
from profiles.schema import Profile

DATA = Path(__file__).parent / "data"


def names() -> list[str]:
    return sorted(p.stem for p in DATA.glob("*.json"))


def resolve(ref: str | Path) -> tuple[Profile, Path]:
    """A profile from a file path or a shipped name (``llama-3.1-8b-h100``)."""
    path = Path(ref)
    if path.exists():
        return load(path), path
    shipped = DATA / f"{ref}.json"
    if shipped.exists():
        return load(shipped), shipped
    raise ProfileError(
        f"{ref}: no such profile file or shipped profile (see `ttlctl profile --list`; "
        f"shipped: {', '.join(names()[:4])} …)"
    )
