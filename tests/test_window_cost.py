"""select_context's cost in proportion to the window (docs/architecture.md, "Performance rules").

The window-proportional path (exact counting only back to where the window can reach, fingerprints
reused for an unchanged prefix, the ``after_id`` form) must answer exactly as the full
computation does: ``ContextService.reference = True`` counts every message before selecting.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
from context_paging.index.canonical import canonical, plain
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.index.window.request import FingerprintMemo, same, strict
from context_paging.paging.distill import DistillConfig
from context_paging.paging.limits import ContextSelectionError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def words(text: str) -> int:
    """A deterministic stand-in tokenizer: fast, and not proportional to characters."""
    return len(text.split()) + len(text) // 7


def service(home: Path, reference: bool, budget: int = 1_000) -> ContextService:
    svc = ContextService(Ledger(home), ContextSettings(token_budget=budget), words)
    svc.reference = reference
    svc.spare_seconds = 0.0  # counting ahead only fills a cache; keep runs deterministic
    return svc


def conversation(sizes: list[int], answers: list[bool]) -> list[dict]:
    messages: list[dict] = []
    for n, (size, answer) in enumerate(zip(sizes, answers, strict=True)):
        body = "\n".join(f"src/mod{n}.py:{i} value={i * n} needle{n % 5}" for i in range(size))
        messages += [
            {"role": "user", "content": f"request {n}: look at mod{n}", "timestamp": n * 4},
            {"role": "assistant", "stopReason": "toolUse", "timestamp": n * 4 + 1, "content": [
                {"type": "toolCall", "id": f"c{n}", "name": "read",
                 "arguments": {"path": f"src/mod{n}.py"}}]},
            {"role": "toolResult", "toolCallId": f"c{n}", "toolName": "read", "isError": False,
             "timestamp": n * 4 + 2, "content": [{"type": "text", "text": body}]},
        ]
        if answer:
            messages.append({"role": "assistant", "stopReason": "stop", "timestamp": n * 4 + 3,
                             "content": [{"type": "text", "text": f"mod{n} has needle{n % 5}"}]})
    return messages


def outcome(svc: ContextService, **kwargs) -> str:
    """The reply (or the error) as canonical JSON, plus the state it leaves behind."""
    try:
        reply = svc.select("s", **kwargs)
    except ContextSelectionError as exc:
        reply = {"error": exc.code, "text": str(exc)}
    state = svc.ledger.load_state("s")
    return json.dumps([reply, state], sort_keys=True)


calls = st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 120), min_size=2, max_size=14),
    answers=st.lists(st.booleans(), min_size=14, max_size=14),
    budget=st.integers(150, 3_000),
    trim=st.one_of(st.none(), st.integers(50, 3_000)),
    window=st.one_of(st.none(), st.integers(150, 6_000)),
    steps=calls,
    tail=st.sampled_from(["user", "none"]),
    ahead=st.one_of(st.none(), st.integers(0, 30)),
)
def test_window_proportional_counting_answers_as_the_full_computation(
        tmp_path_factory, sizes, answers, budget, trim, window, steps, tail, ahead):
    messages = conversation(sizes, answers[: len(sizes)])
    if tail == "user":
        messages.append({"role": "user", "content": "summarize"})
    home = tmp_path_factory.mktemp("fast")
    fast = service(home, reference=False, budget=budget)
    for grow, change_model in steps:
        upto = min(len(messages), max(1, len(messages) - 3 * 12 + grow * 3))
        args = {"messages": messages[:upto], "fmt": "pi", "system": "sys",
                "model_window": window, "token_budget": budget, "trim_to_tokens": trim,
                "model": "a/b" if change_model else "a/c"}
        # The full computation from the very same stored state (ledger, decisions, cut).
        copy = tmp_path_factory.mktemp("full")
        shutil.copytree(home, copy, dirs_exist_ok=True)
        full = service(copy, reference=True, budget=budget)
        assert outcome(fast, **args) == outcome(full, **args)
        spare_time(fast, ahead)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 60), min_size=3, max_size=12),
    aborted=st.lists(st.integers(0, 400), min_size=1, max_size=3),
    budget=st.integers(150, 2_000),
    ahead=st.one_of(st.none(), st.integers(0, 10)),
)
def test_views_past_the_reach_that_a_window_can_still_keep_are_counted(
        tmp_path_factory, sizes, aborted, budget, ahead):
    """Interrupted exchanges near the end are counted toward the reach but never sent, so the
    window can keep views older than the counted ones (index.window.estimate leaves those
    uncounted without looking them up): the call must still answer as the full computation,
    on its first request and on later ones that find some of them counted ahead."""
    messages = conversation(sizes, [True] * len(sizes))
    for n, size in enumerate(aborted):  # large outputs of interrupted calls, then a new request
        body = "\n".join(f"partial output {n}.{i} of an aborted call" for i in range(size))
        messages += [
            {"role": "user", "content": f"try again {n}"},
            {"role": "assistant", "stopReason": "aborted", "content": [
                {"type": "toolCall", "id": f"x{n}", "name": "read",
                 "arguments": {"path": f"big{n}.py"}}]},
            {"role": "toolResult", "toolCallId": f"x{n}", "toolName": "read", "isError": True,
             "content": [{"type": "text", "text": body}]},
        ]
    messages.append({"role": "user", "content": "summarize"})
    home = tmp_path_factory.mktemp("fast")
    fast = service(home, reference=False, budget=budget)
    for upto in (len(messages) - 1, len(messages)):
        args = {"messages": messages[:upto], "fmt": "pi", "token_budget": budget}
        copy = tmp_path_factory.mktemp("full")
        shutil.copytree(home, copy, dirs_exist_ok=True)
        assert outcome(fast, **args) == outcome(service(copy, True, budget), **args)
        spare_time(fast, ahead)


def floored_words(text: str) -> int:
    """``words`` for a counter that says its longest token: a text with a word in it is at
    least ``1 + len // 7`` tokens here, so never fewer than ``ceil(len / 7)``."""
    return words(text)


