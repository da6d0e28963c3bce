"""``context-paging statusline`` (docs/live-view.md): what Claude Code's status bar shows, how
little it loads, and install-proxy / uninstall-proxy / doctor around it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from context_paging.index.home.proxied import ProxyLog, conversation_stats
from context_paging.server import statusline
from context_paging.server.cli import main
from context_paging.server.proxy import wire
from context_paging.server.setup import agents

from tests.conftest import PROJECT
from tests.test_live_view import Live, live, run_conversation  # noqa: F401  # the fixture
from tests.test_proxy import SESSION, make_home
from tests.test_startup import imported_by

CLAUDE_INPUT = {"hook_event_name": "Status", "session_id": SESSION,
                "transcript_path": "/tmp/x.jsonl", "cwd": "/tmp",
                "model": {"id": "claude-fake", "display_name": "Fake"},
                "workspace": {"current_dir": "/tmp", "project_dir": "/tmp"}}


def run_statusline(home: Path, stdin: bytes) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "context_paging", "--home", str(home),
                           "statusline"], input=stdin, capture_output=True, cwd=PROJECT,
                          timeout=120)


def test_the_line_shows_the_window_savings_cache_and_cuts_of_the_session(live):  # noqa: F811
    run_conversation(live)
    done = run_statusline(live.home, json.dumps(CLAUDE_INPUT).encode())
    assert done.returncode == 0 and not done.stderr
    line = done.stdout.decode().strip()
    ref = live.get("/context-paging/api/conversations").json()["conversations"][0]["session"]
    tally = conversation_stats(live.home, ref)
    assert "\n" not in line and len(line) < 100
    assert line.startswith("paging: window ") and "/4.0k" in line
    saved = round((1 - tally["last_sent_tokens"] / tally["last_full_tokens"]) * 100)
    assert f"saved {saved}% of " in line
    usage = tally["last_usage"]
    share = usage["cache_read_tokens"] / (usage["input_tokens"] + usage["cache_read_tokens"]
                                          + usage["cache_write_tokens"])
    assert f"cache {share * 100:.0f}%" in line
    assert line.endswith(f"{tally['cut_advances']} cuts")


def test_a_session_not_through_the_proxy_and_bad_input_get_a_short_true_line(tmp_path):
    home = make_home(tmp_path)
    done = run_statusline(home, json.dumps(CLAUDE_INPUT).encode())
    assert done.returncode == 0 and done.stdout.decode().strip() == statusline.NOT_PROXIED
    for bad in (b"", b"not json", b"[1, 2]", b'{"session_id": 5}'):
        done = run_statusline(home, bad)
        assert done.returncode == 0 and not done.stderr
        assert done.stdout.decode().strip() == "context-paging: no session id from Claude Code"


def test_the_main_conversation_is_shown_not_a_side_call_of_the_same_session(tmp_path):
    home = make_home(tmp_path)
    log = ProxyLog(home)
    name = wire.safe_name(SESSION)
    log.record(f"cc-{name}-side", "anthropic", {"mode": "within_budget"}, sent=b"x" * 400,
               full=b"x" * 400, previous=None)
    log.record(f"cc-{name}-main", "anthropic", {"mode": "paged", "budget_tokens": 4000,
                                               "frontier": {"kind": "prefix"}},
               sent=b"x" * 8000, full=b"x" * 40000, previous=None)
    log.record(f"cc-other-{name}-x", "anthropic", {"mode": "paged"}, sent=b"x" * 4,
               full=b"x" * 80000, previous=None)
    tally = statusline.find_tally(str(home), SESSION)
    assert tally is not None and tally["session"] == f"ledger:cc-{name}-main"
    assert statusline.line(tally) == "paging: window 2.0k/4.0k · saved 80% of 10.0k · 1 cut"


def test_the_status_line_loads_no_index_tokenizer_settings_or_http_stack(tmp_path):
    code = ("import io, sys, contextlib\n"
            "sys.stdin = io.TextIOWrapper(io.BytesIO(b'{\"session_id\": \"x\"}'))\n"
            "from context_paging.server.cli import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    main(['--home', {str(tmp_path)!r}, 'statusline'])\n")
    watched = ("mcp", "tiktoken", "whoosh", "httpx2", "starlette", "uvicorn", "pydantic",
               "argparse", "context_paging.index", "context_paging.paging",
               "context_paging.server.config", "context_paging.server.setup")
    assert imported_by(code, watched) == []


def test_the_status_line_uses_the_proxys_own_session_names():
    for session in (SESSION, "team/a", "x" * 200, "é"):
        assert statusline.safe_name(session) == wire.safe_name(session)


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    return home


def test_install_proxy_offers_the_status_line_and_uninstall_takes_it_back(user_home, capsys):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = '{\n  "theme": "dark"\n}\n'
    settings.write_text(original)
    assert main(["install-proxy", "--client", "claude-code", "--statusline", "--write"]) == 0
    written = json.loads(settings.read_text())
    assert written["theme"] == "dark"
    command = written["statusLine"]["command"]
    assert written["statusLine"]["type"] == "command" and command.endswith(" statusline")
    assert "Claude Code status line: " + command in agents.statusline_report(user_home)
    assert main(["uninstall-proxy", "--client", "claude-code"]) == 0
    assert json.loads(settings.read_text()) == json.loads(original)
    assert "not set" in agents.statusline_report(user_home)


def test_doctor_names_a_status_line_of_the_users_own(user_home):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"statusLine": {"type": "command",
                                                   "command": "my-own-line"}}))
    assert "another command (my-own-line)" in agents.statusline_report(user_home)


def test_the_status_line_is_for_claude_code_only(user_home, capsys):
    assert main(["install-proxy", "--client", "codex", "--statusline"]) == 2
    assert "--statusline is for --client claude-code" in capsys.readouterr().err
