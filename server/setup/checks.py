"""``doctor``'s set-up checks: where each agent sends its model requests, whether the MCP server
is registered with it, whether each agent's file parses, and whether the proxy answers. Each
returns report lines, a broken one marked with a leading ``✗`` (:data:`BROKEN`); none changes
anything."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from context_paging.server.endpoints import HEALTH_PATH
from context_paging.server.setup import clients

BROKEN = "✗"


def broken(line: str) -> bool:
    return line.lstrip().startswith(BROKEN)


def proxy_health(port: int) -> tuple[bool, str]:
    """Whether our proxy answers its health path on ``port`` (the standard library's client:
    doctor starts without loading an HTTP stack)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3.0)
    try:
        connection.request("GET", HEALTH_PATH)
        reply = connection.getresponse()
        status = reply.status
        body = json.loads(reply.read()) if status == 200 else {}
    except (OSError, http.client.HTTPException, ValueError):
        return False, (f"{BROKEN} proxy on port {port}: not answering — start it with: "
                       f"context-paging proxy --port {port}")
    finally:
        connection.close()
    if isinstance(body, dict) and body.get("service") == "context-paging proxy":
        return True, f"proxy on port {port}: up"
    return False, (f"{BROKEN} proxy on port {port}: something else answers there (HTTP "
                   f"{status}); pick another --port")


def _json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def agent_files(home: Path, cwd: Path) -> list[tuple[str, Path]]:
    """Every file doctor reads an agent's set-up from: (the agent, the file)."""
    return [("Claude Code", home / ".claude" / "settings.json"),
            ("Claude Code", home / ".claude.json"), ("Claude Code", cwd / ".mcp.json"),
            ("Codex", home / ".codex" / "config.toml"),
            ("Pi", home / ".pi" / "agent" / "models.json"),
            ("Pi", home / ".pi" / "agent" / "settings.json"),
            ("Gemini CLI", home / ".gemini" / "settings.json"),
            ("OpenCode", home / ".config" / "opencode" / "opencode.json")]


def unreadable(home: Path, cwd: Path) -> list[str]:
    """A broken line per agent file that is there but does not parse (its checks read it as
    empty, so without this line it would look merely unset)."""
    lines = []
    for agent, path in agent_files(home, cwd):
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            lines.append(f"{BROKEN} {path}: cannot be read ({exc}); {agent} cannot either")
            continue
        try:
            value = tomllib.loads(text) if path.suffix == ".toml" else (
                json.loads(text) if text.strip() else {})
        except ValueError as exc:
            lines.append(f"{BROKEN} {path} does not parse ({exc}); {agent} cannot read it: "
                         "fix it, then rerun install-proxy")
            continue
        if not isinstance(value, dict):
            lines.append(f"{BROKEN} {path} does not parse as an object of settings; {agent} "
                         "cannot read it: fix it, then rerun install-proxy")
    return lines


def _get(value: Any, *path: str) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def base_urls(home: Path, environ: dict[str, str]) -> list[tuple[str, str | None]]:
    """(where, base URL or None) for every place an agent reads its model API's address."""
    claude = _json(home / ".claude" / "settings.json")
    codex = _toml(home / ".codex" / "config.toml")
    provider = codex.get("model_provider")
    codex_url = _get(codex, "model_providers", provider, "base_url") if isinstance(
        provider, str) else None
    pi = _json(home / ".pi" / "agent" / "models.json")
    return [
        ("ANTHROPIC_BASE_URL in this shell", environ.get("ANTHROPIC_BASE_URL")),
        ("OPENAI_BASE_URL in this shell", environ.get("OPENAI_BASE_URL")),
        ("Claude Code (~/.claude/settings.json)", _get(claude, "env", "ANTHROPIC_BASE_URL")),
        (f"Codex (~/.codex/config.toml, provider {provider or 'openai'})",
         codex_url or codex.get("openai_base_url")),
        ("Pi anthropic (~/.pi/agent/models.json)", _get(pi, "providers", "anthropic", "baseUrl")),
        ("Pi openai (~/.pi/agent/models.json)", _get(pi, "providers", "openai", "baseUrl")),
        *_more_base_urls(home, environ),
    ]


