"""The proxy's commands: ``proxy`` (serve), ``run`` (one agent invocation through a proxy on a
free port), ``doctor`` (is it wired up?) and ``install-proxy`` (server/setup/agents.py).

All of them print on stdout and log on stderr; none of them touches the agents' files except
``install-proxy --write``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from context_paging.index.home import private
from context_paging.server import heap
from context_paging.server.config import Settings
from context_paging.server.endpoints import DEFAULT_ANTHROPIC, DEFAULT_GEMINI, DEFAULT_OPENAI
from context_paging.server.setup import agents, clients, service, undo

if TYPE_CHECKING:  # the HTTP stack loads only for the commands that serve
    from context_paging.server.proxy.app import Proxy

DEFAULT_PORT = 8787
CLIENTS = ("claude-code", "codex", "pi", "gemini", "opencode")
OWNER = "install-proxy"  # whose keys, in the undo record


def port(text: str) -> int:
    """A TCP port, for argparse: a bad one ends the command at the parser, in one line."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return value


def add_commands(commands: Any) -> None:
    """Register the proxy's subcommands on the CLI's subparsers."""
    proxy = commands.add_parser("proxy", help="run the local model-API proxy that pages "
                                "Claude Code, Codex, Pi, Gemini CLI and OpenCode requests")
    _proxy_arguments(proxy)
    proxy.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    proxy.add_argument("--port", type=port, default=DEFAULT_PORT,
                       help=f"port to listen on (default {DEFAULT_PORT})")
    proxy.set_defaults(run=cmd_proxy)

    run = commands.add_parser("run", help="run one agent command through a proxy on a free "
                              "port, e.g. context-paging run -- claude")
    _proxy_arguments(run)
    run.add_argument("child", nargs=argparse.REMAINDER, metavar="-- COMMAND ...",
                     help="the agent and its arguments, after --")
    run.set_defaults(run=cmd_run)

    view = commands.add_parser("view", help="open the proxy's live view in the browser (prints "
                               "its URL, token included)")
    view.add_argument("--host", default="127.0.0.1", help="the proxy's address")
    view.add_argument("--port", type=port, default=DEFAULT_PORT,
                      help=f"the proxy's port (default {DEFAULT_PORT})")
    view.add_argument("--no-browser", action="store_true", help="only print the URL")
    view.set_defaults(run=cmd_view)

    doctor = commands.add_parser("doctor", help="check the proxy is up, the agents point at it "
                                 "and requests are flowing")
    doctor.add_argument("--port", type=port, default=DEFAULT_PORT,
                        help=f"the port the proxy should be on (default {DEFAULT_PORT})")
    doctor.set_defaults(run=cmd_doctor)

    install = commands.add_parser("install-proxy", help="print (or --write) the settings that "
                                  "point an agent at the proxy, and optionally a user service")
    install_arguments(install)
    install.set_defaults(run=cmd_install)

    uninstall = commands.add_parser("uninstall-proxy", help="take back what install-proxy "
                                    "--write changed: each file's original, or only its keys "
                                    "when the file changed since")
    uninstall_arguments(uninstall)
    uninstall.set_defaults(run=cmd_uninstall)


def _proxy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--upstream-anthropic", default=DEFAULT_ANTHROPIC, metavar="URL",
                        help=f"where Anthropic requests go (default {DEFAULT_ANTHROPIC})")
    parser.add_argument("--upstream-openai", default=DEFAULT_OPENAI, metavar="URL",
                        help=f"where OpenAI requests go (default {DEFAULT_OPENAI})")
    parser.add_argument("--upstream-gemini", default=DEFAULT_GEMINI, metavar="URL",
                        help=f"where Gemini requests go (default {DEFAULT_GEMINI})")


