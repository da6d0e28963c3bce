"""examples/agent_loop.py: a host loop pages its window and the model recovers an evicted detail."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.conftest import PROJECT


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("agent_loop",
                                                  PROJECT / "examples" / "agent_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main(tmp_path_factory.mktemp("example") / "home")


def assert_valid_anthropic(messages):
    """First message from the user, roles alternate, every tool_result answers a tool_use of the
    assistant message just before it."""
    assert messages and messages[0]["role"] == "user"
    previous = None
    for message in messages:
        assert message["role"] in ("user", "assistant")
        assert previous is None or message["role"] != previous["role"]
        blocks = message["content"] if isinstance(message["content"], list) else []
        results = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        if results:
            assert message["role"] == "user"
            asked = {b["id"] for b in previous["content"] if b.get("type") == "tool_use"}
            assert set(results) <= asked, f"tool_result without its tool_use: {results}"
        previous = message


def test_the_window_was_paged_under_the_small_budget(outcome):
    modes = [reply["mode"] for reply in outcome["selections"]]
    assert modes[0] == "within_budget"
    assert "paged" in modes
    paged = next(r for r in outcome["selections"] if r["mode"] == "paged")
    assert paged["evicted_messages"] > 0 and paged["notice"]
    assert all(r["estimated_tokens"] <= r["budget_tokens"] for r in outcome["selections"])


def test_every_window_sent_to_the_model_is_a_valid_anthropic_message_list(outcome):
    assert len(outcome["windows"]) == len(outcome["selections"]) >= 15
    for window in outcome["windows"]:
        assert_valid_anthropic(window)


def test_the_model_recovers_the_evicted_failure_line_exactly(outcome):
    detail = outcome["detail"]
    names = [call["name"] for call in outcome["recoveries"]]
    assert names == ["search_history", "recall"]
    assert not any(call["is_error"] for call in outcome["recoveries"])
    assert detail in outcome["recoveries"][-1]["text"]
    assert detail in outcome["answer"]
    # It was recovered, not still visible: absent from the window that asked for the report.
    report_window = next(w for w in outcome["windows"]
                         if "Write the bug report" in json.dumps(w[-1]))
    assert detail not in json.dumps(report_window)
    assert detail in json.dumps(outcome["conversation"][:3])  # the first tool output held it


def test_the_full_conversation_is_kept_and_only_the_window_shrinks(outcome):
    conversation, windows = outcome["conversation"], outcome["windows"]
    assert_valid_anthropic(conversation)
    assert len(windows[-1]) < len(conversation)
