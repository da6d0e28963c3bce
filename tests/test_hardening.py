"""Hardening (issue 11): each numbered defect of the adversarial run, as a behaviour sentence.

Every test here failed before its fix. The tools are driven through the SDK's in-memory
``Client`` except where the transport itself is the subject (item 5), which runs the installed
console script over stdio with raw JSON-RPC lines.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

import context_paging.index.recall as recall_module
from context_paging.server.config import load_settings
from context_paging.server.mcp_server import create_server
from tests.conftest import ledger_home
from tests.test_protocol import call, write_config

pytestmark = pytest.mark.anyio


async def calls(home: Path, *requests: tuple[str, dict]) -> list[tuple[bool, str, dict | None]]:
    """Each request against one fresh server over ``home``, in order."""
    server = create_server(load_settings(home=home))
    try:
        async with Client(server) as client:
            return [await call(client, tool, arguments) for tool, arguments in requests]
    finally:
        server.history.close()


def exchange(call_id: str, output: str, *, question: str = "run it") -> list[dict]:
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": output}]},
    ]


def select(session: str, messages: list[dict], fmt: str = "anthropic", **extra: Any) -> tuple:
    return ("select_context", {"session": session, "messages": messages, "format": fmt, **extra})


# --- 1. a recall pattern cannot exhaust memory or time while compiling ---------------------------


async def test_1_nested_counted_repeats_are_refused_before_compiling(tmp_path):
    home = ledger_home(tmp_path)
    messages = exchange("t1", "aaaa\nbbbb\n" * 20)
    patterns = ["(?:(?:a{100}){100}){100}", "(?:(?:a{1000}){1000}){1000}", "(?:x{400}){400}"]
    replies = await calls(home, select("re", messages), *[
        ("recall", {"tool_call_id": "t1", "pattern": p, "session": "ledger:re"})
        for p in patterns])
    for pattern, (error, text, _) in zip(patterns, replies[1:], strict=True):
        assert error and text.startswith("RECALL_PATTERN: "), (pattern, text)
        assert "repeat" in text
    # An ordinary counted pattern still works.
    (error, text, _), = await calls(home, ("recall", {
        "tool_call_id": "t1", "pattern": "b{4}|a{2,}", "session": "ledger:re"}))
    assert not error and text.startswith("1: aaaa"), text


async def test_1_a_memory_error_while_compiling_is_a_coded_error(tmp_path, monkeypatch):
    home = ledger_home(tmp_path)

    def exhausted(*args, **kwargs):
        raise MemoryError

    replies = await calls(home, select("mem", exchange("t1", "x")))
    assert not replies[0][0]
    monkeypatch.setattr(recall_module.regex, "compile", exhausted)
    (error, text, _), = await calls(home, ("recall", {
        "tool_call_id": "t1", "pattern": "x", "session": "ledger:mem"}))
    assert error and text.startswith("RECALL_PATTERN: ") and "memory" in text, text


# --- 6. a damaged state file costs only the cut point ----------------------------------------------


@pytest.mark.parametrize("damage", [
    "[" * 100_000,
    json.dumps({"usage_by_response": {"m1": "zz"}, "latest": {"estimated_tokens": "x"}}),
    json.dumps({"usage_by_response": [1, 2], "cut": 7, "anchor": "x", "settings": {}}),
    json.dumps({"latest": [], "evicted_messages": "many", "model_window": {"a": 1}}),
])
async def test_6_a_damaged_state_file_is_set_aside_with_one_warning(tmp_path, caplog, damage):
    home = ledger_home(tmp_path)
    messages = exchange("t1", "out")
    assert not (await calls(home, select("st", messages)))[0][0]
    (home / "state" / "st.json").write_text(damage)
    caplog.set_level(logging.WARNING, logger="context_paging")
    more = messages + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "n"}]
    replies = await calls(home, ("paging_stats", {"session": "ledger:st"}), select("st", more),
                          ("paging_stats", {"session": "ledger:st"}))
    for error, text, _ in replies:
        assert not error, text
    warnings = [r for r in caplog.records if "state" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert json.loads((home / "state" / "st.json").read_text())["settings"] == [None, None]


# --- 7. a tool result that answers no call is refused wherever it is ------------------------------


async def test_7_a_result_for_no_call_is_refused_in_the_last_exchange_and_earlier(tmp_path):
    home = ledger_home(tmp_path)
    stray = exchange("t1", "ok")
    stray[2]["content"].append({"type": "tool_result", "tool_use_id": "nobody", "content": "?"})
    later = stray + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "next"}]
    openai = [{"role": "user", "content": "go"},
              {"role": "assistant", "content": None, "tool_calls": [
                  {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
              {"role": "tool", "tool_call_id": "c1", "content": "a"},
              {"role": "tool", "tool_call_id": "nobody", "content": "b"}]
    replies = await calls(home, select("s1", stray), select("s2", later),
                          select("s3", openai, "openai"),
                          select("s4", openai + [{"role": "user", "content": "more"}], "openai"))
    for error, text, _ in replies:
        assert error and text.startswith("INVALID_MESSAGE_STRUCTURE: "), text
        assert "nobody" in text


# --- 8. one code per cause -------------------------------------------------------------------------


async def test_8_a_malformed_session_reference_has_one_code_in_every_tool(tmp_path):
    home = ledger_home(tmp_path)
    bad = "ledger:../x"
    replies = await calls(home, ("paging_stats", {"session": bad}),
                          ("search_history", {"query": "x", "session": bad}),
                          ("browse_history", {"direction": "backward", "session": bad}),
                          ("load_history", {"history_ids": ["m"], "session": bad}),
                          ("recall", {"tool_call_id": "t", "session": bad}))
    codes = {text.split(":", 1)[0] for _, text, _ in replies}
    assert codes == {"INVALID_SESSION"}, [text for _, text, _ in replies]


async def test_8_a_file_name_too_long_names_the_file_not_the_home(tmp_path):
    roots = {name: tmp_path / name for name in ("pi", "claude", "codex")}
    for root in roots.values():
        root.mkdir()
    home = tmp_path / "home"
    write_config(home, roots)
    long_name = str(roots["pi"] / ("a" * 300 + ".jsonl"))
    replies = await calls(home, ("search_history", {"query": "x", "session": long_name}),
                          ("paging_stats", {"session": long_name}),
                          ("load_history", {"history_ids": ["m"], "session": long_name}))
    for error, text, _ in replies:
        assert error and text.startswith("UNKNOWN_SESSION: "), text
        assert "too long" in text and str(home) not in text, text
