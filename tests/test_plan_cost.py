"""Distillation planning in proportion to what is new gives the plans of the full computation.

The window's distiller remembers, between calls, what a pass reads of each stored view (text,
images, tool calls, size; by its ledger key) and each large output's chunks (by its text); a
pass walks the run once for both sizes of output, and completes the facts of outputs beyond
reach instead of collecting them again (issue 12 item 3). ``full_computation``
(tests/test_select_cost.py) switches all of that off. Here one service plans a conversation as
it grows, call after call, with its memory warm, and every plan must equal the one planned from
scratch on the full computation.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from context_paging.index import window_distill
from context_paging.paging.distill import items, plan
from context_paging.paging.distill.apply import applied, changed
from context_paging.paging.distill.conversation import Read
from context_paging.paging.limits import ContextSelectionError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_select_cost import DISTILL, PATHS, full_computation, service, turn

# A small output: between DISTILL's small floor (200) and its large floor (1,500) characters.
SMALL = {"role": "toolResult", "toolName": "bash", "isError": False,
         "content": [{"type": "text", "text": "ok " * 150}]}


def conversation(shapes: list[tuple[int, str, bool, bool, bool]]) -> list[dict]:
    """Turns of ``test_select_cost.turn``; with the last flag, a small bash output follows."""
    messages: list[dict] = []
    for n, (lines, path, answer, failing, small) in enumerate(shapes):
        part = turn(n, lines, path, answer and not small, failing)
        if small:
            part += [
                {"role": "assistant", "stopReason": "toolUse", "content": [
                    {"type": "toolCall", "id": f"s{n}", "name": "bash",
                     "arguments": {"command": f"ls {path}"}}]},
                SMALL | {"toolCallId": f"s{n}"},
            ]
            if answer:
                part.append({"role": "assistant", "stopReason": "stop",
                             "content": [{"type": "text", "text": f"listed {path}"}]})
        messages += part
    return messages


def planned(svc, messages: list[dict], reach_tokens: float | None, provider: str | None):
    """The service's plan for ``messages`` (its memory as earlier calls left it) and the plan
    from scratch on the full computation, for the same entries and decisions."""
    request = svc.read("s", messages, "pi", (), None)
    ledger = svc.ledger.session("s")
    entries = request.entries
    changes = changed(entries, ledger.decisions)
    reach = window_distill.entry_reach(entries, reach_tokens)
    svc.distiller._plans.clear()  # the plan cache would answer a repeated request by itself
    got = svc.distiller.plan(ledger, entries, provider, changes, reach,
                             window_distill.view_keys(request))
    with full_computation():
        want = plan.plan_pass(applied(entries, changes), DISTILL, ledger.decisions,
                              provider=provider, reach=reach)
    return got, want


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shapes=st.lists(st.tuples(st.integers(0, 160), st.sampled_from(PATHS), st.booleans(),
                              st.booleans(), st.booleans()), min_size=3, max_size=14),
    budget=st.integers(200, 4_000),
    reach_tokens=st.sampled_from([None, 150.0, 600.0, 2_500.0]),
    provider=st.sampled_from([None, "openai-codex"]),
    steps=st.lists(st.tuples(st.integers(1, 5), st.integers(-1, 40)), min_size=2, max_size=6),
    tail=st.booleans(),
)
def test_plans_of_a_growing_conversation_equal_the_full_computation(
        tmp_path_factory, shapes, budget, reach_tokens, provider, steps, tail):
    messages = conversation(shapes)
    svc = service(tmp_path_factory.mktemp("plan"), reference=False, budget=budget)
    upto = max(1, len(messages) - 3 * sum(grow for grow, _ in steps))
    for grow, edit in steps:
        upto = min(len(messages), upto + 3 * grow)
        if 0 <= edit < upto and messages[edit]["role"] == "toolResult":
            # the host rewrote an earlier output (a new branch): nothing read of the old one
            # may answer for it
            messages[edit] = messages[edit] | {"content": [
                {"type": "text", "text": f"rewritten {edit}\n" * (edit % 3 * 200)}]}
        whole = messages[:upto] + ([{"role": "user", "content": "go on"}] if tail else [])
        got, want = planned(svc, whole, reach_tokens, provider)
        assert got == want
        # the call itself: it plans and judges, and its decisions feed the next plan
        with contextlib.suppress(ContextSelectionError):  # a budget too small: no window
            svc.select("s", messages=whole, fmt="pi", system="sys", token_budget=budget)


def test_the_property_reaches_deferred_outputs_completed_and_remembered_reads(tmp_path):
    """The shapes above exercise the shortcuts: a run-end pass with exchanges that completes
    the facts of outputs beyond reach, and reads and chunks answered from memory."""
    # runs of four reads (the requests between them steer the run), then an answer
    shapes = [(140, PATHS[n % 3], n % 4 == 3, n == 5, n % 8 == 1) for n in range(24)]
    messages = conversation(shapes)
    svc = service(tmp_path, reference=False, budget=2_500)
    completed: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        real = items.with_facts
        patch.setattr(plan, "with_facts", lambda outputs, calls, reach: completed.append(
            sum(o.index < reach for o in outputs)) or real(outputs, calls, reach))
        ends = [i + 1 for i, m in enumerate(messages)
                if m["role"] == "assistant" and m["stopReason"] == "stop"]
        for end in ends[2:]:
            whole = messages[:end] + [{"role": "user", "content": f"next after {end}"}]
            got, want = planned(svc, whole, 150.0, None)
            assert got == want
            svc.select("s", messages=whole, fmt="pi", system="sys", token_budget=2_500)
    assert any(completed), "no run-end pass completed an output beyond reach"
    assert len(svc.distiller._reads) >= len(messages) // 2
    assert plan._chunks.cache_info().hits > 0


def test_a_responses_run_that_grows_is_read_anew(tmp_path):
    """A Responses run's view holds its later model items: when the host appends one to the
    last run, the view's ledger key stays but its content grows, so the remembered read must
    not answer for it (the followers' ids are part of the key)."""
    svc = service(tmp_path, reference=False, budget=4_000)
    first = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "looking"}]},
    ]
    grown = first + [{"type": "function_call", "call_id": "c1", "name": "shell",
                      "arguments": json.dumps({"command": "ls " + "x" * 300})}]
    for messages in (first, grown):
        request = svc.read("s", messages, "responses", (), None)
        keys = window_distill.view_keys(request)
        got = svc.distiller.reads(request.entries, {}, keys)
        assert got == [Read.of(m) for _, m in request.entries]
    assert got[-1].calls and got[-1].chars > 300  # the run's view now holds the call
