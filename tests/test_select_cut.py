"""The stable cut point: upstream's tests/context-cut.test.ts on its fixtures.

Every fixture is upstream's: R = 1, budget 128,000, target 80,000, window 128,000, measured usage
128,001. ``FakeRaw`` (tests/builders.py) answers for the stored history a cut is keyed on.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

import pytest
from context_paging.paging.estimate import chars4_tokens
from context_paging.paging.select import CutKey, CutState, Frontier
from context_paging.paging.units import tool_call_ids

from tests.builders import (
    FakeRaw,
    assistant,
    call,
    raises,
    result,
    select,
    sent_text,
    tool_assistant,
    user,
    window,
)


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
