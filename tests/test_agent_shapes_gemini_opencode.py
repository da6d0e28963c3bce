"""What Gemini CLI and OpenCode send, read as the proxy reads it.

tests/fixtures/requests/gemini-cli-default.json and opencode-default.json were recorded from
Gemini CLI 0.61.0 and OpenCode 1.18.33 against a local provider and cut down (each file says
what was shortened). A Gemini request's turns read in the Anthropic shape have no resident
item (its standing input is ``systemInstruction`` and ``tools``), its session context is
pinned, and the turns come back as the very objects they were; OpenCode's session header keys
its conversation.
"""

from __future__ import annotations

import json
from pathlib import Path

from context_paging.paging.formats import to_views
from context_paging.paging.resident import resident_indexes
from context_paging.server.proxy import gemini, wire

REQUESTS = Path(__file__).resolve().parent / "fixtures" / "requests"


def recorded(name: str) -> dict:
    return json.loads((REQUESTS / f"{name}.json").read_text(encoding="utf-8"))


def test_gemini_clis_turns_read_with_no_resident_item_and_its_context_pinned():
    body = recorded("gemini-cli-default")["body"]
    turns = gemini.Turns(body["contents"])
    assert [m["role"] for m in turns.messages] == ["user", "assistant", "user", "assistant",
                                                   "user"]
    assert resident_indexes(turns.messages, "anthropic") == []
    views = to_views(turns.messages, "anthropic")
    assert not views.resident and len(views.views) >= 5
    pinned = turns.pinned()
    assert len(pinned) == 1 and pinned[0]["text"].startswith("<session_context>")
    calls = [b for m in turns.messages for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in turns.messages for b in m["content"] if b["type"] == "tool_result"]
    assert [c["id"] for c in calls] == [r["tool_use_id"] for r in results]
    assert all(c["id"].startswith("run_shell_command_") for c in calls)
    back = turns.back(turns.messages)
    assert all(a is b for a, b in zip(back, body["contents"], strict=True))
    assert {d["name"] for d in gemini.tools_of(body)} == {"read_file", "run_shell_command"}
    assert gemini.system_of(body)[0]["text"].startswith("You are Gemini CLI")


def test_gemini_clis_request_is_routed_and_keyed_by_its_content_alone():
    sample = recorded("gemini-cli-default")
    path = sample["path"].partition("?")[0]
    assert wire.route("POST", path) is wire.GEMINI
    assert gemini.model_of(path) == "gemini-3.1-pro-preview"
    assert wire.agent_session(wire.GEMINI, sample["body"], sample["headers"]) is None


def test_opencodes_session_header_keys_its_conversation_and_nothing_is_resident():
    sample = recorded("opencode-default")
    body, headers = sample["body"], sample["headers"]
    assert wire.route("POST", sample["path"]) is wire.ANTHROPIC
    session = wire.agent_session(wire.ANTHROPIC, body, headers)
    assert session == headers["x-session-id"] and session.startswith("ses_")
    key = wire.conversation_key(wire.ANTHROPIC, body, headers)
    assert key.startswith(f"cc-{wire.safe_name(session)}-")
    assert resident_indexes(body["messages"], "anthropic") == []
