"""The real agents under test: pinned versions, where they are installed, and how each is run
non-interactively against a base URL, directly or through the proxy.

Every run gets its own HOME (the agent's settings and session files), its own
CONTEXT_PAGING_HOME and a work folder holding the task's files; the provider is on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.e2e import install_agents, task

FAKE_KEYS = {"ANTHROPIC_API_KEY": "sk-ant-e2e-fake-key", "OPENAI_API_KEY": "sk-e2e-fake-key",
             "GEMINI_API_KEY": "gm-e2e-fake-key"}
# OpenCode installs a plugin package from the npm registry on every run: a dead address here
DEAD_REGISTRY = "http://127.0.0.1:9"


def cache_dir() -> Path:
    return install_agents.default_cache()


def not_ready() -> str | None:
    """Why the real agents cannot run here (None: they can)."""
    if shutil.which("node") is None:
        return "node is not on PATH"
    wrong = install_agents.missing(cache_dir())
    if wrong:
        held = ", ".join(f"{p}@{install_agents.PINS[p]} (found {v or 'nothing'})"
                         for p, v in wrong.items())
        return f"not installed in {cache_dir()}: {held}"
    return None


def binary(name: str) -> str:
    return str(cache_dir() / "node_modules" / ".bin" / name)


@dataclass(frozen=True)
class Agent:
    """One agent and model: ``model`` None is the agent's own default."""

    name: str  # claude | codex | pi | gemini | opencode
    model: str | None
    budget: int  # the paging budget in tokens for this agent's runs
    pi_provider: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name} {self.model or '(default model)'}"

    def argv(self) -> list[str]:
        """The agent's own command line for the task (no base URL in it)."""
        model = self.model
        if self.name == "claude":
            return [binary("claude"), "-p", task.PROMPT, "--allowedTools", "Bash",
                    *(["--model", model] if model else [])]
        if self.name == "codex":
            return [binary("codex"), "exec", "--skip-git-repo-check",
                    "--dangerously-bypass-approvals-and-sandbox",
                    *(["-m", model] if model else []), task.PROMPT]
        if self.name == "gemini":
            return [binary("gemini"), "-p", task.PROMPT, "--approval-mode", "yolo",
                    *(["--model", model] if model else [])]
        if self.name == "opencode":
            return [binary("opencode"), "run", *(["-m", model] if model else []), task.PROMPT]
        provider = ["--provider", self.pi_provider] if self.pi_provider else []
        return [binary("pi"), "-p", *provider, *(["--model", model] if model else []),
                task.PROMPT]


# The budgets leave each agent's standing input (Claude Code's system prompt and tools are
# 20–30k tokens; Codex's ~15k; Pi's ~2k) room for a few steps, so paging starts mid-run.
AGENTS = [
    Agent("claude", None, 40_000),
    Agent("claude", "claude-sonnet-4-5", 40_000),
    Agent("codex", None, 30_000),
    Agent("codex", "gpt-5.1-codex", 30_000),
    Agent("pi", None, 20_000),
    Agent("pi", "gpt-5.1-codex", 20_000, pi_provider="openai"),
    # Gemini CLI's system prompt and 15 tools are ~12k tokens; OpenCode's ~8k
    Agent("gemini", None, 30_000),
    Agent("gemini", "gemini-2.5-flash", 30_000),
    Agent("opencode", None, 24_000),
    Agent("opencode", "openai/gpt-5.1", 24_000),
]


def base_environment(home: Path, data: Path) -> dict[str, str]:
    """A clean environment: this PATH, the run's HOME and data home, fake keys, no proxies,
    and Claude Code's switch for its telemetry and update checks."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
           "CONTEXT_PAGING_HOME": str(data), "TERM": "dumb", "NO_COLOR": "1",
           "LANG": "C.UTF-8", "NO_PROXY": "127.0.0.1,localhost",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **FAKE_KEYS,
           # Gemini CLI runs headless only in a trusted folder; OpenCode's plugin install
           "GEMINI_CLI_TRUST_WORKSPACE": "true", "npm_config_registry": DEAD_REGISTRY}
    return env


def quiet_settings(home: Path) -> None:
    """Codex's own update check and analytics off, before anything else writes its config."""
    folder = home / ".codex"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.toml").write_text(
        "check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n")
    gemini = home / ".gemini"
    gemini.mkdir(parents=True, exist_ok=True)
    (gemini / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True}, "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False}}))
    opencode = home / ".config" / "opencode"
    opencode.mkdir(parents=True, exist_ok=True)
    (opencode / "opencode.json").write_text(json.dumps({
        "$schema": "https://opencode.ai/config.json", "autoupdate": False,
        "share": "disabled"}))


def point_directly(agent: Agent, home: Path, url: str, env: dict[str, str]) -> list[str]:
    """Settings that send ``agent`` straight to ``url``; returns extra arguments."""
    if agent.name == "claude":
        env["ANTHROPIC_BASE_URL"] = url
        return []
    if agent.name == "codex":
        return ["-c", f'openai_base_url="{url}/v1"']
    if agent.name == "gemini":
        env["GOOGLE_GEMINI_BASE_URL"] = url
        return []
    if agent.name == "opencode":
        write_opencode_providers(home, url)
        return []
    write_pi_models(home, url)
    return []


def write_opencode_providers(home: Path, url: str) -> None:
    """OpenCode's providers sent to ``url`` in its own config (its compaction off, as
    install-proxy sets it, so the direct run is the same agent)."""
    path = home / ".config" / "opencode" / "opencode.json"
    config = json.loads(path.read_text())
    config["provider"] = {"anthropic": {"options": {"baseURL": f"{url}/v1"}},
                          "openai": {"options": {"baseURL": f"{url}/v1"}}}
    config["compaction"] = {"auto": False, "prune": False}
    path.write_text(json.dumps(config))


def write_pi_models(home: Path, url: str) -> None:
    folder = home / ".pi" / "agent"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "models.json").write_text(json.dumps({"providers": {
        "anthropic": {"baseUrl": url}, "openai": {"baseUrl": f"{url}/v1"}}}))
    (folder / "settings.json").write_text(json.dumps({"compaction": {"enabled": False}}))


def with_extra(argv: list[str], extra: list[str]) -> list[str]:
    """Codex takes ``-c`` after ``exec``; the others take nothing extra."""
    if not extra:
        return argv
    return [argv[0], argv[1], *extra, *argv[2:]]
