"""``context-paging install-config``, ``uninstall-config`` and ``config``: set-up, not serving.

``install-config`` prints (or, with ``--write``, merges) the stdio entry that starts this server
in Claude Desktop, Claude Code, Cursor, VS Code or Gemini CLI. Hosts start servers with a
minimal ``PATH`` (docs/clients.md), so the entry names the console script by its absolute path.
The shapes, as each client documents them:

- Claude Desktop: ``claude_desktop_config.json`` → ``{"mcpServers": {name: {command, args}}}``,
  in ``~/Library/Application Support/Claude`` (macOS), ``%APPDATA%\\Claude`` (Windows) or
  ``~/.config/Claude`` (Linux builds);
- Claude Code: ``~/.claude.json`` → ``{"mcpServers": {name: {"type": "stdio", …}}}`` (user
  scope, what ``claude mcp add --scope user`` writes and install-proxy registers; ``--config
  .mcp.json`` for one project);
- Codex: ``~/.codex/config.toml`` → a ``[mcp_servers.<name>]`` table (``command``, ``args``);
- Cursor: ``~/.cursor/mcp.json`` (or a project's ``.cursor/mcp.json``) → ``{"mcpServers": …}``;
- VS Code: the workspace's ``.vscode/mcp.json`` → ``{"servers": {name: {"type": "stdio", …}}}``;
- Gemini CLI: ``~/.gemini/settings.json`` → ``{"mcpServers": {name: {command, args}}}`` (its
  other settings stay).

``--write`` never loses what the file already holds: other servers and other keys stay, a file
that is not a JSON object (or whose servers key is not an object) is refused untouched, the new
file replaces the old one atomically, and the same entry is not written twice. The original is
kept with the keys set (server/setup/undo.py), so ``uninstall-config --write`` takes back only
that entry and keeps whatever else changed in the file since.

``render_config`` is the text of ``context-paging config``: every resolved setting and the source
it came from (flag, environment, config.toml, default), so "why is my budget 6000?" has an answer.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_paging.server.config import ENV_HOME, SCHEMA, Settings
from context_paging.server.setup import undo

DEFAULT_NAME = "context-paging"
SCRIPT = "context-paging"
OWNER = "install-config"  # whose keys, in the undo record


@dataclass(frozen=True)
class ClientSpec:
    title: str
    key: str  # the top-level object that maps server names to entries
    typed: bool  # whether entries carry "type": "stdio"
    scope: str  # where the default file lives, for the help text


CLIENTS: dict[str, ClientSpec] = {
    "claude-desktop": ClientSpec("Claude Desktop", "mcpServers", False, "per user"),
    "claude-code": ClientSpec("Claude Code", "mcpServers", True, "per user, every project"),
    "codex": ClientSpec("Codex", "mcp_servers", False, "per user"),
    "cursor": ClientSpec("Cursor", "mcpServers", False, "per user"),
    "vscode": ClientSpec("VS Code", "servers", True, "this workspace"),
    "gemini": ClientSpec("Gemini CLI", "mcpServers", False, "per user"),
}


class InstallError(Exception):
    """A config file we must not touch; the message says why and what to do."""


def default_path(
    client: str,
    cwd: Path | None = None,
    platform: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Path:
    """Where ``client`` reads its MCP servers by default (project files are under ``cwd``)."""
    cwd = cwd or Path.cwd()
    platform = platform or sys.platform
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME") or Path.home())
    if client == "claude-code":  # user scope, as install-proxy registers it
        return home / ".claude.json"
    if client == "codex":
        return Path(environ.get("CODEX_HOME") or home / ".codex") / "config.toml"
    if client == "vscode":
        return cwd / ".vscode" / "mcp.json"
    if client == "cursor":
        return home / ".cursor" / "mcp.json"
    if client == "gemini":
        return home / ".gemini" / "settings.json"
    if platform == "darwin":
        folder = home / "Library" / "Application Support" / "Claude"
    elif platform == "win32":
        folder = Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
    else:  # Claude Desktop has no official Linux build; community builds read this path
        folder = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
    return folder / "claude_desktop_config.json"


def server_command() -> tuple[str, list[str]]:
    """The absolute command that starts this server, and the arguments before ``serve``.

    The console script on ``PATH`` if there is one, else the one installed beside this Python,
    else this Python running the CLI module (an uninstalled checkout).
    """
    found = shutil.which(SCRIPT)
    if found:
        return os.path.abspath(found), []
    bin_dir = Path(sys.executable).parent
    for name in (SCRIPT, f"{SCRIPT}.exe"):
        if (bin_dir / name).is_file():
            return str((bin_dir / name).absolute()), []
    return os.path.abspath(sys.executable), ["-m", "context_paging"]


def server_entry(
    client: str,
    command: str,
    prefix: list[str],
    home: str | None,
    environ: Mapping[str, str],
    tools: str = "recovery",
) -> dict[str, Any]:
    """One server entry in ``client``'s shape.

    The home is written once: a ``--home`` given here wins over ``$CONTEXT_PAGING_HOME`` (as it
    does on the command line), else the environment's home is passed on; either way absolute.
    ``tools`` is the tool set ``serve`` lists; chat clients never call select_context.
    """
    args = [*prefix]
    if home:
        args += ["--home", _absolute(home)]
    args.append("serve")
    if tools != "all":
        args += ["--tools", tools]
    entry: dict[str, Any] = {"type": "stdio"} if CLIENTS[client].typed else {}
    entry.update(command=command, args=args)
    if not home and environ.get(ENV_HOME):
        entry["env"] = {ENV_HOME: _absolute(environ[ENV_HOME])}
    return entry


def _absolute(path: str) -> str:
    # The host starts the server from its own working directory and does not expand "~".
    return os.path.abspath(os.path.expanduser(path))


def config_document(client: str, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    return {CLIENTS[client].key: {name: entry}}


def claude_mcp_add(name: str, entry: dict[str, Any]) -> str:
    """The equivalent ``claude mcp add`` command line (options go before the name)."""
    words = ["claude", "mcp", "add", "--scope", "user", "--transport", "stdio"]
    for key, value in entry.get("env", {}).items():
        words += ["--env", f"{key}={value}"]
    words += [name, "--", entry["command"], *entry["args"]]
    return shlex.join(words)


def merge_into(path: Path, key: str, name: str, entry: dict[str, Any]) -> bool:
    """Put ``entry`` under ``key``/``name`` in the JSON file at ``path``, keeping the rest.

    Returns False when the file already holds exactly this entry (nothing is written). Raises
    :class:`InstallError`, leaving the file as it was, when it is not a JSON object or ``key``
    is not an object.
    """
    existing: dict[str, Any] = {}
    if path.exists():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InstallError(f"{path} could not be read ({exc}); nothing was written") from None
        if text.strip():
            try:
                existing = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InstallError(
                    f"{path} is not valid JSON ({exc}); nothing was written. Fix the file (JSON "
                    "with comments is not supported here) or add the entry by hand: run without "
                    "--write to print it"
                ) from None
        if not isinstance(existing, dict):
            raise InstallError(f"{path} does not hold a JSON object; nothing was written")
    servers = existing.get(key, {})
    if not isinstance(servers, dict):
        raise InstallError(
            f"{path}: {key!r} is a {type(servers).__name__}, not an object of servers; "
            "nothing was written"
        )
    if servers.get(name) == entry:
        return False
    existing[key] = {**servers, name: entry}
    text = json.dumps(existing, indent=2, ensure_ascii=False) + "\n"
    return undo.write(path, text, OWNER, [(key, name)])


def codex_mcp_keys() -> list[undo.Key]:
    """The lines :func:`codex_mcp` sets, as undo keys."""
    return [("mcp_servers", DEFAULT_NAME, key) for key in ("command", "args", "env")]


def codex_mcp(text: str, entry: dict[str, Any]) -> str:
    """Codex's config.toml with the ``[mcp_servers.context-paging]`` table set to ``entry``."""
    import tomllib

    from context_paging.server.setup.toml_text import set_table, toml_string

    args = ", ".join(toml_string(a) for a in entry["args"])
    body = f"command = {toml_string(entry['command'])}\nargs = [{args}]"
    if entry.get("env"):
        pairs = ", ".join(f"{toml_string(k)} = {toml_string(v)}"
                          for k, v in entry["env"].items())
        body += f"\nenv = {{ {pairs} }}"
    text = set_table(text, f"mcp_servers.{DEFAULT_NAME}", body)
    tomllib.loads(text)  # never write a file Codex cannot read
    return text


