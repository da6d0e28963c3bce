"""From verdicts to decisions: per segment, per output, per whole item, break-even.

The rules are in docs/distillation.md, "Decisions" and "Mid-run checkpoints and break-even".

Per segment (:func:`interpret`), in upstream's order: no answer → keep all (the failure is the
reason); classifier answers (``keep_whole`` and ``focus``, both or neither) → upstream's rules
2–9; plain chunk scores (the local and sampling judges) → keep each chunk scored at or above
the chunk threshold, a chunk without a score is kept (any doubt → keep), an empty keep set is
``none-needed``.

Per output (:func:`decide_output`): the segments' keep sets are merged; every chunk kept → no
edit; ``keep_cited_files`` adds chunks of files the answer names; kept chars over
``max_keep_ratio`` of the original, or a rendering that is not shorter → ``not-worth``;
otherwise ``remove`` (nothing kept) or ``distill``.

Status is explicit (docs/distillation.md, "In an MCP server"): a decision made without an answer, or
deferred by a break-even gate, has ``judged=False`` and is asked again; reasons are for people.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from context_paging.paging.distill.chunk import Chunk
from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.items import Exchange, ImageItem, OutputItem, cited_files
from context_paging.paging.distill.model import Decision, Phase, Verdict, fingerprint
from context_paging.paging.distill.render import render_output, small_stub

FAILURES = frozenset({"error", "timeout", "no-answer", "aborted"})
FACTOR_WHOLE_CONTEXT = 13  # a provider that re-reads the whole context after any edit (Codex)
FACTOR_PREFIX = 16  # a provider whose prefix cache stays valid up to the first edit


@dataclass(frozen=True, slots=True)
class SegmentOutcome:
    keep: frozenset[int]
    keep_all: bool
    reason: str
    detail: str = ""


def _all(indexes: Sequence[int], reason: str, detail: str = "") -> SegmentOutcome:
    return SegmentOutcome(frozenset(indexes), True, reason, detail)


def interpret(
    verdict: Verdict | None, indexes: Sequence[int], config: DistillConfig, threshold: float
) -> SegmentOutcome:
    """Which chunks (by index) of one segment to keep. ``None``: the judge never answered."""
    if verdict is None:
        return _all(indexes, "timeout")
    classifier = verdict.keep_whole is not None or verdict.focus is not None
    if not classifier and verdict.scores is None:
        return _all(indexes, verdict.failure or "no-answer", verdict.failure)
    scores = verdict.scores or {}
    if not classifier:
        keep = frozenset(i for i in indexes if scores.get(i, 1.0) >= threshold)
        if not keep:
            return SegmentOutcome(keep, False, "none-needed")
        return SegmentOutcome(keep, False, "chunks")
    if verdict.keep_whole is None or verdict.focus is None:
        return _all(indexes, "no-answer")
    focus, probs = verdict.focus, verdict.focus_scores
    if verdict.keep_whole >= config.keep_whole_threshold:
        return _all(indexes, "whole-needed")
    if focus == "whole" and probs.get("whole", 0.0) >= config.focus_whole_threshold:
        return _all(indexes, "whole-chosen")
    keep = {i for i in indexes if scores.get(i, 0.0) >= threshold}
    focus_chunk = _chunk_of(focus)
    if focus_chunk in indexes:
        keep.add(focus_chunk)
    if not keep and focus == "none" and probs.get("none", 0.0) >= config.none_threshold:
        return SegmentOutcome(frozenset(), False, "none-needed")
    if not keep and focus == "whole":
        return _all(indexes, "whole-chosen")
    if not keep:  # a weak "none": keep the chunk focus liked best (the first wins ties)
        best = max(indexes, key=lambda i: (probs.get(f"chunk_{i + 1}", 0.0), -i))
        keep = {best}
    return SegmentOutcome(frozenset(keep), False, "chunks")


def _chunk_of(focus: str) -> int | None:
    if focus.startswith("chunk_") and focus[6:].isdigit():
        return int(focus[6:]) - 1
    return None


def decide_output(
    item: OutputItem,
    chunks: Sequence[Chunk],
    outcomes: Sequence[SegmentOutcome],
    config: DistillConfig,
    *,
    answer: str,
    phase: Phase,
    run: str,
    judge: str,
    scores: Mapping[int, float],
) -> Decision:
    """Merge the segments' keep sets of one large output and choose keep/distill/remove."""
    kept: set[int] = set()
    reasons: list[str] = []
    failed = False
    for outcome in outcomes:
        kept |= outcome.keep
        if outcome.keep_all:
            reasons.append(outcome.reason)
        failed = failed or outcome.reason in FAILURES
    text = item.text

    def decision(action, reason, *, kept_ids=(), replacement="") -> Decision:
        return Decision(
            item.call_id, "output", action, reason, phase, run, judge,
            judged=not failed or action != "keep", kept=tuple(sorted(kept_ids)),
            scores=tuple(sorted(scores.items())), original=fingerprint(text),
            replacement=replacement, label=item.label, before_chars=len(text),
            after_chars=len(replacement) if action != "keep" else len(text),
        )

    if kept >= {c.index for c in chunks}:
        return decision("keep", ",".join(dict.fromkeys(reasons)) or "all-chunks")
    if config.keep_cited_files and answer:
        named = cited_files(answer, sorted({f for c in chunks for f in c.files}))
        kept |= {c.index for c in chunks if named.intersection(c.files)}
    kept_chars = sum(len(c.text) + 1 for c in chunks if c.index in kept)
    if kept_chars > len(text) * config.max_keep_ratio:
        return decision("keep", "not-worth")
    rendered = render_output(item.source, chunks, kept)
    if len(rendered.text) >= len(text):
        return decision("keep", "not-worth")
    if not kept:
        return decision("remove", "none-needed", replacement=rendered.text)
    return decision("distill", "chunks", kept_ids=kept, replacement=rendered.text)


