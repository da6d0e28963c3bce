"""Distillation planning in proportion to what is new gives the plans of the full computation.

The window's distiller remembers, between calls, what a pass reads of each stored view (text,
images, tool calls, size; by its ledger key) and each large output's chunks (by its text); a
pass walks the run once for both sizes of output, and completes the facts of outputs beyond
reach instead of collecting them again. ``full_computation``
(tests/test_select_cost.py) switches all of that off. Here one service plans a conversation as
it grows, call after call, with its memory warm, and every plan must equal the one planned from
scratch on the full computation.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace

import pytest
from context_paging.index.ledger import Ledger
from context_paging.index.window import distill as window_distill
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.distill import items, plan
from context_paging.paging.distill.apply import applied, changed
from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.conversation import (
    Read,
    assistant_count,
    assistant_texts,
    calls_of,
    question_of,
    run_starts,
)
from context_paging.paging.distill.scan import Scan
from context_paging.paging.limits import ContextSelectionError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_select_cost import DISTILL, PATHS, full_computation, service, turn, words
from tests.test_window_cost import outcome

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


# --- the kept structure (paging/distill/scan.py) against the full walk -------------------------

SCAN_CONFIG = DistillConfig(min_result_chars=600, min_run_chars=500, mid_run_batch_chars=800,
                            mid_run_min_age_turns=1, exchange_min_saving_chars=100,
                            small_result_min_chars=120, image_keep_turns=1, history_exchanges=2,
                            keep_recent_exchanges=1)
# Without the break-even gates: checkpoints and exchange omissions planned far more often.
SCAN_EAGER = replace(SCAN_CONFIG, mid_run_break_even=False, exchange_break_even=False,
                     distill_errors=False, keep_recent_exchanges=0, min_run_chars=0)
_IMAGE = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
          "AAAABJRU5ErkJggg==")

# One step of a conversation: (kind, a number that picks a path, a size and, for calls, an id).
EVENTS = st.tuples(
    st.sampled_from(["prompt", "prompt", "call", "call", "call", "answer", "answer", "custom",
                     "summary", "aborted", "image_call", "write_call"]),
    st.integers(0, 7), st.integers(0, 3))


def events_to_messages(events: list[tuple[str, int, int]]) -> list[dict]:
    """Prompts (steering or not, by what is before them), reads, bash runs and writes of a
    few paths with outputs of several sizes (some repeated: outputs superseded later; some
    with images; call ids that repeat), answers, aborted turns, notices and summaries."""
    messages: list[dict] = []
    for n, (kind, pick, size) in enumerate(events):
        path = PATHS[pick % len(PATHS)]
        if kind == "prompt":
            messages.append({"role": "user", "content": f"please look at {path} ({n})"})
        elif kind == "answer":
            messages.append({"role": "assistant", "stopReason": "stop",
                             "content": [{"type": "text", "text": f"{path} is fine ({n})"}]})
        elif kind == "custom":
            messages.append({"role": "custom", "customType": "note", "content": f"note {n}"})
        elif kind == "summary":
            messages.append({"role": "compactionSummary", "summary": f"summary {n}"})
        elif kind == "aborted":
            messages.append({"role": "assistant", "stopReason": "aborted", "content": [
                {"type": "toolCall", "id": f"x{n}", "name": "read", "arguments": {"path": path}}]})
        else:
            call_id = f"c{pick}" if pick > 5 else f"c{n}"  # c6, c7: ids that repeat
            name, arguments = (("write", {"path": path, "content": "x"}) if kind == "write_call"
                               else ("bash", {"command": f"cat {path}"}) if pick % 3 == 0
                               else ("read", {"path": path}))
            text = f"{path} line {n}\n" * (0, 20, 120, 200)[size]
            content: list[dict] = [{"type": "text", "text": text}]
            if kind == "image_call":
                content.append({"type": "image", "data": _IMAGE, "mimeType": "image/png"})
            messages += [
                {"role": "assistant", "stopReason": "toolUse", "content": [
                    {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}]},
                {"role": "toolResult", "toolCallId": call_id, "toolName": name,
                 "isError": size == 0 and pick == 4, "content": content}]
    return messages


def chained_keys(messages: list[dict]) -> list[tuple[str, str]]:
    """Keys as the window's: each names its message and every message before it."""
    keys, chain = [], ""
    for message in messages:
        chain = plan.fingerprint(chain, json.dumps(message, sort_keys=True))
        keys.append(("pi", chain))
    return keys


