"""What ``install-proxy`` and ``doctor`` do: point Claude Code, Codex or Pi at the proxy, and
check it (their commands are in server/proxy/commands.py).

What each agent gets (docs/agents.md, "Setting each agent up"):

- **Claude Code**: ``~/.claude/settings.json`` → ``env.ANTHROPIC_BASE_URL`` (the proxy's origin,
  no ``/v1``), ``env.DISABLE_AUTO_COMPACT = "1"`` and ``permissions.allow`` rules for the
  read-only recovery tools (a headless run refuses an MCP tool it was not allowed); the MCP
  server in ``~/.claude.json`` ``mcpServers`` (what ``claude mcp add --scope user`` writes).
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
original kept for ``uninstall-proxy`` with the keys set (server/setup/undo.py); a file that holds
them already is not written again. TOML is edited as text — only the lines and tables named
above are replaced — and the result must parse before it is written. A file that does not parse
is refused, named, untouched. The MCP entry is the one ``install-config`` writes: user scope, the
recovery tools.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_paging.server.setup import clients, undo
from context_paging.server.setup.toml_text import set_table, set_top_level, toml_string

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
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise clients.InstallError(f"{path} does not parse as JSON ({exc}); nothing was "
                                   "written. Fix it, or move it aside, and run again") from None
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
    keys: list[undo.Key]  # what install-proxy sets there, for uninstall-proxy's reverse edit
    warning: str | None = None  # said before the file is written


CODEX_KEYS: list[undo.Key] = [  # every line codex_config sets
    ("model_provider",), ("model_auto_compact_token_limit",),
    *[("model_providers", PROVIDER, key) for key in ("name", "base_url", "env_key", "wire_api")],
    *clients.codex_mcp_keys(),
]
# The MCP tools a model calls to page history back; all read-only. Claude Code asks before an
# MCP tool runs, and a headless run (``claude -p``) refuses one it was not allowed, so
# install-proxy and install-config allow these (``mcp__<server>__<tool>``).
READ_ONLY_RECOVERY = ("search_history", "browse_history", "load_history",
                      "read_context_output", "recall", "list_sessions")


def allow_rules(name: str = clients.DEFAULT_NAME) -> list[str]:
    return [f"mcp__{name}__{tool}" for tool in READ_ONLY_RECOVERY]


def allow_keys(name: str = clients.DEFAULT_NAME) -> list[undo.Key]:
    """The allow rules as undo keys: entries of the ``permissions.allow`` array."""
    return [("permissions", "allow", rule) for rule in allow_rules(name)]


def with_allow_rules(value: dict[str, Any], name: str = clients.DEFAULT_NAME) -> dict[str, Any]:
    """Claude Code settings with the recovery tools' allow rules added (once, at the end)."""
    permissions = value.get("permissions")
    permissions = dict(permissions) if isinstance(permissions, dict) else {}
    allow = permissions.get("allow")
    allow = list(allow) if isinstance(allow, list) else []
    allow += [rule for rule in allow_rules(name) if rule not in allow]
    return {**value, "permissions": {**permissions, "allow": allow}}


FILES: dict[str, list[tuple[str, list[undo.Key]]]] = {  # per agent: each file and its keys
    "claude-code": [(".claude/settings.json", [("env", "ANTHROPIC_BASE_URL"),
                                                ("env", "DISABLE_AUTO_COMPACT"),
                                                *allow_keys()]),
                    (".claude.json", [("mcpServers", clients.DEFAULT_NAME)])],
    "codex": [(".codex/config.toml", CODEX_KEYS)],
    "pi": [(".pi/agent/models.json", [("providers", "anthropic", "baseUrl"),
                                      ("providers", "openai", "baseUrl")]),
           (".pi/agent/settings.json", [("compaction", "enabled")])],
    "gemini": [(".gemini/.env", [("GOOGLE_GEMINI_BASE_URL",)]),
               (".gemini/settings.json", [("model", "compressionThreshold"),
                                          ("mcpServers", clients.DEFAULT_NAME)])],
    "opencode": [(".config/opencode/opencode.json", [
        ("provider", "anthropic", "options", "baseURL"),
        ("provider", "openai", "options", "baseURL"),
        ("compaction", "auto"), ("compaction", "prune"), ("mcp", clients.DEFAULT_NAME)])],
}


def agent_files(client: str, home: Path) -> list[tuple[Path, list[undo.Key]]]:
    """The files install-proxy changes for ``client`` and the keys it sets in each."""
    if client not in FILES:
        raise clients.InstallError(f"unknown client {client!r}")
    return [(home / name, keys) for name, keys in FILES[client]]


