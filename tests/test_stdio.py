"""The one subprocess test: the installed console script serves MCP over stdio, cleanly,
sampling judge included."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from context_paging.server.commands.demo import sample_path
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.test_sampling import Model, anthropic_runs

pytestmark = pytest.mark.anyio


def console_script() -> str:
    found = shutil.which("context-paging")
    if found:
        return found
    beside = Path(sys.executable).parent / "context-paging"
    assert beside.exists(), "the project is not installed (pip install -e '.[test]')"
    return str(beside)


async def test_the_installed_server_lists_tools_and_searches_over_stdio(tmp_path):
    root = tmp_path / "pi" / "--home-dev-shop--"
    root.mkdir(parents=True)
    shutil.copy(sample_path(), root / "2026-11-20T09-00-00-000Z_demo-0f3c9a2e.jsonl")
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{tmp_path / "pi"}"\nclaude_code = "{tmp_path}/none"\n'
        f'codex = "{tmp_path}/none"\n[distill]\njudge = "sampling"\n'
    )
    model = Model()  # the host's model, scripted: keeps the chunk the answer quotes
    stderr_path = tmp_path / "stderr.txt"
    env = {**os.environ, "CONTEXT_PAGING_HOME": str(home)}
    params = StdioServerParameters(command=console_script(), args=["serve"], env=env)
    with open(stderr_path, "w") as errlog:
        with anyio.fail_after(60):
            async with Client(stdio_client(params, errlog=errlog),
                              sampling_callback=model) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                assert {"search_history", "select_context", "recall"} <= tools
                result = await client.call_tool(
                    "search_history", {"query": "ECONNREFUSED", "session": "pi:demo-0f3c9a2e"})
                assert not result.is_error
                assert result.structured_content["references"]
                # select_context's sampling slots work through the installed script too.
                reply = await client.call_tool("select_context", {
                    "session": "stdio", "messages": anthropic_runs(0), "format": "anthropic"})
                assert not reply.is_error
                assert [(d["action"], d["judge"]) for d in
                        reply.structured_content["distilled"]] == [("distill", "sampling")]
                assert len(model.prompts) == 1
    stderr = stderr_path.read_text()
    assert "Traceback" not in stderr, stderr
    assert "speaking JSON-RPC" not in stderr  # the terminal hint is for terminals only
