"""Setting agents up for the proxy: install-proxy (print, --write keeping originals), run (one
child through a proxy on a free port) and doctor."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from context_paging.server.cli import main
from context_paging.server.setup import agents, undo

from tests.fake_provider import FakeProvider, Served
from tests.test_proxy import Stack, make_home


@pytest.fixture
def user_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    return home


def test_install_proxy_prints_and_changes_nothing_without_write(user_home, capsys):
    assert main(["install-proxy", "--client", "claude-code", "--port", "9911"]) == 0
    out = capsys.readouterr().out
    assert '"ANTHROPIC_BASE_URL": "http://127.0.0.1:9911"' in out
    assert '"DISABLE_AUTO_COMPACT": "1"' in out and '"context-paging"' in out
    assert not (user_home / ".claude").exists() and not (user_home / ".claude.json").exists()


def test_install_proxy_for_claude_code_keeps_existing_settings_and_their_original(user_home):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"model": "opus", "env": {"FOO": "1"}}))
    (user_home / ".claude.json").write_text(json.dumps({"numStartups": 3,
                                                        "mcpServers": {"other": {"command": "x"}}}))
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 0
    value = json.loads(settings.read_text())
    assert value == {"model": "opus", "env": {"FOO": "1", "DISABLE_AUTO_COMPACT": "1",
                                              "ANTHROPIC_BASE_URL": "http://127.0.0.1:8787"},
                     "permissions": {"allow": agents.allow_rules()}}
    original = json.loads(undo.record_path(settings).read_text())["original"]
    assert json.loads(original)["env"] == {"FOO": "1"}
    state = json.loads((user_home / ".claude.json").read_text())
    assert state["numStartups"] == 3 and set(state["mcpServers"]) == {"other", "context-paging"}
    assert state["mcpServers"]["context-paging"]["args"][-3:] == ["serve", "--tools", "recovery"]
    # a second run finds everything in place
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 0
    assert json.loads(settings.read_text()) == value


def test_install_proxy_for_codex_edits_only_its_keys_and_tables(user_home):
    config = user_home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('model = "gpt-5"\nmodel_provider = "openai"\n\n[model_providers.paging]\n'
                      'base_url = "http://old"\n\n[profiles.fast]\nmodel = "gpt-5-mini"\n')
    assert main(["install-proxy", "--client", "codex", "--write", "--port", "9000"]) == 0
    value = tomllib.loads(config.read_text())
    assert value["model"] == "gpt-5" and value["model_provider"] == "paging"
    assert value["model_providers"]["paging"] == {
        "name": "context-paging proxy", "base_url": "http://127.0.0.1:9000/v1",
        "env_key": "OPENAI_API_KEY", "wire_api": "responses"}
    assert value["profiles"] == {"fast": {"model": "gpt-5-mini"}}
    assert value["model_auto_compact_token_limit"] == agents.CODEX_COMPACT_LIMIT
    assert value["mcp_servers"]["context-paging"]["args"][-3:] == ["serve", "--tools", "recovery"]
    assert "http://old" in json.loads(undo.record_path(config).read_text())["original"]


def test_install_proxy_for_pi_repoints_the_built_in_providers_and_turns_compaction_off(user_home):
    assert main(["install-proxy", "--client", "pi", "--write"]) == 0
    agent = user_home / ".pi" / "agent"
    models = json.loads((agent / "models.json").read_text())
    assert models["providers"]["anthropic"] == {"baseUrl": "http://127.0.0.1:8787"}
    assert models["providers"]["openai"] == {"baseUrl": "http://127.0.0.1:8787/v1"}
    assert json.loads((agent / "settings.json").read_text()) == {"compaction": {"enabled": False}}


def test_install_proxy_refuses_a_file_that_is_not_a_json_object(user_home, capsys):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("[1, 2]")
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 2
    assert settings.read_text() == "[1, 2]"


def test_run_sends_one_child_through_a_proxy_and_stops_it(tmp_path, capfd):
    provider = FakeProvider()
    with Served(provider) as upstream:
        home = make_home(tmp_path)
        script = ("import os, urllib.request; base = os.environ['ANTHROPIC_BASE_URL']; "
                  "req = urllib.request.Request(base + '/v1/messages', method='POST', "
                  "data=b'{\"model\": \"m\", \"max_tokens\": 5, \"messages\": "
                  "[{\"role\": \"user\", \"content\": \"hi\"}]}', "
                  "headers={'x-api-key': 'k', 'content-type': 'application/json'}); "
                  "print(urllib.request.urlopen(req).status, base)")
        code = main(["--home", str(home), "run", "--upstream-anthropic", upstream.url, "--",
                     sys.executable, "-c", script])
    assert code == 0
    out = capfd.readouterr().out
    assert out.startswith("200 http://127.0.0.1:")
    assert [r.path for r in provider.requests] == ["/v1/messages"]
    assert (home / "proxy" / "last.json").exists()


def test_doctor_reports_proxy_up_agent_pointing_and_requests_flowing(tmp_path, user_home):
    stack = Stack(make_home(tmp_path))
    try:
        port = stack.proxy.port
        ok, text = agents.doctor(port, stack.home, user_home, {})
        assert not ok and "proxy on port" in text and ": up" in text
        assert "none — run: context-paging install-proxy" in text
        assert "none proxied yet" in text
        assert main(["install-proxy", "--client", "claude-code", "--write",
                     "--port", str(port)]) == 0
        stack.anthropic().messages.create(model="m", max_tokens=5,
                                          messages=[{"role": "user", "content": "hi"}])
        ok, text = agents.doctor(port, stack.home, user_home, {})
        assert ok, text
        assert "Claude Code" in text and "requests: 1 in ledger:cc-anon-" in text
    finally:
        stack.close()
    ok, text = agents.doctor(port, stack.home, user_home, {})
    assert not ok and "not answering" in text


def test_run_points_each_agent_at_the_proxy_its_own_way():
    from context_paging.server.proxy.commands import child_environment

    env, extra = child_environment("/usr/bin/claude", "http://127.0.0.1:5", {"PATH": "/bin"})
    assert extra == [] and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:5"
    assert env["DISABLE_AUTO_COMPACT"] == "1" and env["PATH"] == "/bin"
    env, extra = child_environment("codex", "http://127.0.0.1:5", {})
    assert extra == ["-c", 'openai_base_url="http://127.0.0.1:5/v1"']
    assert "ANTHROPIC_BASE_URL" not in env


# --- numbers are checked by the parser ---------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["proxy", "--port", "99999"], ["proxy", "--port", "-1"], ["proxy", "--port", "0"],
    ["doctor", "--port", "65536"], ["install-proxy", "--client", "codex", "--port", "99999"],
    ["install-proxy", "--service", "--port", "x"], ["view", "--no-browser", "--port", "99999"],
])
def test_a_port_out_of_range_is_refused_in_one_line_before_anything_runs(user_home, capsys,
                                                                        argv):
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--write"] if argv[0] == "install-proxy" else argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --port: {argv[-1]!r} is not a port (1-65535)" in err
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("context-paging")
    assert list(user_home.iterdir()) == []  # install-proxy wrote nothing


# --- doctor: the exit status means something is broken, and the broken line is marked ----------


def test_doctor_passes_a_correct_set_up_before_its_first_request(tmp_path, user_home):
    stack = Stack(make_home(tmp_path))
    try:
        port = stack.proxy.port
        assert main(["install-proxy", "--client", "claude-code", "--write",
                     "--port", str(port)]) == 0
        ok, text = agents.doctor(port, stack.home, user_home, {})
    finally:
        stack.close()
    assert ok, text
    assert "requests: none proxied yet" in text and "✗" not in text
    ok, text = agents.doctor(port, stack.home, user_home, {})
    assert not ok
    assert [line for line in text.splitlines() if line.startswith("✗")] == [
        line for line in text.splitlines() if "not answering" in line]


@pytest.mark.parametrize("name, text", [(".claude/settings.json", '{"env": {'),
                                        (".codex/config.toml", "model = \n"),
                                        (".pi/agent/models.json", "[1"),
                                        (".claude.json", "{,}")])
def test_doctor_names_an_agent_file_that_does_not_parse(tmp_path, user_home, name, text):
    path = user_home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    ok, report = agents.doctor(1, tmp_path / "data", user_home, {}, cwd=tmp_path)
    assert not ok
    assert any(line.startswith("✗") and str(path) in line and "does not parse" in line
               for line in report.splitlines()), report


@pytest.mark.parametrize("client, name, text", [
    ("claude-code", ".claude/settings.json", '{"env": {'),
    ("codex", ".codex/config.toml", "model = \n"),
    ("pi", ".pi/agent/settings.json", "{"),
])
def test_install_proxy_names_the_file_that_does_not_parse(user_home, capsys, client, name,
                                                          text):
    path = user_home / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    assert main(["install-proxy", "--client", client, "--write"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "nothing was written" in err and "Traceback" not in err
    assert path.read_text() == text


def test_doctor_marks_an_agent_pointed_at_a_port_that_cannot_exist(tmp_path, user_home):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:99999"}}')
    ok, text = agents.doctor(8787, tmp_path / "data", user_home, {}, cwd=tmp_path)
    assert not ok and "--port None" not in text
    assert ("  ✗ Claude Code (~/.claude/settings.json): http://127.0.0.1:99999 — not a valid "
            "port; rerun install-proxy --port 8787") in text.splitlines()


def test_claude_code_may_run_the_read_only_recovery_tools_and_uninstall_takes_that_back(
        user_home):
    settings = user_home / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"permissions": {"allow": ["Bash(ls:*)", "mcp__context-paging__recall"]}}
    settings.write_text(json.dumps(mine))
    assert main(["install-proxy", "--client", "claude-code", "--write"]) == 0
    allow = json.loads(settings.read_text())["permissions"]["allow"]
    assert allow[:2] == mine["permissions"]["allow"]  # kept, each rule once
    assert sorted(allow[1:]) == sorted(agents.allow_rules())
    assert "mcp__context-paging__search_history" in allow
    # the user changes the file meanwhile: only install-proxy's own rules and keys go back
    value = json.loads(settings.read_text())
    value["permissions"]["allow"].append("Read")
    value["model"] = "opus"
    settings.write_text(json.dumps(value))
    assert main(["uninstall-proxy", "--client", "claude-code"]) == 0
    after = json.loads(settings.read_text())
    assert after == {"permissions": {"allow": ["Bash(ls:*)", "mcp__context-paging__recall",
                                               "Read"]}, "model": "opus"}


def test_install_config_for_claude_code_allows_the_recovery_tools_too(user_home):
    config = user_home / ".claude.json"
    assert main(["install-config", "--client", "claude-code", "--write"]) == 0
    assert "context-paging" in json.loads(config.read_text())["mcpServers"]
    settings = user_home / ".claude" / "settings.json"
    assert json.loads(settings.read_text()) == {"permissions": {"allow": agents.allow_rules()}}
    assert main(["uninstall-config", "--client", "claude-code", "--write"]) == 0
    assert not settings.exists()  # install-config had created it