floored_words.max_token_chars = 7  # type: ignore[attr-defined]


def bounded_words(text: str) -> int:
    """``floored_words`` with a bound of its own, near the count (as cl100k's piece floor is
    on most outputs): the window raises the newest floors to it while they do not reach the
    budget."""
    return words(text)


bounded_words.max_token_chars = 7  # type: ignore[attr-defined]
bounded_words.text_floor = lambda text: max(0, words(text) - 1)  # type: ignore[attr-defined]


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(1, 40), min_size=2, max_size=14),
    answers=st.lists(st.booleans(), min_size=14, max_size=14),
    budget=st.integers(150, 3_000),
    trim=st.one_of(st.none(), st.integers(50, 3_000)),
    distill=st.booleans(),
    steps=st.lists(st.tuples(st.integers(0, 3), st.booleans()), min_size=1, max_size=3),
    counter=st.sampled_from([floored_words, bounded_words]),
)
def test_counting_to_the_target_with_floors_beyond_answers_as_the_full_computation(
        tmp_path_factory, sizes, answers, budget, trim, distill, steps, counter):
    """Before the first cut, views past the trim target carry floors (their length over the
    longest token, or the counter's own bound) instead of exact counts: every reply and state
    is the full computation's."""
    messages = conversation(sizes, answers[: len(sizes)]) + [{"role": "user", "content": "go"}]
    settings_ = ContextSettings(token_budget=budget, distill=DistillConfig(enabled=distill))

    def made(home: Path, reference: bool) -> ContextService:
        svc = ContextService(Ledger(home), settings_, counter)
        svc.reference, svc.spare_seconds = reference, 0.0
        return svc

    home = tmp_path_factory.mktemp("fast")
    fast = made(home, False)
    for drop, change_model in sorted(steps, reverse=True):  # the conversation grows
        upto = max(1, len(messages) - 3 * drop)
        args = {"messages": messages[:upto], "fmt": "pi", "system": "sys",
                "token_budget": budget, "trim_to_tokens": trim,
                "model": "a/b" if change_model else "a/c"}
        copy = tmp_path_factory.mktemp("full")
        shutil.copytree(home, copy, dirs_exist_ok=True)
        assert outcome(fast, **args) == outcome(made(copy, True), **args)


