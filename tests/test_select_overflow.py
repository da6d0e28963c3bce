"""The protected exchange, overflow and recovery modes (docs/selection.md, "Protected content",
"Overflow and recovery"), and the weaknesses of upstream this port fixes (W1, W2, W4, W13:
"Differences from upstream").
"""

from __future__ import annotations

import copy

from context_paging.paging.estimate import chars4_tokens, resident_chars4
from context_paging.paging.notice import format_tokens, paging_notice

from tests.builders import (
    SYSTEM,
    FakeRaw,
    assistant,
    call,
    repeat,
    result,
    select,
    sent_text,
    tool_assistant,
    user,
    window,
)

# -- protected exchange, overflow and recovery --------------------------------------------------


def _with_usage(messages, extra=100, tools=()):
    """Measured usage just above the plain estimate, as upstream's overflow tests use."""
    return resident_chars4(SYSTEM, list(tools)) + sum(map(chars4_tokens, messages)) + extra


def test_an_unread_trailing_parallel_exchange_is_sent_whole_in_protected_overflow():
    fresh = tool_assistant(call("new-call-a"), call("new-call-b"))
    results = [result("new-call-b", repeat("new parallel result b", 160_000)),
               result("new-call-a", repeat("new parallel result a", 160_000))]
    messages = [{"role": "compactionSummary", "summary": repeat("old prefix", 80_000)},
                user(repeat("older completed turn", 160_000)),
                assistant(repeat("older completed answer", 160_000)), user("active request"),
                tool_assistant(call("removable-call")),
                result("removable-call", repeat("removable active exchange", 160_000)),
                fresh, *results]
    raw = FakeRaw(messages, [("raw-turn-id", fresh), ("r1", results[0]), ("r2", results[1])])
    selection = select(messages, budget=48_000, tools=[], raw=raw,
                       context_tokens=_with_usage(messages))
    assert selection.mode == "protected_overflow"
    assert 48_000 < selection.estimated_tokens <= 100_000
    assert selection.indexes == (3, 6, 7, 8)
    assert "sent in full for this follow-up call" in selection.notice
    assert "The normal rolling budget is 48,000 estimated tokens." in selection.notice


def test_a_read_exchange_pages_with_an_exact_read_call_in_the_notice():
    old_call = tool_assistant(call("old-call", "distinctive-tool"))
    old_result = result("old-call", repeat("large old result", 300_000), "distinctive-tool")
    messages = [user("previous request"), old_call, old_result,
                assistant("MODEL_HAS_RESPONDED"), user("NEXT_REQUEST")]
    raw = FakeRaw(messages, [("raw-turn-id", old_call), ("r", old_result),
                             ("raw-response-id", messages[3]), ("raw-next-user-id", messages[4])])
    selection = select(messages, tools=[], raw=raw)
    assert selection.mode == "paged" and "large old result" not in sent_text(messages, selection)
    assert "Its tool: distinctive-tool." in selection.notice
    assert ('read_context_output({"history_id":"raw-turn-id","source":"tool_result",'
            '"tool_call_id":"old-call","offset":0,"limit":2000})') in selection.notice


def test_an_unread_result_above_the_model_window_is_replaced_by_a_read_call():
    huge_call = tool_assistant(call("huge-call"))
    huge_result = result("huge-call", repeat("huge protected result", 300_000))
    messages = [user("active request"), huge_call, huge_result]
    raw = FakeRaw(messages, [("raw-huge-turn", huge_call), ("r", copy.deepcopy(huge_result))])
    before = copy.deepcopy(messages)
    selection = select(messages, tools=[], window=70_000, raw=raw,
                       context_tokens=_with_usage(messages))
    assert (selection.mode, selection.indexes) == ("recovery", (0, 1, 2))
    assert "replaced with a recovery reference" in selection.notice
    replacement = window(messages, selection)[3]
    assert (replacement["toolCallId"], replacement["toolName"]) == ("huge-call", "read")
    assert ('read_context_output({"history_id":"raw-huge-turn","source":"tool_result",'
            '"tool_call_id":"huge-call","offset":0,"limit":2000})'
            ) in replacement["content"][0]["text"]
    sent = window(messages, selection)
    assert selection.estimated_tokens == resident_chars4(SYSTEM, []) + sum(
        chars4_tokens(m) for m in sent) + 100
    assert selection.estimated_tokens <= 70_000 and messages == before


# -- weaknesses fixed --------------------------------------------------------------------------


def test_w1_the_notice_points_at_the_most_recently_evicted_tool_output():
    messages = [user("first request")]
    for n in (1, 2, 3):
        messages += [tool_assistant(call(f"c{n}")), result(f"c{n}", repeat(f"out {n}", 100_000))]
    messages.append(assistant("done"))
    selection = select(messages, raw=FakeRaw.by_index(messages), target=30_000)
    assert selection.indexes == (0, 5, 6, 7)
    assert '"history_id":"h3","source":"tool_result","tool_call_id":"c2"' in selection.notice
    assert 'evicted history_id: "h3".' in selection.notice


def test_w2_without_raw_history_the_unread_tool_exchange_is_still_protected():
    messages = [user("active"), tool_assistant(call("old")), result("old", repeat("o", 200_000)),
                tool_assistant(call("new")), result("new", repeat("n", 300_000))]
    selection = select(messages, window=128_000)
    assert (selection.fallback_reason, selection.mode) == ("raw-history-unavailable",
                                                           "protected_overflow")
    assert selection.indexes == (0, 3, 4)


def test_w4_a_system_message_after_the_request_joins_its_envelope():
    messages = [user(repeat("old", 300_000)), assistant("old answer"), user("active"),
                {"role": "system", "content": "tools changed", "toolsAdded": []},
                {"role": "bashExecution", "command": "ls", "output": repeat("files", 100)}]
    selection = select(messages)
    assert (selection.mode, selection.indexes) == ("paged", (2, 3, 4))


def test_w4_a_bash_execution_between_active_exchanges_is_an_evictable_unit():
    bash = {"role": "bashExecution", "command": "cat log", "output": repeat("log", 300_000)}
    messages = [user("active"), tool_assistant(call("a")), result("a", "small"), bash,
                tool_assistant(call("b")), result("b", "small too")]
    selection = select(messages)
    assert (selection.mode, selection.indexes) == ("paged", (0, 4, 5))


def test_w13_budgets_print_with_fixed_grouping():
    assert [format_tokens(n) for n in (128_000, 16_000.5, 64_000.0, 0.12345)] == [
        "128,000", "16,000.5", "64,000", "0.123"]
    assert "1,234,567-token rolling window" in paging_notice(1_234_567)
