"""A damaged listing cache (garbage, truncated, or valid JSON of the wrong shape) is rebuilt
with one warning, through the catalog, the CLI's ``sessions`` and the ``list_sessions`` tool."""

from __future__ import annotations

import json
import logging

import pytest
from context_paging.index.catalog import Catalog
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.test_listing import sessions
from tests.test_protocol import write_config

GOOD_SUMMARY = {"ref": "pi:x", "source": "pi", "session_id": "x", "path": "/nowhere.jsonl",
                "title": None, "cwd": None, "created": None, "updated": None, "size": 1,
                "format": "pi-v3", "parent": None}
DAMAGED = {
    "garbage": "\x00\x01 not json at all",
    "truncated": '{"version": 1, "sessions": {"/a.jsonl": {"identity": [1, 2',
    "a list": "[1, 2, 3]",
    "a string": '"catalog"',
    "sessions is a list": json.dumps({"version": 1, "sessions": [1, 2]}),
    "no version": json.dumps({"sessions": {}}),
    "entry is a number": json.dumps({"version": 1, "sessions": {"/a.jsonl": 7}}),
    "identity of strings": json.dumps({"version": 1, "sessions": {"/a.jsonl": {
        "identity": ["1", "2", "3"], "summary": GOOD_SUMMARY}}}),
    "summary missing a field": json.dumps({"version": 1, "sessions": {"/a.jsonl": {
        "identity": [1, 2, 3], "summary": {"ref": "pi:x"}}}}),
    "summary of the wrong types": json.dumps({"version": 1, "sessions": {"/a.jsonl": {
        "identity": [1, 2, 3], "summary": {**GOOD_SUMMARY, "size": "big"}}}}),
}


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("damage", sorted(DAMAGED))
def test_a_damaged_catalog_cache_is_rebuilt_with_one_warning(tmp_path, caplog, damage):
    sessions(tmp_path / "pi", 2)
    cache = tmp_path / "catalog.json"
    fresh = Catalog({"pi": tmp_path / "pi"}).summaries()
    cache.write_text(DAMAGED[damage])
    with caplog.at_level(logging.WARNING, logger="context_paging"):
        listed = Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()
    assert listed == fresh
    found = warnings_of(caplog)
    assert len(found) == 1 and "catalog cache" in found[0], found
    assert json.loads(cache.read_text())["version"] == 1
    caplog.clear()
    assert Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries() == fresh
    assert warnings_of(caplog) == []  # repaired: the next listing says nothing


def test_a_cache_of_another_version_is_rebuilt_without_a_warning(tmp_path, caplog):
    sessions(tmp_path / "pi", 1)
    cache = tmp_path / "catalog.json"
    cache.write_text(json.dumps({"version": 999, "sessions": {"x": "anything"}}))
    with caplog.at_level(logging.WARNING, logger="context_paging"):
        assert len(Catalog({"pi": tmp_path / "pi"}, cache=cache).summaries()) == 1
    assert warnings_of(caplog) == []


def test_sessions_command_lists_over_a_wrong_shape_cache_with_one_warning(tmp_path, capsys,
                                                                         caplog):
    from context_paging.server.cli import main

    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    sessions(roots["pi"], 2)
    home = tmp_path / "home"
    write_config(home, roots)
    (home / "catalog.json").write_text(json.dumps({"version": 1, "sessions": ["wrong"]}))
    with caplog.at_level(logging.WARNING, logger="context_paging"):  # the CLI's stderr
        assert main(["--home", str(home), "sessions"]) == 0
    captured = capsys.readouterr()
    assert "pi:t0" in captured.out and "pi:t1" in captured.out
    assert "Traceback" not in captured.err
    assert sum("catalog cache" in m for m in warnings_of(caplog)) == 1


@pytest.mark.anyio
async def test_list_sessions_tool_answers_over_a_wrong_shape_cache(tmp_path, caplog):
    roots = {"pi": tmp_path / "pi", "claude": tmp_path / "claude", "codex": tmp_path / "codex"}
    sessions(roots["pi"], 2)
    home = tmp_path / "home"
    write_config(home, roots)
    (home / "catalog.json").write_text(json.dumps(
        {"version": 1, "sessions": {"/x.jsonl": {"identity": [1, 2, 3], "summary": []}}}))
    server = create_server(load_settings(home=home))
    with caplog.at_level(logging.WARNING, logger="context_paging"):
        async with Client(server) as client:
            result = await client.call_tool("list_sessions", {"limit": 10})
    server.history.close()
    assert not result.is_error
    refs = sorted(s["ref"] for s in result.structured_content["sessions"])
    assert refs == ["pi:t0", "pi:t1"]
    assert sum("catalog cache" in m for m in warnings_of(caplog)) == 1
