"""install-config (client set-up files) and render_config (context-paging config).

Every test runs with HOME and the working directory in a tmp dir and writes only through
``--config`` paths under it: the real home is never read or written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import pytest
from context_paging.server.config import load_settings
from context_paging.server.setup import clients

SHAPES = {  # client -> (servers key, whether entries carry "type": "stdio")
    "claude-desktop": ("mcpServers", False),
    "claude-code": ("mcpServers", True),
    "cursor": ("mcpServers", False),
    "vscode": ("servers", True),
}


@pytest.fixture(autouse=True)
def _sandbox(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.chdir(tmp_path)


def install(*argv: str, home: str | None = None) -> int:
    """``context-paging [--home H] install-config ARGV``, parsed the way the CLI wires it."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--home")
    commands = parser.add_subparsers(dest="command", required=True)
    clients.add_arguments(commands.add_parser("install-config"))
    top = ["--home", home] if home else []
    args = parser.parse_args([*top, "install-config", *argv])
    return clients.run(args, load_settings(home=args.home))


def printed(capsys, *argv: str, **kwargs) -> dict:
    assert install(*argv, **kwargs) == 0
    return json.loads(capsys.readouterr().out)


# --- printing -----------------------------------------------------------------------------------


@pytest.mark.parametrize("client", sorted(SHAPES))
def test_each_client_gets_its_documented_shape_with_an_absolute_command(client, capsys,
                                                                        monkeypatch):
    monkeypatch.delenv("CONTEXT_PAGING_HOME")
    key, typed = SHAPES[client]
    document = printed(capsys, "--client", client)
    assert list(document) == [key]
    entry = document[key]["context-paging"]
    command = entry.pop("command")
    assert os.path.isabs(command)
    assert entry == ({"type": "stdio"} if typed else {}) | {"args": ["serve", "--tools",
                                                                      "recovery"]}


def test_the_console_script_on_path_is_named_by_its_absolute_path(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("CONTEXT_PAGING_HOME")
    monkeypatch.setattr(clients.shutil, "which", lambda name: f"bin/{name}")
    entry = printed(capsys, "--client", "cursor")["mcpServers"]["context-paging"]
    assert entry == {"command": str(tmp_path / "bin" / "context-paging"),
                     "args": ["serve", "--tools", "recovery"]}


def test_without_a_console_script_the_one_beside_python_or_python_itself_is_used(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.delenv("CONTEXT_PAGING_HOME")
    monkeypatch.setattr(clients.shutil, "which", lambda name: None)
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    entry = printed(capsys, "--client", "cursor")["mcpServers"]["context-paging"]
    assert entry == {"command": str(bin_dir / "python"),
                     "args": ["-m", "context_paging", "serve", "--tools", "recovery"]}
    (bin_dir / "context-paging").write_text("#!/bin/sh\n")
    entry = printed(capsys, "--client", "cursor")["mcpServers"]["context-paging"]
    assert entry == {"command": str(bin_dir / "context-paging"),
                     "args": ["serve", "--tools", "recovery"]}


def test_a_home_flag_wins_over_the_environment_and_is_written_once_and_absolute(
    capsys, tmp_path, _private_home
):
    assert os.environ["CONTEXT_PAGING_HOME"] == str(_private_home)  # set, and disagreeing
    entry = printed(capsys, "--client", "vscode", "--home", "./data")["servers"]["context-paging"]
    assert entry["args"] == ["--home", str(tmp_path / "data"), "serve", "--tools", "recovery"]
    assert "env" not in entry
    # The CLI's own --home (before the subcommand) counts too.
    entry = printed(capsys, "--client", "cursor", home="elsewhere")["mcpServers"]["context-paging"]
    assert entry["args"] == ["--home", str(tmp_path / "elsewhere"), "serve", "--tools",
                             "recovery"]
    assert "env" not in entry


def test_without_a_home_flag_the_environment_home_is_passed_on_absolute(
    capsys, tmp_path, monkeypatch
):
    monkeypatch.setenv("CONTEXT_PAGING_HOME", "rel/home")
    entry = printed(capsys, "--client", "cursor")["mcpServers"]["context-paging"]
    assert entry["env"] == {"CONTEXT_PAGING_HOME": str(tmp_path / "rel" / "home")}
    assert "--home" not in entry["args"]


def test_an_agent_host_can_ask_for_every_tool(capsys, monkeypatch):
    monkeypatch.delenv("CONTEXT_PAGING_HOME")
    entry = printed(capsys, "--client", "cursor", "--tools", "all")["mcpServers"]["context-paging"]
    assert entry["args"] == ["serve"]


def test_claude_code_also_gets_the_claude_mcp_add_command(capsys, monkeypatch):
    monkeypatch.delenv("CONTEXT_PAGING_HOME")
    assert install("--client", "claude-code", "--name", "history") == 0
    out, err = capsys.readouterr()
    command = json.loads(out)["mcpServers"]["history"]["command"]
    assert (f"claude mcp add --scope user --transport stdio history -- {command} serve "
            "--tools recovery") in err


def test_default_locations_follow_each_client_and_platform(tmp_path):
    env = {"HOME": "/home/ann", "APPDATA": r"C:\Users\ann\AppData\Roaming"}
    where = lambda client, platform: clients.default_path(client, tmp_path, platform, env)  # noqa: E731
    assert where("claude-desktop", "darwin") == Path(
        "/home/ann/Library/Application Support/Claude/claude_desktop_config.json")
    assert where("claude-desktop", "win32") == Path(
        r"C:\Users\ann\AppData\Roaming") / "Claude" / "claude_desktop_config.json"
    assert where("claude-desktop", "linux") == Path(
        "/home/ann/.config/Claude/claude_desktop_config.json")
    assert where("cursor", "linux") == Path("/home/ann/.cursor/mcp.json")
    assert where("claude-code", "linux") == Path("/home/ann/.claude.json")
    assert where("codex", "linux") == Path("/home/ann/.codex/config.toml")
    assert where("vscode", "darwin") == tmp_path / ".vscode" / "mcp.json"


# --- --write ------------------------------------------------------------------------------------


def test_write_merges_the_entry_and_keeps_other_servers_and_keys(tmp_path, capsys):
    target = tmp_path / "claude_desktop_config.json"
    before = {
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {
            "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-fs"]},
            "context-paging": {"command": "/old/context-paging", "args": ["serve"]},
        },
    }
    target.write_text(json.dumps(before, indent=4))
    previous_text = target.read_text()
    assert install("--client", "claude-desktop", "--write", "--config", str(target)) == 0
    after = json.loads(target.read_text())
    assert after["globalShortcut"] == "Ctrl+Space"
    assert after["mcpServers"]["filesystem"] == before["mcpServers"]["filesystem"]
    assert list(after["mcpServers"]) == ["filesystem", "context-paging"]
    assert after["mcpServers"]["context-paging"]["command"] != "/old/context-paging"
    kept = json.loads((tmp_path / "claude_desktop_config.json.context-paging-undo").read_text())
    assert kept["original"] == previous_text  # for uninstall-config
    assert "Added 'context-paging'" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "claude_desktop_config.json",
        "claude_desktop_config.json.context-paging-undo"]  # no temp file, no .bak left


