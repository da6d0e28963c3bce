"""The proxy with the Gemini API (server/proxy/gemini.py): a Gemini CLI-shaped conversation
(session context and prompt in the first turn, function calls with the CLI's ids and thought
signatures, shell outputs in function responses) sent to ``streamGenerateContent``."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from context_paging.index.home.proxied import conversation_stats
from context_paging.server.proxy import gemini, wire

from tests.fake_provider import gemini_reply
from tests.test_proxy import Stack, make_home

PATH = "/v1beta/models/gemini-fake-pro:streamGenerateContent"
CONTEXT = "<session_context>\nThis is the Gemini CLI.\n- **Workspace Directories:**\n  - /w\n"
SYSTEM = {"parts": [{"text": "You are Gemini CLI, an autonomous CLI agent."}], "role": "user"}
TOOLS = [{"functionDeclarations": [{"name": "run_shell_command", "description": "Run a command",
                                    "parametersJsonSchema": {"type": "object"}}]}]


@pytest.fixture
def stack(tmp_path) -> Iterator[Stack]:
    s = Stack(make_home(tmp_path))
    yield s
    s.close()


def turn(i: int) -> list[dict]:
    call_id = f"run_shell_command_17965243811{i:02d}_0"
    thought = [{"text": f"PLANTED thought {i}", "thought": True,
                "thoughtSignature": f"dGhvdWdodA{i:04d}"}] if i % 2 else []
    call = {"parts": [*thought,
                      {"functionCall": {"id": call_id, "name": "run_shell_command",
                                        "args": {"command": f"cat step-{i}.txt"}},
                       "thoughtSignature": f"c2lnbmF0dXJl{i:04d}" + "Qk" * 40}],
            "role": "model"}
    output = "\n".join(f"gemini-marker-{i} line {n}: value {i * 100 + n}" for n in range(40))
    response = {"parts": [{"functionResponse": {
        "name": "run_shell_command", "response": {"output": output}, "id": call_id}}],
        "role": "user"}
    return [call, response]


def requests(turns: int) -> Iterator[list[dict]]:
    contents = [{"role": "user", "parts": [{"text": CONTEXT}, {"text": "Run every step."}]}]
    for i in range(turns):
        yield list(contents)
        contents += turn(i)


def body(contents: list[dict]) -> bytes:
    return json.dumps({"contents": contents, "systemInstruction": SYSTEM, "tools": TOOLS,
                       "generationConfig": {"temperature": 1, "thinkingConfig": {
                           "includeThoughts": True}},
                       "cachedContent": "cachedContents/abc"}).encode()


def pairs_hold(contents: list[dict]) -> None:
    """Every model turn's calls are answered, by id, in the very next turn, and the other way."""
    for index, content in enumerate(contents):
        calls = [p["functionCall"]["id"] for p in content["parts"] if "functionCall" in p]
        answers = [p["functionResponse"]["id"] for p in content["parts"]
                   if "functionResponse" in p]
        if calls:
            following = contents[index + 1]["parts"]
            assert [p["functionResponse"]["id"] for p in following
                    if "functionResponse" in p] == calls
        if answers:
            before = contents[index - 1]
            assert before["role"] == "model"
            assert [p["functionCall"]["id"] for p in before["parts"]
                    if "functionCall" in p] == answers