def statusline_command(server_home: str | None = None) -> str:
    """The command Claude Code's ``statusLine`` runs: this install's ``statusline``."""
    command, prefix = clients.server_command()
    home = ["--home", os.path.abspath(os.path.expanduser(server_home))] if server_home else []
    return shlex.join([command, *prefix, *home, "statusline"])


def is_our_statusline(value: Any) -> bool:
    command = value.get("command") if isinstance(value, dict) else None
    return isinstance(command, str) and command.endswith(" statusline") and any(
        word in command for word in ("context-paging", "context_paging"))


def planned_changes(client: str, port: int, home: Path,
                    server_home: str | None = None, statusline: bool = False) -> list[Change]:
    """What install-proxy writes for ``client``, file by file (``statusline``: Claude Code's
    status line too, docs/live-view.md)."""
    url = f"http://127.0.0.1:{port}"
    files = agent_files(client, home)
    if client == "codex":
        path, keys = files[0]
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise clients.InstallError(f"{path} does not parse as TOML ({exc}); nothing was "
                                       "written. Fix it, or move it aside, and run again"
                                       ) from None
        return [Change(path, codex_config(text, f"{url}/v1", server_home),
                       f"model_provider = {PROVIDER} ({url}/v1); auto-compaction limit raised; "
                       f"mcp_servers.{clients.DEFAULT_NAME} (the recovery tools)",
                       keys, _provider_warning(text))]
    if client == "gemini":
        return gemini_changes(url, files, server_home)
    if client == "opencode":
        return opencode_changes(url, files, server_home)
    if client == "claude-code":
        name = clients.DEFAULT_NAME
        settings: dict[str, Any] = {"env": {"ANTHROPIC_BASE_URL": url,
                                            "DISABLE_AUTO_COMPACT": "1"}}
        what = (f"env.ANTHROPIC_BASE_URL = {url}; env.DISABLE_AUTO_COMPACT = 1; "
                f"permissions.allow: the read-only recovery tools of {name}")
        if statusline:
            settings["statusLine"] = {"type": "command",
                                      "command": statusline_command(server_home)}
            what += "; statusLine (context-paging statusline)"
            files[0] = (files[0][0], [*files[0][1], ("statusLine",)])
        patches = [(settings, what),
                   ({"mcpServers": {name: mcp_entry(server_home=server_home)}},
                    f"mcpServers.{name} (the recovery tools, for every project)")]
    else:
        patches = [(pi_providers(url), "providers.anthropic/openai.baseUrl → the proxy"),
                   ({"compaction": {"enabled": False}}, "compaction.enabled = false")]
    changes = [Change(path, _json(_merge(_load_json(path), patch)), what, keys)
               for (path, keys), (patch, what) in zip(files, patches, strict=True)]
    if client == "claude-code":  # the allow rules join the array the user may already have
        path = changes[0].path
        value = with_allow_rules(_merge(_load_json(path), patches[0][0]))
        changes[0] = Change(path, _json(value), changes[0].what, changes[0].keys)
    return changes


INSTALL_CONFIG = "install-config"  # the owner of the allow rules install-config writes


def install_config(args: Any, settings: Any) -> int:
    """``install-config``: the MCP client's entry (server/setup/clients.py); for Claude Code
    with ``--write`` also the allow rules for the read-only recovery tools in
    ``~/.claude/settings.json``, taken back by ``uninstall-config``."""
    status = clients.run(args, settings)
    if status != 0 or args.client != "claude-code" or not args.write:
        return status
    path = user_home() / ".claude" / "settings.json"
    name = args.name.strip()
    try:
        text = _json(with_allow_rules(_load_json(path), name))
        if undo.write(path, text, INSTALL_CONFIG, allow_keys(name)):
            print(f"Allowed {name!r}'s read-only recovery tools in {path}.")
    except (clients.InstallError, OSError, ValueError) as exc:
        print(f"context-paging: {path}: {exc}; the allow rules were not written",
              file=sys.stderr)
        return 2
    return 0


def uninstall_config(args: Any, settings: Any) -> int:
    """``uninstall-config``: the entry, and for Claude Code the allow rules install-config
    added to ``~/.claude/settings.json``."""
    status = clients.run_uninstall(args, settings)
    if status != 0 or args.client != "claude-code":
        return status
    path = user_home() / ".claude" / "settings.json"
    try:
        said = undo.undo(path, INSTALL_CONFIG, allow_keys(args.name.strip()), apply=args.write)
    except (OSError, ValueError) as exc:
        print(f"context-paging: {path}: {exc}; left as it is", file=sys.stderr)
        return 2
    if "not changed by" not in said:
        print(said)
    return 0


