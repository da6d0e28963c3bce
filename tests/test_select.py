"""The context selector (paging/select.py), ported from upstream's numbered rules.

``test_case_NN_*`` port specs/paging.md §9 case NN with upstream's figures: estimates come from
``paging.estimate.chars4_tokens`` (Pi's chars/4), so R = 23 for the resident prompt and one
``read`` tool, an image costs 1,200 tokens and the plain notice ~69-70 tokens. The stable-cut
tests port upstream's tests/context-cut.test.ts on its fixtures (R = 1, budget 128,000, target
80,000, window 128,000, measured usage 128,001). ``FakeRaw`` plays the server's ledger.
"""

from __future__ import annotations

import copy
import json
import math
from collections import Counter
from dataclasses import dataclass, field

import pytest
from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.limits import Limits, context_limits
from context_paging.paging.notice import format_tokens, paging_notice
from context_paging.paging.select import (
    ContextSelectionError,
    CutKey,
    CutState,
    Frontier,
    TokenEstimates,
    select_context,
)
from context_paging.paging.units import tool_call_ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SYSTEM = "resident prompt"
TOOLS = [{"name": "read", "description": "Read files", "parameters": {"type": "object"}}]
MAX_SAFE = 2**53 - 1
SAME = object()  # upstream's selected(): the target defaults to the budget (legacy budget-only)


def user(text, ts=0):
    return {"role": "user", "content": text, "timestamp": ts}


def custom(text):
    return {"role": "custom", "customType": "test-request", "content": text, "display": True}


def assistant(text, stop="stop"):
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}


def call(call_id, name="read", path="src/file.ts"):
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": {"path": path}}


def tool_assistant(*calls, stop="toolUse"):
    return {"role": "assistant", "content": list(calls), "stopReason": stop}


def result(call_id, text, name="read"):
    content = [{"type": "text", "text": text}]
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name, "content": content,
            "isError": False}


def repeat(marker, count):
    return f"{marker} {'x' * count}"


@dataclass
class Item:
    id: str
    kind: str
    message: dict
    results: list = field(default_factory=list)


class FakeRaw:
    """Stored history as the server's ledger would answer for one request.

    ``entries`` are (history id, message) in stored order; like Pi's raw projection only user,
    assistant and toolResult messages count. Request messages map to ids by index through
    their content (upstream's exact-serialization match): ambiguous content has no key.
    """

    def __init__(self, messages, entries):
        self.messages, self.items = messages, []
        for history_id, message in entries:
            if message["role"] == "toolResult":
                self.items[-1].results.append(message)
            elif message["role"] in ("user", "assistant"):
                kind = "user" if message["role"] == "user" else "modelTurn"
                self.items.append(Item(history_id, kind, message))
        counts = Counter(item.id for item in self.items)
        self.unique = {item.id: item for item in self.items if counts[item.id] == 1}
        self.by_content, self.turn_of_call = {}, {}
        for item in self.items:
            self.by_content.setdefault(_canon(item.message), []).append(item.id)
            for call_id in tool_call_ids(item.message):
                self.turn_of_call[call_id] = item

    @classmethod
    def by_index(cls, messages, ids=None, outgoing=None):
        """Every persistent message stored, with id ``ids[i]`` or ``h{i}``."""
        ids, outgoing = ids or {}, outgoing or [False] * len(messages)
        return cls(messages, [(ids.get(i, f"h{i}"), m) for i, m in enumerate(messages)
                              if not outgoing[i]])

    def key_of(self, index):
        message = self.messages[index]
        ids = self.by_content.get(_canon(message), [])
        if message["role"] not in ("user", "assistant") or len(ids) != 1:
            return None
        if ids[0] not in self.unique:
            return None
        calls = tool_call_ids(message)
        return CutKey(ids[0], calls[0] if calls else None)

    def resolves(self, frontier):
        anchor = self.unique.get(frontier.last_evicted.history_id)
        if anchor is None:
            return False
        call_id = frontier.last_evicted.tool_call_id
        if call_id is not None and call_id not in tool_call_ids(anchor.message):
            return False
        if frontier.kind != "partialTurn":
            return True
        owner = self.unique.get(frontier.user_history_id) if frontier.user_history_id else None
        return anchor.kind == "modelTurn" and (
            frontier.user_history_id is None or (owner is not None and owner.kind == "user"))

    def is_last_item(self, index):
        calls = tool_call_ids(self.messages[index])
        turn = next((self.turn_of_call[c] for c in calls if c in self.turn_of_call), None)
        if turn is None or turn is not self.items[-1]:
            return False
        results = []
        for message in self.messages[index + 1:]:
            if message["role"] != "toolResult":
                break
            results.append(message["toolCallId"])
        return (tool_call_ids(turn.message) == calls
                and [r["toolCallId"] for r in turn.results] == results)

    def tool_reference(self, index):
        message = self.messages[index]
        turn = self.turn_of_call.get(message["toolCallId"])
        if turn is None or all(r["toolCallId"] != message["toolCallId"] for r in turn.results):
            return None
        return turn.id, message["toolCallId"], message["toolName"]


