"""The Pi samples replayed through ``select_context`` request by request, as a host would, under
a budget small enough to page: old turns leave the window, and the recovery tools bring an
evicted error back exactly without ever showing the planted private text."""

from __future__ import annotations

import json

import pytest
from context_paging.index.jsonl import read_jsonl
from context_paging.index.service import History
from context_paging.index.sources.pi import active_path
from context_paging.index.window.pipeline import ContextSettings

from tests.conftest import sample

BUDGET = 2_500


def pi_messages(key: str) -> list[dict]:
    """The AgentMessages a Pi host would send: the message entries on the active path."""
    path = str(sample(key))
    records = read_jsonl(path).records
    on_path = set(active_path(records, path))
    return [r.value["message"] for r in records if r.value.get("type") == "message"
            and ("id" not in r.value or r.value["id"] in on_path)]


def replay(history: History, session: str, messages: list[dict]) -> list[dict]:
    """One ``select_context`` call before every model request (each time a reply is due)."""
    replies = []
    for end, message in enumerate(messages):
        following = messages[end + 1]["role"] if end + 1 < len(messages) else "assistant"
        if message["role"] != "assistant" and following == "assistant":
            replies.append(history.select_context(session, messages[: end + 1], fmt="pi"))
    return replies


@pytest.fixture
def history(tmp_path):
    history = History({"pi": None, "claude": None, "codex": None}, tmp_path / "home",
                      ContextSettings(token_budget=BUDGET))
    yield history
    history.close()


@pytest.mark.parametrize("key, buried, pattern", [
    ("pi-v1", "E   ZeroDivisionError: division by zero in report.py:42 (average_per_shelf)",
     "ZeroDivisionError"),
    ("pi-v3", "E   ConnectionRefusedError: [Errno 111] ECONNREFUSED 127.0.0.1:6379 (redis for "
              "the price cache)", "ECONNREFUSED"),
])
def test_a_sample_pages_under_a_small_budget_and_its_buried_error_comes_back(
        history, key, buried, pattern):
    messages = pi_messages(key)
    replies = replay(history, key, messages)
    last = replies[-1]
    assert last["evicted_messages"] > 0 and last["notice"]
    assert len(last["messages"]) < len(messages)
    window = json.dumps(last["messages"])
    assert buried not in window  # the long log left the window (evicted or distilled)

    ref = f"ledger:{key}"
    found = history.search(pattern, session=ref, limit=3).references
    turn = next(hit for hit in found if hit["tools"])
    item = history.load(ref, [turn["history_id"]])[0]
    result = item["tool_results"][0]
    recalled = history.recall(ref, tool_call_id=result["tool_call_id"], pattern=pattern)
    assert buried in recalled.text
    replies_of_tools = json.dumps([found, item]) + recalled.text
    assert "PLANTED" not in replies_of_tools


def test_under_a_large_budget_the_window_is_what_the_host_sent_thinking_included(tmp_path):
    # The window hands the host's own messages back, thinking and signatures included (the
    # provider needs them to continue); only the recovery tools must never show them.
    history = History({"pi": None, "claude": None, "codex": None}, tmp_path / "home",
                      ContextSettings(token_budget=200_000))
    try:
        messages = pi_messages("pi-v1")
        last = replay(history, "roomy", messages)[-1]
    finally:
        history.close()
    replies = [m for m in last["messages"] if m["role"] == "assistant"]
    assert last["evicted_messages"] == 0
    # distillation may leave old exchanges out, but a reply that stays is the host's, unchanged
    assert replies and all(reply in messages for reply in replies)
    assert "PLANTED-pi1-thinking-a" in json.dumps(last["messages"])
