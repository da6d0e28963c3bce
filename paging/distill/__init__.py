"""Distillation: old tool outputs cut down to what still matters, old exchanges and images
left out, every original one ``recall`` away (docs/distillation.md).

Pure: no files, no clock, no MCP; it imports only ``paging``. The flow, for the server:

1. ``config, warnings = DistillConfig.from_mapping(settings["distill"])`` once at start-up.
2. Before each model request: ``plan = plan_pass(entries, config, decisions, provider=…)`` with
   the conversation as ``(history_id, message)`` pairs of Pi-shaped messages (see
   :mod:`~paging.distill.conversation`) and every decision made so far.
3. Judge ``plan.segments`` — ``judge_plan(plan, LocalJudge())``, or the server's sampling judge
   built on ``prompt_for_segment``/``parse_chunk_ids``/``scores_from_ids`` — then
   ``new = decide_plan(plan, verdicts)``; persist ``new`` (``Decision.to_dict``).
   ``distill(entries, config, decisions)`` does steps 2–3 with the local judge.
4. ``window = apply.apply(entries, decisions + new)`` (the ``apply`` module): the same bytes for
   the same decisions, always.
5. ``summarize(decisions, tokens, entries)`` for stats.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# The package's names, each loaded from its module on first use: importing the package (or
# only its settings, ``paging.distill.config``, as every command line does) then costs
# nothing until a pass runs. ``apply`` is not among them: it is also a module's name, and the
# import system would put the module there. Import it from ``paging.distill.apply``.
_HOMES = {
    "Chunk": "chunk", "ChunkOptions": "chunk", "chunk_output": "chunk", "grep_file": "chunk",
    "is_grep_like": "chunk", "segment_chunks": "chunk",
    "DistillConfig": "config",
    "Judge": "judge", "LocalJudge": "judge", "parse_chunk_ids": "judge",
    "prompt_for_segment": "judge", "scores_from_ids": "judge",
    "Decision": "model", "JudgeContext": "model", "Question": "model", "Verdict": "model",
    "decide_plan": "pipeline", "distill": "pipeline", "judge_plan": "pipeline",
    "Plan": "plan", "Segment": "plan", "plan_pass": "plan",
    "MARKER": "render",
    "DistillStats": "stats", "summarize": "stats",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