def _canon(message):
    return json.dumps(message, sort_keys=True)


def select(messages, *, budget=64_000, target=SAME, window=100_000, system=SYSTEM, tools=TOOLS,
           **options):
    """Upstream's ``selected()`` helper: chars/4 estimates, target = budget unless given."""
    return select_context(
        messages, token_budget=budget, trim_to_tokens=budget if target is SAME else target,
        model_window=window, resident_tokens=resident_chars4(system, tools),
        estimates=[chars4_tokens(m) for m in messages], notice_tokens=text_chars4, **options)


def window(messages, selection):
    """The window the caller would send: notice first, recovery replacements applied."""
    out = [] if selection.notice is None else [user(selection.notice)]
    for i in selection.indexes:
        text = selection.replacements.get(i)
        content = [{"type": "text", "text": text}]
        out.append(messages[i] if text is None else {**messages[i], "content": content})
    return out


def sent_text(messages, selection):
    """The sent window as JSON, for marker checks (``messages`` may be a cut fixture)."""
    messages = getattr(messages, "messages", messages)
    return json.dumps(window(messages, selection), ensure_ascii=False)


def raises(code, function, *args, **kwargs):
    with pytest.raises(ContextSelectionError) as caught:
        function(*args, **kwargs)
    assert caught.value.code == code
    return caught.value


# -- §9 limits and validation ------------------------------------------------------------------


def test_case_01_effective_targets_scale_with_the_window_without_rounding_products():
    inf = math.inf
    cases = [
        (128_000, 80_000, None, Limits(128_000, 80_000, inf)),
        (128_000, 80_000, 64_000, Limits(64_000, 40_000, 64_000)),
        (128_000, 160_000, 64_000, Limits(64_000, 64_000, 64_000)),
        (MAX_SAFE, MAX_SAFE - 1, 64_000, Limits(64_000, 63_999, 64_000)),
        (128_000, 80_000, 16_000.5, Limits(16_000.5, 10_000, 16_000.5)),
        (128_000, 80_000, 0.5, Limits(0.5, 1, 0.5)),
    ]
    for budget, target, model_window, expected in cases:
        assert context_limits(budget, target, model_window) == expected


def test_case_02_an_omitted_target_is_five_eighths_of_the_budget():
    assert context_limits(128_000) == Limits(128_000, 80_000, math.inf)
    assert context_limits(1) == Limits(1, 1, math.inf)
    assert context_limits(MAX_SAFE).target_tokens == 5_629_499_534_213_119
    assert context_limits(MAX_SAFE - 4).target_tokens == 5_629_499_534_213_116


def test_case_03_invalid_explicit_targets_are_rejected():
    # JavaScript's null is "omitted" in Python (None), so it is not in this list.
    for target in [0, -1, 1.5, math.nan, math.inf, MAX_SAFE + 1, "80000", True, [], {}]:
        raises("INVALID_TRIM_TARGET", select, [], budget=128_000, target=target,
               window=1_000_000, system="", tools=[])


def test_case_04_invalid_token_budgets_are_rejected():
    for budget in [0, -1, 1.5, math.nan, math.inf, MAX_SAFE + 1, "64_000", [96000], {}]:
        error = raises("INVALID_TOKEN_BUDGET", select, [], budget=budget, target=None,
                       window=None)
        assert "token budget" in error.message.lower()
        assert (error.resident_tokens, error.estimated_tokens, error.budget_tokens) == (0, 0, 0)


def test_case_05_invalid_model_windows_are_rejected():
    for model_window in [0, math.nan, math.inf, -1]:
        error = raises("INVALID_MODEL_CONTEXT", select, [], window=model_window)
        assert "estimate" in error.message


def test_case_06_a_resident_input_over_the_budget_is_rejected():
    error = raises("RESIDENT_INPUT_TOO_LARGE", select, [], window=64_000,
                   system="x" * 300_000, tools=[])
    assert "estimate" in error.message and "75001" in error.message  # (300,000 + "[]") / 4


def test_case_07_an_active_request_over_the_budget_is_rejected():
    error = raises("ACTIVE_REQUEST_TOO_LARGE", select, [user("x" * 300_000)], window=64_000)
    assert "estimate" in error.message


def test_case_08_the_budget_is_capped_by_the_model_window():
    assert select([], budget=128_000, window=32_000, system="resident").budget_tokens == 32_000
    uncapped = select([], budget=96_000, window=None, system="resident")
    assert (uncapped.budget_tokens, uncapped.mode) == (96_000, "within_budget")


def test_case_09_a_minimum_target_cannot_bypass_a_fractional_model_limit():
    error = raises("RESIDENT_INPUT_TOO_LARGE", select, [], budget=128_000, target=80_000,
                   window=0.5, system="", tools=[], context_tokens=0.75,
                   raw=FakeRaw([], []))
    assert "0.75" in error.message and "0.5" in error.message


# -- §9 accounting -----------------------------------------------------------------------------


