"""``--help``'s prose flows to the console's width: a paragraph's line breaks in a command's
docstring are spaces.

typer (0.29) keeps the single line breaks of a help text's paragraphs after the first
(``typer.rich_utils._fix_linebreaks`` joins the paragraphs and nothing else; older typers
joined each paragraph's lines), so a docstring written to 88 columns printed at 80 ragged:
a line of text, then a line of one word, in turn. :func:`install` replaces that function
with :func:`flowed`: each paragraph's lines joined by spaces, except a paragraph that
starts with ``\\b`` (click's mark for "keep my lines"), whose lines stay as written. Where
typer has no such function (another version), its own stays. A command's line in its
group's list is its docstring's first paragraph on one line (:func:`summary`).
"""

from __future__ import annotations

import inspect
from typing import Any

from typer import rich_utils

#: the function of typer's that :func:`install` replaces
TYPER_PROSE = "_fix_linebreaks"
#: click's mark, on a paragraph's first line, for a paragraph whose lines stay
KEEP = "\b"


def flowed(paragraphs: list[str], markup_mode: Any = None) -> str:
    """The paragraphs after a help text's first, each on one line (those marked
    :data:`KEEP`: as written, without the mark), a blank line between them."""
    return "\n\n".join(
        p.removeprefix(KEEP).lstrip("\n") if p.startswith(KEEP) else " ".join(p.split("\n"))
        for p in paragraphs
    )


def summary(docstring: str | None) -> str | None:
    """A command's line in its group's list (click's ``short_help``): its docstring's
    first paragraph on one line (typer lists it with the docstring's line breaks, so a
    summary wrapped in the source broke mid-sentence at any width)."""
    if not docstring:
        return None
    first = inspect.cleandoc(docstring).split("\n\n", 1)[0]
    return " ".join(first.split())


def install() -> bool:
    """Make typer's help flow its paragraphs (idempotent); False where this typer has no
    :data:`TYPER_PROSE` (its own stays)."""
    if not hasattr(rich_utils, TYPER_PROSE):
        return False
    setattr(rich_utils, TYPER_PROSE, flowed)
    return True
