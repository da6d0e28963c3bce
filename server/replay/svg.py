"""Inline SVG line charts for the replay report (docs/replay.md): no script, no fonts to fetch.

Each series is one ``<polyline>`` that carries its values (``data-values``) next to the points
drawn from them, and the chart states its scale (``data-ymax``, ``data-top``, ``data-height``),
so a test can hold the picture against the ``--json`` figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

from context_paging.server.chart import nice_top, short

WIDTH, HEIGHT = 900, 330
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 44
COLOURS = {"full": "#b8bcc4", "compaction": "#d97706", "window": "#2563eb", "budget": "#dc2626"}
# The full history is drawn first and widest: where another series equals it, it shows as a halo.
WIDTHS = {"full": 6, "compaction": 2.5, "window": 2.5}
LABELS = {"full": "full history", "compaction": "compaction baseline",
          "window": "select_context window"}


@dataclass(frozen=True)
class Mark:
    """An event at one request: drawn on ``series`` as a ``kind`` (cut, break, compaction)."""

    index: int
    series: str
    kind: str
    title: str


class Scale:
    def __init__(self, count: int, top: float) -> None:
        self.count, self.top = count, top
        self.plot_w = WIDTH - LEFT - RIGHT
        self.plot_h = HEIGHT - TOP - BOTTOM

    def x(self, index: int) -> float:
        return LEFT + (index * self.plot_w / (self.count - 1) if self.count > 1 else 0.0)

    def y(self, value: float) -> float:
        return TOP + self.plot_h - value / self.top * self.plot_h


def line_chart(series: Mapping[str, Sequence[float]], label: str, y_title: str,
               budget: float | None = None, marks: Sequence[Mark] = (),
               standalone: bool = False) -> str:
    """One chart of a value per request; ``budget`` draws a dashed horizontal line."""
    count = max((len(v) for v in series.values()), default=0)
    top = nice_top(max([max(v, default=0.0) for v in series.values()] + [budget or 0.0]))
    scale = Scale(count, top)
    parts = [_open(label, scale, standalone), *_axes(scale, y_title)]
    if budget is not None:
        y = scale.y(budget)
        parts.append(f'<line class="budget" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" '
                     f'y2="{y:.1f}" stroke="{COLOURS["budget"]}" stroke-dasharray="6 4" '
                     f'stroke-width="1.5"><title>budget {budget:,.0f} tokens</title></line>')
        parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{y - 5:.1f}" text-anchor="end" '
                     f'fill="{COLOURS["budget"]}" font-size="12">budget {short(budget)}</text>')
    for name, values in series.items():
        points = " ".join(f"{scale.x(i):.1f},{scale.y(v):.1f}" for i, v in enumerate(values))
        data = ",".join(repr(float(v)) for v in values)
        parts.append(f'<polyline class="series {name}" data-series="{name}" data-values="{data}" '
                     f'points="{points}" fill="none" stroke="{COLOURS.get(name, "#444")}" '
                     f'stroke-width="{WIDTHS.get(name, 2)}" stroke-linejoin="round"/>')
    parts += [_mark(m, series, scale) for m in marks if m.series in series]
    if standalone:
        parts.append(legend(list(series), budget is not None, any(marks)))
    parts.append("</svg>")
    return "\n".join(parts)


def _open(label: str, scale: Scale, standalone: bool) -> str:
    height = HEIGHT + (28 if standalone else 0)
    background = ('<rect width="100%" height="100%" fill="#ffffff"/>' if standalone else "")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" '
            f'width="{WIDTH}" height="{height}" role="img" aria-label="{escape(label)}" '
            f'font-family="system-ui, -apple-system, Segoe UI, sans-serif" '
            f'data-ymax="{scale.top!r}" data-top="{TOP}" data-height="{scale.plot_h}" '
            f'data-left="{LEFT}" data-width="{scale.plot_w}" data-count="{scale.count}">'
            f"<title>{escape(label)}</title>{background}")


def _axes(scale: Scale, y_title: str) -> list[str]:
    out = []
    for step in range(5):
        value = scale.top * step / 4
        y = scale.y(value)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="#e5e7eb" stroke-width="1"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="12" '
                   f'fill="#4b5563">{short(value)}</text>')
    bottom = TOP + scale.plot_h
    out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}" '
               f'stroke="#9ca3af"/>')
    for index in _x_ticks(scale.count):
        x = scale.x(index)
        out.append(f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle" font-size="12" '
                   f'fill="#4b5563">{index + 1}</text>')
    out.append(f'<text x="{LEFT + scale.plot_w / 2:.1f}" y="{HEIGHT - 6}" text-anchor="middle" '
               f'font-size="12" fill="#374151">request</text>')
    out.append(f'<text x="14" y="{TOP + scale.plot_h / 2:.1f}" text-anchor="middle" '
               f'font-size="12" fill="#374151" transform="rotate(-90 14 '
               f'{TOP + scale.plot_h / 2:.1f})">{escape(y_title)}</text>')
    return out


def _x_ticks(count: int) -> list[int]:
    if count <= 1:
        return [0] if count else []
    step = max(1, round((count - 1) / 8))
    ticks = list(range(0, count, step))
    if count - 1 - ticks[-1] < step / 2:
        ticks[-1] = count - 1
    else:
        ticks.append(count - 1)
    return ticks


def _mark(mark: Mark, series: Mapping[str, Sequence[float]], scale: Scale) -> str:
    x, y = scale.x(mark.index), scale.y(series[mark.series][mark.index])
    title = f"<title>{escape(mark.title)}</title>"
    colour = COLOURS.get(mark.series, "#444")
    if mark.kind == "cut":  # a triangle pointing down onto the window's line
        return (f'<path class="mark cut" d="M{x - 6:.1f},{y - 14:.1f} L{x + 6:.1f},{y - 14:.1f} '
                f'L{x:.1f},{y - 3:.1f} Z" fill="{colour}">{title}</path>')
    if mark.kind == "break":
        return (f'<circle class="mark break" cx="{x:.1f}" cy="{y:.1f}" r="5" fill="#ffffff" '
                f'stroke="{colour}" stroke-width="2">{title}</circle>')
    return (f'<rect class="mark {mark.kind}" x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" '
            f'height="8" fill="{colour}" transform="rotate(45 {x:.1f} {y:.1f})">{title}</rect>')


def legend(names: Sequence[str], budget: bool, marks: bool) -> str:
    """A one-row key under a standalone chart (the HTML report has its own, in the page)."""
    y = HEIGHT + 14
    x = float(LEFT)
    out = []
    for name in names:
        out.append(f'<line x1="{x}" x2="{x + 22}" y1="{y - 4}" y2="{y - 4}" '
                   f'stroke="{COLOURS[name]}" stroke-width="3"/>')
        out.append(f'<text x="{x + 28}" y="{y}" font-size="13" fill="#111827">'
                   f"{LABELS[name]}</text>")
        x += 40 + 7.5 * len(LABELS[name])
    if budget:
        out.append(f'<line x1="{x}" x2="{x + 22}" y1="{y - 4}" y2="{y - 4}" '
                   f'stroke="{COLOURS["budget"]}" stroke-dasharray="6 4" stroke-width="2"/>')
        out.append(f'<text x="{x + 28}" y="{y}" font-size="13" fill="#111827">budget</text>')
        x += 90
    if marks:
        out.append(f'<path d="M{x},{y - 10} L{x + 12},{y - 10} L{x + 6},{y} Z" '
                   f'fill="{COLOURS["window"]}"/>')
        out.append(f'<text x="{x + 18}" y="{y}" font-size="13" fill="#111827">cut advances'
                   "</text>")
    return "\n".join(out)
