"""paging.distill: segment prompts, verdicts and the decisions of a run-end pass
(docs/distillation.md, "The judges", "Decisions"), upstream's numbered cases 13–29.

Not here, because they are the server's: 27, 28 and 46's concurrency (the sampling judge's time
budget and request pool).
"""

from __future__ import annotations

import math

from context_paging.paging.distill import (
    MARKER,
    ChunkOptions,
    DistillConfig,
    Question,
    Verdict,
    chunk_output,
    decide_plan,
    distill,
    judge_plan,
    plan_pass,
    prompt_for_segment,
    summarize,
)
from context_paging.paging.distill.decide import interpret
from context_paging.paging.distill.items import cited_files

from tests.builders import CONFIG, FIRST_CHUNK, Fixed, judge_context, lines, run_end

# --- prompts, verdicts, decisions ----------------------------------------------------------


def test_13_to_16_segment_prompts_carry_the_work_the_tool_and_numbered_chunks():
    chunks = chunk_output(lines(30), ChunkOptions(120, 700, 700))[:3]
    prompt = prompt_for_segment(Question("Why?", answer="Because."), chunks, judge_context())
    for part in ("Why?", "Because.", "bash `cat x`", '{"command":"cat x"}', "30 lines",
                 "[chunk 1]", "[chunk 3]", '{"keep"'):
        assert part in prompt
    assert "Earlier in the session" not in prompt and "reported an error" not in prompt
    long = prompt_for_segment(Question("q", answer="a" * 10_000), chunks,
                              judge_context(arguments="", part=2, parts=3, total_lines=300))
    answer = long.split("## The agent's final answer\n")[1].split("\n\n## ")[0]
    assert len(answer) < 6_100 and "[…]" in answer
    assert "300 lines; this is part 2 of 3" in long and "Arguments:" not in long
    history = Question("q", answer="a", history=(("Fix it", "Done"), ("Thanks", "")))
    text = prompt_for_segment(history, chunks, judge_context(failed=(True,)))
    assert "User: Fix it\nAgent: Done" in text and "reported an error" in text
    assert "User: Thanks" in text and "User: Thanks\nAgent" not in text


def _interpret(verdict, n=3, threshold=0.6):
    out = interpret(verdict, list(range(n)), CONFIG, threshold)
    return out.keep_all, sorted(out.keep), out.reason


def test_17_no_answer_or_half_an_answer_keeps_the_segment():
    assert _interpret(Verdict(None, failure="error")) == (True, [0, 1, 2], "error")
    assert _interpret(Verdict({}, focus="whole", focus_scores={"whole": 1.0}))[2] == "no-answer"
    assert _interpret(Verdict({}, keep_whole=0.1))[2] == "no-answer"
    assert _interpret(None)[2] == "timeout"


def test_18_keep_whole_at_the_threshold_or_a_strong_whole_focus_keeps_all():
    assert _interpret(Verdict({}, keep_whole=0.7, focus="none"))[2] == "whole-needed"
    strong = Verdict({}, keep_whole=0.2, focus="whole", focus_scores={"whole": 0.9})
    assert _interpret(strong)[2] == "whole-chosen"


def test_19_a_weak_whole_defers_to_chunk_scores():
    weak = Verdict({1: 0.96}, keep_whole=0.1, focus="whole", focus_scores={"whole": 0.43})
    assert _interpret(weak, threshold=0.8) == (False, [1], "chunks")
    weak = Verdict({0: 0.3}, keep_whole=0.1, focus="whole", focus_scores={"whole": 0.45})
    assert _interpret(weak)[0::2] == (True, "whole-chosen")


def test_20_the_focus_chunk_is_kept_whatever_its_score():
    v = Verdict({0: 0.1, 1: 0.79, 2: 0.8}, keep_whole=0.1, focus="chunk_1",
                focus_scores={"chunk_1": 0.5})
    assert _interpret(v, threshold=0.8) == (False, [0, 2], "chunks")


def test_21_none_focus_removes_only_when_nothing_passes():
    none = {"keep_whole": 0.1, "focus": "none"}
    assert _interpret(Verdict({0: .2, 1: .3}, **none, focus_scores={"none": .6})) == (
        False, [], "none-needed")
    assert _interpret(Verdict({2: .95}, **none, focus_scores={"none": .9}))[1] == [2]
    weak = Verdict({}, **none, focus_scores={"none": .4, "chunk_1": .1, "chunk_2": .35,
                                             "whole": .15})
    assert _interpret(weak)[1] == [1]


def test_plain_chunk_scores_keep_unscored_chunks_and_remove_only_on_an_empty_keep_set():
    assert _interpret(Verdict({0: 0.9, 1: 0.1})) == (False, [0, 2], "chunks")
    assert _interpret(Verdict({0: 0.0, 1: 0.0, 2: 0.0})) == (False, [], "none-needed")


