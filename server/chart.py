"""The per-request chart of a conversation's window, shared by the live view and ``replay --html``
(docs/live-view.md): tokens sent, the full history and the budget as lines, the cut's advances
marked, and under them one stacked bar per request of what the provider's cache did with it —
read, written, uncached. Inline SVG: no script, no fonts to fetch.

Each line carries its values (``data-values``) and each bar its figures (``data-read``,
``data-write``, ``data-uncached``), so a test can hold the picture against the JSON it was
drawn from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

WIDTH, HEIGHT = 900, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 40
COLOURS = {"sent": "#2563eb", "full": "#9ca3af", "budget": "#dc2626", "cut": "#f59e0b",
           "read": "#86efac", "write": "#fca5a5", "uncached": "#c4b5fd"}
LABELS = {"sent": "tokens sent", "full": "full history", "budget": "budget",
          "read": "cache read", "write": "cache write", "uncached": "uncached"}


def short(value: float) -> str:
    """A tick label: 950, 12k, 1.5M."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.3g}M"
    if value >= 1_000:
        return f"{value / 1_000:.3g}k"
    return f"{value:.3g}"


def nice_top(value: float) -> float:
    """The smallest 1, 2, 2.5, 4, 5 or 8 × 10ⁿ at or above ``value`` (the y axis' top)."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 4, 5, 8, 10) if step * power >= value)


def _number(point: Mapping[str, Any], key: str) -> float | None:
    value = point.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        else None


def request_chart(points: Sequence[Mapping[str, Any]], label: str = "The window per request",
                  standalone: bool = False) -> str:
    """One chart of a conversation's requests. Each point: ``sent``, ``full``, ``budget``
    (tokens), ``advanced`` (the cut moved at it), and, where the provider reported them,
    ``cache_read_tokens``, ``cache_write_tokens`` and ``input_tokens`` (uncached)."""
    count = len(points)
    lines = {name: [_number(p, name) for p in points] for name in ("full", "sent")}
    budgets = [b for p in points if (b := _number(p, "budget")) is not None]
    bars = [(_number(p, "cache_read_tokens") or 0.0, _number(p, "cache_write_tokens") or 0.0,
             _number(p, "input_tokens") or 0.0) for p in points]
    highest = max([v or 0.0 for values in lines.values() for v in values]
                  + budgets + [sum(b) for b in bars] + [0.0])
    top = nice_top(highest)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / max(count, 1)

    def x(index: int) -> float:
        return LEFT + step * (index + 0.5)

    def y(value: float) -> float:
        return TOP + plot_h - value / top * plot_h

    height = HEIGHT + (26 if standalone else 0)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
             f'role="img" aria-label="{escape(label)}" class="request-chart" '
             f'font-family="system-ui, -apple-system, Segoe UI, sans-serif" '
             f'data-count="{count}" data-ymax="{top!r}"><title>{escape(label)}</title>']
    if standalone:
        parts.append('<rect width="100%" height="100%" fill="#ffffff"/>')
    for tick in range(5):
        value = top * tick / 4
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}" stroke="#e5e7eb"/>'
                     f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" '
                     f'font-size="12" fill="#4b5563">{short(value)}</text>')
    bottom = TOP + plot_h
    every = max(1, round(count / 10))
    for index in range(0, count, every):
        parts.append(f'<text x="{x(index):.1f}" y="{bottom + 16}" text-anchor="middle" '
                     f'font-size="12" fill="#4b5563">{index + 1}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 4}" text-anchor="middle" '
                 f'font-size="12" fill="#374151">request</text>')
    width = max(1.0, min(24.0, step * 0.7))
    for index, (read, write, uncached) in enumerate(bars):
        if not read + write + uncached:
            continue
        base = 0.0
        shapes = []
        for name, value in (("read", read), ("write", write), ("uncached", uncached)):
            if value:
                shapes.append(f'<rect x="{x(index) - width / 2:.1f}" '
                              f'y="{y(base + value):.1f}" width="{width:.1f}" '
                              f'height="{y(base) - y(base + value):.1f}" '
                              f'fill="{COLOURS[name]}"/>')
                base += value
        parts.append(f'<g class="bar" data-index="{index}" data-read="{read:g}" '
                     f'data-write="{write:g}" data-uncached="{uncached:g}"><title>request '
                     f'{index + 1}: cache read {read:,.0f}, written {write:,.0f}, uncached '
                     f'{uncached:,.0f}</title>{"".join(shapes)}</g>')
    if budgets:
        path = " ".join(f"{'M' if i == 0 else 'L'}{x(i) - step / 2:.1f},{y(b):.1f} "
                        f"L{x(i) + step / 2:.1f},{y(b):.1f}"
                        for i, b in enumerate(_number(p, "budget") or budgets[-1]
                                              for p in points))
        parts.append(f'<path class="budget" d="{path}" fill="none" '
                     f'stroke="{COLOURS["budget"]}" stroke-dasharray="6 4" stroke-width="1.5">'
                     f'<title>budget {budgets[-1]:,.0f} tokens</title></path>')
    for name, values in lines.items():
        known = [(i, v) for i, v in enumerate(values) if v is not None]
        points_text = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in known)
        data = ",".join(f"{v:g}" for _, v in known)
        parts.append(f'<polyline class="series {name}" data-series="{name}" '
                     f'data-values="{data}" points="{points_text}" fill="none" '
                     f'stroke="{COLOURS[name]}" stroke-width="{4 if name == "full" else 2.5}" '
                     f'stroke-linejoin="round"/>')
    for index, point in enumerate(points):
        if point.get("advanced"):
            value = _number(point, "sent") or 0.0
            parts.append(f'<path class="mark cut" data-index="{index}" '
                         f'd="M{x(index) - 6:.1f},{y(value) - 14:.1f} '
                         f'L{x(index) + 6:.1f},{y(value) - 14:.1f} L{x(index):.1f},'
                         f'{y(value) - 3:.1f} Z" fill="{COLOURS["cut"]}"><title>request '
                         f'{index + 1}: the cut advances</title></path>')
    if standalone:
        parts.append(_legend())
    parts.append("</svg>")
    return "".join(parts)


def _legend() -> str:
    row = HEIGHT + 14
    out, left = [], float(LEFT)
    for name in ("sent", "full", "budget", "read", "write", "uncached"):
        if name in ("read", "write", "uncached"):
            out.append(f'<rect x="{left}" y="{row - 9}" width="14" height="10" '
                       f'fill="{COLOURS[name]}"/>')
        else:
            dash = ' stroke-dasharray="6 4"' if name == "budget" else ""
            out.append(f'<line x1="{left}" x2="{left + 18}" y1="{row - 4}" y2="{row - 4}" '
                       f'stroke="{COLOURS[name]}" stroke-width="3"{dash}/>')
        out.append(f'<text x="{left + 22}" y="{row}" font-size="12" fill="#111827">'
                   f"{LABELS[name]}</text>")
        left += 34 + 7 * len(LABELS[name])
    out.append(f'<path d="M{left},{row - 10} L{left + 12},{row - 10} L{left + 6},{row} Z" '
               f'fill="{COLOURS["cut"]}"/><text x="{left + 18}" y="{row}" font-size="12" '
               'fill="#111827">cut advances</text>')
    return "".join(out)