def make_app(settings: Settings, args: argparse.Namespace) -> tuple[Proxy, Any]:
    """The proxy over this process's History (the ledger and select_context pipeline)."""
    from context_paging.index.home.proxied import ProxyLog
    from context_paging.server.histories import make_history
    from context_paging.server.proxy.app import Proxy, Upstreams
    from context_paging.server.proxy.inband import InBand
    from context_paging.server.proxy.view import View

    history = make_history(settings)
    history.context  # noqa: B018  # load the tokenizer now, not during the first request
    upstreams = Upstreams(args.upstream_anthropic, args.upstream_openai,
                          getattr(args, "upstream_gemini", DEFAULT_GEMINI))
    recovery = InBand(history, settings.home, settings.get("proxy", "recovery_tools"),
                      settings.get("proxy", "recovery_rounds"))
    app = Proxy(history.select_context, upstreams, ProxyLog(settings.home),
                idle=history.idle, paging=settings.get("paging", "enabled"),
                max_body=settings.get("paging", "max_request_bytes"),
                recovery=recovery)
    # The live view reads the ledger with a History of its own, as another process would.
    app.view = View(settings.home, lambda: make_history(settings))
    return app, history


def view_url(home: Path, host: str, port: int) -> str:
    """The live view's whole URL, its token included (docs/live-view.md)."""
    from context_paging.index.home.proxied import view_token
    from context_paging.server.endpoints import VIEW_PREFIX

    shown = "127.0.0.1" if host in ("", "0.0.0.0", "::") else host
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}{VIEW_PREFIX}?token={view_token(home)}"


class _Quiet(logging.Filter):
    """uvicorn warns about every WebSocket upgrade when no WebSocket library is installed; the
    proxy answers those itself (server/proxy/app.py), so the warning would only reach the agent's
    terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not (text.startswith("Unsupported upgrade request")
                    or text.startswith("No supported WebSocket library"))


def _server(app: Proxy, sock: socket.socket, host: str = "127.0.0.1",
            header_timeout: float | None = None, body_idle: float | None = None):
    import uvicorn
    from context_paging.server.proxy import connections, guard

    header_timeout = connections.HEADER_TIMEOUT if header_timeout is None else header_timeout
    body_idle = connections.BODY_IDLE_TIMEOUT if body_idle is None else body_idle
    quiet = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _Quiet) for f in quiet.filters):
        quiet.addFilter(_Quiet())
    connections.quiet_upstream_breaks()
    # Our own logging (stderr); no Server/Date headers added to the provider's reply. Every
    # request passes the guard first (server/proxy/guard.py); connections have a header deadline, an
    # idle timeout and a limit (server/proxy/connections.py).
    config = uvicorn.Config(guard.Guard(app, [host]), lifespan="on", log_config=None,
                            access_log=False, server_header=False, date_header=False,
                            log_level="warning", timeout_graceful_shutdown=5,
                            http=connections.deadline_protocol(header_timeout, body_idle),
                            timeout_keep_alive=connections.KEEP_ALIVE_TIMEOUT,
                            limit_concurrency=connections.CONCURRENCY_LIMIT,
                            backlog=connections.BACKLOG)
    return uvicorn.Server(config)


def listen(host: str, port: int, ready: bool = True) -> socket.socket:
    """A socket bound to ``host:port``; listening at once, or (``ready=False``) only after
    :func:`open_for_requests`, so nothing connects before the proxy can answer."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this: without it a reply written in pieces waits for the
    # client's delayed ACK (about 40 ms a request on Linux loopback, measured).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    if ready:
        open_for_requests(sock)
    return sock


def open_for_requests(sock: socket.socket) -> None:
    from context_paging.server.proxy.connections import BACKLOG

    sock.listen(BACKLOG)