def test_22_cited_files_need_word_boundaries_and_basenames_of_four_chars():
    files = ["src/core/session.ts", "lib/util.ts", "src/x.c"]
    assert cited_files("See src/core/session.ts for details.", files) == {files[0]}
    assert cited_files("It is in `util.ts`.", files) == {files[1]}
    for text in ("myutil.ts", "util.tsx", "src/util.tsx", "old-session.ts", "data.ts",
                 "x.c is short"):
        assert cited_files(text, files) == set()
    assert cited_files("See session.ts.", files) == {files[0]}
    assert cited_files("in src/x.c", files) == {files[2]}


def test_23_a_run_end_pass_distills_each_large_output_to_the_kept_chunks():
    entries = run_end([("bash", {"command": "cmd a"}, lines(200)),
                        ("bash", {"command": "cmd b"}, lines(200))])
    decisions = distill(entries, CONFIG, judge=FIRST_CHUNK)
    assert [(d.target, d.action, d.reason, d.judge) for d in decisions] == [
        ("c0", "distill", "chunks", "fake"), ("c1", "distill", "chunks", "fake")]
    assert all(d.replacement.startswith(MARKER) and d.kept == (0,) for d in decisions)
    assert summarize(decisions).saved_chars == sum(d.before_chars - d.after_chars
                                                   for d in decisions) > 0


def test_24_an_output_with_nothing_needed_is_removed_with_a_stub():
    entries = run_end([("bash", {"command": "cmd a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 0.0))
    assert (d.action, d.reason) == ("remove", "none-needed")
    assert d.replacement.startswith(MARKER) and "bash `cmd a`" in d.replacement
    assert '200 lines' in d.replacement and 'recall({"tool_call_id":"c0"})' in d.replacement


def test_25_keeping_most_of_an_output_is_not_worth_an_edit():
    entries = run_end([("bash", {"command": "cmd a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Fixed(lambda ctx, c: 1.0 if c.index % 10 < 7 else 0))
    assert (d.action, d.reason, d.saved_chars) == ("keep", "not-worth", 0)
    plan = plan_pass(entries, CONFIG)
    whole = {s.key: Verdict({}, keep_whole=0.9, focus="none") for s in plan.segments}
    assert [(d.action, d.reason) for d in decide_plan(plan, whole)] == [("keep", "whole-needed")]


def test_26_a_judge_that_fails_keeps_everything_and_is_asked_again():
    class Broken:
        name = "broken"

        def judge(self, question, chunks, context):
            raise RuntimeError("network down")

    entries = run_end([("bash", {"command": "a"}, lines(200))])
    [d] = distill(entries, CONFIG, judge=Broken())
    assert (d.action, d.reason, d.judged) == ("keep", "error", False)
    [d] = distill(entries, CONFIG, judge=_Silent())
    assert (d.action, d.reason, d.judged) == ("keep", "no-answer", False)


class _Silent:
    name = "silent"

    def judge(self, question, chunks, context):
        return None


def test_29_a_failed_segment_keeps_exactly_its_own_lines():
    config = DistillConfig(max_chunks_per_segment=5)
    entries = run_end([("bash", {"command": "cat big"}, lines(1_000))])
    plan = plan_pass(entries, config)
    [large] = plan.large
    assert len(large.segments) == math.ceil(len(large.chunks) / 5)
    second = prompt_for_segment(plan.question, large.segments[1].chunks, large.segments[1].context)
    assert f"1000 lines; this is part 2 of {len(large.segments)}" in second
    assert second.index("[chunk 6]") < second.index("[chunk 7]")
    verdicts = judge_plan(plan, Fixed(lambda ctx, c: 0.0))
    verdicts[large.segments[0].key] = Verdict(None, failure="error")
    [d] = decide_plan(plan, verdicts)
    end = large.segments[0].chunks[-1].end
    assert d.action == "distill" and d.kept == tuple(range(5))
    assert f"line {end} x" in d.replacement and f"line {end + 1} x" not in d.replacement


def test_a_decision_stored_is_every_field_in_order_with_lists_for_tuples():
    from context_paging.paging.distill.model import Decision

    decision = Decision(target="t1", kind="output", action="distill", reason="r",
                        phase="run-end", run="h1", judge="local", judged=False, kept=(0, 2),
                        scores=((0, 0.5), (2, 1.0)), original="o", replacement="x",
                        omitted=("h2",), label="read a.py", before_chars=9, after_chars=1,
                        saved_tokens=3)
    stored = decision.to_dict()
    assert list(stored.items()) == [
        ("target", "t1"), ("kind", "output"), ("action", "distill"), ("reason", "r"),
        ("phase", "run-end"), ("run", "h1"), ("judge", "local"), ("judged", False),
        ("kept", [0, 2]), ("scores", [[0, 0.5], [2, 1.0]]), ("original", "o"),
        ("replacement", "x"), ("omitted", ["h2"]), ("label", "read a.py"),
        ("before_chars", 9), ("after_chars", 1), ("saved_tokens", 3)]
    assert Decision.from_dict(stored) == decision
