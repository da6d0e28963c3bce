"""The home is private (folders 0700, files 0600), and what it holds can be deleted: ``forget``
and the ledger's ``keep_days``. Conversations arrive through the proxy over real HTTP."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import httpx2 as httpx
import pytest
from context_paging.index.home import private
from context_paging.index.home.proxied import last_proxied
from context_paging.index.search.store import SearchIndex
from context_paging.server.cli import main
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import make_history

from tests.test_proxy import Stack, make_home


@pytest.fixture
def cli_umask():
    """The umask the CLI sets for every command, restored afterwards."""
    previous = os.umask(private.UMASK)
    yield
    os.umask(previous)


def modes(home: Path) -> dict[str, int]:
    out = {}
    for path in [home, *home.rglob("*")]:
        out[str(path.relative_to(home))] = stat.S_IMODE(path.lstat().st_mode)
    return out


def converse(home: Path, word: str, session: str) -> str:
    """One Claude Code request through the proxy; the ledger session it was stored under."""
    s = Stack(home)
    try:
        httpx.post(f"{s.url}/v1/messages", headers={"x-claude-code-session-id": session},
                   json={"model": "m", "max_tokens": 5, "messages": [
                       {"role": "user", "content": f"my key is {word}"}]})
        return last_proxied(home)
    finally:
        s.close()


def test_files_the_project_writes_itself_are_0600_in_0700_folders(tmp_path):
    home = make_home(tmp_path)
    converse(home, "sk-live-123", "s1")
    own = {k: v for k, v in modes(home).items() if k.split("/")[0] in ("ledger", "state", "proxy")}
    assert own and all(v == (0o700 if (home / k).is_dir() else 0o600) for k, v in own.items()), own


def test_under_the_cli_umask_every_file_in_the_home_is_private(tmp_path, cli_umask):
    home = make_home(tmp_path)
    os.chmod(home, 0o700)
    (home / "config.toml").chmod(0o600)
    ref = converse(home, "sk-live-123", "s1")
    history = make_history(load_settings(home=str(home)))
    try:
        history.ensure_indexed(ref)
    finally:
        history.close()
    found = modes(home)
    assert any(k.startswith("index/") for k in found)
    assert {k: oct(v) for k, v in found.items() if v & 0o077} == {}  # nothing for others


def test_an_existing_readable_home_is_made_private_on_start_with_its_data_intact(tmp_path):
    home = make_home(tmp_path)
    converse(home, "sk-live-123", "s1")
    for path in [home, *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    before = {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}
    assert main(["--home", str(home), "config"]) == 0
    assert all(v == (0o700 if (home / k).is_dir() else 0o600) for k, v in modes(home).items())
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before


def test_forget_deletes_a_conversations_ledger_state_tally_and_index_entries(tmp_path, capsys):
    home = make_home(tmp_path)
    kept = converse(home, "keepsake", "other")
    gone = converse(home, "sk-live-secret", "private")
    history = make_history(load_settings(home=str(home)))
    try:
        history.ensure_indexed(kept)
        history.ensure_indexed(gone)
    finally:
        history.close()
    name = gone.removeprefix("ledger:")
    assert (home / "ledger" / f"{name}.jsonl").exists() and last_proxied(home) == gone
    assert (home / "proxy" / f"{name}.requests.jsonl").exists()  # the live view's series
    assert main(["--home", str(home), "forget", "--session", gone]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not (home / "ledger" / f"{name}.jsonl").exists()
    assert not (home / "state" / f"{name}.json").exists()
    assert not (home / "proxy" / f"{name}.json").exists()
    assert not (home / "proxy" / f"{name}.requests.jsonl").exists()
    assert last_proxied(home) is None
    secret = b"sk-live-secret"
    assert not any(secret in p.read_bytes() for p in home.rglob("*") if p.is_file())
    with SearchIndex(home / "index") as index:
        assert set(index.indexed_sessions()) == {kept}
    assert (home / "ledger" / f"{kept.removeprefix('ledger:')}.jsonl").exists()


def test_forget_refuses_an_agents_own_session_and_reports_an_unknown_one(tmp_path, capsys):
    home = make_home(tmp_path)
    assert main(["--home", str(home), "forget", "--session", "claude:abc"]) == 2
    assert "belongs to the agent" in capsys.readouterr().err
    assert main(["--home", str(home), "forget", "--session", "ledger:never-seen"]) == 1
    assert "nothing stored" in capsys.readouterr().out


def test_ledger_sessions_past_keep_days_are_deleted_at_start_and_by_forget_expired(tmp_path):
    home = make_home(tmp_path)
    old = converse(home, "old words", "old")
    new = converse(home, "new words", "new")
    month_ago = time.time() - 31 * 86_400
    os.utime(home / "ledger" / f"{old.removeprefix('ledger:')}.jsonl", (month_ago, month_ago))
    assert main(["--home", str(home), "forget", "--expired"]) == 2  # keep_days not set
    with (home / "config.toml").open("a") as config:
        config.write("[ledger]\nkeep_days = 30\n")
    make_history(load_settings(home=str(home))).close()
    assert sorted(p.stem for p in (home / "ledger").glob("*.jsonl")) == [
        new.removeprefix("ledger:")]
    os.utime(home / "ledger" / f"{new.removeprefix('ledger:')}.jsonl", (month_ago, month_ago))
    assert main(["--home", str(home), "forget", "--expired"]) == 0
    assert list((home / "ledger").glob("*.jsonl")) == []


def test_every_cli_command_runs_under_a_private_umask_and_run_gives_agents_the_users(
        tmp_path, cli_umask, capfd):
    import sys

    os.umask(0o022)
    private.user_umask = None
    home = str(make_home(tmp_path))
    assert main(["--home", home, "config"]) == 0
    assert os.umask(0o077) == 0o077
    capfd.readouterr()
    script = "import os; print(oct(os.umask(0)))"
    assert main(["--home", home, "run", "--", sys.executable, "-c", script]) == 0
    assert capfd.readouterr().out.strip() == "0o22"  # the agent writes files as the user would