SEEN: set[str] = set()  # what the plans of the property held (test_the_scan_property_reaches)


@settings(max_examples=150, deadline=None, derandomize=True)  # SEEN: the same examples each run
@given(
    events=st.lists(EVENTS, min_size=8, max_size=60),
    steps=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 80), st.booleans(),
                             st.sampled_from(["", "call", "answer", "answer+prompt"])),
                   min_size=1, max_size=6),
    provider=st.sampled_from([None, "openai-codex"]),
    reach=st.integers(0, 30),
    config=st.sampled_from([SCAN_CONFIG, SCAN_EAGER]),
)
def test_a_kept_scan_plans_as_the_full_walk(events, steps, provider, reach, config):
    """One Scan carried over calls whose conversations grow, lose their tail (a host that
    moves its active request to the end, or a new branch) or change in the middle: every
    plan equals the plan of the full walk (no reads, no scan), and the scan's own lists equal
    the walks they replace."""
    scan = None
    upto = max(1, len(events) - sum(step[0] for step in steps))
    for grow, cut, moved, end in steps:
        upto += grow
        # the end decides the pass: after a call, a checkpoint; after an answer and a new
        # request, a run end
        ending = {"": [], "call": [("call", 1, 3)], "answer": [("answer", 0, 0)],
                  "answer+prompt": [("answer", 0, 0), ("prompt", 2, 0)]}[end]
        messages = events_to_messages(events[:upto] + ending)
        if moved and messages:
            messages = messages[:cut % len(messages)] + messages[cut % len(messages) + 1:] + [
                {"role": "user", "content": "the active request"}]
        entries = [(f"h{i}", m) for i, m in enumerate(messages)]
        reads = [Read.of(m) for m in messages]
        scan = Scan.of(scan, messages, reads, chained_keys(messages), config)
        assert scan.starts == run_starts(messages)
        assert scan.assistant_count() == assistant_count(messages)
        want = plan.plan_pass(entries, config, provider=provider, reach=reach)
        got = plan.plan_pass(entries, config, provider=provider, reach=reach, reads=reads,
                             scan=scan)
        assert got == want
        SEEN.update(() if got is None else
                    [got.phase, *(k for k in ("large", "small", "exchanges", "images",
                                              "deferred") if getattr(got, k))])
        for start in scan.starts:  # every run's memo, as the walks give it
            at = scan.starts.index(start)
            stop = scan.starts[at + 1] if at + 1 < len(scan.starts) else len(messages)
            memo = scan.run(messages, reads, start, stop)
            if memo is None:
                continue  # a result before its call: the pass walks that run itself
            assert memo.calls == calls_of(messages, start, stop, reads)
            assert [t for _, t in memo.notes] == assistant_texts(messages, start, stop, reads)
            assert plan._question(messages, start, stop, memo) == question_of(messages, start,
                                                                              stop)


def test_the_scan_property_reaches_every_kind_of_plan():
    """The shapes above give plans of both phases with every kind of item (run after the
    property in this module)."""
    test_a_kept_scan_plans_as_the_full_walk()
    assert SEEN >= {"mid-run", "run-end", "large", "small", "exchanges", "images", "deferred"}


def test_a_kept_scan_reads_again_the_exchanges_a_changed_message_is_in():
    """Finished runs before the current one are judged as exchanges; when the host sends a
    changed message inside one (a new branch), the kept scan must read that exchange again,
    and only the exchanges before the change are answered from memory."""
    events = [e for n in range(5) for e in (("prompt", n, 0), ("call", n, 3), ("answer", n, 0))]
    events.append(("prompt", 1, 0))
    messages = events_to_messages(events)
    entries = [(f"h{i}", m) for i, m in enumerate(messages)]
    reads = [Read.of(m) for m in messages]
    scan = Scan.of(None, messages, reads, chained_keys(messages), SCAN_EAGER)
    first = plan.plan_pass(entries, SCAN_EAGER, reads=reads, scan=scan)
    assert first is not None and len(first.exchanges) >= 3
    kept = dict(scan.exchanges)
    changed_at = first.exchanges[1].end - 1  # the second exchange's answer
    messages[changed_at] = messages[changed_at] | {
        "content": [{"type": "text", "text": "a different answer on this branch"}]}
    entries = [(f"h{i}", m) for i, m in enumerate(messages)]
    reads = [Read.of(m) for m in messages]
    scan = Scan.of(scan, messages, reads, chained_keys(messages), SCAN_EAGER)
    assert set(scan.exchanges) == {span for span in kept if span[1] <= changed_at}
    got = plan.plan_pass(entries, SCAN_EAGER, reads=reads, scan=scan)
    assert got == plan.plan_pass(entries, SCAN_EAGER)
    assert got.exchanges[1].answer == "a different answer on this branch"


