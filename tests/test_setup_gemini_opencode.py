"""Setting Gemini CLI and OpenCode up for the proxy: install-proxy (their files, originals kept),
uninstall-proxy (each file back byte for byte), doctor (the base URLs and the MCP entries) and
run (one child's environment)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from context_paging.server.cli import main
from context_paging.server.proxy.commands import child_environment
from context_paging.server.setup import agents, checks, undo


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    return home


def test_install_proxy_for_gemini_writes_its_env_and_settings_and_uninstall_undoes_it(user_home):
    folder = user_home / ".gemini"
    folder.mkdir()
    env_text = "GEMINI_API_KEY=abc\nGOOGLE_GEMINI_BASE_URL=https://gw.example\n# note\n"
    settings_text = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}},
                                "model": {"name": "gemini-3-pro"}}, indent=1)
    (folder / ".env").write_text(env_text)
    (folder / "settings.json").write_text(settings_text)
    assert main(["install-proxy", "--client", "gemini", "--write", "--port", "8790"]) == 0
    written = (folder / ".env").read_text()
    assert written == ("GEMINI_API_KEY=abc\nGOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8790\n"
                       "# note\n")
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["model"] == {"name": "gemini-3-pro", "compressionThreshold": 1}
    entry = settings["mcpServers"]["context-paging"]
    assert entry["args"][-3:] == ["serve", "--tools", "recovery"] and "type" not in entry
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert main(["uninstall-proxy", "--client", "gemini"]) == 0
    assert (folder / ".env").read_text() == env_text
    assert (folder / "settings.json").read_text() == settings_text


def test_install_proxy_for_gemini_in_a_fresh_home_and_back(user_home):
    assert main(["install-proxy", "--client", "gemini", "--write"]) == 0
    assert (user_home / ".gemini" / ".env").read_text() == \
        "GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787\n"
    lines, pointing = checks.base_url_lines(8787, user_home, {})
    assert pointing == ["Gemini CLI (~/.gemini/.env)"]
    assert any("Gemini CLI (~/.gemini/settings.json): recovery tools" in line
               for line in checks.registrations(user_home, user_home))
    assert main(["uninstall-proxy", "--client", "gemini"]) == 0
    assert not (user_home / ".gemini" / ".env").exists()
    assert not (user_home / ".gemini" / "settings.json").exists()


def test_install_proxy_for_opencode_repoints_its_providers_and_turns_compaction_off(user_home):
    path = user_home / ".config" / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True)
    original = json.dumps({"$schema": "https://opencode.ai/config.json",
                           "provider": {"anthropic": {"options": {"apiKey": "{env:KEY}"}}},
                           "model": "anthropic/claude-sonnet-4-5"}, indent=2) + "\n"
    path.write_text(original)
    assert main(["install-proxy", "--client", "opencode", "--write"]) == 0
    config = json.loads(path.read_text())
    assert config["provider"]["anthropic"]["options"] == {
        "apiKey": "{env:KEY}", "baseURL": "http://127.0.0.1:8787/v1"}
    assert config["provider"]["openai"]["options"]["baseURL"] == "http://127.0.0.1:8787/v1"
    assert config["compaction"] == {"auto": False, "prune": False}
    local = config["mcp"]["context-paging"]
    assert local["type"] == "local" and local["command"][-3:] == ["serve", "--tools",
                                                                  "recovery"]
    _, pointing = checks.base_url_lines(8787, user_home, {})
    assert len(pointing) == 2 and all(p.startswith("OpenCode") for p in pointing)
    assert any(line.startswith("  OpenCode") for line in checks.registrations(user_home,
                                                                              user_home))
    assert main(["uninstall-proxy", "--client", "opencode"]) == 0
    assert path.read_text() == original


def test_run_points_gemini_and_opencode_at_the_proxy_without_touching_their_files(tmp_path):
    env, extra = child_environment("/opt/bin/gemini", "http://127.0.0.1:5", {"PATH": "/b"})
    assert extra == [] and env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:5"
    env, extra = child_environment("opencode", "http://127.0.0.1:5", {})
    content = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert content == {"provider": {"anthropic": {"options": {"baseURL": "http://127.0.0.1:5/v1"}},
                                    "openai": {"options": {"baseURL": "http://127.0.0.1:5/v1"}}},
                       "compaction": {"auto": False, "prune": False}}
    assert extra == []


def test_an_env_line_is_replaced_where_it_stands_and_taken_back_by_its_key(tmp_path):
    text = "A=1\nexport GOOGLE_GEMINI_BASE_URL=x\nB=2"
    changed = agents.env_line(text, "GOOGLE_GEMINI_BASE_URL", "http://h")
    assert changed == "A=1\nGOOGLE_GEMINI_BASE_URL=http://h\nB=2"
    env, key = tmp_path / ".env", [("GOOGLE_GEMINI_BASE_URL",)]
    assert undo.take_back(env, changed, text, key) == text
    assert undo.take_back(env, "A=1\nGOOGLE_GEMINI_BASE_URL=http://h\n", "A=1\n", key) == "A=1\n"
    assert undo.take_back(env, "GOOGLE_GEMINI_BASE_URL=http://h\n", None, key) is None
    assert agents.env_line("A=1", "K", "v") == "A=1\nK=v\n"


def test_uninstall_proxy_for_gemini_keeps_env_lines_the_user_added_since(user_home):
    env = user_home / ".gemini" / ".env"
    env.parent.mkdir()
    env.write_text("GEMINI_API_KEY=k\nGOOGLE_GEMINI_BASE_URL=http://mine\n")
    assert main(["install-proxy", "--client", "gemini", "--write"]) == 0
    assert main(["install-proxy", "--client", "gemini", "--write"]) == 0  # idempotent
    assert env.read_text() == "GEMINI_API_KEY=k\nGOOGLE_GEMINI_BASE_URL=http://127.0.0.1:8787\n"
    env.write_text(env.read_text() + "DEBUG=1\n")  # the user's line, after install
    assert main(["uninstall-proxy", "--client", "gemini"]) == 0
    assert env.read_text() == "GEMINI_API_KEY=k\nGOOGLE_GEMINI_BASE_URL=http://mine\nDEBUG=1\n"
    assert not undo.record_path(env).exists()


def test_install_config_registers_the_server_in_gemini_clis_settings(user_home, capsys):
    settings = user_home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}))
    assert main(["install-config", "--client", "gemini", "--write"]) == 0
    written = json.loads(settings.read_text())
    assert written["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert written["mcpServers"]["context-paging"]["args"][-3:] == ["serve", "--tools", "recovery"]
    assert "type" not in written["mcpServers"]["context-paging"]


def test_install_proxy_and_install_config_share_gemini_clis_entry_until_both_are_undone(
        user_home):
    settings = user_home / ".gemini" / "settings.json"
    settings.parent.mkdir()
    original = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
    settings.write_text(original)
    assert main(["install-config", "--client", "gemini", "--write"]) == 0
    assert main(["install-proxy", "--client", "gemini", "--write"]) == 0
    assert main(["uninstall-proxy", "--client", "gemini"]) == 0
    kept = json.loads(settings.read_text())
    assert "context-paging" in kept["mcpServers"]  # install-config's too: it stays
    assert "compressionThreshold" not in kept.get("model", {})
    assert main(["uninstall-config", "--client", "gemini", "--write"]) == 0
    assert json.loads(settings.read_text()) == json.loads(original)
    assert not undo.record_path(settings).exists()