def cmd_proxy(args: argparse.Namespace, settings: Settings) -> int:
    try:  # bound first, so a port in use is reported before the seconds of loading
        sock = listen(args.host, args.port, ready=False)
    except OSError as exc:
        print(f"context-paging: cannot listen on {args.host}:{args.port} ({exc.strerror}); "
              "is a proxy already running? Pick another --port", file=sys.stderr)
        return 2
    app, history = make_app(settings, args)
    server = _server(app, sock, args.host)
    heap.settle()  # everything the proxy runs on is loaded (server/heap.py)
    open_for_requests(sock)  # only now: until here a connection is refused, not left waiting
    print(f"context-paging proxy on http://{args.host}:{args.port} → Anthropic "
          f"{args.upstream_anthropic}, OpenAI {args.upstream_openai}, Gemini "
          f"{args.upstream_gemini} (Ctrl-C stops)\n"
          f"context-paging: live view at {view_url(settings.home, args.host, args.port)}",
          file=sys.stderr)
    try:
        server.run(sockets=[sock])
    finally:
        app.view.close()
        history.close()
        sock.close()
    return 0


def cmd_view(args: argparse.Namespace, settings: Settings) -> int:
    """Open the live view in the browser; print its URL where there is none."""
    url = view_url(settings.home, args.host, args.port)
    print(url)
    if not args.no_browser and _has_display():
        import webbrowser

        try:
            webbrowser.open(url)
        except Exception as exc:  # noqa: BLE001  # no browser: the printed URL is the answer
            print(f"context-paging: could not open a browser ({exc})", file=sys.stderr)
    return 0


def _has_display() -> bool:
    return sys.platform in ("darwin", "win32") or bool(
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def child_environment(program: str, url: str, environ: dict[str, str],
                      scratch: Path | None = None) -> tuple[dict, list]:
    """Environment and extra arguments that send one agent's requests to ``url``; ``scratch``
    is an empty private directory that lives as long as the child (Pi's is made there)."""
    env = dict(environ)
    extra: list[str] = []
    name = Path(program).name
    if name == "codex":
        # OPENAI_BASE_URL is gone from Codex; the top-level openai_base_url reroutes the
        # built-in provider and keeps its login (docs/agents.md).
        extra = ["-c", f'openai_base_url="{url}/v1"']
    elif name == "pi" and scratch is not None:  # Pi reads base URLs from models.json only
        env["PI_CODING_AGENT_DIR"] = str(agents.pi_run_directory(url, environ, scratch))
    elif name == "gemini":
        env[agents.GEMINI_BASE_URL] = url  # read before its .env files, which do not override
    elif name == "opencode":
        # OpenCode merges OPENCODE_CONFIG_CONTENT over its config files: the providers re-pointed
        # and compaction off for this run, the user's files unchanged
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(agents.opencode_patch(url, mcp=False))
    else:
        env["ANTHROPIC_BASE_URL"] = url
        env["OPENAI_BASE_URL"] = f"{url}/v1"
        if name == "claude":
            env["DISABLE_AUTO_COMPACT"] = "1"  # the proxy pages instead
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
    heap.settle()  # everything the proxy runs on is loaded (server/heap.py)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()  # the socket already listens: the child can connect at once
    scratch = tempfile.TemporaryDirectory(prefix="context-paging-run-")
    try:
        env, extra = child_environment(child[0], url, dict(os.environ), Path(scratch.name))
        print(f"context-paging: {child[0]} through the proxy at {url}; live view at "
              f"{view_url(settings.home, '127.0.0.1', sock.getsockname()[1])}",
              file=sys.stderr)
        return subprocess.call([child[0], *extra, *child[1:]], env=env,
                               umask=-1 if private.user_umask is None else private.user_umask)
    except FileNotFoundError:
        print(f"context-paging: command not found: {child[0]}", file=sys.stderr)
        return 127
    except OSError as exc:
        print(f"context-paging: cannot set {child[0]} up: {exc}", file=sys.stderr)
        return 2
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        app.view.close()
        history.close()
        sock.close()
        scratch.cleanup()


# --- install-proxy and doctor (what they change and check: server/setup/agents.py) -------------


def install_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", choices=CLIENTS,
                        help="the agent to point at the proxy (needed unless --service alone)")
    parser.add_argument("--port", type=port, default=DEFAULT_PORT,
                        help=f"the proxy's port (default {DEFAULT_PORT})")
    parser.add_argument("--service", action="store_true",
                        help="also a user service that starts the proxy at log-in (a systemd "
                        "user unit on Linux, a launchd agent on macOS)")
    parser.add_argument("--statusline", action="store_true",
                        help="with --client claude-code: also Claude Code's status line "
                        "(context-paging statusline: the window, savings, cache reads)")
    parser.add_argument("--write", action="store_true",
                        help="apply the changes (the original of each file is kept, for "
                        "uninstall-proxy)")


