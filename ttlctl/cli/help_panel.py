"""``--help``'s panels of options with every option name whole: an adapter to typer's rich
help (not a copy of it).

typer (0.29) prints a panel of options as a rich table of seven columns (required, long
names, short names, ``--no-`` names, their short names, type, help) and gives rich no
width for any; on a narrow console rich shrinks the names with the help, so at 80
columns ``--kv-aware-session-affinity-ttl-secs`` printed as ``--kv-aware-ses…`` (and
``--program-scheduling-config-json`` and ``--program-scheduling-calibration`` both as
``--program-sche…``). typer has no setting for its columns, and its seven columns do not
fit 80 with names of 36 characters, whatever the help column is given. So
:func:`install` replaces the one function of typer's that builds that table
(``typer.rich_utils._print_options_panel``, a private name: where it or another of the
:data:`USED` names is missing, as in typer 0.27 and older, typer's own stays) with
:func:`options_panel`: three columns (the required mark; the names,
never wrapped, with the type under them; the help, which wraps), each cell made by
typer's own pieces (its help text with defaults, highlighters and styles).
``tests/cli/test_help_names.py`` renders the commands' help at 80 columns.
"""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import Console, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer import rich_utils
from typer.core import TyperArgument, TyperOption

#: the function of typer's that :func:`install` replaces
TYPER_PANEL = "_print_options_panel"
#: what :func:`options_panel` reads of typer (0.29) besides its styles: a typer without one
#: of them keeps its own table (typer 0.27's parameters have no ``display_type_rich``)
USED: tuple[tuple[Any, tuple[str, ...]], ...] = (
    (rich_utils, (TYPER_PANEL, "_get_parameter_help", "highlighter", "negative_highlighter",
                  "types_highlighter", "RANGE_STRING", "REQUIRED_SHORT_STRING")),
    (TyperArgument, ("display_name_raw", "display_type_rich", "_get_number_range_help_str")),
    (TyperOption, ("display_type_rich", "_get_number_range_help_str")),
)  # fmt: skip


#: the widest a pair of names (``--x / --no-x``) prints on one line
NAMES_WIDTH = 40


def names_cell(param: Any, ctx: Any) -> Text:
    """A parameter's names (``--check / --no-check``, ``--help, -h``; an argument's
    display name), highlighted as typer does, with its type on the next line."""
    if isinstance(param, TyperArgument):
        shown = param.display_name_raw
        if param.metavar is None and param.nargs != 1:
            shown += "..."
        names = Text(shown)
    else:
        ordered = sorted(param.opts, key=lambda o: not o.startswith("--"))  # long ones first
        names = rich_utils.highlighter(Text(", ".join(ordered)))
        if param.secondary_opts:
            negative = ", ".join(param.secondary_opts)
            # a pair too long for one line (vLLM's --long-prefill-token-threshold-adaptive /
            # --no-…: 84 characters) takes two, or the column would leave the help no room
            one_line = len(names.plain) + 3 + len(negative) <= NAMES_WIDTH
            names.append(" / " if one_line else " /\n")
            names.append_text(rich_utils.negative_highlighter(Text(negative)))
    names.no_wrap = True
    kind = param.display_type_rich(ctx=ctx)
    span = param._get_number_range_help_str()
    shown_type = (kind or "") + (rich_utils.RANGE_STRING.format(span) if span else "")
    if shown_type:
        names.append("\n")
        names.append_text(
            rich_utils.types_highlighter(Text(shown_type.strip(), style=rich_utils.STYLE_TYPES))
        )
    return names


def options_panel(
    *,
    name: str,
    params: list[Any],
    ctx: Any,
    markup_mode: Any,
    console: Console,
) -> None:
    """typer's ``_print_options_panel``, in three columns whose names are never cut."""
    if not params:
        return
    required = any(p.required for p in params)
    table = Table(
        highlight=True,
        show_header=False,
        expand=True,
        box=getattr(box, rich_utils.STYLE_OPTIONS_TABLE_BOX, None),
        show_lines=rich_utils.STYLE_OPTIONS_TABLE_SHOW_LINES,
        leading=rich_utils.STYLE_OPTIONS_TABLE_LEADING,
        border_style=rich_utils.STYLE_OPTIONS_TABLE_BORDER_STYLE,
        row_styles=rich_utils.STYLE_OPTIONS_TABLE_ROW_STYLES,
        pad_edge=rich_utils.STYLE_OPTIONS_TABLE_PAD_EDGE,
        padding=rich_utils.STYLE_OPTIONS_TABLE_PADDING,
    )
    if required:
        table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)  # the names: whole, whatever the console's width
    table.add_column(ratio=1)  # the help takes what is left, and wraps
    for param in params:
        row: list[RenderableType] = [
            names_cell(param, ctx),
            rich_utils._get_parameter_help(param=param, ctx=ctx, markup_mode=markup_mode),
        ]
        if required:
            mark = rich_utils.REQUIRED_SHORT_STRING if param.required else ""
            row.insert(0, Text(mark, style=rich_utils.STYLE_REQUIRED_SHORT))
        table.add_row(*row)
    console.print(
        Panel(
            table,
            border_style=rich_utils.STYLE_OPTIONS_PANEL_BORDER,
            title=name,
            title_align=rich_utils.ALIGN_OPTIONS_PANEL,
        )
    )


def install() -> bool:
    """Make typer's help print :func:`options_panel` (idempotent); False where this typer
    lacks what it uses (:data:`USED`: its own table stays)."""
    if not all(hasattr(owner, name) for owner, names in USED for name in names):
        return False
    setattr(rich_utils, TYPER_PANEL, options_panel)
    return True
