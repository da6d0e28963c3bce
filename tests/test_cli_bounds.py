"""Every number and size the CLI takes is checked before any work: one line, status 2.

The bounds are the MCP tools' (server/bounds.py is the one table both read), so the test also
checks that each tool's schema states the same bound as the flag that mirrors it.
"""

from __future__ import annotations

import pytest
from context_paging.server.bounds import LENGTHS, NUMBERS
from context_paging.server.cli import main

BAD = [
    (["replay", "--budget", "0", "x.jsonl"], "--budget", "must be from 1 to"),
    (["replay", "--trim-to", "-3", "x.jsonl"], "--trim-to", "must be from 1 to"),
    (["replay", "--first-cut", "1.5", "x.jsonl"], "--first-cut", "above 0 and at most 1"),
    (["replay", "--price-read", "-1", "x.jsonl"], "--price-read", "0 or more"),
    (["replay", "--recover-sample", "-1", "x.jsonl"], "--recover-sample", "0 or more"),
    (["sessions", "--limit", "-5"], "--limit", "must be from 1 to 100, not -5"),
    (["sessions", "--limit", "0"], "--limit", "must be from 1 to 100, not 0"),
    (["output", "00000005", "--tool-call-id", "c", "--offset", "-5"], "--offset",
     "must be 0 or more, not -5"),
    (["output", "00000005", "--tool-call-id", "c", "--limit", "2001"], "--limit",
     "must be from 1 to 2,000"),
    (["output", "00000005", "--content-index", "-1"], "--content-index", "0 or more"),
    (["search", "q" * 120_000], "query", "at most 200 characters, not 120,000"),
    (["search", "x", "--limit", "0"], "--limit", "must be from 1 to 50, not 0"),
    (["search", "x", "--offset", "-1"], "--offset", "must be from 0 to 10,000"),
    (["search", "x", "--offset", "10001"], "--offset", "must be from 0 to 10,000"),
    (["search", "x", "--limit", "many"], "--limit", "must be a whole number"),
    (["search", "x", "--file", "f" * 5000], "--file", "at most 4,096 characters"),
    (["browse", "--sequence", "-1"], "--sequence", "must be from 0 to 1,000,000"),
    (["browse", "--count", "11"], "--count", "must be from 1 to 10, not 11"),
    (["browse", "--stride", "0"], "--stride", "must be from 1 to 10, not 0"),
    (["recall", "call_1", "--limit", "2001"], "--limit", "must be from 1 to 2,000"),
    (["recall", "call_1", "--offset", "0"], "--offset", "must be 1 or more, not 0"),
    (["recall", "call_1", "--pattern", "p" * 501], "--pattern", "at most 500 characters"),
    (["show", "a", "b", "c", "d"], "HISTORY_ID", "at most 3"),
    (["stats", "--session", "s" * 5000], "--session", "at most 4,096 characters"),
]


@pytest.mark.parametrize("argv,flag,words", BAD, ids=[" ".join(a)[:40] for a, _, _ in BAD])
def test_a_value_out_of_bounds_is_one_line_and_status_2(argv, flag, words, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert flag in lines[0] and words in lines[0], lines[0]
    assert len(lines[0]) < 200  # a 120 KB query is not echoed back


def test_the_bounds_at_their_edges_are_accepted():
    from context_paging.server.bounds import number, text

    assert number("search.limit")("50") == 50 and number("search.offset")("0") == 0
    assert text("query")("q" * 200) == "q" * 200


def _schema(tool: str) -> dict:
    from context_paging.server.commands.docs import snapshot_tools

    return next(t for t in snapshot_tools() if t["name"] == tool)["inputSchema"]["properties"]


def _bounds(prop: dict) -> tuple:
    options = [prop, *prop.get("anyOf", [])]
    low = next((o["minimum"] for o in options if "minimum" in o), None)
    high = next((o["maximum"] for o in options if "maximum" in o), None)
    return low, high


@pytest.mark.parametrize("tool,param,name", [
    ("search_history", "limit", "search.limit"), ("search_history", "offset", "search.offset"),
    ("browse_history", "sequence", "browse.sequence"), ("browse_history", "count", "browse.count"),
    ("browse_history", "stride", "browse.stride"),
    ("read_context_output", "offset", "output.offset"),
    ("read_context_output", "limit", "output.limit"),
    ("read_context_output", "content_index", "output.content_index"),
    ("recall", "offset", "recall.offset"), ("recall", "limit", "recall.limit"),
    ("list_sessions", "limit", "sessions.limit"),
])
def test_each_tool_states_the_bound_its_flag_checks(tool, param, name):
    assert _bounds(_schema(tool)[param]) == tuple(NUMBERS[name])


def test_each_tool_states_the_lengths_its_flags_check():
    assert _schema("search_history")["query"]["maxLength"] == LENGTHS["query"]
    pattern = _schema("recall")["pattern"]["anyOf"]
    assert next(o["maxLength"] for o in pattern if "maxLength" in o) == LENGTHS["pattern"]
    assert _schema("load_history")["history_ids"]["maxItems"] == LENGTHS["history_ids"]


def test_no_command_at_all_shows_the_help(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: context-paging") and "everyday:" in out
