"""Plain-text tables for the CLI's own output, fitted to the terminal's width.

On a terminal a table fits its width (``shutil.get_terminal_size``, which also reads
``COLUMNS``): the widest column is cut by one character at a time, its cells ending in "…",
until the rows fit or every column is down to its heading's width. Written to a pipe or a file,
rows keep their full width, so nothing a script or ``grep`` reads is cut (``--json`` is the
form meant for scripts).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence

GAP = "  "
LEAST = 8  # a column is never cut narrower than this (or its heading, if wider)


def terminal_width() -> int | None:
    """The width to fit stdout's tables to: the terminal's, or None when stdout is not one."""
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):  # replaced or closed stdout
        return None
    return shutil.get_terminal_size().columns


def fit(rows: Sequence[Sequence[str]], width: int | None, keep: Sequence[int] = (),
        right: Sequence[bool] = ()) -> str:
    """The rows (the first is the heading) as columns, each row at most ``width`` characters
    when it can be (None: no limit). The columns in ``keep`` are never cut (a reference to
    copy); those ``right`` marks True are right-aligned (numbers), the others left-aligned."""
    if not rows:
        return ""
    count = len(rows[0])
    widths = [max(len(row[i]) for row in rows) for i in range(count)]
    if width is not None:
        floor = [w if i in keep else min(w, max(len(rows[0][i]), LEAST))
                 for i, w in enumerate(widths)]
        excess = sum(widths) + len(GAP) * (count - 1) - width
        while excess > 0:
            i = max(range(count), key=lambda k: widths[k] - floor[k])
            if widths[i] <= floor[i]:
                break
            widths[i] -= 1
            excess -= 1
    lines = []
    for row in rows:
        cells = [_cut(cell, widths[i]) for i, cell in enumerate(row)]
        cells = [cell.rjust(widths[i]) if i < len(right) and right[i] else cell.ljust(widths[i])
                 for i, cell in enumerate(cells)]
        lines.append(GAP.join(cells).rstrip())
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"
