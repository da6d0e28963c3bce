"""The terminal report of ``context-paging replay``: per-request rows, totals, a text chart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from context_paging.server.bounds import fraction, nonnegative_float, number, positive_float, text
from context_paging.server.progress import add_quiet

if TYPE_CHECKING:  # the replay (and the whole window) loads only when the command runs
    from context_paging.server.replay.run import Replay, ReplayOptions

MARKS = {"full": "F", "compaction": "C", "window": "W"}  # later ones are drawn on top


def _k(tokens: float) -> str:
    return f"{tokens:,.0f}" if tokens < 10_000 else f"{tokens / 1000:,.1f}k"


def _pct(share: float | None) -> str:
    return "—" if share is None else f"{100 * share:.1f}%"


def _table(rows: Sequence[Sequence[str]], right: Sequence[bool],
           width: int | None = None) -> str:
    """Columns fitted to ``width`` (server/table.py); the first (the request, the strategy)
    is never cut."""
    from context_paging.server.table import fit

    return fit(rows, width, keep=(0,), right=right)


def request_table(replay: Replay, width: int | None = None) -> str:
    rows = [("REQ", "MSGS", "FULL", "COMPACTION", "WINDOW", "PREFIX", "DISTILLED", "MODE",
             "EVENT")]
    for r in replay.rows:
        events = []
        if r.cut_advanced:
            events.append("cut advances")
        if r.window.cause and not r.cut_advanced:
            events.append(f"cache break ({r.window.cause})")
        if r.window.rewritten:
            events.append(f"rewrites {_k(r.window.rewritten)}")
        if r.compacted:
            events.append("baseline compacts")
        share = r.window.prefix / r.window.tokens if r.window.tokens else 0.0
        rows.append((str(r.index + 1), str(r.messages), _k(r.full.tokens),
                     _k(r.compaction.tokens), _k(r.window.tokens), _pct(share), str(r.distilled),
                     r.mode, ", ".join(events)))
    return _table(rows, (True, True, True, True, True, True, True, False, False), width)


def totals_table(replay: Replay, width: int | None = None) -> str:
    from context_paging.server.replay.run import STRATEGIES

    t = replay.totals()
    causes = sorted({c for v in t.values() for c in v.breaks})
    rows = [("STRATEGY", "REQUESTS", "PEAK", "CUMULATIVE", "PREFIX SHARE", "COST (CACHED)",
             "COST (NO CACHE)", "CACHE BREAKS")]
    for name in STRATEGIES:
        v = t[name]
        breaks = ", ".join(f"{v.breaks[c]} {c} ({_k(v.rewritten[c])} rewritten)"
                           for c in causes if c in v.breaks) or "none"
        rows.append((name, str(v.requests), _k(v.peak), _k(v.cumulative), _pct(v.prefix_share),
                     f"{v.cost / 1000:,.1f}k", f"{v.uncached_cost / 1000:,.1f}k", breaks))
    return _table(rows, (False, True, True, True, True, True, True, False), width)


def chart(replay: Replay, width: int = 64, height: int = 12) -> str:
    """Tokens per request for the three strategies, one column per group of requests (the
    largest request of the group)."""
    from context_paging.server.replay.run import STRATEGIES

    series = {name: [getattr(r, name).tokens for r in replay.rows] for name in STRATEGIES}
    n = len(replay.rows)
    if n == 0:
        return "(no requests)"
    width = min(width, n)
    top = max(max(v) for v in series.values()) or 1.0
    grid = [[" "] * width for _ in range(height)]
    for name in STRATEGIES:
        values = series[name]
        for col in range(width):
            group = values[col * n // width:max(col * n // width + 1, (col + 1) * n // width)]
            level = round(max(group) / top * (height - 1))
            grid[height - 1 - level][col] = MARKS[name]
    label = len(_k(top))
    lines = []
    for i, row in enumerate(grid):
        value = top * (height - 1 - i) / (height - 1)
        axis = _k(value) if i in (0, height // 2, height - 1) else ""
        lines.append(f"{axis:>{label}} |{''.join(row)}")
    lines.append(" " * label + " +" + "-" * width)
    lines.append(" " * label + f"  request 1{'':{max(1, width - 20)}}{n:>9}")
    lines.append(" " * label + "  F full history   C compaction baseline   W select_context "
                 "window (W on top where they meet)")
    return "\n".join(lines)


def render(replay: Replay, requests: bool = True, width: int | None = None) -> str:
    """The report as text; its tables fit ``width`` (the terminal's; None: full width)."""
    d = replay.as_dict()
    o = replay.options
    ratios = d["ratios"]
    dist = d["distillation"]
    rec = d["recoverability"]
    c = o.compaction
    head = (f"Replay of {replay.session}\n"
            f"{len(replay.rows)} requests rebuilt as Pi-shaped messages; budget {o.budget:,}, "
            f"model window {o.model_window:,}, estimator {o.estimator}, distillation "
            f"{'on' if o.distill else 'off'}; compaction baseline at {c.threshold:,.0f} tokens "
            f"to a {c.summary_tokens:,.0f}-token summary (+{c.keep_tokens:,.0f} kept); prices "
            f"uncached {o.prices.uncached}, cache write {o.prices.cache_write}, cache read "
            f"{o.prices.cache_read}")
    parts = [head]
    note = replay.budget_note()
    if note:
        parts.append(note)
    if requests:
        parts.append(request_table(replay, width))
    parts.append(totals_table(replay, width))

    def ratio(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}x"

    parts.append(
        f"window vs full history: cumulative input {ratio(ratios['cumulative_vs_full'])}, cost "
        f"{ratio(ratios['cost_vs_full'])}; vs compaction: cumulative "
        f"{ratio(ratios['cumulative_vs_compaction'])}, cost {ratio(ratios['cost_vs_compaction'])}"
        f"\ncut advances: {d['cut_advances']}"
        f"\ndistillation removed: {dist.get('distilled_outputs', 0)} outputs shortened or "
        f"removed, {dist.get('omitted_exchanges', 0)} exchanges omitted, "
        f"{dist.get('dropped_images', 0)} outputs without their images, "
        f"{dist.get('saved_characters', 0):,} characters ({dist.get('saved_tokens', 0):,} tokens)"
        f"\n{_distillation_breaks(d['distillation_breaks'])}"
        f"\nrecoverability: {rec['found']}/{rec['identifiers']} identifiers from "
        f"{rec['outputs_left']} outputs that left the window found in search_history's top 3 "
        f"({_pct(rec['share'])})")
    if replay.refused:
        parts.append(f"{len(replay.refused)} requests refused by select_context (counted as the "
                     f"full request); first: request {replay.refused[0][0] + 1}: "
                     f"{replay.refused[0][1]}")
    parts.append(chart(replay))
    parts.append(f"replayed in {replay.seconds:.1f} s ({replay.cpu_seconds:.1f} s CPU)")
    return "\n\n".join(parts)


def _distillation_breaks(breaks: list[dict]) -> str:
    """The cache breaks distillation caused alone, priced (see Replay.distillation_breaks)."""
    if not breaks:
        return "cache breaks by distillation alone: none"
    paid = sum(b["pays"] for b in breaks)
    return (f"cache breaks by distillation alone: {len(breaks)} ({paid} paid for in hindsight), "
            f"re-writing {_k(sum(b['rewritten_tokens'] for b in breaks))} tokens at a price of "
            f"{sum(b['price'] for b in breaks) / 1000:,.1f}k for "
            f"{sum(b['value'] for b in breaks) / 1000:,.1f}k of cache reads saved")


# --- the command ------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    where = ("a session reference (pi:<id>, claude:<id>, codex:<id>) or the path of a Pi, "
             "Claude Code or Codex session file")
    parser.add_argument("--session", dest="session_flag", metavar="SESSION", type=text("id"),
                        help=where)
    parser.add_argument("session", nargs="?", metavar="SESSION", type=text("id"),
                        help="the same as --session (kept so older scripts keep working)")
    parser.add_argument("--budget", type=number("token_budget"), default=128_000,
                        help="the window's budget in tokens (default 128000)")
    parser.add_argument("--trim-to", type=number("trim_to_tokens"), default=None,
                        help="how many tokens the window is cut down to once it passes the budget "
                        "(default 5/8 of the budget)")
    parser.add_argument("--first-cut", type=fraction, default=None,
                        help="where a conversation's first cut lands, as a share of the budget "
                        "(default 1.0: where every later cut lands too; 0.375 cuts deeper, "
                        "leaving more room before the next cut)")
    parser.add_argument("--estimator", choices=("tiktoken", "chars4"), default="tiktoken",
                        help="how tokens are counted: tiktoken (the default) or chars4, characters "
                        "divided by 4 (about twice as fast)")
    parser.add_argument("--no-distill", action="store_true",
                        help="do not shorten old tool outputs (distillation)")
    parser.add_argument("--model-window", type=number("model_window"), default=200_000,
                        help="the model's context window in tokens (default 200000); the "
                        "compaction it is compared with starts 33000 below it")
    parser.add_argument("--compact-at", type=positive_float, default=None,
                        help="the size at which the compared compaction summarizes the "
                        "conversation (default: model window - 33000, as Claude Code's "
                        "auto-compact: 167000 of 200000)")
    parser.add_argument("--summary-tokens", type=nonnegative_float, default=3_500,
                        help="tokens of that compaction's summary (default 3500)")
    parser.add_argument("--keep-tokens", type=nonnegative_float, default=0,
                        help="tokens of newest messages that compaction keeps word for word "
                        "besides the current exchange (default 0, as Claude Code)")
    parser.add_argument("--price-uncached", type=nonnegative_float, default=1.0,
                        help="price of an uncached input token (default 1.0; the cache prices "
                        "are relative to it)")
    parser.add_argument("--price-write", type=nonnegative_float, default=1.25,
                        help="cache write per token")
    parser.add_argument("--price-read", type=nonnegative_float, default=0.1,
                        help="cache read per token")
    parser.add_argument("--model", default=None, type=text("model"),
                        help="the model as provider/id: its provider's cache prices decide "
                        "when shortening an old output pays for itself (default: Anthropic's)")
    parser.add_argument("--recover-sample", type=number("replay.recover_sample"), default=100,
                        help="identifiers (paths, error codes) from outputs that left the "
                        "window to look up with search, to count how many are found again "
                        "(default 100)")
    parser.add_argument("--summary", action="store_true", help="totals only, no per-request rows")
    parser.add_argument("--json", action="store_true", help="the whole report as JSON")
    parser.add_argument("--html", metavar="FILE", default=None,
                        help="also write the report as one self-contained HTML page with a "
                        "chart (see docs/replay.md)")
    add_quiet(parser)