def test_case_10_measured_usage_within_budget_beats_a_larger_heuristic():
    messages = [user(repeat("old request", 300_000)), assistant(repeat("old answer", 300_000)),
                user("active request")]
    selection = select(messages, budget=128_000, window=272_000, context_tokens=119_430)
    assert (selection.mode, selection.estimated_tokens) == ("within_budget", 119_430)
    assert selection.indexes == (0, 1, 2)


def test_case_11_observed_usage_replaces_an_oversized_resident_heuristic():
    selection = select([user("active request")], system=repeat("large", 300_000), tools=[],
                       context_tokens=1_000)
    assert (selection.mode, selection.estimated_tokens, selection.indexes) == (
        "within_budget", 1_000, (0,))


def test_case_12_invalid_message_weights_fall_back_to_plain_estimates():
    for weights in [TokenEstimates(math.nan, [1]), TokenEstimates(50, []),
                    TokenEstimates(50, [math.inf]), TokenEstimates(50, [-1])]:
        selection = select([user("active request")], budget=500, window=1_000, tools=[],
                           context_tokens=100, token_estimates=weights)
        assert (selection.mode, selection.estimated_tokens) == ("within_budget", 100)


def test_case_13_system_metadata_is_resident_input_not_a_message():
    request = user("next")
    metadata = {"role": "system", "content": "s" * 20, "toolsAdded": [{"name": "t"}]}
    without = select([request])
    with_metadata = select([metadata, request], budget=without.estimated_tokens)
    assert without.estimated_tokens == 24  # R 23 + "next" 1
    assert with_metadata.estimated_tokens == without.estimated_tokens
    assert (with_metadata.mode, with_metadata.indexes) == ("within_budget", (0, 1))


def test_case_14_resident_input_and_messages_use_pi_estimates():
    messages = [user('request  😀  {"spacing":  true}'),
                assistant('answer\n\nwith JSON: {"ok":true}')]
    tools = [{"name": "read", "description": "Read", "parameters": {"type": "object"}}]
    # Counted by hand in UTF-16 units: system 16 + tools JSON 69 → 22; user 31 → 8; answer 30 → 8.
    selection = select(messages, system="system prompt\t😀", tools=tools)
    assert (selection.estimated_tokens, selection.budget_tokens) == (38, 64_000)
    assert context_limits(128_000).budget_tokens == 128_000


def test_case_15_an_image_block_is_estimated_at_1200_tokens():
    image = {"role": "user", "content": [{"type": "image", "data": "x", "mimeType": "image/png"}]}
    assert chars4_tokens(image) == 1_200


def test_case_16_measured_usage_over_the_budget_evicts_an_old_turn():
    messages = [user(repeat("old request", 40_000)), assistant(repeat("old answer", 40_000)),
                user("active request")]
    selection = select(messages, context_tokens=70_000)
    assert (selection.mode, selection.indexes, selection.evicted) == ("paged", (2,), (0, 1))


# -- §9 grouping, protection, atomicity --------------------------------------------------------


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
    # The old answer has no stored key: no frontier can be committed (§5.9).
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


# -- §9 interrupted exchanges ------------------------------------------------------------------


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


# -- protected exchange, overflow and recovery (§5.10, §5.11) -----------------------------------


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


def test_cut_state_round_trips_through_a_dict():
    state = CutState(Frontier("partialTurn", CutKey("turn-1", "call-1"), "user-1"), "notice")
    assert CutState.from_dict(json.loads(json.dumps(state.to_dict()))) == state
    with pytest.raises(ValueError):
        CutState.from_dict({"frontier": {"kind": "sideways", "last_evicted": {
            "history_id": "x"}}, "notice": "n"})


# -- stable cut point (upstream tests/context-cut.test.ts and its fixtures) --------------------

TS = 1_767_225_600_000  # every fixture message shares one timestamp


def payload(name, tokens):
    return f"{name} payload {'x' * (4 * tokens)}"


def fx_assistant(name, tokens=None):
    if tokens is None:
        return tool_assistant(call(f"call-{name}", path=f"{name}.txt")) | {"timestamp": TS}
    return assistant(payload(name, tokens)) | {"timestamp": TS}


def fx_result(name, tokens):
    return result(f"call-{name}", payload(name, tokens)) | {"timestamp": TS}


def fx_custom(text):
    return {"role": "custom", "customType": "cut-fixture", "content": text, "display": True,
            "details": {}, "timestamp": TS}


@dataclass(frozen=True)
class Fx:
    """Upstream's paging fixture: session entries (id, message) and the measured usage."""

    entries: tuple
    context_tokens: float = 128_001

    @property
    def messages(self):
        return [message for _, message in self.entries]

    def select(self, messages=None, raw_entries=None, **options):
        messages = self.messages if messages is None else messages
        stored = self.entries if raw_entries is None else raw_entries
        settings_ = dict(budget=128_000, target=80_000, window=128_000, system="", tools=[],
                         context_tokens=self.context_tokens, raw=FakeRaw(messages, stored))
        return select(messages, **(settings_ | options))


