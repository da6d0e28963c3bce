"""A pass end to end: ``plan_pass`` → verdicts per segment → ``decide_plan`` → decisions.

:func:`distill` does all three with a synchronous judge (the local one by default). The server's
sampling judge is asynchronous: it takes ``plan.segments``, asks the host's model per segment
under its time budget, and calls :func:`decide_plan` with what came back. A segment missing
from ``verdicts``, or whose judge raises ``TimeoutError``, counts as ``timeout``; a judge that
raises anything else counts as ``error``; both keep.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.conversation import Entry
from context_paging.paging.distill.decide import (
    SegmentOutcome,
    decide_exchange,
    decide_image,
    decide_output,
    decide_small,
    deferred,
    interpret,
    pays_off,
)
from context_paging.paging.distill.judge import Judge, LocalJudge
from context_paging.paging.distill.model import Decision, Verdict
from context_paging.paging.distill.plan import Plan, plan_pass


def judge_plan(plan: Plan, judge: Judge) -> dict[str, Verdict]:
    """Ask ``judge`` about every segment of the plan; failures become no-answer verdicts."""
    verdicts: dict[str, Verdict] = {}
    verdict_of = getattr(judge, "verdict", None)  # a judge that names who answered each segment
    for segment in plan.segments:
        if verdict_of is not None:
            try:
                verdicts[segment.key] = verdict_of(plan.question, segment.chunks,
                                                   segment.context)
            except Exception:  # as below: keep this segment, judge the others
                verdicts[segment.key] = Verdict(None, judge.name, "error")
            continue
        try:
            scores = judge.judge(plan.question, segment.chunks, segment.context)
        except TimeoutError:  # no answer within the judge's time budget: keep, ask again later
            verdicts[segment.key] = Verdict(None, judge.name, "timeout")
            continue
        except Exception:  # a judge failure must never fail the request: keep
            verdicts[segment.key] = Verdict(None, judge.name, "error")
            continue
        if scores is None:
            verdicts[segment.key] = Verdict(None, judge.name, "no-answer")
        else:
            verdicts[segment.key] = Verdict(dict(scores), judge.name)
    return verdicts


def distill(
    entries: Sequence[Entry],
    config: DistillConfig,
    decisions: Iterable[Decision] = (),
    *,
    judge: Judge | None = None,
    provider: str | None = None,
) -> list[Decision]:
    """The new decisions of this pass (empty when there is nothing to do now)."""
    plan = plan_pass(entries, config, decisions, provider=provider)
    if plan is None:
        return []
    return decide_plan(plan, judge_plan(plan, judge or LocalJudge()))


def decide_plan(plan: Plan, verdicts: Mapping[str, Verdict]) -> list[Decision]:
    config, phase, run = plan.config, plan.phase, plan.run_id
    threshold = (config.mid_run_chunk_keep_threshold if phase == "mid-run"
                 else config.chunk_keep_threshold)
    out: list[Decision] = []
    for large in plan.large:
        outcomes: list[SegmentOutcome] = []
        scores: dict[int, float] = {}
        judges: list[str] = []
        for segment in large.segments:
            indexes = [c.index for c in segment.chunks]
            if segment.oversize:
                outcomes.append(SegmentOutcome(frozenset(indexes), True, "oversize"))
                continue
            verdict = verdicts.get(segment.key)
            outcomes.append(interpret(verdict, indexes, config, threshold))
            if verdict is not None:
                judges.append(verdict.judge)
                scores.update({i: s for i, s in (verdict.scores or {}).items() if i in indexes})
        out.append(decide_output(
            large.item, large.chunks, outcomes, config, answer=plan.question.answer,
            phase=phase, run=run, judge="+".join(dict.fromkeys(judges)) or "none",
            scores=scores,
        ))
    small: list[Decision] = []
    exchanges: list[Decision] = []
    for segment in plan.batches:
        verdict = verdicts.get(segment.key)
        failure = "timeout" if verdict is None else verdict.failure
        name = verdict.judge if verdict is not None else "none"
        for k, item_index in enumerate(plan.batch_items[segment.key]):
            score = None
            if verdict is not None and verdict.scores is not None:
                score = verdict.scores.get(k, 1.0)  # an item without a score is kept
            if segment.context.kind == "small":
                small.append(decide_small(plan.small[item_index], score, failure, config,
                                          phase=phase, run=run, judge=name))
            else:
                item = plan.exchanges[item_index]
                exchanges.append(decide_exchange(
                    item, score, failure, config, prompt_fingerprint=plan.fingerprints[item.index],
                    phase=phase, run=run, judge=name))
    out += small
    images = [decide_image(im, plan.fingerprints[im.index], phase=phase, run=run)
              for im in plan.images]
    if phase == "run-end":
        exchanges, images = _run_end_gate(plan, out, exchanges, images)
    return out + exchanges + images


def _run_end_gate(
    plan: Plan, edits: list[Decision], exchanges: list[Decision], images: list[Decision]
) -> tuple[list[Decision], list[Decision]]:
    """Exchange omissions, and images from before the run, must pay for the part of the cached
    prefix that they alone make the provider read again (docs/distillation.md, "Mid-run checkpoints
    and break-even"). Failing exchanges are deferred; failing images get no decision and are
    collected again later."""
    config = plan.config
    if not config.exchange_break_even:
        return exchanges, images
    where = {o.item.call_id: o.item.index for o in plan.large}
    where |= {s.call_id: s.index for s in plan.small}
    where |= {e.history_id: e.index for e in plan.exchanges}
    where |= {im.call_id: im.index for im in plan.images}
    old = {im.call_id for im in plan.images if im.index < plan.run_start}
    others = [where[d.target] for d in edits if d.edits]
    others += [where[d.target] for d in images if d.target not in old]
    omitted = [d for d in exchanges if d.action == "omit_exchange"]
    if omitted and not _pays(plan, [where[d.target] for d in omitted], others,
                             sum(d.saved_chars for d in omitted),
                             config.exchange_min_saving_chars):
        exchanges = [deferred(d) if d.action == "omit_exchange" else d for d in exchanges]
    others += [where[d.target] for d in exchanges if d.edits]
    early = [d for d in images if d.target in old]
    if early and not _pays(plan, [where[d.target] for d in early], others,
                           sum(d.saved_chars for d in early), 0):
        images = [d for d in images if d.target not in old]
    return exchanges, images


def _pays(plan: Plan, mine: list[int], others: list[int], saved: int, minimum: int) -> bool:
    marginal = plan.rewrite(mine + others) - plan.rewrite(others)
    if marginal <= 0:
        return True  # rides along: the other edits already cost that rewrite
    return saved >= minimum and pays_off(saved, plan.turns, marginal, plan.factor)
