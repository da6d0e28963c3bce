"""Distillation through ``select_context`` end to end, over MCP (docs/distillation.md, "In an
MCP server"): a large grep output is distilled when its run ends, the same bytes come back on
every later call and after a restart, ``recall`` returns the original, stats count it."""

from __future__ import annotations

import json

import pytest
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.conftest import ledger_home
from tests.test_context import valid_for
from tests.test_protocol import call

pytestmark = pytest.mark.anyio

CALL_ID = "call_grep_1"
ANSWER = "parse_config is defined in src/config/loader.py at line 42: `def parse_config(path):`."


def grep_output() -> str:
    lines = [f"src/module_{i % 40}/file_{i}.py:{i + 10}:    value_{i} = compute_thing_{i}(arg)"
             for i in range(300)]
    lines.insert(150, "src/config/loader.py:42:def parse_config(path):")
    return "\n".join(lines)


GREP = grep_output()


def anthropic_runs(extra_runs: int, grep: str = GREP) -> list[dict]:
    """Run 1 (a grep and its answer), a new request, then ``extra_runs`` short runs."""
    out = [
        {"role": "user", "content": "Where is parse_config defined?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Searching."},
            {"type": "tool_use", "id": CALL_ID, "name": "grep", "input": {"pattern": "def "}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": CALL_ID,
                                      "content": grep}]},
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
    ]
    for n in range(extra_runs):
        out += [{"role": "user", "content": f"Request {n}: add a docstring to parse_config."},
                {"role": "assistant", "content": [{"type": "text", "text": f"Done {n}."}]}]
    return out + [{"role": "user", "content": "And now?"}]


def openai_runs(extra_runs: int) -> list[dict]:
    out = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Where is parse_config defined?"},
        {"role": "assistant", "content": "Searching.", "tool_calls": [
            {"id": CALL_ID, "type": "function",
             "function": {"name": "grep", "arguments": json.dumps({"pattern": "def "})}}]},
        {"role": "tool", "tool_call_id": CALL_ID, "content": GREP},
        {"role": "assistant", "content": ANSWER},
    ]
    for n in range(extra_runs):
        out += [{"role": "user", "content": f"Request {n}: add a docstring to parse_config."},
                {"role": "assistant", "content": f"Done {n}."}]
    return out + [{"role": "user", "content": "And now?"}]


RUNS = {"anthropic": anthropic_runs, "openai": openai_runs}


def tool_result_text(fmt: str, window: list[dict]) -> str:
    """The grep's result as the window sends it (exactly one)."""
    found = []
    for message in window:
        if fmt == "openai" and message.get("role") == "tool":
            assert message["tool_call_id"] == CALL_ID
            found.append(message["content"])
        if fmt == "anthropic" and isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    assert block["tool_use_id"] == CALL_ID
                    content = block["content"]
                    if isinstance(content, list):  # distilled: one text block
                        assert [b["type"] for b in content] == ["text"]
                        content = content[0]["text"]
                    found.append(content)
    assert len(found) == 1
    return found[0]


@pytest.fixture
def home(tmp_path):
    return ledger_home(tmp_path)


async def select(client, session: str, fmt: str, messages: list[dict],
                 model: str | None = None) -> dict:
    args = {"session": session, "messages": messages, "format": fmt}
    if model is not None:
        args["model"] = model
    error, text, value = await call(client, "select_context", args)
    assert not error, text
    valid_for(fmt, [m for m in value["messages"] if m.get("role") != "system"])
    return value


# A host without a prompt cache: an edit of an already-sent output re-writes nothing there, so
# the run-end decision lands at once (with a cache it waits for a re-write: test_cache_landing).
NO_CACHE = "none/any-model"


@pytest.mark.parametrize("fmt", ["anthropic", "openai"])
async def test_a_grep_output_is_distilled_at_run_end_and_stays_byte_identical(home, fmt):
    session = f"distill-{fmt}"
    build = RUNS[fmt]
    server = create_server(load_settings(home=home))
    windows = []
    async with Client(server) as client:
        # Mid-run (the grep's result is the last message): nothing is judged yet.
        mid = await select(client, session, fmt, build(0)[:-2], NO_CACHE)
        assert mid["distilled"] == []
        assert tool_result_text(fmt, mid["messages"]) == GREP

        # The run ended with an answer and a new request follows: the grep is distilled.
        first = await select(client, session, fmt, build(0), NO_CACHE)
        assert [(d["tool_call_id"], d["action"], d["judge"]) for d in first["distilled"]] == [
            (CALL_ID, "distill", "local")]
        report = first["distilled"][0]
        assert report["recall"] == 'recall({"tool_call_id":"call_grep_1"})'
        distilled = tool_result_text(fmt, first["messages"])
        assert distilled != GREP and len(distilled) < len(GREP) // 4
        assert "src/config/loader.py:42:def parse_config(path):" in distilled
        assert report["recall"] in distilled
        assert report["saved_characters"] == len(GREP) - len(distilled)
        windows.append(first["messages"])

        # Every later call sends the same bytes for it, and reports it again.
        for extra in (1, 2, 3):
            reply = await select(client, session, fmt, build(extra), NO_CACHE)
            assert tool_result_text(fmt, reply["messages"]) == distilled
            assert reply["distilled"] == [report]
            # Everything up to the distilled result is the previous window's prefix.
            assert reply["messages"][: len(windows[-1]) - 1] == windows[-1][:-1]
            windows.append(reply["messages"])

        # The budget saw the savings.
        assert first["estimated_tokens"] < len(GREP) / 4

        # recall returns the original exactly; the ledger's stored message never changed.
        error, text, value = await call(client, "recall", {"tool_call_id": CALL_ID,
                                                           "session": f"ledger:{session}"})
        assert not error, text
        assert value["text"] == GREP

        _, stats_text, stats = await call(client, "paging_stats",
                                          {"session": f"ledger:{session}"})
        assert stats["distilled_outputs"] == 1
        assert stats["distilled_saved_characters"] == report["saved_characters"]
        assert "Outputs distilled" in stats_text
    server.history.close()

    ledger = (home / "ledger" / f"{session}.jsonl").read_text().splitlines()
    # parsed, not grepped: the ledger writes compact JSON where it can (index.jsonl.dump_line)
    decisions = [v for v in map(json.loads, ledger) if v.get("type") == "decision"]
    targets = [d["decision"]["target"] for d in decisions]
    assert targets.count(CALL_ID) == 1 and len(set(targets)) == len(targets)  # decided once

    # A restarted server (same home) returns the same window and decides nothing new.
    server = create_server(load_settings(home=home))
    async with Client(server) as client:
        again = await select(client, session, fmt, build(3), NO_CACHE)
        assert again["messages"] == windows[-1]
        assert json.dumps(again["messages"]) == json.dumps(windows[-1])
        assert again["distilled"] == [report]
    server.history.close()
    ledger = (home / "ledger" / f"{session}.jsonl").read_text().splitlines()
    assert sum(json.loads(line).get("type") == "decision" for line in ledger) == len(decisions)


async def test_distillation_can_be_turned_off(tmp_path):
    server = create_server(load_settings(home=ledger_home(tmp_path, enabled=False)))
    async with Client(server) as client:
        reply = await select(client, "off", "anthropic", anthropic_runs(1))
        assert reply["distilled"] == []
        assert tool_result_text("anthropic", reply["messages"]) == GREP
        _, _, stats = await call(client, "paging_stats", {"session": "ledger:off"})
        assert stats["distilled_outputs"] == 0
    server.history.close()
