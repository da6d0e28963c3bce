"""Who may talk to the proxy: this machine's agents, never a web page (docs/security.md).

A page the user opens can send a "simple" cross-origin POST to a loopback port, and a
DNS-rebinding page can send one under a name of its own; either would write the page's text into
the ledger the recovery tools read. Browsers always say where such a request comes from, so the
wrapper refuses, with 403 and one log line, before the body is read or anything stored:

- a ``Host`` that is neither a loopback name (``localhost``, ``127.0.0.0/8``, ``[::1]``) nor the
  host the proxy was told to listen on (a rebinding page's request carries its own name; with
  ``--host 0.0.0.0`` any IP address passes, since rebinding needs a name);
- an ``Origin`` header (agents' HTTP clients send none; every browser sends one on a
  cross-origin POST and on every form submission);
- ``Sec-Fetch-Site`` (only browsers send it), or ``Sec-Fetch-Mode`` other than ``cors`` (Node's
  and Bun's ``fetch`` send ``Sec-Fetch-Mode: cors`` on every request, browsers a mode of their
  own with ``Sec-Fetch-Site`` beside it).

One exception, the live view (server/proxy/view.py): a GET or HEAD under ``/context-paging/``
from a browser passes when it is a person's own navigation (``Sec-Fetch-Site: none``) or the
page's own request (``same-origin``, with no ``Origin`` or the proxy's own); ``same-site`` (another
port of this machine) and ``cross-site`` are refused there too, and the view asks for its token.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable, Sequence

from context_paging.server.endpoints import VIEW_PREFIX
from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("context_paging")

_WILDCARDS = frozenset({"", "0.0.0.0", "::"})
_LOOKED_AT = frozenset({b"host", b"origin", b"sec-fetch-site", b"sec-fetch-mode"})


def _hostname(host: str) -> str:
    """The name in a ``Host`` value, without its port or IPv6 brackets, lower-case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    name, sep, port = host.rpartition(":")
    return name if sep and port.isdigit() and ":" not in name else host


def is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


_OWN_PAGE = frozenset({"none", "same-origin"})


def _viewed(seen: dict[bytes, str], method: str, path: str) -> bool:
    """A browser's GET of the live view from the page itself or a person's navigation."""
    if method not in ("GET", "HEAD") or not (path.startswith(VIEW_PREFIX)
                                             or path == VIEW_PREFIX.rstrip("/")):
        return False
    site = seen.get(b"sec-fetch-site", "").strip().lower()
    if site not in _OWN_PAGE:
        return False
    origin = seen.get(b"origin")
    return origin is None or origin.strip().lower() == f"http://{seen.get(b'host', '')}".lower()


def refusal(headers: Sequence[tuple[bytes, bytes]], hosts: frozenset[str],
            any_address: bool = False, method: str = "", path: str = "") -> str | None:
    """Why a request with these headers must be refused, or None when it may pass.
    ``any_address``: the proxy listens on every interface, so a ``Host`` that is an IP address
    passes too (DNS rebinding needs a name). ``method`` and ``path``: the live view's GETs
    from its own page pass the browser rules (never the ``Host`` rule)."""
    seen: dict[bytes, str] = {}
    for key, value in headers:
        key = key.lower()
        if key in _LOOKED_AT and key not in seen:
            seen[key] = value.decode("latin-1")
    if path and _viewed(seen, method, path):
        seen = {b"host": seen[b"host"]} if b"host" in seen else {}
    if b"origin" in seen:
        return f"it comes from a web page (Origin {seen[b'origin'][:100]!r})"
    if b"sec-fetch-site" in seen:
        return f"it comes from a browser (Sec-Fetch-Site {seen[b'sec-fetch-site'][:40]!r})"
    mode = seen.get(b"sec-fetch-mode")
    if mode is not None and mode.strip().lower() != "cors":
        return f"it comes from a browser (Sec-Fetch-Mode {mode[:40]!r})"
    host = seen.get(b"host")
    if host is not None:
        name = _hostname(host)
        if not (is_loopback(name) or name in hosts or (any_address and _address(name))):
            return f"its Host {host[:100]!r} is not this machine"
    return None


class Guard:
    """The ASGI app in front of the proxy: refused requests never reach it."""

    def __init__(self, app: ASGIApp, hosts: Iterable[str] = ()) -> None:
        self.app = app
        hosts = list(hosts)
        self.hosts = frozenset(_hostname(h) for h in hosts if h not in _WILDCARDS)
        self.any_address = any(h in _WILDCARDS for h in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            reason = refusal(scope.get("headers") or (), self.hosts, self.any_address,
                             scope.get("method", ""), scope.get("path", ""))
            if reason is not None:
                log.warning("proxy: refused %s %s: %s", scope.get("method", "WEBSOCKET"),
                            scope.get("path", "")[:100], reason)
                await _forbidden(scope, send, reason)
                return
        await self.app(scope, receive, send)


async def _forbidden(scope: Scope, send: Send, reason: str) -> None:
    if scope["type"] == "websocket":  # closed before the handshake: the server answers 403
        await send({"type": "websocket.close", "code": 1008})
        return
    body = json.dumps({"type": "error", "error": {
        "type": "permission_error",
        "message": f"context-paging proxy refused this request: {reason}"}}).encode()
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