def decide_small(
    item: OutputItem, score: float | None, failure: str, config: DistillConfig, *,
    phase: Phase, run: str, judge: str,
) -> Decision:
    text = item.text
    common = dict(phase=phase, run=run, judge=judge, original=fingerprint(text),
                  label=item.label, before_chars=len(text))
    scored = () if score is None else ((0, score),)
    if score is None:
        return Decision(item.call_id, "small", "keep", failure or "no-answer", judged=False,
                        after_chars=len(text), **common)
    if score < config.small_keep_threshold:
        stub = small_stub(item.source)
        return Decision(item.call_id, "small", "remove", "not-needed", scores=scored,
                        replacement=stub, after_chars=len(stub), **common)
    return Decision(item.call_id, "small", "keep", "needed", scores=scored,
                    after_chars=len(text), **common)


def decide_exchange(
    item: Exchange, score: float | None, failure: str, config: DistillConfig, *,
    prompt_fingerprint: str, phase: Phase, run: str, judge: str,
) -> Decision:
    common = dict(phase=phase, run=run, judge=judge, original=prompt_fingerprint,
                  label=" ".join(item.prompt.split())[:80], before_chars=item.chars)
    if score is None:
        return Decision(item.history_id, "exchange", "keep", failure or "no-answer",
                        judged=False, after_chars=item.chars, **common)
    scored = ((0, score),)
    if score < config.exchange_omit_threshold:
        stub = item.stub
        return Decision(item.history_id, "exchange", "omit_exchange", "unrelated",
                        scores=scored, replacement=stub, omitted=item.omitted,
                        after_chars=len(stub), **common)
    return Decision(item.history_id, "exchange", "keep", "relevant", scores=scored,
                    after_chars=item.chars, **common)


def deferred(decision: Decision) -> Decision:
    """An exchange omission the break-even gate refused: kept, and judged again later."""
    return Decision(decision.target, decision.kind, "keep", "deferred", decision.phase,
                    decision.run, decision.judge, judged=False, scores=decision.scores,
                    original=decision.original, label=decision.label,
                    before_chars=decision.before_chars, after_chars=decision.before_chars)


def decide_image(
    item: ImageItem, original: str, *, phase: Phase, run: str
) -> Decision:
    return Decision(item.call_id, "image", "drop_image", f"{item.age} turns old", phase, run,
                    "rules", original=original, replacement=item.stub, label=item.label,
                    before_chars=item.before, after_chars=item.after)


def pays_off(pending: int, turns: int, rewrite: int, factor: float) -> bool:
    """Break-even: about 70% of judged chars go, and the run is assumed to go on about
    as long as it has run, so the saving repays rewriting ``rewrite`` chars of cached prefix."""
    return pending * max(1, turns) >= factor * rewrite


def rewrite_chars(sizes: Sequence[int], positions: Sequence[int], whole_context: bool) -> int:
    """Chars the provider must read again uncached after edits at ``positions``."""
    if not positions:
        return 0
    if whole_context:
        return sum(sizes)
    return sum(sizes[min(positions):])