def uninstall_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--client", choices=CLIENTS,
                        help="the agent whose install-proxy changes to take back")
    parser.add_argument("--service", action="store_true",
                        help="also remove the user service install-proxy --service wrote")


def _changes(args: argparse.Namespace, home: Path) -> list[agents.Change]:
    server_home = getattr(args, "home", None)
    statusline = getattr(args, "statusline", False)
    if statusline and args.client != "claude-code":
        raise ValueError("--statusline is for --client claude-code (Claude Code's status bar)")
    changes = agents.planned_changes(args.client, args.port, home, server_home, statusline) \
        if args.client else []
    if args.service:
        path = service.service_file(home)
        words = service.proxy_command(args.port, server_home, dict(os.environ))
        changes.append(agents.Change(path, service.service_text(words, home),
                                     "starts the proxy at log-in", []))  # the file is ours
    return changes


def cmd_install(args: argparse.Namespace, settings: Settings) -> int:
    if not (args.client or args.service):
        print("context-paging: install-proxy needs --client (and/or --service)", file=sys.stderr)
        return 2
    home = agents.user_home()
    try:
        changes = _changes(args, home)
    except (clients.InstallError, ValueError) as exc:
        print(f"context-paging: {exc}", file=sys.stderr)
        return 2
    for change in changes:
        if change.warning:
            print(f"context-paging: warning: {change.warning}", file=sys.stderr)
        if not args.write:
            print(f"# {change.path}: {change.what}\n{change.text}")
            continue
        try:
            written = undo.write(change.path, change.text, OWNER, change.keys)
        except (OSError, ValueError) as exc:  # ValueError: a damaged undo record
            print(f"context-paging: {change.path}: {exc}", file=sys.stderr)
            return 2
        print(f"{change.path}: {change.what}" if written else
              f"{change.path}: already set up; nothing changed.")
    if not args.write:
        print("# Rerun with --write to apply; uninstall-proxy takes it back.", file=sys.stderr)
    elif args.client:
        undo_line = f"context-paging uninstall-proxy --client {args.client}"
        print(f"# To undo: {undo_line}{' --service' if args.service else ''}", file=sys.stderr)
    if args.service:
        print(f"# Enable the service with: {service.enable_hint(service.service_file(home))}",
              file=sys.stderr)
    else:
        print(f"# Start the proxy with: context-paging proxy --port {args.port}",
              file=sys.stderr)
    return 0


def cmd_uninstall(args: argparse.Namespace, settings: Settings) -> int:
    if not (args.client or args.service):
        print("context-paging: uninstall-proxy needs --client (and/or --service)",
              file=sys.stderr)
        return 2
    home = agents.user_home()
    files = agents.agent_files(args.client, home) if args.client else []
    if args.service:
        files.append((service.service_file(home), []))  # the file is ours
        print(f"# First stop the service: {service.disable_hint(service.service_file(home))}",
              file=sys.stderr)
    status = 0
    for path, keys in files:
        try:
            print(undo.undo(path, OWNER, keys))
        except (OSError, ValueError) as exc:
            print(f"context-paging: {path}: {exc}; left as it is", file=sys.stderr)
            status = 2
    return status


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    from context_paging.server.setup import agents

    ok, text = agents.doctor(args.port, settings.home, agents.user_home(), dict(os.environ))
    print(text)
    return 0 if ok else 1
