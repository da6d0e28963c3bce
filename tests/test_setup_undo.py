"""Set-up that can be undone: install-proxy keeps each original once, uninstall-proxy puts it
back, install-config and install-proxy register the same MCP server, and --service writes a
user service."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from context_paging.server.cli import main
from context_paging.server.setup import service

ORIGINALS = {  # every file the three agents read, as a user might have them (None: absent)
    ".claude/settings.json": '{\n    "model": "opus",\n    "env": {"FOO": "1"}\n}',
    ".claude.json": '{"numStartups": 3, "mcpServers": {"other": {"command": "x"}}}\n',
    ".codex/config.toml": '# mine\nmodel = "gpt-5"\nmodel_provider = "azure"\n\n'
                          '[model_providers.azure]\nbase_url = "https://azure.example"\n',
    ".pi/agent/models.json": '{"providers": {"anthropic": {"baseUrl": "https://a.example"}}}',
    ".pi/agent/settings.json": None,
}


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    for name, text in ORIGINALS.items():
        if text is not None:
            (home / name).parent.mkdir(parents=True, exist_ok=True)
            (home / name).write_text(text)
    return home


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in home.rglob("*") if p.is_file()}


@pytest.mark.parametrize("client", ["claude-code", "codex", "pi"])
def test_install_twice_then_uninstall_restores_every_file_byte_for_byte(user_home, client):
    before = snapshot(user_home)
    assert main(["install-proxy", "--client", client, "--write"]) == 0
    assert snapshot(user_home) != before
    assert main(["install-proxy", "--client", client, "--write", "--port", "9999"]) == 0
    assert main(["uninstall-proxy", "--client", client]) == 0
    assert snapshot(user_home) == before


def test_uninstall_takes_back_only_its_keys_from_a_file_the_agent_changed_since(user_home,
                                                                                capsys):
    state = user_home / ".claude.json"
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 0
    value = json.loads(state.read_text())
    value["numStartups"] = 4  # Claude Code rewrites this file on every start
    state.write_text(json.dumps(value))
    assert main(["uninstall-proxy", "--client", "claude-code"]) == 0
    assert json.loads(state.read_text()) == {"numStartups": 4,
                                             "mcpServers": {"other": {"command": "x"}}}
    assert "only install-proxy's settings were taken back" in capsys.readouterr().out


def test_codex_warns_before_replacing_another_provider_and_gets_it_back(user_home, capsys):
    config = user_home / ".codex" / "config.toml"
    assert main(["install-proxy", "--client", "codex"]) == 0
    assert "model_provider is 'azure'" in capsys.readouterr().err
    assert main(["install-proxy", "--client", "codex", "--write"]) == 0
    assert tomllib.loads(config.read_text())["model_provider"] == "paging"
    config.write_text(config.read_text() + '\n[profiles.fast]\nmodel = "gpt-5-mini"\n')
    assert main(["uninstall-proxy", "--client", "codex"]) == 0
    value = tomllib.loads(config.read_text())
    assert value["model_provider"] == "azure" and "model_auto_compact_token_limit" not in value
    assert value["model_providers"] == {"azure": {"base_url": "https://azure.example"}}
    assert value["profiles"] == {"fast": {"model": "gpt-5-mini"}} and "mcp_servers" not in value


def test_uninstall_without_an_install_changes_nothing(user_home, capsys):
    before = snapshot(user_home)
    assert main(["uninstall-proxy", "--client", "pi"]) == 0
    assert snapshot(user_home) == before
    assert "not changed by install-proxy" in capsys.readouterr().out


def test_install_config_and_install_proxy_register_the_same_server(user_home):
    assert main(["install-config", "--client", "claude-code", "--write"]) == 0
    by_config = json.loads((user_home / ".claude.json").read_text())["mcpServers"]
    assert main(["install-config", "--client", "codex", "--write"]) == 0
    codex_by_config = tomllib.loads((user_home / ".codex" / "config.toml").read_text())
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 0
    assert main(["install-proxy", "--client", "codex", "--write"]) == 0
    by_proxy = json.loads((user_home / ".claude.json").read_text())["mcpServers"]
    codex_by_proxy = tomllib.loads((user_home / ".codex" / "config.toml").read_text())
    assert by_proxy["context-paging"] == by_config["context-paging"]
    assert by_proxy["context-paging"]["args"][-2:] == ["--tools", "recovery"]
    assert (codex_by_proxy["mcp_servers"]["context-paging"]
            == codex_by_config["mcp_servers"]["context-paging"])
    assert codex_by_config["model_provider"] == "azure"  # install-config touches only its table


def test_install_proxy_service_writes_a_user_unit_that_uninstall_removes(user_home, capsys):
    unit = user_home / ".config" / "systemd" / "user" / service.UNIT
    assert main(["install-proxy", "--service", "--port", "9100", "--write"]) == 0
    text = unit.read_text()
    assert "ExecStart=" in text and text.split("ExecStart=")[1].split("\n")[0].endswith(
        "proxy --port 9100")
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text
    assert "systemctl --user enable --now context-paging-proxy.service" in capsys.readouterr().err
    assert main(["uninstall-proxy", "--service"]) == 0
    assert not unit.exists() and not unit.with_name(unit.name + ".context-paging-undo").exists()


def test_the_launchd_agent_runs_the_proxy_at_load_and_keeps_it_alive(tmp_path):
    text = service.service_text(["/opt/bin/context-paging", "proxy", "--port", "8787"],
                                tmp_path, platform="darwin")
    assert "<string>dev.context-paging.proxy</string>" in text
    assert ("<array>\n    <string>/opt/bin/context-paging</string>\n    <string>proxy</string>"
            "\n    <string>--port</string>\n    <string>8787</string>\n  </array>") in text
    assert "<key>RunAtLoad</key>\n  <true/>" in text and "<key>KeepAlive</key>" in text
    assert service.service_file(tmp_path, "darwin") == (
        tmp_path / "Library" / "LaunchAgents" / "dev.context-paging.proxy.plist")


def test_doctor_reports_every_agents_base_url_whatever_its_port_and_the_registration(
        user_home, tmp_path):
    from context_paging.server.setup import agents

    assert main(["install-proxy", "--client", "claude-code", "--write", "--port", "9001"]) == 0
    assert main(["install-proxy", "--client", "pi", "--write", "--port", "9002"]) == 0
    ok, text = agents.doctor(9003, tmp_path / "data", user_home,
                             {"OPENAI_BASE_URL": "https://api.openai.com/v1"}, cwd=tmp_path)
    assert not ok
    assert ("Claude Code (~/.claude/settings.json): http://127.0.0.1:9001 — another port on "
            "this machine, not the proxy on 9003") in text
    assert "Pi openai (~/.pi/agent/models.json): http://127.0.0.1:9002/v1 — another port" in text
    assert "OPENAI_BASE_URL in this shell: https://api.openai.com/v1 — not through" in text
    assert "Codex (~/.codex/config.toml, provider azure): https://azure.example — not" in text
    assert "Claude Code, every project (~/.claude.json): recovery tools" in text
    assert "agents pointing at it: none" in text
    _, text = agents.doctor(9001, tmp_path / "data", user_home, {}, cwd=tmp_path)
    assert "agents pointing at it: Claude Code (~/.claude/settings.json)" in text


# --- run twice = run once; edits made since are kept ----------------------------------------


@pytest.mark.parametrize("client", ["claude-code", "codex", "pi"])
def test_install_proxy_twice_is_install_proxy_once_byte_for_byte(user_home, client):
    assert main(["install-proxy", "--client", client, "--write"]) == 0
    once = snapshot(user_home)
    assert main(["install-proxy", "--client", client, "--write"]) == 0
    assert snapshot(user_home) == once


EDITS = {  # client -> (file, how the user edits it after install-proxy, what must survive)
    "claude-code": (".claude/settings.json",
                    lambda text: text.replace('"model": "opus"', '"model": "sonnet"'),
                    lambda text: json.loads(text) == {"model": "sonnet", "env": {"FOO": "1"}}),
    "codex": (".codex/config.toml",
              lambda text: text + '\n[profiles.fast]\nmodel = "gpt-5-mini"\n',
              lambda text: tomllib.loads(text)["profiles"] == {"fast": {"model": "gpt-5-mini"}}
              and tomllib.loads(text)["model_provider"] == "azure"),
    "pi": (".pi/agent/models.json",
           lambda text: text.replace('"providers"', '"mine": 1, "providers"', 1),
           lambda text: json.loads(text) == {"mine": 1, "providers": {
               "anthropic": {"baseUrl": "https://a.example"}}}),
}


@pytest.mark.parametrize("client", sorted(EDITS))
def test_an_edit_between_two_installs_survives_uninstall(user_home, client, capsys):
    name, edit, kept = EDITS[client]
    path = user_home / name
    assert main(["install-proxy", "--client", client, "--write"]) == 0
    path.write_text(edit(path.read_text()))
    assert main(["install-proxy", "--client", client, "--write", "--port", "9999"]) == 0
    capsys.readouterr()
    assert main(["uninstall-proxy", "--client", client]) == 0
    assert kept(path.read_text()), path.read_text()
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith(str(path)))
    assert "byte for byte" not in line and "only install-proxy's settings" in line


def test_codex_uninstall_keeps_lines_appended_after_install_and_adds_no_blank_line(user_home):
    config = user_home / ".codex" / "config.toml"
    original = '# mine\nmodel = "gpt-5"\n\nmodel_provider = "azure"\n'
    config.write_text(original)
    assert main(["install-proxy", "--client", "codex", "--write"]) == 0
    appended = '# appended by me\nmodel_reasoning_effort = "high"\n'
    config.write_text(config.read_text() + appended)
    assert main(["install-proxy", "--client", "codex", "--write", "--port", "9999"]) == 0
    assert config.read_text().endswith(appended)  # a second run keeps them too
    assert main(["uninstall-proxy", "--client", "codex"]) == 0
    assert config.read_text() == original + appended


# --- install-config and its undo ----------------------------------------------------------------


@pytest.mark.parametrize("client, name", [("codex", ".codex/config.toml"),
                                          ("claude-code", ".claude.json")])
def test_install_config_twice_then_uninstall_config_gives_the_original_back(user_home, client,
                                                                             name, capsys):
    before = snapshot(user_home)
    assert main(["install-config", "--client", client, "--write"]) == 0
    once = snapshot(user_home)
    assert main(["install-config", "--client", client, "--write"]) == 0
    assert snapshot(user_home) == once
    assert main(["uninstall-config", "--client", client]) == 0  # without --write: a preview
    assert snapshot(user_home) == once
    capsys.readouterr()
    assert main(["uninstall-config", "--client", client, "--write"]) == 0
    assert snapshot(user_home) == before
    assert f"{user_home / name}: restored byte for byte." in capsys.readouterr().out


def test_uninstall_config_keeps_the_entry_install_proxy_still_needs(user_home, capsys):
    config = user_home / ".codex" / "config.toml"
    original = config.read_text()
    assert main(["install-config", "--client", "codex", "--write"]) == 0
    assert main(["install-proxy", "--client", "codex", "--write"]) == 0
    proxied = config.read_text()
    assert main(["uninstall-config", "--client", "codex", "--write"]) == 0
    assert config.read_text() == proxied  # the proxy's set-up registers the same server
    assert main(["uninstall-proxy", "--client", "codex"]) == 0
    assert config.read_text() == original


def test_uninstall_config_takes_back_only_its_entry_from_a_file_edited_since(user_home,
                                                                              tmp_path):
    target = tmp_path / "mcp.json"
    target.write_text('{"mcpServers": {"fs": {"command": "npx"}}}')
    assert main(["install-config", "--client", "cursor", "--config", str(target), "--write",
                 "--name", "paging"]) == 0
    value = json.loads(target.read_text())
    value["mcpServers"]["git"] = {"command": "uvx"}
    target.write_text(json.dumps(value))
    assert main(["uninstall-config", "--client", "cursor", "--config", str(target),
                 "--name", "paging", "--write"]) == 0
    assert json.loads(target.read_text()) == {"mcpServers": {"fs": {"command": "npx"},
                                                             "git": {"command": "uvx"}}}
    assert not Path(str(target) + ".context-paging-undo").exists()


STEPS = {"config": ["install-config", "--client", "codex", "--write"],
         "proxy": ["install-proxy", "--client", "codex", "--write"],
         "unconfig": ["uninstall-config", "--client", "codex", "--write"],
         "unproxy": ["uninstall-proxy", "--client", "codex"]}


@pytest.mark.parametrize("order", [("config", "proxy", "unconfig", "unproxy"),
                                   ("config", "proxy", "unproxy", "unconfig"),
                                   ("proxy", "config", "unconfig", "unproxy"),
                                   ("proxy", "config", "unproxy", "unconfig")])
@pytest.mark.parametrize("edited_after", [0, 1, 2])
def test_both_installs_undone_in_any_order_keep_an_edit_made_in_between(user_home, order,
                                                                        edited_after):
    config = user_home / ".codex" / "config.toml"
    original = config.read_text()
    for step, name in enumerate(order):
        assert main(STEPS[name]) == 0
        if step == edited_after:
            config.write_text(config.read_text() + "# my edit\n")
    assert config.read_text() == original + "# my edit\n"
    assert not (user_home / ".codex" / "config.toml.context-paging-undo").exists()


CODEX_ORIGINALS = [
    "", "# only a comment\n", 'model = "gpt-5"', 'model = "gpt-5"\n\nmodel_provider = "azure"\n',
    'model = "gpt-5"\n\n[profiles.x]\nmodel = "o3"\n\n[tui]\nnotifications = true\n',
    '[model_providers.paging]\nbase_url = "http://old"\nrequest_max_retries = 4\n\n[x]\na = 1\n',
    '[mcp_servers.context-paging]\ncommand = "old"\nstartup_timeout_sec = 20\n',
    'a = 1\nmodel_auto_compact_token_limit = 5000\nb = 2\n\n[t]\nc = 3\n',
]


@pytest.mark.parametrize("original", CODEX_ORIGINALS)
@pytest.mark.parametrize("appended", ["# later\n", 'extra = "x"\n',
                                      '\n[profiles.later]\nmodel = "m"\n'])
def test_codex_install_append_reinstall_uninstall_leaves_the_original_and_the_appended_lines(
        tmp_path, original, appended):
    from context_paging.server.setup import agents, undo

    path = tmp_path / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(original)
    for port in (8787, 9000):
        (change,) = agents.planned_changes("codex", port, tmp_path)
        assert undo.write(change.path, change.text, "install-proxy", change.keys)
        if port == 8787:
            path.write_text(path.read_text() + appended)
    (change,) = agents.planned_changes("codex", 9000, tmp_path)
    assert not undo.write(change.path, change.text, "install-proxy", change.keys)
    assert "only install-proxy's settings" in undo.undo(path, "install-proxy", change.keys)
    ended = original if original.endswith("\n") or not original else original + "\n"
    assert path.read_text() == ended + appended
