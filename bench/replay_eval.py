"""Every recorded session fixture replayed through ``select_context`` at two budgets.

Runs :func:`context_paging.server.replay.run.replay` (the library behind ``context-paging replay``)
on every file in ``shared/fixtures/sessions`` at the default budget (128k) and at a small one
(24k) that makes most of them page, and prints one row per session and budget: requests, peak
and cumulative input tokens per strategy (full history, compaction baseline, window), the
window's prefix share (tokens repeated as an exact prefix of the previous request), cut
advances, cost under cache pricing against both baselines, recoverability, and cache breaks by
cause. Then the totals, and the issue's goals checked on the sessions long enough to page (the
full history of some request exceeds the budget):

* cumulative input at least 64 % below no management,
* at least 90 % of request tokens repeated as exact prefixes,
* cost below the compaction baseline,
* recoverability at least 98 %.

    python bench/replay_eval.py [--estimator chars4|tiktoken] [--budgets 128000,24000]
                                [--no-distill] [--model provider/id] [--first-cut 0.375]

The prompt-caching goals are checked on all sessions too: none costs more than its full history, the
total cost is at most 0.9x compaction at 128k and 0.4x at smaller budgets, and every cache break
caused by distillation alone paid for itself in hindsight (its re-write priced at write − read
against the tokens it saved, read on each later request until the cut advanced).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from context_paging.server.replay.run import Replay, ReplayOptions, replay  # noqa: E402

# Beside the project (../shared), found from the checkout or a worktree of it.
FIXTURES = next((p / "shared" / "fixtures" / "sessions" for p in Path(__file__).resolve().parents
                 if (p / "shared" / "fixtures" / "sessions").is_dir()),
                Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "sessions")
HEADER = ("session", "req", "peak F/C/W", "cumul F/C/W", "-vs F", "prefix", "cuts",
          "cost/F", "cost/C", "recov", "breaks cut/dist/other", "dist paid/price/value")


def _k(x: float) -> str:
    return f"{x / 1000:.0f}k"


def row(name: str, r: Replay) -> tuple[str, ...]:
    t = r.totals()
    f, c, w = t["full"], t["compaction"], t["window"]
    rec = r.recoverability
    b = w.breaks
    return (name, str(len(r.rows)), f"{_k(f.peak)}/{_k(c.peak)}/{_k(w.peak)}",
            f"{_k(f.cumulative)}/{_k(c.cumulative)}/{_k(w.cumulative)}",
            f"{100 * (1 - w.cumulative / f.cumulative):.0f}%" if f.cumulative else "—",
            f"{100 * w.prefix_share:.1f}%", str(r.cut_advances()),
            f"{w.cost / f.cost:.2f}x" if f.cost else "—",
            f"{w.cost / c.cost:.2f}x" if c.cost else "—",
            f"{rec['found']}/{rec['identifiers']}" if rec["identifiers"] else "—",
            f"{b.get('cut', 0)}/{b.get('distillation', 0)}/{b.get('other', 0)}",
            _priced(r.distillation_breaks()))


def _priced(breaks: Sequence[dict]) -> str:
    """Distillation-alone breaks paid for in hindsight / their price / the reads they saved."""
    if not breaks:
        return "—"
    return (f"{sum(b['pays'] for b in breaks)}/{_k(sum(b['price'] for b in breaks))}/"
            f"{_k(sum(b['value'] for b in breaks))}")


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths, strict=False)))
                     for r in rows)


def summary(replays: Sequence[Replay], label: str) -> tuple[str, list[str]]:
    """A totals row over ``replays`` and the goals checked on them."""
    sums = {k: [0.0, 0.0, 0.0] for k in ("full", "compaction", "window")}  # cumul, cost, prefix
    found = looked = cuts = 0
    breaks = {"cut": 0, "distillation": 0, "other": 0}
    for r in replays:
        for name, v in r.totals().items():
            sums[name][0] += v.cumulative
            sums[name][1] += v.cost
            sums[name][2] += v.prefix
        found += r.recoverability["found"]
        looked += r.recoverability["identifiers"]
        cuts += r.cut_advances()
        for cause, n in r.totals()["window"].breaks.items():
            breaks[cause] = breaks.get(cause, 0) + n
    f, c, w = sums["full"], sums["compaction"], sums["window"]
    if not f[0]:
        return f"{label}: no sessions", []
    below = 1 - w[0] / f[0]
    share = w[2] / w[0] if w[0] else 0.0
    recov = found / looked if looked else None
    line = (f"{label}: {len(replays)} sessions, cumulative input {100 * below:.1f}% below full "
            f"history ({w[0] / c[0]:.2f}x compaction), prefix share {100 * share:.1f}%, "
            f"{cuts} cut advances, cost {w[1] / f[1]:.2f}x full history and "
            f"{w[1] / c[1]:.2f}x compaction, recoverability "
            f"{found}/{looked}{'' if recov is None else f' ({100 * recov:.1f}%)'}, breaks "
            f"cut/distillation/other {breaks['cut']}/{breaks['distillation']}/{breaks['other']}")
    goals = [
        f"cumulative input >= 64% below no management: {100 * below:.1f}% "
        f"({'met' if below >= 0.64 else f'missed by {100 * (0.64 - below):.1f} points'})",
        f">= 90% of request tokens repeated as exact prefixes: {100 * share:.1f}% "
        f"({'met' if share >= 0.9 else f'missed by {100 * (0.9 - share):.1f} points'})",
        f"cost below compaction: {w[1] / c[1]:.2f}x "
        f"({'met' if w[1] < c[1] else 'missed'})",
        "recoverability >= 98%: " + (
            "no lookups" if recov is None
            else f"{100 * recov:.1f}% ({'met' if recov >= 0.98 else 'missed'})"),
    ]
    return line, goals


def cache_goals(replays: Sequence[Replay], budget: int) -> list[str]:
    """The prompt-caching goals: no session above full history; total cost at most 0.9x
    compaction at 128k and 0.4x below it; distillation-alone breaks only where they pay."""
    worst = max(replays, key=lambda r: _cost_ratio(r, "full"), default=None)
    full = sum(r.totals()["full"].cost for r in replays)
    comp = sum(r.totals()["compaction"].cost for r in replays)
    window = sum(r.totals()["window"].cost for r in replays)
    limit = 0.9 if budget >= 128_000 else 0.4
    breaks = [b for r in replays for b in r.distillation_breaks()]
    unpaid = [b for b in breaks if not b["pays"]]
    out = []
    if worst is not None:
        ratio = _cost_ratio(worst, "full")
        out.append(f"no session costs more than full history: worst {ratio:.2f}x "
                   f"({Path(worst.session).stem[:40]}) ({'met' if ratio <= 1.0 else 'missed'})")
    if comp:
        out.append(f"total cost <= {limit}x compaction: {window / comp:.2f}x "
                   f"({'met' if window / comp <= limit else 'missed'}); {window / full:.2f}x full")
    out.append(f"distillation-alone breaks that pay: {len(breaks) - len(unpaid)}/{len(breaks)}, "
               f"price {sum(b['price'] for b in breaks) / 1000:.1f}k for "
               f"{sum(b['value'] for b in breaks) / 1000:.1f}k of cache reads saved "
               f"({'met' if not unpaid else f'{len(unpaid)} did not pay'})")
    return out


def _cost_ratio(r: Replay, against: str) -> float:
    t = r.totals()
    return t["window"].cost / t[against].cost if t[against].cost else 1.0


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--estimator", choices=("chars4", "tiktoken"), default="chars4")
    parser.add_argument("--budgets", default="128000,24000")
    parser.add_argument("--no-distill", action="store_true", help="paging alone")
    parser.add_argument("--model", default=None, help="provider/id passed to select_context "
                        "(sets the cache prices distillation weighs its edits with)")
    parser.add_argument("--first-cut", type=float, default=None,
                        help="where a cut with no remembered frontier lands, as a fraction of "
                        "the budget (default: the server's, 1.0, upstream's rule: the target; "
                        "0.375 cuts deeper)")
    args = parser.parse_args(argv)
    files = sorted(args.fixtures.glob("*/*.jsonl"))
    started = time.perf_counter()
    for budget in (int(b) for b in args.budgets.split(",")):
        options = ReplayOptions(budget=budget, estimator=args.estimator,
                                distill=not args.no_distill, model=args.model,
                                **({} if args.first_cut is None else
                                   {"first_cut": args.first_cut}))
        rows = [HEADER]
        done: list[Replay] = []
        for path in files:
            result = replay(str(path), options)
            if not result.rows:
                continue
            done.append(result)
            rows.append(row(path.stem[:48], result))
        print(f"\n== budget {budget:,} (estimator {args.estimator}, distillation "
              f"{'off' if args.no_distill else 'on'}"
              f"; first cut {options.first_cut}"
              "; F full history, "
              f"C compaction at 167k to 3.5k, W window) ==")
        print(table(rows))
        paging = [r for r in done if r.totals()["full"].peak > budget]
        for goal in cache_goals(done, budget):
            print("  goal (all sessions): " + goal)
        for label, group in (("all sessions", done), ("sessions that page", paging)):
            line, goals = summary(group, label)
            print(line)
        for goal in summary(paging, "")[1]:
            print("  goal (sessions that page): " + goal)
        slowest = max(done, key=lambda r: r.seconds, default=None)
        if slowest is not None:
            print(f"slowest replay: {Path(slowest.session).name} {slowest.seconds:.1f} s "
                  f"({slowest.cpu_seconds:.1f} s CPU, {len(slowest.rows)} requests)")
    print(f"\nall replays: {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