def session_of(args) -> str:
    """The session named by --session or by the positional alias (one of them, not both)."""
    flag, positional = args.session_flag, args.session
    if flag and positional and flag != positional:
        raise SystemExit(f"context-paging: replay got two sessions ({positional!r} and "
                         f"--session {flag!r}); give one")
    if not (flag or positional):
        raise SystemExit("context-paging: replay needs a session: --session REF or a file "
                         "path (see `context-paging sessions`)")
    return flag or positional


def options_from(args) -> ReplayOptions:
    from context_paging.paging.replay_cost import Compaction, Prices
    from context_paging.server.replay.run import ReplayOptions

    threshold = args.compact_at if args.compact_at is not None else args.model_window - 33_000
    return ReplayOptions(
        budget=args.budget, trim_to=args.trim_to, estimator=args.estimator,
        **({} if args.first_cut is None else {"first_cut": args.first_cut}),
        distill=not args.no_distill, model_window=args.model_window,
        compaction=Compaction(threshold, args.summary_tokens, args.keep_tokens),
        prices=Prices(args.price_uncached, args.price_write, args.price_read),
        recover_sample=args.recover_sample, model=args.model)


def run(args, settings) -> int:
    import json
    import os
    import sys

    from context_paging.index.discovery import resolve
    from context_paging.server.progress import progress_for
    from context_paging.server.replay.run import replay

    path = session = session_of(args)
    if not os.path.isfile(path):
        path = str(resolve(session, settings.roots).path)

    with progress_for(args) as progress:
        result = replay(path, options_from(args), progress)
    if args.html:
        from context_paging.server.replay.html import write_report

        write_report(result, args.html)
        print(f"context-paging: report written to {args.html}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.as_dict(), indent=1))
    else:
        from context_paging.server.table import terminal_width

        print(render(result, requests=not args.summary, width=terminal_width()))
    return 0
