"""The local distillation judge on the labelled development set (distill-eval fixtures).

Runs :class:`paging.distill.LocalJudge` on every case of
``/work/shared/fixtures/distill-eval/labels.json`` and prints, per kind, needed kept
(|needed ∩ kept| / |needed|), unneeded removed (|unneeded ∩ removed| / |unneeded|) and, for the
chunk cases, the share of output characters removed. Each case runs twice with the item order
shuffled (seeded); the worse run is reported.

    python bench/distill_eval.py [--fixtures DIR] [--runs 2] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from context_paging.paging.distill import (
    Chunk,
    DistillConfig,
    JudgeContext,
    LocalJudge,
    Question,
    chunk_output,
    is_grep_like,
    segment_chunks,
)
from context_paging.paging.distill.decide import interpret
from context_paging.paging.distill.model import Verdict
from context_paging.paging.distill.render import format_chars, tool_label

try:
    from bench.recorded import require
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import require

FIXTURES = Path("/work/shared/fixtures/distill-eval")
_GREP_LINE = re.compile(r"^([^\s:][^:\n]*):(\d+):")


@dataclass(frozen=True)
class Result:
    needed: int
    needed_kept: int
    unneeded: int
    unneeded_removed: int
    chars: int = 0
    chars_removed: int = 0
    judged_keep_chars: int = 0  # characters the judge kept, before the max keep ratio rule

    def badness(self) -> tuple[float, float]:
        return (-ratio(self.needed_kept, self.needed),
                -ratio(self.unneeded_removed, self.unneeded))


def ratio(a: int, b: int) -> float:
    return a / b if b else 1.0


def _score(labels: dict, kept: set[str], removed: set[str], **chars: int) -> Result:
    needed, unneeded = set(labels["needed"]), set(labels["unneeded"])
    return Result(len(needed), len(needed & kept), len(unneeded), len(unneeded & removed),
                  **chars)


def _order(n: int, rng: random.Random) -> list[int]:
    order = list(range(n))
    rng.shuffle(order)
    return order


def run_small(state: dict, labels: dict, config: DistillConfig, rng: random.Random) -> Result:
    items = state["items"]
    order = _order(len(items), rng)  # order[k] = original index of the k-th item shown
    chunks = tuple(Chunk(k, 0, items[i]["output"].count("\n") + 1, items[i]["output"])
                   for k, i in enumerate(order))
    context = JudgeContext("small", "mid-run",
                           tuple(tool_label(items[i]["tool"], items[i]["args"]) for i in order),
                           ("",) * len(order), (False,) * len(order))
    question = Question(request=state["question"], latest_note=state["latest"])
    scores = LocalJudge().judge(question, chunks, context)
    kept, removed = set(), set()
    for k, i in enumerate(order):
        score = None if scores is None else scores.get(k)
        keep = score is None or score >= config.small_keep_threshold
        (kept if keep else removed).add(f"item_{i + 1}")
    return _score(labels, kept, removed)


def _exchange_text(exchange: dict) -> str:
    calls = list(exchange["toolCalls"][:20])
    if len(exchange["toolCalls"]) > 20:
        calls.append(f"… {len(exchange['toolCalls']) - 20} more")
    return (f"user prompt: {exchange['prompt']}\nfinal answer: {exchange['answer']}\n"
            f"tool calls: {'; '.join(calls) if calls else 'none'}")


def run_exchanges(session: dict, labels: dict, config: DistillConfig,
                  rng: random.Random) -> Result:
    exchanges = session["exchanges"]
    order = _order(len(exchanges), rng)
    chunks = tuple(Chunk(k, 0, 0, _exchange_text(exchanges[i])) for k, i in enumerate(order))
    context = JudgeContext("exchange", "mid-run", tuple(
        f"{exchanges[i]['messages']} messages, about "
        f"{format_chars(round(exchanges[i]['chars'] / 4))} tokens" for i in order))
    current = session["current"]
    question = Question(request=current["question"], latest_note=current["latest"])
    scores = LocalJudge().judge(question, chunks, context)
    kept, removed = set(), set()
    for k, i in enumerate(order):
        score = None if scores is None else scores.get(k)
        omit = score is not None and score < config.exchange_omit_threshold
        (removed if omit else kept).add(f"exchange_{i + 1}")
    return _score(labels, kept, removed)


def run_chunks(case: dict, meta: dict, text: str, labels: dict, config: DistillConfig,
               rng: random.Random) -> Result:
    lines = text.split("\n")
    if not is_grep_like(lines):
        raise SystemExit("the rg output is not recognised as grep output")
    chunks = chunk_output(text)
    command = meta["tool_arguments"]["command"]
    parts = segment_chunks(chunks, config.max_segment_chars, config.max_chunks_per_segment)
    history = tuple((x["user"], x["assistant"])
                    for x in ((case.get("earlier_conversation") or {})
                              .get("recent_exchanges", ())))
    question = Question(request=case["user_question"], answer=case["final_answer"],
                        history=history)
    kept_ids: set[int] = set()
    for n, part in enumerate(parts, 1):
        label = tool_label(meta["tool"], {"command": command})
        context = JudgeContext("output", "run-end", (label,), ("",), (False,), meta["tool"],
                               json.dumps(meta["tool_arguments"]), (), chunks[-1].end, n,
                               len(parts))
        shown = [part[k] for k in _order(len(part), rng)]
        scores = LocalJudge().judge(question, shown, context)
        indexes = [c.index for c in part]
        outcome = interpret(Verdict(scores), indexes, config, config.chunk_keep_threshold)
        kept_ids |= outcome.keep
    kept_chars = sum(len(c.text) + 1 for c in chunks if c.index in kept_ids)
    judged_keep_chars = min(kept_chars, len(text))
    if kept_chars > len(text) * config.max_keep_ratio:  # not worth it: the output stays whole
        kept_ids = {c.index for c in chunks}
        kept_chars = len(text)
    kept_chars = min(kept_chars, len(text))
    kept, removed = set(), set()
    for chunk in chunks:
        for line in lines[chunk.start:chunk.end]:
            match = _GREP_LINE.match(line)
            if match:
                key = f"{match.group(1)}:{match.group(2)}"
                (kept if chunk.index in kept_ids else removed).add(key)
    return _score(labels, kept, removed, chars=len(text), chars_removed=len(text) - kept_chars,
                  judged_keep_chars=judged_keep_chars)


def _line(name: str, results: Sequence[Result], chunked: bool) -> str:
    n = sum(r.needed for r in results)
    nk = sum(r.needed_kept for r in results)
    u = sum(r.unneeded for r in results)
    ur = sum(r.unneeded_removed for r in results)
    out = (f"  {name:<28} needed kept {nk:>3}/{n:<3} ({ratio(nk, n):6.1%})   "
           f"unneeded removed {ur:>3}/{u:<3} ({ratio(ur, u):6.1%})")
    if chunked:
        c = sum(r.chars for r in results)
        cr = sum(r.chars_removed for r in results)
        out += f"   chars removed {cr:,}/{c:,} ({ratio(cr, c):6.1%})"
        if len(results) == 1:
            judged = results[0].judged_keep_chars
            out += f"   [judge kept {ratio(judged, c):.1%} before the ratio rule]"
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    root: Path = require(args.fixtures, "the distill-eval set", "pass --fixtures DIR")
    config = DistillConfig()
    labels = json.loads((root / "labels.json").read_text())
    small = {s["name"]: s for s in json.loads((root / "data/small.json").read_text())["states"]}
    sessions = {s["name"]: s
                for s in json.loads((root / "data/exchanges.json").read_text())["sessions"]}
    derived = json.loads((root / "derived/statusbadge-cases.json").read_text())
    rg_text = (root / "derived" / derived["output_file"]).read_text()
    chunk_cases = {c["id"]: c for c in derived["cases"]}

    def once(case_id: str, rng: random.Random) -> tuple[str, Result]:
        kind, name = case_id.split("/", 1)
        case_labels = labels[case_id]
        if kind == "small":
            return "small", run_small(small[name], case_labels, config, rng)
        if kind == "exchanges":
            return "exchanges", run_exchanges(sessions[name], case_labels, config, rng)
        return "chunks", run_chunks(chunk_cases[case_id], derived, rg_text, case_labels,
                                    config, rng)

    by_kind: dict[str, list[tuple[str, Result]]] = {}
    for case_id in labels:
        runs = [once(case_id, random.Random(f"{args.seed}:{case_id}:{r}"))
                for r in range(args.runs)]
        kind = runs[0][0]
        worst = max((r for _, r in runs), key=Result.badness)
        by_kind.setdefault(kind, []).append((case_id, worst))

    print("Distillation judgments of the LOCAL judge (paging.distill.LocalJudge, offline and")
    print("deterministic) on the labelled DEVELOPMENT set in distill-eval (small, hand-labelled,")
    print("thresholds tuned upstream on these same items; chunk cases are derived). Not proof of")
    print("quality. Default DistillConfig: small keep >= "
          f"{config.small_keep_threshold}, exchange omit < {config.exchange_omit_threshold}, "
          f"chunk keep >= {config.chunk_keep_threshold},")
    print(f"max keep ratio {config.max_keep_ratio}. Each case run {args.runs}x with the item "
          f"order shuffled (seed {args.seed});")
    print("the worst run is shown. Optional ids count in neither metric. Chars removed = share")
    print("of the rg output's characters not kept (after the max keep ratio rule).")
    for kind in ("small", "exchanges", "chunks"):
        results = by_kind.get(kind, [])
        chunked = kind == "chunks"
        print(f"\n[{kind}]")
        for case_id, result in results:
            print(_line(case_id, [result], chunked))
        print(_line(f"combined {kind}", [r for _, r in results], chunked))


if __name__ == "__main__":
    main()
