"""What ``install-proxy`` and ``doctor`` do: point Claude Code, Codex or Pi at the proxy, and
check it (their commands are in server/proxy/commands.py).

What each agent gets (docs/agents.md, "Setting each agent up"):

- **Claude Code**: ``~/.claude/settings.json`` → ``env.ANTHROPIC_BASE_URL`` (the proxy's origin,
  no ``/v1``) and ``env.DISABLE_AUTO_COMPACT = "1"``; the MCP server in ``~/.claude.json``
  ``mcpServers`` (what ``claude mcp add --scope user`` writes), the recovery tools.
- **Codex**: ``~/.codex/config.toml`` → ``model_provider = "paging"`` and a
  ``[model_providers.paging]`` table (``base_url`` with ``/v1``, ``wire_api = "responses"``,
  ``env_key = "OPENAI_API_KEY"``), ``model_auto_compact_token_limit`` set very high (Codex has
  no off switch) and ``[mcp_servers.context-paging]``.
- **Pi**: ``~/.pi/agent/models.json`` → the built-in ``anthropic`` and ``openai`` providers'
  ``baseUrl`` re-pointed (models and auth stay), and ``~/.pi/agent/settings.json`` →
  ``compaction.enabled = false``. Pi has no MCP client; the recovery commands are the CLI's.
  ``run -- pi`` uses a temporary agent directory instead (:func:`pi_run_directory`).
- **Gemini CLI**: ``~/.gemini/.env`` → ``GOOGLE_GEMINI_BASE_URL`` (the proxy's origin; the CLI
  reads that file at start), ``~/.gemini/settings.json`` → ``model.compressionThreshold = 1``
  (its compression never fires: the proxy pages instead) and the MCP server in
  ``mcpServers``.
- **OpenCode**: ``~/.config/opencode/opencode.json`` → ``provider.anthropic`` and
  ``provider.openai`` ``options.baseURL`` (the proxy with ``/v1``), ``compaction.auto`` and
  ``compaction.prune`` off, and the MCP server in ``mcp`` (a ``local`` command).

Without ``--write`` the changes are printed. With it each file is rewritten atomically, its
original kept once for ``uninstall-proxy`` (server/setup/undo.py). TOML is edited as text — only the
lines and tables named above are replaced — and the result must parse before it is written.
The MCP entry is the one ``install-config`` writes: user scope, the recovery tools.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_paging.server.setup import clients, undo
from context_paging.server.setup.toml_text import (
    set_table,
    set_top_level,
    table_pattern,
    toml_string,
    top_level_pattern,
)

PROVIDER = "paging"
CODEX_COMPACT_LIMIT = 1_000_000_000


def user_home(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("HOME") or Path.home())


def mcp_entry(client: str = "claude-code", server_home: str | None = None,
              environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The MCP server entry install-proxy and install-config both write: the model's
    recovery tools (the proxy, not the agent, calls select_context), home passed on."""
    command, prefix = clients.server_command()
    return clients.server_entry(client, command, prefix, server_home,
                                os.environ if environ is None else environ, "recovery")


def _load_json(path: Path) -> dict[str, Any]:
    if not path.exists() or not path.read_text(encoding="utf-8").strip():
        return {}
    value = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(value, dict):
        raise clients.InstallError(f"{path} does not hold a JSON object; nothing was written")
    return value


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Change:
    path: Path
    text: str  # the file as install-proxy writes it
    what: str
    reverse: undo.Reverse  # uninstall-proxy's way back when the file changed since
    warning: str | None = None  # said before the file is written


def _json_change(path: Path, patch: dict[str, Any], what: str, *keys: tuple[str, ...]) -> Change:
    return Change(path, _json(_merge(_load_json(path), patch)), what, undo.json_keys(*keys))