def test_write_creates_a_missing_file_and_its_folders(tmp_path):
    target = tmp_path / "project" / ".vscode" / "mcp.json"
    assert install("--client", "vscode", "--write", "--config", str(target)) == 0
    written = json.loads(target.read_text())
    assert list(written) == ["servers"]
    assert written["servers"]["context-paging"]["type"] == "stdio"
    assert not target.with_name("mcp.json.bak").exists()


def test_writing_the_same_entry_again_changes_nothing(tmp_path, capsys):
    target = tmp_path / "mcp.json"
    assert install("--client", "cursor", "--write", "--config", str(target)) == 0
    stamp = target.stat().st_mtime_ns
    assert install("--client", "cursor", "--write", "--config", str(target)) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert target.stat().st_mtime_ns == stamp
    assert not (tmp_path / "mcp.json.bak").exists()


@pytest.mark.parametrize("text, reason", [
    ('{"mcpServers": {"a": {"command": "x"}},}', "not valid JSON"),
    ('{\n  // my servers\n  "servers": {}\n}', "not valid JSON"),
    ('["not", "an", "object"]', "does not hold a JSON object"),
    ('{"mcpServers": ["a"]}', "'mcpServers' is a list"),
])
def test_a_file_it_cannot_merge_safely_is_refused_unchanged(tmp_path, capsys, text, reason):
    target = tmp_path / "mcp.json"
    target.write_text(text)
    assert install("--client", "cursor", "--write", "--config", str(target)) == 2
    err = capsys.readouterr().err
    assert reason in err and "nothing was written" in err
    assert target.read_text() == text
    assert [p.name for p in tmp_path.iterdir()] == ["mcp.json"]


def test_an_empty_name_is_refused(capsys):
    assert install("--client", "cursor", "--name", " ") == 2
    assert "--name" in capsys.readouterr().err


# --- render_config ------------------------------------------------------------------------------


def test_render_config_shows_every_value_and_where_it_came_from(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[paging]\ntoken_budget = 50000\nestimator = "chars4"\n[distill]\njudge = "oracle"\n'
    )
    settings = load_settings(home=home, environ={"CONTEXT_PAGING_PAGING_TOKEN_BUDGET": "6000"})
    text = clients.render_config(settings)
    lines = {line.split("  #")[0].strip(): line.split("# ", 1)[1]
             for line in text.splitlines() if "  # " in line}
    assert lines["paging.token_budget = 6000"] == "environment CONTEXT_PAGING_PAGING_TOKEN_BUDGET"
    assert lines['paging.estimator = "chars4"'] == f"{home / 'config.toml'} [paging]"
    assert lines["paging.enabled = true"] == "default"
    assert lines['distill.judge = "local"'] == "default"
    assert lines["paging.trim_to_tokens = (not set: 5/8 of token_budget = 3750)"] == "default"
    assert f"sources.pi = {json.dumps(str(Path('~/.pi/agent/sessions').expanduser()))}" in lines
    assert text.startswith(f"home = {json.dumps(str(home))}\n")
    assert "warnings:\n  - distill.judge = 'oracle' from" in text
    assert len(lines) == sum(len(keys) for keys in clients.SCHEMA.values())


def test_render_config_without_a_config_file_says_so(tmp_path):
    text = clients.render_config(load_settings(home=tmp_path / "fresh", environ={}))
    assert "(not present: defaults and environment only)" in text
    assert "warnings" not in text
