"""Recovery in band with the Gemini API: the recovery tools offered as function declarations,
the model's ``functionCall`` of one answered with a follow-up request (the model's turn and a
``functionResponse`` turn), one reply for the agent (``generateContent`` and the
``streamGenerateContent`` SSE stream), and the hidden exchange put back in later requests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from context_paging.server.proxy import inband, wire

from tests.fake_provider import gemini_reply
from tests.test_inband import OFFERED, Stack
from tests.test_proxy import make_home
from tests.test_proxy_gemini import TOOLS, body, requests, turn

STREAM = "/v1beta/models/gemini-fake-pro:streamGenerateContent"
JSON = "/v1beta/models/gemini-fake-pro:generateContent"
SEARCH = {"functionCall": {"id": "srch_1", "name": "search_history",
                           "args": {"query": "gemini-marker-0"}},
          "thoughtSignature": "c2VhcmNo"}
HEADERS = {"x-goog-api-key": "gm-test-key", "content-type": "application/json"}


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path))
    yield s
    s.close()


def post(s, contents: list[dict], stream: bool):
    path = f"{STREAM}?alt=sse" if stream else JSON
    return s.client.post(path, content=body(contents), headers=HEADERS)


def upstream(s, stream: bool) -> list[wire.Body]:
    return s.upstream_bodies_of("contents", STREAM if stream else JSON)


def chunks(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.replace("\r\n", "\n").split("\n")
            if line.startswith("data:")]


def paged(s, stream: bool) -> list[dict]:
    """A Gemini CLI conversation long enough that its start has left the window."""
    contents = []
    for contents in requests(16):
        assert post(s, contents, stream).status_code == 200
    last = upstream(s, stream)[-1].value["contents"]
    assert "Context paging notice" in json.dumps(last[0])
    return contents


@pytest.mark.parametrize("stream", [True, False])
def test_a_gemini_function_call_is_answered_in_band_and_put_back_in_place(stack, stream):
    contents = paged(stack, stream)
    stack.provider.queue.extend([
        gemini_reply([{"text": "Looking."}, SEARCH], 300, stream=stream),
        gemini_reply([{"text": "It was 0."}], 400, stream=stream)])
    before = len(upstream(stack, stream))
    reply = post(stack, contents, stream)
    assert reply.status_code == 200
    assert "search_history" not in reply.text and "srch_1" not in reply.text
    if stream:
        seen = chunks(reply.text)
        parts = [p for c in seen for p in c["candidates"][0]["content"]["parts"]]
        finished = [c for c in seen if c["candidates"][0].get("finishReason")]
        assert finished == [seen[-1]]
        final = seen[-1]
    else:
        final = reply.json()
        parts = final["candidates"][0]["content"]["parts"]
    assert "".join(p.get("text", "") for p in parts) == "Looking.It was 0."
    assert final["usageMetadata"]["promptTokenCount"] == 700  # both round trips
    assert final["usageMetadata"]["candidatesTokenCount"] == 6

    first, follow = upstream(stack, stream)[before:]
    declared = first.value["tools"]
    assert declared[0] == TOOLS[0]
    assert [d["name"] for d in declared[1]["functionDeclarations"]] == [
        "search_history", "read_context_output", "recall"]
    assert all("parametersJsonSchema" in d for d in declared[1]["functionDeclarations"])
    bracket = first.spans["contents"][1] - 1
    assert follow.raw[:bracket] == first.raw[:bracket]
    model, answered = follow.value["contents"][-2:]
    assert model == {"role": "model", "parts": [{"text": "Looking."}, SEARCH]}
    response = answered["parts"][0]["functionResponse"]
    assert answered["role"] == "user" and len(answered["parts"]) == 1
    assert response["id"] == "srch_1" and response["name"] == "search_history"
    assert "gemini-marker-0" in response["response"]["output"]

    # Gemini CLI keeps the reply as one model turn, its text parts joined
    later = [*contents, {"role": "model", "parts": [{"text": "Looking.It was 0."}]},
             {"role": "user", "parts": [{"text": "go on"}]}]
    post(stack, later, stream)
    after = upstream(stack, stream)[-1]
    assert after.value["contents"][-4:] == [
        model, answered, {"role": "model", "parts": [{"text": "It was 0."}]},
        {"role": "user", "parts": [{"text": "go on"}]}]
    end = follow.spans["contents"][1] - 1
    assert after.raw[:end] == follow.raw[:end]
    stack.restart()  # a restarted proxy reads the record back from the home
    [session] = stack.history.ledger.sessions()
    put_back = stack.app.inband.expand(session.removeprefix("ledger:"), wire.GEMINI, later)
    assert put_back[-4:] == after.value["contents"][-4:]


def test_a_mixed_gemini_reply_gives_the_agent_its_call_and_the_next_request_the_answer(stack):
    contents = paged(stack, True)
    own = {"functionCall": {"id": "run_1", "name": "run_shell_command",
                            "args": {"command": "ls"}}, "thoughtSignature": "b3du"}
    stack.provider.queue.append(gemini_reply([{"text": "Both."}, SEARCH, own], 300))
    before = len(upstream(stack, True))
    reply = post(stack, contents, True)
    parts = [p for c in chunks(reply.text) for p in c["candidates"][0]["content"]["parts"]]
    assert [p for p in parts if "functionCall" in p] == [own]
    assert len(upstream(stack, True)) == before + 1  # no follow-up: the agent's call comes first
    response = {"functionResponse": {"id": "run_1", "name": "run_shell_command",
                                     "response": {"output": "a.txt"}}}
    later = [*contents, {"role": "model", "parts": [{"text": "Both."}, own]},
             {"role": "user", "parts": [response]}]
    post(stack, later, True)
    sent = upstream(stack, True)[-1].value["contents"]
    assert sent[-2] == {"role": "model", "parts": [{"text": "Both."}, SEARCH, own]}
    ids = [p["functionResponse"]["id"] for p in sent[-1]["parts"]]
    assert ids == ["srch_1", "run_1"]  # every call of the turn answered, in one user turn
    assert "gemini-marker-0" in json.dumps(sent[-1]["parts"][0])


def test_gemini_offers_nothing_when_the_agent_has_a_tool_of_the_same_name(stack):
    declared = {"functionDeclarations": [{"name": "search_history", "description": "x"}]}
    value = {"tools": [declared], "contents": turn(0)}
    assert inband.tool_names(wire.GEMINI, value) >= {"search_history"}
    assert not stack.app.inband.offers("gm-one", wire.GEMINI, value, False)
    assert OFFERED == {d["name"] for d in json.loads(
        b"[" + inband.offered_bytes("gemini") + b"]")[0]["functionDeclarations"]}