def planned_changes(client: str, port: int, home: Path,
                    server_home: str | None = None) -> list[Change]:
    """What install-proxy writes for ``client``, file by file."""
    url = f"http://127.0.0.1:{port}"
    if client == "claude-code":
        name = clients.DEFAULT_NAME
        return [_json_change(home / ".claude" / "settings.json",
                             {"env": {"ANTHROPIC_BASE_URL": url, "DISABLE_AUTO_COMPACT": "1"}},
                             f"env.ANTHROPIC_BASE_URL = {url}; env.DISABLE_AUTO_COMPACT = 1",
                             ("env", "ANTHROPIC_BASE_URL"), ("env", "DISABLE_AUTO_COMPACT")),
                _json_change(home / ".claude.json",
                             {"mcpServers": {name: mcp_entry(server_home=server_home)}},
                             f"mcpServers.{name} (the recovery tools, for every project)",
                             ("mcpServers", name))]
    if client == "codex":
        path = home / ".codex" / "config.toml"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return [Change(path, codex_config(text, f"{url}/v1", server_home),
                       f"model_provider = {PROVIDER} ({url}/v1); auto-compaction limit raised; "
                       f"mcp_servers.{clients.DEFAULT_NAME} (the recovery tools)",
                       codex_reverse, _provider_warning(text))]
    if client == "pi":
        agent = home / ".pi" / "agent"
        return [_json_change(agent / "models.json", pi_providers(url),
                             "providers.anthropic/openai.baseUrl → the proxy",
                             ("providers", "anthropic", "baseUrl"),
                             ("providers", "openai", "baseUrl")),
                _json_change(agent / "settings.json", {"compaction": {"enabled": False}},
                             "compaction.enabled = false", ("compaction", "enabled"))]
    if client == "gemini":
        return gemini_changes(url, home, server_home)
    if client == "opencode":
        return opencode_changes(url, home, server_home)
    raise clients.InstallError(f"unknown client {client!r}")


def _provider_warning(text: str) -> str | None:
    try:
        current = tomllib.loads(text).get("model_provider") if text.strip() else None
    except tomllib.TOMLDecodeError:
        return None  # codex_config refuses it with the parser's message
    if current in (None, PROVIDER):
        return None
    return (f"Codex's model_provider is {current!r}; install-proxy replaces it with "
            f"{PROVIDER!r}, which sends requests to OpenAI's API through the proxy "
            f"(uninstall-proxy puts {current!r} back)")


def pi_providers(url: str) -> dict[str, Any]:
    """The part of Pi's models.json that re-points its built-in providers at the proxy."""
    return {"providers": {"anthropic": {"baseUrl": url}, "openai": {"baseUrl": f"{url}/v1"}}}


def pi_run_directory(url: str, environ: dict[str, str], scratch: Path) -> Path:
    """A Pi agent directory for one ``context-paging run -- pi``: Pi ignores the base-URL
    variables and reads its providers from ``models.json`` in the directory
    ``PI_CODING_AGENT_DIR`` names. ``scratch`` gets a link to every entry of the user's own
    directory (sessions, auth, settings …) and a ``models.json`` with the built-in providers
    re-pointed; the user's files are not changed. Sessions land in the user's own folder."""
    real = Path(environ.get("PI_CODING_AGENT_DIR") or user_home(environ) / ".pi" / "agent")
    (real / "sessions").mkdir(parents=True, exist_ok=True)
    for entry in real.iterdir():
        if entry.name != "models.json":
            (scratch / entry.name).symlink_to(entry)
    models = _merge(_load_json(real / "models.json"), pi_providers(url))
    (scratch / "models.json").write_text(_json(models), encoding="utf-8")
    return scratch


def _json(value: dict[str, Any]) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def codex_config(text: str, base_url: str, server_home: str | None = None) -> str:
    """Codex's config.toml with the proxy as its model provider and the MCP server added."""
    text = set_top_level(text, "model_provider", f"model_provider = {toml_string(PROVIDER)}")
    text = set_top_level(text, "model_auto_compact_token_limit",
                          f"model_auto_compact_token_limit = {CODEX_COMPACT_LIMIT}")
    text = set_table(text, f"model_providers.{PROVIDER}", "\n".join([
        'name = "context-paging proxy"', f"base_url = {toml_string(base_url)}",
        'env_key = "OPENAI_API_KEY"', 'wire_api = "responses"']))
    return clients.codex_mcp(text, mcp_entry("codex", server_home))


