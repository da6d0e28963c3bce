"""``install-proxy --service``: a user service that starts the proxy at log-in and restarts it.

With ``ANTHROPIC_BASE_URL`` in an agent's settings, a proxy that is not running means an agent
that cannot reach its model, so the proxy can run as a systemd user unit (Linux) or a launchd
agent (macOS). install-proxy writes the file (recorded like the agents' files, so
uninstall-proxy removes it) and prints the command that enables it; it never starts services
itself.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

from context_paging.server.config import ENV_HOME
from context_paging.server.setup import clients

UNIT = "context-paging-proxy.service"
LABEL = "dev.context-paging.proxy"


def proxy_command(port: int, server_home: str | None, environ: dict[str, str]) -> list[str]:
    command, prefix = clients.server_command()
    home = server_home or environ.get(ENV_HOME)
    words = [command, *prefix]
    if home:
        words += ["--home", os.path.abspath(os.path.expanduser(home))]
    return [*words, "proxy", "--port", str(port)]


def service_file(home: Path, platform: str | None = None) -> Path:
    if (platform or sys.platform) == "darwin":
        return home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    return home / ".config" / "systemd" / "user" / UNIT


def service_text(words: list[str], home: Path, platform: str | None = None) -> str:
    if (platform or sys.platform) == "darwin":
        from xml.sax.saxutils import escape  # it imports urllib.request: only for a plist

        logs = escape(str(home / "Library" / "Logs" / "context-paging-proxy.log"))
        arguments = "".join(f"\n    <string>{escape(w)}</string>" for w in words)
        return f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
  <key>Label</key>
  <string>{LABEL}</string>
  <key>ProgramArguments</key>
  <array>{arguments}
  </array>
  <key>RunAtLoad</key>
  <true/>
  <key>KeepAlive</key>
  <true/>
  <key>StandardErrorPath</key>
  <string>{logs}</string>
</dict>
</plist>
"""
    return f"""[Unit]
Description=context-paging model-API proxy (pages Claude Code, Codex and Pi requests)

[Service]
ExecStart={shlex.join(words)}
Restart=on-failure
RestartSec=2

[Install]
WantedBy=default.target
"""


def enable_hint(path: Path, platform: str | None = None) -> str:
    if (platform or sys.platform) == "darwin":
        return f"launchctl load -w {shlex.quote(str(path))}"
    return f"systemctl --user daemon-reload && systemctl --user enable --now {UNIT}"


def disable_hint(path: Path, platform: str | None = None) -> str:
    if (platform or sys.platform) == "darwin":
        return f"launchctl unload -w {shlex.quote(str(path))}"
    return f"systemctl --user disable --now {UNIT}"
