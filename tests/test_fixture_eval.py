"""bench/fixture_eval.py: how lines are labelled "used", and the local judge on one real session."""

from __future__ import annotations

from bench.fixture_eval import ExchangeLabels, evaluate, label_session, output_kind, session_entries
from tests.builders import assistant_entry as assistant
from tests.builders import result_entry as result
from tests.builders import user_entry as user
from tests.conftest import fixture, recorded

FILLER = "\n".join(f"# filler {n}" for n in range(40))  # no distinctive piece: never used


NET = "def connect(url):\n    policy = RetryPolicy(max_attempts=5)\n    timeout_seconds = 30\n"


def test_a_line_is_used_when_the_answer_or_a_later_run_reproduces_a_piece_of_it():
    entries = [
        user("Where is the retry policy defined?", "u0"),
        assistant("", "a0", [("c0", "read", {"path": "src/net.py"})]),
        result("c0", "read", NET + FILLER, "r0"),
        assistant("It is `RetryPolicy` in src/net.py.", "a1"),
        user("And the timeout?", "u1"),
        assistant("timeout_seconds is 30.", "a2"),
    ]
    assert label_session(entries) == {"c0": frozenset({1, 2})}


def test_pieces_the_prompt_named_or_the_run_used_before_its_answer_do_not_count():
    entries = [
        user("Rename RetryPolicy everywhere.", "u0"),
        assistant("", "a0", [("c0", "read", {"path": "src/net.py"})]),
        result("c0", "read", NET + FILLER, "r0"),
        assistant("", "a1", [("c1", "edit", {"path": "src/net.py",
                                             "oldText": "timeout_seconds = 30",
                                             "newText": "timeout_s = 30"})]),
        result("c1", "edit", "ok", "r1"),
        assistant("Renamed RetryPolicy.", "a2"),
    ]
    assert label_session(entries) == {"c0": frozenset()}


def test_a_later_output_with_the_same_piece_takes_the_credit():
    entries = [
        user("Show the net module.", "u0"),
        assistant("", "a0", [("c0", "read", {"path": "src/net.py"})]),
        result("c0", "read", NET + FILLER, "r0"),
        assistant("", "a1", [("c1", "read", {"path": "src/net.py", "offset": 1})]),
        result("c1", "read", NET + FILLER, "r1"),
        assistant("It uses `RetryPolicy(max_attempts=5)`.", "a2"),
    ]
    assert label_session(entries) == {"c0": frozenset(), "c1": frozenset({1})}


def test_outputs_are_classified_by_call_and_content():
    grep = "src/a.py:1:x\nsrc/b.py:2:y\nsrc/c.py:3:z"
    assert output_kind("bash", {"command": "rg -n x"}, grep) == "grep"
    assert output_kind("shell", {"command": ["bash", "-lc", "sed -n '1,80p' a.ts"]}, "") == "read"
    assert output_kind("Read", {"file_path": "a.go"}, "") == "read"
    assert output_kind("bash", {"command": "cd app && npm test"}, "") == "test/build log"
    assert output_kind("bash", {"command": "./run"}, "=== 3 passed in 0.1s ===") \
        == "test/build log"
    assert output_kind("bash", {"command": "ls -la"}, "") == "other shell"
    assert output_kind("WebFetch", {"url": "https://x"}, "") == "other"


@recorded
def test_the_local_judge_keeps_every_needed_line_of_a_real_session_and_removes_some():
    name = "cc-2.1.29-user-pasted-image.jsonl"
    rows = evaluate(session_entries(fixture(name)), name)
    needed = sum(len(r.needed) for r in rows)
    assert needed > 0
    assert sum(len(r.kept) for r in rows) == needed
    assert sum(r.removed_chars for r in rows) > 0


def test_an_old_exchange_is_needed_when_the_next_run_names_what_it_brought_in():
    entries = [
        user("Where is the retry policy defined?", "u0"),
        assistant("", "a0", [("c0", "read", {"path": "src/net.py"})]),
        result("c0", "read", NET + FILLER, "r0"),
        assistant("It is RetryPolicy in src/net.py.", "a1"),
        user("Update the README badge.", "u1"),
        assistant("Done.", "a2"),
        user("Raise max_attempts in RetryPolicy.", "u2"),  # the next run names it
        assistant("Raised.", "a3"),
        user("Thanks.", "u3"),
        assistant("You're welcome; RetryPolicy is in src/net.py.", "a4"),
    ]
    labels = ExchangeLabels(entries)
    assert labels.used(0, 4, after=6, until=8)  # the request of the run starting at u2
    assert not labels.used(4, 6, after=6, until=8)  # the README exchange brought in nothing
    assert labels.used(0, 4, after=8, until=10)  # and again by the last run
    # A piece known before the exchange is no evidence: the README exchange, seen from u3.
    assert not labels.used(4, 6, after=8)
