"""Which messages the selector keeps together, protects or drops: upstream's cases 17–40
(grouping, protection and atomicity; interrupted exchanges; docs/selection.md, "Upstream's test
cases").

Figures are upstream's: chars/4 estimates, R = 23 for the resident prompt and one ``read`` tool,
a plain notice of ~69-70 tokens. ``FakeRaw`` (tests/builders.py) plays the server's ledger.
"""

from __future__ import annotations

import copy

from context_paging.paging.estimate import chars4_tokens

from tests.builders import (
    FakeRaw,
    assistant,
    call,
    custom,
    raises,
    repeat,
    result,
    select,
    tool_assistant,
    user,
    window,
)

# -- grouping, protection, atomicity -----------------------------------------------------------


def test_case_17_an_outgoing_only_instruction_stays_with_its_persistent_request():
    messages = [user(repeat("old", 1_000)), user(repeat("actual", 800)),
                user("extension instruction")]
    error = raises("ACTIVE_REQUEST_TOO_LARGE", select, messages, budget=130,
                   outgoing_only=[False, False, True])
    assert error.estimated_tokens == 231  # 23 + 202 + 6


def test_case_18_prefix_summaries_and_completed_turns_leave_first():
    messages = [{"role": "compactionSummary", "summary": repeat("PREFIX_SUMMARY", 100_000)},
                user(repeat("old request", 300_000)), assistant(repeat("old answer", 160_000)),
                user("new request"), assistant("new answer")]
    selection = select(messages)
    assert selection.notice.startswith("[Context paging notice")
    assert selection.indexes == (3, 4)


def test_case_19_prefix_only_context_pages_down_to_the_notice():
    summary = {"role": "compactionSummary", "summary": repeat("PREFIX_ONLY", 300_000)}
    selection = select([summary])
    assert (selection.indexes, selection.mode) == ((), "paged")
    assert selection.notice is not None
    assert selection.estimated_tokens <= selection.budget_tokens


def test_case_20_the_active_user_stays_while_its_oldest_exchange_leaves():
    messages = [user("active request"), tool_assistant(call("old-call")),
                result("old-call", repeat("old result", 180_000)),
                tool_assistant(call("new-call")), result("new-call", repeat("new result", 100_000))]
    assert select(messages).indexes == (0, 3, 4)


def test_case_21_an_injected_custom_stays_with_its_user():
    messages = [user(repeat("ACTIVE_USER_REQUEST ", 120_000)),
                custom(repeat("INJECTED_CUSTOM_CONTEXT ", 100_000)),
                tool_assistant(call("large-call")),
                result("large-call", repeat("large active exchange ", 80_000))]
    # W2: without raw history the unread trailing exchange is still protected, so upstream's
    # eviction of it happens once the model has answered after it.
    unread = select(messages)
    assert (unread.mode, unread.indexes) == ("protected_overflow", (0, 1, 2, 3))
    answered = select([*messages, assistant("noted")])
    assert (answered.mode, answered.indexes) == ("paged", (0, 1, 4))


def test_case_22_a_custom_only_request_is_kept_while_its_old_exchange_leaves():
    messages = [custom("CUSTOM_ONLY_REQUEST"), tool_assistant(call("old-call")),
                result("old-call", repeat("old custom exchange", 180_000)),
                tool_assistant(call("new-call")),
                result("new-call", repeat("new custom exchange", 100_000))]
    assert select(messages).indexes == (0, 3, 4)


def test_case_23_a_custom_request_after_a_completed_user_turn_is_kept():
    messages = [user(repeat("completed user request", 160_000)),
                assistant(repeat("completed user answer", 160_000)),
                custom("CUSTOM_AFTER_USER_REQUEST"), tool_assistant(call("custom-old-call")),
                result("custom-old-call", repeat("old custom follow-up", 180_000)),
                tool_assistant(call("custom-new-call")),
                result("custom-new-call", repeat("new custom follow-up", 100_000))]
    assert select(messages).indexes == (2, 5, 6)


def test_case_24_parallel_results_stay_atomic_in_stored_order():
    messages = [user(repeat("old request", 80_000)), tool_assistant(call("old-call")),
                result("old-call", repeat("old result", 180_000)), user("active request"),
                tool_assistant(call("parallel-a"), call("parallel-b")),
                result("parallel-b", "parallel result b"),
                result("parallel-a", "parallel result a")]
    selection = select(messages)
    assert selection.indexes == (3, 4, 5, 6)
    assert [messages[i]["toolCallId"] for i in selection.indexes[2:]] == ["parallel-b",
                                                                          "parallel-a"]


def test_case_25_malformed_exchanges_are_structure_errors():
    for messages in [
        [user("active"), result("orphan", "bad")],
        [user("old"), tool_assistant(call("missing")), user("active")],
        [user("active"), tool_assistant(call("duplicate"), call("duplicate")),
         result("duplicate", "bad")],
    ]:
        error = raises("INVALID_MESSAGE_STRUCTURE", select, messages)
        assert error.estimated_tokens is None


