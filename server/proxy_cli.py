"""The proxy's commands: ``proxy`` (serve), ``run`` (one agent invocation through a proxy on a
free port), ``doctor`` (is it wired up?) and ``install-proxy`` (server/agents.py).

All of them print on stdout and log on stderr; none of them touches the agents' files except
``install-proxy --write``.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from context_paging.server import agents, clients
from context_paging.server.config import Settings
from context_paging.server.proxy import DEFAULT_ANTHROPIC, DEFAULT_OPENAI, Proxy, Upstreams

DEFAULT_PORT = 8787


def add_commands(commands: Any) -> None:
    """Register the proxy's subcommands on the CLI's subparsers."""
    proxy = commands.add_parser("proxy", help="run the local model-API proxy that pages "
                                "Claude Code, Codex and Pi requests")
    _proxy_arguments(proxy)
    proxy.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    proxy.add_argument("--port", type=int, default=DEFAULT_PORT,
                       help=f"port to listen on (default {DEFAULT_PORT})")
    proxy.set_defaults(run=cmd_proxy)

    run = commands.add_parser("run", help="run one agent command through a proxy on a free "
                              "port, e.g. context-paging run -- claude")
    _proxy_arguments(run)
    run.add_argument("child", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    run.set_defaults(run=cmd_run)

    doctor = commands.add_parser("doctor", help="check the proxy is up, the agents point at it "
                                 "and requests are flowing")
    doctor.add_argument("--port", type=int, default=DEFAULT_PORT)
    doctor.set_defaults(run=cmd_doctor)

    install = commands.add_parser("install-proxy", help="print (or --write) the settings that "
                                  "point an agent at the proxy")
    install_arguments(install)
    install.set_defaults(run=cmd_install)


def _proxy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream-anthropic", default=DEFAULT_ANTHROPIC, metavar="URL",
                        help=f"where Anthropic requests go (default {DEFAULT_ANTHROPIC})")
    parser.add_argument("--upstream-openai", default=DEFAULT_OPENAI, metavar="URL",
                        help=f"where OpenAI requests go (default {DEFAULT_OPENAI})")


def make_app(settings: Settings, args: argparse.Namespace) -> tuple[Proxy, Any]:
    """The proxy over this process's History (the ledger and select_context pipeline)."""
    from context_paging.index.proxied import ProxyLog
    from context_paging.server.mcp_server import make_history

    history = make_history(settings)
    history.context  # noqa: B018  # load the tokenizer now, not during the first request
    upstreams = Upstreams(args.upstream_anthropic, args.upstream_openai)
    return Proxy(history.select_context, upstreams, ProxyLog(settings.home),
                 idle=history.idle, paging=settings.get("paging", "enabled"),
                 max_body=settings.get("paging", "max_request_bytes")), history


def _server(app: Proxy, sock: socket.socket):
    import uvicorn

    # Our own logging (stderr); no Server/Date headers added to the provider's reply.
    config = uvicorn.Config(app, lifespan="on", log_config=None, access_log=False,
                            server_header=False, date_header=False, log_level="warning",
                            timeout_graceful_shutdown=5)
    return uvicorn.Server(config)


def listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: without it a reply written in pieces waits for the
    # client's delayed ACK (about 40 ms a request on Linux loopback, measured).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


def cmd_proxy(args: argparse.Namespace, settings: Settings) -> int:
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        print(f"context-paging: cannot listen on {args.host}:{args.port} ({exc.strerror}); "
              "is a proxy already running? Pick another --port", file=sys.stderr)
        return 2
    app, history = make_app(settings, args)
    print(f"context-paging proxy on http://{args.host}:{args.port} → Anthropic "
          f"{args.upstream_anthropic}, OpenAI {args.upstream_openai} (Ctrl-C stops)",
          file=sys.stderr)
    try:
        _server(app, sock).run(sockets=[sock])
    finally:
        history.close()
        sock.close()
    return 0


def child_environment(program: str, url: str, environ: dict[str, str]) -> tuple[dict, list]:
    """Environment and extra arguments that send one agent's requests to ``url``."""
    env = dict(environ)
    extra: list[str] = []
    name = Path(program).name
    if name == "codex":
        # OPENAI_BASE_URL is gone from Codex; the top-level openai_base_url reroutes the
        # built-in provider and keeps its login (specs/model-apis.md §4).
        extra = ["-c", f'openai_base_url="{url}/v1"']
    else:
        env["ANTHROPIC_BASE_URL"] = url
        env["OPENAI_BASE_URL"] = f"{url}/v1"
        if name == "claude":
            env["DISABLE_AUTO_COMPACT"] = "1"  # the proxy pages instead (README)
    return env, extra


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    child = list(args.child)
    if child[:1] == ["--"]:
        child = child[1:]
    if not child:
        print("context-paging: run needs a command, e.g. context-paging run -- claude",
              file=sys.stderr)
        return 2
    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app, history = make_app(settings, args)
    server = _server(app, sock)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()  # the socket already listens: the child can connect at once
    env, extra = child_environment(child[0], url, dict(os.environ))
    print(f"context-paging: {child[0]} through the proxy at {url}", file=sys.stderr)
    try:
        return subprocess.call([child[0], *extra, *child[1:]], env=env)
    except FileNotFoundError:
        print(f"context-paging: command not found: {child[0]}", file=sys.stderr)
        return 127
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        history.close()
        sock.close()


# --- install-proxy and doctor (what they change and check: server/agents.py) -------------


def install_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", required=True, choices=("claude-code", "codex", "pi"))
    parser.add_argument("--port", type=int, default=8787, help="the proxy's port (default 8787)")
    parser.add_argument("--write", action="store_true",
                        help="apply the changes (each file's previous version kept as .bak)")


def cmd_install(args: argparse.Namespace, settings: Settings) -> int:
    home = agents.user_home()
    try:
        changes = agents.planned_changes(args.client, args.port, home)
    except (clients.InstallError, ValueError) as exc:
        print(f"context-paging: {exc}", file=sys.stderr)
        return 2
    for path, text, what in changes:
        if not args.write:
            print(f"# {path}: {what}\n{text}")
            continue
        if path.exists() and path.read_text(encoding="utf-8") == text:
            print(f"{path}: already set up; nothing changed.")
            continue
        existed = path.exists()
        clients._replace(path, text)
        backup = f" (previous file: {path}.bak — move it back to undo)" if existed else ""
        print(f"{path}: {what}{backup}")
    if not args.write:
        print("# Rerun with --write to apply; each file's previous version is kept as .bak.",
              file=sys.stderr)
    print(f"# Start the proxy with: context-paging proxy --port {args.port}", file=sys.stderr)
    return 0


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    ok, text = agents.doctor(args.port, settings.home, agents.user_home(), dict(os.environ))
    print(text)
    return 0 if ok else 1
