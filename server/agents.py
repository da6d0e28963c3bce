"""What ``install-proxy`` and ``doctor`` do: point Claude Code, Codex or Pi at the proxy, and
check it (their commands are in server/proxy_cli.py).

What each agent gets (docs/agents.md, "Setting each agent up"):

- **Claude Code**: ``~/.claude/settings.json`` → ``env.ANTHROPIC_BASE_URL`` (the proxy's origin,
  no ``/v1``) and ``env.DISABLE_AUTO_COMPACT = "1"``; the MCP server in ``~/.claude.json``
  ``mcpServers`` (what ``claude mcp add --scope user`` writes).
- **Codex**: ``~/.codex/config.toml`` → ``model_provider = "paging"`` and a
  ``[model_providers.paging]`` table (``base_url`` with ``/v1``, ``wire_api = "responses"``,
  ``env_key = "OPENAI_API_KEY"``), ``model_auto_compact_token_limit`` set very high (Codex has
  no off switch) and ``[mcp_servers.context-paging]``.
- **Pi**: ``~/.pi/agent/models.json`` → the built-in ``anthropic`` and ``openai`` providers'
  ``baseUrl`` re-pointed (models and auth stay), and ``~/.pi/agent/settings.json`` →
  ``compaction.enabled = false``. Pi has no MCP client; the recovery commands are the CLI's.
  ``run -- pi`` uses a temporary agent directory instead (:func:`pi_run_directory`).

Without ``--write`` the changes are printed. With it each file is rewritten atomically and the
previous one kept as ``<file>.bak`` (undo: move it back). TOML is edited as text — only the lines
and tables named above are replaced — and the result must parse before it is written.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from context_paging.server import clients
from context_paging.server.endpoints import HEALTH_PATH

PROVIDER = "paging"
CODEX_COMPACT_LIMIT = 1_000_000_000


def user_home(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("HOME") or Path.home())


def _mcp_entry() -> dict[str, Any]:
    command, prefix = clients.server_command()
    return {"type": "stdio", "command": command, "args": [*prefix, "serve"]}


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


def planned_changes(client: str, port: int, home: Path) -> list[tuple[Path, str, str]]:
    """(file, new text, what changes) for each file ``client`` reads."""
    url = f"http://127.0.0.1:{port}"
    if client == "claude-code":
        settings = home / ".claude" / "settings.json"
        state = home / ".claude.json"
        patch = {"env": {"ANTHROPIC_BASE_URL": url, "DISABLE_AUTO_COMPACT": "1"}}
        mcp = {"mcpServers": {clients.DEFAULT_NAME: _mcp_entry()}}
        return [(settings, _json(_merge(_load_json(settings), patch)),
                 f"env.ANTHROPIC_BASE_URL = {url}; env.DISABLE_AUTO_COMPACT = 1"),
                (state, _json(_merge(_load_json(state), mcp)),
                 f"mcpServers.{clients.DEFAULT_NAME} (the recovery tools)")]
    if client == "codex":
        path = home / ".codex" / "config.toml"
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        return [(path, codex_config(text, f"{url}/v1"),
                 f"model_provider = {PROVIDER} ({url}/v1); auto-compaction limit raised; "
                 f"mcp_servers.{clients.DEFAULT_NAME}")]
    if client == "pi":
        models = home / ".pi" / "agent" / "models.json"
        settings = home / ".pi" / "agent" / "settings.json"
        return [(models, _json(_merge(_load_json(models), pi_providers(url))),
                 "providers.anthropic/openai.baseUrl → the proxy"),
                (settings, _json(_merge(_load_json(settings), {"compaction": {"enabled": False}})),
                 "compaction.enabled = false")]
    raise clients.InstallError(f"unknown client {client!r}")


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


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def _set_top_level(text: str, key: str, line: str) -> str:
    """Replace ``key = …`` before the first table header, or insert ``line`` at the top."""
    header = re.search(r"^\s*\[", text, re.M)
    top, rest = (text[:header.start()], text[header.start():]) if header else (text, "")
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=.*$", re.M)
    if pattern.search(top):
        top = pattern.sub(line, top, count=1)
    else:
        top = line + "\n" + top
    return top + rest


def _set_table(text: str, name: str, body: str) -> str:
    """Replace the ``[name]`` table (up to the next header) or append it."""
    pattern = re.compile(rf"^\[{re.escape(name)}\]\s*$.*?(?=^\s*\[|\Z)", re.M | re.S)
    table = f"[{name}]\n{body}\n"
    if pattern.search(text):
        return pattern.sub(lambda _: table + "\n", text, count=1)
    return text.rstrip("\n") + ("\n\n" if text.strip() else "") + table


def codex_config(text: str, base_url: str) -> str:
    """Codex's config.toml with the proxy as its model provider and the MCP server added."""
    entry = _mcp_entry()
    text = _set_top_level(text, "model_provider", f"model_provider = {_toml_string(PROVIDER)}")
    text = _set_top_level(text, "model_auto_compact_token_limit",
                          f"model_auto_compact_token_limit = {CODEX_COMPACT_LIMIT}")
    text = _set_table(text, f"model_providers.{PROVIDER}", "\n".join([
        'name = "context-paging proxy"', f"base_url = {_toml_string(base_url)}",
        'env_key = "OPENAI_API_KEY"', 'wire_api = "responses"']))
    args = ", ".join(_toml_string(a) for a in entry["args"])
    text = _set_table(text, f"mcp_servers.{clients.DEFAULT_NAME}",
                      f"command = {_toml_string(entry['command'])}\nargs = [{args}]")
    tomllib.loads(text)  # never write a file Codex cannot read
    return text


# --- doctor -------------------------------------------------------------------------------------


def _points_at(port: int, home: Path, environ: dict[str, str]) -> list[str]:
    """Which agent settings name the proxy's port."""
    needle = f":{port}"
    found = []
    if needle in environ.get("ANTHROPIC_BASE_URL", ""):
        found.append("ANTHROPIC_BASE_URL in this shell")
    files = {"Claude Code": home / ".claude" / "settings.json",
             "Codex": home / ".codex" / "config.toml",
             "Pi": home / ".pi" / "agent" / "models.json"}
    for agent, path in files.items():
        try:
            if needle in path.read_text(encoding="utf-8"):
                found.append(f"{agent} ({path})")
        except OSError:
            continue
    return found


def _health(port: int) -> bool:
    """Whether our proxy answers its health path on ``port`` (the standard library's client:
    doctor starts without loading an HTTP stack)."""
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=3.0)
    try:
        connection.request("GET", HEALTH_PATH)
        reply = connection.getresponse()
        body = json.loads(reply.read()) if reply.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return False
    finally:
        connection.close()
    return isinstance(body, dict) and body.get("service") == "context-paging proxy"


def doctor(port: int, data_home: Path, home: Path, environ: dict[str, str]) -> tuple[bool, str]:
    from context_paging.index.proxied import conversation_stats, last_proxied

    lines = []
    up = _health(port)
    lines.append(f"proxy on port {port}: " + ("up" if up else
                 f"not answering — start it with: context-paging proxy --port {port}"))
    agents = _points_at(port, home, environ)
    lines.append("agents pointing at it: " + (", ".join(agents) if agents else
                 "none — run: context-paging install-proxy --client claude-code|codex|pi"))
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