def fixture(kind):
    entries = []
    if kind in ("completed", "keyless"):
        for name in ["old-A", "old-B", "old-C"] if kind == "completed" else ["old-A"]:
            tokens = 10_000 if kind == "keyless" else 30_000
            entries += [(f"user-{name}", user(f"{name} request", TS)),
                        (f"turn-{name}", fx_assistant(name, tokens))]
    if kind == "keyless":
        entries.append(("custom-old-custom", fx_custom(f"old-custom request {'x' * 120_000}")))
    if kind == "custom-active":
        entries.append(("custom-live", fx_custom("live request")))
    else:
        entries.append(("user-live", user("live request", TS)))
    tokens = 10_000 if kind == "completed" else 30_000
    for n in range({"completed": 2, "keyless": 0}.get(kind, 4)):
        entries += [(f"turn-live-{n + 1}", fx_assistant(f"live-{n + 1}")),
                    (f"result-live-{n + 1}", fx_result(f"live-{n + 1}", tokens))]
    return Fx(tuple(entries))


def append_exchange(fx, name, tokens):
    added = ((f"turn-{name}", fx_assistant(name)), (f"result-{name}", fx_result(name, tokens)))
    extra = sum(chars4_tokens(m) for _, m in added)
    return Fx(fx.entries + added, fx.context_tokens + extra)


def complete_turn(fx, name):
    message = user(f"{name} request", TS)
    return Fx(fx.entries + ((f"user-{name}", message),), fx.context_tokens + chars4_tokens(message))


def sent(fx, selection):
    return window(fx.messages, selection)


def test_a_cut_holds_with_a_byte_identical_notice_while_the_list_grows():
    f = fixture("completed")
    first = f.select()
    assert first.cut_state.frontier == Frontier("completedTurn", CutKey("turn-old-B"))
    assert first.estimated_tokens <= 80_000 and "old-C payload" in sent_text(f, first)
    assert first.notice == first.cut_state.notice
    grown = append_exchange(f, "live-3", 2_000)
    second = grown.select(cut_state=first.cut_state)
    assert sent(grown, second)[: len(first.indexes) + 1] == sent(f, first)
    assert second.cut_state == first.cut_state and second.notice == first.notice


def test_an_omitted_target_uses_the_adaptive_destination():
    f = fixture("completed")
    selection = f.select(target=None)
    assert selection.cut_state.frontier.last_evicted.history_id == "turn-old-B"
    assert selection.estimated_tokens <= 80_000


def test_the_cut_does_not_advance_between_target_and_budget():
    f = fixture("completed")
    first = f.select()
    second = f.select(context_tokens=158_001, cut_state=first.cut_state)
    assert 80_000 < second.estimated_tokens <= 128_000
    assert (second.cut_state, second.indexes) == (first.cut_state, first.indexes)


def test_without_raw_history_selection_is_budget_only_and_commits_no_cut():
    f = fixture("completed")
    selection = f.select(raw=None)
    assert (selection.cut_state, selection.fallback_reason) == (None, "raw-history-unavailable")
    assert 80_000 < selection.estimated_tokens <= 128_000 and "old-B" in sent_text(f, selection)


def test_exactly_at_the_budget_nothing_pages():
    f = fixture("completed")
    selection = f.select(context_tokens=128_000)
    assert (selection.mode, selection.cut_state, selection.notice) == ("within_budget", None, None)
    assert selection.indexes == tuple(range(len(f.messages)))


def test_over_the_budget_again_the_cut_advances_fifo():
    f = fixture("completed")
    first = f.select()
    second = f.select(context_tokens=190_001, cut_state=first.cut_state)
    # Old-C leaves, then live-1; live-2 is the unread trailing exchange, so the FIFO stops.
    assert second.cut_state.frontier == Frontier(
        "partialTurn", CutKey("turn-live-1", "call-live-1"), "user-live")
    assert second.notice != first.notice and second.estimated_tokens <= 128_000
    assert "old-C payload" not in sent_text(f, second)


def test_prefix_units_leave_before_completed_turns():
    f = fixture("completed")
    prefix = ("prefix-turn", fx_assistant("prefix", 30_000))
    prefixed = Fx((prefix, *f.entries))
    selection = prefixed.select()
    assert selection.cut_state.frontier.last_evicted.history_id == "turn-old-A"
    assert "old-B payload" in sent_text(prefixed, selection)


def test_a_prefix_only_cut_stops_below_the_budget_when_the_target_is_out_of_reach():
    only = Fx((fixture("completed").entries[1],))
    first = only.select()
    assert first.cut_state.frontier.kind == "prefix"
    assert 80_000 < first.estimated_tokens < 128_000 and first.indexes == ()
    second = only.select(context_tokens=110_001, cut_state=first.cut_state)
    assert (second.notice, second.indexes, second.cut_state) == (
        first.notice, first.indexes, first.cut_state)


