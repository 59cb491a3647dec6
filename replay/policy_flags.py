"""The policy options of a replay and the policies that read them: the names ``--policy``
lists (:func:`listed`, ``replay``'s and ``validate``'s, and ``validate --router``'s), and
an option that none of the asked policies reads, said, not silently dropped (`--policy vllm
--bundle b.json` replayed stock vLLM and said nothing of the bundle it never used)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ttlctl.errors import ConfigError

#: each policy option and the policies that read it (:func:`replay.policies.registry.make`)
READERS: dict[str, tuple[str, ...]] = {
    "--bundle": ("continuum",),
    "--valve": ("continuum", "static-ttl", "oracle"),
    "--pin-cap": ("continuum", "static-ttl", "oracle"),
    "--ttl-seconds": ("static-ttl",),
}


def listed(given: Sequence[str], flag: str = "--policy") -> list[str]:
    """The names ``flag`` was given, each value a name or a comma list of them, spaces
    around a name dropped; :class:`ConfigError` for an empty one (``--policy ''``, ``a,,b``,
    ``a,``), which would leave a policy out without a word, or run none at all."""
    names: list[str] = []
    for value in given:
        parts = [n.strip() for n in value.split(",")]
        if "" in parts:
            raise ConfigError(
                f"{flag} {value!r}: an empty name; give a name, or several comma-separated (a,b)"
            )
        names += parts
    return names


def unread(names: Collection[str], given: Collection[str]) -> list[str]:
    """One line for each option ``given`` (its flag) that none of the policies ``names``
    reads."""
    asked = ", ".join(names)
    return [
        f"{flag} is read only by {_either(readers)}, and --policy {asked} runs none of them: "
        "it changes nothing here"
        for flag, readers in READERS.items()
        if flag in given and not set(readers) & set(names)
    ]


def _either(names: tuple[str, ...]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
