"""``context-paging replay --html FILE``: the replay as one self-contained page (docs/replay.md).

One HTML file with its style and three inline SVG charts (the window per request, drawn as the
live view draws it by server/chart.py; tokens sent per request; cumulative cost), the totals
table and the recoverability figures: no script, no network, readable when
printed. The figures are the ones ``--json`` prints, from the same :class:`Replay`.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from context_paging.server.chart import request_chart
from context_paging.server.replay.run import STRATEGIES, Replay
from context_paging.server.replay.svg import COLOURS, LABELS, Mark, line_chart, short

PAGE_CSS = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #111827;
       max-width: 960px; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin: 0 0 .2rem; }
h2 { font-size: 1.15rem; margin: 2rem 0 .5rem; }
.sub { color: #4b5563; margin: 0 0 1.2rem; }
.note { background: #fef3c7; border: 1px solid #f59e0b; border-radius: 6px; padding: .6rem .9rem; }
.cards { display: flex; flex-wrap: wrap; gap: .6rem; margin: 1rem 0; }
.card { border: 1px solid #e5e7eb; border-radius: 8px; padding: .6rem .9rem; min-width: 150px; }
.card b { display: block; font-size: 1.35rem; }
.card span { color: #4b5563; font-size: .85rem; }
figure { margin: 1rem 0; }
figcaption { color: #374151; font-size: .9rem; }
.key { display: inline-block; width: 1.4em; height: .3em; vertical-align: middle;
       margin: 0 .3em 0 .9em; }
.key.dashed { background: none; border-top: 2px dashed; height: 0; }
svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; }
th, td { border-bottom: 1px solid #e5e7eb; padding: .35rem .5rem; text-align: right; }
th:first-child, td:first-child { text-align: left; }
footer { color: #6b7280; font-size: .8rem; margin-top: 2rem; }
@media print {
  body { margin: 0; max-width: none; font-size: 11pt; }
  .card { break-inside: avoid; }
  figure, table { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def token_series(replay: Replay) -> dict[str, list[float]]:
    """Tokens each strategy sent, per agent request (the ``*_tokens`` of ``--json``)."""
    return {name: [getattr(r, name).tokens for r in replay.rows] for name in STRATEGIES}


def cost_series(replay: Replay) -> dict[str, list[float]]:
    """Cumulative cost under the replay's prices after each agent request. The baseline's
    summarisation calls are requests too: each one's cost lands on the request after it, so
    every series ends at its strategy's total cost."""
    prices = replay.options.prices
    out: dict[str, list[float]] = {}
    for name in STRATEGIES:
        running, values = 0.0, []
        for sent in replay.sent[name]:
            running += sent.cost(prices)
            if not sent.summary:
                values.append(running)
        out[name] = values
    return out


def window_points(replay: Replay) -> list[dict[str, Any]]:
    """The window's requests as the live view's chart draws them (server/chart.py): the cache
    read is the prefix shared with the previous request, the rest is written."""
    budget = replay.options.budget
    return [{"sent": r.window.tokens, "full": r.full.tokens, "budget": budget,
             "advanced": r.cut_advanced, "cache_read_tokens": r.window.prefix,
             "cache_write_tokens": max(0.0, r.window.tokens - r.window.prefix)}
            for r in replay.rows]


def marks(replay: Replay) -> list[Mark]:
    out = []
    for r in replay.rows:
        n = r.index + 1
        if r.cut_advanced:
            out.append(Mark(r.index, "window", "cut", f"request {n}: the cut advances"))
        elif r.window.cause:
            out.append(Mark(r.index, "window", "break",
                            f"request {n}: cache break ({r.window.cause}), "
                            f"{r.window.rewritten:,.0f} tokens re-written"))
        if r.compacted:
            out.append(Mark(r.index, "compaction", "compaction",
                            f"request {n}: the baseline compacts"))
    return out


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _cards(d: dict[str, Any]) -> str:
    ratios, rec, totals = d["ratios"], d["recoverability"], d["totals"]
    share = rec["share"]
    cards = [
        (_ratio(ratios["cumulative_vs_full"]), "input sent vs full history"),
        (_ratio(ratios["cost_vs_full"]), "cost vs full history"),
        (_ratio(ratios["cost_vs_compaction"]), "cost vs compaction"),
        (short(totals["window"]["peak_tokens"]), "largest window (tokens)"),
        (str(d["cut_advances"]), "cut advances"),
        ("—" if share is None else f"{100 * share:.0f}%",
         f"recoverable ({rec['found']}/{rec['identifiers']} identifiers)"),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card"><b>{escape(value)}</b><span>{escape(label)}</span></div>'
        for value, label in cards) + "</div>"