def test_a_lower_calibration_never_restores_history():
    f = fixture("completed")
    first = f.select()
    second = f.select(context_tokens=110_001, cut_state=first.cut_state)
    assert (second.cut_state, sent(f, second)) == (first.cut_state, sent(f, first))


def test_a_completed_turn_keeps_its_raw_anchor_behind_an_outgoing_only_suffix():
    f = fixture("completed")
    messages = [*f.messages[:2], user("outgoing-only suffix"), *f.messages[2:]]
    outgoing = [i == 2 for i in range(len(messages))]
    first = f.select(messages, target=110_000, outgoing_only=outgoing)
    assert first.fallback_reason is None
    assert first.cut_state.frontier == Frontier("completedTurn", CutKey("turn-old-A"))
    assert first.indexes[:2] == (3, 4)
    second = f.select(messages, target=110_000, outgoing_only=outgoing,
                      context_tokens=110_001, cut_state=first.cut_state)
    assert (second.cut_state, second.indexes) == (first.cut_state, first.indexes)


def test_the_target_scales_with_the_model_window_and_includes_the_notice():
    f = fixture("completed")
    scaled = f.select(window=64_000, context_tokens=80_001)
    assert scaled.estimated_tokens <= 40_000 and "old-B payload" not in sent_text(f, scaled)
    first_two = sum(map(chars4_tokens, f.messages[:4]))
    tight = f.select(context_tokens=first_two + 80_000)
    assert tight.estimated_tokens <= 80_000 and "old-C payload" not in sent_text(f, tight)


def test_an_explicit_target_above_the_budget_still_keeps_a_sticky_cut():
    f = fixture("completed")
    first = f.select(target=160_000)
    second = f.select(target=160_000, context_tokens=110_001, cut_state=first.cut_state)
    assert (second.cut_state, second.indexes) == (first.cut_state, first.indexes)
    assert "old-A payload" not in sent_text(f, second)


@pytest.mark.parametrize("kind", ["active", "custom-active"])
def test_a_partial_turn_cut_survives_completion_and_its_remainder_leaves_atomically(kind):
    f = fixture(kind)
    first = f.select()
    owner = "user-live" if kind == "active" else None
    assert first.cut_state.frontier == Frontier("partialTurn", CutKey("turn-live-2",
                                                                      "call-live-2"), owner)
    completed = complete_turn(f, "next")
    second = completed.select(cut_state=first.cut_state)
    assert sent(completed, second)[: len(first.indexes) + 1] == sent(f, first)
    assert second.cut_state == first.cut_state
    third = completed.select(context_tokens=190_001, cut_state=second.cut_state)
    assert sent(completed, third)[1:] == [completed.messages[-1]]
    assert third.cut_state.frontier == Frontier("completedTurn", CutKey("turn-live-4",
                                                                        "call-live-4"))


def test_a_custom_only_remainder_does_not_count_its_evicted_answer_twice():
    custom_live = fixture("custom-active").entries[0]
    plain = ("turn-live-plain", fx_assistant("old-A", 30_000))
    f = Fx((custom_live, plain))
    first = f.select()
    assert first.cut_state.frontier == Frontier("partialTurn", CutKey("turn-live-plain"))
    completed = complete_turn(f, "next")
    second = completed.select(cut_state=first.cut_state)
    assert sent(completed, second)[: len(first.indexes) + 1] == sent(f, first)
    crossing = completed.context_tokens + 128_001 - second.estimated_tokens
    third = completed.select(context_tokens=crossing, cut_state=second.cut_state)
    assert third.cut_state.frontier == Frontier("completedTurn", CutKey("turn-live-plain"))
    assert third.indexes == (2,) and 127_000 < third.estimated_tokens <= 128_000


def test_a_keyless_endpoint_snaps_back_to_the_last_keyed_unit_and_stays_put():
    f = fixture("keyless")
    first = f.select()
    assert first.cut_state.frontier == Frontier("completedTurn", CutKey("turn-old-A"))
    assert first.fallback_reason is None and 80_000 < first.estimated_tokens <= 128_000
    assert first.indexes == (2, 3) and first.notice == first.cut_state.notice
    second = f.select(context_tokens=110_001, cut_state=first.cut_state)
    assert (second.fallback_reason, second.cut_state) == (None, first.cut_state)
    assert sent(f, second) == sent(f, first)


def test_a_keyless_snap_over_the_budget_falls_back_to_budget_only():
    f = append_exchange(fixture("keyless"), "live-1", 30_000)
    selection = f.select(context_tokens=145_001)
    assert (selection.cut_state, selection.fallback_reason, selection.mode) == (
        None, "keyless-snap-over-budget", "paged")
    assert 80_000 < selection.estimated_tokens <= 128_000 and selection.indexes == (3, 4, 5)


def test_the_next_trigger_evicts_retained_keyless_units_instead_of_an_over_budget_no_op():
    f = fixture("keyless")
    first = f.select()
    crossing = f.context_tokens + 128_001 - first.estimated_tokens
    second = f.select(context_tokens=crossing, cut_state=first.cut_state)
    assert (second.cut_state, second.fallback_reason) == (None, "keyless-snap-over-budget")
    assert second.indexes == (3,) and second.estimated_tokens <= 128_000