def test_floors_let_the_first_cut_count_only_back_to_the_target(tmp_path):
    """Sixty large outputs, a budget of about four turns: the first cut counts the two turns
    the target holds and the one that crosses it, and no more; the rest carry floors."""
    counted: list[str] = []

    def counting(text: str) -> int:
        counted.append(text)
        return floored_words(text)

    counting.max_token_chars = 7  # type: ignore[attr-defined]
    messages = conversation([40] * 60, [False] * 60) + [{"role": "user", "content": "go"}]
    svc = ContextService(Ledger(tmp_path), ContextSettings(
        token_budget=3 * 460, distill=DistillConfig(enabled=False)), counting)
    reply = svc.select("s", messages, "pi", token_budget=3 * 460)
    outputs = [t for t in counted if t.startswith("src/mod")]
    assert (reply["mode"], len(outputs)) == ("paged", 3)  # two kept, one crossing


@pytest.mark.parametrize("distill", [False, True])
def test_a_counters_own_bound_stops_counting_where_lengths_alone_do_not(tmp_path, distill):
    """Lengths over a longest token of 60 characters fall short of the budget; the counter's
    own bound (its count less one) does not: the first cut then counts fewer outputs, and the
    reply is the full computation's."""
    def run(home: Path, bound: bool, reference: bool = False) -> tuple[str, int]:
        counted: list[str] = []

        def counting(text: str) -> int:
            counted.append(text)
            return words(text)

        counting.max_token_chars = 60  # type: ignore[attr-defined]
        if bound:
            counting.text_floor = lambda text: max(0, words(text) - 1)  # type: ignore[attr-defined]
        svc = ContextService(Ledger(home), ContextSettings(
            token_budget=2_000, distill=DistillConfig(enabled=distill)), counting)
        svc.reference, svc.spare_seconds = reference, 0.0
        messages = conversation([40] * 30, [False] * 30) + [{"role": "user", "content": "go"}]
        reply = outcome(svc, messages=messages, fmt="pi", token_budget=2_000)
        return reply, len([t for t in counted if t.startswith("src/mod")])

    bounded, fewer = run(tmp_path / "bounded", True)
    lengths, more = run(tmp_path / "lengths", False)
    assert bounded == lengths == run(tmp_path / "full", True, True)[0]
    assert '"mode": "paged"' in bounded and fewer < more


def test_a_turn_whose_floor_crosses_the_target_is_not_counted(tmp_path):
    """The turn that crosses the trim target is left uncounted when its output's floor alone
    crosses it (its own bound here is its count less one): only the turns the window keeps are
    counted, and the reply is the full computation's."""
    def run(home: Path, reference: bool) -> tuple[str, int]:
        counted: list[str] = []

        def counting(text: str) -> int:
            counted.append(text)
            return words(text)

        counting.max_token_chars = 7  # type: ignore[attr-defined]
        counting.text_floor = lambda text: max(0, words(text) - 1)  # type: ignore[attr-defined]
        svc = ContextService(Ledger(home), ContextSettings(
            token_budget=3 * 460, distill=DistillConfig(enabled=False)), counting)
        svc.reference, svc.spare_seconds = reference, 0.0
        messages = conversation([40] * 60, [False] * 60) + [{"role": "user", "content": "go"}]
        reply = outcome(svc, messages=messages, fmt="pi", token_budget=3 * 460)
        return reply, len([t for t in counted if t.startswith("src/mod")])

    fast, outputs = run(tmp_path / "fast", False)
    assert fast == run(tmp_path / "full", True)[0]
    assert '"mode": "paged"' in fast and outputs == 2  # the two kept, not the one crossing


