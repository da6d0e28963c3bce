"""Reading a body against an earlier one (server/proxy/resent.py) gives what reading it whole gives,
and the proxy forwards the same bytes either way."""

from __future__ import annotations

import json
import random

import httpx2 as httpx
import pytest
from context_paging.server.proxy import wire
from context_paging.server.proxy.app import has_recovery_tools, marked_resident
from context_paging.server.proxy.resent import Resent
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import recorded_params
from tests.test_proxy import Stack, make_home, tool_turn

texts = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
messages = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                  "content": texts, "n": st.integers(-3, 3)})
steps = st.one_of(
    st.tuples(st.just("append"), st.lists(messages, min_size=1, max_size=3)),
    st.tuples(st.just("edit"), st.integers(0, 40), texts),
    st.tuples(st.just("rewind"), st.integers(0, 40)),
    st.tuples(st.just("lead"), texts),  # a member before the conversation changes
    st.tuples(st.just("trail"), texts),  # one after it
)


def render(field: str, lead: str, conversation: list, trail: str, indent, ascii_only) -> bytes:
    value = {"model": lead, field: conversation, "max_tokens": 5, "trail": trail}
    return json.dumps(value, indent=indent, ensure_ascii=ascii_only).encode()


def same_body(got: wire.Body, want: wire.Body) -> bool:
    return (got.raw == want.raw and json.dumps(got.value) == json.dumps(want.value)
            and dict(got.spans) == dict(want.spans) and got.items == want.items
            and dict(got.numbers) == dict(want.numbers) and got.counted == want.counted)


def stepped(conversation: list, kind: str, args: list) -> list:
    """The conversation after one step of a script: ``append`` messages, ``edit`` one's
    content, ``rewind`` to a length; any other step leaves it as it is."""
    if kind == "append":
        return conversation + args[0]
    if kind == "edit" and conversation:
        at = args[0] % len(conversation)
        return [*conversation[:at], {**conversation[at], "content": args[1]},
                *conversation[at + 1:]]
    if kind == "rewind":
        return conversation[:args[0] % (len(conversation) + 1)]
    return conversation


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["messages", "input"]), st.lists(steps, min_size=1, max_size=12),
       st.sampled_from([None, 1]), st.booleans(), st.booleans())
def test_a_body_read_against_earlier_ones_is_the_body_read_whole(field, script, indent,
                                                                 ascii_only, two_keys):
    resent = Resent()
    lead, trail, conversation = "m", "t", []
    for number, (kind, *args) in enumerate(script):
        conversation = stepped(conversation, kind, args)
        if kind == "lead":
            lead = args[0]
        elif kind == "trail":
            trail = args[0]
        raw = render(field, lead, conversation, trail, indent, ascii_only)
        got = resent.read(raw, field)
        assert same_body(got, wire.read_body(raw, field))
        resent.remember(f"conversation-{number % 2 if two_keys else 0}", got)


def test_the_messages_of_the_shared_start_are_the_earlier_bodys_own_objects():
    resent = Resent()
    first = render("messages", "m", [{"role": "user", "content": "a"}], "t", None, True)
    earlier = resent.read(first, "messages")
    resent.remember("c", earlier)
    grown = render("messages", "m", [{"role": "user", "content": "a"},
                                     {"role": "assistant", "content": "b ✓"}], "t", None, False)
    body = resent.read(grown, "messages")
    assert resent.reused == 1
    assert body.value["messages"][0] is earlier.value["messages"][0]
    assert same_body(body, wire.read_body(grown, "messages"))


def test_a_body_that_is_not_json_after_the_shared_start_is_refused_as_read_whole():
    resent = Resent()
    first = render("messages", "m", [{"role": "user", "content": "a"}], "t", None, True)
    resent.remember("c", resent.read(first, "messages"))
    broken = first[:-1] + b", oops"
    with pytest.raises(wire.ShapeError):
        resent.read(broken, "messages")


# --- over HTTP: the fast path against the full one --------------------------------------------