def test_the_snap_budget_check_counts_the_frozen_notice():
    f = fixture("keyless")
    removed = sum(map(chars4_tokens, f.messages[:2]))
    selection = f.select(context_tokens=128_000 + removed)
    assert (selection.cut_state, selection.fallback_reason) == (None, "keyless-snap-over-budget")
    assert selection.indexes == (3,)


def test_a_prefix_without_any_key_falls_back_with_keyless_no_key():
    f = fixture("keyless")
    only = Fx(tuple(e for e in f.entries if e[0] in ("custom-old-custom", "user-live")))
    selection = only.select(outgoing_only=[True, False])
    assert (selection.cut_state, selection.fallback_reason) == (None, "keyless-no-key")
    assert selection.indexes == (1,) and selection.estimated_tokens <= 128_000


def test_cloned_messages_resolve_the_same_cut_and_notice():
    f = fixture("active")
    first = f.select()
    clones = copy.deepcopy(f.messages)
    second = f.select(clones, copy.deepcopy(f.entries), cut_state=first.cut_state)
    assert (second.indexes, second.notice, second.cut_state) == (
        first.indexes, first.notice, first.cut_state)


def test_an_ambiguous_stored_copy_never_keys_a_cut():
    f = fixture("active")
    stored = [e for entry in f.entries for e in (
        [entry, ("ambiguous-live-2", copy.deepcopy(entry[1]))] if entry[0] == "turn-live-2"
        else [entry])]
    selection = f.select(copy.deepcopy(f.messages), stored)
    assert (selection.cut_state, selection.fallback_reason) == (None, "cut-key-unresolved")
    assert 80_000 < selection.estimated_tokens <= 128_000 and "live-2 payload" in sent_text(
        f, selection)


def test_a_frontier_missing_from_stored_history_falls_back_with_cut_key_unresolved():
    f = fixture("active")
    first = f.select()
    stored = [e for e in f.entries if e[0] not in ("turn-live-2", "result-live-2")]
    selection = f.select(raw_entries=stored, cut_state=first.cut_state)
    assert (selection.cut_state, selection.fallback_reason) == (None, "cut-key-unresolved")


def test_multiple_same_name_calls_stay_one_atomic_exchange():
    entries = []
    for entry_id, message in fixture("active").entries:
        if message["role"] == "assistant":
            first_call = message["content"][0]
            message = {**message, "content": [first_call, {**first_call,
                                                           "id": first_call["id"] + "-second"}]}
        entries.append((entry_id, message))
        if message["role"] == "toolResult":
            second = {**message, "toolCallId": message["toolCallId"] + "-second",
                      "content": [{"type": "text", "text": "second small payload"}]}
            entries.append((entry_id + "-second", second))
    f = Fx(tuple(entries))
    selection = f.select()
    assert selection.cut_state.frontier.last_evicted.history_id == "turn-live-2"
    kept_calls = [c for i in selection.indexes for c in tool_call_ids(f.messages[i])]
    assert kept_calls == ["call-live-3", "call-live-3-second", "call-live-4", "call-live-4-second"]
    assert len(selection.indexes) == 7


def test_a_frontier_absent_from_the_request_falls_back_without_raising():
    f = fixture("active")
    first = f.select()
    messages = [m for m in f.messages if "call-live-2" not in json.dumps(m)]
    selection = f.select(messages, cut_state=first.cut_state)
    assert (selection.cut_state, selection.fallback_reason) == (None, "frontier-not-in-groups")
    assert 80_000 < selection.estimated_tokens <= 128_000 and "live-3 payload" in sent_text(
        messages, selection)


def test_normalization_dropping_the_frontier_falls_back_without_raising():
    f = fixture("active")
    first = f.select()
    messages = [m | {"stopReason": "aborted"} if m["role"] == "assistant"
                and "call-live-2" in tool_call_ids(m) else m
                for m in f.messages if m.get("toolCallId") != "call-live-2"]
    selection = f.select(messages, context_tokens=150_001, cut_state=first.cut_state)
    assert (selection.cut_state, selection.fallback_reason) == (None, "frontier-not-in-groups")


def test_invalid_structure_raises_before_a_remembered_cut_is_applied():
    f = fixture("active")
    first = f.select()
    orphan = next(m for m in f.messages if m["role"] == "toolResult")
    raises("INVALID_MESSAGE_STRUCTURE", f.select, [orphan, *f.messages],
           cut_state=first.cut_state)
    incomplete = [m for m in f.messages if m.get("toolCallId") != "call-live-1"]
    raises("INVALID_MESSAGE_STRUCTURE", f.select, incomplete, cut_state=first.cut_state)


def test_an_unreachable_target_below_the_budget_is_a_valid_cut():
    selection = fixture("active").select(context_tokens=180_001)
    assert selection.mode == "paged" and 80_000 < selection.estimated_tokens <= 128_000
    assert selection.cut_state.frontier.last_evicted.history_id == "turn-live-3"


