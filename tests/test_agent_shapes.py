"""What the real agents send, read through the one resident table.

The request bodies in tests/fixtures/requests were recorded from Claude Code 2.1.197, Codex CLI
0.171.0 and Pi 0.73.1 against a local provider and cut down to their shapes (each file says
what was shortened or added). Resident items are never views, stay in every window in their
places, and count in the resident estimate, so a budget below them fails open.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from context_paging.paging.formats import render, to_views
from context_paging.paging.resident import is_resident, resident_indexes
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import make_history

from tests.test_proxy import make_home

REQUESTS = Path(__file__).resolve().parent / "fixtures" / "requests"


def recorded(name: str) -> dict:
    return json.loads((REQUESTS / f"{name}.json").read_text(encoding="utf-8"))


def conversation(name: str) -> list[dict]:
    body = recorded(name)["body"]
    return body.get("messages") or body["input"]


@pytest.mark.parametrize(("name", "fmt", "expected"), [
    ("claude-code-default", "anthropic", [1, 8]),
    ("claude-code-sonnet", "anthropic", []),
    ("pi-anthropic", "anthropic", []),
    # additional_tools, four developer messages, environment context; then, after the tool
    # output, configuration_update and the deferred tool namespace
    ("codex-default", "responses", [0, 1, 2, 3, 4, 5, 10, 11]),
    ("codex-gpt-5.1-codex", "responses", [0, 1, 2]),
])
def test_each_agents_standing_context_is_resident_and_its_conversation_is_not(name, fmt,
                                                                             expected):
    messages = conversation(name)
    assert resident_indexes(messages, fmt) == expected
    views = to_views(messages, fmt)
    assert list(views.resident) == expected
    assert not {view.source for view in views.views} & set(expected)


def test_a_responses_item_of_a_type_not_known_to_be_conversation_is_resident():
    assert is_resident({"type": "tool_search_config", "role": "developer"}, "responses")
    assert is_resident({"type": "some_future_item"}, "responses")
    assert not is_resident({"type": "function_call_output", "call_id": "c", "output": "x"},
                           "responses")
    assert not is_resident({"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "Now list the files."}]}, "responses")


@pytest.mark.parametrize("name", ["claude-code-default", "codex-default"])
def test_resident_items_keep_their_places_when_everything_else_is_evicted(name):
    messages = conversation(name)
    fmt = "anthropic" if name.startswith("claude") else "responses"
    views = to_views(messages, fmt)
    last = len(views.views) - 1  # keep only the newest request
    window = render(messages, views, [last], "NOTICE")
    kept = [m for m in window if any(m is r for r in messages)]
    places = sorted([*views.resident, views.views[last].source])
    assert kept == [messages[i] for i in places]
    if fmt == "anthropic":  # the first message must be the user's: the notice leads
        assert window[0] == {"role": "user", "content": "NOTICE"}
    else:  # Codex's instructions first, then the notice
        assert window[len(views.resident)]["content"][0]["text"] == "NOTICE"


def test_a_window_that_evicts_nothing_is_the_request_itself():
    for name, fmt in (("claude-code-default", "anthropic"), ("codex-default", "responses")):
        messages = conversation(name)
        views = to_views(messages, fmt)
        window = render(messages, views, range(len(views.views)), None)
        assert len(window) == len(messages)
        assert all(a is b for a, b in zip(window, messages, strict=True))


def codex_input() -> list[dict]:
    """Codex's recorded input with a tool output of 12,000 characters (a real step's size)."""
    items = conversation("codex-default")
    output = next(i for i, item in enumerate(items) if item["type"] == "custom_tool_call_output")
    items[output] = {**items[output], "output": [
        {"type": "input_text", "text": "marker-one line\n" * 750}]}
    return items


def codex_select(tmp_path: Path, budget: int, items: list[dict]) -> dict:
    history = make_history(load_settings(home=str(make_home(tmp_path, budget=budget))))
    body = recorded("codex-default")["body"]
    try:
        return history.select_context("oa-test", items, fmt="responses",
                                      system=body.get("instructions"), tools=body.get("tools"))
    finally:
        history.close()


def test_codexs_tool_list_and_instructions_count_as_resident_input(tmp_path):
    from context_paging.server.errors import failure

    with pytest.raises(Exception) as caught:  # noqa: PT011 - the proxy's fail-open path
        codex_select(tmp_path, 400, codex_input())
    assert "Resident input" in failure(caught.value).message


def test_a_codex_request_paged_below_its_size_keeps_every_resident_item(tmp_path):
    messages = codex_input()
    reply = codex_select(tmp_path, 2500, messages)
    assert reply["evicted_messages"] > 0
    window = reply["messages"]
    for index in resident_indexes(messages, "responses"):
        assert messages[index] in window
    order = [messages.index(m) for m in window if m in messages]
    assert order == sorted(order)


@pytest.mark.parametrize(("name", "fmt"), [("codex-default", "responses"),
                                           ("claude-code-default", "anthropic")])
def test_a_request_read_on_the_previous_one_passes_over_resident_items_in_the_middle(name,
                                                                                    fmt):
    from context_paging.index.ledger import fingerprint
    from context_paging.paging.request import read

    from tests.test_read_reuse import prints, taken

    messages = conversation(name)
    grown = [*messages, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}
             if fmt == "anthropic" else {"type": "message", "role": "assistant", "content": [
                 {"type": "output_text", "text": "ok"}]}]
    assert callable(fingerprint)
    earlier = read(messages, fmt, [], prints(messages), validate=True)
    built = read(grown, fmt, [], prints(grown), (), True, earlier)
    assert built == read(grown, fmt, [], prints(grown), validate=True)
    # every view of the earlier request is taken as it was, resident items between them
    assert taken(built, earlier) == len(earlier.views.views)


def test_claude_codes_messages_with_system_messages_are_read_as_anthropic():
    from context_paging.paging.formats import detect_format

    assert detect_format(conversation("claude-code-default")) == "anthropic"
    assert detect_format([{"role": "system", "content": "be brief"},
                          {"role": "user", "content": "hi"}]) == "openai"
    assert detect_format([{"role": "system", "content": [{"type": "text", "text": "x"}]},
                          {"role": "tool", "tool_call_id": "c", "content": "out"}]) == "openai"