def _more_base_urls(home: Path, environ: dict[str, str]) -> list[tuple[str, str | None]]:
    """Gemini CLI's (the shell, then its ``.env``) and OpenCode's providers."""
    opencode = _json(home / ".config" / "opencode" / "opencode.json")
    return [
        ("GOOGLE_GEMINI_BASE_URL in this shell", environ.get("GOOGLE_GEMINI_BASE_URL")),
        ("Gemini CLI (~/.gemini/.env)", _env_value(home / ".gemini" / ".env",
                                                   "GOOGLE_GEMINI_BASE_URL")),
        ("OpenCode anthropic (~/.config/opencode/opencode.json)",
         _get(opencode, "provider", "anthropic", "options", "baseURL")),
        ("OpenCode openai (~/.config/opencode/opencode.json)",
         _get(opencode, "provider", "openai", "options", "baseURL")),
    ]


def _env_value(path: Path, key: str) -> str | None:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        name, sep, value = line.strip().removeprefix("export ").partition("=")
        if sep and name.strip() == key:
            return value.strip().strip("'\"")
    return None


def _port(url: str) -> int | None:
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def _local(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def base_url_lines(port: int, home: Path, environ: dict[str, str]) -> tuple[list[str], list[str]]:
    """The report's lines, and the places that point at the proxy on ``port``."""
    lines, pointing = [], []
    for where, url in base_urls(home, environ):
        if not isinstance(url, str) or not url:
            continue
        if _local(url) and _port(url) == port:
            pointing.append(where)
            lines.append(f"  {where}: {url} — this proxy")
        elif _local(url) and _port(url) is None:
            lines.append(f"  {BROKEN} {where}: {url} — not a valid port; rerun install-proxy "
                         f"--port {port}")
        elif _local(url):
            lines.append(f"  {where}: {url} — another port on this machine, not the proxy on "
                         f"{port} (rerun install-proxy with --port {_port(url)} or {port})")
        else:
            lines.append(f"  {where}: {url} — not through the proxy")
    return lines, pointing


def _opencode_entry(entry: Any) -> dict[str, Any] | None:
    """OpenCode's ``local`` entry (one ``command`` list) in the others' shape."""
    command = entry.get("command") if isinstance(entry, dict) else None
    if not (isinstance(command, list) and command):
        return None
    return {"command": command[0], "args": command[1:]}


def registrations(home: Path, cwd: Path) -> list[str]:
    """Where the MCP server is registered, and whether its command is still there."""
    name = clients.DEFAULT_NAME
    found = [
        ("Claude Code, every project (~/.claude.json)",
         _get(_json(home / ".claude.json"), "mcpServers", name)),
        (f"Claude Code, this project ({cwd / '.mcp.json'})",
         _get(_json(cwd / ".mcp.json"), "mcpServers", name)),
        ("Codex (~/.codex/config.toml)", _get(_toml(home / ".codex" / "config.toml"),
                                              "mcp_servers", name)),
        ("Gemini CLI (~/.gemini/settings.json)",
         _get(_json(home / ".gemini" / "settings.json"), "mcpServers", name)),
        ("OpenCode (~/.config/opencode/opencode.json)",
         _opencode_entry(_get(_json(home / ".config" / "opencode" / "opencode.json"), "mcp",
                              name))),
    ]
    lines = []
    for where, entry in found:
        if not isinstance(entry, dict):
            continue
        command = entry.get("command")
        args = entry.get("args") if isinstance(entry.get("args"), list) else []
        tools = args[args.index("--tools") + 1] if "--tools" in args[:-1] else "all"
        missing = isinstance(command, str) and os.path.isabs(command) and not os.path.exists(
            command)
        lines.append(f"  {BROKEN} {where}: {tools} tools — its command {command} is gone; "
                     "rerun install-proxy" if missing else f"  {where}: {tools} tools")
    return lines or ["  none — run: context-paging install-proxy --client claude-code|codex|"
                     "gemini|opencode (Pi has no MCP client: its recovery commands are the CLI's)"]