def spare_time(svc: ContextService, counts: int | None) -> None:
    """The idle step between calls: counting ahead until done (None), or stopped after
    ``counts`` views (as a request arriving stops it in the server)."""
    asked = iter(range(10**9))
    svc.idle(math.inf, None if counts is None else lambda: next(asked) >= counts)


def test_idle_counts_the_views_a_call_left_uncounted_and_stops_when_asked(tmp_path):
    messages = conversation([200] * 30, [True] * 30) + [{"role": "user", "content": "next"}]
    svc = service(tmp_path, False, 400)
    svc.select("s", messages, fmt="pi")
    counted = len(svc.estimates.cache)
    assert svc.idle(math.inf, lambda: True)  # a request is waiting: nothing counted, work left
    assert len(svc.estimates.cache) == counted
    assert svc.idle(0.0)  # no spare time: nothing counted either
    assert len(svc.estimates.cache) == counted
    stops = iter([False, False, True])
    assert svc.idle(math.inf, lambda: next(stops))
    assert len(svc.estimates.cache) == counted + 2
    assert not svc.idle(math.inf)  # until done
    full = service(tmp_path / "full", True, 400)
    full.select("s", messages, fmt="pi")
    assert svc.estimates.cache == full.estimates.cache
    assert not svc.idle(math.inf)  # nothing left to do


def test_a_calls_previous_request_is_freed_in_spare_time(tmp_path):
    """The request a call replaces is kept until ``idle`` (freeing it is not the call's work);
    a host that never calls ``idle`` keeps only a few."""
    messages = conversation([20] * 6, [True] * 6)
    svc = service(tmp_path, False, 400)
    first = svc.select("s", messages[:12], fmt="pi")
    svc.select("s", messages[12:], fmt="pi", after_id=first["last_message_id"])
    assert any(value is not None for value in svc._retired)
    svc.idle(0.0)
    assert svc._retired == []
    for n in range(20):
        svc.select("s", [{"role": "user", "content": f"more {n}"}], fmt="pi",
                   after_id=svc.ledger.session("s").head)
    assert len(svc._retired) <= 8


def test_an_uncounted_message_never_reaches_the_window(tmp_path):
    """A budget far below the history: only the newest messages are counted exactly."""
    messages = conversation([200] * 30, [True] * 30) + [{"role": "user", "content": "next"}]
    fast, full = service(tmp_path / "a", False, 400), service(tmp_path / "b", True, 400)
    reply = fast.select("s", messages, fmt="pi")
    assert reply == full.select("s", messages, fmt="pi")
    assert reply["mode"] == "paged"
    # most of history left uncounted
    assert len(fast.estimates.cache) < len(full.estimates.cache) / 2


def test_after_id_with_the_new_messages_answers_as_the_whole_conversation(tmp_path):
    messages = conversation([40] * 10, [True] * 10)
    whole, delta = service(tmp_path / "a", False, 600), service(tmp_path / "b", False, 600)
    first = delta.select("s", messages[:20], fmt="pi")
    assert whole.select("s", messages[:20], fmt="pi") == first
    reply = delta.select("s", messages[20:], after_id=first["last_message_id"])
    assert reply == whole.select("s", messages, fmt="pi")
    assert reply["last_message_id"] == delta.ledger.session("s").head


