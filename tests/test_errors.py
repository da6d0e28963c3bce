"""One translation of anticipated failures (docs/tools.md, "Errors"): every package's error carries
its code, and the MCP tools, the CLI and the proxy read it through ``server.errors.failure``."""

from __future__ import annotations

import errno

import anyio
import pytest
from context_paging.index.discovery import InvalidSessionRef, SessionRefError
from context_paging.index.jsonl import OutsideRoot
from context_paging.index.ledger import LedgerError
from context_paging.index.navigator import NavigatorError
from context_paging.index.search.store import IndexBusy
from context_paging.index.service import NoSessionGiven
from context_paging.index.sessions import UnknownFormat
from context_paging.paging.formats import FormatError
from context_paging.paging.limits import ContextSelectionError
from context_paging.server import cli
from context_paging.server.config import load_settings
from context_paging.server.errors import failure
from context_paging.server.mcp import tools as mcp_server
from context_paging.server.proxy.wire import ShapeError
from mcp import Client

# The codes clients saw before the translation moved into the classes (server/mcp/tools.py's
# old chain of except clauses): they must not change.
CODES = [
    (NavigatorError("UNKNOWN_HISTORY_ID", "no item h1"), "UNKNOWN_HISTORY_ID"),
    (InvalidSessionRef("session reference contains a NUL byte"), "INVALID_SESSION"),
    (SessionRefError("no session 'x'"), "UNKNOWN_SESSION"),
    (NoSessionGiven("/tmp/nowhere"), "UNKNOWN_SESSION"),
    (IndexBusy("the index is being written"), "INDEX_BUSY"),
    (ContextSelectionError("CONTEXT_BUDGET_EXCEEDED", "too big", 0, 0, 0),
     "CONTEXT_BUDGET_EXCEEDED"),
    (FormatError("message 0 is not an object"), "INVALID_MESSAGE_STRUCTURE"),
    (LedgerError("ledger session id '..' is not allowed"), "INVALID_SESSION"),
    (UnknownFormat("f is not a session file"), "UNKNOWN_SESSION"),
    (ShapeError("no messages"), "UNKNOWN_SHAPE"),
    (mcp_server.ToolFailure("DISABLED", "paging is off"), "DISABLED"),
]


@pytest.mark.parametrize(("exc", "code"), CODES, ids=[type(e).__name__ for e, _ in CODES])
def test_each_error_carries_the_code_clients_see(exc, code):
    failed = failure(exc)
    assert failed is not None and failed.code == code
    assert failed.message == str(exc)
    assert failed.text == f"{code}: {exc}"


def test_an_error_that_is_not_ours_is_not_translated():
    class Coded(ValueError):
        code = "LOOKS_LIKE_ONE"  # defined in a test module: not one of ours

    assert failure(ValueError("a bug")) is None
    assert failure(Coded("x")) is None
    assert failure(SystemExit(2)) is None


def test_an_os_error_is_a_storage_failure_only_where_there_is_a_home(tmp_path):
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "ledger"))
    assert failure(exc) is None  # the CLI: a traceback, as before
    failed = failure(exc, tmp_path)
    assert failed is not None and failed.code == "STORAGE_ERROR"
    assert failed.message.startswith(f"cannot use {str(tmp_path / 'ledger')!r}: No space left")
    assert str(tmp_path) in failed.message.rsplit("under", 1)[1]
    outside = OutsideRoot(errno.EACCES, "the file resolves outside its root directory", "/x")
    assert failure(outside, tmp_path).code == OutsideRoot.code == "STORAGE_ERROR"


def test_a_tool_function_is_module_level_and_its_binding_translates(tmp_path):
    settings = load_settings(home=tmp_path, environ={})
    server = mcp_server.create_server(settings)
    deps = mcp_server.Deps(server.history, settings, server.history_lock,
                           mcp_server.Sampler(server.history.distill_config))

    async def direct() -> None:  # the function itself raises; translation is the binding's
        with pytest.raises(LedgerError):
            await mcp_server.paging_stats(deps, "ledger:a..b")

    async def through_mcp():
        async with Client(server) as client:
            return await client.call_tool("paging_stats", {"session": "ledger:a..b"})

    try:
        anyio.run(direct)
        result = anyio.run(through_mcp)
    finally:
        server.history.close()
    assert result.is_error and result.content[0].text.startswith("INVALID_SESSION: ledger ")


def test_the_table_decides_each_tool_set():
    names = [t.name for t in mcp_server.TOOLS]
    assert len(names) == len(set(names)) == 8
    assert mcp_server.RECOVERY_TOOLS == {"search_history", "browse_history", "load_history",
                                         "read_context_output", "recall", "list_sessions"}
    assert {t.name for t in mcp_server.TOOLS if t.sets == {"all"}} == {"select_context",
                                                                      "paging_stats"}


def test_the_cli_reports_a_coded_error_without_a_traceback(tmp_path, capsys):
    status = cli.main(["--home", str(tmp_path), "stats", "--session", "ledger:a..b"])
    assert status == 2
    assert capsys.readouterr().err.startswith(
        "context-paging: ledger session id 'ledger:a..b' is not allowed")