def anthropic_script(rng: random.Random) -> list[bytes]:
    """A conversation that grows, has an earlier message edited, is rewound and grows again."""
    conversation: list[dict] = [{"role": "user", "content": "start"}]
    bodies = []
    user_id = json.dumps({"session_id": f"s{rng.randrange(100)}"})
    turn = 0
    for step in range(16):
        action = rng.choice(["grow", "grow", "grow", "edit", "rewind"]) if step > 3 else "grow"
        if action == "grow":
            conversation += [*tool_turn(turn), {"role": "assistant", "content": f"done {turn}"},
                             {"role": "user", "content": f"next {turn}"}]
            turn += 1
        elif action == "edit" and len(conversation) > 2:
            at = rng.randrange(1, len(conversation) - 1)
            if isinstance(conversation[at]["content"], str):
                conversation[at] = {**conversation[at], "content": f"edited {step}"}
        elif action == "rewind":
            conversation = conversation[:1 + 4 * rng.randrange(len(conversation) // 8,
                                                               len(conversation) // 4 + 1)]
            if conversation[-1]["role"] != "user":
                conversation.append({"role": "user", "content": f"again {step}"})
        bodies.append(json.dumps({"model": "m", "messages": conversation, "max_tokens": 5,
                                  "system": "be brief",
                                  "metadata": {"user_id": user_id}}).encode())
    return bodies


def responses_script(rng: random.Random) -> list[bytes]:
    items: list[dict] = [{"type": "message", "role": "developer",
                          "content": [{"type": "input_text", "text": "rules"}]}]
    bodies = []
    for turn in range(14):
        if turn > 4 and rng.random() < 0.25:
            items = items[:1 + 3 * rng.randrange(turn // 2, turn)]
        output = "\n".join(f"out-{turn} line {n}" for n in range(60))
        items += [{"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": f"task {turn}"}]},
                  {"type": "function_call", "name": "exec", "call_id": f"c{turn}",
                   "arguments": json.dumps({"cmd": f"ls {turn}"})},
                  {"type": "function_call_output", "call_id": f"c{turn}", "output": output}]
        bodies.append(json.dumps({"model": "gpt", "instructions": "be brief", "input": items,
                                  "store": False, "prompt_cache_key": "thread-1"}).encode())
    return bodies


def home_for(where, distill: bool):
    where.mkdir()
    home = make_home(where, budget=1500)
    config = home / "config.toml"
    config.write_text(config.read_text().replace(
        "[distill]\nenabled = false", f"[distill]\nenabled = {str(distill).lower()}"))
    return home


@pytest.mark.parametrize("seed,distill", [(1, False), (2, True), (3, False), (4, True)])
@pytest.mark.parametrize("path,script", [("/v1/messages", anthropic_script),
                                         ("/v1/responses", responses_script)])
def test_the_proxy_forwards_the_same_bytes_whether_it_reads_bodies_whole_or_not(
        tmp_path, seed, distill, path, script):
    fast = Stack(home_for(tmp_path / "fast", distill))
    full = Stack(home_for(tmp_path / "full", distill))
    full.proxy_app.bodies.read = wire.read_body  # every body read whole
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"} if "messages" in path \
        else {"authorization": "Bearer k"}
    try:
        for raw in script(random.Random(seed)):
            for stack in (fast, full):
                response = httpx.post(stack.url + path, content=raw, headers=headers)
                assert response.status_code == 200
            assert fast.provider.requests[-1].body == full.provider.requests[-1].body
        assert fast.proxy_app.bodies.reused >= 8
        paged = [r.body for r in fast.provider.requests]
        assert any(len(b) < len(raw) for b, raw in zip(paged, script(random.Random(seed)),
                                                           strict=True))
    finally:
        fast.close()
        full.close()


# --- the recorded sessions' requests, as their agents sent them ---------------------------------


@pytest.mark.parametrize("path", [p for p in recorded_params()
                                  if "claude-code" in str(p.values[0])
                                  or "codex" in str(p.values[0])])
def test_recorded_sessions_requests_page_to_the_same_bytes_read_whole_or_not(tmp_path, path):
    from bench.proxy_bench import claude_requests, codex_requests

    api = wire.ANTHROPIC if "claude-code" in str(path) else wire.RESPONSES
    requests = (claude_requests if api is wire.ANTHROPIC else codex_requests)(path)
    stacks = []
    for name in ("fast", "full"):
        (tmp_path / name).mkdir()
        stacks.append(Stack(make_home(tmp_path / name, budget=6000)))
    fast, full = stacks
    full.proxy_app.bodies.read = wire.read_body
    try:
        for request in requests:
            raw = json.dumps(request).encode()
            fast_out = fast.proxy_app._page(api, raw, {})[0]  # what goes upstream
            assert fast_out == full.proxy_app._page(api, raw, {})[0]
        assert fast.proxy_app.bodies.reused >= len(requests) - 2
    finally:
        fast.close()
        full.close()


marked_texts = st.one_of(texts, st.sampled_from(["mcp__context-paging__search_history",
                                                 "a mcp__context_paging namespace", "none"]))
any_messages = st.fixed_dictionaries({
    "role": st.sampled_from(["user", "assistant", "system", "developer"]),
    "content": marked_texts})
tool_steps = st.one_of(
    st.tuples(st.just("append"), st.lists(any_messages, min_size=1, max_size=3)),
    st.tuples(st.just("edit"), st.integers(0, 40), marked_texts),
    st.tuples(st.just("rewind"), st.integers(0, 40)),
)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([wire.ANTHROPIC, wire.RESPONSES]), st.lists(tool_steps, max_size=12))
def test_whether_a_resident_item_offers_the_tools_is_the_same_looking_only_at_new_items(
        api, script):
    resent, known, conversation = Resent(), ([], None), []
    for kind, *args in [("append", [{"role": "user", "content": "go"}]), *script]:
        conversation = stepped(conversation, kind, args)
        raw = render(api.field, "m", conversation, "t", None, True)
        body = resent.read(raw, api.field)
        resent.remember("c", body)
        known = marked_resident(api, body, known)
        whole = wire.read_body(raw, api.field)
        assert known[1] == marked_resident(api, whole)[1]
        assert (known[1] is not None) == has_recovery_tools(api, whole)


# --- number spellings: a body read after another spells its numbers as read whole ----------------

SPELLINGS = {100.0: ["100.0", "1.0E2", "1e2", "100.00", "1E+2"],
             0.5: ["0.5", "5e-1", "0.50", "5.0E-1"],
             1e300: ["1e+300", "1E300", "1.0e300"]}
spelled = st.sampled_from(sorted(SPELLINGS)).flatmap(
    lambda value: st.sampled_from(SPELLINGS[value]))
numbered = st.tuples(st.sampled_from(["user", "assistant"]), st.text("ab ", max_size=4), spelled)
numbered_body = st.tuples(spelled, st.lists(numbered, max_size=4), spelled)


def spelled_body(opening: list, body: tuple) -> bytes:
    """A body whose floats are written as given: ``opening`` messages, then the body's own."""
    lead, tail, trail = body
    items = [f'{{"role":"{role}","content":"{text}","n":{number}}}'
             for role, text, number in (*opening, *tail)]
    return (f'{{"model":"m","temperature":{lead},"messages":[{",".join(items)}],'
            f'"top_p":{trail}}}').encode()


@settings(max_examples=300, deadline=None)
@given(st.lists(numbered, max_size=4), numbered_body, numbered_body)
def test_a_body_read_after_another_spells_its_numbers_as_the_full_read_does(opening, a, b):
    resent = Resent()
    first, second = spelled_body(opening, a), spelled_body(opening, b)
    resent.remember("another conversation", resent.read(first, "messages"))
    got, want = resent.read(second, "messages"), wire.read_body(second, "messages")
    assert same_body(got, want)  # spellings included
    # every message rewritten (a new object): the bytes sent are those a full read gives
    rewritten = [dict(message) for message in want.value["messages"]]
    assert (wire.splice(got, "messages", [dict(m) for m in got.value["messages"]])
            == wire.splice(want, "messages", rewritten))