@pytest.mark.parametrize("model_window, mode", [(256_000, "protected_overflow"),
                                                 (128_000, "recovery")])
def test_an_exceptional_mode_keeps_the_frozen_notice_for_when_paging_resumes(model_window, mode):
    f = fixture("active")
    exceptional = f.select(context_tokens=240_001, window=model_window)
    assert exceptional.mode == mode and exceptional.notice != exceptional.cut_state.notice
    resumed = f.select(context_tokens=180_001, window=model_window,
                       cut_state=exceptional.cut_state)
    assert (resumed.mode, resumed.notice) == ("paged", exceptional.cut_state.notice)
    assert resumed.cut_state == exceptional.cut_state


# -- properties over growing conversations ------------------------------------------------------

exchange_specs = st.fixed_dictionaries({
    "calls": st.integers(1, 3),
    "sizes": st.lists(st.integers(0, 300), min_size=4, max_size=4),
    "reversed": st.booleans(),
    "bash_before": st.booleans(),
    "outgoing": st.sampled_from([None, None, "end", "envelope"]),
})
turn_specs = st.fixed_dictionaries({
    "request": st.sampled_from(["user", "user", "custom", "user+custom"]),
    "extra": st.sampled_from([None, None, None, "bashExecution", "system"]),
    "size": st.integers(0, 300),
    "outgoing": st.sampled_from([None, None, "end", "envelope"]),
    "exchanges": st.lists(exchange_specs, max_size=3),
    "end": st.sampled_from(["answer", "answer", "open", "interrupted", "interrupted_text"]),
})
conversation_specs = st.fixed_dictionaries({
    "budget": st.integers(60, 2_500),
    "target": st.sampled_from([None, "half", "same", "above"]),
    "window": st.sampled_from([None, 1.0, 1.5, 4.0]),
    "system": st.integers(0, 40),
    "offset": st.sampled_from([None, None, -15, 0, 40]),
    "summary": st.booleans(),
    "turns": st.lists(turn_specs, min_size=1, max_size=7),
})


class Conversation:
    """A growing Pi session: persistent messages plus the calls a host would make."""

    def __init__(self, spec):
        self.spec, self.history, self.counter = spec, [], 0
        self.system = "s" * (4 * spec["system"])
        self.cut, self.previous, self.previous_length = None, None, 0

    def text(self, tokens):
        self.counter += 1
        return f"m{self.counter} " + "x" * (4 * tokens)

    def add(self, message):
        self.history.append(message)
        return message

    def request(self, turn):
        kind, text = turn["request"], self.text(turn["size"])
        envelope = [self.add(custom(text) if kind == "custom" else user(text))]
        if kind == "user+custom":
            envelope.append(self.add(custom(self.text(10))))
        if turn["extra"] == "bashExecution":
            envelope.append(self.add({"role": "bashExecution", "command": self.text(1),
                                      "output": self.text(20)}))
        elif turn["extra"] == "system":
            envelope.append(self.add({"role": "system", "content": self.text(5)}))
        return envelope

    def exchange(self, spec, stop="toolUse", results=None):
        self.counter += 1
        ids = [f"c{self.counter}-{n}" for n in range(spec["calls"])]
        calls = tool_assistant(*(call(i, path=self.text(1)) for i in ids), stop=stop)
        outs = [result(i, self.text(size)) for i, size in zip(ids, spec["sizes"], strict=False)]
        outs = outs[::-1] if spec["reversed"] else outs
        return [self.add(calls), *map(self.add, outs[:results])]


def _cost(message):
    return 0 if message["role"] == "system" else chars4_tokens(message)


def _check(conv, messages, outgoing, selection, calibration, protected, dropped):
    kept = set(selection.indexes)
    assert len(kept) == len(selection.indexes)
    assert kept.isdisjoint(selection.evicted) and kept.isdisjoint(selection.dropped)
    assert kept | set(selection.evicted) | set(selection.dropped) == set(range(len(messages)))
    assert {id(messages[i]) for i in selection.dropped} == dropped
    total = resident_chars4(conv.system, []) + text_chars4(selection.notice or "")
    for i in selection.indexes:
        text = selection.replacements.get(i)
        total += _cost(messages[i]) if text is None else text_chars4(text)
    assert selection.estimated_tokens == max(0, total + calibration)
    if selection.mode in ("within_budget", "paged"):
        assert selection.estimated_tokens <= selection.budget_tokens
    else:
        assert selection.estimated_tokens <= (_window(conv.spec) or math.inf)
    for i in selection.indexes:  # an assistant with calls is kept iff all its results are
        assert all(j in kept for j in _results(messages, i))
        if messages[i]["role"] == "toolResult":
            assert next(k for k in range(i, -1, -1) if messages[k]["role"] == "assistant") in kept
    for i, message in enumerate(messages):  # the request envelope and the unread exchange
        if outgoing[i] or any(message is p for p in protected):
            assert i in kept