def test_calls_with_exchanges_left_out_answer_as_the_full_computation(tmp_path):
    """Old exchanges the judge leaves out are in force on later calls: their entries are
    dropped from what a pass reads (and from the scan's keys), every call answering as the
    full computation does, whole conversation or after the last id."""
    config = replace(DISTILL, exchange_break_even=False, keep_recent_exchanges=0,
                     exchange_min_saving_chars=100)
    topics = ["parser", "cache", "network", "render", "storage", "queue", "logger", "metrics"]

    def exchange(n: int) -> list[dict]:
        """A request, a read and an answer sharing no word with any other exchange's."""
        name = f"{topics[n % len(topics)]}{n}"
        return [
            {"role": "user", "content": f"see {name}"},
            {"role": "assistant", "stopReason": "toolUse", "content": [
                {"type": "toolCall", "id": f"e{n}", "name": "read",
                 "arguments": {"path": f"src/{name}.py"}}]},
            {"role": "toolResult", "toolCallId": f"e{n}", "toolName": "read", "isError": False,
             "content": [{"type": "text", "text": "\n".join(
                 f"{name} {k}: v{k} = {k * n}" for k in range(120))}]},
            {"role": "assistant", "stopReason": "stop",
             "content": [{"type": "text", "text": f"{name} ok"}]},
        ]

    def make(home):
        return ContextService(Ledger(home), ContextSettings(token_budget=3_000, distill=config),
                              words)

    fast, full = make(tmp_path / "fast"), make(tmp_path / "full")
    full.reference = True
    messages: list[dict] = []
    last = None
    for n in range(8):
        new = exchange(n) + [{"role": "user", "content": f"now something else entirely {n}"}]
        messages = [*messages, *new]  # the last request stays (as after_id must keep it)
        args = {"fmt": "pi", "system": "sys", "token_budget": 3_000}
        if last is None or n % 2:
            got = outcome(fast, messages=messages, **args)
        else:
            got = outcome(fast, messages=new, after_id=last["last_message_id"], **args)
        with full_computation():
            assert got == outcome(full, messages=messages, **args)
        last = json.loads(got)[0]
    omitted = [d for d in fast.ledger.session("s").decisions if d.action == "omit_exchange"]
    assert len(omitted) >= 2


def test_a_kept_scan_follows_a_call_id_made_again_as_the_full_walk_does():
    """The full walk looks calls up by id, the last one winning: when a later call repeats an
    id, the outputs already kept for that id belong to the new call (its turn sets their age
    at a checkpoint). Grown one event at a time, every plan equals the full walk's."""
    events = [("prompt", 0, 0), ("call", 6, 3), ("call", 1, 3), ("call", 2, 3), ("call", 3, 3),
              ("call", 6, 3), ("call", 1, 3), ("call", 2, 3), ("call", 5, 3)]
    scan, planned = None, 0
    for upto in range(2, len(events) + 1):
        messages = events_to_messages(events[:upto])
        entries = [(f"h{i}", m) for i, m in enumerate(messages)]
        reads = [Read.of(m) for m in messages]
        scan = Scan.of(scan, messages, reads, chained_keys(messages), SCAN_EAGER)
        for reach in (0, 6):
            got = plan.plan_pass(entries, SCAN_EAGER, reach=reach, reads=reads, scan=scan)
            assert got == plan.plan_pass(entries, SCAN_EAGER, reach=reach)
            planned += got is not None and any(o.item.call_id == "c6" for o in got.large)
    assert planned  # the repeated id's outputs were planned