def _merge_codex(path: Path, name: str, entry: dict[str, Any]) -> bool:
    """``merge_into`` for Codex's TOML: only the ``[mcp_servers.<name>]`` table is set."""
    import tomllib

    if name != DEFAULT_NAME:
        raise InstallError(f"Codex's table is named {DEFAULT_NAME!r}; --name is not supported")
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    try:
        new = codex_mcp(text, entry)
    except tomllib.TOMLDecodeError as exc:
        raise InstallError(f"{path} is not valid TOML ({exc}); nothing was written") from None
    if new == text:
        return False
    return undo.write(path, new, OWNER, codex_mcp_keys())


# --- the install-config command -----------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", required=True, choices=tuple(CLIENTS),
                        help="the MCP host to configure")
    parser.add_argument("--write", action="store_true",
                        help="merge the entry into the client's config file (its original is "
                        "kept for uninstall-config) instead of printing it")
    parser.add_argument("--config", metavar="PATH", type=Path,
                        help="the config file to write (default: the client's usual location)")
    parser.add_argument("--name", default=DEFAULT_NAME,
                        help=f"the server's name in the client (default: {DEFAULT_NAME})")
    parser.add_argument("--home", dest="server_home", metavar="DIR",
                        help="the data directory the configured server uses (passed as --home)")
    parser.add_argument("--tools", choices=("recovery", "all"), default="recovery",
                        help="the tools the server lists: the model's recovery tools (default; "
                        "chat clients never call select_context) or all, for an agent host")