def _window(spec):
    return None if spec["window"] is None else spec["budget"] * spec["window"]


def _results(messages, index):
    if messages[index]["role"] != "assistant":
        return []
    out = []
    for j in range(index + 1, len(messages)):
        if messages[j]["role"] != "toolResult":
            break
        out.append(j)
    return out


def _call(conv, envelope, unread, outgoing_kind, dropped):
    spec, messages, protected = conv.spec, list(conv.history), envelope + unread
    outgoing = [False] * len(messages)
    if outgoing_kind is not None:  # a fresh outgoing-only message, after the envelope or last
        where = len(messages)
        if outgoing_kind == "envelope":
            where = 1 + next(i for i, m in enumerate(messages) if m is envelope[-1])
        messages.insert(where, user(conv.text(15)))
        outgoing.insert(where, True)
    target = {None: None, "half": max(1, spec["budget"] // 2), "same": spec["budget"],
              "above": spec["budget"] * 2}[spec["target"]]
    resident = resident_chars4(conv.system, [])
    measured, calibration = None, 0
    if spec["offset"] is not None:  # provider usage: the plain estimate plus a constant
        measured = max(0, resident + sum(map(chars4_tokens, messages)) + spec["offset"])
        calibration = measured - resident - sum(map(_cost, messages))
    stored = [(f"h{id(m)}", m) for m, out in zip(messages, outgoing, strict=True) if not out]
    try:
        selection = select_context(
            messages, token_budget=spec["budget"], trim_to_tokens=target,
            model_window=_window(spec), resident_tokens=resident,
            estimates=[chars4_tokens(m) for m in messages], context_tokens=measured,
            outgoing_only=outgoing, raw=FakeRaw(messages, stored), cut_state=conv.cut,
            notice_tokens=text_chars4)
    except ContextSelectionError as error:  # the host aborts; the cut is not committed
        assert error.code in ("ACTIVE_REQUEST_TOO_LARGE", "RESIDENT_INPUT_TOO_LARGE")
        assert error.estimated_tokens > error.budget_tokens
        conv.previous = None
        return
    _check(conv, messages, outgoing, selection, calibration, protected, dropped)
    current = (selection.notice, [id(messages[i]) for i in selection.indexes if not outgoing[i]],
               selection.cut_state, selection.mode, selection.fallback_reason)
    previous, stable = conv.previous, ("within_budget", "paged")
    if (previous is not None and previous[3] in stable and current[3] in stable
            and previous[4] is None and current[4] is None and previous[2] == current[2]):
        existed = {id(m) for m in conv.history[: conv.previous_length]}
        carried = [i for i in current[1] if i in existed]
        assert current[0] == previous[0]
        assert carried[: len(previous[1])] == previous[1]  # prefix stability
    conv.previous, conv.previous_length = current, len(conv.history)
    conv.cut = selection.cut_state


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation_specs)
def test_growing_conversations_keep_every_selection_invariant(spec):
    conv = Conversation(spec)
    dropped = set()
    if spec["summary"]:
        conv.add({"role": "compactionSummary", "summary": conv.text(200)})
    for turn in spec["turns"]:
        envelope = conv.request(turn)
        _call(conv, envelope, [], turn["outgoing"], dropped)
        for exchange in turn["exchanges"]:
            if exchange["bash_before"]:
                conv.add({"role": "bashExecution", "command": "ls", "output": conv.text(30)})
            messages = conv.exchange(exchange)
            _call(conv, envelope, messages, exchange["outgoing"], dropped)
        if turn["end"] == "answer":
            conv.add(assistant(conv.text(50)))
        elif turn["end"] == "interrupted":
            failed = conv.exchange(turn["exchanges"][0] if turn["exchanges"] else
                                   {"calls": 2, "sizes": [5, 5, 5, 5], "reversed": False},
                                   stop="aborted", results=1)
            dropped |= {id(m) for m in failed}
        elif turn["end"] == "interrupted_text":
            dropped.add(id(conv.add(assistant(conv.text(10), stop="error"))))


def test_the_upstream_benchmark_workload_pages_in_one_pass():
    # 300 turns, 15 MiB of read output, budget = window = 128,000, default target (§10).
    messages, size = [], 15 * 1024 * 1024 // 300
    for n in range(300):
        text = (f"src/benchmark/turn-{n:03}.ts event=read status=ok " * 1_000)[: size]
        messages += [user(f"Benchmark request {n}"), tool_assistant(call(f"call-{n}")),
                     result(f"call-{n}", text)]
    messages.append(user("Summarize the benchmark results."))
    selection = select(messages, budget=128_000, target=None, window=128_000,
                       system="You are a benchmark assistant.",
                       raw=FakeRaw.by_index(messages))
    assert selection.mode == "paged" and selection.fallback_reason is None
    assert 0 < selection.estimated_tokens <= 80_000
    assert selection.cut_state.frontier.kind == "completedTurn"
    assert '"tool_call_id":"call-' in selection.notice