def test_a_gemini_cli_conversation_pages_with_calls_paired_and_signatures_kept(stack):
    sent = []
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        for contents in requests(16):
            reply = client.post(f"{PATH}?alt=sse", content=body(contents),
                                headers={"x-goog-api-key": "gm-test-key",
                                         "content-type": "application/json"})
            assert reply.status_code == 200
            assert b"usageMetadata" in reply.content
            sent.append(contents)
    upstream = [r for r in stack.provider.requests if r.path == PATH]
    assert len(upstream) == len(sent)
    assert upstream[-1].query == "alt=sse"
    assert upstream[-1].headers["x-goog-api-key"] == "gm-test-key"
    bodies = [wire.read_body(r.body, "contents") for r in upstream]
    last = bodies[-1].value["contents"]
    assert len(last) < len(sent[-1]) / 2  # paged
    first = last[0]
    assert first["role"] == "user" and "Context paging notice" in first["parts"][0]["text"]
    assert "ledger:gm-" in first["parts"][0]["text"]
    assert {"text": CONTEXT} in first["parts"]  # the session context travels with the notice
    original_parts = [p for c in sent[-1] for p in c["parts"]]
    for b in bodies:
        pairs_hold(b.value["contents"])
        for key in ("systemInstruction", "tools", "generationConfig", "cachedContent"):
            start, end = b.spans[key]
            assert json.loads(b.raw[start:end]) == json.loads(body(sent[0]))[key]
        for content in b.value["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    assert part in original_parts  # the signature stayed with its part
    roles = [c["role"] for c in last]
    assert all(a != b for a, b in zip(roles, roles[1:], strict=False))  # alternating
    advances = sum(before.value["contents"][0] != after.value["contents"][0]
                   for before, after in zip(bodies, bodies[1:], strict=False))
    assert 1 <= advances <= len(bodies) // 3
    # what left the window is in the ledger, searchable; the signatures are never returned
    ledger = stack.history.ledger.sessions()
    assert len(ledger) == 1
    found = stack.history.search("gemini-marker-0", ledger[0], "session", (), (), None, 3)
    assert found.references
    loaded = json.dumps(stack.history.load(ledger[0], [found.references[0]["history_id"]]))
    assert "gemini-marker-0" in loaded and "c2lnbmF0dXJl" not in loaded
    assert not stack.history.search("PLANTED", ledger[0], "session", (), (), None, 3).references
    ledger_text = "".join(p.read_text() for p in (stack.home / "ledger").glob("*.jsonl"))
    assert "PLANTED" not in ledger_text  # a thought's text is never even stored
    tally = conversation_stats(stack.home, ledger[0])
    assert tally["requests"] == len(sent) and tally.get("failed_open", 0) == 0


def test_the_usage_metadata_is_read_for_calibration():
    tap = wire.UsageTap(wire.GEMINI, True)
    for chunk in gemini_reply([{"text": "ok"}], prompt_tokens=900, cached=600).chunks:
        tap.feed(chunk)
    assert tap.result() == {"input_tokens": 300, "cache_read_tokens": 600, "output_tokens": 3}
    whole = wire.UsageTap(wire.GEMINI, False)
    whole.feed(gemini_reply([{"text": "ok"}], 50, stream=False).body)
    assert whole.result() == {"input_tokens": 50, "cache_read_tokens": 0, "output_tokens": 3}
    array = wire.UsageTap(wire.GEMINI, False)  # streamGenerateContent without alt=sse
    events = [json.loads(c[5:]) for c in gemini_reply([{"text": "ok"}], 70).chunks]
    array.feed(json.dumps(events).encode())
    assert array.result() == {"input_tokens": 70, "cache_read_tokens": 0, "output_tokens": 3}


def test_turns_read_thoughts_as_private_and_pair_responses_without_ids():
    contents = [
        {"role": "user", "parts": [{"text": "go"}]},
        {"role": "model", "parts": [{"text": "PLANTED thought", "thought": True,
                                     "thoughtSignature": "sig"},
                                    {"functionCall": {"name": "ls", "args": {}}},
                                    {"functionCall": {"name": "cat", "args": {"f": "a"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "cat",
                                                         "response": {"error": "no file"}}},
                                   {"functionResponse": {"name": "ls",
                                                         "response": {"output": "a b"}}}]},
    ]
    turns = gemini.Turns(contents)
    model = turns.messages[1]["content"]
    assert model[0] == {"type": "thinking", "thinking": "", "signature": "sig"}
    results = turns.messages[2]["content"]
    assert [r["tool_use_id"] for r in results] == [model[2]["id"], model[1]["id"]]
    assert results[0]["is_error"] is True and results[1]["content"] == "a b"
    assert turns.back(turns.messages) == contents
    assert all(a is b for a, b in zip(turns.back(turns.messages), contents, strict=True))


def test_a_cut_down_output_keeps_its_response_fields_and_invents_no_id():
    contents = [{"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {}}}]},
                {"role": "user", "parts": [{"functionResponse": {
                    "name": "ls", "response": {"output": "a\nb\nc"}, "willContinue": False}}]}]
    turns = gemini.Turns(contents)
    result = turns.messages[2]["content"][0]
    shorter = {"role": "user", "content": [{**result, "content": "a [2 lines cut]"}]}
    out = turns.back([*turns.messages[:2], shorter])
    assert out[2] == {"role": "user", "parts": [{"functionResponse": {
        "name": "ls", "response": {"output": "a [2 lines cut]"}, "willContinue": False}}]}


def test_a_rebuilt_turn_is_made_of_the_original_parts_and_joins_its_neighbour():
    contents = [{"role": "user", "parts": [{"text": "one"}]},
                {"role": "model", "parts": [{"text": "two", "thoughtSignature": "s"}]}]
    turns = gemini.Turns(contents)
    notice = {"role": "user", "content": [{"type": "text", "text": "notice"}]}
    rebuilt = {"role": "assistant", "content": list(turns.messages[1]["content"])}
    out = turns.back([notice, turns.messages[0], rebuilt])
    assert out[0] == {"role": "user", "parts": [{"text": "notice"}, {"text": "one"}]}
    assert out[1]["parts"][0] is contents[1]["parts"][0]


def test_only_gemini_generate_paths_are_routed_and_go_to_the_gemini_upstream():
    from context_paging.server.proxy.app import Upstreams

    assert wire.route("POST", "/v1beta/models/m:streamGenerateContent") is wire.GEMINI
    assert wire.route("POST", "/v1beta/models/m:generateContent") is wire.GEMINI
    assert wire.route("POST", "/v1beta/models/m:countTokens") is None
    assert wire.route("GET", "/v1beta/models/m:generateContent") is None
    upstreams = Upstreams("http://a", "http://o", "http://g")
    assert upstreams.for_request("/v1beta/models/m:countTokens", {}) == "http://g"
    assert upstreams.for_request("/v1/models/m:generateContent", {}) == "http://g"
    assert upstreams.for_request("/v1/models", {}) == "http://o"
    assert upstreams.for_request("/v1/messages", {}) == "http://a"
    assert gemini.model_of(PATH) == "gemini-fake-pro"
