"""Distillation: old tool outputs cut down to what still matters, old exchanges and images
left out, every original one ``recall`` away (docs/distillation.md).

Pure: no files, no clock, no MCP. The flow, for the server:

1. ``config, warnings = DistillConfig.from_mapping(settings["distill"])`` once at start-up.
2. Before each model request: ``plan = plan_pass(entries, config, decisions, provider=…)`` with
   the conversation as ``(history_id, message)`` pairs of Pi-shaped messages (see
   :mod:`~paging.distill.conversation`) and every decision made so far.
3. Judge ``plan.segments`` — ``judge_plan(plan, LocalJudge())``, or the server's sampling judge
   built on ``prompt_for_segment``/``parse_chunk_ids``/``scores_from_ids`` — then
   ``new = decide_plan(plan, verdicts)``; persist ``new`` (``Decision.to_dict``).
   ``distill(entries, config, decisions)`` does steps 2–3 with the local judge.
4. ``window = apply(entries, decisions + new)``: the same bytes for the same decisions, always.
5. ``summarize(decisions, tokens, entries)`` for stats.
"""

from context_paging.paging.distill.apply import apply
from context_paging.paging.distill.chunk import (
    Chunk,
    ChunkOptions,
    chunk_output,
    grep_file,
    is_grep_like,
    segment_chunks,
)
from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.judge import (
    Judge,
    LocalJudge,
    parse_chunk_ids,
    prompt_for_segment,
    scores_from_ids,
)
from context_paging.paging.distill.model import Decision, JudgeContext, Question, Verdict
from context_paging.paging.distill.pipeline import decide_plan, distill, judge_plan
from context_paging.paging.distill.plan import Plan, Segment, plan_pass
from context_paging.paging.distill.render import MARKER
from context_paging.paging.distill.stats import DistillStats, summarize

__all__ = [
    "MARKER",
    "Chunk",
    "ChunkOptions",
    "Decision",
    "DistillConfig",
    "DistillStats",
    "Judge",
    "JudgeContext",
    "LocalJudge",
    "Plan",
    "Question",
    "Segment",
    "Verdict",
    "apply",
    "chunk_output",
    "decide_plan",
    "distill",
    "grep_file",
    "is_grep_like",
    "judge_plan",
    "parse_chunk_ids",
    "plan_pass",
    "prompt_for_segment",
    "scores_from_ids",
    "segment_chunks",
    "summarize",
]
