"""Commands load only what they need, and ``serve`` answers before its History has loaded.

The figures are bench/startup_bench.py's; these tests check the structure that makes them:
which modules a command imports, and that the server lists its tools while the History (the
index, the window and the tokenizer) is still loading on its thread (server/warmup.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import anyio
import pytest
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server, distill_config, make_history
from context_paging.server.warmup import LoadingHistory
from mcp import Client

from tests.conftest import PROJECT
from tests.test_hardening import INITIALIZE, finish, read_replies

WAIT = 120  # seconds: a bound on a loaded machine, never an assertion about speed
HEAVY = ("mcp", "tiktoken", "whoosh", "httpx2", "starlette", "uvicorn",
         "context_paging.index.window.pipeline", "context_paging.index.service",
         "context_paging.index.sessions", "context_paging.paging.select")


# What only searching and indexing need: Whoosh, the analyzer and the stores, the in-memory
# scan, the session catalog (a pydantic model) and recall.
SEARCH = ("whoosh", "context_paging.index.search.reply", "context_paging.index.search.notes",
          "context_paging.index.search.query", "context_paging.index.search.analysis",
          "context_paging.index.search.store", "context_paging.index.search.writer",
          "context_paging.index.search.scan", "context_paging.index.catalog",
          "context_paging.index.recall")


def imported_by(code: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    """The ``watched`` modules (and their submodules) a fresh interpreter holds after running
    ``code``."""
    probe = (f"import sys\n{code}\nimport json\n"
             f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {watched!r} "
             f"or m in {watched!r})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=PROJECT, timeout=WAIT)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("argv", [["--version"], ["config"],
                                  ["install-config", "--client", "claude-code"],
                                  ["install-proxy", "--client", "claude-code"],
                                  ["doctor", "--port", "9"]])
def test_a_command_that_only_prints_loads_no_index_sdk_or_http_stack(argv, tmp_path):
    code = ("import contextlib, io, os\n"
            f"os.environ['HOME'] = {str(tmp_path)!r}\n"
            f"os.environ['CONTEXT_PAGING_HOME'] = {str(tmp_path / 'home')!r}\n"
            "from context_paging.server.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), "
            "contextlib.redirect_stderr(io.StringIO()):\n"
            f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass")
    assert imported_by(code) == []


def test_the_mcp_server_module_loads_the_sdk_but_not_the_index_or_the_tokenizer():
    loaded = imported_by("import context_paging.server.mcp.tools")
    assert "mcp" in loaded  # the SDK brings its own HTTP stack (httpx2, starlette, uvicorn)
    ours = [m for m in loaded if m.split(".")[0] in ("context_paging", "tiktoken", "whoosh")]
    assert ours == []


def test_the_window_and_the_history_import_no_search_module_and_no_whoosh():
    loaded = imported_by("import context_paging.index.window.pipeline\n"
                         "import context_paging.index.service", SEARCH)
    assert loaded == []


FIRST_CALL = ("history.select_context('first', [{'role': 'user', 'content': 'hello'}], "
              "fmt='anthropic')\n")


@pytest.mark.parametrize("build", [
    # the proxy: its app over the History, the tokenizer loaded, then its first request
    ("import argparse\n"
     "from context_paging.server.proxy.commands import make_app\n"
     "_, history = make_app(settings, argparse.Namespace(upstream_anthropic='http://127.0.0.1:9',"
     " upstream_openai='http://127.0.0.1:9'))\n"),
    # serve: the History its warm-up thread loads, then the first select_context
    ("from context_paging.server.histories import loading_history\n"
     "history = loading_history(settings).loaded()\n"),
], ids=["proxy", "serve"])
def test_the_first_select_context_loads_no_search_module_and_no_whoosh(build, tmp_path):
    code = ("import os\n"
            f"os.environ['HOME'] = {str(tmp_path)!r}\n"
            "from context_paging.server.config import load_settings\n"
            f"settings = load_settings(home={str(tmp_path / 'home')!r})\n"
            f"{build}"
            f"reply = {FIRST_CALL}"
            "assert reply['mode'] == 'within_budget', reply['mode']\n"
            "history.close()")
    assert imported_by(code, SEARCH) == []


def test_the_proxys_first_select_context_loads_no_pydantic(tmp_path):
    """The proxy needs no pydantic model (the stats report's loads with its first use)."""
    code = ("import os, argparse\n"
            f"os.environ['HOME'] = {str(tmp_path)!r}\n"
            "from context_paging.server.config import load_settings\n"
            "from context_paging.server.proxy.commands import make_app\n"
            f"settings = load_settings(home={str(tmp_path / 'home')!r})\n"
            "_, history = make_app(settings, argparse.Namespace("
            "upstream_anthropic='http://127.0.0.1:9', upstream_openai='http://127.0.0.1:9'))\n"
            f"reply = {FIRST_CALL}"
            "history.close()")
    assert imported_by(code, ("pydantic", "context_paging.index.stats")) == []


def test_a_search_loads_the_search_modules_on_its_first_use(tmp_path):
    code = ("import os\n"
            f"os.environ['HOME'] = {str(tmp_path)!r}\n"
            "from context_paging.server.config import load_settings\n"
            "from context_paging.server.histories import make_history\n"
            f"history = make_history(load_settings(home={str(tmp_path / 'home')!r}))\n"
            f"{FIRST_CALL}"
            "reply = history.search('hello', session='ledger:first')\n"
            "history.close()")
    loaded = set(imported_by(code, SEARCH))
    assert {"whoosh", "context_paging.index.search.reply",
            "context_paging.index.search.store"} <= loaded


class Gate:
    """A History build that waits until the test opens the gate."""

    def __init__(self, settings) -> None:
        self.settings = settings
        self.opened = threading.Event()

    def build(self):
        assert self.opened.wait(WAIT)
        return make_history(self.settings)


@pytest.mark.anyio
async def test_serve_lists_its_tools_and_answers_a_call_once_the_history_has_loaded(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    gate = Gate(settings)
    loading = LoadingHistory(gate.build, distill_config(settings)).start()
    server = create_server(settings, loading)
    try:
        async with Client(server) as client:
            with anyio.fail_after(WAIT):
                listed = await client.list_tools()
            assert "select_context" in {t.name for t in listed.tools}
            assert not loading.ready
            replies = []

            async def call() -> None:
                replies.append(await client.call_tool("select_context", {
                    "session": "warm", "format": "anthropic",
                    "messages": [{"role": "user", "content": "hello"}]}))

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(call)
                await anyio.sleep(0.05)
                assert replies == []  # the call waits for the History
                gate.opened.set()
            assert not replies[0].is_error
            assert replies[0].structured_content["mode"] == "within_budget"
    finally:
        gate.opened.set()
        server.history.close()


@pytest.mark.anyio
async def test_a_history_that_failed_to_load_is_a_tool_error_and_the_next_call_loads_again(
        tmp_path):
    settings = load_settings(home=tmp_path / "home")

    attempts = []

    def build():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError(13, "Permission denied", str(tmp_path / "home" / "ledger"))
        return make_history(settings)

    server = create_server(settings, LoadingHistory(build, distill_config(settings)).start())
    call = {"session": "warm", "format": "anthropic",
            "messages": [{"role": "user", "content": "hello"}]}
    try:
        async with Client(server) as client:
            with anyio.fail_after(WAIT):
                failed = await client.call_tool("select_context", call)
                again = await client.call_tool("select_context", call)  # the cause was fixed
        assert failed.is_error
        assert failed.content[0].text.startswith("STORAGE_ERROR: ")
        assert not again.is_error and len(attempts) == 2
    finally:
        server.history.close()


def test_a_history_never_started_in_the_background_is_loaded_by_its_first_call(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    built = []

    def build():
        built.append(threading.current_thread().name)
        return make_history(settings)

    loading = LoadingHistory(build, distill_config(settings))
    assert not loading.ready and built == []
    reply = loading.select_context("first", [{"role": "user", "content": "hi"}],
                                   fmt="anthropic")
    assert reply["mode"] == "within_budget"
    assert built == [threading.current_thread().name]  # loaded once, by the call itself
    loading.close()


def test_the_hook_runs_once_the_history_has_loaded_and_not_when_it_failed(tmp_path):
    settings = load_settings(home=tmp_path / "home")
    ran = []
    loading = LoadingHistory(lambda: make_history(settings), distill_config(settings),
                             lambda: ran.append(loading.ready))
    loading.loaded()
    assert ran == [False]  # before the History is handed out: nothing waits on it yet
    loading.close()

    def broken():
        raise OSError(13, "Permission denied")

    failing = LoadingHistory(broken, distill_config(settings), lambda: ran.append("failed"))
    with pytest.raises(OSError):
        failing.loaded()
    assert ran == [False]


def test_once_settled_the_start_up_is_frozen_and_a_long_call_runs_few_young_collections(
        tmp_path):
    """serve and the proxy settle the collector once loaded (server/heap.py): the start-up's
    objects are frozen (a full collection never walks them again), and a first call on the
    benchmark's 901 messages (15 MiB) runs a few young collections (33 with CPython's default
    threshold, which fails the bound below)."""
    code = f"""
import gc, json, sys
sys.path.insert(0, {str(PROJECT)!r})
from bench.select_bench import workload, arguments
import mcp  # the SDK's objects, as in serve
from context_paging.server.config import load_settings
from context_paging.server.histories import make_history
from context_paging.server import heap
history = make_history(load_settings(home={str(tmp_path / 'home')!r}))
history.context
messages = workload()
heap.settle()
before = [s["collections"] for s in gc.get_stats()]
args = arguments(messages)
history.select_context(args["session"], messages, fmt="pi", system=args["system"],
                       tools=args["tools"], model_window=args["model_window"],
                       token_budget=args["token_budget"])
after = [s["collections"] for s in gc.get_stats()]
print(json.dumps([gc.get_freeze_count(), [b - a for a, b in zip(before, after)]]))
history.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=PROJECT, timeout=WAIT)
    frozen, collections = json.loads(out.stdout.splitlines()[-1])
    assert frozen > 10_000 and collections[0] <= 10


def test_serve_settles_the_collector_once_its_history_has_loaded(tmp_path):
    """``serve`` itself passes :func:`server.heap.settle` to its loading History: run as the
    command runs (a fresh interpreter, the CLI's ``main``), the settle call comes once, after
    start-up's imports (tens of thousands of objects frozen), and the call is answered."""
    code = f"""
import gc, sys
from context_paging.server import heap
real = heap.settle
def settle():
    real()
    print("settled", gc.get_freeze_count(), file=sys.stderr, flush=True)
heap.settle = settle
from context_paging.server.cli import main
sys.exit(main(["--home", {str(tmp_path / 'home')!r}, "serve"]))
"""
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "select_context", "arguments": {
            "session": "settled", "format": "anthropic",
            "messages": [{"role": "user", "content": "hello"}]}}})
    server = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=PROJECT)
    try:
        server.stdin.write("".join(f"{x}\n" for x in [*INITIALIZE, call]).encode())
        server.stdin.flush()
        replies = read_replies(server, {0, 1})  # serve exits at the end of its input: read first
    finally:
        stderr = finish(server)
    assert replies[1]["result"]["structuredContent"]["mode"] == "within_budget"
    settled = [line.split() for line in stderr.splitlines() if line.startswith("settled ")]
    assert len(settled) == 1 and int(settled[0][1]) > 10_000


def _imported(*argv: str) -> set[str]:
    """The modules ``-X importtime`` reports for one interpreter run of ``argv``."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                          text=True, check=True, timeout=WAIT, cwd=PROJECT.parent)
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:")}


def test_version_loads_only_the_entry_point_beside_a_bare_interpreter():
    extra = _imported("-m", "context_paging", "--version") - _imported("-c", "pass")
    assert extra <= {"runpy", "context_paging", "context_paging.server",
                     "context_paging.server.cli"}, sorted(extra)