def test_after_id_may_name_an_earlier_message_and_branch(tmp_path):
    messages = conversation([10] * 4, [True] * 4)
    svc = service(tmp_path, False)
    svc.select("s", messages, fmt="pi")
    earlier = svc.ledger.session("s").path_ids()[3]  # the first answer
    edited = {"role": "user", "content": "a different turn"}
    reply = svc.select("s", [edited], after_id=earlier)
    assert reply["messages"][-1] == edited
    assert reply == service(tmp_path / "other", False).select(
        "s", [*messages[:4], edited], fmt="pi")


@pytest.mark.parametrize("after_id", ["m0000", "", "not-an-id"])
def test_an_unknown_after_id_is_a_coded_error_asking_for_everything(tmp_path, after_id):
    svc = service(tmp_path, False)
    svc.select("s", conversation([3], [True]), fmt="pi")
    with pytest.raises(ContextSelectionError) as caught:
        svc.select("s", [{"role": "user", "content": "more"}], after_id=after_id)
    assert caught.value.code == "UNKNOWN_AFTER_ID"
    assert "send the whole conversation" in str(caught.value)


def test_after_id_of_another_session_is_unknown(tmp_path):
    svc = service(tmp_path, False)
    head = svc.select("s", conversation([3], [True]), fmt="pi")["last_message_id"]
    with pytest.raises(ContextSelectionError, match="UNKNOWN_AFTER_ID|not a message"):
        svc.select("t", [{"role": "user", "content": "more"}], after_id=head)


def test_a_message_changed_in_place_gets_a_new_fingerprint():
    memo = FingerprintMemo()
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}]}]
    first = memo.fingerprints("s", messages, ())
    messages[0]["content"][0]["text"] = "b"  # a library host editing its own objects
    assert memo.fingerprints("s", messages, ()) != first
    assert memo.fingerprints("s", [{"role": "user", "content": [
        {"type": "text", "text": "a"}]}], ()) == first


def test_json_types_are_not_confused_by_python_equality():
    assert 1 == 1.0 == True  # noqa: E712 — why ``same`` compares types
    assert not same({"a": 1}, {"a": 1.0})
    assert not same([True], [1])
    assert same({"a": [1, "x", None]}, {"a": [1, "x", None]})
    memo = FingerprintMemo()
    assert memo.fingerprints("s", [{"n": 1}], ()) != memo.fingerprints("s", [{"n": 1.0}], ())


def test_floats_are_the_same_only_when_json_writes_them_alike():
    assert not same({"x": 0.0}, {"x": -0.0})  # equal in Python, "0.0" and "-0.0" in JSON
    assert same([float("nan")], [float("nan")])  # unequal in Python, "NaN" both in JSON
    memo = FingerprintMemo()
    assert memo.fingerprints("s", [{"x": 0.0}], ()) != memo.fingerprints("s", [{"x": -0.0}], ())