def _legend(budget: bool, events: bool) -> str:
    keys = [f'<span class="key" style="background:{COLOURS[n]}"></span>{LABELS[n]}'
            for n in STRATEGIES]
    if budget:
        keys.append(f'<span class="key dashed" style="border-color:{COLOURS["budget"]}">'
                    "</span>budget")
    if events:
        keys.append(f'<span style="color:{COLOURS["window"]}; margin-left:.9em">▼</span> cut '
                    f'advances, <span style="color:{COLOURS["window"]}">○</span> other cache '
                    f'breaks, <span style="color:{COLOURS["compaction"]}">◆</span> baseline '
                    "compacts")
    return "".join(keys) + "."


def _totals_table(d: dict[str, Any]) -> str:
    head = ("strategy", "requests", "peak", "cumulative", "prefix share", "cost (cached)",
            "cost (no cache)", "cache breaks")
    rows = []
    for name in STRATEGIES:
        t = d["totals"][name]
        breaks = ", ".join(f"{count} {cause}" for cause, count in t["breaks"].items()) or "none"
        share = "—" if t["prefix_share"] is None else f"{100 * t['prefix_share']:.1f}%"
        rows.append((LABELS[name], str(t["requests"]), f"{t['peak_tokens']:,.0f}",
                     f"{t['cumulative_tokens']:,.0f}", share, f"{t['cost']:,.0f}",
                     f"{t['uncached_cost']:,.0f}", breaks))
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _recoverability(d: dict[str, Any]) -> str:
    rec, dist = d["recoverability"], d["distillation"]
    share = "—" if rec["share"] is None else f"{100 * rec['share']:.1f}%"
    return (f"<p>Of the tool outputs that left the window ({rec['outputs_left']}), "
            f"{rec['identifiers']} distinctive identifiers and paths were looked up with "
            f"<code>search_history</code>: <b>{rec['found']} found</b> in the top 3 ({share})."
            f"</p><p>Distillation shortened or removed {dist.get('distilled_outputs', 0)} "
            f"outputs and omitted {dist.get('omitted_exchanges', 0)} exchanges, saving "
            f"{dist.get('saved_tokens', 0):,} tokens; every original is one "
            "<code>recall</code> away.</p>")


def render_html(replay: Replay) -> str:
    d = replay.as_dict()
    o = replay.options
    p = o.prices
    budget = float(o.budget)
    window = request_chart(window_points(replay), "The window per request")
    note = replay.budget_note()
    tokens = line_chart(token_series(replay), "Tokens sent per request", "tokens sent",
                        budget=budget, marks=marks(replay))
    costs = line_chart(cost_series(replay), "Cumulative input cost", "cumulative cost")
    name = Path(replay.session).name
    sub = (f"{len(replay.rows)} requests · budget {o.budget:,} tokens · model window "
           f"{o.model_window:,} · estimator {o.estimator} · distillation "
           f"{'on' if o.distill else 'off'} · prices per token: uncached {p.uncached:g}, "
           f"cache write {p.cache_write:g}, cache read {p.cache_read:g}")
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Replay of {escape(name)}</title>
<style>{PAGE_CSS}</style>
</head>
<body>
<h1>What the window sends: {escape(name)}</h1>
<p class="sub">{escape(sub)}</p>
{f'<p class="note">{escape(note)}</p>' if note else ""}
{_cards(d)}
<h2>The window per request</h2>
<figure>
{window}
<figcaption>The same chart as the proxy's live view: what the window sent, the full history and
the budget; ▼ the cut advances. Bars: of what the window sent, the part a prompt cache reads
(the previous request's prefix) and the part it writes.</figcaption>
</figure>
<h2>Tokens sent per request</h2>
<figure>
{tokens}
<figcaption>{_legend(True, True)}</figcaption>
</figure>
<h2>Cumulative input cost</h2>
<figure>
{costs}
<figcaption>{_legend(False, False)} Cached requests read their shared prefix at
{p.cache_read:g} and write the rest at {p.cache_write:g}; the baseline's summarisation calls
are counted.</figcaption>
</figure>
<h2>Totals</h2>
{_totals_table(d)}
<h2>Recoverability</h2>
{_recoverability(d)}
<footer>Made by <code>context-paging replay --html</code> from {escape(replay.session)}.
The compaction baseline summarises at {o.compaction.threshold:,.0f} tokens into a
{o.compaction.summary_tokens:,.0f}-token summary. System prompts and tool definitions are not in
session files, so no strategy counts them.</footer>
</body>
</html>
"""


def write_report(replay: Replay, path: str | Path) -> Path:
    target = Path(path)
    target.write_text(render_html(replay), encoding="utf-8")
    return target