def _provider_warning(text: str) -> str | None:
    try:
        current = tomllib.loads(text).get("model_provider") if text.strip() else None
    except tomllib.TOMLDecodeError:
        return None  # planned_changes refuses it, naming the file
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


# --- doctor (its set-up checks: server/setup/checks.py) ----------------------------------------


def doctor(port: int, data_home: Path, home: Path, environ: dict[str, str],
           cwd: Path | None = None) -> tuple[bool, str]:
    """The report, and whether every check passed: each broken line starts with ``✗`` and a
    single one fails the whole (a set-up with no request through it yet is not broken)."""
    from context_paging.index.home.proxied import conversation_stats, last_proxied
    from context_paging.server.setup import checks as setup_checks

    _, health = setup_checks.proxy_health(port)
    cwd = cwd or Path.cwd()
    lines = [health, *setup_checks.unreadable(home, cwd)]
    urls, agents = setup_checks.base_url_lines(port, home, environ)
    lines.append("agents pointing at it: " + ", ".join(agents) if agents else
                 f"{setup_checks.BROKEN} agents pointing at it: none — run: context-paging "
                 "install-proxy --client claude-code|codex|pi|gemini|opencode")
    if urls:
        lines += ["model API base URLs:", *urls]
    lines += ["MCP server registered:", *setup_checks.registrations(home, cwd)]
    lines.append(statusline_report(home))
    last = last_proxied(data_home)
    tally = conversation_stats(data_home, last) if last else None
    if tally:
        lines.append(f"requests: {tally.get('requests', 0):,} in {last}, the latest at "
                     f"{tally.get('updated', '?')} ({tally.get('last_mode', '?')})")
    else:  # a set-up made a moment ago has none yet: not a failure
        lines.append("requests: none proxied yet with this home")
    lines += paging_report(data_home)[1]
    return not any(setup_checks.broken(line) for line in lines), "\n".join(lines)


SHOWN_CONVERSATIONS = 8


def statusline_report(home: Path) -> str:
    """Whether Claude Code's status line runs ``context-paging statusline`` (not a failure
    when it does not: it is optional)."""
    path = home / ".claude" / "settings.json"
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("statusLine")
    except (OSError, ValueError, AttributeError):
        value = None
    if is_our_statusline(value):
        return f"Claude Code status line: {value['command']} ({path})"
    if isinstance(value, dict) and value.get("command"):
        return f"Claude Code status line: another command ({str(value['command'])[:80]})"
    return ("Claude Code status line: not set (optional: context-paging install-proxy "
            "--client claude-code --statusline --write)")


def paging_report(data_home: Path) -> tuple[bool, list[str]]:
    """Per proxied conversation, the newest first: how many requests were paged, sent whole
    within the budget, or failed open (forwarded as received), with the last reason. A
    conversation whose every request failed open is never paged: that fails the check."""
    from context_paging.index.home.proxied import inband_counts, tallies

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
        calls, returned = inband_counts(tally)
        if calls:
            line += f"; {calls:,} recovery call{'' if calls == 1 else 's'} in band, " \
                    f"{returned:,} returned something"
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


def gemini_changes(url: str, files: list[tuple[Path, list[undo.Key]]],
                   server_home: str | None = None) -> list[Change]:
    """Gemini CLI: its ``.env`` names the proxy, its settings turn compression off and
    register the MCP server (``mcpServers``, the shape Claude Desktop reads)."""
    (env, env_keys), (path, keys) = files
    text = env.read_text(encoding="utf-8") if env.exists() else ""
    name = clients.DEFAULT_NAME
    patch = {"model": {"compressionThreshold": 1},
             "mcpServers": {name: mcp_entry("claude-desktop", server_home)}}
    return [Change(env, env_line(text, GEMINI_BASE_URL, url), f"{GEMINI_BASE_URL}={url}",
                   env_keys),
            Change(path, _json(_merge(_load_json(path), patch)),
                   f"model.compressionThreshold = 1; mcpServers.{name} (the recovery tools)",
                   keys)]


def opencode_changes(url: str, files: list[tuple[Path, list[undo.Key]]],
                     server_home: str | None = None) -> list[Change]:
    """OpenCode: its Anthropic and OpenAI providers sent to the proxy, compaction and pruning
    off, and the MCP server as a local command."""
    [(path, keys)] = files
    return [Change(path, _json(_merge(_load_json(path), opencode_patch(url, server_home))),
                   f"provider.anthropic/openai.options.baseURL → {url}/v1; compaction off; "
                   f"mcp.{clients.DEFAULT_NAME} (the recovery tools)", keys)]


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
    """A ``.env`` file's text with ``key=value``: the key's line replaced, else added
    (uninstall-proxy takes it back: server/setup/undo.py)."""
    return undo.set_env_line(text, key, f"{key}={value}")