def codex_reverse(current: str, original: str | None) -> str | None:
    """Codex's config.toml without install-proxy's lines and tables: each put back as the
    original had it, or removed."""
    before = original or ""
    header = re.search(r"^\s*\[", before, re.M)
    top = before[:header.start()] if header else before
    text = current
    for key in ("model_provider", "model_auto_compact_token_limit"):
        line = top_level_pattern(key).search(top)
        if line:
            text = set_top_level(text, key, line.group(0).rstrip("\n"))
        else:
            split = re.search(r"^\s*\[", text, re.M)
            head, rest = (text[:split.start()], text[split.start():]) if split else (text, "")
            text = top_level_pattern(key).sub("", head, count=1) + rest
    for name in (f"model_providers.{PROVIDER}", f"mcp_servers.{clients.DEFAULT_NAME}"):
        table = table_pattern(name).search(before)
        found = table_pattern(name).search(text)
        if found:
            text = text[:found.start()] + (table.group(0) if table else "") + text[found.end():]
    text = re.sub(r"\n{3,}", "\n\n", text)
    tomllib.loads(text)
    return None if original is None and not text.strip() else text


# --- doctor (its set-up checks: server/setup/checks.py) ----------------------------------------


def doctor(port: int, data_home: Path, home: Path, environ: dict[str, str],
           cwd: Path | None = None) -> tuple[bool, str]:
    from context_paging.index.proxied import conversation_stats, last_proxied
    from context_paging.server.setup import checks as setup_checks

    up, health = setup_checks.proxy_health(port)
    lines = [health]
    urls, agents = setup_checks.base_url_lines(port, home, environ)
    lines.append("agents pointing at it: " + (", ".join(agents) if agents else
                 "none — run: context-paging install-proxy --client claude-code|codex|pi|"
                 "gemini|opencode"))
    if urls:
        lines += ["model API base URLs:", *urls]
    lines += ["MCP server registered:", *setup_checks.registrations(home, cwd or Path.cwd())]
    last = last_proxied(data_home)
    tally = conversation_stats(data_home, last) if last else None
    if tally:
        lines.append(f"requests: {tally.get('requests', 0):,} in {last}, the latest at "
                     f"{tally.get('updated', '?')} ({tally.get('last_mode', '?')})")
    else:
        lines.append("requests: none proxied yet with this home")
    paging_ok, paging = paging_report(data_home)
    lines += paging
    return up and bool(agents) and bool(tally) and paging_ok, "\n".join(lines)


SHOWN_CONVERSATIONS = 8


def paging_report(data_home: Path) -> tuple[bool, list[str]]:
    """Per proxied conversation, the newest first: how many requests were paged, sent whole
    within the budget, or failed open (forwarded as received), with the last reason. A
    conversation whose every request failed open is never paged: that fails the check."""
    from context_paging.index.proxied import tallies

    found = tallies(data_home)
    if not found:
        return True, []
    lines, ok = ["paging per conversation (newest first):"], True
    for tally in found[:SHOWN_CONVERSATIONS]:
        requests, failed = int(tally.get("requests", 0)), int(tally.get("failed_open", 0))
        modes = tally.get("modes") if isinstance(tally.get("modes"), dict) else {}
        paged = sum(n for m, n in modes.items() if m not in ("within_budget", "disabled"))
        whole = int(modes.get("within_budget", 0))
        line = (f"{tally.get('session', '?')} ({tally.get('api', '?')}): {requests:,} "
                f"request{'' if requests == 1 else 's'}"
                f" — {paged:,} paged, {whole:,} within budget, {failed:,} failed open")
        if requests and failed == requests:
            ok = False
            line = f"✗ {line}; it is never paged: {tally.get('last_fail_open', '?')}"
        elif failed:
            line += f"; the last because {tally.get('last_fail_open', '?')}"
        lines.append("  " + line)
    if len(found) > SHOWN_CONVERSATIONS:
        lines.append(f"  … and {len(found) - SHOWN_CONVERSATIONS:,} older conversations")
    return ok, lines


