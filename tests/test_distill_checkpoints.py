"""paging.distill: mid-run checkpoints, superseded outputs, break-even and the memo
(docs/distillation.md, "Mid-run checkpoints and break-even"), upstream's cases 49–52.
"""

from __future__ import annotations

from context_paging.paging.distill import Decision, DistillConfig, plan_pass
from context_paging.paging.distill.conversation import Call, later_calls_for, superseded_by
from context_paging.paging.distill.decide import pays_off

from tests.builders import assistant_entry as assistant
from tests.builders import lines, run_end
from tests.builders import result_entry as result
from tests.builders import user_entry as user

# --- checkpoints, superseded, break-even, memo -------------------------------------------

def _mid_run(calls, question="Fix the tests"):
    entries = [user("earlier question", "u0"), assistant("earlier answer", "a0"),
               user(question, "u1")]
    for i, (name, args, text, note) in enumerate(calls):
        entries += [assistant(note, f"a{i + 1}", [(f"c{i}", name, args)]),
                    result(f"c{i}", name, text, f"r{i}")]
    return entries


BIG = lines(20)
EAGER = DistillConfig(min_result_chars=100, mid_run_min_age_turns=2, mid_run_batch_chars=0,
                      mid_run_break_even=False)


def test_49_checkpoints_take_outputs_old_enough_with_later_calls_and_superseded_facts():
    entries = _mid_run([("bash", {"command": "npm  test"}, BIG, "Running the suite."),
                        ("read", {"path": "./src/a.js"}, BIG, ""),
                        ("edit", {"path": "src/a.js"}, BIG, "Fixing a.js."),
                        ("recall", {"tool_call_id": "c0"}, BIG, ""),
                        ("bash", {"command": "npm test"}, BIG, ""),
                        ("bash", {"command": "git diff"}, "short", "Checking the diff.")])
    plan = plan_pass(entries, EAGER)
    assert plan.phase == "mid-run" and plan.run_id == "u1"
    assert [(o.item.call_id, o.item.turn) for o in plan.large] == [("c0", 0), ("c1", 1)]
    log, read = (o.item for o in plan.large)
    assert log.superseded == "the same command ran again later (4 turns later)"
    assert read.superseded == "the file changed after this read (edit src/a.js, 1 turn later)"
    assert log.later_calls[:2] == ("read ./src/a.js", "edit src/a.js")
    assert plan.question.latest_note == "Checking the diff."
    assert plan.question.notes == "Running the suite.\n\nFixing a.js."
    assert plan.question.history == (("earlier question", "earlier answer"),)
    assert plan_pass(entries[:-1], EAGER) is None  # a result is missing: not between turns


def test_superseded_reads_commands_and_repeated_calls():
    def call(name, args, turn):
        return Call("x", name, args, turn, 0)

    read = ("read", {"path": "a.ts", "offset": 1, "limit": 100}, 1)
    assert superseded_by(*read, [call("read", {"path": "a.ts", "offset": 101, "limit": 100}, 2)]) \
        is None
    assert "read again" in superseded_by(*read, [call("read", {"path": "./a.ts", "offset": 1,
                                                               "limit": 100}, 3)])
    assert superseded_by(*read, [call("edit", {"path": "a.ts"}, 1)]) is None
    assert superseded_by("bash", {"command": "npm test 2>&1"}, 0,
                         [call("bash", {"command": "npm  test | head"}, 4)]) is None
    assert superseded_by("grep", {"pattern": "x"}, 0, [call("grep", {"pattern": "x"}, 2)]) == (
        "the same grep call ran again later (2 turns later)")


def test_mid_run_tiers_need_the_batch_size_and_must_pay_off():
    entries = _mid_run([("bash", {"command": f"c{i}"}, "y" * 12_000, "") for i in range(6)])
    assert plan_pass(entries, DistillConfig()) is None  # 24k eligible < 60k batch
    batch = DistillConfig(mid_run_batch_chars=20_000)
    assert plan_pass(entries, batch) is None  # 24k × 6 turns < 16 × ~72k rewrite
    plan = plan_pass(entries, DistillConfig(mid_run_batch_chars=20_000, mid_run_break_even=False))
    assert [o.item.call_id for o in plan.large] == ["c0", "c1"]


def test_50_break_even():
    assert pays_off(60_000, 20, 90_000, 13) and not pays_off(60_000, 20, 90_000, 16)
    assert pays_off(60_000, 0, 1_000, 16)


def test_51_the_memo_uses_explicit_status_and_rejudges_checkpoint_keeps_at_run_end():
    outputs = [("bash", {"command": f"k{i}"}, lines(100, f"o{i}")) for i in range(5)]
    entries = run_end(outputs)

    def d(target, action="keep", phase="mid-run", judged=True):
        return Decision(target, "output", action, "x", phase, "u0", "local", judged=judged)

    known = [d("c0"), d("c1", judged=False), d("c2", phase="run-end"), d("c3", "distill"),
             d("c4", phase="run-end", judged=False)]
    plan = plan_pass(entries, DistillConfig(min_run_chars=0), known)
    assert [o.item.call_id for o in plan.large] == ["c0", "c1", "c4"]


def test_52_later_call_lists_keep_both_ends():
    calls = [Call(f"x{i}", "bash", {"command": f"c{i}"}, i, 0) for i in range(40)]
    assert later_calls_for(37, calls) == ("bash `c38`", "bash `c39`")
    assert later_calls_for(-1, calls, 6) == ("bash `c0`", "bash `c1`", "bash `c2`",
                                             "[… 34 more calls …]", "bash `c37`", "bash `c38`",
                                             "bash `c39`")