def test_case_26_a_large_output_that_fits_is_kept_exactly():
    output = "LARGE_OUTPUT " + '😀JSON {"value": true}\n' * 5_000
    messages = [user("active"), tool_assistant(call("large")), result("large", output)]
    selection = select(messages)
    assert window(messages, selection)[2]["content"][0]["text"] == output


def test_case_28_the_notice_names_a_stable_raw_history_id():
    evicted = user(repeat("matched old request", 160_000))
    messages = [evicted, assistant(repeat("matched old answer", 160_000)), user("active")]
    raw = FakeRaw(messages, [("history-user-17", evicted)])
    selection = select(messages, raw=raw)
    assert 'history_id: "history-user-17".' in selection.notice
    # The old answer has no stored key: no frontier can be committed.
    assert (selection.cut_state, selection.fallback_reason) == (None, "cut-key-unresolved")


def test_case_29_a_compaction_summary_stays_until_fifo_needs_its_room():
    small = {"role": "compactionSummary", "summary": "CANONICAL_SUMMARY"}
    assert select([small, user("active")]).indexes == (0, 1)
    large = {**small, "summary": repeat("CANONICAL_SUMMARY", 300_000)}
    assert select([large, user("active")]).indexes == (1,)


def test_case_35_paging_never_mutates_messages_or_raw_history():
    old_assistant = tool_assistant(call("old-call"))
    old_result = result("old-call", repeat("old result", 180_000))
    messages = [user(repeat("old request", 160_000)), old_assistant, old_result,
                user("active request")]
    raw = FakeRaw(messages, [("old-turn", copy.deepcopy(old_assistant)),
                             ("old-result", copy.deepcopy(old_result))])
    before = copy.deepcopy((messages, raw.items))
    assert select(messages, raw=raw).mode == "paged"
    assert (messages, raw.items) == before


# -- interrupted exchanges ---------------------------------------------------------------------


def _failed(stop, count):
    calls = tool_assistant(call("failed-a"), call("failed-b"), stop=stop)
    return [calls, result("failed-a", "first"), result("failed-b", "second")][: count + 1]


def test_case_36_request_provenance_stays_aligned_after_omitting_interrupted_exchanges():
    for stop in ("aborted", "error"):
        for count in (0, 1, 2):
            old, actual = user(repeat("old request", 1_000)), user(repeat("actual request", 800))
            messages = [old, *_failed(stop, count), actual, user("extension instruction")]
            outgoing = [False] * (len(messages) - 1) + [True]
            before = copy.deepcopy(messages)
            full = select(messages, outgoing_only=outgoing)
            assert [messages[i] for i in full.indexes] == [old, actual, messages[-1]]
            assert full.dropped == tuple(range(1, count + 2))
            error = raises("ACTIVE_REQUEST_TOO_LARGE", select, messages, budget=130,
                           outgoing_only=outgoing)
            assert error.estimated_tokens == 233  # 23 + 204 + 6
            paged = select(messages, budget=350, outgoing_only=outgoing)
            assert paged.mode == "paged" and paged.indexes == full.indexes[1:]
            # 23 + 204 + 6 + a 69-token notice: our notice wording keeps upstream's 302.
            assert paged.estimated_tokens == 302
            assert messages == before


def test_case_37_measured_usage_subtracts_omitted_interrupted_exchanges():
    for stop in ("aborted", "error"):
        failed = [tool_assistant(call("failed-a"), call("failed-b"), stop=stop),
                  result("failed-a", repeat("first", 1_000)), result("failed-b", "second")]
        removed = sum(chars4_tokens(m) for m in failed)
        selection = select([user("active request"), *failed], context_tokens=1_000,
                           budget=1_000 - removed)
        assert (selection.mode, selection.indexes) == ("within_budget", (0,))
        assert selection.estimated_tokens == 1_000 - removed


def test_case_38_interrupted_exchanges_are_omitted_even_within_budget():
    for stop in ("aborted", "error"):
        messages = [*_failed(stop, 2), user("continue")]
        selection = select(messages)
        assert (selection.indexes, selection.dropped) == ((3,), (0, 1, 2))


def test_case_39_interrupted_exchanges_leave_every_segment():
    messages = [tool_assistant(call("prefix-call"), stop="aborted"),
                result("prefix-call", "PREFIX_FAILED_RESULT"),
                user(repeat("old request", 300_000)),
                tool_assistant(call("completed-call"), stop="error"), user("active request"),
                assistant("partial text", stop="error"),
                tool_assistant(call("active-call"), stop="aborted"),
                result("active-call", "ACTIVE_FAILED_RESULT")]
    selection = select(messages)
    assert (selection.mode, selection.indexes) == ("paged", (4,))
    assert selection.dropped == (0, 1, 3, 5, 6, 7)


def test_case_40_results_of_interrupted_exchanges_are_still_validated():
    for messages in [
        [user("active"), tool_assistant(call("dup"), stop="aborted"), result("dup", "first"),
         result("dup", "second")],
        [user("active"), tool_assistant(call("expected"), stop="error"), result("wrong", "x")],
        [assistant("partial", stop="error"), user("next request"), result("unowned", "x")],
    ]:
        raises("INVALID_MESSAGE_STRUCTURE", select, messages)