def run(
    args: argparse.Namespace, settings: Settings, emit: Callable[[str], object] = print
) -> int:
    name = args.name.strip()
    if not name:
        print("context-paging: --name must not be empty", file=sys.stderr)
        return 2
    client = CLIENTS[args.client]
    command, prefix = server_command()
    home = args.server_home or getattr(args, "home", None)
    entry = server_entry(args.client, command, prefix, home, os.environ,
                         getattr(args, "tools", "recovery"))
    path = args.config or default_path(args.client)
    if not args.write:
        if args.client == "codex":
            emit(codex_mcp("", entry).strip())
        else:
            emit(json.dumps(config_document(args.client, name, entry), indent=2,
                            ensure_ascii=False))
        sys.stdout.flush()  # the hint below goes to stderr; keep the two in order on a terminal
        hint = f"# {client.title} reads this from {path} ({client.scope}); rerun with --write"
        print(hint + " to merge it there.", file=sys.stderr)
        if args.client == "claude-code":
            print(f"# Or let Claude Code add it: {claude_mcp_add(name, entry)}", file=sys.stderr)
        return 0
    try:
        if args.client == "codex":
            changed = _merge_codex(path, name, entry)
        else:
            changed = merge_into(path, client.key, name, entry)
    except (InstallError, ValueError) as exc:  # ValueError: a damaged undo record
        print(f"context-paging: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"context-paging: could not write {path} ({exc})", file=sys.stderr)
        return 2
    if not changed:
        emit(f"{path} already has this {name!r} entry; nothing changed.")
        return 0
    emit(f"Added {name!r} to {path}. Restart {client.title} to load it.")
    print(f"# To undo: context-paging uninstall-config --client {args.client}"
          + (f" --config {path}" if args.config else "")
          + (f" --name {name}" if name != DEFAULT_NAME else "") + " --write", file=sys.stderr)
    return 0


# --- the uninstall-config command ---------------------------------------------------------------


def add_uninstall_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", required=True, choices=tuple(CLIENTS),
                        help="the MCP host whose install-config entry to take back")
    parser.add_argument("--write", action="store_true",
                        help="take it back (without: say what would be done)")
    parser.add_argument("--config", metavar="PATH", type=Path,
                        help="the config file install-config wrote (default: the client's usual "
                        "location)")
    parser.add_argument("--name", default=DEFAULT_NAME,
                        help=f"the server's name in the client (default: {DEFAULT_NAME})")


def run_uninstall(args: argparse.Namespace, settings: Settings,
                  emit: Callable[[str], object] = print) -> int:
    """Take back install-config's entry: the file's original byte for byte when nothing else
    changed it since, else only the entry (server/setup/undo.py)."""
    name = args.name.strip()
    if not name or (args.client == "codex" and name != DEFAULT_NAME):
        print(f"context-paging: --name must be a server's name ({DEFAULT_NAME!r} for Codex)",
              file=sys.stderr)
        return 2
    keys = codex_mcp_keys() if args.client == "codex" else [(CLIENTS[args.client].key, name)]
    path = args.config or default_path(args.client)
    try:
        emit(undo.undo(path, OWNER, keys, apply=args.write))
    except (OSError, ValueError) as exc:
        print(f"context-paging: {path}: {exc}; left as it is", file=sys.stderr)
        return 2
    return 0


# --- the config command -------------------------------------------------------------------------


def render_config(settings: Settings) -> str:
    """Every resolved setting as ``section.key = value``, with where it came from."""
    config_file = settings.home / "config.toml"
    lines = [
        f"home = {_toml(settings.home)}",
        f"config file = {_toml(config_file)}"
        + ("" if config_file.exists() else "  (not present: defaults and environment only)"),
        "",
    ]
    rows = []
    for section, keys in SCHEMA.items():
        for key in keys:
            value = settings.values[section][key]
            shown = _toml(value)
            if section == "paging" and key == "trim_to_tokens" and value is None:
                budget = settings.values["paging"]["token_budget"]
                shown = f"(not set: 5/8 of token_budget = {max(1, budget * 5 // 8)})"
            rows.append((f"{section}.{key} = {shown}",
                         settings.origins.get(f"{section}.{key}", "default")))
    width = max(len(setting) for setting, _ in rows)
    lines += [f"{setting.ljust(width)}  # {origin}" for setting, origin in rows]
    if settings.warnings:
        lines += ["", "warnings:"] + [f"  - {message}" for message in settings.warnings]
    return "\n".join(lines)


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if value is None:
        return "(not set)"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)
