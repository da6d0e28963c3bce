"""``serve`` as a person and as a chat client meet it.

On a terminal the installed script says what it is on stderr, Ctrl-C stops it with status 130,
and EOF and SIGTERM still end it. ``--tools recovery`` (or ``[server] tools``) lists only the
model's recovery tools. Token counts in replies are ints.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import time

import anyio
import pytest
from context_paging.server import cli
from context_paging.server.config import load_settings
from context_paging.server.mcp import transport
from context_paging.server.mcp.tools import RECOVERY_TOOLS, MCPServer, create_server
from mcp import Client

from tests.conftest import PROJECT
from tests.test_stdio import console_script

WAIT = 120  # seconds: a bound on a loaded machine, never an assertion about speed
ALL_TOOLS = RECOVERY_TOOLS | {"select_context", "paging_stats"}


class Terminal:
    """The installed ``context-paging serve`` on a pseudo-terminal, as a person starts it."""

    def __init__(self, home) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: stdin, stdout and stderr are the terminal
            os.environ["CONTEXT_PAGING_HOME"] = str(home)
            os.execv(console_script(), [console_script(), "serve"])
        self.seen = b""

    def read_until(self, marker: bytes, deadline: float) -> None:
        while marker not in self.seen:
            assert time.monotonic() < deadline, f"no {marker!r} in {self.seen!r}"
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                self.seen += os.read(self.fd, 4096)

    def exit_status(self, deadline: float) -> int:
        """Wait for the process (draining the terminal so it never blocks on output)."""
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                pytest.fail(f"serve did not stop; the terminal showed {self.seen!r}")
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal: it is exiting
                    pass


def test_serve_on_a_terminal_explains_itself_and_stops_on_ctrl_c_eof_and_sigterm(tmp_path):
    # Three servers at once (each start-up loads the whole server), one per way of stopping.
    deadline = time.monotonic() + WAIT
    by_ctrl_c, by_eof, by_sigterm = (Terminal(tmp_path / name) for name in ("a", "b", "c"))
    for terminal in (by_ctrl_c, by_eof, by_sigterm):
        terminal.read_until(b"Ctrl-C stops it.\r\n", deadline)  # the whole line
    os.write(by_ctrl_c.fd, b"\x03")  # what the key sends: the terminal turns it into SIGINT
    os.write(by_eof.fd, b"\x04")  # Ctrl-D at the start of a line: end of input
    os.kill(by_sigterm.pid, signal.SIGTERM)
    assert by_ctrl_c.exit_status(deadline) == 130
    assert by_eof.exit_status(deadline) == 0
    assert by_sigterm.exit_status(deadline) == -signal.SIGTERM
    for terminal in (by_ctrl_c, by_eof, by_sigterm):
        text = terminal.seen.decode()
        assert text.startswith(cli.SERVE_ON_A_TERMINAL + "\r\n"), text
        assert "Traceback" not in text


# --- the tool set ---------------------------------------------------------------------------


async def listed(server: MCPServer) -> set[str]:
    try:
        async with Client(server) as client:
            return {t.name for t in (await client.list_tools()).tools}
    finally:
        server.history.close()


@pytest.mark.anyio
@pytest.mark.parametrize(("environ", "overrides", "tools", "expected"), [
    ({}, {}, None, ALL_TOOLS),
    ({}, {}, "recovery", RECOVERY_TOOLS),
    ({"CONTEXT_PAGING_SERVER_TOOLS": "recovery"}, {}, None, RECOVERY_TOOLS),
    ({"CONTEXT_PAGING_SERVER_TOOLS": "recovery"}, {"server.tools": "all"}, None, ALL_TOOLS),
    ({}, {"server.tools": "recovery"}, "all", ALL_TOOLS),  # serve --tools beats the setting
])
async def test_the_tool_set_comes_from_the_flag_then_the_setting(tmp_path, environ, overrides,
                                                                 tools, expected):
    settings = load_settings(home=tmp_path, environ=environ, overrides=overrides)
    assert await listed(create_server(settings, tools=tools)) == expected


@pytest.mark.anyio
async def test_the_config_file_can_ask_for_the_recovery_tools(tmp_path):
    (tmp_path / "config.toml").write_text('[server]\ntools = "recovery"\n')
    assert await listed(create_server(load_settings(home=tmp_path, environ={}))) == RECOVERY_TOOLS
    (tmp_path / "config.toml").write_text('[server]\ntools = "some"\n')
    settings = load_settings(home=tmp_path, environ={})
    assert settings.get("server", "tools") == "all"
    assert any("server.tools = 'some'" in w for w in settings.warnings)


def test_serve_passes_its_tools_flag_to_the_server(tmp_path, monkeypatch):
    served = []

    async def serve_stdio(server, limit):  # stands in for the stdio loop: keep the server
        served.append(server)

    monkeypatch.setattr(transport, "serve_stdio", serve_stdio)
    monkeypatch.setattr(cli, "_stop_on_interrupt", lambda *a: None)  # keep pytest's own SIGINT
    assert cli.main(["--home", str(tmp_path), "serve", "--tools", "recovery"]) == 0
    assert anyio.run(listed, served[0]) == RECOVERY_TOOLS


def test_tool_schemas_carry_no_pydantic_titles():
    snapshot = json.loads((PROJECT / "tests" / "snapshots" / "tools.json").read_text())
    text = json.dumps([tool["inputSchema"] for tool in snapshot])
    assert '"title"' not in text and len(snapshot) == len(ALL_TOOLS)


# --- ints -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_token_counts_in_replies_are_ints(tmp_path):
    (tmp_path / "config.toml").write_text('[paging]\nestimator = "chars4"\n')
    server = create_server(load_settings(home=tmp_path, environ={}))
    messages = [{"role": "user", "content": "count these seventeen characters x"}]
    try:
        async with Client(server) as client:
            selected = await client.call_tool("select_context",
                                              {"session": "ints", "messages": messages})
            stats = await client.call_tool("paging_stats", {"session": "ledger:ints"})
    finally:
        server.history.close()
    reply = selected.structured_content
    assert reply["budget_tokens"] == 128_000 and '"budget_tokens":128000,' in \
        selected.content[0].text
    for key in ("estimated_tokens", "budget_tokens", "target_tokens"):
        assert type(reply[key]) is int, (key, reply[key])
    for key in ("input_tokens", "budget_tokens"):
        assert type(stats.structured_content[key]) is int, (key, stats.structured_content)


def test_a_fractional_estimate_is_reported_whole_and_rounded_up():
    from context_paging.server.mcp.tools import SelectContextResult

    reply = SelectContextResult(
        messages=[], mode="paged", estimated_tokens=10.25, budget_tokens=128_000.0,
        target_tokens=80_000, evicted_messages=0, frontier=None, fallback_reason=None,
        notice=None, distilled=[])
    assert (reply.estimated_tokens, reply.budget_tokens, reply.target_tokens) == (11, 128_000,
                                                                                  80_000)