# --- Gemini CLI and OpenCode ------------------------------------------------------------------

GEMINI_BASE_URL = "GOOGLE_GEMINI_BASE_URL"


def gemini_changes(url: str, home: Path, server_home: str | None = None) -> list[Change]:
    """Gemini CLI: its ``.env`` names the proxy, its settings turn compression off and
    register the MCP server (``mcpServers``, the shape Claude Desktop reads)."""
    folder = home / ".gemini"
    env = folder / ".env"
    text = env.read_text(encoding="utf-8") if env.exists() else ""
    name = clients.DEFAULT_NAME
    entry = mcp_entry("claude-desktop", server_home)
    return [Change(env, env_line(text, GEMINI_BASE_URL, url), f"{GEMINI_BASE_URL}={url}",
                   env_reverse(GEMINI_BASE_URL)),
            _json_change(folder / "settings.json",
                         {"model": {"compressionThreshold": 1}, "mcpServers": {name: entry}},
                         f"model.compressionThreshold = 1; mcpServers.{name} (the recovery "
                         "tools)", ("model", "compressionThreshold"), ("mcpServers", name))]


def opencode_changes(url: str, home: Path, server_home: str | None = None) -> list[Change]:
    """OpenCode: its Anthropic and OpenAI providers sent to the proxy, compaction and pruning
    off, and the MCP server as a local command."""
    name = clients.DEFAULT_NAME
    return [_json_change(home / ".config" / "opencode" / "opencode.json",
                         opencode_patch(url, server_home),
                         f"provider.anthropic/openai.options.baseURL → {url}/v1; compaction "
                         f"off; mcp.{name} (the recovery tools)",
                         ("provider", "anthropic", "options", "baseURL"),
                         ("provider", "openai", "options", "baseURL"),
                         ("compaction", "auto"), ("compaction", "prune"), ("mcp", name))]


def opencode_patch(url: str, server_home: str | None = None, mcp: bool = True) -> dict[str, Any]:
    """The part of opencode.json install-proxy writes; ``run -- opencode`` passes the same
    without the MCP server (``mcp`` false), as ``run`` registers none for any agent."""
    patch: dict[str, Any] = {"provider": {"anthropic": {"options": {"baseURL": f"{url}/v1"}},
                                          "openai": {"options": {"baseURL": f"{url}/v1"}}},
                             "compaction": {"auto": False, "prune": False}}
    if mcp:
        entry = mcp_entry("claude-desktop", server_home)
        local: dict[str, Any] = {"type": "local", "command": [entry["command"], *entry["args"]],
                                 "enabled": True}
        if entry.get("env"):
            local["environment"] = entry["env"]
        patch["mcp"] = {clients.DEFAULT_NAME: local}
    return patch


def env_line(text: str, key: str, value: str) -> str:
    """A ``.env`` file's text with ``key=value``: the key's line replaced, else added."""
    line = f"{key}={value}"
    pattern = re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(key)}[ \t]*=.*$", re.M)
    if pattern.search(text):
        return pattern.sub(lambda _: line, text, count=1)
    return text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"


def env_reverse(key: str) -> undo.Reverse:
    """uninstall-proxy for a ``.env`` line: the original's line for ``key`` put back, or the
    line removed (and a file install-proxy made, left empty, removed)."""
    pattern = re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(key)}[ \t]*=.*(?:\n|$)", re.M)

    def reverse(current: str, original: str | None) -> str | None:
        before = pattern.search(original or "")
        if before:
            text = pattern.sub(lambda _: before.group(0), current, count=1)
        else:
            text = pattern.sub("", current, count=1)
        return None if original is None and not text.strip() else text

    return reverse