def test_outputs_beyond_the_windows_reach_are_left_unjudged(tmp_path):
    """One long run (a mid-run checkpoint): old outputs the window cannot hold get no decision
    now, and the window is the one the full pass gives."""
    messages = conversation([300] * 30, [False] * 30)
    fast, full = service(tmp_path / "a", False, 12_000), service(tmp_path / "b", True, 12_000)
    reply = fast.select("s", messages, fmt="pi")
    assert reply == full.select("s", messages, fmt="pi")
    judged, everything = fast.ledger.session("s").decisions, full.ledger.session("s").decisions
    assert 0 < len(judged) < len(everything) / 2
    assert {d.target for d in judged} <= {d.target for d in everything}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text()
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(["\x7f", "é", "\ud800"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_the_fast_canonical_form_is_byte_for_byte_the_json_modules(value):
    """Fingerprints, and so every stored history id, must not change with the encoder."""
    assert canonical(value) == json.dumps(value, sort_keys=True,
                                          separators=(",", ":")).encode("ascii")


@settings(max_examples=400, deadline=None)
@given(json_values, json_values)
def test_same_values_have_the_same_canonical_form(a, b):
    """The memo keeps a fingerprint when ``same`` says so: that must never hide a change."""
    for x, y in ((a, b), (a, copy.deepcopy(a)), (a, json.loads(json.dumps(a))), ([a, b], [a, a])):
        # exactly: the same JSON value (canonical sorts keys) ...
        assert same(x, y) == (canonical(x) == canonical(y))
        assert same(x, y) == (x == strict(y))  # ... and what the memo compares
    assert same(a, copy.deepcopy(a)) and same(a, json.loads(json.dumps(a)))  # it sees equality


def test_the_encoder_fast_path_is_taken_for_plain_messages():
    pytest.importorskip("orjson")
    message = {"role": "user", "content": [{"type": "text", "text": "a\nb\t\"c\""}], "n": 3}
    assert plain(message) and not plain({"x": 1.5}) and not plain({1: "a"})
    assert canonical(message) == json.dumps(message, sort_keys=True,
                                            separators=(",", ":")).encode()


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_over_mcp_after_id_continues_and_an_unknown_one_is_a_coded_tool_error(tmp_path):
    from context_paging.server.config import load_settings
    from context_paging.server.mcp.tools import create_server
    from mcp import Client

    from tests.conftest import ledger_home

    server = create_server(load_settings(home=ledger_home(tmp_path)))
    messages = conversation([5] * 3, [True] * 3)
    async with Client(server) as client:
        first = await client.call_tool("select_context", {
            "session": "h", "messages": messages[:8], "format": "pi"})
        last_id = first.structured_content["last_message_id"]
        more = await client.call_tool("select_context", {
            "session": "h", "messages": messages[8:], "after_id": last_id})
        whole = await client.call_tool("select_context", {
            "session": "h", "messages": messages, "format": "pi"})
        wrong = await client.call_tool("select_context", {
            "session": "h", "messages": messages[8:], "after_id": "m123"})
    server.history.close()
    assert not more.is_error and more.structured_content == whole.structured_content
    assert more.structured_content["messages"] == messages
    assert wrong.is_error and wrong.content[0].text.startswith("UNKNOWN_AFTER_ID")


def test_a_window_that_reaches_unjudged_outputs_gets_the_full_pass(tmp_path):
    """Text that tokenizes far sparser than characters/4 (20 characters a token) lets the
    window reach past the outputs judged first: the call judges everything (here: every older
    read of the same file is removed as superseded) and answers as the full computation."""
    from bench.select_bench import turn

    messages = []
    for n in range(60):  # one long run reading the same file: the bench's shape, smaller
        messages += turn(n, 20_000)
        messages[-2]["content"][0]["arguments"] = {"path": "src/a.ts"}

    def sparse(home: Path, reference: bool) -> ContextService:
        svc = ContextService(Ledger(home), ContextSettings(token_budget=10_000),
                             lambda text: len(text) // 20)
        svc.reference, svc.spare_seconds = reference, 0.0
        return svc

    fast, full = sparse(tmp_path / "a", False), sparse(tmp_path / "b", True)
    passes = []
    original = fast.distiller.run
    fast.distiller.run = lambda *a: passes.append(a[-1]) or original(*a)
    assert outcome(fast, messages=messages, fmt="pi") == outcome(full, messages=messages,
                                                                 fmt="pi")
    assert passes == [10_000, None]  # the reach pass, then the full one
    removed = [d for d in fast.ledger.session("s").decisions if d.action == "remove"]
    assert len(removed) == 56 and removed == full.ledger.session("s").decisions


# --- one request value, the window as named steps, the state as a value


def test_a_request_is_read_into_one_frozen_value():
    import dataclasses

    from context_paging.index.ledger import fingerprint
    from context_paging.paging.request import read

    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list files"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "user", "content": "reminder: outgoing only"},
    ]
    asked = []

    def prints(skip):
        asked.append(set(skip))
        return [None if i in skip else fingerprint(m) for i, m in enumerate(messages)]

    request = read(messages, "auto", [4], prints, validate=True)
    assert asked == [{0, 4}]  # the resident system message and the ephemeral one
    assert request.format == "openai" and request.views.resident == (0,)
    # ids chain the fingerprints: the same messages get the same ids, an edit changes the id of
    # the edited message and of every later one, never an earlier one's
    again = read(messages, "auto", [4], prints, validate=True)
    assert again.ids == request.ids and len(set(request.ids[1:4])) == 3
    edited = [*messages[:2], {**messages[2], "content": "edited"}, *messages[3:]]
    changed = read(edited, "auto", [4], lambda skip: [
        None if i in skip else fingerprint(m) for i, m in enumerate(edited)], validate=True)
    assert changed.ids[1] == request.ids[1]
    assert changed.ids[2] != request.ids[2] and changed.ids[3] != request.ids[3]
    assert request.ids[0] is None and request.ids[4] is None
    assert request.outgoing == (False, False, False, True)
    assert request.keys == (f"{request.ids[1]}#0", f"{request.ids[2]}#0",
                            f"{request.ids[3]}#0", None)
    assert [hid for hid, _ in request.entries] == [request.ids[1], request.ids[2], request.ids[3]]
    assert request.positions == (0, 1, 2)
    assert request.roles == ("user", "assistant", "toolResult", "user")
    assert request.newest_assistant() == request.ids[2]
    assert request.tool_owners() == {2: (request.ids[2], "c1", "ls")}
    assert request.normalized is not None and request.normalized.atoms
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.ids = ()  # type: ignore[misc]


def test_one_select_call_converts_and_validates_its_request_once(tmp_path, monkeypatch):
    import context_paging.paging.request as request_module
    import context_paging.paging.select as select_module

    counts = {"to_views": 0, "normalize": 0}

    def counted(name, original):
        def wrapper(*args, **kwargs):
            counts[name] += 1
            return original(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(request_module, "to_views", counted("to_views", request_module.to_views))
    monkeypatch.setattr(request_module, "normalize",
                        counted("normalize", request_module.normalize))
    monkeypatch.setattr(select_module, "normalize", counted("normalize", select_module.normalize))
    svc = service(tmp_path, False, 400)
    messages = conversation([60] * 8, [True] * 8) + [{"role": "user", "content": "next"}]
    reply = svc.select("s", messages, fmt="pi")
    assert reply["mode"] == "paged"
    assert counts == {"to_views": 1, "normalize": 1}
    svc.plan("s", messages, fmt="pi")  # the sampling judge's planning reads the same way
    assert counts["to_views"] == 2


def test_the_session_state_is_a_typed_value_that_round_trips_the_state_file(tmp_path):
    from context_paging.index.window.state import SessionState

    svc = service(tmp_path, False, 400)
    messages = conversation([60] * 8, [True] * 8)
    svc.select("s", messages, fmt="pi", model="a/b", usage=None)
    svc.select("s", messages + [{"role": "user", "content": "next"}], fmt="pi", model="a/b",
               usage={"input_tokens": 900, "cache_read_tokens": 10, "cache_write_tokens": 5})
    saved = svc.ledger.load_state("s")
    state = SessionState.from_dict(saved)
    assert state.to_dict() == saved
    assert json.dumps(state.to_dict()) == json.dumps(saved)  # the same keys, in the same order
    assert state.requests == 2 and state.settings == ("a/b", None)
    assert state.cut_for(("a/b", None)) is not None and state.cut_for(("a/c", None)) is None
    assert state.anchor_for(("a/b", None)) is not None
    assert list(state.usage().values()) == [[10, 5]]


@pytest.mark.parametrize("damage", [
    {"cut": {"frontier": "nonsense"}}, {"anchor": {"sent": "x"}}, {"requests": "many"},
    {"growth_steps": ["a", None]}, {"growth": "fast"}, {"settings": None},
])
def test_a_state_value_with_a_field_it_cannot_read_costs_only_that_field(tmp_path, damage):
    from context_paging.index.window.state import SessionState

    svc = service(tmp_path, False, 400)
    messages = conversation([60] * 8, [True] * 8)
    svc.select("s", messages, fmt="pi")
    good = svc.ledger.load_state("s")
    state = SessionState.from_dict(good | damage)  # never raises
    settings = (None, None)
    if "cut" in damage or "settings" in damage:
        assert state.cut_for(settings) is None
    if "anchor" in damage:
        assert state.anchor_for(settings) is None
    # and the window still answers from it: the next call saves a whole state again
    svc.ledger.save_state("s", good | damage)
    svc.select("s", messages + [{"role": "user", "content": "next"}], fmt="pi")
    saved = svc.ledger.load_state("s")
    assert SessionState.from_dict(saved).to_dict() == saved  # every field readable again


def test_every_reader_of_stop_reasons_uses_the_one_table():
    from context_paging.index.history import stored_messages
    from context_paging.paging.formats import to_views
    from context_paging.paging.messages import STOP_REASONS, pi_stop_reason, stop_reason

    for host, meaning in [("end_turn", "stop"), ("tool_calls", "tool_use"),
                          ("max_tokens", "length"), ("canceled", "aborted"),
                          ("cancelled", "aborted"), ("interrupted", "aborted"),
                          ("error", "error"), ("toolUse", "tool_use")]:
        assert STOP_REASONS[host] == meaning
        message = {"role": "assistant", "content": "x", "finish_reason": host}
        assert stop_reason(message) == meaning
        view = to_views([message], "openai").views[0].message
        assert view["stopReason"] == pi_stop_reason(message, False)
        assert (view["stopReason"] in ("aborted", "error")) == (meaning in ("aborted", "error"))
        history = stored_messages(message, "openai", "m1", {})[0]
        assert history.stop_reason == meaning
        assert history.interrupted == (meaning in ("aborted", "error"))


def test_the_ledgers_history_is_read_through_the_windows_views():
    """One converter: a stored host message becomes history Messages through
    ``paging.formats.to_views``, keeping what the history shows (image links, ids of split
    Anthropic messages, stop reasons, the model)."""
    from context_paging.index.history import stored_messages
    from context_paging.index.model import ImageBlock, TextBlock
    from context_paging.paging.estimate import chars4_tokens
    from context_paging.paging.formats import to_views

    linked = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": True,
         "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]},
        {"type": "text", "text": "and now?"}]}
    names = {"t1": "shot"}
    result, request = stored_messages(linked, "anthropic", "m9", names, "ts")
    assert (result.id, result.role, result.tool_name, result.is_error) == (
        "m9.r0", "tool_result", "shot", True)
    assert result.content == (ImageBlock("", "", "https://x/a.png"),)
    assert (request.id, request.content) == ("m9", (TextBlock("and now?"),))
    # the link rides in the view for the history only: the estimate does not see it
    view = to_views([linked], "anthropic").views[0].message
    assert view["content"][0]["url"] == "https://x/a.png"
    assert chars4_tokens(view) == chars4_tokens(
        {**view, "content": [{k: v for k, v in view["content"][0].items() if k != "url"}]})
    answer = {"role": "assistant", "content": [{"type": "text", "text": "cut"}],
              "stop_reason": "max_tokens", "model": "claude-x"}
    (turn,) = stored_messages(answer, "anthropic", "m10", {}, "ts")
    assert (turn.stop_reason, turn.model) == ("length", "claude-x")
    # a system message is resident input, wherever it stands; an empty output stays one text
    assert stored_messages({"role": "system", "content": "rules"}, "openai", "m11", {}) == []
    (output,) = stored_messages({"type": "function_call_output", "call_id": "c", "output": ""},
                                "responses", "m12", {"c": "shell"})
    assert output.content == (TextBlock(""),) and output.tool_name == "shell"
